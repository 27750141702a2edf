//! The trust phase: why a rotation starts, whether it can be staged, and the step that trusts
//! the new CA beside the current one in every bundle (leaves stay, or are renewed by the
//! current CA). A trust step that would drop a CA some consumer may still present waits for
//! the gate, or is refused when a stored leaf needs it.

use super::rules::{LeafIn, due, refs, same, san_drift};
use super::stored::{Active, CaSecret};
use super::{Action, CaRef, Content, Decision, Input, Invalid, Phase, SecretPlan, Signer};
use crate::pki::Cert;

impl Input<'_> {
    /// A staged move to a new CA from `active` needs every bundle to hold the new CA beside the
    /// one CA that signs the leaves consumers present. When two other tools' CAs (whose keys
    /// certgen does not hold) each sign held leaves, no bundle of two CAs can: refused, unless
    /// `--force` accepts that peers presenting one of them are rejected until they reload.
    pub(super) fn stageable(&self, active: &Active) -> Result<(), Invalid> {
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

    pub(super) fn rotation_reason(&self, active: &Active) -> Option<String> {
        // One rotation per due: the leaves step of one under way is the rotation asked for.
        if self.options.overwrite && !self.leaves_under_way {
            // By hand, not bound by the windows unless asked (--respect-window).
            let reason = self.options.overwrite_why.reason();
            if !(self.options.respect_window
                && self.waits_for_window(
                    self.ca_name,
                    "the CA's rotation (--overwrite --respect-window)",
                    "was asked for",
                    active.cert().not_after,
                ))
            {
                return Some(reason);
            }
        }
        // (A CA not valid yet is no reason to rotate: nothing is signed with it before it
        // is, and the clock that made it so may be the store's, stepped back.)
        if self.now >= active.cert().not_before
            && let Some(d) = due(active.cert(), self.config.ca.renew_before, self.now)
        {
            // A routine rotation (within renewBefore, not expired) waits for a window.
            let routine = self.now < active.cert().not_after;
            if !(routine
                && self.waits_for_window(
                    self.ca_name,
                    "the CA's rotation",
                    &d,
                    active.cert().not_after,
                ))
            {
                return Some(format!("the CA {d}"));
            }
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

    /// Starts a staged rotation: the new CA as pending, trusted beside the active one.
    pub(super) fn start(
        &self,
        ca: &CaSecret,
        active: &Active,
        reason: String,
    ) -> Result<Decision, Invalid> {
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

    /// What the TLS Secrets do while `trust` is being made the bundle everywhere: bundles
    /// become `trust`, leaves stay, and anything that must be issued is signed by the active CA
    /// (never the pending one, which peers may not trust yet). `trust_certs` is `trust` when
    /// every CA in it exists already (empty while the new CA is still to be generated).
    ///
    /// A leaf signed by another valid CA than the active one (a second writer's) keeps that CA
    /// in its own bundle instead of the active one: replicas of its consumer that still present
    /// it go on trusting each other ([`Input::own_prior`]).
    pub(super) fn trust_secrets(
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

    /// The rule for a trust step (`plans`, trusting `new` beside the current CA) that drops a
    /// valid CA from some bundle: one that signs a leaf stored now cannot be dropped (other
    /// writers left leaves of more CAs than a bundle of two can trust beside the new one:
    /// refused, unless `--force`); any other waits for the gate, since leaves of it may still
    /// be held. `Some` is the step to take instead (the wait).
    pub(super) fn dropping(
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
    pub(super) fn drops_trust(&self, plans: &[SecretPlan]) -> Vec<Cert> {
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
}
