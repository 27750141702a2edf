//! Pushed propagation on the real control plane (kwok runs the pods): certgen annotates the
//! pods that mount a changed Secret (their metadata only), opens gates on that evidence long
//! before `--propagation-delay`, reports a pod that mounts a managed Secret outside every
//! declared consumer, and, when a poke is lost (403), keeps the timer. What a poke does in a
//! real kubelet is measured by `bench/kubelet-propagation` and `cluster::real_node`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{cluster, deployment, rolled_out, rule};

/// A Deployment of two pods that mount `secret` at /certs, labelled `labels` (Deployment and
/// pods).
fn mounting(name: &str, secret: &str, labels: Value) -> k8s_openapi::api::apps::v1::Deployment {
    mounting_n(name, secret, labels, 2)
}

/// [`mounting`] with `replicas` pods.
pub(super) fn mounting_n(
    name: &str,
    secret: &str,
    labels: Value,
    replicas: i32,
) -> k8s_openapi::api::apps::v1::Deployment {
    let mut pod_labels = labels.clone();
    pod_labels["app"] = json!(name);
    let mut d = deployment(
        name,
        replicas,
        json!({"template": {
            "metadata": {"labels": pod_labels},
            "spec": {
                "containers": [{"name": "app", "image": "fake.invalid/app:1",
                    "volumeMounts": [{"name": "certs", "mountPath": "/certs"}]}],
                "volumes": [{"name": "certs", "projected": {"sources": [{"secret": {"name": secret}}]}}],
            },
        }}),
    );
    d.metadata.labels = serde_json::from_value(labels).unwrap();
    d
}

fn annotations(p: &Pod) -> BTreeMap<String, String> {
    p.metadata.annotations.clone().unwrap_or_default()
}

/// Sets up the Secrets (a fresh install) and four Deployments on kwok: the hot
/// `envoy-gateway` consumer, the `envoy-proxies` consumer (by its selector), the restart-only
/// `envoy-ratelimit` (whose new pods are evidence, its old ones not), and `debug`, which
/// mounts the `envoy` Secret but is no consumer. Returns the pods API.
pub(super) async fn setup(c: &super::Cluster, ns: &str) -> Api<Pod> {
    c.certgen(ns).run_async().await.ok();
    let proxy_labels = json!({
        "app.kubernetes.io/managed-by": "envoy-gateway",
        "app.kubernetes.io/component": "proxy",
    });
    for d in [
        mounting("envoy-gateway", "envoy-gateway", json!({})),
        mounting("envoy-proxy", "envoy", proxy_labels),
        mounting("envoy-ratelimit", "envoy-rate-limit", json!({})),
        mounting("debug", "envoy", json!({})),
    ] {
        let name = d.metadata.name.clone().unwrap();
        let api = c.create_deployment(ns, &d).await;
        rolled_out(&api, &name, Duration::from_secs(120)).await;
    }
    Api::namespaced(c.client.clone(), ns)
}

#[tokio::test(flavor = "multi_thread")]
async fn pokes_open_every_gate_on_evidence_and_a_pod_outside_the_consumers_is_reported() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("pokes").await;
    let pods = setup(&c, &ns.name).await;
    // The hot pods: poked in place. (certgen restarts envoy-ratelimit after each step.)
    let hot = |p: &Pod| {
        !p.metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("envoy-ratelimit-")
    };
    let before: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| hot(p))
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.metadata.uid.clone().unwrap(),
            )
        })
        .collect();

    // A minute per gate would make this run take more than two: evidence must open them.
    let started = Instant::now();
    let r = c
        .certgen(&ns.name)
        .propagation_delay("60s")
        .args(["--overwrite", "--timeout", "150s"])
        .run_async()
        .await
        .ok();
    let took = started.elapsed();
    let report = r.json();
    let gates = report["gates"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        gates.len(),
        2,
        "trust→leaves and leaves→cleanup: {report:#}"
    );
    for g in &gates {
        assert_eq!(g["openedBy"], "evidence", "{report:#}");
        assert!(g["seconds"].as_f64().unwrap() < 30.0, "{g}");
    }
    assert!(took < Duration::from_secs(60), "took {took:?}: {report:#}");
    assert!(report["note"].is_null(), "the cleanup was done: {report:#}");
    let ca = c.secrets(&ns.name).get("envoy").await.unwrap();
    assert_eq!(
        pem::parse_many(super::data(&ca, "ca.crt")).unwrap().len(),
        1,
        "the old CA is gone from the bundle"
    );

    // Every pod mounting a changed Secret was poked, the stray one included; nothing restarted.
    let lines = report["pods"].as_array().cloned().unwrap_or_default();
    let action = |name: &str, action: &str| {
        lines
            .iter()
            .any(|l| l["name"].as_str() == Some(name) && l["action"] == action)
    };
    let now: Vec<Pod> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| hot(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(now.len(), before.len(), "no pod was replaced");
    for p in &now {
        let name = p.metadata.name.clone().unwrap();
        assert_eq!(
            before[&name],
            p.metadata.uid.clone().unwrap(),
            "{name} kept its UID"
        );
        let ann = annotations(p);
        assert!(
            ann.contains_key(certgen::k8s::POKE_FINGERPRINT)
                && ann.contains_key(certgen::k8s::POKED_AT),
            "{name} was not poked: {ann:?}"
        );
        assert!(
            action(&name, "poked"),
            "{name} not reported poked: {lines:#?}"
        );
    }
    // Restart-only pods are restarted, not poked.
    assert!(
        !lines
            .iter()
            .any(|l| l["name"].as_str().unwrap().starts_with("envoy-ratelimit-")),
        "{lines:#?}"
    );
    for d in ["envoy-gateway", "envoy-proxy", "debug"] {
        assert_eq!(
            c.deployments(&ns.name)
                .get(d)
                .await
                .unwrap()
                .metadata
                .generation,
            Some(1),
            "a poke must not touch {d}'s template"
        );
    }
    // The stray pods are warned about and reported; the consumers' pods are not.
    let unowned: Vec<&str> = lines
        .iter()
        .filter(|l| l["action"] == "unowned")
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(unowned.len(), 2, "{lines:#?}");
    assert!(
        unowned.iter().all(|n| n.starts_with("debug-")),
        "{unowned:?}"
    );
    assert!(r.stderr.contains("no declared consumer"), "{}", r.stderr);
    assert!(
        lines
            .iter()
            .filter(|l| l["action"] == "poked")
            .filter(|l| l["name"].as_str().unwrap().starts_with("envoy-proxy-"))
            .all(|l| l["consumer"] == "envoy-proxies"),
        "{lines:#?}"
    );

    // A dry run shows the pokes it would make.
    let r = c
        .certgen(&ns.name)
        .args(["--overwrite", "--dry-run"])
        .run_async()
        .await
        .ok();
    let planned = r.json()["pods"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        planned
            .iter()
            .filter(|l| l["action"] == "would-poke")
            .count(),
        // Not the restart-only pods: a run restarts them instead.
        now.len(),
        "{planned:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_poke_never_opens_a_gate_the_timer_does() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("lostpoke").await;
    setup(&c, &ns.name).await;
    // Pods may be listed but not patched: every poke is refused (403).
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "certgen",
            vec![
                rule(&[""], &["secrets"], &["get", "create", "update", "patch"]),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["get", "create", "update", "delete"],
                ),
                rule(
                    &["apps"],
                    &["deployments"],
                    &["get", "list", "watch", "patch"],
                ),
                rule(&[""], &["pods"], &["list"]),
            ],
        )
        .await;
    let started = Instant::now();
    let r = super::Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .propagation_delay("8s")
        .args(["--overwrite", "--timeout", "120s"])
        .run_async()
        .await
        .ok();
    let took = started.elapsed();
    let report = r.json();
    let gates = report["gates"].as_array().cloned().unwrap_or_default();
    assert_eq!(gates.len(), 2, "{report:#}");
    for g in &gates {
        assert_eq!(
            g["openedBy"], "timer",
            "a lost poke opened a gate: {report:#}"
        );
    }
    assert!(
        took >= Duration::from_secs(16),
        "two 8 s gates took {took:?}"
    );
    let skipped = report["skipped"].to_string();
    assert!(
        skipped.contains("pods not poked") && skipped.contains("patch"),
        "{skipped}"
    );
    assert!(
        report["pods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["action"] == "failed"),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_lost_poke_keeps_its_gate_on_the_timer_while_the_other_pods_are_poked() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("onelost").await;
    setup(&c, &ns.name).await;
    // Every poke of envoy-gateway's pods fails (an API error, not a refusal): the other pods
    // are still poked, but those gates may open only on the timer.
    let started = Instant::now();
    let r = c
        .certgen(&ns.name)
        .propagation_delay("8s")
        .args(["--overwrite", "--timeout", "120s"])
        .env(certgen::k8s::LOSE_POKE_ENV, "envoy-gateway-")
        .run_async()
        .await
        .ok();
    let took = started.elapsed();
    let report = r.json();
    let gates = report["gates"].as_array().cloned().unwrap_or_default();
    assert_eq!(gates.len(), 2, "{report:#}");
    for g in &gates {
        assert_eq!(
            g["openedBy"], "timer",
            "a lost poke opened a gate: {report:#}"
        );
    }
    assert!(
        took >= Duration::from_secs(16),
        "two 8 s gates took {took:?}"
    );
    let lines = report["pods"].as_array().cloned().unwrap();
    let of = |prefix: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["name"].as_str().unwrap().starts_with(prefix) && l["action"] != "unowned")
            .collect()
    };
    assert!(
        of("envoy-gateway-").iter().all(|l| l["action"] == "failed"),
        "{lines:#?}"
    );
    assert!(
        of("envoy-proxy-").iter().all(|l| l["action"] == "poked"),
        "{lines:#?}"
    );
    assert_eq!(of("envoy-proxy-").len(), 2, "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_pod_verbs_the_gates_wait_the_delay_and_say_so() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("nopods").await;
    setup(&c, &ns.name).await;
    // Envoy Gateway's Role has no pod verbs at all.
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "certgen",
            vec![rule(&[""], &["secrets"], &["get", "create", "update"])],
        )
        .await;
    let started = Instant::now();
    let r = super::Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .propagation_delay("5s")
        .args([
            "--overwrite",
            "--timeout",
            "120s",
            "--disable-topology-injector",
        ])
        .run_async()
        .await
        .ok();
    let report = r.json();
    assert!(started.elapsed() >= Duration::from_secs(10), "{report:#}");
    let skipped = report["skipped"].to_string();
    assert!(
        skipped.contains("pods not poked: this identity may not list pods"),
        "{skipped}"
    );
    assert!(
        report["gates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["openedBy"] == "timer")
    );
}

/// The proxies' labels: the `envoy-proxies` consumer of the envoy-gateway profile selects them.
fn proxy_labels() -> Value {
    json!({
        "app.kubernetes.io/managed-by": "envoy-gateway",
        "app.kubernetes.io/component": "proxy",
    })
}

/// 60 kwok pods of the `envoy-proxies` consumer mounting `envoy`, rolled out.
async fn sixty_proxies(c: &super::Cluster, ns: &str) {
    let api = c
        .create_deployment(ns, &mounting_n("envoy-proxy", "envoy", proxy_labels(), 60))
        .await;
    rolled_out(&api, "envoy-proxy", Duration::from_secs(180)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sixty_pods_are_listed_in_pages_of_one_snapshot() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("podpages").await;
    sixty_proxies(&c, &ns.name).await;
    // certgen's own client layers over the test's kubeconfig, with the pod LISTs recorded.
    let config = kube::Config::infer().await.unwrap();
    let lists = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = lists.clone();
    let record =
        tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            if req.method() == http::Method::GET && req.uri().path().ends_with("/pods") {
                seen.lock()
                    .unwrap()
                    .push(req.uri().query().unwrap_or("").to_string());
            }
            req
        });
    let builder = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&record);
    let pods = certgen::k8s::Pods::new(certgen::k8s::layered(builder), &ns.name);
    let listed = pods.list_in_pages(7).await.unwrap();
    let names: std::collections::BTreeSet<&str> = listed.iter().map(|p| p.name.as_str()).collect();
    assert_eq!((listed.len(), names.len()), (60, 60), "every pod once");
    let lists = lists.lock().unwrap().clone();
    // 60 pods in pages of 7: 9 requests; the first a quorum read (no resourceVersion), each
    // later one continuing the first one's snapshot.
    assert_eq!(lists.len(), 9, "{lists:#?}");
    assert!(
        lists
            .iter()
            .all(|q| q.contains("limit=7") && !q.contains("resourceVersion")),
        "{lists:#?}"
    );
    assert!(!lists[0].contains("continue="), "{lists:#?}");
    assert!(
        lists[1..].iter().all(|q| q.contains("continue=")),
        "{lists:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sixty_pods_are_poked_within_the_budget_at_every_step() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("pokebudget").await;
    c.certgen(&ns.name).run_async().await.ok();
    sixty_proxies(&c, &ns.name).await;
    // 2 in flight, 20 a second, pages of 25 pods: 60 pokes take 3 s at least per step.
    let r = c
        .certgen(&ns.name)
        .propagation_delay("90s")
        .args(["--overwrite", "--timeout", "170s"])
        .env(certgen::rotation::IN_FLIGHT_ENV, "2")
        .env(certgen::rotation::PER_SECOND_ENV, "20")
        .env(certgen::k8s::POD_PAGE_ENV, "25")
        .run_async()
        .await
        .ok();
    // The API server's own record of each pod's last poke (the cleanup's): spread over 3 s at
    // least, where 60 unpaced PATCHes land within a second.
    let times: Vec<i64> = Api::<Pod>::namespaced(c.client.clone(), &ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| {
            p.metadata
                .managed_fields
                .iter()
                .flatten()
                .find(|m| m.manager.as_deref() == Some("certgen"))
                .and_then(|m| m.time.as_ref())
                .map(|t| t.0.as_second())
        })
        .collect();
    assert_eq!(times.len(), 60);
    let spread = times.iter().max().unwrap() - times.iter().min().unwrap();
    assert!(
        spread >= 2,
        "the last pokes landed within {spread}s: not paced"
    );
    let report = r.json();
    let gates = report["gates"].as_array().cloned().unwrap_or_default();
    assert_eq!(gates.len(), 2, "{report:#}");
    for g in &gates {
        assert_eq!(g["openedBy"], "evidence", "{g:#}");
        let p = &g["pokes"];
        assert_eq!(
            (
                p["poked"].as_u64(),
                p["throttled"].as_u64(),
                p["failed"].as_u64()
            ),
            (Some(60), Some(0), Some(0)),
            "{g:#}"
        );
        assert!(
            p["seconds"].as_f64().unwrap() >= 2.9,
            "paced at 20/s: {g:#}"
        );
    }
    // Three steps, each poking the 60 pods once.
    assert_eq!(report["pokes"]["poked"], 180, "{report:#}");
}
