//! Local mode's clock: the file system's, as a cluster's is the API server's.
//!
//! Write times in local mode are the file system's (the `..data` link's time, the files'
//! times), so "now" must be on the same clock: [`now`] sets the times of certgen's lock file in
//! `--local DIR` to the file system's current time (`futimens(UTIME_NOW)`, which a network file
//! system answers with the server's time) and reads them back (the file every mutating run
//! creates; `certgen check` creates nothing). A process whose clock is wrong
//! (`faketime`, a container with another clock) then neither takes its own fresh writes for old
//! ones nor issues certificates that are not valid yet. Where that file cannot be touched (no
//! directory yet, a read-only directory, another user's), the kernel's clock is read directly
//! (a system call, not the C library, so a preloaded fake clock does not change it): on a local
//! file system the two are the same clock.
//!
//! A gate must never be shortened by a clock step between two runs: every write also records
//! the boot it happened in and the time since boot ([`stamp`]); a later read in the same boot
//! counts a write as no older than that monotonic clock says ([`no_older_than`]), whatever the
//! wall clock did meanwhile.

use std::os::fd::AsFd;
use std::path::Path;

use time::OffsetDateTime;

use super::beneath;

/// The annotation (in `..data/.certgen-annotations.json`) recording when a version was written
/// on the machine's monotonic clock: `<boot id> <nanoseconds since boot>`.
pub const WRITTEN_BOOT: &str = "certgen.dev/written-boot";

/// Now, on the file system's clock under `root` (see the module's documentation).
pub fn now(root: &Path) -> OffsetDateTime {
    fs_now(root).unwrap_or_else(kernel_now)
}

fn fs_now(root: &Path) -> Option<OffsetDateTime> {
    use rustix::fs::{Mode, OFlags};
    let root = beneath::open_root(root, false).ok()??;
    // The lock file every mutating run creates; never through a link, never created here
    // (`certgen check` creates nothing).
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = rustix::fs::openat(root.as_fd(), super::LOCK_FILE, flags, Mode::empty()).ok()?;
    let stat = rustix::fs::fstat(&file).ok()?;
    if !rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file() {
        return None;
    }
    let times = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
    };
    rustix::fs::futimens(file.as_fd(), &times).ok()?;
    let stat = rustix::fs::fstat(file.as_fd()).ok()?;
    let at = OffsetDateTime::from_unix_timestamp(stat.st_mtime).ok()?;
    Some(at + time::Duration::nanoseconds(stat.st_mtime_nsec as i64))
}

/// The kernel's wall clock, read by a system call.
fn kernel_now() -> OffsetDateTime {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    OffsetDateTime::from_unix_timestamp(t.tv_sec)
        .map(|at| at + time::Duration::nanoseconds(t.tv_nsec))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty() && !id.contains(' ')).then(|| id.to_string())
}

fn since_boot() -> i128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
}

/// The value of [`WRITTEN_BOOT`] for a write made now (`None` without a boot id).
pub fn stamp() -> Option<String> {
    Some(format!("{} {}", boot_id()?, since_boot()))
}

/// The write time to count a gate from, for a version written at `written_at` (the file
/// system's time) with `stamp`: no older than the machine's monotonic clock says it is, when it
/// was written in this boot. A wall clock stepped forward since then would otherwise make it
/// look older, and a gate shorter.
pub fn no_older_than(
    written_at: OffsetDateTime,
    stamp: Option<&String>,
    now: impl FnOnce() -> OffsetDateTime,
) -> OffsetDateTime {
    let Some((boot, at)) = stamp.and_then(|s| s.split_once(' ')) else {
        return written_at;
    };
    let (Some(current), Ok(at)) = (boot_id(), at.parse::<i128>()) else {
        return written_at;
    };
    if current != boot {
        return written_at;
    }
    let elapsed = (since_boot() - at).max(0);
    let elapsed = time::Duration::nanoseconds(elapsed.min(i128::from(i64::MAX)) as i64);
    written_at.max(now() - elapsed)
}
