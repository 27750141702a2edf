//! `certgen check`'s report: one row per Secret (expiry, issuer, trust bundle, status and
//! problems), one per `caBundle` target, and what a plain run would do next (the verdict), as
//! a table for people or as JSON.

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
    /// What was found about a state the next run keeps as it is (another tool's CA, adopted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One `caBundle` target's state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetRow {
    /// `MutatingWebhookConfiguration`, `ValidatingWebhookConfiguration`, `APIService`.
    pub kind: String,
    pub name: String,
    /// The Secret whose `ca.crt` its `caBundle` follows.
    pub secret: String,
    /// `in_sync`, `drifted`, `absent`, `refused`, `cert_manager` (the metric's states).
    pub status: &'static str,
    /// What the table says of the status.
    #[serde(skip)]
    pub text: &'static str,
    /// For a target cert-manager's CA injector writes, during a staged rotation: that its
    /// `caBundle` does not hold the pending CA yet, what a run's trust gate waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_missing: Option<String>,
}

/// One write a plain run would make: the object, the planner's action and its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWrite {
    /// The Secret, a local file, or `Kind name` of a `caBundle` target.
    pub object: String,
    /// create, renew, update-bundle, rotate, trust, promote, repair, chmod.
    pub action: String,
    pub reason: String,
}

/// What a plain run (no flags) would do with what `check` read: the planner's answer. `check`
/// is healthy exactly when it is [`NextRun::Nothing`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum NextRun {
    /// Nothing to write, nothing to wait for, nothing refused.
    Nothing,
    /// Writes these objects in its first step.
    Writes { writes: Vec<PlannedWrite> },
    /// A rotation in progress: waits until `until` (RFC 3339) for consumers to load the last
    /// writes, then writes its next step.
    Waits { until: String, reason: String },
    /// Stops before writing anything (exit 2): the object and the planner's message.
    Refuses { object: String, message: String },
}

impl NextRun {
    /// One line for people.
    pub fn to_text(&self) -> String {
        match self {
            Self::Nothing => "nothing to do".into(),
            Self::Writes { writes } => {
                let each: Vec<String> = writes
                    .iter()
                    .map(|w| format!("{} {} ({})", w.action, w.object, w.reason))
                    .collect();
                format!("writes: {}", each.join("; "))
            }
            Self::Waits { until, reason } => format!("waits until {until}: {reason}"),
            Self::Refuses { object, message } => format!("refuses: {object}: {message}"),
        }
    }
}

/// The whole check.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub profile: String,
    pub store: String,
    /// Whether a plain run would write nothing, wait for nothing and refuse nothing.
    pub healthy: bool,
    /// A staged rotation in progress, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotation: Option<String>,
    /// What a plain run would do next.
    pub next_run: NextRun,
    pub secrets: Vec<Row>,
    /// The `caBundle` targets, when they were read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ca_bundle_targets: Vec<TargetRow>,
    /// When certgen must run again at the latest (filled in by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_renewal: Option<NextRenewal>,
    /// The renewal windows: the next one, and what waits for it (issue 45).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal_window: Option<super::WindowReport>,
    /// The objects whose fields certgen owns were last written by another field manager, and
    /// the fights (issue 45).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_writers: Vec<WriterRow>,
}

/// One object whose fields certgen owns were last written by another field manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriterRow {
    /// `Secret`, `MutatingWebhookConfiguration`, ...
    pub kind: String,
    pub name: String,
    /// The field manager (`kustomize-controller`, `argocd-controller`, `cainjector`).
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// When it wrote (RFC 3339), as the API server recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The fields of certgen's it holds or removed (`data/ca.crt`).
    pub fields: Vec<String>,
    pub removed: bool,
    /// `overwrote`, `before_adoption` or `cainjector`.
    pub origin: &'static str,
    /// A fight: it undid certgen's writes at these times (two or more within 24h).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fight: Vec<String>,
    /// The line for people.
    pub text: String,
}

impl WriterRow {
    /// The row of `w`.
    pub fn of(w: &crate::attribution::Writer) -> Self {
        Self {
            kind: w.kind.clone(),
            name: w.name.clone(),
            manager: w.write.manager.clone(),
            operation: w.write.operation.clone(),
            time: w.write.time.map(rfc3339),
            fields: w.write.fields.clone(),
            removed: w.write.removed,
            origin: w.write.origin.name(),
            fight: w
                .fight
                .iter()
                .flat_map(|f| f.undos.iter().map(|t| rfc3339(*t)))
                .collect(),
            text: w.text(),
        }
    }
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
            notes: vec![],
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
    /// The report of `rows` and `targets`: healthy when a plain run does nothing (`next`),
    /// with the next renewal due among the certificates checked.
    pub fn new(
        config: &Config,
        store: String,
        rotation: Option<String>,
        rows: Vec<Row>,
        targets: Vec<TargetRow>,
        next: NextRun,
        now: time::OffsetDateTime,
    ) -> Self {
        let healthy = next == NextRun::Nothing;
        let next_renewal = super::next_renewal(
            config,
            rows.iter()
                .filter_map(|r| Some((r.secret.as_str(), r.not_after.as_deref()?))),
            now,
        );
        Self {
            api_version: "certgen/v1",
            kind: "CheckReport",
            profile: config.profile.clone(),
            store,
            healthy,
            rotation,
            next_run: next,
            secrets: rows,
            ca_bundle_targets: targets,
            next_renewal,
            renewal_window: None,
            other_writers: Vec::new(),
        }
    }
}

impl CheckReport {
    /// The report with private keys others can read (local mode), as (Secret, path, problem):
    /// each on its Secret's row, which becomes `invalid`. A run makes them 0600 when it reads
    /// them, so the next run changes them: the report is not healthy.
    pub fn with_exposed_keys(mut self, exposed: Vec<(String, String, String)>) -> Self {
        for (secret, path, problem) in exposed {
            let Some(row) = self.secrets.iter_mut().find(|r| r.secret == secret) else {
                continue;
            };
            if !row.problems.contains(&problem) {
                row.problems.push(problem);
            }
            if row.status == "ok" || row.status == "due" {
                row.status = "invalid";
            }
            let chmod = PlannedWrite {
                object: path,
                action: "chmod".into(),
                reason: "a private key others can read: made 0600".into(),
            };
            match &mut self.next_run {
                NextRun::Nothing => {
                    self.next_run = NextRun::Writes {
                        writes: vec![chmod],
                    }
                }
                NextRun::Writes { writes } => writes.push(chmod),
                NextRun::Waits { .. } | NextRun::Refuses { .. } => {}
            }
            self.healthy = false;
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
    /// The table of Secrets for people: expiry, residual time, issuer and status, the names
    /// `width` wide.
    fn secrets_text(&self, width: usize) -> String {
        let mut out = format!(
            "{:<width$}  {:<4}  {:<20}  {:<8}  {:<16}  {}\n",
            "SECRET", "KIND", "EXPIRES", "RESIDUAL", "ISSUER", "STATUS"
        );
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
        out
    }

    /// The CAs each Secret's bundle holds (`TRUST BUNDLES`), then the `caBundle` targets and
    /// how each stands (`CABUNDLE TARGETS`).
    fn bundles_text(&self, width: usize) -> String {
        let mut out = String::from("\nTRUST BUNDLES\n");
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
        if !self.ca_bundle_targets.is_empty() {
            out.push_str("\nCABUNDLE TARGETS\n");
            for t in &self.ca_bundle_targets {
                // "In step" with a Secret that is not there says nothing: say that instead.
                let missing = self
                    .secrets
                    .iter()
                    .any(|r| r.secret == t.secret && r.status == "missing");
                let text = if t.status == "in_sync" && missing {
                    "nothing to compare with: the Secret it follows is missing"
                } else {
                    t.text
                };
                out.push_str(&format!(
                    "  {} {} (follows {}): {text}\n",
                    t.kind, t.name, t.secret
                ));
                if let Some(why) = &t.pending_missing {
                    out.push_str(&format!("    {why}\n"));
                }
            }
        }
        out
    }

    /// What `ACTION DUE` lists: each Secret's problems, the drifted `caBundle` targets, the
    /// fights with other writers; or, when none is named and the check is not healthy, what
    /// the next run does.
    fn problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self
            .secrets
            .iter()
            .flat_map(|r| {
                r.problems
                    .iter()
                    .map(move |p| format!("  {}: {p}", r.secret))
            })
            .collect();
        problems.extend(
            self.ca_bundle_targets
                .iter()
                .filter(|t| t.status == "drifted")
                .map(|t| {
                    if t.kind == "ClusterTrustBundles" {
                        format!(
                            "  {} {}: the bundles do not publish exactly the CAs of the ca.crt of Secret {} (one bundle per CA): run certgen to write them",
                            t.kind, t.name, t.secret
                        )
                    } else {
                        format!(
                            "  {} {}: its caBundle differs from the ca.crt of Secret {}: run certgen to write it",
                            t.kind, t.name, t.secret
                        )
                    }
                }),
        );
        problems.extend(self.ca_bundle_targets.iter().filter_map(|t| {
            let why = t.pending_missing.as_ref()?;
            Some(format!("  {} {}: {why}", t.kind, t.name))
        }));
        problems.extend(
            self.other_writers
                .iter()
                .filter(|w| !w.fight.is_empty())
                .map(|w| {
                    format!(
                        "  {} {}: FIGHT between certgen and {}: see docs/troubleshooting.md#another-writer-keeps-undoing-certgen",
                        w.kind, w.name, w.manager
                    )
                }),
        );
        if problems.is_empty() && !self.healthy {
            problems.push(format!("  the next run {}", self.next_run.to_text()));
        }
        problems
    }

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
        out.push_str(&self.secrets_text(width));
        out.push_str(&self.bundles_text(width));
        if let Some(rot) = &self.rotation {
            out.push_str(&format!("\nROTATION: {rot}\n"));
        }
        out.push_str(&format!("\nNEXT RUN: {}\n", self.next_run.to_text()));
        if let Some(w) = &self.renewal_window {
            out.push_str(&w.to_text());
        }
        let problems = self.problems();
        if !self.other_writers.is_empty() {
            out.push_str("\nOTHER WRITERS\n");
            for w in &self.other_writers {
                out.push_str(&format!("  {}\n", w.text));
            }
        }
        let notes: Vec<String> = self
            .secrets
            .iter()
            .flat_map(|r| r.notes.iter().map(move |n| format!("  {}: {n}", r.secret)))
            .collect();
        if !notes.is_empty() {
            out.push_str("\nNOTES\n");
            out.push_str(&notes.join("\n"));
            out.push('\n');
        }
        if problems.is_empty() && self.healthy {
            out.push_str("\nHealthy: nothing is due.\n");
        } else {
            out.push_str("\nACTION DUE\n");
            out.push_str(&problems.join("\n"));
            out.push('\n');
        }
        if let Some(next) = &self.next_renewal {
            out.push('\n');
            out.push_str(&next.text_with(self.renewal_window.as_ref()));
        }
        // Subjects, paths and messages may come from what another tool stored.
        crate::text::printable(&out)
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes") + "\n"
    }
}
