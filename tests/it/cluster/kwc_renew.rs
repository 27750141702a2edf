//! `certgen create` renewing an existing Secret (certgen's additions to kube-webhook-certgen's
//! `create`), on the real API server with real RBAC and the harness of `kwc_rotation.rs`: a
//! real TLS admission webhook on 127.0.0.1 that serves the Secret's `cert`/`key` and reloads
//! them after a kubelet-like lag, called by the API server for every ConfigMap created.
//!
//! - Due, with the webhook named (`--webhook-name`): `create` alone, run again and again as a
//!   CronJob would, renews through the staged rotation (trust, gate, serving certificate, gate, cleanup) with the
//!   caBundle in step: no admission call fails, and after every run the caBundle trusts the
//!   certificate the Secret holds. The Secret ends on a new CA, alone in its bundle, in
//!   kube-webhook-certgen's layout (Opaque, `ca`, `cert`, `key`).
//! - Due, without a target: kept, exit 0, one warning naming the Secret and the flags.
//! - Bad input for the new flags: exit 2 naming the flag, nothing written.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;

use super::kwc::serves;
use super::kwc_rotation::{Webhook, configuration, report, under_load};
use super::{Cluster, DeleteOnDrop, cluster, data_map, rule};
use crate::util::{Run, command};

const SECRET: &str = "webhook";

/// The identity of the hook Job or CronJob: kube-webhook-certgen's chart Role (Secrets get,
/// create) plus what a renewal needs: patch on Secrets, the run's Lease, and get/update on the
/// ValidatingWebhookConfiguration. No pod verbs: nothing can be poked (the webhook is not a
/// pod here), so every gate waits out --propagation-delay.
async fn identity(c: &Cluster, ns: &str) -> (std::path::PathBuf, Vec<DeleteOnDrop>) {
    let sa = "kwc-renew";
    let kubeconfig = c
        .service_account_kubeconfig(
            ns,
            sa,
            vec![
                rule(&[""], &["secrets"], &["get", "create", "patch"]),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["get", "create", "update", "delete"],
                ),
            ],
        )
        .await;
    let name = format!("{ns}-kwc-renew");
    let pp = PostParams::default();
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"certgen.dev/test": "true"}},
        "rules": [{"apiGroups": ["admissionregistration.k8s.io"],
                   "resources": ["validatingwebhookconfigurations"],
                   "verbs": ["get", "update"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(c.client.clone())
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"certgen.dev/test": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(c.client.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
    (
        kubeconfig,
        vec![
            DeleteOnDrop::new::<ClusterRole>(&name),
            DeleteOnDrop::new::<ClusterRoleBinding>(&name),
        ],
    )
}

/// `certgen <args> --kubeconfig <kubeconfig>`.
async fn certgen(kubeconfig: &std::path::Path, args: &[String]) -> Run {
    let mut cmd = command(std::path::Path::new(env!("CARGO_BIN_EXE_certgen")));
    cmd.args(args).arg("--kubeconfig").arg(kubeconfig);
    crate::util::run_async(cmd).await
}

fn create_args(ns: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "create".to_string(),
        "--host=127.0.0.1".into(),
        format!("--namespace={ns}"),
        format!("--secret-name={SECRET}"),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// The caBundle the API server calls the webhook with.
async fn ca_bundle(c: &Cluster, name: &str) -> Vec<u8> {
    let v = Api::<ValidatingWebhookConfiguration>::all(c.client.clone())
        .get(name)
        .await
        .unwrap();
    v.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .map(|b| b.0)
        .unwrap_or_default()
}

/// Every Secret of the namespace by name, with its resourceVersion: equal before and after
/// means nothing was written.
async fn versions(c: &Cluster, ns: &str) -> std::collections::BTreeMap<String, String> {
    c.secrets(ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            (
                s.metadata.name.unwrap_or_default(),
                s.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect()
}

fn cas(pem: &[u8]) -> Vec<certgen::pki::Cert> {
    certgen::pki::parse_cert_chain(pem).unwrap()
}

#[tokio::test]
async fn create_renews_a_due_secret_with_the_ca_bundle_in_step_under_load() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-kwc-renew").await;
    let webhook = Webhook::start().await;
    let _v = configuration(&c, &ns.name, webhook.port).await;
    let hook = format!("{}-admission", ns.name);
    let (kubeconfig, _rbac) = identity(&c, &ns.name).await;

    // Installed with 1-hour certificates, due 20 s after they were issued.
    let renewal = ["--validity=1h", "--renew-before=59m40s"];
    let first = certgen(&kubeconfig, &create_args(&ns.name, &renewal)).await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let patch = vec![
        "patch".to_string(),
        format!("--webhook-name={hook}"),
        "--patch-mutating=false".into(),
        format!("--namespace={}", ns.name),
        format!("--secret-name={SECRET}"),
    ];
    let p = certgen(&kubeconfig, &patch).await;
    assert_eq!(p.code, 0, "{}", p.stderr);
    let installed = data_map(c.secrets(&ns.name).get(SECRET).await.unwrap());
    let old_ca = cas(&installed["ca"]);
    assert_eq!(old_ca.len(), 1);
    webhook.follow(&c, &ns.name, SECRET, ("cert", "key"));

    // Then `create` alone, as a CronJob runs it (every 2 s here), with the webhook to follow,
    // until the Secret is on a new CA alone.
    let mut args = create_args(&ns.name, &renewal);
    args.extend([
        format!("--webhook-name={hook}"),
        "--patch-mutating=false".into(),
        "--propagation-delay=3s".into(),
    ]);
    let mut runs = Vec::new();
    let mut renewed_by = None;
    let started = Instant::now();
    let counts = under_load(&c, &ns.name, &webhook, async {
        while started.elapsed() < Duration::from_secs(180) {
            let t = Instant::now();
            let run = certgen(&kubeconfig, &args).await;
            assert_eq!(run.code, 0, "create: {}\n{}", run.stdout, run.stderr);
            runs.push((t.elapsed(), run.stdout.contains("nothing written")));
            // After every run: the caBundle trusts the certificate the Secret holds.
            let data = data_map(c.secrets(&ns.name).get(SECRET).await.unwrap());
            let bundle = ca_bundle(&c, &hook).await;
            serves(&bundle, &data["cert"], "127.0.0.1").unwrap_or_else(|e| {
                panic!(
                    "after run {}: the caBundle does not trust the Secret's certificate: {e}",
                    runs.len()
                )
            });
            let now = cas(&data["ca"]);
            if now.len() == 1 && now[0] != old_ca[0] {
                renewed_by = Some(runs.len());
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .await;
    report(
        "create's renewal with --webhook-name (CronJob-like re-runs)",
        &counts,
    );
    let renewed_by = renewed_by.expect("the renewal finished within 3 minutes");
    let noop = runs.iter().filter(|(_, nothing)| *nothing).count();
    let writing: Vec<f64> = runs
        .iter()
        .filter(|(_, nothing)| !nothing)
        .map(|(d, _)| d.as_secs_f64())
        .collect();
    eprintln!(
        "create runs: {} ({noop} with nothing due, {} renewing, taking {:?} s); {:.1} s from the first run",
        runs.len(),
        writing.len(),
        writing,
        started.elapsed().as_secs_f64()
    );
    assert!(renewed_by > noop, "the renewal wrote");
    assert!(counts.calls > 50, "the load reached the webhook");
    assert_eq!(
        (counts.rejected, counts.handshake_failures),
        (0, 0),
        "a renewal by create never fails an admission call: {:?}",
        counts.sample
    );

    // The end: kube-webhook-certgen's layout, a new CA alone in the bundle and the caBundle,
    // certgen's CA Secret holding it and its key.
    let secret = c.secrets(&ns.name).get(SECRET).await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let data = data_map(secret);
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        ["ca", "cert", "key"]
    );
    let bundle = ca_bundle(&c, &hook).await;
    assert_eq!(bundle, data["ca"], "the caBundle is the Secret's ca");
    let ca_secret = data_map(
        c.secrets(&ns.name)
            .get(&format!("{SECRET}-ca"))
            .await
            .unwrap(),
    );
    assert_eq!(cas(&ca_secret["tls.crt"]), cas(&data["ca"]));
    assert!(
        !ca_secret["tls.key"].is_empty(),
        "certgen holds the new CA's key"
    );
    serves(&bundle, &data["cert"], "127.0.0.1").unwrap();
}

/// The way off kube-webhook-certgen's 100-year certificates: `create` with `--validity` and the
/// webhook named rotates the Secret, staged, to certificates of that validity, once.
#[tokio::test]
async fn create_moves_a_100_year_secret_to_validity_staged_under_load() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-kwc-100y").await;
    let webhook = Webhook::start().await;
    let _v = configuration(&c, &ns.name, webhook.port).await;
    let hook = format!("{}-admission", ns.name);
    let (kubeconfig, _rbac) = identity(&c, &ns.name).await;

    // kube-webhook-certgen's install: create and patch with their defaults (100 years).
    let first = certgen(&kubeconfig, &create_args(&ns.name, &[])).await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let patch = vec![
        "patch".to_string(),
        format!("--webhook-name={hook}"),
        "--patch-mutating=false".into(),
        format!("--namespace={}", ns.name),
        format!("--secret-name={SECRET}"),
    ];
    let p = certgen(&kubeconfig, &patch).await;
    assert_eq!(p.code, 0, "{}", p.stderr);
    let old_ca = cas(&data_map(c.secrets(&ns.name).get(SECRET).await.unwrap())["ca"]);
    webhook.follow(&c, &ns.name, SECRET, ("cert", "key"));

    // Then `create --validity=90d` with the webhook, re-run as a CronJob would, until the
    // Secret is on a new CA alone.
    let mut args = create_args(&ns.name, &["--validity=90d"]);
    args.extend([
        format!("--webhook-name={hook}"),
        "--patch-mutating=false".into(),
        "--propagation-delay=3s".into(),
    ]);
    let started = Instant::now();
    let mut runs = 0;
    let mut renewed = false;
    let counts = under_load(&c, &ns.name, &webhook, async {
        while started.elapsed() < Duration::from_secs(120) && !renewed {
            let run = certgen(&kubeconfig, &args).await;
            runs += 1;
            assert_eq!(run.code, 0, "create: {}\n{}", run.stdout, run.stderr);
            if runs == 1 {
                assert!(
                    run.stderr
                        .contains("lasts 36500d, longer than --validity 90d"),
                    "the first run says why it renews: {}",
                    run.stderr
                );
                // The real reason, not a flag that was never given (issue 46, friction 7).
                assert!(
                    !run.stdout.contains("--overwrite")
                        && run
                            .stdout
                            .contains("outlive --validity 90d: rotating the CA"),
                    "the report says why the CA rotates: {}",
                    run.stdout
                );
            }
            let data = data_map(c.secrets(&ns.name).get(SECRET).await.unwrap());
            serves(&ca_bundle(&c, &hook).await, &data["cert"], "127.0.0.1")
                .unwrap_or_else(|e| panic!("after run {runs}: {e}"));
            let now = cas(&data["ca"]);
            renewed = now.len() == 1 && now[0] != old_ca[0];
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    report("create --validity=90d on a 100-year Secret", &counts);
    assert!(
        renewed,
        "rotated to a new CA within 2 minutes ({runs} runs)"
    );
    assert_eq!(
        (counts.rejected, counts.handshake_failures),
        (0, 0),
        "{:?}",
        counts.sample
    );
    // The new certificates last 90 days (plus the 5 minutes notBefore is backdated).
    let data = data_map(c.secrets(&ns.name).get(SECRET).await.unwrap());
    let leaf = certgen::pki::parse_single_cert(&data["cert"]).unwrap();
    let ca = &cas(&data["ca"])[0];
    for cert in [&leaf, ca] {
        let lifetime = cert.not_after - cert.not_before;
        assert!(lifetime <= time::Duration::days(90) + time::Duration::minutes(5));
    }
    // Once: the next run finds nothing to do.
    let before = versions(&c, &ns.name).await;
    let again = certgen(&kubeconfig, &args).await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("nothing written"), "{}", again.stdout);
    assert_eq!(versions(&c, &ns.name).await, before);

    // Monitored with the config `create` prints (issue 46): `check`, as the same identity,
    // judges the renewed Secret with create's own windows (CA due 30 days ahead, the serving
    // certificate 15, so the CA comes first) and finds it healthy, with the webhook in step.
    let mut print = args.clone();
    print.push("--print-config".into());
    let printed = certgen(&kubeconfig, &print).await;
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    let tmp = crate::util::tempdir();
    let config = tmp.path().join("admission.yaml");
    std::fs::write(&config, &printed.stdout).unwrap();
    let check = certgen(
        &kubeconfig,
        &[
            "check".into(),
            "--config".into(),
            config.to_str().unwrap().into(),
            "--output".into(),
            "json".into(),
        ],
    )
    .await;
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
    let report: serde_json::Value = serde_json::from_str(&check.stdout).unwrap();
    assert_eq!(report["healthy"], true, "{report}");
    let next = &report["nextRenewal"];
    assert_eq!(next["secret"], format!("{SECRET}-ca"), "{report}");
    // Due 30 days before the CA's 90 days end: within a day of 60 days on.
    let at = time::OffsetDateTime::parse(
        next["due"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let ahead = (at - time::OffsetDateTime::now_utc()).whole_days();
    assert!(
        (59..=60).contains(&ahead),
        "next renewal {ahead} days ahead: {report}"
    );
    let targets = report["caBundleTargets"].to_string();
    assert!(targets.contains("in_sync"), "{targets}");
}

#[tokio::test]
async fn create_keeps_a_due_secret_without_a_target_and_says_what_to_pass() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-kwc-due").await;
    let (kubeconfig, _rbac) = identity(&c, &ns.name).await;
    let first = certgen(&kubeconfig, &create_args(&ns.name, &["--validity=1h"])).await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let before = versions(&c, &ns.name).await;
    // Due at once: it expires within --renew-before.
    let run = certgen(
        &kubeconfig,
        &create_args(&ns.name, &["--validity=2h", "--renew-before=90m"]),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let warnings: Vec<&str> = run.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert!(
        warnings[0].contains(&format!("Secret {}/{SECRET} is due for renewal", ns.name))
            && warnings[0].contains("pass --webhook-name (or --apiservice-name)"),
        "{}",
        warnings[0]
    );
    assert!(run.stdout.contains("nothing written"), "{}", run.stdout);
    assert_eq!(versions(&c, &ns.name).await, before, "nothing was written");
    assert!(
        c.secrets(&ns.name)
            .get_opt(&format!("{SECRET}-ca"))
            .await
            .unwrap()
            .is_none(),
        "no CA Secret without a renewal"
    );
}

#[tokio::test]
async fn bad_renewal_flags_exit_2_naming_the_flag_with_nothing_written() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-kwc-badflag").await;
    let (kubeconfig, _rbac) = identity(&c, &ns.name).await;
    for (extra, flag) in [
        (&["--validity=30m"][..], "--validity"),
        (&["--validity=forever"][..], "--validity"),
        (
            &["--validity=1h", "--renew-before=2h"][..],
            "--renew-before",
        ),
        (&["--webhook-name=Not_A_Name"][..], "--webhook-name"),
        (
            &[
                "--webhook-name=w",
                "--patch-validating=false",
                "--patch-mutating=false",
            ][..],
            "--webhook-name",
        ),
        (&["--ca-secret-name=webhook"][..], "--ca-secret-name"),
    ] {
        let run = certgen(&kubeconfig, &create_args(&ns.name, extra)).await;
        assert_eq!(run.code, 2, "{extra:?}: {}", run.stderr);
        assert!(run.stderr.contains(flag), "{extra:?}: {}", run.stderr);
        assert!(
            versions(&c, &ns.name).await.is_empty(),
            "{extra:?}: nothing written"
        );
    }
}

#[tokio::test]
async fn a_dry_run_shows_the_renewals_writes_with_the_ca_bundle_and_writes_nothing() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-kwc-dry").await;
    let _v = configuration(&c, &ns.name, 9).await;
    let hook = format!("{}-admission", ns.name);
    let (kubeconfig, _rbac) = identity(&c, &ns.name).await;
    let first = certgen(&kubeconfig, &create_args(&ns.name, &["--validity=1h"])).await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let before = versions(&c, &ns.name).await;
    let bundle = ca_bundle(&c, &hook).await;
    let run = certgen(
        &kubeconfig,
        &create_args(
            &ns.name,
            &[
                "--validity=2h",
                "--renew-before=90m",
                &format!("--webhook-name={hook}"),
                "--patch-mutating=false",
                "--dry-run",
            ],
        ),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    for line in [
        "(dry run: nothing is written)",
        &format!("{SECRET}-ca  ca    trust"),
        &format!("{SECRET}     tls   update-bundle"),
        &format!("ValidatingWebhookConfiguration {hook}: update-bundle"),
    ] {
        assert!(run.stdout.contains(line), "{line:?} in:\n{}", run.stdout);
    }
    // Listed once: the engine's plan is the dry run's only source.
    assert_eq!(
        run.stdout
            .matches(&format!("ValidatingWebhookConfiguration {hook}"))
            .count(),
        1,
        "{}",
        run.stdout
    );
    assert_eq!(versions(&c, &ns.name).await, before, "nothing was written");
    assert_eq!(ca_bundle(&c, &hook).await, bundle);
}
