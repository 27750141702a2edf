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
//!
//! # Where things are
//!
//! The plan's data is in `plan/model.rs`, the rules of one leaf (due, SAN drift, what a
//! verifier refuses) in `plan/rules.rs`, which `check` and `create` share. The phases of
//! docs/rotation.md each have a file of `impl Input` blocks: `plan/trust.rs` (start a
//! rotation, the trust step), `plan/leaves.rs` (resume it: the trust gate, then the pending CA
//! promoted and every leaf issued), `plan/cleanup.rs` (no rotation: renewals, bundles kept in
//! line, the prior CA dropped after the gate). The trust the held Secrets agree on is
//! `plan/held.rs`; the stored state judged is `plan/stored.rs`; what is written, key by key,
//! `plan/writes.rs` and `plan/draft.rs`; HMAC Secrets `plan/hmac.rs`. This file keeps
//! [`plan`], the decision between phases (`Input::decide`) and the helpers they share.

use time::OffsetDateTime;

use crate::config::{Config, Strategy};
use crate::observe::Snapshot;
use crate::pki::{Cert, choose_prior_ca};

mod cleanup;
mod draft;
mod handed;
mod held;
mod hmac;
mod leaves;
mod lost;
mod model;
pub mod rules;
mod stored;
mod trust;
mod valid;
mod writes;

use self::draft::CaDraft;
pub use self::lost::{LostCa, find as lost_ca};
pub use self::model::{
    Action, Barrier, CaPlan, CaRef, CasAfter, Emergency, Hold, InjectedTarget, Invalid, Kind,
    Known, Options, Phase, Plan, SecretPlan, Signer, Waiting, WindowNote,
};
use self::rules::{LeafIn, after};
pub(crate) use self::stored::pending as pending_ca;
use self::stored::{Active, CaSecret, Judge, Leaf, Parsed};
pub use self::valid::{Broken, Held, all_usages, ca_refusal, step_check};
pub use self::writes::{CA_ANNOTATION, Content, Issue, Write};

/// For a leaf another CA signed, that CA, kept in the leaf's own bundle until the cleanup.
type OwnPrior<'a> = &'a dyn Fn(&LeafIn) -> Option<Cert>;

/// Why a resumed gate ([`Gate::resumed`]) gives no time, for people.
const RESUMED: &str =
    "the last write came before this run first looked, so its stored timer proves nothing";

/// The gate every step that relies on consumers having loaded the last writes waits for.
struct Gate {
    /// When the last TLS Secret write is older than the propagation delay.
    ready_at: OffsetDateTime,
    /// The stored state it was computed for.
    state: [u8; 32],
    /// This run already waited for exactly this state.
    waited: bool,
    /// The newest write is older than this run's first look, and this run can observe the pods
    /// ([`Known::observing_since`]): the timer alone does not open the gate.
    resumed: bool,
}

impl Gate {
    fn open(&self, now: OffsetDateTime) -> bool {
        self.waited || (now >= self.ready_at && !self.resumed)
    }

    /// Whether the time to give people for a gate that opens at `at` is not a timer's but this
    /// run's evidence: the gate is shut only because it was resumed ([`Gate::resumed`]), its
    /// stored timer and `at` passed (see [`RESUMED`]).
    fn on_evidence(&self, now: OffsetDateTime, at: OffsetDateTime) -> bool {
        !self.open(now) && now >= self.ready_at && at <= now
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
    let mut plan = plan_writes(config, observed, now, options, known, object)?;
    // Each write of a Secret another manager had overwritten records that undo on it, so
    // that the next undo by the same manager is seen as a fight (issue 45).
    let history = |name: &str, w: &mut Option<Write>| {
        if let Some(w) = w.as_mut()
            && let Some(v) = crate::attribution::history_for_write(config, observed, name, now)
        {
            w.annotations
                .insert(crate::observe::writers::HISTORY.to_string(), v);
        }
    };
    history(&plan.ca.name, &mut plan.ca.write);
    for s in &mut plan.secrets {
        history(&s.name, &mut s.write);
    }
    Ok(plan)
}

/// Local mode: a Secret kept as it is still gets back the files consumers read (a repair
/// that relinks them), the CA's and each leaf's.
fn relink_kept(observed: &Snapshot, ca_plan: &mut CaPlan, all: &mut [SecretPlan]) {
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
}

/// The leaves step of a rotation under way: a held leaf not yet signed by certgen's active
/// CA, in a bundle that already trusts it (a run stopped after the promotion).
fn leaves_under_way(ca: &CaSecret, leaves: &[LeafIn<'_>]) -> bool {
    match &ca.active {
        Some(Active::Keyed(k)) => leaves
            .iter()
            .filter_map(LeafIn::ok)
            .any(|l| !k.cert.signed(&l.cert) && l.bundle.contains(&k.cert)),
        _ => false,
    }
}

impl Gate {
    /// The gate before the next step: it counts from the newest write to any TLS Secret (a
    /// write time in the future, from a clock that went back, counts as now), and a write
    /// counts as no older than the writer's clock says either (a step of one clock alone
    /// never shortens a gate).
    fn of(
        config: &Config,
        observed: &Snapshot,
        now: OffsetDateTime,
        options: Options,
        known: &Known,
    ) -> Gate {
        let state = observed.digest();
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
        let ready_at = last_write.map_or(now, |w| after(w, options.propagation_delay));
        Gate {
            ready_at: known.unobserved_until.map_or(ready_at, |u| ready_at.max(u)),
            state,
            waited: known.gate_waited == Some(state)
                && known.other_written_at.is_none_or(|w| w <= now)
                && known.unobserved_until.is_none_or(|u| u <= now),
            resumed: known
                .observing_since
                .zip(last_write)
                .is_some_and(|(since, w)| w <= since),
        }
    }
}

/// [`plan`], without the record of undos.
fn plan_writes(
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
        secrets.extend(hmac::plans(&judge, config, observed, options)?);
        return Ok(Plan {
            ca,
            secrets,
            phase: Phase::Steady,
            under_way: false,
            window: WindowNote::default(),
        });
    }
    let ca_name = config.ca.secret_name.as_str();
    let ca = judge.ca(ca_name, observed.ca(), &config.ca.layout)?;
    let mut leaves = Vec::new();
    for t in &config.tls {
        let o = observed.get(&t.name);
        leaves.push(LeafIn {
            cfg: t,
            parsed: judge.leaf(&t.name, o, &t.layout)?,
            version: o.present().map(|s| s.version.clone()),
        });
    }
    let hmac = hmac::plans(&judge, config, observed, options)?;

    let gate = Gate::of(config, observed, now, options, &known);
    let held = leaves.iter().filter_map(|l| {
        l.ok()
            .map(|leaf| (l.cfg.name.as_str(), &leaf.cert, leaf.bundle.as_slice()))
    });
    let lost_ca = lost::find(observed, held, now);
    let leaves_under_way = leaves_under_way(&ca, &leaves);
    // Renewal windows: only outside every window do they hold anything.
    let window = std::cell::RefCell::new(WindowNote {
        outside: match config.renewal.position(now) {
            crate::window::Position::Outside { next } => Some(next),
            _ => None,
        },
        ..WindowNote::default()
    });
    let input = Input {
        config,
        now,
        window: &window,
        options,
        known,
        ca_name,
        leaves: &leaves,
        gate: &gate,
        lost: lost_ca.as_ref(),
        object,
        leaves_under_way,
    };
    let (ca_plan, secrets, phase) = input.decide(ca)?;
    let under_way = ca_plan.pending.is_some() || input.leaves_under_way;
    let mut ca_plan = ca_plan.finish(config);
    let mut all = secrets;
    all.extend(hmac);
    relink_kept(observed, &mut ca_plan, &mut all);
    Ok(Plan {
        ca: ca_plan,
        secrets: all,
        phase,
        under_way,
        window: window.into_inner(),
    })
}

struct Input<'a> {
    config: &'a Config,
    now: OffsetDateTime,
    /// What the renewal windows hold back or let through in this step (`Input::waits_for_window`).
    window: &'a std::cell::RefCell<WindowNote>,
    options: Options,
    known: Known,
    ca_name: &'a str,
    leaves: &'a [LeafIn<'a>],
    gate: &'a Gate,
    /// certgen's own CA Secret is gone while leaves it signed remain (`plan/lost.rs`).
    lost: Option<&'a LostCa>,
    /// Names a Secret for messages.
    object: &'a dyn Fn(&str) -> String,
    /// The leaves step of a rotation is under way (see [`Plan::under_way`]): finished, and
    /// `--overwrite` asks for nothing more.
    leaves_under_way: bool,
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

    /// Whether a routine rotation of Secret `secret` (`what`, due because `due`), whose
    /// certificate expires at `not_after`, waits for the next renewal window: only outside
    /// every window, and only when it still has the configured margin to live once the next
    /// window opens. Either way the decision is recorded for the report, the Events and
    /// `check` (an emergency says why it did not wait).
    fn waits_for_window(
        &self,
        secret: &str,
        what: &str,
        due: &str,
        not_after: OffsetDateTime,
    ) -> bool {
        let mut note = self.window.borrow_mut();
        let Some(next) = note.outside else {
            return false;
        };
        let windows = &self.config.renewal;
        if windows.can_wait(next.map(|(s, _)| s), not_after) {
            note.waiting.push(Waiting {
                secret: secret.to_string(),
                what: what.to_string(),
                due: due.to_string(),
                not_after,
            });
            return true;
        }
        let when = match next {
            Some((s, _)) => format!(
                "the next renewal window opens at {}",
                crate::timefmt::rfc3339(s)
            ),
            None => "no renewal window opens again".to_string(),
        };
        note.emergency.push(Emergency {
            secret: secret.to_string(),
            why: format!(
                "{what} starts outside the renewal windows because it cannot wait: it {due} (at {}), and {when}, within the margin {} of that expiry",
                crate::timefmt::rfc3339(not_after),
                crate::timefmt::HumanDuration(windows.margin)
            ),
        });
        false
    }

    fn present_leaves(&self) -> impl Iterator<Item = &Leaf> {
        self.leaves.iter().filter_map(LeafIn::ok)
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
                if let Some(first) = self.cleanup_before_trust(&ca, &adopted, &reason) {
                    return Ok(first);
                }
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
        let mut rotate = self.rotation_reason(&active);
        if let Some(lost) = self.lost {
            // Never kept as "another tool's CA": certgen's own key is lost. A rotation that
            // is due anyway (a leaf to issue, or --overwrite) moves to a new CA, staged; with
            // nothing due a plain run refuses, so that a person chooses between the backup
            // and a new CA.
            let Some(reason) = rotate else {
                return Err(Invalid {
                    object: (self.object)(self.ca_name),
                    problem: lost.problem(),
                    fix: lost.fix(&(self.object)(self.ca_name)),
                });
            };
            rotate = Some(format!(
                "certgen's CA Secret is gone with the key of CA {}; {reason}",
                lost.ca.short_fingerprint()
            ));
        }
        match (rotate, self.options.strategy) {
            (Some(reason), Strategy::Immediate) => {
                let mut d = self.one_write(&ca, Some(&active));
                d.0.reason = reason;
                Ok(d)
            }
            (Some(reason), Strategy::Staged) => {
                self.stageable(&active)?;
                if let Some(first) = self.cleanup_before_trust(&ca, &active, &reason) {
                    return Ok(first);
                }
                self.start(&ca, &active, reason)
            }
            (None, _) => Ok(self.maintain(&ca, &active)),
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
}

pub(super) fn held_back_reason(z: &Cert) -> String {
    format!(
        "missing; created with the cleanup, once no peer presents a leaf of CA {} (another writer's: a bundle of two cannot trust it beside the others)",
        z.short_fingerprint()
    )
}

#[cfg(test)]
mod tests;
