//! Beside cert-manager, on the test control plane with the real cert-manager controller and CA
//! injector (`tests/testenv/cert-manager-up`, which exports `CERTGEN_CERT_MANAGER`):
//!
//! - the CA injector and certgen configured on one webhook: certgen never writes its
//!   `caBundle` (read back after every run, managedFields included), its runs, dry run, `check`
//!   and metrics say the target is cert-manager's; what the injector does meanwhile is printed;
//! - certgen → cert-manager (`certgen handover cert-manager --apply`), then a cert-manager
//!   renewal, with the rotation harness's peers handshaking throughout: 0 failures, and
//!   certgen's runs stand down;
//! - cert-manager → certgen: Secrets issued by cert-manager (a self-signed CA and a CA Issuer)
//!   refused while their Certificates exist, adopted once they are deleted, then certgen's
//!   staged rotation, peers handshaking throughout: 0 failures;
//! - kube-webhook-certgen → cert-manager (docs/cert-manager.md's order for
//!   prometheus-community/helm-charts#6666) with a real admission webhook called throughout:
//!   0 rejected calls.
//!
//! `-- --nocapture` prints the handshake and admission counts and what the injector wrote.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use super::harness::{Peers, config_yaml};
use super::kwc_rotation::{Webhook, configuration, report, under_load};
use super::{Cluster, cluster, data_map, deployment};
use crate::util::Run;

/// The one CA injector every test here shares: a test that stops it holds this exclusively,
/// the others share it, so that no other test's injection waits behind a stopped injector.
static INJECTOR: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The test cluster when cert-manager runs beside it, with a shared hold on its CA injector;
/// `None` (with a note) when it does not run, outside CI.
async fn with_cert_manager() -> Option<(Cluster, tokio::sync::RwLockReadGuard<'static, ()>)> {
    let c = with_cert_manager_alone().await?;
    Some((c, INJECTOR.read().await))
}

/// The test cluster when cert-manager runs beside it; `None` (with a note) when it does not,
/// outside CI.
async fn with_cert_manager_alone() -> Option<Cluster> {
    let c = cluster().await?;
    if std::env::var_os("CERTGEN_CERT_MANAGER").is_none() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "CI is set but cert-manager is not running: eval \"$(tests/testenv/cert-manager-up)\" (tests/run-all does)"
            );
        }
        eprintln!(
            "note: CERTGEN_CERT_MANAGER is not set; skipping a cert-manager test (run tests/testenv/cert-manager-up)"
        );
        return None;
    }
    Some(c)
}

fn cm_api(c: &Cluster, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cert-manager.io", "v1", kind);
    Api::namespaced_with(
        c.client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// Waits until cert-manager's `kind` `ns/name` is Ready.
async fn ready(c: &Cluster, ns: &str, kind: &str, plural: &str, name: &str) -> DynamicObject {
    let api = cm_api(c, ns, kind, plural);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(o) = api.get(name).await {
            let ok = o.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            if ok {
                return o;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{kind} {ns}/{name} not ready in 90 s: {:?}",
            api.get(name).await.map(|o| o.data["status"].clone())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn apply(c: &Cluster, yaml: &str) {
    let (ok, out) = c.kubectl_stdin(&["apply"], yaml);
    assert!(ok, "kubectl apply: {out}");
}

fn cas(pem: &[u8]) -> Vec<certgen::pki::Cert> {
    certgen::pki::parse_cert_chain(pem).unwrap_or_default()
}

fn short(pem: &[u8]) -> Vec<String> {
    cas(pem).iter().map(|c| c.short_fingerprint()).collect()
}

/// A namespace for the rotation harness's peers: its config written, and the restart-only
/// consumer's Deployment.
async fn harness_namespace(
    c: &Cluster,
    prefix: &str,
) -> (super::TestNs, tempfile::TempDir, String) {
    let ns = c.namespace(prefix).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&dir, &config_yaml(&ns.name));
    c.create_deployment(&ns.name, &deployment("envoy-ratelimit", 1, json!({})))
        .await;
    (ns, dir, cfg)
}

/// The harness's config plus a `caBundle` target following `envoy-gateway`.
fn config_with_target(ns: &str, kind: &str, name: &str) -> String {
    format!(
        "{}webhooks:\n  - kind: {kind}\n    name: {name}\n    caBundleFrom: envoy-gateway\n",
        config_yaml(ns)
    )
}

fn write_config(dir: &tempfile::TempDir, yaml: &str) -> String {
    let path = dir.path().join("certgen.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.to_str().unwrap().to_string()
}

/// A ValidatingWebhookConfiguration as the API server holds it: its first entry's caBundle and
/// every field manager that ever wrote it.
async fn webhook_state(c: &Cluster, name: &str) -> (Vec<u8>, Vec<String>) {
    let v = Api::<ValidatingWebhookConfiguration>::all(c.client.clone())
        .get(name)
        .await
        .unwrap();
    let managers = v
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    let bundle = v.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .map(|b| b.0)
        .unwrap_or_default();
    (bundle, managers)
}

/// A ValidatingWebhookConfiguration `hook` (its webhook `<entry>.certgen.dev`) whose caBundle
/// cert-manager's CA injector fills in from certgen's Secret `envoy-gateway` in `ns`, once the
/// injector has written it; deleted on drop.
async fn injected_webhook(c: &Cluster, ns: &str, hook: &str, entry: &str) -> super::DeleteOnDrop {
    // The injector reads a Secret only when the Secret allows it; that annotation does not make
    // the Secret cert-manager's (certgen still manages it).
    let annotate = c
        .kubectl()
        .args([
            "annotate",
            "secret",
            "envoy-gateway",
            "-n",
            ns,
            "cert-manager.io/allow-direct-injection=true",
        ])
        .output()
        .unwrap();
    assert!(annotate.status.success());
    apply(
        c,
        &format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {hook}
  labels: {{certgen.dev/test: "true"}}
  annotations: {{cert-manager.io/inject-ca-from-secret: {ns}/envoy-gateway}}
webhooks:
- name: {entry}.certgen.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig: {{url: "https://127.0.0.1:9/"}}
  rules: [{{apiGroups: ["certgen.dev"], apiVersions: ["v1"], operations: [CREATE], resources: [nothing]}}]
"#
        ),
    );
    let guard = super::DeleteOnDrop::new::<ValidatingWebhookConfiguration>(hook);
    let deadline = Instant::now() + Duration::from_secs(60);
    while webhook_state(c, hook).await.0.is_empty() {
        assert!(Instant::now() < deadline, "the injector never wrote");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    guard
}

#[tokio::test]
async fn the_ca_injector_and_certgen_on_one_webhook_never_fight() {
    let Some((c, _injector)) = with_cert_manager().await else {
        return;
    };
    let ns = c.namespace("certgen-cm-inject").await;
    let hook = format!("{}-injected", ns.name);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        &dir,
        &config_with_target(&ns.name, "ValidatingWebhookConfiguration", &hook),
    );
    let certgen = c.certgen(&ns.name).args(["--config", &cfg]);
    let first = certgen.run_async().await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let _hook = injected_webhook(&c, &ns.name, &hook, "injected").await;

    // Every version of the object the API server holds from now on, by a watch: the writers
    // of each (a write by certgen would show even if the injector took the field back at once).
    let writers: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let versions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watch = {
        let (writers, versions) = (writers.clone(), versions.clone());
        let api = Api::<ValidatingWebhookConfiguration>::all(c.client.clone());
        let config =
            kube::runtime::watcher::Config::default().fields(&format!("metadata.name={hook}"));
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut stream = std::pin::pin!(kube::runtime::watcher(api, config));
            while let Some(event) = stream.next().await {
                let Ok(
                    kube::runtime::watcher::Event::Apply(o)
                    | kube::runtime::watcher::Event::InitApply(o),
                ) = event
                else {
                    continue;
                };
                versions.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // The newest managedFields entry is the writer of this version.
                let newest = o
                    .metadata
                    .managed_fields
                    .iter()
                    .flatten()
                    .max_by_key(|m| m.time.as_ref().map(|t| t.0))
                    .and_then(|m| m.manager.clone())
                    .unwrap_or_default();
                let mut w = writers.lock().unwrap();
                *w.entry(newest).or_default() += 1;
                for m in o.metadata.managed_fields.iter().flatten() {
                    if m.manager.as_deref() == Some("certgen") {
                        *w.entry("certgen (any entry)".into()).or_default() += 1;
                    }
                }
            }
        })
    };

    // Runs of every kind, the injector writing meanwhile; after each, the caBundle as read back.
    let mut seen = Vec::new();
    // Runs whose report did not say why the target was left alone.
    let mut unsaid = Vec::new();
    let runs: [(&str, &[&str]); 6] = [
        ("plain", &[]),
        ("dry run", &["--dry-run"]),
        ("--overwrite (staged)", &["--overwrite"]),
        ("plain", &[]),
        ("plain", &[]),
        ("--overwrite (staged)", &["--overwrite"]),
    ];
    for (what, args) in runs {
        let run = certgen
            .clone()
            .propagation_delay("1s")
            .args(args.iter().copied())
            .run_async()
            .await;
        assert_eq!(run.code, 0, "{what}: {}\n{}", run.stdout, run.stderr);
        // Let the injector follow the Secret.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (bundle, managers) = webhook_state(&c, &hook).await;
        assert!(
            !managers.iter().any(|m| m == "certgen"),
            "{what}: certgen wrote the injector's caBundle (managers {managers:?})"
        );
        let report = run.json();
        let skipped = report["skipped"].to_string();
        if !(skipped.contains("managed by cert-manager's CA injector") && skipped.contains(&hook)) {
            unsaid.push(format!("{what}: {skipped}"));
        }
        let secret = data_map(c.secrets(&ns.name).get("envoy-gateway").await.unwrap());
        seen.push(format!(
            "after {what}: Secret ca.crt {:?}, injector's caBundle {:?} (managers {managers:?})",
            short(&secret["ca.crt"]),
            short(&bundle)
        ));
        // The injector merges: it keeps every unexpired CA it wrote and adds the Secret's.
        for ca in short(&secret["ca.crt"]) {
            assert!(short(&bundle).contains(&ca), "{what}: {}", seen.join("\n"));
        }
    }
    eprintln!("what the CA injector did:\n  {}", seen.join("\n  "));
    // `check` names the caBundle's writer as cert-manager's CA injector (issue 45), and the
    // injector's writes are no fight: it writes a caBundle certgen never writes.
    let checked = check(&c, &ns.name, &cfg).await;
    let named = checked.json()["otherWriters"].clone();
    let injector = named
        .as_array()
        .into_iter()
        .flatten()
        .find(|w| w["name"] == hook.as_str())
        .unwrap_or_else(|| panic!("the injector's writes are named: {}", checked.stdout));
    assert_eq!(injector["origin"], "cainjector", "{injector}");
    assert!(
        injector["text"]
            .as_str()
            .unwrap()
            .contains("cert-manager's CA injector"),
        "{injector}"
    );
    assert!(
        injector["fight"].as_array().is_none_or(|f| f.is_empty()),
        "{injector}"
    );
    watch.abort();
    let writers = writers.lock().unwrap().clone();
    eprintln!(
        "versions of the webhook configuration seen by a watch over the runs: {}, by writer {writers:?}",
        versions.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert!(
        !writers.keys().any(|w| w.starts_with("certgen")),
        "certgen wrote the injector's caBundle: {writers:?}"
    );
    assert!(
        unsaid.is_empty(),
        "the report says why the target is left alone: {unsaid:?}"
    );

    // check and the metrics call it cert-manager's.
    let checked = check(&c, &ns.name, &cfg).await;
    let targets = &checked.json()["caBundleTargets"];
    assert_eq!(targets[0]["name"], hook.as_str(), "{}", checked.stdout);
    assert_eq!(targets[0]["status"], "cert_manager", "{}", checked.stdout);
    let text = check_as(&c, &ns.name, &cfg, "text");
    assert!(
        text.stdout.contains("managed by cert-manager"),
        "{}",
        text.stdout
    );
    let prom = check_as(&c, &ns.name, &cfg, "prometheus");
    assert!(
        prom.stdout.contains(&format!(
            "target=\"{hook}\",secret=\"envoy-gateway\",status=\"cert_manager\"}} 1"
        )),
        "{}",
        prom.stdout
    );

    // Without the annotation the target is certgen's again: the next run writes it.
    let out = c
        .kubectl()
        .args([
            "annotate",
            "validatingwebhookconfiguration",
            &hook,
            "cert-manager.io/inject-ca-from-secret-",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let run = certgen.clone().run_async().await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (bundle, managers) = webhook_state(&c, &hook).await;
    let secret = data_map(c.secrets(&ns.name).get("envoy-gateway").await.unwrap());
    assert_eq!(bundle, secret["ca.crt"], "certgen keeps it in step again");
    assert!(managers.iter().any(|m| m == "certgen"), "{managers:?}");
}

/// Stops cert-manager's CA injector (SIGSTOP to its recorded PID), resumed when the guard is
/// dropped, however the test ends.
fn stop_injector() -> super::set::Paused {
    let dir = std::env::var("TESTENV_DIR").expect("TESTENV_DIR (tests/testenv/up)");
    let pids = std::fs::read_to_string(format!("{dir}/pids")).unwrap();
    let pid: i32 = pids
        .lines()
        .filter_map(|l| l.split_once(' '))
        .rfind(|(n, _)| *n == "cert-manager-cainjector")
        .and_then(|(_, p)| p.trim().parse().ok())
        .expect("the CA injector's PID in $TESTENV_DIR/pids");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("cert-manager-cainjector"),
        "pid {pid} is not the CA injector"
    );
    super::set::stop(pid, "cert-manager's CA injector".into())
}

/// The trust gate waits for the CA injector: with the injector stopped, a staged `--overwrite`
/// holds its trust gate until `--timeout` (exit 3, naming the webhook configuration; with
/// pokes and with `--no-poke`), and writes no leaf while the webhook's `caBundle` lacks the
/// pending CA. Resumed, the injector adds it; the next run writes the leaves only once the API
/// server has had the settle time to load that write (each instant seen by polling the two
/// objects), and its report says the injector opened the gate for the target.
#[tokio::test]
async fn a_stopped_ca_injector_holds_the_trust_gate_until_it_adds_the_pending_ca() {
    let Some(c) = with_cert_manager_alone().await else {
        return;
    };
    let _alone = INJECTOR.write().await;
    let ns = c.namespace("certgen-cm-held").await;
    let hook = format!("{}-held", ns.name);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        &dir,
        &config_with_target(&ns.name, "ValidatingWebhookConfiguration", &hook),
    );
    let certgen = c
        .certgen(&ns.name)
        .args(["--config", &cfg])
        .propagation_delay("2s");
    let first = certgen.run_async().await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let _hook = injected_webhook(&c, &ns.name, &hook, "held").await;
    let leaf = || async {
        data_map(c.secrets(&ns.name).get("envoy-gateway").await.unwrap())["tls.crt"].clone()
    };
    let old_leaf = leaf().await;

    let stopped = stop_injector();
    for extra in [&[][..], &["--no-poke"][..]] {
        let held = certgen
            .clone()
            .args(["--overwrite", "--timeout", "12s"])
            .args(extra.iter().copied())
            .run_async()
            .await;
        assert_eq!(held.code, 3, "{extra:?}: {}\n{}", held.stdout, held.stderr);
        assert!(
            held.stderr.contains(&hook) && held.stderr.contains("does not hold the pending CA"),
            "{extra:?}: the error names the target and why: {}",
            held.stderr
        );
        assert_eq!(leaf().await, old_leaf, "{extra:?}: a leaf was written");
        let secret = data_map(c.secrets(&ns.name).get("envoy-gateway").await.unwrap());
        assert_eq!(
            cas(&secret["ca.crt"]).len(),
            2,
            "{extra:?}: trust is staged"
        );
    }
    let pending = {
        let secret = data_map(c.secrets(&ns.name).get("envoy-gateway").await.unwrap());
        cas(&secret["ca.crt"])
            .into_iter()
            .find(|ca| !ca.signed(&cas(&old_leaf)[0]))
            .expect("the pending CA")
    };
    assert!(
        !cas(&webhook_state(&c, &hook).await.0).contains(&pending),
        "the stopped injector wrote"
    );
    // check names the target the gate waits for, with the pending CA (text and JSON).
    let checked = check(&c, &ns.name, &cfg).await;
    assert_eq!(checked.code, 1, "{}\n{}", checked.stdout, checked.stderr);
    let target = &checked.json()["caBundleTargets"][0];
    assert_eq!(target["status"], "cert_manager", "{}", checked.stdout);
    let said = target["pendingMissing"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        said.contains(&format!(
            "does not hold the pending CA {} yet",
            pending.short_fingerprint()
        )),
        "{}",
        checked.stdout
    );
    let text = check_as(&c, &ns.name, &cfg, "text").stdout;
    let due = text.split("ACTION DUE").nth(1).unwrap_or_default();
    assert!(
        due.contains(&format!("ValidatingWebhookConfiguration {hook}: {said}")),
        "{text}"
    );

    // Resumed; both objects polled: when the caBundle first holds the pending CA, and when the
    // leaf first changes.
    let (injected, changed) = {
        let c2 = Cluster {
            client: c.client.clone(),
            kubeconfig: c.kubeconfig.clone(),
        };
        let (ns2, hook2) = (ns.name.clone(), hook.clone());
        let pending = pending.clone();
        let old_leaf = old_leaf.clone();
        let poll = tokio::spawn(async move {
            let (mut injected, mut changed) = (None, None);
            let deadline = Instant::now() + Duration::from_secs(120);
            while (injected.is_none() || changed.is_none()) && Instant::now() < deadline {
                if injected.is_none() && cas(&webhook_state(&c2, &hook2).await.0).contains(&pending)
                {
                    injected = Some(Instant::now());
                }
                let s = data_map(c2.secrets(&ns2).get("envoy-gateway").await.unwrap());
                if changed.is_none() && s["tls.crt"] != old_leaf {
                    changed = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (injected, changed)
        });
        drop(stopped);
        let run = certgen.clone().run_async().await;
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        let gates = run.json()["gates"].to_string();
        assert!(
            gates.contains(&hook) && gates.contains("cert-manager's CA injector"),
            "the report names what opened the gate for the target: {gates}"
        );
        poll.await.unwrap()
    };
    let (injected, changed) = (
        injected.expect("the injector added the pending CA"),
        changed.expect("the leaves were written"),
    );
    let after = changed.saturating_duration_since(injected);
    eprintln!("the leaves were written {after:?} after the injector's write was first seen");
    // The settle time (5 s) from the write as stored (rounded up to the second), less what
    // the polling (two reads every 50 ms, on a loaded machine) may have missed.
    assert!(
        changed > injected && after >= Duration::from_secs(4),
        "the leaves came {after:?} after the injector's write"
    );
    // The injector holds the CA the leaves are signed by: check no longer names the target.
    let checked = check(&c, &ns.name, &cfg).await;
    let target = &checked.json()["caBundleTargets"][0];
    assert_eq!(target["status"], "cert_manager", "{}", checked.stdout);
    assert!(target.get("pendingMissing").is_none(), "{}", checked.stdout);
}

/// `certgen check --config cfg` in namespace `ns`, with `--output output`.
fn check_as(c: &Cluster, ns: &str, cfg: &str, output: &str) -> Run {
    let mut cmd = crate::util::certgen();
    cmd.args(["check", "--config", cfg, "-n", ns, "--output", output])
        .arg("--kubeconfig")
        .arg(&c.kubeconfig);
    Run::of(&mut cmd)
}

/// `certgen check --config cfg` in namespace `ns`, as JSON.
async fn check(c: &Cluster, ns: &str, cfg: &str) -> Run {
    c.certgen(ns)
        .check()
        .args(["--config", cfg])
        .run_async()
        .await
}

/// What the test's peers are counted over, printed.
fn counts(what: &str, handshakes: u64, failures: &[String]) {
    eprintln!(
        "{what}: {handshakes} handshakes, {} failed{}",
        failures.len(),
        failures
            .first()
            .map(|f| format!(", first: {f}"))
            .unwrap_or_default()
    );
}

/// `cmctl renew`: the Certificate's `Issuing` condition set to True, which cert-manager's
/// issuing controller acts on.
async fn renew(c: &Cluster, ns: &str, name: &str) {
    let api = cm_api(c, ns, "Certificate", "certificates");
    let now = certgen::timefmt::rfc3339(time::OffsetDateTime::now_utc());
    let current = api.get_status(name).await.unwrap();
    let mut conditions: Vec<Value> = current.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Issuing");
    conditions.push(json!({
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "certgen test: renew", "lastTransitionTime": now,
    }));
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": conditions}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handover_to_cert_manager_then_its_renewal_fail_no_handshake() {
    let Some((c, _injector)) = with_cert_manager().await else {
        return;
    };
    let (ns, _dir, cfg) = harness_namespace(&c, "certgen-cm-to").await;
    let certgen = c
        .certgen(&ns.name)
        .args(["--config", &cfg, "--no-poke"])
        .propagation_delay("2s");
    let r = certgen.run_async().await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A rotation stopped at its trust gate (exit 3): every bundle holds two CAs, and
    // cert-manager would keep only its issuer's. The hand-over is refused, nothing written.
    let r = certgen
        .clone()
        .args(["--overwrite", "--timeout", "1s"])
        .propagation_delay("60s")
        .run_async()
        .await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(
        cas(&data_map(c.secrets(&ns.name).get("envoy").await.unwrap())["ca.crt"]).len(),
        2
    );
    let versions = c.versions(&ns.name).await;
    let mut cmd = crate::util::certgen();
    cmd.args([
        "handover",
        "cert-manager",
        "--config",
        &cfg,
        "-n",
        &ns.name,
        "--apply",
    ])
    .arg("--kubeconfig")
    .arg(&c.kubeconfig);
    let refused = crate::util::run_async(cmd).await;
    assert_eq!(refused.code, 2, "{}\n{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains("a rotation is in progress"),
        "{}",
        refused.stderr
    );
    assert_eq!(c.versions(&ns.name).await, versions, "nothing written");
    assert!(
        cm_api(&c, &ns.name, "Certificate", "certificates")
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // The CronJob finishes the rotation (leaves, cleanup): settled again.
    let r = certgen
        .clone()
        .args(["--wait", "--timeout", "120s"])
        .run_async()
        .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let before = data_map(c.secrets(&ns.name).get("envoy").await.unwrap());
    assert_eq!(cas(&before["ca.crt"]).len(), 1);
    let ca = data_map(c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap());
    let active = cas(&ca["tls.crt"]).remove(0);

    let peers = Peers::start(&c, &ns.name).await;
    let handover = |apply: bool| {
        let mut cmd = crate::util::certgen();
        cmd.args(["handover", "cert-manager", "--config", &cfg, "-n", &ns.name])
            .arg("--kubeconfig")
            .arg(&c.kubeconfig);
        if apply {
            cmd.arg("--apply");
        }
        crate::util::run_async(cmd)
    };
    // Printed, it is the objects --apply creates.
    let printed = handover(false).await;
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&printed.stdout).unwrap();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["Issuer", "Certificate", "Certificate", "Certificate"]
    );
    let started = Instant::now();
    let applied = handover(true).await;
    assert_eq!(applied.code, 0, "{}\n{}", applied.stdout, applied.stderr);
    eprintln!(
        "handover --apply took {:.1} s:\n{}",
        started.elapsed().as_secs_f64(),
        applied.stdout
    );
    peers.settle().await;
    let (h1, f1) = peers.counts();

    // cert-manager took each Secret over. v1.20.3 keeps a certificate that already matches its
    // Certificate (signed by the Issuer's CA, same names, usages and key): nothing is issued
    // yet, the Secret only gets the Certificate's secretTemplate (the hand-over's mark).
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        let s = c.secrets(&ns.name).get(name).await.unwrap();
        let annotations = s.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get("certgen.dev/handed-over-to-cert-manager")
                .map(String::as_str),
            Some("envoy-gateway"),
            "{name}: {annotations:?}"
        );
        let d = data_map(s);
        assert_eq!(
            cas(&d["ca.crt"]),
            std::slice::from_ref(&active),
            "{name}: ca.crt"
        );
        let leaf = certgen::pki::parse_single_cert(&d["tls.crt"]).unwrap();
        assert!(active.signed(&leaf), "{name}: signed by certgen's CA");
    }
    let kept =
        data_map(c.secrets(&ns.name).get("envoy").await.unwrap())["tls.crt"] == before["tls.crt"];
    eprintln!("after the hand-over, cert-manager kept certgen's leaf in Secret envoy: {kept}");

    // certgen's CronJob stands down: exit 0, says who manages them, writes nothing.
    let stand_down = |when: &'static str| {
        let certgen = certgen.clone();
        let c = &c;
        let ns = ns.name.clone();
        async move {
            let versions = c.versions(&ns).await;
            let run = certgen.run_async().await;
            assert_eq!(run.code, 0, "{when}: {}\n{}", run.stdout, run.stderr);
            let report = run.json();
            assert_eq!(report["writes"], 0, "{when}: {}", run.stdout);
            let reasons = report["secrets"].to_string();
            assert!(
                reasons.contains("managed by cert-manager since certgen's hand-over"),
                "{when}: {reasons}"
            );
            assert_eq!(c.versions(&ns).await, versions, "{when}: nothing written");
        }
    };
    stand_down("after the hand-over").await;

    // A cert-manager renewal (what `cmctl renew` does), of every Certificate.
    let leaves: BTreeMap<&str, Vec<u8>> = {
        let mut m = BTreeMap::new();
        for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
            let d = data_map(c.secrets(&ns.name).get(name).await.unwrap());
            m.insert(name, d["tls.crt"].clone());
        }
        m
    };
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        renew(&c, &ns.name, name).await;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    for (name, old) in &leaves {
        loop {
            let d = data_map(c.secrets(&ns.name).get(name).await.unwrap());
            if d["tls.crt"] != *old {
                break;
            }
            assert!(Instant::now() < deadline, "{name} was not renewed");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    peers.settle().await;
    // certgen's CronJob after cert-manager's own issuance (certificate-name on the Secrets now).
    stand_down("after cert-manager's renewal").await;
    let (handshakes, failures) = peers.stop().await;
    counts(
        "certgen -> cert-manager hand-over",
        h1,
        &failures[..f1.min(failures.len())],
    );
    counts(
        "  then cert-manager's renewal (whole run)",
        handshakes,
        &failures,
    );
    assert!(handshakes > 500, "the peers handshook throughout");
    assert!(
        failures.is_empty(),
        "{} failed, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // What cert-manager's renewal wrote: a new key and leaf from certgen's CA, ca.crt that CA alone,
    // its annotations on the Secret.
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        let s = c.secrets(&ns.name).get(name).await.unwrap();
        let annotations = s.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get("cert-manager.io/certificate-name")
                .map(String::as_str),
            Some(name)
        );
        let d = data_map(s);
        assert_eq!(cas(&d["ca.crt"]), std::slice::from_ref(&active), "{name}");
        let leaf = certgen::pki::parse_single_cert(&d["tls.crt"]).unwrap();
        assert!(active.signed(&leaf), "{name}: signed by certgen's CA");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handover_from_cert_manager_then_a_staged_rotation_fail_no_handshake() {
    let Some((c, _injector)) = with_cert_manager().await else {
        return;
    };
    let (ns, _dir, cfg) = harness_namespace(&c, "certgen-cm-from").await;
    // What a cert-manager user has: a self-signed CA, a CA Issuer on it, a Certificate per
    // Secret.
    let mut yaml = format!(
        r#"apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {{name: selfsigned, namespace: {ns}}}
spec: {{selfSigned: {{}}}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {{name: mesh-ca, namespace: {ns}}}
spec:
  secretName: mesh-ca
  commonName: mesh-ca
  isCA: true
  privateKey: {{algorithm: ECDSA, size: 256}}
  issuerRef: {{name: selfsigned, kind: Issuer}}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {{name: mesh-ca, namespace: {ns}}}
spec: {{ca: {{secretName: mesh-ca}}}}
"#,
        ns = ns.name
    );
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        yaml.push_str(&format!(
            r#"---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {{name: {name}, namespace: {ns}}}
spec:
  secretName: {name}
  commonName: {name}
  dnsNames: ["{name}.{ns}.svc"]
  usages: [digital signature, server auth, client auth]
  privateKey: {{algorithm: ECDSA, size: 256}}
  issuerRef: {{name: mesh-ca, kind: Issuer}}
"#,
            ns = ns.name
        ));
    }
    apply(&c, &yaml);
    for name in ["mesh-ca", "envoy-gateway", "envoy", "envoy-rate-limit"] {
        ready(&c, &ns.name, "Certificate", "certificates", name).await;
    }
    let mesh_ca = cas(&data_map(c.secrets(&ns.name).get("mesh-ca").await.unwrap())["tls.crt"]);
    let peers = Peers::start(&c, &ns.name).await;
    let certgen = c
        .certgen(&ns.name)
        .args(["--config", &cfg, "--no-poke"])
        .propagation_delay("2s");

    // While the Certificates exist: refused, even forced, naming the fix; nothing written.
    let versions = c.versions(&ns.name).await;
    for args in [&[][..], &["--force", "--overwrite"][..]] {
        let run = certgen.clone().args(args.iter().copied()).run_async().await;
        assert_eq!(run.code, 2, "{args:?}: {}\n{}", run.stdout, run.stderr);
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(all.contains("Certificate"), "{all}");
        assert!(all.contains("delete the Certificate"), "{all}");
    }
    assert_eq!(c.versions(&ns.name).await, versions, "nothing written");

    // Handed to certgen: the Certificates deleted, certgen adopts what the Secrets trust...
    let out = c
        .kubectl()
        .args(["delete", "certificates,issuers", "--all", "-n", &ns.name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let adopted = certgen.run_async().await;
    assert_eq!(adopted.code, 0, "{}\n{}", adopted.stdout, adopted.stderr);
    let (h1, f1) = peers.counts();
    // ... and rotates from there, staged.
    let started = Instant::now();
    let rotated = certgen
        .clone()
        .args(["--overwrite", "--wait", "--timeout", "120s"])
        .run_async()
        .await;
    assert_eq!(rotated.code, 0, "{}\n{}", rotated.stdout, rotated.stderr);
    let took = started.elapsed();
    peers.settle().await;
    let (handshakes, failures) = peers.stop().await;
    counts(
        "cert-manager -> certgen hand-over (adoption run)",
        h1,
        &failures[..f1.min(failures.len())],
    );
    counts(
        &format!(
            "  then certgen's staged rotation ({:.1} s; whole run)",
            took.as_secs_f64()
        ),
        handshakes,
        &failures,
    );
    assert!(handshakes > 500, "the peers handshook throughout");
    assert!(
        failures.is_empty(),
        "{} failed, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Every leaf is certgen's new CA's; cert-manager's CA was dropped by the cleanup, after
    // its gate.
    let ca = data_map(c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap());
    let new_ca = cas(&ca["tls.crt"]).remove(0);
    assert_ne!(new_ca, mesh_ca[0]);
    for name in ["envoy-gateway", "envoy", "envoy-rate-limit"] {
        let d = data_map(c.secrets(&ns.name).get(name).await.unwrap());
        let leaf = certgen::pki::parse_single_cert(&d["tls.crt"]).unwrap();
        assert!(new_ca.signed(&leaf), "{name}");
        assert_eq!(cas(&d["ca.crt"]), std::slice::from_ref(&new_ca), "{name}");
    }
}

/// docs/cert-manager.md's "From kube-webhook-certgen to cert-manager", step by step, with a
/// real admission webhook (failurePolicy Fail) called for every ConfigMap created throughout.
///
/// On a multi-threaded runtime: the steps run `kubectl` (apply, annotate) as blocking child
/// processes, and on the default current-thread runtime the webhook, served from this process,
/// could not answer while one ran; under CI's load a `kubectl apply` can take longer than the
/// 5 s the API server gives the webhook, and one admission call of 83 failed that way (stop 56).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_webhook_certgen_to_cert_manager_in_the_documented_order_rejects_no_call() {
    let Some((c, _injector)) = with_cert_manager().await else {
        return;
    };
    let ns = c.namespace("certgen-cm-kwc").await;
    let secret = "admission";
    let webhook = Webhook::start().await;
    let _v = configuration(&c, &ns.name, webhook.port).await;
    let hook = format!("{}-admission", ns.name);
    let certgen = |args: Vec<String>| {
        let mut cmd = crate::util::certgen();
        cmd.args(args).arg("--kubeconfig").arg(&c.kubeconfig);
        crate::util::run_async(cmd)
    };
    // Installed the chart's way: the create Job, then the patch Job.
    let r = certgen(vec![
        "create".into(),
        "--host=127.0.0.1".into(),
        format!("--namespace={}", ns.name),
        format!("--secret-name={secret}"),
    ])
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let patch = vec![
        "patch".to_string(),
        format!("--webhook-name={hook}"),
        "--patch-mutating=false".into(),
        format!("--namespace={}", ns.name),
        format!("--secret-name={secret}"),
    ];
    let r = certgen(patch.clone()).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The operator's pod serves the Secret's `cert`/`key`; after the chart's switch its new pod
    // serves `tls.crt`/`tls.key` (kube-prometheus-stack's `--web.cert-file`).
    let keys: Arc<Mutex<(&'static str, &'static str)>> = Arc::new(Mutex::new(("cert", "key")));
    webhook.follow_switching(&c, &ns.name, secret, keys.clone());

    let dir = tempfile::tempdir().unwrap();
    // Step 1's config: the Secret in kube-webhook-certgen's layout, certgen's CA Secret beside
    // it, the webhook following it.
    let cfg = write_config(
        &dir,
        &format!(
            r#"name: admission
namespace: {ns}
ca:
  secretName: {secret}-ca
  commonName: {secret}-ca
  validity: 3650d
  renewBefore: 90d
secrets:
  - name: {secret}
    type: tls
    commonName: 127.0.0.1
    ipAddresses: [127.0.0.1]
    usages: [server]
    validity: 365d
    renewBefore: 30d
    dataKeys: {{bundle: ca, cert: cert, key: key}}
    secretType: Opaque
webhooks:
  - kind: ValidatingWebhookConfiguration
    name: {hook}
    caBundleFrom: {secret}
"#,
            ns = ns.name
        ),
    );
    let mut steps = Vec::new();
    let counts = under_load(&c, &ns.name, &webhook, async {
        // 1. certgen takes the CA over in a staged rotation: afterwards it holds the key of the
        //    CA the caBundle trusts, in Secret <secret>-ca.
        let t = Instant::now();
        let r = c
            .certgen(&ns.name)
            .args(["--config", cfg.as_str(), "--overwrite", "--no-poke"])
            .propagation_delay("3s")
            .run_async()
            .await;
        assert_eq!(r.code, 0, "step 1: {}\n{}", r.stdout, r.stderr);
        steps.push(format!("1. certgen --overwrite (staged): {:.1} s", t.elapsed().as_secs_f64()));
        // 2. A CA Issuer on that Secret.
        apply(
            &c,
            &format!(
                "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata: {{name: {secret}-ca, namespace: {ns}}}\nspec: {{ca: {{secretName: {secret}-ca}}}}\n",
                ns = ns.name
            ),
        );
        ready(&c, &ns.name, "Issuer", "issuers", &format!("{secret}-ca")).await;
        steps.push("2. CA Issuer on it: ready".into());
        // 3. The chart's switch (certManager.enabled=true with issuerRef that Issuer,
        //    patch.enabled=false): its Certificate issuing into the same Secret, the CA
        //    injector's annotation on the webhook, the operator restarted onto tls.crt.
        let t = Instant::now();
        apply(
            &c,
            &format!(
                r#"apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {{name: {secret}, namespace: {ns}}}
spec:
  secretName: {secret}
  ipAddresses: [127.0.0.1]
  issuerRef: {{name: {secret}-ca, kind: Issuer}}
"#,
                ns = ns.name
            ),
        );
        let out = c
            .kubectl()
            .args([
                "annotate",
                "validatingwebhookconfiguration",
                &hook,
                &format!("cert-manager.io/inject-ca-from={}/{secret}", ns.name),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        ready(&c, &ns.name, "Certificate", "certificates", secret).await;
        // The operator's rollout: its new pod serves what cert-manager wrote.
        *keys.lock().unwrap() = ("tls.crt", "tls.key");
        steps.push(format!(
            "3. the chart's switch: Certificate ready in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        // A patch Job left behind by mistake leaves the injector's caBundle alone.
        let before = webhook_state(&c, &hook).await.0;
        let r = certgen(patch.clone()).await;
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(r.stdout.contains("managed by cert-manager's CA injector"), "{}", r.stdout);
        assert_eq!(webhook_state(&c, &hook).await.0, before);
        steps.push("4. a stray `patch`: left the caBundle alone".into());
        tokio::time::sleep(Duration::from_secs(2)).await;
    })
    .await;
    eprintln!(
        "kube-webhook-certgen -> cert-manager:\n  {}",
        steps.join("\n  ")
    );
    report(
        "kube-webhook-certgen -> cert-manager, the documented order",
        &counts,
    );
    assert!(counts.calls > 50, "the load reached the webhook");
    assert_eq!(
        (counts.rejected, counts.handshake_failures),
        (0, 0),
        "{:?}",
        counts.sample
    );
    // cert-manager's leaf in the Secret, from the CA certgen handed it; the Secret keeps its
    // type and kube-webhook-certgen's keys (what the old pod served) beside cert-manager's.
    let stored = c.secrets(&ns.name).get(secret).await.unwrap();
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));
    let d = data_map(stored);
    for key in ["ca", "cert", "key", "ca.crt", "tls.crt", "tls.key"] {
        assert!(d.contains_key(key), "{key}: {:?}", d.keys());
    }
    let ca = cas(&data_map(
        c.secrets(&ns.name)
            .get(&format!("{secret}-ca"))
            .await
            .unwrap(),
    )["tls.crt"]);
    let leaf = certgen::pki::parse_single_cert(&d["tls.crt"]).unwrap();
    assert!(ca[0].signed(&leaf));
}
