//! The rotation harness: real mutual-TLS peers that handshake with each other continuously while
//! certgen rotates their certificates, counting every failed handshake.
//!
//! - Each peer is a "pod" with its own directory. A kubelet stand-in copies the peer's Secret
//!   from the API server into that directory after a random delay (independently per pod), with
//!   the kubelet's atomic `..data` symlink swap.
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{Cluster, cluster};
use crate::util::{Run, certgen};

/// Longest kubelet sync delay of the stand-in (the real one is about a minute; the propagation
/// delay given to certgen scales with it).
const MAX_SYNC_DELAY_MS: u64 = 300;

/// The stand-in's longest sync delay (`HARNESS_MAX_SYNC_DELAY_MS` overrides it).
fn max_sync_delay_ms() -> u64 {
    std::env::var("HARNESS_MAX_SYNC_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_SYNC_DELAY_MS)
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

fn config_yaml(ns: &str) -> String {
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

/// The files of one version of a pod's mounted Secret, read consistently through `..data`.
#[derive(Clone, PartialEq, Eq)]
struct Mounted {
    ca: Vec<u8>,
    crt: Vec<u8>,
    key: Vec<u8>,
}

fn read_mounted(dir: &Path) -> Option<Mounted> {
    let version = std::fs::read_link(dir.join("..data")).ok()?;
    let v = dir.join(version);
    Some(Mounted {
        ca: std::fs::read(v.join("ca.crt")).ok()?,
        crt: std::fs::read(v.join("tls.crt")).ok()?,
        key: std::fs::read(v.join("tls.key")).ok()?,
    })
}

/// Writes files the way the kubelet does: a new version directory, then one rename of `..data`.
fn write_mounted(dir: &Path, data: &BTreeMap<String, Vec<u8>>) {
    let version = format!("..{}", certgen::pki::hex(&certgen::pki::random_bytes(6)));
    let v = dir.join(&version);
    std::fs::create_dir_all(&v).unwrap();
    for (k, bytes) in data {
        std::fs::write(v.join(k), bytes).unwrap();
    }
    let tmp = dir.join(format!(
        "..data_tmp{}",
        certgen::pki::hex(&certgen::pki::random_bytes(4))
    ));
    std::os::unix::fs::symlink(&version, &tmp).unwrap();
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for k in ["ca.crt", "tls.crt", "tls.key"] {
        let link = dir.join(k);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(k), &link).unwrap();
        }
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
}

fn random_ms(max: u64) -> u64 {
    let b = certgen::pki::random_bytes(8);
    u64::from_le_bytes(b.try_into().unwrap()) % (max + 1)
}

fn rustls_configs(m: &Mounted) -> Option<(Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>)> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&m.crt)
        .collect::<Result<_, _>>()
        .ok()?;
    let key = PrivateKeyDer::from_pem_slice(&m.key).ok()?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&m.ca) {
        roots.add(ca.ok()?).ok()?;
    }
    let roots = Arc::new(roots);
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .ok()?;
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .ok()?;
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .ok()?;
    Some((Arc::new(server), Arc::new(client)))
}

/// A peer's loaded identity: what its server presents and its client uses.
struct Loaded {
    mounted: Mounted,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

struct Peer {
    spec: &'static PeerSpec,
    dir: PathBuf,
    /// Where clients dial it now (a restarted openssl pod comes up on a new port).
    port: AtomicU16,
    loaded: Mutex<Option<Arc<Loaded>>>,
    openssl: Mutex<Option<Child>>,
    /// The resourceVersion of what the pod directory holds: like the kubelet, the stand-in only
    /// ever moves a mount forward, never back to data it read before a restart's fresh mount.
    mounted_rv: Mutex<u64>,
}

impl Peer {
    /// Writes `data` (read at `rv`) unless the directory already holds something newer.
    fn mount(&self, rv: u64, data: &BTreeMap<String, Vec<u8>>) -> bool {
        let mut current = self.mounted_rv.lock().unwrap();
        if rv <= *current {
            return false;
        }
        write_mounted(&self.dir, data);
        *current = rv;
        true
    }
}

fn rv(s: &k8s_openapi::api::core::v1::Secret) -> u64 {
    s.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Peer {
    fn load(&self) {
        let Some(m) = read_mounted(&self.dir) else {
            return;
        };
        if self.spec.openssl {
            // A rolling restart: the new pod starts and becomes ready, clients move to it, and
            // only then is the old one stopped (after in-flight handshakes finish).
            let snap = self.dir.join(format!(
                ".loaded-{}",
                certgen::pki::hex(&certgen::pki::random_bytes(4))
            ));
            std::fs::create_dir_all(&snap).unwrap();
            for (f, b) in [("ca.crt", &m.ca), ("tls.crt", &m.crt), ("tls.key", &m.key)] {
                std::fs::write(snap.join(f), b).unwrap();
            }
            let p = |f: &str| snap.join(f).to_str().unwrap().to_string();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new("openssl")
                .args([
                    "s_server",
                    "-accept",
                    &format!("127.0.0.1:{port}"),
                    "-cert",
                    &p("tls.crt"),
                    "-key",
                    &p("tls.key"),
                    "-CAfile",
                    &p("ca.crt"),
                    "-Verify",
                    "1",
                    "-verify_return_error",
                    "-rev",
                    "-quiet",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("openssl s_server");
            for _ in 0..200 {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            self.port.store(port, Ordering::SeqCst);
            let old = self.openssl.lock().unwrap().replace(child);
            if let Some(mut old) = old {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs(1));
                    let _ = old.kill();
                    let _ = old.wait();
                });
            }
        }
        if let Some((server, client)) = rustls_configs(&m) {
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
    for (f, b) in [
        ("ca.crt", &loaded.mounted.ca),
        ("tls.crt", &loaded.mounted.crt),
        ("tls.key", &loaded.mounted.key),
    ] {
        std::fs::write(snap.path().join(f), b).unwrap();
    }
    let p = |f: &str| snap.path().join(f).to_str().unwrap().to_string();
    let host = format!("{}.{ns}.svc", to.spec.secret);
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{}", to.port.load(Ordering::SeqCst)),
            "-servername",
            &host,
            "-verify_hostname",
            &host,
            "-cert",
            &p("tls.crt"),
            "-key",
            &p("tls.key"),
            "-CAfile",
            &p("ca.crt"),
            "-verify_return_error",
            "-brief",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() && !text.contains("alert") {
        Ok(())
    } else {
        Err(format!(
            "openssl s_client: {}",
            text.lines().last().unwrap_or("")
        ))
    }
}

/// Runs `rotations` rotations with `strategy` while the peers handshake; returns
/// (handshakes, failures).
async fn run_harness(c: &Cluster, strategy: &str, rotations: usize) -> (u64, Vec<String>) {
    let ns = c.namespace(&format!("harness-{strategy}")).await;
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("harness.yaml");
    std::fs::write(&cfg, config_yaml(&ns.name)).unwrap();
    let delay = propagation_delay();
    let certgen_cmd = |extra: &[&str]| {
        let mut cmd = certgen();
        cmd.args([
            "--kubeconfig",
            c.kubeconfig.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "-q",
            "--propagation-delay",
            &delay,
            "--strategy",
            strategy,
        ]);
        cmd.args(extra);
        cmd
    };
    // The restart-only peers' Deployment, rolled out by kwok.
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &ns.name);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "envoy-ratelimit"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "rl"}},
                 "template": {"metadata": {"labels": {"app": "rl"}},
                              "spec": {"containers": [{"name": "rl", "image": "fake.invalid/rl:1"}], "tolerations": [{"operator": "Exists"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let out = tokio::task::spawn_blocking({
        let mut cmd = certgen_cmd(&[]);
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    Run::from(out).ok();

    let pods = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Failures {
        list: Mutex::new(vec![]),
        handshakes: AtomicU64::new(0),
        started: Instant::now(),
    });
    let mut peers = Vec::new();
    let secrets = c.secrets(&ns.name);
    for spec in &PEERS {
        let dir = pods.path().join(spec.name);
        std::fs::create_dir_all(&dir).unwrap();
        let s = secrets.get(spec.secret).await.unwrap();
        let first_rv = rv(&s);
        let data: BTreeMap<String, Vec<u8>> =
            s.data.unwrap().into_iter().map(|(k, v)| (k, v.0)).collect();
        write_mounted(&dir, &data);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let peer = Arc::new(Peer {
            spec,
            dir,
            port: AtomicU16::new(port),
            loaded: Mutex::new(None),
            openssl: Mutex::new(None),
            mounted_rv: Mutex::new(first_rv),
        });
        if spec.openssl {
            drop(listener); // s_server binds the port itself
        } else {
            tokio::spawn(serve(peer.clone(), listener, stop.clone()));
        }
        peer.load();
        peers.push(peer);
    }

    let mut tasks = Vec::new();
    // Kubelet stand-ins: one per pod, each with its own random delay.
    for peer in &peers {
        let (peer, stop, secrets) = (peer.clone(), stop.clone(), secrets.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = read_mounted(&peer.dir);
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(25)).await;
                let Ok(s) = secrets.get(peer.spec.secret).await else {
                    continue;
                };
                let read_rv = rv(&s);
                let data: BTreeMap<String, Vec<u8>> = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                let m = Mounted {
                    ca: data["ca.crt"].clone(),
                    crt: data["tls.crt"].clone(),
                    key: data["tls.key"].clone(),
                };
                if last.as_ref() != Some(&m) {
                    tokio::time::sleep(Duration::from_millis(random_ms(max_sync_delay_ms()))).await;
                    let moved = peer.mount(read_rv, &data);
                    last = Some(m);
                    if moved && peer.spec.reload == Reload::Hot {
                        peer.load();
                    }
                }
            }
        }));
    }
    // Restarts: restart-only peers reload (with a freshly mounted Secret) when the pod template
    // changes, after a random delay.
    {
        let (peers, stop, secrets, deployments) = (
            peers.clone(),
            stop.clone(),
            secrets.clone(),
            deployments.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let template =
                |d: &Deployment| serde_json::to_string(&d.spec.as_ref().unwrap().template).unwrap();
            let mut last = template(&deployments.get("envoy-ratelimit").await.unwrap());
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(25)).await;
                let Ok(d) = deployments.get("envoy-ratelimit").await else {
                    continue;
                };
                let now = template(&d);
                if now != last {
                    last = now;
                    tokio::time::sleep(Duration::from_millis(random_ms(max_sync_delay_ms()))).await;
                    for peer in peers.iter().filter(|p| p.spec.reload == Reload::Restart) {
                        let s = secrets.get(peer.spec.secret).await.unwrap();
                        let read_rv = rv(&s);
                        let data: BTreeMap<String, Vec<u8>> =
                            s.data.unwrap().into_iter().map(|(k, v)| (k, v.0)).collect();
                        peer.mount(read_rv, &data);
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
                ns.name.clone(),
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
        "failures before any rotation: {:?}",
        failures.list.lock().unwrap()
    );
    for i in 0..rotations {
        let out = tokio::task::spawn_blocking({
            let mut cmd = certgen_cmd(&["--overwrite", "--wait", "--timeout", "120s"]);
            move || cmd.output().unwrap()
        })
        .await
        .unwrap();
        let r = Run::from(out);
        assert_eq!(r.code, 0, "rotation {i}: {}", r.stderr);
        // Let the last changes reach every pod before the next rotation starts.
        tokio::time::sleep(Duration::from_millis(max_sync_delay_ms() + 100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        let _ = t.await;
    }
    for peer in &peers {
        if let Some(mut child) = peer.openssl.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let list = failures.list.lock().unwrap().clone();
    (failures.handshakes.load(Ordering::SeqCst), list)
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
