//! Events (`events.k8s.io/v1`) on the real control plane: a staged rotation's Events read back
//! with the API in order (reasons and objects), a series continued across runs instead of a
//! new Event per run, and an identity without the verbs: a warning and a `skipped` line, never
//! a failed run.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;

use super::{cluster, deployment, rolled_out, rule};
use crate::util::KEY_MARKERS;

/// The Events certgen recorded in `ns`, oldest first: (reason, kind, name, series count).
async fn events(api: &Api<Event>) -> Vec<(String, String, String, i32, Event)> {
    let mut list: Vec<Event> = api
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=certgen"))
        .await
        .unwrap()
        .items;
    list.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    list.into_iter()
        .map(|e| {
            let r = e.regarding.clone().unwrap();
            (
                e.reason.clone().unwrap(),
                r.kind.unwrap(),
                r.name.unwrap(),
                e.series.as_ref().map_or(1, |s| s.count),
                e,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_staged_rotation_records_its_events_in_order_and_continues_series_across_runs() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-events").await;
    let deployments = c
        .create_deployment(&ns.name, &deployment("envoy-ratelimit", 1, json!({})))
        .await;
    rolled_out(&deployments, "envoy-ratelimit", Duration::from_secs(120)).await;
    let api: Api<Event> = Api::namespaced(c.client.clone(), &ns.name);

    // A fresh install: one Created per Secret.
    let report = c
        .certgen(&ns.name)
        .quiet()
        .args(["--events", "--wait", "--timeout", "120s"])
        .run_async()
        .await
        .ok()
        .json();
    let lines = report["events"].as_array().unwrap();
    assert!(lines.iter().all(|l| l["outcome"] == "recorded"), "{report}");
    let created: Vec<(String, String)> = events(&api)
        .await
        .into_iter()
        .filter(|e| e.0 == "Created")
        .map(|e| (e.2, e.4.note.unwrap_or_default()))
        .collect();
    assert_eq!(created.len(), 5, "{created:?}");
    // Each note says what was created and why, not the bare word "missing".
    for (name, note) in &created {
        assert!(
            note.ends_with(": the Secret did not exist"),
            "{name}: {note}"
        );
        let what = match name.as_str() {
            "envoy-gateway-ca" => "created the CA keypair (CA ",
            "envoy-oidc-hmac" => "created a new random HMAC key",
            _ => "created a certificate and key signed by CA ",
        };
        assert!(note.starts_with(what), "{name}: {note}");
    }

    // A staged rotation: its Events in order, on the objects concerned.
    let before: Vec<String> = events(&api)
        .await
        .into_iter()
        .map(|e| e.4.metadata.name.unwrap())
        .collect();
    let report = c
        .certgen(&ns.name)
        .quiet()
        .args(["--events", "--overwrite", "--wait", "--timeout", "120s"])
        .run_async()
        .await
        .ok()
        .json();
    assert!(report["skipped"].is_null(), "{report}");
    let rotation: Vec<(String, String, String, i32)> = events(&api)
        .await
        .into_iter()
        .filter(|e| !before.contains(e.4.metadata.name.as_ref().unwrap()) || e.0 == "Restarted")
        .map(|e| (e.0, e.1, e.2, e.3))
        .collect();
    let reasons: Vec<&str> = rotation.iter().map(|e| e.0.as_str()).collect();
    // Phase by phase: trust (CA Secret, then each bundle), leaves (promotion, then each leaf),
    // cleanup (each bundle); the ratelimit Deployment restarted after each phase, one Event
    // whose series counts the restarts.
    let first = |r: &str| {
        reasons
            .iter()
            .position(|x| *x == r)
            .unwrap_or_else(|| panic!("no {r}: {rotation:?}"))
    };
    let last = |r: &str| reasons.iter().rposition(|x| *x == r).unwrap();
    assert!(last("TrustAdded") < first("CAPromoted"), "{rotation:?}");
    assert!(first("CAPromoted") < first("LeavesRotated"), "{rotation:?}");
    assert!(
        last("LeavesRotated") < first("TrustCleanedUp"),
        "{rotation:?}"
    );
    let on = |reason: &str| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = rotation
            .iter()
            .filter(|e| e.0 == reason)
            .map(|e| (e.1.clone(), e.2.clone()))
            .collect();
        v.sort();
        v
    };
    let secret = |n: &str| ("Secret".to_string(), n.to_string());
    assert_eq!(
        on("TrustAdded"),
        [
            secret("envoy"),
            secret("envoy-gateway"),
            secret("envoy-gateway-ca"),
            secret("envoy-rate-limit")
        ]
    );
    assert_eq!(on("CAPromoted"), [secret("envoy-gateway-ca")]);
    assert_eq!(
        on("LeavesRotated"),
        [
            secret("envoy"),
            secret("envoy-gateway"),
            secret("envoy-rate-limit")
        ]
    );
    assert!(
        on("TrustCleanedUp").contains(&secret("envoy-rate-limit")),
        "{rotation:?}"
    );
    let restarted: Vec<_> = rotation.iter().filter(|e| e.0 == "Restarted").collect();
    assert_eq!(restarted.len(), 1, "one Event, a series: {rotation:?}");
    assert_eq!(
        (restarted[0].1.as_str(), restarted[0].2.as_str()),
        ("Deployment", "envoy-ratelimit")
    );
    // Restarted at install, then after trust, leaves and cleanup.
    assert!(restarted[0].3 >= 3, "{rotation:?}");

    // Another rotation continues the series of the Events it repeats (same object, reason and
    // note: the restart, each leaf's renewal) instead of adding one per run; those naming the
    // new CA's fingerprint are new Events.
    let again = c
        .certgen(&ns.name)
        .quiet()
        .args(["--events", "--overwrite", "--wait", "--timeout", "120s"])
        .run_async()
        .await
        .ok()
        .json();
    assert!(
        again["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["outcome"] == "recorded"),
        "{again}"
    );
    let after = events(&api).await;
    let of = |reason: &str, name: &str| -> Vec<i32> {
        after
            .iter()
            .filter(|e| e.0 == reason && e.2 == name)
            .map(|e| e.3)
            .collect()
    };
    assert_eq!(
        of("LeavesRotated", "envoy"),
        [2],
        "{:?}",
        after.iter().map(|e| (&e.0, &e.2, e.3)).collect::<Vec<_>>()
    );
    let restarts = of("Restarted", "envoy-ratelimit");
    assert_eq!(restarts.len(), 1);
    assert!(restarts[0] > restarted[0].3, "{restarts:?}");
    assert_eq!(of("CAPromoted", "envoy-gateway-ca").len(), 2);
    for e in &after {
        let text = serde_json::to_string(&e.4).unwrap();
        for marker in KEY_MARKERS {
            assert!(!text.contains(marker), "key material in an Event: {text}");
        }
        assert!(!text.contains("BEGIN"), "{text}");
    }
}

#[tokio::test]
async fn a_refused_event_is_a_warning_and_a_skipped_line_not_a_failed_run() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-noevents").await;
    // Everything certgen needs, but no verb on events.
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "certgen",
            vec![
                rule(&[""], &["secrets"], &["get", "create", "patch"]),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["get", "create", "update", "delete"],
                ),
                rule(&["apps"], &["deployments"], &["get", "list", "patch"]),
            ],
        )
        .await;
    let r = super::Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .args(["--events", "--disable-topology-injector"])
        .run()
        .ok();
    let report = r.json();
    assert_eq!(report["writes"], 5, "{report}");
    let skipped = report["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s.as_str().unwrap().contains("events.events.k8s.io")),
        "{report}"
    );
    let lines = report["events"].as_array().unwrap();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l["outcome"] == "refused"),
        "{report}"
    );
    assert_eq!(
        r.stderr.matches("Events not recorded").count(),
        1,
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn a_dry_run_shows_the_events_it_would_record_and_records_none() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-events-dry").await;
    c.certgen(&ns.name).quiet().run().ok();
    let report = c
        .certgen(&ns.name)
        .quiet()
        .args(["--events", "--overwrite", "--dry-run"])
        .run()
        .ok()
        .json();
    let lines = report["events"].as_array().unwrap();
    assert!(!lines.is_empty(), "{report}");
    assert!(
        lines
            .iter()
            .all(|l| l["outcome"] == "planned" && l["reason"] == "TrustAdded"),
        "{report}"
    );
    let api: Api<Event> = Api::namespaced(c.client.clone(), &ns.name);
    assert!(events(&api).await.is_empty());
    // Without --events the report carries none.
    let report = c
        .certgen(&ns.name)
        .quiet()
        .arg("--dry-run")
        .run()
        .ok()
        .json();
    assert!(report["events"].is_null(), "{report}");
}

/// The Events certgen recorded in `default` about the cluster-scoped object `name`, oldest
/// first: (reason, kind, apiVersion, note, regarding namespace).
async fn cluster_events(
    c: &super::Cluster,
    name: &str,
) -> Vec<(String, String, String, String, Option<String>)> {
    let api: Api<Event> = Api::namespaced(c.client.clone(), "default");
    events(&api)
        .await
        .into_iter()
        .filter(|e| e.2 == name)
        .map(|e| {
            let r = e.4.regarding.clone().unwrap();
            (
                e.0,
                e.1,
                r.api_version.unwrap_or_default(),
                e.4.note.clone().unwrap_or_default(),
                r.namespace,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_topology_injectors_bundle_moves_are_events_in_default_under_the_charts_identity() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use kube::api::{DeleteParams, PostParams};

    use super::chart::{documents, template};
    use super::{DeleteOnDrop, helm};

    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("certgen-events-hook").await;
    let injector_name = format!("envoy-gateway-topology-injector.{}", ns.name);
    Api::<MutatingWebhookConfiguration>::all(c.client.clone())
        .create(
            &PostParams::default(),
            &super::metrics::injector(&injector_name, &ns.name),
        )
        .await
        .unwrap();
    let _injector = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&injector_name);

    // The hook's identity exactly as the chart renders it (the Role in default included),
    // checked by the API server's RBAC.
    let identity: Vec<serde_json::Value> = documents(&template(&helm, &ns.name, &[]))
        .into_iter()
        .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == "hook")
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some(
                    "ServiceAccount"
                        | "Role"
                        | "RoleBinding"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                )
            )
        })
        .collect();
    let name_of = |kind: &str, namespace: Option<&str>| -> String {
        identity
            .iter()
            .find(|d| {
                d["kind"] == kind && namespace.is_none_or(|n| d["metadata"]["namespace"] == n)
            })
            .unwrap_or_else(|| panic!("no {kind} rendered"))["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cluster_role = name_of("ClusterRole", None);
    let _cr = DeleteOnDrop::new::<ClusterRole>(&cluster_role);
    let _crb = DeleteOnDrop::new::<ClusterRoleBinding>(&cluster_role);
    let events_role = name_of("Role", Some("default"));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": identity}).to_string();
    let (ok, out) = c.kubectl_stdin(&["create"], &list);
    assert!(ok, "{out}");
    let sa = name_of("ServiceAccount", None);
    let kubeconfig = c.token_kubeconfig(&ns.name, &sa).await;
    let as_chart = || {
        super::Certgen::new(&kubeconfig)
            .namespace(&ns.name)
            .quiet()
            .args(["--events", "--timeout", "120s"])
    };

    // Install, then a staged rotation: the injector's caBundle takes the new CA beside the old
    // (TrustAdded), then loses the old (TrustCleanedUp), each an Event about the injector in
    // default, on the cluster-scoped object (no namespace in `regarding`).
    let install = as_chart().run_async().await.ok().json();
    assert!(install["skipped"].is_null(), "{install}");
    let report = as_chart().arg("--overwrite").run_async().await.ok().json();
    assert!(report["skipped"].is_null(), "{report}");
    let lines = report["events"].as_array().unwrap();
    assert!(lines.iter().all(|l| l["outcome"] == "recorded"), "{report}");
    let seen = cluster_events(&c, &injector_name).await;
    let reasons: Vec<&str> = seen.iter().map(|e| e.0.as_str()).collect();
    let trust = reasons.iter().position(|r| *r == "TrustAdded");
    let cleanup = reasons.iter().rposition(|r| *r == "TrustCleanedUp");
    assert!(
        matches!((trust, cleanup), (Some(t), Some(u)) if t < u),
        "{seen:?}\n{report}"
    );
    for (_, kind, api_version, note, namespace) in &seen {
        assert_eq!(kind, "MutatingWebhookConfiguration");
        assert_eq!(api_version, "admissionregistration.k8s.io/v1");
        assert_eq!(*namespace, None, "a cluster-scoped object");
        assert!(note.contains(&ns.name), "names the run's namespace: {note}");
        for marker in KEY_MARKERS {
            assert!(!note.contains(marker), "{note}");
        }
    }
    // In the run's namespace too, as before: the Secrets' Events.
    let api: Api<Event> = Api::namespaced(c.client.clone(), &ns.name);
    assert!(
        events(&api)
            .await
            .iter()
            .any(|e| e.0 == "TrustAdded" && e.1 == "Secret"),
        "the Secrets' Events are recorded beside"
    );

    // Without the Role in default: those Events are refused (one warning, one skipped line
    // naming default); the Secrets' Events in the run's namespace are still recorded.
    let _ = Api::<RoleBinding>::namespaced(c.client.clone(), "default")
        .delete(&events_role, &DeleteParams::default())
        .await;
    let _ = Api::<Role>::namespaced(c.client.clone(), "default")
        .delete(&events_role, &DeleteParams::default())
        .await;
    let r = as_chart().arg("--overwrite").run_async().await.ok();
    let report = r.json();
    let lines = report["events"].as_array().unwrap();
    let outcome = |kind: &str| -> Vec<&str> {
        lines
            .iter()
            .filter(|l| l["kind"] == kind)
            .map(|l| l["outcome"].as_str().unwrap())
            .collect()
    };
    let hook = outcome("MutatingWebhookConfiguration");
    assert!(
        !hook.is_empty() && hook.iter().all(|o| *o == "refused"),
        "{report}"
    );
    let secrets = outcome("Secret");
    assert!(
        !secrets.is_empty() && secrets.iter().all(|o| *o == "recorded"),
        "{report}"
    );
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(skipped.len(), 1, "{report}");
    assert!(
        skipped[0].contains("events.events.k8s.io in default"),
        "{skipped:?}"
    );
    assert_eq!(
        r.stderr.matches("Events not recorded").count(),
        1,
        "{}",
        r.stderr
    );
}
