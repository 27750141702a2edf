//! The measurement behind `bench/rotation-speed` (ignored by default: several minutes on the
//! real node; the bench script runs it). In one run, on the real node beside kwok's, with Envoy
//! Gateway's topology as real peer pods (as in `cluster::real_node`: `envoy-gateway` hot,
//! `envoy-ratelimit` restart-only, two `envoy` proxies dialing both every 50 ms), certgen on
//! this machine rotates the same Secrets three times with the default `--propagation-delay`:
//!
//! 1. `--overwrite --no-poke --wait`: the staged rotation as it was, every gate a timer (with
//!    `--wait`, so that it waits for the cleanup's gate as runs did before, rather than leave
//!    the cleanup to the next run);
//! 2. `--overwrite --wait`: pokes, gates opened on evidence;
//! 3. `--overwrite --wait` with every hot-reloading consumer probed (a config whose hot
//!    consumer, `envoy-gateway`, has its probe; the proxies, which serve nothing, are left out of
//!    the consumers): probes open both gates;
//! 4. `--overwrite --strategy immediate --wait`: one write (it must fail handshakes, or the
//!    peers' check could not see a failure).
//!
//! For each: seconds per phase (the steps' writes, restarts and rollouts; each gate) and end to
//! end, handshakes completed and failed between the peers from the run's start until every
//! peer has loaded the result, and the run's API requests. The table goes to stderr and to
//! `target/tmp/rotation-speed.txt`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::real_node::{
    Peer, Tally, converged, free_ports, now_ms, peer_deployment, read_events, real_namespace,
    real_node,
};
use super::{cluster, rolled_out};

struct Row {
    name: &'static str,
    total: f64,
    gates: Vec<(String, f64)>,
    tally: Tally,
    requests: u64,
    code: i32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark of several minutes on the real node: bench/rotation-speed runs it"]
async fn rotation_speed_timer_against_pokes_on_the_real_node() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    let settings = std::fs::read_to_string(node.dir.join("settings")).unwrap_or_default();
    let (ns, results) = real_namespace(&c, &node, "speed").await;

    // The Secrets, then the peers that mount them.
    c.certgen(&ns.name).run_async().await.ok();
    let (gw_port, rl_port) = free_ports();
    let (gw, rl) = (
        format!("127.0.0.1:{gw_port}"),
        format!("127.0.0.1:{rl_port}"),
    );
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let peers = [
        Peer {
            name: "envoy-gateway",
            labels: json!({"app": "envoy-gateway"}),
            replicas: 1,
            secret: "envoy-gateway",
            args: args(&["--listen", &gw, "--reload", "hot"]),
            extra_volumes: vec![],
        },
        Peer {
            name: "envoy-ratelimit",
            labels: json!({"app": "envoy-ratelimit"}),
            replicas: 1,
            secret: "envoy-rate-limit",
            args: args(&["--listen", &rl, "--reload", "start"]),
            extra_volumes: vec![],
        },
        Peer {
            name: "envoy-proxy",
            labels: json!({
                "app": "envoy-proxy",
                "app.kubernetes.io/managed-by": "envoy-gateway",
                "app.kubernetes.io/component": "proxy",
            }),
            replicas: 2,
            secret: "envoy",
            args: args(&[
                "--reload",
                "hot",
                "--interval-ms",
                "50",
                "--dial",
                &format!("envoy-gateway={gw}@envoy-gateway"),
                "--dial",
                &format!("envoy-ratelimit={rl}@envoy-rate-limit"),
            ]),
            extra_volumes: vec![],
        },
    ];
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &ns.name);
    for peer in peers {
        let d = peer_deployment(&node, &results, peer);
        deployments
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }
    for name in ["envoy-gateway", "envoy-ratelimit", "envoy-proxy"] {
        rolled_out(&deployments, name, Duration::from_secs(180)).await;
    }
    converged(&c, &ns.name, &results, Duration::from_secs(120)).await;
    // The probed variant: envoy-gateway's Service on port 18000, its endpoint a TEST-NET
    // address that certgen's probes dial on 127.0.0.1 (the peer's port), and a config whose
    // only hot consumer is that one (the proxies serve nothing a probe could dial).
    super::probe::service(&c, &ns.name, "192.0.2.10").await;
    let profile = crate::util::profile();
    let start = profile
        .find("  - name: envoy-proxies")
        .expect("the proxies' consumer");
    let end = start
        + profile[start..]
            .find("webhooks:")
            .expect("webhooks after the consumers");
    let config = format!("{}{}", &profile[..start], &profile[end..]);
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("probed.yaml");
    std::fs::write(&config_path, config).unwrap();
    let config_arg = config_path.to_str().unwrap().to_string();
    let probed = ["--overwrite", "--wait", "--config", config_arg.as_str()];

    let variants: [(&'static str, &[&str]); 4] = [
        (
            "staged, timer only (--no-poke)",
            &["--overwrite", "--no-poke", "--wait"],
        ),
        ("staged, pokes and evidence", &["--overwrite", "--wait"]),
        ("staged, every hot consumer probed", &probed),
        (
            "immediate",
            &["--overwrite", "--strategy", "immediate", "--wait"],
        ),
    ];
    let mut rows = Vec::new();
    for (name, flags) in variants {
        let from = now_ms();
        let started = Instant::now();
        // The default --propagation-delay (2m), as a user would run it.
        let r = c
            .certgen(&ns.name)
            .propagation_delay("2m")
            .args(flags)
            .env(
                "CERTGEN_TEST_DIAL_OVERRIDE",
                format!("192.0.2.10:18000={gw}"),
            )
            .args(["--timeout", "10m"])
            .run_async()
            .await;
        let total = started.elapsed().as_secs_f64();
        let report: Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("{name}: bad report ({e}): {}\n{}", r.stdout, r.stderr));
        let to = converged(&c, &ns.name, &results, Duration::from_secs(300)).await + 3000;
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let tally = Tally::of(&read_events(&results), from, to);
        let gates = report["gates"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|g| {
                (
                    g["openedBy"].as_str().unwrap_or_default().to_string(),
                    g["seconds"].as_f64().unwrap_or_default(),
                )
            })
            .collect();
        eprintln!("{name}: exit {} in {total:.1} s\n{}", r.code, r.stderr);
        rows.push(Row {
            name,
            total,
            gates,
            tally,
            requests: report["apiRequests"]["total"].as_u64().unwrap_or_default(),
            code: r.code,
        });
    }

    let mut out = String::new();
    let _ = writeln!(out, "real node: {}", settings.trim().replace('\n', "; "));
    let _ = writeln!(
        out,
        "| rotation | exit | steps (writes, restarts, rollouts) | gate 1 | gate 2 | end to end | handshakes ok | failed (TLS) | failed (reset) | API requests |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in &rows {
        let gate = |i: usize| {
            r.gates
                .get(i)
                .map_or("–".to_string(), |(by, s)| format!("{s:.1} s ({by})"))
        };
        let in_gates: f64 = r.gates.iter().map(|(_, s)| s).sum();
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} s | {} | {} | **{:.1} s** | {} | **{}** | {} | {} |",
            r.name,
            r.code,
            r.total - in_gates,
            gate(0),
            gate(1),
            r.total,
            r.tally.ok,
            r.tally.of_kind("tls"),
            r.tally.of_kind("io"),
            r.requests
        );
    }
    let (timer, poke, probed, immediate) = (&rows[0], &rows[1], &rows[2], &rows[3]);
    let ratio = timer.total / poke.total;
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    let _ = writeln!(
        out,
        "targets: pokes end to end {:.1} s <= 30 s: {}; probed end to end {:.1} s <= 10 s: {}; timer / pokes = {ratio:.1}x >= 8x: {}; 0 failed TLS handshakes in the staged rotations: {}; immediate fails some: {}",
        poke.total,
        verdict(poke.total <= 30.0),
        probed.total,
        verdict(probed.total <= 10.0),
        verdict(ratio >= 8.0),
        verdict(
            timer.tally.of_kind("tls") + poke.tally.of_kind("tls") + probed.tally.of_kind("tls")
                == 0
        ),
        verdict(immediate.tally.client_failures() > 0),
    );
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rotation-speed.txt");
    std::fs::write(&path, &out).unwrap();
    eprintln!("{out}");
    assert!(rows.iter().all(|r| r.code == 0), "{out}");
    assert_eq!(
        timer.tally.of_kind("tls") + poke.tally.of_kind("tls") + probed.tally.of_kind("tls"),
        0,
        "{out}"
    );
    assert!(immediate.tally.client_failures() > 0, "{out}");
}
