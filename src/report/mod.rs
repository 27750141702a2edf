//! Reports: what a run planned or did to each Secret and why ([`Report`]), and what `certgen
//! check` found ([`CheckReport`]), as text for people or as a stable JSON document for tools.
//!
//! The one place reports are built and rendered: the run's steps hand over their entries and
//! the consumers' outcomes, and this module assembles them. It never contains key material, and
//! it must not decide anything a run does (that is [`crate::plan`]'s) or do IO.

mod check;
mod pods;

use serde::Serialize;

pub use self::check::{BundleEntry, CheckReport, NextRun, PlannedWrite, Row, TargetRow, WriterRow};
pub use self::pods::{GatePod, GateReport, PodReport, Pokes, merge as merge_pods};
use crate::api_requests::ApiRequests;
use crate::config::Reload;
use crate::pki::Cert;
use crate::plan::{Action, CaPlan, Kind, Plan, SecretPlan};
use crate::timefmt::{parse_rfc3339, rfc3339};
use crate::workload::Kind as WorkloadKind;

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
    /// A `caBundle` target's write: the CAs it holds after it, by short fingerprint, in order
    /// (`new` in a dry run for the CA the step would generate).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cas: Vec<String>,
    /// A `caBundle` target's write: the step it belongs to (trust, leaves, cleanup, steady).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The record of undos the write sets (annotation `certgen.dev/undone-by`:
    /// `manager@time` entries, newest last; empty: the record is cleared), planned with it;
    /// absent when the write leaves the record as it is (issue 45).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undone_by: Option<String>,
}

impl Entry {
    /// The line for a planned Secret, before anything is written.
    pub fn planned(s: &SecretPlan) -> Self {
        Self {
            secret: s.name.clone(),
            kind: s.kind,
            action: s.action,
            reason: s.reason.clone(),
            ca_sha256: None,
            not_after: s.not_after.map(rfc3339),
            cas: Vec::new(),
            step: None,
            undone_by: s.write.as_ref().and_then(recorded),
        }
    }

    /// This line once the step issued `leaf`, signed by `ca`.
    pub fn issued(self, ca: &Cert, leaf: &Cert) -> Self {
        Self {
            ca_sha256: Some(ca.fingerprint_hex()),
            not_after: Some(rfc3339(leaf.not_after)),
            ..self
        }
    }

    /// The line for the CA Secret, showing the CA `shown` (the active one after the step, or
    /// the one it generates).
    pub fn ca(ca: &CaPlan, shown: Option<&Cert>) -> Self {
        Self {
            secret: ca.name.clone(),
            kind: Kind::Ca,
            action: ca.action,
            reason: ca.reason.clone(),
            ca_sha256: shown.map(Cert::fingerprint_hex),
            not_after: shown.map(|c| rfc3339(c.not_after)),
            cas: Vec::new(),
            step: None,
            undone_by: ca.write.as_ref().and_then(recorded),
        }
    }

    /// A `caBundle` target's line.
    pub fn webhook(what: &str, action: Action, reason: String) -> Self {
        Self {
            secret: what.to_string(),
            kind: Kind::Webhook,
            action,
            reason,
            ca_sha256: None,
            not_after: None,
            cas: Vec::new(),
            step: None,
            undone_by: None,
        }
    }

    /// The line for a ClusterTrustBundle (`what`: `ClusterTrustBundle <name>`, or `signer
    /// <name>` for a target with nothing to do).
    pub fn trust_bundle(what: &str, action: Action, reason: String) -> Self {
        Self {
            kind: Kind::TrustBundle,
            ..Self::webhook(what, action, reason)
        }
    }

    /// This `caBundle` target line with the CAs its write holds and the step it belongs to.
    pub fn holding(self, cas: Vec<String>, step: &str) -> Self {
        Self {
            cas,
            step: Some(step.to_string()),
            ..self
        }
    }

    /// This line with the record of undos its write sets (`None`: left as it is).
    pub fn recording(self, undone_by: Option<String>) -> Self {
        Self { undone_by, ..self }
    }

    /// What the text report adds to the line for the record of undos the write sets.
    fn undone_by_text(&self) -> String {
        match self.undone_by.as_deref() {
            None => String::new(),
            Some("") => "; clears its record of undos".into(),
            Some(v) => format!("; records the undos of certgen's writes: {v}"),
        }
    }
}

/// The record of undos a Secret write sets, when it sets one.
fn recorded(w: &crate::plan::Write) -> Option<String> {
    w.annotations.get(crate::observe::writers::HISTORY).cloned()
}

/// Adds `new` entries to `done`: later entries replace earlier ones for the same Secret, but
/// a Keep never hides a write.
pub fn merge(done: &mut Vec<Entry>, new: Vec<Entry>) {
    for entry in new {
        match done.iter_mut().find(|e| e.secret == entry.secret) {
            Some(old) if entry.action.writes() || !old.action.writes() => *old = entry,
            Some(_) => {}
            None => done.push(entry),
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
    pub consumers: Vec<ConsumerReport>,
    /// Pods poked so their kubelet re-projects what changed, and pods that mount a managed
    /// Secret outside every declared consumer (cluster runs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodReport>,
    /// The gates this run waited at, and what opened each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateReport>,
    /// Every poke of the run (the gates' and the last step's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pokes: Option<Pokes>,
    /// What is left for a later run, when this one ended before it (a cleanup past --timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A member of a set of clusters: the step it waits at for the other members (`leaves`,
    /// `cleanup`, or `cleanup-before-trust`: the last rotation's prior CA dropped before a new
    /// rotation's trust step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// Kubernetes API requests made by the whole run (cluster runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_requests: Option<ApiRequests>,
    /// When certgen must run again at the latest, so nothing expires unrenewed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_renewal: Option<NextRenewal>,
    /// Local mode: private key files others could read, made 0600 by this run (a dry run only
    /// says it would: it changes nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub key_modes: Vec<String>,
    /// Features skipped because this identity lacks their verbs, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// What a dry run found that the real run would fail on (a namespace that does not exist).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The renewal windows: the next one when the run ended outside every window, what waits
    /// for it, and what started outside them because it could not wait (issue 45).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal_window: Option<WindowReport>,
    /// The run lock's Lease, when the run held one: whether it was taken over from a crashed
    /// run, and how its renewals went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockReport>,
    /// Why the run failed after this report was made (the process exits with its code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::error::ErrorObject>,
    /// The Kubernetes Events of the run, in order (with `--events`; see [`crate::events`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventLine>,
    /// What the run found written by other field managers before it wrote anything, and the
    /// fights (issue 45). A run writes what its plan says, once; it never retries against
    /// the other writer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_writers: Vec<WriterRow>,
}

/// How the run's Lease went (see `crate::lock`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockReport {
    /// `Lease ns/name`.
    pub lease: String,
    /// The holder of the expired Lease this run took over (a run that stopped renewing it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub took_over: Option<String>,
    pub renewals: u32,
    pub renewal_failures: u32,
    /// Why the Lease may no longer have been this run's, when that happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
}

/// One Kubernetes Event (`events.k8s.io/v1`) a run records, planned as data: on which object,
/// why, and (once recorded) what became of it. Never holds key material.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub reason: &'static str,
    /// The object the Event is about: Secret or a workload kind, in the run's namespace.
    pub kind: &'static str,
    pub name: String,
    /// What certgen did or saw (the Event's `action`): create, renew, restart, check, ...
    pub action: &'static str,
    pub note: String,
    /// planned (dry run), recorded (created, or a series continued), refused, failed.
    pub outcome: &'static str,
}

/// The JSON document of a run or check that failed before it had a report: one object,
/// `{"apiVersion": "certgen/v1", "kind": "Error", "error": {...}}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorReport {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub error: crate::error::ErrorObject,
}

impl ErrorReport {
    /// The document for `error`.
    pub fn new(error: crate::error::ErrorObject) -> Self {
        Self {
            api_version: "certgen/v1",
            kind: "Error",
            error,
        }
    }

    /// Pretty JSON, as the reports are printed.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the error serializes") + "\n"
    }
}

/// One consumer in the report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerReport {
    pub name: String,
    pub reload: Reload,
    pub deployments: Vec<DeploymentReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<EndpointResult>,
}

/// One workload of a consumer in the report (the JSON key `deployments` keeps its first name;
/// `kind` says which kind each entry is).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentReport {
    pub kind: WorkloadKind,
    pub name: String,
    /// restarted, already-restarted, up-to-date, would-restart, hot, paused, recreated.
    pub action: String,
    /// The step it was for: `trust`, `leaves`, `cleanup`, `steady` (a renewal or creation
    /// without a rotation), or `missed` (before the first step: a restart an earlier run did
    /// not make for what is stored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<&'static str>,
    /// done, failed, pending (with `--wait`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl DeploymentReport {
    /// A Deployment and what was done to it, nothing else known yet.
    pub fn new(name: &str, action: &str) -> Self {
        Self {
            kind: WorkloadKind::Deployment,
            name: name.into(),
            action: action.into(),
            phase: None,
            rollout: None,
            rollout_seconds: None,
            detail: None,
        }
    }
}

impl DeploymentReport {
    /// The same entry for a workload of `kind`.
    pub fn of(mut self, kind: WorkloadKind) -> Self {
        self.kind = kind;
        self
    }
}

/// Marks every workload entry of `reports` as made for the step of `phase`.
pub fn in_phase(reports: &mut [ConsumerReport], phase: &'static str) {
    for d in reports.iter_mut().flat_map(|r| r.deployments.iter_mut()) {
        d.phase.get_or_insert(phase);
    }
}

/// Adds what a later step did for each consumer to what earlier steps did: its restarts and
/// rollouts are added (quiet states, "up-to-date" and "hot", are shown once per Deployment),
/// its note and probes replace earlier ones.
pub fn merge_consumers(all: &mut Vec<ConsumerReport>, new: Vec<ConsumerReport>) {
    for r in new {
        match all.iter_mut().find(|a| a.name == r.name) {
            None => all.push(r),
            Some(a) => {
                // (A later step's "already-restarted" says again what an earlier one did.)
                let quiet = |d: &DeploymentReport| {
                    d.action == "up-to-date" || d.action == "hot" || d.action == "already-restarted"
                };
                for d in r.deployments {
                    if !quiet(&d)
                        || !a
                            .deployments
                            .iter()
                            .any(|x| x.name == d.name && x.kind == d.kind)
                    {
                        a.deployments.push(d);
                    }
                }
                if r.note.is_some() {
                    a.note = r.note;
                }
                if !r.probes.is_empty() {
                    a.probes = r.probes;
                }
            }
        }
    }
}

/// The result of probing one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointResult {
    pub endpoint: String,
    pub ok: bool,
    pub detail: String,
    pub attempts: u32,
}

/// What the renewal windows did: the next window (when outside every window), what waits for
/// it, and what started outside them because it could not wait.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowReport {
    /// The next window's start (RFC 3339), when `now` is outside every window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start: Option<String>,
    /// Its end (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_end: Option<String>,
    /// Inside a window now.
    pub open: bool,
    /// Routine rotations held for the next window.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<WindowWaiting>,
    /// Rotations started outside every window because they could not wait: one line each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub emergency: Vec<String>,
    /// Something due is held for the next window (RFC 3339: when it opens), the run's way of
    /// saying "held, until then" rather than "nothing to do"; absent when nothing waits, or no
    /// window opens again (`waiting` is then non-empty with no `nextStart`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<String>,
}

/// One routine rotation held for the next window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowWaiting {
    pub secret: String,
    pub what: String,
    pub due: String,
    /// RFC 3339.
    pub not_after: String,
}

impl WindowReport {
    /// The report of a plan's window note, when windows are configured (`None` without).
    pub fn of(windows: &crate::window::Windows, note: &crate::plan::WindowNote) -> Option<Self> {
        if windows.is_empty() {
            return None;
        }
        let next = note.outside.flatten();
        let held_until = next
            .filter(|_| !note.waiting.is_empty())
            .map(|(s, _)| crate::timefmt::rfc3339(s));
        Some(Self {
            held_until,
            next_start: next.map(|(s, _)| crate::timefmt::rfc3339(s)),
            next_end: next.map(|(_, e)| crate::timefmt::rfc3339(e)),
            open: note.outside.is_none(),
            waiting: note
                .waiting
                .iter()
                .map(|w| WindowWaiting {
                    secret: w.secret.clone(),
                    what: w.what.clone(),
                    due: w.due.clone(),
                    not_after: crate::timefmt::rfc3339(w.not_after),
                })
                .collect(),
            emergency: note
                .emergency
                .iter()
                .map(|e| format!("{}: {}", e.secret, e.why))
                .collect(),
        })
    }

    /// The report's lines.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        match (&self.next_start, &self.next_end) {
            _ if self.open => out.push_str("Renewal window: open now\n"),
            (Some(s), Some(e)) => out.push_str(&format!(
                "Renewal window: closed; the next opens at {s} (until {e})\n"
            )),
            _ => out.push_str("Renewal window: closed, and none opens again\n"),
        }
        for w in &self.waiting {
            out.push_str(&format!(
                "Waiting for the window: {} of {} ({}; expires {})\n",
                w.what, w.secret, w.due, w.not_after
            ));
        }
        for e in &self.emergency {
            out.push_str(&format!("Outside the window: {e}\n"));
        }
        out
    }

    /// Merges a later step's report into this one: the later next window, every wait and
    /// emergency once.
    pub fn merge(mut self, later: Self) -> Self {
        for e in later.emergency {
            if !self.emergency.contains(&e) {
                self.emergency.push(e);
            }
        }
        Self {
            emergency: self.emergency,
            ..later
        }
    }
}

/// The earliest moment a Secret becomes due: its certificate's expiry minus its renewBefore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NextRenewal {
    /// RFC 3339.
    pub due: String,
    /// The Secret that is due first.
    pub secret: String,
    /// The due moment has passed (by the store's clock when the report was made): certgen
    /// must run now, not "before" a date gone by.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub overdue: bool,
}

/// The next renewal due among `not_after` (Secret name, RFC 3339 expiry): the earliest
/// `not_after - renewBefore`, with each Secret's renewBefore from `config` (the CA's for the CA
/// Secret). Secrets without a certificate or not in the config are left out. Overdue when it
/// is not after `now`.
pub fn next_renewal<'a>(
    config: &crate::config::Config,
    not_after: impl IntoIterator<Item = (&'a str, &'a str)>,
    now: time::OffsetDateTime,
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
            let t = parse_rfc3339(t)?;
            let before = time::Duration::try_from(renew_before(name)?).ok()?;
            Some((t.checked_sub(before)?, name))
        })
        .min()
        .map(|(due, secret)| NextRenewal {
            due: rfc3339(due),
            secret: secret.to_string(),
            overdue: due <= now,
        })
}

impl NextRenewal {
    /// The report line, said against the renewal windows: an overdue renewal held for a
    /// window is not a reason to run now.
    pub fn text_with(&self, window: Option<&WindowReport>) -> String {
        if self.overdue
            && let Some(w) = window
            && w.waiting.iter().any(|h| h.secret == self.secret)
        {
            return format!(
                "Next renewal: {} is held for the renewal window opening at {}; certgen must run inside it (certgen's chart runs a CronJob).\n",
                self.secret,
                w.next_start.as_deref().unwrap_or("-")
            );
        }
        self.to_text()
    }

    /// The report line.
    pub fn to_text(&self) -> String {
        if self.overdue {
            return format!(
                "Next renewal overdue since {} ({}): certgen must run again now (certgen's chart runs a CronJob).\n",
                self.due, self.secret
            );
        }
        format!(
            "Next renewal due: {} ({}); certgen must run again before then (certgen's chart runs a CronJob).\n",
            self.due, self.secret
        )
    }
}

impl Report {
    /// A report of a plan that was not applied (`--dry-run`).
    pub fn from_plan(profile: &str, store: String, plan: &Plan) -> Self {
        // The CA certgen holds now (the plan's CA is not generated yet).
        let held = plan.ca.active.as_ref().map(|c| &c.cert);
        let mut secrets = vec![Entry::ca(&plan.ca, held)];
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
            pods: Vec::new(),
            gates: Vec::new(),
            pokes: None,
            note: None,
            held: None,
            api_requests: None,
            next_renewal: None,
            key_modes: Vec::new(),
            skipped: Vec::new(),
            warnings: Vec::new(),
            renewal_window: None,
            other_writers: Vec::new(),
            lock: None,
            error: None,
            events: Vec::new(),
        }
    }

    /// The report of a run that took steps: every write of every step (`written`), then the
    /// final state of the Secrets nothing wrote (from `last`, the last step's report), and what
    /// the consumers' steps did.
    pub fn after_steps(
        last: &Report,
        written: Vec<Entry>,
        consumers: Vec<ConsumerReport>,
        attempts: u32,
    ) -> Self {
        let mut entries = written;
        for e in &last.secrets {
            if !entries.iter().any(|w| w.secret == e.secret) {
                entries.push(e.clone());
            }
        }
        let mut report = Report::new(&last.profile, last.store.clone(), false, attempts, entries);
        report.consumers = consumers;
        report
    }

    /// The report of a run in a cluster: with the API requests it made, and the features it
    /// skipped for want of verbs.
    pub fn in_cluster(mut self, api_requests: ApiRequests, skipped: Vec<String>) -> Self {
        self.api_requests = Some(api_requests);
        self.skipped = skipped;
        self
    }

    /// Whether the workload entries span more than one step (a rotation), so that each says
    /// its step.
    fn consumers_phased(&self) -> bool {
        let mut phases = self
            .consumers
            .iter()
            .flat_map(|c| &c.deployments)
            .filter_map(|d| d.phase)
            .filter(|p| *p != "missed");
        let first = phases.next();
        phases.any(|p| Some(p) != first)
    }

    /// The report lines of the consumers whose note is `note` (one that skipped them).
    pub fn consumers_noted<'a>(&'a self, note: &'a str) -> impl Iterator<Item = String> + 'a {
        self.consumers
            .iter()
            .filter(move |c| c.note.as_deref() == Some(note))
            .map(move |c| format!("consumer {}: {note}", c.name))
    }

    /// The report with the next renewal due among its Secrets' certificates. A dry run knows
    /// only the certificates it would keep: one it would write gets new dates (a Secret moved
    /// off 100-year certificates is not next due in a century), so those are left out.
    pub fn with_next_renewal(
        mut self,
        config: &crate::config::Config,
        now: time::OffsetDateTime,
    ) -> Self {
        let dry_run = self.dry_run;
        self.next_renewal = next_renewal(
            config,
            self.secrets
                .iter()
                .filter(|e| !(dry_run && e.action.writes()))
                .filter_map(|e| Some((e.secret.as_str(), e.not_after.as_deref()?))),
            now,
        );
        self
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes") + "\n"
    }

    /// The text report's table of Secrets (name, kind, action, reason), then the `caBundle`
    /// targets, each with what it became.
    fn secrets_text(&self) -> String {
        let mut out = String::new();
        let (targets, secrets): (Vec<&Entry>, Vec<&Entry>) =
            self.secrets.iter().partition(|e| e.kind == Kind::Webhook);
        let width = secrets.iter().map(|e| e.secret.len()).max().unwrap_or(0);
        for e in secrets {
            let action = serde_json::to_value(e.action).unwrap();
            let kind = serde_json::to_value(e.kind).unwrap();
            out.push_str(&format!(
                "  {:<width$}  {:<4}  {:<13}  {}{}\n",
                e.secret,
                kind.as_str().unwrap_or(""),
                action.as_str().unwrap_or(""),
                e.reason,
                e.undone_by_text()
            ));
        }
        if !targets.is_empty() {
            out.push_str("caBundle targets:\n");
        }
        for e in targets {
            out.push_str(&format!(
                "  {}: {}: {}{}\n",
                e.secret,
                e.action.name(),
                e.reason,
                e.undone_by_text()
            ));
        }
        out
    }

    /// The text report's consumers: how each reloads, then its workloads (restarted, and how
    /// the rollout went) and its probes.
    fn consumers_text(&self) -> String {
        let mut out = String::new();
        if !self.consumers.is_empty() {
            out.push_str("Consumers:\n");
        }
        for c in &self.consumers {
            let reload = match c.reload {
                Reload::Hot => "hot",
                Reload::Restart => "restart",
            };
            out.push_str(&format!("  {} ({reload})", c.name));
            if let Some(note) = &c.note {
                out.push_str(&format!(": {note}"));
            }
            out.push('\n');
            for d in &c.deployments {
                out.push_str(&format!("    {} {}: {}", d.kind.noun(), d.name, d.action));
                match d.phase {
                    Some("missed") => out.push_str(" (missed by an earlier run)"),
                    Some(p) if self.consumers_phased() => out.push_str(&format!(" ({p} step)")),
                    _ => {}
                }
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
        out
    }

    /// The text report's summary line: the writes done or planned, or why there are none
    /// (held for the set or a renewal window, or nothing to do).
    fn summary_text(&self) -> String {
        let changes = self.secrets.iter().filter(|e| e.action.writes()).count();
        // A member of a set of clusters whose next step waits for the others.
        let held = self.secrets.iter().any(|e| e.reason.starts_with("held: "));
        // Due, but held for a renewal window: not "nothing to do".
        let window_held = self
            .renewal_window
            .as_ref()
            .filter(|w| !w.waiting.is_empty());
        match (self.dry_run, changes) {
            (_, 0) if held => {
                "Held: the next step waits until every member of the set is ready for it.\n"
                    .to_string()
            }
            (_, 0) if window_held.is_some() => {
                let w = window_held.expect("checked");
                match (&w.next_start, &w.next_end) {
                    (Some(s), Some(e)) => format!(
                        "Held for the renewal window: {} renewal(s) due wait until it opens at {s} (until {e}); nothing written.\n",
                        w.waiting.len()
                    ),
                    _ => format!(
                        "Held for the renewal window: {} renewal(s) due wait, and no window opens again; nothing written.\n",
                        w.waiting.len()
                    ),
                }
            }
            (_, 0) if self.key_modes.is_empty() => {
                "Nothing to do: every Secret is valid.\n".to_string()
            }
            (_, 0) => String::new(),
            (true, n) => {
                format!("{n} write(s) planned. Run without --dry-run to apply.\n")
            }
            (false, n) => format!("{n} write(s) done.\n"),
        }
    }

    /// The text report's lines about the run lock: taken over, renewals that failed, lost.
    fn lock_text(&self) -> String {
        let mut out = String::new();
        if let Some(l) = &self.lock {
            if let Some(old) = &l.took_over {
                out.push_str(&format!(
                    "Lock: took over {} from {old}, whose run stopped renewing it\n",
                    l.lease
                ));
            }
            if l.renewal_failures > 0 {
                out.push_str(&format!(
                    "Lock: {} renewal(s) of {} failed\n",
                    l.renewal_failures, l.lease
                ));
            }
            if let Some(why) = &l.lost {
                out.push_str(&format!("Lock: {} was lost: {why}\n", l.lease));
            }
        }
        out
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
        out.push_str(&self.secrets_text());
        out.push_str(&self.consumers_text());
        out.push_str(&pods::text(&self.pods, &self.gates));
        if let Some(p) = &self.pokes {
            out.push_str(&format!("Pokes in this run: {}\n", p.text()));
        }
        out.push_str(&self.summary_text());
        if let Some(note) = &self.note {
            out.push_str(&format!("Later: {note}\n"));
        }
        for w in &self.other_writers {
            let lead = if w.fight.is_empty() {
                "Other writer"
            } else {
                "FIGHT"
            };
            out.push_str(&format!("{lead}: {}\n", w.text));
        }
        for k in &self.key_modes {
            out.push_str(&format!("Key file: {k}\n"));
        }
        for s in &self.skipped {
            out.push_str(&format!("Skipped: {s}\n"));
        }
        for w in &self.warnings {
            out.push_str(&format!("Warning: {w}\n"));
        }
        if let Some(w) = &self.renewal_window {
            out.push_str(&w.to_text());
        }
        out.push_str(&self.lock_text());
        if let Some(next) = &self.next_renewal {
            out.push_str(&next.text_with(self.renewal_window.as_ref()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Env, Overrides, Source};

    const EPOCH: time::OffsetDateTime = time::OffsetDateTime::UNIX_EPOCH;

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
        let next = next_renewal(&config, entries, EPOCH).unwrap();
        assert_eq!(next.secret, "envoy-gateway-ca");
        assert_eq!(next.due, "2029-12-02T00:00:00Z");
        assert_eq!(
            next_renewal(&config, [("envoy", "2030-01-11T00:00:00Z")], EPOCH)
                .unwrap()
                .due,
            "2029-12-12T00:00:00Z"
        );
        assert_eq!(next_renewal(&config, [], EPOCH), None);
    }

    /// Issue 46, friction 7: a dry run's next renewal leaves out the certificates it would
    /// write (their dates are about to change: kube-webhook-certgen's 100-year Secret, which
    /// the run moves to shorter certificates now, was "next due in 2126"); a run's report
    /// keeps them.
    #[test]
    fn a_dry_runs_next_renewal_leaves_out_what_it_would_write() {
        let config = Config::resolve(
            &Source::Profile("envoy-gateway".into()),
            &Overrides::default(),
            &Env::default(),
        )
        .unwrap();
        let entry = |secret: &str, action: Action, not_after: &str| Entry {
            secret: secret.into(),
            kind: crate::plan::Kind::Tls,
            action,
            reason: String::new(),
            ca_sha256: None,
            not_after: Some(not_after.into()),
            cas: vec![],
            step: None,
            undone_by: None,
        };
        let entries = vec![
            entry("envoy", Action::UpdateBundle, "2029-01-01T00:00:00Z"),
            entry("envoy-gateway", Action::Keep, "2030-06-01T00:00:00Z"),
        ];
        let dry = Report::new("envoy-gateway", "s".into(), true, 1, entries.clone())
            .with_next_renewal(&config, EPOCH);
        assert_eq!(dry.next_renewal.unwrap().secret, "envoy-gateway");
        let all_written = Report::new("envoy-gateway", "s".into(), true, 1, entries[..1].to_vec())
            .with_next_renewal(&config, EPOCH);
        assert_eq!(all_written.next_renewal, None);
        // A run's report keeps every Secret's dates (what it wrote is what is stored).
        let run = Report::new("envoy-gateway", "s".into(), false, 1, entries)
            .with_next_renewal(&config, EPOCH);
        assert_eq!(run.next_renewal.unwrap().secret, "envoy");
    }

    /// The report's closing lines keep one order, whatever else it holds: what was done, then
    /// what comes later, who else writes, key files, what was skipped, warnings, the renewal
    /// window, the lock and the next renewal (the snapshot tests' fixtures hold none of the
    /// lines after the summary, so this order was not pinned anywhere).
    #[test]
    fn the_closing_lines_come_in_one_order() {
        let written = Entry {
            secret: "envoy".into(),
            kind: crate::plan::Kind::Tls,
            action: Action::UpdateBundle,
            reason: String::new(),
            ca_sha256: None,
            not_after: None,
            cas: vec![],
            step: None,
            undone_by: None,
        };
        let mut r = Report::new("envoy-gateway", "s".into(), false, 1, vec![written]);
        r.note = Some("the next step after the gate".into());
        r.other_writers = vec![crate::report::check::WriterRow {
            kind: "Secret".into(),
            name: "envoy".into(),
            manager: "kustomize-controller".into(),
            operation: "Apply".into(),
            time: None,
            fields: vec!["data/ca.crt".into()],
            removed: false,
            origin: "overwrote",
            fight: vec![],
            text: "kustomize-controller wrote envoy".into(),
        }];
        r.key_modes = vec!["mode 0644 made 0600".into()];
        r.skipped = vec!["a consumer".into()];
        r.warnings = vec!["a warning".into()];
        r.renewal_window = Some(WindowReport {
            open: true,
            ..WindowReport::default()
        });
        r.lock = Some(LockReport {
            lease: "Lease ns/certgen".into(),
            renewal_failures: 1,
            ..LockReport::default()
        });
        r.next_renewal = Some(NextRenewal {
            due: "2030-01-01T00:00:00Z".into(),
            secret: "envoy".into(),
            overdue: false,
        });
        let text = r.to_text();
        let starts = [
            "1 write(s) done.",
            "Later: ",
            "Other writer: ",
            "Key file: ",
            "Skipped: ",
            "Warning: ",
            "Renewal window: ",
            "Lock: ",
            "Next renewal due: ",
        ];
        let at: Vec<usize> = starts
            .iter()
            .map(|p| {
                text.lines()
                    .position(|l| l.starts_with(p))
                    .unwrap_or_else(|| panic!("no line starts with {p:?} in:\n{text}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?} in:\n{text}");
    }

    fn consumer(name: &str, deployments: &[(&str, &str)]) -> ConsumerReport {
        ConsumerReport {
            name: name.into(),
            reload: Reload::Restart,
            deployments: deployments
                .iter()
                .map(|(d, action)| DeploymentReport::new(d, action))
                .collect(),
            note: None,
            probes: vec![],
        }
    }

    fn actions(r: &ConsumerReport) -> Vec<(&str, &str)> {
        r.deployments
            .iter()
            .map(|d| (d.name.as_str(), d.action.as_str()))
            .collect()
    }

    #[test]
    fn later_steps_add_what_they_did_and_quiet_states_are_shown_once() {
        let mut all = vec![consumer("gateway", &[("eg", "restarted")])];
        merge_consumers(
            &mut all,
            vec![
                consumer("gateway", &[("eg", "up-to-date"), ("eg-2", "up-to-date")]),
                consumer("envoy", &[("proxy", "hot")]),
            ],
        );
        merge_consumers(
            &mut all,
            vec![
                consumer("gateway", &[("eg", "restarted"), ("eg-2", "up-to-date")]),
                consumer("envoy", &[("proxy", "hot")]),
            ],
        );
        assert_eq!(all.len(), 2, "one entry per consumer, in first-seen order");
        assert_eq!(
            actions(&all[0]),
            [
                ("eg", "restarted"),
                ("eg-2", "up-to-date"),
                ("eg", "restarted")
            ],
            "every restart is kept; a quiet state only for a Deployment not shown yet"
        );
        assert_eq!(all[1].name, "envoy");
        assert_eq!(actions(&all[1]), [("proxy", "hot")]);
    }

    #[test]
    fn later_notes_and_probes_replace_earlier_ones() {
        let probe = |ok| EndpointResult {
            endpoint: "10.0.0.1:443".into(),
            ok,
            detail: String::new(),
            attempts: 1,
        };
        let mut first = consumer("gateway", &[]);
        first.note = Some("first".into());
        first.probes = vec![probe(false)];
        let mut all = vec![first];
        // Nothing new: the earlier note and probes stay.
        merge_consumers(&mut all, vec![consumer("gateway", &[])]);
        assert_eq!(all[0].note.as_deref(), Some("first"));
        assert_eq!(all[0].probes, [probe(false)]);
        let mut later = consumer("gateway", &[]);
        later.note = Some("later".into());
        later.probes = vec![probe(true)];
        merge_consumers(&mut all, vec![later]);
        assert_eq!(all[0].note.as_deref(), Some("later"));
        assert_eq!(all[0].probes, [probe(true)]);
    }

    #[test]
    fn a_rotations_workload_lines_say_their_step_once() {
        let mut all = Vec::new();
        for (phase, action) in [
            ("trust", "restarted"),
            ("leaves", "already-restarted"),
            ("leaves", "restarted"),
            ("cleanup", "already-restarted"),
        ] {
            let mut step = vec![consumer("gateway", &[("envoy-gateway", action)])];
            in_phase(&mut step, phase);
            merge_consumers(&mut all, step);
        }
        let mut report = Report::new("envoy-gateway", "namespace ns".into(), false, 1, vec![]);
        report.consumers = all;
        let text = report.to_text();
        assert!(
            text.contains("deployment envoy-gateway: restarted (trust step)\n")
                && text.contains("deployment envoy-gateway: restarted (leaves step)\n"),
            "{text}"
        );
        assert!(!text.contains("already-restarted"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["consumers"][0]["deployments"][1]["phase"], "leaves");

        // One step (a renewal): no step to tell apart.
        let mut one = vec![consumer("gateway", &[("envoy-gateway", "restarted")])];
        in_phase(&mut one, "steady");
        report.consumers = one;
        assert!(!report.to_text().contains("step)"), "{}", report.to_text());
    }

    #[test]
    fn a_keep_never_hides_a_write_of_the_same_secret() {
        let entry = |secret: &str, action| Entry {
            secret: secret.into(),
            kind: Kind::Tls,
            action,
            reason: format!("{action:?}"),
            ca_sha256: None,
            not_after: None,
            cas: Vec::new(),
            step: None,
            undone_by: None,
        };
        let mut done = vec![entry("a", Action::Renew), entry("b", Action::Keep)];
        merge(
            &mut done,
            vec![
                entry("a", Action::Keep),
                entry("b", Action::UpdateBundle),
                entry("c", Action::Keep),
            ],
        );
        let got: Vec<(&str, Action)> = done.iter().map(|e| (e.secret.as_str(), e.action)).collect();
        assert_eq!(
            got,
            [
                ("a", Action::Renew),
                ("b", Action::UpdateBundle),
                ("c", Action::Keep)
            ]
        );
    }
}
