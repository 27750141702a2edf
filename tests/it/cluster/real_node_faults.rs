//! A kubelet that does not act must hold the gate, on the real node. Each test rotates the
//! Secrets (`certgen --overwrite`, staged, pokes on) while the real node's kubelet suffers a real
//! fault, injected between a step's writes and its pokes (the test hook
//! `CERTGEN_TEST_PAUSE_BEFORE_POKES` stops the run there until the fault is in place):
//!
//! - stopped (SIGSTOP by its recorded PID) through the trust gate;
//! - cut from the API server (iptables drops its own loopback path, `tests/testenv/kubelet-fault`)
//!   through the leaves gate;
//! - restarted mid-rotation (stopped, then killed and started again);
//! - cut off while its hot pod is deleted, so that the pod's replacement is created, and started
//!   from the kubelet's cache, while it is cut off;
//! - stopped for longer than `--propagation-delay`.
//!
//! Two of them again with the hot pod the one endpoint of its Service, so that each gate probes
//! the pod itself (per-pod probes): its probes fail while its kubelet does not act, and its own
//! probe opens the gate once the kubelet is back and the pod holds what was written.
//!
//! The hot-reloading peer pod (`envoy-gateway`, `tests/peer`, hostNetwork on a 127.0.0.1 port)
//! serves mutual TLS with what its kubelet projected. A peer outside the node, in this test,
//! handshakes with it every 250 ms presenting the `envoy` leaf as stored now and verifying the
//! pod's leaf against the `envoy` bundle as stored now: what a pod on a healthy node holds.
//! Every test asserts 0 failed handshakes, and that the gate the fault hit was opened by what it
//! says (the report's `gates`). Each was shown to fail with the fix reverted (CONTRIBUTING.md,
//! "Kubelet faults").

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::real_node::{
    Node, Peer, free_ports, now_ms, peer_deployment, read_events, real_namespace, real_node,
    secret_state, whole_node,
};
use super::{Cluster, cluster, data, rolled_out};

/// What the peer outside the node saw.
#[derive(Default)]
pub(super) struct Outside {
    pub(super) ok: AtomicU64,
    /// Dials that found nothing listening (the pod between two containers): not handshakes.
    unreachable: AtomicU64,
    failed: Mutex<Vec<String>>,
    pub(super) stop: AtomicBool,
}

impl Outside {
    pub(super) fn line(&self) -> String {
        let failed = self.failed.lock().unwrap();
        format!(
            "{} handshakes, {} failed ({} dials found nothing listening){}",
            self.ok.load(Ordering::SeqCst) + failed.len() as u64,
            failed.len(),
            self.unreachable.load(Ordering::SeqCst),
            failed
                .iter()
                .take(5)
                .map(|f| format!("\n    {f}"))
                .collect::<String>()
        )
    }
}

/// One handshake with the pod at `port`, as a healthy `envoy` pod would make it now; `Ok(false)`
/// when nothing listens there.
async fn handshake(secrets: &Api<Secret>, ns: &str, port: u16) -> Result<bool, String> {
    let s = secrets
        .get("envoy")
        .await
        .map_err(|e| format!("reading Secret envoy: {e}"))?;
    let (_, client) = crate::util::tls::configs(
        &data(&s, "ca.crt"),
        &data(&s, "tls.crt"),
        &data(&s, "tls.key"),
    )
    .ok_or("the stored envoy Secret does not load")?;
    let tcp = match tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(false),
        Ok(Err(e)) => return Err(format!("connect: {e}")),
        Err(_) => return Err("connect: timed out".to_string()),
    };
    let name = ServerName::try_from(format!("envoy-gateway.{ns}.svc")).unwrap();
    let mut tls = tokio::time::timeout(
        Duration::from_secs(3),
        tokio_rustls::TlsConnector::from(client).connect(name, tcp),
    )
    .await
    .map_err(|_| "handshake: timed out".to_string())?
    .map_err(|e| format!("the pod's leaf: {e}"))?;
    // The pod's verdict on our leaf comes with its first bytes (TLS 1.3).
    let mut k = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(3), tls.read_exact(&mut k))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| format!("the pod rejected our leaf: {e}"))?;
    Ok(true)
}

fn spawn_outside(c: &Cluster, ns: &str, port: u16) -> Arc<Outside> {
    let out = Arc::new(Outside::default());
    let (secrets, ns, o) = (c.secrets(ns), ns.to_string(), out.clone());
    let started = Instant::now();
    tokio::spawn(async move {
        while !o.stop.load(Ordering::SeqCst) {
            match handshake(&secrets, &ns, port).await {
                Ok(true) => {
                    o.ok.fetch_add(1, Ordering::SeqCst);
                }
                Ok(false) => {
                    o.unreachable.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => o
                    .failed
                    .lock()
                    .unwrap()
                    .push(format!("t={:.1}s {e}", started.elapsed().as_secs_f64())),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    out
}

/// Runs `tests/testenv/kubelet-fault VERB` on the node's state directory.
pub(super) fn fault(node: &Node, verb: &str) {
    let state = node.dir.parent().unwrap();
    let out = std::process::Command::new(crate::util::root().join("tests/testenv/kubelet-fault"))
        .args([verb, state.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubelet-fault {verb}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Heals and continues the kubelet however the test ends.
pub(super) struct Healed<'a>(pub(super) &'a Node);

impl Drop for Healed<'_> {
    fn drop(&mut self) {
        fault(self.0, "heal");
        fault(self.0, "cont");
    }
}

/// The pod running on the real node, its outside peer, and the namespace.
struct Setup {
    ns: super::TestNs,
    outside: Arc<Outside>,
    pause: std::path::PathBuf,
    /// The pod's listener on 127.0.0.1.
    port: u16,
    /// `CERTGEN_TEST_DIAL_OVERRIDE` for the run, once the pod is an endpoint ([`endpoint`]).
    dials: Option<String>,
    /// Where the peer pod records what it loaded, and when.
    results: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// Secrets (a fresh install), the hot `envoy-gateway` peer pod on the real node, the outside
/// peer handshaking with it without a failure.
async fn setup(c: &Cluster, node: &Node, prefix: &str) -> Setup {
    let (ns, results) = real_namespace(c, node, prefix).await;
    let r = c.certgen(&ns.name).run_async().await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (port, outside) = hot_pod(c, node, &ns.name, &results).await;
    let dir = tempfile::tempdir().unwrap();
    let pause = dir.path().join("pause");
    Setup {
        ns,
        outside,
        pause,
        port,
        dials: None,
        results: results.clone(),
        _dir: dir,
    }
}

/// The hot `envoy-gateway` peer pod on the real node in namespace `ns` (whose Secrets exist),
/// serving on a free 127.0.0.1 port and recording into `results`, rolled out, and the outside
/// peer handshaking with it without a failure: the port and that peer.
pub(super) async fn hot_pod(
    c: &Cluster,
    node: &Node,
    ns: &str,
    results: &std::path::Path,
) -> (u16, Arc<Outside>) {
    let (port, _) = free_ports();
    let peer = Peer {
        name: "envoy-gateway",
        labels: json!({"app": "envoy-gateway"}),
        replicas: 1,
        secret: "envoy-gateway",
        args: ["--listen", &format!("127.0.0.1:{port}"), "--reload", "hot"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        extra_volumes: vec![],
    };
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), ns);
    deployments
        .create(
            &PostParams::default(),
            &peer_deployment(node, results, peer),
        )
        .await
        .unwrap();
    rolled_out(&deployments, "envoy-gateway", Duration::from_secs(120)).await;
    let outside = spawn_outside(c, ns, port);
    let deadline = Instant::now() + Duration::from_secs(60);
    while outside.ok.load(Ordering::SeqCst) < 8 {
        assert!(
            Instant::now() < deadline,
            "no handshake: {}",
            outside.line()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        outside.failed.lock().unwrap().is_empty(),
        "{}",
        outside.line()
    );
    (port, outside)
}

/// Starts `certgen --overwrite` paused before the pokes of its `step`-th step (1: trust, 2:
/// leaves), with `extra` flags; returns once it is paused there, with its handle.
async fn rotate_paused(
    c: &Cluster,
    s: &Setup,
    step: usize,
    delay: &str,
    extra: &[&str],
) -> tokio::task::JoinHandle<crate::util::Run> {
    let mut run = c
        .certgen(&s.ns.name)
        .propagation_delay(delay)
        .args(["--overwrite", "--timeout", "6m"])
        .args(extra)
        .env(
            certgen::rotation::PAUSE_BEFORE_POKES_ENV,
            format!("{step}:{}", s.pause.display()),
        );
    if let Some(dials) = &s.dials {
        run = run.env(certgen::probe::DIAL_OVERRIDE_ENV, dials);
    }
    let handle = tokio::spawn(async move { run.run_async().await });
    let reached = s.pause.with_extension("reached");
    // Step 2's pokes come after the trust gate, which may take its whole timer (2 m) when the
    // kubelet's evidence cannot open it (a kubelet that started a moment ago counts only once
    // its watches are back): the bound leaves room for that.
    let deadline = Instant::now() + Duration::from_secs(300);
    while !reached.exists() {
        assert!(
            !handle.is_finished(),
            "certgen ended before step {step}'s pokes"
        );
        assert!(
            Instant::now() < deadline,
            "certgen never reached step {step}'s pokes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle
}

/// Makes the hot pod the one endpoint of the `envoy-gateway` Service on port 18000 (the
/// profile's probe), at a TEST-NET address the run dials at the pod's 127.0.0.1 port: each gate
/// then probes the pod itself.
async fn endpoint(c: &Cluster, s: &mut Setup) {
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &s.ns.name);
    let mut found = pods
        .list(&ListParams::default().labels("app=envoy-gateway"))
        .await
        .unwrap()
        .items;
    found.retain(|p| p.metadata.deletion_timestamp.is_none());
    assert_eq!(found.len(), 1, "one envoy-gateway pod");
    let address = "192.0.2.70".to_string();
    super::probe::pod_service(
        c,
        &s.ns.name,
        ("envoy-gateway", 18000),
        &[(address.clone(), &found[0])],
    )
    .await;
    s.dials = Some(format!("{address}:18000=127.0.0.1:{}", s.port));
}

/// When (ms since the epoch) the peer pod first loaded what step `step` wrote, by its own
/// record: the CA that is now the only one in its Secret (step 1, trust), or the leaf now
/// stored (step 2, leaves).
async fn loaded_at(c: &Cluster, s: &Setup, step: usize) -> Option<i64> {
    let stored = c.secrets(&s.ns.name).get("envoy-gateway").await.unwrap();
    let (cas, leaf) = secret_state(&stored).unwrap();
    read_events(&s.results)
        .iter()
        .filter_map(|e| Some((e.t, e.loaded()?)))
        .filter(|(_, (loaded_cas, loaded_leaf))| match step {
            1 => cas.iter().all(|ca| loaded_cas.contains(ca)),
            _ => *loaded_leaf == leaf,
        })
        .map(|(t, _)| t)
        .min()
}

fn go(s: &Setup) {
    std::fs::write(s.pause.with_extension("go"), b"").unwrap();
}

/// The run's end: exit 0, the handshakes (after the peer saw the result for a few seconds), and
/// the report's gates.
async fn finish(s: &Setup, run: tokio::task::JoinHandle<crate::util::Run>) -> (Value, String) {
    let r = run.await.unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let report: Value = serde_json::from_str(&r.stdout).unwrap();
    // The pod keeps handshaking with what is stored after the run.
    tokio::time::sleep(Duration::from_secs(5)).await;
    s.outside.stop.store(true, Ordering::SeqCst);
    let gates = report["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            format!(
                "{}: {} after {}s [{}]",
                g["gate"].as_str().unwrap_or_default(),
                g["openedBy"].as_str().unwrap_or_default(),
                g["seconds"],
                g["pods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{} {}", p["name"], p["openedBy"]))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    (report, gates)
}

/// The outcome line the test prints (tests/run-all shows them) and writes to
/// `target/tmp/kubelet-faults.txt`.
pub(super) fn record(name: &str, took: Duration, gates: &str, outside: &Outside) {
    let line = format!(
        "{name}: {:.0} s; gates: {gates}; outside peer: {}",
        took.as_secs_f64(),
        outside.line()
    );
    eprintln!("{line}");
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubelet-faults.txt");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()).unwrap();
}

pub(super) fn assert_clean(outside: &Outside) {
    assert!(outside.ok.load(Ordering::SeqCst) > 20, "{}", outside.line());
    assert!(
        outside.failed.lock().unwrap().is_empty(),
        "a kubelet fault let a gate open before the pod held what was written: {}",
        outside.line()
    );
}

/// A rotation with `fault` (`stop` or `cut`) put in place before the pokes of its `step`-th step
/// and undone (`undo`) `hold` later, `delay` the `--propagation-delay`: the gate the fault hit
/// (the `step`-th) must open on evidence only after it, and the peer outside the node must see no
/// failed handshake. With `probed`, the hot pod is an endpoint certgen probes at each gate: its
/// probes fail while its kubelet does not update it, and once the kubelet is back and has
/// re-projected the Secret the pod's own probe opens the gate for it.
async fn through(
    name: &str,
    prefix: &str,
    step: usize,
    delay: &str,
    (fault_verb, undo): (&str, &str),
    hold: u64,
    probed: bool,
) {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    // The one kubelet's fault: this test's alone (see `real_node::whole_node`).
    let _node = whole_node().await;
    let mut s = setup(&c, &node, prefix).await;
    if probed {
        endpoint(&c, &mut s).await;
    }
    let _healed = Healed(&node);
    let started = Instant::now();
    // --wait: the gate before the cleanup is one a run without it leaves to the next run when
    // a kubelet holds it (nothing breaks meanwhile); this one waits.
    let run = rotate_paused(&c, &s, step, delay, &["--wait"]).await;
    fault(&node, fault_verb);
    go(&s);
    tokio::time::sleep(Duration::from_secs(hold)).await;
    let undone = now_ms();
    fault(&node, undo);
    let (report, gates) = finish(&s, run).await;
    record(name, started.elapsed(), &gates, &s.outside);
    assert_clean(&s.outside);
    let gate = &report["gates"][step - 1];
    if !probed {
        assert!(gate["seconds"].as_f64().unwrap() > hold as f64, "{gates}");
        assert_eq!(gate["openedBy"], "evidence", "{gates}");
        return;
    }
    // A probe proves what the pod holds: the gate holds through the fault unless the pod (by
    // its own record) loaded what the step wrote before the fault ended. That happens only when
    // the kubelet re-projected the Secret between the write and the fault (a periodic sync, every
    // 10-15 s on the test node), and then opening early is right.
    let loaded = loaded_at(&c, &s, step).await;
    if loaded.is_none_or(|at| at >= undone) {
        assert!(gate["seconds"].as_f64().unwrap() > hold as f64, "{gates}");
    } else {
        eprintln!(
            "{name}: the pod loaded step {step}'s write before the fault ended: no hold to see"
        );
    }
    let pods = gate["pods"].as_array().cloned().unwrap_or_default();
    let pod = pods
        .iter()
        .find(|p| {
            p["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("envoy-gateway-")
        })
        .unwrap_or_else(|| panic!("the probed pod's line: {gates}"));
    assert_eq!(
        pod["openedBy"], "probe",
        "the pod's own probe, once it held what was written: {gates}"
    );
}

/// The kubelet stopped before the trust step's pokes and continued 30 s later (longer than its
/// Lease's renewal gap): the trust gate must not open on the pokes the API server accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_stopped_through_the_trust_gate_holds_it() {
    through(
        "kubelet stopped 30 s through the trust gate",
        "kstop",
        1,
        "2m",
        ("stop", "cont"),
        30,
        false,
    )
    .await;
}

/// The kubelet stopped through the trust gate, as above, with the hot pod an endpoint certgen
/// probes at each gate (the trust probe: does it accept a client certificate from the new CA?).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_stopped_through_the_trust_gate_holds_its_probed_pod() {
    through(
        "kubelet stopped 30 s through the trust gate, pod probed",
        "kstopp",
        1,
        "2m",
        ("stop", "cont"),
        30,
        true,
    )
    .await;
}

/// The kubelet cut from the API server before the leaves step's pokes, for 30 s: the leaves
/// gate must wait until it is back and its watches with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_cut_off_through_the_leaves_gate_holds_it() {
    through(
        "kubelet cut off 30 s through the leaves gate",
        "kcut",
        2,
        "2m",
        ("cut", "heal"),
        30,
        false,
    )
    .await;
}

/// The kubelet cut off through the leaves gate, as above, with the hot pod probed at each gate
/// (the leaves probe: does it present the stored leaf?).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_cut_off_through_the_leaves_gate_holds_its_probed_pod() {
    through(
        "kubelet cut off 30 s through the leaves gate, pod probed",
        "kcutp",
        2,
        "2m",
        ("cut", "heal"),
        30,
        true,
    )
    .await;
}

/// The kubelet stopped before the trust step's pokes and restarted 8 s later (a new process,
/// which relists everything): the gate opens only once the new kubelet was live after the pokes
/// and had the settle time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_restarted_mid_rotation_holds_the_gate_until_it_is_back() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    // The one kubelet's fault: this test's alone (see `real_node::whole_node`).
    let _node = whole_node().await;
    let s = setup(&c, &node, "krestart").await;
    let _healed = Healed(&node);
    let started = Instant::now();
    let run = rotate_paused(&c, &s, 1, "2m", &[]).await;
    fault(&node, "stop");
    go(&s);
    tokio::time::sleep(Duration::from_secs(8)).await;
    fault(&node, "restart");
    let (report, gates) = finish(&s, run).await;
    record(
        "kubelet restarted mid-rotation",
        started.elapsed(),
        &gates,
        &s.outside,
    );
    assert_clean(&s.outside);
    assert_eq!(report["gates"][0]["openedBy"], "evidence", "{gates}");
}

/// The kubelet cut off before the trust step's pokes, and the hot pod deleted meanwhile: its
/// replacement is created (and later started, from the kubelet's Secret cache) while the kubelet
/// is cut off. Created after the write, it proves nothing until the kubelet's watches are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_created_while_its_kubelet_is_cut_off_proves_nothing() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    // The one kubelet's fault: this test's alone (see `real_node::whole_node`).
    let _node = whole_node().await;
    let s = setup(&c, &node, "kcreate").await;
    let _healed = Healed(&node);
    let started = Instant::now();
    let run = rotate_paused(&c, &s, 1, "2m", &[]).await;
    fault(&node, "cut");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &s.ns.name);
    for p in pods.list(&ListParams::default()).await.unwrap() {
        let name = p.metadata.name.unwrap();
        // Forced (grace period 0): the object goes at once, the cut-off kubelet's container
        // serves on until the kubelet is back, and only the replacement is listed.
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        pods.delete(&name, &now).await.unwrap();
    }
    go(&s);
    tokio::time::sleep(Duration::from_secs(30)).await;
    fault(&node, "heal");
    let (report, gates) = finish(&s, run).await;
    record(
        "pod created while its kubelet is cut off",
        started.elapsed(),
        &gates,
        &s.outside,
    );
    assert_clean(&s.outside);
    assert!(
        report["gates"][0]["seconds"].as_f64().unwrap() > 30.0,
        "{gates}"
    );
}

/// The kubelet stopped for 40 s with `--propagation-delay 15s`: the timer must not open a gate
/// for a pod whose kubelet is seen down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_longer_than_the_propagation_delay_still_holds_the_gate() {
    through(
        "kubelet stopped 40 s, --propagation-delay 15s",
        "klong",
        1,
        "15s",
        ("stop", "cont"),
        40,
        false,
    )
    .await;
}
