//! The Kubernetes store on a real API server: create, no-op, renew, overwrite, ownership,
//! lost races (409) and read errors, through the binary and, for races, through one step of the
//! rotation driver with another writer injected between certgen's read and its write.

use std::collections::BTreeMap;
use std::path::Path;

use certgen::config::{Config, Env, Overrides, Source};
use certgen::k8s::KubeStore;
use certgen::secret::{Observed, SecretWrite};
use certgen::store::{SecretStore, StoreError};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Cluster, cluster, rule};
use crate::util::{Run, certgen, fingerprints, openssl_verify, tempdir};

const LEAVES: [&str; 3] = ["envoy-gateway", "envoy", "envoy-rate-limit"];
const ALL: [&str; 5] = [
    "envoy-gateway-ca",
    "envoy-gateway",
    "envoy",
    "envoy-rate-limit",
    "envoy-oidc-hmac",
];

fn certgen_in(c: &Cluster, ns: &str, extra: &[&str]) -> Run {
    let mut cmd = certgen();
    cmd.args([
        "--kubeconfig",
        c.kubeconfig.to_str().unwrap(),
        "-n",
        ns,
        "--output",
        "json",
        "-q",
        // Staged rotations run through every phase without waiting 90 s per gate.
        "--propagation-delay",
        "0s",
    ]);
    cmd.args(extra);
    Run::from(cmd.output().unwrap())
}

async fn versions(c: &Cluster, ns: &str) -> BTreeMap<String, Option<String>> {
    let api = c.secrets(ns);
    let mut out = BTreeMap::new();
    for name in ALL {
        let rv = api
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|s| s.metadata.resource_version);
        out.insert(name.to_string(), rv);
    }
    out
}

fn data(s: &Secret, key: &str) -> Vec<u8> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

async fn verify_all(c: &Cluster, ns: &str) {
    let tmp = tempdir();
    for leaf in LEAVES {
        let s = c.secrets(ns).get(leaf).await.unwrap();
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
            "certgen"
        );
        let ca = tmp.path().join(format!("{leaf}-ca.crt"));
        let crt = tmp.path().join(format!("{leaf}.crt"));
        std::fs::write(&ca, data(&s, "ca.crt")).unwrap();
        std::fs::write(&crt, data(&s, "tls.crt")).unwrap();
        let (ok, text) = openssl_verify(&ca, &crt, "sslserver");
        assert!(ok, "{leaf}: {text}");
    }
}

#[tokio::test]
async fn create_no_op_renew_and_two_overwrites() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("store").await;
    let report = certgen_in(&c, &ns.name, &[]).ok().json();
    assert_eq!(report["writes"], 5);
    // A fresh install: 5 Secret reads, 5 creates, the injector and the Deployment looked up;
    // no run lock (creates only) and no access review (no --wait, no --probe): docs/api-requests.md.
    assert_eq!(report["apiRequests"]["create"], 5, "no Lease: {report}");
    assert_eq!(report["apiRequests"]["delete"], 0, "no Lease: {report}");
    assert_eq!(report["apiRequests"]["review"], 0, "{report}");
    assert_eq!(report["apiRequests"]["total"], 12, "{report}");
    let rl = report["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "envoy-ratelimit")
        .unwrap()
        .clone();
    assert!(
        rl["note"].as_str().unwrap().contains("missing"),
        "a missing consumer is reported and skipped: {rl}"
    );
    verify_all(&c, &ns.name).await;
    let hmac = c.secrets(&ns.name).get("envoy-oidc-hmac").await.unwrap();
    assert_eq!(hmac.type_.as_deref(), Some("Opaque"));
    assert_eq!(data(&hmac, "hmac-secret").len(), 32);

    // A no-op run writes nothing.
    let before = versions(&c, &ns.name).await;
    let report = certgen_in(&c, &ns.name, &[]).ok().json();
    assert_eq!(report["writes"], 0, "{report}");
    // Counted by the client: 5 Secret reads, the restart-only consumer's Deployment (a restart
    // a crashed run never made) and the topology injector's caBundle (drift); no review.
    assert_eq!(report["apiRequests"]["writes"], 0, "{report}");
    assert_eq!(report["apiRequests"]["review"], 0, "{report}");
    assert_eq!(report["apiRequests"]["total"], 7, "{report}");
    assert_eq!(versions(&c, &ns.name).await, before);

    // A SAN change renews exactly the Secret whose SANs changed.
    let report = certgen_in(&c, &ns.name, &["--cluster-domain", "corp.example"])
        .ok()
        .json();
    assert_eq!(report["writes"], 1, "{report}");
    let after = versions(&c, &ns.name).await;
    for name in ALL {
        assert_eq!(
            before[name] != after[name],
            name == "envoy-gateway",
            "{name}"
        );
    }

    // Two overwrites: each rotation ends with every bundle holding its new CA alone.
    let ca_fp = |s: &Secret| fingerprints(&data(s, "tls.crt"))[0].clone();
    let ca0 = ca_fp(&c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap());
    certgen_in(&c, &ns.name, &["--overwrite"]).ok();
    let ca1 = ca_fp(&c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap());
    certgen_in(&c, &ns.name, &["--overwrite"]).ok();
    let ca2 = ca_fp(&c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap());
    assert!(ca0 != ca1 && ca1 != ca2);
    for name in [
        "envoy-gateway-ca",
        "envoy-gateway",
        "envoy",
        "envoy-rate-limit",
    ] {
        let s = c.secrets(&ns.name).get(name).await.unwrap();
        assert_eq!(
            fingerprints(&data(&s, "ca.crt")),
            std::slice::from_ref(&ca2),
            "{name}"
        );
    }
    verify_all(&c, &ns.name).await;
    let hmac_after = c.secrets(&ns.name).get("envoy-oidc-hmac").await.unwrap();
    assert_eq!(
        data(&hmac_after, "hmac-secret"),
        data(&hmac, "hmac-secret"),
        "HMAC left alone"
    );
}

async fn create_secret(
    api: &Api<Secret>,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    data: &[(&str, &[u8])],
) {
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &s).await.unwrap();
}

#[tokio::test]
async fn a_secret_owned_by_cert_manager_is_refused_and_nothing_is_written() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("foreign").await;
    let api = c.secrets(&ns.name);
    create_secret(
        &api,
        "envoy",
        &[],
        &[("cert-manager.io/certificate-name", "envoy")],
        &[("tls.crt", b"x"), ("tls.key", b"y")],
    )
    .await;
    let before = versions(&c, &ns.name).await;
    let r = certgen_in(&c, &ns.name, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("Secret {}/envoy", ns.name)),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("cert-manager") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    assert_eq!(
        versions(&c, &ns.name).await,
        before,
        "nothing written, not even the CA"
    );
}

#[tokio::test]
async fn other_labels_and_annotations_survive_a_rotation() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("keep").await;
    certgen_in(&c, &ns.name, &[]).ok();
    let api = c.secrets(&ns.name);
    let patch = json!({"metadata": {"labels": {"team": "edge"}, "annotations": {"example.com/note": "hands off"}}});
    api.patch("envoy", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    certgen_in(&c, &ns.name, &["--overwrite"]).ok();
    let s = api.get("envoy").await.unwrap();
    assert_eq!(s.metadata.labels.as_ref().unwrap()["team"], "edge");
    assert_eq!(
        s.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "certgen"
    );
    assert_eq!(
        s.metadata.annotations.as_ref().unwrap()["example.com/note"],
        "hands off"
    );
}

/// A store that lets another writer act on one Secret between certgen's read and its write.
struct Racing<F> {
    inner: KubeStore,
    target: &'static str,
    interfere: std::sync::Mutex<Option<F>>,
}

impl<F, Fut> SecretStore for Racing<F>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn object(&self, name: &str) -> String {
        self.inner.object(name)
    }
    fn now(&self) -> time::OffsetDateTime {
        self.inner.now()
    }
    async fn get(&self, name: &str) -> Result<Observed, StoreError> {
        self.inner.get(name).await
    }
    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError> {
        if write.name == self.target {
            let f = self.interfere.lock().unwrap().take();
            if let Some(f) = f {
                f().await;
            }
        }
        self.inner.put(write).await
    }
}

fn config(ns: &str) -> Config {
    Config::resolve(
        &Source::Profile("envoy-gateway".into()),
        &Overrides {
            namespace: Some(ns.into()),
            ..Default::default()
        },
        &Env::default(),
    )
    .unwrap()
}

async fn rotate_with_interference<F, Fut>(
    c: &Cluster,
    ns: &str,
    target: &'static str,
    interfere: F,
) -> certgen::report::Report
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let store = Racing {
        inner: KubeStore::new(c.client.clone(), ns),
        target,
        interfere: std::sync::Mutex::new(Some(interfere)),
    };
    let options = certgen::plan::Options {
        overwrite: true,
        strategy: certgen::config::Strategy::Immediate,
        ..Default::default()
    };
    let guard = certgen::apply::Guard::new(&|| true);
    certgen::rotation::step(&store, &config(ns), options, &guard, None)
        .await
        .expect("the run re-plans and succeeds")
        .report
}

async fn assert_consistent(c: &Cluster, ns: &str, cas_before: &[String]) {
    let api = c.secrets(ns);
    let ca = api.get("envoy-gateway-ca").await.unwrap();
    let active = fingerprints(&data(&ca, "tls.crt"))[0].clone();
    let bundle = fingerprints(&data(&ca, "ca.crt"));
    assert_eq!(bundle[0], active);
    assert_eq!(bundle.len(), 2, "new CA plus one prior");
    assert!(
        cas_before.contains(&bundle[1]),
        "the prior is the CA from before the rotation"
    );
    for leaf in LEAVES {
        let s = api.get(leaf).await.unwrap();
        assert_eq!(
            fingerprints(&data(&s, "ca.crt")),
            bundle,
            "{leaf}: same bundle everywhere (no third CA)"
        );
    }
    verify_all(c, ns).await;
}

#[tokio::test]
async fn a_secret_changed_between_read_and_write_is_re_read_not_overwritten() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("race-change").await;
    certgen_in(&c, &ns.name, &[]).ok();
    let ca0 = fingerprints(&data(
        &c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap(),
        "tls.crt",
    ));
    let api = c.secrets(&ns.name);
    let report = rotate_with_interference(&c, &ns.name, "envoy", || async {
        let patch =
            json!({"metadata": {"annotations": {"example.com/touched": "by someone else"}}});
        api.patch("envoy", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    })
    .await;
    assert!(
        report.attempts >= 2,
        "the 409 made certgen re-read: {report:?}"
    );
    let s = c.secrets(&ns.name).get("envoy").await.unwrap();
    assert_eq!(
        s.metadata.annotations.as_ref().unwrap()["example.com/touched"],
        "by someone else",
        "the other write survived"
    );
    assert_consistent(&c, &ns.name, &ca0).await;
}

#[tokio::test]
async fn a_secret_deleted_and_recreated_between_read_and_write_is_re_planned() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("race-recreate").await;
    certgen_in(&c, &ns.name, &[]).ok();
    let ca0 = fingerprints(&data(
        &c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap(),
        "tls.crt",
    ));
    let api = c.secrets(&ns.name);
    let old = api.get("envoy").await.unwrap();
    let report = rotate_with_interference(&c, &ns.name, "envoy", || async {
        api.delete("envoy", &DeleteParams::default()).await.unwrap();
        let mut again = old.clone();
        again.metadata.resource_version = None;
        again.metadata.uid = None;
        again.metadata.creation_timestamp = None;
        again.metadata.managed_fields = None;
        api.create(&PostParams::default(), &again).await.unwrap();
    })
    .await;
    assert!(report.attempts >= 2, "{report:?}");
    assert_consistent(&c, &ns.name, &ca0).await;
}

#[tokio::test]
async fn a_forbidden_read_stops_the_run_before_anything_is_written() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("rbac").await;
    // May create and patch Secrets, but not read them.
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "no-get",
            vec![rule(&[""], &["secrets"], &["create", "patch"])],
        )
        .await;
    let r = Run::from(
        certgen()
            .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "-n", &ns.name])
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 5, "{}", r.stderr);
    for word in ["get", "secrets", &ns.name, "403"] {
        assert!(
            r.stderr.contains(word),
            "{word:?} missing from: {}",
            r.stderr
        );
    }
    assert!(
        versions(&c, &ns.name).await.values().all(Option::is_none),
        "nothing was created"
    );

    // With get/create/patch on Secrets and read/patch on Deployments (the consumers) the run
    // succeeds: this is the whole Role a run without --probe needs.
    let ok = c
        .service_account_kubeconfig(
            &ns.name,
            "enough",
            vec![
                rule(&[""], &["secrets"], &["get", "create", "patch"]),
                rule(
                    &["apps"],
                    &["deployments"],
                    &["get", "list", "watch", "patch"],
                ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["get", "create", "update", "delete"],
                ),
            ],
        )
        .await;
    let r = Run::from(
        certgen()
            .args(["--kubeconfig", ok.to_str().unwrap(), "-n", &ns.name, "-q"])
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let _ = Path::new(&ok);
}

#[tokio::test]
async fn check_reads_the_cluster_and_exits_1_when_action_is_due() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("check").await;
    let check = |ns: &str| {
        Run::from(
            certgen()
                .args([
                    "check",
                    "--kubeconfig",
                    c.kubeconfig.to_str().unwrap(),
                    "-n",
                    ns,
                    "--output",
                    "json",
                ])
                .output()
                .unwrap(),
        )
    };
    let r = check(&ns.name);
    assert_eq!(r.code, 1, "nothing installed yet: {}", r.stdout);
    certgen_in(&c, &ns.name, &[]).ok();
    let before = versions(&c, &ns.name).await;
    let report = check(&ns.name).ok().json();
    assert_eq!(report["healthy"], true, "{report}");
    assert_eq!(versions(&c, &ns.name).await, before, "check writes nothing");
    let patch = json!({"data": {"tls.crt": "Z2FyYmFnZQ=="}});
    c.secrets(&ns.name)
        .patch("envoy", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let r = check(&ns.name);
    assert_eq!(r.code, 1);
    let rows = r.json()["secrets"].clone();
    let envoy = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["secret"] == "envoy")
        .unwrap()
        .clone();
    assert_eq!(envoy["status"], "invalid", "{envoy}");
}

#[tokio::test]
async fn bad_stored_input_in_the_cluster_is_refused_with_nothing_written() {
    let Some(c) = cluster().await else { return };
    let other = c.namespace("bad-src").await;
    certgen_in(&c, &other.name, &[]).ok();
    let foreign_key = data(
        &c.secrets(&other.name).get("envoy").await.unwrap(),
        "tls.key",
    );
    let cases: Vec<(&str, &str, serde_json::Value, &str)> = vec![
        (
            "garbage",
            "envoy",
            json!({"data": {"tls.crt": "Z2FyYmFnZQ=="}}),
            "tls.crt: no PEM certificate",
        ),
        (
            "mismatch",
            "envoy",
            json!({"data": {"tls.key": base64(&foreign_key)}}),
            "does not match",
        ),
        (
            "no-key",
            "envoy-oidc-hmac",
            json!({"data": {"hmac-secret": null, "x": "eA=="}}),
            "\"hmac-secret\" is missing",
        ),
        (
            "helm",
            "envoy-rate-limit",
            json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"}}}),
            "managed by \"Helm\"",
        ),
    ];
    for (label, secret, patch, expect) in cases {
        let ns = c.namespace(&format!("bad-{label}")).await;
        certgen_in(&c, &ns.name, &[]).ok();
        c.secrets(&ns.name)
            .patch(secret, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let before = versions(&c, &ns.name).await;
        for extra in [&[][..], &["--overwrite"][..]] {
            let r = certgen_in(&c, &ns.name, extra);
            assert_eq!(r.code, 2, "{label}: {}", r.stderr);
            assert!(
                r.stderr.contains(&format!("Secret {}/{secret}", ns.name)),
                "{label}: {}",
                r.stderr
            );
            assert!(r.stderr.contains(expect), "{label}: {}", r.stderr);
            assert_eq!(
                versions(&c, &ns.name).await,
                before,
                "{label}: nothing written"
            );
        }
    }

    // A Secret of the wrong type cannot be fixed in place, even with --force.
    let ns = c.namespace("bad-type").await;
    let s: Secret = serde_json::from_value(
        json!({"metadata": {"name": "envoy"}, "type": "Opaque", "data": {"x": "eA=="}}),
    )
    .unwrap();
    c.secrets(&ns.name)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    let r = certgen_in(&c, &ns.name, &["--force"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("has type \"Opaque\"") && r.stderr.contains("delete it"),
        "{}",
        r.stderr
    );

    // A namespace that does not exist: the API's answer names verb, resource and namespace.
    let r = certgen_in(&c, "no-such-namespace-certgen", &[]);
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr.contains("no-such-namespace-certgen"),
        "{}",
        r.stderr
    );
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
