//! Probes on the real control plane: certgen finds a consumer's endpoints through its Service's
//! EndpointSlices and dials them (mapped from TEST-NET addresses to 127.0.0.1, see
//! `cluster::smoke`); a rustls server that reloads its files passes after a rotation, one that
//! never does and `openssl s_server` are caught. At a gate, a probe of a pod's own endpoint (its
//! EndpointSlice's `targetRef`) proves what that pod holds: the pods whose listener reloads open
//! the gate by probe, a pod that is no endpoint or still serves the old leaf waits for its
//! kubelet's evidence. The probe's verdict, and probes in local mode, are in the top-level
//! `probe`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use super::{Cluster, Volume, cluster, kubelet, rolled_out};
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

/// The envoy-gateway Service on port 18000 with one EndpointSlice: an endpoint per
/// `(address, pod)`, its `targetRef` that pod (name and UID), as the EndpointSlice controller
/// writes them.
async fn pod_endpoints(c: &Cluster, ns: &str, endpoints: &[(String, &Pod)]) {
    pod_service(c, ns, ("envoy-gateway", 18000), endpoints).await;
}

/// Service `name` on `port` with one EndpointSlice: an endpoint per `(address, pod)`, its
/// `targetRef` that pod (name and UID).
pub(super) async fn pod_service(
    c: &Cluster,
    ns: &str,
    (name, port): (&str, u16),
    endpoints: &[(String, &Pod)],
) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "grpc", "port": port, "protocol": "TCP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(c.client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let eps: Vec<_> = endpoints
        .iter()
        .map(|(address, pod)| {
            json!({
                "addresses": [address],
                "conditions": {"ready": true},
                "targetRef": {"kind": "Pod", "namespace": ns, "name": pod.metadata.name, "uid": pod.metadata.uid},
            })
        })
        .collect();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-1"), "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "grpc", "port": port, "protocol": "TCP"}]
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(c.client.clone(), ns)
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
}

/// Installs, runs `replicas` kwok pods of the hot `envoy-gateway` consumer (mounting its
/// Secret; no other pod mounts a managed Secret) and keeps `dir` in step with that Secret;
/// returns the pods by name, and the stand-in kubelet.
async fn gateway_pods(
    c: &Cluster,
    ns: &str,
    replicas: i32,
    dir: &Path,
) -> (Vec<Pod>, tokio::task::JoinHandle<()>) {
    let kubelet = install_and_sync(c, ns, dir).await;
    let d = super::pokes::mounting_n("envoy-gateway", "envoy-gateway", json!({}), replicas);
    let api = c.create_deployment(ns, &d).await;
    rolled_out(&api, "envoy-gateway", Duration::from_secs(120)).await;
    let mut pods = Api::<Pod>::namespaced(c.client.clone(), ns)
        .list(&ListParams::default().labels("app=envoy-gateway"))
        .await
        .unwrap()
        .items;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    assert_eq!(pods.len(), replicas as usize);
    (pods, kubelet)
}

/// `certgen --overwrite` (a minute's --propagation-delay: no timer opens a gate here), its dials
/// to the TEST-NET addresses sent to the listeners' ports; the report.
async fn rotate(
    c: &Cluster,
    ns: &str,
    dials: &[(String, u16)],
    extra: &[&str],
) -> serde_json::Value {
    rotate_run(c, ns, dials, extra).await.json()
}

/// [`rotate`]'s run, exit 0 checked: its report and what it said on stderr.
async fn rotate_run(c: &Cluster, ns: &str, dials: &[(String, u16)], extra: &[&str]) -> Run {
    let map: Vec<String> = dials
        .iter()
        .map(|(a, port)| format!("{a}:18000=127.0.0.1:{port}"))
        .collect();
    c.certgen(ns)
        .propagation_delay("60s")
        .args(["--overwrite", "--timeout", "150s"])
        .args(extra)
        .env("CERTGEN_TEST_DIAL_OVERRIDE", map.join(","))
        .run_async()
        .await
        .ok()
}

/// A gate's pod lines: name → (opened by, detail).
type Lines = std::collections::BTreeMap<String, (String, String)>;

/// Each gate: what opened it, and its pod lines.
fn gate_pods(report: &serde_json::Value) -> Vec<(String, Lines)> {
    let gates = report["gates"].as_array().cloned().unwrap_or_default();
    assert_eq!(gates.len(), 2, "trust and leaves gates: {report:#}");
    gates
        .iter()
        .map(|g| {
            let pods = g["pods"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap().to_string(),
                        (
                            p["openedBy"].as_str().unwrap().to_string(),
                            p["detail"].as_str().unwrap_or_default().to_string(),
                        ),
                    )
                })
                .collect();
            (g["openedBy"].as_str().unwrap().to_string(), pods)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn where_every_pod_is_a_probed_endpoint_that_reloads_probes_open_both_gates() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("probe-every-pod").await;
    let files = tempdir();
    let (pods, kubelet) = gateway_pods(&c, &ns.name, 2, files.path()).await;
    let mut servers = Vec::new();
    let mut dials = Vec::new();
    let mut endpoints = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let (port, server) = tls_server(files.path().to_path_buf(), true).await;
        let address = format!("192.0.2.{}", 30 + i);
        servers.push(server);
        dials.push((address.clone(), port));
        endpoints.push((address, pod));
    }
    pod_endpoints(&c, &ns.name, &endpoints).await;

    let report = rotate(&c, &ns.name, &dials, &["--events"]).await;
    for (by, lines) in gate_pods(&report) {
        assert_eq!(by, "probe", "{report:#}");
        for pod in &pods {
            let name = pod.metadata.name.as_deref().unwrap();
            assert_eq!(
                lines.get(name).map(|(by, _)| by.as_str()),
                Some("probe"),
                "{name}: {report:#}"
            );
        }
    }
    // The Events say it per pod too: "the trust → leaves gate opened by probe after 0s: POD
    // (probe), ...".
    let events: Vec<String> =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(c.client.clone(), &ns.name)
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=certgen"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("GateOpened"))
            .filter_map(|e| e.note)
            .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    for note in &events {
        assert!(note.contains("opened by probe"), "{note}");
        for pod in &pods {
            let name = pod.metadata.name.as_deref().unwrap();
            assert!(note.contains(&format!("{name} (probe)")), "{note}");
        }
    }
    kubelet.abort();
    servers.iter().for_each(|s| s.abort());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_proves_only_the_pod_it_reached_and_only_what_it_serves() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("probe-one-pod").await;
    let files = tempdir();
    // Three pods of one consumer: the first an endpoint that reloads, the second an endpoint
    // that keeps serving what it loaded at start, the third no endpoint at all.
    let (pods, kubelet) = gateway_pods(&c, &ns.name, 3, files.path()).await;
    let (hot_port, hot) = tls_server(files.path().to_path_buf(), true).await;
    let (stale_port, stale) = tls_server(files.path().to_path_buf(), false).await;
    let dials = [
        ("192.0.2.40".to_string(), hot_port),
        ("192.0.2.41".to_string(), stale_port),
    ];
    pod_endpoints(
        &c,
        &ns.name,
        &[
            (dials[0].0.clone(), &pods[0]),
            (dials[1].0.clone(), &pods[1]),
        ],
    )
    .await;

    let report = rotate(&c, &ns.name, &dials, &[]).await;
    let name = |i: usize| pods[i].metadata.name.clone().unwrap();
    for (by, lines) in gate_pods(&report) {
        assert_eq!(by, "evidence", "not every pod was probed: {report:#}");
        let line = |i: usize| lines.get(&name(i)).cloned().unwrap_or_default();
        assert_eq!(line(0).0, "probe", "{report:#}");
        let (by, detail) = line(1);
        assert_eq!(
            by, "poke plus live kubelet",
            "the stale listener: {report:#}"
        );
        assert!(detail.contains("its probe did not pass"), "{detail}");
        let (by, detail) = line(2);
        assert_eq!(
            by, "poke plus live kubelet",
            "the pod no probe reached: {report:#}"
        );
        assert!(detail.starts_with("not probed"), "{detail}");
    }
    kubelet.abort();
    hot.abort();
    stale.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_whose_server_verifies_no_client_is_said_once_and_left_to_its_kubelet() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("probe-any-client").await;
    let files = tempdir();
    let (pods, kubelet) = gateway_pods(&c, &ns.name, 1, files.path()).await;
    // Asks for a client certificate and accepts any: no trust probe of it can pass.
    let (port, server) =
        crate::util::tls::tls_server_accepting_any_client(files.path().to_path_buf()).await;
    let address = "192.0.2.60".to_string();
    pod_endpoints(&c, &ns.name, &[(address.clone(), &pods[0])]).await;

    let r = rotate_run(&c, &ns.name, &[(address, port)], &[]).await;
    let report = r.json();
    let name = pods[0].metadata.name.clone().unwrap();
    let gates = gate_pods(&report);
    let (by, lines) = &gates[0];
    assert_eq!(by, "evidence", "{report:#}");
    let (pod_by, detail) = lines.get(&name).cloned().unwrap_or_default();
    assert_eq!(pod_by, "poke plus live kubelet", "{report:#}");
    assert!(detail.contains("nobody trusts"), "{detail}");
    // Said once for the gate, not once per probe round (was: a line a second until the
    // kubelet's evidence opened the gate).
    let said = r
        .stderr
        .lines()
        .filter(|l| l.contains("accepts a client certificate from a CA nobody trusts"))
        .count();
    assert_eq!(said, 1, "{}", r.stderr);
    kubelet.abort();
    server.abort();
}
