//! Renewal windows (issue 45): when a routine rotation may start, in the shape of cert-manager
//! 1.21's `spec.renewal.windows` (a cron schedule, a duration, an IANA time zone).
//!
//! A window opens at each time the schedule matches, in its time zone, and stays open for its
//! duration: `[start, start + duration)`. A time is inside when any window holds it. The
//! schedule is parsed and walked by `croner` (vixie-cron's rules, including its DST rules: a
//! start in a spring-forward gap moves to the first instant after the gap, a start in a repeated
//! hour happens once, at its first occurrence); the time zone comes from jiff's bundled database.
//!
//! Pure: nothing here reads the clock; `now` is always a parameter (the store's clock). It
//! must not know about certificates or plans: the planner asks it two questions, is `now`
//! inside a window, and when does the next one open.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use time::OffsetDateTime;

/// The margin an expiry must clear beyond the next window's start for a routine rotation to
/// wait for it, when none is configured: a day, enough for a staged rotation's trust gate,
/// its rollouts and a failed run's retry by the next CronJob run.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(24 * 3600);

/// One window: a schedule, how long each opening lasts, and the time zone the schedule is read in.
#[derive(Clone)]
pub struct Window {
    cron: croner::Cron,
    /// The schedule as written.
    schedule: String,
    duration: Duration,
    tz: jiff::tz::TimeZone,
    /// The time zone's name as written (`UTC` when none was).
    tz_name: String,
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string())
    }
}

impl PartialEq for Window {
    fn eq(&self, other: &Self) -> bool {
        self.schedule == other.schedule
            && self.duration == other.duration
            && self.tz_name == other.tz_name
    }
}

impl Eq for Window {}

impl fmt::Display for Window {
    /// The command line's form, `CRON;DURATION;TZ`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{};{};{}",
            self.schedule,
            crate::timefmt::HumanDuration(self.duration),
            self.tz_name
        )
    }
}

/// A window that cannot be used: the message names the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WindowError(pub String);

impl Window {
    /// A window from its three parts: a five-field cron schedule (or a nickname such as
    /// `@daily`), a duration longer than zero, and an IANA time zone (`None`: UTC).
    pub fn new(schedule: &str, duration: Duration, tz: Option<&str>) -> Result<Self, WindowError> {
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build();
        let cron = parser
            .parse(schedule)
            .map_err(|e| WindowError(format!("cron {schedule:?}: {e}")))?;
        if duration.is_zero() {
            return Err(WindowError("windowDuration must be longer than 0s".into()));
        }
        let tz_name = tz.unwrap_or("UTC").to_string();
        let zone = jiff::tz::db().get(&tz_name).map_err(|_| {
            WindowError(format!(
                "unknown time zone {tz_name:?} (an IANA name such as Europe/Berlin)"
            ))
        })?;
        let w = Self {
            cron,
            schedule: schedule.trim().to_string(),
            duration,
            tz: zone,
            tz_name,
        };
        // A schedule that never matches (`0 0 30 2 *`) would hold every routine rotation until
        // it is an emergency: refused here, as cert-manager's webhook refuses it.
        if w.next_start_after(OffsetDateTime::UNIX_EPOCH).is_none() {
            return Err(WindowError(format!(
                "cron {schedule:?} never matches a date"
            )));
        }
        Ok(w)
    }

    /// Each opening's length.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The first start strictly after `t`, if the schedule has one.
    fn next_start_after(&self, t: OffsetDateTime) -> Option<OffsetDateTime> {
        let zoned = to_jiff(t)?.to_zoned(self.tz.clone());
        let next = self.cron.find_next_occurrence(&zoned, false).ok()?;
        from_jiff(next.timestamp())
    }

    /// The opening that holds `now`, as `(start, end)`, if one does: the earliest start in
    /// `(now - duration, now]`.
    pub fn open_at(&self, now: OffsetDateTime) -> Option<(OffsetDateTime, OffsetDateTime)> {
        let span = time::Duration::try_from(self.duration).ok()?;
        let from = now.checked_sub(span)?;
        let start = self.next_start_after(from)?;
        (start <= now).then(|| (start, start.saturating_add(span)))
    }

    /// The next opening that starts after `now`, as `(start, end)`.
    pub fn next_after(&self, now: OffsetDateTime) -> Option<(OffsetDateTime, OffsetDateTime)> {
        let span = time::Duration::try_from(self.duration).ok()?;
        let start = self.next_start_after(now)?;
        Some((start, start.saturating_add(span)))
    }
}

impl FromStr for Window {
    type Err = WindowError;

    /// `CRON;DURATION[;TZ]`, the command line's form: the cron's own fields are separated by
    /// spaces, so `;` separates the parts (`0 2 * * 2;4h;Europe/Berlin`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split(';');
        let schedule = parts.next().unwrap_or_default();
        let Some(duration) = parts.next() else {
            return Err(WindowError(format!(
                "{s:?}: expected CRON;DURATION[;TZ], for example \"0 2 * * 2;4h;Europe/Berlin\""
            )));
        };
        let duration = duration
            .trim()
            .parse::<crate::timefmt::HumanDuration>()
            .map_err(|e| WindowError(format!("{s:?}: duration: {e}")))?
            .0;
        let tz = parts.next().map(str::trim).filter(|t| !t.is_empty());
        if parts.next().is_some() {
            return Err(WindowError(format!(
                "{s:?}: expected CRON;DURATION[;TZ] (three parts at most)"
            )));
        }
        Self::new(schedule, duration, tz)
    }
}

/// The renewal windows of a config, and the emergency margin. Empty: every time is inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows {
    pub windows: Vec<Window>,
    /// A routine rotation waits for the next window only if what it renews still has this
    /// long to live after that window opens.
    pub margin: Duration,
}

impl Default for Windows {
    fn default() -> Self {
        Self {
            windows: Vec::new(),
            margin: DEFAULT_MARGIN,
        }
    }
}

/// Where `now` stands against the windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// No window is configured: every time is inside.
    Unbounded,
    /// Inside a window that closes at `end`.
    Inside { end: OffsetDateTime },
    /// Outside every window; the next opens at `next` (until `end`), or never (`None`).
    Outside {
        next: Option<(OffsetDateTime, OffsetDateTime)>,
    },
}

impl Windows {
    /// Whether no window is configured.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Where `now` stands.
    pub fn position(&self, now: OffsetDateTime) -> Position {
        if self.windows.is_empty() {
            return Position::Unbounded;
        }
        if let Some(end) = self
            .windows
            .iter()
            .filter_map(|w| w.open_at(now))
            .map(|(_, end)| end)
            .max()
        {
            return Position::Inside { end };
        }
        Position::Outside {
            next: self.next_after(now),
        }
    }

    /// The next opening of any window that starts after `now` (the earliest).
    pub fn next_after(&self, now: OffsetDateTime) -> Option<(OffsetDateTime, OffsetDateTime)> {
        self.windows.iter().filter_map(|w| w.next_after(now)).min()
    }

    /// Whether something that expires at `not_after` can wait for the next window: it must
    /// still have [`Windows::margin`] to live when that window opens.
    pub fn can_wait(&self, next: Option<OffsetDateTime>, not_after: OffsetDateTime) -> bool {
        let Some(next) = next else { return false };
        let margin = time::Duration::try_from(self.margin).unwrap_or(time::Duration::MAX);
        next.checked_add(margin).is_some_and(|t| t < not_after)
    }
}

fn to_jiff(t: OffsetDateTime) -> Option<jiff::Timestamp> {
    jiff::Timestamp::from_nanosecond(t.unix_timestamp_nanos()).ok()
}

fn from_jiff(t: jiff::Timestamp) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(t.as_nanosecond()).ok()
}

#[cfg(test)]
mod tests;
