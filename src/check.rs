//! `certgen check`: expiry, trust and consistency of every Secret, like
//! `kubeadm certs check-expiration`.
//!
//! A pure function of what is stored (read through [`crate::observe`], parsed by its one
//! parser), the config and `now`. Unlike the planner it does not stop at the first problem: it
//! reports them all, each a typed [`Finding`] whose kind gives the Secret's status. It must not
//! read, write or decide what a run does; the report it returns is rendered by
//! [`crate::report`].

use std::fmt;

use time::OffsetDateTime;

use crate::config::Config;
use crate::observe::Snapshot;
use crate::observe::parse::{self, Field};
use crate::pki::Cert;
use crate::plan::{due, san_drift};
use crate::report::{BundleEntry, CheckReport, Row};
use crate::secret::{Divergence, Observed};

/// One problem `check` found with a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The CA Secret does not exist, while leaves need it.
    NoCa,
    /// The Secret does not exist.
    Missing,
    /// A data key is not there, or is empty.
    KeyMissing(String),
    /// A data key holds something unusable: not PEM, a key that does not match its
    /// certificate, a bundle against the rules.
    Unusable { key: String, problem: String },
    /// The CA Secret's `tls.crt` is not a CA certificate.
    NotCa { subject: String },
    /// The CA expires within its renewBefore, or has expired.
    CaDue(String),
    /// The certificate expires within its renewBefore, or has expired.
    Due(String),
    /// The certificate's SANs are not the config's.
    SanDrift(String),
    /// The certificate was issued by no CA the CA Secret holds.
    UnknownIssuer,
    /// The certificate was issued by a CA the CA Secret holds, not the active one.
    OtherIssuer,
    /// The bundles of these peers do not trust the certificate.
    Untrusted(Vec<String>),
    /// A staged rotation's pending CA (`next.crt`, `next.key`) a run cannot use: not a CA, a
    /// key missing or not matching. A run refuses it, or starts the rotation again with
    /// `--force`.
    PendingCa(String),
    /// An HMAC Secret without its key, or with an empty one.
    HmacKey(String),
    /// An HMAC key shorter than the profile asks for (the message says by how much).
    HmacShort(String),
    /// Local mode: a file consumers read is not the link into certgen's own copy.
    Divergent(Divergence),
    /// The TLS Secrets were written by another tool since certgen's last run: what they
    /// hold, and what the next run does about it (the planner's own reading).
    WrittenByAnotherTool { found: String, next: String },
}

impl Finding {
    /// Whether the Secret is missing (status `missing`).
    fn missing(&self) -> bool {
        matches!(self, Self::NoCa | Self::Missing)
    }

    /// Whether the Secret is unusable as stored (status `invalid`) rather than due for a run
    /// (status `due`).
    fn invalid(&self) -> bool {
        matches!(
            self,
            Self::Unusable { .. } | Self::PendingCa(_) | Self::Divergent(_) | Self::HmacShort(_)
        )
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCa => f.write_str(
                "no CA Secret: leaves cannot be renewed until certgen creates one (run certgen)",
            ),
            Self::Missing => f.write_str("missing: run certgen to create it"),
            Self::KeyMissing(key) => write!(f, "{key} is missing"),
            Self::Unusable { key, problem } => write!(f, "{key}: {problem}"),
            Self::NotCa { subject } => write!(f, "tls.crt ({subject}) is not a CA certificate"),
            Self::CaDue(why) => write!(f, "the CA {why}: run certgen to rotate it"),
            Self::Due(why) => write!(f, "the certificate {why}: run certgen to renew it"),
            Self::SanDrift(drift) => write!(f, "{drift}: run certgen to renew it"),
            Self::UnknownIssuer => f.write_str("issued by a CA certgen does not know"),
            Self::OtherIssuer => f.write_str("issued by a CA other than the active one"),
            Self::Untrusted(peers) => {
                write!(f, "not trusted by the bundle of {}", peers.join(", "))
            }
            Self::PendingCa(problem) => write!(
                f,
                "pending CA: {problem} (a run refuses it; run certgen --force to start the rotation again)"
            ),
            Self::HmacKey(key) => write!(f, "key {key:?} is missing or empty"),
            Self::HmacShort(why) => write!(f, "{why}: run certgen --rotate-hmac to replace it"),
            Self::Divergent(d) if d.repairable() => {
                write!(f, "{}: run certgen to restore it", d.describe())
            }
            Self::Divergent(d) => write!(
                f,
                "{}: certgen cannot tell which copy is meant; delete it to have certgen restore its own, or run certgen --force to replace it",
                d.describe()
            ),
            Self::WrittenByAnotherTool { found, next } => {
                write!(
                    f,
                    "written by another tool since certgen's last run: {found}; the next run: {next}"
                )
            }
        }
    }
}

/// One Secret being checked: its row, and what was found.
struct Checked {
    row: Row,
    findings: Vec<Finding>,
}

impl Checked {
    fn new(secret: &str, kind: &'static str) -> Self {
        Self {
            row: Row::new(secret, kind),
            findings: Vec::new(),
        }
    }

    fn unusable(&mut self, key: &str, problem: impl fmt::Display) {
        self.findings.push(Finding::Unusable {
            key: key.to_string(),
            problem: problem.to_string(),
        });
    }

    /// The row, its status following from the findings.
    fn finish(self) -> Row {
        let status = if self.findings.iter().any(Finding::missing) {
            "missing"
        } else if self.findings.iter().any(Finding::invalid) {
            "invalid"
        } else if !self.findings.is_empty() {
            "due"
        } else {
            "ok"
        };
        Row {
            status,
            problems: self.findings.iter().map(Finding::to_string).collect(),
            ..self.row
        }
    }
}

/// Checks every Secret of `config` as stored.
pub fn check(
    config: &Config,
    observed: &Snapshot,
    now: OffsetDateTime,
    store: String,
) -> CheckReport {
    let mut rows: Vec<Checked> = Vec::new();
    let mut rotation = None;
    // The one judge of what is valid: rustls-webpki at `now` (`pki::Verifier`).
    let verifier = crate::pki::Verifier::new(now);

    // The CA.
    let mut ca = Checked::new(&config.ca.secret_name, "ca");
    let mut active: Option<Cert> = None;
    let mut known_cas: Vec<Cert> = Vec::new();
    match observed.ca().present() {
        None if config.tls.is_empty() => {}
        None => ca.findings.push(Finding::NoCa),
        Some(s) => {
            let data = parse::ca(s);
            match data.cert {
                Field::Ok(cert) => {
                    if !cert.is_ca {
                        ca.findings.push(Finding::NotCa {
                            subject: cert.subject.clone(),
                        });
                    }
                    if let Field::Bad(p) = &data.key {
                        ca.unusable("tls.key", p);
                    }
                    if let Some(why) = due(&cert, config.ca.renew_before, now) {
                        ca.findings.push(Finding::CaDue(why));
                    }
                    if let Some(why) =
                        crate::plan::ca_refusal(config, &verifier, &cert).filter(|_| cert.is_ca)
                    {
                        ca.unusable(
                            "tls.crt",
                            format!("TLS verifiers would reject this CA: {why}"),
                        );
                    }
                    ca.row.issuer = Some(cert.short_fingerprint());
                    ca.row = ca.row.with_cert(&cert, now);
                    known_cas.push(cert.clone());
                    active = Some(cert);
                }
                Field::Bad(p) => ca.unusable("tls.crt", p),
                Field::Absent | Field::Empty | Field::Unchecked => {
                    ca.findings.push(Finding::KeyMissing("tls.crt".into()));
                }
            }
            match data.bundle {
                Field::Ok(b) => {
                    if let Some(e) = &b.broken {
                        ca.unusable("ca.crt", e);
                    }
                    ca.row.bundle = BundleEntry::list(&b.certs, now);
                    known_cas.extend(b.certs);
                }
                Field::Bad(p) => ca.unusable("ca.crt", p),
                Field::Absent | Field::Empty | Field::Unchecked => {}
            }
            // A staged rotation's pending CA, judged by the planner's own rules: a run refuses
            // what is reported here (or drops it with --force).
            match (data.next_cert, data.next_key) {
                (Field::Absent, Field::Absent) => {}
                (Field::Bad(p), _) => ca.unusable("next.crt", p),
                (cert, key) => match crate::plan::pending_ca(cert, key) {
                    Ok(p) => {
                        rotation = Some(format!(
                            "staged rotation in progress: pending CA {} (run certgen to finish it)",
                            p.cert.short_fingerprint()
                        ));
                        known_cas.push(p.cert);
                    }
                    Err(problem) => ca.findings.push(Finding::PendingCa(problem)),
                },
            }
        }
    }
    // Another writer since certgen's last run: the planner's reading of what the Secrets hold,
    // and what a plain run does next.
    let object = |name: &str| name.to_string();
    if let Ok(p) = crate::plan::plan(
        config,
        observed,
        now,
        crate::plan::Options::default(),
        crate::plan::Known::default(),
        &object,
    ) && let Some(found) = p.ca.derived.clone()
    {
        let next = match &p.phase {
            crate::plan::Phase::Gate { reason, .. } => format!("waits: {reason}"),
            phase => format!(
                "{} step: {} ({})",
                phase.name(),
                p.ca.action.name(),
                p.ca.reason
            ),
        };
        ca.findings
            .push(Finding::WrittenByAnotherTool { found, next });
    }
    rows.push(ca);

    // The leaves, then trust between them.
    let mut leaves: Vec<(usize, Cert, Vec<Cert>, crate::pki::Usages)> = Vec::new();
    for t in &config.tls {
        let mut r = Checked::new(&t.name, "tls");
        let Some(s) = observed.get(&t.name).present() else {
            r.findings.push(Finding::Missing);
            rows.push(r);
            continue;
        };
        let data = parse::leaf_in(s, &t.layout);
        let (crt, key, ca_crt) = (&t.layout.cert, &t.layout.key, &t.layout.bundle);
        let leaf = match data.cert {
            Field::Ok(cert) => Some(cert),
            Field::Bad(p) => {
                r.unusable(crt, p);
                None
            }
            Field::Absent | Field::Empty | Field::Unchecked => {
                r.findings.push(Finding::KeyMissing(crt.clone()));
                None
            }
        };
        let bundle = match data.bundle {
            Field::Ok(b) => {
                if let Some(e) = &b.broken {
                    r.unusable(ca_crt, e);
                }
                b.certs
            }
            Field::Bad(p) => {
                r.unusable(ca_crt, p);
                vec![]
            }
            Field::Absent | Field::Empty | Field::Unchecked => {
                r.findings.push(Finding::KeyMissing(ca_crt.clone()));
                vec![]
            }
        };
        r.row.bundle = BundleEntry::list(&bundle, now);
        if let Some(leaf) = leaf {
            match &data.key {
                Field::Ok(()) => {}
                Field::Bad(p) => r.unusable(key, p),
                Field::Absent | Field::Empty | Field::Unchecked => {
                    r.findings.push(Finding::KeyMissing(key.clone()));
                }
            }
            if let Some(why) = due(&leaf, t.renew_before, now) {
                r.findings.push(Finding::Due(why));
            }
            if let Some(drift) = san_drift(&leaf, t) {
                r.findings.push(Finding::SanDrift(drift));
            }
            r.row.issuer = known_cas
                .iter()
                .find(|ca| ca.signed(&leaf))
                .map(Cert::short_fingerprint);
            match (&active, &r.row.issuer) {
                (_, None) => r.findings.push(Finding::UnknownIssuer),
                (Some(a), Some(_)) if !a.signed(&leaf) => r.findings.push(Finding::OtherIssuer),
                _ => {}
            }
            r.row = r.row.with_cert(&leaf, now);
            leaves.push((rows.len(), leaf, bundle, t.leaf.usages));
        }
        rows.push(r);
    }
    // Each leaf against each distinct unexpired bundle CA once (the verifier's judgement, for
    // its Secret's usages), then every peer's bundle by fingerprint: N x CAs verifications,
    // not N x N (a thousand Secrets whose bundles hold the same CA would otherwise cost a
    // million).
    let mut bundle_cas: Vec<&Cert> = Vec::new();
    for ca in leaves.iter().flat_map(|(_, _, b, _)| b) {
        if !ca.is_expired_at(now)
            && !bundle_cas
                .iter()
                .any(|c| c.fingerprint() == ca.fingerprint())
        {
            bundle_cas.push(ca);
        }
    }
    for (index, leaf, _, usages) in &leaves {
        let signers: Vec<[u8; 32]> = bundle_cas
            .iter()
            .filter(|ca| {
                verifier
                    .verify(leaf, std::slice::from_ref(**ca), *usages)
                    .is_ok()
            })
            .map(|ca| ca.fingerprint())
            .collect();
        let rejecting: Vec<String> = leaves
            .iter()
            .filter(|(_, _, bundle, _)| {
                !bundle.iter().any(|ca| signers.contains(&ca.fingerprint()))
            })
            .map(|(peer, _, _, _)| rows[*peer].row.secret.clone())
            .collect();
        if !rejecting.is_empty() {
            rows[*index].findings.push(Finding::Untrusted(rejecting));
        }
    }

    for h in &config.hmac {
        let mut r = Checked::new(&h.name, "hmac");
        match observed.get(&h.name).present() {
            None => r.findings.push(Finding::Missing),
            Some(s) if parse::hmac(s, &h.key).missing() => {
                r.findings.push(Finding::HmacKey(h.key.clone()));
            }
            Some(s) => {
                if let Some(short) = parse::hmac_short(s, &h.key, h.bytes) {
                    r.findings.push(Finding::HmacShort(short));
                }
            }
        }
        rows.push(r);
    }

    // Local mode: judge what consumers read, not only certgen's own copy.
    for r in &mut rows {
        let stored = observed
            .named(&r.row.secret, &config.ca.secret_name)
            .and_then(Observed::present);
        for d in stored.into_iter().flat_map(|s| &s.divergent) {
            r.findings.push(Finding::Divergent(d.clone()));
        }
    }
    let rows = rows.into_iter().map(Checked::finish).collect();
    CheckReport::new(config, store, rotation, rows)
}

#[cfg(test)]
mod tests;
