//! Issuing: key generation, self-signed CAs and CA-signed leaves.

use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, RsaKeySize, SanType, SerialNumber,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::cert::{Cert, pem_encode};
use super::{SecretPem, load_signing_key, random_bytes};

/// How far back `notBefore` is set, to tolerate clock skew between nodes.
const BACKDATE: time::Duration = time::Duration::minutes(5);

/// Key algorithms certgen can generate.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum KeyAlgorithm {
    /// ECDSA on NIST P-256 with SHA-256 (the default).
    #[default]
    EcdsaP256,
    /// ECDSA on NIST P-384 with SHA-384.
    EcdsaP384,
    /// Ed25519.
    Ed25519,
    /// RSA, 2048-bit modulus, PKCS#1 v1.5 with SHA-256.
    #[serde(rename = "rsa-2048")]
    Rsa2048,
    /// RSA, 3072-bit modulus.
    #[serde(rename = "rsa-3072")]
    Rsa3072,
    /// RSA, 4096-bit modulus.
    #[serde(rename = "rsa-4096")]
    Rsa4096,
}

impl KeyAlgorithm {
    /// The configuration spelling, e.g. `ecdsa-p256`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EcdsaP256 => "ecdsa-p256",
            Self::EcdsaP384 => "ecdsa-p384",
            Self::Ed25519 => "ed25519",
            Self::Rsa2048 => "rsa-2048",
            Self::Rsa3072 => "rsa-3072",
            Self::Rsa4096 => "rsa-4096",
        }
    }

    pub(super) fn is_rsa(self) -> bool {
        matches!(self, Self::Rsa2048 | Self::Rsa3072 | Self::Rsa4096)
    }

    /// Generates a fresh key pair; the private key is PKCS#8.
    pub fn generate(self) -> Result<KeyPair, IssueError> {
        let generated = match self {
            Self::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            Self::EcdsaP384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
            Self::Ed25519 => KeyPair::generate_for(&rcgen::PKCS_ED25519),
            Self::Rsa2048 => KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, RsaKeySize::_2048),
            Self::Rsa3072 => KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, RsaKeySize::_3072),
            Self::Rsa4096 => KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, RsaKeySize::_4096),
        };
        generated.map_err(|e| IssueError::KeyGeneration(self, e.to_string()))
    }
}

impl std::fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors while issuing.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("generating a {0} key failed: {1}")]
    KeyGeneration(KeyAlgorithm, String),
    #[error("signing the certificate failed: {0}")]
    Sign(String),
    #[error("the CA expired at {0}; it cannot issue certificates (rotate it with --overwrite)")]
    CaExpired(OffsetDateTime),
    #[error("invalid DNS name {0:?} in subjectAltNames")]
    DnsName(String),
}

/// What a CA should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaSpec {
    pub common_name: String,
    pub validity: Duration,
    pub key_algorithm: KeyAlgorithm,
}

/// Which extended key usages a leaf carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usages {
    pub server: bool,
    pub client: bool,
}

/// What a leaf should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafSpec {
    pub common_name: String,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub usages: Usages,
    pub validity: Duration,
    pub key_algorithm: KeyAlgorithm,
}

/// A freshly issued certificate with its private key.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert: Cert,
    pub key: SecretPem,
}

/// A CA that can sign: its certificate and its key.
pub struct CaKey {
    pub cert: Cert,
    key: KeyPair,
    /// The key as it was generated or stored, so that writing it back loads again.
    pem: SecretPem,
}

impl std::fmt::Debug for CaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaKey")
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

impl Clone for CaKey {
    /// Loads the key again from its PEM (rcgen's key pairs are not `Clone`); the PEM is one
    /// that loaded (or was generated) already, so this cannot fail.
    fn clone(&self) -> Self {
        Self::from_pem(self.cert.clone(), self.pem.expose().as_bytes())
            .expect("a CA key that loaded once loads again")
    }
}

impl CaKey {
    /// The private key PEM for storing in the CA Secret: PKCS#8 for keys certgen generated, and
    /// a loaded key exactly as it was stored (PKCS#8, PKCS#1 or SEC1), so it always loads again.
    pub fn key_pem(&self) -> SecretPem {
        self.pem.clone()
    }

    /// Loads a CA from its certificate and private key PEM, checking that they match.
    pub fn from_pem(cert: Cert, key_pem: &[u8]) -> Result<Self, super::KeyError> {
        let key = load_signing_key(&cert, key_pem)?;
        let pem = match std::str::from_utf8(key_pem) {
            Ok(text) => SecretPem::new(text.to_string()),
            Err(_) => SecretPem::new(key.serialize_pem()),
        };
        Ok(Self { cert, key, pem })
    }
}

fn serial() -> SerialNumber {
    // 128 random bits; rcgen encodes them as a positive DER INTEGER.
    SerialNumber::from_slice(&random_bytes(16))
}

fn duration(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// Issues a self-signed CA: `basicConstraints CA:TRUE, pathlen:0`, `keyCertSign` and `cRLSign`.
pub fn issue_ca(spec: &CaSpec, now: OffsetDateTime) -> Result<(CaKey, Issued), IssueError> {
    issue_ca_with_key(spec, spec.key_algorithm.generate()?, now)
}

/// [`issue_ca`] with a key generated beforehand (see [`super::generate_keys`]); the key must be
/// of the spec's algorithm.
pub fn issue_ca_with_key(
    spec: &CaSpec,
    key: KeyPair,
    now: OffsetDateTime,
) -> Result<(CaKey, Issued), IssueError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, spec.common_name.as_str());
    params.distinguished_name = dn;
    params.serial_number = Some(serial());
    params.not_before = now - BACKDATE;
    params.not_after = now + duration(spec.validity);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params
        .self_signed(&key)
        .map_err(|e| IssueError::Sign(e.to_string()))?;
    let cert = Cert::from_der(cert.der()).map_err(IssueError::Sign)?;
    let key_pem = SecretPem::new(key.serialize_pem());
    Ok((
        CaKey {
            cert: cert.clone(),
            key,
            pem: key_pem.clone(),
        },
        Issued { cert, key: key_pem },
    ))
}

/// Issues a leaf signed by `ca`. The leaf never outlives its CA: `notAfter` is clipped to the
/// CA's, and `notBefore` never precedes the CA's.
pub fn issue_leaf(spec: &LeafSpec, ca: &CaKey, now: OffsetDateTime) -> Result<Issued, IssueError> {
    if ca.cert.is_expired_at(now) {
        return Err(IssueError::CaExpired(ca.cert.not_after));
    }
    issue_leaf_with_key(spec, spec.key_algorithm.generate()?, ca, now)
}

/// [`issue_leaf`] with a key generated beforehand (see [`super::generate_keys`]); the key must
/// be of the spec's algorithm.
pub fn issue_leaf_with_key(
    spec: &LeafSpec,
    key: KeyPair,
    ca: &CaKey,
    now: OffsetDateTime,
) -> Result<Issued, IssueError> {
    if ca.cert.is_expired_at(now) {
        return Err(IssueError::CaExpired(ca.cert.not_after));
    }
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, spec.common_name.as_str());
    params.distinguished_name = dn;
    params.serial_number = Some(serial());
    params.not_before = (now - BACKDATE).max(ca.cert.not_before);
    params.not_after = (now + duration(spec.validity)).min(ca.cert.not_after);
    params.is_ca = IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if spec.key_algorithm.is_rsa() {
        params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
    }
    if spec.usages.server {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ServerAuth);
    }
    if spec.usages.client {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ClientAuth);
    }
    for name in &spec.dns_names {
        let ia5 = name
            .as_str()
            .try_into()
            .map_err(|_| IssueError::DnsName(name.clone()))?;
        params.subject_alt_names.push(SanType::DnsName(ia5));
    }
    for ip in &spec.ip_addresses {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    let issuer = Issuer::from_ca_cert_der(&ca.cert.der().to_vec().into(), &ca.key)
        .map_err(|e| IssueError::Sign(e.to_string()))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| IssueError::Sign(e.to_string()))?;
    let cert = Cert::from_der(cert.der()).map_err(IssueError::Sign)?;
    Ok(Issued {
        cert,
        key: SecretPem::new(key.serialize_pem()),
    })
}

/// PEM of a list of certificates, in order.
pub fn bundle_pem(certs: &[Cert]) -> String {
    certs
        .iter()
        .map(|c| pem_encode("CERTIFICATE", c.der()))
        .collect()
}
