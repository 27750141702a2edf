//! Valid is what a TLS verifier says (issue 31), through the binary in local mode: the three
//! classes an outside review broke, each as its reproduction, checked by verifiers certgen did
//! not write (rustls-webpki across every pair of states consumers may hold, and `openssl
//! verify`):
//!
//! 1. the CA Secret restored to its state at a rotation's trust gate, after the rotation;
//! 2. clocks: a writer whose clock runs an hour ahead (real libfaketime), a clock stepped
//!    during a run, and a wall clock stepped forward between two runs;
//! 3. a CA no verifier accepts planted in the CA Secret, one test per constraint, each
//!    confirmed by `openssl verify`.
//!
//! The same classes on the test control plane: `cluster::valid`; in the simulation:
//! `sim::cases` (restores at any point, clock steps, constrained CAs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::trust::{LEAF_SECRETS, Snapshot, local_snapshot, openssl_verify, webpki_verifies};
use crate::util::{Run, local, run_local, tempdir, tree};

/// Every leaf of every snapshot against every bundle of every snapshot (consumers may hold any
/// of them at once), by rustls-webpki now, for server and client use: the failures.
fn cross_pairs(snapshots: &[(&str, &Snapshot)]) -> Vec<String> {
    let now = rustls_pki_types::UnixTime::now();
    let parse = |b: &Vec<u8>| certgen::pki::parse_cert_chain(b).unwrap_or_default();
    let mut failures = Vec::new();
    for (la, a) in snapshots {
        for (lb, b) in snapshots {
            for leaf_secret in LEAF_SECRETS {
                let Some(leaf) = a[leaf_secret].get("tls.crt").map(parse) else {
                    continue;
                };
                for bundle_secret in LEAF_SECRETS {
                    let Some(bundle) = b[bundle_secret].get("ca.crt").map(parse) else {
                        continue;
                    };
                    if let Err(e) = webpki_verifies(&leaf[0], &bundle, now) {
                        failures.push(format!(
                            "client {leaf_secret}@{la} -> server {bundle_secret}@{lb}: {e}"
                        ));
                    }
                }
            }
        }
    }
    failures
}

fn cp(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}

fn leaves(dir: &Path) -> BTreeMap<&'static str, Vec<u8>> {
    LEAF_SECRETS
        .iter()
        .map(|s| (*s, std::fs::read(dir.join(s).join("tls.crt")).unwrap()))
        .collect()
}

/// Class 1, the issue's reproduction: a backup of the CA Secret taken at the trust gate of a
/// rotation, restored after the rotation's cleanup (a GitOps revert, a Velero restore). The
/// held Secrets agree on the new CA, whose key certgen holds: nothing is issued again, and no
/// leaf of the old CA is written; only the CA Secret is brought up to date. (Before: every
/// bundle became [new, old] and every leaf was issued by the old CA in the same step, and 12
/// of the 24 pairs across the two states failed with "unknown authority".)
#[test]
fn a_ca_secret_restored_to_the_trust_gate_after_the_rotation_brings_nothing_back() {
    let tmp = tempdir();
    let d = tmp.path().join("d");
    let a = ["--propagation-delay", "2s", "--timeout", "1s"];
    run_local(&d, &[]).ok();
    let trust = run_local(&d, &[&["--overwrite"][..], &a].concat());
    assert_eq!(
        trust.code, 3,
        "the trust step, then the gate: {}",
        trust.stderr
    );
    let backup = tmp.path().join("bak-ca");
    cp(&d.join("envoy-gateway-ca"), &backup);
    std::thread::sleep(Duration::from_millis(2500));
    // The leaves (the cleanup's gate is past --timeout: left to the next run).
    run_local(&d, &a).ok();
    std::thread::sleep(Duration::from_millis(2500));
    run_local(&d, &a).ok();
    let s0 = local_snapshot(&d);
    let held = leaves(&d);
    std::fs::remove_dir_all(d.join("envoy-gateway-ca")).unwrap();
    cp(&backup, &d.join("envoy-gateway-ca"));
    let restored = local_snapshot(&d);
    // What the next run would do, said before it does it.
    let dry = run_local(&d, &[&["--dry-run"][..], &a].concat()).ok();
    let r = run_local(&d, &a).ok();
    let s1 = local_snapshot(&d);
    let failures = cross_pairs(&[("0", &s0), ("1", &s1), ("restored", &restored)]);
    assert!(failures.is_empty(), "{failures:#?}\n{}", r.stdout);
    assert_eq!(leaves(&d), held, "no leaf is issued again: {}", r.stdout);
    let report = r.json();
    let written: Vec<&str> = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] != "keep")
        .map(|e| e["secret"].as_str().unwrap())
        .collect();
    assert_eq!(written, ["envoy-gateway-ca"], "{}", r.stdout);
    assert_eq!(
        dry.json()["secrets"],
        report["secrets"],
        "the dry run says the same"
    );
    // One more plain run: nothing to do.
    let again = run_local(&d, &a).ok();
    assert!(
        again.json()["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["action"] == "keep"),
        "{}",
        again.stdout
    );
}

/// `faketime` on certgen: the fake clock is the process's (libc's), never the file system's.
fn faketime(offset: &str) -> Command {
    let mut cmd = Command::new("faketime");
    cmd.args(["-f", offset]).arg(crate::util::binary());
    for var in [
        "CERTGEN_NAMESPACE",
        "ENVOY_GATEWAY_NAMESPACE",
        "KUBERNETES_CLUSTER_DOMAIN",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn faketime_local(offset: &str, dir: &Path, extra: &[&str]) -> Run {
    Run::of(
        faketime(offset)
            .args(["--local", dir.to_str().unwrap(), "-q", "--output", "json"])
            .args(extra),
    )
}

/// Every leaf verifies against its own bundle and every peer's with `openssl verify` now (the
/// reference verifier, the real clock).
fn openssl_all(dir: &Path) {
    for leaf in LEAF_SECRETS {
        for bundle in LEAF_SECRETS {
            for purpose in ["sslserver", "sslclient"] {
                let (ok, text) = openssl_verify(
                    &dir.join(bundle).join("ca.crt"),
                    &dir.join(leaf).join("tls.crt"),
                    purpose,
                );
                assert!(
                    ok,
                    "{leaf}'s leaf against {bundle}'s bundle ({purpose}): {text}"
                );
            }
        }
    }
}

/// Class 2: a run whose clock is an hour ahead (libfaketime on the writer) issues what is
/// valid by the file system's clock, the one the Secrets' times and their consumers are on.
/// (Before: every leaf was valid only from 55 minutes later; every run said "nothing to do"
/// and `check` said healthy, while every handshake failed.)
#[test]
fn a_writer_whose_clock_is_an_hour_ahead_issues_nothing_that_is_not_valid_yet() {
    let tmp = tempdir();
    let d = tmp.path().join("ft");
    faketime_local("+1h", &d, &[]).ok();
    openssl_all(&d);
    let check = crate::util::check_local(&d, &[]);
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
    // And in the middle of a rotation: a writer an hour ahead takes nothing it wrote for an
    // hour old (before: one --overwrite did the trust, leaves and cleanup steps at once).
    let before = leaves(&d);
    let r = faketime_local(
        "+1h",
        &d,
        &[
            "--overwrite",
            "--propagation-delay",
            "30s",
            "--timeout",
            "2s",
        ],
    );
    assert_eq!(r.code, 3, "the gate holds: {}{}", r.stdout, r.stderr);
    assert_eq!(leaves(&d), before, "no leaf before the gate");
    openssl_all(&d);
}

/// Class 2: leaves a writer with a clock an hour ahead left (valid only from 55 minutes on,
/// from a CA valid now) are due, and a plain run with the true clock issues them again at once
/// from the same CA, which every bundle trusts already: no gate needed. (Before: "nothing to
/// do", `check` healthy.)
#[test]
fn certificates_not_valid_yet_are_due_and_replaced() {
    use certgen::pki::{CaSpec, KeyAlgorithm, bundle_pem, issue_ca, issue_leaf};
    let tmp = tempdir();
    let d = tmp.path().join("ahead");
    let config = crate::sim::config();
    let ahead = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let spec = CaSpec {
        common_name: "envoy-gateway".into(),
        validity: Duration::from_secs(3650 * 86_400),
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    let (ca, _) = issue_ca(&spec, time::OffsetDateTime::now_utc()).unwrap();
    let file = |secret: &str, key: &str, value: &[u8]| {
        let dir = d.join(secret);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(key), value).unwrap();
    };
    let ca_pem = bundle_pem(std::slice::from_ref(&ca.cert));
    file("envoy-gateway-ca", "tls.crt", ca_pem.as_bytes());
    file(
        "envoy-gateway-ca",
        "tls.key",
        ca.key_pem().expose().as_bytes(),
    );
    file("envoy-gateway-ca", "ca.crt", ca_pem.as_bytes());
    for t in &config.tls {
        let leaf = issue_leaf(&t.leaf, &ca, ahead).unwrap();
        file(&t.name, "tls.crt", leaf.cert.pem().as_bytes());
        file(&t.name, "tls.key", leaf.key.expose().as_bytes());
        file(&t.name, "ca.crt", ca_pem.as_bytes());
    }
    file("envoy-oidc-hmac", "hmac-secret", &[7u8; 32]);
    for s in LEAF_SECRETS {
        let (ok, text) = openssl_verify(
            &d.join(s).join("ca.crt"),
            &d.join(s).join("tls.crt"),
            "sslserver",
        );
        assert!(!ok, "{s}: the state is broken (not valid yet): {text}");
    }
    let check = crate::util::check_local(&d, &["--output", "json"]);
    assert_eq!(check.code, 1, "not valid yet is due: {}", check.stdout);
    assert!(
        check.stdout.contains("not valid before"),
        "{}",
        check.stdout
    );
    let ca_before = std::fs::read(d.join("envoy-gateway-ca/tls.crt")).unwrap();
    let r = run_local(&d, &["--propagation-delay", "1h", "--timeout", "5s"]).ok();
    let after = local_snapshot(&d);
    openssl_all(&d);
    assert!(cross_pairs(&[("after", &after)]).is_empty(), "{}", r.stdout);
    let ca_after = std::fs::read(d.join("envoy-gateway-ca/tls.crt")).unwrap();
    assert_eq!(
        ca_before, ca_after,
        "the same CA issues them again, no gate: {}",
        r.stdout
    );
    assert_eq!(crate::util::check_local(&d, &[]).code, 0);
}

/// Class 2: the wall clock stepped forward an hour between two runs (here: every write time
/// moved an hour back, which is what such a step looks like to the next run). The gate still
/// holds: each write also recorded the machine's monotonic clock (and the writer's).
/// (Before: the next run took the trust write for an hour old and wrote the leaves at once.)
#[test]
fn a_clock_stepped_forward_between_runs_never_shortens_a_gate() {
    let tmp = tempdir();
    let d = tmp.path().join("d");
    let a = ["--propagation-delay", "30s", "--timeout", "1s"];
    run_local(&d, &[]).ok();
    let before = leaves(&d);
    let r = run_local(&d, &[&["--overwrite"][..], &a].concat());
    assert_eq!(r.code, 3, "trust, then the gate: {}", r.stderr);
    // Every time under the directory an hour back, links included.
    let ok = Command::new("sh")
        .arg("-c")
        .arg("find \"$1\" -exec touch -h -d '1 hour ago' {} +")
        .arg("sh")
        .arg(&d)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let r = run_local(&d, &a);
    assert_eq!(r.code, 3, "the gate holds: {}{}", r.stdout, r.stderr);
    assert_eq!(leaves(&d), before, "no leaf before the gate");
}

/// A file libfaketime reads the fake offset from at every call: the clock can be stepped while
/// certgen runs.
fn stepping_faketime(file: &Path) -> Command {
    let mut cmd = crate::util::certgen();
    cmd.env(
        "LD_PRELOAD",
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    )
    .env("FAKETIME_TIMESTAMP_FILE", file)
    .env("FAKETIME_NO_CACHE", "1")
    // A real step of the wall clock leaves the monotonic clock alone.
    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

/// Class 2: the writer's clock stepped an hour forward, or back, while a staged rotation waits
/// at its gates: each gate is still waited out in full (on the monotonic clock), and what is
/// issued is valid now.
#[test]
fn a_clock_stepped_during_a_run_never_shortens_a_gate() {
    for step in ["+1h", "-1h"] {
        let tmp = tempdir();
        let d = tmp.path().join("d");
        run_local(&d, &[]).ok();
        let clock: PathBuf = tmp.path().join("faketimerc");
        std::fs::write(&clock, "+0\n").unwrap();
        let mut cmd = stepping_faketime(&clock);
        cmd.args(["--local", d.to_str().unwrap(), "-q", "--output", "json"])
            .args(["--overwrite", "--propagation-delay", "3s"]);
        let started = std::time::Instant::now();
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        std::fs::write(&clock, format!("{step}\n")).unwrap();
        let r = Run::from(child.wait_with_output().unwrap()).ok();
        let took = started.elapsed();
        let gates = r.json()["gates"].as_array().cloned().unwrap_or_default();
        assert_eq!(gates.len(), 2, "{}", r.stdout);
        // Two gates of 3 s each, counted from their writes: a lower bound on the run, which
        // a gate shortened by the step would break (the step's hour would open it at once).
        assert!(
            took >= Duration::from_secs(6),
            "step {step}: a gate was shortened: the run took {took:?}: {gates:?}"
        );
        openssl_all(&d);
    }
}

/// A CA with one constraint no verifier lets pass for this profile's leaves, with its key.
fn constrained_ca(kind: &str) -> (rcgen::CertificateParams, rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = crate::util::constrained_ca_params(kind);
    let pem = params.clone().self_signed(&key).unwrap().pem();
    (params, key, pem)
}

/// A leaf this profile would issue (envoy's SANs, server and client use), signed by `ca`.
fn leaf_of(params: &rcgen::CertificateParams, key: &rcgen::KeyPair) -> String {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair};
    let issuer = Issuer::from_params(params, key);
    let mut leaf = CertificateParams::new(vec!["*.envoy-gateway-system".to_string()]).unwrap();
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    leaf.signed_by(&KeyPair::generate().unwrap(), &issuer)
        .unwrap()
        .pem()
}

/// Class 3: a CA a verifier rejects, planted in the CA Secret with its key (as another tool or
/// a person might), is refused with the reason: nothing written, exit 2. `openssl verify`
/// rejects a leaf it signs in each case, so the reference verifier agrees. (Before: the run
/// adopted it, staged it and moved every leaf onto it, 12 writes, exit 0.)
#[test]
fn a_ca_no_verifier_accepts_is_refused_never_adopted() {
    let cases = [
        (
            "critical",
            "critical extension",
            "unhandled critical extension",
        ),
        (
            "excluded",
            "nameConstraints exclude",
            "excluded subtree violation",
        ),
        (
            "permitted",
            "nameConstraints exclude",
            "permitted subtree violation",
        ),
        (
            "no-cert-sign",
            "keyCertSign",
            "key usage does not include certificate signing",
        ),
        (
            "client-only",
            "extendedKeyUsage",
            "unsuitable certificate purpose",
        ),
    ];
    for (kind, ours, openssl) in cases {
        let tmp = tempdir();
        let d = tmp.path().join("d");
        run_local(&d, &[]).ok();
        let (params, key, pem) = constrained_ca(kind);
        // The reference verifier on a leaf the planted CA signs.
        let ca_file = crate::util::write(tmp.path(), "ca.pem", &pem);
        let leaf_file = crate::util::write(tmp.path(), "leaf.pem", &leaf_of(&params, &key));
        let (ok, text) = openssl_verify(&ca_file, &leaf_file, "sslserver");
        assert!(
            !ok && text.contains(openssl),
            "{kind}: openssl says: {text}"
        );
        // Planted as plain files, the way another tool writes a Secret directory.
        let ca_dir = d.join("envoy-gateway-ca");
        std::fs::remove_dir_all(&ca_dir).unwrap();
        std::fs::create_dir(&ca_dir).unwrap();
        std::fs::write(ca_dir.join("tls.crt"), &pem).unwrap();
        std::fs::write(ca_dir.join("ca.crt"), &pem).unwrap();
        std::fs::write(ca_dir.join("tls.key"), key.serialize_pem()).unwrap();
        let before = tree(&d);
        let r = run_local(&d, &[]);
        assert_eq!(r.code, 2, "{kind}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("envoy-gateway-ca") && r.stderr.contains(ours),
            "{kind}: {}",
            r.stderr
        );
        assert_eq!(tree(&d), before, "{kind}: nothing written");
        let check = crate::util::check_local(&d, &[]);
        assert_eq!(check.code, 1, "{kind}: {}", check.stdout);
        assert!(check.stdout.contains(ours), "{kind}: {}", check.stdout);
        // With --force the CA Secret is replaced, staged: no leaf before its trust gate.
        let forced = Run::of(local(&d).args(["--force"])).ok();
        openssl_all(&d);
        assert!(
            cross_pairs(&[("after", &local_snapshot(&d))]).is_empty(),
            "{}",
            forced.stdout
        );
    }
}

/// Found by the check-equals-run property (tests/it/one_judgement.rs): one TLS Secret deleted
/// and another holding a leaf of a CA no bundle trusts. The new Secret's bundle rejects that
/// leaf, as every bundle as read already does: the step does not make it worse, so the run
/// creates the Secret and renews the leaf (as `check` says), instead of refusing with exit 2.
#[test]
fn a_new_secret_is_not_charged_with_a_leaf_every_bundle_rejects_already() {
    use certgen::pki::{issue_ca, issue_leaf};
    let tmp = tempdir();
    let d = tmp.path().join("d");
    run_local(&d, &[]).ok();
    std::fs::remove_dir_all(d.join("envoy-gateway")).unwrap();
    let config = crate::util::builtin_config();
    let now = time::OffsetDateTime::now_utc();
    let (other, _) = issue_ca(&config.ca.spec, now - time::Duration::DAY).unwrap();
    let t = config.tls.iter().find(|t| t.name == "envoy").unwrap();
    let leaf = issue_leaf(&t.leaf, &other, now).unwrap();
    std::fs::write(d.join("envoy/tls.crt"), leaf.cert.pem()).unwrap();
    std::fs::write(d.join("envoy/tls.key"), leaf.key.expose()).unwrap();
    let check = Run::of(crate::util::certgen().args(["check", "--local"]).arg(&d));
    assert_eq!(check.code, 1, "{}", check.stdout);
    let r = run_local(&d, &[]).ok();
    assert_eq!(r.json()["writes"], 2, "{}", r.stdout);
    let after = run_local(&d, &[]).ok();
    assert_eq!(after.json()["writes"], 0, "{}", after.stdout);
}
