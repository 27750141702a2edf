//! Times and durations as people read and write them: RFC 3339 timestamps in reports and
//! annotations, and durations in configuration and flags (`90s`, `15m`, `720h`, `365d`,
//! humantime syntax, shown back in the largest whole unit).
//!
//! A leaf module: it imports nothing of certgen, so that every module that prints a time or
//! parses a duration can use it without two modules importing each other.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// RFC 3339 in UTC (`2026-06-01T12:00:00Z`).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// RFC 3339 in UTC to the second, for people (`2026-06-01T12:00:01Z`): rounded up, so that
/// "after" and "until" stay true of the instant itself.
pub fn at_second(t: OffsetDateTime) -> String {
    let whole = t.replace_nanosecond(0).unwrap_or(t);
    rfc3339(if whole < t {
        // (The last second of year 9999 cannot be rounded up.)
        whole.saturating_add(time::Duration::SECOND)
    } else {
        whole
    })
}

/// Parses RFC 3339.
pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

/// A duration written for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().starts_with('-') {
            return Err(format!(
                "{s:?} is negative; negative durations are not allowed: write 0s or more, like 90s, 15m, 720h or 365d"
            ));
        }
        humantime::parse_duration(s.trim()).map(Self).map_err(|e| {
            format!("{s:?} is not a duration ({e}); write it like 90s, 15m, 720h or 365d")
        })
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        if secs == 0 {
            return f.write_str("0s");
        }
        for (unit, n) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if secs.is_multiple_of(n) {
                return write!(f, "{}{unit}", secs / n);
            }
        }
        write!(f, "{secs}s")
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn people_read_times_to_the_second_rounded_up() {
        let t = parse_rfc3339("2026-11-26T15:18:22.000083615Z").unwrap();
        assert_eq!(at_second(t), "2026-11-26T15:18:23Z");
        let whole = parse_rfc3339("2026-11-26T15:18:22Z").unwrap();
        assert_eq!(at_second(whole), "2026-11-26T15:18:22Z");
    }

    #[test]
    fn durations_round_trip_in_whole_units() {
        for (text, shown) in [
            ("90s", "90s"),
            ("15m", "15m"),
            ("720h", "30d"),
            ("365d", "365d"),
            ("25h", "25h"),
        ] {
            let d: HumanDuration = text.parse().unwrap();
            assert_eq!(d.to_string(), shown);
        }
        assert!("ten days".parse::<HumanDuration>().is_err());
    }
}
