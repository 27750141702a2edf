//! Envoy Gateway's `certgen` flags and environment through the binary, in local mode: the v1.6+
//! local default (`$CONFIG_HOME/certs`, `~/.config/envoy-gateway`), `--config-home`,
//! `--disable-topology-injector`, an empty `ENVOY_GATEWAY_NAMESPACE`, and the "next renewal
//! due" date in the run report and `certgen check`.

use std::path::Path;

use crate::util::{Run, certgen, tempdir, tree};

fn run_in(home: &Path, args: &[&str]) -> Run {
    Run::from(
        certgen()
            .env("HOME", home)
            .args(args)
            .output()
            .expect("run certgen"),
    )
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
    let link = tmp.path().join("envoy-gateway");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_certgen"), &link).unwrap();
    let dir = tmp.path().join("certs");
    let r = Run::from(
        std::process::Command::new(&link)
            .args(["certgen", "--local", dir.to_str().unwrap(), "-o", "-q"])
            .env_remove("ENVOY_GATEWAY_NAMESPACE")
            .env_remove("CERTGEN_NAMESPACE")
            .output()
            .unwrap(),
    )
    .ok();
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(dir.join("envoy-gateway/tls.crt").is_file());
    let r = Run::from(
        std::process::Command::new(&link)
            .arg("server")
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("only `envoy-gateway certgen`"),
        "{}",
        r.stderr
    );
}
