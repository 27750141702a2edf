//! A set rotation with the real node in one member (issue 42, item 10): a peer in one cluster
//! handshakes with a server in another throughout a staged `certgen --context m0 --context m1
//! --context m2 --overwrite`, and none fails.
//!
//! - m0 (the main control plane, which has the real node): hot-reloading peer pods (the test
//!   peer, hostNetwork on 127.0.0.1 ports) that mount m0's Secrets as the real kubelet projects
//!   them: a server (`server-tls`), a client dialing it (`client-tls`, within m0) and a client
//!   dialing m1's server (`client-tls`, across clusters).
//! - m1: the same test peer binary as host processes, a hot server (`server-tls`) and a hot
//!   client dialing m0's pod server (`client-tls`), each reading a directory that the test keeps
//!   in the kubelet's `..data` layout from m1's API (`cluster::kubelet`) after a random delay of
//!   up to the gate (less a margin for the poll). These are no pods: certgen cannot observe them,
//!   so in m1 the changed Secrets hold each gate for its timer (no pod mounts them and the config
//!   declares no consumer), while m0's gates open on the real kubelet's evidence (pokes on).
//!   The barrier holds every member's next step until the slowest gate, m1's timer, opens.
//! - m2: the set's third member, Secrets only.
//!
//! Every peer appends its events to a file in the real node's results directory, as in
//! `cluster::real_node`; handshakes and failures are counted per phase as m0's CA Secret shows
//! them (installed, trust, leaves, after) and per path (m0 → m0, m0 → m1, m1 → m0), written to
//! `target/tmp/real-node-report.txt` (appended; tests/run-all prints it) and printed.
//!
//! Then the negative control, in the same setup: the set record stripped from every member and
//! m0 rotated alone with `--strategy immediate`, as a run per cluster would: the cross-cluster
//! handshakes fail (m1 does not trust m0's new CA) while nothing else changed.
//!
//! Needs the real node (`tests/testenv/node-up`) and the set (`tests/testenv/set-up`); without
//! them it is skipped with a note, except under `CI`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::real_node::{
    Event, Peer, Tally, converged_to, free_ports, gate, now_ms, peer_deployment, read_events,
    real_node, results_dir, secret_state, select_real_node, shared_node, sync_period,
};
use super::set::{Set, check_across};
use super::{Volume, cluster, data_map, kubelet, rolled_out};
use crate::util::trust::fingerprints;

const CA: &str = "rns-ca";

/// The profile: a CA and two TLS Secrets, no consumers (see the module comment).
fn config_yaml(ns: &str) -> String {
    let secret = |name: &str, dns: &str| {
        format!(
            "  - name: {name}\n    type: tls\n    dnsNames: [\"{dns}.{{namespace}}.svc\"]\n    usages: [server, client]\n    validity: 30d\n    renewBefore: 1d\n"
        )
    };
    format!(
        "name: rns\nnamespace: {ns}\nca:\n  secretName: {CA}\n  commonName: rns-ca\n  validity: 365d\n  renewBefore: 30d\nsecrets:\n{}{}",
        secret("server-tls", "server"),
        secret("client-tls", "client"),
    )
}

/// The test peer built for the real node's image (tests/testenv/node-images: a static musl
/// binary in certgen's target directory), run here as a host process.
fn peer_binary() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
    let bin = target.join("x86_64-unknown-linux-musl/release/certgen-test-peer");
    assert!(
        bin.is_file(),
        "{} is missing: tests/testenv/node-images builds it (with this CARGO_TARGET_DIR)",
        bin.display()
    );
    bin
}

/// A host process of the test peer: stopped (SIGTERM, then SIGKILL, to this child's own PID)
/// when dropped.
struct HostPeer(Child);

impl HostPeer {
    fn start(name: &str, certs: &Path, results: &Path, args: &[&str]) -> Self {
        let child = Command::new(peer_binary())
            .args(["--name", name, "--certs"])
            .arg(certs)
            .arg("--out")
            .arg(results.join(format!("{name}.jsonl")))
            .args(["--max-seconds", "1500"])
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }
}

impl Drop for HostPeer {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0.id() as i32)
            && self.0.try_wait().ok().flatten().is_none()
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The paths counted apart: the dialers' event files by name prefix.
const PATHS: [(&str, &str); 3] = [
    ("m0 -> m0", "local-client-"),
    ("m0 -> m1", "cross-client-"),
    ("m1 -> m0", "m1-client"),
];

/// One phase's window (ms since the epoch).
struct Phase {
    name: String,
    from: i64,
    to: i64,
}

/// What [`table`] counted: its text, every failure (clients' and servers'), and per phase the
/// cross-cluster handshakes that completed and those that failed (as the clients saw them).
struct Counted {
    text: String,
    failed: u64,
    cross_ok: BTreeMap<String, u64>,
    cross_failed: u64,
}

/// The rows of the table: per phase, per path, client handshakes and failures; then the
/// failures the servers saw.
fn table(events: &[Event], phases: &[Phase]) -> Counted {
    let mut out = String::new();
    let mut failed_total = 0;
    let mut cross_failed = 0;
    let mut cross_ok: BTreeMap<String, u64> = BTreeMap::new();
    let _ = writeln!(
        out,
        "  {:<16} {:>6}s  {:>18} {:>18} {:>18}  {:>14}",
        "phase", "", "m0 -> m0 ok/fail", "m0 -> m1 ok/fail", "m1 -> m0 ok/fail", "servers fail"
    );
    for p in phases {
        let mut cells = Vec::new();
        for (path, prefix) in PATHS {
            let of: Vec<Event> = events
                .iter()
                .filter(|e| e.pod.starts_with(prefix))
                .cloned()
                .collect();
            let t = Tally::of(&of, p.from, p.to);
            let failed = t.client_failures();
            failed_total += failed;
            if path != "m0 -> m0" {
                *cross_ok.entry(p.name.clone()).or_default() += t.ok;
                cross_failed += failed;
            }
            cells.push(format!("{}/{}", t.ok, failed));
        }
        let servers: Vec<Event> = events
            .iter()
            .filter(|e| e.pod.starts_with("server-") || e.pod == "m1-server")
            .cloned()
            .collect();
        let served = Tally::of(&servers, p.from, p.to);
        let server_failed: u64 = served.failed.values().sum();
        failed_total += server_failed;
        let _ = writeln!(
            out,
            "  {:<16} {:>6.1}s  {:>18} {:>18} {:>18}  {:>14}",
            p.name,
            (p.to - p.from) as f64 / 1000.0,
            cells[0],
            cells[1],
            cells[2],
            server_failed
        );
    }
    Counted {
        text: out,
        failed: failed_total,
        cross_ok,
        cross_failed,
    }
}

/// Waits until every peer, pods and host processes, has loaded its Secret as stored now in its
/// member; returns when (ms since the epoch).
async fn all_converged(
    c: &super::Cluster,
    set: &Set,
    ns: &str,
    results: &Path,
    within: Duration,
) -> i64 {
    let apps = [
        ("server", "server-tls"),
        ("local-client", "client-tls"),
        ("cross-client", "client-tls"),
    ];
    converged_to(c, ns, results, &apps, 3, within).await;
    let deadline = Instant::now() + within;
    let m1 = set.member("m1").secrets(ns);
    loop {
        let events = read_events(results);
        let mut behind = Vec::new();
        for (peer, secret) in [("m1-server", "server-tls"), ("m1-client", "client-tls")] {
            let want = secret_state(&m1.get(secret).await.unwrap());
            let last = events
                .iter()
                .filter(|e| e.pod == peer)
                .filter_map(Event::loaded)
                .next_back();
            if last != want {
                behind.push(peer);
            }
        }
        if behind.is_empty() {
            return now_ms();
        }
        assert!(
            Instant::now() < deadline,
            "m1's host peers did not load m1's current Secrets within {within:?}: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Every gate in certgen's JSON report (`--output json`, one report per member over a set):
/// "CONTEXT GATE: OPENED-BY after SECONDS", in the order they appear.
fn gates(stdout: &str) -> Vec<String> {
    fn walk(v: &serde_json::Value, context: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(o) => {
                let context = o.get("context").and_then(|c| c.as_str()).unwrap_or(context);
                if let (Some(gate), Some(seconds)) = (
                    o.get("gate").and_then(|g| g.as_str()),
                    o.get("seconds").and_then(|s| s.as_f64()),
                ) {
                    let by = o
                        .get("openedBy")
                        .or_else(|| o.get("opened_by"))
                        .and_then(|b| b.as_str())
                        .unwrap_or("?");
                    out.push(format!("{context} {gate}: {by} after {seconds:.1}s"));
                }
                for x in o.values() {
                    walk(x, context, out);
                }
            }
            serde_json::Value::Array(a) => {
                for x in a {
                    walk(x, context, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for line in stdout.lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            walk(&v, "", &mut out);
        }
    }
    if out.is_empty()
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(stdout)
    {
        walk(&v, "", &mut out);
    }
    out
}

/// The fingerprint of the active CA in `api`'s CA Secret, and whether one is pending.
async fn ca_state(api: &Api<Secret>) -> Option<(String, bool)> {
    let ca = data_map(api.get(CA).await.ok()?);
    Some((
        fingerprints(ca.get("tls.crt")?)[0].clone(),
        ca.contains_key("next.crt"),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_rotation_keeps_real_node_pods_and_another_clusters_peers_handshaking() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    let Some(set) = Set::get().await else { return };
    let _node = shared_node().await;
    let test_start = Instant::now();
    let settings = std::fs::read_to_string(node.dir.join("settings")).unwrap_or_default();
    let gate = gate(sync_period(&settings));
    // The m1 stand-ins' longest delay: up to the gate, less their poll and a margin.
    let max_delay = gate - Duration::from_secs(3);
    let settle = gate * 2 + Duration::from_secs(60);
    let delay = format!("{}s", gate.as_secs());

    let ns = set.namespace("rn-set").await;
    select_real_node(&c, &ns.name, json!({})).await;
    let results = results_dir(&node, &ns.name);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rns.yaml");
    std::fs::write(&config, config_yaml(&ns.name)).unwrap();
    let config = config.to_str().unwrap().to_string();
    let run = |extra: &[&str], contexts: &[&str]| {
        set.certgen_in(&ns.name, contexts)
            .args(["--config", &config, "-q"])
            .args(extra.iter().copied())
            .propagation_delay(&delay)
            .command()
    };

    // ------------------------------------------------------------------ install over the set
    let r = crate::util::run_async(run(&["--timeout", "120s"], &["m0", "m1", "m2"])).await;
    assert_eq!(r.code, 0, "set install: {}", r.stderr);
    let snaps = set.snapshots(&ns.name).await;
    assert!(
        check_across(&snaps).is_empty(),
        "{:?}",
        check_across(&snaps)
    );
    let m0 = set.member("m0").secrets(&ns.name);
    let m1 = set.member("m1").secrets(&ns.name);
    let (old_ca, _) = ca_state(&m0).await.expect("m0's CA");
    assert_eq!(
        ca_state(&m1).await.unwrap().0,
        old_ca,
        "one CA in m0 and m1"
    );

    // ------------------------------------------------------------------ m1's host peers
    let (p0, p1) = free_ports();
    let (m0_server, m1_server) = (format!("127.0.0.1:{p0}"), format!("127.0.0.1:{p1}"));
    let server_name = format!("server.{}.svc", ns.name);
    let stop = Arc::new(AtomicBool::new(false));
    let mut stand_ins = Vec::new();
    let mut volumes = BTreeMap::new();
    for (peer, secret) in [("m1-server", "server-tls"), ("m1-client", "client-tls")] {
        let volume = Arc::new(Volume::new(&dir.path().join(peer)));
        volume.mount(&m1.get(secret).await.unwrap());
        stand_ins.push(kubelet(
            m1.clone(),
            secret,
            volume.clone(),
            Duration::from_millis(100),
            max_delay,
            stop.clone(),
            || {},
        ));
        volumes.insert(peer, volume);
    }
    let host_peers = [
        HostPeer::start(
            "m1-server",
            volumes["m1-server"].dir(),
            &results,
            &["--listen", &m1_server, "--reload", "hot"],
        ),
        HostPeer::start(
            "m1-client",
            volumes["m1-client"].dir(),
            &results,
            &[
                "--reload",
                "hot",
                "--interval-ms",
                "50",
                "--dial",
                &format!("m0-server={m0_server}@{server_name}"),
            ],
        ),
    ];

    // ------------------------------------------------------------------ m0's pods
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &ns.name);
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let dial = |name: &str, addr: &str| format!("{name}={addr}@{server_name}");
    let peers = [
        Peer {
            name: "server",
            labels: json!({"app": "server"}),
            replicas: 1,
            secret: "server-tls",
            args: args(&["--listen", &m0_server, "--reload", "hot"]),
            extra_volumes: vec![],
        },
        Peer {
            name: "local-client",
            labels: json!({"app": "local-client"}),
            replicas: 1,
            secret: "client-tls",
            args: args(&[
                "--reload",
                "hot",
                "--interval-ms",
                "50",
                "--dial",
                &dial("m0-server", &m0_server),
            ]),
            extra_volumes: vec![],
        },
        Peer {
            name: "cross-client",
            labels: json!({"app": "cross-client"}),
            replicas: 1,
            secret: "client-tls",
            args: args(&[
                "--reload",
                "hot",
                "--interval-ms",
                "50",
                "--dial",
                &dial("m1-server", &m1_server),
            ]),
            extra_volumes: vec![],
        },
    ];
    for peer in peers {
        let d = peer_deployment(&node, &results, peer);
        deployments
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for name in ["server", "local-client", "cross-client"] {
        rolled_out(
            &deployments,
            name,
            deadline.saturating_duration_since(Instant::now()),
        )
        .await;
    }
    // Every path handshakes before anything rotates, and none fails.
    let installed_from = now_ms();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = read_events(&results);
        let failed = table(
            &events,
            &[Phase {
                name: "warm-up".into(),
                from: 0,
                to: now_ms(),
            }],
        )
        .failed;
        assert_eq!(failed, 0, "handshakes fail before any rotation");
        let every_path = PATHS.iter().all(|(_, prefix)| {
            let of: Vec<Event> = events
                .iter()
                .filter(|e| e.pod.starts_with(prefix))
                .cloned()
                .collect();
            Tally::of(&of, 0, now_ms()).ok > 20
        });
        if every_path && now_ms() - installed_from > 5000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every path handshakes within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // ------------------------------------------------ the staged set rotation, pokes on
    let run_from = now_ms();
    let rotation = tokio::spawn(crate::util::run_async(run(
        &["--overwrite", "--timeout", "400s"],
        &["m0", "m1", "m2"],
    )));
    let (mut trust_at, mut leaves_at) = (None, None);
    while !rotation.is_finished() {
        if let Some((active, pending)) = ca_state(&m0).await {
            let t = now_ms();
            if active != old_ca {
                trust_at.get_or_insert(t);
                leaves_at.get_or_insert(t);
            } else if pending {
                trust_at.get_or_insert(t);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = rotation.await.unwrap();
    let run_to = now_ms();
    assert_eq!(r.code, 0, "set --overwrite: {}{}", r.stdout, r.stderr);
    let (trust_at, leaves_at) = (
        trust_at.expect("m0 showed a pending CA"),
        leaves_at.expect("m0 showed a new active CA"),
    );
    let after_to = all_converged(&c, &set, &ns.name, &results, settle).await + 3000;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let events = read_events(&results);
    let phases = [
        Phase {
            name: "installed".into(),
            from: installed_from,
            to: trust_at,
        },
        Phase {
            name: "trust".into(),
            from: trust_at,
            to: leaves_at,
        },
        Phase {
            name: "leaves".into(),
            from: leaves_at,
            to: run_to,
        },
        Phase {
            name: "after".into(),
            from: run_to,
            to: after_to,
        },
    ];
    let Counted {
        text: staged_table,
        failed: staged_failed,
        cross_ok,
        ..
    } = table(&events, &phases);
    let snaps = set.snapshots(&ns.name).await;
    let new_ca = ca_state(&m0).await.unwrap().0;
    let across = check_across(&snaps);

    // ------------------------------------- negative control: m0 rotated alone, immediate
    // A run per cluster, as without set support: the set record stripped from every member
    // (each CA Secret then looks like a cluster's own), then m0 alone.
    let mut negative = None;
    if across.is_empty() && staged_failed == 0 {
        for m in &set.members {
            m.secrets(&ns.name)
                .patch(
                    CA,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"certgen.dev/set": null}}})),
                )
                .await
                .unwrap();
        }
        let alone_from = now_ms();
        let r = crate::util::run_async(run(
            &[
                "--overwrite",
                "--strategy",
                "immediate",
                "--timeout",
                "120s",
            ],
            &["m0"],
        ))
        .await;
        assert_eq!(r.code, 0, "m0 alone, immediate: {}{}", r.stdout, r.stderr);
        let alone_run_to = now_ms();
        // Long enough for the kubelet to project m0's new Secrets to every pod.
        let apps = [
            ("server", "server-tls"),
            ("local-client", "client-tls"),
            ("cross-client", "client-tls"),
        ];
        let alone_to = converged_to(&c, &ns.name, &results, &apps, 3, settle).await + 5000;
        tokio::time::sleep(Duration::from_millis(5000)).await;
        let events = read_events(&results);
        negative = Some(table(
            &events,
            &[
                Phase {
                    name: "m0 alone: run".into(),
                    from: alone_from,
                    to: alone_run_to,
                },
                Phase {
                    name: "m0 alone: after".into(),
                    from: alone_run_to,
                    to: alone_to,
                },
            ],
        ));
    }
    stop.store(true, Ordering::SeqCst);
    drop(host_peers);
    for s in stand_ins {
        s.abort();
    }

    // ------------------------------------------------------------------ the report
    let mut report = String::new();
    let _ = writeln!(
        report,
        "real node in a set (m0 real node pods, m1 host peers, m2 Secrets only): staged set \
         --overwrite, gate {}s, pokes on; m1's stand-in delays up to {}s; certgen {:.1} s; \
         client handshakes ok/failed per phase and path:",
        gate.as_secs(),
        max_delay.as_secs(),
        (run_to - run_from) as f64 / 1000.0
    );
    report.push_str(&staged_table);
    let _ = writeln!(report, "  certgen's gates: {}", gates(&r.stdout).join("; "));
    if let Some(Counted { text: t, .. }) = &negative {
        let _ = writeln!(
            report,
            "negative control, the set record stripped, m0 rotated alone (--strategy immediate):"
        );
        report.push_str(t);
    }
    let _ = writeln!(
        report,
        "real node in a set: the test took {:.0} s",
        test_start.elapsed().as_secs_f64()
    );
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("real-node-report.txt");
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(report.as_bytes()).unwrap();
    }
    eprintln!("{report}");

    // ------------------------------------------------------------------ claims
    let examples: Vec<String> = events
        .iter()
        .filter(|e| e.t >= installed_from && e.t < after_to && e.ev() == "fail")
        .take(8)
        .map(|e| format!("{e:?}"))
        .collect();
    assert_eq!(
        staged_failed, 0,
        "a staged set rotation failed handshakes:\n{staged_table}{examples:#?}\ncertgen: {}",
        r.stdout
    );
    assert!(across.is_empty(), "after the rotation: {across:?}");
    assert_ne!(new_ca, old_ca, "the CA rotated");
    for p in ["trust", "leaves", "after"] {
        assert!(
            cross_ok.get(p).copied().unwrap_or_default() > 20,
            "too few cross-cluster handshakes in phase {p}:\n{staged_table}"
        );
    }
    let negative = negative.expect("the negative control ran after a clean rotation");
    let negative_table = negative.text;
    assert!(
        negative.cross_failed > 0,
        "m0 rotated alone failed no cross-cluster handshake, so this test could not tell a set \
         rotation from a run per cluster:\n{negative_table}"
    );
}
