//! Metrics on the real control plane: a run's `--metrics-file` gives the same API request
//! counts as its report, `certgen check --output prometheus` follows a `caBundle` target from
//! in step to drifted to repaired to absent, and names the phase of a staged rotation with its
//! start by the API server's clock. Every exposition passes `promtool check metrics`.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{DeleteOnDrop, cluster};
use crate::metrics::{assert_valid_exposition, value};
use crate::util::{KILLED, Run, tempdir};

const NS_LABEL: &str = "namespace";

/// A MutatingWebhookConfiguration shaped like Envoy Gateway's topology injector (one entry).
pub(super) fn injector(name: &str, ns: &str) -> MutatingWebhookConfiguration {
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

/// `certgen check --output prometheus` as the admin in `ns`.
fn check(kubeconfig: &std::path::Path, ns: &str) -> Run {
    Run::of(crate::util::certgen().args([
        "check",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "-n",
        ns,
        "--output",
        "prometheus",
    ]))
}

fn target_status(text: &str, ns: &str, name: &str) -> String {
    let prefix = format!(
        "certgen_cabundle_target_status{{{NS_LABEL}=\"{ns}\",target_kind=\"MutatingWebhookConfiguration\",target=\"{name}\",secret=\"envoy-gateway\",status=\""
    );
    let on: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.ends_with(" 1"))
        .collect();
    assert_eq!(on.len(), 1, "{text}");
    on[0][prefix.len()..].split('"').next().unwrap().to_string()
}

/// Envoy Gateway's topology injector for namespace `ns`, deleted when the last value is
/// dropped: its name, the API it was created with.
async fn with_injector(
    c: &super::Cluster,
    ns: &str,
) -> (String, Api<MutatingWebhookConfiguration>, DeleteOnDrop) {
    let name = format!("envoy-gateway-topology-injector.{ns}");
    let webhooks = Api::<MutatingWebhookConfiguration>::all(c.client.clone());
    webhooks
        .create(&PostParams::default(), &injector(&name, ns))
        .await
        .unwrap();
    let cleanup = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&name);
    (name, webhooks, cleanup)
}

#[tokio::test]
async fn metrics_follow_runs_rotations_and_a_ca_bundle_target() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-metrics").await;
    let (name, webhooks, _cleanup) = with_injector(&c, &ns.name).await;

    // A first run: its textfile's request counts are its report's.
    let tmp = tempdir();
    let file = tmp.path().join("certgen.prom");
    let report = c
        .certgen(&ns.name)
        .quiet()
        .args(["--metrics-file", file.to_str().unwrap()])
        .run()
        .ok()
        .json();
    let text = std::fs::read_to_string(&file).unwrap();
    assert_valid_exposition(&text);
    let run = format!("{NS_LABEL}=\"{}\",profile=\"envoy-gateway\"", ns.name);
    for verb in [
        "get", "list", "watch", "create", "update", "patch", "delete", "review",
    ] {
        assert_eq!(
            value(
                &text,
                &format!("certgen_last_run_api_requests{{{run},verb=\"{verb}\"}}")
            ),
            report["apiRequests"][verb].as_f64().unwrap(),
            "{verb}: {report}"
        );
    }
    assert_eq!(
        value(&text, &format!("certgen_last_run_writes{{{run}}}")),
        report["writes"].as_f64().unwrap()
    );
    assert_eq!(target_status(&text, &ns.name, &name), "in_sync");

    // Drift behind certgen's back: check sees it, a run repairs it.
    webhooks
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([{"op": "replace",
                    "path": "/webhooks/0/clientConfig/caBundle", "value": "b2xk"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let r = check(&c.kubeconfig, &ns.name);
    assert_valid_exposition(&r.stdout);
    assert_eq!(target_status(&r.stdout, &ns.name, &name), "drifted");
    c.certgen(&ns.name).quiet().run().ok();
    let r = check(&c.kubeconfig, &ns.name);
    assert_eq!(target_status(&r.stdout, &ns.name, &name), "in_sync");

    // A staged rotation stopped after its trust step: the phase, from the API server's write
    // times.
    let before = time::OffsetDateTime::now_utc().unix_timestamp() as f64;
    let r = c
        .certgen(&ns.name)
        .quiet()
        .arg("--overwrite")
        .kill_after_write(4)
        .run();
    assert_eq!(r.code, KILLED, "{}", r.stderr);
    let r = check(&c.kubeconfig, &ns.name);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_valid_exposition(&r.stdout);
    let phase = format!("certgen_rotation_phase{{{run},phase=\"trust\"}}");
    assert_eq!(value(&r.stdout, &phase), 1.0);
    let started = value(
        &r.stdout,
        &format!("certgen_rotation_phase_start_timestamp_seconds{{{run},phase=\"trust\"}}"),
    );
    assert!(
        (before - 5.0..=before + 60.0).contains(&started),
        "{started} vs {before}"
    );
    // The rest of the rotation; then the target is gone.
    c.certgen(&ns.name).quiet().run().ok();
    let r = check(&c.kubeconfig, &ns.name);
    assert_eq!(
        value(
            &r.stdout,
            &format!("certgen_rotation_phase{{{run},phase=\"steady\"}}")
        ),
        1.0
    );
    webhooks
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let r = check(&c.kubeconfig, &ns.name);
    assert_eq!(target_status(&r.stdout, &ns.name, &name), "absent");
}

/// A run with `--events` and `--metrics-file` builds one client for the whole job and reads
/// what it left once: after the run's own requests, one read of the Secrets and the
/// injector's GET, shared by its Warning Events and its metrics, then the Events' POSTs. (Was:
/// three clients, and the Secrets read twice after the run.)
#[tokio::test]
async fn events_and_metrics_share_one_client_and_one_read_after_the_run() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-one-read").await;
    let _injector = with_injector(&c, &ns.name).await;
    let tmp = tempdir();
    let file = tmp.path().join("certgen.prom");
    let r = c
        .certgen(&ns.name)
        .args(["--events", "--metrics-file", file.to_str().unwrap()])
        .args(["-v", "--log-format", "json"])
        .run()
        .ok();
    let report = r.json();
    let events = report["events"].as_array().map_or(0, Vec::len) as u64;
    assert!(events > 0, "{}", r.stdout);
    let whole = r
        .stderr
        .lines()
        .filter(|l| l.contains("API requests of the whole job"))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .unwrap_or_else(|| panic!("no line of the whole job's requests:\n{}", r.stderr));
    let field = |k: &str| {
        whole
            .get(k)
            .or_else(|| whole["fields"].get(k))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| panic!("{k} in {whole}"))
    };
    assert_eq!(field("clients"), 1, "{whole}");
    let run = |k: &str| report["apiRequests"][k].as_u64().unwrap();
    // The Secrets read once (five GETs, or one LIST) and the injector once; the Events are
    // POSTs.
    let (lists, gets) = (field("list") - run("list"), field("get") - run("get"));
    assert!(
        (lists, gets) == (0, 5 + 1) || (lists, gets) == (1, 1),
        "after the run: {lists} LIST, {gets} GET\n{whole}\n{report}"
    );
    assert_eq!(
        field("requests") - run("total"),
        lists + gets + events,
        "{whole}\n{report}"
    );
}
