//! ClusterTrustBundles as a trust target (issue 43) on a real Kubernetes 1.37 API server with
//! real RBAC: certgen publishes one signer-linked bundle per CA of the bundle it follows, under
//! the chart's own identity (attest on the configured signer only); a staged rotation creates
//! the new CA's bundle in its trust step and deletes the old one's in its cleanup, never
//! leaving the signer without a bundle; a deleted or edited bundle is put back, another
//! writer's bundle of the same signer is left alone; the dry run lists what the run does; and
//! pods the gate cannot observe (projecting by name, or from another namespace) hold it for
//! their timer. The real kubelet's side is `real_node.rs`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::chart::{documents, template};
use super::{Certgen, Cluster, DeleteOnDrop, cluster, deployment, helm};

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("certificates.k8s.io", "v1", "ClusterTrustBundle"),
        "clustertrustbundles",
    )
}

fn bundles_api(c: &Cluster) -> Api<DynamicObject> {
    Api::all_with(c.client.clone(), &resource())
}

/// A signer of the test's own (namespaces are unique), so tests never share bundles.
fn signer(ns: &str) -> String {
    format!("certgen.test/{ns}")
}

/// The bundles linked to `signer`, by name: (labels, PEM).
async fn bundles(
    c: &Cluster,
    signer: &str,
) -> BTreeMap<String, (BTreeMap<String, String>, String)> {
    let lp = ListParams::default().fields(&format!("spec.signerName={signer}"));
    bundles_api(c)
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| {
            (
                o.metadata.name.clone().unwrap(),
                (
                    o.metadata.labels.clone().unwrap_or_default(),
                    o.data["spec"]["trustBundle"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// Deletes every bundle of `signer` when dropped (cluster-scoped: they outlive namespaces).
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let signer = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(client) = kube::Client::try_default().await {
                    let api: Api<DynamicObject> = Api::all_with(client, &resource());
                    let lp = ListParams::default().fields(&format!("spec.signerName={signer}"));
                    let _ = api.delete_collection(&DeleteParams::default(), &lp).await;
                }
            });
        })
        .join();
    }
}

/// The hook's identity exactly as the chart renders it with `clusterTrustBundles` set to
/// `signer`, created in the cluster; certgen as that identity.
async fn as_chart(c: &Cluster, ns: &str, signer: &str) -> (Certgen, Vec<DeleteOnDrop>) {
    let helm = helm().expect("the test helm (tests/testenv/build-helm)");
    let set = format!("clusterTrustBundles[0]={signer}");
    let identity: Vec<Value> = documents(&template(
        &helm,
        ns,
        &["--set", &set, "--set", "topologyInjector=false"],
    ))
    .into_iter()
    .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == "hook")
    .filter(|d| {
        matches!(
            d["kind"].as_str(),
            Some("ServiceAccount" | "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding")
        )
    })
    .collect();
    let mut keep = Vec::new();
    for d in identity.iter().filter(|d| d["kind"] == "ClusterRole") {
        let name = d["metadata"]["name"].as_str().unwrap();
        keep.push(DeleteOnDrop::new::<ClusterRole>(name));
        keep.push(DeleteOnDrop::new::<ClusterRoleBinding>(name));
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": identity}).to_string();
    let (ok, out) = c.kubectl_stdin(&["create"], &list);
    assert!(ok, "{out}");
    let sa = identity
        .iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let kubeconfig = c.token_kubeconfig(ns, &sa).await;
    let certgen = Certgen::new(&kubeconfig).namespace(ns).args([
        "--disable-topology-injector",
        "--cluster-trust-bundle",
        signer,
        "--timeout",
        "60s",
    ]);
    (certgen, keep)
}

/// The certificates of a PEM text, as DER, in order.
fn ders(pem: &str) -> Vec<Vec<u8>> {
    certgen::pki::parse_cert_chain(pem.as_bytes())
        .unwrap()
        .iter()
        .map(|c| c.der().to_vec())
        .collect()
}

/// The bundle the run's Secrets trust (`envoy-gateway`'s `ca.crt`), as DER certificates.
async fn trusted(c: &Cluster, ns: &str) -> Vec<Vec<u8>> {
    let s: Secret = c.secrets(ns).get("envoy-gateway").await.unwrap();
    ders(std::str::from_utf8(&super::data(&s, "ca.crt")).unwrap())
}

/// The report lines about ClusterTrustBundles: (action, step, what).
fn bundle_lines(report: &Value) -> Vec<(String, String, String)> {
    report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "clustertrustbundle")
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["step"].as_str().unwrap_or_default().to_string(),
                e["secret"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A kwok Deployment whose pods project the signer's bundles by `projection`.
async fn projecting(c: &Cluster, ns: &str, name: &str, projection: Value) {
    let spec = json!({"template": {"spec": {
        "volumes": [{"name": "trust", "projected": {"sources": [{"clusterTrustBundle": projection}]}}],
        "containers": [{"name": "app", "image": "fake.invalid/app:1",
            "volumeMounts": [{"name": "trust", "mountPath": "/trust"}]}]
    }}});
    c.create_deployment(ns, &deployment(name, 1, spec)).await;
    super::rolled_out(&c.deployments(ns), name, std::time::Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_staged_rotation_publishes_each_ca_as_its_own_bundle_under_the_charts_identity() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-ctb").await;
    let signer = signer(&ns.name);
    let _cleanup = Cleanup(signer.clone());
    let (certgen, _identity) = as_chart(&c, &ns.name, &signer).await;
    // A consumer that reads the bundles as the docs show: by signer and the CA-agnostic
    // managed-by label (kwok runs it; the gate pokes it and reads its node's Lease).
    projecting(
        &c,
        &ns.name,
        "reader",
        json!({"signerName": signer, "labelSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "certgen"}}, "path": "ca.crt"}),
    )
    .await;

    // Install: the CA's one bundle, named and labelled for it.
    let install = certgen.run_async().await.ok().json();
    let lines = bundle_lines(&install);
    assert_eq!(lines.len(), 1, "{install}");
    assert_eq!(lines[0].0, "create", "{install}");
    let published = bundles(&c, &signer).await;
    assert_eq!(published.len(), 1, "{published:?}");
    let (name, (labels, pem)) = published.iter().next().unwrap();
    let trust = trusted(&c, &ns.name).await;
    assert_eq!(
        ders(pem),
        trust,
        "the bundle holds the CA the Secrets trust"
    );
    let fp = certgen::pki::parse_cert_chain(pem.as_bytes()).unwrap()[0].short_fingerprint();
    assert_eq!(name, &format!("{}:{fp}", signer.replace('/', ":")));
    assert_eq!(labels.get("certgen.dev/ca"), Some(&fp));
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("certgen")
    );

    // Nothing to do: nothing written.
    let again = certgen.run_async().await.ok().json();
    assert!(
        bundle_lines(&again).iter().all(|l| l.0 == "keep"),
        "{again}"
    );

    // The dry run of a rotation lists what its first step will do: the new CA's bundle.
    let dry = certgen
        .clone()
        .args(["--overwrite", "--dry-run"])
        .run_async()
        .await
        .ok()
        .json();
    let planned = bundle_lines(&dry);
    assert_eq!(
        planned
            .iter()
            .map(|l| (l.0.as_str(), l.1.as_str()))
            .collect::<Vec<_>>(),
        vec![("create", "trust")],
        "{dry}"
    );
    assert_eq!(
        bundles(&c, &signer).await.len(),
        1,
        "a dry run writes nothing"
    );

    // The rotation: create in the trust step (beside the old), delete in the cleanup.
    // With a delay of 60 s, only evidence opens the trust gate within the test's time: the
    // pod that projects the bundles poked and its (kwok) kubelet seen live after.
    let rotated = certgen
        .clone()
        .propagation_delay("60s")
        .args(["--overwrite", "--events"])
        .run_async()
        .await
        .ok()
        .json();
    let lines = bundle_lines(&rotated);
    let steps: Vec<(&str, &str)> = lines.iter().map(|l| (l.0.as_str(), l.1.as_str())).collect();
    assert_eq!(
        steps,
        vec![("create", "trust"), ("delete", "cleanup")],
        "{rotated}"
    );
    assert_eq!(
        lines[1].2,
        format!("ClusterTrustBundle {name}"),
        "the old CA's bundle goes"
    );
    let after = bundles(&c, &signer).await;
    assert_eq!(after.len(), 1, "{after:?}");
    let (new_name, (_, new_pem)) = after.iter().next().unwrap();
    assert_ne!(new_name, name);
    assert_eq!(ders(new_pem), trusted(&c, &ns.name).await);
    // Events about the bundles, in `default` (they are cluster-scoped), under the chart's
    // identity: the new CA's bundle added, the old one's cleaned up.
    let events: Vec<(&str, &str)> = rotated["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ClusterTrustBundle")
        .map(|e| {
            (
                e["reason"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        events,
        vec![("Created", "recorded"), ("TrustCleanedUp", "recorded")],
        "{rotated}"
    );
    // The trust gate waited for the pod that projects the bundles, by evidence.
    let gates = rotated["gates"].as_array().unwrap();
    assert!(
        gates.iter().any(
            |g| g["pods"].as_array().into_iter().flatten().any(|p| p["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("reader-"))
        ),
        "{rotated}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_or_edited_bundle_is_put_back_and_another_writers_is_left_alone() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-ctb-drift").await;
    let signer = signer(&ns.name);
    let _cleanup = Cleanup(signer.clone());
    let certgen = c.certgen(&ns.name).args([
        "--disable-topology-injector",
        "--cluster-trust-bundle",
        &signer,
    ]);
    certgen.run_async().await.ok();
    let name = bundles(&c, &signer).await.into_keys().next().unwrap();
    let api = bundles_api(&c);

    // Another writer's bundle of the same signer: left alone, and said.
    let theirs = format!("{}:theirs", signer.replace('/', ":"));
    let foreign: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
        "metadata": {"name": theirs},
        "spec": {"signerName": signer, "trustBundle": bundles(&c, &signer).await[&name].1}
    }))
    .unwrap();
    api.create(&PostParams::default(), &foreign).await.unwrap();
    let report = certgen.run_async().await.ok().json();
    let keep = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "clustertrustbundle")
        .unwrap();
    assert_eq!(keep["action"], "keep", "{report}");
    assert!(
        keep["reason"].as_str().unwrap().contains(&theirs),
        "names the bundle it leaves alone: {report}"
    );
    assert!(bundles(&c, &signer).await.contains_key(&theirs));

    // Edited by someone else: written back.
    // Another CA (another install's) in place of the CA: the API server takes only CAs.
    let other_ns = c.namespace("certgen-ctb-other").await;
    c.certgen(&other_ns.name)
        .arg("--disable-topology-injector")
        .run_async()
        .await
        .ok();
    let ca: Secret = c
        .secrets(&other_ns.name)
        .get("envoy-gateway-ca")
        .await
        .unwrap();
    let other = String::from_utf8(super::data(&ca, "tls.crt")).unwrap();
    api.patch(
        &name,
        &PatchParams {
            field_manager: Some("gitops-stand-in".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"spec": {"trustBundle": other}})),
    )
    .await
    .unwrap();
    // `check` names the other writer of the bundle (issue 45).
    let edited = c
        .certgen(&ns.name)
        .check()
        .args([
            "--disable-topology-injector",
            "--cluster-trust-bundle",
            &signer,
        ])
        .run_async()
        .await;
    assert_eq!(edited.code, 1, "{}", edited.stdout);
    let writer = edited.json()["otherWriters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|w| w["name"] == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("the bundle's writer is named: {}", edited.stdout));
    assert_eq!(writer["manager"], "gitops-stand-in", "{writer}");
    assert_eq!(writer["kind"], "ClusterTrustBundle", "{writer}");
    let report = certgen.run_async().await.ok().json();
    assert_eq!(bundle_lines(&report)[0].0, "update-bundle", "{report}");
    assert_eq!(
        ders(&bundles(&c, &signer).await[&name].1),
        trusted(&c, &ns.name).await
    );

    // `check` judges the bundles as the run does: in step now...
    let check = || {
        c.certgen(&ns.name).check().args([
            "--disable-topology-injector",
            "--cluster-trust-bundle",
            &signer,
        ])
    };
    let row = |report: &Value| {
        report["caBundleTargets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["kind"] == "ClusterTrustBundles")
            .cloned()
            .unwrap()
    };
    let healthy = check().run_async().await;
    assert_eq!(healthy.code, 0, "{}", healthy.stdout);
    assert_eq!(row(&healthy.json())["status"], "in_sync");

    // Deleted: `check` says a run has work (exit 1, the signer's row drifted), and the run
    // creates it again.
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    let drifted = check().run_async().await;
    assert_eq!(drifted.code, 1, "{}", drifted.stdout);
    assert_eq!(
        row(&drifted.json())["status"],
        "drifted",
        "{}",
        drifted.stdout
    );
    let report = certgen.run_async().await.ok().json();
    assert_eq!(bundle_lines(&report)[0].0, "create", "{report}");
    assert!(bundles(&c, &signer).await.contains_key(&name));
    assert_eq!(check().run_async().await.code, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_attest_on_the_signer_nothing_is_published_and_the_error_names_the_verb() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-ctb-rbac").await;
    let signer = signer(&ns.name);
    let _cleanup = Cleanup(signer.clone());
    // The chart's identity for another signer: attest is granted on that name only.
    let (_, _identity) = as_chart(&c, &ns.name, "certgen.test/another").await;
    let sa =
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(c.client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .find(|n| n != "default")
            .unwrap();
    let kubeconfig = c.token_kubeconfig(&ns.name, &sa).await;
    let run = Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .args([
            "--disable-topology-injector",
            "--cluster-trust-bundle",
            &signer,
        ])
        .run_async()
        .await;
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("attest"),
        "names the verb: {}",
        run.stderr
    );
    assert!(bundles(&c, &signer).await.is_empty());
    // Found by the access review before the first write: no Secret either.
    let stored = c
        .secrets(&ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(stored.is_empty(), "{} Secret(s) written", stored.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_the_gate_cannot_observe_hold_it_for_their_timer_and_are_named() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-ctb-unobserved").await;
    let elsewhere = c.namespace("certgen-ctb-elsewhere").await;
    let signer = signer(&ns.name);
    let _cleanup = Cleanup(signer.clone());
    let certgen = c.certgen(&ns.name).args([
        "--disable-topology-injector",
        "--cluster-trust-bundle",
        &signer,
    ]);
    certgen.run_async().await.ok();
    let name = bundles(&c, &signer).await.into_keys().next().unwrap();

    // A pod in another namespace that selects the bundles: never poked, so a rotation's trust
    // gate waits for its timer (here 60 s, past the run's 5 s timeout: exit 3, named).
    projecting(
        &c,
        &elsewhere.name,
        "far",
        json!({"signerName": signer, "labelSelector": {}, "path": "ca.crt"}),
    )
    .await;
    let run = certgen
        .clone()
        .propagation_delay("60s")
        .args(["--overwrite", "--timeout", "5s"])
        .run_async()
        .await;
    assert_eq!(
        run.code, 3,
        "the gate holds: {}\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stdout.contains(&format!("{}/far-", elsewhere.name))
            || run.stderr.contains(&format!("{}/far-", elsewhere.name)),
        "names the pod: {}\n{}",
        run.stdout,
        run.stderr
    );
    // The leaves were not switched: every Secret still trusts the old CA beside the new one.
    assert_eq!(trusted(&c, &ns.name).await.len(), 2);
    drop(elsewhere);

    // A pod here that pins the old CA's bundle by name: the kubelet may serve it from its cache
    // for 5 minutes, so even a 0 s delay waits that long (exit 3 at the 5 s timeout).
    projecting(
        &c,
        &ns.name,
        "pinned",
        json!({"name": name, "path": "ca.crt"}),
    )
    .await;
    let run = certgen
        .clone()
        .args(["--overwrite", "--timeout", "5s"])
        .run_async()
        .await;
    let out = format!("{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, 3, "{out}");
    assert!(out.contains("by name"), "says why: {out}");
    assert!(
        out.contains(&format!("{}/pinned-", ns.name)),
        "names the pod: {out}"
    );
}

#[test]
fn the_chart_grants_the_bundle_verbs_only_when_bundles_are_configured() {
    let Some(helm) = helm() else { return };
    let rules_of = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] == "ClusterRole")
            .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let touches = |rules: &[Value], resource: &str| {
        rules.iter().any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
        })
    };
    // Without bundles: nothing about them, no attest, no cluster-wide pods.
    let plain = documents(&template(&helm, "ns1", &[]));
    let rules = rules_of(&plain);
    for r in ["clustertrustbundles", "signers", "pods"] {
        assert!(
            !touches(&rules, r),
            "{r} granted without bundles: {rules:#?}"
        );
    }
    // With them: attest on exactly the configured signers (the values' and the config's).
    let config = "name: eg\nnamespace: ns1\nca: {secretName: eg-ca, commonName: eg}\nsecrets:\n  - {name: eg, type: tls, commonName: eg, dnsNames: [eg]}\nclusterTrustBundles:\n  - signerName: example.com/from-config\n";
    let dir = crate::util::tempdir();
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        format!(
            "clusterTrustBundles: [example.com/mesh]\nconfig: |\n{}",
            config
                .lines()
                .map(|l| format!("  {l}\n"))
                .collect::<String>()
        ),
    )
    .unwrap();
    let docs = documents(&template(&helm, "ns1", &["-f", values.to_str().unwrap()]));
    let rules = rules_of(&docs);
    let attest: Vec<&Value> = rules
        .iter()
        .filter(|r| r["verbs"].as_array().unwrap().iter().any(|v| v == "attest"))
        .collect();
    assert!(!attest.is_empty(), "{rules:#?}");
    for r in &attest {
        assert_eq!(
            r["resourceNames"],
            json!(["example.com/mesh", "example.com/from-config"]),
            "{r:#}"
        );
        assert_eq!(r["resources"], json!(["signers"]));
    }
    assert!(touches(&rules, "clustertrustbundles"));
    // The hook and the CronJob pass the values' signer; the config's comes with the config.
    let args: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] == "Job" || d["kind"] == "CronJob")
        .flat_map(|d| {
            let spec = if d["kind"] == "Job" {
                &d["spec"]["template"]
            } else {
                &d["spec"]["jobTemplate"]["spec"]["template"]
            };
            spec["spec"]["containers"][0]["args"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(
        args.windows(2)
            .any(|w| w[0] == "--cluster-trust-bundle" && w[1] == "example.com/mesh"),
        "{args:?}"
    );
}

/// Whether the API server serves `certificates.k8s.io/v1` ClusterTrustBundles (1.37 and later).
async fn served(c: &Cluster) -> bool {
    match c
        .client
        .list_api_group_resources("certificates.k8s.io/v1")
        .await
    {
        Ok(list) => list
            .resources
            .iter()
            .any(|r| r.name == "clustertrustbundles"),
        Err(_) => false,
    }
}

/// In `tests/run-oldest`'s smoke set (Kubernetes 1.35, where ClusterTrustBundles are not
/// served) and in the whole suite (1.37, where an identity that may not list them meets the
/// same check): the run stops before its first write, saying what to do, and nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn without_cluster_trust_bundles_to_list_the_run_stops_before_any_write() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-ctb-none").await;
    let signer = signer(&ns.name);
    let _cleanup = Cleanup(signer.clone());
    let served = served(&c).await;
    let certgen = if served {
        // Everything in the namespace, nothing cluster-wide.
        let kubeconfig = c
            .service_account_kubeconfig(
                &ns.name,
                "no-bundles",
                vec![
                    super::rule(
                        &[""],
                        &["secrets"],
                        &["get", "list", "create", "update", "patch"],
                    ),
                    super::rule(
                        &["coordination.k8s.io"],
                        &["leases"],
                        &["get", "create", "update", "delete"],
                    ),
                ],
            )
            .await;
        Certgen::new(&kubeconfig).namespace(&ns.name)
    } else {
        c.certgen(&ns.name)
    };
    let run = certgen
        .args([
            "--disable-topology-injector",
            "--cluster-trust-bundle",
            &signer,
        ])
        .run_async()
        .await;
    assert_ne!(run.code, 0, "{}", run.stdout);
    let want = if served { "create" } else { "1.37" };
    assert!(
        run.stderr.contains(want) && run.stderr.contains("clustertrustbundles"),
        "says what to do ({want}): {}",
        run.stderr
    );
    let stored = c
        .secrets(&ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        stored.is_empty(),
        "nothing written: {:?}",
        stored
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_exporter_watches_the_bundles_under_the_charts_identity() {
    use super::exporter::Exporter;

    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("certgen-ctb-exporter").await;
    let signer = signer(&ns.name);
    let _cleanup = Cleanup(signer.clone());
    // The chart's exporter identity with the bundles configured, exactly as rendered.
    let set = format!("clusterTrustBundles[0]={signer}");
    let rendered = template(
        &helm,
        &ns.name,
        &[
            "--set",
            "metrics.enabled=true",
            "--set",
            "topologyInjector=false",
            "--set",
            &set,
        ],
    );
    let identity: Vec<Value> = documents(&rendered)
        .into_iter()
        .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == "exporter")
        .filter(|d| d["kind"] != "Deployment" && d["kind"] != "Service")
        .collect();
    let mut keep = Vec::new();
    for d in identity.iter().filter(|d| d["kind"] == "ClusterRole") {
        let name = d["metadata"]["name"].as_str().unwrap();
        keep.push(DeleteOnDrop::new::<ClusterRole>(name));
        keep.push(DeleteOnDrop::new::<ClusterRoleBinding>(name));
    }
    assert!(!keep.is_empty(), "a ClusterRole for the bundles");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": identity}).to_string();
    let (ok, out) = c.kubectl_stdin(&["create"], &list);
    assert!(ok, "{out}");
    let sa = identity
        .iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let kubeconfig = c.token_kubeconfig(&ns.name, &sa).await;
    let certgen = c.certgen(&ns.name).args([
        "--disable-topology-injector",
        "--cluster-trust-bundle",
        &signer,
    ]);
    certgen.run_async().await.ok();

    let exporter = Exporter::start_with(
        &kubeconfig,
        &ns.name,
        &[
            "--disable-topology-injector",
            "--cluster-trust-bundle",
            &signer,
        ],
        &[],
    );
    let series = |status: &str| {
        format!(
            "certgen_cabundle_target_status{{namespace=\"{}\",target_kind=\"ClusterTrustBundles\",target=\"{signer}\",secret=\"envoy-gateway\",status=\"{status}\"}} 1",
            ns.name
        )
    };
    let watched = exporter.metrics_until("the bundles in step", |m| m.contains(&series("in_sync")));
    assert!(
        watched.contains("certgen_exporter_watch_synced{resource=\"clustertrustbundles\"} 1"),
        "{watched}"
    );
    // Deleted behind certgen's back: drifted, from the watch alone; the run puts it back.
    let name = bundles(&c, &signer).await.into_keys().next().unwrap();
    bundles_api(&c)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    exporter.metrics_until("drifted", |m| m.contains(&series("drifted")));
    certgen.run_async().await.ok();
    exporter.metrics_until("in step again", |m| m.contains(&series("in_sync")));
    exporter.stop();
}
