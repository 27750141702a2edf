//! certgen as a drop-in for Envoy Gateway's certgen, on the real control plane, under Envoy
//! Gateway's own chart RBAC.
//!
//! Envoy Gateway's chart (gateway-helm v1.9.1, rendered by `tests/testenv/eg-chart` from its Go
//! module with the test helm) installs the certgen ServiceAccount, a Role granting only
//! `get/create/update` on Secrets, a ClusterRole for the topology injector webhook, and the
//! webhook itself. With that ServiceAccount's token, the chart Job's command
//! (`envoy-gateway certgen`, certgen linked as `envoy-gateway`) and the environment it sets
//! (`ENVOY_GATEWAY_NAMESPACE`, `KUBERNETES_CLUSTER_DOMAIN`), certgen adopts Secrets written the
//! way Envoy Gateway's certgen writes them, then rotates them (`--overwrite`, staged): no 403
//! kills the run, every Secret snapshot taken while it runs is pairwise consistent, the end
//! state trusts both CAs, Envoy Gateway's label is kept, and the report says what was skipped
//! (restarts, probes, the run lock) and why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};

use super::{Certgen, Cluster, cluster, data, rule};
use crate::util::trust::{
    CA_SECRET, LEAF_SECRETS, Snapshot, check_snapshot, fingerprints, webpki_trusts,
};
use crate::util::{Run, command, envoy_gateway, root};

/// The ServiceAccount of Envoy Gateway's certgen Job for release `eg`.
const EG_SERVICE_ACCOUNT: &str = "eg-gateway-helm-certgen";

/// Envoy Gateway's chart objects for `ns`, or `None` (with a note) when they cannot be
/// rendered outside CI.
fn eg_chart(ns: &str) -> Option<String> {
    let out = Command::new(root().join("tests/testenv/eg-chart"))
        .arg(ns)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    if !out.status.success() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tests/testenv/eg-chart failed under CI"
        );
        eprintln!(
            "note: tests/testenv/eg-chart failed; skipping the Envoy Gateway compatibility test"
        );
        return None;
    }
    Some(String::from_utf8(out.stdout).unwrap())
}

/// Deletes the chart's objects (the cluster-scoped ones outlive the test namespace).
struct Uninstall<'a>(&'a Cluster, String);

impl Drop for Uninstall<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .kubectl_stdin(&["delete", "--ignore-not-found", "--wait=false"], &self.1);
    }
}

/// Creates the Secrets as Envoy Gateway's certgen writes them (RSA-2048, one CA whose key is
/// in no Secret, 5-year certificates, label `control-plane: envoy-gateway`, the rate limiter
/// with its own leaf) and returns the CA certificate (PEM).
async fn envoy_gateway_secrets(c: &Cluster, ns: &str) -> Vec<u8> {
    let eg = envoy_gateway::generate(&envoy_gateway::Options {
        namespace: ns,
        days: 1825,
        ekus: true,
        rate_limit_own_leaf: true,
    });
    let labels = BTreeMap::from([("control-plane".to_string(), "envoy-gateway".to_string())]);
    let api = c.secrets(ns);
    for (name, data) in eg.secrets {
        let tls = LEAF_SECRETS.contains(&name);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels.clone()),
                ..Default::default()
            },
            type_: Some(if tls { "kubernetes.io/tls" } else { "Opaque" }.into()),
            data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &secret).await.unwrap();
    }
    eg.ca
}

/// A TLS Secret's bundle (`ca.crt`) and leaf (`tls.crt`) in a snapshot.
fn bundle_and_leaf<'a>(snap: &'a Snapshot, name: &str) -> (&'a [u8], &'a [u8]) {
    (&snap[name]["ca.crt"], &snap[name]["tls.crt"])
}

/// The topology injector's caBundle, as a list of CA fingerprints per webhook entry.
async fn injector_bundles(c: &Cluster, name: &str) -> Vec<Vec<u8>> {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    Api::<MutatingWebhookConfiguration>::all(c.client.clone())
        .get(name)
        .await
        .unwrap()
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
        .collect()
}

/// Runs certgen as Envoy Gateway's chart Job does: `envoy-gateway certgen [args]`, its
/// ServiceAccount, its environment, no -n.
fn eg_job(kubeconfig: &Path, ns: &str, args: &[&str]) -> Command {
    static LINK: OnceLock<PathBuf> = OnceLock::new();
    let link = LINK.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("certgen-eg-{}", std::process::id()));
        envoy_gateway::link_in(&dir)
    });
    let mut cmd = command(link);
    cmd.arg("certgen")
        .env("KUBECONFIG", kubeconfig)
        .env("ENVOY_GATEWAY_NAMESPACE", ns)
        .env("KUBERNETES_CLUSTER_DOMAIN", "cluster.local")
        .args(["--output", "json"])
        .args(args);
    cmd
}

/// `certgen --overwrite` as Envoy Gateway's Job, with Secret snapshots checked pairwise every
/// 100 ms while it runs. Returns the run and the number of snapshots.
async fn rotate_sampled(c: &Cluster, ns: &str, kubeconfig: &Path, injector: &str) -> (Run, usize) {
    let mut child = eg_job(
        kubeconfig,
        ns,
        &["--overwrite", "--propagation-delay", "2s", "-v"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let started = std::time::Instant::now();
    let mut samples = 0;
    let mut failures = Vec::new();
    while child.try_wait().unwrap().is_none() {
        let snap = c.snapshot(ns).await;
        failures.extend(check_snapshot(&snap).0);
        // The injector's caBundle is a trust bundle like a Secret's: at every sample it trusts
        // the serving certificate (envoy-gateway's tls.crt).
        let serving = &snap["envoy-gateway"]["tls.crt"];
        for bundle in injector_bundles(c, injector).await {
            if !webpki_trusts(&bundle, serving) {
                failures.push(
                    "the injector's caBundle does not trust envoy-gateway's serving leaf".into(),
                );
            }
            if fingerprints(&bundle).len() > 2 {
                failures.push("the injector's caBundle holds more than two CAs".into());
            }
        }
        samples += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let run = Run::from(child.wait_with_output().unwrap()).ok();
    // For docs/migrating-from-envoy-gateway.md: how long a rotation takes under Envoy Gateway's Role.
    eprintln!(
        "eg_compat: --overwrite took {:.1} s ({samples} samples), apiRequests {}",
        started.elapsed().as_secs_f64(),
        run.json()["apiRequests"]
    );
    assert!(
        failures.is_empty(),
        "pairwise trust broken during the rotation ({samples} samples): {failures:?}\n{}",
        run.stderr
    );
    (run, samples)
}

#[tokio::test]
async fn certgen_runs_under_envoy_gateways_chart_rbac_and_rotates_staged() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-egcompat").await;
    let Some(chart) = eg_chart(&ns.name) else {
        return;
    };
    let (ok, text) = c.kubectl_stdin(&["apply", "--server-side"], &chart);
    assert!(ok, "applying Envoy Gateway's chart objects: {text}");
    let _uninstall = Uninstall(&c, chart.clone());
    let injector = format!("envoy-gateway-topology-injector.{}", ns.name);

    // Envoy Gateway's certgen ran before: its Secrets, and its CA in the webhook's caBundle.
    let eg_ca = envoy_gateway_secrets(&c, &ns.name).await;
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let hooks = Api::<MutatingWebhookConfiguration>::all(c.client.clone());
    let mut wh = hooks.get(&injector).await.unwrap();
    for w in wh.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(ByteString(eg_ca.clone()));
    }
    hooks
        .replace(&injector, &PostParams::default(), &wh)
        .await
        .unwrap();
    let eg_fp = fingerprints(&eg_ca);

    let kubeconfig = c.token_kubeconfig(&ns.name, EG_SERVICE_ACCOUNT).await;

    // The chart's hook runs `certgen` with no arguments: Envoy Gateway's valid Secrets are kept.
    let first = Run::of(&mut eg_job(&kubeconfig, &ns.name, &[])).ok();
    let report = first.json();
    eprintln!("eg_compat: hook run: apiRequests {}", report["apiRequests"]);
    assert_eq!(report["writes"], 0, "{report}");
    let skipped = report["skipped"].to_string();
    // No --wait or --probe: no rules review; the refused Deployment read says what is missing.
    assert!(
        skipped.contains("envoy-ratelimit") && skipped.contains("get deployments.apps"),
        "the report says the restart is skipped and why: {report}"
    );
    assert_eq!(report["apiRequests"]["review"], 0, "{report}");
    assert!(!first.stderr.contains("error"), "{}", first.stderr);

    // The first rotation adopts Envoy Gateway's Secrets: sampled while it runs.
    let (rotation, _) = rotate_sampled(&c, &ns.name, &kubeconfig, &injector).await;
    let report = rotation.json();
    assert!(report["writes"].as_u64().unwrap() >= 4, "{report}");
    let skipped = report["skipped"].to_string();
    assert!(
        skipped.contains("run lock") && skipped.contains("leases.coordination.k8s.io"),
        "the report says the run lock was skipped and why: {report}"
    );
    assert!(
        report["nextRenewal"]["due"].is_string(),
        "the report says when certgen must run again: {report}"
    );

    // The end: leaves from the new CA, and once consumers present them (the second gate)
    // Envoy Gateway's CA dropped; its label kept beside certgen's; the injector's caBundle is
    // envoy-gateway's ca.crt; everything pairwise consistent.
    let end = c.snapshot(&ns.name).await;
    let (failures, _) = check_snapshot(&end);
    assert!(failures.is_empty(), "{failures:?}");
    let new_ca_pem = end[CA_SECRET]["tls.crt"].clone();
    let new_ca = fingerprints(&new_ca_pem);
    for name in LEAF_SECRETS {
        let (bundle, leaf) = bundle_and_leaf(&end, name);
        let fps = fingerprints(bundle);
        assert_eq!(fps, new_ca, "{name}: the new CA alone");
        assert!(!fps.contains(&eg_fp[0]), "{name}");
        assert!(
            webpki_trusts(&new_ca_pem, leaf),
            "{name}: signed by the new CA"
        );
        assert!(
            !webpki_trusts(&eg_ca, leaf),
            "{name}: no longer by Envoy Gateway's"
        );
    }
    let serving_bundle = &end["envoy-gateway"]["ca.crt"];
    for bundle in injector_bundles(&c, &injector).await {
        assert_eq!(
            &bundle, serving_bundle,
            "the injector's caBundle follows envoy-gateway's ca.crt"
        );
    }
    // Every Secret certgen wrote (the CA Secret it created too) carries both labels.
    for name in LEAF_SECRETS.iter().chain(&[CA_SECRET]) {
        let s = c.secrets(&ns.name).get(name).await.unwrap();
        let labels = s.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("control-plane").map(String::as_str),
            Some("envoy-gateway"),
            "{name}"
        );
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("certgen"),
            "{name}"
        );
    }
    // The HMAC Secret is left alone, label and all.
    let hmac = c.secrets(&ns.name).get("envoy-oidc-hmac").await.unwrap();
    assert_eq!(data(&hmac, "hmac-secret"), envoy_gateway::HMAC);
    assert_eq!(
        hmac.metadata.labels.unwrap_or_default()["control-plane"],
        "envoy-gateway"
    );

    // A second rotation is certgen's own staged one (trust, a 2 s gate, leaves, a 2 s gate,
    // cleanup), written with fenced updates only: pairwise trust holds at every sample.
    let (_, samples) = rotate_sampled(&c, &ns.name, &kubeconfig, &injector).await;
    assert!(samples >= 10, "the gate was sampled ({samples} samples)");
    let after = c.snapshot(&ns.name).await;
    for name in LEAF_SECRETS {
        let fps = fingerprints(bundle_and_leaf(&after, name).0);
        assert!(
            fps.len() == 1 && !fps.contains(&new_ca[0]) && !fps.contains(&eg_fp[0]),
            "{name}: the newest CA alone: {fps:?}"
        );
    }
    let serving_bundle = &after["envoy-gateway"]["ca.crt"];
    for bundle in injector_bundles(&c, &injector).await {
        assert_eq!(
            &bundle, serving_bundle,
            "the injector's caBundle follows envoy-gateway's ca.crt"
        );
    }

    // A plain re-run under the same Role is a no-op.
    let again = Run::of(&mut eg_job(&kubeconfig, &ns.name, &[])).ok();
    assert_eq!(again.json()["writes"], 0, "{}", again.stdout);
}

#[tokio::test]
async fn explicit_wait_under_envoy_gateways_role_is_exit_5_naming_the_verb() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-egwait").await;
    let Some(chart) = eg_chart(&ns.name) else {
        return;
    };
    let (ok, text) = c.kubectl_stdin(&["apply", "--server-side"], &chart);
    assert!(ok, "{text}");
    let _uninstall = Uninstall(&c, chart.clone());
    let kubeconfig = c.token_kubeconfig(&ns.name, EG_SERVICE_ACCOUNT).await;
    let run = Run::of(&mut eg_job(&kubeconfig, &ns.name, &["--wait"]));
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert!(
        run.stderr.contains("--wait") && run.stderr.contains("deployments"),
        "{}",
        run.stderr
    );
    let secrets = c.secrets(&ns.name).list(&Default::default()).await.unwrap();
    assert!(
        secrets
            .items
            .iter()
            .all(|s| s.metadata.name.as_deref() != Some("envoy-gateway")),
        "nothing is written before the refusal"
    );
}

/// Without access discovery's hint, a refused patch is retried once as an update fenced by the
/// resourceVersion, and the store keeps using updates; a stale version is still a conflict.
#[tokio::test]
async fn a_refused_patch_becomes_a_fenced_update() {
    use certgen::access::SecretWriteVerb;
    use certgen::k8s::KubeStore;
    use certgen::secret::{Expect, SecretWrite};
    use certgen::store::{SecretStore, StoreError};
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-nopatch").await;
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "no-patch",
            vec![rule(&[""], &["secrets"], &["get", "create", "update"])],
        )
        .await;
    let store = KubeStore::new(c.client_as(&kubeconfig).await, &ns.name).with_labels(
        BTreeMap::from([("control-plane".to_string(), "envoy-gateway".to_string())]),
    );
    let write = |data: &[(&str, &[u8])], expect: Expect| SecretWrite {
        name: "s".into(),
        type_: "Opaque",
        data: data
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect(),
        secret_keys: vec![],
        remove: vec![],
        labels: BTreeMap::from([("app.kubernetes.io/managed-by".into(), "certgen".into())]),
        annotations: BTreeMap::new(),
        expect,
    };
    store
        .put(&write(&[("a", b"1"), ("b", b"2")], Expect::Absent))
        .await
        .unwrap();
    let read = |o: certgen::secret::Observed| o.present().unwrap().clone();
    let first = read(store.get("s").await.unwrap());
    assert_eq!(store.write_verb(), SecretWriteVerb::Patch);
    store
        .put(&write(
            &[("a", b"3")],
            Expect::Version(first.version.clone()),
        ))
        .await
        .unwrap();
    assert_eq!(
        store.write_verb(),
        SecretWriteVerb::Update,
        "switched after the 403"
    );
    let second = read(store.get("s").await.unwrap());
    assert_eq!(second.data["a"], b"3");
    assert_eq!(second.data["b"], b"2", "keys not written are kept");
    assert_eq!(second.labels["control-plane"], "envoy-gateway");
    assert_eq!(second.labels["app.kubernetes.io/managed-by"], "certgen");
    // The version it was planned from is gone: a conflict, not an overwrite.
    let err = store
        .put(&write(&[("a", b"4")], Expect::Version(first.version)))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(read(store.get("s").await.unwrap()).data["a"], b"3");
    // Changed by someone else after certgen's read (certgen's copy still looks current): the
    // API server's resourceVersion precondition refuses the update.
    let third = read(store.get("s").await.unwrap());
    c.secrets(&ns.name)
        .patch(
            "s",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"data": {"b": "OQ=="}})),
        )
        .await
        .unwrap();
    let err = store
        .put(&write(&[("a", b"5")], Expect::Version(third.version)))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    let last = read(store.get("s").await.unwrap());
    assert_eq!(
        (last.data["a"].as_slice(), last.data["b"].as_slice()),
        (&b"3"[..], &b"9"[..])
    );
}

/// Without `--wait` or `--probe` no rules review is made (docs/api-requests.md): a Role with
/// only Secret verbs (no patch, no Deployments, no Leases, no webhook configurations) still
/// installs and rotates, each refused extra is skipped for the rest of the run and said once in
/// the report, and nothing refused is asked again in a later step.
#[tokio::test]
async fn refused_extras_are_skipped_as_found_without_a_review() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-lazy").await;
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "secrets-only",
            vec![rule(&[""], &["secrets"], &["get", "create", "update"])],
        )
        .await;
    let run = |extra: &[&str]| {
        Certgen::new(&kubeconfig)
            .namespace(&ns.name)
            .args(extra)
            .run()
    };
    let webhook = format!("envoy-gateway-topology-injector.{}", ns.name);
    let skipped = |report: &serde_json::Value| -> Vec<String> {
        report["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };

    // A fresh install: creates only, so no Lease is tried; both refusals are said once.
    let fresh = run(&[]).ok();
    let report = fresh.json();
    assert_eq!(report["writes"], 5, "{report}");
    assert_eq!(report["apiRequests"]["review"], 0, "{report}");
    assert_eq!(report["apiRequests"]["total"], 12, "{report}");
    let lines = skipped(&report);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains(&webhook)
            && l.contains("caBundle not kept in step")
            && l.contains("get mutatingwebhookconfigurations")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("consumer envoy-ratelimit: not restarted")
                && l.contains("get deployments.apps")),
        "{lines:?}"
    );

    // A staged rotation: three steps; the refused webhook and Deployment are not asked again,
    // the Lease's 403 runs it without the lock, the patch's 403 switches to fenced updates.
    let rotation = run(&["--overwrite"]).ok();
    let report = rotation.json();
    assert!(report["writes"].as_u64().unwrap() >= 4, "{report}");
    let lines = skipped(&report);
    assert_eq!(
        lines.len(),
        4,
        "webhook, consumer, run lock, pods: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("pods not poked")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("leases.coordination.k8s.io")),
        "{lines:?}"
    );
    let requests = &report["apiRequests"];
    // 5 reads for the look and 5 per step (trust, leaves, cleanup), one refused read each for
    // the webhook and the Deployment (before the first write), nothing else read; and 5 more
    // for each gate the run met before its timer (here 0 s) had passed: a stored write time is
    // rounded up to the next second, so a step planned within the second of a write (or of the
    // fresh install's, a gate this run resumes) waits at its gate and looks again (1 run in 3
    // met one or two on 2026-11-29).
    let gets = requests["get"].as_u64().unwrap();
    let gates = report["gates"].as_array().map_or(0, Vec::len) as u64;
    assert!(
        gates <= 2 && gets == 22 + 5 * gates,
        "{gets} reads, {gates} gates met: {report}"
    );
    // The first step's writes run concurrently, so up to all four may be refused patches
    // before the switch; every later write is an update.
    let patches = requests["patch"].as_u64().unwrap();
    assert!(
        (1..=4).contains(&patches),
        "refused patches, then updates: {report}"
    );
    assert!(requests["update"].as_u64().unwrap() >= 8, "{report}");
    assert_eq!(requests["review"], 0, "{report}");
    assert!(!rotation.stderr.contains("error"), "{}", rotation.stderr);

    // With --wait the verbs are proved first: exit 5 naming one, nothing written.
    let before = c.versions(&ns.name).await;
    let waited = run(&["--overwrite", "--wait"]);
    assert_eq!(waited.code, 5, "{}", waited.stderr);
    assert!(
        waited.stderr.contains("deployments.apps"),
        "{}",
        waited.stderr
    );
    assert_eq!(c.versions(&ns.name).await, before, "nothing written");
}
