use std::collections::BTreeMap;

use time::OffsetDateTime;

use super::*;
use crate::config::test_profile;
use crate::outside::Projector;
use crate::pki::{CaKey, bundle_pem, issue_ca};
use crate::trust_bundles::{Projection, Selector, labels_for, object_name};

const SIGNER: &str = "example.com/mesh";

fn target() -> TrustBundle {
    TrustBundle {
        signer: SIGNER.into(),
        bundle_from: "envoy".into(),
        bundle_key: "ca.crt".into(),
        // As the config resolves it: the configured labels and the installation's.
        labels: crate::config::bundle_owner("ns", "envoy")
            .into_iter()
            .chain([("mesh".to_string(), "a".to_string())])
            .collect(),
    }
}

fn ca() -> CaKey {
    issue_ca(&test_profile(None).ca.spec, OffsetDateTime::now_utc())
        .unwrap()
        .0
}

/// certgen's bundle of `ca` as the API server would list it.
fn stored(ca: &CaKey) -> BundleRead {
    BundleRead {
        name: object_name(SIGNER, &ca.cert.short_fingerprint()),
        uid: format!("uid-{}", ca.cert.short_fingerprint()),
        version: "1".into(),
        labels: labels_for(&target().labels, &ca.cert),
        pem: ca.cert.pem(),
        written_at: None,
        writes: Vec::new(),
    }
}

fn wanted(cas: &[&CaKey]) -> Wanted {
    let certs: Vec<Cert> = cas.iter().map(|c| c.cert.clone()).collect();
    Wanted::Stored(bundle_pem(&certs).into_bytes())
}

fn kinds(plan: &BundlePlan) -> Vec<(&'static str, String)> {
    plan.actions
        .iter()
        .map(|a| (action_of(a).name(), a.name().to_string()))
        .collect()
}

#[test]
fn the_trust_step_creates_the_new_cas_bundle_beside_the_current_one() {
    let (old, new) = (ca(), ca());
    let plan = plan(&target(), &[stored(&old)], &wanted(&[&old, &new]), "trust");
    assert_eq!(
        kinds(&plan),
        vec![("create", object_name(SIGNER, &new.cert.short_fingerprint()))]
    );
    let BundleAction::Create { labels, pem, .. } = &plan.actions[0] else {
        unreachable!()
    };
    assert_eq!(pem.as_deref(), Some(new.cert.pem().as_str()));
    assert_eq!(labels.get("mesh").map(String::as_str), Some("a"));
}

/// Both CAs published in one step (a migration from another tool's CA, a fresh install that
/// found a CA stored): the CA that signs the leaves first, else the older, so no union the
/// consumers may project between the two creates lacks the CA of the leaves presented then.
#[test]
fn creates_in_one_step_publish_the_older_ca_first() {
    let old = ca();
    let new = issue_ca(
        &test_profile(None).ca.spec,
        OffsetDateTime::now_utc() + time::Duration::hours(1),
    )
    .unwrap()
    .0;
    let name = |c: &CaKey| object_name(SIGNER, &c.cert.short_fingerprint());
    let leaf = |ca: &CaKey| {
        let mut spec = test_profile(None).tls[0].leaf.clone();
        spec.validity = std::time::Duration::from_secs(3600);
        crate::pki::issue_leaf(
            &spec,
            ca,
            OffsetDateTime::now_utc() + time::Duration::hours(2),
        )
        .unwrap()
        .cert
    };
    for bundle in [[&old, &new], [&new, &old]] {
        let mut plan = plan(&target(), &[], &wanted(&bundle), "trust");
        assert_eq!(
            kinds(&plan),
            vec![("create", name(&old)), ("create", name(&new))]
        );
        // The leaves signed by the old CA (a migration's trust step): it stays first.
        signers_first(&mut plan, [&leaf(&old)]);
        assert_eq!(kinds(&plan)[0], ("create", name(&old)));
        // Signed by the new one (a fresh install that found a CA stored): it goes first.
        signers_first(&mut plan, [&leaf(&new)]);
        assert_eq!(
            kinds(&plan),
            vec![("create", name(&new)), ("create", name(&old))]
        );
    }
}

#[test]
fn the_cleanup_deletes_only_the_bundle_of_the_ca_that_left() {
    let (old, new) = (ca(), ca());
    let plan = plan(
        &target(),
        &[stored(&old), stored(&new)],
        &wanted(&[&new]),
        "cleanup",
    );
    assert_eq!(
        kinds(&plan),
        vec![("delete", object_name(SIGNER, &old.cert.short_fingerprint()))]
    );
}

#[test]
fn an_edited_bundle_is_written_back_and_anothers_bundle_is_left_alone() {
    let (a, b) = (ca(), ca());
    let mut edited = stored(&a);
    edited.pem = b.cert.pem();
    edited.version = "7".into();
    let foreign = BundleRead {
        name: "example.com:mesh:theirs".into(),
        labels: BTreeMap::new(),
        ..stored(&b)
    };
    let plan = plan(&target(), &[edited, foreign], &wanted(&[&a]), "steady");
    assert_eq!(
        kinds(&plan),
        vec![(
            "update-bundle",
            object_name(SIGNER, &a.cert.short_fingerprint())
        )]
    );
    assert_eq!(plan.foreign, vec!["example.com:mesh:theirs".to_string()]);
    // A label another writer removed is put back too.
    let mut relabelled = stored(&a);
    relabelled.labels.remove("mesh");
    let plan2 = super::plan(&target(), &[relabelled], &wanted(&[&a]), "steady");
    assert_eq!(kinds(&plan2).len(), 1);
}

#[test]
fn nothing_is_deleted_when_the_secret_publishes_nothing() {
    let a = ca();
    let plan = plan(
        &target(),
        &[stored(&a)],
        &Wanted::Stored(Vec::new()),
        "steady",
    );
    assert!(plan.actions.is_empty(), "{:?}", kinds(&plan));
}

#[test]
fn in_step_bundles_plan_nothing() {
    let (a, b) = (ca(), ca());
    let plan = plan(
        &target(),
        &[stored(&a), stored(&b)],
        &wanted(&[&a, &b]),
        "steady",
    );
    assert!(plan.actions.is_empty());
    assert_eq!(plan.entries().len(), 1);
    assert_eq!(plan.entries()[0].action, Action::Keep);
}

#[test]
fn readers_elsewhere_or_by_name_are_waited_for_by_their_timer() {
    let mut config = test_profile(None);
    config.trust_bundles.push(target());
    let by_selector = Projection {
        name: None,
        signer: Some(SIGNER.into()),
        selector: Some(Selector {
            match_labels: [("mesh".to_string(), "a".to_string())].into(),
            match_expressions: Vec::new(),
        }),
    };
    let pod = |ns: &str, name: &str, p: &Projection| Projector {
        namespace: ns.into(),
        pod: name.into(),
        projections: vec![p.clone()],
    };
    let wrote = vec![mount_name(SIGNER)];
    // In the run's namespace, by selector: observed (poked), no timer.
    let here = pod(&config.namespace, "a", &by_selector);
    assert!(unobserved(&config, &wrote, std::slice::from_ref(&here)).is_empty());
    // Elsewhere: the timer.
    let there = pod("other", "b", &by_selector);
    let u = unobserved(&config, &wrote, &[here.clone(), there]);
    assert_eq!(u.len(), 1);
    assert!(u[0].why.contains("other/b"), "{}", u[0].why);
    assert_eq!(u[0].extra, std::time::Duration::ZERO);
    // By name, even here: the timer after the kubelet's cache.
    let pinned = Projection {
        name: Some(object_name(SIGNER, "0123456789abcdef")),
        signer: None,
        selector: None,
    };
    let u = unobserved(&config, &wrote, &[pod(&config.namespace, "c", &pinned)]);
    assert_eq!(u[0].extra, BY_NAME_STALE);
    // Not written in this step: nothing waits.
    assert!(unobserved(&config, &[], &[pod("other", "b", &by_selector)]).is_empty());
}

#[test]
fn another_installations_bundles_of_the_signer_are_never_ours() {
    let (mine, theirs) = (ca(), ca());
    let mut other = target();
    other
        .labels
        .insert("certgen.dev/namespace".into(), "elsewhere".into());
    // Their bundle carries certgen's labels, but another installation's.
    let read = BundleRead {
        labels: labels_for(&other.labels, &theirs.cert),
        ..stored(&theirs)
    };
    let plan = plan(
        &target(),
        &[stored(&mine), read],
        &wanted(&[&mine]),
        "cleanup",
    );
    assert!(plan.actions.is_empty(), "{:?}", kinds(&plan));
    assert_eq!(
        plan.foreign,
        vec![object_name(SIGNER, &theirs.cert.short_fingerprint())]
    );
}

#[test]
fn the_verifier_refuses_a_bundle_write_that_would_reject_a_stored_leaf() {
    let (old, new) = (ca(), ca());
    let config = test_profile(None);
    let now = OffsetDateTime::now_utc();
    let leaf = |ca: &CaKey| {
        let mut spec = config.tls[0].leaf.clone();
        spec.validity = std::time::Duration::from_secs(3600);
        crate::pki::issue_leaf(&spec, ca, now).unwrap().cert
    };
    let leaves = |ca: &CaKey| -> std::collections::BTreeMap<String, Cert> {
        [(config.tls[0].name.clone(), leaf(ca))].into()
    };
    let read = [stored(&old), stored(&new)];
    let cleanup = plan(&target(), &read, &wanted(&[&new]), "cleanup");
    // The cleanup once the leaves are signed by the new CA: accepted.
    assert!(verified(&config, &target(), &cleanup, &read, &leaves(&new), now).is_ok());
    // The same cleanup while a leaf is still signed by the old CA: refused, naming both.
    let err = verified(&config, &target(), &cleanup, &read, &leaves(&old), now)
        .unwrap_err()
        .to_string();
    assert!(err.contains("would reject"), "{err}");
    assert!(
        err.contains(&object_name(SIGNER, &old.cert.short_fingerprint())),
        "{err}"
    );
    // The trust step's create, with the leaves still the old CA's: accepted.
    let trust = plan(&target(), &read[..1], &wanted(&[&old, &new]), "trust");
    assert!(verified(&config, &target(), &trust, &read[..1], &leaves(&old), now).is_ok());
}
