//! Another writer between runs, on the real control plane: Envoy Gateway v1.9.1's own
//! `certgen --overwrite` (the real binary, built from its Go module) replaces every leaf and
//! bundle of an installation certgen made; `certgen check` names it; the next plain run (what
//! the CronJob runs) stages certgen's CA instead of signing leaves the held bundles lack.
//! Every Secret state seen while it runs is sampled, and every pair of versions consumers may
//! hold (up to the propagation delay) is verified with rustls-webpki; a failing pair is
//! charged to certgen unless it goes back to Envoy Gateway's own one-step replacement.

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use super::cluster;
use crate::rotation::{FileVersion, check_versions_with_foreign};
use crate::util::trust::{LEAF_SECRETS, check_snapshot, fingerprints};
use crate::util::{Run, command, envoy_gateway};

/// Each TLS Secret's `ca.crt` and `tls.crt` with the time the API server stored that version:
/// its newest managedFields time (what certgen's gates count from), read in the same GET, so
/// a sample taken late under load does not shift it.
type Sample = std::collections::BTreeMap<&'static str, (Vec<u8>, Vec<u8>, SystemTime)>;

async fn sample(c: &super::Cluster, ns: &str) -> Sample {
    let mut out = Sample::new();
    for secret in LEAF_SECRETS {
        let Ok(s) = c.secrets(ns).get(secret).await else {
            continue;
        };
        let at = s
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|f| f.time.as_ref())
            .map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs(t.0.as_second().max(0) as u64))
            .max()
            .unwrap_or_else(SystemTime::now);
        let key = |k: &str| super::data(&s, k);
        out.insert(secret, (key("ca.crt"), key("tls.crt"), at));
    }
    out
}

/// Adds the TLS Secrets of `sample` that changed since the last version recorded.
fn record(versions: &mut Vec<FileVersion>, sample: &Sample, foreign: bool) {
    for (secret, (bundle, leaf, at)) in sample {
        let same = versions
            .iter()
            .rev()
            .find(|v| v.secret == *secret)
            .is_some_and(|v| v.bundle == *bundle && v.leaf == *leaf);
        if !same {
            versions.push(FileVersion {
                secret,
                at: *at,
                bundle: bundle.clone(),
                leaf: leaf.clone(),
                foreign,
            });
        }
    }
}

#[tokio::test]
async fn envoy_gateways_own_overwrite_then_the_cronjob_run() {
    let Some(c) = cluster().await else { return };
    let Some(eg) = envoy_gateway::real_binary() else {
        return;
    };
    let ns = c.namespace("certgen-foreign").await;
    c.certgen(&ns.name).run().ok();
    let certgen_ca = c.snapshot(&ns.name).await["envoy-gateway-ca"]["tls.crt"].clone();
    let mut versions = Vec::new();
    record(&mut versions, &sample(&c, &ns.name).await, false);

    // Envoy Gateway's certgen, as an operator (or its chart Job after a rollback) runs it.
    let r = Run::of(
        command(&eg)
            .args(["certgen", "--overwrite", "--disable-topology-injector"])
            .env("KUBECONFIG", &c.kubeconfig)
            .env("ENVOY_GATEWAY_NAMESPACE", &ns.name),
    );
    assert_eq!(r.code, 0, "envoy-gateway certgen --overwrite: {}", r.stderr);
    let after_eg = c.snapshot(&ns.name).await;
    record(&mut versions, &sample(&c, &ns.name).await, true);
    assert_eq!(
        versions.iter().filter(|v| v.foreign).count(),
        3,
        "every leaf replaced"
    );
    assert_eq!(
        after_eg["envoy-gateway-ca"]["tls.crt"], certgen_ca,
        "Envoy Gateway's certgen leaves certgen's CA Secret alone"
    );

    // `check` names it before the CronJob acts on it.
    let r = c.certgen(&ns.name).check().run();
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("written by another tool since certgen's last run"),
        "{}",
        r.stdout
    );

    // The CronJob's plain run, sampled while it runs. (No pod mounts the Secrets here, so
    // with pokes every gate would open on evidence at once: the timer is what is checked.)
    let delay = Duration::from_secs(3);
    let mut child = c
        .certgen(&ns.name)
        .propagation_delay("3s")
        .arg("--no-poke")
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut samples = 0;
    while child.try_wait().unwrap().is_none() {
        record(&mut versions, &sample(&c, &ns.name).await, false);
        samples += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let run = Run::from(child.wait_with_output().unwrap()).ok();
    let end = c.snapshot(&ns.name).await;
    record(&mut versions, &sample(&c, &ns.name).await, false);
    let (pairs, foreign) = check_versions_with_foreign(&versions, delay);
    eprintln!(
        "cluster: Envoy Gateway v1.9.1 --overwrite, then a plain run: {samples} samples, {} versions, {pairs} pairs checked, {foreign} failed by Envoy Gateway's own replacement, 0 by certgen; apiRequests {}",
        versions.len(),
        run.json()["apiRequests"]
    );
    assert!(
        foreign > 0,
        "Envoy Gateway's one-step replacement itself breaks peers"
    );
    // The run staged certgen's CA: trusted, then the leaves, then the cleanup.
    let (failures, _) = check_snapshot(&end);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(
        end["envoy-gateway-ca"]["tls.crt"], certgen_ca,
        "certgen's CA, not a third"
    );
    assert!(fingerprints(&end["envoy"]["ca.crt"]).len() <= 2);
    // The run finished the rotation, cleanup included: one more run writes nothing.
    let again = c.certgen(&ns.name).propagation_delay("3s").run().ok();
    assert_eq!(again.json()["writes"], 0, "settled: {}", again.stdout);
}
