//! Mutual-TLS peers on 127.0.0.1 built from the files certgen writes (`ca.crt`, `tls.crt`,
//! `tls.key`): rustls configurations, a rustls server that reloads its files or never does, and
//! `openssl s_server`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio::net::TcpListener;

/// A peer's rustls server and client configurations from its PEM files: the server requires a
/// client certificate trusted by `ca`, the client trusts `ca` and presents `crt`.
pub fn configs(
    ca: &[u8],
    crt: &[u8],
    key: &[u8],
) -> Option<(Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>)> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(crt)
        .collect::<Result<_, _>>()
        .ok()?;
    let key = PrivateKeyDer::from_pem_slice(key).ok()?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca) {
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

/// The server configuration from the files in `dir`, or `None` while any is missing or bad.
pub fn server_config(dir: &Path) -> Option<Arc<rustls::ServerConfig>> {
    let read = |f: &str| std::fs::read(dir.join(f)).ok();
    configs(&read("ca.crt")?, &read("tls.crt")?, &read("tls.key")?).map(|(server, _)| server)
}

/// A mutual-TLS server on 127.0.0.1: `hot` reloads its files for every connection, otherwise it
/// keeps what it loaded at start.
pub async fn tls_server(dir: PathBuf, hot: bool) -> (u16, tokio::task::JoinHandle<()>) {
    let fixed = server_config(&dir).expect("server files present at start");
    serve(move || {
        if hot {
            server_config(&dir).unwrap_or_else(|| fixed.clone())
        } else {
            fixed.clone()
        }
    })
    .await
}

/// A TLS server on a free port of 127.0.0.1, each connection with `config()`'s configuration,
/// answering "ok" once the handshake is done.
async fn serve(
    config: impl Fn() -> Arc<rustls::ServerConfig> + Send + 'static,
) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let config = config();
            tokio::spawn(async move {
                if let Ok(mut tls) = tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
                    use tokio::io::AsyncWriteExt;
                    let _ = tls.write_all(b"ok").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    (port, task)
}

/// A TLS server on 127.0.0.1 with the files in `dir` (read once) that asks for a client
/// certificate and accepts any ([`AcceptsAnything`]): a server no probe can show trusts a CA.
pub async fn tls_server_accepting_any_client(dir: PathBuf) -> (u16, tokio::task::JoinHandle<()>) {
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read("tls.crt"))
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(&read("tls.key")).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(Arc::new(AcceptsAnything(provider)))
            .with_single_cert(certs, key)
            .unwrap(),
    );
    serve(move || config.clone()).await
}

/// Asks for a client certificate and accepts any (Go's `RequestClientCert`, say).
#[derive(Debug)]
pub struct AcceptsAnything(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::server::danger::ClientCertVerifier for AcceptsAnything {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A free port on 127.0.0.1 (free when this returns).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// openssl's flags for the peer whose files are in `dir`: it presents `tls.crt` and trusts
/// `ca.crt`.
fn openssl_identity(dir: &Path) -> Vec<String> {
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    [
        "-cert",
        &p("tls.crt"),
        "-key",
        &p("tls.key"),
        "-CAfile",
        &p("ca.crt"),
    ]
    .map(String::from)
    .to_vec()
}

/// `openssl s_server` on a free port of 127.0.0.1 with the files in `dir`, requiring a client
/// certificate, with `extra` flags; returns once it accepts connections. It never reloads.
pub fn s_server(dir: &Path, extra: &[&str]) -> (Child, u16) {
    let port = free_port();
    let child = Command::new("openssl")
        .args(["s_server", "-accept", &format!("127.0.0.1:{port}")])
        .args(openssl_identity(dir))
        .args(["-Verify", "1", "-quiet"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (child, port)
}

/// `openssl s_client` to 127.0.0.1:`port` as the peer whose files are in `dir`, checking the
/// server's chain and its name, `host`. Ok when the handshake completed without an alert;
/// otherwise openssl's last word.
pub fn s_client(dir: &Path, port: u16, host: &str) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", host, "-verify_hostname", host])
        .args(openssl_identity(dir))
        .args(["-verify_return_error", "-brief"])
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
