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
}

impl Held {
    /// Whether the lock may no longer be ours (see [`LeaseLock::lost`]).
    pub fn lost(&self) -> bool {
        match self {
            Self::Lease(lease) => lease.lost(),
            Self::File { .. } | Self::Unlocked => false,
        }
    }

    /// Releases the lock.
    pub async fn release(self) {
        match self {
            Self::Lease(lease) => lease.release().await,
            Self::File { path, .. } => tracing::debug!("released lock {}", path.display()),
            Self::Unlocked => {}
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
            Acquired::Unlocked => Ok(Held::Unlocked),
        },
        Target::File(dir) => acquire_file(dir, deadline).await,
        Target::None => Ok(Held::Unlocked),
    }
}

/// Takes an exclusive lock on `dir/.certgen.lock`, waiting until `deadline`.
pub async fn acquire_file(dir: &Path, deadline: Instant) -> Result<Held, LockError> {
    use std::os::unix::fs::DirBuilderExt;
    let local = |message: String| {
        LockError::Store(StoreError::Local {
            path: dir.display().to_string(),
            message,
        })
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| local(format!("cannot create directory: {e}")))?;
    let path = dir.join(".certgen.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| local(format!("cannot open the lock file: {e}")))?;
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
                return Err(local(format!("cannot lock {}: {e}", path.display())));
            }
        }
    }
}
