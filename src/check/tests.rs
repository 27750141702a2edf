use time::macros::datetime;

use super::*;
use crate::config::{Env, Overrides, Source};
use crate::observe::fixtures::installed;
use crate::pki::{CaKey, Issued, issue_ca, issue_leaf};
use crate::secret::{Found, StoredSecret};

const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
const DAY: time::Duration = time::Duration::DAY;

fn config() -> Config {
    Config::resolve(
        &Source::Profile("envoy-gateway".into()),
        &Overrides::default(),
        &Env::default(),
    )
    .unwrap()
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
        check(
            &self.config,
            &self.snapshot,
            now,
            "directory ./certs".into(),
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

#[test]
fn nothing_stored_is_missing_everywhere() {
    let config = config();
    let report = check(&config, &Snapshot::default(), NOW, "ns".into());
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

#[test]
fn unusable_contents_are_invalid_and_missing_keys_are_due() {
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
    assert_eq!(eg.status, "due");
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
    assert_eq!(rl.status, "due");
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

#[test]
fn a_not_ca_certificate_alone_is_due_not_invalid() {
    let mut stored = Stored::installed(NOW - DAY);
    let leaf = issue_leaf(&stored.config.tls[0].leaf, &stored.ca.0, NOW).unwrap();
    stored.edit("envoy-gateway-ca", |s| {
        s.data.insert("tls.crt".into(), pem(&leaf.cert));
        s.data.insert("tls.key".into(), Vec::new());
    });
    let ca = row(&stored.check(NOW), "envoy-gateway-ca").clone();
    assert_eq!(ca.status, "due", "{ca:?}");
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
    assert!(
        report.secrets.iter().all(|r| r.status == "ok"),
        "{report:#?}"
    );
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

#[test]
fn an_hmac_secret_without_its_key_is_due() {
    let mut stored = Stored::installed(NOW - DAY);
    stored.edit("envoy-oidc-hmac", |s| {
        s.data.clear();
        s.data.insert("other".into(), vec![1]);
    });
    let r = row(&stored.check(NOW), "envoy-oidc-hmac").clone();
    assert_eq!(r.status, "due");
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
        (Finding::KeyMissing("tls.crt".into()), "due"),
        (
            Finding::Unusable {
                key: "tls.crt".into(),
                problem: "x".into(),
            },
            "invalid",
        ),
        (
            Finding::NotCa {
                subject: "CN=a:b".into(),
            },
            "due",
        ),
        (Finding::CaDue("expired".into()), "due"),
        (Finding::Due("expired".into()), "due"),
        (Finding::SanDrift("x".into()), "due"),
        (Finding::UnknownIssuer, "due"),
        (Finding::OtherIssuer, "due"),
        (Finding::Untrusted(vec!["a".into()]), "due"),
        (Finding::HmacKey("k".into()), "due"),
        (Finding::PendingCa("x".into()), "invalid"),
        (Finding::Divergent(divergent), "invalid"),
    ];
    for (finding, status) in cases {
        let checked = Checked {
            row: Row::new("s", "tls"),
            findings: vec![finding.clone(), Finding::Due("expired".into())],
        };
        assert_eq!(checked.finish().status, status, "{finding:?}");
    }
    assert_eq!(
        Checked {
            row: Row::new("s", "tls"),
            findings: vec![],
        }
        .finish()
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
