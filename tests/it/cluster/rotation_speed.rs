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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::real_node::{
    Peer, Tally, converged, converged_to, free_ports, now_ms, peer_deployment, read_events,
    real_namespace, real_node,
};
use super::{Cluster, cluster, rolled_out};

/// Failed TLS handshakes between the peers: each one is counted by its dialer, which reads a
/// byte after the handshake (so a client certificate the server refused fails there too). The
/// servers' own count also holds the probes certgen's gates make, some refused by design (the
/// control certificate from a CA nobody trusts; a pending CA's before the pod reloaded).
fn failed_tls(t: &Tally) -> u64 {
    t.of_role_kind("client", "tls")
}

struct Row {
    name: &'static str,
    total: f64,
    gates: Vec<(String, f64)>,
    tally: Tally,
    requests: u64,
    code: i32,
}

/// Where the rotations of one table run: the namespace, its peers' results directory and
/// what "every peer loaded the result" means there (each `app` label's Secret, and how many
/// pods), and the probes' dial overrides.
struct Bench<'a> {
    c: &'a Cluster,
    ns: &'a str,
    results: &'a Path,
    apps: &'a [(&'a str, &'a str)],
    pods: usize,
    dials: &'a str,
}

/// One rotation: certgen with `args` and the default `--propagation-delay` (2m), as a user
/// would run it, timed end to end; then the peers' handshakes from its start until every peer
/// has loaded the result (plus 3 s), and what opened each gate (for the gate, and per pod).
async fn rotation(b: &Bench<'_>, name: &'static str, args: &[&str]) -> Row {
    let from = now_ms();
    let started = Instant::now();
    let r =
        b.c.certgen(b.ns)
            .propagation_delay("2m")
            .args(args)
            .env("CERTGEN_TEST_DIAL_OVERRIDE", b.dials)
            .args(["--timeout", "10m"])
            .run_async()
            .await;
    let total = started.elapsed().as_secs_f64();
    let report: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("{name}: bad report ({e}): {}\n{}", r.stdout, r.stderr));
    let within = Duration::from_secs(300);
    let to = converged_to(b.c, b.ns, b.results, b.apps, b.pods, within).await + 3000;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let tally = Tally::of(&read_events(b.results), from, to);
    let gates = report["gates"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|g| {
            let mut by: BTreeMap<String, usize> = BTreeMap::new();
            for p in g["pods"].as_array().cloned().unwrap_or_default() {
                *by.entry(p["openedBy"].as_str().unwrap_or_default().to_string())
                    .or_default() += 1;
            }
            let pods: Vec<String> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let opened = g["openedBy"].as_str().unwrap_or_default();
            (
                if pods.is_empty() {
                    opened.to_string()
                } else {
                    format!("{opened}: {}", pods.join(", "))
                },
                g["seconds"].as_f64().unwrap_or_default(),
            )
        })
        .collect();
    eprintln!("{name}: exit {} in {total:.1} s\n{}", r.code, r.stderr);
    Row {
        name,
        total,
        gates,
        tally,
        requests: report["apiRequests"]["total"].as_u64().unwrap_or_default(),
        code: r.code,
    }
}

/// The table of `rows` (with the seconds spent outside the gates when `steps`), after the
/// node's settings.
fn table(settings: &str, rows: &[Row], steps: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "real node: {}", settings.trim().replace('\n', "; "));
    let _ = writeln!(
        out,
        "| rotation | exit |{} gate 1 | gate 2 | end to end | handshakes ok | failed (TLS) | failed (reset) | refused by servers (TLS; certgen's probes included) | API requests |",
        if steps {
            " steps (writes, restarts, rollouts) |"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "| --- | --- |{} --- | --- | --- | --- | --- | --- | --- | --- |",
        if steps { " --- |" } else { "" }
    );
    for r in rows {
        let gate = |i: usize| {
            r.gates
                .get(i)
                .map_or("–".to_string(), |(by, s)| format!("{s:.1} s ({by})"))
        };
        let in_gates: f64 = r.gates.iter().map(|(_, s)| s).sum();
        let _ = writeln!(
            out,
            "| {} | {} |{} {} | {} | **{:.1} s** | {} | **{}** | {} | {} | {} |",
            r.name,
            r.code,
            if steps {
                format!(" {:.1} s |", r.total - in_gates)
            } else {
                String::new()
            },
            gate(0),
            gate(1),
            r.total,
            r.tally.ok,
            failed_tls(&r.tally),
            r.tally.of_kind("io"),
            r.tally.of_role_kind("server", "tls"),
            r.requests
        );
    }
    out
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
    // address that certgen's probes dial on 127.0.0.1 (the peer's port), its pod named as the
    // EndpointSlice controller names it (so gates probe that pod), and a config whose only hot
    // consumer is that one (the proxies serve nothing a probe could dial: their kubelet's
    // evidence decides).
    let gateway =
        kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(c.client.clone(), &ns.name)
            .list(&kube::api::ListParams::default().labels("app=envoy-gateway"))
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .expect("the envoy-gateway pod");
    super::probe::pod_service(
        &c,
        &ns.name,
        ("envoy-gateway", 18000),
        &[("192.0.2.10".to_string(), &gateway)],
    )
    .await;
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
    let bench = Bench {
        c: &c,
        ns: &ns.name,
        results: &results,
        apps: &[
            ("envoy-gateway", "envoy-gateway"),
            ("envoy-proxy", "envoy"),
            ("envoy-ratelimit", "envoy-rate-limit"),
        ],
        pods: 4,
        dials: &format!("192.0.2.10:18000={gw}"),
    };
    let mut rows = Vec::new();
    for (name, flags) in variants {
        rows.push(rotation(&bench, name, flags).await);
    }
    let mut out = table(&settings, &rows, true);
    let (timer, poke, probed, immediate) = (&rows[0], &rows[1], &rows[2], &rows[3]);
    let ratio = timer.total / poke.total;
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    let _ = writeln!(
        out,
        "targets: pokes end to end {:.1} s <= 30 s: {}; every hot consumer probed, end to end {:.1} s (its proxies serve nothing a probe reaches: the <= 10 s target is the every-pod-probed row's); timer / pokes = {ratio:.1}x >= 8x: {}; 0 failed TLS handshakes in the staged rotations: {}; immediate fails some: {}",
        poke.total,
        verdict(poke.total <= 30.0),
        probed.total,
        verdict(ratio >= 8.0),
        verdict(
            failed_tls(&timer.tally) + failed_tls(&poke.tally) + failed_tls(&probed.tally) == 0
        ),
        verdict(immediate.tally.client_failures() > 0),
    );
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rotation-speed.txt");
    std::fs::write(&path, &out).unwrap();
    eprintln!("{out}");
    assert!(rows.iter().all(|r| r.code == 0), "{out}");
    assert_eq!(
        failed_tls(&timer.tally) + failed_tls(&poke.tally) + failed_tls(&probed.tally),
        0,
        "{out}"
    );
    assert!(immediate.tally.client_failures() > 0, "{out}");
}

/// Three distinct free loopback ports below the ephemeral range.
fn three_ports() -> [u16; 3] {
    let (a, b) = free_ports();
    loop {
        let (c, d) = free_ports();
        for p in [c, d] {
            if p != a && p != b {
                return [a, b, p];
            }
        }
    }
}

/// The measurement behind `bench/rotation-speed`'s row "staged, every pod probed" (ignored
/// by default; the bench script runs it). The row above ("every hot consumer probed") keeps
/// pods that no probe can reach (the proxies dial but serve nothing, the rate limit restarts),
/// so each of its gates waits for their kubelets' evidence. Here every pod that mounts a
/// changed Secret is a hot-reloading server whose own endpoint (its EndpointSlice's
/// `targetRef`) certgen probes: `envoy-gateway`, which dials both proxies, and two proxies
/// (`envoy`, one pod each, each its own port), which dial it every 50 ms; the rate limit's
/// consumer has no pods. The proxies' `envoy` leaf gets the name their probe dials
/// (`envoy-proxy.<namespace>.svc`): the profile's only name for it, `*.<namespace>`, has one
/// label after its wildcard, which rustls-webpki (like NSS) refuses, so no probe of a server
/// presenting it can pass. Every peer↔peer handshake is counted by its dialer ("failed (TLS)");
/// the servers' own count also holds the probes certgen's gates make, some refused by design
/// (the control certificate from a CA nobody trusts, a pending CA's before the pod reloaded),
/// shown apart. Rotations in a row (`CERTGEN_BENCH_ROUNDS`, 5 by default), each
/// `--overwrite --wait` with the default `--propagation-delay`; the table (each rotation, then
/// min/median/max end to end) goes to stderr and to `target/tmp/rotation-speed-probed.txt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark on the real node: bench/rotation-speed runs it"]
async fn rotation_speed_where_every_pod_is_a_probed_server() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    let settings = std::fs::read_to_string(node.dir.join("settings")).unwrap_or_default();
    let (ns, results) = real_namespace(&c, &node, "speed-probed").await;
    let [gw, pa, pb] = three_ports().map(|p| format!("127.0.0.1:{p}"));
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let proxy_sni = format!("envoy-proxy.{}.svc", ns.name);
    // The profile, the proxies' leaf given the name their probe dials, and their consumer its
    // probe; installed with it.
    let profile = crate::util::profile();
    let config = profile
        .replacen(
            "      - \"*.{namespace}\"\n",
            "      - \"*.{namespace}\"\n      - envoy-proxy.{namespace}.svc\n",
            1,
        )
        .replacen(
            "    mounts: [envoy]\n",
            "    mounts: [envoy]\n    probe:\n      service: envoy-proxy\n      port: 18001\n",
            1,
        );
    assert_eq!(
        config.matches("envoy-proxy").count(),
        profile.matches("envoy-proxy").count() + 2,
        "{config}"
    );
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("every-pod-probed.yaml");
    std::fs::write(&config_path, config).unwrap();
    c.certgen(&ns.name)
        .arg("--config")
        .arg(&config_path)
        .run_async()
        .await
        .ok();
    let proxy = |name: &'static str, listen: &str| Peer {
        name,
        labels: json!({
            "app": name,
            "app.kubernetes.io/managed-by": "envoy-gateway",
            "app.kubernetes.io/component": "proxy",
        }),
        replicas: 1,
        secret: "envoy",
        args: args(&[
            "--listen",
            listen,
            "--reload",
            "hot",
            "--interval-ms",
            "50",
            "--dial",
            &format!("envoy-gateway={gw}@envoy-gateway"),
        ]),
        extra_volumes: vec![],
    };
    let peers = [
        Peer {
            name: "envoy-gateway",
            labels: json!({"app": "envoy-gateway"}),
            replicas: 1,
            secret: "envoy-gateway",
            args: args(&[
                "--listen",
                &gw,
                "--reload",
                "hot",
                "--interval-ms",
                "50",
                "--dial",
                &format!("envoy-proxy-a={pa}@{proxy_sni}"),
                "--dial",
                &format!("envoy-proxy-b={pb}@{proxy_sni}"),
            ]),
            extra_volumes: vec![],
        },
        proxy("envoy-proxy-a", &pa),
        proxy("envoy-proxy-b", &pb),
    ];
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &ns.name);
    for peer in peers {
        let d = peer_deployment(&node, &results, peer);
        deployments
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }
    let pods_api: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(c.client.clone(), &ns.name);
    let mut pods = Vec::new();
    for name in ["envoy-gateway", "envoy-proxy-a", "envoy-proxy-b"] {
        rolled_out(&deployments, name, Duration::from_secs(180)).await;
        let mut found = pods_api
            .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
            .await
            .unwrap()
            .items;
        found.retain(|p| p.metadata.deletion_timestamp.is_none());
        assert_eq!(found.len(), 1, "{name}");
        pods.push(found.remove(0));
    }
    let apps = [
        ("envoy-gateway", "envoy-gateway"),
        ("envoy-proxy-a", "envoy"),
        ("envoy-proxy-b", "envoy"),
    ];
    converged_to(&c, &ns.name, &results, &apps, 3, Duration::from_secs(120)).await;
    // Each pod its own endpoint (TEST-NET addresses, dialed on the peers' loopback ports).
    let addr = |i: usize| format!("192.0.2.{}", 50 + i);
    super::probe::pod_service(
        &c,
        &ns.name,
        ("envoy-gateway", 18000),
        &[(addr(0), &pods[0])],
    )
    .await;
    super::probe::pod_service(
        &c,
        &ns.name,
        ("envoy-proxy", 18001),
        &[(addr(1), &pods[1]), (addr(2), &pods[2])],
    )
    .await;
    let dials = format!(
        "{}:18000={gw},{}:18001={pa},{}:18001={pb}",
        addr(0),
        addr(1),
        addr(2)
    );
    let rounds: usize = std::env::var("CERTGEN_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    let config_arg = config_path.to_str().unwrap().to_string();
    let bench = Bench {
        c: &c,
        ns: &ns.name,
        results: &results,
        apps: &apps,
        pods: 3,
        dials: &dials,
    };
    let mut rows = Vec::new();
    for _ in 0..rounds {
        let args = ["--overwrite", "--wait", "--config", config_arg.as_str()];
        rows.push(rotation(&bench, "staged, every pod probed", &args).await);
    }
    let mut out = table(&settings, &rows, false);
    let mut totals: Vec<f64> = rows.iter().map(|r| r.total).collect();
    totals.sort_by(f64::total_cmp);
    let failed: u64 = rows.iter().map(|r| failed_tls(&r.tally)).sum();
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    let _ = writeln!(
        out,
        "n = {}: end to end min {:.1} s, median {:.1} s, max {:.1} s; target every rotation <= 10 s: {}; 0 failed TLS handshakes: {}",
        totals.len(),
        totals[0],
        totals[totals.len() / 2],
        totals[totals.len() - 1],
        verdict(totals[totals.len() - 1] <= 10.0),
        verdict(failed == 0),
    );
    let path =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rotation-speed-probed.txt");
    std::fs::write(&path, &out).unwrap();
    eprintln!("{out}");
    assert!(rows.iter().all(|r| r.code == 0), "{out}");
    assert_eq!(failed, 0, "{out}");
}
