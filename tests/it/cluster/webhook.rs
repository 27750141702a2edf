//! The `caBundle` adapter (`certgen::k8s::WebhookStore`) on a real API server: absent is
//! data, a read returns every entry's bundle with uid and resourceVersion, a write reaches every
//! entry and nothing else, and a change or a delete-and-recreate between read and write is a
//! conflict, not an overwrite. And runs with a `caBundle` target: drift is repaired, and a
//! gate counts from the target's last write, across runs.

use certgen::config::WebhookKind;
use certgen::k8s::{ObservedWebhook, WebhookObserved, WebhookStore};
use certgen::outside::TargetFields;
use certgen::store::StoreError;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use std::time::{Duration, Instant};

use super::{Certgen, Cluster, DeleteOnDrop, TestNs, cluster};
use crate::util::Run;

const KIND: WebhookKind = WebhookKind::MutatingWebhookConfiguration;

/// A MutatingWebhookConfiguration shaped like Envoy Gateway's topology injector, with two
/// entries, one of which already has a bundle.
fn injector(name: &str, ns: &str) -> MutatingWebhookConfiguration {
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"certgen.dev/test": "true"}},
        "webhooks": [
            {
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
            },
            {
                "name": "second.webhook.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "clientConfig": {"caBundle": "b2xk", "service": {"name": "other", "namespace": ns}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["configmaps"]}],
                "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                    "operator": "In", "values": [ns]}]}
            }
        ]
    }))
    .unwrap()
}

/// Replaces the first entry's caBundle behind certgen's back (with "old"), and with
/// `reset_managed_fields` also clears managedFields (`[{}]`), so that the object carries no
/// time of the change.
async fn drift(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
    reset_managed_fields: bool,
) -> MutatingWebhookConfiguration {
    let mut ops = vec![
        json!({"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": "b2xk"}),
    ];
    if reset_managed_fields {
        ops.push(json!({"op": "replace", "path": "/metadata/managedFields", "value": [{}]}));
    }
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(json!(ops)).unwrap()),
    )
    .await
    .unwrap()
}

async fn read(store: &WebhookStore, name: &str) -> ObservedWebhook {
    match store.get(KIND, name).await.unwrap() {
        WebhookObserved::Present(w) => *w,
        WebhookObserved::Absent => panic!("{name} should exist"),
    }
}

#[tokio::test]
async fn read_write_conflict_and_recreate_on_a_real_api_server() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-webhook").await;
    let name = format!("envoy-gateway-topology-injector.{}", ns.name);
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.client.clone());
    let store = WebhookStore::new(c.client.clone());

    // Absent is data.
    assert!(matches!(
        store.get(KIND, &name).await.unwrap(),
        WebhookObserved::Absent
    ));

    let _cleanup = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&name);
    api.create(&PostParams::default(), &injector(&name, &ns.name))
        .await
        .unwrap();
    let first = read(&store, &name).await;
    assert_eq!(first.bundles, [Vec::new(), b"old".to_vec()]);
    assert!(!first.uid.is_empty() && !first.version.is_empty());

    // A write reaches every entry, and leaves everything else as it was.
    let bundle =
        b"-----BEGIN CERTIFICATE-----\nnot checked by the API server\n-----END CERTIFICATE-----\n";
    store
        .put_ca_bundle(&first, bundle, TargetFields::default())
        .await
        .unwrap();
    let after = read(&store, &name).await;
    assert_eq!(after.bundles, [bundle.to_vec(), bundle.to_vec()]);
    assert_eq!(after.uid, first.uid);
    let object = api.get(&name).await.unwrap();
    let hooks = object.webhooks.unwrap();
    assert_eq!(
        hooks[0]
            .client_config
            .service
            .as_ref()
            .unwrap()
            .path
            .as_deref(),
        Some("/inject-pod-topology")
    );
    assert_eq!(hooks[1].name, "second.webhook.example.com");
    assert_eq!(
        object.metadata.labels.unwrap()["certgen.dev/test"],
        "true",
        "labels survive"
    );

    // Writing from the stale read is a conflict, and changes nothing.
    let err = store
        .put_ca_bundle(&first, b"stale", TargetFields::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(read(&store, &name).await.bundles[0], bundle.to_vec());

    // Someone else changes it between our read and our write: conflict.
    let current = read(&store, &name).await;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"someone": "else"}}})),
    )
    .await
    .unwrap();
    let err = store
        .put_ca_bundle(&current, b"late", TargetFields::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");

    // Deleted: a write from the old read is a conflict (404), not a create.
    let current = read(&store, &name).await;
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    let err = store
        .put_ca_bundle(&current, b"gone", TargetFields::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert!(matches!(
        store.get(KIND, &name).await.unwrap(),
        WebhookObserved::Absent
    ));

    // Deleted and recreated under the same name: the old read's uid no longer matches.
    api.create(&PostParams::default(), &injector(&name, &ns.name))
        .await
        .unwrap();
    let err = store
        .put_ca_bundle(&current, b"recreated", TargetFields::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    let fresh = read(&store, &name).await;
    assert_ne!(fresh.uid, current.uid);
    assert_eq!(fresh.bundles, [Vec::new(), b"old".to_vec()], "untouched");
    // And a write from a fresh read succeeds.
    store
        .put_ca_bundle(&fresh, bundle, TargetFields::default())
        .await
        .unwrap();
    assert_eq!(read(&store, &name).await.bundles[1], bundle.to_vec());
}

#[tokio::test]
async fn a_forbidden_update_names_the_verb_and_resource() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-webhook-rbac").await;
    let name = format!("envoy-gateway-topology-injector.{}", ns.name);
    let _cleanup = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&name);
    Api::<MutatingWebhookConfiguration>::all(c.client.clone())
        .create(&PostParams::default(), &injector(&name, &ns.name))
        .await
        .unwrap();
    // Cluster-scoped reads need a ClusterRole; a namespaced Role grants nothing here.
    let kubeconfig = c
        .service_account_kubeconfig(&ns.name, "no-webhooks", vec![])
        .await;
    let store = WebhookStore::new(c.client_as(&kubeconfig).await);
    let err = store.get(KIND, &name).await.unwrap_err().to_string();
    assert!(
        err.contains("get mutatingwebhookconfigurations") && err.contains("403"),
        "{err}"
    );
}

/// A run with nothing else to do puts back a `caBundle` that drifted from its Secret's bundle
/// (someone edited the webhook, or a chart upgrade restored its own), writing no Secret; the
/// run after it writes nothing at all.
#[tokio::test]
async fn a_drifted_ca_bundle_is_repaired_by_an_otherwise_no_op_run() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-drift").await;
    let name = format!("envoy-gateway-topology-injector.{}", ns.name);
    let api = Api::<MutatingWebhookConfiguration>::all(c.client.clone());
    api.create(&PostParams::default(), &injector(&name, &ns.name))
        .await
        .unwrap();
    let _cleanup = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&name);
    let certgen = || c.certgen(&ns.name).quiet().run().ok().json();
    let bundles = |w: &MutatingWebhookConfiguration| -> Vec<Vec<u8>> {
        w.webhooks
            .iter()
            .flatten()
            .map(|h| h.client_config.ca_bundle.clone().unwrap_or_default().0)
            .collect()
    };

    certgen();
    let secret = c.secrets(&ns.name).get("envoy-gateway").await.unwrap();
    let bundle = secret.data.unwrap()["ca.crt"].0.clone();
    assert_eq!(
        bundles(&api.get(&name).await.unwrap()),
        vec![bundle.clone(); 2]
    );

    // Drift: the first entry's caBundle is replaced behind certgen's back.
    let drifted = drift(&api, &name, false).await;
    assert_eq!(bundles(&drifted)[0], b"old");
    let before = c.versions(&ns.name).await;

    let report = certgen();
    let entries = report["secrets"].as_array().unwrap();
    assert!(
        entries.iter().any(
            |e| e["action"] == "update-bundle" && e["secret"].as_str().unwrap().contains(&name)
        ),
        "{report}"
    );
    assert_eq!(
        c.versions(&ns.name).await,
        before,
        "no Secret written: {report}"
    );
    let repaired = api.get(&name).await.unwrap();
    assert_eq!(bundles(&repaired), vec![bundle.clone(); 2]);

    // In step now: the next run writes nothing, the webhook included.
    let report = certgen();
    assert_eq!(report["writes"], 0, "{report}");
    assert_eq!(
        api.get(&name).await.unwrap().metadata.resource_version,
        repaired.metadata.resource_version
    );
}

/// A staged rotation's trust step written with a `caBundle` target present, as the gate tests
/// start from: certgen installed, then `--overwrite` stopped at the gate (exit 3) at `t0`.
struct Trusted<'c> {
    c: &'c Cluster,
    ns: TestNs,
    name: String,
    api: Api<MutatingWebhookConfiguration>,
    _cleanup: DeleteOnDrop,
    delay: &'static str,
    /// The `envoy-gateway` leaf before the rotation.
    installed: Vec<u8>,
    t0: Instant,
}

impl<'c> Trusted<'c> {
    async fn new(c: &'c Cluster, prefix: &str, delay: &'static str) -> Self {
        let ns = c.namespace(prefix).await;
        let name = format!("envoy-gateway-topology-injector.{}", ns.name);
        let api = Api::<MutatingWebhookConfiguration>::all(c.client.clone());
        api.create(&PostParams::default(), &injector(&name, &ns.name))
            .await
            .unwrap();
        let _cleanup = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&name);
        let mut t = Self {
            c,
            ns,
            name,
            api,
            _cleanup,
            delay,
            installed: Vec::new(),
            t0: Instant::now(),
        };
        t.certgen().run().ok();
        t.installed = t.leaf().await;
        let r = t.certgen().arg("--overwrite").run();
        assert_eq!(
            r.code, 3,
            "trust written, the gate past --timeout: {}",
            r.stderr
        );
        t.t0 = Instant::now();
        assert_eq!(t.leaf().await, t.installed);
        t
    }

    /// certgen with this test's delay and a --timeout that ends a run at any gate (exit 3)
    /// instead of waiting.
    fn certgen(&self) -> Certgen {
        self.c
            .certgen(&self.ns.name)
            .quiet()
            .propagation_delay(self.delay)
            // The timer counting from caBundle writes is under test (pokes would prove an
            // empty namespace's pods at once).
            .args(["--timeout", "2s", "--no-poke"])
    }

    async fn leaf(&self) -> Vec<u8> {
        let s = self
            .c
            .secrets(&self.ns.name)
            .get("envoy-gateway")
            .await
            .unwrap();
        super::data(&s, "tls.crt")
    }

    async fn at(&self, ms: u64) {
        tokio::time::sleep_until((self.t0 + Duration::from_millis(ms)).into()).await;
    }

    async fn drift(&self, reset_managed_fields: bool) {
        drift(&self.api, &self.name, reset_managed_fields).await;
    }

    /// Whether the run's report says it wrote the target's caBundle.
    fn repaired(&self, r: &Run) -> bool {
        r.json()["secrets"].as_array().unwrap().iter().any(|e| {
            e["action"] == "update-bundle" && e["secret"].as_str().unwrap().contains(&self.name)
        })
    }
}

/// The API server must have loaded a bundle written to a `caBundle` target before the leaves
/// only that bundle trusts are served. When an earlier run repaired the target's drift after
/// the Secrets' trust write, the gate to the leaves counts from that repair, in the next run
/// too, although that run writes nothing to the target.
#[tokio::test]
async fn a_gate_counts_from_the_last_ca_bundle_write_across_runs() {
    let Some(c) = cluster().await else { return };
    let t = Trusted::new(&c, "certgen-gate-webhook", "10s").await;

    // At T0 + 5 s the caBundle drifts, and a run repairs it: the gate now counts from T1.
    t.at(5_000).await;
    t.drift(false).await;
    let r = t.certgen().run();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(t.repaired(&r), "the run repairs the caBundle: {}", r.stdout);

    // T0 + 13.5 s: past the Secrets' gate (T0 + 10 s, + 1 s for the server's truncated
    // times), not past the caBundle's (T1 + 10 s = T0 + 15 s). This run writes nothing to the
    // target, and must still wait for it.
    t.at(13_500).await;
    // A dry run says so too: nothing to write, the leaves wait.
    let report = t.certgen().arg("--dry-run").run().ok().json();
    let entries = report["secrets"].as_array().unwrap();
    assert!(entries.iter().all(|e| e["action"] == "keep"), "{report}");
    assert!(
        entries[0]["reason"]
            .as_str()
            .unwrap()
            .contains("leaves wait until consumers have loaded it"),
        "{report}"
    );
    let r = t.certgen().run();
    assert_eq!(
        r.code, 3,
        "the leaves must wait for the caBundle written at T0 + 5 s: {}\n{}",
        r.stdout, r.stderr
    );
    assert_eq!(
        t.leaf().await,
        t.installed,
        "no leaf before the caBundle's gate"
    );

    // T0 + 17.5 s: both gates are past; the leaves are written.
    t.at(17_500).await;
    t.certgen().run().ok();
    assert_ne!(
        t.leaf().await,
        t.installed,
        "the leaves once the gate is open"
    );
}

/// A `caBundle` target that drifted while the leaves were due is repaired before any leaf is
/// written, and the leaves wait a whole gate after the repair: the API server must have the
/// bundle that trusts the new CA before the webhook's serving certificate comes from it.
#[tokio::test]
async fn a_drifted_ca_bundle_is_repaired_before_any_leaf() {
    let Some(c) = cluster().await else { return };
    let t = Trusted::new(&c, "certgen-drift-leaves", "6s").await;

    // T0 + 8 s: the Secrets' gate (T0 + 7 s at most) is past, and the caBundle drifts. The
    // writer also resets managedFields, so the object carries no time of this change: only
    // comparing the target with its Secret shows that it must be repaired, and the gate then
    // counts from the repair.
    t.at(8_000).await;
    t.drift(true).await;
    let r = t.certgen().run();
    assert_eq!(
        r.code, 3,
        "repaired, then a gate from the repair: {}\n{}",
        r.stdout, r.stderr
    );
    assert!(t.repaired(&r), "{}", r.stdout);
    assert_eq!(
        t.leaf().await,
        t.installed,
        "no leaf before the repair's gate"
    );

    // A gate after the repair, the leaves.
    t.at(15_500).await;
    t.certgen().run().ok();
    assert_ne!(t.leaf().await, t.installed);
}

/// A dry run names every outside action its first step would take: each planned `caBundle`
/// write (the target, the CAs it will hold by fingerprint, the step) beside the Secret writes,
/// and each restart; the real run's report lists the writes it made the same way.
#[tokio::test]
async fn a_dry_run_lists_each_planned_ca_bundle_write_and_restart() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-dry-plan").await;
    let name = format!("envoy-gateway-topology-injector.{}", ns.name);
    let api = Api::<MutatingWebhookConfiguration>::all(c.client.clone());
    api.create(&PostParams::default(), &injector(&name, &ns.name))
        .await
        .unwrap();
    let _cleanup = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&name);
    c.create_deployment(
        &ns.name,
        &super::deployment("envoy-ratelimit", 1, json!({})),
    )
    .await;
    let certgen = || c.certgen(&ns.name).quiet().args(["--no-poke"]);
    let target = |report: &serde_json::Value| -> serde_json::Value {
        report["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "webhook")
            .cloned()
            .unwrap_or_else(|| panic!("no caBundle target line: {report}"))
    };

    // A fresh install's dry run: the target will hold the CA the run generates.
    let report = certgen().arg("--dry-run").run().ok().json();
    let planned = target(&report);
    assert_eq!(planned["action"], "update-bundle", "{report}");
    assert_eq!(planned["cas"], json!(["new"]), "{report}");
    assert_eq!(report["writes"], 0, "{report}");
    certgen().run().ok();
    let ca = c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap();
    let ca = certgen::pki::parse_single_cert(&super::data(&ca, "tls.crt")).unwrap();
    let version = api.get(&name).await.unwrap().metadata.resource_version;

    // A staged rotation's dry run: the trust step's caBundle holds [new, current], and the
    // restart-only consumer would restart; nothing is written.
    let dry = certgen().args(["--dry-run", "--overwrite"]).run().ok();
    let report = dry.json();
    let planned = target(&report);
    assert_eq!(planned["action"], "update-bundle", "{report}");
    assert_eq!(planned["step"], "trust", "{report}");
    assert_eq!(
        planned["cas"],
        json!(["new", ca.short_fingerprint()]),
        "{report}"
    );
    let restart = &report["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "envoy-ratelimit")
        .unwrap()["deployments"][0];
    assert_eq!(restart["action"], "would-restart", "{report}");
    assert_eq!(
        api.get(&name).await.unwrap().metadata.resource_version,
        version,
        "a dry run writes no caBundle"
    );
    let text = Run::of(
        crate::util::certgen()
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args([
                "-n",
                &ns.name,
                "-q",
                "--no-poke",
                "--dry-run",
                "--overwrite",
            ]),
    )
    .ok()
    .stdout;
    crate::snapshots::cluster_settings(&ns.name).bind(|| {
        insta::assert_snapshot!("run_dry_run_overwrite_cluster_text", text);
    });

    // The run writes what the dry run listed: its first caBundle write holds the same CAs,
    // the new one now known.
    let r = certgen()
        .args(["--overwrite", "--timeout", "2s"])
        .propagation_delay("1h")
        .run();
    assert_eq!(r.code, 3, "stopped at the gate: {}", r.stderr);
    let report = r.json();
    let written = target(&report);
    assert_eq!(written["action"], "update-bundle", "{report}");
    assert_eq!(written["step"], "trust", "{report}");
    let cas = written["cas"].as_array().unwrap();
    assert_eq!(cas.len(), 2, "{report}");
    assert_ne!(cas[0], "new", "{report}");
    assert_eq!(cas[1], ca.short_fingerprint().as_str(), "{report}");
}

/// Envoy Gateway installed through Kustomize (envoyproxy/gateway#8354): a `namePrefix`
/// renames the topology injector, keeping its label. A run that does not find
/// `envoy-gateway-topology-injector.<namespace>` keeps the caBundle of the one labelled
/// `app.kubernetes.io/component=topology-injector` whose webhook's Service is in its
/// namespace, names it in the report, and leaves an injector of another namespace alone;
/// `--topology-injector` names it explicitly; two candidates are an error naming both. `check`
/// and the exporter find it as the run does (in step; with two candidates, `check` stops with
/// the run's error and the exporter says `ambiguous`, not healthy).
#[tokio::test]
async fn the_topology_injector_is_found_by_its_label_when_kustomize_renamed_it() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-kustomize").await;
    let other = c.namespace("certgen-kustomize-other").await;
    let api = Api::<MutatingWebhookConfiguration>::all(c.client.clone());
    let labelled = |name: &str, service_ns: &str| {
        let mut w = injector(name, service_ns);
        w.metadata.labels.get_or_insert_default().insert(
            "app.kubernetes.io/component".into(),
            "topology-injector".into(),
        );
        w
    };
    let renamed = format!("eg-envoy-gateway-topology-injector.{}", ns.name);
    let foreign = format!("eg-envoy-gateway-topology-injector.{}", other.name);
    let mut cleanup = Vec::new();
    for (name, service_ns) in [(&renamed, &ns.name), (&foreign, &other.name)] {
        api.create(&PostParams::default(), &labelled(name, service_ns))
            .await
            .unwrap();
        cleanup.push(DeleteOnDrop::new::<MutatingWebhookConfiguration>(name));
    }
    let first_bundle = |w: &MutatingWebhookConfiguration| {
        w.webhooks.as_ref().unwrap()[0]
            .client_config
            .ca_bundle
            .clone()
    };

    let run = c.certgen(&ns.name).args(["-v"]).run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    let secret = c.secrets(&ns.name).get("envoy-gateway").await.unwrap();
    let bundle = secret.data.unwrap()["ca.crt"].clone();
    assert_eq!(
        first_bundle(&api.get(&renamed).await.unwrap()),
        Some(bundle)
    );
    assert!(
        report["secrets"]
            .to_string()
            .contains(&format!("MutatingWebhookConfiguration {renamed}")),
        "the report names the object used: {report}"
    );
    assert!(
        run.stderr
            .contains(&format!("using MutatingWebhookConfiguration {renamed}")),
        "{}",
        run.stderr
    );
    assert_eq!(
        first_bundle(&api.get(&foreign).await.unwrap()),
        None,
        "another namespace's injector is left alone"
    );

    // What operators read agrees: check, and the exporter's watches.
    let target = |status: &str| {
        format!(
            "certgen_cabundle_target_status{{namespace=\"{ns}\",target_kind=\"MutatingWebhookConfiguration\",target=\"envoy-gateway-topology-injector.{ns}\",secret=\"envoy-gateway\",status=\"{status}\"}} 1",
            ns = ns.name
        )
    };
    let healthy = |v: u8| {
        format!(
            "certgen_check_healthy{{namespace=\"{}\",profile=\"envoy-gateway\"}} {v}",
            ns.name
        )
    };
    let check = || {
        crate::util::Run::of(crate::util::certgen().args([
            "check",
            "--kubeconfig",
            c.kubeconfig.to_str().unwrap(),
            "-n",
            &ns.name,
            "--output",
            "prometheus",
        ]))
    };
    let checked = check();
    assert_eq!(checked.code, 0, "{}{}", checked.stdout, checked.stderr);
    assert!(
        checked.stdout.contains(&target("in_sync")),
        "{}",
        checked.stdout
    );
    let exporter = super::exporter::Exporter::start_with(&c.kubeconfig, &ns.name, &[], &[]);
    exporter.metrics_until("the renamed injector in step", |t| {
        t.contains(&target("in_sync")) && t.contains(&healthy(1))
    });

    // Named explicitly: that object, no search.
    let dry = c
        .certgen(&ns.name)
        .args(["--overwrite", "--dry-run", "--topology-injector", &renamed])
        .run();
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.json()["secrets"].to_string().contains(&renamed),
        "{}",
        dry.stdout
    );
    let bad = c
        .certgen(&ns.name)
        .args(["--topology-injector", "Not_A_Name"])
        .run();
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--topology-injector"), "{}", bad.stderr);

    // Two candidates in the namespace: which one is meant cannot be told.
    let second = format!("second-topology-injector.{}", ns.name);
    api.create(&PostParams::default(), &labelled(&second, &ns.name))
        .await
        .unwrap();
    cleanup.push(DeleteOnDrop::new::<MutatingWebhookConfiguration>(&second));
    let ambiguous = c.certgen(&ns.name).run();
    assert_ne!(ambiguous.code, 0);
    let all = format!("{}{}", ambiguous.stdout, ambiguous.stderr);
    assert!(
        all.contains(&renamed) && all.contains(&second) && all.contains("--topology-injector"),
        "{all}"
    );
    let checked = check();
    assert_ne!(checked.code, 0, "{}", checked.stdout);
    assert!(
        checked.stderr.contains(&second) && checked.stderr.contains("--topology-injector"),
        "{}",
        checked.stderr
    );
    exporter.metrics_until("two candidates: ambiguous, not healthy", |t| {
        t.contains(&target("ambiguous")) && t.contains(&healthy(0))
    });
    exporter.stop();
}
