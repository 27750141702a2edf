//! The run lock: one mutating run at a time.
//!
//! In a cluster, a Lease behind the [`LeaseApi`] seam (the Kubernetes adapter's in
//! `crate::k8s::lease`, an in-memory one in the simulation): waiting for a live holder, taking
//! over an expired one, renewing and releasing are decided here; locally, an exclusive `flock` on
//! `DIR/.certgen.lock`. A lock does not fence: every write still carries its own version
//! precondition, and runs without a lock (an identity without Lease verbs, the simulation's
//! concurrent runs) rely on that alone.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::outside::{LeaseApi, LeaseRead};
use crate::store::StoreError;

/// What the run lock is.
pub enum Target {
    /// A Lease ([`LeaseApi`]), held by `holder` for `seconds` at a time and renewed a third of
    /// that apart.
    Lease {
        lease: Arc<dyn LeaseApi>,
        holder: String,
        seconds: u32,
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

/// What became of the run lock, as data for the run's record and report: the lock reports
/// through this value only (no note kept in the adapter or a global).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Outcome {
    /// No lock was taken (none asked for, nothing to write, or a fresh install's creates).
    #[default]
    NotTaken,
    /// The local directory's lock file.
    File { path: String },
    /// The Lease was held (taken, renewed, released).
    Lease(LeaseOutcome),
    /// The identity may not use Leases: the run went on without the lock (a skipped feature,
    /// said in the report); `note` says why.
    Refused { note: String },
}

/// How a held Lease went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseOutcome {
    /// `Lease ns/name`.
    pub what: String,
    /// The holder of an expired Lease this run took over (a crashed run's).
    pub took_over: Option<String>,
    /// Renewals that landed.
    pub renewals: u32,
    /// Renewals that failed (the last error), without losing the Lease.
    pub renewal_failures: u32,
    pub last_failure: Option<String>,
    /// Why the Lease may no longer have been this run's (taken over, deleted, or unrenewed for
    /// too long), when that happened.
    pub lost: Option<String>,
}

impl Outcome {
    /// The line the report's skipped features carry, when the lock was refused.
    pub fn refused(&self) -> Option<&str> {
        match self {
            Self::Refused { note } => Some(note),
            _ => None,
        }
    }
}

/// A held lock; released by [`Held::release`] (or, for a crash, by expiry).
pub enum Held {
    Lease(LeaseLock),
    File {
        _file: std::fs::File,
        path: PathBuf,
    },
    /// No lock was taken: writes are fenced by their preconditions alone.
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

    /// Releases the lock, and says what became of it.
    pub async fn release(self) -> Outcome {
        match self {
            Self::Lease(lease) => Outcome::Lease(lease.release().await),
            Self::File { path, .. } => {
                tracing::debug!("released lock {}", path.display());
                Outcome::File {
                    path: path.display().to_string(),
                }
            }
            Self::Unlocked => Outcome::NotTaken,
            Self::Refused { note } => Outcome::Refused { note },
        }
    }
}

/// Takes the lock `target`, waiting until `deadline` while another run holds it.
pub async fn take(target: &Target, deadline: Instant) -> Result<Held, LockError> {
    match target {
        Target::Lease {
            lease,
            holder,
            seconds,
        } => acquire_lease(lease.clone(), holder, *seconds, deadline).await,
        Target::File(dir) => acquire_file(dir, deadline).await,
        Target::None => Ok(Held::Unlocked),
    }
}

/// What a held Lease's renewals share with the run.
#[derive(Debug)]
struct Renewal {
    /// The version held: renewals update it, and the release deletes exactly that version.
    version: String,
    /// When the Lease was last taken or renewed (when that write was sent), on this process's
    /// monotonic clock.
    renewed: Instant,
    outcome: LeaseOutcome,
}

/// A held Lease; released by [`LeaseLock::release`] (or, for a crash, by expiry).
pub struct LeaseLock {
    lease: Arc<dyn LeaseApi>,
    renewer: tokio::task::JoinHandle<()>,
    state: Arc<Mutex<Renewal>>,
    /// How long another run waits, unrenewed, before taking the Lease over.
    duration: Duration,
}

impl LeaseLock {
    /// Whether the Lease may no longer be ours: renewal found another holder or no Lease, or
    /// the last successful renewal is so old that another run may already have taken over
    /// (it waits a full duration, on its own clock, from when it last saw the Lease change; a
    /// margin of a quarter of the duration, at most a second, covers the time between this
    /// check and the write it guards).
    pub fn lost(&self) -> bool {
        let margin = (self.duration / 4).min(Duration::from_secs(1));
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.outcome.lost.is_some() {
            return true;
        }
        if state.renewed.elapsed() + margin >= self.duration {
            state.outcome.lost = Some(format!(
                "not renewed for {} s of its {} s",
                state.renewed.elapsed().as_secs(),
                self.duration.as_secs()
            ));
            return true;
        }
        false
    }

    /// Releases the Lease: deletes exactly the version held (a taken-over Lease is left
    /// alone); what became of it.
    pub async fn release(self) -> LeaseOutcome {
        self.renewer.abort();
        let held = self.state.lock().unwrap().version.clone();
        if let Err(e) = self.lease.delete(&held).await {
            tracing::debug!("releasing {}: {e}", self.lease.describe());
        }
        self.state.lock().unwrap().outcome.clone()
    }
}

impl Drop for LeaseLock {
    /// A run dropped without releasing its lock (its future cancelled) renews no more: the
    /// Lease expires as a crashed run's does.
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

fn forbidden(e: &StoreError) -> bool {
    matches!(e, StoreError::Api(f) if f.status == Some(403))
}

/// Whether a Lease held by another run has expired. Like client-go's leader election, this
/// never compares the holder's timestamps with this machine's clock (they may disagree): the
/// Lease has expired when its version has not changed for its whole duration, timed on this
/// process's monotonic clock from when this run first saw that version.
fn expired(read: &LeaseRead, seen: &mut Option<(String, Instant)>) -> bool {
    let duration = Duration::from_secs(u64::from(read.seconds.max(1)));
    match seen {
        Some((v, since)) if *v == read.version => since.elapsed() > duration,
        _ => {
            *seen = Some((read.version.clone(), Instant::now()));
            false
        }
    }
}

/// Takes the Lease for `holder`, waiting until `deadline` while another live run holds it; an
/// expired one (a crashed run's) is taken over, fenced by its version.
async fn acquire_lease(
    lease: Arc<dyn LeaseApi>,
    holder: &str,
    seconds: u32,
    deadline: Instant,
) -> Result<Held, LockError> {
    let what = lease.describe();
    let mut logged = false;
    let mut seen: Option<(String, Instant)> = None;
    // Usually nobody holds it: try to create it first, and read it only when that fails.
    let mut assumed: Option<Option<LeaseRead>> = Some(None);
    let (taken, took_over) = loop {
        let current = match assumed.take() {
            Some(assumed) => assumed,
            None => match lease.read().await {
                Ok(read) => read,
                Err(e) if forbidden(&e) => return Ok(without_lock(&what, "get")),
                Err(e) => return Err(e.into()),
            },
        };
        let (verb, took_over, attempt) = match current {
            None => ("create", None, lease.create(holder, seconds).await),
            Some(read) => {
                if !read.holder.is_empty() && !expired(&read, &mut seen) {
                    if Instant::now() >= deadline {
                        return Err(LockError::Contended {
                            what,
                            holder: read.holder,
                        });
                    }
                    if !logged {
                        tracing::info!(holder = %read.holder, "waiting for another certgen run to finish ({what})");
                        logged = true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                // Free or expired: take it over, fenced by its version.
                let took_over = (!read.holder.is_empty()).then(|| read.holder.clone());
                (
                    "update",
                    took_over,
                    lease.hold(&read, holder, seconds).await,
                )
            }
        };
        match attempt {
            Ok(read) => break (read, took_over),
            Err(StoreError::Conflict { .. }) => continue, // someone else moved first
            Err(e) if forbidden(&e) => return Ok(without_lock(&what, verb)),
            Err(e) => return Err(e.into()),
        }
    };
    if let Some(old) = &took_over {
        tracing::warn!(
            "took over {what} from {old}, whose run stopped renewing it (a crashed run): its writes are finished or fenced"
        );
    }
    tracing::debug!(%holder, "lock taken");
    let state = Arc::new(Mutex::new(Renewal {
        version: taken.version.clone(),
        renewed: Instant::now(),
        outcome: LeaseOutcome {
            what,
            took_over,
            ..LeaseOutcome::default()
        },
    }));
    let renewer = tokio::spawn(renew(
        lease.clone(),
        holder.to_string(),
        seconds,
        state.clone(),
    ));
    Ok(Held::Lease(LeaseLock {
        lease,
        renewer,
        state,
        duration: Duration::from_secs(u64::from(seconds)),
    }))
}

/// Renews the Lease a third of its duration apart until it is released, or found lost.
async fn renew(lease: Arc<dyn LeaseApi>, holder: String, seconds: u32, state: Arc<Mutex<Renewal>>) {
    let period = Duration::from_secs(u64::from(seconds)) / 3;
    let lost = |why: String| {
        tracing::warn!("the run lock was lost: {why}");
        state.lock().unwrap().outcome.lost.get_or_insert(why);
    };
    let failed = |e: StoreError| {
        tracing::warn!("renewing the run lock: {e}");
        let mut s = state.lock().unwrap();
        s.outcome.renewal_failures += 1;
        s.outcome.last_failure = Some(e.to_string());
    };
    loop {
        tokio::time::sleep(period).await;
        let read = match lease.read().await {
            Ok(Some(read)) => read,
            Ok(None) => return lost(format!("{} was deleted", lease.describe())),
            Err(e) => {
                failed(e);
                continue;
            }
        };
        if read.holder != holder {
            return lost(format!("taken over by {}", read.holder));
        }
        // Time a renewal from when it was sent: the Lease may have been stored any time after.
        let sent = Instant::now();
        match lease.hold(&read, &holder, seconds).await {
            Ok(read) => {
                let mut s = state.lock().unwrap();
                s.version = read.version;
                s.renewed = sent;
                s.outcome.renewals += 1;
            }
            Err(StoreError::Conflict { .. }) => {
                return lost("changed by another run while being renewed".into());
            }
            Err(e) => failed(e),
        }
    }
}

/// The run lock is an extra, not a requirement: where the identity may not use Leases (Envoy
/// Gateway's chart Role grants none), the run goes on without it and says so (a warning, and
/// the note the run's report carries). Safety does not depend on it: every write carries the
/// resourceVersion it was planned from, so a concurrent run makes this one re-read and
/// re-plan (or exit 4), never overwrite.
fn without_lock(what: &str, verb: &str) -> Held {
    let note = format!(
        "run lock: this identity may not {verb} leases.coordination.k8s.io ({what}); running without it, every write is still fenced by its resourceVersion"
    );
    tracing::warn!("{note}");
    Held::Refused { note }
}

/// `<pod or host>-<random>`: unique per run, recognisable by people.
pub fn holder_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "certgen".into());
    format!("{host}-{}", crate::pki::hex(&crate::pki::random_bytes(4)))
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
