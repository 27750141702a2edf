//! No rotation in progress: leaves renewed by the active CA when due, bundles kept in line,
//! and the cleanup: the prior CA dropped from every bundle once every leaf is the active CA's
//! and the leaves -> cleanup gate has opened.

use super::rules::{refs, same};
use super::stored::{Active, CaSecret, Parsed};
use super::{Action, Decision, Input, Phase, SecretPlan, Signer};
use crate::pki::{CaKey, Cert};

impl Input<'_> {
    /// No rotation: renew what is due with the active CA, keep bundles in line, and drop a
    /// prior CA once no consumer may still present a leaf of it. In three parts: where the
    /// bundles converge ([`Input::converge`]), each leaf's plan ([`Input::maintain_leaves`]),
    /// and the CA Secret's with the phase it leaves ([`Input::maintain_ca`]).
    pub(super) fn maintain(&self, ca: &CaSecret, active: &Active) -> Decision {
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
        let target = self.converge(ca, &key.cert);
        let leaves = self.maintain_leaves(key, &target);
        self.maintain_ca(ca, &key.cert, &target, leaves)
    }

    /// Where the bundles converge without a rotation: the active CA alone, or beside the prior
    /// CA until the cleanup may drop it.
    fn converge(&self, ca: &CaSecret, active_cert: &Cert) -> Target {
        // The prior CA: the valid CA other than the active one that bundles still hold.
        let prior = self
            .bundle_cas(ca)
            .into_iter()
            .find(|c| c != active_cert && c.is_ca && !c.is_expired_at(self.now));
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
        let certs = match &prior {
            Some(p) if !drop_prior => vec![active_cert.clone(), p.clone()],
            _ => vec![active_cert.clone()],
        };
        Target {
            prior,
            drop_prior,
            certs,
        }
    }

    /// Each leaf's plan towards `target`: renewed by the active CA when due (once that CA is
    /// valid), its bundle updated, kept, or held back until the cleanup.
    fn maintain_leaves(&self, key: &CaKey, target: &Target) -> MaintainedLeaves {
        let active_cert = &key.cert;
        let Target {
            prior, drop_prior, ..
        } = target;
        let drop_prior = *drop_prior;
        let target_refs = refs(&target.certs);
        let mut out = MaintainedLeaves::default();
        for l in self.leaves {
            let why = l.renewal(active_cert, self.now);
            if !drop_prior && let Some(z) = self.held_back(l, &target.certs) {
                out.waits_for_cleanup = true;
                out.secrets.push(l.keep(super::held_back_reason(&z)));
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
                _ => (&target.certs, target_refs.clone()),
            };
            // The active CA signs nothing before it is valid: what it signed would not be.
            let ca_valid_at = active_cert.not_before;
            out.waits_for_ca |= why.is_some() && self.now < ca_valid_at;
            let why = why.filter(|_| self.now >= ca_valid_at);
            // A routine renewal waits for the next renewal window, unless it cannot (its
            // bundle is still kept in line).
            let mut held = None;
            let why = match why {
                Some(why)
                    if let Some((not_after, due)) = l.routine(active_cert, self.now)
                        && self.waits_for_window(
                            &l.cfg.name,
                            "the leaf's renewal",
                            &due,
                            not_after,
                        ) =>
                {
                    let at = self.window.borrow().next_start();
                    held = Some(format!(
                        "{due}; waits for the next renewal window{}",
                        at.map(|s| format!(" at {}", crate::timefmt::rfc3339(s)))
                            .unwrap_or_default()
                    ));
                    let _ = why;
                    None
                }
                other => other,
            };
            out.secrets.push(match (why, l.ok()) {
                (Some(why), _) => l.issue(Signer::Held(key.clone()), target_refs, why),
                (None, Some(leaf)) if !same(&leaf.bundle, target) => l.bundle_update(
                    target_refs,
                    if drop_prior {
                        format!(
                            "cleanup: every leaf is signed by the current CA; the previous CA {} is no longer trusted",
                            prior.as_ref().map(Cert::short_fingerprint).unwrap_or_default()
                        )
                    } else {
                        "ca.crt differs from the CA's trust bundle".to_string()
                    },
                ),
                (None, Some(leaf)) => l.keep(match (held, l.issue_reason(active_cert, self.now)) {
                    (Some(held), _) => held,
                    (None, Some(why)) => format!("{why}; renewed by the next CA (the current one expires first)"),
                    (None, None) => format!("valid until {}", leaf.cert.not_after.date()),
                }),
                // (Missing or broken while the CA is not valid yet.)
                (None, None) => l.keep(format!(
                    "issued once the CA is valid, at {}",
                    crate::timefmt::at_second(ca_valid_at)
                )),
            });
        }
        out
    }

    /// The CA Secret's plan towards `target`, and the phase the step leaves: steady, leaves
    /// still being written, the cleanup, or the gate before it.
    fn maintain_ca(
        &self,
        ca: &CaSecret,
        active_cert: &Cert,
        target: &Target,
        leaves: MaintainedLeaves,
    ) -> Decision {
        let Target {
            prior, drop_prior, ..
        } = target;
        let drop_prior = *drop_prior;
        let MaintainedLeaves {
            secrets,
            waits_for_cleanup,
            waits_for_ca,
        } = leaves;
        let ca_action = if same(&ca.bundle, &target.certs) && !ca.drop_pending {
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
        } else if ca.bundle.is_empty() {
            // Another tool's CA Secret (Cilium's `cilium-ca`) holds the CA and its key only.
            (
                Action::UpdateBundle,
                "adopting the CA as it is: recording its trust bundle".to_string(),
            )
        } else {
            (
                Action::UpdateBundle,
                "trust bundle out of date (expired or extra CAs dropped)".to_string(),
            )
        };
        let mut plan = self.ca_plan(ca, ca_action.0, ca_action.1);
        plan.bundle = refs(&target.certs);
        if ca.drop_pending {
            plan.remove = vec!["next.crt".into(), "next.key".into()];
        }
        let writes = plan.action.writes() || secrets.iter().any(|s| s.action.writes());
        let phase = match (prior, writes) {
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
                let fp = p.short_fingerprint();
                let reason = if self.gate.on_evidence(self.now, self.gate.ready_at) {
                    format!(
                        "every leaf is signed by the current CA; the previous CA {fp} is dropped once this run has seen consumers present the new leaves ({})",
                        super::RESUMED
                    )
                } else {
                    format!(
                        "every leaf is signed by the current CA; the previous CA {fp} is dropped after {}, once consumers present the new leaves",
                        crate::timefmt::at_second(self.gate.ready_at)
                    )
                };
                plan.reason = reason.clone();
                // (Not left to the next run while a Secret is missing.)
                self.gate.phase(reason, None, !waits_for_cleanup)
            }
        };
        (plan, secrets, phase)
    }

    /// Before a new trust step: a cleanup in progress is finished first. Leaves signed by the
    /// active CA come first (their bundles keep the prior CA), and a prior CA leaves the
    /// bundles only once no consumer may still present a leaf of it. `Some` is the step to
    /// take instead of the trust step (`reason` is why a rotation is due).
    pub(super) fn cleanup_before_trust(
        &self,
        ca: &CaSecret,
        active: &Active,
        reason: &str,
    ) -> Option<Decision> {
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
                return Some((plan, secrets, phase));
            }
            if !self.gate.open(self.now) {
                let why = if self.gate.on_evidence(self.now, self.gate.ready_at) {
                    format!(
                        "{reason}; waiting until this run has seen consumers present leaves of the current CA before the previous one is dropped ({})",
                        super::RESUMED
                    )
                } else {
                    format!(
                        "{reason}; waiting until {} so that consumers present leaves of the current CA before the previous one is dropped",
                        crate::timefmt::at_second(self.gate.ready_at)
                    )
                };
                let mut plan = self.ca_plan(ca, Action::Keep, why.clone());
                plan.bundle = refs(&ca.bundle);
                let secrets = self.leaves.iter().map(|l| l.keep("waiting")).collect();
                return Some((plan, secrets, self.gate.phase(why, None, false)));
            }
        }
        None
    }
}

/// Where the bundles converge without a rotation.
struct Target {
    /// The valid CA other than the active one that bundles still hold.
    prior: Option<Cert>,
    /// The cleanup drops it in this step.
    drop_prior: bool,
    /// The bundle every Secret converges on: the active CA, and the prior one until the
    /// cleanup.
    certs: Vec<Cert>,
}

/// The leaves' plans without a rotation, and what holds them.
#[derive(Default)]
struct MaintainedLeaves {
    secrets: Vec<SecretPlan>,
    /// A missing Secret waits for the cleanup (another writer's CA in a bundle).
    waits_for_cleanup: bool,
    /// A leaf waits for the active CA to be valid.
    waits_for_ca: bool,
}
