//! Parsing certificates and keys from PEM into owned, inspectable values.

use std::net::IpAddr;

use rcgen::{
    KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_ED25519, PKCS_RSA_SHA256,
};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::{PemObject, SectionKind};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::{hex, memo};

/// Why certificate PEM could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertError {
    #[error("no PEM certificate found")]
    Empty,
    #[error("malformed PEM: {0}")]
    Pem(String),
    #[error("certificate {index} is not valid X.509: {reason}")]
    Der { index: usize, reason: String },
    #[error("expected exactly one certificate, found {0}")]
    NotSingle(usize),
}

/// Why a private key could not be used with its certificate.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("no PEM private key found (expected PKCS#8, PKCS#1 or SEC1)")]
    Unreadable,
    #[error("the private key does not match the certificate's public key")]
    Mismatch,
    #[error(
        "the certificate's RSA key has {0} bits, too weak to use (certgen accepts RSA keys of 2048 bits or more)"
    )]
    TooWeak(usize),
    #[error(
        "{0} private keys in one file; a Secret's key file holds exactly one: remove the others (or delete the Secret to have it recreated)"
    )]
    Several(usize),
}

/// An X.509 certificate with the fields certgen decides on, parsed once.
#[derive(Clone)]
pub struct Cert {
    der: Vec<u8>,
    fingerprint: [u8; 32],
    pub subject: String,
    pub issuer: String,
    pub serial: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub is_ca: bool,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    public_key: Vec<u8>,
    /// Whether its keyUsage allows signing certificates (`None`: no keyUsage extension).
    pub(crate) key_cert_sign: Option<bool>,
    /// Its extendedKeyUsage, when it has one.
    pub(crate) eku: Option<Eku>,
}

/// The key purposes of an extendedKeyUsage extension that TLS cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Eku {
    pub any: bool,
    pub server: bool,
    pub client: bool,
}

impl std::fmt::Debug for Cert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cert")
            .field("subject", &self.subject)
            .field("sha256", &self.fingerprint_hex())
            .field("not_after", &self.not_after)
            .finish()
    }
}

impl PartialEq for Cert {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}
impl Eq for Cert {}

impl Cert {
    /// Parses one DER certificate; the error says in words what is wrong.
    pub fn from_der(der: &[u8]) -> Result<Self, String> {
        let (rest, x509) = X509Certificate::from_der(der).map_err(der_problem)?;
        if !rest.is_empty() {
            return Err("trailing bytes after the certificate".into());
        }
        let mut dns_names = Vec::new();
        let mut ip_addresses = Vec::new();
        if let Ok(Some(san)) = x509.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_names.push((*d).to_string()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => ip_addresses.push(IpAddr::from(<[u8; 4]>::try_from(*b).unwrap())),
                        16 => ip_addresses.push(IpAddr::from(<[u8; 16]>::try_from(*b).unwrap())),
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        let is_ca = matches!(x509.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
        let key_cert_sign = match x509.key_usage() {
            Ok(Some(ku)) => Some(ku.value.key_cert_sign()),
            _ => None,
        };
        let eku = match x509.extended_key_usage() {
            Ok(Some(e)) => Some(Eku {
                any: e.value.any,
                server: e.value.server_auth,
                client: e.value.client_auth,
            }),
            _ => None,
        };
        Ok(Self {
            fingerprint: Sha256::digest(der).into(),
            // For people only (certgen decides by signature, never by name): bounded and
            // escaped, since another tool may have put anything there.
            subject: crate::text::bounded(&x509.subject().to_string()),
            issuer: crate::text::bounded(&x509.issuer().to_string()),
            serial: hex(x509.raw_serial()),
            not_before: x509.validity().not_before.to_datetime(),
            not_after: x509.validity().not_after.to_datetime(),
            is_ca,
            dns_names,
            ip_addresses,
            public_key: x509.public_key().subject_public_key.data.to_vec(),
            key_cert_sign,
            eku,
            der: der.to_vec(),
        })
    }

    /// The size of the certificate's RSA key in bits (`None` for other key types).
    pub fn rsa_bits(&self) -> Option<usize> {
        let (_, x509) = X509Certificate::from_der(&self.der).ok()?;
        match x509.public_key().parsed().ok()? {
            x509_parser::public_key::PublicKey::RSA(rsa) => Some(rsa.key_size()),
            _ => None,
        }
    }

    /// The DER encoding.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// SHA-256 of the DER encoding: the identity used for deduplication and reports.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// The fingerprint as lower-case hex.
    pub fn fingerprint_hex(&self) -> String {
        hex(&self.fingerprint)
    }

    /// A short fingerprint for people: the first 16 hex digits.
    pub fn short_fingerprint(&self) -> String {
        self.fingerprint_hex()[..16].to_string()
    }

    /// PEM encoding with a trailing newline.
    pub fn pem(&self) -> String {
        pem_encode("CERTIFICATE", &self.der)
    }

    /// Whether the certificate is inside its validity window at `now`.
    pub fn is_valid_at(&self, now: OffsetDateTime) -> bool {
        self.not_before <= now && now < self.not_after
    }

    /// Whether the certificate has expired at `now`.
    pub fn is_expired_at(&self, now: OffsetDateTime) -> bool {
        now >= self.not_after
    }

    /// Whether `self` (as an issuer) signed `child`: decided by verifying the signature with
    /// this certificate's public key, never by comparing names.
    /// Asked again for the same two certificates, it answers from memory (`memo.rs`).
    pub fn signed(&self, child: &Cert) -> bool {
        let asked = memo::question(&[b"Cert::signed", &self.fingerprint, &child.fingerprint]);
        memo::remembered(asked, || {
            let Ok((_, issuer)) = X509Certificate::from_der(&self.der) else {
                return false;
            };
            let Ok((_, child)) = X509Certificate::from_der(&child.der) else {
                return false;
            };
            child.verify_signature(Some(issuer.public_key())).is_ok()
        })
    }

    /// The raw public key bits (the SubjectPublicKeyInfo's BIT STRING).
    pub(crate) fn public_key_raw(&self) -> &[u8] {
        &self.public_key
    }
}

/// Encodes DER as PEM with the given label, LF line endings.
pub(crate) fn pem_encode(label: &str, der: &[u8]) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new(label, der), config)
}

/// Why DER did not parse as X.509, in words: x509-parser's errors are debug dumps
/// (`Der(UnexpectedTag { .. })`, `NomError(Eof)`).
fn der_problem(e: x509_parser::nom::Err<x509_parser::error::X509Error>) -> String {
    use x509_parser::der_parser::error::BerError as Ber;
    use x509_parser::error::X509Error as X;
    use x509_parser::nom::error::ErrorKind;
    let e = match e {
        x509_parser::nom::Err::Incomplete(_) => return CUT_SHORT.into(),
        x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e) => e,
    };
    match e {
        X::Der(Ber::Incomplete(_) | Ber::NomError(ErrorKind::Eof)) | X::NomError(ErrorKind::Eof) => {
            CUT_SHORT.into()
        }
        X::Der(
            Ber::UnexpectedTag { .. }
            | Ber::UnexpectedClass { .. }
            | Ber::BerTypeError
            | Ber::InvalidTag
            | Ber::UnknownTag(_)
            | Ber::ConstructExpected
            | Ber::ConstructUnexpected,
        ) => "its bytes are not an X.509 certificate (an ASN.1 element of the wrong type where the certificate's structure continues)".into(),
        X::Der(Ber::InvalidLength | Ber::IndefiniteLengthUnexpected) => {
            "its bytes are not an X.509 certificate (an ASN.1 length is invalid)".into()
        }
        X::Der(Ber::InvalidDateTime) | X::InvalidDate => "its validity dates are malformed".into(),
        X::Der(_) | X::NomError(_) | X::Generic => {
            "its bytes are not an X.509 certificate (malformed DER)".into()
        }
        // The others say in words which part is malformed ("invalid X.509 name", ...).
        other => format!("malformed certificate: {other}"),
    }
}

const CUT_SHORT: &str = "cut short: the bytes end before the certificate does";

/// The BEGIN labels of `pem` that are not `CERTIFICATE` (rustls-pki-types' reader skips a label
/// it does not know, such as `ENCRYPTED PRIVATE KEY` or `OPENSSH PRIVATE KEY`, without a word).
fn other_sections(pem: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(pem)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("-----BEGIN "))
        .filter_map(|l| l.strip_suffix("-----"))
        .filter(|label| *label != "CERTIFICATE")
        .map(|label| label.chars().take(40).collect())
        .collect()
}

/// Parses every certificate in a PEM document, in order. Sections of other kinds are an error,
/// since a trust bundle or `tls.crt` holding a key is a mistake worth reporting.
pub fn parse_cert_chain(pem: &[u8]) -> Result<Vec<Cert>, CertError> {
    if let Some(label) = other_sections(pem).first() {
        let private = if label.contains("PRIVATE KEY") {
            " (a private key, which must never be in a certificate or trust bundle)"
        } else {
            ""
        };
        // (In lower case: the label is no key material, but reports and logs never show a
        // private key's armour.)
        return Err(CertError::Pem(format!(
            "a {:?} section, not a CERTIFICATE{private}",
            crate::text::bounded(&label.to_lowercase())
        )));
    }
    let mut certs = Vec::new();
    for (index, item) in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem).enumerate() {
        match item {
            Ok((SectionKind::Certificate, der)) => {
                let cert =
                    Cert::from_der(&der).map_err(|reason| CertError::Der { index, reason })?;
                certs.push(cert);
            }
            Ok((kind, _)) => {
                return Err(CertError::Pem(format!(
                    "section {index} is a {kind:?}, not a CERTIFICATE"
                )));
            }
            Err(e) => return Err(CertError::Pem(pem_error(e))),
        }
    }
    if certs.is_empty() {
        return Err(CertError::Empty);
    }
    Ok(certs)
}

/// Parses a PEM document that must hold exactly one certificate.
pub fn parse_single_cert(pem: &[u8]) -> Result<Cert, CertError> {
    let mut certs = parse_cert_chain(pem)?;
    if certs.len() != 1 {
        return Err(CertError::NotSingle(certs.len()));
    }
    Ok(certs.remove(0))
}

fn pem_error(e: rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    // Markers as text, not the byte arrays pki-types' Display prints; never a section's
    // contents (only its BEGIN/END lines).
    let line = |b: &[u8]| {
        let text = String::from_utf8_lossy(b);
        let text: String = text.trim().chars().take(80).collect();
        text
    };
    match e {
        Error::MissingSectionEnd { end_marker } => format!(
            "truncated: no \"-----END {}-----\" line after its BEGIN line (the file was cut short)",
            line(&end_marker)
        ),
        Error::IllegalSectionStart { line: l } => {
            format!("a BEGIN line is malformed: {:?}", line(&l))
        }
        other => other.to_string(),
    }
}

/// Loads a private key (PKCS#8, PKCS#1 or SEC1 PEM) and checks that it belongs to `cert`.
/// Returns a signing key usable by rcgen, whatever the key's algorithm.
pub fn load_signing_key(cert: &Cert, key_pem: &[u8]) -> Result<KeyPair, KeyError> {
    let keys = <(SectionKind, Vec<u8>)>::pem_slice_iter(key_pem)
        .filter(|item| {
            matches!(
                item,
                Ok((
                    SectionKind::PrivateKey
                        | SectionKind::RsaPrivateKey
                        | SectionKind::EcPrivateKey,
                    _
                ))
            )
        })
        .count();
    if keys > 1 {
        return Err(KeyError::Several(keys));
    }
    if let Some(bits) = cert.rsa_bits()
        && bits < 2048
    {
        return Err(KeyError::TooWeak(bits));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| KeyError::Unreadable)?;
    for alg in [
        &PKCS_ECDSA_P256_SHA256,
        &PKCS_ECDSA_P384_SHA384,
        &PKCS_ED25519,
        &PKCS_RSA_SHA256,
    ] {
        if let Ok(pair) = KeyPair::from_der_and_sign_algo(&key, alg)
            && pair.public_key_raw() == cert.public_key_raw()
        {
            return Ok(pair);
        }
    }
    if matches!(
        key,
        PrivateKeyDer::Pkcs8(_) | PrivateKeyDer::Pkcs1(_) | PrivateKeyDer::Sec1(_)
    ) {
        Err(KeyError::Mismatch)
    } else {
        Err(KeyError::Unreadable)
    }
}
