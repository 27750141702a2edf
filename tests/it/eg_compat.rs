//! certgen as a drop-in for Envoy Gateway's certgen, through the binary in local mode: its
//! flags and environment (the v1.6+ local default `$CONFIG_HOME/certs`,
//! `~/.config/envoy-gateway`, `--config-home`, `--disable-topology-injector`, an empty
//! `ENVOY_GATEWAY_NAMESPACE`), the "next renewal due" date in the run report and
//! `certgen check`, the `envoy-gateway certgen` invocation, and the adoption of the files Envoy
//! Gateway's certgen wrote. The same on the real control plane, under Envoy Gateway's chart
//! RBAC: `cluster::eg_compat`.

use std::path::Path;

use crate::util::trust::{LEAF_SECRETS, fingerprints, openssl_verify};
use crate::util::{
    Run, certgen, command, envoy_gateway, overwrite_until_cleanup, run_local, tempdir, tree,
};

fn run_in(home: &Path, args: &[&str]) -> Run {
    Run::of(certgen().env("HOME", home).args(args))
}

#[test]
fn local_without_dir_writes_envoy_gateways_config_home() {
    let tmp = tempdir();
    let home = tmp.path();
    run_in(home, &["--local", "-q"]).ok();
    let certs = home.join(".config/envoy-gateway/certs");
    for f in [
        "envoy-gateway/tls.crt",
        "envoy/ca.crt",
        "envoy-oidc-hmac/hmac-secret",
    ] {
        assert!(certs.join(f).is_file(), "{f} under {}", certs.display());
    }
    // Envoy Gateway's spelling: a bare -l, and --config-home after it.
    let other = home.join("other");
    run_in(
        home,
        &["-l", "--config-home", other.to_str().unwrap(), "-q"],
    )
    .ok();
    assert!(other.join("certs/envoy-gateway/tls.key").is_file());
    // `check` resolves the same directory.
    let r = run_in(home, &["check", "--local"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(".config/envoy-gateway/certs"),
        "{}",
        r.stdout
    );
    // --config-home alone does not mean local mode (Envoy Gateway ignores it in a cluster too).
    let r = run_in(
        home,
        &[
            "--config-home",
            "/nonexistent",
            "--kubeconfig",
            "/nonexistent",
            "--dry-run",
        ],
    );
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("--config-home only matters with --local"),
        "{}",
        r.stderr
    );
}

#[test]
fn envoy_gateways_flags_are_accepted() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let d = dir.to_str().unwrap();
    run_in(
        tmp.path(),
        &["--local", d, "--disable-topology-injector", "-o", "-q"],
    )
    .ok();
    assert!(dir.join("envoy-gateway/ca.crt").is_file());
    // --help lists them: the help_of_every_command snapshot.
}

#[test]
fn an_empty_envoy_gateway_namespace_is_refused_and_nothing_is_written() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let r = Run::from(
        certgen()
            .env("ENVOY_GATEWAY_NAMESPACE", "")
            .args(["--local", dir.to_str().unwrap()])
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("ENVOY_GATEWAY_NAMESPACE is set but empty"),
        "{}",
        r.stderr
    );
    assert!(tree(&dir).is_empty(), "nothing written");
    // -n wins over it, as over every environment variable.
    let r = Run::from(
        certgen()
            .env("ENVOY_GATEWAY_NAMESPACE", "")
            .args(["--local", dir.to_str().unwrap(), "-n", "eg", "-q"])
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn the_report_and_check_say_when_the_next_renewal_is_due() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let d = dir.to_str().unwrap();
    let report = run_in(tmp.path(), &["--local", d, "--output", "json", "-q"])
        .ok()
        .json();
    // The profile's leaves live 1825 days and renew 30 days ahead: due in 1795 days, before
    // the CA (3650 days, 90 ahead).
    let due = report["nextRenewal"]["due"].as_str().unwrap().to_string();
    let first = report["nextRenewal"]["secret"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        ["envoy-gateway", "envoy", "envoy-rate-limit"].contains(&first.as_str()),
        "a leaf is due first: {report}"
    );
    let due_t =
        time::OffsetDateTime::parse(&due, &time::format_description::well_known::Rfc3339).unwrap();
    let days = (due_t - time::OffsetDateTime::now_utc()).whole_days();
    assert!((1793..=1795).contains(&days), "{days} days: {report}");

    let check = run_in(tmp.path(), &["check", "--local", d, "--output", "json"])
        .ok()
        .json();
    assert_eq!(check["nextRenewal"]["due"], due.as_str(), "{check}");
    let text = run_in(tmp.path(), &["check", "--local", d]).ok().stdout;
    assert!(
        text.contains(&format!("Next renewal due: {due} ({first})")),
        "{text}"
    );
}

/// Envoy Gateway's chart runs `envoy-gateway certgen [args]`: with certgen linked as
/// `envoy-gateway`, that command works unchanged, and other subcommands are refused (exit 2).
#[test]
fn invoked_as_envoy_gateway_the_certgen_subcommand_is_accepted() {
    let tmp = tempdir();
    let link = envoy_gateway::link_in(tmp.path());
    let dir = tmp.path().join("certs");
    let r = Run::of(command(&link).args(["certgen", "--local", dir.to_str().unwrap(), "-o", "-q"]))
        .ok();
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(dir.join("envoy-gateway/tls.crt").is_file());
    let r = Run::of(command(&link).arg("server"));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("only `envoy-gateway certgen`"),
        "{}",
        r.stderr
    );
}

#[test]
fn envoy_gateway_certgen_output_is_adopted_without_breaking_it() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let eg = envoy_gateway::generate(&envoy_gateway::LOCAL);
    eg.write_local(&dir);
    let before = tree(&dir);
    let old_leaf = tmp.path().join("old-envoy.crt");
    std::fs::copy(dir.join("envoy/tls.crt"), &old_leaf).unwrap();

    let report = run_local(&dir, &[]).ok().json();
    assert_eq!(
        report["writes"], 0,
        "valid leaves from Envoy Gateway's certgen are kept: {report}"
    );
    assert_eq!(tree(&dir), before);

    overwrite_until_cleanup(&dir);
    let eg_fp = fingerprints(&eg.ca)[0].clone();
    for leaf in LEAF_SECRETS {
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
    run_local(&dir, &[]).ok();
    for leaf in LEAF_SECRETS {
        let fps = fingerprints(&std::fs::read(dir.join(leaf).join("ca.crt")).unwrap());
        assert_eq!(fps.len(), 1, "{leaf}");
        assert_ne!(fps[0], eg_fp, "{leaf}");
    }
}
