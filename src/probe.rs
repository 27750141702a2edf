//! TLS probes of peers: proof that a consumer serves the new certificates and trusts the CA.
//!
//! The dial is thin: a real TLS handshake with rustls, verifying the server's chain against the
//! bundle certgen wrote and its name, presenting a short-lived client certificate from the
//! active CA (so a server that requires client certificates shows it trusts that CA). There is
//! no way to skip verification. What the server presented is then judged by [`verdict`], a pure
//! function: it must be exactly the leaf now stored in the Secret. Which addresses to dial is
//! the caller's: a Service's endpoints come from the Kubernetes adapter
//! ([`crate::k8s::service_endpoints`]).

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use time::OffsetDateTime;
use tokio::time::Instant;

use crate::pki::Cert;
use crate::report::EndpointResult;

pub use crate::outside::{ClientIdentity, ClientTrust, Expected};

/// Test-only: `ADDR=ADDR[,...]` rewrites dial addresses (the API server refuses loopback
/// addresses in EndpointSlices, so tests point EndpointSlices at TEST-NET addresses and map them
/// to loopback listeners here). Only with the cargo feature `test-hooks`, never in a release.
#[cfg(feature = "test-hooks")]
pub const DIAL_OVERRIDE_ENV: &str = "CERTGEN_TEST_DIAL_OVERRIDE";

/// The verdict on one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Fail(String),
}

/// Judges the chain a server presented (its leaf first).
pub fn verdict(presented: &[Cert], expected: &Expected, now: OffsetDateTime) -> Verdict {
    let Some(leaf) = presented.first() else {
        return Verdict::Fail("the server presented no certificate".into());
    };
    if *leaf == expected.leaf {
        return Verdict::Ok;
    }
    if leaf.is_expired_at(now) {
        return Verdict::Fail(format!(
            "it presents a certificate that expired at {}",
            leaf.not_after
        ));
    }
    if !expected.issuer.signed(leaf) {
        return Verdict::Fail(format!(
            "it presents a certificate from another CA (issuer {}), not from the active CA {}: it has not reloaded Secret {}",
            leaf.issuer,
            expected.issuer.short_fingerprint(),
            expected.secret
        ));
    }
    Verdict::Fail(format!(
        "it presents an older certificate (serial {}) than the one in Secret {}: it has not reloaded",
        leaf.serial, expected.secret
    ))
}

/// Verifies like rustls' WebPKI verifier (it decides), and remembers what the server presented
/// so a rejection can be explained ("from another CA") rather than only reported.
#[derive(Debug)]
struct Capturing {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    seen: std::sync::Mutex<Vec<CertificateDer<'static>>>,
}

impl rustls::client::danger::ServerCertVerifier for Capturing {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let mut seen = vec![end_entity.clone().into_owned()];
        seen.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        *self.seen.lock().unwrap() = seen;
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// How one handshake went.
#[derive(Debug)]
pub enum Dial {
    /// Verified; the chain the server presented.
    Verified(Vec<Cert>),
    /// Refused or failed; the reason, and what the server presented if it got that far.
    Failed(String, Vec<Cert>),
}

/// One TLS handshake to `addr`, verifying chain and `server_name` against `roots`.
pub async fn dial(
    addr: &str,
    server_name: &str,
    roots: &[Cert],
    client: &ClientIdentity,
    timeout: Duration,
) -> Dial {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        if let Err(e) = store.add(CertificateDer::from(root.der().to_vec())) {
            return Dial::Failed(format!("bad trust anchor: {e}"), vec![]);
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let inner = match rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(store),
        provider.clone(),
    )
    .build()
    {
        Ok(v) => v,
        Err(e) => return Dial::Failed(format!("verifier: {e}"), vec![]),
    };
    let verifier = Arc::new(Capturing {
        inner,
        seen: std::sync::Mutex::new(vec![]),
    });
    let config = match rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(verifier.clone())
        })
        .and_then(|b| b.with_client_auth_cert(client.chain.clone(), client.key.clone_key()))
    {
        Ok(c) => c,
        Err(e) => return Dial::Failed(format!("client configuration: {e}"), vec![]),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = match ServerName::try_from(server_name.to_string()) {
        Ok(n) => n,
        Err(e) => return Dial::Failed(format!("server name {server_name:?}: {e}"), vec![]),
    };
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        // TLS 1.3 servers report a rejected client certificate after the handshake: read once.
        let mut buf = [0u8; 1];
        use tokio::io::AsyncReadExt;
        let read = tokio::time::timeout(Duration::from_millis(100), tls.read(&mut buf)).await;
        if let Ok(Err(e)) = read {
            return Err(format!(
                "the server refused certgen's client certificate from the active CA: {e}"
            ));
        }
        Ok(())
    };
    let result = tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")));
    let seen: Vec<Cert> = verifier
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|c| Cert::from_der(c.as_ref()).ok())
        .collect();
    match result {
        Ok(()) => Dial::Verified(seen),
        Err(e) => Dial::Failed(e, seen),
    }
}

/// One attempt: whether `endpoint` completes a handshake (its chain verified against `roots`,
/// presenting `client`) and presents exactly the leaf `expected`; else why not.
pub async fn serves(
    endpoint: &str,
    server_name: &str,
    roots: &[Cert],
    expected: &Expected,
    client: &ClientIdentity,
    timeout: Duration,
) -> Result<(), String> {
    let dial_addr = dial_override(endpoint).unwrap_or_else(|| endpoint.to_string());
    let now = OffsetDateTime::now_utc();
    match dial(&dial_addr, server_name, roots, client, timeout).await {
        Dial::Verified(chain) => match verdict(&chain, expected, now) {
            Verdict::Ok => Ok(()),
            Verdict::Fail(why) => Err(why),
        },
        // Verification refused it; explain with what the server presented, if anything.
        Dial::Failed(why, chain) => Err(match verdict(&chain, expected, now) {
            Verdict::Fail(explained) if !chain.is_empty() => format!("{explained} ({why})"),
            _ => why,
        }),
    }
}

/// Probes one endpoint until it passes or the deadline comes, backing off between attempts.
pub async fn probe_until(
    endpoint: &str,
    server_name: &str,
    roots: &[Cert],
    expected: &Expected,
    client: &ClientIdentity,
    deadline: Instant,
) -> EndpointResult {
    let mut backoff = Duration::from_millis(200);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let detail = match serves(
            endpoint,
            server_name,
            roots,
            expected,
            client,
            Duration::from_secs(5),
        )
        .await
        {
            Ok(()) => {
                return EndpointResult {
                    endpoint: endpoint.into(),
                    ok: true,
                    detail: format!("serves the certificate in Secret {}", expected.secret),
                    attempts,
                };
            }
            Err(why) => why,
        };
        tracing::debug!(endpoint, attempts, "probe failed: {detail}");
        if Instant::now() + backoff >= deadline {
            return EndpointResult {
                endpoint: endpoint.into(),
                ok: false,
                detail,
                attempts,
            };
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// What a server made of a client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientVerdict {
    /// It verified it: the TLS 1.2 handshake completed after it asked for one, or, in TLS 1.3,
    /// it sent a session ticket, which servers do only after verifying the client's Finished
    /// (and so its certificate).
    Accepted,
    /// It refused it (an alert, or it closed the connection).
    Rejected(String),
    /// No proof either way: it did not ask for a certificate, sent no ticket, or was
    /// unreachable. Never taken for acceptance.
    Unknown(String),
}

#[derive(Debug)]
struct Asked {
    key: Arc<rustls::sign::CertifiedKey>,
    asked: std::sync::atomic::AtomicBool,
}

impl rustls::client::ResolvesClientCert for Asked {
    fn resolve(
        &self,
        _hints: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked.store(true, std::sync::atomic::Ordering::SeqCst);
        Some(self.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Remembers whether the server sent a TLS 1.3 session ticket; stores nothing.
#[derive(Debug, Default)]
struct Tickets(std::sync::atomic::AtomicBool);

impl rustls::client::ClientSessionStore for Tickets {
    fn set_kx_hint(&self, _: ServerName<'static>, _: rustls::NamedGroup) {}
    fn kx_hint(&self, _: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        None
    }
    fn set_tls12_session(
        &self,
        _: ServerName<'static>,
        _: rustls::client::Tls12ClientSessionValue,
    ) {
    }
    fn tls12_session(&self, _: &ServerName<'_>) -> Option<rustls::client::Tls12ClientSessionValue> {
        None
    }
    fn remove_tls12_session(&self, _: &ServerName<'static>) {}
    fn insert_tls13_ticket(
        &self,
        _: ServerName<'static>,
        _: rustls::client::Tls13ClientSessionValue,
    ) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    fn take_tls13_ticket(
        &self,
        _: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        None
    }
}

/// One handshake presenting `client`, and what the server made of that certificate.
pub async fn client_verdict(
    addr: &str,
    server_name: &str,
    roots: &[Cert],
    client: &ClientIdentity,
    timeout: Duration,
) -> ClientVerdict {
    use std::sync::atomic::Ordering;
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        if let Err(e) = store.add(CertificateDer::from(root.der().to_vec())) {
            return ClientVerdict::Unknown(format!("bad trust anchor: {e}"));
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let signing = match provider
        .key_provider
        .load_private_key(client.key.clone_key())
    {
        Ok(k) => k,
        Err(e) => return ClientVerdict::Unknown(format!("client key: {e}")),
    };
    let asked = Arc::new(Asked {
        key: Arc::new(rustls::sign::CertifiedKey::new(
            client.chain.clone(),
            signing,
        )),
        asked: false.into(),
    });
    let tickets = Arc::new(Tickets::default());
    let mut config = match rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b
            .with_root_certificates(store)
            .with_client_cert_resolver(asked.clone()),
        Err(e) => return ClientVerdict::Unknown(format!("client configuration: {e}")),
    };
    config.resumption = rustls::client::Resumption::store(tickets.clone());
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = match ServerName::try_from(server_name.to_string()) {
        Ok(n) => n,
        Err(e) => return ClientVerdict::Unknown(format!("server name {server_name:?}: {e}")),
    };
    let attempt = async {
        let tcp = match tokio::net::TcpStream::connect(addr).await {
            Ok(t) => t,
            Err(e) => return ClientVerdict::Unknown(format!("connect: {e}")),
        };
        let mut tls = match connector.connect(name, tcp).await {
            Ok(t) => t,
            Err(e) => return ClientVerdict::Rejected(format!("TLS handshake: {e}")),
        };
        if !asked.asked.load(Ordering::SeqCst) {
            return ClientVerdict::Unknown(
                "the server does not ask for a client certificate".into(),
            );
        }
        if tls.get_ref().1.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_2) {
            return ClientVerdict::Accepted;
        }
        // TLS 1.3: a refusal arrives as an alert after the handshake, a ticket as acceptance.
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1];
        match tokio::time::timeout(Duration::from_secs(1), tls.read(&mut buf)).await {
            Ok(Err(e)) => return ClientVerdict::Rejected(e.to_string()),
            Ok(Ok(0)) if !tickets.0.load(Ordering::SeqCst) => {
                return ClientVerdict::Rejected("the server closed the connection".into());
            }
            _ => {}
        }
        if tickets.0.load(Ordering::SeqCst) {
            ClientVerdict::Accepted
        } else {
            ClientVerdict::Unknown(
                "the server sent no session ticket, so its verdict on the client certificate is unknown".into(),
            )
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| ClientVerdict::Unknown(format!("no answer within {timeout:?}")))
}

/// Whether `endpoint` demonstrably verifies client certificates and accepts `client`: a
/// certificate from a CA nobody trusts must be refused (or the server verifies nothing, and
/// its acceptance proves nothing), and `client` must be accepted. Retries with backoff until
/// `until`; anything short of that proof is `false`. A server that verifies nothing is said
/// once, at warn level.
pub async fn accepts_client(
    endpoint: &str,
    server_name: &str,
    roots: &[Cert],
    client: &ClientIdentity,
    until: Instant,
) -> bool {
    match client_trust(endpoint, server_name, roots, client, until).await {
        ClientTrust::Proven => true,
        ClientTrust::VerifiesNothing => {
            tracing::warn!(
                endpoint,
                "accepts a client certificate from a CA nobody trusts: probes cannot prove it trusts the new CA"
            );
            false
        }
        ClientTrust::NotShown => false,
    }
}

/// What `endpoint` shows of its client verification ([`ClientTrust`]), retrying with backoff
/// until `until` while it shows neither proof nor that it verifies nothing. Says nothing: the
/// caller decides how often a server that verifies nothing is worth a line.
pub async fn client_trust(
    endpoint: &str,
    server_name: &str,
    roots: &[Cert],
    client: &ClientIdentity,
    until: Instant,
) -> ClientTrust {
    let dial_addr = dial_override(endpoint).unwrap_or_else(|| endpoint.to_string());
    let Ok(control) = ClientIdentity::untrusted(OffsetDateTime::now_utc()) else {
        return ClientTrust::NotShown;
    };
    let mut backoff = Duration::from_millis(200);
    loop {
        let timeout = Duration::from_secs(5);
        if client_verdict(&dial_addr, server_name, roots, client, timeout).await
            == ClientVerdict::Accepted
        {
            match client_verdict(&dial_addr, server_name, roots, &control, timeout).await {
                ClientVerdict::Rejected(_) => return ClientTrust::Proven,
                ClientVerdict::Accepted => return ClientTrust::VerifiesNothing,
                ClientVerdict::Unknown(_) => {}
            }
        }
        if Instant::now() + backoff >= until {
            return ClientTrust::NotShown;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

#[cfg(feature = "test-hooks")]
fn dial_override(endpoint: &str) -> Option<String> {
    let map = std::env::var(DIAL_OVERRIDE_ENV).ok()?;
    map.split(',').find_map(|pair| {
        let (from, to) = pair.split_once('=')?;
        (from.trim() == endpoint).then(|| to.trim().to_string())
    })
}

#[cfg(not(feature = "test-hooks"))]
fn dial_override(_endpoint: &str) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::pki::{CaKey, CaSpec, KeyAlgorithm, LeafSpec, Usages, issue_ca, issue_leaf};

    const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);

    fn leaf(ca: &CaKey, at: OffsetDateTime) -> Cert {
        let spec = LeafSpec {
            common_name: "s".into(),
            dns_names: vec!["s.ns.svc".into()],
            ip_addresses: vec![],
            usages: Usages {
                server: true,
                client: true,
            },
            validity: Duration::from_secs(86_400 * 30),
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        issue_leaf(&spec, ca, at).unwrap().cert
    }

    #[test]
    fn only_the_leaf_in_the_secret_passes() {
        let spec = CaSpec {
            common_name: "ca".into(),
            validity: Duration::from_secs(86_400 * 365),
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        let (old_ca, _) = issue_ca(&spec, NOW).unwrap();
        let (ca, _) = issue_ca(&spec, NOW).unwrap();
        let current = leaf(&ca, NOW);
        let expected = Expected {
            secret: "envoy".into(),
            leaf: current.clone(),
            issuer: ca.cert.clone(),
        };
        assert_eq!(
            verdict(std::slice::from_ref(&current), &expected, NOW),
            Verdict::Ok
        );
        let stale_same_ca = leaf(&ca, NOW);
        assert!(
            matches!(verdict(&[stale_same_ca], &expected, NOW), Verdict::Fail(m) if m.contains("older certificate"))
        );
        let from_old_ca = leaf(&old_ca, NOW);
        assert!(
            matches!(verdict(&[from_old_ca], &expected, NOW), Verdict::Fail(m) if m.contains("another CA"))
        );
        let expired = leaf(&ca, NOW - time::Duration::days(40));
        assert!(
            matches!(verdict(&[expired], &expected, NOW), Verdict::Fail(m) if m.contains("expired"))
        );
        assert!(matches!(verdict(&[], &expected, NOW), Verdict::Fail(_)));
    }
}
