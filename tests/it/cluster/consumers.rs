//! Consumers on the real control plane with kwok: restarts keyed by fingerprint (one roll per
//! content), rollout waits bound to UID and generation by kubectl's rules, progress deadlines,
//! paused Deployments and timeouts. How restarts fit into a rotation's phases is in
//! `cluster::rotation`; probes of consumers in `cluster::probe`.

use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use super::{cluster, deployment, generation, rolled_out, unschedulable};
use crate::util::{Run, consumer};

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
    let api = c
        .create_deployment(&ns.name, &deployment("envoy-ratelimit", 2, json!({})))
        .await;
    rolled_out(&api, "envoy-ratelimit", Duration::from_secs(120)).await;

    let r = c
        .certgen(&ns.name)
        .args(["--wait", "--timeout", "120s"])
        .run_async()
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
    let report = c
        .certgen(&ns.name)
        .args(["--wait"])
        .run_async()
        .await
        .ok()
        .json();
    assert_eq!(
        consumer(&report, "envoy-ratelimit")["deployments"][0]["action"],
        "already-restarted"
    );
    assert_eq!(generation(&api, "envoy-ratelimit").await, Some(2));

    // A staged rotation changes what it mounts three times: the trust bundle (the restart-only
    // consumer must load the new CA before any peer presents a leaf from it), its leaf, then
    // the bundle without the old CA. Three rolls, each waited for, each with its own
    // fingerprint.
    let report = c
        .certgen(&ns.name)
        .args(["--overwrite", "--wait"])
        .run_async()
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
    c.certgen(&ns.name).args(["--wait"]).run_async().await.ok();
    assert_eq!(generation(&api, "envoy-ratelimit").await, Some(5));

    // The one-write strategy rolls once, then once more when the cleanup drops the old CA.
    c.certgen(&ns.name)
        .args(["--overwrite", "--strategy", "immediate", "--wait"])
        .run_async()
        .await
        .ok();
    assert_eq!(generation(&api, "envoy-ratelimit").await, Some(7));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_recreated_mid_wait_is_an_error_not_followed() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("recreate").await;
    let api = c
        .create_deployment(
            &ns.name,
            &deployment("envoy-ratelimit", 2, unschedulable(json!({}))),
        )
        .await;
    let child = c
        .certgen(&ns.name)
        .args(["--wait", "--timeout", "90s"])
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once certgen has patched (generation 2), delete and recreate the Deployment.
    for _ in 0..300 {
        if generation(&api, "envoy-ratelimit").await == Some(2) {
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
        &deployment("envoy-ratelimit", 2, json!({})),
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
        generation(&api, "envoy-ratelimit").await,
        Some(1),
        "the new object was never patched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_progress_deadline_fails_fast() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("deadline").await;
    c.create_deployment(
        &ns.name,
        &deployment(
            "envoy-ratelimit",
            2,
            unschedulable(json!({"progressDeadlineSeconds": 2})),
        ),
    )
    .await;
    let started = std::time::Instant::now();
    let r = c
        .certgen(&ns.name)
        .args(["--wait", "--timeout", "120s"])
        .run_async()
        .await;
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
    let api = c
        .create_deployment(
            &ns.name,
            &deployment("envoy-ratelimit", 2, json!({"paused": true})),
        )
        .await;
    let r = c.certgen(&ns.name).args(["--wait"]).run_async().await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("is paused") && r.stderr.contains("kubectl rollout resume"),
        "{}",
        r.stderr
    );
    assert_eq!(
        generation(&api, "envoy-ratelimit").await,
        Some(1),
        "not patched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_past_the_timeout_exits_3_naming_what_is_pending() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("timeout").await;
    c.create_deployment(
        &ns.name,
        &deployment("envoy-ratelimit", 2, unschedulable(json!({}))),
    )
    .await;
    let r = c
        .certgen(&ns.name)
        .args(["--wait", "--timeout", "8s"])
        .run_async()
        .await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("envoy-ratelimit") && r.stderr.contains("pending"),
        "{}",
        r.stderr
    );
    // Why it is pending, in the scheduler's words, not only kubectl's counts.
    assert!(r.stderr.contains("cannot be scheduled: 0/"), "{}", r.stderr);
}

// ---- probes ----------------------------------------------------------------------------------
