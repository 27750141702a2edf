//! Where Secrets live: the Kubernetes API or a local directory, behind one small trait.
//!
//! A store reads a Secret (absent is data, not an error) and writes one with a precondition:
//! "must not exist yet" or "must still be at the version I planned from". A failed
//! precondition is [`StoreError::Conflict`]; the engine re-reads and re-plans, never overwrites.

mod kube;
mod local;
pub mod webhook;

use std::collections::BTreeMap;
use std::fmt;

pub use self::kube::{KubeStore, SecretWriteVerb};
pub use self::local::LocalStore;
pub use self::webhook::{ObservedWebhook, WebhookObserved, WebhookStore};

/// The Secret type certgen writes for TLS Secrets (and the CA Secret).
pub const TYPE_TLS: &str = "kubernetes.io/tls";
/// The Secret type for HMAC Secrets.
pub const TYPE_OPAQUE: &str = "Opaque";

/// A Secret as read from a store. `Debug` lists data keys, never values.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSecret {
    pub name: String,
    pub type_: String,
    pub data: BTreeMap<String, Vec<u8>>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `Kind/name` of each ownerReference.
    pub owners: Vec<String>,
    /// The version a write must match: a resourceVersion, or a digest of the files.
    pub version: String,
    /// When the contents were last written, on the store's clock (the API server's in a
    /// cluster, rounded up to the next second; the file system's locally). Staged rotation
    /// gates count from the last write consumers may still be loading.
    pub written_at: Option<time::OffsetDateTime>,
    /// Local mode only: the files consumers read (`DIR/<secret>/<key>`) that do not show
    /// certgen's own copy (`DIR/<secret>/..data/<key>`, which `data` holds). Empty when every
    /// visible name is the link into `..data`, and always empty in a cluster. `data` is what
    /// certgen wrote; these are what consumers would see instead. A plan must not call such a
    /// Secret healthy: [`Divergence::repairable`] ones are fixed by rewriting the Secret's links
    /// (any [`SecretStore::put`] of it does, even one with no data), the others need `--force`
    /// or a person, because certgen cannot tell which copy is right.
    pub divergent: Vec<Divergence>,
}

/// A file consumers read that is not the link into certgen's `..data` copy (local mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The data key (`tls.crt`).
    pub key: String,
    /// The path consumers open (`DIR/envoy/tls.crt`).
    pub path: String,
    pub found: Found,
}

/// What stands at a visible name instead of the link into `..data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Nothing: consumers cannot open it.
    Missing,
    /// A regular file, byte-for-byte certgen's copy: right today, but it will not follow the
    /// next write.
    Copy,
    /// A regular file holding the start of certgen's copy (empty, or cut short).
    Truncated,
    /// Something certgen did not write: a file with other content, a link elsewhere, a
    /// directory. Certgen cannot tell whether it or its own copy is the one meant.
    Foreign,
}

impl Divergence {
    /// Whether certgen's own copy can simply be linked back in its place.
    pub fn repairable(&self) -> bool {
        self.found != Found::Foreign
    }

    /// What consumers find at the path: "is missing", "is a truncated copy ...".
    pub fn what(&self) -> &'static str {
        match self.found {
            Found::Missing => "is missing",
            Found::Copy => {
                "is a copy, not the link into ..data, and will not follow the next write"
            }
            Found::Truncated => "is a truncated copy of certgen's file, not the link into ..data",
            Found::Foreign => "is not the file certgen wrote, nor the link into ..data",
        }
    }

    /// For messages: the path and what consumers find there.
    pub fn describe(&self) -> String {
        format!("{} {}", self.path, self.what())
    }
}

impl fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredSecret")
            .field("name", &self.name)
            .field("type", &self.type_)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .field("version", &self.version)
            .field("divergent", &self.divergent)
            .finish_non_exhaustive()
    }
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per Secret read; boxing buys nothing
pub enum Observed {
    Absent,
    Present(StoredSecret),
}

impl Observed {
    /// The Secret, when present.
    pub fn present(&self) -> Option<&StoredSecret> {
        match self {
            Self::Absent => None,
            Self::Present(s) => Some(s),
        }
    }
}

/// The precondition of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Create: the Secret must not exist.
    Absent,
    /// Update: the Secret must still be at this version.
    Version(String),
}

/// A write of some keys of one Secret. Keys not listed are kept. `Debug` never shows values.
#[derive(Clone)]
pub struct SecretWrite {
    pub name: String,
    pub type_: &'static str,
    pub data: BTreeMap<String, Vec<u8>>,
    /// Keys holding private material (written 0600 locally).
    pub secret_keys: Vec<String>,
    /// Data keys to delete.
    pub remove: Vec<String>,
    /// Labels and annotations to set; others on the object are kept.
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub expect: Expect,
}

impl fmt::Debug for SecretWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretWrite")
            .field("name", &self.name)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .field("expect", &self.expect)
            .finish_non_exhaustive()
    }
}

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
}

/// A SHA-256 digest of a Secret's data (keys and values), as lower-case hex.
pub fn data_digest(data: &BTreeMap<String, Vec<u8>>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (k, v) in data {
        h.update((k.len() as u64).to_be_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_be_bytes());
        h.update(v);
    }
    crate::pki::hex(&h.finalize())
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
    /// Now, on the same clock as [`StoredSecret::written_at`]: gates compare the two, so a
    /// writer's clock never has to agree with a reader's.
    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }
    /// Makes every write so far durable and finishes its clean-up. Call it once after the last
    /// write of a run (and before releasing the run lock). A no-op for stores whose writes are
    /// durable when `put` returns (the Kubernetes API).
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
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

/// A refused or failed Kubernetes API call, naming the verb, resource and namespace.
#[derive(Debug, thiserror::Error)]
#[error(
    "kubernetes API: {verb} {resource} {name:?} in namespace {namespace:?} failed: {message}{hint}"
)]
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

impl ApiFailure {
    /// A failed call to the Kubernetes API, with a hint people can act on. `group` is the
    /// resource's API group ("" for the core group), named in the RBAC hint.
    pub fn from_kube(
        verb: &'static str,
        resource: &'static str,
        group: &str,
        namespace: &str,
        name: &str,
        err: ::kube::Error,
    ) -> StoreError {
        let (status, message, hint) = match &err {
            ::kube::Error::Api(s) => {
                let group = if group.is_empty() {
                    String::new()
                } else {
                    format!(" (group {group})")
                };
                let scope = if namespace.is_empty() {
                    "cluster-wide (a ClusterRole)".to_string()
                } else {
                    format!("in namespace {namespace}")
                };
                let hint = match s.code {
                    403 => format!(
                        "; grant the {verb} verb on {resource}{group} {scope} to this identity (see the RBAC section of the README)"
                    ),
                    401 => {
                        "; the credentials were rejected: check --kubeconfig/--context".to_string()
                    }
                    404 if verb == "create" => format!("; does namespace {namespace} exist?"),
                    _ => String::new(),
                };
                (Some(s.code), format!("{} ({})", s.message, s.code), hint)
            }
            other => (None, other.to_string(), String::new()),
        };
        StoreError::Api(Box::new(Self {
            verb,
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
            status,
            message,
            hint,
        }))
    }
}
