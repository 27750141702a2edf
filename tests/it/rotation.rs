//! Rotation through the binary in local mode (no cluster needed): a staged rotation trusts both
//! CAs until the new leaves are out, then only the new one; a kill at every write boundary
//! followed by a re-run converges without a third CA and never breaks pairwise trust; runs
//! killed after one write each still finish, and consumers lagging up to the gate never see a
//! failure; concurrent runs serialize on the lock into one consistent state.
//!
//! The same properties: against the real control plane in `cluster::rotation` (with the Lease and
//! restart-only consumers); over whole random trajectories, in-process on a virtual clock, in
//! `sim`; with real peers handshaking throughout in `cluster::harness` and `cluster::real_node`.

use std::collections::BTreeSet;
use std::path::Path;

use crate::util::trust::{
    LEAF_SECRETS, check_snapshot, fingerprints, local_snapshot, openssl_verify, webpki_trusts,
};
use crate::util::{
    KILLED, Run, envoy_gateway, kill_after_write, local, overwrite_until_cleanup, profile,
    run_local, tempdir, write,
};

fn active_ca(dir: &Path) -> String {
    fingerprints(&std::fs::read(dir.join("envoy-gateway-ca/tls.crt")).unwrap())[0].clone()
}

#[test]
fn a_rotation_trusts_both_cas_until_the_new_leaves_are_out_then_only_the_new_one() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    let hmac_before = std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret")).unwrap();
    let ca0 = active_ca(dir);
    let old_leaf = std::fs::read(dir.join("envoy/tls.crt")).unwrap();
    let old = write(
        tmp.path(),
        "old.crt",
        &String::from_utf8(old_leaf.clone()).unwrap(),
    );
    overwrite_until_cleanup(dir);
    let ca1 = active_ca(dir);
    assert_ne!(ca0, ca1);
    for leaf in LEAF_SECRETS {
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
    run_local(dir, &[]).ok();
    for leaf in LEAF_SECRETS.iter().chain(&["envoy-gateway-ca"]) {
        let bundle = std::fs::read(dir.join(leaf).join("ca.crt")).unwrap();
        assert_eq!(
            fingerprints(&bundle),
            std::slice::from_ref(&ca1),
            "{leaf}: the prior CA is dropped"
        );
    }
    let (ok, _) = openssl_verify(&dir.join("envoy/ca.crt"), &old, "sslserver");
    assert!(!ok, "the old leaf is no longer trusted");
    run_local(dir, &["--overwrite"]).ok();
    let ca2 = active_ca(dir);
    assert!(ca2 != ca1 && ca2 != ca0);
    for leaf in LEAF_SECRETS.iter().chain(&["envoy-gateway-ca"]) {
        let bundle = std::fs::read(dir.join(leaf).join("ca.crt")).unwrap();
        assert_eq!(fingerprints(&bundle), std::slice::from_ref(&ca2), "{leaf}");
    }
    assert_eq!(
        std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret")).unwrap(),
        hmac_before,
        "HMAC left alone"
    );
    run_local(dir, &["--overwrite", "--rotate-hmac"]).ok();
    assert_ne!(
        std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret")).unwrap(),
        hmac_before
    );
}

/// Kills a rotation after each of its writes, checks the state left behind, re-runs, and checks
/// convergence. Returns how many kill points left pairwise trust broken.
fn crash_matrix(strategy: &str) -> usize {
    let mut broken_points = 0;
    let mut n = 1;
    loop {
        let tmp = tempdir();
        let dir = tmp.path();
        run_local(dir, &[]).ok();
        let old = active_ca(dir);
        let r = Run::of(kill_after_write(
            local(dir).args(["--overwrite", "--strategy", strategy]),
            n,
        ));
        let crashed = r.code == KILLED;
        if !crashed {
            assert_eq!(r.code, 0, "{}", r.stderr);
        }
        let (failures, cas_at_crash) = check_snapshot(&local_snapshot(dir));
        if !failures.is_empty() {
            broken_points += 1;
            assert_eq!(
                strategy, "immediate",
                "staged, killed after write {n}: {failures:?}"
            );
        }
        // The re-run (no --overwrite) finishes what was started.
        run_local(dir, &[]).ok();
        let (failures, cas_after) = check_snapshot(&local_snapshot(dir));
        assert!(
            failures.is_empty(),
            "{strategy}, re-run after write {n}: {failures:?}"
        );
        let new = active_ca(dir);
        assert_ne!(new, old, "the rotation completed");
        let allowed: BTreeSet<String> = [old.clone(), new.clone()].into();
        assert!(
            cas_at_crash.is_subset(&allowed),
            "{strategy} after write {n}: a third CA was published"
        );
        assert!(
            cas_after.is_subset(&allowed),
            "{strategy} after write {n}: a third CA after the re-run"
        );
        // Converged: every leaf signed by the new CA, and the old CA dropped.
        for leaf in LEAF_SECRETS {
            let bundle = fingerprints(&std::fs::read(dir.join(leaf).join("ca.crt")).unwrap());
            assert_eq!(bundle, std::slice::from_ref(&new), "{leaf}");
        }
        if !crashed {
            return broken_points;
        }
        n += 1;
    }
}

#[test]
fn a_staged_rotation_killed_at_any_write_never_breaks_trust_and_a_rerun_converges() {
    assert_eq!(crash_matrix("staged"), 0);
}

#[test]
fn the_same_kills_catch_the_one_write_strategy_breaking_trust() {
    // Proves the check sees what staging guards against.
    assert!(crash_matrix("immediate") > 0);
}

#[test]
fn eight_concurrent_runs_end_in_one_consistent_state() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    for trial in 0..50 {
        let children: Vec<_> = (0..8)
            .map(|i| {
                let mut cmd = local(dir);
                if i % 2 == 0 {
                    cmd.arg("--overwrite");
                }
                cmd.args(["--timeout", "2s"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let code = out.status.code();
            assert!(
                matches!(code, Some(0) | Some(4)),
                "trial {trial}: exit {code:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let (failures, cas) = check_snapshot(&local_snapshot(dir));
        assert!(failures.is_empty(), "trial {trial}: {failures:?}");
        assert!(cas.len() <= 2, "trial {trial}: {} CAs published", cas.len());
    }
}

/// One version of a TLS Secret's files, with the time its `..data` link was made.
struct FileVersion {
    secret: &'static str,
    at: std::time::SystemTime,
    bundle: Vec<u8>,
    leaf: Vec<u8>,
}

/// Runs certgen over and over, each run killed right after its first write, so that every
/// version of every Secret is seen with its write time. `flags(i)` gives run i's extra flags.
/// Returns the versions and how many runs wrote.
fn one_write_at_a_time(
    dir: &Path,
    config: Option<&Path>,
    delay: &str,
    flags: &dyn Fn(usize) -> Vec<&'static str>,
) -> (Vec<FileVersion>, usize) {
    let mut versions: Vec<FileVersion> = Vec::new();
    let record = |versions: &mut Vec<FileVersion>| {
        for secret in LEAF_SECRETS {
            let d = dir.join(secret);
            let (Ok(bundle), Ok(leaf)) = (
                std::fs::read(d.join("ca.crt")),
                std::fs::read(d.join("tls.crt")),
            ) else {
                continue;
            };
            let same = versions
                .iter()
                .rev()
                .find(|v| v.secret == secret)
                .is_some_and(|v| v.bundle == bundle && v.leaf == leaf);
            if !same {
                let at = std::fs::symlink_metadata(d.join("..data"))
                    .and_then(|m| m.modified())
                    .unwrap_or_else(|_| std::time::SystemTime::now());
                versions.push(FileVersion {
                    secret,
                    at,
                    bundle,
                    leaf,
                });
            }
        }
    };
    record(&mut versions);
    for i in 0..40 {
        let mut cmd = local(dir);
        if let Some(c) = config {
            cmd.args(["--config", c.to_str().unwrap()]);
        }
        let r = Run::of(kill_after_write(
            cmd.args(["--propagation-delay", delay]).args(flags(i)),
            1,
        ));
        match r.code {
            KILLED => record(&mut versions),
            0 => {
                record(&mut versions);
                return (versions, i);
            }
            other => panic!("run {i} exited {other}: {}", r.stderr),
        }
    }
    panic!("40 runs, each making one write, did not finish the rotation: no progress");
}

/// Every two versions that consumers lagging up to `lag` may hold at once verify each other.
fn check_versions(versions: &[FileVersion], lag: std::time::Duration) -> usize {
    let until = |i: usize| {
        versions[i + 1..]
            .iter()
            .find(|v| v.secret == versions[i].secret)
            .map(|v| v.at)
    };
    let mut pairs = 0;
    for (i, a) in versions.iter().enumerate() {
        for (j, b) in versions.iter().enumerate() {
            let start = a.at.max(b.at);
            let held = |k: usize| until(k).map(|u| u + lag);
            let overlap = match (held(i), held(j)) {
                (Some(x), Some(y)) => start < x.min(y),
                (Some(x), None) | (None, Some(x)) => start < x,
                (None, None) => true,
            };
            if !overlap {
                continue;
            }
            pairs += 1;
            assert!(
                webpki_trusts(&b.bundle, &a.leaf),
                "{}'s leaf (version {i}) is rejected by {}'s bundle (version {j}) while consumers may hold both",
                a.secret,
                b.secret
            );
        }
    }
    pairs
}

fn cas_published(versions: &[FileVersion]) -> BTreeSet<String> {
    versions
        .iter()
        .flat_map(|v| fingerprints(&v.bundle))
        .collect()
}

const LAG: std::time::Duration = std::time::Duration::from_secs(2);

/// Scenario 1 (migration from Envoy Gateway's Secrets) and 4 (a resumed trust phase makes
/// progress), through the binary: `--overwrite` on Envoy Gateway's output, then plain re-runs,
/// each killed after one write; consumers lagging up to the 2 s gate never see a failure.
#[test]
fn migrating_from_envoy_gateway_one_write_at_a_time_never_breaks_a_peer() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    envoy_gateway::generate(&envoy_gateway::LOCAL).write_local(&dir);
    let (versions, runs) = one_write_at_a_time(&dir, None, "2s", &|i| {
        if i == 0 { vec!["--overwrite"] } else { vec![] }
    });
    let pairs = check_versions(&versions, LAG);
    // Trust (CA Secret + 3 bundles), leaves (promotion + 3), cleanup (CA Secret + 3).
    assert_eq!(runs, 12, "one write per run");
    assert!(pairs > 20);
    assert_eq!(
        cas_published(&versions).len(),
        2,
        "Envoy Gateway's CA and the new one"
    );
}

/// Scenario 2: the rotation right after a leaves phase finished by another run waits for
/// consumers to present the new leaves before it drops the old CA.
#[test]
fn the_next_rotation_waits_for_the_last_leaf_write_one_write_at_a_time() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    // Run 0 starts a rotation; runs 1-7 finish trust and leaves; runs 8-12 ask for another,
    // which first drops the old CA (after the gate counted from run 7's leaf write, in runs
    // 8-11, one write each) and then starts (run 12); plain runs finish it.
    let (versions, _) = one_write_at_a_time(dir, None, "2s", &|i| {
        if i == 0 || (8..=12).contains(&i) {
            vec!["--overwrite"]
        } else {
            vec![]
        }
    });
    check_versions(&versions, LAG);
    assert_eq!(
        cas_published(&versions).len(),
        3,
        "two rotations, one CA each"
    );
}

/// Scenario 3: a CA inside its leaves' renewBefore (clipped leaves are due at once): plain runs
/// settle, one write at a time, instead of renewing clipped leaves forever.
#[test]
fn a_ca_inside_the_leaves_renew_before_settles_one_write_at_a_time() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let config = write(
        tmp.path(),
        "short.yaml",
        &profile()
            .replace("validity: 1825d", "validity: 10d")
            .replace("renewBefore: 90d", "renewBefore: 5d")
            .replace("renewBefore: 30d", "renewBefore: 4d"),
    );
    // A CA issued 6 days ago (4 days left: inside its own and the leaves' renewBefore), and
    // leaves clipped to it, as a run 6 days ago left them.
    let spec = certgen::pki::CaSpec {
        common_name: "envoy-gateway".into(),
        validity: std::time::Duration::from_secs(10 * 86_400),
        key_algorithm: certgen::pki::KeyAlgorithm::EcdsaP256,
    };
    let then = time::OffsetDateTime::now_utc() - time::Duration::days(6);
    let (ca, issued) = certgen::pki::issue_ca(&spec, then).unwrap();
    let put = |secret: &str, key: &str, bytes: &[u8]| {
        std::fs::create_dir_all(dir.join(secret)).unwrap();
        std::fs::write(dir.join(secret).join(key), bytes).unwrap();
    };
    put("envoy-gateway-ca", "tls.crt", issued.cert.pem().as_bytes());
    put(
        "envoy-gateway-ca",
        "tls.key",
        issued.key.expose().as_bytes(),
    );
    put("envoy-gateway-ca", "ca.crt", ca.cert.pem().as_bytes());
    let cfg = certgen::config::Config::resolve(
        &certgen::config::Source::File(config.clone()),
        &certgen::config::Overrides::default(),
        &certgen::config::Env::default(),
    )
    .unwrap();
    for t in &cfg.tls {
        let leaf = certgen::pki::issue_leaf(&t.leaf, &ca, then).unwrap();
        put(&t.name, "tls.crt", leaf.cert.pem().as_bytes());
        put(&t.name, "tls.key", leaf.key.expose().as_bytes());
        put(&t.name, "ca.crt", ca.cert.pem().as_bytes());
    }
    put("envoy-oidc-hmac", "hmac-secret", &[7u8; 32]);
    let (versions, runs) = one_write_at_a_time(&dir, Some(&config), "1s", &|_| vec![]);
    check_versions(&versions, std::time::Duration::from_secs(1));
    assert!(runs <= 12, "settled in {runs} runs");
    // And settled: one more plain run writes nothing.
    let report = run_local(&dir, &["--config", config.to_str().unwrap()])
        .ok()
        .json();
    assert_eq!(report["writes"], 0, "{report}");
}

/// A plain rotation from certgen's own state, one write at a time, checked the same way.
#[test]
fn a_staged_rotation_one_write_at_a_time_never_breaks_a_peer() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    let (versions, runs) = one_write_at_a_time(dir, None, "2s", &|i| {
        if i == 0 { vec!["--overwrite"] } else { vec![] }
    });
    assert_eq!(runs, 12);
    check_versions(&versions, LAG);
    // The same chain with the one-write strategy is caught.
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    let (versions, _) = one_write_at_a_time(dir, None, "2s", &|i| {
        if i == 0 {
            vec!["--overwrite", "--strategy", "immediate"]
        } else {
            vec![]
        }
    });
    let caught = std::panic::catch_unwind(|| check_versions(&versions, LAG));
    assert!(
        caught.is_err(),
        "the one-write strategy must fail the same check"
    );
}
