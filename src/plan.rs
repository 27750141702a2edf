//! Pure planning: observed Secrets + config + `now` → the next step of this run, each Secret
//! with the reason people will read in the report.
//!
//! Nothing here reads the clock, the network or files, and nothing generates keys: a plan says
//! which CA signs each leaf ([`Signer`]), which CAs each bundle holds ([`CaRef`]) and, for every
//! Secret written, each data key and what it holds ([`Write`], made in `plan/writes.rs`), so
//! `--dry-run` prints what `apply` will write, and `apply` makes no decisions. Problems with
//! what is stored (garbage PEM, a key that does not match, a Secret owned by another manager)
//! are [`Invalid`] errors that name the object and the fix (`plan/stored.rs`); `--force` turns
//! the repairable ones into renewals.
//!
//! # The rotation invariant
//!
//! Consumers load what is written at their own pace, up to the propagation delay (or their
//! rollout) later; so at any instant two peers may hold any two versions written since the last
//! *gate*. A step may therefore only write what every version that peers may still hold accepts:
//!
//! - adding a CA to bundles is always safe (the **trust** step);
//! - a leaf signed by a CA is written only once every bundle that may still be held trusts that
//!   CA: in steady state the active CA; a new CA only after the trust→leaves gate (the
//!   **leaves** step, which promotes the pending CA);
//! - a CA leaves the bundles only once no leaf that may still be held was signed by it: after
//!   the leaves→cleanup gate (the **cleanup** step, which drops the prior CA), or at once when
//!   it has expired (then nothing valid depends on it).
//!
//! A gate opens when the last write to any TLS Secret, on the store's clock, is older than the
//! propagation delay (or a probe proved the new trust, or this run already waited that long for
//! this exact state). The phase is derived from the certificates themselves (a pending CA in the
//! CA Secret, which CAs each bundle holds, which CA signed each leaf) and the store's write
//! times: no state file, no annotation that a crash could leave stale.

use std::time::Duration;

use time::OffsetDateTime;

use crate::config::{Config, HmacSecret, RunOptions, Strategy, TlsSecret};
use crate::observe::Snapshot;
use crate::pki::{CaKey, CaSpec, Cert, choose_prior_ca};
use crate::secret::Observed;

mod handed;
mod held;
mod stored;
mod valid;
mod writes;

pub(crate) use self::stored::pending as pending_ca;
use self::stored::{Active, CaSecret, Judge, Leaf, Parsed};
pub use self::valid::{Broken, Held, all_usages, ca_refusal, step_check};
pub use self::writes::{CA_ANNOTATION, Content, Issue, Write};

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

/// What the run has learned so far that changes the plan: derived from the run's record
/// (`rotation::Progress`) at one site, never a flag. Empty for a run's first look.
#[derive(Debug, Clone, Copy, Default)]
pub struct Known {
    /// Every hot-reloading consumer was probed and accepted a client certificate from the
    /// pending CA with this fingerprint: the trust step has reached them, whatever the delay.
    pub trust_confirmed: Option<[u8; 32]>,
    /// This run already waited out a gate for the stored state with this digest (see
    /// [`Snapshot::digest`]): the gate is open for it even if the store's clock disagrees.
    pub gate_waited: Option<[u8; 32]>,
    /// The last write to a trust bundle outside the Secrets (a webhook's `caBundle`), on the
    /// store's clock: gates count from it too.
    pub other_written_at: Option<OffsetDateTime>,
    /// The writer's own clock now ([`crate::store::SecretStore::writer_now`]): a write that
    /// recorded it counts as no older than this clock says, besides the store's.
    pub writer_now: Option<OffsetDateTime>,
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
}

/// The whole plan of one step.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ca: CaPlan,
    pub secrets: Vec<SecretPlan>,
    pub phase: Phase,
}

impl Plan {
    /// Whether the step writes anything.
    pub fn writes(&self) -> bool {
        self.ca.action.writes() || self.secrets.iter().any(|s| s.action.writes())
    }
}

fn days(d: time::Duration) -> String {
    let h = d.whole_hours();
    if h.abs() >= 48 {
        format!("{} days", h / 24)
    } else {
        format!("{h} hours")
    }
}

fn span(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// `at + d`, saturating at the last instant `time` represents instead of overflowing.
fn after(at: OffsetDateTime, d: Duration) -> OffsetDateTime {
    at.checked_add(span(d))
        .unwrap_or_else(|| time::PrimitiveDateTime::MAX.assume_utc())
}

/// Why a certificate is due for renewal at `now`, if it is: not valid yet (a verifier rejects
/// it before its `notBefore`: it was issued by a clock ahead of the store's), expired, or
/// within `renew_before` of its expiry.
pub fn due(cert: &Cert, renew_before: Duration, now: OffsetDateTime) -> Option<String> {
    if now < cert.not_before {
        return Some(format!(
            "is not valid before {} (issued by a clock ahead of the store's)",
            crate::timefmt::at_second(cert.not_before)
        ));
    }
    let left = cert.not_after - now;
    if left <= time::Duration::ZERO {
        Some(format!("expired {} ago", days(-left)))
    } else if left <= span(renew_before) {
        Some(format!("expires in {}, within renewBefore", days(left)))
    } else {
        None
    }
}

pub(crate) fn san_drift(cert: &Cert, t: &TlsSecret) -> Option<String> {
    let mut have: Vec<String> = cert.dns_names.clone();
    have.extend(cert.ip_addresses.iter().map(|i| i.to_string()));
    let mut want: Vec<String> = t.leaf.dns_names.clone();
    want.extend(t.leaf.ip_addresses.iter().map(|i| i.to_string()));
    let added: Vec<&str> = want
        .iter()
        .filter(|w| !have.contains(w))
        .map(String::as_str)
        .collect();
    let removed: Vec<&str> = have
        .iter()
        .filter(|h| !want.contains(h))
        .map(String::as_str)
        .collect();
    if added.is_empty() && removed.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!("adds {}", added.join(", ")));
    }
    if !removed.is_empty() {
        parts.push(format!("drops {}", removed.join(", ")));
    }
    Some(format!("SANs changed in the config: {}", parts.join("; ")))
}

/// Why a TLS verifier would reject this stored leaf whatever its CA, if it would: it lacks a
/// usage its Secret is configured for, or carries a critical extension verifiers do not know.
pub fn leaf_refusal(cert: &Cert, t: &TlsSecret) -> Option<String> {
    crate::pki::leaf_shape_problem(cert, t.leaf.usages)
}

fn same(bundle: &[Cert], target: &[Cert]) -> bool {
    bundle.len() == target.len() && bundle.iter().zip(target).all(|(a, b)| a == b)
}

fn refs(certs: &[Cert]) -> Vec<CaRef> {
    certs.iter().cloned().map(CaRef::Cert).collect()
}

/// One configured TLS Secret as observed.
struct LeafIn<'a> {
    cfg: &'a TlsSecret,
    parsed: Parsed,
    version: Option<String>,
}

impl LeafIn<'_> {
    fn ok(&self) -> Option<&Leaf> {
        match &self.parsed {
            Parsed::Ok(l) => Some(l),
            _ => None,
        }
    }

    fn not_after(&self) -> Option<OffsetDateTime> {
        self.ok().map(|l| l.cert.not_after)
    }

    fn plan(&self, action: Action, reason: impl Into<String>, write: Option<Write>) -> SecretPlan {
        SecretPlan {
            name: self.cfg.name.clone(),
            kind: Kind::Tls,
            action,
            reason: reason.into(),
            not_after: self.not_after(),
            write,
        }
    }

    fn keep(&self, reason: impl Into<String>) -> SecretPlan {
        self.plan(Action::Keep, reason, None)
    }

    fn bundle_update(&self, bundle: Vec<CaRef>, reason: impl Into<String>) -> SecretPlan {
        let write = writes::tls(&self.version, &bundle, None, &self.cfg.layout);
        self.plan(Action::UpdateBundle, reason, Some(write))
    }

    fn issue(&self, signer: Signer, bundle: Vec<CaRef>, reason: impl Into<String>) -> SecretPlan {
        let action = match self.parsed {
            Parsed::Missing => Action::Create,
            _ => Action::Renew,
        };
        let issue = Issue {
            spec: self.cfg.leaf.clone(),
            signer,
        };
        let write = writes::tls(&self.version, &bundle, Some(issue), &self.cfg.layout);
        self.plan(action, reason, Some(write))
    }

    /// Why this leaf must be issued again by `signer` (the CA that should have signed it), if
    /// it must: missing, unusable, issued by another CA, due, or its SANs changed.
    fn issue_reason(&self, signer: &Cert, now: OffsetDateTime) -> Option<String> {
        match &self.parsed {
            Parsed::Missing => Some("missing".into()),
            Parsed::Broken(why) => Some(format!("unusable ({why}); replaced because of --force")),
            Parsed::Ok(l) => {
                if !signer.signed(&l.cert) {
                    return Some("issued by a CA other than the active one".into());
                }
                due(&l.cert, self.cfg.renew_before, now)
                    .or_else(|| san_drift(&l.cert, self.cfg))
                    .or_else(|| leaf_refusal(&l.cert, self.cfg))
            }
        }
    }

    /// Why this leaf is issued again by `active` in this step, if doing so helps: a leaf that
    /// is due only because it is clipped to the active CA's expiry would be due again at once,
    /// so it waits for the next CA (which the CA's own, longer, renewBefore brings first).
    ///
    /// Likewise a leaf that is not valid yet because the active CA is not (a leaf's
    /// `notBefore` never precedes its CA's): the same CA would issue it with the same
    /// `notBefore`. A leaf not valid yet from a valid CA is issued again by it at once: the
    /// bundles trust that CA already, so no gate is needed.
    fn renewal(&self, active: &Cert, now: OffsetDateTime) -> Option<String> {
        let why = self.issue_reason(active, now)?;
        if let Parsed::Ok(l) = &self.parsed
            && active.signed(&l.cert)
            && !l.cert.is_expired_at(now)
            && san_drift(&l.cert, self.cfg).is_none()
            && (due(active, self.cfg.renew_before, now).is_some()
                || (now < l.cert.not_before && now < active.not_before))
        {
            return None;
        }
        Some(why)
    }
}

/// For a leaf another CA signed, that CA, kept in the leaf's own bundle until the cleanup.
type OwnPrior<'a> = &'a dyn Fn(&LeafIn) -> Option<Cert>;

/// The gate every step that relies on consumers having loaded the last writes waits for.
struct Gate {
    /// When the last TLS Secret write is older than the propagation delay.
    ready_at: OffsetDateTime,
    /// The stored state it was computed for.
    state: [u8; 32],
    /// This run already waited for exactly this state.
    waited: bool,
}

impl Gate {
    fn open(&self, now: OffsetDateTime) -> bool {
        self.waited || now >= self.ready_at
    }

    fn phase(&self, reason: String, pending: Option<[u8; 32]>, optional: bool) -> Phase {
        Phase::Gate {
            ready_at: self.ready_at,
            reason,
            pending,
            state: self.state,
            optional,
        }
    }
}

/// Plans one step. `object` names a Secret for messages (`Secret ns/name` or a path).
pub fn plan(
    config: &Config,
    observed: &Snapshot,
    now: OffsetDateTime,
    options: Options,
    known: Known,
    object: &dyn Fn(&str) -> String,
) -> Result<Plan, Invalid> {
    let verifier = crate::pki::Verifier::new(now);
    let refuse_ca = |c: &Cert| ca_refusal(config, &verifier, c);
    let judge = Judge {
        options,
        object,
        refuse_ca: &refuse_ca,
    };
    judge.foreign_files(observed.ca.iter().chain(observed.secrets.values()))?;
    if let Some((ca, mut secrets)) = handed::stand_down(config, observed, object)? {
        secrets.extend(hmac_plans(&judge, config, observed, options)?);
        return Ok(Plan {
            ca,
            secrets,
            phase: Phase::Steady,
        });
    }
    let ca_name = config.ca.secret_name.as_str();
    let ca = judge.ca(ca_name, observed.ca())?;
    let mut leaves = Vec::new();
    for t in &config.tls {
        let o = observed.get(&t.name);
        leaves.push(LeafIn {
            cfg: t,
            parsed: judge.leaf(&t.name, o, &t.layout)?,
            version: o.present().map(|s| s.version.clone()),
        });
    }
    let hmac = hmac_plans(&judge, config, observed, options)?;

    // The gate counts from the newest write to any TLS Secret (a write time in the future, from
    // a clock that went back, counts as now).
    let state = observed.digest();
    // A write counts as no older than the writer's clock says either (a step of one clock
    // alone never shortens a gate).
    let last_write = config
        .tls
        .iter()
        .filter_map(|t| observed.get(&t.name).present())
        .filter_map(|s| {
            let stamp = s.annotations.get(crate::store::WRITER_CLOCK);
            let w = s.written_at?;
            Some(crate::store::written_no_older_than(
                w,
                stamp,
                now,
                known.writer_now,
            ))
        })
        .chain(known.other_written_at)
        .map(|w| w.min(now))
        .max();
    let gate = Gate {
        ready_at: last_write.map_or(now, |w| after(w, options.propagation_delay)),
        state,
        waited: known.gate_waited == Some(state) && known.other_written_at.is_none_or(|w| w <= now),
    };

    let input = Input {
        config,
        now,
        options,
        known,
        ca_name,
        leaves: &leaves,
        gate: &gate,
    };
    let (ca_plan, secrets, phase) = input.decide(ca)?;
    let mut ca_plan = ca_plan.finish(config);
    let mut all = secrets;
    all.extend(hmac);
    // Local mode: a Secret kept as it is still gets back the files consumers read.
    if let Some(stored) = observed.ca().present()
        && !ca_plan.action.writes()
        && let Some((write, reason)) = writes::relink(stored)
    {
        (ca_plan.action, ca_plan.reason, ca_plan.write) = (Action::Repair, reason, Some(write));
    }
    for s in all.iter_mut().filter(|s| s.action == Action::Keep) {
        if let Some(stored) = observed.get(&s.name).present()
            && let Some((write, reason)) = writes::relink(stored)
        {
            (s.action, s.reason, s.write) = (Action::Repair, reason, Some(write));
        }
    }
    Ok(Plan {
        ca: ca_plan,
        secrets: all,
        phase,
    })
}

/// The CA Secret's plan as the decisions leave it, before [`CaDraft::finish`] adds what is
/// written and what follows.
#[derive(Debug)]
struct CaDraft {
    name: String,
    action: Action,
    reason: String,
    /// The version the CA Secret was read at (`None`: absent).
    version: Option<String>,
    active: Option<CaKey>,
    adopted: Option<Cert>,
    pending: Option<CaKey>,
    /// The CA Secret's `ca.crt` after this step.
    bundle: Vec<CaRef>,
    /// Data keys this step removes from the CA Secret.
    remove: Vec<String>,
    /// The active and pending CAs were derived from the held Secrets (what was found): a
    /// write records them.
    derived: Option<String>,
}

impl CaDraft {
    fn finish(self, config: &Config) -> CaPlan {
        let held = |k: &Option<CaKey>| k.clone().map(Signer::Held);
        let current = self
            .active
            .as_ref()
            .map(|a| CaRef::Cert(a.cert.clone()))
            .or(self.adopted.clone().map(CaRef::Cert));
        let (new, after) = match self.action {
            Action::Create | Action::Rotate => (
                Some(config.ca.spec.clone()),
                CasAfter {
                    signer: Some(Signer::New),
                    pending: None,
                    shown: Some(CaRef::New),
                },
            ),
            Action::Trust => (
                Some(config.ca.spec.clone()),
                CasAfter {
                    signer: held(&self.active),
                    pending: Some(Signer::New),
                    shown: Some(CaRef::New),
                },
            ),
            Action::Promote => (
                None,
                CasAfter {
                    signer: held(&self.pending),
                    pending: None,
                    shown: self.pending.as_ref().map(|p| CaRef::Cert(p.cert.clone())),
                },
            ),
            Action::Keep | Action::UpdateBundle | Action::Renew | Action::Repair => (
                None,
                CasAfter {
                    signer: held(&self.active),
                    pending: held(&self.pending),
                    shown: current,
                },
            ),
        };
        let write = writes::ca(
            self.action,
            &self.version,
            &self.bundle,
            &self.remove,
            writes::CaKeys {
                active: self.active.as_ref(),
                adopted: self.adopted.as_ref(),
                pending: self.pending.as_ref(),
                relayout: self.derived.is_some(),
            },
        );
        CaPlan {
            name: self.name,
            action: self.action,
            reason: self.reason,
            active: self.active,
            adopted: self.adopted,
            pending: self.pending,
            bundle: self.bundle,
            new,
            write,
            after,
            derived: self.derived,
        }
    }
}

struct Input<'a> {
    config: &'a Config,
    now: OffsetDateTime,
    options: Options,
    known: Known,
    ca_name: &'a str,
    leaves: &'a [LeafIn<'a>],
    gate: &'a Gate,
}

type Decision = (CaDraft, Vec<SecretPlan>, Phase);

impl Input<'_> {
    fn ca_plan(&self, ca: &CaSecret, action: Action, reason: impl Into<String>) -> CaDraft {
        let (active, adopted) = match &ca.active {
            Some(Active::Keyed(k)) => (Some(k.clone()), None),
            Some(Active::Adopted(c)) => (None, Some(c.clone())),
            None => (None, None),
        };
        CaDraft {
            name: self.ca_name.to_string(),
            action,
            reason: reason.into(),
            version: ca.version.clone(),
            active,
            adopted,
            pending: ca.pending.clone(),
            bundle: vec![],
            remove: vec![],
            derived: ca.derived.clone(),
        }
    }

    fn present_leaves(&self) -> impl Iterator<Item = &Leaf> {
        self.leaves.iter().filter_map(LeafIn::ok)
    }

    /// The rule for a trust step (`plans`, trusting `new` beside the current CA) that drops a
    /// valid CA from some bundle: one that signs a leaf stored now cannot be dropped (other
    /// writers left leaves of more CAs than a bundle of two can trust beside the new one:
    /// refused, unless `--force`); any other waits for the gate, since leaves of it may still
    /// be held. `Some` is the step to take instead (the wait).
    fn dropping(
        &self,
        ca: &CaSecret,
        plans: &[SecretPlan],
        new: &str,
    ) -> Result<Option<Decision>, Invalid> {
        let dropped = self.drops_trust(plans);
        let signing = dropped
            .iter()
            .find(|c| self.present_leaves().any(|l| c.signed(&l.cert)));
        let Some(dropped) = signing.or(dropped.first()) else {
            return Ok(None);
        };
        if !self.options.force && signing.is_some() {
            return Err(Invalid {
                object: self.ca_name.to_string(),
                problem: format!(
                    "the TLS Secrets hold leaves of more CAs than a bundle can trust beside {new} (CA {} signs a leaf stored now, and would leave a bundle): other tools wrote them",
                    dropped.short_fingerprint()
                ),
                fix: "nothing was written; restore the Secrets (or certgen's CA Secret) from one writer, or run with --force to go on (peers presenting the dropped CA's leaves are rejected until their Secret is renewed)".into(),
            });
        }
        if self.gate.open(self.now) {
            return Ok(None);
        }
        let reason = format!(
            "the trust phase drops CA {} from a bundle: waiting until {} so that no consumer still presents a leaf it signed",
            dropped.short_fingerprint(),
            crate::timefmt::at_second(self.gate.ready_at)
        );
        let mut plan = self.ca_plan(ca, Action::Keep, reason.clone());
        plan.bundle = refs(&ca.bundle);
        let secrets = self.leaves.iter().map(|l| l.keep("waiting")).collect();
        Ok(Some((plan, secrets, self.gate.phase(reason, None, false))))
    }

    /// Every valid CA that one of `plans` removes from the bundle its Secret holds now.
    fn drops_trust(&self, plans: &[SecretPlan]) -> Vec<Cert> {
        self.leaves
            .iter()
            .zip(plans)
            .filter_map(|(l, p)| {
                let leaf = l.ok()?;
                let Some(Content::Bundle(after)) = p.write.as_ref()?.data.get(&l.cfg.layout.bundle)
                else {
                    return None;
                };
                Some(
                    leaf.bundle
                        .iter()
                        .filter(|c| {
                            c.is_ca
                                && !c.is_expired_at(self.now)
                                && !after.contains(&CaRef::Cert((*c).clone()))
                        })
                        .cloned()
                        .collect::<Vec<_>>(),
                )
            })
            .flatten()
            .collect()
    }

    /// The CA `l`'s bundle keeps beside `target` instead of the common one (`exclude`): the
    /// CA that signed its stored leaf, when it is a valid CA its own bundle trusts (a second
    /// writer's, which replicas of `l`'s consumer may still present); or, when the target
    /// signed it already, the valid CA its bundle holds now (peers may present leaves of it:
    /// a bundle never swaps one CA for another).
    fn own_prior(
        &self,
        ca: &CaSecret,
        l: &LeafIn,
        exclude: &[&Cert],
        target: Option<&Cert>,
    ) -> Option<Cert> {
        let leaf = l.ok()?;
        let valid = |c: &Cert| c.is_ca && !c.is_expired_at(self.now);
        let excluded = |c: &Cert| exclude.contains(&c) || target == Some(c);
        let signer = self.signer_of(ca, &leaf.cert)?;
        if !excluded(&signer) && valid(&signer) && leaf.bundle.contains(&signer) {
            return Some(signer);
        }
        if target == Some(&signer) {
            return leaf
                .bundle
                .iter()
                .find(|c| valid(c) && !excluded(c))
                .cloned();
        }
        None
    }

    /// Every CA that bundles hold now, the CA Secret's first.
    fn bundle_cas(&self, ca: &CaSecret) -> Vec<Cert> {
        let mut out: Vec<Cert> = Vec::new();
        for c in ca
            .bundle
            .iter()
            .chain(self.present_leaves().flat_map(|l| l.bundle.iter()))
        {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }

    /// Why missing Secret `l` is not created with `bundle` in this step: a stored bundle holds a
    /// valid CA that `bundle` lacks (another writer's CA a Secret keeps beside the common one
    /// until the cleanup, or the one its own leaf needs), so peers may still present leaves of
    /// it. With two such CAs beside the new one, no bundle of two trusts them all: the Secret
    /// is created once no peer presents them any more (the cleanup, after the gate). Its
    /// consumers cannot start without it, so they would load that bundle at once.
    fn held_back(&self, l: &LeafIn, bundle: &[Cert]) -> Option<Cert> {
        if !matches!(l.parsed, Parsed::Missing) {
            return None;
        }
        self.present_leaves()
            .flat_map(|p| p.bundle.iter())
            .find(|c| c.is_ca && !c.is_expired_at(self.now) && !bundle.contains(c))
            .cloned()
    }

    fn decide(&self, ca: CaSecret) -> Result<Decision, Invalid> {
        if let Some(broken) = &ca.broken {
            // An unusable CA Secret (replaced with --force) is no reason to break peers: the
            // CA the held leaves share is adopted without its key and a new CA is staged
            // against it, as when the CA Secret is missing. Without such a CA, one write.
            if self.options.strategy == Strategy::Staged
                && let Some(adopted) = self.infer_adopted()
            {
                let reason =
                    format!("the CA Secret is unusable ({broken}); replaced because of --force");
                let ca = CaSecret {
                    version: ca.version.clone(),
                    active: Some(adopted.clone()),
                    ..CaSecret::default()
                };
                return self.start(&ca, &adopted, reason);
            }
            return Ok(self.one_write(&ca, None));
        }
        // Trust is what the Secrets hold, whoever wrote them: the CA Secret's CAs as consumers
        // may have them.
        let mut ca = self.held(ca);
        if let Some(pending) = ca.pending.clone() {
            return self.resume(&ca, pending);
        }
        if let (Some(derived), Some(active)) = (&ca.derived, &ca.active)
            && !ca.agreed
            && !active.cert().is_expired_at(self.now)
            && self.options.strategy == Strategy::Staged
        {
            // certgen's own CA is not usable as the next one (due, expired, or --overwrite):
            // a new CA is staged from the trust the Secrets hold.
            let reason = derived.clone();
            return self.start(&ca, &active.clone(), reason);
        }
        // Without a CA Secret, the leaves may come from another tool (Envoy Gateway's own
        // certgen): the CA that signed them is adopted as the active trust, without its key.
        if ca.active.is_none() {
            ca.active = self.infer_adopted();
        }
        let Some(active) = ca.active.clone() else {
            return Ok(self.one_write(&ca, None));
        };
        if active.cert().is_expired_at(self.now) {
            // Staging protects peers that trust the active CA; an expired one protects nobody.
            return Ok(self.one_write(&ca, Some(&active)));
        }
        let rotate = self.rotation_reason(&active);
        match (rotate, self.options.strategy) {
            (Some(reason), Strategy::Immediate) => {
                let mut d = self.one_write(&ca, Some(&active));
                d.0.reason = reason;
                Ok(d)
            }
            (Some(reason), Strategy::Staged) => {
                self.stageable(&active)?;
                self.start(&ca, &active, reason)
            }
            (None, _) => Ok(self.maintain(&ca, &active)),
        }
    }

    /// A staged move to a new CA from `active` needs every bundle to hold the new CA beside the
    /// one CA that signs the leaves consumers present. When two other tools' CAs (whose keys
    /// certgen does not hold) each sign held leaves, no bundle of two CAs can: refused, unless
    /// `--force` accepts that peers presenting one of them are rejected until they reload.
    fn stageable(&self, active: &Active) -> Result<(), Invalid> {
        let Active::Adopted(adopted) = active else {
            return Ok(());
        };
        let other = self.present_leaves().find_map(|l| {
            l.bundle
                .iter()
                .find(|c| *c != adopted && c.signed(&l.cert) && !c.is_expired_at(self.now))
        });
        match other {
            Some(other) if !self.options.force => Err(Invalid {
                object: (self.ca_name).to_string(),
                problem: format!(
                    "the TLS Secrets hold leaves of two CAs certgen has no key for ({} and {}), and a new CA is needed; a bundle holds at most two CAs, so the new one cannot be trusted beside both",
                    adopted.short_fingerprint(),
                    other.short_fingerprint()
                ),
                fix: "nothing was written; restore certgen's CA Secret (it holds the key), or run with --force to stage a new CA beside the CA that signs most leaves (peers presenting the other one are rejected until their Secret is renewed)".into(),
            }),
            _ => Ok(()),
        }
    }

    /// The CA that signed the leaves found without a CA Secret, if it is in their bundles and
    /// still valid.
    fn infer_adopted(&self) -> Option<Active> {
        let leaves: Vec<Cert> = self.present_leaves().map(|l| l.cert.clone()).collect();
        let candidates: Vec<Cert> = self
            .present_leaves()
            .flat_map(|l| l.bundle.iter().cloned())
            .collect();
        choose_prior_ca(&candidates, &leaves, self.now).map(Active::Adopted)
    }

    fn rotation_reason(&self, active: &Active) -> Option<String> {
        if self.options.overwrite {
            return Some("--overwrite: rotating the CA".into());
        }
        // (A CA not valid yet is no reason to rotate: nothing is signed with it before it
        // is, and the clock that made it so may be the store's, stepped back.)
        if self.now >= active.cert().not_before
            && let Some(d) = due(active.cert(), self.config.ca.renew_before, self.now)
        {
            return Some(format!("the CA {d}"));
        }
        if let Active::Adopted(cert) = active {
            // Without the key nothing can be issued: any leaf to issue means moving to a
            // certgen CA, staged like any rotation. A valid leaf another CA signed that every
            // held bundle trusts (two other tools' CAs, trusted everywhere) is fine as it is.
            let trusted_everywhere = |c: &Cert| self.present_leaves().all(|l| l.bundle.contains(c));
            let fine = |l: &LeafIn| {
                l.ok().is_some_and(|leaf| {
                    leaf.bundle.iter().any(|c| {
                        c.signed(&leaf.cert) && !c.is_expired_at(self.now) && trusted_everywhere(c)
                    }) && due(&leaf.cert, l.cfg.renew_before, self.now).is_none()
                        && san_drift(&leaf.cert, l.cfg).is_none()
                })
            };
            if let Some((l, why)) = self
                .leaves
                .iter()
                .filter(|l| !fine(l))
                .find_map(|l| l.issue_reason(cert, self.now).map(|w| (l, w)))
            {
                return Some(format!(
                    "{} must be issued ({why}) and the CA that signed the existing leaves belongs to another tool: moving to a certgen CA",
                    l.cfg.name
                ));
            }
        }
        None
    }

    /// A new active CA in one write, every leaf signed by it: for a first install, the
    /// immediate strategy, and when no valid CA is left to stage a rotation against.
    fn one_write(&self, ca: &CaSecret, active: Option<&Active>) -> Decision {
        let fresh = ca.version.is_none() && self.present_leaves().next().is_none();
        // The prior CA kept trusted beside the new one: the active CA while it is valid, or
        // else the valid CA that signed the most current leaves.
        let prior = match active {
            Some(a) if !a.cert().is_expired_at(self.now) => Some(a.cert().clone()),
            _ => {
                let leaves: Vec<Cert> = self.present_leaves().map(|l| l.cert.clone()).collect();
                choose_prior_ca(&self.bundle_cas(ca), &leaves, self.now)
            }
        };
        let mut bundle = vec![CaRef::New];
        bundle.extend(prior.clone().map(CaRef::Cert));
        let (action, reason) = if fresh {
            (Action::Create, "missing".to_string())
        } else if let Some(b) = &ca.broken {
            (
                Action::Rotate,
                format!("the CA Secret is unusable ({b}); replaced because of --force"),
            )
        } else if active.is_some_and(|a| a.cert().is_expired_at(self.now)) {
            (
                Action::Rotate,
                "the CA has expired: nothing valid depends on it, so the new CA is written at once"
                    .to_string(),
            )
        } else if self.options.strategy == Strategy::Immediate {
            (Action::Rotate, "rotating the CA in one write".to_string())
        } else {
            (
                Action::Rotate,
                "no valid CA to stage a rotation against: the new CA is written at once"
                    .to_string(),
            )
        };
        let action = if ca.version.is_none() && action == Action::Rotate {
            Action::Create
        } else {
            action
        };
        let reason = match &prior {
            Some(p) if !fresh => {
                format!("{reason}; prior CA {} stays trusted", p.short_fingerprint())
            }
            _ => reason,
        };
        let why = if fresh {
            "missing"
        } else {
            "signed by the new CA"
        };
        let phase = if prior.is_some() {
            Phase::Leaves
        } else {
            Phase::Steady
        };
        self.reissue_all(ca, action, reason, Signer::New, bundle, None, why, phase)
    }

    /// The CA Secret made `signer`'s with `bundle` (any pending CA cleared), and every leaf
    /// issued by `signer` with that bundle: for `why` when it exists, because it is missing when
    /// it does not.
    #[allow(clippy::too_many_arguments)] // one decision, spelled out at each of its two callers
    fn reissue_all(
        &self,
        ca: &CaSecret,
        action: Action,
        reason: String,
        signer: Signer,
        bundle: Vec<CaRef>,
        own: Option<OwnPrior<'_>>,
        why: &str,
        phase: Phase,
    ) -> Decision {
        let mut plan = self.ca_plan(ca, action, reason);
        plan.bundle = bundle.clone();
        plan.remove = vec!["next.crt".into(), "next.key".into()];
        let secrets = self
            .leaves
            .iter()
            .map(|l| {
                let why = match l.parsed {
                    Parsed::Missing => "missing",
                    _ => why,
                };
                // A leaf another CA signed keeps that CA beside the new one until the cleanup.
                let bundle = match own.and_then(|f| f(l)) {
                    Some(o) => vec![bundle[0].clone(), CaRef::Cert(o)],
                    None => bundle.clone(),
                };
                l.issue(signer.clone(), bundle, why)
            })
            .collect();
        (plan, secrets, phase)
    }

    /// What the TLS Secrets do while `trust` is being made the bundle everywhere: bundles
    /// become `trust`, leaves stay, and anything that must be issued is signed by the active CA
    /// (never the pending one, which peers may not trust yet). `trust_certs` is `trust` when
    /// every CA in it exists already (empty while the new CA is still to be generated).
    ///
    /// A leaf signed by another valid CA than the active one (a second writer's) keeps that CA
    /// in its own bundle instead of the active one: replicas of its consumer that still present
    /// it go on trusting each other ([`Input::own_prior`]).
    fn trust_secrets(
        &self,
        ca: &CaSecret,
        active: &Active,
        trust: &[CaRef],
        trust_certs: &[Cert],
    ) -> Vec<SecretPlan> {
        let active_held = self
            .present_leaves()
            .all(|l| l.bundle.contains(active.cert()));
        self.leaves
            .iter()
            .map(|l| {
                let own = self.own_prior(ca, l, &[active.cert()], trust_certs.first());
                let (trust, trust_certs): (Vec<CaRef>, Vec<Cert>) = match own.clone() {
                    Some(o) => (
                        vec![trust[0].clone(), CaRef::Cert(o.clone())],
                        trust_certs.first().map_or(vec![], |t| vec![t.clone(), o]),
                    ),
                    None => (trust.to_vec(), trust_certs.to_vec()),
                };
                let (trust, trust_certs) = (trust.as_slice(), trust_certs.as_slice());
                let renewal = l.renewal(active.cert(), self.now);
                // The current CA signs a leaf meanwhile only when certgen holds its key and
                // every held bundle trusts it (another writer may have left bundles that do
                // not), and not over a leaf another CA signed that its own bundle keeps. A
                // leaf of another CA moves to the current one only once the gate is open: the
                // bundles may have taken the current CA just now (a CA Secret restored to a
                // trust gate: this step's own trust write), and no leaf of a CA is written
                // before a gate that follows that CA's trust write.
                // Nor while it is not valid yet (a clock stepped back since it was made):
                // what it signs would not be valid yet either.
                let moves = l.ok().is_some_and(|leaf| !active.cert().signed(&leaf.cert));
                let signer = match active {
                    Active::Keyed(k)
                        if own.is_none()
                            && active_held
                            && self.now >= k.cert.not_before
                            && (!moves || self.gate.open(self.now)) =>
                    {
                        Some(k)
                    }
                    _ => None,
                };
                match (renewal, signer, l.ok()) {
                    (Some(why), Some(key), _) => l.issue(
                        Signer::Held(key.clone()),
                        trust.to_vec(),
                        format!("{why}; signed by the current CA during the trust phase"),
                    ),
                    (Some(why), None, None) => l.keep(format!(
                        "{why}; issued by the new CA after the trust phase ({})",
                        match active {
                            Active::Adopted(_) => "the current CA's key belongs to another tool",
                            Active::Keyed(_) =>
                                "not every bundle consumers hold trusts the current CA",
                        }
                    )),
                    (_, _, Some(leaf)) if !same(&leaf.bundle, trust_certs) => l.bundle_update(
                        trust.to_vec(),
                        "trust phase: the new CA is trusted beside the current one",
                    ),
                    (_, _, Some(_)) => l.keep(match l.issue_reason(active.cert(), self.now) {
                        Some(why) => format!("{why}; renewed by the new CA after the trust phase"),
                        None => "trusts the pending CA".to_string(),
                    }),
                    (_, _, None) => l.keep("issued by the new CA after the trust phase"),
                }
            })
            .collect()
    }

    /// Starts a staged rotation: the new CA as pending, trusted beside the active one.
    fn start(&self, ca: &CaSecret, active: &Active, reason: String) -> Result<Decision, Invalid> {
        // Leaves signed by the active CA come first (their bundles keep the prior CA), and a
        // prior CA leaves the bundles only once no consumer may still present a leaf of it.
        let prior_in_use = self
            .bundle_cas(ca)
            .iter()
            .any(|c| c != active.cert() && !c.is_expired_at(self.now));
        // (From another writer's state, each Secret keeps the CA its own leaf needs beside the
        // new one instead: nothing is dropped, and nothing is signed by a CA some held bundle
        // lacks.)
        if prior_in_use && ca.derived.is_none() {
            let (plan, secrets, phase) = self.maintain(ca, active);
            // Whatever keeps the leaves from converging on the active CA (a gate, or the active
            // CA not valid yet by a clock stepped back) keeps the rotation from starting: its
            // trust step would drop the CA that still signs a held leaf.
            if plan.action.writes()
                || secrets.iter().any(|s| s.action.writes())
                || matches!(
                    phase,
                    Phase::Gate {
                        optional: false,
                        ..
                    }
                )
            {
                let phase = match phase {
                    Phase::Cleanup { .. } => Phase::Cleanup { last: false },
                    other => other,
                };
                return Ok((plan, secrets, phase));
            }
            if !self.gate.open(self.now) {
                let why = format!(
                    "{reason}; waiting until {} so that consumers present leaves of the current CA before the previous one is dropped",
                    crate::timefmt::at_second(self.gate.ready_at)
                );
                let mut plan = self.ca_plan(ca, Action::Keep, why.clone());
                plan.bundle = refs(&ca.bundle);
                let secrets = self.leaves.iter().map(|l| l.keep("waiting")).collect();
                return Ok((plan, secrets, self.gate.phase(why, None, false)));
            }
        }
        let trust = vec![CaRef::New, CaRef::Cert(active.cert().clone())];
        let mut plan = self.ca_plan(ca, Action::Trust, format!("{reason} (staged: trust phase)"));
        plan.bundle = trust.clone();
        // The certificates a leaf's bundle must equal are not known before the new CA exists:
        // every leaf's bundle changes in this step.
        let secrets = self.trust_secrets(ca, active, &trust, &[]);
        if ca.derived.is_some()
            && let Some(wait) = self.dropping(ca, &secrets, "a new CA")?
        {
            return Ok(wait);
        }
        Ok((plan, secrets, Phase::Trust))
    }

    /// Finishes a rotation whose pending CA is stored: completes the trust phase, waits out
    /// the gate, or promotes the pending CA and has it sign every leaf.
    fn resume(&self, ca: &CaSecret, pending: CaKey) -> Result<Decision, Invalid> {
        let active = ca
            .active
            .clone()
            .filter(|a| !a.cert().is_expired_at(self.now));
        let Some(active) = active else {
            // The current CA has expired (or is gone): staging protects nobody; promote now.
            return Ok(self.promote(
                ca,
                pending,
                "the current CA has expired: the pending CA becomes active at once".into(),
                false,
            ));
        };
        let trust_certs = vec![pending.cert.clone(), active.cert().clone()];
        let trust = refs(&trust_certs);
        let secrets = self.trust_secrets(ca, &active, &trust, &trust_certs);
        let ca_incomplete = !same(&ca.bundle, &trust_certs) || ca.derived.is_some();
        // (Another writer's state, or a cleanup left pending.)
        let pending_name = format!("the pending CA {}", pending.cert.short_fingerprint());
        if let Some(wait) = self.dropping(ca, &secrets, &pending_name)? {
            return Ok(wait);
        }
        if ca_incomplete || secrets.iter().any(|s| s.action.writes()) {
            let (action, reason) = if ca_incomplete {
                (
                    Action::UpdateBundle,
                    "trust phase: the pending CA is trusted beside the current one",
                )
            } else {
                (Action::Keep, "trust phase resumed")
            };
            let reason = match &ca.derived {
                Some(found) => format!("{found}; {reason}"),
                None => format!("{reason}; pending CA {}", pending.cert.short_fingerprint()),
            };
            let mut plan = self.ca_plan(ca, action, reason);
            plan.bundle = trust;
            return Ok((plan, secrets, Phase::Trust));
        }
        // Every bundle trusts the pending CA. Leaves wait until consumers have loaded that, and
        // until the pending CA is valid (a writer's clock may run ahead of this one's).
        let fp = pending.cert.fingerprint();
        let confirmed = self.known.trust_confirmed == Some(fp);
        let valid_from = pending.cert.not_before;
        let open = (self.gate.open(self.now) || confirmed) && self.now >= valid_from;
        if !open {
            let ready_at = if self.gate.open(self.now) || confirmed {
                valid_from
            } else {
                self.gate.ready_at.max(valid_from)
            };
            let reason = format!(
                "every bundle trusts the pending CA {}; leaves wait until consumers have loaded it (at the latest {})",
                pending.cert.short_fingerprint(),
                crate::timefmt::at_second(ready_at)
            );
            let mut plan = self.ca_plan(ca, Action::Keep, reason.clone());
            plan.bundle = trust;
            let phase = Phase::Gate {
                ready_at,
                reason,
                pending: Some(fp),
                state: self.gate.state,
                optional: false,
            };
            return Ok((plan, secrets, phase));
        }
        Ok(self.promote(
            ca,
            pending.clone(),
            format!(
                "leaves phase: the pending CA {} becomes active",
                pending.cert.short_fingerprint()
            ),
            true,
        ))
    }

    fn promote(
        &self,
        ca: &CaSecret,
        pending: CaKey,
        reason: String,
        keep_active: bool,
    ) -> Decision {
        let mut bundle = vec![pending.cert.clone()];
        if keep_active && let Some(a) = &ca.active {
            bundle.push(a.cert().clone());
        }
        let phase = if keep_active {
            Phase::Leaves
        } else {
            Phase::Steady
        };
        let exclude: Vec<&Cert> = bundle.iter().skip(1).collect();
        let own = |l: &LeafIn| {
            keep_active
                .then(|| self.own_prior(ca, l, &exclude, Some(&pending.cert)))
                .flatten()
        };
        let (plan, mut secrets, phase) = self.reissue_all(
            ca,
            Action::Promote,
            reason,
            Signer::Held(pending.clone()),
            refs(&bundle),
            Some(&own),
            "leaves phase: signed by the new CA",
            phase,
        );
        if keep_active {
            for (l, s) in self.leaves.iter().zip(secrets.iter_mut()) {
                if let Some(z) = self.held_back(l, &bundle) {
                    *s = l.keep(held_back_reason(&z));
                }
            }
        }
        (plan, secrets, phase)
    }

    /// No rotation: renew what is due with the active CA, keep bundles in line, and drop a
    /// prior CA once no consumer may still present a leaf of it.
    fn maintain(&self, ca: &CaSecret, active: &Active) -> Decision {
        let Active::Keyed(key) = active else {
            // Adopted, nothing due (or it would rotate): another tool's Secrets stay as they are.
            let mut plan = self.ca_plan(
                ca,
                Action::Keep,
                "not created: the existing leaves are valid and were issued by another tool's CA; a certgen CA is created, staged, when a leaf or that CA falls due",
            );
            plan.bundle = refs(&ca.bundle);
            let secrets = self
                .leaves
                .iter()
                .map(|l| {
                    let until = l
                        .not_after()
                        .map(|t| t.date().to_string())
                        .unwrap_or_default();
                    l.keep(format!("valid until {until} (another tool's CA)"))
                })
                .collect();
            return (plan, secrets, Phase::Steady);
        };
        let active_cert = active.cert();
        // The prior CA: the valid CA other than the active one that bundles still hold.
        let prior = self
            .bundle_cas(ca)
            .into_iter()
            .find(|c| c != active_cert && c.is_ca && !c.is_expired_at(self.now));
        let with_prior: Vec<Cert> = std::iter::once(active_cert.clone())
            .chain(prior.clone())
            .collect();
        let alone = vec![active_cert.clone()];
        let renewals: Vec<Option<String>> = self
            .leaves
            .iter()
            .map(|l| l.renewal(active_cert, self.now))
            .collect();
        // (A missing Secret is created with the cleanup's bundle, or at once.)
        let all_from_active = self.leaves.iter().all(|l| {
            matches!(l.parsed, Parsed::Missing)
                || l.ok().is_some_and(|leaf| active_cert.signed(&leaf.cert))
        });
        // The prior CA goes once every leaf is the active CA's and consumers have loaded them.
        // A cleanup that a bundle already shows (the CA Secret's is written first) passed that
        // gate when it started, and only bundles were written since: it continues without
        // waiting again, and never puts the prior CA back.
        let shows_cleanup = |bundle: &[Cert]| {
            !bundle.is_empty()
                && bundle
                    .iter()
                    .all(|c| c == active_cert || !c.is_ca || c.is_expired_at(self.now))
        };
        let cleanup_started = prior.is_some()
            && (shows_cleanup(&ca.bundle)
                || self.present_leaves().any(|l| shows_cleanup(&l.bundle)));
        let drop_prior =
            prior.is_some() && all_from_active && (cleanup_started || self.gate.open(self.now));
        let target = if prior.is_none() || drop_prior {
            &alone
        } else {
            &with_prior
        };
        let target_refs = refs(target);
        let mut secrets = Vec::new();
        let mut waits_for_cleanup = false;
        let mut waits_for_ca = false;
        for (l, why) in self.leaves.iter().zip(&renewals) {
            if !drop_prior && let Some(z) = self.held_back(l, target) {
                waits_for_cleanup = true;
                secrets.push(l.keep(held_back_reason(&z)));
                continue;
            }
            // Until the cleanup, a bundle keeps the prior CA it holds itself (a second writer
            // may have left different ones in different Secrets), else the common prior.
            let own: Vec<Cert>;
            let (target, target_refs) = match l.ok().and_then(|leaf| {
                leaf.bundle
                    .iter()
                    .find(|c| *c != active_cert && c.is_ca && !c.is_expired_at(self.now))
            }) {
                Some(z) if !drop_prior && prior.as_ref() != Some(z) => {
                    own = vec![active_cert.clone(), z.clone()];
                    (&own, refs(&own))
                }
                _ => (target, target_refs.clone()),
            };
            // The active CA signs nothing before it is valid: what it signed would not be.
            let ca_valid_at = active_cert.not_before;
            waits_for_ca |= why.is_some() && self.now < ca_valid_at;
            let why = why.as_ref().filter(|_| self.now >= ca_valid_at);
            secrets.push(match (why, l.ok()) {
                (Some(why), _) => l.issue(
                    Signer::Held(key.clone()),
                    target_refs.clone(),
                    why.clone(),
                ),
                (None, Some(leaf)) if !same(&leaf.bundle, target) => l.bundle_update(
                    target_refs.clone(),
                    if drop_prior {
                        format!(
                            "cleanup: every leaf is signed by the current CA; the previous CA {} is no longer trusted",
                            prior.as_ref().map(Cert::short_fingerprint).unwrap_or_default()
                        )
                    } else {
                        "ca.crt differs from the CA's trust bundle".to_string()
                    },
                ),
                (None, Some(leaf)) => l.keep(match l.issue_reason(active_cert, self.now) {
                    Some(why) => format!("{why}; renewed by the next CA (the current one expires first)"),
                    None => format!("valid until {}", leaf.cert.not_after.date()),
                }),
                // (Missing or broken while the CA is not valid yet.)
                (None, None) => l.keep(format!(
                    "issued once the CA is valid, at {}",
                    crate::timefmt::at_second(ca_valid_at)
                )),
            });
        }
        let ca_action = if same(&ca.bundle, target) && !ca.drop_pending {
            (
                Action::Keep,
                format!("valid until {}", active_cert.not_after.date()),
            )
        } else if drop_prior {
            (
                Action::UpdateBundle,
                format!(
                    "cleanup: the previous CA {} is no longer trusted",
                    prior
                        .as_ref()
                        .map(Cert::short_fingerprint)
                        .unwrap_or_default()
                ),
            )
        } else if let (true, Some(found)) = (ca.agreed, &ca.derived) {
            (Action::UpdateBundle, found.clone())
        } else {
            (
                Action::UpdateBundle,
                "trust bundle out of date (expired or extra CAs dropped)".to_string(),
            )
        };
        let mut plan = self.ca_plan(ca, ca_action.0, ca_action.1);
        plan.bundle = target_refs;
        if ca.drop_pending {
            plan.remove = vec!["next.crt".into(), "next.key".into()];
        }
        let writes = plan.action.writes() || secrets.iter().any(|s| s.action.writes());
        let phase = match (&prior, writes) {
            // Leaves wait for the CA to be valid (a clock stepped back since it was made).
            (_, false) if waits_for_ca => {
                let valid_at = active_cert.not_before;
                let reason = format!(
                    "leaves are issued once the CA {} is valid, at {}",
                    active_cert.short_fingerprint(),
                    crate::timefmt::at_second(valid_at)
                );
                Phase::Gate {
                    ready_at: valid_at,
                    reason,
                    pending: None,
                    state: self.gate.state,
                    optional: false,
                }
            }
            (None, _) => Phase::Steady,
            (Some(_), _) if drop_prior => Phase::Cleanup { last: true },
            (Some(_), true) => Phase::Leaves,
            (Some(p), false) => {
                let reason = format!(
                    "every leaf is signed by the current CA; the previous CA {} is dropped after {}, once consumers present the new leaves",
                    p.short_fingerprint(),
                    crate::timefmt::at_second(self.gate.ready_at)
                );
                plan.reason = reason.clone();
                // (Not left to the next run while a Secret is missing.)
                self.gate.phase(reason, None, !waits_for_cleanup)
            }
        };
        (plan, secrets, phase)
    }
}

fn held_back_reason(z: &Cert) -> String {
    format!(
        "missing; created with the cleanup, once no peer presents a leaf of CA {} (another writer's: a bundle of two cannot trust it beside the others)",
        z.short_fingerprint()
    )
}

fn hmac_plans(
    judge: &Judge<'_>,
    config: &Config,
    observed: &Snapshot,
    options: Options,
) -> Result<Vec<SecretPlan>, Invalid> {
    config
        .hmac
        .iter()
        .map(|h| plan_hmac(judge, h, observed.get(&h.name), options))
        .collect()
}

fn plan_hmac(
    judge: &Judge<'_>,
    h: &HmacSecret,
    observed: &Observed,
    options: Options,
) -> Result<SecretPlan, Invalid> {
    let version = observed.present().map(|s| s.version.clone());
    let (action, reason) = match observed.present() {
        None => (Action::Create, "missing".to_string()),
        Some(s) => {
            if !judge.hmac(s, &h.key)? {
                if !options.force {
                    return Err(judge.invalid(
                        &h.name,
                        format!("key {:?} is missing or empty", h.key),
                        "nothing was written; delete the Secret to have it recreated, or run with --force",
                    ));
                }
                (
                    Action::Renew,
                    format!("key {:?} missing; replaced because of --force", h.key),
                )
            } else if options.rotate_hmac {
                (Action::Renew, "--rotate-hmac".to_string())
            } else if let Some(short) = crate::observe::parse::hmac_short(s, &h.key, h.bytes) {
                if !options.force {
                    return Err(judge.invalid(
                        &h.name,
                        short,
                        "nothing was written; delete the Secret to have it recreated, or run with --force (or --rotate-hmac) to replace it",
                    ));
                }
                (
                    Action::Renew,
                    format!("{short}; replaced because of --force"),
                )
            } else {
                (Action::Keep, "present".to_string())
            }
        }
    };
    Ok(SecretPlan {
        name: h.name.clone(),
        kind: Kind::Hmac,
        action,
        reason,
        not_after: None,
        write: action
            .writes()
            .then(|| writes::hmac(&version, &h.key, h.bytes)),
    })
}

#[cfg(test)]
mod tests;
