//! The run's report: what was planned or done to each Secret and why, as text for people or as a
//! stable JSON document for tools. Never contains key material.

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::plan::{Action, Kind, Plan};

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub secret: String,
    pub kind: Kind,
    pub action: Action,
    pub reason: String,
    /// SHA-256 of the CA certificate that signed (or is) this Secret's certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_sha256: Option<String>,
    /// Expiry of the certificate this Secret holds after the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
}

impl Entry {
    /// The line for a planned Secret, before anything is written.
    pub fn planned(s: &crate::plan::SecretPlan) -> Self {
        Self {
            secret: s.name.clone(),
            kind: s.kind,
            action: s.action,
            reason: s.reason.clone(),
            ca_sha256: None,
            not_after: s.not_after.map(rfc3339),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub profile: String,
    pub store: String,
    pub dry_run: bool,
    pub attempts: u32,
    pub writes: usize,
    pub secrets: Vec<Entry>,
    /// Restarts, rollouts and probes of the consumers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<crate::consumers::ConsumerReport>,
    /// What is left for a later run, when this one ended before it (a cleanup past --timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Kubernetes API requests made by the whole run (cluster runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_requests: Option<crate::metrics::ApiRequests>,
    /// When certgen must run again at the latest, so nothing expires unrenewed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_renewal: Option<NextRenewal>,
    /// Features skipped because this identity lacks their verbs, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// The earliest moment a Secret becomes due: its certificate's expiry minus its renewBefore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NextRenewal {
    /// RFC 3339.
    pub due: String,
    /// The Secret that is due first.
    pub secret: String,
}

/// The next renewal due among `not_after` (Secret name, RFC 3339 expiry): the earliest
/// `not_after - renewBefore`, with each Secret's renewBefore from `config` (the CA's for the CA
/// Secret). Secrets without a certificate or not in the config are left out.
pub fn next_renewal<'a>(
    config: &crate::config::Config,
    not_after: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<NextRenewal> {
    let renew_before = |name: &str| {
        if name == config.ca.secret_name {
            Some(config.ca.renew_before)
        } else {
            config
                .tls
                .iter()
                .find(|t| t.name == name)
                .map(|t| t.renew_before)
        }
    };
    not_after
        .into_iter()
        .filter_map(|(name, t)| {
            let t = OffsetDateTime::parse(t, &Rfc3339).ok()?;
            let before = time::Duration::try_from(renew_before(name)?).ok()?;
            Some((t.checked_sub(before)?, name))
        })
        .min()
        .map(|(due, secret)| NextRenewal {
            due: rfc3339(due),
            secret: secret.to_string(),
        })
}

impl NextRenewal {
    /// The report line.
    pub fn to_text(&self) -> String {
        format!(
            "Next renewal due: {} ({}); certgen must run again before then (certgen's chart runs a CronJob).\n",
            self.due, self.secret
        )
    }
}

/// RFC 3339 in UTC, for reports.
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&Rfc3339)
        .unwrap_or_default()
}

impl Report {
    /// A report of a plan that was not applied (`--dry-run`).
    pub fn from_plan(profile: &str, store: String, plan: &Plan) -> Self {
        let mut secrets = vec![Entry {
            secret: plan.ca.name.clone(),
            kind: Kind::Ca,
            action: plan.ca.action,
            reason: plan.ca.reason.clone(),
            ca_sha256: plan.ca.active.as_ref().map(|c| c.cert.fingerprint_hex()),
            not_after: plan.ca.active.as_ref().map(|c| rfc3339(c.cert.not_after)),
        }];
        secrets.extend(plan.secrets.iter().map(Entry::planned));
        Self::new(profile, store, true, 1, secrets)
    }

    /// A report of what a run did.
    pub fn new(
        profile: &str,
        store: String,
        dry_run: bool,
        attempts: u32,
        secrets: Vec<Entry>,
    ) -> Self {
        let writes = if dry_run {
            0
        } else {
            secrets.iter().filter(|e| e.action.writes()).count()
        };
        Self {
            api_version: "certgen/v1",
            kind: "RunReport",
            profile: profile.to_string(),
            store,
            dry_run,
            attempts,
            writes,
            secrets,
            consumers: Vec::new(),
            note: None,
            api_requests: None,
            next_renewal: None,
            skipped: Vec::new(),
        }
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes") + "\n"
    }

    /// The text table.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "certgen: profile {}, {}{}\n",
            self.profile,
            self.store,
            if self.dry_run {
                " (dry run: nothing is written)"
            } else {
                ""
            }
        );
        let width = self
            .secrets
            .iter()
            .map(|e| e.secret.len())
            .max()
            .unwrap_or(0);
        for e in &self.secrets {
            let action = serde_json::to_value(e.action).unwrap();
            let kind = serde_json::to_value(e.kind).unwrap();
            out.push_str(&format!(
                "  {:<width$}  {:<4}  {:<13}  {}\n",
                e.secret,
                kind.as_str().unwrap_or(""),
                action.as_str().unwrap_or(""),
                e.reason
            ));
        }
        if !self.consumers.is_empty() {
            out.push_str("Consumers:\n");
        }
        for c in &self.consumers {
            let reload = match c.reload {
                crate::config::Reload::Hot => "hot",
                crate::config::Reload::Restart => "restart",
            };
            out.push_str(&format!("  {} ({reload})", c.name));
            if let Some(note) = &c.note {
                out.push_str(&format!(": {note}"));
            }
            out.push('\n');
            for d in &c.deployments {
                out.push_str(&format!("    deployment {}: {}", d.name, d.action));
                if let Some(r) = &d.rollout {
                    out.push_str(&format!(", rollout {r}"));
                }
                if let Some(s) = d.rollout_seconds {
                    out.push_str(&format!(" in {s}s"));
                }
                if let Some(detail) = &d.detail {
                    out.push_str(&format!(" ({detail})"));
                }
                out.push('\n');
            }
            for p in &c.probes {
                let verdict = if p.ok { "ok" } else { "FAILED" };
                out.push_str(&format!(
                    "    probe {}: {verdict}: {}\n",
                    p.endpoint, p.detail
                ));
            }
        }
        let changes = self.secrets.iter().filter(|e| e.action.writes()).count();
        out.push_str(&match (self.dry_run, changes) {
            (_, 0) => "Nothing to do: every Secret is valid.\n".to_string(),
            (true, n) => {
                format!("{n} write(s) planned. Run without --dry-run to apply.\n")
            }
            (false, n) => format!("{n} write(s) done.\n"),
        });
        if let Some(note) = &self.note {
            out.push_str(&format!("Later: {note}\n"));
        }
        for s in &self.skipped {
            out.push_str(&format!("Skipped: {s}\n"));
        }
        if let Some(next) = &self.next_renewal {
            out.push_str(&next.to_text());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Env, Overrides, Source};

    #[test]
    fn next_renewal_is_the_earliest_not_after_minus_renew_before() {
        let config = Config::resolve(
            &Source::Profile("envoy-gateway".into()),
            &Overrides::default(),
            &Env::default(),
        )
        .unwrap();
        // The CA renews 90 days ahead, leaves 30: a CA expiring 50 days after a leaf is due
        // 10 days before it.
        let entries = [
            ("envoy-gateway-ca", "2030-03-02T00:00:00Z"),
            ("envoy", "2030-01-11T00:00:00Z"),
            ("envoy-oidc-hmac", "2000-01-01T00:00:00Z"),
            ("not-in-config", "2000-01-01T00:00:00Z"),
            ("envoy-gateway", "garbage"),
        ];
        let next = next_renewal(&config, entries).unwrap();
        assert_eq!(next.secret, "envoy-gateway-ca");
        assert_eq!(next.due, "2029-12-02T00:00:00Z");
        assert_eq!(
            next_renewal(&config, [("envoy", "2030-01-11T00:00:00Z")])
                .unwrap()
                .due,
            "2029-12-12T00:00:00Z"
        );
        assert_eq!(next_renewal(&config, []), None);
    }
}
