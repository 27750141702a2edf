//! Rotation guarantees in local mode (no cluster needed): a kill at every write boundary
//! followed by a re-run converges without a third CA and never breaks pairwise trust, and
//! concurrent runs serialize on the lock into one consistent state. The same properties run
//! against the real control plane in `cluster::rotation`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::util::{Run, certgen, check_snapshot, fingerprints, local_snapshot, tempdir};

fn local(dir: &Path) -> Command {
    let mut cmd = certgen();
    cmd.args(["--local", dir.to_str().unwrap(), "-q", "--output", "json"]);
    cmd
}

fn active_ca(dir: &Path) -> String {
    fingerprints(&std::fs::read(dir.join("envoy-gateway-ca/tls.crt")).unwrap())[0].clone()
}

/// Kills a rotation after each of its writes, checks the state left behind, re-runs, and checks
/// convergence. Returns how many kill points left pairwise trust broken.
fn crash_matrix(strategy: &str) -> usize {
    let mut broken_points = 0;
    let mut n = 1;
    loop {
        let tmp = tempdir();
        let dir = tmp.path();
        Run::from(local(dir).output().unwrap()).ok();
        let old = active_ca(dir);
        let out = local(dir)
            .args(["--overwrite", "--strategy", strategy])
            .env(certgen::engine::CRASH_ENV, n.to_string())
            .output()
            .unwrap();
        let crashed = out.status.code() == Some(certgen::engine::CRASH_EXIT);
        if !crashed {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
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
        Run::from(local(dir).output().unwrap()).ok();
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
        for leaf in crate::util::LEAF_SECRETS {
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
    Run::from(local(dir).output().unwrap()).ok();
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
