//! Other writers on the real control plane (issue 45): stand-ins for a GitOps controller,
//! written here because Flux's and Argo CD's controllers are not built on this machine. Each
//! writes as those projects document: Flux's kustomize-controller by server-side apply with
//! force under field manager `kustomize-controller`, and skips an object carrying
//! `kustomize.toolkit.fluxcd.io/ssa: IfNotPresent` once it exists; Argo CD by update under
//! `argocd-controller`. certgen must name the writer in the run's report, `check` (text,
//! JSON, metrics) and a Warning Event, and call a second undo a fight (check exits 1).

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::cluster;

/// The stand-in for Flux's kustomize-controller: applies `git` (the data of Secret `name`
/// as held in Git) with force, unless the object on the cluster says `ssa: IfNotPresent`.
async fn kustomize_controller(
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

fn git_copy(s: &Secret) -> serde_json::Value {
    serde_json::to_value(s.data.clone().unwrap()).unwrap()
}

/// The writers `check --output json` names, as (object, manager, operation, fight?).
fn named(v: &serde_json::Value) -> Vec<(String, String, String, bool)> {
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

#[tokio::test]
async fn a_gitops_revert_is_named_a_second_one_is_a_fight_and_the_runbook_fix_ends_it() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-writers").await;
    let r = c.certgen(&ns.name).run();
    assert_eq!(r.code, 0, "{}", r.stderr);
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
    let r = c.certgen(&ns.name).check().run();
    let v = r.json();
    let writers = named(&v);
    assert!(
        writers.contains(&(
            "envoy".into(),
            "kustomize-controller".into(),
            "Apply".into(),
            false
        )),
        "{writers:?}\n{}",
        r.stdout
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
    let r = c.certgen(&ns.name).check().run();
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        named(&r.json()).contains(&(
            "envoy".into(),
            "kustomize-controller".into(),
            "Apply".into(),
            true
        )),
        "{}",
        r.stdout
    );
    let text = raw(&c, &ns.name, &["check"]);
    assert!(
        text.stdout
            .contains("FIGHT between certgen and kustomize-controller"),
        "{}",
        text.stdout
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
    let r = c.certgen(&ns.name).check().run();
    assert!(
        named(&r.json()).contains(&(
            "envoy-gateway-ca".into(),
            "argocd-controller".into(),
            "Update".into(),
            false
        )),
        "{}",
        r.stdout
    );
}
