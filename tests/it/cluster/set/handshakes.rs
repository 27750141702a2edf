//! The cross-cluster handshake harness: real mutual-TLS peers on 127.0.0.1, each fed from the
//! Secrets of one member of the set, handshaking with peers fed from the other members while a
//! set rotation runs; handshakes and failures are counted per phase.
//!
//! It is `cluster::harness` across clusters: each peer is a "pod" of one member, with its own
//! directory that a kubelet stand-in (`cluster::kubelet`) keeps in step with that member's Secret
//! after a random delay (the kubelet's atomic `..data` swap). Hot peers reload what it mounts;
//! restart-only peers reload (with the Secret as it is then) when their member's
//! `envoy-ratelimit` Deployment's pod template changes. Every client dials every server of
//! *another* member (a client fed from m0's Secrets to a server fed from m1's, and so on): the
//! server requires a client certificate its bundle trusts, the client checks the server's chain
//! and name (`NAME.NS.svc`, the harness config's SAN) against its own bundle.
//!
//! A paused member's stand-ins stall like a kubelet cut off from its API server: its peers keep
//! what they hold and go on handshaking.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::super::{Volume, kubelet, random_up_to};
use super::Set;
use crate::util::tls::configs;

/// The stand-ins' longest sync delay; the propagation delay the set tests give certgen is ten
/// times this or more.
pub const MAX_SYNC_DELAY: Duration = Duration::from_millis(300);

/// How often each client dials each of its servers.
const DIAL_EVERY: Duration = Duration::from_millis(150);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reload {
    Hot,
    Restart,
}

/// One peer: which member's Secret feeds it, and how it reloads.
#[derive(Clone, Copy, Debug)]
pub struct PeerSpec {
    pub member: &'static str,
    pub secret: &'static str,
    pub reload: Reload,
}

/// Two peers per member, every TLS Secret of the profile served from two members, restart-only
/// peers in two members.
pub const PEERS: [PeerSpec; 6] = [
    PeerSpec {
        member: "m0",
        secret: "envoy-gateway",
        reload: Reload::Hot,
    },
    PeerSpec {
        member: "m0",
        secret: "envoy",
        reload: Reload::Hot,
    },
    PeerSpec {
        member: "m1",
        secret: "envoy-gateway",
        reload: Reload::Hot,
    },
    PeerSpec {
        member: "m1",
        secret: "envoy-rate-limit",
        reload: Reload::Restart,
    },
    PeerSpec {
        member: "m2",
        secret: "envoy",
        reload: Reload::Hot,
    },
    PeerSpec {
        member: "m2",
        secret: "envoy-rate-limit",
        reload: Reload::Restart,
    },
];

impl PeerSpec {
    fn name(&self) -> String {
        format!("{}/{}", self.member, self.secret)
    }
}

struct Loaded {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

struct Peer {
    spec: PeerSpec,
    volume: Arc<Volume>,
    port: AtomicU16,
    loaded: Mutex<Option<Arc<Loaded>>>,
}

impl Peer {
    fn load(&self) {
        let Some(m) = self.volume.read() else {
            return;
        };
        if let Some((server, client)) = configs(&m.ca, &m.crt, &m.key) {
            *self.loaded.lock().unwrap() = Some(Arc::new(Loaded { server, client }));
        }
    }

    fn current(&self) -> Option<Arc<Loaded>> {
        self.loaded.lock().unwrap().clone()
    }
}

/// Handshakes and failures in one phase.
#[derive(Clone, Default, Debug)]
pub struct Count {
    pub handshakes: u64,
    pub failures: Vec<String>,
}

struct Tally {
    phase: Mutex<String>,
    by_phase: Mutex<BTreeMap<String, Count>>,
    /// Phase names in the order they began.
    order: Mutex<Vec<String>>,
    started: Instant,
}

impl Tally {
    fn record(&self, from: &str, to: &str, result: Result<(), String>) {
        let phase = self.phase.lock().unwrap().clone();
        let mut by = self.by_phase.lock().unwrap();
        let c = by.entry(phase).or_default();
        c.handshakes += 1;
        if let Err(why) = result {
            let t = self.started.elapsed().as_secs_f64();
            c.failures.push(format!("t={t:.2}s {from} -> {to}: {why}"));
        }
    }
}

/// The peers of [`PEERS`] handshaking across members until [`CrossPeers::stop`].
pub struct CrossPeers {
    stop: Arc<AtomicBool>,
    servers_stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    tally: Arc<Tally>,
    _pods: tempfile::TempDir,
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
    tls.write_all(b"ping\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(3), tls.read_exact(&mut buf))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| format!("server rejected the client: {e}"))?;
    Ok(())
}

impl CrossPeers {
    /// Starts the peers in namespace `ns` of every member (whose TLS Secrets, named as in
    /// `harness::config_yaml`, and Deployment `envoy-ratelimit` exist), in phase `phase`, and
    /// checks that they handshake without a failure before anything changes.
    pub async fn start(set: &Set, ns: &str, phase: &str) -> Self {
        let pods = tempfile::tempdir().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let servers_stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally {
            phase: Mutex::new(phase.to_string()),
            by_phase: Mutex::default(),
            order: Mutex::new(vec![phase.to_string()]),
            started: Instant::now(),
        });
        let mut peers = Vec::new();
        let mut tasks = Vec::new();
        let mut servers = Vec::new();
        for (i, spec) in PEERS.iter().enumerate() {
            let secrets = set.member(spec.member).secrets(ns);
            let volume = Arc::new(Volume::new(&pods.path().join(i.to_string())));
            volume.mount(&secrets.get(spec.secret).await.unwrap());
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let peer = Arc::new(Peer {
                spec: *spec,
                volume,
                port: AtomicU16::new(listener.local_addr().unwrap().port()),
                loaded: Mutex::new(None),
            });
            peer.load();
            servers.push(tokio::spawn(serve(
                peer.clone(),
                listener,
                servers_stop.clone(),
            )));
            // The kubelet stand-in of this pod, in its own member.
            let reload = peer.clone();
            tasks.push(kubelet(
                secrets,
                spec.secret,
                peer.volume.clone(),
                Duration::from_millis(50),
                MAX_SYNC_DELAY,
                stop.clone(),
                move || {
                    if reload.spec.reload == Reload::Hot {
                        reload.load();
                    }
                },
            ));
            peers.push(peer);
        }
        // Restart-only peers reload when their member's Deployment's pod template changes.
        for member in ["m0", "m1", "m2"] {
            let restart: Vec<Arc<Peer>> = peers
                .iter()
                .filter(|p| p.spec.member == member && p.spec.reload == Reload::Restart)
                .cloned()
                .collect();
            if restart.is_empty() {
                continue;
            }
            let deployments: kube::Api<Deployment> =
                kube::Api::namespaced(set.member(member).client.clone(), ns);
            let secrets = set.member(member).secrets(ns);
            let stop = stop.clone();
            let template =
                |d: &Deployment| serde_json::to_string(&d.spec.as_ref().unwrap().template).unwrap();
            let mut last = template(&deployments.get("envoy-ratelimit").await.unwrap());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let Ok(d) = deployments.get("envoy-ratelimit").await else {
                        continue;
                    };
                    let now = template(&d);
                    if now != last {
                        last = now;
                        tokio::time::sleep(random_up_to(MAX_SYNC_DELAY)).await;
                        for peer in &restart {
                            if let Ok(s) = secrets.get(peer.spec.secret).await {
                                peer.volume.mount(&s);
                            }
                            peer.load();
                        }
                    }
                }
            }));
        }
        // Every client to every server of another member.
        for from in &peers {
            for to in peers.iter().filter(|p| p.spec.member != from.spec.member) {
                let (from, to, stop, tally, ns) = (
                    from.clone(),
                    to.clone(),
                    stop.clone(),
                    tally.clone(),
                    ns.to_string(),
                );
                tasks.push(tokio::spawn(async move {
                    // Spread the dials over the interval.
                    tokio::time::sleep(random_up_to(DIAL_EVERY)).await;
                    while !stop.load(Ordering::SeqCst) {
                        let result = handshake(&from, &to, &ns).await;
                        tally.record(&from.spec.name(), &to.spec.name(), result);
                        tokio::time::sleep(DIAL_EVERY).await;
                    }
                }));
            }
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let peers = Self {
            stop,
            servers_stop,
            tasks,
            servers,
            tally,
            _pods: pods,
        };
        let before = peers.counts();
        let n: u64 = before.values().map(|c| c.handshakes).sum();
        let failed: Vec<_> = before.values().flat_map(|c| c.failures.clone()).collect();
        assert!(n > 0, "the peers handshook");
        assert!(failed.is_empty(), "failures before any change: {failed:?}");
        peers
    }

    /// From now on, handshakes count in phase `phase`.
    pub fn phase(&self, phase: &str) {
        let mut current = self.tally.phase.lock().unwrap();
        if *current != phase {
            *current = phase.to_string();
            self.tally.order.lock().unwrap().push(phase.to_string());
        }
    }

    /// Handshakes and failures so far, by phase.
    pub fn counts(&self) -> BTreeMap<String, Count> {
        self.tally.by_phase.lock().unwrap().clone()
    }

    /// Stops every peer: handshakes and failures by phase, in the order the phases began.
    pub async fn stop(self) -> Vec<(String, Count)> {
        self.stop.store(true, Ordering::SeqCst);
        // Clients and stand-ins first (a server gone under a client's dial would count as a
        // failure), then the servers. A stand-in waiting on a paused member is not waited for.
        for t in self.tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        self.servers_stop.store(true, Ordering::SeqCst);
        for s in self.servers {
            let _ = s.await;
        }
        let by = self.tally.by_phase.lock().unwrap().clone();
        let order = self.tally.order.lock().unwrap().clone();
        let mut out: Vec<(String, Count)> = Vec::new();
        for p in order {
            if out.iter().all(|(q, _)| *q != p) {
                out.push((p.clone(), by.get(&p).cloned().unwrap_or_default()));
            }
        }
        out
    }
}

/// Phases by handshakes and failures, one line each.
pub fn render(phases: &[(String, Count)]) -> String {
    phases
        .iter()
        .map(|(p, c)| {
            format!(
                "  {p:<10} {:>6} handshakes, {:>3} failed{}",
                c.handshakes,
                c.failures.len(),
                c.failures
                    .first()
                    .map(|f| format!(" (first: {f})"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The harness itself, without certgen's set support: m0's Secrets copied into m1 and m2 (one
/// CA everywhere) handshake across members without a failure and pass the cross-member check;
/// then m1 alone rotating in one write to a CA of its own (a forked CA) makes cross-cluster
/// handshakes fail, counted in that phase, and the cross-member check sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cross_cluster_harness_sees_a_forked_ca_fail() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{ObjectMeta, PostParams};

    let Some(set) = Set::get().await else { return };
    let ns = set.namespace("set-harness").await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("harness.yaml");
    std::fs::write(&config, super::super::harness::config_yaml(&ns.name)).unwrap();
    let config = config.to_str().unwrap();
    for m in &set.members {
        kube::Api::<Deployment>::namespaced(m.client.clone(), &ns.name)
            .create(
                &PostParams::default(),
                &super::super::deployment("envoy-ratelimit", 1, serde_json::json!({})),
            )
            .await
            .unwrap();
    }
    let single = |context: &str| {
        set.certgen_in(&ns.name, &[context])
            .args(["--config", config, "--no-poke", "-q"])
    };
    single("m0").run_async().await.ok();
    for name in [
        "envoy-gateway-ca",
        "envoy-gateway",
        "envoy",
        "envoy-rate-limit",
    ] {
        let s = set.member("m0").secrets(&ns.name).get(name).await.unwrap();
        let copy = Secret {
            metadata: ObjectMeta {
                name: s.metadata.name.clone(),
                labels: s.metadata.labels.clone(),
                annotations: s.metadata.annotations.clone(),
                ..Default::default()
            },
            type_: s.type_.clone(),
            data: s.data.clone(),
            ..Default::default()
        };
        for m in ["m1", "m2"] {
            set.member(m)
                .secrets(&ns.name)
                .create(&PostParams::default(), &copy)
                .await
                .unwrap();
        }
    }
    let failures = super::check_across(&set.snapshots(&ns.name).await);
    assert!(failures.is_empty(), "one CA everywhere: {failures:?}");

    let recorder = super::Recorder::start(&set, &ns.name).await;
    let peers = CrossPeers::start(&set, &ns.name, "one CA").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    peers.phase("m1 forked");
    let r = single("m1")
        .args(["--overwrite", "--strategy", "immediate"])
        .run_async()
        .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    tokio::time::sleep(MAX_SYNC_DELAY * 3 + Duration::from_secs(2)).await;
    let phases = peers.stop().await;
    eprintln!("cross-cluster harness:\n{}", render(&phases));
    let (before, forked) = (&phases[0].1, &phases[1].1);
    assert!(before.handshakes > 50, "{before:?}");
    assert!(before.failures.is_empty(), "{:?}", before.failures);
    assert!(
        !forked.failures.is_empty(),
        "a forked CA fails cross-cluster handshakes"
    );
    assert!(
        forked.failures.iter().all(|f| f.contains("m1/")),
        "only pairs with m1 fail: {:?}",
        forked.failures
    );
    let failures = super::check_across(&set.snapshots(&ns.name).await);
    assert!(
        failures.iter().any(|f| f.contains("m1")),
        "the cross-member check sees the fork: {failures:?}"
    );

    // The watches saw every member's Secrets, then m1's writes: the states before the fork
    // pass the cross-member check, the fork is seen at m1's first write, and m0 and m2 never
    // held m1's new CA.
    let history = super::states(&recorder.stop());
    let listed = 3 * 4;
    assert!(history.len() > listed, "{} versions seen", history.len());
    for (s, snaps) in &history[..listed] {
        let f = super::check_across(snaps);
        assert!(
            f.is_empty(),
            "before the fork, at {}'s {}: {f:?}",
            s.member,
            s.secret
        );
    }
    let forked_at = history
        .iter()
        .position(|(_, snaps)| !super::check_across(snaps).is_empty())
        .expect("the watches saw the fork");
    assert_eq!(history[forked_at].0.member, "m1");
    let m1_ca = super::active_cas(&history.last().unwrap().1)["m1"]
        .clone()
        .unwrap();
    assert!(
        !history
            .iter()
            .any(|(_, snaps)| super::every_bundle_holds(snaps, &m1_ca, 3)),
        "m0 and m2 never held m1's CA"
    );
}
