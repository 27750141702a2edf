//! The run lock in a cluster: a `coordination.k8s.io/v1` Lease (`<profile>-certgen-lock` in
//! the Secrets' namespace), held by `<host or pod>-<random>`, renewed while held and deleted at
//! exit. An expired Lease (a crashed run) is taken over; where the identity may not use Leases,
//! the run goes on without one. What the lock is for, and the local one, are [`crate::lock`]'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use tokio::time::Instant;

use crate::store::{ApiFailure, StoreError};

/// Test-only (cargo feature `test-hooks`): the Lease duration in seconds (default 15), so crash
/// tests need not wait long.
#[cfg(feature = "test-hooks")]
pub const LEASE_SECONDS_ENV: &str = "CERTGEN_TEST_LEASE_SECONDS";

/// What an attempt to take the Lease came to.
pub enum Acquired {
    Held(LeaseLock),
    /// Another live run held it until the deadline.
    Busy {
        what: String,
        holder: String,
    },
    /// The identity may not use Leases: the run goes on without the lock; the note says so
    /// (for the report's skipped features).
    Unlocked(String),
}

/// A held Lease; released by [`LeaseLock::release`] (or, for a crash, by expiry).
pub struct LeaseLock {
    api: Box<Api<Lease>>,
    name: String,
    renewer: tokio::task::JoinHandle<()>,
    lost: Arc<AtomicBool>,
    version: Arc<std::sync::Mutex<String>>,
    /// When the Lease was last taken or renewed, on this process's monotonic clock.
    renewed: Arc<std::sync::Mutex<Instant>>,
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
        self.lost.load(Ordering::SeqCst)
            || self
                .renewed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed()
                + margin
                >= self.duration
    }

    /// Releases the Lease: deletes exactly the version held (a taken-over Lease is left alone).
    pub async fn release(self) {
        self.renewer.abort();
        let held = self.version.lock().unwrap().clone();
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(held),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(e) = self.api.delete(&self.name, &dp).await {
            tracing::debug!("releasing lease {}: {e}", self.name);
        }
    }
}

fn lease_seconds() -> i32 {
    #[cfg(feature = "test-hooks")]
    if let Some(s) = std::env::var(LEASE_SECONDS_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s > 0)
    {
        return s;
    }
    15
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

fn api_failure(verb: &'static str, namespace: &str, name: &str, err: kube::Error) -> StoreError {
    ApiFailure::from_kube(verb, "leases", "coordination.k8s.io", namespace, name, err)
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// Whether a Lease held by another run has expired. Like client-go's leader election, this
/// never compares the holder's timestamps with this machine's clock (they may disagree): the
/// Lease has expired when its resourceVersion has not changed for its whole duration, timed
/// on this process's monotonic clock from when this run first saw that version.
fn expired(spec: &LeaseSpec, version: &str, seen: &mut Option<(String, Instant)>) -> bool {
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
    match seen {
        Some((v, since)) if v == version => since.elapsed() > duration,
        _ => {
            *seen = Some((version.to_string(), Instant::now()));
            false
        }
    }
}

/// Takes the Lease `name` in `namespace`, waiting until `deadline` while another live run holds
/// it.
pub async fn acquire(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    deadline: Instant,
) -> Result<Acquired, StoreError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let holder = holder_identity();
    let seconds = lease_seconds();
    let mut logged = false;
    let mut seen: Option<(String, Instant)> = None;
    // Usually nobody holds it: try to create it first, and read it only when that fails.
    let mut current: Option<Option<Lease>> = Some(None);
    let taken = loop {
        let current = match current.take() {
            Some(assumed) => assumed,
            None => match api.get_opt(name).await {
                Ok(lease) => lease,
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    return Ok(without_lock(namespace, name, "get"));
                }
                Err(e) => return Err(api_failure("get", namespace, name, e)),
            },
        };
        let verb = if current.is_some() {
            "update"
        } else {
            "create"
        };
        let attempt = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(holder.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(now_micro()),
                        renew_time: Some(now_micro()),
                        ..LeaseSpec::default()
                    }),
                };
                api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let held_by = spec.holder_identity.clone().unwrap_or_default();
                let version = lease.metadata.resource_version.clone().unwrap_or_default();
                if !held_by.is_empty() && !expired(&spec, &version, &mut seen) {
                    if Instant::now() >= deadline {
                        return Ok(Acquired::Busy {
                            what: format!("Lease {namespace}/{name}"),
                            holder: held_by,
                        });
                    }
                    if !logged {
                        tracing::info!(lease = %name, holder = %held_by, "waiting for another certgen run to finish (Lease {namespace}/{name})");
                        logged = true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                // Free or expired: take it over, fenced by its resourceVersion.
                lease.spec = Some(LeaseSpec {
                    holder_identity: Some(holder.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + 1),
                    ..LeaseSpec::default()
                });
                api.replace(name, &PostParams::default(), &lease).await
            }
        };
        match attempt {
            Ok(lease) => break lease,
            Err(kube::Error::Api(s)) if s.code == 409 => continue, // someone else moved first
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Ok(without_lock(namespace, name, verb));
            }
            Err(e) => return Err(api_failure(verb, namespace, name, e)),
        }
    };
    // The version we hold: renewals update it, and the release deletes exactly that version.
    let version = Arc::new(std::sync::Mutex::new(
        taken.metadata.resource_version.clone().unwrap_or_default(),
    ));
    tracing::debug!(lease = %name, holder = %holder, "lock taken");
    let lost = Arc::new(AtomicBool::new(false));
    let renewed = Arc::new(std::sync::Mutex::new(Instant::now()));
    let renewer = {
        let api = api.clone();
        let name = name.to_string();
        let lost = lost.clone();
        let version = version.clone();
        let renewed = renewed.clone();
        tokio::spawn(async move {
            let period = Duration::from_secs(seconds as u64) / 3;
            loop {
                tokio::time::sleep(period).await;
                match api.get_opt(&name).await {
                    Ok(Some(mut lease)) => {
                        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                        if spec.holder_identity.as_deref() != Some(holder.as_str()) {
                            tracing::warn!(lease = %name, "the run lock was taken over by another run");
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        spec.renew_time = Some(now_micro());
                        // Time a renewal from when it was sent: the Lease may have been
                        // stored any time after that.
                        let sent = Instant::now();
                        match api.replace(&name, &PostParams::default(), &lease).await {
                            Ok(lease) => {
                                *version.lock().unwrap() =
                                    lease.metadata.resource_version.unwrap_or_default();
                                *renewed.lock().unwrap() = sent;
                            }
                            Err(kube::Error::Api(s)) if s.code == 409 => {
                                tracing::warn!(lease = %name, "the run lock was taken over by another run");
                                lost.store(true, Ordering::SeqCst);
                                return;
                            }
                            Err(e) => tracing::warn!(lease = %name, "renewing the run lock: {e}"),
                        }
                    }
                    Ok(None) => {
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => tracing::warn!(lease = %name, "renewing the run lock: {e}"),
                }
            }
        })
    };
    Ok(Acquired::Held(LeaseLock {
        api: Box::new(api),
        name: name.to_string(),
        renewer,
        lost,
        version,
        renewed,
        duration: Duration::from_secs(seconds as u64),
    }))
}

/// The run lock is an extra, not a requirement: where the identity may not use Leases (Envoy
/// Gateway's chart Role grants none), the run goes on without it and says so (a warning, and the note the run's report carries). Safety does
/// not depend on it: every write carries the resourceVersion it was planned from, so a
/// concurrent run makes this one re-read and re-plan (or exit 4), never overwrite.
fn without_lock(namespace: &str, name: &str, verb: &str) -> Acquired {
    let note = format!(
        "run lock: this identity may not {verb} leases.coordination.k8s.io in namespace {namespace} (Lease {name}); running without it, every write is still fenced by its resourceVersion"
    );
    tracing::warn!("{note}");
    Acquired::Unlocked(note)
}
