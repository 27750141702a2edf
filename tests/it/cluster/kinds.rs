//! StatefulSet and DaemonSet consumers on the real control plane (kwok plays their pods, the
//! real StatefulSet and DaemonSet controllers roll them): restarted once per content and waited
//! for by their kind's rule, as a ServiceAccount bound to exactly the chart's Role rendered for
//! a config with those kinds (and exit 5 naming the verb without one of it); a workload deleted
//! and recreated under the same name mid-wait is an error and the new object is never patched;
//! an `OnDelete` StatefulSet fails the wait naming the fix, and is rolled out once its pods are
//! deleted. Deployments are `cluster::consumers`' (the same code path, one rule per kind).

use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use super::chart::{assert_forbidden, documents, object, rules, template, without};
use super::{Certgen, cluster, helm};
use crate::util::{Run, consumer, tempdir};

/// A config with one StatefulSet consumer (by name) and one DaemonSet consumer (by selector),
/// both restart-only, mounting one TLS Secret.
const CONFIG: &str = "\
name: kinds
namespace: default
ca:
  secretName: kinds-ca
  commonName: kinds
  keyAlgorithm: ecdsa-p256
  validity: 3650d
  renewBefore: 90d
secrets:
  - name: store-tls
    type: tls
    commonName: store
    dnsNames: [\"store.{namespace}\"]
    usages: [server, client]
    keyAlgorithm: ecdsa-p256
    validity: 365d
    renewBefore: 30d
consumers:
  - name: store
    kind: StatefulSet
    workload: store
    reload: restart
    mounts: [store-tls]
  - name: agent
    kind: DaemonSet
    selector: app=agent
    reload: restart
    mounts: [store-tls]
";

/// A pod template kwok runs: on kwok's node only (a real node beside it would try to pull the
/// fake image), tolerating its taints.
fn template_spec(name: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [{"name": "app", "image": "fake.invalid/app:1"}],
            "nodeSelector": {"type": "kwok"},
            "tolerations": [{"operator": "Exists"}],
        }
    })
}

pub(super) fn stateful_set(name: &str, replicas: i32, extra: Value) -> StatefulSet {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": template_spec(name),
        }
    });
    merge(&mut v["spec"], extra);
    serde_json::from_value(v).unwrap()
}

pub(super) fn daemon_set(name: &str, extra: Value) -> DaemonSet {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": template_spec(name),
        }
    });
    merge(&mut v["spec"], extra);
    serde_json::from_value(v).unwrap()
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (k, v) in from {
                merge(into.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, from) => *into = from,
    }
}

/// Writes the config into a temporary directory; returns its path (and the directory, to keep).
fn config_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempdir();
    let path = dir.path().join("kinds.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    (dir, path)
}

/// Whether StatefulSet `name` has rolled out by kubectl's rule for its kind (read here from the
/// object itself, not certgen's code).
pub(super) async fn sts_rolled_out(api: &Api<StatefulSet>, name: &str) -> bool {
    let s = api.get(name).await.unwrap();
    let want = s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = s.status.unwrap_or_default();
    st.observed_generation == s.metadata.generation
        && st.ready_replicas == Some(want)
        && st.updated_replicas == Some(want)
        && st.current_revision.is_some()
        && st.current_revision == st.update_revision
}

/// Whether DaemonSet `name` has rolled out by kubectl's rule for its kind.
pub(super) async fn ds_rolled_out(api: &Api<DaemonSet>, name: &str) -> bool {
    let d = api.get(name).await.unwrap();
    let st = d.status.unwrap_or_default();
    st.observed_generation == d.metadata.generation
        && st.desired_number_scheduled > 0
        && st.updated_number_scheduled == Some(st.desired_number_scheduled)
        && st.number_available == Some(st.desired_number_scheduled)
}

pub(super) async fn eventually<F, Fut>(what: &str, within: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn template_annotation(t: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>) -> String {
    t.and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("certgen.dev/restart-fingerprint").cloned())
        .unwrap_or_default()
}

/// Each restart of a consumer in a report: (kind, action), every rollout done.
fn restarts(report: &Value, name: &str) -> Vec<(String, String)> {
    consumer(report, name)["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["rollout"], "done", "{report}");
            (
                d["kind"].as_str().unwrap().to_string(),
                d["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn stateful_and_daemon_sets_are_restarted_and_waited_for_under_the_charts_role() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("kinds").await;
    let (_dir, config) = config_file();
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), &ns.name);
    let ds: Api<DaemonSet> = Api::namespaced(c.client.clone(), &ns.name);
    let pp = PostParams::default();
    sts.create(&pp, &stateful_set("store", 2, json!({})))
        .await
        .unwrap();
    // Its new pod counts as available 2 s after it is ready: a wait that returned early
    // would be caught by the check after it.
    ds.create(&pp, &daemon_set("agent", json!({"minReadySeconds": 2})))
        .await
        .unwrap();
    eventually(
        "the StatefulSet rolls out",
        Duration::from_secs(120),
        || sts_rolled_out(&sts, "store"),
    )
    .await;
    eventually("the DaemonSet rolls out", Duration::from_secs(120), || {
        ds_rolled_out(&ds, "agent")
    })
    .await;

    // The chart's Role, rendered for this config, grants the kinds' verbs in apps.
    let docs = documents(&template(
        &helm,
        &ns.name,
        &["--set-file", &format!("config={}", config.display())],
    ));
    let rules = rules(object(&docs, "Role"));
    let apps: Vec<String> = rules
        .iter()
        .filter(|r| r.api_groups.as_deref() == Some(&["apps".to_string()][..]))
        .flat_map(|r| r.resources.clone().unwrap_or_default())
        .collect();
    assert_eq!(apps, ["deployments", "statefulsets", "daemonsets"]);
    let kubeconfig = c
        .service_account_kubeconfig(&ns.name, "kinds-role", rules.clone())
        .await;
    let certgen = Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .args(["--config", config.to_str().unwrap()])
        .args(["--wait", "--timeout", "120s"]);

    // Install: the Secrets are written, each consumer restarted and waited for.
    let report = certgen.run_async().await.ok().json();
    assert_eq!(
        restarts(&report, "store"),
        [("StatefulSet".to_string(), "restarted".to_string())]
    );
    assert_eq!(
        restarts(&report, "agent"),
        [("DaemonSet".to_string(), "restarted".to_string())]
    );
    // When --wait returned, the generation the patch produced was observed and rolled out.
    let s = sts.get("store").await.unwrap();
    assert_eq!(s.metadata.generation, Some(2));
    assert!(sts_rolled_out(&sts, "store").await, "{:?}", s.status);
    let d = ds.get("agent").await.unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    assert!(ds_rolled_out(&ds, "agent").await, "{:?}", d.status);
    let fp = template_annotation(s.spec.as_ref().map(|s| &s.template));
    assert!(!fp.is_empty());
    assert_eq!(
        fp,
        template_annotation(d.spec.as_ref().map(|s| &s.template)),
        "one content, one fingerprint"
    );
    assert!(
        s.spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()["kubectl.kubernetes.io/restartedAt"]
            .ends_with('Z')
    );

    // Nothing changed: no second roll.
    let report = certgen.run_async().await.ok().json();
    assert_eq!(restarts(&report, "store")[0].1, "already-restarted");
    assert_eq!(restarts(&report, "agent")[0].1, "already-restarted");
    let generations = || async {
        (
            sts.get("store").await.unwrap().metadata.generation,
            ds.get("agent").await.unwrap().metadata.generation,
        )
    };
    assert_eq!(generations().await, (Some(2), Some(2)));

    // A staged rotation: trust, leaves, cleanup; three rolls of each, each waited for.
    let report = certgen
        .clone()
        .arg("--overwrite")
        .run_async()
        .await
        .ok()
        .json();
    for (name, kind) in [("store", "StatefulSet"), ("agent", "DaemonSet")] {
        let want = vec![(kind.to_string(), "restarted".to_string()); 3];
        assert_eq!(restarts(&report, name), want, "{report}");
    }
    assert_eq!(generations().await, (Some(5), Some(5)));
    assert!(sts_rolled_out(&sts, "store").await && ds_rolled_out(&ds, "agent").await);

    // Without watch on statefulsets, --wait exits 5 before anything is written, naming it.
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "kinds-no-watch",
            without(&rules, "statefulsets", "watch"),
        )
        .await;
    let r = Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .args([
            "--config",
            config.to_str().unwrap(),
            "--wait",
            "--overwrite",
        ])
        .run_async()
        .await;
    assert_forbidden(&r, "watch", "statefulsets", &ns.name);
    assert_eq!(generations().await, (Some(5), Some(5)));
}

/// certgen with the config, `--wait`, as the admin, spawned.
fn spawn_wait(c: &super::Cluster, ns: &str, config: &std::path::Path) -> std::process::Child {
    c.certgen(ns)
        .args(["--config", config.to_str().unwrap()])
        .args(["--wait", "--timeout", "90s"])
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stateful_or_daemon_set_recreated_mid_wait_is_an_error_not_followed() {
    let Some(c) = cluster().await else { return };
    let (_dir, config) = config_file();
    for kind in ["statefulset", "daemonset"] {
        let ns = c.namespace("kinds-recreate").await;
        let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), &ns.name);
        let ds: Api<DaemonSet> = Api::namespaced(c.client.clone(), &ns.name);
        let pp = PostParams::default();
        // Rollouts that never complete: StatefulSet pods that fit no node (never ready), a
        // DaemonSet whose pods must stay ready an hour to count as available.
        let never_sts = || {
            stateful_set(
                "store",
                2,
                json!({"template": {"spec": {"nodeSelector": {"certgen.dev/no-such-node": "true"}}}}),
            )
        };
        let never_ds = || daemon_set("agent", json!({"minReadySeconds": 3600}));
        if kind == "statefulset" {
            sts.create(&pp, &never_sts()).await.unwrap();
        } else {
            ds.create(&pp, &never_ds()).await.unwrap();
        }
        let child = spawn_wait(&c, &ns.name, &config);
        let generation = || async {
            if kind == "statefulset" {
                sts.get_opt("store")
                    .await
                    .unwrap()
                    .and_then(|s| s.metadata.generation)
            } else {
                ds.get_opt("agent")
                    .await
                    .unwrap()
                    .and_then(|d| d.metadata.generation)
            }
        };
        // Once certgen has patched (generation 2), delete and recreate it under the same name.
        eventually("certgen restarts it", Duration::from_secs(30), || async {
            generation().await == Some(2)
        })
        .await;
        if kind == "statefulset" {
            sts.delete("store", &DeleteParams::default()).await.unwrap();
        } else {
            ds.delete("agent", &DeleteParams::default()).await.unwrap();
        }
        eventually("it is gone", Duration::from_secs(30), || async {
            generation().await.is_none()
        })
        .await;
        if kind == "statefulset" {
            sts.create(&pp, &never_sts()).await.unwrap();
        } else {
            ds.create(&pp, &never_ds()).await.unwrap();
        }
        let started = Instant::now();
        let r = tokio::task::spawn_blocking(move || Run::from(child.wait_with_output().unwrap()))
            .await
            .unwrap();
        assert_eq!(r.code, 1, "{kind}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("{kind} {}/", ns.name)) && r.stderr.contains("deleted"),
            "{kind}: {}",
            r.stderr
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{kind}: the error came at once, not at the timeout"
        );
        assert_eq!(
            generation().await,
            Some(1),
            "{kind}: the new object was never patched"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_on_delete_stateful_set_fails_the_wait_until_its_pods_are_deleted() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("kinds-ondelete").await;
    let (_dir, config) = config_file();
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), &ns.name);
    sts.create(
        &PostParams::default(),
        &stateful_set("store", 2, json!({"updateStrategy": {"type": "OnDelete"}})),
    )
    .await
    .unwrap();
    eventually(
        "the StatefulSet is ready",
        Duration::from_secs(120),
        || async {
            let s = sts.get("store").await.unwrap().status.unwrap_or_default();
            s.ready_replicas == Some(2)
        },
    )
    .await;
    let certgen = c
        .certgen(&ns.name)
        .args(["--config", config.to_str().unwrap()])
        .args(["--wait", "--timeout", "90s"]);

    // Patched like kubectl rollout restart, but its pods keep the old template: the wait fails
    // at once, naming the strategy and the fix (kubectl's rollout status refuses OnDelete).
    let started = Instant::now();
    let r = certgen.run_async().await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    for word in [
        "OnDelete",
        "2 of 2 pods keep the old pod template",
        "kubectl delete pod",
    ] {
        assert!(r.stderr.contains(word), "{word:?} missing: {}", r.stderr);
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    let report = r.json();
    let store = &consumer(&report, "store")["deployments"][0];
    assert_eq!(store["action"], "restarted");
    assert_eq!(store["rollout"], "failed");

    // Once its pods are deleted, they come back with the new template: rolled out.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns.name);
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=store"),
    )
    .await
    .unwrap();
    eventually(
        "its pods come back updated",
        Duration::from_secs(120),
        || async {
            let s = sts.get("store").await.unwrap().status.unwrap_or_default();
            s.updated_replicas == Some(2) && s.ready_replicas == Some(2) && s.replicas == 2
        },
    )
    .await;
    let report = certgen.run_async().await.ok().json();
    assert_eq!(
        restarts(&report, "store"),
        [("StatefulSet".to_string(), "already-restarted".to_string())]
    );
}
