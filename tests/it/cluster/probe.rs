//! Probes on the real control plane: certgen finds a consumer's endpoints through its Service's
//! EndpointSlices and dials them (mapped from TEST-NET addresses to 127.0.0.1, see
//! `cluster::smoke`); a rustls server that reloads its files passes after a rotation, one that
//! never does and `openssl s_server` are caught. The probe's verdict, and probes in local mode,
//! are in the top-level `probe`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{Cluster, Volume, cluster, kubelet};
use crate::util::tls::{s_server, tls_server};
use crate::util::{Run, consumer, tempdir};

/// The envoy-gateway Service on port 18000, with an EndpointSlice at a TEST-NET address.
pub(super) async fn service(c: &Cluster, ns: &str, address: &str) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "envoy-gateway"},
        "spec": {"ports": [{"name": "grpc", "port": 18000, "protocol": "TCP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(c.client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "envoy-gateway-1", "labels": {"kubernetes.io/service-name": "envoy-gateway"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"name": "grpc", "port": 18000, "protocol": "TCP"}]
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(c.client.clone(), ns)
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
}

/// `certgen --probe`, its dials to `address:18000` sent to 127.0.0.1:`port`.
async fn probe_run(c: &Cluster, ns: &str, address: &str, port: u16, extra: &[&str]) -> Run {
    c.certgen(ns)
        .arg("--probe")
        .args(extra)
        .env(
            "CERTGEN_TEST_DIAL_OVERRIDE",
            format!("{address}:18000=127.0.0.1:{port}"),
        )
        .run_async()
        .await
}

/// Installs, then keeps `dir` in step with the envoy-gateway Secret (the kubelet stand-in, every
/// 100 ms); returns once the files are there.
async fn install_and_sync(c: &Cluster, ns: &str, dir: &Path) -> tokio::task::JoinHandle<()> {
    c.certgen(ns).run_async().await.ok();
    let k = kubelet(
        c.secrets(ns),
        "envoy-gateway",
        Arc::new(Volume::new(dir)),
        Duration::from_millis(100),
        Duration::ZERO,
        Arc::default(),
        || {},
    );
    for _ in 0..50 {
        if dir.join("tls.key").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    k
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_pass_a_server_that_reloads_and_catch_one_that_does_not() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("probe").await;
    service(&c, &ns.name, "192.0.2.10").await;
    let files = tempdir();
    let kubelet = install_and_sync(&c, &ns.name, files.path()).await;

    let (hot_port, hot) = tls_server(files.path().to_path_buf(), true).await;
    let (stale_port, stale) = tls_server(files.path().to_path_buf(), false).await;

    // Before any rotation both serve the current leaf.
    probe_run(&c, &ns.name, "192.0.2.10", stale_port, &[])
        .await
        .ok();

    // After a rotation the hot server picks up the new files; the probe waits for it.
    let report = probe_run(
        &c,
        &ns.name,
        "192.0.2.10",
        hot_port,
        &["--overwrite", "--timeout", "60s"],
    )
    .await
    .ok()
    .json();
    let probes = &consumer(&report, "envoy-gateway")["probes"];
    assert_eq!(probes[0]["ok"], true, "{report}");
    assert_eq!(probes[0]["endpoint"], "192.0.2.10:18000");

    // The server that never reloads still presents the old leaf: caught, exit 1, named.
    let r = probe_run(&c, &ns.name, "192.0.2.10", stale_port, &["--timeout", "4s"]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("192.0.2.10:18000"), "{}", r.stderr);
    assert!(
        r.stderr.contains("not reloaded") || r.stderr.contains("another CA"),
        "{}",
        r.stderr
    );
    assert_eq!(
        consumer(&r.json(), "envoy-gateway")["probes"][0]["ok"],
        false
    );
    kubelet.abort();
    hot.abort();
    stale.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_work_against_openssl_s_server() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("probe-openssl").await;
    service(&c, &ns.name, "192.0.2.11").await;
    let files = tempdir();
    let kubelet = install_and_sync(&c, &ns.name, files.path()).await;
    kubelet.abort();
    let (mut server, port) = s_server(files.path(), &[]);
    let ok = probe_run(&c, &ns.name, "192.0.2.11", port, &["--timeout", "20s"]).await;
    // openssl never reloads: after a rotation the same probe must fail.
    let rotated = probe_run(
        &c,
        &ns.name,
        "192.0.2.11",
        port,
        &["--overwrite", "--timeout", "4s"],
    )
    .await;
    server.kill().unwrap();
    let _ = server.wait();
    let ok = ok.ok();
    assert_eq!(
        consumer(&ok.json(), "envoy-gateway")["probes"][0]["ok"],
        true
    );
    assert_eq!(rotated.code, 1, "{}", rotated.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn where_pods_can_be_observed_a_probe_opens_no_gate_a_pod_outside_the_consumers_holds() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("probe-pods").await;
    // kwok pods: envoy-gateway (the probed, hot-reloading consumer), the proxies, the
    // restart-only rate limit, and `debug`, which mounts `envoy` and is no declared consumer.
    super::pokes::setup(&c, &ns.name).await;
    service(&c, &ns.name, "192.0.2.10").await;
    let files = tempdir();
    let kubelet = install_and_sync(&c, &ns.name, files.path()).await;
    let (port, server) = tls_server(files.path().to_path_buf(), true).await;

    // A config whose only hot consumer is the probed one (as bench/rotation-speed's probed
    // variant): the proxies' and `debug`'s pods are then no declared consumer's.
    let profile = crate::util::profile();
    let start = profile.find("  - name: envoy-proxies").unwrap();
    let end = start + profile[start..].find("webhooks:").unwrap();
    let dir = tempdir();
    let config = dir.path().join("probed.yaml");
    std::fs::write(&config, format!("{}{}", &profile[..start], &profile[end..])).unwrap();

    // The probe passes as soon as the stand-in has the new files; it shows what the probed
    // consumer holds, not what the other pods hold, so the pods' evidence decides each gate.
    let r = c
        .certgen(&ns.name)
        .args(["--config", config.to_str().unwrap()])
        .arg("--probe")
        .propagation_delay("60s")
        .args(["--overwrite", "--timeout", "150s"])
        .env(
            "CERTGEN_TEST_DIAL_OVERRIDE",
            format!("192.0.2.10:18000=127.0.0.1:{port}"),
        )
        .run_async()
        .await
        .ok();
    let report = r.json();
    let probes = &crate::util::consumer(&report, "envoy-gateway")["probes"];
    assert_eq!(probes[0]["ok"], true, "the probe itself passed: {report:#}");
    let gates = report["gates"].as_array().cloned().unwrap_or_default();
    assert_eq!(gates.len(), 2, "{report:#}");
    for g in &gates {
        assert_eq!(g["openedBy"], "evidence", "not the probe: {g:#}");
        let pods = g["pods"].as_array().cloned().unwrap_or_default();
        assert!(
            pods.iter().all(|p| p["openedBy"] != "probe"),
            "no pod line is the probe's: {g:#}"
        );
    }
    // The stray pods mount what the trust step changed: that gate waited for them too.
    let trust = &gates[0]["pods"];
    for stray in ["debug-", "envoy-proxy-"] {
        assert!(
            trust
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"].as_str().unwrap().starts_with(stray)),
            "the trust gate waited for the {stray}* pods outside the consumers: {trust:#}"
        );
    }
    kubelet.abort();
    server.abort();
}
