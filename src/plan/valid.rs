//! The verifier's judgement ([`crate::pki::Verifier`]) in the planner's terms: which CA the
//! planner may use at all, and the check every step passes before its writes.
//!
//! - [`ca_refusal`]: a CA that a TLS verifier would reject for the leaves this config issues
//!   (an unknown critical extension, no keyCertSign, an extendedKeyUsage without a configured
//!   usage, nameConstraints that exclude a configured name) is never adopted, staged or used
//!   to sign: the planner refuses it with the reason.
//! - [`step_check`]: before a step writes, every leaf consumers may present is verified
//!   against every bundle consumers may hold at the same time (the state as read, and the
//!   state this step leaves), at the store's now, for each Secret's configured usages; and each
//!   leaf the step issues against its own bundle. The planner's rules are meant to make this
//!   pass; it runs live as defence in depth, and a step that fails it is refused before
//!   anything is written. A leaf not valid yet by the store's clock (a clock behind its
//!   issuer's, or stepped back) is judged at its own notBefore instead: a consumer whose clock
//!   is right accepts it now, so a step must not break it, and judging it when neither it nor
//!   its CA is valid yet would call every pair of it broken already.
//!
//! A pair the step does not make worse is not the step's doing: a pair both of whose parts are
//! as read; a new leaf that a bundle as read rejects when it rejected the leaf it replaces too;
//! a new bundle that rejects a leaf as read which the bundle it replaces rejected too (another
//! writer's breakage, a leaf or CA that expired before the run). Pure: `now` is the verifier's.

use std::collections::{BTreeMap, HashMap};

use time::OffsetDateTime;

use crate::config::{Config, Strategy};
use crate::pki::{Cert, Usages, Verifier, ca_shape_problem};

/// The usages of every leaf the config issues, together: a CA signs them all.
pub fn all_usages(config: &Config) -> Usages {
    config.tls.iter().fold(Usages::default(), |u, t| Usages {
        server: u.server || t.leaf.usages.server,
        client: u.client || t.leaf.usages.client,
    })
}

/// Why a TLS verifier would reject `ca` as the CA of this config's leaves (whatever the time:
/// validity is the planner's own question), if it would.
pub fn ca_refusal(config: &Config, verifier: &Verifier, ca: &Cert) -> Option<String> {
    if let Some(why) = ca_shape_problem(ca, all_usages(config)) {
        return Some(why);
    }
    config.tls.iter().find_map(|t| {
        verifier
            .name_constraints(ca, &t.leaf.dns_names, &t.leaf.ip_addresses)
            .map(|why| format!("{why} (Secret {})", t.name))
    })
}

/// One TLS Secret as consumers may hold it: as read, and as the step leaves it.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub before_leaf: Option<Cert>,
    pub before_bundle: Option<Vec<Cert>>,
    pub after_leaf: Option<Cert>,
    pub after_bundle: Option<Vec<Cert>>,
    /// The step issues this Secret's leaf.
    pub fresh: bool,
}

/// A pair the check refused: `leaf` of one Secret, rejected by the bundle of another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The Secret whose leaf is presented (the client, or the server, of a handshake).
    pub leaf: String,
    /// Whether that leaf is the one this step writes (else: as read).
    pub leaf_new: bool,
    /// The Secret whose bundle rejects it (the peer verifying it).
    pub bundle: String,
    /// Whether that bundle is the one this step writes (else: as read).
    pub bundle_new: bool,
    pub reason: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = |new: bool| {
            if new {
                "as this step writes it"
            } else {
                "as read"
            }
        };
        write!(
            f,
            "this step would break mutual TLS: {}'s leaf ({}) is rejected by {}'s bundle ({}): {}",
            self.leaf,
            state(self.leaf_new),
            self.bundle,
            state(self.bundle_new),
            self.reason
        )
    }
}

/// The check before a step's writes (see the module's documentation). `held`: every TLS Secret
/// of the config by name. With `--strategy immediate` (one write of bundle and leaf, for
/// consumers that all restart) a new leaf is not checked against bundles as read, nor a new
/// bundle against leaves as read; the state the step leaves is.
pub fn step_check(
    config: &Config,
    verifier: &Verifier,
    held: &BTreeMap<String, Held>,
    strategy: Strategy,
) -> Result<(), Broken> {
    let usages: BTreeMap<&str, Usages> = config
        .tls
        .iter()
        .map(|t| (t.name.as_str(), t.leaf.usages))
        .collect();
    let later = later_instants(verifier.at(), held);
    let check = Check {
        verifier,
        later: &later,
        held,
        bundles: instances(held),
        immediate: strategy == Strategy::Immediate,
    };
    for (name, h) in held {
        // Another member's Secret (`member/secret`, in a set of clusters) has its own usages.
        let own_name = name.rsplit('/').next().unwrap_or(name);
        let u = usages.get(own_name).copied().unwrap_or_default();
        let (leaf_changed, _) = changed(h);
        // Each freshly issued leaf against its own bundle, no excuse.
        if h.fresh
            && let (Some(leaf), Some(bundle)) = (&h.after_leaf, &h.after_bundle)
            && let Some(why) = check.fails(leaf, bundle, u)
        {
            return Err(Broken {
                leaf: name.clone(),
                leaf_new: true,
                bundle: name.clone(),
                bundle_new: true,
                reason: why,
            });
        }
        let versions = [
            (h.before_leaf.as_ref(), false),
            (h.after_leaf.as_ref().filter(|_| leaf_changed), true),
        ];
        for (leaf, leaf_new) in versions {
            if let Some(leaf) = leaf {
                check.leaf(name, h, leaf, leaf_new, u)?;
            }
        }
    }
    Ok(())
}

/// A verifier for each instant after `at` at which a held leaf becomes valid: such a leaf is
/// judged there (see the module's documentation).
fn later_instants(
    at: OffsetDateTime,
    held: &BTreeMap<String, Held>,
) -> HashMap<OffsetDateTime, Verifier> {
    held.values()
        .flat_map(|h| [&h.before_leaf, &h.after_leaf])
        .flatten()
        .filter(|leaf| at < leaf.not_before)
        .map(|leaf| (leaf.not_before, Verifier::new(leaf.not_before)))
        .collect()
}

/// Whether a step changes a Secret's leaf, and its bundle.
fn changed(h: &Held) -> (bool, bool) {
    (
        h.after_leaf.is_some() && h.after_leaf != h.before_leaf,
        h.after_bundle.is_some() && h.after_bundle != h.before_bundle,
    )
}

/// A distinct bundle consumers may hold, with who holds it as read and who gets it now.
struct Instance<'b> {
    bundle: &'b [Cert],
    old: Vec<&'b str>,
    new: Vec<&'b str>,
}

/// Every distinct bundle consumers may hold during a step: each Secret's as read, and the
/// one the step writes where it changes.
fn instances<'a>(held: &'a BTreeMap<String, Held>) -> Vec<Instance<'a>> {
    let mut bundles: Vec<Instance<'a>> = Vec::new();
    for (name, h) in held {
        let (_, bundle_changed) = changed(h);
        let mut put = |bundle: &'a [Cert], new: bool| {
            let i = match bundles.iter().position(|b| b.bundle == bundle) {
                Some(i) => i,
                None => {
                    bundles.push(Instance {
                        bundle,
                        old: Vec::new(),
                        new: Vec::new(),
                    });
                    bundles.len() - 1
                }
            };
            if new {
                bundles[i].new.push(name);
            } else {
                bundles[i].old.push(name);
            }
        };
        if let Some(b) = &h.before_bundle {
            put(b, false);
        }
        if bundle_changed && let Some(b) = &h.after_bundle {
            put(b, true);
        }
    }
    bundles
}

/// The check of one step: the held Secrets and every bundle consumers may hold.
struct Check<'a> {
    verifier: &'a Verifier,
    /// Verifiers at the notBefore of leaves not valid yet at `verifier`'s instant.
    later: &'a HashMap<OffsetDateTime, Verifier>,
    held: &'a BTreeMap<String, Held>,
    bundles: Vec<Instance<'a>>,
    immediate: bool,
}

impl Check<'_> {
    /// The verifier judging `leaf`: at the store's now, or at the leaf's notBefore when that is
    /// later (only such instants are in `later`).
    fn judge(&self, leaf: &Cert) -> &Verifier {
        self.later.get(&leaf.not_before).unwrap_or(self.verifier)
    }

    /// Why a verifier rejects `leaf` against `bundle` for usages `u`, if it does.
    fn fails(&self, leaf: &Cert, bundle: &[Cert], u: Usages) -> Option<String> {
        self.judge(leaf).verify(leaf, bundle, u).err().map(|e| e.0)
    }

    /// One version of Secret `name`'s leaf (as read, or as this step writes it: `leaf_new`)
    /// against every bundle consumers may hold.
    fn leaf(
        &self,
        name: &str,
        h: &Held,
        leaf: &Cert,
        leaf_new: bool,
        u: Usages,
    ) -> Result<(), Broken> {
        let refuse = |bundle_new: bool, of: &str, why: String| {
            Err(Broken {
                leaf: name.to_string(),
                leaf_new,
                bundle: of.to_string(),
                bundle_new,
                reason: why,
            })
        };
        for b in &self.bundles {
            // A new leaf against bundles held as read.
            if leaf_new
                && !b.old.is_empty()
                && !self.immediate
                && let Some(why) = self.fails(leaf, b.bundle, u)
            {
                // (A bundle none of whose CAs a verifier can use, all expired say, accepts
                // nothing already.)
                let kept = h
                    .before_leaf
                    .as_ref()
                    .is_some_and(|before| self.fails(before, b.bundle, u).is_some())
                    || b.bundle
                        .iter()
                        .all(|c| self.judge(leaf).anchor(c, u).is_some());
                if !kept {
                    return refuse(false, b.old[0], why);
                }
            }
            // A leaf against bundles this step writes: a new leaf always; one as read unless
            // each Secret getting the bundle rejected it before too (and not at all in one
            // write, `--strategy immediate`).
            if b.new.is_empty() || (!leaf_new && self.immediate) {
                continue;
            }
            let Some(why) = self.fails(leaf, b.bundle, u) else {
                continue;
            };
            if let Some(t) = self.culprit(b, leaf, leaf_new, u) {
                return refuse(true, t, why);
            }
        }
        Ok(())
    }

    /// Of the Secrets getting bundle `b` (which rejects `leaf`), the first this step breaks:
    /// any, for a new leaf; for a leaf as read, one whose bundle as read accepted it.
    fn culprit<'b>(
        &self,
        b: &Instance<'b>,
        leaf: &Cert,
        leaf_new: bool,
        u: Usages,
    ) -> Option<&'b str> {
        // (A leaf expired by the store's clock is rejected by every bundle already. One not
        // valid yet is judged at its notBefore: it is early, not dead.)
        let dead = leaf.is_expired_at(self.verifier.at());
        // (A Secret absent as read breaks a leaf as read only if some bundle held as read
        // trusts that leaf: one every bundle rejects already, another writer's, is broken for
        // everyone before this step.)
        let trusted_as_read = || {
            self.bundles
                .iter()
                .any(|o| !o.old.is_empty() && self.fails(leaf, o.bundle, u).is_none())
        };
        b.new.iter().copied().find(|t| {
            leaf_new
                || (!dead
                    && match self.held[*t].before_bundle.as_ref() {
                        Some(before) => self.fails(leaf, before, u).is_none(),
                        None => trusted_as_read(),
                    })
        })
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::pki::{CaKey, issue_ca, issue_leaf};

    const T0: OffsetDateTime = datetime!(2026-06-01 00:00 UTC);
    const HOUR: time::Duration = time::Duration::HOUR;

    fn ca(config: &Config, at: OffsetDateTime) -> CaKey {
        issue_ca(&config.ca.spec, at).unwrap().0
    }

    fn leaf(config: &Config, name: &str, ca: &CaKey, at: OffsetDateTime) -> Cert {
        let spec = &config.tls.iter().find(|t| t.name == name).unwrap().leaf;
        issue_leaf(spec, ca, at).unwrap().cert
    }

    /// Two Secrets whose leaves `ca0` signed at `issued`: the step drops `ca0` from the
    /// second's bundle (a trust step that keeps only its own CA beside a new one), while the
    /// first's leaf, signed by `ca0`, stays as it is.
    fn dropping_a_peers_ca(
        config: &Config,
        issued: OffsetDateTime,
        at: OffsetDateTime,
    ) -> BTreeMap<String, Held> {
        let ca0 = ca(config, issued);
        let ca1 = ca(config, at);
        let [a, b] = ["envoy-gateway", "envoy"];
        let held = |name: &str, after: Option<Vec<Cert>>| Held {
            before_leaf: Some(leaf(config, name, &ca0, issued)),
            before_bundle: Some(vec![ca0.cert.clone()]),
            after_leaf: None,
            after_bundle: after,
            fresh: false,
        };
        BTreeMap::from([
            (a.to_string(), held(a, None)),
            (b.to_string(), held(b, Some(vec![ca1.cert.clone()]))),
        ])
    }

    #[test]
    fn dropping_the_ca_of_a_leaf_held_is_refused() {
        let config = crate::config::test_profile(None);
        let held = dropping_a_peers_ca(&config, T0, T0 + HOUR);
        let verdict = step_check(&config, &Verifier::new(T0 + HOUR), &held, Strategy::Staged);
        let broken = verdict.unwrap_err();
        assert_eq!((broken.bundle.as_str(), broken.bundle_new), ("envoy", true));
        assert!(!broken.leaf_new, "{broken}");
    }

    /// Found by the simulation (a mid-rotation restore, the store's clock an hour back): by the
    /// store's clock neither the held leaves nor their CA are valid yet, so every pair of them
    /// looked broken already and the step that dropped their CA passed. Consumers whose clock
    /// is right accept them; the step breaks them.
    #[test]
    fn a_leaf_not_valid_yet_by_the_stores_clock_is_not_dead() {
        let config = crate::config::test_profile(None);
        let held = dropping_a_peers_ca(&config, T0, T0 - HOUR);
        let verdict = step_check(&config, &Verifier::new(T0 - HOUR), &held, Strategy::Staged);
        let broken = verdict.unwrap_err();
        assert_eq!((broken.bundle.as_str(), broken.bundle_new), ("envoy", true));
    }

    /// A leaf issued by a clock an hour ahead, re-issued now from the same CA with the bundles
    /// unchanged: nothing any consumer accepts is broken, so nothing is refused.
    #[test]
    fn re_issuing_a_leaf_not_valid_yet_from_its_own_ca_passes() {
        let config = crate::config::test_profile(None);
        let now = T0 + 10 * HOUR;
        let ca0 = ca(&config, T0);
        let name = "envoy-gateway";
        let held = BTreeMap::from([(
            name.to_string(),
            Held {
                before_leaf: Some(leaf(&config, name, &ca0, now + HOUR)),
                before_bundle: Some(vec![ca0.cert.clone()]),
                after_leaf: Some(leaf(&config, name, &ca0, now)),
                after_bundle: Some(vec![ca0.cert.clone()]),
                fresh: true,
            },
        )]);
        let verdict = step_check(&config, &Verifier::new(now), &held, Strategy::Staged);
        assert_eq!(verdict, Ok(()));
    }
}
