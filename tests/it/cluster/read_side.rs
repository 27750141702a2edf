//! What operators read must be true (issue 32), on the real control plane: `check` against a
//! TLS Secret of the wrong type, a ResourceQuota named as a quota with what was written before
//! it refused, reads paginated (`check`'s and a run's LIST, the exporter's first LIST), and the
//! exporter's watch logging a refusal once, never a false "works again", and no kube-runtime
//! lines. Local mode's side is in `read_side`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ResourceQuota, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;

use super::exporter::{Exporter, requests};
use super::{cluster, rule};

/// Small unrelated Secrets (`n`, named `other-N`) in `ns`.
async fn unrelated(api: &Api<Secret>, n: usize) {
    for i in 0..n {
        let s = Secret {
            metadata: ObjectMeta {
                name: Some(format!("other-{i}")),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "x".to_string(),
                k8s_openapi::ByteString(vec![1; 64]),
            )])),
            ..Default::default()
        };
        api.create(&PostParams::default(), &s).await.unwrap();
    }
}

/// Issue 32, finding 3: a TLS Secret recreated with `type: Opaque` is refused by every run
/// (exit 2, `--force` included); `check` said 0 and the exporter `status="ok"`.
#[tokio::test]
async fn check_says_what_a_run_refuses_a_tls_secret_of_another_type() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-type").await;
    c.certgen(&ns.name).quiet().run().ok();
    let api = c.secrets(&ns.name);
    let envoy = api.get("envoy").await.unwrap();
    api.delete("envoy", &Default::default()).await.unwrap();
    let recreated = Secret {
        metadata: ObjectMeta {
            name: Some("envoy".into()),
            labels: envoy.metadata.labels.clone(),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: envoy.data.clone(),
        ..Default::default()
    };
    api.create(&PostParams::default(), &recreated)
        .await
        .unwrap();
    let run = c.certgen(&ns.name).quiet().run();
    assert_eq!(run.code, 2, "{}", run.stderr);
    let check = c.certgen(&ns.name).check().run();
    assert_eq!(check.code, 1, "{}", check.stdout);
    let report = check.json();
    assert_eq!(report["nextRun"]["action"], "refuses", "{report}");
    let row = crate::util::check_row(&report, "envoy");
    assert_eq!(row["status"], "invalid", "{row}");
    let metrics = crate::util::Run::of(
        crate::util::certgen()
            .args(["check", "--kubeconfig"])
            .arg(&c.kubeconfig)
            .args(["-n", &ns.name, "--output", "prometheus"]),
    );
    assert!(
        metrics.stdout.contains(&format!(
            "certgen_secret_status{{namespace=\"{}\",secret=\"envoy\",kind=\"tls\",status=\"invalid\"}} 1",
            ns.name
        )),
        "{}",
        metrics.stdout
    );
}

/// Issue 32, finding 6: a ResourceQuota refusing a Secret midway was reported as missing
/// RBAC, and the JSON error had no `written` (exit 5 dropped it).
#[tokio::test]
async fn a_quota_is_named_as_a_quota_and_the_error_says_what_was_written() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-quota").await;
    let quotas: Api<ResourceQuota> = Api::namespaced(c.client.clone(), &ns.name);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "secrets"},
        "spec": {"hard": {"count/secrets": "2"}},
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    // The quota controller fills in the status the admission plugin enforces.
    let deadline = Instant::now() + Duration::from_secs(30);
    while quotas
        .get("secrets")
        .await
        .unwrap()
        .status
        .and_then(|s| s.hard)
        .is_none()
    {
        assert!(Instant::now() < deadline, "the quota was never computed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let run = c.certgen(&ns.name).run_async().await;
    assert_eq!(run.code, 5, "{}\n{}", run.stdout, run.stderr);
    let error = &run.json()["error"];
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("a ResourceQuota in namespace"),
        "{message}"
    );
    assert!(!message.contains("grant the create verb"), "{message}");
    let written: Vec<&str> = error["written"]
        .as_array()
        .unwrap_or_else(|| panic!("no `written` in {error}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        written.iter().any(|w| w.contains("envoy-gateway-ca")),
        "{written:?}"
    );
    assert_eq!(error["exitCode"], 5);
}

/// Issue 35, item 2: `check`'s (and a run's) LIST of the namespace's Secrets is read in pages,
/// keeping only the managed ones: 45 unrelated Secrets beside 10 managed ones take three pages.
#[tokio::test]
async fn check_and_a_run_read_the_secrets_in_pages() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-pages").await;
    unrelated(&c.secrets(&ns.name), 45).await;
    // A config with ten TLS Secrets: a LIST, not ten GETs.
    let mut config = String::from(
        "name: pages\nnamespace: default\nca:\n  secretName: pages-ca\n  commonName: pages\n  keyAlgorithm: ecdsa-p256\n  validity: 1825d\n  renewBefore: 90d\nsecrets:\n",
    );
    for i in 0..10 {
        config.push_str(&format!(
            "  - name: leaf-{i}\n    type: tls\n    dnsNames: [\"leaf-{i}.{{namespace}}\"]\n"
        ));
    }
    let dir = crate::util::tempdir();
    let path = crate::util::write(dir.path(), "pages.yaml", &config);
    let args = ["--config", path.to_str().unwrap()];
    c.certgen(&ns.name).quiet().args(args).run().ok();
    let dry = c
        .certgen(&ns.name)
        .quiet()
        .args(args)
        .arg("--dry-run")
        .run()
        .ok();
    let lists = dry.json()["apiRequests"]["list"].as_u64().unwrap();
    // 45 + 11 Secrets in pages of 20.
    assert_eq!(lists, 3, "{}", dry.stdout);
    let check = c.certgen(&ns.name).check().args(args).run();
    assert_eq!(check.code, 0, "{}", check.stdout);
}

/// Issue 35, item 2: the exporter's first LIST is read in pages (a namespace's other Secrets
/// cost one page of memory at a time), and it still reports the managed Secrets.
#[tokio::test]
async fn the_exporters_first_list_is_read_in_pages() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-exporter-pages").await;
    unrelated(&c.secrets(&ns.name), 45).await;
    c.certgen(&ns.name).quiet().run().ok();
    let exporter = Exporter::start_with(
        &c.kubeconfig,
        &ns.name,
        &["--disable-topology-injector"],
        &[],
    );
    let text = exporter.metrics_until("ready", |t| t.contains("certgen_check_healthy{"));
    assert_eq!(
        requests(&text, "list"),
        3.0,
        "45 + 5 Secrets in pages of 20"
    );
    assert!(
        text.contains(&format!(
            "certgen_check_healthy{{namespace=\"{}\",profile=\"envoy-gateway\"}} 1",
            ns.name
        )),
        "{text}"
    );
    exporter.stop();
}

/// Issue 32, finding 7: refused its watch, the exporter logged "works again" on every retry
/// (kube's watcher announces a relist before making it), and kube-runtime's own lines (a debug
/// dump per retry) appeared, `-q` included. Now: one warning, no "works again", nothing of
/// kube-runtime's.
#[tokio::test]
async fn a_refused_watch_is_said_once_and_never_said_to_work_again() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-exporter-refused").await;
    // May read Secrets by name, not list or watch them.
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "no-list",
            vec![rule(&[""], &["secrets"], &["get"])],
        )
        .await;
    for quiet in [false, true] {
        let args: &[&str] = if quiet {
            &["--disable-topology-injector", "-q"]
        } else {
            &["--disable-topology-injector"]
        };
        let exporter = Exporter::start_with(&kubeconfig, &ns.name, args, &[]);
        // Long enough for kube's backoff to retry a few times.
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(exporter.get("/readyz").0, 503);
        let lines = exporter.lines.lock().unwrap().clone();
        let failed = lines
            .iter()
            .filter(|l| l.contains("watching Secrets in namespace") && l.contains("failed"))
            .count();
        assert_eq!(failed, 1, "-q {quiet}: {lines:#?}");
        assert!(
            !lines.iter().any(|l| l.contains("works again")),
            "-q {quiet}: {lines:#?}"
        );
        // kube-runtime's own: "watch list error with 403: Api(Status { .. })" every retry.
        assert!(
            !lines.iter().any(|l| l.contains("list error")
                || l.contains("watcher error")
                || l.contains("Api(Status")),
            "-q {quiet}: {lines:#?}"
        );
        exporter.stop();
    }
}
