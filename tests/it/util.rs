//! Shared helpers: running the binary, reading trees of files, openssl, and the cluster.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::process::{Command, Output};
use tokio::net::TcpListener;

/// The binary under test.
pub fn certgen() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_certgen"));
    // A clean environment for the variables certgen reads.
    for var in [
        "CERTGEN_NAMESPACE",
        "ENVOY_GATEWAY_NAMESPACE",
        "KUBERNETES_CLUSTER_DOMAIN",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The result of one run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Self {
        let run = Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert_no_key_material(&run.stdout);
        assert_no_key_material(&run.stderr);
        run
    }

    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "certgen failed:\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("bad JSON ({e}):\n{}", self.stdout))
    }
}

/// Runs certgen with `args`.
pub fn run(args: &[&str]) -> Run {
    Run::from(certgen().args(args).output().expect("run certgen"))
}

/// Markers of private keys: PEM armour, and the base64 openings of PKCS#8 (P-256, P-384,
/// Ed25519, RSA) and PKCS#1 DER, which appear however a key were printed as PEM or base64.
pub const KEY_MARKERS: &[&str] = &[
    "PRIVATE KEY",
    "MIGHAgEAMBMG",
    "MIG2AgEAMBAG",
    "MC4CAQAwBQYDK2Vw",
    "AgEAMA0GCSqGSIb3DQEBAQUABIIE",
    "AoIBAQ",
];

/// Fails if `text` contains anything that looks like private-key material.
pub fn assert_no_key_material(text: &str) {
    for marker in KEY_MARKERS {
        assert!(
            !text.contains(marker),
            "output contains key material ({marker}):\n{text}"
        );
    }
}

/// Every regular file under `dir`, by relative path.
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                // Links are recorded by target, never followed.
                let target = std::fs::read_link(&p).unwrap();
                out.insert(rel, format!("-> {}", target.display()).into_bytes());
            } else if meta.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// Runs openssl with `args`; returns (success, stdout+stderr).
pub fn openssl(args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is installed (apt-get install openssl)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// `openssl verify` of `leaf` against the bundle `ca` for a purpose (sslserver/sslclient).
pub fn openssl_verify(ca: &Path, leaf: &Path, purpose: &str) -> (bool, String) {
    openssl(&[
        "verify",
        "-CAfile",
        ca.to_str().unwrap(),
        "-purpose",
        purpose,
        leaf.to_str().unwrap(),
    ])
}

/// The SHA-256 fingerprints of the certificates in a PEM bundle, in order.
pub fn fingerprints(pem: &[u8]) -> Vec<String> {
    certgen::pki::parse_cert_chain(pem)
        .unwrap()
        .iter()
        .map(|c| c.fingerprint_hex())
        .collect()
}

/// A temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Writes `text` to `dir/name`, returning the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub fn server_config(dir: &Path) -> Option<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("tls.crt"))
        .ok()?
        .collect::<Result<_, _>>()
        .ok()?;
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).ok()?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(dir.join("ca.crt")).ok()? {
        roots.add(ca.ok()?).ok()?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .ok()?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .ok()?;
    Some(Arc::new(config))
}

/// A mutual-TLS server on 127.0.0.1: `hot` reloads its files for every connection, otherwise it
/// keeps what it loaded at start.
pub async fn tls_server(dir: PathBuf, hot: bool) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let fixed = server_config(&dir).expect("server files present at start");
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let config = if hot {
                server_config(&dir).unwrap_or_else(|| fixed.clone())
            } else {
                fixed.clone()
            };
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

/// The TLS Secrets of the envoy-gateway profile.
pub const LEAF_SECRETS: [&str; 3] = ["envoy-gateway", "envoy", "envoy-rate-limit"];

/// What a pairwise check sees: each Secret's `ca.crt` and `tls.crt` (and the CA Secret's).
pub type Snapshot = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Reads the profile's Secrets from a local directory.
pub fn local_snapshot(dir: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    for name in LEAF_SECRETS.iter().chain(&["envoy-gateway-ca"]) {
        let mut data = BTreeMap::new();
        for key in ["ca.crt", "tls.crt", "next.crt"] {
            if let Ok(bytes) = std::fs::read(dir.join(name).join(key)) {
                data.insert(key.to_string(), bytes);
            }
        }
        out.insert(name.to_string(), data);
    }
    out
}

/// Does `leaf` chain to one of `bundle`'s CAs for TLS client and server use? Decided by
/// rustls-webpki at the current time.
pub fn webpki_trusts(bundle: &[u8], leaf: &[u8]) -> bool {
    let Ok(cas) = certgen::pki::parse_cert_chain(bundle) else {
        return false;
    };
    let Ok(leaf) = certgen::pki::parse_cert_chain(leaf) else {
        return false;
    };
    webpki_verifies(&leaf[0], &cas, rustls_pki_types::UnixTime::now()).is_ok()
}

/// rustls-webpki's verdict on `leaf` against the trust anchors `bundle` at `at`, for server
/// and for client use: the independent verifier every rotation check relies on.
pub fn webpki_verifies(
    leaf: &certgen::pki::Cert,
    bundle: &[certgen::pki::Cert],
    at: rustls_pki_types::UnixTime,
) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    let ders: Vec<CertificateDer> = bundle
        .iter()
        .map(|c| CertificateDer::from(c.der().to_vec()))
        .collect();
    let anchors: Vec<_> = ders
        .iter()
        .filter_map(|d| webpki::anchor_from_trusted_cert(d).ok())
        .collect();
    let leaf_der = CertificateDer::from(leaf.der().to_vec());
    let ee = webpki::EndEntityCert::try_from(&leaf_der).map_err(|e| format!("{e:?}"))?;
    for usage in [
        webpki::KeyUsage::server_auth(),
        webpki::KeyUsage::client_auth(),
    ] {
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &[],
            at,
            usage,
            None,
            None,
        )
        .map_err(|e| format!("{e:?}"))?;
    }
    Ok(())
}

/// The guarantees at any instant: every peer's leaf verifies against every peer's bundle, and
/// every bundle holds at most two distinct, unexpired CAs. Returns the failures, if any, and
/// the fingerprints of every CA anywhere in the snapshot.
pub fn check_snapshot(s: &Snapshot) -> (Vec<String>, std::collections::BTreeSet<String>) {
    let mut failures = Vec::new();
    let mut cas = std::collections::BTreeSet::new();
    for (name, data) in s {
        for key in ["ca.crt", "next.crt"] {
            if let Some(b) = data.get(key) {
                cas.extend(fingerprints(b));
            }
        }
        if name.ends_with("-ca") {
            if let Some(b) = data.get("tls.crt") {
                cas.extend(fingerprints(b));
            }
            continue;
        }
        let bundle = fingerprints(&data["ca.crt"]);
        let distinct: std::collections::BTreeSet<_> = bundle.iter().collect();
        if distinct.len() != bundle.len() || bundle.len() > 2 {
            failures.push(format!("{name}: bundle {bundle:?}"));
        }
    }
    for leaf_name in LEAF_SECRETS {
        for bundle_name in LEAF_SECRETS {
            if !webpki_trusts(&s[bundle_name]["ca.crt"], &s[leaf_name]["tls.crt"]) {
                failures.push(format!(
                    "{leaf_name}'s leaf is not trusted by {bundle_name}'s bundle"
                ));
            }
        }
    }
    (failures, cas)
}
