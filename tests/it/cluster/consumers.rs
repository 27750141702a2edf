//! Consumers on the real control plane with kwok: restarts keyed by fingerprint, rollout waits
//! bound to UID and generation, progress deadlines, paused Deployments, timeouts, and TLS probes
//! against real servers on 127.0.0.1 (a rustls server that reloads its files, one that never
//! does, and `openssl s_server`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use super::{Cluster, cluster};
use crate::util::{Run, certgen, tempdir, tls_server};

/// A Deployment; `schedulable: false` gives it a nodeSelector no node matches, so its pods stay
/// Pending and its rollout never completes.
fn deployment(name: &str, schedulable: bool, extra_spec: Value) -> Deployment {
    let mut spec = json!({
        "replicas": 2,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "containers": [{"name": "app", "image": "fake.invalid/app:1"}],
                "tolerations": [{"operator": "Exists"}]
            }
        }
    });
    if !schedulable {
        spec["template"]["spec"]["nodeSelector"] = json!({"certgen.dev/no-such-node": "true"});
    }
    for (k, v) in extra_spec.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn create(c: &Cluster, ns: &str, d: Deployment) -> Api<Deployment> {
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), ns);
    api.create(&PostParams::default(), &d).await.unwrap();
    api
}

async fn rolled_out(api: &Api<Deployment>, name: &str) {
    for _ in 0..600 {
        let d = api.get(name).await.unwrap();
        let s = d.status.unwrap_or_default();
        if s.observed_generation == d.metadata.generation
            && s.available_replicas == Some(2)
            && s.updated_replicas == Some(2)
            && s.replicas == Some(2)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{name} did not roll out");
}

fn certgen_args(c: &Cluster, ns: &str, extra: &[&str]) -> std::process::Command {
    let mut cmd = certgen();
    cmd.args([
        "--kubeconfig",
        c.kubeconfig.to_str().unwrap(),
        "-n",
        ns,
        "--output",
        "json",
        // Staged rotations run through every phase without waiting 90 s per gate.
        "--propagation-delay",
        "0s",
    ]);
    cmd.args(extra);
    cmd
}

async fn run_async(mut cmd: std::process::Command) -> Run {
    tokio::task::spawn_blocking(move || Run::from(cmd.output().unwrap()))
        .await
        .unwrap()
}

fn consumer<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no consumer {name} in {report}"))
}

/// The events of a run with `--log-format json`, in order.
fn log_events(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn template_annotations(d: &Deployment) -> std::collections::BTreeMap<String, String> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_rolls_exactly_once_per_content_and_the_wait_follows_kubectls_rules() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("restart").await;
    let api = create(&c, &ns.name, deployment("envoy-ratelimit", true, json!({}))).await;
    rolled_out(&api, "envoy-ratelimit").await;

    let r = run_async(certgen_args(&c, &ns.name, &["--wait", "--timeout", "120s"]))
        .await
        .ok();
    let report = r.json();
    let rl = consumer(&report, "envoy-ratelimit");
    assert_eq!(rl["deployments"][0]["action"], "restarted", "{report}");
    assert_eq!(rl["deployments"][0]["rollout"], "done", "{report}");
    assert_eq!(
        consumer(&report, "envoy-gateway")["note"],
        "reloads by itself",
        "hot consumers are not read or restarted"
    );
    let d = api.get("envoy-ratelimit").await.unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    let ann = template_annotations(&d);
    assert!(ann.contains_key("kubectl.kubernetes.io/restartedAt"));
    let fp = ann["certgen.dev/restart-fingerprint"].clone();
    // When --wait returned, kubectl's rule holds.
    let s = d.status.unwrap();
    assert!(
        s.observed_generation >= Some(2)
            && s.updated_replicas == Some(2)
            && s.available_replicas == Some(2)
    );

    // Nothing changed: no second roll.
    let report = run_async(certgen_args(&c, &ns.name, &["--wait"]))
        .await
        .ok()
        .json();
    assert_eq!(
        consumer(&report, "envoy-ratelimit")["deployments"][0]["action"],
        "already-restarted"
    );
    assert_eq!(
        api.get("envoy-ratelimit")
            .await
            .unwrap()
            .metadata
            .generation,
        Some(2)
    );

    // A staged rotation changes what it mounts three times: the trust bundle (the restart-only
    // consumer must load the new CA before any peer presents a leaf from it), its leaf, then
    // the bundle without the old CA. Three rolls, each waited for, each with its own
    // fingerprint.
    let report = run_async(certgen_args(&c, &ns.name, &["--overwrite", "--wait"]))
        .await
        .ok()
        .json();
    let rolls = &consumer(&report, "envoy-ratelimit")["deployments"];
    let actions: Vec<&str> = rolls
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["restarted", "restarted", "restarted"], "{report}");
    assert!(
        rolls
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["rollout"] == "done"),
        "{report}"
    );
    let d = api.get("envoy-ratelimit").await.unwrap();
    assert_eq!(d.metadata.generation, Some(5));
    let fp2 = template_annotations(&d)["certgen.dev/restart-fingerprint"].clone();
    assert_ne!(fp2, fp);

    // And repeating the run rolls nothing.
    run_async(certgen_args(&c, &ns.name, &["--wait"]))
        .await
        .ok();
    assert_eq!(
        api.get("envoy-ratelimit")
            .await
            .unwrap()
            .metadata
            .generation,
        Some(5)
    );

    // The one-write strategy rolls once, then once more when the cleanup drops the old CA.
    run_async(certgen_args(
        &c,
        &ns.name,
        &["--overwrite", "--strategy", "immediate", "--wait"],
    ))
    .await
    .ok();
    assert_eq!(
        api.get("envoy-ratelimit")
            .await
            .unwrap()
            .metadata
            .generation,
        Some(7)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_recreated_mid_wait_is_an_error_not_followed() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("recreate").await;
    let api = create(
        &c,
        &ns.name,
        deployment("envoy-ratelimit", false, json!({})),
    )
    .await;
    let child = certgen_args(&c, &ns.name, &["--wait", "--timeout", "90s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once certgen has patched (generation 2), delete and recreate the Deployment.
    for _ in 0..300 {
        if api
            .get("envoy-ratelimit")
            .await
            .unwrap()
            .metadata
            .generation
            == Some(2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.delete("envoy-ratelimit", &DeleteParams::default())
        .await
        .unwrap();
    for _ in 0..100 {
        if api.get_opt("envoy-ratelimit").await.unwrap().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.create(
        &PostParams::default(),
        &deployment("envoy-ratelimit", true, json!({})),
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let r = tokio::task::spawn_blocking(move || Run::from(child.wait_with_output().unwrap()))
        .await
        .unwrap();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("deleted"), "{}", r.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the error came at once, not at the timeout"
    );
    assert_eq!(
        api.get("envoy-ratelimit")
            .await
            .unwrap()
            .metadata
            .generation,
        Some(1),
        "the new object was never patched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_progress_deadline_fails_fast() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("deadline").await;
    create(
        &c,
        &ns.name,
        deployment(
            "envoy-ratelimit",
            false,
            json!({"progressDeadlineSeconds": 2}),
        ),
    )
    .await;
    let started = std::time::Instant::now();
    let r = run_async(certgen_args(&c, &ns.name, &["--wait", "--timeout", "120s"])).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("progress deadline exceeded"),
        "{}",
        r.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "failed fast, not at the 120 s timeout"
    );
    assert_eq!(
        consumer(&r.json(), "envoy-ratelimit")["deployments"][0]["rollout"],
        "failed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_deployment_gets_a_clear_error() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("paused").await;
    let api = create(
        &c,
        &ns.name,
        deployment("envoy-ratelimit", true, json!({"paused": true})),
    )
    .await;
    let r = run_async(certgen_args(&c, &ns.name, &["--wait"])).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("is paused") && r.stderr.contains("kubectl rollout resume"),
        "{}",
        r.stderr
    );
    assert_eq!(
        api.get("envoy-ratelimit")
            .await
            .unwrap()
            .metadata
            .generation,
        Some(1),
        "not patched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_past_the_timeout_exits_3_naming_what_is_pending() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("timeout").await;
    create(
        &c,
        &ns.name,
        deployment("envoy-ratelimit", false, json!({})),
    )
    .await;
    let r = run_async(certgen_args(&c, &ns.name, &["--wait", "--timeout", "3s"])).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("envoy-ratelimit") && r.stderr.contains("pending"),
        "{}",
        r.stderr
    );
}

// ---- probes ----------------------------------------------------------------------------------

/// Copies a Secret's keys into `dir` every 100 ms, as a kubelet would (atomic renames).
fn kubelet(c: &Cluster, ns: &str, secret: &str, dir: PathBuf) -> tokio::task::JoinHandle<()> {
    let api = c.secrets(ns);
    let secret = secret.to_string();
    tokio::spawn(async move {
        loop {
            if let Ok(Some(s)) = api.get_opt(&secret).await {
                for (k, v) in s.data.unwrap_or_default() {
                    let tmp = dir.join(format!(".{k}.tmp"));
                    std::fs::write(&tmp, &v.0).unwrap();
                    std::fs::rename(&tmp, dir.join(&k)).unwrap();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// The envoy-gateway Service on port 18000, with an EndpointSlice at a TEST-NET address.
async fn service(c: &Cluster, ns: &str, address: &str) {
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

async fn probe_run(c: &Cluster, ns: &str, address: &str, port: u16, extra: &[&str]) -> Run {
    let mut cmd = certgen_args(c, ns, &["--probe"]);
    cmd.args(extra);
    cmd.env(
        "CERTGEN_TEST_DIAL_OVERRIDE",
        format!("{address}:18000=127.0.0.1:{port}"),
    );
    run_async(cmd).await
}

async fn install_and_sync(c: &Cluster, ns: &str, dir: &Path) -> tokio::task::JoinHandle<()> {
    run_async(certgen_args(c, ns, &[])).await.ok();
    let k = kubelet(c, ns, "envoy-gateway", dir.to_path_buf());
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
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = |f: &str| files.path().join(f).to_str().unwrap().to_string();
    let mut server = std::process::Command::new("openssl")
        .args([
            "s_server",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            &p("tls.crt"),
            "-key",
            &p("tls.key"),
            "-CAfile",
            &p("ca.crt"),
            "-Verify",
            "1",
            "-quiet",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..50 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

/// A run stopped between the trust writes and the restart of a restart-only consumer: the next
/// run restarts it (and waits for the rollout) before any leaf from the new CA is written. (Was:
/// a template without certgen's fingerprint counted as up to date, so the trust bundle never
/// reached it before the leaves changed.)
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_lost_between_the_writes_and_the_patch_is_made_by_the_next_run() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("lostrestart").await;
    // The Secrets exist before the Deployment (as after a Helm install), so its template has
    // no fingerprint: the first run finds it up to date.
    run_async(certgen_args(&c, &ns.name, &[])).await.ok();
    // The API server's times have one-second resolution: a Deployment created in the same
    // second as the write would count as older.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let api = create(&c, &ns.name, deployment("envoy-ratelimit", true, json!({}))).await;
    rolled_out(&api, "envoy-ratelimit").await;
    let r = run_async(certgen_args(&c, &ns.name, &[])).await.ok();
    assert_eq!(
        consumer(&r.json(), "envoy-ratelimit")["deployments"][0]["action"],
        "up-to-date",
        "{}",
        r.stdout
    );
    let generation = api
        .get("envoy-ratelimit")
        .await
        .unwrap()
        .metadata
        .generation;
    // Killed right after the trust writes (CA Secret and three bundles), before the restart.
    let mut killed = certgen_args(&c, &ns.name, &["--overwrite"]);
    killed.env(certgen::apply::CRASH_ENV, "4");
    let out = run_async(killed).await;
    assert_eq!(out.code, certgen::apply::CRASH_EXIT, "{}", out.stderr);
    assert_eq!(
        api.get("envoy-ratelimit")
            .await
            .unwrap()
            .metadata
            .generation,
        generation,
        "not restarted yet"
    );
    // The re-run restarts it for the trust bundle first, then for the leaves, then for the
    // cleanup; each rollout is waited for before the next step.
    let r = run_async(certgen_args(
        &c,
        &ns.name,
        &["--wait", "-v", "--log-format", "json"],
    ))
    .await
    .ok();
    let report = r.json();
    let rolls: Vec<&str> = consumer(&report, "envoy-ratelimit")["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["action"].as_str().unwrap())
        .collect();
    assert_eq!(rolls, ["restarted", "restarted", "restarted"], "{report}");
    // The first restart comes before the promotion.
    let events = log_events(&r.stderr);
    let first = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred);
    let restart = first(&|e: &Value| e["deployment"] == "envoy-ratelimit").expect("restart logged");
    let promote = first(&|e: &Value| e["action"] == "promote").expect("promotion logged");
    assert!(
        restart < promote,
        "restarted for the trust bundle before the leaves"
    );
}

/// A restart-only consumer whose rollout takes longer than the propagation delay holds the
/// gate: the leaves wait for the rollout, not only for the delay.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_slower_than_the_delay_holds_the_gate() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("slowroll").await;
    let api = create(
        &c,
        &ns.name,
        deployment("envoy-ratelimit", true, json!({"minReadySeconds": 6})),
    )
    .await;
    run_async(certgen_args(&c, &ns.name, &["--wait", "--timeout", "120s"]))
        .await
        .ok();
    rolled_out(&api, "envoy-ratelimit").await;
    let mut cmd = certgen();
    cmd.args([
        "--kubeconfig",
        c.kubeconfig.to_str().unwrap(),
        "-n",
        &ns.name,
        "--output",
        "json",
        "--overwrite",
        "--propagation-delay",
        "1s",
        "--timeout",
        "120s",
        "--log-format",
        "json",
    ]);
    let r = run_async(cmd).await.ok();
    let events = log_events(&r.stderr);
    let at = |action: &str| -> time::OffsetDateTime {
        events
            .iter()
            .find(|e| e["action"] == action)
            .and_then(|e| {
                time::OffsetDateTime::parse(
                    e["timestamp"].as_str()?,
                    &time::format_description::well_known::Rfc3339,
                )
                .ok()
            })
            .unwrap_or_else(|| panic!("no {action} event: {}", r.stderr))
    };
    let waited = at("promote") - at("trust");
    assert!(
        waited >= time::Duration::seconds(6),
        "the leaves waited {waited} after the trust writes: less than the 6 s rollout"
    );
}
