//! certgen on a real kubelet: the chart's hook Job runs the built image in a pod, and a staged
//! rotation keeps real peer pods handshaking without a single failure while the kubelet
//! propagates the Secrets at its own pace; the immediate strategy, in the same setup, fails some.
//!
//! Needs the node that `tests/testenv/node-up` adds beside kwok's (containerd + a kubelet,
//! tainted so only pods that tolerate it land there). It exports `CERTGEN_REAL_NODE`,
//! `CERTGEN_REAL_NODE_DIR`, `CERTGEN_IMAGE` and `CERTGEN_PEER_IMAGE`; without them this test is
//! skipped with a note, except under `CI`, where that fails the run.
//!
//! Topology (Envoy Gateway's, with the built-in profile): `envoy-gateway` (hot reload) and
//! `envoy-ratelimit` (reads certificates only at start; certgen restarts it) serve mutual TLS
//! on 127.0.0.1 ports (hostNetwork; pods have no other network here), and two `envoy` proxy
//! pods (hot reload) dial both every 50 ms. Every peer appends its events (loads, failures,
//! totals) to a file on the node's disk (hostPath), which this test reads. The Secrets and the
//! peers live in a namespace of their own; the chart's release (ServiceAccount, Role, hook Job)
//! lives in a namespace that enforces the restricted Pod Security Standard.
//!
//! Measured and written to `target/tmp/real-node-report.txt` (tests/run-all prints it): the
//! kubelet's propagation delays (a stamp Secret updated every ~12 s and the rotation's own
//! writes, from the API write to the pod seeing the new files), handshakes and failures per
//! strategy, and each hook Job's duration.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Namespace, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Cluster, TestNs, chart_dir, cluster, deployment, helm, rolled_out, try_helm};

const RELEASE: &str = "rn";
const JOB: &str = "rn-certgen";
/// The node's kubelet sync period (`syncFrequency` in the settings node-up recorded).
pub(super) fn sync_period(settings: &str) -> Duration {
    let v = settings
        .lines()
        .find_map(|l| l.strip_prefix("syncFrequency "))
        .unwrap_or("1m")
        .trim();
    let (n, unit) = v.split_at(v.len() - 1);
    let n: u64 = n.parse().unwrap_or(60);
    Duration::from_secs(if unit == "m" { n * 60 } else { n })
}

/// The staged gate for hot-reloading consumers. The kubelet syncs each pod again after
/// `syncFrequency` plus up to 50% jitter (pod_workers.go: workerResyncIntervalJitterFactor), so
/// a Secret can take 1.5 sync periods and a little more to reach a pod: 30 s for the test
/// node's 10 s period, 2 min for the kubelet's default 1m (CERTGEN_NODE_SYNC_FREQUENCY=1m).
pub(super) fn gate(sync: Duration) -> Duration {
    if sync <= Duration::from_secs(10) {
        Duration::from_secs(30)
    } else {
        sync * 3 / 2 + Duration::from_secs(30)
    }
}

pub(super) struct Node {
    pub(super) name: String,
    pub(super) dir: PathBuf,
    image: String,
    pub(super) peer_image: String,
}

impl Node {
    /// Waits until certgen's own image is on the node. tests/run-all starts the node without it
    /// (`CERTGEN_NODE_DEFER_IMAGE=1`) and builds and imports it beside the first real-node tests
    /// (`tests/testenv/node-image`); until then `certgen-image.pending` is in the node's
    /// directory. A test that runs the image calls this before it takes the node, so that the
    /// tests that do not need the image go first. Fails with the import's error, or after 40
    /// minutes.
    pub(super) async fn certgen_image_imported(&self) {
        let pending = self.dir.join("certgen-image.pending");
        let failed = self.dir.join("certgen-image.failed");
        let deadline = std::time::Instant::now() + Duration::from_secs(40 * 60);
        let mut said = false;
        while pending.exists() {
            if let Ok(why) = std::fs::read_to_string(&failed) {
                panic!(
                    "certgen's image did not reach the real node: {}",
                    why.trim()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "certgen's image is still not on the real node after 40 minutes ({} exists)",
                pending.display()
            );
            if !said {
                eprintln!(
                    "waiting for certgen's image to be built and imported (tests/testenv/node-image)"
                );
                said = true;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Waits until the kubelet has run 75 s since a test last undid a fault of it (continued,
    /// restarted or healed it: `tests/testenv/kubelet-fault` records when), as tests/run-all
    /// waits after the node's start: its Secret watches come back about a minute after it does.
    /// For a test that measures propagation on a kubelet in its steady state, run after the
    /// fault tests.
    pub(super) async fn settled_kubelet(&self) {
        const SETTLE: u64 = 75;
        let Ok(undone) = std::fs::read_to_string(self.dir.join("kubelet-fault.undone")) else {
            return;
        };
        let Ok(undone) = undone.trim().parse::<u64>() else {
            return;
        };
        let left = (undone + SETTLE).saturating_sub(now_ms() as u64 / 1000);
        if left > 0 {
            eprintln!("waiting {left} s for the kubelet to settle after the last fault test");
            tokio::time::sleep(Duration::from_secs(left)).await;
        }
    }
}

/// The real node has one kubelet. The fault tests stop, cut and restart it, each timing its
/// gate against its own fault, so each takes the node alone: run together, one test's `heal`,
/// `cont` or `restart` ended another's fault early, and that one's gate rightly opened before
/// its fault's end, failing its assertions (CI, stop 38: the cut-off and restart tests, run
/// side by side, both failed). The hook test measures propagation delays against its gate on a
/// healthy kubelet, so it takes the node alone too. The workload-kind tests only need a
/// healthy kubelet: they share it with each other. (In CI on 2026-11-26 the hook test,
/// overlapping the fault tests, once had 39 handshakes fail (5,106 succeeded) in its staged
/// rotation; its failure message now carries the writes, the peers' loads and the hook's log to
/// explain such a run.)
static NODE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The node with a healthy kubelet, shared with tests that inject no fault.
pub(super) async fn shared_node() -> tokio::sync::RwLockReadGuard<'static, ()> {
    NODE.read().await
}

/// The node, alone.
pub(super) async fn whole_node() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    NODE.write().await
}

pub(super) fn real_node() -> Option<Node> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        var("CERTGEN_REAL_NODE"),
        var("CERTGEN_REAL_NODE_DIR"),
        var("CERTGEN_IMAGE"),
        var("CERTGEN_PEER_IMAGE"),
    ) {
        (Some(name), Some(dir), Some(image), Some(peer_image)) => Some(Node {
            name,
            dir: PathBuf::from(dir),
            image,
            peer_image,
        }),
        _ if std::env::var_os("CI").is_some() => panic!(
            "CI is set but no real node is up (CERTGEN_REAL_NODE etc.): run tests/testenv/node-up \
             after tests/testenv/up, as tests/run-all does"
        ),
        _ => {
            eprintln!("note: no real node (tests/testenv/node-up); skipping a real-node test");
            None
        }
    }
}

pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Two distinct free loopback ports below the ephemeral range.
pub(super) fn free_ports() -> (u16, u16) {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    let mut p = 20000 + (now_ms() % 10000) as u16;
    while ports.len() < 2 {
        p = if p >= 31999 { 20000 } else { p + 7 };
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", p)) {
            held.push(l);
            ports.push(p);
        }
    }
    (ports[0], ports[1])
}

/// Short SHA-256 fingerprints of the certificates in a PEM bundle, as the peer logs them.
fn fingerprints(pem_text: &[u8]) -> Vec<String> {
    pem::parse_many(pem_text)
        .unwrap()
        .iter()
        .map(|p| {
            Sha256::digest(p.contents())[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .collect()
}

/// (CA fingerprints, leaf fingerprint) of a TLS Secret: what a peer reports when it loads it.
pub(super) fn secret_state(s: &Secret) -> Option<(Vec<String>, String)> {
    let data = s.data.as_ref()?;
    let cas = fingerprints(&data.get("ca.crt")?.0);
    let leaf = fingerprints(&data.get("tls.crt")?.0).into_iter().next()?;
    Some((cas, leaf))
}

/// One line of a peer's event file.
#[derive(Debug, Clone)]
pub(super) struct Event {
    pub(super) pod: String,
    pub(super) t: i64,
    v: Value,
}

impl Event {
    pub(super) fn ev(&self) -> &str {
        self.v["ev"].as_str().unwrap_or_default()
    }
    pub(super) fn loaded(&self) -> Option<(Vec<String>, String)> {
        (self.ev() == "load").then(|| {
            (
                self.v["ca"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_string())
                    .collect(),
                self.v["leaf"].as_str().unwrap().to_string(),
            )
        })
    }
}

pub(super) fn read_events(dir: &Path) -> Vec<Event> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        let pod = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines() {
            // The last line may be half written.
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                let t = v["t"].as_i64().unwrap_or_default();
                out.push(Event {
                    pod: pod.clone(),
                    t,
                    v,
                });
            }
        }
    }
    out.sort_by_key(|e| e.t);
    out
}

/// Handshake totals and failures in [from, to), from the peers' events.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Client handshakes that completed, from the dialers' running totals.
    pub(super) ok: u64,
    /// Failed handshakes by (role, kind).
    pub(super) failed: BTreeMap<(String, String), u64>,
    /// Dials that found nothing listening (a pod starting or stopping), not handshakes.
    unreachable: u64,
    examples: Vec<String>,
    /// Every failure of kind io (connection resets), as "role peer".
    io: Vec<String>,
}

impl Tally {
    pub(super) fn of(events: &[Event], from: i64, to: i64) -> Tally {
        let mut t = Tally::default();
        // Running totals per pod: the last value before `from` and before `to`.
        let mut first: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        let mut last: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for e in events {
            if e.ev() == "stats" {
                let v = (
                    e.v["ok"].as_u64().unwrap(),
                    e.v["unreachable"].as_u64().unwrap(),
                );
                if e.t < from {
                    first.insert(&e.pod, v);
                }
                if e.t < to {
                    last.insert(&e.pod, v);
                }
            }
            if e.ev() == "fail" && e.t >= from && e.t < to {
                let key = (
                    e.v["role"].as_str().unwrap().to_string(),
                    e.v["kind"].as_str().unwrap().to_string(),
                );
                *t.failed.entry(key.clone()).or_default() += 1;
                if key.1 == "io" {
                    t.io.push(format!(
                        "{} {}",
                        key.0,
                        e.v["peer"].as_str().unwrap_or_default()
                    ));
                }
                if t.examples.len() < 5 {
                    t.examples.push(format!("{} {}", e.pod, e.v));
                }
            }
        }
        for (pod, (ok, unreachable)) in &last {
            let (ok0, unreachable0) = first.get(pod).copied().unwrap_or_default();
            t.ok += ok - ok0;
            t.unreachable += unreachable - unreachable0;
        }
        t
    }

    pub(super) fn of_kind(&self, kind: &str) -> u64 {
        self.failed
            .iter()
            .filter(|((_, k), _)| k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    /// Failed handshakes of `kind` as the side in `role` ("client" or "server") saw them.
    pub(super) fn of_role_kind(&self, role: &str, kind: &str) -> u64 {
        self.failed
            .iter()
            .filter(|((r, k), _)| r == role && k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    pub(super) fn client_failures(&self) -> u64 {
        self.failed
            .iter()
            .filter(|((role, _), _)| role == "client")
            .map(|(_, n)| n)
            .sum()
    }

    fn line(&self) -> String {
        format!(
            "{} handshakes ok, failed {:?}, {} dials unreachable",
            self.ok, self.failed, self.unreachable
        )
    }
}

/// A Secret write seen by the test's watch: when, which Secret, and what a peer would load.
#[derive(Debug, Clone)]
struct Write {
    t: i64,
    secret: String,
    state: (Vec<String>, String),
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn distribution(mut v: Vec<i64>) -> String {
    if v.is_empty() {
        return "no samples".into();
    }
    v.sort();
    format!(
        "n={} min={:.1}s p50={:.1}s p90={:.1}s max={:.1}s",
        v.len(),
        v[0] as f64 / 1000.0,
        percentile(&v, 0.5) as f64 / 1000.0,
        percentile(&v, 0.9) as f64 / 1000.0,
        v[v.len() - 1] as f64 / 1000.0
    )
}

/// One Deployment of test peers.
pub(super) struct Peer<'a> {
    pub(super) name: &'a str,
    pub(super) labels: Value,
    pub(super) replicas: i32,
    /// The Secret mounted at /certs.
    pub(super) secret: &'a str,
    pub(super) args: Vec<String>,
    /// More Secret volumes: (volume name, mount path, volume source).
    pub(super) extra_volumes: Vec<(&'a str, &'a str, Value)>,
}

pub(super) fn peer_deployment(node: &Node, results: &Path, peer: Peer) -> Deployment {
    let Peer {
        name,
        labels,
        replicas,
        secret,
        args,
        extra_volumes,
    } = peer;
    let mut volumes = vec![
        json!({"name": "certs", "secret": {"secretName": secret}}),
        json!({"name": "results", "hostPath": {"path": results, "type": "Directory"}}),
    ];
    let mut mounts = vec![
        json!({"name": "certs", "mountPath": "/certs", "readOnly": true}),
        json!({"name": "results", "mountPath": "/results"}),
    ];
    for (vname, path, source) in extra_volumes {
        let mut v = source;
        v["name"] = json!(vname);
        volumes.push(v);
        mounts.push(json!({"name": vname, "mountPath": path, "readOnly": true}));
    }
    let mut all_args = vec![
        "--name".to_string(),
        name.to_string(),
        "--certs".into(),
        "/certs".into(),
        "--out".into(),
        "/results/$(POD_NAME).jsonl".into(),
        "--max-seconds".into(),
        "1500".into(),
    ];
    all_args.extend(args);
    // Only on the real node, past its taint; its own containers and volumes.
    let spec = json!({
        "template": {
            "spec": {
                "hostNetwork": true,
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "tolerations": [{"key": "certgen.dev/real-node", "operator": "Exists", "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 5,
                "automountServiceAccountToken": false,
                "containers": [{
                    "name": "peer",
                    "image": node.peer_image,
                    "imagePullPolicy": "Never",
                    "args": all_args,
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "readOnlyRootFilesystem": true,
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumeMounts": mounts,
                }],
                "volumes": volumes,
            }
        }
    });
    let mut d = deployment(name, replicas, spec);
    d.metadata.labels = serde_json::from_value(labels).unwrap();
    d
}

/// The hook pod's log, read from the node's disk (the API server cannot reach this kubelet).
pub(super) fn hook_log(node: &Node, ns: &str) -> String {
    hook_logs(node, ns).into_values().collect()
}

/// The logs of the hook pods of namespace `ns` still on the node's disk, by pod directory.
pub(super) fn hook_logs(node: &Node, ns: &str) -> BTreeMap<String, String> {
    let mut logs = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(node.dir.join("pod-logs")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("{ns}_{JOB}-")) {
                let mut out = String::new();
                for f in walk(&e.path()) {
                    let _ = writeln!(out, "--- {}", f.display());
                    out.push_str(&std::fs::read_to_string(&f).unwrap_or_default());
                }
                logs.insert(name, out);
            }
        }
    }
    logs
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files.sort();
    files
}

/// The hook Job after Helm returned: it succeeded on the real node; returns its duration.
async fn hook_job(c: &Cluster, node: &Node, rel: &str) -> f64 {
    let (status, terminated) = hook_run(c, node, rel, "Succeeded").await;
    assert_eq!(
        status.succeeded,
        Some(1),
        "the hook Job did not succeed: {status:?}\n{}",
        hook_log(node, rel)
    );
    assert_eq!(terminated.exit_code, 0);
    let start = status.start_time.unwrap().0;
    let end = status.completion_time.unwrap().0;
    end.duration_since(start).as_secs_f64()
}

/// The hook Job after Helm returned, and its pod that ended in `phase` (`Succeeded`, `Failed`):
/// a real container on the real node ran the built image with a read-only root. Returns the
/// Job's status and how its container ended.
pub(super) async fn hook_run(
    c: &Cluster,
    node: &Node,
    rel: &str,
    phase: &str,
) -> (JobStatus, ContainerStateTerminated) {
    let job = Api::<Job>::namespaced(c.client.clone(), rel)
        .get(JOB)
        .await
        .unwrap();
    let status = job.status.clone().unwrap_or_default();
    // This Job's pods only: Helm deletes the previous hook Job, not necessarily its pods yet.
    let uid = job.metadata.uid.clone().unwrap();
    let pods = Api::<Pod>::namespaced(c.client.clone(), rel)
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .unwrap();
    let pod = pods
        .items
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase))
        .unwrap_or_else(|| panic!("no hook pod {phase}: {status:?}\n{}", hook_log(node, rel)));
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(node.name.as_str()));
    let container = &spec.containers[0];
    assert_eq!(container.image.as_deref(), Some(node.image.as_str()));
    assert_eq!(
        container
            .security_context
            .as_ref()
            .and_then(|s| s.read_only_root_filesystem),
        Some(true)
    );
    let state = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .clone()
        .unwrap();
    let terminated = state.terminated.expect("the certgen container terminated");
    // A real container ran it (kwok's pods have no container IDs).
    assert!(
        terminated
            .container_id
            .as_deref()
            .unwrap_or_default()
            .starts_with("containerd://"),
        "{terminated:?}"
    );
    (status, terminated)
}

/// Waits (bounded) until every pod of the hot peers has loaded the current Secret, and every
/// ratelimit pod has started with it.
pub(super) async fn converged(c: &Cluster, ns: &str, results: &Path, within: Duration) -> i64 {
    let apps = [
        ("envoy-gateway", "envoy-gateway"),
        ("envoy-proxy", "envoy"),
        ("envoy-ratelimit", "envoy-rate-limit"),
    ];
    converged_to(c, ns, results, &apps, 4, within).await
}

/// Every running pod has loaded its app's Secret as stored now (`apps`: the pods' `app` label
/// and the Secret), and there are `pods` of them: returns when (ms since the epoch).
pub(super) async fn converged_to(
    c: &Cluster,
    ns: &str,
    results: &Path,
    apps: &[(&str, &str)],
    pods: usize,
    within: Duration,
) -> i64 {
    let secrets = c.secrets(ns);
    let api: Api<Pod> = Api::namespaced(c.client.clone(), ns);
    let deadline = Instant::now() + within;
    loop {
        let mut want = BTreeMap::new();
        for (app, secret) in apps {
            want.insert(
                app.to_string(),
                secret_state(&secrets.get(secret).await.unwrap()).unwrap(),
            );
        }
        let running: Vec<Pod> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .collect();
        let events = read_events(results);
        let behind: Vec<String> = running
            .iter()
            .filter(|p| {
                let name = p.metadata.name.clone().unwrap();
                let app = &p.metadata.labels.as_ref().unwrap()["app"];
                let last = events
                    .iter()
                    .filter(|e| e.pod == name)
                    .filter_map(Event::loaded)
                    .next_back();
                last.as_ref() != want.get(app)
            })
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        if behind.is_empty() && running.len() == pods {
            return now_ms();
        }
        assert!(
            Instant::now() < deadline,
            "peers did not load the current Secrets within {within:?}: {behind:?} ({} running)",
            running.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sends the pods of namespace `ns` to the real node (the test control plane sends pods to
/// kwok's node unless their namespace selects another: PodNodeSelector, see tests/testenv/up),
/// with `labels` on the namespace.
pub(super) async fn select_real_node(c: &Cluster, ns: &str, labels: Value) {
    let annotations =
        json!({"scheduler.alpha.kubernetes.io/node-selector": "certgen.dev/real-node=true"});
    Api::<Namespace>::all(c.client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels, "annotations": annotations}})),
        )
        .await
        .unwrap();
}

/// The directory the peers of namespace `ns` write their results to on the real node
/// (created, writable by the peers' user).
pub(super) fn results_dir(node: &Node, ns: &str) -> PathBuf {
    let results = node.dir.join("results").join(ns);
    std::fs::create_dir_all(&results).unwrap();
    std::fs::set_permissions(
        &results,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    results
}

/// A fresh namespace (`prefix`) whose pods run on the real node, and its results directory.
pub(super) async fn real_namespace(c: &Cluster, node: &Node, prefix: &str) -> (TestNs, PathBuf) {
    let ns = c.namespace(prefix).await;
    select_real_node(c, &ns.name, json!({})).await;
    let results = results_dir(node, &ns.name);
    (ns, results)
}

/// `helm VERB` of the chart as release `RELEASE` in namespace `rel`, waiting (`--wait`, up to
/// 300 s) for what it installs, then `extra`.
pub(super) fn chart_args(verb: &str, kubeconfig: &Path, rel: &str, extra: &[&str]) -> Vec<String> {
    let chart = chart_dir();
    let mut a: Vec<String> = [
        verb,
        RELEASE,
        chart.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--namespace",
        rel,
        "--wait",
        "--timeout",
        "300s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The chart's values that put its Secrets in namespace `tgt` and its pods on the real node,
/// with `propagation` as its `propagationDelay`.
pub(super) fn node_values(node: &Node, tgt: &str, propagation: Duration) -> Vec<String> {
    vec![
        "--set".to_string(),
        format!("namespace={tgt}"),
        "--set".into(),
        format!("propagationDelay={}s", propagation.as_secs()),
        "--set-json".into(),
        format!(
            "nodeSelector={}",
            json!({"kubernetes.io/hostname": node.name})
        ),
        "--set-json".into(),
        r#"tolerations=[{"key":"certgen.dev/real-node","operator":"Exists","effect":"NoSchedule"}]"#
            .into(),
    ]
}

/// Runs helm off the runtime's threads, whatever it ends with.
pub(super) async fn helm_async(helm: &Path, args: Vec<String>) -> std::process::Output {
    let helm = helm.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        try_helm(&helm, &refs)
    })
    .await
    .unwrap()
}

/// The release was deployed: helm's stdout, or a panic with what it said.
pub(super) fn deployed(out: std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("STATUS: deployed"),
        "helm failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_kubelet_runs_the_hook_and_staged_rotation_fails_no_handshake() {
    let Some(c) = cluster().await else { return };
    let Some(node) = real_node() else { return };
    node.certgen_image_imported().await;
    let Some(helm) = helm() else { return };
    let _node = whole_node().await;
    node.settled_kubelet().await;
    let mut report = String::new();
    let settings = std::fs::read_to_string(node.dir.join("settings")).unwrap_or_default();
    let _ = writeln!(report, "real node: {}", settings.trim().replace('\n', "; "));
    let sync = sync_period(&settings);
    let gate = gate(sync);
    // Stamps further apart than the sync period, so that each one is seen on its own.
    let spacing = sync + Duration::from_millis(1000);
    // How long peers may take to load what a rotation wrote: a few sync periods.
    let settle = sync * 3 + Duration::from_secs(60);

    // The release (hook Job) in a namespace enforcing the restricted profile; the Secrets and
    // the hostNetwork peers (which the restricted and baseline profiles forbid) in another.
    let rel = c.namespace("real-hook").await;
    let tgt = c.namespace("real-peers").await;
    for (ns, labels) in [
        (
            &rel.name,
            json!({"pod-security.kubernetes.io/enforce": "restricted"}),
        ),
        (&tgt.name, json!({})),
    ] {
        select_real_node(&c, ns, labels).await;
    }
    let results = results_dir(&node, &tgt.name);

    // Watch the Secrets from the start: the arrival time of each write is the reference for
    // the propagation delays.
    let writes: Arc<Mutex<Vec<Write>>> = Arc::default();
    let watch = {
        let writes = writes.clone();
        let api = c.secrets(&tgt.name);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Ok(Some(ev)) = stream.try_next().await {
                let t = now_ms();
                if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = ev
                    && let Some(state) = secret_state(&s)
                {
                    writes.lock().unwrap().push(Write {
                        t,
                        secret: s.metadata.name.clone().unwrap(),
                        state,
                    });
                }
            }
        })
    };

    // ---------------------------------------------------------------- helm install
    let kubeconfig = c.kubeconfig.clone();
    let helm_args = |verb: &str, extra: &[&str]| chart_args(verb, &kubeconfig, &rel.name, extra);
    let values = node_values(&node, &tgt.name, gate);
    let mut args = helm_args("install", &[]);
    args.extend(values.iter().cloned());
    deployed(helm_async(&helm, args).await);
    // The chart's image defaults name the image tests/testenv/node-up built and imported.
    let install_secs = hook_job(&c, &node, &rel.name).await;
    let _ = writeln!(
        report,
        "hook Job (install, image {}): {install_secs:.0} s",
        node.image
    );
    for name in [
        "envoy-gateway-ca",
        "envoy-gateway",
        "envoy",
        "envoy-rate-limit",
        "envoy-oidc-hmac",
    ] {
        assert!(
            c.secrets(&tgt.name).get_opt(name).await.unwrap().is_some(),
            "the hook Job did not create Secret {name}"
        );
    }

    // ------------------------------------------------------------------ the peers
    let (gw_port, rl_port) = free_ports();
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &tgt.name);
    let stamp_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "propagation-stamp"},
        "stringData": {"stamp": "0"},
    }))
    .unwrap();
    c.secrets(&tgt.name)
        .create(&PostParams::default(), &stamp_secret)
        .await
        .unwrap();
    let app = |name: &str| json!({"app": name});
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (gw, rl) = (
        format!("127.0.0.1:{gw_port}"),
        format!("127.0.0.1:{rl_port}"),
    );
    let peers = [
        Peer {
            name: "envoy-gateway",
            labels: app("envoy-gateway"),
            replicas: 1,
            secret: "envoy-gateway",
            args: args(&["--listen", &gw, "--reload", "hot"]),
            extra_volumes: vec![],
        },
        Peer {
            name: "envoy-ratelimit",
            labels: app("envoy-ratelimit"),
            replicas: 1,
            secret: "envoy-rate-limit",
            args: args(&["--listen", &rl, "--reload", "start"]),
            extra_volumes: vec![],
        },
        Peer {
            name: "envoy-proxy",
            // The labels the envoy-gateway profile selects its hot `envoy-proxies` consumer by.
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
                "--watch",
                "/stamp/stamp",
            ]),
            extra_volumes: vec![(
                "stamp",
                "/stamp",
                json!({"secret": {"secretName": "propagation-stamp"}}),
            )],
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
    for name in ["envoy-gateway", "envoy-ratelimit", "envoy-proxy"] {
        rolled_out(
            &deployments,
            name,
            deadline.saturating_duration_since(Instant::now()),
        )
        .await;
    }
    // Handshakes flow before anything rotates, and none fails.
    let baseline_from = now_ms();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = Tally::of(&read_events(&results), 0, now_ms());
        assert_eq!(
            t.failed.values().sum::<u64>(),
            0,
            "handshakes fail before any rotation: {:?}",
            t.examples
        );
        if t.ok > 100 && now_ms() - baseline_from > 3000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the proxies complete no handshakes: {}",
            t.line()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // ------------------------------------------- propagation stamps, during the rotation
    let stamps = {
        let api = c.secrets(&tgt.name);
        tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in 0..6 {
                let t = now_ms();
                api.patch(
                    "propagation-stamp",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"stringData": {"stamp": t.to_string()}})),
                )
                .await
                .unwrap();
                sent.push(t);
                // Longer than the kubelet's sync period, so each stamp is seen on its own.
                tokio::time::sleep(spacing + Duration::from_millis(700 * (i % 3))).await;
            }
            sent
        })
    };

    // ------------------------------------------------------- staged --overwrite rotation
    let staged_from = now_ms();
    let mut args = helm_args("upgrade", &["--reuse-values"]);
    args.extend(["--set".into(), "job.extraArgs={--overwrite}".into()]);
    deployed(helm_async(&helm, args).await);
    let staged_secs = hook_job(&c, &node, &rel.name).await;
    // Read now: the next upgrade's hook Job replaces this one, and its log with it.
    let staged_log = hook_log(&node, &rel.name);
    let staged_to = converged(&c, &tgt.name, &results, settle).await + 3000;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let events = read_events(&results);
    let staged = Tally::of(&events, staged_from, staged_to);
    let _ = writeln!(
        report,
        "staged --overwrite (gate {}s): hook Job {staged_secs:.0} s; {}",
        gate.as_secs(),
        staged.line()
    );
    let sent = stamps.await.unwrap();

    // ---------------------------------------------------- immediate, same setup
    let immediate_from = now_ms();
    let mut args = helm_args("upgrade", &["--reuse-values"]);
    args.extend([
        "--set".into(),
        "job.extraArgs={--overwrite,--strategy,immediate}".into(),
    ]);
    deployed(helm_async(&helm, args).await);
    let immediate_secs = hook_job(&c, &node, &rel.name).await;
    let immediate_to = converged(&c, &tgt.name, &results, settle).await + 3000;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let events = read_events(&results);
    let immediate = Tally::of(&events, immediate_from, immediate_to);
    let _ = writeln!(
        report,
        "immediate --overwrite: hook Job {immediate_secs:.0} s; {}",
        immediate.line()
    );
    watch.abort();

    // ------------------------------------------------------------ propagation delays
    // Stamps: from just before the API write to the proxy pod seeing the new file.
    let mut stamp_delays = Vec::new();
    for e in events.iter().filter(|e| e.ev() == "file") {
        let content = e.v["content"].as_str().unwrap_or_default();
        if let Some(t0) = sent.iter().find(|s| s.to_string() == content) {
            stamp_delays.push(e.t - t0);
        }
    }
    // Rotation writes: from the watch event to a hot peer loading that Secret version.
    let writes = writes.lock().unwrap().clone();
    let mut rotation_delays = Vec::new();
    for e in &events {
        let Some(state) = e.loaded() else { continue };
        let secret = if e.pod.starts_with("envoy-gateway-") {
            "envoy-gateway"
        } else if e.pod.starts_with("envoy-proxy-") {
            "envoy"
        } else {
            continue;
        };
        if let Some(w) = writes
            .iter()
            .rfind(|w| w.secret == secret && w.state == state && w.t <= e.t)
            && w.t >= staged_from
        {
            rotation_delays.push(e.t - w.t);
        }
    }
    let _ = writeln!(
        report,
        "Secret propagation, stamp updates: {}",
        distribution(stamp_delays.clone())
    );
    let _ = writeln!(
        report,
        "Secret propagation, rotation writes: {}",
        distribution(rotation_delays.clone())
    );
    // Appended: cluster::real_node_set writes its table to the same file (tests/run-all
    // removes it before the run and prints it after).
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

    // ---------------------------------------------------------------------- claims
    assert!(
        stamp_delays.len() >= 6,
        "too few propagation samples ({stamp_delays:?}); sent {sent:?}"
    );
    assert!(
        stamp_delays
            .iter()
            .chain(&rotation_delays)
            .all(|d| *d >= 0 && *d < gate.as_millis() as i64),
        "a propagation delay reached the {gate:?} gate: {stamp_delays:?} {rotation_delays:?}"
    );
    assert!(
        staged.ok > 1000,
        "too few handshakes during the staged rotation: {}",
        staged.line()
    );
    // What to read when it fails: every Secret write and every peer's load in the window,
    // on one clock (ms since the epoch), and the hook's own log (gates, pokes, what opened them).
    let timeline = || {
        let mut lines: Vec<(i64, String)> = writes
            .iter()
            .filter(|w| w.t >= staged_from && w.t <= staged_to)
            .map(|w| (w.t, format!("write {} {:?}", w.secret, w.state)))
            .collect();
        lines.extend(
            events
                .iter()
                .filter(|e| e.t >= staged_from && e.t <= staged_to)
                .filter_map(|e| Some((e.t, format!("{} loaded {:?}", e.pod, e.loaded()?)))),
        );
        lines.sort();
        lines
            .iter()
            .map(|(t, l)| format!("{t} {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        staged.of_kind("tls"),
        0,
        "a staged rotation must not fail a handshake: {}\n{:?}\ntimeline:\n{}\nhook log:\n{staged_log}",
        staged.line(),
        staged.examples,
        timeline()
    );
    // A connection reset is not about certificates: it can only happen when the restarted
    // peer's old pod closes its listener (the peer drains its queue first, so it is rare).
    assert!(
        staged.io.len() <= 2 && staged.io.iter().all(|f| f == "client envoy-ratelimit"),
        "connection failures beyond a restart during the staged rotation: {}\n{:?}",
        staged.line(),
        staged.examples
    );
    let load_errors: Vec<_> = events.iter().filter(|e| e.ev() == "load_error").collect();
    assert!(
        load_errors.is_empty(),
        "a peer could not load its Secret: {load_errors:?}"
    );
    assert!(
        immediate.client_failures() > 0,
        "the immediate strategy failed no handshake in the same setup, so this test could not \
         tell the strategies apart: {}",
        immediate.line()
    );
    assert!(immediate.of_kind("tls") > 0, "{}", immediate.line());
    let peers_seen: BTreeSet<_> = events.iter().map(|e| e.pod.clone()).collect();
    assert!(peers_seen.len() >= 4, "{peers_seen:?}");
}
