//! The rotation driver: one invocation of certgen's main job, start to end.
//!
//! A read-only look first ([`step::look`]); the run lock when anything is to be written; then
//! the steps of a renewal or rotation ([`step::step`]: trust, gate, leaves, gate, cleanup),
//! each followed by its `caBundle` targets (`webhooks.rs`) and the consumers' restarts, waits
//! and probes (`consumers.rs`), with the gates waited out in between; finally the report
//! ([`crate::report`] assembles it). It decides only the order of steps and how long to wait:
//! what each step writes is the plan's ([`crate::plan`]).

mod consumers;
mod gate;
mod step;
mod webhooks;

use tokio::time::Instant;

pub use self::gate::{POKE_SETTLE, wait_timer};
pub use self::step::{MAX_ATTEMPTS, Outcome, look, step};
use crate::apply::Guard;
use crate::config::{Config, RunOptions};
use crate::error::Error;
use crate::k8s::{Pods, WebhookStore, Workloads};
use crate::lock::{self, LockError};
use crate::plan::{self, Phase};
use crate::report::{self, ConsumerReport, Entry, GateReport, Report};
use crate::store::SecretStore;

/// How many steps one invocation may take: trust, gate, leaves, gate, cleanup, and retries.
pub const MAX_STEPS: usize = 12;

/// One invocation of the main job: everything it needs besides the store.
pub struct Invocation<'a> {
    pub config: &'a Config,
    pub options: RunOptions,
    /// When the run must be done by ([`RunOptions::deadline`]).
    pub deadline: Instant,
    /// The consumers' workloads, of every kind (in a cluster). The field keeps its first
    /// name so that callers (the simulation) need not change.
    pub deployments: Option<&'a Workloads>,
    /// The client probes find Services' endpoints with (in a cluster).
    pub client: Option<&'a kube::Client>,
    /// The `caBundle` targets' store (in a cluster with `webhooks:` configured).
    pub webhooks: Option<&'a WebhookStore>,
    /// The namespace's pods, to push Secret changes to (in a cluster, unless `--no-poke`).
    pub pods: Option<&'a Pods>,
    pub lock: lock::Target,
}

/// How far away a cleanup gate may be for a run that cannot open it on evidence to wait for
/// it (without `--wait`): further than this, the run ends at once and leaves the cleanup to the
/// next run (the chart's CronJob), since every consumer works as things are.
pub const CLEANUP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Invocation<'_> {
    /// Pushed propagation, when this run may poke pods.
    fn push(&self) -> Option<gate::Push<'_>> {
        Some(gate::Push {
            pods: self.pods?,
            workloads: self.deployments,
            config: self.config,
            delay: self.options.propagation_delay,
        })
    }

    /// Restarts, waits and probes for what `outcome` holds, as asked.
    async fn consumers<S: SecretStore>(
        &self,
        store: &S,
        outcome: &Outcome,
        wait: bool,
        probe: bool,
        dry_run: bool,
    ) -> Result<(Vec<ConsumerReport>, consumers::Problems), Error> {
        let tasks = consumers::Tasks {
            wait,
            probe,
            dry_run,
            deadline: self.deadline,
        };
        consumers::reload(
            self.config,
            outcome,
            self.deployments,
            self.client,
            tasks,
            store.now(),
        )
        .await
    }
}

/// Runs certgen's main job and returns the report, plus the error to exit with (after printing).
pub async fn run<S: SecretStore>(
    store: &S,
    inv: Invocation<'_>,
) -> Result<(Report, Option<Error>), Error> {
    // A read-only look first: dry runs and runs with nothing to do never take the lock.
    let mut look_options = plan::Options::from_run(&inv.options);
    // A dry run's report is all it gives: its gates count from the caBundle targets' last
    // writes, as the run's steps would (one read of each target; a real run reads them before
    // its first step instead).
    if inv.options.dry_run
        && let Some(targets) = webhooks::Targets::read(&inv).await?
    {
        look_options.other_written_at = targets.written_at(&inv);
    }
    let look = match look(store, inv.config, look_options).await {
        // Without the lock, another run may be between two writes: judge again under the lock,
        // where a real problem still stops the run before anything is written.
        Err(Error::Invalid(e)) if !inv.options.dry_run => {
            tracing::debug!("unusable state without the lock, re-checking under it: {e}");
            None
        }
        other => Some(other?),
    };
    let Some(look) = look else {
        return locked(store, &inv, None, false).await;
    };
    if inv.options.dry_run {
        let (reports, _) = inv.consumers(store, &look, false, false, true).await?;
        let pods = match inv.push() {
            Some(push) if !look.written.is_empty() => push.planned(&look).await?,
            _ => vec![],
        };
        let mut report = look.report;
        report.events = crate::events::of_step(&look.phase, &report.secrets);
        report.consumers = reports;
        report.pods = pods;
        return Ok((report, None));
    }
    let needs_lock = !look.written.is_empty()
        || look.phase != Phase::Steady
        || webhooks::behind(&inv, &look.bundles).await?;
    if !needs_lock {
        // Nothing to write: what the look saw is the final state.
        let (reports, verdict) = inv
            .consumers(store, &look, inv.options.wait, inv.options.probe, false)
            .await?;
        let mut report = look.report;
        report.dry_run = false;
        report.consumers = reports;
        return Ok((report, verdict.into_error()));
    }
    // Every write of a fresh install is a create, which the API server refuses when the object
    // exists: two runs cannot both create a Secret, and the one that loses re-reads and
    // continues from what the other stored (a plain re-plan, as after any lost race). There is
    // nothing earlier to be consistent with, so neither the lock nor a second read under it can
    // change what is written: the look's read is the plan's input (docs/api-requests.md). Runs
    // without Lease verbs rely on the same fencing for every step.
    let fresh = fresh_install(&inv, &look);
    if fresh {
        tracing::debug!(
            "fresh install: creates only, each fenced by the Secret's absence; no run lock"
        );
    }
    locked(store, &inv, Some(&look), fresh).await
}

/// Whether the look found none of the Secrets in a cluster (a fresh install): every write is
/// then a create fenced by the API server, and the look's read can be planned from directly.
/// Not in local mode, whose file lock costs no request and whose creates are not exclusive
/// across processes without it.
fn fresh_install(inv: &Invocation<'_>, look: &Outcome) -> bool {
    !matches!(inv.lock, lock::Target::File(_)) && look.observed.nothing_stored()
}

/// Takes the lock (none for a `fresh` install, see [`run`]), runs the steps, releases the lock.
async fn locked<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: Option<&Outcome>,
    fresh: bool,
) -> Result<(Report, Option<Error>), Error> {
    let held = if fresh {
        lock::Held::Unlocked
    } else {
        take_lock(inv).await?
    };
    let (result, writes) = {
        let still_held = || !held.lost();
        let guard = Guard::new(&still_held);
        let result = steps(store, inv, &guard, look, fresh).await;
        (result, guard.written())
    };
    held.release().await;
    result.map_err(|e| e.after(writes))
}

async fn take_lock(inv: &Invocation<'_>) -> Result<lock::Held, Error> {
    lock::take(&inv.lock, inv.deadline)
        .await
        .map_err(|e| match e {
            LockError::Contended { .. } => Error::Locked(e.to_string()),
            LockError::Store(s) => Error::Store(s),
        })
}

/// The steps of a run, from `look` when there was one; a `fresh` install plans its first step
/// from the look's read (see [`run`]).
async fn steps<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    guard: &Guard<'_>,
    look: Option<&Outcome>,
    fresh: bool,
) -> Result<(Report, Option<Error>), Error> {
    let config = inv.config;
    let mut plan_options = plan::Options::from_run(&inv.options);
    let mut written: Vec<Entry> = Vec::new();
    let mut consumer_reports: Vec<ConsumerReport> = Vec::new();
    // The Events of the run, in order: each step's writes, then its restarts.
    let mut events: Vec<report::EventLine> = Vec::new();
    let mut attempts = 0;
    let push = inv.push();
    let mut evidence = gate::Evidence::default();
    let mut gates: Vec<GateReport> = Vec::new();
    // Before anything is written: a restart-only consumer that missed the restart for what is
    // stored now (a run stopped between its writes and the patch) is restarted and waited for,
    // so the first step (perhaps the leaves, if the gate's time has passed) finds it loaded.
    // When nothing is stored there is no restart to have missed (and no workload read).
    if let (Some(look), Some(_), false) = (look, inv.deployments, fresh) {
        // What is stored, nothing written yet.
        let mut stored = look.clone();
        stored.written.clear();
        let (reports, problems) = inv.consumers(store, &stored, true, false, false).await?;
        events.extend(crate::events::of_restarts(&reports));
        if let Some(e) = problems.into_error() {
            let mut report = look.report.clone();
            report.dry_run = false;
            report.consumers = reports;
            report.events = events;
            return Ok((report, Some(e)));
        }
        // Only a restart it made belongs in the report: the steps report the rest.
        let mut reports = reports;
        for r in &mut reports {
            r.deployments.retain(|d| {
                !matches!(
                    d.action.as_str(),
                    "up-to-date" | "hot" | "already-restarted"
                )
            });
        }
        reports.retain(|r| !r.deployments.is_empty());
        report::merge_consumers(&mut consumer_reports, reports);
    }
    // The caBundle targets, read once before the first step (not for a fresh install: with no
    // Secret stored there is no bundle of an earlier run for them to have followed): a gate
    // counts from their last write as from a Secret's, across runs too.
    let mut targets = if fresh {
        None
    } else {
        webhooks::Targets::read(inv).await?
    };
    plan_options.other_written_at = targets.as_ref().and_then(|t| t.written_at(inv));
    // A target that drifted from its Secret's stored bundle is written by the first step's
    // sync, after the step's own writes: that step's gate counts from now, so it writes no leaf
    // before the API server has the bundle again (it re-plans from the repair, as after any
    // caBundle write).
    if let (Some(t), Some(look)) = (&targets, look)
        && t.behind_stored(inv, &look.observed)
    {
        tracing::debug!(
            "a caBundle target drifted from its Secret: it is repaired before any leaf"
        );
        plan_options.other_written_at = Some(store.now());
    }
    for index in 0..MAX_STEPS {
        if !(guard.held)() {
            return Err(Error::LockLost);
        }
        // A fresh install plans from the look's read (see `run`); every other first step
        // reads again under the lock, since another run may have written since the look.
        let seed = (index == 0 && fresh)
            .then(|| look.map(|l| l.observed.clone()))
            .flatten();
        let outcome = step(store, config, plan_options, guard, seed).await?;
        attempts += outcome.report.attempts;
        // caBundle targets follow their Secret's bundle right after it is written; a write
        // there is one more change consumers (the API server) must load before the next step.
        let synced = webhooks::sync(inv, &outcome, index == 0, targets.take()).await?;
        let webhook_wrote = synced.iter().any(|e| e.action.writes());
        if webhook_wrote {
            plan_options.other_written_at = Some(store.now());
            evidence.wrote_other();
        }
        // Pushed propagation: every pod that mounts what this step wrote is poked now, so its
        // kubelet re-projects the Secrets while restarts and rollouts run.
        // Only changes: a Secret created by this step was mounted by no running pod.
        let tls: Vec<&String> = outcome
            .written
            .iter()
            .filter(|n| config.tls.iter().any(|t| &t.name == *n))
            .filter(|n| outcome.observed.get(n).present().is_some())
            .collect();
        if let Some(push) = &push
            && (webhook_wrote || !tls.is_empty())
        {
            if !tls.is_empty() {
                // The store's clock is never ahead of the server's, by up to a second.
                let by = store.now() + time::Duration::seconds(1);
                evidence.wrote(tls, by);
            }
            push.after_step(&mut evidence, &outcome, store.now())
                .await?;
        }
        written.extend(synced.iter().filter(|e| e.action.writes()).cloned());
        // Acted on: never a second new CA, or new HMAC bytes, in one invocation.
        if outcome.ca_written {
            plan_options.overwrite = false;
        }
        if outcome.hmac_written {
            plan_options.rotate_hmac = false;
        }
        plan_options.gate_waited = None;
        written.extend(
            outcome
                .report
                .secrets
                .iter()
                .filter(|e| e.action.writes())
                .cloned(),
        );
        // A step that others follow relies on restart-only consumers having loaded it: their
        // rollouts are part of the gate, whatever --wait says. Probes verify the end state.
        let last = matches!(outcome.phase, Phase::Steady | Phase::Cleanup { last: true });
        let (reports, problems) = inv
            .consumers(
                store,
                &outcome,
                inv.options.wait || !last,
                inv.options.probe && last,
                false,
            )
            .await?;
        events.extend(crate::events::of_step(
            &outcome.phase,
            &outcome.report.secrets,
        ));
        events.extend(crate::events::of_restarts(&reports));
        report::merge_consumers(&mut consumer_reports, reports);
        let phase = outcome.phase.clone();
        let outcome_pending = &outcome.pending;
        let outcome_signer = outcome.signer.as_ref().map(|s| s.cert.clone());
        let last_report = &outcome.report;
        let report = |written, consumers| {
            let mut report = Report::after_steps(last_report, written, consumers, attempts);
            report.events = events.clone();
            report
        };
        let finish = |mut r: Report, evidence: &gate::Evidence, gates: &[GateReport]| {
            r.pods = evidence.pods.clone();
            r.gates = gates.to_vec();
            r
        };
        if let Some(e) = problems.into_error() {
            let r = finish(report(written, consumer_reports), &evidence, &gates);
            return Ok((r, Some(e)));
        }
        match phase {
            Phase::Steady | Phase::Cleanup { last: true } => {
                let r = finish(report(written, consumer_reports), &evidence, &gates);
                return Ok((r, None));
            }
            Phase::Trust | Phase::Leaves | Phase::Cleanup { last: false } => continue,
            // A gate computed before a caBundle write: plan again, counting from that write.
            Phase::Gate { .. } if webhook_wrote => continue,
            Phase::Gate {
                ready_at,
                reason,
                pending,
                state,
                optional,
            } => {
                let left = (ready_at - store.now()).max(time::Duration::ZERO);
                let left = std::time::Duration::try_from(left).unwrap_or(std::time::Duration::MAX);
                let until = Instant::now()
                    .checked_add(left)
                    .map_or(inv.deadline, |t| t.min(inv.deadline));
                let started = Instant::now();
                let opened = |by: &str| GateReport {
                    reason: reason.clone(),
                    opened_by: by.to_string(),
                    seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                };
                // Evidence first: every pod that mounts what changed was poked and had time to
                // load it, was created since, or is gone (gate.rs).
                if let Some(push) = &push {
                    tracing::info!(
                        phase = "gate",
                        "{reason}; pods that mount what changed were poked: waiting for the evidence"
                    );
                    if push
                        .wait(
                            &mut evidence,
                            &outcome,
                            plan_options.other_written_at,
                            &|| store.now(),
                            until,
                        )
                        .await?
                    {
                        tracing::info!(
                            phase = "gate",
                            "every pod that mounts what changed has loaded it (poked, created since, or gone)"
                        );
                        gates.push(opened("evidence"));
                        plan_options.gate_waited = Some(state);
                        continue;
                    }
                }
                // Probes can open the trust-to-leaves gate early: when every hot-reloading
                // consumer accepts a client certificate from the pending CA, it has the new trust.
                if let (Some(fp), Some(pending)) = (pending, &outcome_pending) {
                    tracing::info!(
                        phase = "gate",
                        "{reason}; probing hot-reloading consumers for the new trust"
                    );
                    if consumers::trust_confirmed(
                        config,
                        inv.client,
                        pending,
                        outcome_signer.as_ref(),
                        until,
                    )
                    .await
                    {
                        tracing::info!(
                            phase = "gate",
                            "every hot-reloading consumer accepts the pending CA"
                        );
                        gates.push(opened("probe"));
                        plan_options.trust_confirmed = Some(fp);
                        continue;
                    }
                }
                let left = std::time::Duration::try_from(
                    (ready_at - store.now()).max(time::Duration::ZERO),
                )
                .unwrap_or(std::time::Duration::MAX);
                let fits = Instant::now()
                    .checked_add(left)
                    .is_some_and(|t| t <= inv.deadline);
                // A cleanup no evidence can open is left to the next run when it is far away
                // (in a cluster, without --wait): nothing breaks meanwhile, and a run should
                // not sit for minutes on a step nobody waits for (docs/rotation.md).
                let leave =
                    optional && inv.client.is_some() && !inv.options.wait && left > CLEANUP_WAIT;
                if !fits || leave {
                    let mut report = finish(report(written, consumer_reports), &evidence, &gates);
                    if optional {
                        // Every consumer works as things are; the next run drops the old CA.
                        let why = if fits {
                            "certgen does not wait that long without --wait (no pod could be poked to prove it sooner)"
                        } else {
                            "that is past --timeout"
                        };
                        let note = format!(
                            "{reason}; {why}, so a run after {} finishes it (the chart's CronJob does)",
                            crate::timefmt::rfc3339(ready_at)
                        );
                        tracing::info!(phase = "gate", "{note}");
                        report.note = Some(note);
                        return Ok((report, None));
                    }
                    let e = Error::Timeout(format!(
                        "{reason}; that is past --timeout. Every bundle trusts every leaf that consumers may hold, so nothing breaks meanwhile: re-run certgen after {} to finish",
                        crate::timefmt::rfc3339(ready_at)
                    ));
                    return Ok((report, Some(e)));
                }
                gate::wait_timer(left, &reason).await;
                gates.push(opened("timer"));
                // The wait was timed on this process's monotonic clock: for the state it was
                // computed for, the gate is open even if the store's clock disagrees.
                plan_options.gate_waited = Some(state);
            }
        }
    }
    Err(Error::Unfinished(MAX_STEPS))
}
