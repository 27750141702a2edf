//! `certgen check`'s report: one row per Secret (expiry, issuer, trust bundle, status and
//! problems), as a table for people or as JSON.

use serde::Serialize;
use time::OffsetDateTime;

use super::NextRenewal;
use crate::config::Config;
use crate::pki::Cert;
use crate::timefmt::rfc3339;

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
    pub next_renewal: Option<NextRenewal>,
    /// The `caBundle` targets as read (in a cluster; filled in by the caller).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetRow>,
}

/// One `caBundle` target's state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetRow {
    /// `MutatingWebhookConfiguration`, `ValidatingWebhookConfiguration`, `APIService`.
    pub kind: String,
    pub name: String,
    /// The Secret whose `ca.crt` it follows.
    pub secret: String,
    /// `in_sync`, `drifted`, `absent`, `refused`, `cert_manager` (the metric's states).
    pub status: &'static str,
    /// What the table says of the status.
    #[serde(skip)]
    pub text: &'static str,
}

impl BundleEntry {
    /// The entries of a bundle, judged at `now`.
    pub fn list(certs: &[Cert], now: OffsetDateTime) -> Vec<Self> {
        certs
            .iter()
            .map(|c| Self {
                sha256: c.fingerprint_hex(),
                subject: c.subject.clone(),
                not_after: rfc3339(c.not_after),
                expired: c.is_expired_at(now),
            })
            .collect()
    }
}

impl Row {
    /// A row with nothing found yet.
    pub fn new(secret: &str, kind: &'static str) -> Self {
        Self {
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

    /// The row with the expiry of `cert`, seen at `now`.
    pub fn with_cert(mut self, cert: &Cert, now: OffsetDateTime) -> Self {
        self.not_after = Some(rfc3339(cert.not_after));
        self.residual_seconds = Some((cert.not_after - now).whole_seconds());
        self
    }
}

impl CheckReport {
    /// The report of `rows`: healthy when nothing is found and no rotation is in progress,
    /// with the next renewal due among the certificates checked.
    pub fn new(config: &Config, store: String, rotation: Option<String>, rows: Vec<Row>) -> Self {
        let healthy = rotation.is_none() && rows.iter().all(|r| r.problems.is_empty());
        let next_renewal = super::next_renewal(
            config,
            rows.iter()
                .filter_map(|r| Some((r.secret.as_str(), r.not_after.as_deref()?))),
        );
        Self {
            api_version: "certgen/v1",
            kind: "CheckReport",
            profile: config.profile.clone(),
            store,
            healthy,
            rotation,
            secrets: rows,
            next_renewal,
            targets: Vec::new(),
        }
    }
}

impl CheckReport {
    /// The report with `problems` found outside the certificates (local mode: private keys
    /// others can read), each on its Secret's row: such a row is `invalid`, the whole unhealthy.
    pub fn with_problems(mut self, problems: Vec<(String, String)>) -> Self {
        for (secret, problem) in problems {
            if let Some(row) = self.secrets.iter_mut().find(|r| r.secret == secret) {
                if !row.problems.contains(&problem) {
                    row.problems.push(problem);
                }
                if row.status == "ok" || row.status == "due" {
                    row.status = "invalid";
                }
                self.healthy = false;
            }
        }
        self
    }
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
        if !self.targets.is_empty() {
            out.push_str("\nCABUNDLE TARGETS\n");
            for t in &self.targets {
                out.push_str(&format!(
                    "  {} {} (follows {}): {}\n",
                    t.kind, t.name, t.secret, t.text
                ));
            }
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
