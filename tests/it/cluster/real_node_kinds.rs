//! A StatefulSet and a DaemonSet consumer on the real node, a test each: a restart-only TLS
//! server (the test peer with `--reload start`, hostNetwork on a 127.0.0.1 port) run by the
//! real kubelet as that kind, and a hot-reloading client Deployment dialing it every 50 ms. A
//! staged `--overwrite --wait` restarts the server three times (trust, leaves, cleanup), each
//! rollout waited for by its kind's rule; then the server's new pod has loaded the final
//! Secret, and no handshake failed in between: the gates held because each restart was
//! waited for until the kind's pods really ran the new template.
//!
//! Needs the real node (`tests/testenv/node-up`, see `cluster::real_node`); without it the
//! tests are skipped with a note, except under `CI`. Each prints what it measured.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use super::kinds::{ds_rolled_out, eventually, sts_rolled_out};
use super::real_node::{
    Node, Peer, Tally, converged_to, free_ports, gate, now_ms, peer_deployment, read_events,
    real_namespace, real_node, shared_node, sync_period,
};
use super::{Cluster, cluster, rolled_out};
use crate::util::{consumer, tempdir};

/// The server consumer is `KIND`; the client is a hot Deployment.
fn config(kind: &str) -> String {
    format!(
        "\
name: kinds
namespace: default
ca:
  secretName: kinds-ca
  commonName: kinds
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
    kind: {kind}
    workload: server
    reload: restart
    mounts: [server-tls]
  - name: client
    deployment: client
    reload: hot
    mounts: [client-tls]
"
    )
}

/// Every running pod has loaded its Secret as stored now (server pods: `server-tls`, client
/// pods: `client-tls`), and there are `pods` of them: returns when (ms since the epoch).
async fn converged(c: &Cluster, ns: &str, results: &Path, pods: usize, within: Duration) -> i64 {
    let apps = [("server", "server-tls"), ("client", "client-tls")];
    converged_to(c, ns, results, &apps, pods, within).await
}

/// The server's pods (name → uid).
async fn server_pods(c: &Cluster, ns: &str) -> BTreeMap<String, String> {
    Api::<Pod>::namespaced(c.client.clone(), ns)
        .list(&ListParams::default().labels("app=server"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.metadata.name.unwrap(), p.metadata.uid.unwrap()))
        .collect()
}

/// The peer pod template, from the Deployment the real-node tests build.
fn peer_template(node: &Node, results: &Path, peer: Peer) -> Value {
    let d = peer_deployment(node, results, peer);
    serde_json::to_value(d.spec.unwrap().template).unwrap()
}

async fn restarted_by_a_rotation_and_waited_for(kind: &str) {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    // A healthy kubelet: never while a fault test stops, cuts or restarts it.
    let _node = shared_node().await;
    let settings = std::fs::read_to_string(node.dir.join("settings")).unwrap_or_default();
    let gate = gate(sync_period(&settings));
    let (ns, results) = real_namespace(&c, &node, &format!("real-{}", kind.to_lowercase())).await;
    let dir = tempdir();
    let config = dir.path().join("kinds.yaml");
    std::fs::write(&config, self::config(kind)).unwrap();
    let certgen = || {
        c.certgen(&ns.name)
            .propagation_delay(&format!("{}s", gate.as_secs()))
            .args(["--config", config.to_str().unwrap()])
    };

    // The Secrets, then the peers that mount them. The API server's times have one-second
    // resolution: a workload created in the same second as the write would count as older,
    // and be restarted before the rotation's first step.
    certgen().run_async().await.ok();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (port, _) = free_ports();
    let addr = format!("127.0.0.1:{port}");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let server = peer_template(
        &node,
        &results,
        Peer {
            name: "server",
            labels: json!({"app": "server"}),
            replicas: 1,
            secret: "server-tls",
            args: args(&["--listen", &addr, "--reload", "start"]),
            extra_volumes: vec![],
        },
    );
    let pp = PostParams::default();
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), &ns.name);
    let ds: Api<DaemonSet> = Api::namespaced(c.client.clone(), &ns.name);
    let meta = json!({"name": "server", "labels": {"app": "server"}});
    let selector = json!({"matchLabels": {"app": "server"}});
    if kind == "StatefulSet" {
        let s = json!({"metadata": meta, "spec": {
            "replicas": 1, "serviceName": "server", "selector": selector, "template": server,
        }});
        sts.create(&pp, &serde_json::from_value(s).unwrap())
            .await
            .unwrap();
    } else {
        let s = json!({"metadata": meta, "spec": {"selector": selector, "template": server}});
        ds.create(&pp, &serde_json::from_value(s).unwrap())
            .await
            .unwrap();
    }
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
    deployments.create(&pp, &client).await.unwrap();
    rolled_out(&deployments, "client", Duration::from_secs(180)).await;
    eventually(
        &format!("the {kind} rolls out on the real node"),
        Duration::from_secs(180),
        || async {
            if kind == "StatefulSet" {
                sts_rolled_out(&sts, "server").await
            } else {
                ds_rolled_out(&ds, "server").await
            }
        },
    )
    .await;
    converged(&c, &ns.name, &results, 2, Duration::from_secs(120)).await;
    let before = server_pods(&c, &ns.name).await;
    let generation = || async {
        if kind == "StatefulSet" {
            sts.get("server").await.unwrap().metadata.generation
        } else {
            ds.get("server").await.unwrap().metadata.generation
        }
    };
    let generation_before = generation().await.unwrap();

    // The staged rotation: trust, leaves, cleanup, the server restarted and waited for in each.
    let from = now_ms();
    let started = Instant::now();
    let r = certgen()
        .args(["--overwrite", "--wait", "--timeout", "5m"])
        .run_async()
        .await;
    let took = started.elapsed().as_secs_f64();
    // When --wait returned, the last restart had rolled out by the kind's rule, read here from
    // the object itself.
    let rolled_out_now = if kind == "StatefulSet" {
        sts_rolled_out(&sts, "server").await
    } else {
        ds_rolled_out(&ds, "server").await
    };
    assert!(
        rolled_out_now,
        "{kind} not rolled out when --wait returned: {}",
        r.stdout
    );
    let report = r.ok().json();
    let restarts: Vec<(String, String, String)> = consumer(&report, "server")["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["action"].as_str().unwrap().to_string(),
                d["rollout"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    // Three restarts; a step that plans again (after a lost race) waits again for the rollout
    // it already began ("already-restarted"). Every rollout done, every entry of the kind.
    assert!(
        restarts
            .iter()
            .all(|(k, _, rollout)| k == kind && rollout == "done"),
        "{report}"
    );
    let actions: Vec<&str> = restarts.iter().map(|(_, a, _)| a.as_str()).collect();
    assert_eq!(
        actions.iter().filter(|a| **a == "restarted").count(),
        3,
        "{report}"
    );
    assert!(
        actions
            .iter()
            .all(|a| *a == "restarted" || *a == "already-restarted"),
        "{report}"
    );
    assert_eq!(generation().await, Some(generation_before + 3));
    // Its pods are known as the consumer's (owned by the StatefulSet or DaemonSet itself, not
    // through a ReplicaSet): none is reported as mounting a managed Secret outside consumers.
    let unowned: Vec<&Value> = report["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["action"] == "unowned")
        .collect();
    assert!(unowned.is_empty(), "{unowned:#?}");

    // The server runs a new pod, which started with the final Secret; the client loaded its
    // own; and no handshake failed on the way.
    let to = converged(&c, &ns.name, &results, 2, Duration::from_secs(120)).await;
    let after = server_pods(&c, &ns.name).await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(
        after.values().all(|uid| !before.values().any(|b| b == uid)),
        "the server's pod was replaced: {before:?} -> {after:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tally = Tally::of(&read_events(&results), from, to + 2000);
    let rollouts: Vec<f64> = consumer(&report, "server")["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["rolloutSeconds"].as_f64())
        .collect();
    eprintln!(
        "real node, {kind} consumer: staged --overwrite --wait in {took:.1} s (rollouts {rollouts:?} s); {} handshakes ok, {} failed (tls), {} failed (io)",
        tally.ok,
        tally.of_kind("tls"),
        tally.of_kind("io")
    );
    assert!(tally.ok > 0, "the client dialed the server: {tally:?}");
    assert_eq!(tally.of_kind("tls"), 0, "{tally:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_on_the_real_node_is_restarted_by_a_rotation_and_waited_for() {
    restarted_by_a_rotation_and_waited_for("StatefulSet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_set_on_the_real_node_is_restarted_by_a_rotation_and_waited_for() {
    restarted_by_a_rotation_and_waited_for("DaemonSet").await;
}
