//! A kubelet fault aimed at the chart's own hook (issue 44, item 6): `helm upgrade` runs the
//! chart's pre-upgrade hook Job (the built image, in a pod on the real node) with `--overwrite`,
//! and the node's kubelet is stopped (SIGSTOP by its recorded PID, `tests/testenv/kubelet-fault`)
//! the moment the trust step writes the pending CA, so it never acts on that step's pokes. The
//! hook must hold its trust gate past `propagationDelay` (the gate does not open on a kubelet it
//! cannot observe) and end at the chart's `timeout` as docs/install.md ("Helm hook") says: exit 3,
//! its log naming the gate and the pods held by their kubelet, every bundle trusting both CAs and
//! no leaf changed, and Helm reporting the failed pre-upgrade hook. Once the kubelet is back, the
//! next upgrade's hook (a plain run, as the CronJob's) finishes the rotation.
//!
//! The same with the kubelet cut off from the API server from the moment the hook's container
//! starts, so that neither its volumes nor its Secret cache see the trust step's writes. The
//! next upgrade's run cannot know what the held run saw (it starts after the kubelet is back,
//! long past `propagationDelay` from the stored trust write). It once took the trust gate as
//! open on the stored write's time and wrote the new leaves at once, without a poke: the
//! kubelet then projected trust and leaves together, one pod before the other, and on
//! 2026-11-28 one run failed a handshake that way (the server pod loaded the new leaf 118 ms
//! before the client pod loaded the new trust). A run that observes pods now opens a gate it
//! resumes on its own evidence (`plan::Known::observing_since`), and the test asks that the
//! next run's trust gate open so. After a stop (SIGSTOP)
//! the same run is safe in practice: the continued kubelet syncs every pod whose periodic sync
//! fell in the stop at once (its work queue holds due times on the wall clock,
//! `pkg/kubelet/util/queue/work_queue.go`, checked every second), and its watches never broke.
//!
//! Peers on the node, from `real_node.rs`'s harness: the hot `envoy-gateway` server pod and a
//! hot `envoy-proxy` pod dialing it every 100 ms, each recording its handshakes; and
//! `real_node_faults.rs`'s peer outside the node, which handshakes with the server pod presenting
//! the `envoy` leaf as stored now (what a pod on a healthy node would present). No handshake may
//! fail from the first upgrade until every pod loaded what the second one left.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::real_node::{
    Peer, Tally, chart_args, converged_to, deployed, helm_async, hook_logs, hook_run, node_values,
    now_ms, peer_deployment, read_events, real_namespace, real_node, secret_state,
    select_real_node, whole_node,
};
use super::real_node_faults::{Healed, assert_clean, fault, hot_pod, record};
use super::{cluster, helm, rolled_out};

/// The chart's `propagationDelay` here: longer than the 12.5 s a kubelet's Lease may age before
/// it is seen not live, so that the timer passes while the stopped kubelet is seen down.
const PROPAGATION: Duration = Duration::from_secs(15);
/// The chart's `timeout` (certgen's `--timeout`) for the hook that meets the stopped kubelet.
const TIMEOUT: &str = "40s";

/// The kubelet stopped when the hook's trust step writes the pending CA, continued once the
/// hook has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_stopped_during_the_hooks_trust_gate_holds_it_and_the_next_upgrade_finishes() {
    through_the_hook(
        "kubelet stopped through the hook's trust gate, next upgrade finishes",
        ("stop", "cont"),
        false,
    )
    .await;
}

/// The kubelet cut off from the API server as soon as the hook's container starts (before the
/// trust step's writes, so its Secret cache misses them), healed once the hook has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_cut_off_before_the_hooks_trust_writes_holds_it_and_the_next_upgrade_finishes() {
    through_the_hook(
        "kubelet cut off before the hook's trust writes, next upgrade finishes",
        ("cut", "heal"),
        true,
    )
    .await;
}

/// The hook's rotation with the kubelet's `fault` put in place when its trust step writes the
/// pending CA (or, `early`, when its container starts) and undone once the hook has ended.
async fn through_the_hook(name: &str, (fault_verb, undo): (&str, &str), early: bool) {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    node.certgen_image_imported().await;
    let Some(helm) = helm() else { return };
    // The one kubelet's fault: this test's alone (see `real_node::whole_node`).
    let _node = whole_node().await;
    let started = Instant::now();
    let rel = c.namespace("hookfault").await;
    select_real_node(
        &c,
        &rel.name,
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await;
    let (tgt, results) = real_namespace(&c, &node, "hookfault-peers").await;
    let helm_args = |verb: &str, extra: &[&str]| chart_args(verb, &c.kubeconfig, &rel.name, extra);

    // Install: the hook creates the Secrets. One attempt per hook Job (backoffLimit 0), so
    // that the held run's exit is what Helm reports rather than a retry's.
    let mut args = helm_args("install", &[]);
    args.extend(node_values(&node, &tgt.name, PROPAGATION));
    args.extend([
        "--set".into(),
        format!("timeout={TIMEOUT}"),
        "--set".into(),
        "job.backoffLimit=0".into(),
    ]);
    deployed(helm_async(&helm, args).await);
    let (status, _) = hook_run(&c, &node, &rel.name, "Succeeded").await;
    assert_eq!(status.succeeded, Some(1), "{status:?}");

    // The peers: the hot server pod with the outside peer, and a hot proxy pod dialing it.
    let (port, outside) = hot_pod(&c, &node, &tgt.name, &results).await;
    let proxy = Peer {
        name: "envoy-proxy",
        // The labels the envoy-gateway profile selects its hot `envoy-proxies` consumer by.
        labels: json!({
            "app": "envoy-proxy",
            "app.kubernetes.io/managed-by": "envoy-gateway",
            "app.kubernetes.io/component": "proxy",
        }),
        replicas: 1,
        secret: "envoy",
        args: [
            "--reload",
            "hot",
            "--interval-ms",
            "100",
            "--dial",
            &format!("envoy-gateway=127.0.0.1:{port}@envoy-gateway"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        extra_volumes: vec![],
    };
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &tgt.name);
    deployments
        .create(
            &PostParams::default(),
            &peer_deployment(&node, &results, proxy),
        )
        .await
        .unwrap();
    rolled_out(&deployments, "envoy-proxy", Duration::from_secs(120)).await;
    let secrets = c.secrets(&tgt.name);
    let before = secret_state(&secrets.get("envoy-gateway").await.unwrap()).unwrap();

    // -------------------------------------------- upgrade 1: --overwrite, kubelet stopped
    let _healed = Healed(&node);
    let from = now_ms();
    // The install's hook pod may still have its log on the node: only the upgrade's counts.
    let install_logs = hook_logs(&node, &rel.name);
    let upgrade_log = || {
        let mut logs = hook_logs(&node, &rel.name);
        logs.retain(|pod, _| !install_logs.contains_key(pod));
        logs.into_values().collect::<String>()
    };
    // The fault as soon as the trust step's first write (the pending CA) is seen, before that
    // step's pokes, which a live kubelet would act on within a second; or, `early`, as soon as
    // the hook's container has a log on the node.
    let mut ca_watch = std::pin::pin!(watcher(
        c.secrets(&tgt.name),
        watcher::Config::default().fields("metadata.name=envoy-gateway-ca"),
    ));
    let mut args = helm_args("upgrade", &["--reuse-values"]);
    args.extend(["--set".into(), "job.extraArgs={--overwrite}".into()]);
    let upgrade = {
        let helm = helm.clone();
        tokio::spawn(async move { helm_async(&helm, args).await })
    };
    let trigger = async {
        if early {
            while upgrade_log().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            return;
        }
        while let Ok(Some(ev)) = ca_watch.try_next().await {
            if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = ev
                && s.data.as_ref().is_some_and(|d| d.contains_key("next.crt"))
            {
                return;
            }
        }
        panic!("the watch of the CA Secret ended");
    };
    tokio::time::timeout(Duration::from_secs(120), trigger)
        .await
        .expect("the hook wrote no pending CA within 120 s");
    fault(&node, fault_verb);
    let stopped = Instant::now();
    // The hook's container runs on (containerd's), and writes its log to the node's disk; the
    // stopped kubelet reports nothing. Continue it once the hook has ended.
    let held_until = Instant::now() + Duration::from_secs(120);
    let log = loop {
        let log = upgrade_log();
        if log.contains("did not open before --timeout") || log.contains("Next renewal due") {
            break log;
        }
        assert!(
            Instant::now() < held_until && !upgrade.is_finished(),
            "the hook did not end within 120 s of the kubelet's stop:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let held = stopped.elapsed();
    fault(&node, undo);
    let out = upgrade.await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let first = started.elapsed();

    // The hook held its trust gate and ended at --timeout, as documented: exit 3, saying why.
    assert!(
        log.contains(
            "the trust → leaves gate did not open before --timeout: held by pods whose kubelet is not seen live"
        ),
        "the hook's log does not say the gate was held by the kubelet:\n{log}"
    );
    for pod in ["envoy-gateway-", "envoy-proxy-"] {
        assert!(log.contains(pod), "the held pods are not named:\n{log}");
    }
    assert!(
        held > PROPAGATION,
        "the trust gate did not hold past propagationDelay ({PROPAGATION:?}): {held:?}\n{log}"
    );
    let (status, terminated) = hook_run(&c, &node, &rel.name, "Failed").await;
    assert_eq!(terminated.exit_code, 3, "{terminated:?}\n{log}");
    assert_eq!(status.failed, Some(1), "{status:?}");
    // Helm reports the failed pre-upgrade hook.
    assert!(!out.status.success(), "helm upgrade succeeded:\n{stderr}");
    assert!(
        stderr.contains("UPGRADE FAILED") && stderr.contains("pre-upgrade hooks failed"),
        "{stderr}"
    );
    // The widest-trust state: the pending CA in every bundle, no leaf changed.
    let ca = secrets.get("envoy-gateway-ca").await.unwrap();
    assert!(
        ca.data.as_ref().unwrap().contains_key("next.crt"),
        "the pending CA is gone"
    );
    let mid = secret_state(&secrets.get("envoy-gateway").await.unwrap()).unwrap();
    assert_eq!(mid.1, before.1, "a leaf changed behind a held gate");
    assert_eq!(mid.0.len(), 2, "the bundle does not trust both CAs");

    // ------------------------------------- upgrade 2: a plain run, the kubelet back
    let second_from = Instant::now();
    let mut args = helm_args("upgrade", &["--reuse-values"]);
    args.extend(["--set-json".into(), "job.extraArgs=[]".into()]);
    deployed(helm_async(&helm, args).await);
    let second = second_from.elapsed();
    let (status, terminated) = hook_run(&c, &node, &rel.name, "Succeeded").await;
    assert_eq!(terminated.exit_code, 0);
    assert_eq!(status.succeeded, Some(1), "{status:?}");
    let second_log = upgrade_log();
    let ca = secrets.get("envoy-gateway-ca").await.unwrap();
    assert!(
        !ca.data.as_ref().unwrap().contains_key("next.crt"),
        "the next upgrade did not finish the rotation:\n{second_log}"
    );
    let after = secret_state(&secrets.get("envoy-gateway").await.unwrap()).unwrap();
    assert_ne!(after.1, before.1, "no new leaf:\n{second_log}");
    // After a cut, only the kubelet's evidence shows that it has the trust step's writes.
    let on_evidence = second_log.contains("Gate (trust → leaves): opened by evidence");
    if early {
        assert!(
            on_evidence,
            "the next run wrote the new leaves without evidence that the kubelet cut off \
             through the trust gate has the new trust:\n{second_log}"
        );
    }

    // Every pod loads what is stored; then count the handshakes since the first upgrade.
    let apps = [("envoy-gateway", "envoy-gateway"), ("envoy-proxy", "envoy")];
    let to = converged_to(&c, &tgt.name, &results, &apps, 2, Duration::from_secs(90)).await + 3000;
    tokio::time::sleep(Duration::from_secs(3)).await;
    outside
        .stop
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let tally = Tally::of(&read_events(&results), from, to);
    let took = started.elapsed();
    record(
        name,
        took,
        &format!(
            "hook 1 held {:.1} s from the fault, exit 3, helm upgrade 1 returned at {:.0} s; \
             upgrade 2 {:.1} s, its trust gate {}; pods on the node: {} handshakes, failed {:?}",
            held.as_secs_f64(),
            first.as_secs_f64(),
            second.as_secs_f64(),
            if on_evidence {
                "on evidence"
            } else {
                "taken as open by the stored write's time"
            },
            tally.ok,
            tally.failed
        ),
        &outside,
    );
    assert_clean(&outside);
    assert!(tally.ok > 50, "too few handshakes on the node: {tally:?}");
    assert!(
        tally.failed.is_empty(),
        "handshakes failed between the pods on the node: {tally:?}\nhook 2:\n{second_log}"
    );
}
