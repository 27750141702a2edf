//! The Kubernetes store on a real API server: create, no-op, renew, overwrite, labels and
//! annotations kept, lost races (409) and read errors, `check`, and many Secrets read with one
//! LIST when the Role grants it and by name when it does not; through the binary and, for races,
//! through one step of the rotation driver with another writer injected between certgen's read
//! and its write.
//! Stored Secrets certgen refuses are in `cluster::bad_input`.

use std::path::Path;

use certgen::config::{Config, Env, Overrides, Source};
use certgen::k8s::KubeStore;
use certgen::secret::{Observed, SecretWrite};
use certgen::store::{SecretStore, StoreError};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Certgen, Cluster, cluster, data, rule};
use crate::util::trust::{CA_SECRET, LEAF_SECRETS, PROFILE_SECRETS, fingerprints, openssl_verify};
use crate::util::{check_row, consumer, tempdir, write};

async fn verify_all(c: &Cluster, ns: &str) {
    let tmp = tempdir();
    for leaf in LEAF_SECRETS {
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
    let report = c.certgen(&ns.name).quiet().run().ok().json();
    assert_eq!(report["writes"], 5);
    // A fresh install: 5 Secret reads, 5 creates, the injector and the Deployment looked up
    // (the injector is not there: also looked for by its label, one LIST); no run lock (creates
    // only) and no access review (no --wait, no --probe): docs/api-requests.md.
    assert_eq!(report["apiRequests"]["create"], 5, "no Lease: {report}");
    assert_eq!(report["apiRequests"]["delete"], 0, "no Lease: {report}");
    assert_eq!(report["apiRequests"]["review"], 0, "{report}");
    assert_eq!(report["apiRequests"]["total"], 13, "{report}");
    let rl = consumer(&report, "envoy-ratelimit");
    assert!(
        rl["note"].as_str().unwrap().contains("missing"),
        "a missing consumer is reported and skipped: {rl}"
    );
    verify_all(&c, &ns.name).await;
    let hmac = c.secrets(&ns.name).get("envoy-oidc-hmac").await.unwrap();
    assert_eq!(hmac.type_.as_deref(), Some("Opaque"));
    assert_eq!(data(&hmac, "hmac-secret").len(), 32);

    // A no-op run writes nothing.
    let before = c.versions(&ns.name).await;
    let report = c.certgen(&ns.name).quiet().run().ok().json();
    assert_eq!(report["writes"], 0, "{report}");
    // Counted by the client: 5 Secret reads, the restart-only consumer's Deployment (a restart
    // a crashed run never made) and the topology injector's caBundle (drift; absent here, so
    // also looked for by its label); no review.
    assert_eq!(report["apiRequests"]["writes"], 0, "{report}");
    assert_eq!(report["apiRequests"]["review"], 0, "{report}");
    assert_eq!(report["apiRequests"]["total"], 8, "{report}");
    assert_eq!(c.versions(&ns.name).await, before);

    // A SAN change renews exactly the Secret whose SANs changed.
    let report = c
        .certgen(&ns.name)
        .quiet()
        .args(["--cluster-domain", "corp.example"])
        .run()
        .ok()
        .json();
    assert_eq!(report["writes"], 1, "{report}");
    let after = c.versions(&ns.name).await;
    for name in PROFILE_SECRETS {
        assert_eq!(
            before[name] != after[name],
            name == "envoy-gateway",
            "{name}"
        );
    }

    // Two overwrites: each rotation ends with every bundle holding its new CA alone.
    let ca_fp = |s: &Secret| fingerprints(&data(s, "tls.crt"))[0].clone();
    let ca0 = ca_fp(&c.secrets(&ns.name).get(CA_SECRET).await.unwrap());
    c.certgen(&ns.name).quiet().args(["--overwrite"]).run().ok();
    let ca1 = ca_fp(&c.secrets(&ns.name).get(CA_SECRET).await.unwrap());
    c.certgen(&ns.name).quiet().args(["--overwrite"]).run().ok();
    let ca2 = ca_fp(&c.secrets(&ns.name).get(CA_SECRET).await.unwrap());
    assert!(ca0 != ca1 && ca1 != ca2);
    for name in [CA_SECRET, "envoy-gateway", "envoy", "envoy-rate-limit"] {
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

#[tokio::test]
async fn other_labels_and_annotations_survive_a_rotation() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("keep").await;
    c.certgen(&ns.name).quiet().run().ok();
    let api = c.secrets(&ns.name);
    let patch = json!({"metadata": {"labels": {"team": "edge"}, "annotations": {"example.com/note": "hands off"}}});
    api.patch("envoy", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    c.certgen(&ns.name).quiet().args(["--overwrite"]).run().ok();
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
    certgen::rotation::step(
        &store,
        &config(ns),
        options,
        Default::default(),
        &guard,
        None,
    )
    .await
    .expect("the run re-plans and succeeds")
    .report
}

async fn assert_consistent(c: &Cluster, ns: &str, cas_before: &[String]) {
    let api = c.secrets(ns);
    let ca = api.get(CA_SECRET).await.unwrap();
    let active = fingerprints(&data(&ca, "tls.crt"))[0].clone();
    let bundle = fingerprints(&data(&ca, "ca.crt"));
    assert_eq!(bundle[0], active);
    assert_eq!(bundle.len(), 2, "new CA plus one prior");
    assert!(
        cas_before.contains(&bundle[1]),
        "the prior is the CA from before the rotation"
    );
    for leaf in LEAF_SECRETS {
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
    c.certgen(&ns.name).quiet().run().ok();
    let ca0 = fingerprints(&data(
        &c.secrets(&ns.name).get(CA_SECRET).await.unwrap(),
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
    c.certgen(&ns.name).quiet().run().ok();
    let ca0 = fingerprints(&data(
        &c.secrets(&ns.name).get(CA_SECRET).await.unwrap(),
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
    let r = Certgen::new(&kubeconfig).namespace(&ns.name).run();
    assert_eq!(r.code, 5, "{}", r.stderr);
    for word in ["get", "secrets", &ns.name, "403"] {
        assert!(
            r.stderr.contains(word),
            "{word:?} missing from: {}",
            r.stderr
        );
    }
    assert!(
        c.versions(&ns.name).await.values().all(Option::is_none),
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
    let r = Certgen::new(&ok).namespace(&ns.name).quiet().run();
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[tokio::test]
async fn check_reads_the_cluster_and_exits_1_when_action_is_due() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("check").await;
    let check = |ns: &str| c.certgen(ns).check().run();
    let r = check(&ns.name);
    assert_eq!(r.code, 1, "nothing installed yet: {}", r.stdout);
    c.certgen(&ns.name).quiet().run().ok();
    let before = c.versions(&ns.name).await;
    let report = check(&ns.name).ok().json();
    assert_eq!(report["healthy"], true, "{report}");
    assert_eq!(c.versions(&ns.name).await, before, "check writes nothing");
    let patch = json!({"data": {"tls.crt": "Z2FyYmFnZQ=="}});
    c.secrets(&ns.name)
        .patch("envoy", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let r = check(&ns.name);
    assert_eq!(r.code, 1);
    let report = r.json();
    let envoy = check_row(&report, "envoy");
    assert_eq!(envoy["status"], "invalid", "{envoy}");
}

/// A config with a CA and `n` TLS Secrets, no consumers.
fn many_secrets(n: usize) -> String {
    let mut text = String::from(
        "name: many\nnamespace: default\nca:\n  secretName: many-ca\n  commonName: many-ca\n  keyAlgorithm: ecdsa-p256\n  validity: 1825d\n  renewBefore: 90d\nsecrets:\n",
    );
    for i in 0..n {
        text.push_str(&format!(
            "- name: s-{i:02}\n  type: tls\n  dnsNames: [\"s-{i:02}.{{namespace}}.svc\"]\n"
        ));
    }
    text
}

fn run_as(kubeconfig: &Path, config: &Path, ns: &str) -> serde_json::Value {
    Certgen::new(kubeconfig)
        .namespace(ns)
        .quiet()
        .args(["--config", config.to_str().unwrap()])
        .run()
        .ok()
        .json()
}

#[tokio::test]
async fn twelve_secrets_are_read_with_one_list_when_granted_and_by_name_when_not() {
    let Some(c) = cluster().await else { return };
    let tmp = tempdir();
    let cfg = write(tmp.path(), "many.yaml", &many_secrets(12));
    let leases = rule(
        &["coordination.k8s.io"],
        &["leases"],
        &["get", "create", "update", "delete"],
    );

    let ns = c.namespace("list").await;
    let granted = c
        .service_account_kubeconfig(
            &ns.name,
            "with-list",
            vec![
                rule(&[""], &["secrets"], &["get", "list", "create", "patch"]),
                leases.clone(),
            ],
        )
        .await;
    let fresh = run_as(&granted, &cfg, &ns.name);
    assert_eq!(fresh["writes"], 13, "{fresh}");
    let noop = run_as(&granted, &cfg, &ns.name);
    assert_eq!(noop["writes"], 0, "{noop}");
    let requests = &noop["apiRequests"];
    // 13 Secrets: one LIST, no GET of a Secret.
    assert_eq!(requests["list"], 1, "{noop}");
    assert_eq!(requests["get"], 0, "{noop}");

    let ns = c.namespace("nolist").await;
    let refused = c
        .service_account_kubeconfig(
            &ns.name,
            "without-list",
            vec![
                rule(&[""], &["secrets"], &["get", "create", "patch"]),
                leases,
            ],
        )
        .await;
    let fresh = run_as(&refused, &cfg, &ns.name);
    assert_eq!(fresh["writes"], 13, "{fresh}");
    let noop = run_as(&refused, &cfg, &ns.name);
    assert_eq!(noop["writes"], 0, "{noop}");
    let requests = &noop["apiRequests"];
    // Refused once (403), then every Secret by name; never a second LIST.
    assert_eq!(requests["list"], 1, "{noop}");
    assert_eq!(requests["get"], 13, "{noop}");
}
