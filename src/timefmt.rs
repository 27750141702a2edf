//! Time formatting shared by reports, messages and annotations.
//!
//! A leaf module: it imports nothing of certgen, so that every module that prints a time can
//! use it without two modules importing each other.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// RFC 3339 in UTC (`2026-06-01T12:00:00Z`).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// Parses RFC 3339.
pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}
