//! Where Secrets live, behind one small trait: the seam between the core and the stores.
//!
//! A store reads a Secret (absent is data, not an error) and writes one with a precondition:
//! "must not exist yet" or "must still be at the version I planned from". A failed
//! precondition is [`StoreError::Conflict`]; the caller re-reads and re-plans, never
//! overwrites. Two stores implement it: a local directory ([`LocalStore`], here) and the
//! Kubernetes API (`crate::k8s::KubeStore`, in the adapter). This module must not know
//! Kubernetes: [`ApiFailure`] is plain data, filled in by the adapter.

mod beneath;
mod clock;
mod local;

pub use self::beneath::{Refusal, open_or_create as open_lock_file, open_root};
pub use self::local::{LOCK_FILE, LocalStore};

use crate::secret::{Observed, SecretWrite};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The precondition failed: someone else changed, created or deleted the Secret.
    #[error("{what} changed since it was read ({detail})")]
    Conflict { what: String, detail: String },
    /// The Kubernetes API refused or failed.
    #[error(transparent)]
    Api(Box<ApiFailure>),
    /// A local file could not be read or written.
    #[error("{path}: {message}")]
    Local { path: String, message: String },
    /// A local write failed after consumers could already read part of it (after its `..data`
    /// switch): it counts as a write, so the run cannot promise that nothing was written.
    #[error("{path}: {message} (the Secret's new version had already been switched in)")]
    Partial { path: String, message: String },
}

/// A local store error for `path` from a refusal: the trust rule's own message, or `doing`
/// and the system's error.
pub fn refusal(path: &str, doing: &str, r: Refusal) -> StoreError {
    let message = match r {
        Refusal::Io(e) => format!("cannot {doing}: {e}"),
        Refusal::Untrusted(m) => m,
    };
    StoreError::Local {
        path: path.to_string(),
        message,
    }
}

impl StoreError {
    /// Whether the failed operation may have changed what consumers read.
    pub fn wrote(&self) -> bool {
        matches!(self, Self::Partial { .. })
    }
}

/// Where Secrets are read from and written to.
#[allow(async_fn_in_trait)]
pub trait SecretStore {
    /// For messages: `namespace envoy-gateway-system` or `directory ./certs`.
    fn describe(&self) -> String;
    /// The namespace, for a store in a cluster.
    fn namespace(&self) -> Option<&str> {
        None
    }
    /// Describes one Secret for messages: `Secret envoy-gateway-system/envoy` or a path.
    fn object(&self, name: &str) -> String;
    /// Reads a Secret; `Absent` only when it does not exist.
    async fn get(&self, name: &str) -> Result<Observed, StoreError>;
    /// Reads several Secrets, answering in the order of `names`; `Absent` only for those that
    /// do not exist. The default reads each by name, [`READ_CONCURRENCY`] at a time; a store may
    /// read them all in one request.
    async fn get_many(&self, names: &[&str]) -> Result<Vec<Observed>, StoreError> {
        get_by_name(self, names).await
    }
    /// Writes a Secret under the write's precondition. A store may defer part of the
    /// durability work to [`SecretStore::flush`], but a Secret it has written is never torn and
    /// every earlier write is durable before a later one can be seen (so the CA key is durable
    /// before anything it signs).
    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError>;
    /// Now, on the same clock as [`crate::secret::StoredSecret::written_at`]: gates compare
    /// the two, so a writer's clock never has to agree with a reader's.
    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }
    /// Whether the place the store writes to is known not to exist (a cluster's namespace),
    /// found without writing: asked by a dry run that found nothing stored, which `probe` (a
    /// Secret it would create) names. `false` when the store cannot tell.
    async fn known_missing(&self, probe: &str) -> bool {
        let _ = probe;
        false
    }
    /// The writer's own wall clock (this process's): a second opinion beside the store's. A
    /// certificate is issued at the earlier of the two, so a store clock ahead of its
    /// consumers' yields no leaf that is not valid yet; and every write records it
    /// ([`WRITER_CLOCK`]), so a gate counts the smaller of the two clocks' elapsed times and a
    /// step of either clock alone never shortens it.
    fn writer_now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }
    /// Makes every write so far durable and finishes its clean-up. Call it once after the last
    /// write of a run (and before releasing the run lock). A no-op for stores whose writes are
    /// durable when `put` returns (the Kubernetes API).
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The private keys the reads so far found readable by others, as (Secret, path, problem):
    /// only a local directory has file modes.
    fn exposed_keys(&self) -> Vec<(String, String, String)> {
        Vec::new()
    }
}

/// The annotation each write carries: the writer's wall clock when it wrote, in nanoseconds
/// since the Unix epoch ([`SecretStore::writer_now`]).
pub const WRITER_CLOCK: &str = "certgen.dev/writer-clock";

/// The write time a gate counts from, for a Secret the store says was written at
/// `written_at` and that recorded the writer's clock `stamp`: no older than the writer's clock
/// says (`writer_now`), nor than the store's (`now`). A step of either clock between the write
/// and now makes that clock's elapsed time wrong in one direction only: the smaller one is
/// taken, so the gate is never shorter.
pub fn written_no_older_than(
    written_at: time::OffsetDateTime,
    stamp: Option<&String>,
    now: time::OffsetDateTime,
    writer_now: Option<time::OffsetDateTime>,
) -> time::OffsetDateTime {
    let stamp = stamp
        .and_then(|s| s.parse::<i128>().ok())
        .and_then(|n| time::OffsetDateTime::from_unix_timestamp_nanos(n).ok());
    match (stamp, writer_now) {
        (Some(then), Some(writer_now)) => {
            let elapsed = (writer_now - then).max(time::Duration::ZERO);
            written_at.max(now - elapsed)
        }
        _ => written_at,
    }
}

/// How many reads by name are in flight at once: fast for a thousand Secrets, gentle on the
/// API server.
pub const READ_CONCURRENCY: usize = 16;

/// [`SecretStore::get_many`] by one `get` per name, [`READ_CONCURRENCY`] at a time.
pub async fn get_by_name<S: SecretStore + ?Sized>(
    store: &S,
    names: &[&str],
) -> Result<Vec<Observed>, StoreError> {
    use futures::StreamExt;
    futures::stream::iter(names)
        .map(|name| store.get(name))
        .buffered(READ_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// A refused or failed Kubernetes API call, naming the verb, resource and namespace (none for
/// a cluster-scoped object, no name for a LIST).
#[derive(Debug)]
pub struct ApiFailure {
    pub verb: &'static str,
    pub resource: &'static str,
    pub namespace: String,
    pub name: String,
    /// The HTTP status code, when the server answered.
    pub status: Option<u16>,
    pub message: String,
    pub hint: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kubernetes API: {} {}", self.verb, self.resource)?;
        if !self.name.is_empty() {
            write!(f, " {:?}", self.name)?;
        }
        if !self.namespace.is_empty() {
            write!(f, " in namespace {:?}", self.namespace)?;
        }
        write!(f, " failed: {}{}", self.message, self.hint)
    }
}

impl std::error::Error for ApiFailure {}

impl ApiFailure {
    /// Whether a ResourceQuota refused the request (a 403 like RBAC's, but no grant helps).
    pub fn quota(&self) -> bool {
        self.status == Some(403) && self.message.contains("exceeded quota")
    }

    /// The hint for a quota refusal in `namespace`.
    pub fn quota_hint(namespace: &str) -> String {
        format!(
            "; a ResourceQuota in namespace {namespace} refuses it (this is not a missing permission): raise the quota (kubectl -n {namespace} describe resourcequota) or remove unused objects, then re-run"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(namespace: &str, name: &str) -> ApiFailure {
        ApiFailure {
            verb: "update",
            resource: "mutatingwebhookconfigurations",
            namespace: namespace.into(),
            name: name.into(),
            status: Some(403),
            message: "forbidden (403)".into(),
            hint: "; grant it".into(),
        }
    }

    /// Issue 32, finding 7: a cluster-scoped object was "in namespace \"\"".
    #[test]
    fn an_api_failure_names_a_namespace_only_when_there_is_one() {
        assert_eq!(
            failure("", "injector").to_string(),
            "kubernetes API: update mutatingwebhookconfigurations \"injector\" failed: forbidden (403); grant it"
        );
        assert_eq!(
            failure("ns", "").to_string(),
            "kubernetes API: update mutatingwebhookconfigurations in namespace \"ns\" failed: forbidden (403); grant it"
        );
        assert!(!failure("ns", "").quota());
        let mut quota = failure("ns", "s");
        quota.message =
            "secrets \"s\" is forbidden: exceeded quota: q, requested: count/secrets=1 (403)"
                .into();
        assert!(quota.quota());
    }
}
