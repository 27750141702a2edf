//! Issue 46's on-call walk, as one engineer takes it on the real control plane: certgen
//! installed by its chart, its CronJob's runs made as the chart's ServiceAccount; then a leaf
//! Secret deleted, the CA Secret deleted, a leaf's and the CA's `tls.crt` garbled and certgen's
//! Role deleted, each followed by `certgen check` and the recovery `docs/alerts.md`'s runbooks
//! and `docs/troubleshooting.md` give, run as they are written there, with the outputs they
//! promise (each promise also asserted to be still written in its doc). After each recovery `check` is healthy and every Secret's leaf verifies against
//! every bundle (`util::trust`, rustls-webpki).

use std::path::Path;
use std::process::Command;

use super::{chart_dir, cluster, helm, run_helm};
use crate::util::trust::check_snapshot;
use crate::util::{Run, root};

/// `certgen ARGS` as the identity of `kubeconfig`, the arguments as the docs write them.
fn certgen(kubeconfig: &Path, args: &[&str]) -> Run {
    Run::of(
        crate::util::certgen()
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig),
    )
}

/// `kubectl ARGS` as the admin; its output, after asserting it succeeded.
fn kubectl(c: &super::Cluster, args: &[&str]) -> String {
    let out = c.kubectl().args(args).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The doc's text, from its file: a promise the walk asserts is still written there.
fn says(doc: &str, text: &str) {
    let body = std::fs::read_to_string(root().join(doc)).unwrap();
    assert!(body.contains(text), "{doc} no longer says {text:?}");
}

/// `check`'s text is healthy, and every leaf verifies against every bundle.
async fn healthy(c: &super::Cluster, admin: &Path, ns: &str, after: &str) {
    let r = certgen(admin, &["check", "-n", ns]);
    assert_eq!(r.code, 0, "{after}: check\n{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("Healthy: nothing is due."),
        "{after}: {}",
        r.stdout
    );
    let (failures, _) = check_snapshot(&c.snapshot(ns).await);
    assert!(failures.is_empty(), "{after}: {failures:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_on_call_walk_recovers_as_the_runbooks_say() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("on-call").await;
    let n = ns.name.as_str();
    let admin = c.kubeconfig.clone();
    let kubeconfig = admin.to_str().unwrap().to_string();
    let chart = chart_dir();
    // The install: the chart (its hook Job runs nothing on kwok's node), then the CronJob's
    // run, as the chart's ServiceAccount.
    let out = run_helm(
        &helm,
        &[
            "install",
            "certgen",
            chart.to_str().unwrap(),
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            n,
            "--wait",
            "--timeout",
            "120s",
        ],
    );
    assert!(out.contains("STATUS: deployed"), "{out}");
    let release = async {
        run_helm(
            &helm,
            &[
                "uninstall",
                "certgen",
                "--ignore-not-found",
                "--kubeconfig",
                &kubeconfig,
                "--namespace",
                n,
            ],
        )
    };
    let cron = c.token_kubeconfig(n, "certgen").await;
    let cron_run = || certgen(&cron, &["-n", n, "--propagation-delay", "0s"]);
    let r = cron_run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    healthy(&c, &admin, n, "installed").await;

    // 1. A leaf Secret deleted. check: missing, what to do; the runbook
    //    (CertgenSecretUnusable): a plain run creates it.
    kubectl(&c, &["-n", n, "delete", "secret", "envoy"]);
    let r = certgen(&admin, &["check", "-n", n]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("missing: run certgen to create it") && r.stdout.contains("ACTION DUE"),
        "{}",
        r.stdout
    );
    says(
        "docs/alerts.md",
        "a plain run creates a missing TLS or HMAC Secret",
    );
    let r = certgen(&admin, &["-n", n]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    eprintln!(
        "the leaf Secret deleted, then `certgen -n NS`:\n{}",
        r.stdout
    );
    assert!(
        r.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("envoy ") && l.contains("create")),
        "{}",
        r.stdout
    );
    healthy(&c, &admin, n, "the leaf Secret recreated").await;

    // 2. The CA Secret deleted (a backup kept, as the runbook assumes). check: lost, not
    //    healthy; a plain run refuses with both ways out; way 1 restores the backup with the
    //    runbook's own command.
    let tmp = crate::util::tempdir();
    let saved = kubectl(
        &c,
        &["-n", n, "get", "secret", "envoy-gateway-ca", "-o", "yaml"],
    );
    std::fs::write(tmp.path().join("envoy-gateway-ca.backup.yaml"), saved).unwrap();
    kubectl(&c, &["-n", n, "delete", "secret", "envoy-gateway-ca"]);
    let r = certgen(&admin, &["check", "-n", n]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("lost") && !r.stdout.contains("Healthy"),
        "{}",
        r.stdout
    );
    let r = cron_run();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    says(
        "docs/troubleshooting.md",
        "exit 2, `certgen's CA Secret is gone, but Secrets",
    );
    assert!(
        r.stderr
            .contains("certgen's CA Secret is gone, but Secrets")
            && r.stderr.contains("from a backup")
            && r.stderr.contains("--overwrite"),
        "{}",
        r.stderr
    );
    says(
        "docs/alerts.md",
        "kubectl apply -f envoy-gateway-ca.backup.yaml",
    );
    let out = c
        .kubectl()
        .current_dir(tmp.path())
        .args(["-n", n, "apply", "-f", "envoy-gateway-ca.backup.yaml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    healthy(&c, &admin, n, "the CA Secret restored").await;
    let r = cron_run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    // 3. A leaf's tls.crt garbled. check: invalid, naming the key; a run refuses with the
    //    fix; troubleshooting: `--force` replaces its contents.
    let garbage = super::base64(b"garbage\n");
    kubectl(
        &c,
        &[
            "-n",
            n,
            "patch",
            "secret",
            "envoy",
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"data":{{"tls.crt":"{garbage}"}}}}"#),
        ],
    );
    let r = certgen(&admin, &["check", "-n", n]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains("tls.crt: no PEM certificate found"),
        "{}",
        r.stdout
    );
    let r = cron_run();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    says(
        "docs/troubleshooting.md",
        "| fix or delete it, or `--force` to replace its contents",
    );
    assert!(
        r.stderr.contains(&format!(
            "{n}/envoy: tls.crt: no PEM certificate found; nothing was written; fix or delete it, or run with --force"
        )),
        "{}",
        r.stderr
    );
    let r = certgen(&admin, &["-n", n, "--force"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("unusable (tls.crt: no PEM certificate found); replaced because of --force"),
        "{}",
        r.stdout
    );
    healthy(&c, &admin, n, "the garbled tls.crt replaced").await;

    // 3b. The CA Secret's tls.crt garbled (its tls.key and ca.crt intact). troubleshooting:
    //     `--force` would stage a new CA (its dry run says so); to keep the CA, put its
    //     certificate back from the CA Secret's own ca.crt, the entry whose public key matches
    //     tls.key.
    let ca_before = c.snapshot(n).await["envoy-gateway-ca"].clone();
    kubectl(
        &c,
        &[
            "-n",
            n,
            "patch",
            "secret",
            "envoy-gateway-ca",
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"data":{{"tls.crt":"{garbage}"}}}}"#),
        ],
    );
    let r = certgen(&admin, &["check", "-n", n]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let r = cron_run();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    says(
        "docs/troubleshooting.md",
        "the report's reason says `the CA Secret is unusable (…); replaced because of --force`",
    );
    let r = certgen(&admin, &["-n", n, "--force", "--dry-run"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("the CA Secret is unusable (")
            && r.stdout.contains("replaced because of --force"),
        "{}",
        r.stdout
    );
    says(
        "docs/troubleshooting.md",
        "it is in the CA Secret's own `ca.crt` (the entry whose public key matches `tls.key`)",
    );
    let bundle = certgen::pki::parse_cert_chain(&ca_before["ca.crt"]).unwrap();
    let own = bundle
        .iter()
        .find(|cert| certgen::pki::load_signing_key(cert, &ca_before["tls.key"]).is_ok())
        .expect("the CA Secret's ca.crt holds the certificate of its key");
    kubectl(
        &c,
        &[
            "-n",
            n,
            "patch",
            "secret",
            "envoy-gateway-ca",
            "--type",
            "merge",
            "-p",
            &format!(
                r#"{{"data":{{"tls.crt":"{}"}}}}"#,
                super::base64(own.pem().as_bytes())
            ),
        ],
    );
    healthy(&c, &admin, n, "the CA certificate put back").await;
    assert_eq!(
        certgen::pki::parse_single_cert(&c.snapshot(n).await["envoy-gateway-ca"]["tls.crt"])
            .unwrap(),
        certgen::pki::parse_single_cert(&ca_before["tls.crt"]).unwrap(),
        "the same CA, kept"
    );
    let r = cron_run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    // 4. certgen's Role deleted. The CronJob's run fails with exit 5 naming the refused verb;
    //    check under that identity has no Secret series; the recovery: the chart's Role
    //    rendered again with `helm upgrade … --reuse-values`, then the run succeeds.
    kubectl(&c, &["-n", n, "delete", "role", "certgen"]);
    let r = cron_run();
    eprintln!(
        "the Role deleted, the CronJob's run:\n{}{}",
        r.stdout, r.stderr
    );
    assert_eq!(r.code, 5, "{}{}", r.stdout, r.stderr);
    // The first refused verb, named, and the API server's word that the Role is gone.
    assert!(
        r.stderr.contains("(403); grant the get verb on secrets")
            && r.stderr
                .contains(r#"role.rbac.authorization.k8s.io "certgen" not found"#),
        "{}",
        r.stderr
    );
    let prom = certgen(&cron, &["check", "-n", n, "--output", "prometheus"]);
    eprintln!(
        "check --output prometheus under that identity:\n{}{}",
        prom.stdout, prom.stderr
    );
    assert!(
        !prom.stdout.contains("certgen_secret_status{"),
        "no Secret series under that identity: {}",
        prom.stdout
    );
    says(
        "docs/troubleshooting.md",
        "`helm upgrade RELEASE deploy/helm/certgen -n NS --reuse-values`",
    );
    // As written: RELEASE certgen, NS the namespace, from the repository's root.
    let out = Command::new(&helm)
        .current_dir(root())
        .args([
            "upgrade",
            "certgen",
            "deploy/helm/certgen",
            "-n",
            n,
            "--reuse-values",
            "--kubeconfig",
            &kubeconfig,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "helm upgrade: {out:?}");
    let r = cron_run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    healthy(&c, &admin, n, "the Role rendered again").await;
    release.await;
}
