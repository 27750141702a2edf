//! The local store through the binary (`--local`): what a newcomer runs first and the files it
//! writes (modes, SANs, links through `..data`), byte-for-byte no-op re-runs, the dry run,
//! `profile show`, the namespace from the environment, and `certgen check` on a directory,
//! including the files consumers read and a plain run that restores them. Refused input is in
//! `bad_input`, rotations in `rotation`, probes in `probe`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::util::trust::{LEAF_SECRETS, openssl, openssl_verify};
use crate::util::{
    KILLED, Run, certgen, check_local, check_row, kill_after_write, local, profile, run, run_local,
    tempdir, tree, write,
};

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
    let report = run_local(&dir, &[]).ok().json();
    assert_eq!(report["writes"], 5);
    for leaf in LEAF_SECRETS {
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
    run_local(tmp.path(), &[]).ok();
    let before = tree(tmp.path());
    for _ in 0..3 {
        let report = run_local(tmp.path(), &[]).ok().json();
        assert_eq!(report["writes"], 0, "{report}");
        assert_eq!(tree(tmp.path()), before);
    }
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let report = run_local(&dir, &["--dry-run"]).ok().json();
    assert!(!dir.exists(), "dry run created {}", dir.display());
    assert_eq!(report["dryRun"], true);
    let actions: Vec<&str> = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["create"; 5]);
    run_local(&dir, &[]).ok();
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
fn profile_show_is_a_valid_config_that_reproduces_the_profile() {
    let tmp = tempdir();
    let cfg = write(
        tmp.path(),
        "eg.yaml",
        &run(&["profile", "show", "envoy-gateway"]).ok().stdout,
    );
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    let ra = run_local(&a, &["--dry-run"]).ok().json();
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
    Run::of(
        certgen()
            .args(["--local", tmp.path().to_str().unwrap(), "-q"])
            .env("ENVOY_GATEWAY_NAMESPACE", "eg")
            .env("KUBERNETES_CLUSTER_DOMAIN", "corp.example"),
    )
    .ok();
    let s = sans(&tmp.path().join("envoy-gateway/tls.crt"));
    assert!(s.contains("DNS:envoy-gateway.eg.svc.corp.example"), "{s}");
    assert!(sans(&tmp.path().join("envoy/tls.crt")).contains("DNS:*.eg"));
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
    run_local(dir, &[]).ok();
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

    let r = check_local(dir, &[]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    for path in [&ca, &gone, &key] {
        assert!(
            r.stdout.contains(&path.display().to_string()),
            "{} not named:\n{}",
            path.display(),
            r.stdout
        );
    }
    let report = check_local(dir, &["--output", "json"]).json();
    assert_eq!(report["healthy"], false, "{report}");

    // A dry run writes nothing; a plain run puts the links back and keeps every key.
    let before = tree(dir);
    run_local(dir, &["--dry-run"]).ok();
    assert_eq!(tree(dir), before);
    let report = run_local(dir, &[]).ok().json();
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
    check_local(dir, &[]).ok();
    let after = tree(dir);
    let report = run_local(dir, &[]).ok().json();
    assert_eq!(report["writes"], 0, "{report}");
    assert_eq!(tree(dir), after, "repaired means a no-op next time");
}

/// The healthy report itself, text and JSON, is a snapshot (`snapshots.rs`); the fingerprints it
/// filters out are compared here.
#[test]
fn check_names_the_active_ca_as_the_issuer_of_the_leaves() {
    let tmp = tempdir();
    run_local(tmp.path(), &[]).ok();
    let report = check_local(tmp.path(), &["--output", "json"]).ok().json();
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
    let profile = profile();
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
    let envoy = check_row(&report, "envoy");
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
    let r = check_local(&certs, &[]);
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
    run_local(dir, &[]).ok();
    // Stop a staged rotation after its first write: the pending CA is stored, bundles not yet.
    let r = Run::of(kill_after_write(local(dir).arg("--overwrite"), 1));
    assert_eq!(r.code, KILLED, "{}", r.stderr);
    let r = check_local(dir, &["--output", "json"]);
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
    run_local(dir, &[]).ok();
    let other = tempdir();
    run_local(other.path(), &[]).ok();
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(
            other.path().join("envoy").join(f),
            dir.join("envoy/..data").join(f),
        )
        .unwrap();
    }
    let r = check_local(dir, &[]);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout
            .contains("not trusted by the bundle of envoy-gateway, envoy, envoy-rate-limit"),
        "{}",
        r.stdout
    );
}

/// A run whose only write is the CA Secret's bundle makes it (the look that decides whether to
/// take the lock counts the CA Secret's writes too), and the next run has nothing to do.
#[test]
fn a_bundle_fix_of_the_ca_secret_alone_is_written() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    run_local(&dir, &[]).ok();
    // The same CA twice in the CA Secret's own copy of its bundle: out of date, nothing else is.
    let bundle = dir.join("envoy-gateway-ca/..data/ca.crt");
    let once = std::fs::read(&bundle).unwrap();
    std::fs::write(&bundle, [once.clone(), once.clone()].concat()).unwrap();
    let report = run_local(&dir, &[]).ok().json();
    assert_eq!(report["writes"], 1, "{report}");
    assert_eq!(report["secrets"][0]["action"], "update-bundle", "{report}");
    assert_eq!(std::fs::read(&bundle).unwrap(), once);
    assert_eq!(run_local(&dir, &[]).ok().json()["writes"], 0);
}

/// Issue 45: a routine renewal outside the renewal window is held (exit 0, nothing written,
/// the next window named, `check` healthy with the rows `waiting`); one that cannot wait
/// goes at once with its reason. The store's clock (the file system's) is `now`: the window
/// is placed two days after it.
#[test]
fn a_renewal_window_holds_a_routine_renewal_and_lets_an_emergency_through() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let base = profile();
    // Installed with 30-day leaves; then a config whose renewBefore (45d) makes them due.
    let short = write(
        tmp.path(),
        "short.yaml",
        &base
            .replace("validity: 1825d", "validity: 30d")
            .replace("renewBefore: 30d", "renewBefore: 1d"),
    );
    let due = write(
        tmp.path(),
        "due.yaml",
        &base
            .replace("validity: 1825d", "validity: 60d")
            .replace("renewBefore: 30d", "renewBefore: 45d"),
    );
    run_local(&dir, &["--config", short.to_str().unwrap()]).ok();
    let before = tree(&dir);
    let at = time::OffsetDateTime::now_utc() + time::Duration::days(2);
    let window = format!(
        "{} {} {} {} *;1h;UTC",
        at.minute(),
        at.hour(),
        at.day(),
        u8::from(at.month())
    );
    let config = [
        "--config",
        due.to_str().unwrap(),
        "--renewal-window",
        &window,
    ];
    let held = run_local(&dir, &config).ok().json();
    assert_eq!(held["writes"], 0);
    assert_eq!(held["renewalWindow"]["open"], false);
    assert!(held["renewalWindow"]["nextStart"].is_string());
    assert_eq!(
        held["renewalWindow"]["waiting"].as_array().unwrap().len(),
        3
    );
    assert_eq!(tree(&dir), before, "a held run writes nothing");
    // It says it is held, and until when, rather than "nothing to do".
    assert_eq!(
        held["renewalWindow"]["heldUntil"],
        held["renewalWindow"]["nextStart"]
    );
    let text = crate::util::Run::of(
        crate::util::certgen()
            .args(["--local", dir.to_str().unwrap(), "-q"])
            .args(config),
    )
    .ok();
    let until = held["renewalWindow"]["nextStart"].as_str().unwrap();
    assert!(
        text.stdout.contains(&format!(
            "Held for the renewal window: 3 renewal(s) due wait until it opens at {until}"
        )) && !text.stdout.contains("Nothing to do"),
        "{}",
        text.stdout
    );
    let check = check_local(&dir, &[&config[..], &["--output", "json"]].concat()).json();
    assert_eq!(check["healthy"], true);
    assert_eq!(check_row(&check, "envoy")["status"], "waiting");
    // A margin longer than what is left: the renewal cannot wait.
    let now = run_local(
        &dir,
        &[&config[..], &["--renewal-window-margin", "40d"]].concat(),
    )
    .ok()
    .json();
    assert_eq!(now["writes"], 3);
    let emergency = now["renewalWindow"]["emergency"].as_array().unwrap();
    assert_eq!(emergency.len(), 3, "{emergency:?}");
    assert!(emergency[0].as_str().unwrap().contains("cannot wait"));
}
