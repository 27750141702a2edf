use std::collections::BTreeMap;
use std::time::Duration;

use time::macros::datetime;

use super::*;
use crate::config::{Env, MANAGED_BY_LABEL, Overrides, Source};
use crate::observe::Snapshot;
use crate::observe::fixtures::{installed, tls};
use crate::pki::{CaKey, CaSpec, Issued, bundle_pem, issue_ca, issue_leaf};
use crate::secret::{Observed, StoredSecret, TYPE_OPAQUE, TYPE_TLS};

const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
const DAY: time::Duration = time::Duration::DAY;

fn immediate() -> Options {
    Options {
        strategy: Strategy::Immediate,
        ..Options::default()
    }
}

/// The built-in profile with the lifetimes these tests' dates were written for: a 5-year CA
/// and 1-year leaves.
fn config() -> Config {
    let mut config = crate::config::test_profile(None);
    config.ca.spec.validity = Duration::from_secs(1825 * 86_400);
    for t in &mut config.tls {
        t.leaf.validity = Duration::from_secs(365 * 86_400);
    }
    config
}

fn object(name: &str) -> String {
    format!("Secret ns/{name}")
}

fn new_ca(at: OffsetDateTime) -> (CaKey, Issued) {
    issue_ca(&config().ca.spec, at).unwrap()
}

/// A cluster where certgen already ran at `at` with the given CA.
struct World {
    config: Config,
    state: Snapshot,
}

impl World {
    fn installed(ca: &(CaKey, Issued), at: OffsetDateTime) -> Self {
        let config = config();
        let state = installed(&config, ca, at);
        Self { config, state }
    }

    fn plan(&self, now: OffsetDateTime, options: Options) -> Result<Plan, Invalid> {
        let planned = plan(
            &self.config,
            &self.state,
            now,
            options,
            Known::default(),
            &object,
        );
        if let Ok(p) = &planned {
            complete(p);
        }
        planned
    }

    fn edit(&mut self, name: &str, f: impl FnOnce(&mut StoredSecret)) {
        self.state.edit(name, f);
    }
}

/// What apply relies on: a Secret is written exactly when its action writes; every reference
/// to the new CA comes with the spec to generate it; a leaf's certificate and key come with
/// the leaf to issue.
fn complete(plan: &Plan) {
    let new = |r: &CaRef| matches!(r, CaRef::New);
    let writes = std::iter::once((&plan.ca.name, plan.ca.action, &plan.ca.write))
        .chain(plan.secrets.iter().map(|s| (&s.name, s.action, &s.write)));
    for (name, action, write) in writes {
        assert_eq!(action.writes(), write.is_some(), "{name}: {action:?}");
        let Some(w) = write else { continue };
        let mut refers_new = w.ca_annotation.as_ref().is_some_and(new)
            || w.issue
                .as_ref()
                .is_some_and(|i| matches!(i.signer, Signer::New));
        for (key, content) in &w.data {
            refers_new |= match content {
                Content::Bundle(refs) => refs.iter().any(new),
                Content::Cert(r) => new(r),
                Content::Key(s) => matches!(s, Signer::New),
                Content::LeafCert | Content::LeafKey => {
                    assert!(w.issue.is_some(), "{name}: {key} without a leaf to issue");
                    false
                }
                Content::Random(_) | Content::Empty => false,
            };
        }
        assert!(
            !refers_new || plan.ca.new.is_some(),
            "{name} refers to a new CA the plan does not generate"
        );
    }
}

fn keys(write: &Option<Write>) -> Vec<(&str, String)> {
    let w = write.as_ref().expect("a write");
    w.data
        .iter()
        .map(|(k, c)| {
            let c = match c {
                Content::Bundle(refs) => format!("bundle of {}", refs.len()),
                Content::Cert(CaRef::New) => "new CA".into(),
                Content::Cert(CaRef::Cert(c)) => format!("CA {}", c.short_fingerprint()),
                Content::Key(Signer::New) => "new CA key".into(),
                Content::Key(Signer::Held(k)) => format!("CA key {}", k.cert.short_fingerprint()),
                Content::LeafCert => "leaf".into(),
                Content::LeafKey => "leaf key".into(),
                Content::Random(n) => format!("{n} random bytes"),
                Content::Empty => "empty".into(),
            };
            (k.as_str(), c)
        })
        .collect()
}

fn actions(plan: &Plan) -> Vec<(String, Action)> {
    std::iter::once((plan.ca.name.clone(), plan.ca.action))
        .chain(plan.secrets.iter().map(|s| (s.name.clone(), s.action)))
        .collect()
}

fn action_of(plan: &Plan, name: &str) -> Action {
    actions(plan)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap()
        .1
}

#[test]
fn a_fresh_namespace_creates_everything() {
    let plan = plan(
        &config(),
        &Snapshot::default(),
        NOW,
        Options::default(),
        Known::default(),
        &object,
    )
    .unwrap();
    assert!(
        actions(&plan).iter().all(|(_, a)| *a == Action::Create),
        "{:?}",
        actions(&plan)
    );
    assert_eq!(plan.secrets.len(), 4);
    complete(&plan);
}

#[test]
fn every_byte_of_a_fresh_install_is_decided_by_the_plan() {
    let config = config();
    let plan = plan(
        &config,
        &Snapshot::default(),
        NOW,
        Options::default(),
        Known::default(),
        &object,
    )
    .unwrap();
    assert_eq!(plan.ca.new.as_ref(), Some(&config.ca.spec));
    let ca = plan.ca.write.as_ref().unwrap();
    assert_eq!(
        keys(&plan.ca.write),
        [
            ("ca.crt", "bundle of 1".to_string()),
            ("tls.crt", "new CA".into()),
            ("tls.key", "new CA key".into())
        ]
    );
    assert_eq!(ca.type_, TYPE_TLS);
    assert_eq!(ca.secret_keys, ["tls.key"]);
    assert_eq!(ca.remove, ["next.crt", "next.key"]);
    assert_eq!(ca.expect, crate::secret::Expect::Absent);
    assert!(matches!(ca.ca_annotation, Some(CaRef::New)));
    assert_eq!(ca.labels[MANAGED_BY_LABEL], "certgen");
    for (s, t) in plan.secrets.iter().zip(&config.tls) {
        let w = s.write.as_ref().unwrap();
        assert_eq!(
            keys(&s.write),
            [
                ("ca.crt", "bundle of 1".to_string()),
                ("tls.crt", "leaf".into()),
                ("tls.key", "leaf key".into())
            ]
        );
        assert_eq!(w.secret_keys, ["tls.key"]);
        let issue = w.issue.as_ref().unwrap();
        assert_eq!(issue.spec, t.leaf, "{}", s.name);
        assert!(matches!(issue.signer, Signer::New));
    }
    let hmac = plan.secrets.last().unwrap();
    assert_eq!(
        keys(&hmac.write),
        [("hmac-secret", "32 random bytes".to_string())]
    );
    let w = hmac.write.as_ref().unwrap();
    assert_eq!(
        (w.type_, w.secret_keys.as_slice()),
        (TYPE_OPAQUE, &["hmac-secret".to_string()][..])
    );
    assert!(w.ca_annotation.is_none() && w.issue.is_none());
}

#[test]
fn a_promotion_writes_the_pending_ca_as_active_and_signs_every_leaf_with_it() {
    let ca = new_ca(NOW - DAY * 10);
    let next = new_ca(NOW - DAY);
    let mut world = World::installed(&ca, NOW - DAY * 10);
    world
        .state
        .set_bundles(&[next.0.cert.clone(), ca.0.cert.clone()]);
    world.edit("envoy-gateway-ca", |s| {
        s.data
            .insert("next.crt".into(), next.1.cert.pem().into_bytes());
        s.data
            .insert("next.key".into(), next.1.key.expose().as_bytes().to_vec());
    });
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(plan.ca.action, Action::Promote, "{:?}", actions(&plan));
    assert!(plan.ca.new.is_none(), "a promotion generates no CA");
    let fp = next.0.cert.short_fingerprint();
    assert_eq!(
        keys(&plan.ca.write),
        [
            ("ca.crt", "bundle of 2".to_string()),
            ("tls.crt", format!("CA {fp}")),
            ("tls.key", format!("CA key {fp}"))
        ]
    );
    let w = plan.ca.write.as_ref().unwrap();
    assert_eq!(w.remove, ["next.crt", "next.key"]);
    assert_eq!(w.ca_annotation, Some(CaRef::Cert(next.0.cert.clone())));
    assert_eq!(w.expect, crate::secret::Expect::Version("1".into()));
    assert!(matches!(&plan.ca.after.signer, Some(Signer::Held(k)) if k.cert == next.0.cert));
    assert!(plan.ca.after.pending.is_none());
    for s in plan.secrets.iter().filter(|s| s.kind == Kind::Tls) {
        let issue = s.write.as_ref().and_then(|w| w.issue.as_ref()).unwrap();
        assert!(
            matches!(&issue.signer, Signer::Held(k) if k.cert == next.0.cert),
            "{}",
            s.name
        );
    }
}

#[test]
fn a_valid_installation_is_a_no_op() {
    let ca = new_ca(NOW - DAY * 10);
    let world = World::installed(&ca, NOW - DAY * 10);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert!(!plan.writes(), "{:?}", actions(&plan));
}

#[test]
fn a_leaf_within_renew_before_is_renewed_alone() {
    let ca = new_ca(NOW - DAY * 400);
    let mut world = World::installed(&ca, NOW - DAY * 10);
    let t = world.config.tls[1].clone();
    let old_leaf = issue_leaf(&t.leaf, &ca.0, NOW - DAY * 340).unwrap();
    let bundle = bundle_pem(std::slice::from_ref(&ca.0.cert)).into_bytes();
    world
        .state
        .secrets
        .insert(t.name.clone(), tls(&t.name, &bundle, &old_leaf));
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(action_of(&plan, "envoy"), Action::Renew);
    assert!(
        plan.secrets[1].reason.contains("within renewBefore"),
        "{}",
        plan.secrets[1].reason
    );
    let writes: Vec<_> = actions(&plan)
        .into_iter()
        .filter(|(_, a)| a.writes())
        .collect();
    assert_eq!(writes, [("envoy".to_string(), Action::Renew)]);
}

#[test]
fn a_san_change_in_the_config_renews_the_leaf() {
    let ca = new_ca(NOW);
    let world = World::installed(&ca, NOW);
    let other_ns = World {
        config: Config::resolve(
            &Source::Profile("envoy-gateway".into()),
            &Overrides {
                namespace: Some("envoy-gateway-system".into()),
                cluster_domain: Some("corp.example".into()),
                ..Overrides::default()
            },
            &Env::default(),
        )
        .unwrap(),
        state: world.state.clone(),
    };
    let plan = other_ns.plan(NOW, Options::default()).unwrap();
    assert_eq!(action_of(&plan, "envoy-gateway"), Action::Renew);
    assert!(
        plan.secrets[0]
            .reason
            .contains("envoy-gateway.envoy-gateway-system.svc.corp.example")
    );
    // The wildcard SANs do not mention the cluster domain, so those leaves stay.
    assert_eq!(action_of(&plan, "envoy"), Action::Keep);
}

/// Issue 46, friction 7: the staged rotation's reason is the one the run was given: the
/// `--overwrite` flag, or `certgen create`'s certificates outliving `--validity` (no
/// `--overwrite` was given there).
#[test]
fn a_rotation_says_why_it_was_asked_for() {
    let ca = new_ca(NOW - DAY);
    let world = World::installed(&ca, NOW - DAY);
    let reason = |why| {
        let plan = world
            .plan(
                NOW,
                Options {
                    overwrite: true,
                    overwrite_why: why,
                    ..Options::default()
                },
            )
            .unwrap();
        assert_eq!(plan.ca.action, Action::Trust);
        plan.ca.reason
    };
    assert_eq!(
        reason(crate::config::OverwriteWhy::Asked),
        "--overwrite: rotating the CA (staged: trust phase)"
    );
    let outlives = reason(crate::config::OverwriteWhy::OutlivesValidity(
        std::time::Duration::from_secs(90 * 86_400),
    ));
    assert_eq!(
        outlives,
        "the certificates outlive --validity 90d: rotating the CA (staged: trust phase)"
    );
}

#[test]
fn overwrite_rotates_the_ca_keeps_the_prior_and_leaves_hmac_alone() {
    let ca = new_ca(NOW - DAY);
    let world = World::installed(&ca, NOW - DAY);
    let plan = world
        .plan(
            NOW,
            Options {
                overwrite: true,
                ..immediate()
            },
        )
        .unwrap();
    assert_eq!(plan.ca.action, Action::Rotate);
    assert_eq!(
        plan.ca.bundle,
        [CaRef::New, CaRef::Cert(ca.0.cert.clone())],
        "the active CA stays trusted beside the new one"
    );
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        assert_eq!(action_of(&plan, name), Action::Renew);
    }
    assert_eq!(action_of(&plan, "envoy-oidc-hmac"), Action::Keep);
    let plan = world
        .plan(
            NOW,
            Options {
                overwrite: true,
                rotate_hmac: true,
                ..immediate()
            },
        )
        .unwrap();
    assert_eq!(action_of(&plan, "envoy-oidc-hmac"), Action::Renew);
}

#[test]
fn a_ca_near_expiry_rotates_by_itself() {
    let ca = new_ca(NOW - DAY * 1800);
    let world = World::installed(&ca, NOW - DAY);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(plan.ca.action, Action::Trust, "staged by default");
    assert!(plan.ca.reason.contains("expires in"), "{}", plan.ca.reason);
    let plan = world.plan(NOW, immediate()).unwrap();
    assert_eq!(plan.ca.action, Action::Rotate);
}

#[test]
fn a_leaf_from_another_ca_is_reissued_by_the_active_one() {
    let ca = new_ca(NOW);
    let other = new_ca(NOW);
    let mut world = World::installed(&ca, NOW);
    let t = world.config.tls[0].clone();
    let stray = issue_leaf(&t.leaf, &other.0, NOW).unwrap();
    let bundle = bundle_pem(std::slice::from_ref(&ca.0.cert)).into_bytes();
    world
        .state
        .secrets
        .insert(t.name.clone(), tls(&t.name, &bundle, &stray));
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(action_of(&plan, "envoy-gateway"), Action::Renew);
    assert!(plan.secrets[0].reason.contains("other than the active"));
}

#[test]
fn an_expired_prior_is_dropped_from_every_bundle() {
    let old = issue_ca(
        &CaSpec {
            validity: Duration::from_secs(30 * 86_400),
            ..config().ca.spec
        },
        NOW - DAY * 40,
    )
    .unwrap();
    let ca = new_ca(NOW - DAY * 20);
    let mut world = World::installed(&ca, NOW - DAY * 20);
    world
        .state
        .set_bundles(&[ca.0.cert.clone(), old.0.cert.clone()]);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(plan.ca.action, Action::UpdateBundle);
    assert_eq!(plan.ca.bundle, [CaRef::Cert(ca.0.cert.clone())]);
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        assert_eq!(action_of(&plan, name), Action::UpdateBundle);
    }
}

#[test]
fn foreign_owned_secrets_are_refused_unless_forced() {
    let ca = new_ca(NOW);
    let owners: [fn(&mut StoredSecret); 2] = [
        |s| s.owners.push("Certificate/envoy".into()),
        |s| {
            s.labels.insert(MANAGED_BY_LABEL.into(), "Helm".into());
        },
    ];
    for own in owners {
        let mut world = World::installed(&ca, NOW);
        world.edit("envoy", own);
        let err = world
            .plan(
                NOW,
                Options {
                    overwrite: true,
                    ..immediate()
                },
            )
            .unwrap_err();
        assert_eq!(err.object, "Secret ns/envoy");
        assert!(err.problem.contains("refusing to take it over"), "{err}");
        assert!(err.fix.contains("--force"), "{err}");
        let forced = world.plan(
            NOW,
            Options {
                overwrite: true,
                force: true,
                ..immediate()
            },
        );
        assert_eq!(action_of(&forced.unwrap(), "envoy"), Action::Renew);
    }
}

#[test]
fn a_secret_cert_manager_issues_into_is_refused_even_when_forced() {
    use crate::secret::CertificateSeen;
    let ca = new_ca(NOW);
    let issued_by = |certificate: Option<CertificateSeen>| {
        move |s: &mut StoredSecret| {
            s.annotations
                .insert("cert-manager.io/certificate-name".into(), "envoy".into());
            s.certificate = certificate.clone().map(Box::new);
        }
    };
    let live = [
        // Read in a cluster: the Certificate exists, or could not be read.
        Some(CertificateSeen::Present {
            name: "envoy".into(),
            handed_over: None,
        }),
        Some(CertificateSeen::Unreadable {
            name: "envoy".into(),
            why: "403".into(),
        }),
        // Not looked up (no cluster): taken as live.
        None,
    ];
    for certificate in live {
        let mut world = World::installed(&ca, NOW);
        world.edit("envoy", issued_by(certificate.clone()));
        for force in [false, true] {
            let err = world
                .plan(
                    NOW,
                    Options {
                        overwrite: true,
                        force,
                        ..immediate()
                    },
                )
                .unwrap_err();
            assert_eq!(err.object, "Secret ns/envoy");
            assert!(err.problem.contains("cert-manager"), "{err}");
            assert!(err.fix.contains("delete the Certificate"), "{err}");
            assert!(
                err.fix
                    .contains("kubectl delete certificate -n NAMESPACE envoy"),
                "{err}"
            );
        }
    }
    // Once the Certificate is deleted, nobody issues into the Secret: certgen adopts it.
    let mut world = World::installed(&ca, NOW);
    world.edit(
        "envoy",
        issued_by(Some(CertificateSeen::Gone {
            name: "envoy".into(),
        })),
    );
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(action_of(&plan, "envoy"), Action::Keep);
    // The CA injector's mark on a Secret it reads from does not make it cert-manager's.
    let mut world = World::installed(&ca, NOW);
    world.edit("envoy", |s| {
        s.annotations.insert(
            "cert-manager.io/allow-direct-injection".into(),
            "true".into(),
        );
    });
    assert_eq!(
        action_of(&world.plan(NOW, Options::default()).unwrap(), "envoy"),
        Action::Keep
    );
}

#[test]
fn after_a_hand_over_to_cert_manager_the_plan_stands_down() {
    use crate::secret::CertificateSeen;
    let ca = new_ca(NOW);
    let handed = |s: &mut StoredSecret| {
        s.annotations
            .insert("cert-manager.io/certificate-name".into(), s.name.clone());
        s.certificate = Some(Box::new(CertificateSeen::Present {
            name: s.name.clone(),
            handed_over: Some("envoy-gateway".into()),
        }));
    };
    let mut world = World::installed(&ca, NOW);
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        world.edit(name, handed);
    }
    // Whatever is asked, even a CA rotation, nothing of the TLS Secrets or the CA is written,
    // and each says who manages it; a missing HMAC Secret is still certgen's to create.
    world
        .state
        .secrets
        .insert("envoy-oidc-hmac".into(), crate::secret::Observed::Absent);
    for options in [
        Options::default(),
        Options {
            overwrite: true,
            ..immediate()
        },
    ] {
        let plan = world
            .plan(NOW + time::Duration::days(2000), options)
            .unwrap();
        assert_eq!(plan.ca.action, Action::Keep);
        assert!(
            plan.ca.reason.contains("cert-manager's CA Issuer"),
            "{}",
            plan.ca.reason
        );
        for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
            let s = plan.secrets.iter().find(|s| s.name == name).unwrap();
            assert_eq!(s.action, Action::Keep, "{name}");
            assert!(s.reason.contains("managed by cert-manager"), "{}", s.reason);
        }
        assert!(action_of(&plan, "envoy-oidc-hmac").writes());
        assert!(matches!(plan.phase, Phase::Steady));
    }
    // Only part of them handed over: refused, naming the one left.
    let mut world = World::installed(&ca, NOW);
    world.edit("envoy", handed);
    let err = world.plan(NOW, Options::default()).unwrap_err();
    assert_eq!(err.object, "Secret ns/envoy-gateway");
    assert!(err.problem.contains("handed over to cert-manager"), "{err}");
    assert!(
        err.fix.contains("certgen handover cert-manager --apply"),
        "{err}"
    );
}

#[test]
fn a_secret_of_the_wrong_type_is_refused_even_when_forced() {
    let ca = new_ca(NOW);
    let mut world = World::installed(&ca, NOW);
    world.edit("envoy", |s| s.type_ = "Opaque".into());
    for force in [false, true] {
        let err = world
            .plan(
                NOW,
                Options {
                    force,
                    ..immediate()
                },
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("has type \"Opaque\", expected \"kubernetes.io/tls\""),
            "{err}"
        );
        assert!(err.fix.contains("delete it"), "{err}");
    }
}

#[test]
fn unusable_contents_are_errors_naming_the_key_and_force_replaces_them() {
    let ca = new_ca(NOW);
    let other = new_ca(NOW);
    let cases: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        (
            "envoy",
            "tls.crt",
            b"not a certificate".to_vec(),
            "tls.crt: no PEM certificate",
        ),
        (
            "envoy",
            "tls.crt",
            b"-----BEGIN CERTIFICATE-----\nMIIB".to_vec(),
            "tls.crt: malformed PEM",
        ),
        (
            "envoy",
            "tls.key",
            other.1.key.expose().as_bytes().to_vec(),
            "tls.key: the private key does not match",
        ),
        (
            "envoy",
            "tls.key",
            b"".to_vec(),
            "tls.crt or tls.key is missing",
        ),
        (
            "envoy",
            "ca.crt",
            bundle_pem(&[ca.0.cert.clone(), other.0.cert.clone(), new_ca(NOW).0.cert]).into_bytes(),
            "3 distinct CAs",
        ),
        (
            "envoy-gateway-ca",
            "tls.key",
            other.1.key.expose().as_bytes().to_vec(),
            "tls.key: the private key does not match",
        ),
    ];
    for (name, key, value, expect) in cases {
        let mut world = World::installed(&ca, NOW);
        world.edit(name, |s| {
            s.data.insert(key.into(), value.clone());
        });
        let err = world.plan(NOW, Options::default()).unwrap_err();
        assert_eq!(err.object, format!("Secret ns/{name}"));
        assert!(err.problem.contains(expect), "expected {expect:?} in {err}");
        assert!(
            !err.to_string().contains("PRIVATE KEY"),
            "an error must not quote key material: {err}"
        );
        let forced = world
            .plan(
                NOW,
                Options {
                    force: true,
                    ..immediate()
                },
            )
            .unwrap();
        let want = if name == "envoy-gateway-ca" {
            Action::Rotate
        } else {
            Action::Renew
        };
        assert_eq!(action_of(&forced, name), want, "{expect}");
    }
}

#[test]
fn an_hmac_secret_without_its_key_is_refused_unless_forced() {
    let ca = new_ca(NOW);
    let mut world = World::installed(&ca, NOW);
    world.edit("envoy-oidc-hmac", |s| {
        s.data.clear();
        s.data.insert("other".into(), vec![1]);
    });
    let err = world.plan(NOW, Options::default()).unwrap_err();
    assert!(err.problem.contains("\"hmac-secret\" is missing"), "{err}");
    let forced = world
        .plan(
            NOW,
            Options {
                force: true,
                ..immediate()
            },
        )
        .unwrap();
    assert_eq!(action_of(&forced, "envoy-oidc-hmac"), Action::Renew);
}

#[test]
fn leaves_from_another_tool_are_kept_until_due_then_moved_to_a_certgen_ca() {
    // Envoy Gateway's certgen: no CA Secret, leaves signed by a CA whose key certgen never sees.
    let theirs = new_ca(NOW - DAY * 300);
    let mut world = World::installed(&theirs, NOW - DAY * 300);
    world.state.ca = Some(Observed::Absent);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert!(!plan.writes(), "{:?}", actions(&plan));
    assert!(
        plan.ca.reason.contains("another tool"),
        "{}",
        plan.ca.reason
    );

    let later = NOW + DAY * 40; // the leaves are now within renewBefore
    let plan = world.plan(later, Options::default()).unwrap();
    // Staged like any rotation: their CA is the current trust, the new one is added first.
    assert_eq!(plan.ca.action, Action::Trust);
    assert_eq!(plan.phase, Phase::Trust);
    assert_eq!(plan.ca.adopted.as_ref(), Some(&theirs.0.cert));
    assert_eq!(
        plan.ca.bundle,
        [CaRef::New, CaRef::Cert(theirs.0.cert.clone())],
        "their CA stays trusted"
    );
    assert!(
        plan.secrets
            .iter()
            .filter(|s| s.kind == Kind::Tls)
            .all(|s| s.action == Action::UpdateBundle),
        "no leaf changes before the gate: {:?}",
        actions(&plan)
    );
    // The CA Secret is created holding their CA with an empty key, and the new one pending.
    let fp = theirs.0.cert.short_fingerprint();
    assert_eq!(
        keys(&plan.ca.write),
        [
            ("ca.crt", "bundle of 2".to_string()),
            ("next.crt", "new CA".into()),
            ("next.key", "new CA key".into()),
            ("tls.crt", format!("CA {fp}")),
            ("tls.key", "empty".into())
        ]
    );
    let w = plan.ca.write.as_ref().unwrap();
    assert_eq!(w.secret_keys, ["next.key", "tls.key"]);
    assert_eq!(w.expect, crate::secret::Expect::Absent);
    assert!(w.ca_annotation.is_none(), "the active CA does not change");
}

#[test]
fn clipped_leaves_are_not_renewed_by_a_ca_about_to_be_replaced() {
    // The CA has 20 days left: inside its own renewBefore (90 days) and the leaves' (30
    // days). Re-issued by it, a leaf would be clipped and due again at once.
    let ca = new_ca(NOW - DAY * 1805);
    let world = World::installed(&ca, NOW - DAY * 100);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(plan.ca.action, Action::Trust, "the CA rotates, staged");
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        assert_eq!(action_of(&plan, name), Action::UpdateBundle, "{name}");
    }
}

/// Leaves of the active CA `ca`, every bundle still trusting the prior one too (a cleanup
/// pending), each Secret last written `ago` seconds before [`NOW`].
fn cleanup_pending(ago: i64) -> ((CaKey, Issued), World) {
    let old = new_ca(NOW - DAY * 10);
    let ca = new_ca(NOW - DAY * 2);
    let mut world = World::installed(&ca, NOW - DAY * 2);
    let two = bundle_pem(&[ca.0.cert.clone(), old.0.cert.clone()]).into_bytes();
    for name in [
        "envoy-gateway-ca",
        "envoy-gateway",
        "envoy",
        "envoy-rate-limit",
    ] {
        world.edit(name, |s| {
            s.data.insert("ca.crt".into(), two.clone());
            s.written_at = Some(NOW - time::Duration::seconds(ago));
        });
    }
    (ca, world)
}

#[test]
fn the_prior_ca_is_dropped_only_after_the_gate() {
    let (ca, world) = cleanup_pending(30);
    let delay = |secs| Options {
        propagation_delay: Duration::from_secs(secs),
        ..Options::default()
    };
    // The last leaf write was 30 s ago: with a 90 s delay, the cleanup waits (optional).
    let plan = world.plan(NOW, delay(90)).unwrap();
    assert!(!plan.writes(), "{:?}", actions(&plan));
    assert!(matches!(plan.phase, Phase::Gate { optional: true, .. }));
    // With a 10 s delay it is due: every bundle becomes the active CA alone.
    let plan = world.plan(NOW, delay(10)).unwrap();
    assert_eq!(plan.phase, Phase::Cleanup { last: true });
    assert_eq!(plan.ca.bundle, [CaRef::Cert(ca.0.cert.clone())]);
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        assert_eq!(action_of(&plan, name), Action::UpdateBundle, "{name}");
    }
}

/// A run that observes pods and finds the gate's newest write older than its own first look
/// (an earlier run's: one that ended at `--timeout` with a kubelet cut off, say) does not take
/// that gate as open on the stored time: it waits at it, on its own evidence, and once it has
/// (`gate_waited`) the step goes on. A run that cannot observe pods keeps the stored timer, as
/// does one whose newest write came after its first look.
#[test]
fn a_resumed_gate_opens_on_this_runs_evidence_not_the_stored_time() {
    let (_, world) = cleanup_pending(300);
    let options = Options {
        propagation_delay: Duration::from_secs(10),
        ..Options::default()
    };
    let with =
        |known: Known| plan(&world.config, &world.state, NOW, options, known, &object).unwrap();
    // The stored write is 300 s old, the delay 10 s: without pods to observe, the cleanup is due.
    assert_eq!(with(Known::default()).phase, Phase::Cleanup { last: true });
    // Observing since a minute ago: the gate waits for this run's evidence.
    let resumed = Known {
        observing_since: Some(NOW - time::Duration::seconds(60)),
        ..Known::default()
    };
    let gated = with(resumed.clone());
    assert!(!gated.writes(), "{:?}", actions(&gated));
    let Phase::Gate {
        state,
        optional,
        reason,
        ..
    } = gated.phase
    else {
        panic!("{:?}", gated.phase);
    };
    assert!(optional, "the cleanup's gate");
    // Its reason gives no time that has passed: this run's evidence opens it.
    assert!(
        reason.contains("once this run has seen consumers") && !reason.contains(" after "),
        "{reason}"
    );
    // Once this run waited at it for this state, the step goes on.
    let waited = Known {
        gate_waited: Some(state),
        ..resumed
    };
    assert_eq!(with(waited).phase, Phase::Cleanup { last: true });
    // A write after the first look (this run's own) keeps the timer's rule.
    let before_the_write = Known {
        observing_since: Some(NOW - time::Duration::seconds(400)),
        ..Known::default()
    };
    assert_eq!(with(before_the_write).phase, Phase::Cleanup { last: true });
}

/// Another tool replaced every leaf and bundle with its own CA (Envoy Gateway's certgen
/// `--overwrite`) and left certgen's CA Secret alone: certgen's CA is trusted by no held
/// bundle, so it is staged (the CA Secret records it as pending, the other tool's CA as the
/// adopted active trust) and every bundle gets it beside the other CA; no leaf is issued
/// before the gate (was: every leaf renewed with certgen's CA in the same step).
#[test]
fn a_ca_the_held_bundles_do_not_trust_is_staged_not_used() {
    let ours = new_ca(NOW - DAY * 100);
    let mut w = World::installed(&ours, NOW - DAY * 100);
    let theirs = new_ca(NOW - DAY);
    for t in w.config.tls.clone() {
        let leaf = issue_leaf(&t.leaf, &theirs.0, NOW - DAY).unwrap();
        w.state.secrets.insert(
            t.name.clone(),
            tls(&t.name, theirs.1.cert.pem().as_bytes(), &leaf),
        );
    }
    let p = w.plan(NOW, Options::default()).unwrap();
    assert_eq!(p.phase, Phase::Trust);
    assert!(p.ca.derived.is_some());
    assert_eq!(p.ca.action, Action::UpdateBundle);
    assert_eq!(
        p.ca.pending.as_ref().map(|k| &k.cert),
        Some(&ours.1.cert),
        "certgen's CA is pending, not a third"
    );
    assert_eq!(p.ca.adopted.as_ref(), Some(&theirs.1.cert));
    let write = p.ca.write.as_ref().unwrap();
    for key in ["tls.crt", "tls.key", "next.crt", "next.key", "ca.crt"] {
        assert!(write.data.contains_key(key), "the CA Secret records {key}");
    }
    let want = vec![
        CaRef::Cert(ours.1.cert.clone()),
        CaRef::Cert(theirs.1.cert.clone()),
    ];
    for s in p.secrets.iter().filter(|s| s.kind == Kind::Tls) {
        assert_eq!(s.action, Action::UpdateBundle, "{}: {}", s.name, s.reason);
        let w = s.write.as_ref().unwrap();
        assert!(w.issue.is_none(), "{}: no leaf before the gate", s.name);
        assert!(
            matches!(&w.data["ca.crt"], Content::Bundle(b) if *b == want),
            "{}",
            s.name
        );
    }
    // --overwrite: a new CA staged against the other tool's, certgen's own dropped.
    let p = w
        .plan(
            NOW,
            Options {
                overwrite: true,
                ..Options::default()
            },
        )
        .unwrap();
    assert_eq!(
        (p.phase.clone(), p.ca.action),
        (Phase::Trust, Action::Trust)
    );
    assert_eq!(p.ca.adopted.as_ref(), Some(&theirs.1.cert));
    // Only a Secret whose leaf certgen's CA signed and whose bundle lacks it (a hand-edited
    // ca.crt) needs nothing derived: the bundle gets certgen's CA back.
    let mut w = World::installed(&ours, NOW - DAY * 100);
    w.edit("envoy", |s| {
        s.data
            .insert("ca.crt".into(), theirs.1.cert.pem().into_bytes());
    });
    let p = w.plan(NOW, Options::default()).unwrap();
    assert!(p.ca.derived.is_none());
    let envoy = p.secrets.iter().find(|s| s.name == "envoy").unwrap();
    assert_eq!(envoy.action, Action::UpdateBundle, "{}", envoy.reason);
}

/// Leaves of two CAs certgen has no key for (its CA Secret is gone), both trusted everywhere,
/// and a Secret that must be issued: a new CA cannot be trusted beside both in a bundle of
/// two, so the run refuses, naming both CAs and the fix, and `--force` goes on.
#[test]
fn two_keyless_cas_and_a_leaf_to_issue_are_refused_with_the_fix() {
    let k = new_ca(NOW - DAY * 10);
    let x = new_ca(NOW - DAY * 5);
    let mut w = World::installed(&k, NOW - DAY * 10);
    w.state.ca = None;
    let both = bundle_pem(&[k.1.cert.clone(), x.1.cert.clone()]);
    let eg = w.config.tls[0].clone();
    let leaf = issue_leaf(&eg.leaf, &x.0, NOW - DAY).unwrap();
    w.state
        .secrets
        .insert(eg.name.clone(), tls(&eg.name, both.as_bytes(), &leaf));
    for t in &w.config.tls.clone()[1..2] {
        w.edit(&t.name, |s| {
            s.data.insert("ca.crt".into(), both.clone().into_bytes());
        });
    }
    w.state.secrets.remove(&w.config.tls[2].name);
    let err = w.plan(NOW, Options::default()).unwrap_err();
    assert!(
        err.problem.contains("two CAs certgen has no key for"),
        "{err}"
    );
    assert!(err.problem.contains(&k.1.cert.short_fingerprint()), "{err}");
    assert!(err.problem.contains(&x.1.cert.short_fingerprint()), "{err}");
    assert!(err.fix.starts_with("nothing was written"), "{err}");
    let forced = w
        .plan(
            NOW,
            Options {
                force: true,
                ..Options::default()
            },
        )
        .unwrap();
    assert_eq!(forced.phase, Phase::Trust);
}

/// One TLS Secret laid out as kube-webhook-certgen writes it: `Opaque`, keys `ca`, `cert`,
/// `key`; its CA's key is nowhere.
fn kwc_world(ca: &(CaKey, Issued), at: OffsetDateTime) -> World {
    let mut config = config();
    config.tls.truncate(1);
    config.hmac.clear();
    config.consumers.clear();
    config.webhooks.clear();
    config.tls[0].layout = crate::secret::Layout {
        bundle: "ca".into(),
        cert: "cert".into(),
        key: "key".into(),
        type_: TYPE_OPAQUE,
    };
    let t = &config.tls[0];
    let leaf = issue_leaf(&t.leaf, &ca.0, at).unwrap();
    let secret = crate::observe::fixtures::secret(
        &t.name,
        TYPE_OPAQUE,
        &[
            ("ca", ca.1.cert.pem().into_bytes()),
            ("cert", leaf.cert.pem().into_bytes()),
            ("key", leaf.key.expose().as_bytes().to_vec()),
        ],
    );
    let state = Snapshot {
        ca: Some(Observed::Absent),
        secrets: BTreeMap::from([(t.name.clone(), secret)]),
        ..Snapshot::default()
    };
    World { config, state }
}

#[test]
fn a_secret_of_another_layout_is_read_and_written_under_its_own_keys_and_type() {
    let theirs = new_ca(NOW - DAY * 300);
    let world = kwc_world(&theirs, NOW - DAY * 300);
    let name = world.config.tls[0].name.clone();
    // Valid: adopted as it is, nothing written.
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert!(!plan.writes(), "{:?}", actions(&plan));
    // Due: the staged rotation writes the trust into its own key, in its own type; the CA
    // Secret is certgen's, in certgen's layout.
    let plan = world.plan(NOW + DAY * 40, Options::default()).unwrap();
    assert_eq!(plan.phase, Phase::Trust);
    let leaf = plan.secrets.iter().find(|s| s.name == name).unwrap();
    assert_eq!(leaf.action, Action::UpdateBundle);
    assert_eq!(keys(&leaf.write), [("ca", "bundle of 2".to_string())]);
    assert_eq!(leaf.write.as_ref().unwrap().type_, TYPE_OPAQUE);
    assert_eq!(plan.ca.write.as_ref().unwrap().type_, TYPE_TLS);
    assert!(keys(&plan.ca.write).iter().any(|(k, _)| *k == "tls.crt"));

    // A leaf to issue goes under `cert` and `key`.
    let mut world = world;
    world.edit(&name, |s| {
        s.data.remove("cert");
    });
    let e = world.plan(NOW, Options::default()).unwrap_err();
    assert!(e.problem.contains("cert or key is missing"), "{e:?}");
    let plan = world
        .plan(
            NOW,
            Options {
                force: true,
                ..Options::default()
            },
        )
        .unwrap();
    let leaf = plan.secrets.iter().find(|s| s.name == name).unwrap();
    let written: Vec<&str> = keys(&leaf.write).into_iter().map(|(k, _)| k).collect();
    assert!(
        written.contains(&"cert") && written.contains(&"key"),
        "{written:?}"
    );
    assert_eq!(leaf.write.as_ref().unwrap().secret_keys, ["key"]);

    // Its declared type is checked like certgen's own.
    let mut world = kwc_world(&theirs, NOW - DAY * 300);
    world.edit(&name, |s| s.type_ = TYPE_TLS.into());
    let e = world.plan(NOW, Options::default()).unwrap_err();
    assert!(e.problem.contains("expected \"Opaque\""), "{e:?}");
}

/// Issue 46, B2: certgen's own CA Secret gone while leaves certgen issued from it remain (each
/// names its CA in `certgen.dev/ca-sha256`): a plain run refuses, naming both ways out and
/// writing nothing; `--overwrite` stages a new CA (trust first, the lost CA kept beside it); a
/// leaf falling due stages one by itself, and says why.
#[test]
fn a_lost_ca_key_is_refused_unless_a_new_ca_is_asked_for_or_due() {
    let ca = new_ca(NOW - DAY);
    let mut w = World::installed(&ca, NOW - DAY);
    let fp = ca.0.cert.fingerprint_hex();
    for t in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        w.edit(t, |s| {
            s.annotations.insert(CA_ANNOTATION.into(), fp.clone());
        });
    }
    w.state.ca = Some(Observed::Absent);

    let e = w.plan(NOW, Options::default()).unwrap_err();
    assert_eq!(e.object, "Secret ns/envoy-gateway-ca");
    assert!(
        e.problem.contains("certgen's CA Secret is gone")
            && e.problem.contains(&ca.0.cert.short_fingerprint())
            && e.problem
                .contains("Secrets envoy-gateway, envoy, envoy-rate-limit"),
        "{e}"
    );
    assert!(
        e.fix.starts_with("nothing was written")
            && e.fix
                .contains("restore Secret ns/envoy-gateway-ca from a backup")
            && e.fix.contains("certgen --overwrite"),
        "{e}"
    );

    let overwrite = Options {
        overwrite: true,
        ..Options::default()
    };
    let p = w.plan(NOW, overwrite).unwrap();
    assert_eq!(
        (p.ca.action, p.phase.clone()),
        (Action::Trust, Phase::Trust)
    );
    assert!(
        p.ca.reason.contains("gone with the key of CA"),
        "{}",
        p.ca.reason
    );

    // A year later every leaf is due: a new CA is staged without being asked.
    let later = NOW + 360 * DAY;
    let p = w.plan(later, Options::default()).unwrap();
    assert_eq!(p.ca.action, Action::Trust, "{}", p.ca.reason);
    assert!(
        p.ca.reason.contains("gone with the key of CA"),
        "{}",
        p.ca.reason
    );
}

/// Issue 46, B1: a rotation stopped after its promotion (leaves still of the prior CA, in
/// bundles that trust the new one) is under way: `--overwrite` finishes it (the leaves, by the
/// active CA) and asks for nothing more.
#[test]
fn a_rotation_under_way_is_the_one_overwrite_asks_for() {
    let old = new_ca(NOW - 30 * DAY);
    let mut w = World::installed(&old, NOW - 30 * DAY);
    let fresh = new_ca(NOW - DAY);
    // The CA Secret promoted to the new CA; every bundle [new, old]; leaves still old's.
    w.state
        .set_bundles(&[fresh.0.cert.clone(), old.0.cert.clone()]);
    w.edit("envoy-gateway-ca", |s| {
        s.data
            .insert("tls.crt".into(), fresh.1.cert.pem().into_bytes());
        s.data
            .insert("tls.key".into(), fresh.1.key.expose().as_bytes().to_vec());
    });
    let overwrite = Options {
        overwrite: true,
        ..Options::default()
    };
    let p = w.plan(NOW, overwrite).unwrap();
    assert!(p.under_way);
    assert!(p.ca.new.is_none(), "no new CA: {}", p.ca.reason);
    let renewed: Vec<&str> = p
        .secrets
        .iter()
        .filter(|s| s.action == Action::Renew)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(renewed, ["envoy-gateway", "envoy", "envoy-rate-limit"]);
    // A plain run plans the same step.
    let plain = w.plan(NOW, Options::default()).unwrap();
    assert!(plain.under_way && plain.ca.new.is_none());
    // Steady again: not under way, and --overwrite rotates.
    let w = World::installed(&fresh, NOW - DAY);
    let p = w.plan(NOW, overwrite).unwrap();
    assert!(!p.under_way);
    assert_eq!(p.ca.action, Action::Trust);
}

// Renewal windows (issue 45). NOW is 2026-06-01 12:00 UTC; the window below opens daily at
// 02:00 UTC for 4 hours, so NOW is outside it and the next opens 14 hours later.

const NIGHTLY: &str = "0 2 * * *;4h;UTC";

fn windowed(world: &mut World, window: &str, margin_days: u64) {
    world.config.renewal = crate::window::Windows {
        windows: vec![window.parse().unwrap()],
        margin: Duration::from_secs(margin_days * 86_400),
    };
}

/// A world whose `envoy` leaf expires in 25 days (inside its 30-day renewBefore).
fn leaf_due(window: &str, margin_days: u64) -> World {
    let ca = new_ca(NOW - DAY * 400);
    let mut world = World::installed(&ca, NOW - DAY * 10);
    let t = world.config.tls[1].clone();
    let old_leaf = issue_leaf(&t.leaf, &ca.0, NOW - DAY * 340).unwrap();
    let bundle = bundle_pem(std::slice::from_ref(&ca.0.cert)).into_bytes();
    world
        .state
        .secrets
        .insert(t.name.clone(), tls(&t.name, &bundle, &old_leaf));
    windowed(&mut world, window, margin_days);
    world
}

#[test]
fn a_routine_leaf_renewal_outside_the_window_waits_for_it() {
    let plan = leaf_due(NIGHTLY, 1).plan(NOW, Options::default()).unwrap();
    assert!(!plan.writes(), "{:?}", actions(&plan));
    assert!(
        plan.secrets[1]
            .reason
            .contains("waits for the next renewal window at 2026-06-02T02:00:00Z"),
        "{}",
        plan.secrets[1].reason
    );
    assert_eq!(
        plan.window.next_start(),
        Some(datetime!(2026-06-02 02:00 UTC))
    );
    assert_eq!(plan.window.waiting.len(), 1);
    assert_eq!(plan.window.waiting[0].secret, "envoy");
    assert!(plan.window.emergency.is_empty());
}

#[test]
fn inside_the_window_the_routine_renewal_goes() {
    // 10:00-14:00 holds NOW.
    let plan = leaf_due("0 10 * * *;4h", 1)
        .plan(NOW, Options::default())
        .unwrap();
    assert_eq!(action_of(&plan, "envoy"), Action::Renew);
    assert_eq!(plan.window, WindowNote::default());
}

#[test]
fn a_renewal_that_cannot_wait_goes_now_and_says_why() {
    // A 30-day margin: the leaf (25 days left) cannot wait 14 hours for the window.
    let plan = leaf_due(NIGHTLY, 30).plan(NOW, Options::default()).unwrap();
    assert_eq!(action_of(&plan, "envoy"), Action::Renew);
    assert!(plan.window.waiting.is_empty());
    assert_eq!(plan.window.emergency.len(), 1);
    let why = &plan.window.emergency[0].why;
    assert!(why.contains("cannot wait"), "{why}");
    assert!(why.contains("2026-06-02T02:00:00Z"), "{why}");
    // A window that never comes back within the leaf's life: the same.
    let plan = leaf_due("0 2 1 1 *;1h", 1)
        .plan(NOW, Options::default())
        .unwrap();
    assert_eq!(action_of(&plan, "envoy"), Action::Renew);
    assert_eq!(plan.window.emergency.len(), 1);
}

#[test]
fn a_ca_rotation_waits_for_the_window_unless_overwrite_asks_without_respect() {
    let ca = new_ca(NOW - DAY * 1800); // 25 days left, inside the CA's 90-day renewBefore
    let mut world = World::installed(&ca, NOW - DAY);
    windowed(&mut world, NIGHTLY, 1);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert!(!plan.writes(), "{:?}", actions(&plan));
    assert_eq!(plan.window.waiting[0].secret, "envoy-gateway-ca");
    assert_eq!(plan.window.waiting[0].what, "the CA's rotation");
    // --overwrite by hand: not bound by the window.
    let overwrite = Options {
        overwrite: true,
        ..Options::default()
    };
    let plan = world.plan(NOW, overwrite).unwrap();
    assert_eq!(plan.ca.action, Action::Trust);
    // ... unless --respect-window.
    let respect = Options {
        respect_window: true,
        ..overwrite
    };
    let plan = world.plan(NOW, respect).unwrap();
    assert!(!plan.writes(), "{:?}", actions(&plan));
    assert!(plan.window.waiting[0].what.contains("--respect-window"));
    // Inside the window the routine rotation starts.
    windowed(&mut world, "0 12 * * *;1h", 1);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(plan.ca.action, Action::Trust);
}

#[test]
fn a_fresh_install_is_not_held_by_a_window() {
    let mut config = config();
    config.renewal = crate::window::Windows {
        windows: vec![NIGHTLY.parse().unwrap()],
        ..Default::default()
    };
    let plan = plan(
        &config,
        &Snapshot::default(),
        NOW,
        Options::default(),
        Known::default(),
        &object,
    )
    .unwrap();
    assert!(actions(&plan).iter().all(|(_, a)| *a == Action::Create));
    assert!(plan.window.waiting.is_empty() && plan.window.emergency.is_empty());
}

#[test]
fn a_rotation_already_started_finishes_outside_the_window() {
    // A pending CA stored (the trust step done) and the gate long open: the leaves step goes.
    let ca = new_ca(NOW - DAY * 10);
    let next = new_ca(NOW - DAY);
    let mut world = World::installed(&ca, NOW - DAY * 10);
    world
        .state
        .set_bundles(&[next.0.cert.clone(), ca.0.cert.clone()]);
    world.edit("envoy-gateway-ca", |s| {
        s.data
            .insert("next.crt".into(), next.1.cert.pem().into_bytes());
        s.data
            .insert("next.key".into(), next.1.key.expose().as_bytes().to_vec());
    });
    windowed(&mut world, NIGHTLY, 1);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(plan.ca.action, Action::Promote, "{:?}", actions(&plan));
    assert!(plan.window.waiting.is_empty());
}

#[test]
fn a_missing_leaf_is_created_outside_the_window() {
    let ca = new_ca(NOW - DAY * 10);
    let mut world = World::installed(&ca, NOW - DAY * 10);
    world.state.secrets.remove("envoy");
    windowed(&mut world, NIGHTLY, 1);
    let plan = world.plan(NOW, Options::default()).unwrap();
    assert_eq!(action_of(&plan, "envoy"), Action::Create);
}
