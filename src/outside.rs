//! One small seam per outside system the driver acts on besides the Secrets
//! ([`crate::store::SecretStore`]): the `caBundle` targets, the consumers' workloads, the
//! namespace's pods and the run lock's Lease. Each is a trait over plain data, implemented by the Kubernetes adapter
//! (`crate::k8s`) and, in memory, by the trajectory simulation (`tests/it/sim/outside.rs`), so
//! the simulation runs the driver's real code for caBundle writes, restarts and pokes.
//! `certgen patch` (kube-webhook-certgen's) reads and writes its targets through the same
//! `caBundle` seam, so it runs in the simulation too.
//!
//! The traits carry no decision: what to write, restart or poke is the driver's
//! ([`crate::rotation`]) and [`crate::rollout`]'s. Methods answer boxed futures so the driver
//! holds each seam as a trait object (`&dyn`), one type whatever implements it. This module
//! names no Kubernetes type.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls_pki_types::pem::PemObject;
use time::OffsetDateTime;

use crate::config::WebhookKind;
use crate::pki::{CaKey, Cert, KeyAlgorithm, LeafSpec, Usages, issue_leaf};
use crate::rollout::{RolloutError, Target};
use crate::store::StoreError;

/// A `caBundle` target as read.
#[derive(Clone)]
pub struct TargetRead {
    pub kind: WebhookKind,
    pub name: String,
    pub uid: String,
    /// The resourceVersion a write must match.
    pub version: String,
    /// The `caBundle` of each entry, in order (one for an APIService); empty when unset.
    pub bundles: Vec<Vec<u8>>,
    /// Each entry's name and `failurePolicy`, in the order of `bundles` (an APIService's one
    /// entry has neither).
    pub entries: Vec<TargetEntry>,
    /// An APIService's `spec.insecureSkipTLSVerify` (false for a webhook configuration).
    pub insecure_skip_tls_verify: bool,
    /// When the object last changed, by the store's clock (rounded up to the second).
    pub written_at: Option<time::OffsetDateTime>,
    /// cert-manager's CA injector writes its `caBundle` (the annotation it acts on): certgen
    /// never does.
    pub injected: Option<crate::certmanager::Injected>,
    /// Who wrote which fields (`managedFields`, parsed by [`crate::observe::writers`]).
    pub writes: Vec<crate::secret::FieldWrite>,
    /// The undos of certgen's writes recorded on the object (annotation `certgen.dev/undone-by`).
    pub recorded: Option<String>,
    /// What the implementation needs to write the object back as read (the whole object, for
    /// the Kubernetes adapter); opaque to the driver.
    pub token: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for TargetRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetRead")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("uid", &self.uid)
            .field("version", &self.version)
            .field("entries", &self.bundles.len())
            .field("injected", &self.injected)
            .finish_non_exhaustive()
    }
}

impl TargetRead {
    /// Whether every entry already holds `bundle` (a configuration without entries holds
    /// anything).
    pub fn holds(&self, bundle: &[u8]) -> bool {
        self.bundles.iter().all(|b| b == bundle)
    }

    /// The CAs (SHA-256 fingerprints) that every entry's `caBundle` holds ([`cas_in_every_entry`]).
    pub fn cas_in_every_entry(&self) -> Result<BTreeSet<[u8; 32]>, String> {
        cas_in_every_entry(&self.bundles)
    }

    /// Whether every entry's `caBundle` holds the CA with fingerprint `ca` ([`holds_ca`]).
    pub fn holds_ca(&self, ca: [u8; 32]) -> Result<bool, String> {
        holds_ca(&self.bundles, ca)
    }
}

/// The CAs (SHA-256 fingerprints) that every entry's `caBundle` of `bundles` holds (none for an
/// empty entry, and none for a configuration without entries); an entry that does not parse
/// is an error naming it.
pub fn cas_in_every_entry(bundles: &[Vec<u8>]) -> Result<BTreeSet<[u8; 32]>, String> {
    let mut all: Option<BTreeSet<[u8; 32]>> = None;
    for (i, pem) in bundles.iter().enumerate() {
        let here: BTreeSet<[u8; 32]> = if pem.is_empty() {
            BTreeSet::new()
        } else {
            crate::pki::parse_cert_chain(pem)
                .map_err(|e| format!("entry {i}'s caBundle: {e}"))?
                .iter()
                .map(Cert::fingerprint)
                .collect()
        };
        all = Some(match all {
            None => here,
            Some(a) => a.intersection(&here).copied().collect(),
        });
    }
    Ok(all.unwrap_or_default())
}

/// Whether every entry's `caBundle` of `bundles` holds the CA with fingerprint `ca` (a
/// configuration without entries holds anything: the API server calls no webhook of it). The
/// trust gate's rule for a target cert-manager's CA injector writes, and `check`'s.
pub fn holds_ca(bundles: &[Vec<u8>], ca: [u8; 32]) -> Result<bool, String> {
    if bundles.is_empty() {
        return Ok(true);
    }
    Ok(cas_in_every_entry(bundles)?.contains(&ca))
}

/// One entry of a target as read, beside its `caBundle`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetEntry {
    /// The webhook's name (empty for an APIService).
    pub name: String,
    /// The webhook's `failurePolicy` as written (`None` when unset, and for an APIService).
    pub failure_policy: Option<String>,
}

/// A webhook configuration's failure policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Ignore,
    Fail,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ignore => "Ignore",
            Self::Fail => "Fail",
        }
    }
}

/// What a write sets besides the `caBundle`, as planned: the annotations the planner put on
/// it (certgen's mark of the bundle and the record of undos, see
/// [`crate::attribution::target_annotations`]); and for `certgen patch`
/// (kube-webhook-certgen's) every webhook's `failurePolicy`, and an APIService's
/// `insecureSkipTLSVerify` turned off. An implementation writes exactly these and decides none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetFields {
    /// Every webhook entry's `failurePolicy` (an APIService has none).
    pub failure_policy: Option<FailurePolicy>,
    /// Sets an APIService's `insecureSkipTLSVerify` to false.
    pub verify_tls: bool,
    /// Annotations set on the object (others are kept).
    pub annotations: BTreeMap<String, String>,
}

/// What a read of a `caBundle` target found.
#[derive(Debug, Clone)]
pub enum TargetObserved {
    Absent,
    Present(Box<TargetRead>),
}

/// The `caBundle` targets (webhook configurations, APIServices).
pub trait CaBundleTargets: Send + Sync {
    /// Reads a target (`Absent` only when it does not exist).
    fn read<'a>(
        &'a self,
        kind: WebhookKind,
        name: &'a str,
    ) -> BoxFuture<'a, Result<TargetObserved, StoreError>>;
    /// Writes `bundle` (and `fields`) into every entry of the target as `read`, fenced by its
    /// version and uid (a change or a recreation since is [`StoreError::Conflict`]); nothing
    /// else of it changes. The version written.
    fn put<'a>(
        &'a self,
        read: &'a TargetRead,
        bundle: &'a [u8],
        fields: TargetFields,
    ) -> BoxFuture<'a, Result<String, StoreError>>;
    /// Writes `bundle` (and `fields`) into the entries `read` found, by name, with a
    /// server-side apply that owns those fields alone: no fence (kube-webhook-certgen's
    /// `--patch-mode patch`, which needs the `patch` verb instead of `update`).
    fn apply<'a>(
        &'a self,
        read: &'a TargetRead,
        bundle: &'a [u8],
        fields: TargetFields,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Whether the cache the API server loads the target from (its watch cache, which feeds
    /// its informer) shows `version` or a later one yet; `Ok(false)`: not yet.
    fn cached<'a>(
        &'a self,
        kind: WebhookKind,
        name: &'a str,
        version: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

pub use crate::trust_bundles::BundleRead;

/// A pod anywhere in the cluster that projects ClusterTrustBundles (`clusterTrustBundle`
/// sources of its projected volumes), as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projector {
    pub namespace: String,
    pub pod: String,
    pub projections: Vec<crate::trust_bundles::Projection>,
}

/// What a create of a bundle met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// Made, at this resourceVersion.
    Made(String),
    /// A bundle of that name exists already (another run, or a recreation): re-read.
    Exists,
}

/// The ClusterTrustBundles (`certificates.k8s.io/v1`, cluster-scoped; Kubernetes 1.37+).
/// Every write is fenced: a create by the name's absence, an update and a delete by the uid
/// and resourceVersion read.
pub trait TrustBundles: Send + Sync {
    /// Every bundle linked to `signer`.
    fn list<'a>(&'a self, signer: &'a str) -> BoxFuture<'a, Result<Vec<BundleRead>, StoreError>>;
    /// Creates the bundle `name` for `signer` holding `pem`, labelled `labels`.
    fn create<'a>(
        &'a self,
        name: &'a str,
        signer: &'a str,
        labels: &'a BTreeMap<String, String>,
        pem: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>>;
    /// Writes `pem` and `labels` into the bundle as `read` (a change or a recreation since is
    /// [`StoreError::Conflict`]). The version written.
    fn update<'a>(
        &'a self,
        read: &'a BundleRead,
        labels: &'a BTreeMap<String, String>,
        pem: &'a str,
    ) -> BoxFuture<'a, Result<String, StoreError>>;
    /// Deletes the bundle as `read` (a change or a recreation since is
    /// [`StoreError::Conflict`]); `Ok(false)` when it was gone already.
    fn delete<'a>(&'a self, read: &'a BundleRead) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Every pod in the cluster that projects ClusterTrustBundles, with those projections.
    fn projectors(&self) -> BoxFuture<'_, Result<Vec<Projector>, StoreError>>;
    /// Before the run's first write: whether the bundles of `signer` can be kept at all (served
    /// by the API server, and this identity allowed); by default, that they can be listed.
    fn preflight<'a>(&'a self, signer: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.list(signer).await.map(|_| ()) })
    }
}

/// A consumer's workload as the restart decision and the wait see it, whatever its kind: one
/// type, defined beside the kinds' rollout rules in [`crate::workload`].
pub use crate::workload::{Kind, RolloutStatus, WorkloadView};

/// What a rollout wait last saw of each workload, for progress lines and the report.
pub type RolloutProgress = Mutex<BTreeMap<String, String>>;

/// The consumers' workloads in the namespace: read, restarted, waited for.
pub trait Workloads: Send + Sync {
    /// The namespace, for messages.
    fn namespace(&self) -> &str;
    /// One workload by kind and name; `None` when it does not exist.
    fn get<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<WorkloadView>, StoreError>>;
    /// The workloads of `kind` a label selector matches.
    fn select<'a>(
        &'a self,
        kind: Kind,
        selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<WorkloadView>, StoreError>>;
    /// Restarts `w` (its pod template; `w.kind` says which API), recording `fingerprint`,
    /// fenced by its UID; the wait target, or why it cannot roll.
    fn restart<'a>(
        &'a self,
        w: &'a WorkloadView,
        fingerprint: &'a str,
        now: time::OffsetDateTime,
    ) -> BoxFuture<'a, Result<Result<Target, RolloutError>, StoreError>>;
    /// Waits until the rollout of `target` is done by its kind's rule (`Some(took)`), fails,
    /// or `deadline` passes (`None`; the last state seen is in `last`).
    fn wait<'a>(
        &'a self,
        target: &'a Target,
        deadline: Instant,
        last: &'a RolloutProgress,
    ) -> BoxFuture<'a, Result<Option<Duration>, RolloutError>>;
}

/// A pod as the gates see it (plain data; see `crate::rotation` for what it means).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub uid: String,
    /// `metadata.creationTimestamp` (the API server's clock, whole seconds).
    pub created: Option<time::OffsetDateTime>,
    /// Being deleted: its kubelet no longer refreshes its volumes.
    pub terminating: bool,
    /// Succeeded or Failed: nothing runs in it.
    pub finished: bool,
    /// The workload that owns it, when one does: a Deployment (through its ReplicaSet), or a
    /// StatefulSet or DaemonSet (directly).
    pub owner: Option<(Kind, String)>,
    /// The Secrets its volumes project (secret volumes and projected sources), by name.
    pub secrets: BTreeSet<String>,
    /// The restart fingerprint its template carried (`certgen.dev/restart-fingerprint`): a pod
    /// of the rollout certgen started for those contents.
    pub restart_fingerprint: Option<String>,
    /// The node it is bound to (`spec.nodeName`): whose kubelet projects its volumes. `None`
    /// while it is not scheduled.
    pub node: Option<String>,
}

/// A node's kubelet heartbeat as read: its Lease `kube-node-lease/<node>`, which the kubelet
/// renews every quarter of `leaseDurationSeconds` (10 s by default) while it runs and reaches
/// the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletLease {
    /// The Lease's resourceVersion: a renewal changes it.
    pub version: String,
    /// When the API server stored its last change (the newest `managedFields` time: the
    /// store's clock, whole seconds). `None` when the object does not say.
    pub renewed_at: Option<time::OffsetDateTime>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<u32>,
}

/// What became of one poke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PokeAnswer {
    /// The annotation is on the pod with this UID.
    Done,
    /// The pod is gone (404): nothing runs that could hold old bytes.
    Gone,
    /// The pod named so is another one now (deleted and recreated; 409 on the UID).
    Recreated,
    /// The API server kept answering 429 (API Priority and Fairness, or a rate limit), after
    /// the client's own retries: not poked yet; ask again no sooner than this (its
    /// Retry-After, or `retryAfterSeconds` in the Status details).
    Throttled(Duration),
}

/// The namespace's pods: listed with what they mount, and poked; and the heartbeat of the
/// kubelets that run them (what a poke proves depends on whether the pod's kubelet was live).
pub trait PodsApi: Send + Sync {
    /// The namespace, for messages.
    fn namespace(&self) -> &str;
    /// Every pod of the namespace, read consistently (one snapshot, however many pages).
    fn list(&self) -> BoxFuture<'_, Result<Vec<PodView>, StoreError>>;
    /// Annotates pod `name` (only while it has `uid`) with `fingerprint` and `at`; its spec
    /// stays as it is.
    fn poke<'a>(
        &'a self,
        name: &'a str,
        uid: &'a str,
        fingerprint: &'a str,
        at: time::OffsetDateTime,
    ) -> BoxFuture<'a, Result<PokeAnswer, StoreError>>;
    /// The Lease of `node`'s kubelet; `None` when it does not exist.
    fn kubelet<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<KubeletLease>, StoreError>>;
}

/// Why a Service's endpoints could not be found.
#[derive(Debug, thiserror::Error)]
pub enum EndpointsError {
    /// The API refused or failed (exit 5, like any refused call).
    #[error(transparent)]
    Api(StoreError),
    /// The Service or its port is not there (a failed probe, exit 1).
    #[error("{0}")]
    Missing(String),
}

/// The pod a Service endpoint belongs to (its EndpointSlice's `targetRef`, kind Pod, in the
/// Service's namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPod {
    pub name: String,
    /// The pod's UID, when the `targetRef` gives it.
    pub uid: Option<String>,
}

/// One ready endpoint behind a Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyEndpoint {
    /// `ip:port`, as dialed.
    pub address: String,
    /// The pod behind it; `None` when its slice names none (no `targetRef`, or not a pod of
    /// this namespace): a probe of it then proves nothing about any pod.
    pub pod: Option<EndpointPod>,
}

// What a probe's dial presents and answers: the vocabulary of [`Endpoints::trust`] and
// [`Endpoints::serves`] (re-exported by `crate::probe`, which makes the real handshakes).

/// What a server is expected to present.
#[derive(Debug, Clone)]
pub struct Expected {
    /// The Secret the server mounts, for messages.
    pub secret: String,
    /// The leaf now stored in that Secret.
    pub leaf: Cert,
    /// The CA that signs current leaves.
    pub issuer: Cert,
}

/// A short-lived client certificate from the active CA, for probing servers that require one
/// ([`crate::probe`] presents it).
pub struct ClientIdentity {
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
}

impl ClientIdentity {
    /// A client certificate from a throwaway CA that nobody trusts: the control that shows a
    /// server verifies client certificates at all.
    pub fn untrusted(now: OffsetDateTime) -> Result<Self, crate::pki::IssueError> {
        let spec = crate::pki::CaSpec {
            common_name: "certgen-probe-control".into(),
            validity: Duration::from_secs(15 * 60),
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        let (ca, _) = crate::pki::issue_ca(&spec, now)?;
        Self::issue(&ca, now)
    }

    /// Issues a 15-minute clientAuth leaf `certgen-probe` from `ca`.
    pub fn issue(ca: &CaKey, now: OffsetDateTime) -> Result<Self, crate::pki::IssueError> {
        let spec = LeafSpec {
            common_name: "certgen-probe".into(),
            dns_names: vec!["certgen-probe".into()],
            ip_addresses: vec![],
            usages: Usages {
                server: false,
                client: true,
            },
            validity: Duration::from_secs(15 * 60),
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        let issued = issue_leaf(&spec, ca, now)?;
        let key = PrivateKeyDer::from_pem_slice(issued.key.expose().as_bytes())
            .map_err(|e| crate::pki::IssueError::Sign(format!("probe key: {e}")))?;
        Ok(Self {
            chain: vec![CertificateDer::from(issued.cert.der().to_vec())],
            key,
        })
    }

    /// The client certificate presented (DER), for an implementation of
    /// [`crate::outside::Endpoints`] that judges it without a handshake (the simulation).
    pub fn certificate(&self) -> &[u8] {
        &self.chain[0]
    }
}

/// What a server showed of its verification of client certificates ([`crate::probe::client_trust`], [`Endpoints::trust`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientTrust {
    /// It accepted the client and refused a certificate from a CA nobody trusts.
    Proven,
    /// It accepted a certificate from a CA nobody trusts too: it verifies nothing a probe can
    /// see, so no probe of it can ever prove it trusts a CA.
    VerifiesNothing,
    /// Neither, before the deadline (it refused the client, or did not answer).
    NotShown,
}

/// The namespace's Services: where `--probe` dials, and the dial itself (a TLS handshake in a
/// cluster, [`crate::probe`]; a verdict from what the pod holds in the simulation). What a
/// verdict proves is the caller's to judge.
pub trait Endpoints: Send + Sync {
    /// The ready endpoints behind a Service's port, each with the pod it belongs to.
    fn ready<'a>(
        &'a self,
        service: &'a str,
        port: u16,
    ) -> BoxFuture<'a, Result<Vec<ReadyEndpoint>, EndpointsError>>;
    /// What `address` shows of its verification of client certificates, presenting `client`
    /// and verifying its chain against `roots` and `server_name`, retrying until `until`
    /// ([`crate::probe::client_trust`]).
    fn trust<'a>(
        &'a self,
        address: &'a str,
        server_name: &'a str,
        roots: &'a [Cert],
        client: &'a ClientIdentity,
        until: Instant,
    ) -> BoxFuture<'a, ClientTrust>;
    /// One attempt: whether `address` completes a handshake (its chain verified against
    /// `roots`, presenting `client`) and presents exactly the leaf `expected`; else why not
    /// ([`crate::probe::serves`]).
    fn serves<'a>(
        &'a self,
        address: &'a str,
        server_name: &'a str,
        roots: &'a [Cert],
        expected: &'a Expected,
        client: &'a ClientIdentity,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// The run lock's Lease as read (or as a write left it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRead {
    /// Who holds it; empty when nobody does.
    pub holder: String,
    /// How long it holds without a renewal, in seconds.
    pub seconds: u32,
    /// The resourceVersion a write or deletion must match.
    pub version: String,
    /// How many times it changed hands.
    pub transitions: i32,
    /// When its holder took it, by the clock of whoever wrote it (kept by a renewal; never
    /// compared with another clock).
    pub acquired_at: Option<time::OffsetDateTime>,
}

/// The run lock's Lease (`coordination.k8s.io/v1`): one object, read and written whole, every
/// write fenced by the version read. What to do with it (wait, take over an expired holder,
/// renew, give up) is [`crate::lock`]'s; an implementation stamps acquire and renew times on
/// its own clock, which nobody compares with another clock.
pub trait LeaseApi: Send + Sync {
    /// `Lease ns/name`, for messages.
    fn describe(&self) -> String;
    /// Reads the Lease; `None` when it does not exist.
    fn read(&self) -> BoxFuture<'_, Result<Option<LeaseRead>, StoreError>>;
    /// Creates it, held by `holder` for `seconds`; [`StoreError::Conflict`] when it exists.
    fn create<'a>(
        &'a self,
        holder: &'a str,
        seconds: u32,
    ) -> BoxFuture<'a, Result<LeaseRead, StoreError>>;
    /// Writes it as held by `holder` for `seconds` (taken over when `read` names another
    /// holder, renewed otherwise), fenced by `read`'s version: [`StoreError::Conflict`] when it
    /// changed or went away since.
    fn hold<'a>(
        &'a self,
        read: &'a LeaseRead,
        holder: &'a str,
        seconds: u32,
    ) -> BoxFuture<'a, Result<LeaseRead, StoreError>>;
    /// Deletes exactly `version` (a Lease changed since is left alone).
    fn delete<'a>(&'a self, version: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// `MutatingWebhookConfiguration envoy-gateway-topology-injector.ns`, for messages.
pub fn describe_target(kind: WebhookKind, name: &str) -> String {
    format!("{} {name}", kind.as_str())
}
