//! The store's clock in a cluster: the API server's, read from the `Date` header of its answers.
//!
//! Staged rotation gates compare "when was this written" (the API server's own timestamps) with
//! "now". Both must come from one clock, or a run on a node whose clock runs ahead would open a
//! gate early. The header has one-second resolution and is truncated, so the estimate here is
//! never ahead of the server's clock: a gate may open up to a second late, never early.
//! Owns no IO: the client layer in `lib.rs` feeds it every answer.

use std::sync::Mutex;
use std::time::Instant;

use time::OffsetDateTime;

static LAST: Mutex<Option<(OffsetDateTime, Instant)>> = Mutex::new(None);

/// Parses an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110's IMF-fixdate).
pub fn parse_http_date(value: &str) -> Option<OffsetDateTime> {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::PrimitiveDateTime::parse(value.trim(), format)
        .ok()
        .map(time::PrimitiveDateTime::assume_utc)
}

/// Records the `Date` header of an answer, received now.
pub fn record(value: &str) {
    if let Some(at) = parse_http_date(value) {
        *LAST.lock().unwrap_or_else(|e| e.into_inner()) = Some((at, Instant::now()));
    }
}

/// The API server's clock now, if any answer has been seen: the last `Date` plus the time
/// elapsed since, on this process's monotonic clock.
pub fn now() -> Option<OffsetDateTime> {
    let last = *LAST.lock().unwrap_or_else(|e| e.into_inner());
    last.map(|(at, seen)| {
        let elapsed = time::Duration::try_from(seen.elapsed()).unwrap_or(time::Duration::ZERO);
        at.checked_add(elapsed).unwrap_or(at)
    })
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn http_dates_parse_and_garbage_does_not() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(datetime!(1994-11-06 08:49:37 UTC))
        );
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date(""), None);
    }
}
