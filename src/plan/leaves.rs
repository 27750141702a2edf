//! Resuming a rotation whose pending CA is stored: the trust step completed if another writer
//! or a crash left it half done, the trust -> leaves gate, and then the leaves step: the
//! pending CA promoted and every leaf issued by it, each bundle keeping the prior CA.

use super::rules::{LeafIn, refs, same};
use super::stored::CaSecret;
use super::{Action, Decision, Input, Invalid, Phase, Signer};
use crate::pki::{CaKey, Cert};

impl Input<'_> {
    /// Finishes a rotation whose pending CA is stored: completes the trust phase, waits out
    /// the gate, or promotes the pending CA and has it sign every leaf.
    pub(super) fn resume(&self, ca: &CaSecret, pending: CaKey) -> Result<Decision, Invalid> {
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
        // The caBundle targets cert-manager's CA injector writes must hold it too: the API
        // server calls their webhooks with what the injector put there (a gate of this run
        // saw them hold it and loaded, or the last read did).
        let lacking: Vec<&str> = if self.known.injected_loaded == Some(fp) {
            Vec::new()
        } else {
            self.known
                .injected
                .iter()
                .filter(|t| !t.holds.contains(&fp))
                .map(|t| t.what.as_str())
                .collect()
        };
        let open =
            (self.gate.open(self.now) || confirmed) && lacking.is_empty() && self.now >= valid_from;
        if !open {
            let ready_at = if self.gate.open(self.now) || confirmed {
                valid_from
            } else {
                self.gate.ready_at.max(valid_from)
            };
            let short = pending.cert.short_fingerprint();
            let reason = if !lacking.is_empty() {
                format!(
                    "every bundle trusts the pending CA {short}; leaves wait until cert-manager's CA injector has added it to the caBundle of {} and the API server has loaded it",
                    lacking.join(", ")
                )
            } else if self.gate.on_evidence(self.now, ready_at) {
                format!(
                    "every bundle trusts the pending CA {short}; leaves wait until this run has seen consumers load it ({})",
                    super::RESUMED
                )
            } else {
                format!(
                    "every bundle trusts the pending CA {short}; leaves wait until consumers have loaded it (at the latest {})",
                    crate::timefmt::at_second(ready_at)
                )
            };
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

    pub(super) fn promote(
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
                    *s = l.keep(super::held_back_reason(&z));
                }
            }
        }
        (plan, secrets, phase)
    }
}
