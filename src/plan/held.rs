//! Trust is what the Secrets hold: the CA Secret is certgen's key store, and nothing says any
//! consumer has loaded it.
//!
//! Consumers mount the TLS Secrets, not the CA Secret. What they may hold is each Secret's
//! `ca.crt` and the CA that signed its `tls.crt`, whoever wrote them. When another writer (Envoy
//! Gateway's own `certgen --overwrite`, a backup restored, a GitOps revert, a hand-edited
//! `ca.crt`) has changed the Secrets since certgen's last run, the CA Secret's active CA may be
//! one that some held bundle does not trust. Signing leaves with it would break every peer that
//! holds such a bundle, so this module derives the CA Secret the planner works from out of the
//! held Secrets:
//!
//! - a CA certgen holds the key of that some held bundle does not trust is at most **pending**:
//!   its next step is the trust step, with the gate after it;
//! - the CA that signed the held leaves, trusted by their bundles, is the **active** trust,
//!   adopted without its key (as when migrating from Envoy Gateway's certgen);
//! - the derived CA Secret is written with the trust step, so a crash leaves a state the next
//!   run reads the same way;
//! - when every held leaf is signed by certgen's **pending** CA (the CA Secret was restored or
//!   reverted to a state from before the rotation's leaves, its trust gate say), the held
//!   Secrets agree on that CA: it is the active one, nothing is issued again, and no leaf of the
//!   CA Secret's old active CA is written, whose trust write no gate may have followed for the
//!   consumers as they are now.
//!
//! The rest of the planner then applies its one rule unchanged: a step writes only what every
//! version consumers may still hold accepts. Pure, like the rest of the plan.

use super::Input;
use super::rules::due;
use super::stored::{Active, CaSecret, Leaf};
use crate::config::Strategy;
use crate::pki::{CaKey, Cert, choose_prior_ca};

impl Input<'_> {
    /// The CA Secret as the held TLS Secrets have it: unchanged when every held bundle trusts
    /// its active CA (every state certgen's own steps leave), else derived from the held
    /// Secrets (see the module's documentation).
    pub(super) fn held(&self, ca: CaSecret) -> CaSecret {
        let held: Vec<&Leaf> = self.present_leaves().collect();
        let Some(active) = ca.active.clone() else {
            return ca;
        };
        // `--strategy immediate` asked for one write whatever consumers hold.
        if self.options.strategy == Strategy::Immediate {
            return ca;
        }
        if held.is_empty() {
            return ca;
        }
        if let Some(agreed) = self.agreed(&ca, &active, &held) {
            return agreed;
        }
        if held.iter().all(|l| l.bundle.contains(active.cert())) {
            return ca;
        }
        // The CA certgen moves every leaf to (`move_target`), among the CAs it holds the key
        // of. A CA that signs held leaves and is not the target stays in those Secrets' own
        // bundles until the cleanup (`Input::own_prior`).
        let keyed: Vec<&CaKey> = match &active {
            Active::Keyed(k) => vec![k],
            Active::Adopted(_) => vec![],
        }
        .into_iter()
        .chain(ca.pending.as_ref())
        .filter(|k| !k.cert.is_expired_at(self.now))
        .collect();
        let target = self.move_target(&ca, &keyed, &held);
        // The held trust: the valid CA, trusted by a held bundle, that signed the most held
        // leaves the target did not sign.
        let others: Vec<Cert> = held
            .iter()
            .filter(|l| target.as_ref().is_none_or(|t| !t.cert.signed(&l.cert)))
            .map(|l| l.cert.clone())
            .collect();
        let candidates: Vec<Cert> = held
            .iter()
            .flat_map(|l| l.bundle.iter())
            .filter(|c| target.as_ref().is_none_or(|t| t.cert != **c))
            .cloned()
            .collect();
        let Some(trusted) = choose_prior_ca(&candidates, &others, self.now) else {
            // Every held leaf is the target's (or nobody's): bundles that lack it only need it
            // added, which the steady plan does.
            return ca;
        };
        // A derived state the CA Secret already records (a staged move from another tool's
        // CA, with each Secret keeping its own signer): the rotation goes on from it.
        let stored_active = active.cert();
        let recorded = ca.pending.as_ref().map(|p| &p.cert) == target.as_ref().map(|t| &t.cert)
            && target.is_some()
            && !stored_active.is_expired_at(self.now)
            && held.iter().any(|l| stored_active.signed(&l.cert))
            && held.iter().any(|l| l.bundle.contains(stored_active));
        if recorded {
            return ca;
        }
        let derived = derived_reason(&held, &others, &trusted, active.cert(), target.as_ref());
        let active = keyed
            .iter()
            .find(|k| k.cert == trusted)
            .map_or(Active::Adopted(trusted), |k| Active::Keyed((*k).clone()));
        // The CA Secret's own `ca.crt` is nobody's trust: it is rewritten with the next step.
        CaSecret {
            active: Some(active),
            pending: target,
            bundle: Vec::new(),
            derived: Some(derived),
            ..ca
        }
    }

    /// The CA certgen moves every held leaf to (see [`Input::held`]): among `keyed` (the CAs
    /// whose keys the CA Secret holds, still valid), the pending CA of a rotation in progress
    /// (never a second new CA), else one not due that already signs held leaves, else (without
    /// `--overwrite`) one not due; `None` means a new CA.
    fn move_target(&self, ca: &CaSecret, keyed: &[&CaKey], held: &[&Leaf]) -> Option<CaKey> {
        ca.pending
            .as_ref()
            .and_then(|p| keyed.iter().find(|k| k.cert == p.cert))
            .or_else(|| {
                // One that signs held leaves must stay trusted anyway: a new CA beside it and
                // another writer's would need three in a bundle, so an --overwrite waits for
                // the next run.
                let not_due =
                    |k: &&&CaKey| due(&k.cert, self.config.ca.renew_before, self.now).is_none();
                keyed
                    .iter()
                    .filter(not_due)
                    .find(|k| held.iter().any(|l| k.cert.signed(&l.cert)))
                    .or_else(|| {
                        keyed
                            .iter()
                            .filter(not_due)
                            .find(|_| !self.options.overwrite)
                    })
            })
            .map(|k| (*k).clone())
    }

    /// The CA Secret as the held Secrets agree on it, when they agree on a CA other than its
    /// active one: every held leaf signed by the one CA whose key certgen holds as pending
    /// (a CA Secret restored or reverted to a state before the rotation to it went on, say to
    /// its trust gate). That CA is the active one: nothing is issued again, and no leaf of the
    /// old active CA is written (its trust write may be older than any gate the held Secrets
    /// have seen; their bundles are what decides). The CA Secret is rewritten with the next
    /// step to say so. `None`: they agree on the active CA, or on nothing.
    fn agreed(&self, ca: &CaSecret, active: &Active, held: &[&Leaf]) -> Option<CaSecret> {
        let pending = ca.pending.as_ref()?;
        if pending.cert == *active.cert()
            || pending.cert.is_expired_at(self.now)
            || !held.iter().all(|l| pending.cert.signed(&l.cert))
        {
            return None;
        }
        let lacking = held
            .iter()
            .filter(|l| !l.bundle.contains(&pending.cert))
            .count();
        let derived = format!(
            "the TLS Secrets hold {} leaves, every one signed by certgen's pending CA {}{}, while the CA Secret names CA {} as active (restored or reverted to an earlier state of the rotation?): {} is taken as the active CA and the CA Secret is brought up to date; nothing is issued again",
            held.len(),
            pending.cert.short_fingerprint(),
            match lacking {
                0 => " and trusted by every bundle".to_string(),
                n => format!(" ({n} bundles lack it: it is added to them)"),
            },
            active.cert().short_fingerprint(),
            pending.cert.short_fingerprint(),
        );
        Some(CaSecret {
            version: ca.version.clone(),
            active: Some(Active::Keyed(pending.clone())),
            bundle: Vec::new(),
            pending: None,
            broken: None,
            drop_pending: true,
            derived: Some(derived),
            agreed: true,
        })
    }

    /// The CA that signed `leaf`, among every CA certificate the held Secrets and the CA
    /// Secret name.
    pub(super) fn signer_of(&self, ca: &CaSecret, leaf: &Cert) -> Option<Cert> {
        ca.active
            .iter()
            .map(Active::cert)
            .chain(ca.pending.iter().map(|p| &p.cert))
            .chain(ca.bundle.iter())
            .chain(self.present_leaves().flat_map(|l| l.bundle.iter()))
            .find(|c| c.is_ca && c.signed(leaf))
            .cloned()
    }
}

/// What the report says of a derived state: what the held Secrets hold and trust, and what
/// certgen does about it.
fn derived_reason(
    held: &[&Leaf],
    others: &[Cert],
    trusted: &Cert,
    active: &Cert,
    target: Option<&CaKey>,
) -> String {
    let found = format!(
        "the TLS Secrets hold {} (they trust CA {} and {}), not certgen's CA {}: another tool wrote them since certgen's last run",
        held.len(),
        trusted.short_fingerprint(),
        if others.len() == held.len() {
            "every leaf is signed by it".to_string()
        } else {
            format!("{} of {} leaves are signed by it", others.len(), held.len())
        },
        active.short_fingerprint(),
    );
    format!(
        "{found}; {} is adopted as the current trust and {}",
        trusted.short_fingerprint(),
        match target {
            Some(t) => format!(
                "certgen's CA {} is staged: trusted first, leaves after the gate",
                t.cert.short_fingerprint()
            ),
            None => "a new certgen CA is staged: trusted first, leaves after the gate".into(),
        }
    )
}
