//! Valid is what a TLS verifier says: whether a leaf is accepted by a bundle at an instant, for
//! the usages its Secret is configured with, decided by rustls-webpki (the path verifier rustls
//! uses; aws-lc-rs, the binary's one crypto backend), never by certgen's own reading of dates or
//! names.
//!
//! One judgement, called by the planner (what is due, which CAs are usable), by the check
//! before every step's writes (`plan::step_check`), by `certgen check` (and so the metrics and
//! the exporter, which render its findings) and by the simulation's oracle.
//!
//! What webpki decides: the leaf's signature by a bundle CA, the leaf's validity window
//! (`notBefore` and `notAfter`) at the instant given, its basicConstraints (a CA certificate is
//! no leaf), its extendedKeyUsage for each configured usage (server: serverAuth, client:
//! clientAuth), unknown critical extensions in the leaf and in a CA certificate (its strict
//! parser), and the CA's nameConstraints against the names the leaf presents (dNSName and
//! iPAddress subtrees, permitted and excluded; any directoryName or URI constraint rejects,
//! as webpki does not implement them).
//!
//! What webpki does not judge, and the small rules added here for it, because the peers that
//! matter do (OpenSSL and BoringSSL in Envoy, Go's crypto/x509 in Envoy Gateway and the
//! rate-limit service):
//!
//! - a trust anchor's own fields: webpki takes a bundle CA as a subject, a key and its name
//!   constraints, so its validity, keyUsage, extendedKeyUsage and basicConstraints are checked
//!   here ([`anchor_problem`]): a CA is usable only while it is valid, if it is a CA
//!   certificate, if a keyUsage it carries includes keyCertSign (OpenSSL: "key usage does not
//!   include certificate signing") and if an extendedKeyUsage it carries includes each usage
//!   the leaf needs (Go and OpenSSL apply a CA's extendedKeyUsage to the chain);
//! - a CA's name constraints against the configured names before any leaf of it exists: webpki
//!   judges them on a probe leaf with those names, issued by a throwaway issuer that carries the
//!   CA's own constraints ([`Verifier::name_constraints`]);
//! - keyUsage of a leaf (webpki ignores it): certgen's leaves always carry digitalSignature.
//!
//! What no verifier here can know: what a consumer has actually loaded (that is the gates'
//! job), the clock a consumer reads (the store's is taken as everyone's), revocation, and the
//! host name a client dials (a leaf is checked against the configured names, not the
//! addresses peers use).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Duration;

use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};
use time::OffsetDateTime;
use webpki::{EndEntityCert, ExtendedKeyUsageValidator, KeyPurposeIdIter, KeyUsage};

use super::{CaKey, CaSpec, Cert, KeyAlgorithm, LeafSpec, Usages, issue_ca, issue_leaf};

/// Why a verifier rejects a leaf against a bundle, or a CA as a trust anchor: text for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(pub String);

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn unix(at: OffsetDateTime) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(at.unix_timestamp().max(0) as u64))
}

fn when(at: OffsetDateTime) -> String {
    crate::timefmt::rfc3339(at)
}

fn usage_names(u: Usages) -> String {
    match (u.server, u.client) {
        (true, true) => "serverAuth and clientAuth".into(),
        (true, false) => "serverAuth".into(),
        (false, true) => "clientAuth".into(),
        (false, false) => "no usage".into(),
    }
}

/// Why `ca` cannot be a trust anchor for leaves with `usages` at `at`, if it cannot: the rules
/// webpki does not apply to an anchor (see the module's documentation), and webpki's own
/// strict parser for unknown critical extensions.
pub fn anchor_problem(ca: &Cert, usages: Usages, at: OffsetDateTime) -> Option<String> {
    if let Some(p) = ca_shape_problem(ca, usages) {
        return Some(p);
    }
    if at < ca.not_before {
        return Some(format!("not valid before {}", when(ca.not_before)));
    }
    if ca.is_expired_at(at) {
        return Some(format!("expired at {}", when(ca.not_after)));
    }
    None
}

/// [`anchor_problem`] without the validity window: what makes a CA unusable at any instant.
pub fn ca_shape_problem(ca: &Cert, usages: Usages) -> Option<String> {
    if !ca.is_ca {
        return Some("not a CA certificate (basicConstraints CA:FALSE or absent)".into());
    }
    if ca.key_cert_sign == Some(false) {
        return Some(
            "its keyUsage does not include keyCertSign: verifiers refuse what it signs (OpenSSL: \"key usage does not include certificate signing\")".into(),
        );
    }
    let der = CertificateDer::from(ca.der());
    if let Err(e) = EndEntityCert::try_from(&der) {
        return Some(match e {
            webpki::Error::UnsupportedCriticalExtension => {
                "it carries a critical extension TLS verifiers do not know (OpenSSL: \"unhandled critical extension\")".into()
            }
            other => format!("a TLS verifier cannot parse it: {other}"),
        });
    }
    if let Some(eku) = ca.eku
        && !eku.any
        && ((usages.server && !eku.server) || (usages.client && !eku.client))
    {
        let has = Usages {
            server: eku.server,
            client: eku.client,
        };
        return Some(format!(
            "its extendedKeyUsage allows {} only, and leaves need {}: Go and OpenSSL refuse a chain through it",
            usage_names(has),
            usage_names(usages)
        ));
    }
    None
}

/// Why a verifier would reject `leaf` as a leaf for `usages` whatever its CA, if it would: a
/// CA certificate, a critical extension webpki does not know, or an extendedKeyUsage without
/// a configured usage.
pub fn leaf_shape_problem(leaf: &Cert, usages: Usages) -> Option<String> {
    if leaf.is_ca {
        return Some("a TLS verifier rejects it: it is a CA certificate, not a leaf".into());
    }
    let der = CertificateDer::from(leaf.der());
    if let Err(e) = EndEntityCert::try_from(&der) {
        return Some(format!(
            "a TLS verifier rejects it: {}",
            reason(&e, leaf, usages)
        ));
    }
    if let Some(eku) = leaf.eku {
        let missing = Usages {
            server: usages.server && !eku.server,
            client: usages.client && !eku.client,
        };
        if missing.server || missing.client {
            return Some(format!(
                "a TLS verifier rejects it: its extendedKeyUsage lacks {} (usages changed in the config)",
                usage_names(missing)
            ));
        }
    }
    None
}

/// The extendedKeyUsage rule for a leaf: every configured usage present, when the leaf carries
/// the extension at all (RFC 5280; webpki's own rule, for several usages at once).
struct AllOf(Usages);

impl ExtendedKeyUsageValidator for AllOf {
    fn validate(&self, iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let mut present: Vec<Vec<usize>> = Vec::new();
        for id in iter {
            present.push(id?.to_decoded_oid());
        }
        if present.is_empty() {
            return Ok(());
        }
        let has = |repr: &[usize]| present.iter().any(|p| p == repr);
        let wanted = [
            (
                self.0.server,
                KeyUsage::server_auth(),
                KeyUsage::SERVER_AUTH_REPR,
            ),
            (
                self.0.client,
                KeyUsage::client_auth(),
                KeyUsage::CLIENT_AUTH_REPR,
            ),
        ];
        for (want, required, repr) in wanted {
            if want && !has(repr) {
                return Err(webpki::Error::RequiredEkuNotFoundContext(
                    webpki::RequiredEkuNotFoundContext { required, present },
                ));
            }
        }
        Ok(())
    }
}

/// People's words for webpki's verdict on a leaf.
fn reason(e: &webpki::Error, leaf: &Cert, usages: Usages) -> String {
    use webpki::Error as E;
    match e {
        E::CertNotValidYet { .. } => {
            format!("the leaf is not valid before {}", when(leaf.not_before))
        }
        E::CertExpired { .. } => format!("the leaf expired at {}", when(leaf.not_after)),
        E::UnknownIssuer | E::InvalidSignatureForPublicKey => format!(
            "unknown authority: no CA in the bundle signed it (its issuer is {})",
            leaf.issuer
        ),
        E::NameConstraintViolation => {
            "its CA's nameConstraints exclude a name the leaf presents".into()
        }
        E::RequiredEkuNotFoundContext(_) => {
            let eku = leaf.eku.unwrap_or(super::cert::Eku {
                any: false,
                server: false,
                client: false,
            });
            let missing = Usages {
                server: usages.server && !eku.server,
                client: usages.client && !eku.client,
            };
            format!(
                "its extendedKeyUsage lacks {} (its Secret is configured for {})",
                usage_names(missing),
                usage_names(usages)
            )
        }
        E::UnsupportedCriticalExtension => {
            "the leaf carries a critical extension TLS verifiers do not know".into()
        }
        E::CaUsedAsEndEntity => "the leaf is a CA certificate".into(),
        other => format!("rejected by the verifier: {other}"),
    }
}

/// Key of a cached verdict: the leaf, the bundle's CAs, the usages.
type PairKey = ([u8; 32], Vec<[u8; 32]>, bool, bool);

/// Key of a cached anchor verdict: the CA, and whether it must serve clients and servers.
type AnchorKey = ([u8; 32], bool, bool);

/// Key of a cached name-constraint verdict: the CA and the leaf's names.
type ConstraintKey = ([u8; 32], Vec<String>);

/// The verifier with its verdicts remembered by content (a thousand Secrets holding the same
/// bundle are judged once per distinct leaf and bundle). One per plan or check: the instant is
/// fixed.
pub struct Verifier {
    at: OffsetDateTime,
    pairs: RefCell<HashMap<PairKey, Result<(), Rejection>>>,
    anchors: RefCell<HashMap<AnchorKey, Option<String>>>,
    constraints: RefCell<HashMap<ConstraintKey, Option<String>>>,
    /// How many leaf verifications webpki ran (for the benchmark and tests).
    pub verifications: std::cell::Cell<usize>,
}

impl Verifier {
    /// A verifier judging at `at` (the store's now).
    pub fn new(at: OffsetDateTime) -> Self {
        Self {
            at,
            pairs: RefCell::default(),
            anchors: RefCell::default(),
            constraints: RefCell::default(),
            verifications: 0.into(),
        }
    }

    /// The instant it judges at.
    pub fn at(&self) -> OffsetDateTime {
        self.at
    }

    /// [`anchor_problem`] at this verifier's instant, remembered.
    pub fn anchor(&self, ca: &Cert, usages: Usages) -> Option<String> {
        let key = (ca.fingerprint(), usages.server, usages.client);
        if let Some(v) = self.anchors.borrow().get(&key) {
            return v.clone();
        }
        let v = anchor_problem(ca, usages, self.at);
        self.anchors.borrow_mut().insert(key, v.clone());
        v
    }

    /// Whether `leaf` is accepted by a peer holding `bundle`, for every usage in `usages`.
    pub fn verify(&self, leaf: &Cert, bundle: &[Cert], usages: Usages) -> Result<(), Rejection> {
        let key = (
            leaf.fingerprint(),
            bundle.iter().map(Cert::fingerprint).collect(),
            usages.server,
            usages.client,
        );
        if let Some(v) = self.pairs.borrow().get(&key) {
            return v.clone();
        }
        let v = self.verify_uncached(leaf, bundle, usages);
        self.pairs.borrow_mut().insert(key, v.clone());
        v
    }

    fn verify_uncached(
        &self,
        leaf: &Cert,
        bundle: &[Cert],
        usages: Usages,
    ) -> Result<(), Rejection> {
        if bundle.is_empty() {
            return Err(Rejection("the bundle is empty".into()));
        }
        let usable: Vec<&Cert> = bundle
            .iter()
            .filter(|c| self.anchor(c, usages).is_none())
            .collect();
        let ders: Vec<CertificateDer<'_>> = usable
            .iter()
            .map(|c| CertificateDer::from(c.der()))
            .collect();
        let anchors: Vec<TrustAnchor<'_>> = ders
            .iter()
            .filter_map(|d| webpki::anchor_from_trusted_cert(d).ok())
            .collect();
        let leaf_der = CertificateDer::from(leaf.der());
        let ee =
            EndEntityCert::try_from(&leaf_der).map_err(|e| Rejection(reason(&e, leaf, usages)))?;
        // Expired from its notAfter's second on, as everywhere in certgen (webpki from the
        // second after): one boundary for every judgement.
        if leaf.is_expired_at(self.at) {
            return Err(Rejection(format!(
                "the leaf expired at {}",
                when(leaf.not_after)
            )));
        }
        self.verifications.set(self.verifications.get() + 1);
        let verdict = ee.verify_for_usage(
            &super::memo::ALGS,
            &anchors,
            &[],
            unix(self.at),
            AllOf(usages),
            None,
            None,
        );
        match verdict {
            Ok(_) => Ok(()),
            Err(e) => Err(Rejection(self.diagnose(leaf, bundle, usages, &e))),
        }
    }

    /// Why a rejected leaf was rejected: a bundle CA that signed it but cannot be an anchor
    /// says so first (webpki only saw the usable ones).
    fn diagnose(&self, leaf: &Cert, bundle: &[Cert], usages: Usages, e: &webpki::Error) -> String {
        if matches!(
            e,
            webpki::Error::UnknownIssuer | webpki::Error::InvalidSignatureForPublicKey
        ) && let Some((ca, why)) = bundle
            .iter()
            .filter(|c| c.signed(leaf))
            .find_map(|c| self.anchor(c, usages).map(|w| (c, w)))
        {
            return format!("its CA {} is unusable: {why}", ca.short_fingerprint());
        }
        reason(e, leaf, usages)
    }

    /// Why `ca`'s nameConstraints exclude a leaf with these names, if they do: judged by webpki
    /// on a probe leaf carrying the names, issued by a throwaway issuer that carries `ca`'s own
    /// constraints (certgen need not hold `ca`'s key to know).
    pub fn name_constraints(
        &self,
        ca: &Cert,
        dns_names: &[String],
        ip_addresses: &[IpAddr],
    ) -> Option<String> {
        let der = CertificateDer::from(ca.der());
        let nc = webpki::anchor_from_trusted_cert(&der)
            .ok()?
            .name_constraints
            .map(|n| n.as_ref().to_vec())?;
        let mut names: Vec<String> = dns_names.to_vec();
        names.extend(ip_addresses.iter().map(IpAddr::to_string));
        let key = (ca.fingerprint(), names.clone());
        if let Some(v) = self.constraints.borrow().get(&key) {
            return v.clone();
        }
        let excluded = |dns: &[String], ips: &[IpAddr]| probe_rejects(&nc, dns, ips);
        let v = excluded(dns_names, ip_addresses).then(|| {
            // Name the first name the constraints exclude.
            let culprit = dns_names
                .iter()
                .find(|d| excluded(std::slice::from_ref(*d), &[]))
                .cloned()
                .or_else(|| {
                    ip_addresses
                        .iter()
                        .find(|i| excluded(&[], std::slice::from_ref(*i)))
                        .map(IpAddr::to_string)
                });
            match culprit {
                Some(name) => format!(
                    "its nameConstraints exclude {name}, a name its leaves must carry (OpenSSL: \"permitted subtree violation\" or \"excluded subtree violation\")"
                ),
                None => "its nameConstraints exclude the names its leaves must carry".into(),
            }
        });
        self.constraints.borrow_mut().insert(key, v.clone());
        v
    }
}

/// The throwaway issuer of name-constraint probes: made once per process.
fn probe_issuer() -> &'static CaKey {
    static PROBE: OnceLock<CaKey> = OnceLock::new();
    PROBE.get_or_init(|| {
        let spec = CaSpec {
            common_name: "certgen name-constraint probe".into(),
            validity: Duration::from_secs(86_400),
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        issue_ca(&spec, PROBE_AT)
            .expect("a P-256 CA can always be issued")
            .0
    })
}

/// When probes are issued and judged: name constraints do not depend on time.
const PROBE_AT: OffsetDateTime = time::macros::datetime!(2026-01-01 00:00 UTC);

/// Whether webpki rejects a leaf with these names under an anchor with constraints `nc` (the
/// DER of a NameConstraints' contents, as webpki extracts it).
fn probe_rejects(nc: &[u8], dns_names: &[String], ip_addresses: &[IpAddr]) -> bool {
    let issuer = probe_issuer();
    let spec = LeafSpec {
        common_name: "probe".into(),
        dns_names: dns_names.to_vec(),
        ip_addresses: ip_addresses.to_vec(),
        usages: Usages::default(),
        validity: Duration::from_secs(3600),
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    let Ok(leaf) = issue_leaf(&spec, issuer, PROBE_AT) else {
        return true;
    };
    let issuer_der = CertificateDer::from(issuer.cert.der());
    let Ok(mut anchor) = webpki::anchor_from_trusted_cert(&issuer_der) else {
        return true;
    };
    anchor.name_constraints = Some(nc.to_vec().into());
    let leaf_der = CertificateDer::from(leaf.cert.der());
    let Ok(ee) = EndEntityCert::try_from(&leaf_der) else {
        return true;
    };
    ee.verify_for_usage(
        &super::memo::ALGS,
        &[anchor],
        &[],
        unix(PROBE_AT + time::Duration::minutes(1)),
        AllOf(Usages::default()),
        None,
        None,
    )
    .is_err()
}
