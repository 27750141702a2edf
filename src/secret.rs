//! What certgen reads and writes: a Secret as a store returns it ([`StoredSecret`], or
//! [`Observed::Absent`]), and a write of some of its keys under a precondition
//! ([`SecretWrite`]).
//!
//! Plain data shared by the core (observe, plan, apply, check) and the stores that implement
//! [`crate::store::SecretStore`]. It must not do IO or parse certificates: the stores fill these
//! values in, and [`crate::observe`] parses them.

use std::collections::BTreeMap;
use std::fmt;

/// The Secret type certgen writes for TLS Secrets (and the CA Secret).
pub const TYPE_TLS: &str = "kubernetes.io/tls";
/// The Secret type for HMAC Secrets.
pub const TYPE_OPAQUE: &str = "Opaque";

/// Where a TLS Secret keeps its trust bundle, certificate and key, and the Secret's type. The
/// default is certgen's own (and Envoy Gateway's): `ca.crt`, `tls.crt`, `tls.key` in a
/// `kubernetes.io/tls` Secret; kube-webhook-certgen's Secrets hold `ca`, `cert`, `key` in an
/// `Opaque` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The data key of the trust bundle.
    pub bundle: String,
    /// The data key of the certificate (the leaf first).
    pub cert: String,
    /// The data key of the certificate's private key.
    pub key: String,
    /// The Secret's type: [`TYPE_TLS`] or [`TYPE_OPAQUE`].
    pub type_: &'static str,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            bundle: "ca.crt".into(),
            cert: "tls.crt".into(),
            key: "tls.key".into(),
            type_: TYPE_TLS,
        }
    }
}

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
    /// (any [`crate::store::SecretStore::put`] of it does, even one with no data), the others
    /// need `--force` or a person, because certgen cannot tell which copy is right.
    pub divergent: Vec<Divergence>,
    /// In a cluster, for a Secret cert-manager issued into (annotation
    /// `cert-manager.io/certificate-name`): that `Certificate` as read. `None` otherwise.
    pub certificate: Option<Box<CertificateSeen>>,
    /// In a cluster, who wrote which fields (`metadata.managedFields`, parsed once by
    /// `observe::writers`); empty locally.
    pub writes: Vec<FieldWrite>,
}

/// The cert-manager `Certificate` a Secret's annotation names, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateSeen {
    /// It exists: cert-manager issues into the Secret. `handed_over`: the profile whose
    /// `certgen handover cert-manager` made it, if it did.
    Present {
        name: String,
        handed_over: Option<String>,
    },
    /// It does not exist (404): nobody issues into the Secret any more.
    Gone { name: String },
    /// It could not be read (403): taken as present.
    Unreadable { name: String, why: String },
}

impl CertificateSeen {
    /// The Certificate's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Present { name, .. } | Self::Gone { name } | Self::Unreadable { name, .. } => {
                name
            }
        }
    }
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

/// One `managedFields` entry: a manager, its operation (`Apply` or `Update`), when it last
/// changed the object, and the leaf fields it owns (`data/ca.crt`,
/// `webhooks/k:{"name":"x"}/clientConfig/caBundle`: the `f:` prefixes dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldWrite {
    pub manager: String,
    pub operation: String,
    pub time: Option<time::OffsetDateTime>,
    pub fields: std::collections::BTreeSet<String>,
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
