//! The plan's data: what one step writes to each Secret and why ([`Plan`]), the phase of the
//! rotation it leaves ([`Phase`]), and the run's flags that change it ([`Options`], [`Known`]).

use std::collections::BTreeSet;
use std::time::Duration;

use time::OffsetDateTime;

use super::writes::Write;
use crate::config::{OverwriteWhy, RunOptions, Strategy};
use crate::pki::{CaKey, CaSpec, Cert};

/// The run's flags that change what is planned: they never change during a run, except that
/// a flag acted on is not acted on again ([`Options::after`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Rotate the CA now (`--overwrite`).
    pub overwrite: bool,
    /// Replace HMAC secrets (`--rotate-hmac`).
    pub rotate_hmac: bool,
    /// Take over Secrets owned by another manager and replace unusable contents.
    pub force: bool,
    /// How a rotation reaches consumers.
    pub strategy: Strategy,
    /// How long consumers get to load a change before the next step relies on it.
    pub propagation_delay: Duration,
    /// A step of one member of a set of clusters (its run or its dry run), and the steps the
    /// set holds back until every member is ready for them (the phase barrier); `None`: a run
    /// in one cluster, which holds nothing and refuses to change a CA a set shares.
    pub hold: Option<Hold>,
    /// Why `overwrite` is set (`--overwrite`, or `certgen create`'s `--validity`): the
    /// report's reason only.
    pub overwrite_why: OverwriteWhy,
    /// `--respect-window`: `--overwrite` waits for a renewal window like a routine rotation.
    pub respect_window: bool,
}

/// The steps a member of a set of clusters may not take yet: each waits until every member
/// reached it ([`crate::rotation`]'s set driver lifts it for one step, for all members at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hold {
    /// The leaves step (the pending CA promoted, leaves signed by it): held until every member
    /// trusts the pending CA and its gate is open.
    pub leaves: bool,
    /// The cleanup (a prior CA dropped from the bundles): held until every member's leaves
    /// are signed by the active CA and its gate is open.
    pub cleanup: bool,
}

/// A step the set's barrier holds back ([`Hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Barrier {
    Leaves,
    Cleanup,
}

impl Barrier {
    pub fn name(self) -> &'static str {
        match self {
            Self::Leaves => "leaves",
            Self::Cleanup => "cleanup",
        }
    }
}

impl Hold {
    /// Every step of a rotation held: where a member of a set starts.
    pub const ALL: Self = Self {
        leaves: true,
        cleanup: true,
    };

    /// The barrier a planned step must wait at, if this hold keeps it back.
    pub fn stops(self, phase: &Phase) -> Option<Barrier> {
        match phase {
            Phase::Leaves if self.leaves => Some(Barrier::Leaves),
            Phase::Cleanup { .. } if self.cleanup => Some(Barrier::Cleanup),
            _ => None,
        }
    }
}

impl Options {
    /// The options a run starts from: what its flags ask for.
    pub fn from_run(run: &RunOptions) -> Self {
        Self {
            overwrite: run.overwrite,
            rotate_hmac: run.rotate_hmac,
            force: run.force,
            strategy: run.strategy,
            propagation_delay: run.propagation_delay,
            hold: run.set_member.map(|h| Hold {
                leaves: h.leaves,
                cleanup: h.cleanup,
            }),
            overwrite_why: run.overwrite_why,
            respect_window: run.respect_window,
        }
    }

    /// The options once `--overwrite` (`ca_written`: a new CA stored, or the CA Secret changed
    /// under the run) and `--rotate-hmac` (`hmac_written`) have been acted on. The one
    /// statement of the rule that a run never issues a second pending CA, nor new HMAC bytes
    /// twice: the run's record and a step's re-plans after a lost race both go through it.
    pub fn after(self, ca_written: bool, hmac_written: bool) -> Self {
        Self {
            overwrite: self.overwrite && !ca_written,
            rotate_hmac: self.rotate_hmac && !hmac_written,
            ..self
        }
    }
}

/// A `caBundle` target cert-manager's CA injector writes, as read: certgen never writes it,
/// but the API server calls its webhook with what the injector put there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedTarget {
    /// `ValidatingWebhookConfiguration name`.
    pub what: String,
    /// The CAs (SHA-256 fingerprints) every entry's `caBundle` holds.
    pub holds: BTreeSet<[u8; 32]>,
}

/// What the run has learned so far that changes the plan: derived from the run's record
/// (`rotation::Progress`) at one site, never a flag. Empty for a run's first look.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Every hot-reloading consumer was probed and accepted a client certificate from the
    /// pending CA with this fingerprint: the trust step has reached them, whatever the delay.
    pub trust_confirmed: Option<[u8; 32]>,
    /// This run already waited out a gate for the stored state with this digest (see
    /// [`crate::observe::Snapshot::digest`]): the gate is open for it even if the store's clock disagrees.
    pub gate_waited: Option<[u8; 32]>,
    /// The last write to a trust bundle outside the Secrets (a webhook's `caBundle`), on the
    /// store's clock: gates count from it too.
    pub other_written_at: Option<OffsetDateTime>,
    /// Readers the gate cannot observe (pods that project a ClusterTrustBundle by name, which
    /// the kubelet may serve from its cache) may hold the old trust until then, on the store's
    /// clock: a gate lasts at least until then, whatever the delay.
    pub unobserved_until: Option<OffsetDateTime>,
    /// The writer's own clock now ([`crate::store::SecretStore::writer_now`]): a write that
    /// recorded it counts as no older than this clock says, besides the store's.
    pub writer_now: Option<OffsetDateTime>,
    /// This run pokes the pods that mount what changed and watches their kubelets, and first
    /// looked at the store then (on the store's clock). A gate whose newest write is no later
    /// (an earlier run's, a run ended at `--timeout` or killed) is open only once this run has
    /// waited at it, on its own evidence: the stored write's time alone says nothing of what a
    /// kubelet did before this run looked (cut off throughout, its pods never got the write).
    pub observing_since: Option<OffsetDateTime>,
    /// The `caBundle` targets of the config that cert-manager's CA injector writes, as this
    /// run last read them: the leaves of a pending CA wait until each holds it.
    pub injected: Vec<InjectedTarget>,
    /// A gate of this run saw every injected target hold the pending CA with this fingerprint,
    /// loaded by the API server (`rotation::gate::Injector`): newer than [`Known::injected`].
    pub injected_loaded: Option<[u8; 32]>,
}

/// What this step does, and so what comes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Nothing is due after this step's writes (if any): the run is done.
    Steady,
    /// A pending CA is being added to every bundle; leaves are unchanged. Then: the gate.
    Trust,
    /// Nothing may be written before `ready_at`: consumers may not have loaded the last change.
    Gate {
        ready_at: OffsetDateTime,
        reason: String,
        /// The pending CA's fingerprint when this is the trust→leaves gate, which probes that
        /// accept a client certificate from that CA may open early.
        pending: Option<[u8; 32]>,
        /// The digest of the stored state this gate was computed for.
        state: [u8; 32],
        /// Only a cleanup waits behind this gate: every consumer works as things are, and a
        /// run that cannot wait for it may end successfully, leaving it to the next run.
        optional: bool,
    },
    /// Leaves are being signed by the active CA while a prior CA is still trusted. Then: the
    /// gate, and the cleanup.
    Leaves,
    /// The prior CA is being dropped from every bundle. Then: steady (`last`), or the trust
    /// step of the rotation that waited for this cleanup.
    Cleanup { last: bool },
}

impl Phase {
    /// The phase's name in logs and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Steady => "steady",
            Self::Trust => "trust",
            Self::Gate { .. } => "gate",
            Self::Leaves => "leaves",
            Self::Cleanup { .. } => "cleanup",
        }
    }
}

/// A stored object certgen cannot use as it is, and will not touch.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{object}: {problem}; {fix}")]
pub struct Invalid {
    pub object: String,
    pub problem: String,
    pub fix: String,
}

/// What happens to one Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Nothing to do.
    Keep,
    /// Write it for the first time.
    Create,
    /// New key and certificate (or new random bytes).
    Renew,
    /// Only `ca.crt` changes.
    UpdateBundle,
    /// A new active CA in one write (the CA Secret only).
    Rotate,
    /// Staged rotation: a new CA stored as pending and added to the bundle (CA Secret only).
    Trust,
    /// Staged rotation: the pending CA becomes the active one (CA Secret only).
    Promote,
    /// Local mode: the data is right, but files consumers read are not the links into it
    /// ([`crate::secret::StoredSecret::divergent`]); the links are put back, the data kept.
    Repair,
    /// A ClusterTrustBundle of a CA the bundle it publishes no longer holds is deleted.
    Delete,
}

impl Action {
    /// Whether the action writes.
    pub fn writes(self) -> bool {
        self != Self::Keep
    }

    /// Its name in reports and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Create => "create",
            Self::Renew => "renew",
            Self::UpdateBundle => "update-bundle",
            Self::Rotate => "rotate",
            Self::Trust => "trust",
            Self::Promote => "promote",
            Self::Repair => "repair",
            Self::Delete => "delete",
        }
    }
}

/// A CA in a bundle: one that exists, or the one this step creates.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // a handful per plan; boxing buys nothing
pub enum CaRef {
    /// The CA this step generates (Create, Rotate, Trust).
    New,
    Cert(Cert),
}

/// A CA whose key signs a leaf or is written: one certgen holds, or the one this step
/// generates.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // a handful per plan; boxing buys nothing
pub enum Signer {
    /// The CA this step generates (Create, Rotate, Trust).
    New,
    Held(CaKey),
}

impl Signer {
    /// Its certificate, as a bundle entry.
    pub fn cert_ref(&self) -> CaRef {
        match self {
            Self::New => CaRef::New,
            Self::Held(k) => CaRef::Cert(k.cert.clone()),
        }
    }
}

/// The plan for the CA Secret.
#[derive(Debug, Clone)]
pub struct CaPlan {
    pub name: String,
    pub action: Action,
    pub reason: String,
    /// The active CA as read, when certgen holds its key.
    pub active: Option<CaKey>,
    /// The active CA as read, when it is another tool's whose key certgen does not hold
    /// (adopted Secrets).
    pub adopted: Option<Cert>,
    /// A staged rotation's pending CA, as read.
    pub pending: Option<CaKey>,
    /// The CA Secret's `ca.crt` after this step.
    pub bundle: Vec<CaRef>,
    /// The CA this step generates (Create, Rotate, Trust).
    pub new: Option<CaSpec>,
    /// What this step writes to the CA Secret (`None`: nothing).
    pub write: Option<Write>,
    /// The CAs after this step: what signs leaves (when certgen holds its key), what is
    /// pending, and which certificate the report shows for the CA Secret.
    pub after: CasAfter,
    /// The TLS Secrets were written by another tool since certgen's last run: what they hold,
    /// and how this plan takes it (`plan/held.rs`).
    pub derived: Option<String>,
}

/// The CAs of the CA Secret after a step.
#[derive(Debug, Clone)]
pub struct CasAfter {
    /// The CA that signs leaves, when certgen holds its key.
    pub signer: Option<Signer>,
    /// A staged rotation's pending CA.
    pub pending: Option<Signer>,
    /// The certificate the report shows for the CA Secret: the CA this step generates or
    /// promotes, else the active one (certgen's or an adopted one).
    pub shown: Option<CaRef>,
}

/// The plan for one Secret.
#[derive(Debug, Clone)]
pub struct SecretPlan {
    pub name: String,
    pub kind: Kind,
    pub action: Action,
    pub reason: String,
    /// The current leaf's expiry, for the report.
    pub not_after: Option<OffsetDateTime>,
    /// What this step writes to the Secret (`None`: nothing).
    pub write: Option<Write>,
}

/// The kind of a managed Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ca,
    Tls,
    Hmac,
    /// A webhook configuration's (or APIService's) `caBundle`, following a TLS Secret's bundle.
    Webhook,
    /// A ClusterTrustBundle publishing one CA of a TLS Secret's bundle.
    #[serde(rename = "clustertrustbundle")]
    TrustBundle,
}

/// The whole plan of one step.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ca: CaPlan,
    pub secrets: Vec<SecretPlan>,
    pub phase: Phase,
    /// A rotation was under way in what this plan was made from: a pending CA (stored, or
    /// derived from the held Secrets), or the leaves step of one (a held leaf not yet signed by
    /// certgen's active CA, in a bundle that already trusts it). It is the rotation an
    /// `--overwrite` asks for: the run finishes it and begins no other (one rotation per due).
    pub under_way: bool,
    /// What the renewal windows did to this step (`src/window.rs`; empty without windows).
    pub window: WindowNote,
}

/// What the renewal windows did to a step: the routine rotations they hold for the next
/// window, and those that start outside every window because they cannot wait.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowNote {
    /// `now` is outside every window: the next opening and its end (`None` inside a window, or
    /// without windows; `Some(None)` when no window opens again).
    pub outside: Option<Option<(OffsetDateTime, OffsetDateTime)>>,
    /// Held for the next window.
    pub waiting: Vec<Waiting>,
    /// Started outside every window, with the reason.
    pub emergency: Vec<Emergency>,
}

/// A routine rotation held for the next window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The Secret (the CA Secret for a CA rotation).
    pub secret: String,
    /// What waits, in words (`the CA's rotation`, `the leaf's renewal`).
    pub what: String,
    /// Why it is due.
    pub due: String,
    /// When the certificate expires.
    pub not_after: OffsetDateTime,
}

/// A routine rotation that starts outside every window because it cannot wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emergency {
    pub secret: String,
    /// Why, in one line a report and a Warning Event show.
    pub why: String,
}

impl WindowNote {
    /// The next window's start, when `now` is outside every window and one opens again.
    pub fn next_start(&self) -> Option<OffsetDateTime> {
        self.outside.flatten().map(|(s, _)| s)
    }
}

impl Plan {
    /// Whether the step writes anything.
    pub fn writes(&self) -> bool {
        self.ca.action.writes() || self.secrets.iter().any(|s| s.action.writes())
    }
}
