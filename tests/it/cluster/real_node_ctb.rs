//! ClusterTrustBundles on the real 1.37 kubelet (issue 43): a hot-reloading TLS server (the
//! test peer, hostNetwork on a 127.0.0.1 port) whose trust comes only from a `clusterTrustBundle`
//! projection by signer and label selector (its own leaf from its Secret, in the same projected
//! volume), and a hot client that presents the stored `client-tls` leaf every 50 ms. A staged
//! `--overwrite` must switch the client's leaf to the new CA only after the server's kubelet
//! projected the new CA's bundle: with `--propagation-delay 120s`, only evidence (the server
//! poked for the bundle's write, its kubelet seen live after) can open the gates within the
//! test's time. No handshake may fail, the gates must open by evidence, and the run must take
//! no more than 30 s.
//!
//! Needs the real node (`tests/testenv/node-up`, see `cluster::real_node`); without it the
//! test is skipped with a note, except under `CI`. It prints what it measured.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::real_node::{
    Peer, Tally, free_ports, now_ms, peer_deployment, read_events, real_namespace, real_node,
    secret_state, shared_node,
};
use super::{Cluster, cluster, rolled_out};
use crate::util::tempdir;

fn config(signer: &str) -> String {
    format!(
        "\
name: ctb
namespace: default
ca:
  secretName: ctb-ca
  commonName: ctb
  keyAlgorithm: ecdsa-p256
  validity: 3650d
  renewBefore: 90d
secrets:
  - name: server-tls
    type: tls
    commonName: server
    dnsNames: [server]
    usages: [server, client]
    keyAlgorithm: ecdsa-p256
    validity: 365d
    renewBefore: 30d
  - name: client-tls
    type: tls
    commonName: client
    dnsNames: [client]
    usages: [server, client]
    keyAlgorithm: ecdsa-p256
    validity: 365d
    renewBefore: 30d
consumers:
  - name: server
    deployment: server
    reload: hot
    mounts: [server-tls]
  - name: client
    deployment: client
    reload: hot
    mounts: [client-tls]
clusterTrustBundles:
  - signerName: {signer}
    bundleFrom: server-tls
    labels:
      mesh: ctb
"
    )
}

/// The CA fingerprints (sorted) and leaf the peer `app` last loaded, per running pod of it.
fn loaded(results: &Path, pod_prefix: &str) -> Option<(Vec<String>, String)> {
    read_events(results)
        .into_iter()
        .filter(|e| e.pod.starts_with(pod_prefix))
        .filter_map(|e| e.loaded())
        .next_back()
        .map(|(mut cas, leaf)| {
            cas.sort();
            (cas, leaf)
        })
}

/// Waits until the server has loaded the CAs of `server-tls`'s bundle (from the bundles, in
/// whatever order the kubelet writes them) and its leaf, and the client its Secret.
async fn converged(c: &Cluster, ns: &str, results: &Path, within: Duration) -> i64 {
    let deadline = Instant::now() + within;
    loop {
        let mut ok = true;
        for (app, secret) in [("server-", "server-tls"), ("client-", "client-tls")] {
            let (mut cas, leaf) = secret_state(&c.secrets(ns).get(secret).await.unwrap()).unwrap();
            cas.sort();
            ok &= loaded(results, app) == Some((cas, leaf));
        }
        if ok {
            return now_ms();
        }
        assert!(
            Instant::now() < deadline,
            "peers did not load the current trust within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_rotation_through_cluster_trust_bundles_fails_no_handshake_on_the_real_kubelet() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    let _node = shared_node().await;
    let (ns, results) = real_namespace(&c, &node, "real-ctb").await;
    let signer = format!("certgen.test/{}", ns.name);
    let dir = tempdir();
    let config = dir.path().join("ctb.yaml");
    std::fs::write(&config, self::config(&signer)).unwrap();
    let certgen = || {
        c.certgen(&ns.name)
            .propagation_delay("120s")
            .args(["--config", config.to_str().unwrap()])
    };
    let bundles: Api<kube::api::DynamicObject> = Api::all_with(
        c.client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("certificates.k8s.io", "v1", "ClusterTrustBundle"),
            "clustertrustbundles",
        ),
    );
    let by_signer = kube::api::ListParams::default().fields(&format!("spec.signerName={signer}"));
    let _cleanup = scopeguard(bundles.clone(), by_signer.clone());

    certgen().run_async().await.ok();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (port, _) = free_ports();
    let addr = format!("127.0.0.1:{port}");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The server: its leaf from its Secret, its trust only from the bundles.
    let mut server = serde_json::to_value(peer_deployment(
        &node,
        &results,
        Peer {
            name: "server",
            labels: json!({"app": "server"}),
            replicas: 1,
            secret: "server-tls",
            args: args(&["--listen", &addr, "--reload", "hot"]),
            extra_volumes: vec![],
        },
    ))
    .unwrap();
    let volumes = server["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap();
    let certs = volumes.iter_mut().find(|v| v["name"] == "certs").unwrap();
    *certs = json!({"name": "certs", "projected": {"sources": [
        {"secret": {"name": "server-tls", "items": [
            {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}},
        {"clusterTrustBundle": {"signerName": signer,
            "labelSelector": {"matchLabels": {"mesh": "ctb"}}, "path": "ca.crt"}}
    ]}});
    let server: Deployment = serde_json::from_value::<Value>(server)
        .and_then(serde_json::from_value)
        .unwrap();
    let client = peer_deployment(
        &node,
        &results,
        Peer {
            name: "client",
            labels: json!({"app": "client"}),
            replicas: 1,
            secret: "client-tls",
            args: args(&[
                "--reload",
                "hot",
                "--interval-ms",
                "50",
                "--dial",
                &format!("server={addr}@server"),
            ]),
            extra_volumes: vec![],
        },
    );
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &ns.name);
    let pp = PostParams::default();
    deployments.create(&pp, &server).await.unwrap();
    deployments.create(&pp, &client).await.unwrap();
    rolled_out(&deployments, "server", Duration::from_secs(180)).await;
    rolled_out(&deployments, "client", Duration::from_secs(180)).await;
    converged(&c, &ns.name, &results, Duration::from_secs(120)).await;

    let from = now_ms();
    let started = Instant::now();
    let report = certgen()
        .args(["--overwrite", "--timeout", "5m"])
        .run_async()
        .await
        .ok()
        .json();
    let took = started.elapsed().as_secs_f64();
    let to = converged(&c, &ns.name, &results, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tally = Tally::of(&read_events(&results), from, to + 2000);

    let gates: Vec<(String, String, f64)> = report["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["gate"].as_str().unwrap().to_string(),
                g["openedBy"].as_str().unwrap().to_string(),
                g["seconds"].as_f64().unwrap(),
            )
        })
        .collect();
    let server_lines: Vec<String> = report["gates"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["pods"].as_array().cloned().unwrap_or_default())
        .filter(|p| {
            p["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("server-")
        })
        .map(|p| p["openedBy"].as_str().unwrap_or_default().to_string())
        .collect();
    let actions: Vec<(String, String)> = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "clustertrustbundle")
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["step"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    eprintln!(
        "real node, ClusterTrustBundles: staged --overwrite in {took:.1} s; gates {gates:?}; the server's pod opened by {server_lines:?}; bundles {actions:?}; {} handshakes ok, {} failed (tls), {} failed (io)",
        tally.ok,
        tally.of_kind("tls"),
        tally.of_kind("io")
    );
    assert_eq!(
        actions,
        vec![
            ("create".into(), "trust".into()),
            ("delete".into(), "cleanup".into())
        ],
        "{report}"
    );
    assert!(
        gates.iter().all(|(_, by, _)| by == "evidence"),
        "every gate opened by evidence: {gates:?}"
    );
    assert!(
        !server_lines.is_empty() && server_lines.iter().all(|b| b != "timer"),
        "the server's pod was waited for by evidence: {server_lines:?}\n{report}"
    );
    assert!(tally.ok > 0, "the client dialed the server: {tally:?}");
    assert_eq!(tally.of_kind("tls"), 0, "{tally:?}");
    assert!(took <= 30.0, "the rotation took {took:.1} s (target 30 s)");
    let left = bundles.list(&by_signer).await.unwrap().items;
    assert_eq!(left.len(), 1, "only the new CA's bundle is left");
}

/// Deletes the test's bundles when the test ends, however it ends.
fn scopeguard(api: Api<kube::api::DynamicObject>, lp: kube::api::ListParams) -> impl Drop {
    struct Guard(Option<(Api<kube::api::DynamicObject>, kube::api::ListParams)>);
    impl Drop for Guard {
        fn drop(&mut self) {
            if let Some((api, lp)) = self.0.take() {
                let _ = std::thread::spawn(move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap()
                        .block_on(async {
                            let _ = api.delete_collection(&Default::default(), &lp).await;
                        });
                })
                .join();
            }
        }
    }
    Guard(Some((api, lp)))
}
