//! Durations in configuration: `90s`, `15m`, `720h`, `365d` (humantime syntax), shown back in
//! the largest whole unit.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
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
