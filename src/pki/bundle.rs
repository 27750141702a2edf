//! Trust-bundle rules: which CAs a `ca.crt` holds. Plain functions over plain values.
//!
//! A bundle is the active CA first, then at most one prior CA that is unexpired and actually
//! signed the leaves being replaced (decided by signature, never by name). Duplicates (same
//! SHA-256 of DER) are dropped and the order is stable.

use time::OffsetDateTime;

use super::Cert;

/// The most CAs a bundle may hold.
pub const MAX_BUNDLE: usize = 2;

/// Why an observed bundle is unusable as it is.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    #[error("certificate {index} ({subject}) is not a CA certificate")]
    NotCa { index: usize, subject: String },
    #[error("it holds {0} distinct CAs; certgen keeps at most {MAX_BUNDLE}")]
    TooMany(usize),
}

/// Checks an observed bundle: every entry is a CA, and there are at most two distinct ones.
pub fn check_bundle(certs: &[Cert]) -> Result<(), BundleError> {
    for (index, cert) in certs.iter().enumerate() {
        if !cert.is_ca {
            return Err(BundleError::NotCa {
                index,
                subject: cert.subject.clone(),
            });
        }
    }
    let distinct = dedup(certs.iter()).len();
    if distinct > MAX_BUNDLE {
        return Err(BundleError::TooMany(distinct));
    }
    Ok(())
}

fn dedup<'a>(certs: impl Iterator<Item = &'a Cert>) -> Vec<&'a Cert> {
    let mut out: Vec<&Cert> = Vec::new();
    for cert in certs {
        if !out.iter().any(|c| c.fingerprint() == cert.fingerprint()) {
            out.push(cert);
        }
    }
    out
}

/// Picks the prior CA to keep beside a new one: among `candidates` (in the caller's order of
/// preference), the unexpired CA certificates that signed at least one of `leaves`, preferring
/// the one that signed the most; ties go to the earlier candidate.
pub fn choose_prior_ca(candidates: &[Cert], leaves: &[Cert], now: OffsetDateTime) -> Option<Cert> {
    let mut best: Option<(&Cert, usize)> = None;
    for candidate in dedup(candidates.iter()) {
        if !candidate.is_ca || candidate.is_expired_at(now) {
            continue;
        }
        let signed = leaves.iter().filter(|leaf| candidate.signed(leaf)).count();
        if signed > 0 && best.is_none_or(|(_, n)| signed > n) {
            best = Some((candidate, signed));
        }
    }
    best.map(|(c, _)| c.clone())
}

/// The bundle written during a rotation: `new`, then `prior` when there is one.
pub fn rotation_bundle(new: &Cert, prior: Option<&Cert>) -> Vec<Cert> {
    let mut out = vec![new.clone()];
    if let Some(prior) = prior.filter(|p| *p != new) {
        out.push(prior.clone());
    }
    out
}

/// The bundle in steady state: `active` first, then the first entry of `current` that is an
/// unexpired CA other than `active`. Expired CAs, duplicates and anything beyond two are dropped.
pub fn steady_bundle(active: &Cert, current: &[Cert], now: OffsetDateTime) -> Vec<Cert> {
    let prior = current
        .iter()
        .find(|c| *c != active && c.is_ca && !c.is_expired_at(now));
    rotation_bundle(active, prior)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use time::macros::datetime;

    use super::*;
    use crate::pki::{CaKey, CaSpec, KeyAlgorithm, LeafSpec, Usages, issue_ca, issue_leaf};

    const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
    const DAY: Duration = Duration::from_secs(86_400);

    fn ca_at(name: &str, at: OffsetDateTime, days: u64) -> CaKey {
        let spec = CaSpec {
            common_name: name.into(),
            validity: DAY * days as u32,
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        issue_ca(&spec, at).unwrap().0
    }

    fn ca(name: &str) -> CaKey {
        ca_at(name, NOW, 365)
    }

    fn leaf(ca: &CaKey) -> Cert {
        let spec = LeafSpec {
            common_name: "leaf".into(),
            dns_names: vec!["leaf.example".into()],
            ip_addresses: vec![],
            usages: Usages {
                server: true,
                client: true,
            },
            validity: DAY * 30,
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        issue_leaf(&spec, ca, NOW).unwrap().cert
    }

    #[test]
    fn prior_is_chosen_by_signature_for_zero_to_five_candidates() {
        let new = ca("new");
        for n in 0..=5 {
            let olds: Vec<CaKey> = (0..n).map(|i| ca(&format!("old-{i}"))).collect();
            let candidates: Vec<Cert> = olds.iter().map(|c| c.cert.clone()).collect();
            // The leaf was issued by the last candidate, so only it may be kept.
            let leaves: Vec<Cert> = olds.last().map(leaf).into_iter().collect();
            let prior = choose_prior_ca(&candidates, &leaves, NOW);
            assert_eq!(
                prior.as_ref(),
                olds.last().map(|c| &c.cert),
                "with {n} candidates"
            );
            let bundle = rotation_bundle(&new.cert, prior.as_ref());
            assert_eq!(bundle.len(), if n == 0 { 1 } else { 2 });
            assert_eq!(bundle[0], new.cert, "the new CA always comes first");
        }
    }

    #[test]
    fn prior_must_have_signed_a_current_leaf() {
        let unrelated = ca("unrelated");
        let issuer = ca("issuer");
        let prior = choose_prior_ca(std::slice::from_ref(&unrelated.cert), &[leaf(&issuer)], NOW);
        assert_eq!(prior, None);
        assert_eq!(
            choose_prior_ca(std::slice::from_ref(&issuer.cert), &[], NOW),
            None
        );
    }

    #[test]
    fn expired_prior_is_never_kept() {
        let new = ca("new");
        let old = ca_at("old", NOW - DAY * 40, 30);
        let l = {
            let spec = LeafSpec {
                common_name: "l".into(),
                dns_names: vec![],
                ip_addresses: vec![],
                usages: Usages {
                    server: true,
                    client: false,
                },
                validity: DAY,
                key_algorithm: KeyAlgorithm::EcdsaP256,
            };
            issue_leaf(&spec, &old, NOW - DAY * 39).unwrap().cert
        };
        assert!(old.cert.signed(&l));
        assert_eq!(
            choose_prior_ca(std::slice::from_ref(&old.cert), &[l], NOW),
            None
        );
        assert_eq!(
            steady_bundle(&new.cert, std::slice::from_ref(&old.cert), NOW),
            vec![new.cert.clone()]
        );
    }

    #[test]
    fn duplicates_are_dropped_and_new_is_never_its_own_prior() {
        let new = ca("new");
        let old = ca("old");
        let l = leaf(&old);
        let candidates = vec![old.cert.clone(), old.cert.clone(), new.cert.clone()];
        // Both old and new signed a leaf; each signed one, so the caller's order decides.
        let prior = choose_prior_ca(&candidates, &[l.clone(), leaf(&new)], NOW);
        assert_eq!(prior.as_ref(), Some(&old.cert));
        assert_eq!(
            rotation_bundle(&new.cert, Some(&new.cert)),
            vec![new.cert.clone()]
        );
        let steady = steady_bundle(
            &new.cert,
            &[new.cert.clone(), old.cert.clone(), old.cert.clone()],
            NOW,
        );
        assert_eq!(steady, vec![new.cert.clone(), old.cert.clone()]);
    }

    #[test]
    fn same_subject_different_key_is_told_apart_by_signature() {
        let impostor = ca("envoy-gateway");
        let real = ca("envoy-gateway");
        let l = leaf(&real);
        assert_eq!(impostor.cert.subject, real.cert.subject);
        assert!(!impostor.cert.signed(&l));
        let prior = choose_prior_ca(&[impostor.cert.clone(), real.cert.clone()], &[l], NOW);
        assert_eq!(prior.as_ref(), Some(&real.cert));
    }

    #[test]
    fn the_prior_that_signed_most_leaves_wins_and_ties_keep_caller_order() {
        let a = ca("a");
        let b = ca("b");
        let leaves = vec![leaf(&a), leaf(&b), leaf(&b)];
        let candidates = vec![a.cert.clone(), b.cert.clone()];
        assert_eq!(
            choose_prior_ca(&candidates, &leaves, NOW).as_ref(),
            Some(&b.cert)
        );
        let tied = vec![leaf(&a), leaf(&b)];
        assert_eq!(
            choose_prior_ca(&candidates, &tied, NOW).as_ref(),
            Some(&a.cert)
        );
    }

    #[test]
    fn a_leaf_is_never_a_prior_ca_and_fails_the_bundle_check() {
        let new = ca("new");
        let old = ca("old");
        let l = leaf(&old);
        assert_eq!(
            choose_prior_ca(std::slice::from_ref(&l), std::slice::from_ref(&l), NOW),
            None
        );
        assert!(matches!(
            check_bundle(&[new.cert.clone(), l]),
            Err(BundleError::NotCa { index: 1, .. })
        ));
    }

    #[test]
    fn steady_bundle_caps_at_two_and_keeps_order() {
        let active = ca("active");
        let olds: Vec<CaKey> = (0..5).map(|i| ca(&format!("old-{i}"))).collect();
        for n in 0..=5 {
            let current: Vec<Cert> = olds[..n].iter().map(|c| c.cert.clone()).collect();
            let steady = steady_bundle(&active.cert, &current, NOW);
            assert!(steady.len() <= MAX_BUNDLE);
            assert_eq!(steady[0], active.cert);
            if n > 0 {
                assert_eq!(steady[1], olds[0].cert);
            }
            let check = check_bundle(&[vec![active.cert.clone()], current].concat());
            assert_eq!(check.is_err(), n + 1 > MAX_BUNDLE, "{n} prior CAs");
        }
    }
}
