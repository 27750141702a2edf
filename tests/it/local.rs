//! The binary end to end in `--local` mode: what a newcomer runs first.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::util::{fingerprints, openssl, openssl_verify, run, tempdir, tree, write};

const LEAVES: [&str; 3] = ["envoy-gateway", "envoy", "envoy-rate-limit"];

fn local(dir: &Path, extra: &[&str]) -> crate::util::Run {
    let mut args = vec!["--local", dir.to_str().unwrap(), "--output", "json", "-q"];
    args.extend_from_slice(extra);
    run(&args)
}

fn sans(cert: &Path) -> String {
    let (ok, text) = openssl(&[
        "x509",
        "-noout",
        "-ext",
        "subjectAltName",
        "-in",
        cert.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    text
}

#[test]
fn a_newcomers_run_produces_secrets_openssl_verifies() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let report = local(&dir, &[]).ok().json();
    assert_eq!(report["writes"], 5);
    for leaf in LEAVES {
        for purpose in ["sslserver", "sslclient"] {
            let (ok, text) = openssl_verify(
                &dir.join(leaf).join("ca.crt"),
                &dir.join(leaf).join("tls.crt"),
                purpose,
            );
            assert!(ok, "{leaf} {purpose}: {text}");
        }
        let mode = |f: &str| {
            std::fs::metadata(dir.join(leaf).join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("tls.key"), 0o600, "{leaf}/tls.key");
        assert_eq!(
            std::fs::metadata(dir.join(leaf))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
    }
    let eg = sans(&dir.join("envoy-gateway/tls.crt"));
    for name in [
        "DNS:envoy-gateway,",
        "DNS:envoy-gateway.envoy-gateway-system,",
        "DNS:envoy-gateway.envoy-gateway-system.svc,",
        "DNS:envoy-gateway.envoy-gateway-system.svc.cluster.local",
    ] {
        assert!(eg.contains(name), "{name} missing from {eg}");
    }
    assert!(sans(&dir.join("envoy/tls.crt")).contains("DNS:*.envoy-gateway-system"));
    assert!(sans(&dir.join("envoy-rate-limit/tls.crt")).contains("DNS:*.envoy-gateway-system"));
    let hmac = std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret")).unwrap();
    assert_eq!(hmac.len(), 32);
    assert_eq!(
        std::fs::metadata(dir.join("envoy-oidc-hmac/hmac-secret"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(dir.join("envoy-gateway-ca/tls.key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

#[test]
fn repeated_runs_are_byte_for_byte_no_ops() {
    let tmp = tempdir();
    local(tmp.path(), &[]).ok();
    let before = tree(tmp.path());
    for _ in 0..3 {
        let report = local(tmp.path(), &[]).ok().json();
        assert_eq!(report["writes"], 0, "{report}");
        assert_eq!(tree(tmp.path()), before);
    }
}

/// Stops an `--overwrite` right after its leaves phase (trust: CA Secret + 3 bundles; leaves:
/// promotion + 3 leaves), before the cleanup.
fn overwrite_until_cleanup(dir: &Path, extra: &[&str]) {
    let out = crate::util::certgen()
        .args(["--local", dir.to_str().unwrap(), "-q", "--overwrite"])
        .args(extra)
        .env(certgen::apply::CRASH_ENV, "8")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(certgen::apply::CRASH_EXIT),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_rotation_trusts_both_cas_until_the_new_leaves_are_out_then_only_the_new_one() {
    let tmp = tempdir();
    let dir = tmp.path();
    local(dir, &[]).ok();
    let ca = |d: &Path| {
        fingerprints(&std::fs::read(d.join("envoy-gateway-ca/tls.crt")).unwrap())[0].clone()
    };
    let hmac_before = std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret")).unwrap();
    let ca0 = ca(dir);
    let old_leaf = std::fs::read(dir.join("envoy/tls.crt")).unwrap();
    let old = write(
        tmp.path(),
        "old.crt",
        &String::from_utf8(old_leaf.clone()).unwrap(),
    );
    overwrite_until_cleanup(dir, &[]);
    let ca1 = ca(dir);
    assert_ne!(ca0, ca1);
    for leaf in LEAVES {
        let bundle = std::fs::read(dir.join(leaf).join("ca.crt")).unwrap();
        assert_eq!(
            fingerprints(&bundle),
            [ca1.clone(), ca0.clone()],
            "{leaf}: new CA first, then the prior"
        );
        let (ok, text) = openssl_verify(
            &dir.join(leaf).join("ca.crt"),
            &dir.join(leaf).join("tls.crt"),
            "sslserver",
        );
        assert!(ok, "{text}");
        // A peer still presenting the old leaf is trusted by the new bundle.
        let (ok, text) = openssl_verify(&dir.join(leaf).join("ca.crt"), &old, "sslserver");
        assert!(ok, "old leaf against new bundle of {leaf}: {text}");
    }
    // The next run drops the prior CA: it signs nothing any more (and its key may have leaked).
    local(dir, &[]).ok();
    for leaf in LEAVES.iter().chain(&["envoy-gateway-ca"]) {
        let bundle = std::fs::read(dir.join(leaf).join("ca.crt")).unwrap();
        assert_eq!(
            fingerprints(&bundle),
            std::slice::from_ref(&ca1),
            "{leaf}: the prior CA is dropped"
        );
    }
    let (ok, _) = openssl_verify(&dir.join("envoy/ca.crt"), &old, "sslserver");
    assert!(!ok, "the old leaf is no longer trusted");
    local(dir, &["--overwrite"]).ok();
    let ca2 = ca(dir);
    assert!(ca2 != ca1 && ca2 != ca0);
    for leaf in LEAVES.iter().chain(&["envoy-gateway-ca"]) {
        let bundle = std::fs::read(dir.join(leaf).join("ca.crt")).unwrap();
        assert_eq!(fingerprints(&bundle), std::slice::from_ref(&ca2), "{leaf}");
    }
    assert_eq!(
        std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret")).unwrap(),
        hmac_before,
        "HMAC left alone"
    );
    local(dir, &["--overwrite", "--rotate-hmac"]).ok();
    assert_ne!(
        std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret")).unwrap(),
        hmac_before
    );
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let report = local(&dir, &["--dry-run"]).ok().json();
    assert!(!dir.exists(), "dry run created {}", dir.display());
    assert_eq!(report["dryRun"], true);
    let actions: Vec<&str> = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["create"; 5]);
    local(&dir, &[]).ok();
    let before = tree(&dir);
    let text = run(&["--local", dir.to_str().unwrap(), "--dry-run", "--overwrite"])
        .ok()
        .stdout;
    assert!(
        text.contains("trust") && text.contains("write(s) planned"),
        "{text}"
    );
    assert_eq!(tree(&dir), before);
}

#[test]
fn garbage_in_a_secret_is_refused_naming_it_and_force_repairs_it() {
    let tmp = tempdir();
    let dir = tmp.path();
    local(dir, &[]).ok();
    std::fs::write(
        dir.join("envoy/tls.crt"),
        "-----BEGIN CERTIFICATE-----\ngarbage\n",
    )
    .unwrap();
    let before = tree(dir);
    for extra in [&[][..], &["--overwrite"][..]] {
        let r = local(dir, extra);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(
            r.stderr
                .contains(&format!("{}", dir.join("envoy").display())),
            "{}",
            r.stderr
        );
        assert!(
            r.stderr.contains("tls.crt") && r.stderr.contains("--force"),
            "{}",
            r.stderr
        );
        assert_eq!(tree(dir), before, "nothing written");
    }
    local(dir, &["--force"]).ok();
    let (ok, text) = openssl_verify(
        &dir.join("envoy/ca.crt"),
        &dir.join("envoy/tls.crt"),
        "sslserver",
    );
    assert!(ok, "{text}");
}

#[test]
fn a_bad_config_exits_2_and_writes_nothing() {
    let tmp = tempdir();
    let cfg = write(
        tmp.path(),
        "bad.yaml",
        &run(&["profile", "show"])
            .ok()
            .stdout
            .replace("bytes: 32", "bytes: 32\n    color: blue"),
    );
    let dir = tmp.path().join("certs");
    let r = run(&[
        "--config",
        cfg.to_str().unwrap(),
        "--local",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("bad.yaml") && r.stderr.contains("color"),
        "{}",
        r.stderr
    );
    assert!(!dir.exists());
}

#[test]
fn profile_show_is_a_valid_config_that_reproduces_the_profile() {
    let tmp = tempdir();
    let cfg = write(
        tmp.path(),
        "eg.yaml",
        &run(&["profile", "show", "envoy-gateway"]).ok().stdout,
    );
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    let ra = local(&a, &["--dry-run"]).ok().json();
    let rb = run(&[
        "--config",
        cfg.to_str().unwrap(),
        "--local",
        b.to_str().unwrap(),
        "--dry-run",
        "--output",
        "json",
    ])
    .ok()
    .json();
    assert_eq!(ra["secrets"], rb["secrets"]);
    let r = run(&["profile", "show", "nope"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("envoy-gateway"),
        "lists the built-in profiles: {}",
        r.stderr
    );
}

#[test]
fn namespace_comes_from_the_environment_like_envoy_gateways_certgen() {
    let tmp = tempdir();
    let out = crate::util::certgen()
        .args(["--local", tmp.path().to_str().unwrap(), "-q"])
        .env("ENVOY_GATEWAY_NAMESPACE", "eg")
        .env("KUBERNETES_CLUSTER_DOMAIN", "corp.example")
        .output()
        .unwrap();
    crate::util::Run::from(out).ok();
    let s = sans(&tmp.path().join("envoy-gateway/tls.crt"));
    assert!(s.contains("DNS:envoy-gateway.eg.svc.corp.example"), "{s}");
    assert!(sans(&tmp.path().join("envoy/tls.crt")).contains("DNS:*.eg"));
}

#[test]
fn symlinked_secret_directories_are_refused() {
    let tmp = tempdir();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let dir = tmp.path().join("certs");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("envoy")).unwrap();
    let r = local(&dir, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    assert!(tree(&real).is_empty(), "nothing written through the link");
}

/// Writes what Envoy Gateway's own certgen writes: RSA-2048 PKCS#1 keys, one CA, no CA
/// directory, no EKUs, the envoy leaf reused for the rate limiter.
pub(crate) fn envoy_gateway_certgen_output(dir: &Path) {
    let work = dir.join(".eg");
    std::fs::create_dir_all(&work).unwrap();
    let p = |f: &str| work.join(f).to_str().unwrap().to_string();
    let sh = |args: &[&str]| {
        let (ok, text) = openssl(args);
        assert!(ok, "openssl {args:?}: {text}");
    };
    sh(&["genrsa", "-traditional", "-out", &p("ca.key"), "2048"]);
    sh(&[
        "req",
        "-x509",
        "-new",
        "-key",
        &p("ca.key"),
        "-subj",
        "/CN=envoy-gateway",
        "-days",
        "365",
        "-out",
        &p("ca.crt"),
    ]);
    for (name, cn, sans) in [
        (
            "envoy-gateway",
            "envoy-gateway",
            "DNS:envoy-gateway,DNS:envoy-gateway.envoy-gateway-system,DNS:envoy-gateway.envoy-gateway-system.svc,DNS:envoy-gateway.envoy-gateway-system.svc.cluster.local",
        ),
        ("envoy", "*", "DNS:*.envoy-gateway-system"),
    ] {
        sh(&[
            "genrsa",
            "-traditional",
            "-out",
            &p(&format!("{name}.key")),
            "2048",
        ]);
        sh(&[
            "req",
            "-new",
            "-key",
            &p(&format!("{name}.key")),
            "-subj",
            &format!("/CN={cn}"),
            "-out",
            &p(&format!("{name}.csr")),
        ]);
        write(
            &work,
            &format!("{name}.ext"),
            &format!("subjectAltName={sans}\nkeyUsage=digitalSignature,keyEncipherment\n"),
        );
        sh(&[
            "x509",
            "-req",
            "-in",
            &p(&format!("{name}.csr")),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "365",
            "-extfile",
            &p(&format!("{name}.ext")),
            "-out",
            &p(&format!("{name}.crt")),
        ]);
    }
    for (secret, leaf) in [
        ("envoy-gateway", "envoy-gateway"),
        ("envoy", "envoy"),
        ("envoy-rate-limit", "envoy"),
    ] {
        let d = dir.join(secret);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(work.join("ca.crt"), d.join("ca.crt")).unwrap();
        std::fs::copy(work.join(format!("{leaf}.crt")), d.join("tls.crt")).unwrap();
        std::fs::copy(work.join(format!("{leaf}.key")), d.join("tls.key")).unwrap();
    }
    std::fs::create_dir_all(dir.join("envoy-oidc-hmac")).unwrap();
    std::fs::write(dir.join("envoy-oidc-hmac/hmac-secret"), [9u8; 32]).unwrap();
    std::fs::rename(work.join("ca.crt"), dir.join("eg-ca.crt")).unwrap();
    std::fs::remove_dir_all(&work).unwrap();
}

#[test]
fn envoy_gateway_certgen_output_is_adopted_without_breaking_it() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    envoy_gateway_certgen_output(&dir);
    let eg_ca = dir.join("eg-ca.crt");
    let keep_aside = tmp.path().join("eg-ca.crt");
    std::fs::rename(&eg_ca, &keep_aside).unwrap();
    let before = tree(&dir);
    let old_leaf = tmp.path().join("old-envoy.crt");
    std::fs::copy(dir.join("envoy/tls.crt"), &old_leaf).unwrap();

    let report = local(&dir, &[]).ok().json();
    assert_eq!(
        report["writes"], 0,
        "valid leaves from Envoy Gateway's certgen are kept: {report}"
    );
    assert_eq!(tree(&dir), before);

    overwrite_until_cleanup(&dir, &[]);
    let eg_fp = fingerprints(&std::fs::read(&keep_aside).unwrap())[0].clone();
    for leaf in LEAVES {
        let bundle = std::fs::read(dir.join(leaf).join("ca.crt")).unwrap();
        let fps = fingerprints(&bundle);
        assert_eq!(fps.len(), 2, "{leaf}");
        assert_eq!(
            fps[1], eg_fp,
            "{leaf}: Envoy Gateway's CA stays trusted during the move"
        );
        let (ok, text) = openssl_verify(
            &dir.join(leaf).join("ca.crt"),
            &dir.join(leaf).join("tls.crt"),
            "sslserver",
        );
        assert!(ok, "{leaf}: {text}");
        let (ok, text) = openssl_verify(&dir.join(leaf).join("ca.crt"), &old_leaf, "any");
        assert!(
            ok,
            "{leaf}: a peer still on the old leaf is trusted: {text}"
        );
    }
    assert!(dir.join("envoy-gateway-ca/tls.key").exists());
    // Once the new leaves are out, Envoy Gateway's CA is no longer trusted.
    local(&dir, &[]).ok();
    for leaf in LEAVES {
        let fps = fingerprints(&std::fs::read(dir.join(leaf).join("ca.crt")).unwrap());
        assert_eq!(fps.len(), 1, "{leaf}");
        assert_ne!(fps[0], eg_fp, "{leaf}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_mode_probes_static_addresses() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    local(&dir, &[]).ok();
    let (port, server) = crate::util::tls_server(dir.join("envoy-gateway"), true).await;
    let profile = run(&["profile", "show"]).ok().stdout;
    let probe = format!(
        "consumers:\n  - name: eg\n    reload: hot\n    mounts: [envoy-gateway]\n    probe:\n      port: {port}\n      addresses: [\"127.0.0.1:{port}\"]\n      serverName: envoy-gateway.envoy-gateway-system.svc\n"
    );
    let text = profile[..profile.find("consumers:").unwrap()].to_string() + &probe;
    let cfg = write(tmp.path(), "probe.yaml", &text);
    let args = |extra: &[&str]| {
        let mut a = vec![
            "--config".to_string(),
            cfg.to_str().unwrap().into(),
            "--local".into(),
            dir.to_str().unwrap().into(),
            "--probe".into(),
            "--output".into(),
            "json".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let ok = tokio::task::spawn_blocking({
        let a = args(&[]);
        move || crate::util::Run::from(crate::util::certgen().args(a).output().unwrap())
    })
    .await
    .unwrap()
    .ok()
    .json();
    assert_eq!(ok["consumers"][0]["probes"][0]["ok"], true, "{ok}");
    server.abort();
    // Nothing listens any more: the probe fails within the timeout and names the address.
    let failed = tokio::task::spawn_blocking({
        let a = args(&["--timeout", "2s"]);
        move || crate::util::Run::from(crate::util::certgen().args(a).output().unwrap())
    })
    .await
    .unwrap();
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    assert!(
        failed.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        failed.stderr
    );
}

fn check(dir: &Path, extra: &[&str]) -> crate::util::Run {
    let mut args = vec!["check", "--local", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args)
}

/// What each Secret's visible names read (links followed), and whether each is a link.
fn visible_files(dir: &Path) -> Vec<(String, Vec<u8>, bool)> {
    let mut out = Vec::new();
    for secret in [
        "envoy-gateway-ca",
        "envoy-gateway",
        "envoy",
        "envoy-rate-limit",
    ] {
        for key in ["ca.crt", "tls.crt", "tls.key"] {
            let path = dir.join(secret).join(key);
            let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
            out.push((
                format!("{secret}/{key}"),
                std::fs::read(&path).unwrap_or_default(),
                link,
            ));
        }
    }
    out
}

#[test]
fn check_judges_the_files_consumers_read_and_a_plain_run_restores_them() {
    let tmp = tempdir();
    let dir = tmp.path();
    local(dir, &[]).ok();
    let healthy = visible_files(dir);
    assert!(
        healthy
            .iter()
            .all(|(_, data, link)| *link && !data.is_empty())
    );
    // Consumers read the top-level names; certgen's copies in ..data stay intact.
    let ca = dir.join("envoy/ca.crt");
    let full = std::fs::read(&ca).unwrap();
    std::fs::remove_file(&ca).unwrap();
    std::fs::write(&ca, &full[..full.len() / 2]).unwrap(); // a truncated copy replaces the link
    let gone = dir.join("envoy-gateway/tls.crt");
    std::fs::remove_file(&gone).unwrap();
    let key = dir.join("envoy-rate-limit/tls.key");
    let key_data = std::fs::read(&key).unwrap();
    std::fs::remove_file(&key).unwrap();
    std::fs::write(&key, &key_data).unwrap(); // a plain copy: right today, stale after a rotation

    let r = check(dir, &[]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    for path in [&ca, &gone, &key] {
        assert!(
            r.stdout.contains(&path.display().to_string()),
            "{} not named:\n{}",
            path.display(),
            r.stdout
        );
    }
    let report = check(dir, &["--output", "json"]).json();
    assert_eq!(report["healthy"], false, "{report}");

    // A dry run writes nothing; a plain run puts the links back and keeps every key.
    let before = tree(dir);
    local(dir, &["--dry-run"]).ok();
    assert_eq!(tree(dir), before);
    let report = local(dir, &[]).ok().json();
    let repaired: Vec<&str> = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "repair")
        .map(|e| e["secret"].as_str().unwrap())
        .collect();
    assert_eq!(
        repaired,
        ["envoy-gateway", "envoy", "envoy-rate-limit"],
        "{report}"
    );
    assert_eq!(visible_files(dir), healthy, "same data, links again");
    check(dir, &[]).ok();
    let after = tree(dir);
    let report = local(dir, &[]).ok().json();
    assert_eq!(report["writes"], 0, "{report}");
    assert_eq!(tree(dir), after, "repaired means a no-op next time");
}

#[test]
fn a_visible_file_certgen_cannot_account_for_is_refused_naming_it() {
    let tmp = tempdir();
    let dir = tmp.path();
    local(dir, &[]).ok();
    let ca = dir.join("envoy/ca.crt");
    std::fs::remove_file(&ca).unwrap();
    // Someone else's file where the link was: certgen cannot tell which copy is meant.
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nsomeone else's\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let before = tree(dir);
    for extra in [&[][..], &["--overwrite"][..]] {
        let r = local(dir, extra);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(
            r.stderr.contains(&ca.display().to_string()) && r.stderr.contains("--force"),
            "{}",
            r.stderr
        );
        assert_eq!(tree(dir), before, "nothing written");
    }
    let r = check(dir, &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains(&ca.display().to_string()), "{}", r.stdout);
    local(dir, &["--force"]).ok();
    assert!(
        std::fs::symlink_metadata(&ca)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    check(dir, &[]).ok();
}

/// The healthy report itself, text and JSON, is a snapshot (`snapshots.rs`); the fingerprints it
/// filters out are compared here.
#[test]
fn check_names_the_active_ca_as_the_issuer_of_the_leaves() {
    let tmp = tempdir();
    local(tmp.path(), &[]).ok();
    let report = check(tmp.path(), &["--output", "json"]).ok().json();
    let rows = report["secrets"].as_array().unwrap();
    assert_eq!(
        rows[1]["issuer"], rows[0]["issuer"],
        "leaves issued by the active CA"
    );
}

#[test]
fn check_exits_1_naming_what_is_due() {
    let tmp = tempdir();
    let dir = tmp.path();
    // Leaves that expire in 2 hours, checked against a config that renews 5 days ahead.
    let profile = run(&["profile", "show"]).ok().stdout;
    let short = write(
        dir,
        "short.yaml",
        &profile
            .replace("validity: 1825d", "validity: 2h")
            .replace("renewBefore: 30d", "renewBefore: 1h"),
    );
    let long = write(
        dir,
        "long.yaml",
        &profile
            .replace("validity: 1825d", "validity: 10d")
            .replace("renewBefore: 30d", "renewBefore: 5d"),
    );
    let certs = dir.join("certs");
    run(&[
        "--config",
        short.to_str().unwrap(),
        "--local",
        certs.to_str().unwrap(),
        "-q",
    ])
    .ok();
    let r = run(&[
        "check",
        "--config",
        long.to_str().unwrap(),
        "--local",
        certs.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.is_empty(),
        "a failed check is an outcome, not an error: {}",
        r.stderr
    );
    let report = r.json();
    assert_eq!(report["healthy"], false);
    let envoy = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["secret"] == "envoy")
        .unwrap()
        .clone();
    assert_eq!(envoy["status"], "due");
    assert!(
        envoy["problems"][0]
            .as_str()
            .unwrap()
            .contains("within renewBefore"),
        "{envoy}"
    );

    // Garbage is reported as invalid, with the other Secrets still checked.
    std::fs::write(certs.join("envoy/..data/tls.crt"), "garbage").unwrap();
    let r = check(&certs, &[]);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout.contains("envoy: tls.crt: no PEM certificate"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("invalid"), "{}", r.stdout);
}

#[test]
fn check_shows_a_half_done_rotation_and_missing_trust() {
    let tmp = tempdir();
    let dir = tmp.path();
    local(dir, &[]).ok();
    // Stop a staged rotation after its first write: the pending CA is stored, bundles not yet.
    let out = crate::util::certgen()
        .args(["--local", dir.to_str().unwrap(), "--overwrite", "-q"])
        .env(certgen::apply::CRASH_ENV, "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(certgen::apply::CRASH_EXIT));
    let r = check(dir, &["--output", "json"]);
    assert_eq!(r.code, 1);
    assert!(
        r.json()["rotation"]
            .as_str()
            .unwrap()
            .contains("pending CA"),
        "{}",
        r.stdout
    );
    // A leaf from a CA the other peers do not trust.
    local(dir, &[]).ok();
    let other = tempdir();
    local(other.path(), &[]).ok();
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(
            other.path().join("envoy").join(f),
            dir.join("envoy/..data").join(f),
        )
        .unwrap();
    }
    let r = check(dir, &[]);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout
            .contains("not trusted by the bundle of envoy-gateway, envoy, envoy-rate-limit"),
        "{}",
        r.stdout
    );
}

/// A config whose only hot consumer is probed at `port`, with a long propagation delay.
fn probed_config(dir: &Path, port: u16) -> std::path::PathBuf {
    let profile = run(&["profile", "show"]).ok().stdout;
    let consumers = format!(
        "consumers:\n  - name: eg\n    reload: hot\n    mounts: [envoy-gateway]\n    probe:\n      port: {port}\n      addresses: [\"127.0.0.1:{port}\"]\n      serverName: envoy-gateway.envoy-gateway-system.svc\n"
    );
    write(
        dir,
        "probed.yaml",
        &(profile[..profile.find("consumers:").unwrap()].to_string() + &consumers),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_open_the_trust_gate_early_only_when_every_hot_consumer_has_the_new_ca() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    local(&dir, &[]).ok();
    let rotate = |cfg: std::path::PathBuf, dir: std::path::PathBuf, timeout: &'static str| {
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let out = crate::util::certgen()
                .args([
                    "--config",
                    cfg.to_str().unwrap(),
                    "--local",
                    dir.to_str().unwrap(),
                    "--overwrite",
                ])
                .args(["--propagation-delay", "60s", "--timeout", timeout, "-q"])
                .output()
                .unwrap();
            (crate::util::Run::from(out), started.elapsed())
        })
    };

    // A server that reloads its files trusts the pending CA as soon as the bundle is written.
    let (port, hot) = crate::util::tls_server(dir.join("envoy-gateway"), true).await;
    let (r, took) = rotate(probed_config(tmp.path(), port), dir.clone(), "50s")
        .await
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        took < std::time::Duration::from_secs(30),
        "the probe opened the 60 s gate early ({took:?})"
    );
    hot.abort();

    // One that never reloads does not: the gate stays shut until the delay, past --timeout.
    // (A fresh installation: the one above just wrote leaves, which gates its next rotation.)
    let dir = tmp.path().join("certs2");
    local(&dir, &[]).ok();
    let (port, stale) = crate::util::tls_server(dir.join("envoy-gateway"), false).await;
    let (r, _) = rotate(probed_config(tmp.path(), port), dir.clone(), "4s")
        .await
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("every bundle trusts"), "{}", r.stderr);
    stale.abort();
}

#[test]
fn an_absurd_timeout_means_no_bound_not_a_panic() {
    // Was: `--timeout 584542046090y` overflowed the deadline and panicked (exit 101).
    let tmp = tempdir();
    let out = crate::util::certgen()
        .args(["--local", tmp.path().to_str().unwrap(), "-q"])
        .args(["--timeout", "584542046090y"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A run whose only write is the CA Secret's bundle makes it (the look that decides whether to
/// take the lock counts the CA Secret's writes too), and the next run has nothing to do.
#[test]
fn a_bundle_fix_of_the_ca_secret_alone_is_written() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    local(&dir, &[]).ok();
    // The same CA twice in the CA Secret's own copy of its bundle: out of date, nothing else is.
    let bundle = dir.join("envoy-gateway-ca/..data/ca.crt");
    let once = std::fs::read(&bundle).unwrap();
    std::fs::write(&bundle, [once.clone(), once.clone()].concat()).unwrap();
    let report = local(&dir, &[]).ok().json();
    assert_eq!(report["writes"], 1, "{report}");
    assert_eq!(report["secrets"][0]["action"], "update-bundle", "{report}");
    assert_eq!(std::fs::read(&bundle).unwrap(), once);
    assert_eq!(local(&dir, &[]).ok().json()["writes"], 0);
}
