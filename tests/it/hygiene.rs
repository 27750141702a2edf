//! Secrets stay secret: every run in this suite goes through `Run::from`, which fails on
//! anything that looks like private-key material in stdout or stderr; this test also runs the
//! noisiest configuration (trace logs, JSON) through a whole life cycle and checks the log fields
//! people and tools rely on.

use crate::util::{KEY_MARKERS, Run, certgen, tempdir};

#[test]
fn trace_logs_and_reports_of_a_whole_life_cycle_hold_no_key_material() {
    let tmp = tempdir();
    let dir = tmp.path().to_str().unwrap().to_string();
    // The markers must catch a real key, or this test proves nothing.
    let (_, issued) = certgen::pki::issue_ca(
        &certgen::pki::CaSpec {
            common_name: "x".into(),
            validity: std::time::Duration::from_secs(3600),
            key_algorithm: certgen::pki::KeyAlgorithm::EcdsaP256,
        },
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    assert!(KEY_MARKERS.iter().any(|m| issued.key.expose().contains(m)));
    assert!(
        !format!("{:?}", issued.key).contains("PRIVATE"),
        "Debug of a key is redacted"
    );

    let mut seen_actions = std::collections::BTreeSet::new();
    for extra in [
        &[][..],
        &["--overwrite"],
        &["--overwrite", "--strategy", "immediate"],
        &["--dry-run", "--overwrite"],
        &["--rotate-hmac", "--overwrite"],
    ] {
        for output in ["text", "json"] {
            let out = certgen()
                .args([
                    "--local",
                    &dir,
                    "-vv",
                    "--log-format",
                    "json",
                    "--output",
                    output,
                ])
                .args(extra)
                .output()
                .unwrap();
            let r = Run::from(out).ok(); // scans stdout and stderr
            for line in r.stderr.lines() {
                let event: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                assert!(
                    event["level"].is_string() && event["timestamp"].is_string(),
                    "{line}"
                );
                if let Some(action) = event["action"].as_str() {
                    assert!(
                        event["secret"].is_string(),
                        "a write names its Secret: {line}"
                    );
                    assert!(
                        event["phase"].is_string(),
                        "a write names its phase: {line}"
                    );
                    seen_actions.insert(action.to_string());
                }
            }
        }
    }
    for action in [
        "create",
        "trust",
        "update-bundle",
        "promote",
        "renew",
        "rotate",
    ] {
        assert!(
            seen_actions.contains(action),
            "no {action:?} event in the logs: {seen_actions:?}"
        );
    }
    let r = Run::from(
        certgen()
            .args(["check", "--local", &dir, "--output", "json"])
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 0);
}

#[test]
fn there_is_no_way_to_skip_tls_verification() {
    let help = Run::from(certgen().arg("--help").output().unwrap())
        .ok()
        .stdout
        .to_lowercase();
    for word in ["insecure", "skip-verify", "no-verify", "skip-tls"] {
        assert!(!help.contains(word), "--help offers {word}");
    }
}
