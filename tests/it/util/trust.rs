//! Who trusts whom, decided by verifiers certgen did not write (openssl, rustls-webpki), and the
//! rotation guarantee every rotation test checks on a snapshot of the profile's Secrets: every
//! peer's leaf verifies against every peer's bundle, and no bundle holds more than two CAs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The TLS Secrets of the envoy-gateway profile.
pub const LEAF_SECRETS: [&str; 3] = ["envoy-gateway", "envoy", "envoy-rate-limit"];

/// The CA Secret of the envoy-gateway profile.
pub const CA_SECRET: &str = "envoy-gateway-ca";

/// Every Secret of the envoy-gateway profile, in the profile's order.
pub const PROFILE_SECRETS: [&str; 5] = [
    CA_SECRET,
    "envoy-gateway",
    "envoy",
    "envoy-rate-limit",
    "envoy-oidc-hmac",
];

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
    webpki_verifies_as(leaf, bundle, at, true)
}

/// [`webpki_verifies`] for server use, and for client use as well when `client` (a serving
/// certificate alone, such as a webhook's, is checked as a server only).
pub fn webpki_verifies_as(
    leaf: &certgen::pki::Cert,
    bundle: &[certgen::pki::Cert],
    at: rustls_pki_types::UnixTime,
    client: bool,
) -> Result<(), String> {
    let used = if client { Use::Both } else { Use::Server };
    webpki_verifies_for(leaf, bundle, at, used)
}

/// What a leaf is verified for: as a server, as a client, or both.
#[derive(Clone, Copy, Debug)]
pub enum Use {
    Server,
    Client,
    Both,
}

/// rustls-webpki's verdict on `leaf` against the trust anchors `bundle` at `at`, for `used`.
pub fn webpki_verifies_for(
    leaf: &certgen::pki::Cert,
    bundle: &[certgen::pki::Cert],
    at: rustls_pki_types::UnixTime,
    used: Use,
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
    let usages = match used {
        Use::Server => vec![webpki::KeyUsage::server_auth()],
        Use::Client => vec![webpki::KeyUsage::client_auth()],
        Use::Both => vec![
            webpki::KeyUsage::server_auth(),
            webpki::KeyUsage::client_auth(),
        ],
    };
    for usage in &usages {
        ee.verify_for_usage(&remembered::ALGS, &anchors, &[], at, *usage, None, None)
            .map_err(|e| format!("{e:?}"))?;
    }
    Ok(())
}

/// What a pairwise check sees: each Secret's `ca.crt` and `tls.crt` (and the CA Secret's), by
/// Secret name. The local store's is read by [`local_snapshot`], the cluster's by
/// `Cluster::snapshot`.
pub type Snapshot = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Reads the profile's Secrets from a local directory.
pub fn local_snapshot(dir: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    for name in LEAF_SECRETS.iter().chain(&[CA_SECRET]) {
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

/// The guarantees at any instant: every peer's leaf verifies against every peer's bundle, and
/// every bundle holds at most two distinct, unexpired CAs. Returns the failures, if any, and
/// the fingerprints of every CA anywhere in the snapshot.
pub fn check_snapshot(s: &Snapshot) -> (Vec<String>, BTreeSet<String>) {
    let mut failures = Vec::new();
    let mut cas = BTreeSet::new();
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
        let distinct: BTreeSet<_> = bundle.iter().collect();
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

/// rustls-webpki's signature algorithms with their answers remembered for the test process: the
/// simulation asks the same few signatures hundreds of thousands of times (every pair of every
/// state of every trajectory), and aws-lc's ECDSA verification was most of its CPU. An answer is
/// kept under a SHA-256 of everything it depends on (the algorithm, the key, the signed bytes and
/// the signature), so it is reused only for the same question. Written here, not taken from
/// certgen's own memory of signatures (`src/pki/memo.rs`): the oracle shares no code with what
/// it judges.
mod remembered {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, PoisonError};

    use rustls_pki_types::{AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm};
    use sha2::{Digest, Sha256};

    pub static ALGS: LazyLock<Vec<&'static dyn SignatureVerificationAlgorithm>> =
        LazyLock::new(|| {
            webpki::ALL_VERIFICATION_ALGS
                .iter()
                .map(|&inner| -> &'static dyn SignatureVerificationAlgorithm {
                    Box::leak(Box::new(Remembered { inner }))
                })
                .collect()
        });

    /// Answers by question; cleared when full, so a long test process stays small.
    static SEEN: LazyLock<Mutex<HashMap<[u8; 32], bool>>> = LazyLock::new(Mutex::default);
    const FULL: usize = 1 << 18;

    #[derive(Debug)]
    struct Remembered {
        inner: &'static dyn SignatureVerificationAlgorithm,
    }

    impl SignatureVerificationAlgorithm for Remembered {
        fn verify_signature(
            &self,
            public_key: &[u8],
            message: &[u8],
            signature: &[u8],
        ) -> Result<(), InvalidSignature> {
            let mut hash = Sha256::new();
            for part in [
                self.inner.signature_alg_id().as_ref(),
                public_key,
                message,
                signature,
            ] {
                hash.update((part.len() as u64).to_le_bytes());
                hash.update(part);
            }
            let asked: [u8; 32] = hash.finalize().into();
            let known = SEEN
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&asked)
                .copied();
            let valid = known.unwrap_or_else(|| {
                let valid = self
                    .inner
                    .verify_signature(public_key, message, signature)
                    .is_ok();
                let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
                if seen.len() >= FULL {
                    seen.clear();
                }
                seen.insert(asked, valid);
                valid
            });
            valid.then_some(()).ok_or(InvalidSignature)
        }

        fn public_key_alg_id(&self) -> AlgorithmIdentifier {
            self.inner.public_key_alg_id()
        }

        fn signature_alg_id(&self) -> AlgorithmIdentifier {
            self.inner.signature_alg_id()
        }

        fn fips(&self) -> bool {
            self.inner.fips()
        }
    }
}
