//! After each step: have the consumers load what it wrote. Restart the consumers that do not
//! hot-reload, wait for their rollouts (`--wait`, and between steps), and prove over TLS that
//! peers serve the new certificates (`--probe`).
//!
//! Everything here is reported per consumer; failures become exit 1 (a rollout or probe failed)
//! or exit 3 (the deadline passed first), after the report is printed. Whether to restart and
//! whether a rollout is done are [`crate::rollout`]'s pure decisions, the requests the
//! Kubernetes adapter's ([`crate::k8s`]), the TLS dials [`crate::probe`]'s.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use super::step::Outcome;
use crate::config::{Config, Consumer, Probe, Reload, Workload};
use crate::error::Error;
use crate::outside::{Endpoints, EndpointsError, RolloutProgress, WorkloadView, Workloads};
use crate::probe::{self, ClientIdentity, Expected};
use crate::report::{ConsumerReport, DeploymentReport};
use crate::rollout::{RestartAction, RolloutError, Target, fingerprint, restart_needed};
use crate::store::StoreError;

/// What to do for the consumers after a step.
#[derive(Debug, Clone, Copy)]
pub struct Tasks {
    pub wait: bool,
    pub probe: bool,
    pub dry_run: bool,
    pub deadline: Instant,
    /// Restarts are an extra nobody asked for (no `--wait`), so no rules review proved their
    /// verbs before the run: a 403 on a workload request skips every restart for the rest of
    /// the run, with a warning and a report line, instead of failing it (src/access.rs).
    pub skip_refused: bool,
}

/// What went wrong in the consumers' tasks, beyond the report.
#[derive(Debug, Default)]
pub struct Problems {
    /// Failed rollouts, probes, paused or recreated workloads, missing required consumers.
    pub failed: Vec<String>,
    /// What was still pending when the deadline came.
    pub pending: Vec<String>,
    /// An API call the server refused (exit 5), if any.
    pub refused: Option<crate::store::StoreError>,
    /// Why restarts are skipped for the rest of the run, once a workload request was refused
    /// (403, without `--wait`): the caller keeps it and hands it to later steps.
    pub restarts_refused: Option<String>,
}

impl Problems {
    /// The error to exit with, if any: a timeout (3) outranks nothing; a failure (1) wins.
    pub fn into_error(self) -> Option<Error> {
        if let Some(e) = self.refused {
            Some(Error::Store(e))
        } else if !self.failed.is_empty() {
            Some(Error::Verification(self.failed.join("; ")))
        } else if !self.pending.is_empty() {
            Some(Error::Timeout(format!(
                "still pending at the deadline: {}; the Secrets are written and trusted, re-run certgen (or raise --timeout) to finish",
                self.pending.join("; ")
            )))
        } else {
            None
        }
    }
}

/// Restarts, waits and probes as asked. `workloads` is `None` in local mode. `refused`: why
/// restarts are skipped, when a request was refused earlier in the run (a new refusal comes
/// back in [`Problems::restarts_refused`]).
pub async fn reload(
    config: &Config,
    outcome: &Outcome,
    (workloads, client): (Option<&dyn Workloads>, Option<&dyn Endpoints>),
    tasks: Tasks,
    now: OffsetDateTime,
    refused: Option<String>,
) -> Result<(Vec<ConsumerReport>, Problems), Error> {
    let mut reports = Vec::new();
    let mut problems = Problems {
        restarts_refused: refused,
        ..Problems::default()
    };
    let mut targets: Vec<(usize, usize, Target)> = Vec::new();

    for consumer in &config.consumers {
        let mut report = ConsumerReport {
            name: consumer.name.clone(),
            reload: consumer.reload,
            deployments: vec![],
            note: None,
            probes: vec![],
        };
        match (workloads, &consumer.workload) {
            (_, None) => {}
            // Local mode has no workloads: such consumers matter only for their probes.
            (None, Some(_)) if consumer.probe.is_none() => continue,
            (None, Some(_)) => {}
            // Hot consumers reload by themselves: nothing to read or do, beyond probing.
            (Some(_), Some(_)) if consumer.reload == Reload::Hot => {
                report.note = Some("reloads by itself".into());
            }
            (Some(api), Some(workload)) => {
                let ci = reports.len();
                let waits = restart(
                    api,
                    (consumer, workload),
                    outcome,
                    (tasks, now),
                    &mut report,
                    &mut problems.restarts_refused,
                )
                .await?;
                problems.failed.extend(waits.failed);
                targets.extend(waits.targets.into_iter().map(|(di, t)| (ci, di, t)));
            }
        }
        // Features dropped for missing RBAC verbs (src/access.rs) are said, not hidden.
        if !consumer.skipped.is_empty() {
            let mut notes = consumer.skipped.clone();
            notes.extend(report.note.take());
            report.note = Some(notes.join("; "));
        }
        reports.push(report);
    }

    if tasks.wait
        && !tasks.dry_run
        && let Some(api) = workloads
    {
        wait_all(api, &mut reports, &mut problems, targets, tasks.deadline).await;
    }
    if tasks.probe && !tasks.dry_run {
        probe_all(
            config,
            outcome,
            client,
            &mut reports,
            &mut problems,
            tasks.deadline,
            now,
        )
        .await?;
    }
    Ok((reports, problems))
}

/// The rollouts to wait for after a consumer's restarts (by index of its report line), and
/// what failed.
#[derive(Default)]
struct Restarts {
    targets: Vec<(usize, Target)>,
    failed: Vec<String>,
}

/// The restart this step calls for on one workload (`dry_run`: what a run would decide from
/// the plan alone, without the workload's own record).
fn decide(
    consumer: &Consumer,
    w: &WorkloadView,
    outcome: &Outcome,
    dry_run: bool,
) -> RestartAction {
    let (fp, written, last_written) = content(consumer, outcome);
    if dry_run {
        return if written {
            RestartAction::Restarted
        } else {
            RestartAction::UpToDate
        };
    }
    restart_needed(w, &fp, written, last_written)
}

/// Why restarts are skipped for the rest of the run when `e` is a 403 and refusals are
/// skipped; `None` otherwise (the error stops the run).
fn restart_refusal(e: &StoreError, namespace: &str, skip: bool) -> Option<String> {
    let StoreError::Api(failure) = e else {
        return None;
    };
    if !skip || failure.status != Some(403) {
        return None;
    }
    let note = format!(
        "not restarted: this identity may not {} {}.apps in namespace {namespace} (403); restart it after a rotation (kubectl rollout restart), or grant that verb",
        failure.verb, failure.resource
    );
    tracing::warn!("{note}");
    Some(note)
}

/// Restarts a restart-only consumer's workloads as this step calls for, filling its report.
/// `skipped`: why restarts are skipped in this run, once a request was refused (set here on a
/// refusal).
async fn restart(
    api: &dyn Workloads,
    (consumer, workload): (&Consumer, &Workload),
    outcome: &Outcome,
    (tasks, now): (Tasks, OffsetDateTime),
    report: &mut ConsumerReport,
    skipped: &mut Option<String>,
) -> Result<Restarts, Error> {
    let mut out = Restarts::default();
    // A 403 earlier in this run (no --wait, so no review proved the verbs first).
    if let Some(note) = skipped {
        refused(consumer, report, note.clone());
        return Ok(out);
    }
    let mut refuse = |e: StoreError, report: &mut ConsumerReport| -> Result<(), Error> {
        let note = restart_refusal(&e, api.namespace(), tasks.skip_refused).ok_or(e)?;
        refused(consumer, report, note.clone());
        *skipped = Some(note);
        Ok(())
    };
    let found = match workload {
        Workload::Name(n) => api
            .get(consumer.kind, n)
            .await
            .map(|d| d.into_iter().collect()),
        Workload::Selector(s) => api.select(consumer.kind, s).await,
    };
    let found: Vec<_> = match found {
        Ok(found) => found,
        Err(e) => {
            refuse(e, report)?;
            return Ok(out);
        }
    };
    if found.is_empty() {
        out.failed
            .extend(missing(api.namespace(), consumer, workload, report));
    }
    for d in found {
        let name = d.name.clone();
        let mut entry = match decide(consumer, &d, outcome, tasks.dry_run) {
            RestartAction::AlreadyRestarted => DeploymentReport::new(&name, "already-restarted"),
            RestartAction::UpToDate => DeploymentReport::new(&name, "up-to-date"),
            RestartAction::Restarted if tasks.dry_run => {
                DeploymentReport::new(&name, "would-restart")
            }
            RestartAction::Restarted => {
                let (fp, _, _) = content(consumer, outcome);
                match api.restart(&d, &fp, now).await {
                    // Refused (403 without --wait): no restarts for this consumer.
                    Err(e) => {
                        report.deployments.clear();
                        out.targets.clear();
                        refuse(e, report)?;
                        return Ok(out);
                    }
                    Ok(Ok(target)) => {
                        tracing::info!(workload = %name, kind = %d.kind, consumer = %consumer.name, fingerprint = %fp, "restarted {} {}/{name}", d.kind.noun(), api.namespace());
                        out.targets.push((report.deployments.len(), target));
                        DeploymentReport::new(&name, "restarted")
                    }
                    Ok(Err(e)) => {
                        let action = match e {
                            RolloutError::Paused { .. } => "paused",
                            RolloutError::Deleted { .. } => "deleted",
                            _ => "recreated",
                        };
                        out.failed.push(e.to_string());
                        let mut r = DeploymentReport::new(&name, action);
                        r.detail = Some(e.to_string());
                        r
                    }
                }
            }
        };
        if tasks.wait && entry.action == "already-restarted" {
            // A repeated run still waits for the rollout it (or an earlier run) began.
            let target = Target {
                kind: d.kind,
                name: name.clone(),
                uid: d.uid.clone(),
                generation: d.status.generation,
            };
            out.targets.push((report.deployments.len(), target));
            entry.detail = Some("restarted earlier for these certificates".into());
        }
        report.deployments.push(entry.of(d.kind));
    }
    Ok(out)
}

/// A consumer none of whose workloads exists: said in its report line, and a failure when it
/// is marked required.
fn missing(
    namespace: &str,
    consumer: &Consumer,
    workload: &Workload,
    report: &mut ConsumerReport,
) -> Option<String> {
    let noun = consumer.kind.noun();
    let what = match workload {
        Workload::Name(n) => format!("{noun} {namespace}/{n} does not exist"),
        Workload::Selector(s) => format!("no {noun} in {namespace} matches {s}"),
    };
    report.note = Some(format!("missing: {what}; skipped"));
    consumer
        .required
        .then(|| format!("consumer {}: {what} (it is marked required)", consumer.name))
}

/// A restart-only consumer left alone because the API server refused a workload request
/// (`note` says which verb): said in the report and logged, as when a rules review rules it out.
fn refused(consumer: &Consumer, report: &mut ConsumerReport, note: String) {
    tracing::debug!(consumer = %consumer.name, "{note}");
    report.note = Some(note);
}

/// The restart fingerprint of a consumer, whether this step wrote anything it mounts, and when
/// what it mounts was last written (on the store's clock).
fn content(consumer: &Consumer, outcome: &Outcome) -> (String, bool, Option<OffsetDateTime>) {
    let fp = fingerprint(consumer.mounts.iter().map(|m| {
        (
            m.as_str(),
            outcome.digests.get(m).map(String::as_str).unwrap_or(""),
        )
    }));
    (
        fp,
        consumer.mounts.iter().any(|m| outcome.written.contains(m)),
        consumer
            .mounts
            .iter()
            .filter_map(|m| outcome.written_at.get(m).copied())
            .max(),
    )
}

async fn wait_all(
    api: &dyn Workloads,
    reports: &mut [ConsumerReport],
    problems: &mut Problems,
    targets: Vec<(usize, usize, Target)>,
    deadline: Instant,
) {
    if targets.is_empty() {
        return;
    }
    let last: Arc<RolloutProgress> = Arc::new(Mutex::new(BTreeMap::new()));
    let ticker = spawn_progress(
        targets.iter().map(|(_, _, t)| t.label()).collect(),
        last.clone(),
    );
    let waits = targets.iter().map(|(_, _, t)| api.wait(t, deadline, &last));
    let results = futures::future::join_all(waits).await;
    ticker.abort();
    for ((ci, di, target), result) in targets.iter().zip(results) {
        let entry = &mut reports[*ci].deployments[*di];
        match result {
            Ok(Some(took)) => {
                entry.rollout = Some("done".into());
                entry.rollout_seconds = Some((took.as_secs_f64() * 10.0).round() / 10.0);
            }
            Ok(None) => {
                let state = last
                    .lock()
                    .unwrap()
                    .get(&target.label())
                    .cloned()
                    .unwrap_or_default();
                entry.rollout = Some("pending".into());
                entry.detail = Some(state.clone());
                problems.pending.push(format!(
                    "{} {}/{}: {state}",
                    target.kind.noun(),
                    api.namespace(),
                    target.name
                ));
            }
            Err(RolloutError::Refused(e)) => {
                entry.rollout = Some("failed".into());
                entry.detail = Some(e.to_string());
                problems.refused.get_or_insert(e);
            }
            Err(e) => {
                entry.rollout = Some("failed".into());
                entry.detail = Some(e.to_string());
                problems.failed.push(e.to_string());
            }
        }
    }
}

/// Shows waiting progress: a live line per workload on a terminal, a log line every 10 s
/// otherwise.
fn spawn_progress(
    names: Vec<String>,
    last: Arc<Mutex<BTreeMap<String, String>>>,
) -> tokio::task::JoinHandle<()> {
    let tty = std::io::stderr().is_terminal();
    tokio::spawn(async move {
        if tty {
            let multi = indicatif::MultiProgress::new();
            let style =
                indicatif::ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
            let bars: Vec<_> = names
                .iter()
                .map(|n| {
                    let bar = multi.add(indicatif::ProgressBar::new_spinner());
                    bar.set_style(style.clone());
                    bar.set_prefix(n.clone());
                    bar
                })
                .collect();
            loop {
                {
                    let state = last.lock().unwrap();
                    for (bar, n) in bars.iter().zip(&names) {
                        bar.set_message(state.get(n).cloned().unwrap_or_else(|| "waiting".into()));
                        bar.tick();
                    }
                }
                tokio::time::sleep(Duration::from_millis(120)).await;
            }
        } else {
            let mut interval = tokio::time::interval(Duration::from_secs(10));
            interval.tick().await;
            loop {
                interval.tick().await;
                let state = last.lock().unwrap().clone();
                for n in &names {
                    let s = state.get(n).cloned().unwrap_or_else(|| "waiting".into());
                    tracing::info!(workload = %n, "waiting for rollout of {n}: {s}");
                }
            }
        }
    })
}

async fn probe_all(
    config: &Config,
    outcome: &Outcome,
    client: Option<&dyn Endpoints>,
    reports: &mut [ConsumerReport],
    problems: &mut Problems,
    deadline: Instant,
    now: OffsetDateTime,
) -> Result<(), Error> {
    let Some(signer) = &outcome.signer else {
        for r in reports.iter_mut() {
            r.note
                .get_or_insert_with(|| "not probed: certgen does not hold the CA key yet".into());
        }
        return Ok(());
    };
    let identity = ClientIdentity::issue(signer, now)?;
    for (consumer, report) in config.consumers.iter().zip(reports.iter_mut()) {
        let Some(p) = &consumer.probe else { continue };
        let Some(leaf) = outcome.leaves.get(&p.secret) else {
            continue;
        };
        let endpoints = match (client, &p.service) {
            (Some(client), Some(service)) => {
                match client.ready(service, p.port).await.map(addresses) {
                    Ok(e) => e,
                    Err(EndpointsError::Api(e)) => {
                        report.note = Some(e.to_string());
                        problems.refused.get_or_insert(e);
                        continue;
                    }
                    Err(EndpointsError::Missing(e)) => {
                        problems
                            .failed
                            .push(format!("consumer {}: {e}", consumer.name));
                        report.note = Some(e);
                        continue;
                    }
                }
            }
            _ => p.addresses.clone(),
        };
        if endpoints.is_empty() {
            let msg = format!("consumer {}: no ready endpoints to probe", consumer.name);
            problems.failed.push(msg.clone());
            report.note = Some(msg);
            continue;
        }
        let expected = Expected {
            secret: p.secret.clone(),
            leaf: leaf.clone(),
            issuer: signer.cert.clone(),
        };
        let roots = [signer.cert.clone()];
        let probes = endpoints
            .iter()
            .map(|e| probe::probe_until(e, &p.server_name, &roots, &expected, &identity, deadline));
        let results = futures::future::join_all(probes).await;
        for r in &results {
            if r.ok {
                tracing::info!(consumer = %consumer.name, endpoint = %r.endpoint, "probe ok: {}", r.detail);
            } else {
                problems.failed.push(format!(
                    "probe of {} ({}) failed: {}",
                    r.endpoint, consumer.name, r.detail
                ));
            }
        }
        report.probes = results;
    }
    Ok(())
}

/// The addresses of a Service's ready endpoints, to dial.
fn addresses(endpoints: Vec<crate::outside::ReadyEndpoint>) -> Vec<String> {
    endpoints.into_iter().map(|e| e.address).collect()
}

/// The addresses a confirmation dials for probe `p`: its Service's ready endpoints (`None`
/// when they cannot be read, or there are none), else its configured addresses.
async fn confirming(client: Option<&dyn Endpoints>, p: &Probe) -> Option<Vec<String>> {
    match (client, &p.service) {
        (Some(client), Some(service)) => client
            .ready(service, p.port)
            .await
            .ok()
            .filter(|e| !e.is_empty())
            .map(addresses),
        _ => Some(p.addresses.clone()),
    }
}

/// Whether every hot-reloading consumer has a probe (and there is one): then probes alone can
/// open a gate.
pub fn all_hot_probed(config: &Config) -> bool {
    let mut hot = config.consumers.iter().filter(|c| c.reload == Reload::Hot);
    hot.clone().next().is_some() && hot.all(|c| c.probe.is_some())
}

/// Whether every hot-reloading consumer demonstrably serves the leaf `outcome` holds for the
/// Secret its probe names, issued by the active CA: every probed endpoint presents it (and
/// accepts a client certificate from that CA). Retries until `until`.
pub async fn leaves_confirmed(
    config: &Config,
    client: Option<&dyn Endpoints>,
    outcome: &Outcome,
    until: Instant,
) -> bool {
    let Some(signer) = &outcome.signer else {
        return false;
    };
    let Ok(identity) = ClientIdentity::issue(signer, OffsetDateTime::now_utc()) else {
        return false;
    };
    let roots = [signer.cert.clone()];
    for consumer in config.consumers.iter().filter(|c| c.reload == Reload::Hot) {
        let Some(p) = &consumer.probe else {
            return false;
        };
        let Some(leaf) = outcome.leaves.get(&p.secret) else {
            return false;
        };
        let Some(endpoints) = confirming(client, p).await else {
            return false;
        };
        let expected = Expected {
            secret: p.secret.clone(),
            leaf: leaf.clone(),
            issuer: signer.cert.clone(),
        };
        for endpoint in endpoints {
            let r = probe::probe_until(
                &endpoint,
                &p.server_name,
                &roots,
                &expected,
                &identity,
                until,
            )
            .await;
            if !r.ok {
                tracing::info!(consumer = %consumer.name, endpoint = %endpoint, "does not serve the stored leaf yet: {}", r.detail);
                return false;
            }
        }
    }
    true
}

/// Whether every hot-reloading consumer demonstrably trusts `pending`: each has a probe, and
/// every probed endpoint completes a handshake presenting a client certificate from `pending`
/// (the server still presents its current leaf, from `active`). Retries until `until`.
pub async fn trust_confirmed(
    config: &Config,
    client: Option<&dyn Endpoints>,
    pending: &crate::pki::CaKey,
    active: Option<&crate::pki::Cert>,
    until: Instant,
) -> bool {
    let hot: Vec<&Consumer> = config
        .consumers
        .iter()
        .filter(|c| c.reload == Reload::Hot)
        .collect();
    if hot.is_empty() || hot.iter().any(|c| c.probe.is_none()) {
        return false;
    }
    let Ok(identity) = ClientIdentity::issue(pending, OffsetDateTime::now_utc()) else {
        return false;
    };
    let mut roots = vec![pending.cert.clone()];
    roots.extend(active.cloned());
    for consumer in hot {
        let p = consumer.probe.as_ref().expect("checked above");
        let Some(endpoints) = confirming(client, p).await else {
            return false;
        };
        for endpoint in endpoints {
            if !probe::accepts_client(&endpoint, &p.server_name, &roots, &identity, until).await {
                tracing::info!(consumer = %consumer.name, endpoint = %endpoint, "does not accept the pending CA yet");
                return false;
            }
        }
    }
    true
}
