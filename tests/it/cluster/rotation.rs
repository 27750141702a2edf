//! Rotation guarantees on the real control plane: kills at every write boundary, concurrent
//! runs, and the Lease that serialises them.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{Cluster, cluster};
use crate::util::{Run, Snapshot, certgen, check_snapshot, fingerprints};

fn cmd(c: &Cluster, ns: &str) -> Command {
    let mut cmd = certgen();
    cmd.args([
        "--kubeconfig",
        c.kubeconfig.to_str().unwrap(),
        "-n",
        ns,
        "-q",
        "--output",
        "json",
        "--propagation-delay",
        "0s",
    ]);
    // A killed run leaves its Lease behind; let it expire quickly.
    cmd.env(certgen::k8s::lease::LEASE_SECONDS_ENV, "2");
    cmd
}

async fn run(mut cmd: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

async fn snapshot(c: &Cluster, ns: &str) -> Snapshot {
    let api = c.secrets(ns);
    let mut out = Snapshot::new();
    for name in crate::util::LEAF_SECRETS
        .iter()
        .chain(&["envoy-gateway-ca"])
    {
        let s = api.get(name).await.unwrap();
        let data = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        out.insert(name.to_string(), data);
    }
    out
}

async fn active(c: &Cluster, ns: &str) -> String {
    fingerprints(&snapshot(c, ns).await["envoy-gateway-ca"]["tls.crt"])[0].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_staged_rotation_killed_at_any_write_converges_on_rerun_without_a_third_ca() {
    let Some(c) = cluster().await else { return };
    let mut n = 1;
    loop {
        let ns = c.namespace(&format!("crash-{n}")).await;
        Run::from(run(cmd(&c, &ns.name)).await).ok();
        let old = active(&c, &ns.name).await;
        let mut killed = cmd(&c, &ns.name);
        killed
            .arg("--overwrite")
            .env(certgen::apply::CRASH_ENV, n.to_string());
        let out = run(killed).await;
        let crashed = out.status.code() == Some(certgen::apply::CRASH_EXIT);
        assert!(
            crashed || out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (failures, at_crash) = check_snapshot(&snapshot(&c, &ns.name).await);
        assert!(failures.is_empty(), "killed after write {n}: {failures:?}");
        Run::from(run(cmd(&c, &ns.name)).await).ok();
        let (failures, after) = check_snapshot(&snapshot(&c, &ns.name).await);
        assert!(failures.is_empty(), "re-run after write {n}: {failures:?}");
        let new = active(&c, &ns.name).await;
        assert_ne!(new, old);
        let allowed: BTreeSet<String> = [old.clone(), new.clone()].into();
        assert!(
            at_crash.is_subset(&allowed) && after.is_subset(&allowed),
            "a third CA after write {n}"
        );
        if !crashed {
            assert!(n > 4, "a staged rotation makes at least 8 writes");
            break;
        }
        n += 1;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn eight_concurrent_runs_times_fifty_end_consistent_with_exit_0_or_4() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("concurrent").await;
    Run::from(run(cmd(&c, &ns.name)).await).ok();
    let mut codes = std::collections::BTreeMap::new();
    for trial in 0..50 {
        let children: Vec<_> = (0..8)
            .map(|i| {
                let mut cmd = cmd(&c, &ns.name);
                if i % 2 == 0 {
                    cmd.arg("--overwrite");
                }
                cmd.args(["--timeout", "3s"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outputs = tokio::task::spawn_blocking(move || {
            children
                .into_iter()
                .map(|c| c.wait_with_output().unwrap())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        for out in outputs {
            let code = out.status.code().unwrap_or(-1);
            assert!(
                code == 0 || code == 4,
                "trial {trial}: exit {code}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            *codes.entry(code).or_insert(0) += 1;
        }
        let (failures, cas) = check_snapshot(&snapshot(&c, &ns.name).await);
        assert!(failures.is_empty(), "trial {trial}: {failures:?}");
        assert!(cas.len() <= 2, "trial {trial}: {} CAs", cas.len());
    }
    eprintln!("exit codes over 400 runs: {codes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lease_serialises_writers_and_is_not_taken_by_no_op_runs() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("lease").await;
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), &ns.name);
    Run::from(run(cmd(&c, &ns.name)).await).ok();
    assert!(
        leases
            .get_opt("envoy-gateway-certgen-lock")
            .await
            .unwrap()
            .is_none(),
        "released after the run"
    );

    // Another live run holds the lock: a writer gives up at --timeout with exit 4; a no-op run
    // does not need the lock at all.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let held: Lease = serde_json::from_value(json!({
        "metadata": {"name": "envoy-gateway-certgen-lock"},
        "spec": {"holderIdentity": "other-run", "leaseDurationSeconds": 3600, "acquireTime": now, "renewTime": now}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &held).await.unwrap();
    let before = snapshot(&c, &ns.name).await;
    let mut writer = cmd(&c, &ns.name);
    writer.args(["--overwrite", "--timeout", "2s"]);
    let r = Run::from(run(writer).await);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("other-run") && r.stderr.contains("envoy-gateway-certgen-lock"),
        "{}",
        r.stderr
    );
    assert_eq!(snapshot(&c, &ns.name).await, before, "nothing written");
    Run::from(run(cmd(&c, &ns.name)).await).ok();

    // An expired Lease (a crashed run) is taken over.
    let old = "2020-01-01T00:00:00Z";
    let mut lease = leases.get("envoy-gateway-certgen-lock").await.unwrap();
    lease.spec = Some(serde_json::from_value(json!({"holderIdentity": "crashed-run", "leaseDurationSeconds": 15, "acquireTime": old, "renewTime": old})).unwrap());
    leases
        .replace("envoy-gateway-certgen-lock", &PostParams::default(), &lease)
        .await
        .unwrap();
    let mut writer = cmd(&c, &ns.name);
    writer.args(["--overwrite", "--timeout", "20s"]);
    Run::from(run(writer).await).ok();
    assert!(
        leases
            .get_opt("envoy-gateway-certgen-lock")
            .await
            .unwrap()
            .is_none()
    );
}

/// A holder whose clock runs far behind (its renewTime says 2020) but that keeps renewing is
/// alive: certgen judges expiry by whether the Lease changes, timed on its own clock, like
/// client-go. (Was: the holder's renewTime against certgen's clock, so the Lease was taken over
/// at once and two runs wrote at the same time.)
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_renewed_by_a_holder_whose_clock_lags_is_not_taken_over() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("leaseclock").await;
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), &ns.name);
    Run::from(run(cmd(&c, &ns.name)).await).ok();
    let behind = "2020-01-01T00:00:00Z";
    let held: Lease = serde_json::from_value(json!({
        "metadata": {"name": "envoy-gateway-certgen-lock"},
        "spec": {"holderIdentity": "lagging-clock", "leaseDurationSeconds": 2, "acquireTime": behind, "renewTime": behind}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &held).await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renewer = {
        let (leases, stop) = (leases.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                // A renewal: the holder's (lagging) clock, and a new resourceVersion.
                if let Ok(mut lease) = leases.get("envoy-gateway-certgen-lock").await {
                    let spec = lease.spec.get_or_insert_with(Default::default);
                    spec.lease_transitions = Some(n);
                    let _ = leases
                        .replace("envoy-gateway-certgen-lock", &PostParams::default(), &lease)
                        .await;
                }
                tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            }
        })
    };
    let before = snapshot(&c, &ns.name).await;
    let mut writer = cmd(&c, &ns.name);
    writer.args(["--overwrite", "--timeout", "6s"]);
    let r = Run::from(run(writer).await);
    assert_eq!(r.code, 4, "a renewed Lease is held: {}", r.stderr);
    assert_eq!(snapshot(&c, &ns.name).await, before, "nothing written");
    // Once the holder stops renewing, the Lease expires (2 s unchanged) and certgen takes it.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    renewer.await.unwrap();
    let mut writer = cmd(&c, &ns.name);
    writer.args(["--overwrite", "--timeout", "20s"]);
    Run::from(run(writer).await).ok();
}

/// A run whose Lease is taken over while it waits at a gate stops before its next write, with
/// exit 4, leaving every bundle trusting every leaf. (Was: a lost Lease was only warned about at
/// the end, after the run had kept writing beside the new holder.)
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_loses_its_lease_stops_before_its_next_write() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("leaselost").await;
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), &ns.name);
    Run::from(run(cmd(&c, &ns.name)).await).ok();
    let mut rotate = certgen();
    rotate
        .args([
            "--kubeconfig",
            c.kubeconfig.to_str().unwrap(),
            "-n",
            &ns.name,
        ])
        .args([
            "-q",
            "--overwrite",
            "--propagation-delay",
            "8s",
            "--timeout",
            "60s",
        ])
        .env(certgen::k8s::lease::LEASE_SECONDS_ENV, "2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = rotate.spawn().unwrap();
    // Wait for the trust phase (a pending CA), then take the Lease over.
    let secrets = c.secrets(&ns.name);
    let mut pending = false;
    for _ in 0..100 {
        let ca = secrets.get("envoy-gateway-ca").await.unwrap();
        if ca.data.unwrap_or_default().contains_key("next.crt") {
            pending = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(pending, "the trust phase was written");
    let mut stolen = false;
    for _ in 0..20 {
        let mut lease = leases.get("envoy-gateway-certgen-lock").await.unwrap();
        lease
            .spec
            .get_or_insert_with(Default::default)
            .holder_identity = Some("thief".into());
        if leases
            .replace("envoy-gateway-certgen-lock", &PostParams::default(), &lease)
            .await
            .is_ok()
        {
            stolen = true;
            break;
        }
    }
    assert!(stolen);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("run lock was lost"), "{stderr}");
    // Stopped before promoting: still the trust phase, and every bundle trusts every leaf.
    let ca = secrets.get("envoy-gateway-ca").await.unwrap();
    assert!(
        ca.data.unwrap_or_default().contains_key("next.crt"),
        "not promoted"
    );
    let (failures, _) = check_snapshot(&snapshot(&c, &ns.name).await);
    assert!(failures.is_empty(), "{failures:?}");
}
