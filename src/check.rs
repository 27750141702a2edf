//! `certgen check`: expiry, trust and consistency of every Secret, like
//! `kubeadm certs check-expiration`. A pure function of what is stored, the config and `now`;
//! unlike the planner it does not stop at the first problem, it reports them all.

use serde::Serialize;
use time::OffsetDateTime;

use crate::config::Config;
use crate::pki::{CaKey, Cert, check_bundle, parse_cert_chain, parse_single_cert};
use crate::plan::{ObservedState, due, san_drift};
use crate::report::rfc3339;
use crate::store::{Observed, StoredSecret};

/// One CA in a bundle.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleEntry {
    pub sha256: String,
    pub subject: String,
    pub not_after: String,
    pub expired: bool,
}

/// One Secret's health.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub secret: String,
    pub kind: &'static str,
    /// ok, due, missing, invalid.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residual_seconds: Option<i64>,
    /// Short SHA-256 of the CA that issued the certificate (the CA's own, for the CA Secret).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bundle: Vec<BundleEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// The whole check.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub profile: String,
    pub store: String,
    pub healthy: bool,
    /// A staged rotation in progress, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotation: Option<String>,
    pub secrets: Vec<Row>,
    /// When certgen must run again at the latest (filled in by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_renewal: Option<crate::report::NextRenewal>,
}

impl CheckReport {
    /// The next renewal due among the certificates checked.
    pub fn with_next_renewal(mut self, config: &Config) -> Self {
        self.next_renewal = crate::report::next_renewal(
            config,
            self.secrets
                .iter()
                .filter_map(|r| Some((r.secret.as_str(), r.not_after.as_deref()?))),
        );
        self
    }
}

fn row(secret: &str, kind: &'static str) -> Row {
    Row {
        secret: secret.into(),
        kind,
        status: "ok",
        not_after: None,
        residual_seconds: None,
        issuer: None,
        bundle: vec![],
        problems: vec![],
    }
}

fn with_cert(mut r: Row, cert: &Cert, now: OffsetDateTime) -> Row {
    r.not_after = Some(rfc3339(cert.not_after));
    r.residual_seconds = Some((cert.not_after - now).whole_seconds());
    r
}

fn bundle_entries(certs: &[Cert], now: OffsetDateTime) -> Vec<BundleEntry> {
    certs
        .iter()
        .map(|c| BundleEntry {
            sha256: c.fingerprint_hex(),
            subject: c.subject.clone(),
            not_after: rfc3339(c.not_after),
            expired: c.is_expired_at(now),
        })
        .collect()
}

fn data<'a>(s: &'a StoredSecret, key: &str) -> Option<&'a [u8]> {
    s.data.get(key).map(Vec::as_slice).filter(|v| !v.is_empty())
}

/// Checks every Secret of `config` as stored.
pub fn check(
    config: &Config,
    observed: &ObservedState,
    now: OffsetDateTime,
    store: String,
) -> CheckReport {
    let mut rows = Vec::new();
    let mut rotation = None;

    // The CA.
    let mut ca_row = row(&config.ca.secret_name, "ca");
    let mut active: Option<Cert> = None;
    let mut known_cas: Vec<Cert> = Vec::new();
    match observed.ca.as_ref().and_then(Observed::present) {
        None if config.tls.is_empty() => {}
        None => {
            ca_row.status = "missing";
            ca_row.problems.push(
                "no CA Secret: leaves cannot be renewed until certgen creates one (run certgen)"
                    .into(),
            );
        }
        Some(s) => {
            match data(s, "tls.crt").map(parse_single_cert) {
                Some(Ok(cert)) => {
                    if !cert.is_ca {
                        ca_row.problems.push(format!(
                            "tls.crt ({}) is not a CA certificate",
                            cert.subject
                        ));
                    }
                    if let Some(key) = data(s, "tls.key")
                        && let Err(e) = CaKey::from_pem(cert.clone(), key)
                    {
                        ca_row.problems.push(format!("tls.key: {e}"));
                    }
                    if let Some(why) = due(&cert, config.ca.renew_before, now) {
                        ca_row
                            .problems
                            .push(format!("the CA {why}: run certgen to rotate it"));
                    }
                    ca_row.issuer = Some(cert.short_fingerprint());
                    ca_row = with_cert(ca_row, &cert, now);
                    known_cas.push(cert.clone());
                    active = Some(cert);
                }
                Some(Err(e)) => ca_row.problems.push(format!("tls.crt: {e}")),
                None => ca_row.problems.push("tls.crt is missing".into()),
            }
            if let Some(b) = data(s, "ca.crt") {
                match parse_cert_chain(b) {
                    Ok(certs) => {
                        if let Err(e) = check_bundle(&certs) {
                            ca_row.problems.push(format!("ca.crt: {e}"));
                        }
                        ca_row.bundle = bundle_entries(&certs, now);
                        known_cas.extend(certs);
                    }
                    Err(e) => ca_row.problems.push(format!("ca.crt: {e}")),
                }
            }
            if let Some(next) = data(s, "next.crt") {
                match parse_single_cert(next) {
                    Ok(p) => {
                        rotation = Some(format!(
                            "staged rotation in progress: pending CA {} (run certgen to finish it)",
                            p.short_fingerprint()
                        ));
                        known_cas.push(p);
                    }
                    Err(e) => ca_row.problems.push(format!("next.crt: {e}")),
                }
            }
        }
    }
    rows.push(ca_row);

    // The leaves, then trust between them.
    let mut leaves: Vec<(String, Cert, Vec<Cert>)> = Vec::new();
    for t in &config.tls {
        let mut r = row(&t.name, "tls");
        match observed.secrets.get(&t.name).and_then(Observed::present) {
            None => {
                r.status = "missing";
                r.problems.push("missing: run certgen to create it".into());
            }
            Some(s) => {
                let leaf = match data(s, "tls.crt").map(parse_cert_chain) {
                    Some(Ok(mut chain)) => Some(chain.remove(0)),
                    Some(Err(e)) => {
                        r.problems.push(format!("tls.crt: {e}"));
                        None
                    }
                    None => {
                        r.problems.push("tls.crt is missing".into());
                        None
                    }
                };
                let bundle = match data(s, "ca.crt").map(parse_cert_chain) {
                    Some(Ok(b)) => b,
                    Some(Err(e)) => {
                        r.problems.push(format!("ca.crt: {e}"));
                        vec![]
                    }
                    None => {
                        r.problems.push("ca.crt is missing".into());
                        vec![]
                    }
                };
                if let Err(e) = check_bundle(&bundle) {
                    r.problems.push(format!("ca.crt: {e}"));
                }
                r.bundle = bundle_entries(&bundle, now);
                if let Some(leaf) = leaf {
                    match data(s, "tls.key").map(|k| crate::pki::load_signing_key(&leaf, k)) {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => r.problems.push(format!("tls.key: {e}")),
                        None => r.problems.push("tls.key is missing".into()),
                    }
                    if let Some(why) = due(&leaf, t.renew_before, now) {
                        r.problems
                            .push(format!("the certificate {why}: run certgen to renew it"));
                    }
                    if let Some(drift) = san_drift(&leaf, t) {
                        r.problems.push(format!("{drift}: run certgen to renew it"));
                    }
                    r.issuer = known_cas
                        .iter()
                        .find(|ca| ca.signed(&leaf))
                        .map(Cert::short_fingerprint);
                    match (&active, &r.issuer) {
                        (_, None) => r
                            .problems
                            .push("issued by a CA certgen does not know".into()),
                        (Some(a), Some(_)) if !a.signed(&leaf) => r
                            .problems
                            .push("issued by a CA other than the active one".into()),
                        _ => {}
                    }
                    r = with_cert(r, &leaf, now);
                    leaves.push((t.name.clone(), leaf, bundle));
                }
            }
        }
        rows.push(r);
    }
    for (name, leaf, _) in &leaves {
        let rejecting: Vec<&str> = leaves
            .iter()
            .filter(|(_, _, bundle)| {
                !bundle
                    .iter()
                    .any(|ca| !ca.is_expired_at(now) && ca.signed(leaf))
            })
            .map(|(peer, _, _)| peer.as_str())
            .collect();
        if !rejecting.is_empty() {
            let r = rows
                .iter_mut()
                .find(|r| &r.secret == name)
                .expect("a row per leaf");
            r.problems.push(format!(
                "not trusted by the bundle of {}",
                rejecting.join(", ")
            ));
        }
    }

    for h in &config.hmac {
        let mut r = row(&h.name, "hmac");
        match observed.secrets.get(&h.name).and_then(Observed::present) {
            None => {
                r.status = "missing";
                r.problems.push("missing: run certgen to create it".into());
            }
            Some(s) if data(s, &h.key).is_none() => r
                .problems
                .push(format!("key {:?} is missing or empty", h.key)),
            Some(_) => {}
        }
        rows.push(r);
    }

    // Local mode: judge what consumers read, not only certgen's own copy.
    for r in &mut rows {
        let stored = if r.secret == config.ca.secret_name {
            observed.ca.as_ref()
        } else {
            observed.secrets.get(&r.secret)
        };
        for d in stored
            .and_then(Observed::present)
            .into_iter()
            .flat_map(|s| &s.divergent)
        {
            r.problems.push(if d.repairable() {
                format!("{}: run certgen to restore it", d.describe())
            } else {
                format!(
                    "{}: certgen cannot tell which copy is meant; delete it to have certgen restore its own, or run certgen --force to replace it",
                    d.describe()
                )
            });
            if r.status == "ok" {
                r.status = "invalid";
            }
        }
    }
    for r in &mut rows {
        if r.status == "ok" && !r.problems.is_empty() {
            let invalid = r.problems.iter().any(|p| {
                p.contains(':')
                    && (p.starts_with("tls.") || p.starts_with("ca.crt") || p.starts_with("next."))
            });
            r.status = if invalid { "invalid" } else { "due" };
        }
    }
    let healthy = rotation.is_none() && rows.iter().all(|r| r.problems.is_empty());
    CheckReport {
        api_version: "certgen/v1",
        kind: "CheckReport",
        profile: config.profile.clone(),
        store,
        healthy,
        rotation,
        secrets: rows,
        next_renewal: None,
    }
    .with_next_renewal(config)
}

fn residual(seconds: i64) -> String {
    if seconds <= 0 {
        return "expired".into();
    }
    let days = seconds / 86_400;
    if days >= 1 {
        format!("{days}d")
    } else {
        format!("{}h", seconds / 3_600)
    }
}

impl CheckReport {
    /// The table for people.
    pub fn to_text(&self) -> String {
        let width = self
            .secrets
            .iter()
            .map(|r| r.secret.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let mut out = format!(
            "certgen check: profile {}, {}\n\n",
            self.profile, self.store
        );
        out.push_str(&format!(
            "{:<width$}  {:<4}  {:<20}  {:<8}  {:<16}  {}\n",
            "SECRET", "KIND", "EXPIRES", "RESIDUAL", "ISSUER", "STATUS"
        ));
        for r in &self.secrets {
            let expires = r
                .not_after
                .as_deref()
                .map(|t| t.get(..16).unwrap_or(t).replace('T', " "))
                .unwrap_or_else(|| "-".into());
            out.push_str(&format!(
                "{:<width$}  {:<4}  {:<20}  {:<8}  {:<16}  {}\n",
                r.secret,
                r.kind,
                expires,
                r.residual_seconds
                    .map(residual)
                    .unwrap_or_else(|| "-".into()),
                r.issuer.as_deref().unwrap_or("-"),
                r.status
            ));
        }
        out.push_str("\nTRUST BUNDLES\n");
        for r in self.secrets.iter().filter(|r| !r.bundle.is_empty()) {
            let cas: Vec<String> = r
                .bundle
                .iter()
                .map(|b| {
                    format!(
                        "{} (until {}{})",
                        &b.sha256[..16],
                        b.not_after.get(..10).unwrap_or(&b.not_after),
                        if b.expired { ", EXPIRED" } else { "" }
                    )
                })
                .collect();
            out.push_str(&format!("  {:<width$}  {}\n", r.secret, cas.join(", ")));
        }
        if let Some(rot) = &self.rotation {
            out.push_str(&format!("\nROTATION: {rot}\n"));
        }
        let problems: Vec<String> = self
            .secrets
            .iter()
            .flat_map(|r| {
                r.problems
                    .iter()
                    .map(move |p| format!("  {}: {p}", r.secret))
            })
            .collect();
        if problems.is_empty() && self.healthy {
            out.push_str("\nHealthy: nothing is due.\n");
        } else {
            out.push_str("\nACTION DUE\n");
            out.push_str(&problems.join("\n"));
            out.push('\n');
        }
        if let Some(next) = &self.next_renewal {
            out.push('\n');
            out.push_str(&next.to_text());
        }
        out
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes") + "\n"
    }
}
