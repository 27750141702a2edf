//! The window arithmetic, exhaustively: boundaries, midnight, DST in a time zone, several
//! windows, the emergency margin and the command line's form.

use std::time::Duration;

use time::OffsetDateTime;
use time::macros::datetime;

use super::{Position, Window, Windows};

fn w(s: &str) -> Window {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ws(all: &[&str]) -> Windows {
    Windows {
        windows: all.iter().map(|s| w(s)).collect(),
        ..Windows::default()
    }
}

fn inside(windows: &Windows, now: OffsetDateTime) -> Option<OffsetDateTime> {
    match windows.position(now) {
        Position::Inside { end } => Some(end),
        _ => None,
    }
}

fn next(windows: &Windows, now: OffsetDateTime) -> Option<OffsetDateTime> {
    match windows.position(now) {
        Position::Outside { next } => next.map(|(s, _)| s),
        other => panic!("{now}: expected outside, got {other:?}"),
    }
}

#[test]
fn no_window_means_every_time_is_inside() {
    assert_eq!(
        Windows::default().position(datetime!(2026-11-28 13:00 UTC)),
        Position::Unbounded
    );
}

#[test]
fn the_start_is_inside_and_the_end_is_not() {
    let d = ws(&["0 2 * * *;4h"]);
    assert_eq!(
        next(&d, datetime!(2026-11-28 01:59:59 UTC)),
        Some(datetime!(2026-11-28 02:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2026-11-28 01:59:59.999999999 UTC)),
        Some(datetime!(2026-11-28 02:00 UTC))
    );
    assert_eq!(
        inside(&d, datetime!(2026-11-28 02:00 UTC)),
        Some(datetime!(2026-11-28 06:00 UTC))
    );
    assert_eq!(
        inside(&d, datetime!(2026-11-28 05:59:59.999999999 UTC)),
        Some(datetime!(2026-11-28 06:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2026-11-28 06:00 UTC)),
        Some(datetime!(2026-11-29 02:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2026-11-28 06:00:00.000000001 UTC)),
        Some(datetime!(2026-11-29 02:00 UTC))
    );
}

#[test]
fn a_window_spans_midnight() {
    let d = ws(&["0 22 * * *;4h"]);
    assert_eq!(
        inside(&d, datetime!(2026-11-28 23:30 UTC)),
        Some(datetime!(2026-11-29 02:00 UTC))
    );
    assert_eq!(
        inside(&d, datetime!(2026-11-29 00:00 UTC)),
        Some(datetime!(2026-11-29 02:00 UTC))
    );
    assert_eq!(
        inside(&d, datetime!(2026-11-29 01:59:59 UTC)),
        Some(datetime!(2026-11-29 02:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2026-11-29 02:00 UTC)),
        Some(datetime!(2026-11-29 22:00 UTC))
    );
    // Weekly, Friday 23:00 for 3 hours: Saturday 01:00 is still Friday's window.
    let fri = ws(&["0 23 * * 5;3h"]);
    assert_eq!(
        inside(&fri, datetime!(2026-11-28 01:00 UTC)), // a Saturday
        Some(datetime!(2026-11-28 02:00 UTC))
    );
    assert_eq!(
        next(&fri, datetime!(2026-11-28 02:00 UTC)),
        Some(datetime!(2026-12-04 23:00 UTC))
    );
}

#[test]
fn a_window_spans_the_end_of_a_month_and_a_year() {
    let d = ws(&["0 23 31 12 *;2h"]);
    assert_eq!(
        inside(&d, datetime!(2027-01-01 00:30 UTC)),
        Some(datetime!(2027-01-01 01:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2027-01-01 01:00 UTC)),
        Some(datetime!(2027-12-31 23:00 UTC))
    );
}

#[test]
fn the_schedule_is_read_in_its_time_zone() {
    // 02:00 in Berlin is 01:00 UTC in winter (CET), 00:00 UTC in summer (CEST).
    let d = ws(&["0 2 * * *;1h;Europe/Berlin"]);
    assert_eq!(
        next(&d, datetime!(2026-11-28 12:00 UTC)),
        Some(datetime!(2026-11-29 01:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2026-07-01 12:00 UTC)),
        Some(datetime!(2026-07-02 00:00 UTC))
    );
    let ny = ws(&["0 2 * * *;1h;America/New_York"]);
    assert_eq!(
        next(&ny, datetime!(2026-11-28 12:00 UTC)),
        Some(datetime!(2026-11-29 07:00 UTC))
    );
}

#[test]
fn a_start_in_the_spring_forward_gap_moves_to_the_end_of_the_gap() {
    // Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:30 does not
    // exist that day. vixie-cron's rule: a fixed time in the gap runs once, right after it.
    let d = ws(&["30 2 * * *;1h;Europe/Berlin"]);
    assert_eq!(
        next(&d, datetime!(2026-03-28 12:00 UTC)),
        Some(datetime!(2026-03-29 01:00 UTC))
    );
    // The window lasts one real hour from there.
    assert_eq!(
        inside(&d, datetime!(2026-03-29 01:59 UTC)),
        Some(datetime!(2026-03-29 02:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2026-03-29 02:00 UTC)),
        Some(datetime!(2026-03-30 00:30 UTC))
    );
    // The day before, 02:30 CET is 01:30 UTC.
    assert_eq!(
        next(&d, datetime!(2026-03-27 12:00 UTC)),
        Some(datetime!(2026-03-28 01:30 UTC))
    );
}

#[test]
fn a_start_in_the_repeated_hour_happens_once() {
    // Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens at 00:30
    // UTC (CEST) and again at 01:30 UTC (CET). The window opens once, at the first.
    let d = ws(&["30 2 * * *;1h;Europe/Berlin"]);
    assert_eq!(
        next(&d, datetime!(2026-10-24 12:00 UTC)),
        Some(datetime!(2026-10-25 00:30 UTC))
    );
    assert_eq!(
        inside(&d, datetime!(2026-10-25 01:00 UTC)),
        Some(datetime!(2026-10-25 01:30 UTC))
    );
    // The second 02:30 opens nothing: the next window is the next day's.
    assert_eq!(
        next(&d, datetime!(2026-10-25 01:30 UTC)),
        Some(datetime!(2026-10-26 01:30 UTC))
    );
}

#[test]
fn the_duration_is_elapsed_time_across_a_dst_change() {
    // 01:00 CEST on 2026-10-25 is 23:00 UTC the day before; 4 hours later is 03:00 UTC,
    // 04:00 CET by the wall clock (which shows 5 hours passed).
    let d = ws(&["0 1 * * *;4h;Europe/Berlin"]);
    assert_eq!(
        inside(&d, datetime!(2026-10-25 02:59 UTC)),
        Some(datetime!(2026-10-25 03:00 UTC))
    );
    assert_eq!(
        next(&d, datetime!(2026-10-25 03:00 UTC)),
        Some(datetime!(2026-10-26 00:00 UTC))
    );
    // And in spring: 01:00 CET on 2026-03-29 is 00:00 UTC; until 04:00 UTC (06:00 CEST).
    assert_eq!(
        inside(&d, datetime!(2026-03-29 03:59 UTC)),
        Some(datetime!(2026-03-29 04:00 UTC))
    );
}

#[test]
fn several_windows_the_earliest_next_and_the_latest_end() {
    let d = ws(&["0 2 * * 2;4h;UTC", "0 1 * * 6;2h;UTC"]);
    // Saturday 2026-11-28 00:00: Saturday's opens first.
    assert_eq!(
        next(&d, datetime!(2026-11-28 00:00 UTC)),
        Some(datetime!(2026-11-28 01:00 UTC))
    );
    // Saturday 03:00: Tuesday's is next.
    assert_eq!(
        next(&d, datetime!(2026-11-28 03:00 UTC)),
        Some(datetime!(2026-12-01 02:00 UTC))
    );
    // Overlapping windows: inside until the later end.
    let o = ws(&["0 2 * * *;2h", "0 3 * * *;2h"]);
    assert_eq!(
        inside(&o, datetime!(2026-11-28 03:30 UTC)),
        Some(datetime!(2026-11-28 05:00 UTC))
    );
}

#[test]
fn a_window_longer_than_its_period_is_always_open() {
    let d = ws(&["0 * * * *;90m"]);
    for m in [0, 1, 59, 60, 61, 119] {
        let now = datetime!(2026-11-28 10:00 UTC) + time::Duration::minutes(m);
        assert!(inside(&d, now).is_some(), "{now}");
    }
}

#[test]
fn can_wait_needs_the_margin_strictly_before_the_expiry() {
    let d = Windows {
        margin: Duration::from_secs(3600),
        ..ws(&["0 2 * * *;4h"])
    };
    let start = datetime!(2026-11-29 02:00 UTC);
    assert!(d.can_wait(Some(start), datetime!(2026-11-29 03:00:01 UTC)));
    assert!(!d.can_wait(Some(start), datetime!(2026-11-29 03:00 UTC)));
    assert!(!d.can_wait(Some(start), datetime!(2026-11-29 01:00 UTC)));
    assert!(!d.can_wait(None, datetime!(2099-01-01 00:00 UTC)));
}

#[test]
fn the_command_line_form_and_its_errors() {
    let x = w(" 0 2 * * 2 ; 4h ; Europe/Berlin ");
    assert_eq!(x.to_string(), "0 2 * * 2;4h;Europe/Berlin");
    assert_eq!(w("@daily;30m").to_string(), "@daily;30m;UTC");
    assert_eq!(w("0 2 * * *;4h;").to_string(), "0 2 * * *;4h;UTC");
    let err = |s: &str| s.parse::<Window>().unwrap_err().to_string();
    assert!(err("0 2 * * *").contains("expected CRON;DURATION[;TZ]"));
    assert!(err("0 2 * * *;4h;UTC;x").contains("three parts at most"));
    assert!(err("0 2 * *;4h").contains("cron"), "{}", err("0 2 * *;4h"));
    assert!(
        err("0 0 2 * * *;4h").contains("cron"),
        "seconds are refused"
    );
    assert!(err("0 2 * * *;0s").contains("longer than 0s"));
    assert!(err("0 2 * * *;soon").contains("duration"));
    assert!(err("0 2 * * *;4h;Mars/Olympus").contains("unknown time zone"));
    assert!(err("0 0 30 2 *;4h").contains("never matches"));
}
