//! The probe, without a cluster. Its verdict: to open the trust→leaves gate early it must prove
//! a server verified certgen's client certificate, never a timeout taken for acceptance, never a
//! server that accepts any certificate (real rustls servers on 127.0.0.1, one per kind of
//! behaviour). Through the binary in local mode: static addresses are probed, and a rotation's
//! gate opens early only when every hot consumer already trusts the new CA. Probes of Services
//! and their EndpointSlices on the real control plane are in `cluster::probe`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use certgen::pki::{CaKey, CaSpec, KeyAlgorithm, LeafSpec, Usages, issue_ca, issue_leaf};
use certgen::probe::{ClientIdentity, ClientTrust, accepts_client, client_trust};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::OffsetDateTime;
use tokio::net::TcpListener;

use crate::util::tls::{AcceptsAnything, tls_server};
use crate::util::{Run, certgen, profile, run_async, run_local, tempdir, write};

fn ca(name: &str) -> CaKey {
    let spec = CaSpec {
        common_name: name.into(),
        validity: Duration::from_secs(86_400),
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    issue_ca(&spec, OffsetDateTime::now_utc()).unwrap().0
}

fn server_identity(ca: &CaKey) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let spec = LeafSpec {
        common_name: "peer".into(),
        dns_names: vec!["peer.test".into()],
        ip_addresses: vec![],
        usages: Usages {
            server: true,
            client: true,
        },
        validity: Duration::from_secs(3600),
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    let issued = issue_leaf(&spec, ca, OffsetDateTime::now_utc()).unwrap();
    (
        vec![CertificateDer::from(issued.cert.der().to_vec())],
        PrivateKeyDer::from_pem_slice(issued.key.expose().as_bytes()).unwrap(),
    )
}

#[derive(Clone, Copy)]
enum Kind {
    /// Requires a client certificate from the trusted CA (TLS 1.3, tickets on).
    Verifies,
    /// The same, TLS 1.2 only.
    VerifiesTls12,
    /// Verifies, but sends no TLS 1.3 session ticket: no proof of its verdict.
    NoTickets,
    /// Requests a certificate but accepts anything.
    AcceptsAnything,
}

async fn server(
    kind: Kind,
    identity: &CaKey,
    trusts: &CaKey,
) -> (String, tokio::task::JoinHandle<()>) {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(trusts.cert.der().to_vec()))
        .unwrap();
    let verifier: Arc<dyn rustls::server::danger::ClientCertVerifier> = match kind {
        Kind::AcceptsAnything => Arc::new(AcceptsAnything(provider.clone())),
        _ => rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap(),
    };
    let versions: &[&rustls::SupportedProtocolVersion] = match kind {
        Kind::VerifiesTls12 => &[&rustls::version::TLS12],
        _ => rustls::DEFAULT_VERSIONS,
    };
    let (chain, key) = server_identity(identity);
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    if let Kind::NoTickets = kind {
        config.send_tls13_tickets = 0;
    }
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let config = config.clone();
            tokio::spawn(async move {
                // Holds the connection open without writing: silence must never count as yes.
                if let Ok(tls) = tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    drop(tls);
                }
            });
        }
    });
    (addr, task)
}

/// A `kind` server presenting a leaf of the active CA and trusting the pending CA or not,
/// and a client certificate from the pending CA: what a trust probe dials.
struct Scene {
    addr: String,
    task: tokio::task::JoinHandle<()>,
    roots: [certgen::pki::Cert; 1],
    client: ClientIdentity,
}

async fn scene(kind: Kind, trusts_pending: bool) -> Scene {
    let active = ca("active");
    let pending = ca("pending");
    let trusted = if trusts_pending { &pending } else { &active };
    let (addr, task) = server(kind, &active, trusted).await;
    Scene {
        addr,
        task,
        roots: [active.cert.clone()],
        client: ClientIdentity::issue(&pending, OffsetDateTime::now_utc()).unwrap(),
    }
}

async fn verdict(kind: Kind, trusts_pending: bool) -> bool {
    let s = scene(kind, trusts_pending).await;
    let until = tokio::time::Instant::now() + Duration::from_millis(500);
    let ok = accepts_client(&s.addr, "peer.test", &s.roots, &s.client, until).await;
    s.task.abort();
    ok
}

/// What one look at a `kind` server shows of its client verification (`client_trust`, the
/// per-pod probe's own call, which says nothing itself).
async fn trust(kind: Kind, trusts_pending: bool) -> ClientTrust {
    let s = scene(kind, trusts_pending).await;
    let now = tokio::time::Instant::now();
    let seen = client_trust(&s.addr, "peer.test", &s.roots, &s.client, now).await;
    s.task.abort();
    seen
}

#[tokio::test]
async fn a_server_that_verifies_nothing_is_told_apart_from_one_not_there_yet() {
    // The per-pod probe stops probing the first (and says so once per gate); the second is
    // probed again next round.
    assert_eq!(trust(Kind::Verifies, true).await, ClientTrust::Proven);
    assert_eq!(trust(Kind::Verifies, false).await, ClientTrust::NotShown);
    assert_eq!(
        trust(Kind::AcceptsAnything, true).await,
        ClientTrust::VerifiesNothing
    );
    assert_eq!(
        trust(Kind::AcceptsAnything, false).await,
        ClientTrust::VerifiesNothing
    );
}

#[tokio::test]
async fn a_server_that_verifies_and_trusts_the_pending_ca_is_proof() {
    assert!(verdict(Kind::Verifies, true).await);
    assert!(verdict(Kind::VerifiesTls12, true).await);
}

#[tokio::test]
async fn a_server_that_does_not_trust_the_pending_ca_is_not() {
    assert!(!verdict(Kind::Verifies, false).await);
    assert!(!verdict(Kind::VerifiesTls12, false).await);
}

#[tokio::test]
async fn silence_and_servers_that_accept_anything_prove_nothing() {
    // Was: a 100 ms read timeout counted as acceptance, and a server that asks for a client
    // certificate but verifies none "accepted" the pending CA.
    assert!(!verdict(Kind::NoTickets, true).await);
    assert!(!verdict(Kind::AcceptsAnything, true).await);
    assert!(!verdict(Kind::AcceptsAnything, false).await);
}

/// A config whose only consumer, a hot one, is probed at 127.0.0.1:`port`.
fn probed_config(dir: &Path, port: u16) -> PathBuf {
    let profile = profile();
    let consumers = format!(
        "consumers:\n  - name: eg\n    reload: hot\n    mounts: [envoy-gateway]\n    probe:\n      port: {port}\n      addresses: [\"127.0.0.1:{port}\"]\n      serverName: envoy-gateway.envoy-gateway-system.svc\n"
    );
    write(
        dir,
        "probed.yaml",
        &(profile[..profile.find("consumers:").unwrap()].to_string() + &consumers),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn local_mode_probes_static_addresses() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    run_local(&dir, &[]).ok();
    let (port, server) = tls_server(dir.join("envoy-gateway"), true).await;
    let cfg = probed_config(tmp.path(), port);
    let probe = |extra: &[&str]| {
        let mut cmd = certgen();
        cmd.args(["--config", cfg.to_str().unwrap()])
            .args([
                "--local",
                dir.to_str().unwrap(),
                "--probe",
                "--output",
                "json",
            ])
            .args(extra);
        run_async(cmd)
    };
    let ok = probe(&[]).await.ok().json();
    assert_eq!(ok["consumers"][0]["probes"][0]["ok"], true, "{ok}");
    server.abort();
    // Nothing listens any more: the probe fails within the timeout and names the address.
    let failed = probe(&["--timeout", "2s"]).await;
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    assert!(
        failed.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        failed.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_open_the_trust_gate_early_only_when_every_hot_consumer_has_the_new_ca() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    run_local(&dir, &[]).ok();
    let rotate = |cfg: PathBuf, dir: PathBuf, timeout: &'static str| {
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let r = Run::of(
                certgen()
                    .args(["--config", cfg.to_str().unwrap()])
                    .args(["--local", dir.to_str().unwrap(), "--overwrite"])
                    .args(["--propagation-delay", "60s", "--timeout", timeout, "-q"]),
            );
            (r, started.elapsed())
        })
    };

    // A server that reloads its files trusts the pending CA as soon as the bundle is written.
    let (port, hot) = tls_server(dir.join("envoy-gateway"), true).await;
    let (r, took) = rotate(probed_config(tmp.path(), port), dir.clone(), "50s")
        .await
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        took < Duration::from_secs(30),
        "the probe opened the 60 s gate early ({took:?})"
    );
    hot.abort();

    // One that never reloads does not: the gate stays shut until the delay, past --timeout.
    // (A fresh installation: the one above just wrote leaves, which gates its next rotation.)
    let dir = tmp.path().join("certs2");
    run_local(&dir, &[]).ok();
    let (port, stale) = tls_server(dir.join("envoy-gateway"), false).await;
    let (r, _) = rotate(probed_config(tmp.path(), port), dir.clone(), "4s")
        .await
        .unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("every bundle trusts"), "{}", r.stderr);
    stale.abort();
}
