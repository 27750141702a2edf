//! Rotation on the real control plane: a staged rotation killed at every write boundary
//! converges on a re-run without a third CA; concurrent runs end consistent; the Lease
//! serialises writers, is not taken by no-op runs or from a live holder whose clock lags, and a
//! run that loses it stops; restart-only consumers are restarted for each phase, also when a
//! kill lost the restart, and a slow rollout holds the gate.
//!
//! The same properties without a cluster: `rotation` (the binary in local mode) and `sim` (whole
//! trajectories in-process).

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::{Certgen, Cluster, cluster, deployment, generation, rolled_out};
use crate::util::trust::{CA_SECRET, check_snapshot, fingerprints};
use crate::util::{KILLED, consumer};

/// certgen in `ns`, quiet, with a Lease that a killed run's leftover does not hold for long.
fn certgen(c: &Cluster, ns: &str) -> Certgen {
    c.certgen(ns).quiet().short_lease()
}

async fn active(c: &Cluster, ns: &str) -> String {
    fingerprints(&c.snapshot(ns).await[CA_SECRET]["tls.crt"])[0].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_staged_rotation_killed_at_any_write_converges_on_rerun_without_a_third_ca() {
    let Some(c) = cluster().await else { return };
    let mut n = 1;
    loop {
        let ns = c.namespace(&format!("crash-{n}")).await;
        certgen(&c, &ns.name).run_async().await.ok();
        let old = active(&c, &ns.name).await;
        let r = certgen(&c, &ns.name)
            .arg("--overwrite")
            .kill_after_write(n)
            .run_async()
            .await;
        let crashed = r.code == KILLED;
        assert!(crashed || r.code == 0, "{}", r.stderr);
        let (failures, at_crash) = check_snapshot(&c.snapshot(&ns.name).await);
        assert!(failures.is_empty(), "killed after write {n}: {failures:?}");
        certgen(&c, &ns.name).run_async().await.ok();
        let (failures, after) = check_snapshot(&c.snapshot(&ns.name).await);
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
    certgen(&c, &ns.name).run_async().await.ok();
    let mut codes = std::collections::BTreeMap::new();
    for trial in 0..50 {
        let children: Vec<_> = (0..8)
            .map(|i| {
                let mut cmd = certgen(&c, &ns.name).command();
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
        let (failures, cas) = check_snapshot(&c.snapshot(&ns.name).await);
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
    certgen(&c, &ns.name).run_async().await.ok();
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
    let before = c.snapshot(&ns.name).await;
    let r = certgen(&c, &ns.name)
        .args(["--overwrite", "--timeout", "2s"])
        .run_async()
        .await;
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("other-run") && r.stderr.contains("envoy-gateway-certgen-lock"),
        "{}",
        r.stderr
    );
    assert_eq!(c.snapshot(&ns.name).await, before, "nothing written");
    certgen(&c, &ns.name).run_async().await.ok();

    // An expired Lease (a crashed run) is taken over.
    let old = "2020-01-01T00:00:00Z";
    let mut lease = leases.get("envoy-gateway-certgen-lock").await.unwrap();
    lease.spec = Some(serde_json::from_value(json!({"holderIdentity": "crashed-run", "leaseDurationSeconds": 15, "acquireTime": old, "renewTime": old})).unwrap());
    leases
        .replace("envoy-gateway-certgen-lock", &PostParams::default(), &lease)
        .await
        .unwrap();
    let r = certgen(&c, &ns.name)
        .args(["--overwrite", "--timeout", "20s"])
        .run_async()
        .await;
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    assert!(
        leases
            .get_opt("envoy-gateway-certgen-lock")
            .await
            .unwrap()
            .is_none()
    );
    // The run says so in its report, as data: the Lease, and whose it took over.
    let lock = &r.json()["lock"];
    assert_eq!(lock["tookOver"], "crashed-run", "{lock}");
    assert_eq!(
        lock["lease"],
        format!("Lease {}/envoy-gateway-certgen-lock", ns.name),
        "{lock}"
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
    certgen(&c, &ns.name).run_async().await.ok();
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
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        })
    };
    let before = c.snapshot(&ns.name).await;
    let r = certgen(&c, &ns.name)
        .args(["--overwrite", "--timeout", "6s"])
        .run_async()
        .await;
    assert_eq!(r.code, 4, "a renewed Lease is held: {}", r.stderr);
    assert_eq!(c.snapshot(&ns.name).await, before, "nothing written");
    // Once the holder stops renewing, the Lease expires (2 s unchanged) and certgen takes it.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    renewer.await.unwrap();
    certgen(&c, &ns.name)
        .args(["--overwrite", "--timeout", "20s"])
        .run_async()
        .await
        .ok();
}

/// A run whose Lease is taken over while it waits at a gate stops before its next write, with
/// exit 4, leaving every bundle trusting every leaf. (Was: a lost Lease was only warned about at
/// the end, after the run had kept writing beside the new holder.)
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_loses_its_lease_stops_before_its_next_write() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("leaselost").await;
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), &ns.name);
    certgen(&c, &ns.name).run_async().await.ok();
    // --no-poke: with no pod to prove anything, evidence would open the gate at once.
    let child = certgen(&c, &ns.name)
        .propagation_delay("8s")
        .args(["--overwrite", "--timeout", "60s", "--no-poke"])
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the trust phase (a pending CA), then take the Lease over.
    let secrets = c.secrets(&ns.name);
    let mut pending = false;
    for _ in 0..100 {
        let ca = secrets.get("envoy-gateway-ca").await.unwrap();
        if ca.data.unwrap_or_default().contains_key("next.crt") {
            pending = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
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
    let (failures, _) = check_snapshot(&c.snapshot(&ns.name).await);
    assert!(failures.is_empty(), "{failures:?}");
}

/// The events of a run with `--log-format json`, in order.
fn log_events(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A run stopped between the trust writes and the restart of a restart-only consumer: the next
/// run restarts it (and waits for the rollout) before any leaf from the new CA is written. (Was:
/// a template without certgen's fingerprint counted as up to date, so the trust bundle never
/// reached it before the leaves changed.)
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_lost_between_the_writes_and_the_patch_is_made_by_the_next_run() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("lostrestart").await;
    // The Secrets exist before the Deployment (as after a Helm install), so its template has
    // no fingerprint: the first run finds it up to date.
    c.certgen(&ns.name).run_async().await.ok();
    // The API server's times have one-second resolution: a Deployment created in the same
    // second as the write would count as older.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let api = c
        .create_deployment(&ns.name, &deployment("envoy-ratelimit", 2, json!({})))
        .await;
    rolled_out(&api, "envoy-ratelimit", Duration::from_secs(120)).await;
    let r = c.certgen(&ns.name).run_async().await.ok();
    assert_eq!(
        consumer(&r.json(), "envoy-ratelimit")["deployments"][0]["action"],
        "up-to-date",
        "{}",
        r.stdout
    );
    let installed_generation = generation(&api, "envoy-ratelimit").await;
    // Killed right after the trust writes (CA Secret and three bundles), before the restart.
    let out = c
        .certgen(&ns.name)
        .arg("--overwrite")
        .kill_after_write(4)
        .run_async()
        .await;
    assert_eq!(out.code, KILLED, "{}", out.stderr);
    assert_eq!(
        generation(&api, "envoy-ratelimit").await,
        installed_generation,
        "not restarted yet"
    );
    // The re-run restarts it for the trust bundle first, then for the leaves, then for the
    // cleanup; each rollout is waited for before the next step.
    let r = c
        .certgen(&ns.name)
        .args(["--wait", "-v", "--log-format", "json"])
        .run_async()
        .await
        .ok();
    let report = r.json();
    let rolls: Vec<&str> = consumer(&report, "envoy-ratelimit")["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["action"].as_str().unwrap())
        .collect();
    assert_eq!(rolls, ["restarted", "restarted", "restarted"], "{report}");
    // The first restart comes before the promotion.
    let events = log_events(&r.stderr);
    let first = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred);
    let restart =
        first(&|e: &Value| e["workload"] == "envoy-ratelimit" && e["kind"] == "Deployment")
            .expect("restart logged");
    let promote = first(&|e: &Value| e["action"] == "promote").expect("promotion logged");
    assert!(
        restart < promote,
        "restarted for the trust bundle before the leaves"
    );
}

/// A restart-only consumer whose rollout takes longer than the propagation delay holds the
/// gate: the leaves wait for the rollout, not only for the delay.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_slower_than_the_delay_holds_the_gate() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("slowroll").await;
    let d = deployment("envoy-ratelimit", 2, json!({"minReadySeconds": 6}));
    let api = c.create_deployment(&ns.name, &d).await;
    c.certgen(&ns.name)
        .args(["--wait", "--timeout", "120s"])
        .run_async()
        .await
        .ok();
    rolled_out(&api, "envoy-ratelimit", Duration::from_secs(120)).await;
    let r = c
        .certgen(&ns.name)
        .propagation_delay("1s")
        .args(["--overwrite", "--timeout", "120s", "--log-format", "json"])
        .run_async()
        .await
        .ok();
    let events = log_events(&r.stderr);
    let at = |action: &str| -> time::OffsetDateTime {
        events
            .iter()
            .find(|e| e["action"] == action)
            .and_then(|e| {
                time::OffsetDateTime::parse(
                    e["timestamp"].as_str()?,
                    &time::format_description::well_known::Rfc3339,
                )
                .ok()
            })
            .unwrap_or_else(|| panic!("no {action} event: {}", r.stderr))
    };
    let waited = at("promote") - at("trust");
    assert!(
        waited >= time::Duration::seconds(6),
        "the leaves waited {waited} after the trust writes: less than the 6 s rollout"
    );
}
