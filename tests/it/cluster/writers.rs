//! Other writers on the real control plane (issue 45): stand-ins for a GitOps controller,
//! written here because Flux's and Argo CD's controllers are not built on this machine. Each
//! writes as those projects document: Flux's kustomize-controller by server-side apply with
//! force under field manager `kustomize-controller`, and skips an object carrying
//! `kustomize.toolkit.fluxcd.io/ssa: IfNotPresent` once it exists; Argo CD by update under
//! `argocd-controller`. certgen must name the writer in the run's report, `check` (text,
//! JSON, metrics) and a Warning Event, and call a second undo a fight (check exits 1).

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::exporter::Exporter;
use super::{DeleteOnDrop, cluster};

/// The stand-in for Flux's kustomize-controller: applies `git` (the data of Secret `name`
/// as held in Git) with force, unless the object on the cluster says `ssa: IfNotPresent`.
pub(super) async fn kustomize_controller(
    c: &super::Cluster,
    ns: &str,
    name: &str,
    git: &serde_json::Value,
) -> bool {
    let api = c.secrets(ns);
    if let Ok(s) = api.get(name).await
        && s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kustomize.toolkit.fluxcd.io/ssa"))
            .is_some_and(|v| v == "IfNotPresent")
    {
        return false;
    }
    let obj =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": git});
    api.patch(
        name,
        &PatchParams::apply("kustomize-controller").force(),
        &Patch::Apply(&obj),
    )
    .await
    .expect("server-side apply");
    true
}

/// The stand-in for Argo CD's self-heal: replaces the Secret's data with `git`.
async fn argocd_controller(c: &super::Cluster, ns: &str, name: &str, git: &serde_json::Value) {
    let api = c.secrets(ns);
    let mut s: Secret = api.get(name).await.unwrap();
    s.data = Some(serde_json::from_value(git.clone()).unwrap());
    s.metadata.managed_fields = None;
    let pp = PostParams {
        field_manager: Some("argocd-controller".into()),
        ..PostParams::default()
    };
    api.replace(name, &pp, &s).await.expect("update");
}

/// `certgen ARGS -n ns` as the admin, with the output format the arguments give.
fn raw(c: &super::Cluster, ns: &str, args: &[&str]) -> crate::util::Run {
    crate::util::Run::of(
        crate::util::certgen()
            .args(args)
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args(["-n", ns]),
    )
}

pub(super) fn git_copy(s: &Secret) -> serde_json::Value {
    serde_json::to_value(s.data.clone().unwrap()).unwrap()
}

/// The writers `check --output json` names, as (object, manager, operation, fight?).
pub(super) fn named(v: &serde_json::Value) -> Vec<(String, String, String, bool)> {
    v["otherWriters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_string(),
                w["manager"].as_str().unwrap().to_string(),
                w["operation"].as_str().unwrap().to_string(),
                w["fight"].as_array().is_some_and(|f| !f.is_empty()),
            )
        })
        .collect()
}

/// A namespace `prefix-...` on the test cluster with the default profile installed by a plain
/// run: the cluster and the namespace (deleted when dropped); `None` without a cluster.
async fn installed(prefix: &str) -> Option<(super::Cluster, super::TestNs)> {
    let c = cluster().await?;
    let ns = c.namespace(prefix).await;
    let r = c.certgen(&ns.name).run_async().await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    Some((c, ns))
}

/// `certgen check --output json` in `ns`, which must name `writer` (object, manager,
/// operation, fight?) among the other writers; a fight must also make it exit 1 and the text
/// report say `FIGHT between certgen and MANAGER`. The JSON run.
fn check_names(
    c: &super::Cluster,
    ns: &str,
    (object, manager, operation, fight): (&str, &str, &str, bool),
) -> crate::util::Run {
    let r = c.certgen(ns).check().run();
    let want = (
        object.to_string(),
        manager.to_string(),
        operation.to_string(),
        fight,
    );
    let writers = named(&r.json());
    assert!(
        writers.contains(&want),
        "{want:?} not among {writers:?}:\n{}",
        r.stdout
    );
    if fight {
        assert_eq!(r.code, 1, "a fight: {}", r.stdout);
        let text = raw(c, ns, &["check"]);
        assert!(
            text.stdout
                .contains(&format!("FIGHT between certgen and {manager}")),
            "{}",
            text.stdout
        );
    }
    r
}

#[tokio::test]
async fn a_gitops_revert_is_named_a_second_one_is_a_fight_and_the_runbook_fix_ends_it() {
    let Some((c, ns)) = installed("certgen-writers").await else {
        return;
    };
    // Git holds the leaf Secret as first installed.
    let git = git_copy(&c.secrets(&ns.name).get("envoy").await.unwrap());
    // A staged rotation: every leaf and bundle changes.
    let r = c
        .certgen(&ns.name)
        .propagation_delay("1s")
        .args(["--overwrite", "--no-poke"])
        .run();
    assert_eq!(r.code, 0, "{}", r.stderr);

    // The first revert: named everywhere, no fight yet.
    assert!(kustomize_controller(&c, &ns.name, "envoy", &git).await);
    check_names(
        &c,
        &ns.name,
        ("envoy", "kustomize-controller", "Apply", false),
    );
    let text = raw(&c, &ns.name, &["check"]);
    assert!(
        text.stdout
            .contains("manager kustomize-controller (Apply) wrote data/"),
        "{}",
        text.stdout
    );
    let prom = raw(&c, &ns.name, &["check", "--output", "prometheus"]);
    assert!(
        prom.stdout
            .lines()
            .any(|l| l.starts_with("certgen_other_writer_timestamp_seconds{")
                && l.contains("manager=\"kustomize-controller\"")
                && l.contains("object=\"envoy\"")),
        "{}",
        prom.stdout
    );

    // The run names it in its report and an Event, repairs what its plan says, once.
    let run = c
        .certgen(&ns.name)
        .propagation_delay("1s")
        .args(["--no-poke", "--events"])
        .run();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert!(
        named(&report)
            .iter()
            .any(|w| w.0 == "envoy" && w.1 == "kustomize-controller"),
        "{}",
        run.stdout
    );
    let events = report["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["reason"] == "OtherWriter"
            && e["name"] == "envoy"
            && e["note"].as_str().unwrap().contains("kustomize-controller")
            && e["outcome"] == "recorded"),
        "{events:?}"
    );
    let stored = c.secrets(&ns.name).get("envoy").await.unwrap();
    let undone = stored
        .metadata
        .annotations
        .as_ref()
        .unwrap()
        .get("certgen.dev/undone-by");
    assert!(
        undone.is_some_and(|v| v.starts_with("kustomize-controller@")),
        "the run records the undo on the Secret it rewrites: {undone:?}"
    );

    // The second revert (a later second, so a distinct undo): a fight; check exits 1.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert!(kustomize_controller(&c, &ns.name, "envoy", &git).await);
    check_names(
        &c,
        &ns.name,
        ("envoy", "kustomize-controller", "Apply", true),
    );
    let prom = raw(&c, &ns.name, &["check", "--output", "prometheus"]);
    assert!(
        prom.stdout.contains("certgen_fights{namespace=\"")
            && prom
                .stdout
                .lines()
                .any(|l| l.starts_with("certgen_fights{") && l.ends_with(" 1")),
        "{}",
        prom.stdout
    );
    let run = c
        .certgen(&ns.name)
        .propagation_delay("1s")
        .args(["--no-poke", "--events"])
        .run();
    let report = run.json();
    assert!(
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "FightDetected" && e["name"] == "envoy"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("fighting"), "{}", run.stderr);

    // The runbook's fix for Flux: `kustomize.toolkit.fluxcd.io/ssa: IfNotPresent` on the
    // object; the controller then leaves it alone, and once certgen's write stands the fight
    // is no longer reported.
    c.kubectl()
        .args([
            "-n",
            &ns.name,
            "annotate",
            "secret",
            "envoy",
            "kustomize.toolkit.fluxcd.io/ssa=IfNotPresent",
            "--overwrite",
        ])
        .status()
        .unwrap();
    assert!(
        !kustomize_controller(&c, &ns.name, "envoy", &git).await,
        "the stand-in honours IfNotPresent"
    );
    let r = c.certgen(&ns.name).check().run();
    assert!(
        !named(&r.json()).iter().any(|w| w.3),
        "no fight once certgen's write stands: {}",
        r.stdout
    );

    // Argo CD's self-heal by update, on the CA Secret: named with its operation.
    let ca_git = json!({"ca.crt": git["ca.crt"].clone()});
    let mut ca = git_copy(&c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap());
    ca["ca.crt"] = ca_git["ca.crt"].clone();
    argocd_controller(&c, &ns.name, "envoy-gateway-ca", &ca).await;
    check_names(
        &c,
        &ns.name,
        ("envoy-gateway-ca", "argocd-controller", "Update", false),
    );
}

/// The stand-in for an operator that strips `caBundle` on every reconcile (the Tigera
/// operator's case, projectcalico/calico #13695): an update under its own field manager that
/// removes the first entry's `caBundle` and stamps its reconcile annotation, keeping the rest
/// of the object as read (a controller's get, mutate, update). Operators mark what they
/// reconcile; a writer that changes nothing it owns leaves no trace in managedFields at all,
/// and is then reported as `unknown` by the exporter.
async fn strip(api: &Api<MutatingWebhookConfiguration>, name: &str, n: u32) -> String {
    try_strip(api, name, n).await.expect("strip")
}

/// [`strip`], as a reconcile loop makes it: an error (the `caBundle` already gone, so the
/// JSON patch's `remove` has nothing to remove) is the loop's to shrug off. The
/// resourceVersion the strip made.
async fn try_strip(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
    n: u32,
) -> Result<String, kube::Error> {
    let ops = json!([
        {"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"},
        {"op": "add", "path": "/metadata/annotations/operator.tigera.io~1reconciled", "value": n.to_string()},
    ]);
    let pp = PatchParams {
        field_manager: Some("tigera-operator".into()),
        ..PatchParams::default()
    };
    let written = api
        .patch(
            name,
            &pp,
            &Patch::<()>::Json(serde_json::from_value(ops).unwrap()),
        )
        .await?;
    Ok(written.metadata.resource_version.unwrap_or_default())
}

fn injector(name: &str, ns: &str) -> MutatingWebhookConfiguration {
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"certgen.dev/test": "true"}},
        "webhooks": [{
            "name": "topology.webhook.gateway.envoyproxy.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "clientConfig": {"service": {"name": "envoy-gateway", "namespace": ns,
                "path": "/inject-pod-topology", "port": 9443}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["pods/binding"]}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "In", "values": [ns]}]}
        }]
    }))
    .unwrap()
}

/// Envoy Gateway's topology injector for namespace `ns`, created as its chart does (field
/// manager `helm`, no `caBundle`), deleted when the guard drops: its name, the API and the
/// guard.
async fn helm_injector(
    c: &super::Cluster,
    ns: &str,
) -> (String, Api<MutatingWebhookConfiguration>, DeleteOnDrop) {
    let name = format!("envoy-gateway-topology-injector.{ns}");
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.client.clone());
    let pp = PostParams {
        field_manager: Some("helm".into()),
        ..PostParams::default()
    };
    api.create(&pp, &injector(&name, ns)).await.unwrap();
    let cleanup = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&name);
    (name, api, cleanup)
}

/// The exporter for namespace `ns`, once it reports the installation healthy.
fn healthy_exporter(c: &super::Cluster, ns: &str) -> Exporter {
    let exporter = Exporter::start(&c.kubeconfig, ns);
    exporter.metrics_until("healthy", |m| {
        m.lines()
            .any(|l| l.starts_with("certgen_check_healthy{") && l.ends_with(" 1"))
    });
    exporter
}

#[tokio::test]
async fn a_ca_bundle_stripped_again_is_a_fight_in_the_exporter_within_one_scrape() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-strip").await;
    let (name, api, _cleanup) = helm_injector(&c, &ns.name).await;
    let r = c.certgen(&ns.name).run();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let exporter = healthy_exporter(&c, &ns.name);

    // The first strip: named by the exporter, check, the run and an Event; no fight yet.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    strip(&api, &name, 1).await;
    let seen = |m: &str| {
        m.lines().any(|l| {
            l.starts_with("certgen_other_writer_timestamp_seconds{")
                && l.contains("object_kind=\"MutatingWebhookConfiguration\"")
                && l.contains("manager=\"tigera-operator\"")
                && l.contains("origin=\"overwrote\"")
        })
    };
    let m = exporter.metrics_until("the stripper named", seen);
    assert!(
        m.lines()
            .any(|l| l.starts_with("certgen_fights{") && l.ends_with(" 0")),
        "{m}"
    );
    let r = check_names(&c, &ns.name, (&name, "tigera-operator", "Update", false));
    assert_eq!(r.code, 1, "a drifted caBundle: {}", r.stdout);
    let run = c.certgen(&ns.name).args(["--events"]).run();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert!(
        named(&report)
            .iter()
            .any(|w| w.0 == name && w.1 == "tigera-operator"),
        "{}",
        run.stdout
    );
    assert!(
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "OtherWriter"
                && e["kind"] == "MutatingWebhookConfiguration"
                && e["note"].as_str().unwrap().contains("tigera-operator")
                && e["outcome"] == "recorded"),
        "{}",
        run.stdout
    );
    exporter.metrics_until("certgen's write stands again", |m| {
        m.lines()
            .any(|l| l.starts_with("certgen_check_healthy{") && l.ends_with(" 1"))
    });

    // The second strip: a fight, seen by the very next scrape after the watch delivers it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let stripped = std::time::Instant::now();
    strip(&api, &name, 2).await;
    let m = exporter.metrics_until("the fight", |m| {
        m.lines()
            .any(|l| l.starts_with("certgen_fights{") && l.ends_with(" 1"))
    });
    let took = stripped.elapsed();
    println!("fight reported {took:?} after the second strip");
    assert!(
        took < Duration::from_secs(10),
        "well within one scrape interval (the chart's default is 60s): {took:?}"
    );
    assert!(
        m.lines().any(|l| l.starts_with("certgen_fight_undos{")
            && l.contains("manager=\"tigera-operator\"")
            && l.ends_with(" 2")),
        "{m}"
    );
    // certgen's repair recorded the first strip on the object, so `check`, which has no
    // memory of its own, sees the fight too and exits 1 naming both sides.
    check_names(&c, &ns.name, (&name, "tigera-operator", "Update", true));
    exporter.stop();
}

/// Whether the first entry of a webhook configuration holds a `caBundle`.
fn holds_bundle(w: &MutatingWebhookConfiguration) -> bool {
    w.webhooks
        .as_ref()
        .and_then(|hooks| hooks.first())
        .and_then(|h| h.client_config.ca_bundle.as_ref())
        .is_some_and(|b| !b.0.is_empty())
}

/// The `caBundle` writes a run's report says it made (or, for a dry run, plans) to `name`.
fn bundle_writes(report: &serde_json::Value, name: &str) -> Vec<serde_json::Value> {
    report["secrets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["action"] == "update-bundle" && e["secret"].as_str().unwrap().ends_with(name))
        .cloned()
        .collect()
}

/// The Tigera operator's case on a loop (projectcalico/calico #13695: it strips `caBundle`
/// on every reconcile; here every 3 s instead of every 5 minutes), while certgen runs again
/// and again as a CronJob would: every change of the object is watched, each one the stripper
/// did not make is certgen's, and certgen makes exactly the writes its runs' reports plan,
/// at most one per run: it never retries against the stripper. The exporter raises the fight,
/// `check` exits 1 naming both sides, and the dry run lists the record of undos its write
/// would set, which is what the run then writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_ca_bundle_stripped_on_a_loop_is_a_fight_and_certgen_writes_only_its_plan() {
    use futures::StreamExt as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-strip-loop").await;
    let (name, api, _cleanup) = helm_injector(&c, &ns.name).await;
    let r = c.certgen(&ns.name).run_async().await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let exporter = healthy_exporter(&c, &ns.name);

    // Every change of the object from here on, by resourceVersion, with whether it holds a
    // caBundle after it.
    let from = api
        .get(&name)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let wp = kube::api::WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290);
    let mut events = api.watch(&wp, &from).await.unwrap().boxed();
    let watch = tokio::spawn({
        let seen = seen.clone();
        async move {
            while let Some(Ok(e)) = events.next().await {
                if let kube::api::WatchEvent::Modified(w) = e {
                    let rv = w.metadata.resource_version.clone().unwrap();
                    seen.lock().unwrap().push((rv, holds_bundle(&w)));
                }
            }
        }
    });
    // The stripper: every 3 s, a reconcile that removes the caBundle when it is there.
    let stop = Arc::new(AtomicBool::new(false));
    let stripped: Arc<Mutex<Vec<String>>> = Arc::default();
    let stripper = tokio::spawn({
        let (api, name, stop, stripped) =
            (api.clone(), name.clone(), stop.clone(), stripped.clone());
        async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let holds = api.get(&name).await.is_ok_and(|w| holds_bundle(&w));
                if holds && let Ok(rv) = try_strip(&api, &name, n).await {
                    stripped.lock().unwrap().push(rv);
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }
    });

    // certgen's runs, a few seconds apart, each writing at most what its plan says.
    let mut planned = 0;
    let mut fight_seen = false;
    for i in 0..6 {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let run = c.certgen(&ns.name).run_async().await;
        assert_eq!(run.code, 0, "run {i}: {}\n{}", run.stdout, run.stderr);
        let report = run.json();
        let writes = bundle_writes(&report, &name);
        assert!(
            writes.len() <= 1,
            "run {i} wrote the caBundle {} times",
            writes.len()
        );
        planned += writes.len();
        fight_seen |= named(&report)
            .iter()
            .any(|w| w.0 == name && w.1 == "tigera-operator" && w.3);
    }
    // The exporter saw the stripper undo certgen's writes again and again: a fight.
    let m = exporter.metrics_until("the fight", |m| {
        m.lines().any(|l| {
            l.starts_with("certgen_fight_undos{")
                && l.contains("manager=\"tigera-operator\"")
                && !l.ends_with(" 0")
                && !l.ends_with(" 1")
        })
    });
    assert!(
        m.lines()
            .any(|l| l.starts_with("certgen_other_writer_timestamp_seconds{")
                && l.contains("manager=\"tigera-operator\"")),
        "{m}"
    );
    stop.store(true, Ordering::SeqCst);
    stripper.await.unwrap();

    // With the stripper's last strip standing (one more if certgen's repair came last),
    // `check` exits 1 naming both sides, from the record certgen's writes left on the object.
    if holds_bundle(&api.get(&name).await.unwrap()) {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let rv = strip(&api, &name, 1000).await;
        stripped.lock().unwrap().push(rv);
    }
    check_names(&c, &ns.name, (&name, "tigera-operator", "Update", true));

    // The dry run lists the record its write would set; the run writes that very record.
    let dry = c.certgen(&ns.name).args(["--dry-run"]).run_async().await;
    let dry_writes = bundle_writes(&dry.json(), &name);
    let [dry_write] = dry_writes.as_slice() else {
        panic!("{}", dry.stdout)
    };
    let record = dry_write["undoneBy"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        record
            .split(',')
            .filter(|u| u.starts_with("tigera-operator@"))
            .count()
            >= 2,
        "{}",
        dry.stdout
    );
    let text = raw(&c, &ns.name, &["--dry-run"]);
    assert!(
        text.stdout
            .contains("records the undos of certgen's writes: tigera-operator@"),
        "{}",
        text.stdout
    );
    let run = c.certgen(&ns.name).run_async().await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let writes = bundle_writes(&run.json(), &name);
    assert_eq!(writes.len(), 1, "{}", run.stdout);
    assert_eq!(
        writes[0]["undoneBy"], dry_write["undoneBy"],
        "{}",
        run.stdout
    );
    planned += 1;
    assert!(
        named(&run.json())
            .iter()
            .any(|w| w.0 == name && w.1 == "tigera-operator" && w.3),
        "the run says FIGHT: {}",
        run.stdout
    );
    let stored = api.get(&name).await.unwrap();
    let annotations = stored.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("certgen.dev/undone-by"),
        Some(&record),
        "the run writes the record its dry run planned"
    );
    assert!(annotations.contains_key("certgen.dev/ca-bundle-sha256"));

    // Every change the stripper did not make is certgen's: as many as its reports planned.
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    let stripped = stripped.lock().unwrap().clone();
    let certgen_writes: Vec<&(String, bool)> = seen
        .iter()
        .filter(|(rv, _)| !stripped.contains(rv))
        .collect();
    println!(
        "{} changes watched: {} strips, {} certgen writes, {planned} planned; a fight in a run's report during the loop: {fight_seen}",
        seen.len(),
        stripped.len(),
        certgen_writes.len()
    );
    assert!(
        stripped.len() >= 3,
        "the stripper undid certgen's writes: {stripped:?}"
    );
    assert!(
        certgen_writes.iter().all(|(_, holds)| *holds),
        "every write of certgen's puts the caBundle back: {seen:?}"
    );
    assert_eq!(
        certgen_writes.len(),
        planned,
        "certgen wrote exactly what its runs planned: {seen:?} (strips {stripped:?})"
    );
    exporter.stop();
}

/// Flux's stand-in reverts certgen's CA Secret to the copy in Git (as first installed) in the
/// middle of a staged rotation (after its trust step) and again after it, while the harness's
/// real TLS peers handshake with each other throughout: the writer is named each time, the
/// second revert is a fight, and no handshake fails.
#[tokio::test]
async fn gitops_reverts_of_the_ca_secret_mid_rotation_and_after_break_no_handshake() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-writers-tls").await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("harness.yaml");
    std::fs::write(&cfg, super::harness::config_yaml(&ns.name)).unwrap();
    let certgen = c
        .certgen(&ns.name)
        .args(["--config", cfg.to_str().unwrap(), "--no-poke"])
        .propagation_delay("2s");
    let check = || {
        c.certgen(&ns.name)
            .check()
            .args(["--config", cfg.to_str().unwrap()])
            .run()
    };
    c.create_deployment(
        &ns.name,
        &super::deployment("envoy-ratelimit", 1, json!({})),
    )
    .await;
    let r = certgen.run_async().await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ca = "envoy-gateway-ca";
    let installed = c.secrets(&ns.name).get(ca).await.unwrap();
    let git = json!({
        "ca.crt": git_copy(&installed)["ca.crt"],
        "tls.crt": git_copy(&installed)["tls.crt"],
        "tls.key": git_copy(&installed)["tls.key"],
    });
    let peers = super::harness::Peers::start(&c, &ns.name).await;

    // Mid-rotation: the trust step written, the run stopped at its gate (exit 3).
    let r = certgen
        .clone()
        .args(["--overwrite", "--timeout", "1s"])
        .run_async()
        .await;
    assert_eq!(r.code, 3, "stopped at the gate: {}", r.stderr);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(kustomize_controller(&c, &ns.name, ca, &git).await);
    let r = check();
    let writers = named(&r.json());
    assert!(
        writers
            .iter()
            .any(|w| w.0 == ca && w.1 == "kustomize-controller" && w.2 == "Apply"),
        "{}",
        r.stdout
    );
    peers.settle().await;
    let r = certgen
        .clone()
        .args(["--events", "--wait", "--timeout", "120s"])
        .run_async()
        .await;
    println!(
        "the run after the first revert: exit {}\n{}",
        r.code, r.stdout
    );
    assert!(
        named(&r.json())
            .iter()
            .any(|w| w.0 == ca && w.1 == "kustomize-controller"),
        "{}",
        r.stdout
    );
    // Whatever that run left mid-way, the next plain runs finish it.
    for _ in 0..3 {
        peers.settle().await;
        let r = certgen
            .clone()
            .args(["--wait", "--timeout", "120s"])
            .run_async()
            .await;
        assert!(r.code == 0, "{}\n{}", r.stdout, r.stderr);
    }

    // After the rotation: the second revert by the same controller is a fight.
    peers.settle().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(kustomize_controller(&c, &ns.name, ca, &git).await);
    let r = check();
    println!(
        "check after the second revert: exit {}\n{}",
        r.code, r.stdout
    );
    let fought = named(&r.json());
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        fought
            .iter()
            .any(|w| w.0 == ca && w.1 == "kustomize-controller" && w.3),
        "{fought:?}"
    );
    peers.settle().await;
    let r = certgen
        .clone()
        .args(["--events", "--wait", "--timeout", "120s"])
        .run_async()
        .await;
    println!(
        "the run after the second revert: exit {}\n{}",
        r.code, r.stdout
    );
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
        peers.settle().await;
        let r = certgen
            .clone()
            .args(["--wait", "--timeout", "120s"])
            .run_async()
            .await;
        assert!(r.code == 0, "{}\n{}", r.stdout, r.stderr);
    }
    peers.settle().await;
    let (handshakes, failures) = peers.stop().await;
    println!("{handshakes} handshakes, {} failed", failures.len());
    assert!(handshakes > 100, "{handshakes}");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Secrets another tool created before certgen adopted them (here `kubectl create`, field
/// manager `kubectl-create`, with a copy of another installation's Secrets): named as written
/// before adoption, never as an undo, so never a fight.
#[tokio::test]
async fn secrets_written_before_adoption_are_named_as_such() {
    let Some((c, from)) = installed("certgen-writers-from").await else {
        return;
    };
    let ns = c.namespace("certgen-writers-adopt").await;
    let ca = c.secrets(&from.name).get("envoy-gateway-ca").await.unwrap();
    let copy: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "envoy-gateway-ca"},
        "data": git_copy(&ca),
    }))
    .unwrap();
    let pp = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..PostParams::default()
    };
    c.secrets(&ns.name).create(&pp, &copy).await.unwrap();
    let adopted = |v: &serde_json::Value| {
        v["otherWriters"].as_array().into_iter().flatten().any(|w| {
            w["name"] == "envoy-gateway-ca"
                && w["manager"] == "kubectl-create"
                && w["origin"] == "before_adoption"
                && w["fight"].is_null()
        })
    };
    let r = c.certgen(&ns.name).check().run();
    assert!(adopted(&r.json()), "{}", r.stdout);
    let r = c.certgen(&ns.name).args(["--events"]).run();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report = r.json();
    assert!(adopted(&report), "{}", r.stdout);
    assert!(
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "OtherWriter"
                && e["name"] == "envoy-gateway-ca"
                && e["note"]
                    .as_str()
                    .unwrap()
                    .contains("before certgen adopted it")),
        "{}",
        r.stdout
    );
    let text = raw(&c, &ns.name, &["check"]);
    assert!(
        text.stdout
            .contains("manager kubectl-create (Update) wrote")
            && text.stdout.contains("before certgen adopted it"),
        "{}",
        text.stdout
    );
}

/// Argo CD's self-heal as documented: on every sync it puts the live object back to Git's,
/// by update under `argocd-controller`, except the JSON pointers its Application's
/// `ignoreDifferences` lists when the sync option `RespectIgnoreDifferences=true` is set.
/// Returns whether it wrote.
async fn argocd_sync(
    c: &super::Cluster,
    ns: &str,
    name: &str,
    git: &serde_json::Value,
    ignore: &[&str],
) -> bool {
    if ignore.contains(&"/data") {
        return false;
    }
    argocd_controller(c, ns, name, git).await;
    true
}

/// The runbook's Argo CD fix, run as written: `ignoreDifferences` on `/data` with
/// `RespectIgnoreDifferences=true` ends the fight the self-heal started.
#[tokio::test]
async fn argo_cds_self_heal_fights_until_ignore_differences_is_set() {
    let Some((c, ns)) = installed("certgen-writers-argo").await else {
        return;
    };
    let git = git_copy(&c.secrets(&ns.name).get("envoy").await.unwrap());
    let r = c
        .certgen(&ns.name)
        .propagation_delay("1s")
        .args(["--overwrite", "--no-poke"])
        .run();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let run = || {
        c.certgen(&ns.name)
            .propagation_delay("1s")
            .args(["--no-poke"])
            .run()
    };
    // Two self-heals, certgen's run between them: a fight, named with its operation.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(argocd_sync(&c, &ns.name, "envoy", &git, &[]).await);
    assert_eq!(run().code, 0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(argocd_sync(&c, &ns.name, "envoy", &git, &[]).await);
    check_names(&c, &ns.name, ("envoy", "argocd-controller", "Update", true));
    // The fix: the Application ignores /data. certgen's next write stands, the fight ends.
    let fixed = ["/data"];
    let r = run();
    assert_eq!(r.code, 0, "{}", r.stderr);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(!argocd_sync(&c, &ns.name, "envoy", &git, &fixed).await);
    let r = c.certgen(&ns.name).check().run();
    assert!(!named(&r.json()).iter().any(|w| w.3), "{}", r.stdout);
    assert_eq!(
        r.code, 0,
        "healthy once certgen's write stands: {}",
        r.stdout
    );
}
