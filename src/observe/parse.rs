//! The one parser of a stored Secret's data: PEM into certificates, keys and trust bundles,
//! each data key with a typed result ([`Field`]).
//!
//! It parses every key it knows and stops at nothing: the planner takes the first problem that
//! makes a Secret unusable (an error naming the key, or with `--force` the reason to replace
//! it), `check` reports them all. It judges nothing against the config or the clock (due,
//! SANs, issuers: that is the planner's and `check`'s), and never fails: a problem is a value.

use std::fmt;

use crate::pki::{
    BundleError, CaKey, Cert, CertError, KeyError, check_bundle, load_signing_key,
    parse_cert_chain, parse_single_cert,
};
use crate::secret::{Layout, StoredSecret};

/// One data key as parsed.
#[derive(Debug)]
pub enum Field<T> {
    /// The Secret has no such key.
    Absent,
    /// The key is there and empty.
    Empty,
    /// A key checked against a certificate (a private key) when that certificate is unusable:
    /// present, not checked.
    Unchecked,
    /// The key holds something unusable.
    Bad(Problem),
    Ok(T),
}

impl<T> Field<T> {
    /// The parsed value, when usable.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Self::Ok(v) => Some(v),
            _ => None,
        }
    }

    /// Whether the key is missing or empty.
    pub fn missing(&self) -> bool {
        matches!(self, Self::Absent | Self::Empty)
    }
}

/// Why a data key is unusable.
#[derive(Debug, PartialEq, Eq)]
pub enum Problem {
    /// Not the certificates it must hold.
    Cert(CertError),
    /// Not a private key of its certificate.
    Key(KeyError),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cert(e) => e.fmt(f),
            Self::Key(e) => e.fmt(f),
        }
    }
}

/// A `ca.crt` as parsed: its certificates, and the bundle rule they break, if any.
#[derive(Debug)]
pub struct Bundle {
    pub certs: Vec<Cert>,
    pub broken: Option<BundleError>,
}

/// The CA Secret as parsed (the keys named are the default [`Layout`]'s).
#[derive(Debug)]
pub struct CaData {
    /// `tls.crt`: exactly one certificate (whether it is a CA is the reader's to judge).
    pub cert: Field<Cert>,
    /// `tls.key`, loaded with `tls.crt` when that parsed. Empty: another tool's CA, adopted
    /// without its key.
    pub key: Field<CaKey>,
    /// `ca.crt`.
    pub bundle: Field<Bundle>,
    /// `next.crt`: a staged rotation's pending CA.
    pub next_cert: Field<Cert>,
    /// `next.key`, loaded with `next.crt` when that parsed.
    pub next_key: Field<CaKey>,
}

/// A TLS Secret as parsed (the keys named are the default [`Layout`]'s).
#[derive(Debug)]
pub struct LeafData {
    /// `tls.crt`: the leaf, first of its chain.
    pub cert: Field<Cert>,
    /// `tls.key`, checked against `tls.crt` when that parsed.
    pub key: Field<()>,
    /// `ca.crt`.
    pub bundle: Field<Bundle>,
}

/// A data key's bytes, before parsing.
enum Raw<'a> {
    Absent,
    Empty,
    Bytes(&'a [u8]),
}

fn raw<'a>(s: &'a StoredSecret, key: &str) -> Raw<'a> {
    match s.data.get(key) {
        None => Raw::Absent,
        Some(v) if v.is_empty() => Raw::Empty,
        Some(v) => Raw::Bytes(v),
    }
}

impl<'a> Raw<'a> {
    /// Parses the bytes, when there are some.
    fn parse<T>(self, f: impl FnOnce(&'a [u8]) -> Result<T, Problem>) -> Field<T> {
        match self {
            Self::Absent => Field::Absent,
            Self::Empty => Field::Empty,
            Self::Bytes(v) => match f(v) {
                Ok(t) => Field::Ok(t),
                Err(p) => Field::Bad(p),
            },
        }
    }

    /// Loads a private key that must belong to `cert`; unchecked without a usable `cert`.
    fn key_of<T>(
        self,
        cert: &Field<Cert>,
        load: impl FnOnce(&Cert, &[u8]) -> Result<T, KeyError>,
    ) -> Field<T> {
        match (cert.ok(), self) {
            (Some(c), key) => key.parse(|k| load(c, k).map_err(Problem::Key)),
            (None, Self::Bytes(_)) => Field::Unchecked,
            (None, Self::Absent) => Field::Absent,
            (None, Self::Empty) => Field::Empty,
        }
    }
}

fn single(pem: &[u8]) -> Result<Cert, Problem> {
    parse_single_cert(pem).map_err(Problem::Cert)
}

fn bundle(pem: &[u8]) -> Result<Bundle, Problem> {
    let certs = parse_cert_chain(pem).map_err(Problem::Cert)?;
    let broken = check_bundle(&certs).err();
    Ok(Bundle { certs, broken })
}

/// Parses the CA Secret whose active CA and bundle are in `layout`'s data keys (the pending
/// CA is always in `next.crt` and `next.key`).
pub fn ca(s: &StoredSecret, layout: &Layout) -> CaData {
    let cert = raw(s, &layout.cert).parse(single);
    let key = raw(s, &layout.key).key_of(&cert, |c, k| CaKey::from_pem(c.clone(), k));
    let next_cert = raw(s, "next.crt").parse(single);
    let next_key = raw(s, "next.key").key_of(&next_cert, |c, k| CaKey::from_pem(c.clone(), k));
    CaData {
        cert,
        key,
        bundle: raw(s, &layout.bundle).parse(bundle),
        next_cert,
        next_key,
    }
}

/// Parses a TLS Secret of the default [`Layout`] (`ca.crt`, `tls.crt`, `tls.key`).
pub fn leaf(s: &StoredSecret) -> LeafData {
    leaf_in(s, &Layout::default())
}

/// Parses a TLS Secret whose data keys are `layout`'s.
pub fn leaf_in(s: &StoredSecret, layout: &Layout) -> LeafData {
    let cert = raw(s, &layout.cert).parse(|pem| {
        let mut chain = parse_cert_chain(pem).map_err(Problem::Cert)?;
        Ok(chain.remove(0))
    });
    let key = raw(s, &layout.key).key_of(&cert, |c, k| load_signing_key(c, k).map(|_| ()));
    LeafData {
        cert,
        key,
        bundle: raw(s, &layout.bundle).parse(bundle),
    }
}

/// Whether an HMAC Secret holds its key, non-empty.
pub fn hmac(s: &StoredSecret, key: &str) -> Field<()> {
    raw(s, key).parse(|_| Ok(()))
}

/// Why an HMAC Secret's key is shorter than the `bytes` its profile asks for, if it is: a
/// short secret is a weak one.
pub fn hmac_short(s: &StoredSecret, key: &str, bytes: usize) -> Option<String> {
    let len = s.data.get(key)?.len();
    (len > 0 && len < bytes).then(|| {
        format!("key {key:?} holds {len} bytes, fewer than the {bytes} the profile asks for")
    })
}

/// Who else manages a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Foreign {
    /// An owner, or another manager's label: `--force` takes it over.
    Other(String),
    /// A cert-manager `Certificate` issues into it (or may: it could not be read). Never taken
    /// over, `--force` or not: the two would overwrite each other.
    CertManager(String),
}

/// Who else manages the Secret, if anyone: an owner, cert-manager, or another manager's label.
/// cert-manager manages a Secret its annotation `cert-manager.io/certificate-name` ties to a
/// Certificate that still exists (or that could not be read); once the Certificate is deleted
/// nobody issues into it and certgen may adopt it. Other `cert-manager.io/` annotations (the CA
/// injector's `allow-direct-injection`, for one) do not make it cert-manager's.
pub fn foreign_owner(s: &StoredSecret) -> Option<Foreign> {
    use crate::config::{MANAGED_BY, MANAGED_BY_LABEL};
    use crate::secret::CertificateSeen;
    if let Some(owner) = s.owners.first() {
        return Some(Foreign::Other(format!(
            "it is owned by {owner} (ownerReferences)"
        )));
    }
    if let Some(name) = crate::certmanager::certificate_of(&s.annotations, &s.name) {
        match s.certificate.as_deref() {
            Some(CertificateSeen::Gone { .. }) => {}
            Some(CertificateSeen::Unreadable { why, .. }) => {
                return Some(Foreign::CertManager(format!(
                    "it was issued by cert-manager's Certificate {name}, and whether that still exists is unknown: {why}"
                )));
            }
            Some(CertificateSeen::Present { .. }) | None => {
                return Some(Foreign::CertManager(format!(
                    "it is managed by cert-manager: Certificate {name} issues into it"
                )));
            }
        }
    }
    match s.labels.get(MANAGED_BY_LABEL) {
        Some(v) if v != MANAGED_BY && v != "cert-manager" => Some(Foreign::Other(format!(
            "it is managed by {v:?} (label {MANAGED_BY_LABEL})"
        ))),
        _ => None,
    }
}
