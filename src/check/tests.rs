use time::macros::datetime;

use super::*;
use crate::observe::fixtures::installed;
use crate::pki::{CaKey, Issued, issue_ca, issue_leaf};
use crate::secret::{Found, StoredSecret};

const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
const DAY: time::Duration = time::Duration::DAY;

fn config() -> Config {
    crate::config::test_profile(None)
}

fn pem(c: &Cert) -> Vec<u8> {
    c.pem().into_bytes()
}

/// What certgen leaves after a run at `at`: every Secret, each leaf from `ca`.
struct Stored {
    config: Config,
    ca: (CaKey, Issued),
    snapshot: Snapshot,
}

impl Stored {
    fn installed(at: OffsetDateTime) -> Self {
        let config = config();
        let ca = issue_ca(&config.ca.spec, at).unwrap();
        let snapshot = installed(&config, &ca, at);
        Self {
            config,
            ca,
            snapshot,
        }
    }

    fn edit(&mut self, name: &str, f: impl FnOnce(&mut StoredSecret)) {
        self.snapshot.edit(name, f);
    }

    fn check(&self, now: OffsetDateTime) -> CheckReport {
        self.check_with(now, &Context::default())
    }

    fn check_with(&self, now: OffsetDateTime, ctx: &Context) -> CheckReport {
        check(
            &self.config,
            &self.snapshot,
            now,
            "directory ./certs".into(),
            ctx,
        )
    }
}

fn row<'a>(report: &'a CheckReport, name: &str) -> &'a Row {
    report.secrets.iter().find(|r| r.secret == name).unwrap()
}

#[test]
fn a_fresh_installation_is_healthy_and_says_when_to_run_next() {
    let stored = Stored::installed(NOW - DAY);
    let report = stored.check(NOW);
    assert!(report.healthy, "{report:#?}");
    assert_eq!(report.rotation, None);
    let names: Vec<&str> = report.secrets.iter().map(|r| r.secret.as_str()).collect();
    assert_eq!(
        names,
        [
            "envoy-gateway-ca",
            "envoy-gateway",
            "envoy",
            "envoy-rate-limit",
            "envoy-oidc-hmac"
        ]
    );
    for r in &report.secrets {
        assert_eq!((r.status, r.problems.len()), ("ok", 0), "{r:?}");
    }
    let ca = row(&report, "envoy-gateway-ca");
    let fp = stored.ca.0.cert.short_fingerprint();
    assert_eq!(ca.issuer.as_deref(), Some(fp.as_str()));
    assert_eq!(row(&report, "envoy").issuer.as_deref(), Some(fp.as_str()));
    assert_eq!(row(&report, "envoy").bundle.len(), 1);
    // Leaves (5 years, renewed 30 days ahead) fall due before the CA (10 years, 90 days);
    // of leaves issued together, the first by name.
    let next = report.next_renewal.as_ref().unwrap();
    assert_eq!(next.secret, "envoy");
}

/// Issue 46, friction 7: a renewal whose due moment has passed is said to be overdue, with
/// "now", never "must run again before" a date gone by.
#[test]
fn a_renewal_past_its_due_moment_is_overdue_not_before_a_past_date() {
    let stored = Stored::installed(NOW - DAY);
    let fresh = stored.check(NOW);
    let due = fresh.next_renewal.clone().unwrap();
    assert!(!due.overdue, "{due:?}");
    assert!(fresh.to_text().contains("must run again before then"));
    let at =
        OffsetDateTime::parse(&due.due, &time::format_description::well_known::Rfc3339).unwrap();
    let late = stored.check(at + DAY);
    assert!(!late.healthy);
    let next = late.next_renewal.as_ref().unwrap();
    assert!(next.overdue, "{next:?}");
    let text = late.to_text();
    assert!(
        !text.contains("before then") && text.contains("certgen must run again now"),
        "{text}"
    );
    assert!(late.to_json().contains("\"overdue\": true"));
    // Exactly at the due moment it is due now.
    assert!(stored.check(at).next_renewal.unwrap().overdue);
}

#[test]
fn nothing_stored_is_missing_everywhere() {
    let config = config();
    let report = check(
        &config,
        &Snapshot::default(),
        NOW,
        "ns".into(),
        &Context::default(),
    );
    assert!(!report.healthy);
    for r in &report.secrets {
        assert_eq!(r.status, "missing", "{r:?}");
        assert_eq!(r.problems.len(), 1, "{r:?}");
    }
    assert!(row(&report, "envoy-gateway-ca").problems[0].starts_with("no CA Secret"));
    assert_eq!(
        row(&report, "envoy").problems,
        ["missing: run certgen to create it"]
    );
    assert_eq!(report.next_renewal, None);
}

/// A missing key or certificate is refused by a run (unless `--force`): invalid; a missing
/// bundle is written by a run: due.
#[test]
fn unusable_contents_and_missing_keys_are_invalid_and_a_missing_bundle_is_due() {
    let mut stored = Stored::installed(NOW - DAY);
    stored.edit("envoy", |s| {
        s.data.insert("tls.crt".into(), b"garbage".to_vec());
    });
    stored.edit("envoy-gateway", |s| {
        s.data.remove("tls.key");
    });
    stored.edit("envoy-rate-limit", |s| {
        s.data.insert("tls.key".into(), Vec::new());
        s.data.remove("ca.crt");
    });
    let report = stored.check(NOW);
    assert!(!report.healthy);
    let envoy = row(&report, "envoy");
    assert_eq!(envoy.status, "invalid");
    assert_eq!(envoy.problems, ["tls.crt: no PEM certificate found"]);
    let eg = row(&report, "envoy-gateway");
    assert_eq!(eg.status, "invalid");
    assert_eq!(
        eg.problems,
        [
            "tls.key is missing",
            "not trusted by the bundle of envoy-rate-limit"
        ]
    );
    // An empty key is missing too; a leaf without a bundle is trusted by nobody's, its own
    // included.
    let rl = row(&report, "envoy-rate-limit");
    assert_eq!(rl.status, "invalid");
    assert_eq!(
        rl.problems,
        [
            "ca.crt is missing",
            "tls.key is missing",
            "not trusted by the bundle of envoy-rate-limit"
        ]
    );
}

#[test]
fn the_ca_secret_is_judged_key_by_key() {
    let mut stored = Stored::installed(NOW - DAY);
    let leaf = issue_leaf(&stored.config.tls[0].leaf, &stored.ca.0, NOW).unwrap();
    stored.edit("envoy-gateway-ca", |s| {
        // A leaf where the CA belongs, a key of another certificate, and a broken bundle.
        s.data.insert("tls.crt".into(), pem(&leaf.cert));
        s.data
            .insert("ca.crt".into(), b"-----BEGIN CERTIFICATE-----\n".to_vec());
        s.data.insert("next.crt".into(), b"not pem".to_vec());
    });
    let report = stored.check(NOW);
    let ca = row(&report, "envoy-gateway-ca");
    assert_eq!(ca.status, "invalid", "{ca:?}");
    assert_eq!(ca.problems.len(), 4, "{ca:?}");
    assert_eq!(
        ca.problems[0],
        format!("tls.crt ({}) is not a CA certificate", leaf.cert.subject)
    );
    assert!(ca.problems[1].starts_with("tls.key: "), "{ca:?}");
    assert!(ca.problems[2].starts_with("ca.crt: "), "{ca:?}");
    assert_eq!(ca.problems[3], "next.crt: no PEM certificate found");
    assert_eq!(
        report.rotation, None,
        "an unreadable pending CA is no rotation"
    );
}

/// Another tool's CA (its key left empty) that is not a CA at all: a run refuses it.
#[test]
fn a_not_ca_certificate_alone_is_invalid() {
    let mut stored = Stored::installed(NOW - DAY);
    let leaf = issue_leaf(&stored.config.tls[0].leaf, &stored.ca.0, NOW).unwrap();
    stored.edit("envoy-gateway-ca", |s| {
        s.data.insert("tls.crt".into(), pem(&leaf.cert));
        s.data.insert("tls.key".into(), Vec::new());
    });
    let ca = row(&stored.check(NOW), "envoy-gateway-ca").clone();
    assert_eq!(ca.status, "invalid", "{ca:?}");
    assert_eq!(ca.problems.len(), 1, "{ca:?}");
}

#[test]
fn due_certificates_and_changed_sans_are_due() {
    let mut stored = Stored::installed(NOW - DAY);
    let at = NOW - 1820 * DAY;
    let old = issue_leaf(&stored.config.tls[1].leaf, &stored.ca.0, at).unwrap();
    stored.edit("envoy", |s| {
        s.data.insert("tls.crt".into(), pem(&old.cert));
        s.data
            .insert("tls.key".into(), old.key.expose().as_bytes().to_vec());
    });
    stored.config.tls[2]
        .leaf
        .dns_names
        .push("extra.example".into());
    let report = stored.check(NOW);
    let envoy = row(&report, "envoy");
    assert_eq!(envoy.status, "due");
    assert_eq!(
        envoy.problems,
        ["the certificate expires in 5 days, within renewBefore: run certgen to renew it"]
    );
    assert_eq!(envoy.residual_seconds, Some(5 * 86_400));
    let rl = row(&report, "envoy-rate-limit");
    assert_eq!(rl.status, "due");
    assert_eq!(
        rl.problems,
        ["SANs changed in the config: adds extra.example: run certgen to renew it"]
    );
    assert_eq!(report.next_renewal.unwrap().secret, "envoy");
}

#[test]
fn a_leaf_of_an_unknown_ca_is_untrusted_by_every_peer() {
    let mut stored = Stored::installed(NOW - DAY);
    let (other, _) = issue_ca(&stored.config.ca.spec, NOW - DAY).unwrap();
    let leaf = issue_leaf(&stored.config.tls[1].leaf, &other, NOW).unwrap();
    stored.edit("envoy", |s| {
        s.data.insert("tls.crt".into(), pem(&leaf.cert));
        s.data
            .insert("tls.key".into(), leaf.key.expose().as_bytes().to_vec());
    });
    let report = stored.check(NOW);
    let envoy = row(&report, "envoy");
    assert_eq!(envoy.status, "due");
    assert_eq!(envoy.issuer, None);
    assert_eq!(
        envoy.problems,
        [
            "issued by a CA certgen does not know",
            "not trusted by the bundle of envoy-gateway, envoy, envoy-rate-limit"
        ]
    );
    assert_eq!(row(&report, "envoy-gateway").status, "ok");
}

/// Nothing is wrong, but the next run writes the rotation's leaves step: each Secret it
/// writes says so, with the planner's reason.
#[test]
fn a_staged_rotation_in_progress_is_not_healthy_but_nothing_is_wrong() {
    let mut stored = Stored::installed(NOW - DAY);
    let (next, _) = issue_ca(&stored.config.ca.spec, NOW).unwrap();
    stored
        .snapshot
        .set_bundles(&[next.cert.clone(), stored.ca.0.cert.clone()]);
    stored.edit("envoy-gateway-ca", |s| {
        s.data.insert("next.crt".into(), pem(&next.cert));
        s.data.insert(
            "next.key".into(),
            next.key_pem().expose().as_bytes().to_vec(),
        );
    });
    let report = stored.check(NOW);
    assert!(!report.healthy);
    for r in report.secrets.iter().filter(|r| r.kind != "hmac") {
        assert_eq!(r.status, "due", "{r:?}");
        assert_eq!(r.problems.len(), 1, "{r:?}");
        assert!(r.problems[0].starts_with("the next run: "), "{r:?}");
        assert!(r.problems[0].contains("leaves phase"), "{r:?}");
    }
    assert_eq!(row(&report, "envoy-oidc-hmac").status, "ok");
    assert_eq!(
        report.rotation.as_deref(),
        Some(
            format!(
                "staged rotation in progress: pending CA {} (run certgen to finish it)",
                next.cert.short_fingerprint()
            )
            .as_str()
        )
    );
    assert_eq!(row(&report, "envoy").bundle.len(), 2);
}

#[test]
fn a_pending_ca_a_run_would_refuse_is_invalid() {
    let base = Stored::installed(NOW - DAY);
    let (next, _) = issue_ca(&base.config.ca.spec, NOW).unwrap();
    let leaf = issue_leaf(&base.config.tls[0].leaf, &base.ca.0, NOW).unwrap();
    let key = |k: &CaKey| k.key_pem().expose().as_bytes().to_vec();
    // What the CA Secret holds besides its CA, and the problem `check` must report.
    type Case<'a> = (&'a str, Vec<(&'a str, Vec<u8>)>, String);
    let cases: [Case; 4] = [
        (
            "a leaf certificate where the pending CA belongs",
            vec![
                ("next.crt", pem(&leaf.cert)),
                ("next.key", leaf.key.expose().as_bytes().to_vec()),
            ],
            format!("next.crt ({}) is not a CA certificate", leaf.cert.subject),
        ),
        (
            "a pending CA without its key",
            vec![("next.crt", pem(&next.cert))],
            "next.crt is present but next.key is missing".into(),
        ),
        (
            "a key without its pending CA",
            vec![("next.key", key(&next))],
            "next.key is present but next.crt is missing".into(),
        ),
        (
            "another CA's key",
            vec![("next.crt", pem(&next.cert)), ("next.key", key(&base.ca.0))],
            "next.key: ".into(),
        ),
    ];
    for (what, data, problem) in cases {
        let mut stored = Stored::installed(NOW - DAY);
        stored.edit("envoy-gateway-ca", |s| {
            for (k, v) in data {
                s.data.insert(k.into(), v);
            }
        });
        let report = stored.check(NOW);
        let ca = row(&report, "envoy-gateway-ca");
        assert_eq!(ca.status, "invalid", "{what}: {ca:?}");
        assert_eq!(ca.problems.len(), 1, "{what}: {ca:?}");
        assert!(
            ca.problems[0].starts_with(&format!("pending CA: {problem}")),
            "{what}: {ca:?}"
        );
        assert!(ca.problems[0].ends_with("run certgen --force to start the rotation again)"));
        assert_eq!(report.rotation, None, "{what}: no usable rotation");
        assert!(!report.healthy, "{what}");
    }
}

/// A run refuses an HMAC Secret without its key (unless `--force`).
#[test]
fn an_hmac_secret_without_its_key_is_invalid() {
    let mut stored = Stored::installed(NOW - DAY);
    stored.edit("envoy-oidc-hmac", |s| {
        s.data.clear();
        s.data.insert("other".into(), vec![1]);
    });
    let r = row(&stored.check(NOW), "envoy-oidc-hmac").clone();
    assert_eq!(r.status, "invalid");
    assert_eq!(r.problems, ["key \"hmac-secret\" is missing or empty"]);
}

#[test]
fn files_consumers_read_that_are_not_certgens_make_the_secret_invalid() {
    let mut stored = Stored::installed(NOW - DAY);
    let divergence = |found| Divergence {
        key: "tls.crt".into(),
        path: "certs/envoy/tls.crt".into(),
        found,
    };
    stored.edit("envoy", |s| s.divergent.push(divergence(Found::Copy)));
    stored.edit("envoy-gateway-ca", |s| {
        s.divergent.push(divergence(Found::Foreign))
    });
    let report = stored.check(NOW);
    let envoy = row(&report, "envoy");
    assert_eq!(envoy.status, "invalid");
    assert_eq!(
        envoy.problems,
        [
            "certs/envoy/tls.crt is a copy, not the link into ..data, and will not follow the next write: run certgen to restore it"
        ]
    );
    let ca = row(&report, "envoy-gateway-ca");
    assert_eq!(ca.status, "invalid");
    assert!(ca.problems[0].contains("certgen cannot tell which copy is meant"));
}

#[test]
fn each_finding_gives_its_status() {
    let divergent = Divergence {
        key: "k".into(),
        path: "p".into(),
        found: Found::Missing,
    };
    let cases = [
        (Finding::NoCa, "missing"),
        (Finding::Missing, "missing"),
        (
            Finding::KeyMissing {
                key: "tls.crt".into(),
                refused: true,
            },
            "invalid",
        ),
        (
            Finding::KeyMissing {
                key: "ca.crt".into(),
                refused: false,
            },
            "due",
        ),
        (
            Finding::Unusable {
                key: "tls.crt".into(),
                problem: "x".into(),
            },
            "invalid",
        ),
        (
            Finding::NotCa {
                key: "tls.crt".into(),
                subject: "CN=a:b".into(),
            },
            "invalid",
        ),
        (Finding::CaDue("expired".into()), "due"),
        (Finding::Due("expired".into()), "due"),
        (Finding::SanDrift("x".into()), "due"),
        (Finding::UnknownIssuer, "due"),
        (Finding::OtherIssuer, "due"),
        (Finding::Untrusted(vec!["a".into()]), "due"),
        (Finding::HmacKey("k".into()), "invalid"),
        (
            Finding::WrongType {
                found: "Opaque".into(),
                expected: "kubernetes.io/tls".into(),
            },
            "invalid",
        ),
        (Finding::Unreadable("x".into()), "invalid"),
        (Finding::ForeignOwner("x".into()), "invalid"),
        (Finding::Refused("x".into()), "invalid"),
        (
            Finding::Duplicate {
                key: "ca.crt".into(),
                ca: "x".into(),
                times: 2,
            },
            "due",
        ),
        (
            Finding::NextRun {
                action: "renew".into(),
                reason: "x".into(),
            },
            "due",
        ),
        (Finding::PendingCa("x".into()), "invalid"),
        (Finding::Divergent(divergent), "invalid"),
    ];
    for (finding, status) in cases {
        let checked = Checked {
            row: Row::new("s", "tls"),
            findings: vec![finding.clone(), Finding::Due("expired".into())],
        };
        assert_eq!(checked.finish(false).status, status, "{finding:?}");
    }
    assert_eq!(
        Checked {
            row: Row::new("s", "tls"),
            findings: vec![],
        }
        .finish(false)
        .status,
        "ok"
    );
}

/// Another tool replaced every leaf and bundle with its own CA (Envoy Gateway's certgen
/// `--overwrite`), leaving certgen's CA Secret alone: `check` says so on the CA Secret's row,
/// with what the next run does, before the CronJob acts on it.
#[test]
fn secrets_written_by_another_tool_are_named_with_the_next_step() {
    let mut stored = Stored::installed(NOW - DAY * 30);
    let other = issue_ca(&stored.config.ca.spec, NOW - DAY).unwrap();
    let other_pem = pem(&other.1.cert);
    for t in stored.config.tls.clone() {
        let leaf = issue_leaf(&t.leaf, &other.0, NOW - DAY).unwrap();
        stored.edit(&t.name, |s| {
            s.data.insert("ca.crt".into(), other_pem.clone());
            s.data
                .insert("tls.crt".into(), leaf.cert.pem().into_bytes());
            s.data
                .insert("tls.key".into(), leaf.key.expose().as_bytes().to_vec());
        });
    }
    let report = stored.check(NOW);
    let ca = row(&report, "envoy-gateway-ca");
    assert_eq!(ca.status, "due", "{ca:?}");
    let problem = ca
        .problems
        .iter()
        .find(|p| p.contains("written by another tool since certgen's last run"))
        .unwrap_or_else(|| panic!("{ca:?}"));
    assert!(
        problem.contains(&other.1.cert.short_fingerprint()),
        "{problem}"
    );
    assert!(problem.contains("the next run: trust step"), "{problem}");
    // certgen's own states never read as another tool's.
    let report = Stored::installed(NOW - DAY).check(NOW);
    assert!(
        report
            .secrets
            .iter()
            .all(|r| r.problems.iter().all(|p| !p.contains("another tool"))),
        "{report:?}"
    );
}

/// What a plain run would do with the same snapshot, as `check` sees it (the verdict).
fn verdict(report: &CheckReport) -> &NextRun {
    &report.next_run
}

/// Issue 32, finding 3: a TLS Secret recreated with `type: Opaque` is refused by every run
/// (the type of a Secret cannot be changed); `check` said healthy.
#[test]
fn a_tls_secret_of_another_type_is_invalid_because_every_run_refuses_it() {
    let mut stored = Stored::installed(NOW - DAY);
    stored.edit("envoy", |s| s.type_ = crate::secret::TYPE_OPAQUE.into());
    let report = stored.check(NOW);
    assert!(!report.healthy, "{report:#?}");
    let envoy = row(&report, "envoy");
    assert_eq!(envoy.status, "invalid", "{envoy:?}");
    assert!(
        envoy.problems[0].starts_with("has type \"Opaque\", expected \"kubernetes.io/tls\""),
        "{envoy:?}"
    );
    let NextRun::Refuses { object, message } = verdict(&report) else {
        panic!("{:?}", report.next_run)
    };
    assert_eq!(object, "envoy");
    assert!(message.contains("has type \"Opaque\""), "{message}");
}

/// Issue 32, finding 4: bundles a run rewrites. Each was `ok` on main.
#[test]
fn bundles_a_run_rewrites_are_due() {
    let at = NOW - DAY * 400;
    let spec = config().ca.spec;
    let (foreign, _) = issue_ca(&spec, NOW - DAY).unwrap();
    let expired = {
        let short = crate::pki::CaSpec {
            validity: std::time::Duration::from_secs(86_400 * 30),
            ..spec.clone()
        };
        issue_ca(&short, NOW - DAY * 60).unwrap().0.cert
    };
    type Bundle = fn(&Cert, &Cert, &Cert) -> Vec<Cert>;
    let cases: [(&str, Bundle, &str); 3] = [
        (
            "the active CA twice",
            |a, _, _| vec![a.clone(), a.clone()],
            "2 times: run certgen to write it once",
        ),
        (
            "an expired CA beside the active one",
            |a, e, _| vec![a.clone(), e.clone()],
            ", expired 2026-",
        ),
        (
            "a foreign unexpired CA beside the active one",
            |a, _, f| vec![a.clone(), f.clone()],
            "the next run: update-bundle (cleanup",
        ),
    ];
    for (what, bundle, said) in cases {
        let mut stored = Stored::installed(at);
        let active = stored.ca.0.cert.clone();
        let pem = crate::pki::bundle_pem(&bundle(&active, &expired, &foreign.cert)).into_bytes();
        stored.edit("envoy", |s| {
            s.data.insert("ca.crt".into(), pem);
        });
        let report = stored.check(NOW);
        assert!(!report.healthy, "{what}: {report:#?}");
        let envoy = row(&report, "envoy");
        assert_eq!(envoy.status, "due", "{what}: {envoy:?}");
        assert!(
            envoy.problems.iter().any(|p| p.contains(said)),
            "{what}: {envoy:?}"
        );
        let NextRun::Writes { writes } = verdict(&report) else {
            panic!("{what}: {:?}", report.next_run)
        };
        assert!(
            writes.iter().any(|w| w.object == "envoy"),
            "{what}: {writes:?}"
        );
    }
}

/// A target cert-manager's CA injector writes, during a staged rotation, that does not hold
/// the pending CA yet: a run's trust gate waits for the injector, and `check` names the target
/// and why (its row, `ACTION DUE`, the JSON), by the gate's own rule; once it holds the
/// pending CA, or outside a rotation, or when certgen writes the target, nothing is said.
#[test]
fn an_injected_target_without_the_pending_ca_is_named() {
    let mut stored = Stored::installed(NOW - DAY);
    let old = stored.ca.0.cert.clone();
    let steady = stored.snapshot.clone();
    let (next, _) = issue_ca(&stored.config.ca.spec, NOW).unwrap();
    stored
        .snapshot
        .set_bundles(&[next.cert.clone(), old.clone()]);
    stored.edit("envoy-gateway-ca", |s| {
        s.data.insert("next.crt".into(), pem(&next.cert));
        s.data.insert(
            "next.key".into(),
            next.key_pem().expose().as_bytes().to_vec(),
        );
    });
    let behind = crate::pki::bundle_pem(std::slice::from_ref(&old)).into_bytes();
    let holding = crate::pki::bundle_pem(&[next.cert.clone(), old.clone()]).into_bytes();
    let fp = next.cert.short_fingerprint();
    let judge = |snapshot: &Snapshot, injected: bool, entries: &[Vec<u8>]| {
        pending_not_injected(&stored.config, snapshot, injected, entries)
    };
    let at = &stored.snapshot;
    assert_eq!(
        judge(at, true, std::slice::from_ref(&behind)),
        Some(fp.clone())
    );
    assert_eq!(
        judge(at, true, &[holding.clone(), behind.clone()]),
        Some(fp.clone()),
        "one entry of two behind"
    );
    assert_eq!(judge(at, true, &[b"garbage".to_vec()]), Some(fp.clone()));
    assert_eq!(judge(at, true, std::slice::from_ref(&holding)), None);
    assert_eq!(judge(at, true, &[]), None, "no entry: no webhook is called");
    assert_eq!(
        judge(at, false, std::slice::from_ref(&behind)),
        None,
        "certgen's own"
    );
    assert_eq!(
        judge(&steady, true, std::slice::from_ref(&behind)),
        None,
        "no rotation"
    );

    let target = CaBundleTarget {
        writer: None,
        kind: "MutatingWebhookConfiguration".into(),
        name: "injected".into(),
        secret: "envoy-gateway".into(),
        state: TargetState::CertManager,
        pending_missing: judge(at, true, &[behind]),
    };
    let ctx = Context {
        undos: Default::default(),
        targets: vec![target.clone()],
        ..Context::default()
    };
    let report = stored.check_with(NOW, &ctx);
    assert!(!report.healthy);
    let said = report.ca_bundle_targets[0]
        .pending_missing
        .clone()
        .expect("the row says it");
    assert!(
        said.contains(&format!("does not hold the pending CA {fp} yet")),
        "{said}"
    );
    let text = report.to_text();
    let due = text.split("ACTION DUE").nth(1).expect("action due");
    assert!(
        due.contains(&format!("MutatingWebhookConfiguration injected: {said}")),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["caBundleTargets"][0]["pendingMissing"], said.as_str());
    let ctx = Context {
        undos: Default::default(),
        targets: vec![CaBundleTarget {
            pending_missing: None,
            ..target
        }],
        ..Context::default()
    };
    let report = stored.check_with(NOW, &ctx);
    assert!(report.ca_bundle_targets[0].pending_missing.is_none());
    assert!(!report.to_text().contains("does not hold the pending CA"));
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["caBundleTargets"][0].get("pendingMissing").is_none());
}

/// Issue 32, finding 4: a `caBundle` target a run would write makes `check` unhealthy (the
/// metrics said `certgen_check_healthy 1` beside `status="drifted"`).
#[test]
fn a_drifted_cabundle_target_is_a_write_of_the_next_run() {
    let stored = Stored::installed(NOW - DAY);
    let envoy_bundle = match stored.snapshot.get("envoy-gateway") {
        Observed::Present(s) => s.data["ca.crt"].clone(),
        Observed::Absent => unreachable!(),
    };
    let target = |entries: &[Vec<u8>]| CaBundleTarget {
        writer: None,
        kind: "MutatingWebhookConfiguration".into(),
        name: "injector".into(),
        secret: "envoy-gateway".into(),
        state: TargetState::of_entries(entries, Some(&envoy_bundle)),
        pending_missing: None,
    };
    for (what, entries) in [
        ("garbage", vec![b"garbage".to_vec()]),
        ("none", vec![Vec::new()]),
        (
            "one entry of two behind",
            vec![envoy_bundle.clone(), vec![]],
        ),
    ] {
        let ctx = Context {
            undos: Default::default(),
            targets: vec![target(&entries)],
            ..Context::default()
        };
        let report = stored.check_with(NOW, &ctx);
        assert!(!report.healthy, "{what}");
        assert_eq!(report.ca_bundle_targets[0].status, "drifted", "{what}");
        let NextRun::Writes { writes } = verdict(&report) else {
            panic!("{what}: {:?}", report.next_run)
        };
        assert_eq!(writes[0].object, "MutatingWebhookConfiguration injector");
        assert!(report.to_text().contains("its caBundle differs"), "{what}");
    }
    for (what, entries) in [
        ("in step", vec![envoy_bundle.clone()]),
        ("no entry", vec![]),
    ] {
        let ctx = Context {
            undos: Default::default(),
            targets: vec![target(&entries)],
            ..Context::default()
        };
        let report = stored.check_with(NOW, &ctx);
        assert!(report.healthy, "{what}: {report:#?}");
        assert_eq!(report.ca_bundle_targets[0].status, "in_sync");
    }
    // Absent and refused targets are left alone by a run: healthy.
    for state in [TargetState::Absent, TargetState::Refused] {
        let ctx = Context {
            undos: Default::default(),
            targets: vec![CaBundleTarget {
                state,
                pending_missing: None,
                ..target(&[])
            }],
            ..Context::default()
        };
        assert!(stored.check_with(NOW, &ctx).healthy, "{state:?}");
    }
}

/// Issue 32, finding 4: one Secret that cannot be read does not blank the report: it is
/// `invalid` (a run stops on it), the others are judged.
#[test]
fn an_unreadable_secret_is_invalid_and_the_others_are_still_judged() {
    let mut stored = Stored::installed(NOW - DAY);
    stored.snapshot.secrets.remove("envoy");
    let ctx = Context {
        undos: Default::default(),
        unreadable: vec![(
            "envoy".into(),
            "certs/envoy/tls.crt: is larger than 1048576 bytes".into(),
        )],
        ..Context::default()
    };
    let report = stored.check_with(NOW, &ctx);
    assert!(!report.healthy);
    let envoy = row(&report, "envoy");
    assert_eq!(envoy.status, "invalid");
    assert_eq!(envoy.problems.len(), 1, "{envoy:?}");
    assert!(envoy.problems[0].starts_with("cannot be read: certs/envoy/tls.crt"));
    for other in ["envoy-gateway-ca", "envoy-gateway", "envoy-rate-limit"] {
        assert_eq!(row(&report, other).status, "ok", "{report:#?}");
    }
    assert!(matches!(verdict(&report), NextRun::Refuses { object, .. } if object == "envoy"));
}

/// One judgement: a rotation waiting at a gate is not healthy (the run writes its next step
/// once the gate opens); a plain run's writes that no finding explains are named with the
/// planner's reason.
#[test]
fn the_verdict_is_the_planners() {
    // Right after a rotation's leaves: the cleanup waits for its gate.
    let mut stored = Stored::installed(NOW - DAY);
    let (prior, _) = issue_ca(&stored.config.ca.spec, NOW - DAY * 30).unwrap();
    stored
        .snapshot
        .set_bundles(&[stored.ca.0.cert.clone(), prior.cert.clone()]);
    let names: Vec<String> = stored
        .config
        .secret_names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    for name in &names {
        if let Some(Observed::Present(s)) = stored.snapshot.named(name, "envoy-gateway-ca").cloned()
        {
            stored.edit(name, |s2| {
                s2.written_at = Some(NOW - time::Duration::seconds(30))
            });
            let _ = s;
        }
    }
    let ctx = Context {
        undos: Default::default(),
        propagation_delay: std::time::Duration::from_secs(120),
        ..Context::default()
    };
    let report = stored.check_with(NOW, &ctx);
    assert!(!report.healthy);
    let NextRun::Waits { until, reason } = verdict(&report) else {
        panic!("{:?}", report.next_run)
    };
    assert_eq!(
        until,
        &crate::timefmt::rfc3339(NOW + time::Duration::seconds(90))
    );
    assert!(reason.contains(&prior.cert.short_fingerprint()), "{reason}");
    assert!(
        report.to_text().contains("NEXT RUN: waits until"),
        "{}",
        report.to_text()
    );
    // Once the gate has opened, the cleanup is the next run's write, on every TLS row.
    let report = stored.check_with(NOW + time::Duration::seconds(91), &ctx);
    let NextRun::Writes { writes } = verdict(&report) else {
        panic!("{:?}", report.next_run)
    };
    assert!(
        writes.iter().all(|w| w.action == "update-bundle"),
        "{writes:?}"
    );
    let envoy = row(&report, "envoy");
    assert_eq!(envoy.status, "due");
    assert!(
        envoy.problems[0].starts_with("the next run: update-bundle (cleanup"),
        "{envoy:?}"
    );
}

/// `ca.crt` holding an encrypted or OpenSSH private key is reported, not skipped.
#[test]
fn private_key_sections_in_a_bundle_are_reported() {
    for label in ["ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY"] {
        let mut stored = Stored::installed(NOW - DAY);
        let section = format!("-----BEGIN {label}-----\nAAAA\n-----END {label}-----\n");
        stored.edit("envoy", |s| {
            let mut v = s.data["ca.crt"].clone();
            v.extend_from_slice(section.as_bytes());
            s.data.insert("ca.crt".into(), v);
        });
        let report = stored.check(NOW);
        let envoy = row(&report, "envoy");
        assert_eq!(envoy.status, "invalid", "{label}: {envoy:?}");
        assert!(
            envoy.problems[0].contains(&format!(
                "a \"{}\" section, not a CERTIFICATE",
                label.to_lowercase()
            )),
            "{envoy:?}"
        );
        assert!(!report.healthy);
    }
}

/// Certificates that do not parse are described in words, not as the parser's debug dump.
#[test]
fn unparsable_certificates_are_described_in_words() {
    let armour = |der: &[u8]| {
        use base64::Engine as _;
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        )
    };
    let stored = Stored::installed(NOW - DAY);
    let good = match stored.snapshot.get("envoy") {
        Observed::Present(s) => crate::pki::parse_single_cert(&s.data["tls.crt"]).unwrap(),
        Observed::Absent => unreachable!(),
    };
    let der = good.der().to_vec();
    for (what, bytes) in [
        (
            "an integer where a certificate starts",
            vec![0x02, 0x01, 0x00],
        ),
        ("cut short", der[..der.len() / 2].to_vec()),
        ("empty", vec![0x30, 0x00]),
    ] {
        let mut stored = Stored::installed(NOW - DAY);
        let pem = armour(&bytes);
        stored.edit("envoy", |s| {
            s.data.insert("tls.crt".into(), pem.into_bytes());
        });
        let report = stored.check(NOW);
        let problem = &row(&report, "envoy").problems[0];
        for dump in ["Der(", "NomError", "UnexpectedTag", "Eof", "{"] {
            assert!(!problem.contains(dump), "{what}: {problem}");
        }
        assert!(
            problem.starts_with("tls.crt: certificate 0 is not valid X.509: "),
            "{what}: {problem}"
        );
    }
}

/// Issue 46, B2: certgen's own CA Secret deleted while the leaves it signed remain (each names
/// its CA, `certgen.dev/ca-sha256`, as certgen writes it) is `lost`, never healthy, and the
/// next plain run refuses with both ways out; the same Secrets written by another tool (no
/// mark) keep their CA, adopted, as before.
#[test]
fn a_deleted_ca_secret_whose_leaves_remain_is_lost_not_healthy() {
    let mut stored = Stored::installed(NOW - DAY);
    let fp = stored.ca.0.cert.fingerprint_hex();
    for t in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        stored.edit(t, |s| {
            s.annotations
                .insert(crate::plan::CA_ANNOTATION.into(), fp.clone());
        });
    }
    let marked = stored.snapshot.clone();
    stored.snapshot.ca = Some(Observed::Absent);
    let report = stored.check(NOW);
    assert!(!report.healthy, "{report:#?}");
    let ca = row(&report, "envoy-gateway-ca");
    assert_eq!(ca.status, "lost", "{ca:?}");
    assert_eq!(ca.problems.len(), 1, "{ca:?}");
    assert!(
        ca.problems[0].contains(&stored.ca.0.cert.short_fingerprint())
            && ca.problems[0].contains("is lost")
            && ca.problems[0].contains("Restore the CA Secret from a backup")
            && ca.problems[0].contains("--overwrite"),
        "{ca:?}"
    );
    match &report.next_run {
        NextRun::Refuses { object, message } => {
            assert_eq!(object, "envoy-gateway-ca");
            assert!(
                message.contains("restore envoy-gateway-ca from a backup"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The leaves themselves are fine.
    for t in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        assert_eq!(row(&report, t).status, "ok", "{:?}", row(&report, t));
    }

    // Another tool's leaves carry no mark: their CA is adopted, and nothing is due.
    let mut foreign = Stored::installed(NOW - DAY);
    foreign.snapshot.ca = Some(Observed::Absent);
    let report = foreign.check(NOW);
    assert!(report.healthy, "{report:#?}");
    assert_eq!(row(&report, "envoy-gateway-ca").status, "ok");

    // The CA Secret restored: healthy again.
    stored.snapshot = marked;
    assert!(stored.check(NOW).healthy);
}

/// Issue 46, friction 10: a target whose Secret is missing is not said to be "in step" (there
/// is nothing to compare it with); in step with a Secret that is there, it is.
#[test]
fn a_target_whose_secret_is_missing_is_not_called_in_step() {
    let mut stored = Stored::installed(NOW - DAY);
    let ctx = Context {
        undos: Default::default(),
        targets: vec![CaBundleTarget {
            writer: None,
            kind: "MutatingWebhookConfiguration".into(),
            name: "injector".into(),
            secret: "envoy-gateway".into(),
            state: TargetState::InSync,
            pending_missing: None,
        }],
        ..Context::default()
    };
    let text = stored.check_with(NOW, &ctx).to_text();
    assert!(
        text.contains("injector (follows envoy-gateway): in step"),
        "{text}"
    );
    stored
        .snapshot
        .secrets
        .insert("envoy-gateway".into(), Observed::Absent);
    let text = stored.check_with(NOW, &ctx).to_text();
    assert!(
        text.contains(
            "injector (follows envoy-gateway): nothing to compare with: the Secret it follows is missing"
        ),
        "{text}"
    );
}

/// A member of a set of clusters whose shared CA is due: a plain run there refuses to rotate
/// it alone (exit 1, naming the set's contexts), and `check` says the same.
#[test]
fn a_shared_ca_due_in_one_member_names_the_set_to_run() {
    // Installed long enough ago that the CA is within its renewBefore.
    let validity = config().ca.spec.validity;
    let at = NOW - time::Duration::try_from(validity).unwrap() + 10 * DAY;
    let mut stored = Stored::installed(at);
    let record = crate::set::Record {
        id: "s1".into(),
        members: vec!["u1".into(), "u2".into()],
        contexts: vec!["east".into(), "west".into()],
        generation: 1,
    };
    let ca = stored.config.ca.secret_name.clone();
    let plain = stored.check(NOW);
    assert!(!plain.healthy);
    stored.edit(&ca, |s| {
        s.annotations
            .insert(crate::set::SET_ANNOTATION.into(), record.to_annotation());
    });
    let report = stored.check(NOW);
    assert!(!report.healthy);
    match verdict(&report) {
        NextRun::Refuses { message, .. } => assert!(
            message.contains("run certgen with the set's contexts (--context east --context west)"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}
