//! Other writers on the real kubelet (issue 45): Flux's stand-in (`writers.rs`: server-side
//! apply with force under field manager `kustomize-controller`, as Flux's controller writes)
//! reverts certgen's CA Secret to its copy in Git in the middle of a staged rotation and again
//! after it, while a hot TLS server and a hot client on the real node handshake every 50 ms
//! with the leaves as their kubelet projects them. certgen names the writer each time, calls
//! the second revert a fight (`check` exits 1, a `FightDetected` Event), finishes what each
//! revert left with plain runs, and no handshake fails throughout.
//!
//! Needs the real node (`tests/testenv/node-up`, see `cluster::real_node`); without it the
//! test is skipped with a note, except under `CI`. It prints what it measured.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::real_node::{
    Peer, Tally, converged_to, free_ports, now_ms, peer_deployment, read_events, real_namespace,
    real_node, shared_node,
};
use super::writers::{git_copy, kustomize_controller, named};
use super::{Cluster, cluster, rolled_out};
use crate::util::tempdir;

const CONFIG: &str = "\
name: gitops
namespace: default
ca:
  secretName: gitops-ca
  commonName: gitops
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
";

async fn converged(c: &Cluster, ns: &str, results: &Path) -> i64 {
    let apps = [("server", "server-tls"), ("client", "client-tls")];
    converged_to(c, ns, results, &apps, 2, Duration::from_secs(120)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitops_reverts_of_the_ca_secret_break_no_handshake_on_the_real_kubelet() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    let _node = shared_node().await;
    let (ns, results) = real_namespace(&c, &node, "real-gitops").await;
    let dir = tempdir();
    let config = dir.path().join("gitops.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let certgen = || {
        c.certgen(&ns.name)
            .propagation_delay("120s")
            .args(["--config", config.to_str().unwrap()])
    };
    let check = || {
        c.certgen(&ns.name)
            .check()
            .args(["--config", config.to_str().unwrap()])
    };
    certgen().run_async().await.ok();
    let ca = "gitops-ca";
    let git = git_copy(&c.secrets(&ns.name).get(ca).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let (port, _) = free_ports();
    let addr = format!("127.0.0.1:{port}");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &ns.name);
    let pp = PostParams::default();
    for (name, secret, extra) in [
        (
            "server",
            "server-tls",
            args(&["--listen", &addr, "--reload", "hot"]),
        ),
        (
            "client",
            "client-tls",
            args(&[
                "--reload",
                "hot",
                "--interval-ms",
                "50",
                "--dial",
                &format!("server={addr}@server"),
            ]),
        ),
    ] {
        let d = peer_deployment(
            &node,
            &results,
            Peer {
                name,
                labels: json!({"app": name}),
                replicas: 1,
                secret,
                args: extra,
                extra_volumes: vec![],
            },
        );
        deployments.create(&pp, &d).await.unwrap();
    }
    rolled_out(&deployments, "server", Duration::from_secs(180)).await;
    rolled_out(&deployments, "client", Duration::from_secs(180)).await;
    converged(&c, &ns.name, &results).await;
    let from = now_ms();
    let started = Instant::now();

    // Mid-rotation: the trust step written, the run stopped at its gate (exit 3), then Flux's
    // stand-in puts the CA Secret back as Git holds it.
    let r = certgen()
        .args(["--overwrite", "--timeout", "1s"])
        .run_async()
        .await;
    assert_eq!(r.code, 3, "stopped at the gate: {}", r.stderr);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(kustomize_controller(&c, &ns.name, ca, &git).await);
    let r = check().run_async().await;
    assert!(
        named(&r.json())
            .iter()
            .any(|w| w.0 == ca && w.1 == "kustomize-controller" && w.2 == "Apply"),
        "named by check: {}",
        r.stdout
    );
    // Plain runs finish whatever the revert left, each gate on evidence.
    let mut runs = Vec::new();
    for _ in 0..4 {
        let r = certgen()
            .args(["--events", "--timeout", "120s"])
            .run_async()
            .await;
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
        runs.push(r.json()["writes"].as_u64().unwrap_or_default());
        if runs.last() == Some(&0) {
            break;
        }
    }
    converged(&c, &ns.name, &results).await;

    // After it: the same controller's second revert is a fight.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(kustomize_controller(&c, &ns.name, ca, &git).await);
    let r = check().run_async().await;
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        named(&r.json())
            .iter()
            .any(|w| w.0 == ca && w.1 == "kustomize-controller" && w.3),
        "a fight: {}",
        r.stdout
    );
    let r = certgen()
        .args(["--events", "--timeout", "120s"])
        .run_async()
        .await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.json()["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "FightDetected" && e["name"] == ca),
        "{}",
        r.stdout
    );
    for _ in 0..3 {
        let r = certgen().args(["--timeout", "120s"]).run_async().await;
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
        if r.json()["writes"].as_u64() == Some(0) {
            break;
        }
    }
    let to = converged(&c, &ns.name, &results).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tally = Tally::of(&read_events(&results), from, to + 2000);
    eprintln!(
        "real node, GitOps reverts of the CA Secret: {:.1} s; writes per run after the first revert {runs:?}; {} handshakes ok, {} failed (tls), {} failed (io)",
        started.elapsed().as_secs_f64(),
        tally.ok,
        tally.of_kind("tls"),
        tally.of_kind("io")
    );
    assert!(tally.ok > 100, "the client dialed the server: {tally:?}");
    assert_eq!(tally.of_kind("tls"), 0, "{tally:?}");
}
