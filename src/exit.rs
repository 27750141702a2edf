//! Exit codes, written once: the table shown in `--help`, the man page and docs/safety.md. The one
//! error type that maps onto them is [`crate::error::Error`]. A leaf module, so that the
//! command line can show the table without importing what the errors are about.

/// Done, including nothing to do.
pub const OK: u8 = 0;
/// A check or a verification failed.
pub const FAILED: u8 = 1;
/// Bad usage, configuration or stored input; nothing was written.
pub const USAGE: u8 = 2;
/// Timed out; the cluster is left in the widest-trust state and a re-run resumes.
pub const TIMEOUT: u8 = 3;
/// Another run holds the lock, or a write lost a race too many times.
pub const CONTENDED: u8 = 4;
/// The Kubernetes API refused or failed, or the store failed after certgen had written.
pub const API: u8 = 5;

/// The exit-code table for `--help` and the man page.
pub const TABLE: &str = "\
Exit status:
  0  done, including nothing to do
  1  a check or verification failed
  2  bad usage, configuration or stored input; nothing was written
  3  timed out; the cluster is left in the widest-trust state and a re-run resumes
  4  another run holds the lock, or a write lost a race too many times
  5  the Kubernetes API refused or failed (the message names the verb, resource and namespace),
     or anything failed after this run had written (never 2 then)";
