//! Class 1 of issue 31 on the real control plane: the CA Secret restored with `kubectl
//! replace` to a backup taken at a rotation's trust gate, after the rotation finished. The next
//! plain run (the CronJob's) issues nothing again and writes only the CA Secret; every leaf of
//! both states verifies against every bundle of both (rustls-webpki). Before: every bundle
//! became [new, old] and every leaf was issued by the old CA in the same step, and 12 of the 24
//! pairs failed with "unknown authority".

use super::cluster;
use crate::util::trust::{LEAF_SECRETS, Snapshot, webpki_verifies};

fn cross_pairs(states: &[(&str, &Snapshot)]) -> Vec<String> {
    let now = rustls_pki_types::UnixTime::now();
    let parse = |b: &Vec<u8>| certgen::pki::parse_cert_chain(b).unwrap_or_default();
    let mut failures = Vec::new();
    for (la, a) in states {
        for (lb, b) in states {
            for leaf in LEAF_SECRETS {
                for bundle in LEAF_SECRETS {
                    let l = parse(&a[leaf]["tls.crt"]);
                    let cas = parse(&b[bundle]["ca.crt"]);
                    if let Err(e) = webpki_verifies(&l[0], &cas, now) {
                        failures.push(format!("client {leaf}@{la} -> server {bundle}@{lb}: {e}"));
                    }
                }
            }
        }
    }
    failures
}

#[tokio::test]
async fn a_ca_secret_restored_to_the_trust_gate_after_the_rotation_brings_nothing_back() {
    let Some(c) = cluster().await else { return };
    let test_ns = c.namespace("valid-restore").await;
    let ns = test_ns.name.as_str();
    // (No pokes: with no pod to poke, evidence would open every gate at once.)
    let a = ["--timeout", "1s", "--no-poke"];
    let certgen = || c.certgen(ns).propagation_delay("2s");
    c.certgen(ns).quiet().run().ok();
    let trust = certgen().quiet().arg("--overwrite").args(a).run();
    assert_eq!(
        trust.code, 3,
        "the trust step, then the gate: {}",
        trust.stderr
    );
    // A backup of the CA Secret at the trust gate, as `kubectl get -o yaml` makes it.
    let out = c
        .kubectl()
        .args(["-n", ns, "get", "secret", "envoy-gateway-ca", "-o", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut backup: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The rotation finishes: one run waits at both gates. (Not a sleep of the propagation
    // delay between runs: the store's clock is the API server's `Date`, truncated to the
    // second, so a gate may open up to a second late, and a fixed sleep raced it in CI.)
    certgen().quiet().arg("--no-poke").run().ok();
    let s0 = c.snapshot(ns).await;
    // `kubectl replace` of the backup (its resourceVersion dropped, as a restore tool does).
    backup["metadata"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k == "name" || k == "namespace" || k == "labels" || k == "annotations");
    let (ok, text) = c.kubectl_stdin(&["-n", ns, "replace"], &backup.to_string());
    assert!(ok, "{text}");
    let restored = c.snapshot(ns).await;
    let r = certgen().args(a).run().ok();
    let s1 = c.snapshot(ns).await;
    let failures = cross_pairs(&[("0", &s0), ("restored", &restored), ("1", &s1)]);
    assert!(failures.is_empty(), "{failures:#?}\n{}", r.stdout);
    for leaf in LEAF_SECRETS {
        assert_eq!(
            s0[leaf]["tls.crt"], s1[leaf]["tls.crt"],
            "{leaf}: issued again"
        );
    }
    let written: Vec<String> = r.json()["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] != "keep")
        .map(|e| e["secret"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(written, ["envoy-gateway-ca"], "{}", r.stdout);
}
