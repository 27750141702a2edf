//! The rotation harness: real mutual-TLS peers that handshake with each other continuously while
//! certgen rotates their certificates, counting every failed handshake.
//!
//! - Each peer is a "pod" with its own directory. The kubelet stand-in (`cluster::kubelet`)
//!   copies the peer's Secret from the API server into that directory after a random delay
//!   (independently per pod), with the kubelet's atomic `..data` symlink swap.
//! - Hot peers (rustls servers and clients) reload whenever their files change. Restart-only
//!   peers load their files at start and again only when their Deployment's pod template changes
//!   (a restart mounts the Secret as it is at that moment). One restart-only peer is
//!   `openssl s_server`, and one client is `openssl s_client`.
//! - Every peer's client dials every peer's server in a loop: the server requires a client
//!   certificate trusted by its bundle; the client checks the server's chain and name against its
//!   own bundle. Every failure is recorded with who, when and why.
//!
//! Run it on its own (and as a benchmark) with
//! `HARNESS_ROTATIONS=100 cargo test --test it cluster::harness -- --nocapture`.

use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{Cluster, Mounted, Volume, cluster, deployment, kubelet, random_up_to};
use crate::util::tls::{self, configs, s_server};

/// Longest kubelet sync delay of the stand-in (the real one is about a minute; the propagation
/// delay given to certgen scales with it).
const MAX_SYNC_DELAY_MS: u64 = 300;

/// The stand-in's longest sync delay (`HARNESS_MAX_SYNC_DELAY_MS` overrides it).
fn max_sync_delay() -> Duration {
    let ms = std::env::var("HARNESS_MAX_SYNC_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_SYNC_DELAY_MS);
    Duration::from_millis(ms)
}
/// Six times the stand-in's longest delay: on a loaded 2-core machine a stand-in's poll, sleep
/// and reload can take several times their nominal length, and the gate must cover what the
/// consumers actually take (a rotation now has two gates: trust→leaves and leaves→cleanup).
const PROPAGATION_DELAY: &str = "2s";

/// The propagation delay given to certgen (`HARNESS_PROPAGATION_DELAY` overrides it, e.g. `0s`
/// to watch staging without its gate fail).
fn propagation_delay() -> String {
    std::env::var("HARNESS_PROPAGATION_DELAY").unwrap_or_else(|_| PROPAGATION_DELAY.to_string())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reload {
    Hot,
    Restart,
}

struct PeerSpec {
    name: &'static str,
    secret: &'static str,
    reload: Reload,
    openssl: bool,
}

const PEERS: [PeerSpec; 4] = [
    PeerSpec {
        name: "gateway",
        secret: "envoy-gateway",
        reload: Reload::Hot,
        openssl: false,
    },
    PeerSpec {
        name: "proxy",
        secret: "envoy",
        reload: Reload::Hot,
        openssl: false,
    },
    PeerSpec {
        name: "ratelimit",
        secret: "envoy-rate-limit",
        reload: Reload::Restart,
        openssl: false,
    },
    PeerSpec {
        name: "ratelimit-openssl",
        secret: "envoy-rate-limit",
        reload: Reload::Restart,
        openssl: true,
    },
];

/// The harness's config: the three TLS Secrets with a SAN each (`NAME.NS.svc`, what the
/// peers dial), the restart-only consumer `envoy-ratelimit`.
pub(super) fn config_yaml(ns: &str) -> String {
    let secret = |name: &str| {
        format!(
            "  - name: {name}\n    type: tls\n    dnsNames: [\"{name}.{{namespace}}.svc\"]\n    usages: [server, client]\n    validity: 30d\n    renewBefore: 1d\n"
        )
    };
    format!(
        "name: envoy-gateway\nnamespace: {ns}\nca:\n  commonName: harness-ca\n  validity: 365d\n  renewBefore: 30d\nsecrets:\n{}{}{}consumers:\n  - name: ratelimit\n    deployment: envoy-ratelimit\n    reload: restart\n    mounts: [envoy-rate-limit]\n  - name: hot\n    reload: hot\n    mounts: [envoy-gateway, envoy]\n",
        secret("envoy-gateway"),
        secret("envoy"),
        secret("envoy-rate-limit")
    )
}

/// A peer's loaded identity: what its server presents and its client uses.
struct Loaded {
    mounted: Mounted,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

struct Peer {
    spec: &'static PeerSpec,
    /// The pod's Secret volume, which its kubelet stand-in keeps in step.
    volume: Arc<Volume>,
    /// Where clients dial it now (a restarted openssl pod comes up on a new port).
    port: AtomicU16,
    loaded: Mutex<Option<Arc<Loaded>>>,
    openssl: Mutex<Option<Child>>,
}

impl Peer {
    fn load(&self) {
        let Some(m) = self.volume.read() else {
            return;
        };
        if self.spec.openssl {
            // A rolling restart: the new pod starts and becomes ready, clients move to it, and
            // only then is the old one stopped (after in-flight handshakes finish: 3 s, since a
            // loaded 2-core machine took more than 1 s to finish one, which the client then saw
            // as a connection reset).
            let snap = self.volume.dir().join(format!(
                ".loaded-{}",
                certgen::pki::hex(&certgen::pki::random_bytes(4))
            ));
            m.write_to(&snap);
            let (child, port) = s_server(&snap, &["-verify_return_error", "-rev"]);
            self.port.store(port, Ordering::SeqCst);
            let old = self.openssl.lock().unwrap().replace(child);
            if let Some(mut old) = old {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs(3));
                    let _ = old.kill();
                    let _ = old.wait();
                });
            }
        }
        if let Some((server, client)) = configs(&m.ca, &m.crt, &m.key) {
            *self.loaded.lock().unwrap() = Some(Arc::new(Loaded {
                mounted: m,
                server,
                client,
            }));
        }
    }

    fn current(&self) -> Option<Arc<Loaded>> {
        self.loaded.lock().unwrap().clone()
    }
}

struct Failures {
    list: Mutex<Vec<String>>,
    handshakes: AtomicU64,
    started: Instant,
}

impl Failures {
    fn record(&self, from: &str, to: &str, why: String) {
        let t = self.started.elapsed().as_secs_f64();
        self.list
            .lock()
            .unwrap()
            .push(format!("t={t:.2}s {from} -> {to}: {why}"));
    }
}

async fn serve(peer: Arc<Peer>, listener: TcpListener, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let Ok(Ok((tcp, _))) =
            tokio::time::timeout(Duration::from_millis(200), listener.accept()).await
        else {
            continue;
        };
        let Some(loaded) = peer.current() else {
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut tls) = tokio_rustls::TlsAcceptor::from(loaded.server.clone())
                .accept(tcp)
                .await
            {
                let mut line = [0u8; 5];
                if tokio::time::timeout(Duration::from_secs(2), tls.read_exact(&mut line))
                    .await
                    .is_ok()
                {
                    let _ = tls.write_all(b"ok").await;
                }
                let _ = tls.shutdown().await;
            }
        });
    }
}

async fn handshake(from: &Peer, to: &Peer, ns: &str) -> Result<(), String> {
    let loaded = from.current().ok_or("client not loaded")?;
    let name = ServerName::try_from(format!("{}.{ns}.svc", to.spec.secret)).unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", to.port.load(Ordering::SeqCst)))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut tls = tokio_rustls::TlsConnector::from(loaded.client.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("{e}"))?;
    // One round trip: the server's verdict on our certificate arrives with its first bytes
    // (TLS 1.3). Rustls peers answer "ok", `openssl s_server -rev` the line reversed.
    tls.write_all(b"ping\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(2), tls.read_exact(&mut buf))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| format!("server rejected the client: {e}"))?;
    Ok(())
}

fn s_client(from: &Peer, to: &Peer, ns: &str) -> Result<(), String> {
    let loaded = from.current().ok_or("client not loaded")?;
    let snap = tempfile::tempdir().unwrap();
    loaded.mounted.write_to(snap.path());
    let host = format!("{}.{ns}.svc", to.spec.secret);
    tls::s_client(snap.path(), to.port.load(Ordering::SeqCst), &host)
}

/// Runs `rotations` rotations with `strategy` while the peers handshake; returns
/// (handshakes, failures).
async fn run_harness(c: &Cluster, strategy: &str, rotations: usize) -> (u64, Vec<String>) {
    let ns = c.namespace(&format!("harness-{strategy}")).await;
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("harness.yaml");
    std::fs::write(&cfg, config_yaml(&ns.name)).unwrap();
    let certgen = c
        .certgen(&ns.name)
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "-q",
            "--strategy",
            strategy,
            // The kubelet stand-in copies Secrets at its own pace and ignores pokes (a real
            // kubelet's answer to them is measured on the real node): the timer is under test.
            "--no-poke",
        ])
        .propagation_delay(&propagation_delay());
    // The restart-only peers' Deployment, rolled out by kwok.
    c.create_deployment(&ns.name, &deployment("envoy-ratelimit", 1, json!({})))
        .await;
    certgen.run_async().await.ok();
    let peers = Peers::start(c, &ns.name).await;
    for i in 0..rotations {
        let r = certgen
            .clone()
            .args(["--overwrite", "--wait", "--timeout", "120s"])
            .run_async()
            .await;
        assert_eq!(r.code, 0, "rotation {i}: {}", r.stderr);
        // Let the last changes reach every pod before the next rotation starts.
        tokio::time::sleep(max_sync_delay() + Duration::from_millis(100)).await;
    }
    peers.stop().await
}

/// The four peers handshaking with each other in namespace `ns` (whose TLS Secrets, named as
/// in [`config_yaml`], and Deployment `envoy-ratelimit` exist), until [`Peers::stop`]: hot peers
/// follow their Secrets through the kubelet stand-in, restart-only ones the Deployment's pod
/// template. Whatever writes the Secrets meanwhile (certgen, cert-manager) is under test.
pub(super) struct Peers {
    stop: Arc<AtomicBool>,
    /// Stops the servers, once every client stopped (a server gone under a client's dial
    /// would count as a failed handshake).
    servers_stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    peers: Vec<Arc<Peer>>,
    failures: Arc<Failures>,
    _pods: tempfile::TempDir,
}

impl Peers {
    /// Starts the peers and checks that they handshake without a failure before anything
    /// changes.
    pub(super) async fn start(c: &Cluster, ns: &str) -> Self {
        let deployments = c.deployments(ns);
        let pods = tempfile::tempdir().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let servers_stop = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(Failures {
            list: Mutex::new(vec![]),
            handshakes: AtomicU64::new(0),
            started: Instant::now(),
        });
        let mut peers = Vec::new();
        let secrets = c.secrets(ns);
        for spec in &PEERS {
            let volume = Arc::new(Volume::new(&pods.path().join(spec.name)));
            volume.mount(&secrets.get(spec.secret).await.unwrap());
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let peer = Arc::new(Peer {
                spec,
                volume,
                port: AtomicU16::new(port),
                loaded: Mutex::new(None),
                openssl: Mutex::new(None),
            });
            if spec.openssl {
                drop(listener); // s_server binds a port itself
            } else {
                tokio::spawn(serve(peer.clone(), listener, servers_stop.clone()));
            }
            peer.load();
            peers.push(peer);
        }

        let mut tasks = Vec::new();
        // Kubelet stand-ins: one per pod, each with its own random delay; hot peers reload
        // what it mounts.
        for peer in &peers {
            let reload = peer.clone();
            tasks.push(kubelet(
                secrets.clone(),
                peer.spec.secret,
                peer.volume.clone(),
                Duration::from_millis(25),
                max_sync_delay(),
                stop.clone(),
                move || {
                    if reload.spec.reload == Reload::Hot {
                        reload.load();
                    }
                },
            ));
        }
        // Restarts: restart-only peers reload (with a freshly mounted Secret) when the pod
        // template changes, after a random delay.
        {
            let (peers, stop, secrets, deployments) = (
                peers.clone(),
                stop.clone(),
                secrets.clone(),
                deployments.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let template = |d: &Deployment| {
                    serde_json::to_string(&d.spec.as_ref().unwrap().template).unwrap()
                };
                let mut last = template(&deployments.get("envoy-ratelimit").await.unwrap());
                while !stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                    let Ok(d) = deployments.get("envoy-ratelimit").await else {
                        continue;
                    };
                    let now = template(&d);
                    if now != last {
                        last = now;
                        tokio::time::sleep(random_up_to(max_sync_delay())).await;
                        for peer in peers.iter().filter(|p| p.spec.reload == Reload::Restart) {
                            peer.volume
                                .mount(&secrets.get(peer.spec.secret).await.unwrap());
                            let p = peer.clone();
                            tokio::task::spawn_blocking(move || p.load()).await.unwrap();
                        }
                    }
                }
            }));
        }
        // Handshakes: every client to every server, continuously.
        for from in &peers {
            for to in &peers {
                let (from, to, stop, failures, ns) = (
                    from.clone(),
                    to.clone(),
                    stop.clone(),
                    failures.clone(),
                    ns.to_string(),
                );
                tasks.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let result = if from.spec.openssl {
                            if !n.is_multiple_of(10) {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                            let (f, t, ns) = (from.clone(), to.clone(), ns.clone());
                            tokio::task::spawn_blocking(move || s_client(&f, &t, &ns))
                                .await
                                .unwrap()
                        } else {
                            handshake(&from, &to, &ns).await
                        };
                        failures.handshakes.fetch_add(1, Ordering::SeqCst);
                        if let Err(why) = result {
                            failures.record(from.spec.name, to.spec.name, why);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }));
            }
        }

        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            failures.list.lock().unwrap().is_empty(),
            "failures before any change: {:?}",
            failures.list.lock().unwrap()
        );
        Self {
            stop,
            servers_stop,
            tasks,
            peers,
            failures,
            _pods: pods,
        }
    }

    /// Handshakes so far, and the failed ones.
    pub(super) fn counts(&self) -> (u64, usize) {
        (
            self.failures.handshakes.load(Ordering::SeqCst),
            self.failures.list.lock().unwrap().len(),
        )
    }

    /// Waits until every peer has loaded what its Secret holds now (hot peers) and the
    /// stand-ins' longest delay passed.
    pub(super) async fn settle(&self) {
        tokio::time::sleep(max_sync_delay() + Duration::from_millis(300)).await;
    }

    /// Stops every peer: (handshakes, failures).
    pub(super) async fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = t.await;
        }
        self.servers_stop.store(true, Ordering::SeqCst);
        for peer in &self.peers {
            if let Some(mut child) = peer.openssl.lock().unwrap().take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let list = self.failures.list.lock().unwrap().clone();
        (self.failures.handshakes.load(Ordering::SeqCst), list)
    }
}

fn rotations(default: usize) -> usize {
    std::env::var("HARNESS_ROTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn staged_rotations_fail_no_handshake() {
    let Some(c) = cluster().await else { return };
    let n = rotations(30);
    let started = Instant::now();
    let (handshakes, failures) = run_harness(&c, "staged", n).await;
    eprintln!(
        "harness staged: {n} rotations, {handshakes} handshakes, {} failed, {:.0} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(handshakes > 1000, "the peers handshook continuously");
    assert!(
        failures.is_empty(),
        "{} failed handshakes, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_write_rotations_fail_handshakes_in_the_same_harness() {
    let Some(c) = cluster().await else { return };
    let n = rotations(10).min(10);
    let (handshakes, failures) = run_harness(&c, "immediate", n).await;
    eprintln!(
        "harness immediate: {n} rotations, {handshakes} handshakes, {} failed",
        failures.len()
    );
    if let Some(first) = failures.first() {
        eprintln!("  e.g. {first}");
    }
    assert!(
        !failures.is_empty(),
        "the harness must see the failures staging prevents"
    );
}
