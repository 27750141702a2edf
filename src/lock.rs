//! The run lock: one mutating run at a time.
//!
//! In a cluster, a Lease ([`crate::k8s::lease`]); locally, an exclusive `flock` on
//! `DIR/.certgen.lock`. A lock does not fence: every write still carries its own version
//! precondition, and runs without a lock (an identity without Lease verbs, the simulation's
//! concurrent runs) rely on that alone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use crate::k8s::lease::{self, Acquired, LeaseLock};
use crate::store::StoreError;

/// What the run lock is.
pub enum Target {
    Lease {
        client: kube::Client,
        namespace: String,
        name: String,
    },
    File(PathBuf),
    /// No lock: concurrent runs rely on their fenced writes alone.
    None,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another certgen run holds the lock {what} (holder {holder}); gave up waiting at the deadline"
    )]
    Contended { what: String, holder: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A held lock; released by [`Held::release`] (or, for a crash, by expiry).
pub enum Held {
    Lease(LeaseLock),
    File {
        _file: std::fs::File,
        path: PathBuf,
    },
    /// No lock was taken: writes are fenced by their preconditions alone (no lock asked for,
    /// or the identity may not use Leases).
    Unlocked,
    /// The identity may not use Leases: no lock, and `note` says so for the report.
    Refused {
        note: String,
    },
}

impl Held {
    /// Whether the lock may no longer be ours (see [`LeaseLock::lost`]).
    pub fn lost(&self) -> bool {
        match self {
            Self::Lease(lease) => lease.lost(),
            Self::File { .. } | Self::Unlocked | Self::Refused { .. } => false,
        }
    }

    /// Releases the lock.
    pub async fn release(self) {
        match self {
            Self::Lease(lease) => lease.release().await,
            Self::File { path, .. } => tracing::debug!("released lock {}", path.display()),
            Self::Unlocked | Self::Refused { .. } => {}
        }
    }

    /// Why no lock is held, when the run was refused one (a feature skipped, for the report).
    pub fn refused(&self) -> Option<&str> {
        match self {
            Self::Refused { note } => Some(note),
            _ => None,
        }
    }
}

/// Takes the lock `target`, waiting until `deadline` while another run holds it.
pub async fn take(target: &Target, deadline: Instant) -> Result<Held, LockError> {
    match target {
        Target::Lease {
            client,
            namespace,
            name,
        } => match lease::acquire(client, namespace, name, deadline).await? {
            Acquired::Held(lease) => Ok(Held::Lease(lease)),
            Acquired::Busy { what, holder } => Err(LockError::Contended { what, holder }),
            Acquired::Unlocked(note) => Ok(Held::Refused { note }),
        },
        Target::File(dir) => acquire_file(dir, deadline).await,
        Target::None => Ok(Held::Unlocked),
    }
}

/// Takes an exclusive lock on `dir/.certgen.lock`, waiting until `deadline`. The lock file is
/// created 0600 whatever the umask, never through a link, and must be this user's: `DIR` is
/// checked as every local read checks it ([`crate::store::open_root`]).
pub async fn acquire_file(dir: &Path, deadline: Instant) -> Result<Held, LockError> {
    use std::os::fd::AsFd;
    let root = crate::store::open_root(dir, true)
        .map_err(|(path, r)| LockError::Store(crate::store::refusal(&path, "create directory", r)))?
        .expect("created");
    let path = dir.join(crate::store::LOCK_FILE);
    let file = crate::store::open_lock_file(root.as_fd(), crate::store::LOCK_FILE, 0o600).map_err(
        |r| {
            LockError::Store(crate::store::refusal(
                &path.display().to_string(),
                "open the lock file",
                r,
            ))
        },
    )?;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Held::File { _file: file, path }),
            Err(std::fs::TryLockError::WouldBlock) => {
                if Instant::now() >= deadline {
                    return Err(LockError::Contended {
                        what: path.display().to_string(),
                        holder: "another process".into(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(LockError::Store(StoreError::Local {
                    path: path.display().to_string(),
                    message: format!("cannot lock: {e}"),
                }));
            }
        }
    }
}
