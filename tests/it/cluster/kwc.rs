//! certgen as kube-webhook-certgen on the real API server: kube-prometheus-stack's
//! admission-webhook Job pair (`create` pre-install, `patch` post-install, the chart's own
//! args, Role and ClusterRole, from `tests/it/fixtures/kube-prometheus-stack-admission.yaml`)
//! run through a link named `kube-webhook-certgen`, with the objects compared field by field
//! against what kube-webhook-certgen writes (recorded side by side with jkroepke's binary; see
//! docs/migrating-from-kube-webhook-certgen.md). Then what certgen refuses (exit 2, nothing written) and
//! what it writes differently: nothing on a re-run, the failure policy `Ignore`, server-side
//! apply with `--patch-mode patch`, and an APIService.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use super::{Cluster, DeleteOnDrop, base64, cluster, data_map};
use crate::util::{Run, command, root};

const FIXTURE: &str = "tests/it/fixtures/kube-prometheus-stack-admission.yaml";

/// certgen linked as `dir/kube-webhook-certgen`, as an image replacing kube-webhook-certgen's
/// ships it.
pub fn link_in(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let link = dir.join("kube-webhook-certgen");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_certgen"), &link).unwrap();
    link
}

/// The chart's objects with FULLNAME and NAMESPACE filled in, by kind.
fn chart(fullname: &str, ns: &str) -> BTreeMap<String, Vec<Value>> {
    let text = std::fs::read_to_string(root().join(FIXTURE)).unwrap();
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for doc in text.split("\n---\n") {
        let doc = doc.replace("FULLNAME", fullname).replace("NAMESPACE", ns);
        let v: Value = serde_saphyr::from_str(&doc).unwrap();
        out.entry(v["kind"].as_str().unwrap().to_string())
            .or_default()
            .push(v);
    }
    out
}

/// The args of the chart's Job whose container is `container`.
fn job_args(chart: &BTreeMap<String, Vec<Value>>, container: &str) -> Vec<String> {
    chart["Job"]
        .iter()
        .map(|j| &j["spec"]["template"]["spec"]["containers"][0])
        .find(|c| c["name"] == container)
        .unwrap()["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The chart's installation in a fresh namespace: webhook configurations, and the hook Jobs'
/// ServiceAccount bound to the chart's Role and ClusterRole.
pub(super) struct Install {
    pub(super) ns: super::TestNs,
    fullname: String,
    chart: BTreeMap<String, Vec<Value>>,
    kubeconfig: PathBuf,
    _cleanup: Vec<DeleteOnDrop>,
}

pub(super) async fn install(c: &Cluster, prefix: &str, cluster_verbs: Option<&[&str]>) -> Install {
    let ns = c.namespace(prefix).await;
    let fullname = ns.name.clone();
    let chart = chart(&fullname, &ns.name);
    let pp = PostParams::default();
    let cleanup = vec![
        DeleteOnDrop::new::<ValidatingWebhookConfiguration>(&format!("{fullname}-admission")),
        DeleteOnDrop::new::<MutatingWebhookConfiguration>(&format!("{fullname}-admission")),
        DeleteOnDrop::new::<ClusterRole>(&format!("{fullname}-admission")),
        DeleteOnDrop::new::<ClusterRoleBinding>(&format!("{fullname}-admission")),
    ];
    let v: ValidatingWebhookConfiguration =
        serde_json::from_value(chart["ValidatingWebhookConfiguration"][0].clone()).unwrap();
    Api::all(c.client.clone()).create(&pp, &v).await.unwrap();
    let m: MutatingWebhookConfiguration =
        serde_json::from_value(chart["MutatingWebhookConfiguration"][0].clone()).unwrap();
    Api::all(c.client.clone()).create(&pp, &m).await.unwrap();
    // The hook Jobs' identity: the chart's Role (Secrets) and ClusterRole (webhooks).
    let sa = format!("{fullname}-admission");
    let role: Role = serde_json::from_value(chart["Role"][0].clone()).unwrap();
    let kubeconfig = c
        .service_account_kubeconfig(&ns.name, &sa, role.rules.unwrap())
        .await;
    let mut cluster_role: ClusterRole =
        serde_json::from_value(chart["ClusterRole"][0].clone()).unwrap();
    if let Some(verbs) = cluster_verbs {
        for rule in cluster_role.rules.iter_mut().flatten() {
            rule.verbs = verbs.iter().map(|v| v.to_string()).collect();
        }
    }
    Api::<ClusterRole>::all(c.client.clone())
        .create(&pp, &cluster_role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns.name}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(c.client.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
    Install {
        ns,
        fullname,
        chart,
        kubeconfig,
        _cleanup: cleanup,
    }
}

impl Install {
    /// The Job's args run by certgen linked as `kube-webhook-certgen`, as the Job's identity.
    async fn job(&self, container: &str, extra: &[&str]) -> Run {
        let dir = std::env::temp_dir().join(format!("certgen-kwc-{}", self.ns.name));
        let mut cmd = command(&link_in(&dir));
        cmd.args(job_args(&self.chart, container))
            .args(extra)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig);
        crate::util::run_async(cmd).await
    }

    fn secret_name(&self) -> String {
        format!("{}-admission", self.fullname)
    }

    async fn webhooks(&self, c: &Cluster) -> [Value; 2] {
        let name = self.secret_name();
        let v = Api::<ValidatingWebhookConfiguration>::all(c.client.clone())
            .get(&name)
            .await
            .unwrap();
        let m = Api::<MutatingWebhookConfiguration>::all(c.client.clone())
            .get(&name)
            .await
            .unwrap();
        [
            serde_json::to_value(v).unwrap(),
            serde_json::to_value(m).unwrap(),
        ]
    }
}

/// rustls-webpki's verdict: `cert` is a serving certificate for `host` that chains to `ca`,
/// now (the check the API server's Go TLS client makes when it calls the webhook).
pub fn serves(ca: &[u8], cert: &[u8], host: &str) -> Result<(), String> {
    use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
    let ca = certgen::pki::parse_cert_chain(ca).map_err(|e| e.to_string())?;
    let ders: Vec<CertificateDer> = ca
        .iter()
        .map(|c| CertificateDer::from(c.der().to_vec()))
        .collect();
    let anchors: Vec<_> = ders
        .iter()
        .filter_map(|d| webpki::anchor_from_trusted_cert(d).ok())
        .collect();
    let leaf = certgen::pki::parse_single_cert(cert).map_err(|e| e.to_string())?;
    let leaf = CertificateDer::from(leaf.der().to_vec());
    let ee = webpki::EndEntityCert::try_from(&leaf).map_err(|e| format!("{e:?}"))?;
    ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &anchors,
        &[],
        UnixTime::now(),
        webpki::KeyUsage::server_auth(),
        None,
        None,
    )
    .map_err(|e| format!("{e:?}"))?;
    let name = ServerName::try_from(host).map_err(|e| e.to_string())?;
    ee.verify_is_valid_for_subject_name(&name)
        .map_err(|e| format!("{e:?}"))
}

/// A webhook configuration without what the API server and writers change: metadata other
/// than name and labels, and each entry's caBundle (returned separately).
fn strip(mut v: Value) -> (Value, Vec<String>) {
    let meta = v["metadata"].clone();
    v["metadata"] = json!({"name": meta["name"], "labels": meta["labels"]});
    let mut bundles = Vec::new();
    for hook in v["webhooks"].as_array_mut().unwrap() {
        bundles.push(
            hook["clientConfig"]
                .as_object_mut()
                .unwrap()
                .remove("caBundle")
                .and_then(|b| b.as_str().map(str::to_string))
                .unwrap_or_default(),
        );
    }
    (v, bundles)
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn kube_prometheus_stack_job_pair_as_kube_webhook_certgen() {
    let Some(c) = cluster().await else { return };
    let i = install(&c, "certgen-kwc", None).await;
    let before = i.webhooks(&c).await;

    // --dry-run says what would be written, and writes nothing.
    let run = i.job("create", &["--dry-run"]).await.ok();
    assert!(run.stdout.contains("would be created"), "{}", run.stdout);
    assert!(
        c.secrets(&i.ns.name)
            .get_opt(&i.secret_name())
            .await
            .unwrap()
            .is_none()
    );

    // pre-install: `create`, with the chart's args, as the chart's Role.
    i.job("create", &[]).await.ok();
    let secret = c.secrets(&i.ns.name).get(&i.secret_name()).await.unwrap();
    // The same Secret as kube-webhook-certgen's: type Opaque, keys ca, cert, key.
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let data = data_map(secret.clone());
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["ca", "cert", "key"],
        "the same keys"
    );
    // SANs from --host, a serving certificate the CA signs, checked by rustls-webpki.
    let operator = format!("{}-operator", i.fullname);
    let leaf = certgen::pki::parse_single_cert(&data["cert"]).unwrap();
    assert_eq!(
        leaf.dns_names,
        [operator.clone(), format!("{operator}.{}.svc", i.ns.name)]
    );
    assert!(leaf.ip_addresses.is_empty());
    let now = time::OffsetDateTime::now_utc();
    for host in &leaf.dns_names {
        serves(&data["ca"], &data["cert"], host).unwrap_or_else(|e| panic!("{host}: {e}"));
    }
    // 100 years, as kube-webhook-certgen's; the key matches the certificate.
    assert!(leaf.not_after - now > time::Duration::days(99 * 365));
    certgen::pki::load_signing_key(&leaf, &data["key"]).unwrap();
    assert_eq!(
        secret.metadata.labels.unwrap()["app.kubernetes.io/managed-by"],
        "certgen"
    );

    let run = i.job("patch", &["--dry-run"]).await.ok();
    assert!(
        run.stdout.contains("would write caBundle"),
        "{}",
        run.stdout
    );
    let dry = i.webhooks(&c).await;
    assert_eq!(rv(&dry[0]), rv(&before[0]));
    assert_eq!(rv(&dry[1]), rv(&before[1]));

    // post-install: `patch`, with the chart's args (an empty failure policy: each webhook
    // keeps its own), as the chart's ClusterRole.
    i.job("patch", &[]).await.ok();
    let after = i.webhooks(&c).await;
    for (b, a) in before.iter().zip(&after) {
        let (b, _) = strip(b.clone());
        let (a, bundles) = strip(a.clone());
        // Every entry's caBundle is the Secret's ca; nothing else changed.
        assert_eq!(a, b, "only caBundle changes");
        for bundle in bundles {
            assert_eq!(bundle, base64(&data["ca"]));
        }
    }

    // Re-runs (helm upgrade runs both Jobs again) write nothing.
    i.job("create", &[]).await.ok();
    let again = c.secrets(&i.ns.name).get(&i.secret_name()).await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        secret.metadata.resource_version
    );
    let run = i.job("patch", &[]).await.ok();
    assert!(run.stdout.contains("nothing written"), "{}", run.stdout);
    let unchanged = i.webhooks(&c).await;
    assert_eq!(rv(&unchanged[0]), rv(&after[0]));
    assert_eq!(rv(&unchanged[1]), rv(&after[1]));

    // The Secret replaced in one step (deleted, created again), as kube-webhook-certgen's
    // users rotate: `patch` keeps the prior CA beside the new one while the webhook may still
    // serve the old certificate; with a delay of 0 it copies blindly.
    c.secrets(&i.ns.name)
        .delete(&i.secret_name(), &Default::default())
        .await
        .unwrap();
    i.job("create", &[]).await.ok();
    let new = data_map(c.secrets(&i.ns.name).get(&i.secret_name()).await.unwrap());
    assert_ne!(new["ca"], data["ca"]);
    let run = i.job("patch", &[]).await.ok();
    assert!(run.stdout.contains("keeps the prior CA"), "{}", run.stdout);
    let both = [new["ca"].clone(), data["ca"].clone()].concat();
    for w in i.webhooks(&c).await {
        let (_, bundles) = strip(w);
        assert!(bundles.iter().all(|b| *b == base64(&both)), "[new, prior]");
    }
    i.job("patch", &["--propagation-delay=0s"]).await.ok();
    for w in i.webhooks(&c).await {
        let (_, bundles) = strip(w);
        assert!(bundles.iter().all(|b| *b == base64(&new["ca"])), "new only");
    }

    // A failure policy is set on every entry, Ignore as well as Fail (kube-webhook-certgen
    // drops Ignore).
    for policy in ["Fail", "Ignore"] {
        i.job("patch", &[&format!("--patch-failure-policy={policy}")])
            .await
            .ok();
        for w in i.webhooks(&c).await {
            for hook in w["webhooks"].as_array().unwrap() {
                assert_eq!(hook["failurePolicy"], policy);
            }
        }
    }
}

#[tokio::test]
async fn kube_webhook_certgen_bad_input_exits_2_and_writes_nothing() {
    let Some(c) = cluster().await else { return };
    let i = install(&c, "certgen-kwc-bad", None).await;
    let name = i.secret_name();

    // An unknown webhook: refused before any write, though the validating one exists.
    i.job("create", &[]).await.ok();
    let before = i.webhooks(&c).await;
    let dir = std::env::temp_dir().join(format!("certgen-kwc-{}", i.ns.name));
    let kwc = |args: &[&str]| {
        let mut cmd = command(&link_in(&dir));
        cmd.args(args).arg("--kubeconfig").arg(&i.kubeconfig);
        Run::of(&mut cmd)
    };
    let ns_flag = format!("--namespace={}", i.ns.name);
    let secret_flag = format!("--secret-name={name}");
    let run = kwc(&[
        "patch",
        &ns_flag,
        &secret_flag,
        "--webhook-name=no-such-webhook",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "--webhook-name: ValidatingWebhookConfiguration no-such-webhook does not exist"
        ),
        "{}",
        run.stderr
    );
    // Mutating missing, validating present: neither is written.
    Api::<MutatingWebhookConfiguration>::all(c.client.clone())
        .delete(&name, &Default::default())
        .await
        .unwrap();
    let run = kwc(&[
        "patch",
        &ns_flag,
        &secret_flag,
        &format!("--webhook-name={name}"),
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "MutatingWebhookConfiguration {name} does not exist"
        )),
        "{}",
        run.stderr
    );
    let v = &i.webhooks_validating(&c).await;
    assert_eq!(rv(v), rv(&before[0]), "nothing written");

    // --patch-failure-policy Maybe: refused before any request.
    let run = kwc(&[
        "patch",
        &ns_flag,
        &secret_flag,
        &format!("--webhook-name={name}"),
        "--patch-failure-policy=Maybe",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--patch-failure-policy: \"Maybe\" is not a failure policy")
    );

    // A Secret holding keys `create` does not write (another tool's): refused, untouched.
    let foreign = format!("{name}-foreign");
    let mut s = k8s_openapi::api::core::v1::Secret::default();
    s.metadata.name = Some(foreign.clone());
    s.type_ = Some("kubernetes.io/tls".into());
    s.data = Some(BTreeMap::from([
        ("tls.crt".into(), k8s_openapi::ByteString(b"x".to_vec())),
        ("tls.key".into(), k8s_openapi::ByteString(b"y".to_vec())),
    ]));
    let created = c
        .secrets(&i.ns.name)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    let run = kwc(&[
        "create",
        "--host=svc",
        &ns_flag,
        &format!("--secret-name={foreign}"),
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "Secret {}/{foreign}: exists but is not the Secret `create` writes",
            i.ns.name
        )) && run.stderr.contains("tls.crt, tls.key"),
        "{}",
        run.stderr
    );
    let after = c.secrets(&i.ns.name).get(&foreign).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        created.metadata.resource_version
    );

    // A missing --host: refused, no Secret.
    let run = kwc(&["create", &ns_flag, "--secret-name=other"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--host: is required"), "{}", run.stderr);
    assert!(
        c.secrets(&i.ns.name)
            .get_opt("other")
            .await
            .unwrap()
            .is_none()
    );
}

impl Install {
    async fn webhooks_validating(&self, c: &Cluster) -> Value {
        serde_json::to_value(
            Api::<ValidatingWebhookConfiguration>::all(c.client.clone())
                .get(&self.secret_name())
                .await
                .unwrap(),
        )
        .unwrap()
    }
}

#[tokio::test]
async fn patch_mode_patch_is_a_server_side_apply_of_the_ca_bundle() {
    let Some(c) = cluster().await else { return };
    // `--patch-mode patch` needs the patch verb, not update.
    let i = install(&c, "certgen-kwc-ssa", Some(&["get", "patch"])).await;
    i.job("create", &[]).await.ok();
    let run = i.job("patch", &["--patch-mode=patch"]).await.ok();
    assert!(run.stdout.contains("wrote caBundle"), "{}", run.stdout);
    let data = data_map(c.secrets(&i.ns.name).get(&i.secret_name()).await.unwrap());
    for w in i.webhooks(&c).await {
        let (_, bundles) = strip(w.clone());
        assert!(bundles.iter().all(|b| *b == base64(&data["ca"])));
        let managers: Vec<_> = w["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["manager"].clone(), m["operation"].clone()))
            .collect();
        assert!(
            managers.contains(&(json!("certgen"), json!("Apply"))),
            "{managers:?}"
        );
    }
    // The default mode (update) is refused by this ClusterRole: exit 5 naming the verb.
    let i2 = install(&c, "certgen-kwc-upd", Some(&["get", "patch"])).await;
    i2.job("create", &[]).await.ok();
    let run = i2.job("patch", &[]).await;
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert!(
        run.stderr.contains("grant the update verb"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn patch_sets_an_apiservices_ca_bundle() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-kwc-api").await;
    let group = format!("{}.certgen.example.com", ns.name);
    let name = format!("v1.{group}");
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
        "apiservices",
    );
    let api: Api<DynamicObject> = Api::all_with(c.client.clone(), &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": name, "labels": {"certgen.dev/test": "true"}},
        "spec": {
            "group": group, "version": "v1", "groupPriorityMinimum": 100,
            "versionPriority": 100, "insecureSkipTLSVerify": true,
            "service": {"name": "metrics", "namespace": ns.name, "port": 443}
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
    let dir = std::env::temp_dir().join(format!("certgen-kwc-{}", ns.name));
    let kwc = |args: &[&str]| {
        let mut cmd = command(&link_in(&dir));
        cmd.args(args).arg("--kubeconfig").arg(&c.kubeconfig);
        Run::of(&mut cmd)
    };
    let ns_flag = format!("--namespace={}", ns.name);
    kwc(&[
        "create",
        "--host=metrics,10.0.0.10",
        &ns_flag,
        "--secret-name=api",
    ])
    .ok();
    kwc(&[
        "patch",
        &ns_flag,
        "--secret-name=api",
        &format!("--apiservice-name={name}"),
        "--patch-validating=false",
        "--patch-mutating=false",
    ])
    .ok();
    let got = api.get(&name).await.unwrap();
    let data = data_map(c.secrets(&ns.name).get("api").await.unwrap());
    assert_eq!(got.data["spec"]["caBundle"], base64(&data["ca"]));
    // false, which the API server leaves out.
    assert_ne!(got.data["spec"]["insecureSkipTLSVerify"], true);
    let leaf = certgen::pki::parse_single_cert(&data["cert"]).unwrap();
    assert_eq!(
        leaf.ip_addresses,
        ["10.0.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
    api.delete(&name, &Default::default()).await.unwrap();
}

/// Issue 32, finding 6: `patch` wrote the ValidatingWebhookConfiguration, then failed on the
/// Mutating one (a verb missing there) without saying what it had written. Now every write's
/// verb is checked before the first (an access review per object): nothing is written, and
/// the error names the verb and the object.
#[tokio::test]
async fn patch_with_a_verb_missing_on_one_webhook_writes_nothing() {
    let Some(c) = cluster().await else { return };
    let i = install(&c, "certgen-kwc-rbac", None).await;
    i.job("create", &[]).await.ok();
    // The ClusterRole loses `update` on the mutating configuration only.
    let name = format!("{}-admission", i.fullname);
    let narrowed: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["admissionregistration.k8s.io"],
             "resources": ["validatingwebhookconfigurations"],
             "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["admissionregistration.k8s.io"],
             "resources": ["mutatingwebhookconfigurations"],
             "verbs": ["get"]},
        ],
    }))
    .unwrap();
    Api::<ClusterRole>::all(c.client.clone())
        .replace(&name, &PostParams::default(), &narrowed)
        .await
        .unwrap();
    let before = i.webhooks(&c).await;
    let run = i.job("patch", &[]).await;
    assert_eq!(run.code, 5, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("update mutatingwebhookconfigurations")
            && run.stderr.contains("nothing was written"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("namespace \"\""), "{}", run.stderr);
    let after = i.webhooks(&c).await;
    assert_eq!(
        rv(&before[0]),
        rv(&after[0]),
        "the validating one was not written"
    );
    assert_eq!(rv(&before[1]), rv(&after[1]));
}

/// Every `caBundle` of both configurations verifies the Secret's serving certificate for the
/// operator Service's name (rustls-webpki, not certgen's code), and none holds more than two
/// CAs.
async fn every_ca_bundle_verifies_the_leaf(c: &Cluster, install: &Install, after: &str) {
    let data = data_map(
        c.secrets(&install.ns.name)
            .get(&install.secret_name())
            .await
            .unwrap(),
    );
    let host = format!("{}-operator.{}.svc", install.fullname, install.ns.name);
    let mut checked = 0;
    for config in install.webhooks(c).await {
        for hook in config["webhooks"].as_array().unwrap() {
            let bundle = hook["clientConfig"]["caBundle"]
                .as_str()
                .unwrap_or_default();
            let pem = {
                use ::base64::Engine as _;
                ::base64::engine::general_purpose::STANDARD
                    .decode(bundle)
                    .unwrap()
            };
            serves(&pem, &data["cert"], &host)
                .unwrap_or_else(|e| panic!("{after}: {}: {e}", hook["name"]));
            assert!(certgen::pki::parse_cert_chain(&pem).unwrap().len() <= 2);
            checked += 1;
        }
    }
    assert_eq!(checked, 3, "both configurations' entries");
}

/// Issue 46: a `create` user who takes the config route (docs/alerts.md, CertgenCAKeyLost;
/// the migration guide's "config route"): `create --print-config` writes the config, then the
/// main job runs with it and `--overwrite`. The rotation is staged, ends on one new CA in the
/// Secret and every `caBundle`, each `caBundle` verifying the leaf after every run, and
/// `create` with the same flags then finds nothing to do (no second rotation).
#[tokio::test]
async fn the_main_job_with_creates_printed_config_and_overwrite_keeps_every_ca_bundle_in_step() {
    let Some(c) = cluster().await else { return };
    let install = install(&c, "certgen-kwc-config", None).await;
    let ns = install.ns.name.clone();
    // The chart's install: create (100 years), then patch.
    let r = install.job("create", &[]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = install.job("patch", &[]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    every_ca_bundle_verifies_the_leaf(&c, &install, "installed").await;
    let old_ca = data_map(c.secrets(&ns).get(&install.secret_name()).await.unwrap())["ca"].clone();

    // The config create renews with, printed (nothing read or written).
    let renewal = [
        "--validity=90d",
        "--renew-before=30d",
        &format!("--webhook-name={}", install.secret_name()),
        "--print-config",
    ];
    let printed = install.job("create", &renewal).await;
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    let tmp = crate::util::tempdir();
    let config = tmp.path().join("create.yaml");
    std::fs::write(&config, &printed.stdout).unwrap();

    // The main job with it and --overwrite, as the admin, until the rotation is done.
    let mut done = false;
    for run in 1..=4 {
        let r = super::Certgen::new(&c.kubeconfig)
            .arg("--config")
            .arg(&config)
            .arg("--overwrite")
            .run();
        assert_eq!(r.code, 0, "run {run}: {}{}", r.stdout, r.stderr);
        every_ca_bundle_verifies_the_leaf(&c, &install, &format!("run {run}")).await;
        let ca = data_map(c.secrets(&ns).get(&install.secret_name()).await.unwrap())["ca"].clone();
        let cas = certgen::pki::parse_cert_chain(&ca).unwrap();
        if cas.len() == 1 && ca != old_ca {
            done = true;
            break;
        }
    }
    assert!(done, "the Secret ends on a new CA alone");
    // The Secret stays in kube-webhook-certgen's layout, its certificates 90 days.
    let secret = c.secrets(&ns).get(&install.secret_name()).await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let data = data_map(secret);
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        ["ca", "cert", "key"]
    );
    let leaf = certgen::pki::parse_single_cert(&data["cert"]).unwrap();
    assert!(
        leaf.not_after - leaf.not_before <= time::Duration::days(90) + time::Duration::minutes(5)
    );

    // check with the same config: healthy. create with the same flags: nothing to do.
    let r = super::Certgen::new(&c.kubeconfig)
        .check()
        .arg("--config")
        .arg(&config)
        .run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let r = install.job("create", &renewal[..3]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("nothing written"), "{}", r.stdout);
}
