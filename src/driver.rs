//! One invocation, start to end: a read-only look, the run lock when anything is to be written,
//! then the steps of a rotation (trust, gate, leaves) with the consumers' restarts and waits
//! after each, and finally the report.

use tokio::time::Instant;

use crate::config::Config;
use crate::consumers;
use crate::engine::{self, RunOptions};
use crate::exit::Error;
use crate::k8s::Deployments;
use crate::lock::{self, LockError};
use crate::plan::{self, Phase};
use crate::report::{ConsumerReport, Entry, Report};
use crate::store::SecretStore;

/// How many steps one invocation may take: trust, gate, leaves, gate, cleanup, and retries.
const MAX_STEPS: usize = 12;

/// Everything a run needs besides the store.
pub struct Context<'a> {
    pub config: &'a Config,
    pub plan: plan::Options,
    pub dry_run: bool,
    pub wait: bool,
    pub probe: bool,
    pub deadline: Instant,
    pub deployments: Option<&'a Deployments>,
    pub client: Option<&'a kube::Client>,
    /// The `caBundle` targets' store (in a cluster with `webhooks:` configured).
    pub webhooks: Option<&'a crate::k8s::WebhookStore>,
    pub lock: lock::Target,
}

impl Context<'_> {
    /// Restarts, waits and probes for what `outcome` holds (consumers.rs), as asked.
    async fn consumers<S: SecretStore>(
        &self,
        store: &S,
        outcome: &engine::Outcome,
        wait: bool,
        probe: bool,
        dry_run: bool,
    ) -> Result<(Vec<ConsumerReport>, consumers::Verdict), Error> {
        let options = consumers::Options {
            wait,
            probe,
            dry_run,
            deadline: self.deadline,
        };
        consumers::run(
            self.config,
            outcome,
            self.deployments,
            self.client,
            options,
            store.now(),
        )
        .await
    }
}

/// Runs certgen's main job and returns the report, plus the error to exit with (after printing).
pub async fn drive<S: SecretStore>(
    store: &S,
    ctx: Context<'_>,
) -> Result<(Report, Option<Error>), Error> {
    let config = ctx.config;
    // A read-only look first: dry runs and runs with nothing to do never take the lock.
    let look = match engine::run(
        store,
        config,
        RunOptions {
            plan: ctx.plan,
            dry_run: true,
        },
        &engine::Guard::new(&|| true),
    )
    .await
    {
        // Without the lock, another run may be between two writes: judge again under the lock,
        // where a real problem still stops the run before anything is written.
        Err(Error::Invalid(e)) if !ctx.dry_run => {
            tracing::debug!("unusable state without the lock, re-checking under it: {e}");
            None
        }
        other => Some(other?),
    };
    let Some(look) = look else {
        return locked(store, &ctx, None).await;
    };
    if ctx.dry_run {
        let (reports, _) = ctx.consumers(store, &look, false, false, true).await?;
        let mut report = look.report;
        report.consumers = reports;
        return Ok((report, None));
    }
    let needs_lock = !look.written.is_empty()
        || look.phase != Phase::Steady
        || webhooks_behind(&ctx, &look.bundles).await?;
    if !needs_lock {
        // Nothing to write: what the look saw is the final state.
        let (reports, verdict) = ctx
            .consumers(store, &look, ctx.wait, ctx.probe, false)
            .await?;
        let mut report = look.report;
        report.dry_run = false;
        report.consumers = reports;
        return Ok((report, verdict.into_error()));
    }
    if fresh_install(&ctx, &look) {
        // Every write of a fresh install is a create, which the API server refuses when the
        // object exists: two runs cannot both create a Secret, and the one that loses re-reads
        // and continues from what the other stored (a plain re-plan, as after any lost race).
        // There is nothing earlier to be consistent with, so neither the lock nor a second read
        // under it can change what is written: the look's read is the plan's input (design.md,
        // "API requests"). Runs without Lease verbs rely on the same fencing for every step.
        tracing::debug!(
            "fresh install: creates only, each fenced by the Secret's absence; no run lock"
        );
        let guard = engine::Guard::new(&|| true);
        let result = steps(store, &ctx, &guard, Some(&look)).await;
        return result.map_err(|e| e.after(guard.writes()));
    }
    locked(store, &ctx, Some(&look)).await
}

/// Whether the look found none of the Secrets in a cluster (a fresh install): every write is
/// then a create fenced by the API server, and the look's read can be planned from directly.
/// Not in local mode, whose file lock costs no request and whose creates are not exclusive
/// across processes without it.
fn fresh_install(ctx: &Context<'_>, look: &engine::Outcome) -> bool {
    !matches!(ctx.lock, lock::Target::File(_)) && look.observed.nothing_stored()
}

/// Takes the lock, runs the steps, releases the lock.
async fn locked<S: SecretStore>(
    store: &S,
    ctx: &Context<'_>,
    look: Option<&engine::Outcome>,
) -> Result<(Report, Option<Error>), Error> {
    let held = take_lock(ctx).await?;
    let (result, writes) = {
        let still_held = || !held.lost();
        let guard = engine::Guard::new(&still_held);
        let result = steps(store, ctx, &guard, look).await;
        (result, guard.writes())
    };
    held.release().await;
    result.map_err(|e| e.after(writes))
}

async fn take_lock(ctx: &Context<'_>) -> Result<lock::Held, Error> {
    lock::take(&ctx.lock, ctx.deadline)
        .await
        .map_err(|e| match e {
            LockError::Contended { .. } => Error::Locked(e.to_string()),
            LockError::Store(s) => Error::Store(s),
        })
}

async fn steps<S: SecretStore>(
    store: &S,
    ctx: &Context<'_>,
    guard: &engine::Guard<'_>,
    look: Option<&engine::Outcome>,
) -> Result<(Report, Option<Error>), Error> {
    let config = ctx.config;
    let mut plan_options = ctx.plan;
    let mut written: Vec<Entry> = Vec::new();
    let mut last_report: Option<Report>;
    let mut consumer_reports: Vec<ConsumerReport> = Vec::new();
    let mut attempts = 0;
    // Before anything is written: a restart-only consumer that missed the restart for what is
    // stored now (a run stopped between its writes and the patch) is restarted and waited for,
    // so the first step (perhaps the leaves, if the gate's time has passed) finds it loaded.
    // When nothing is stored there is no restart to have missed (and no Deployment read).
    let fresh = look.is_some_and(|l| fresh_install(ctx, l));
    if let (Some(look), Some(_), false) = (look, ctx.deployments, fresh) {
        // What is stored, nothing written yet.
        let mut stored = look.clone();
        stored.written.clear();
        let (reports, verdict) = ctx.consumers(store, &stored, true, false, false).await?;
        if let Some(e) = verdict.into_error() {
            let mut report = look.report.clone();
            report.dry_run = false;
            report.consumers = reports;
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
        merge_consumers(&mut consumer_reports, reports);
    }
    for step in 0..MAX_STEPS {
        if !(guard.held)() {
            return Err(Error::LockLost);
        }
        // A fresh install plans from the look's read (see `drive`); every other first step
        // reads again under the lock, since another run may have written since the look.
        let seed = (step == 0 && fresh)
            .then(|| look.map(|l| l.observed.clone()))
            .flatten();
        let outcome = engine::run_from(
            store,
            config,
            RunOptions {
                plan: plan_options,
                dry_run: false,
            },
            guard,
            seed,
        )
        .await?;
        attempts += outcome.report.attempts;
        // caBundle targets follow their Secret's bundle right after it is written; a write
        // there is one more change consumers (the API server) must load before the next step.
        let synced = sync_webhooks(ctx, &outcome, step == 0).await?;
        let webhook_wrote = synced.iter().any(|e| e.action.writes());
        if webhook_wrote {
            plan_options.other_written_at = Some(store.now());
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
        let (reports, verdict) = ctx
            .consumers(store, &outcome, ctx.wait || !last, ctx.probe && last, false)
            .await?;
        merge_consumers(&mut consumer_reports, reports);
        let phase = outcome.phase.clone();
        let outcome_pending = outcome.pending;
        let outcome_signer = outcome.signer.map(|s| s.cert);
        last_report = Some(outcome.report);
        if let Some(e) = verdict.into_error() {
            return Ok((
                finish(last_report, written, consumer_reports, attempts),
                Some(e),
            ));
        }
        match phase {
            Phase::Steady | Phase::Cleanup { last: true } => {
                return Ok((
                    finish(last_report, written, consumer_reports, attempts),
                    None,
                ));
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
                    .map_or(ctx.deadline, |t| t.min(ctx.deadline));
                // Probes can open the trust-to-leaves gate early: when every hot-reloading
                // consumer accepts a client certificate from the pending CA, it has the new trust.
                if let (Some(fp), Some(pending)) = (pending, &outcome_pending) {
                    tracing::info!(
                        phase = "gate",
                        "{reason}; probing hot-reloading consumers for the new trust"
                    );
                    if consumers::trust_confirmed(
                        config,
                        ctx.client,
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
                        plan_options.trust_confirmed = Some(fp);
                        continue;
                    }
                }
                let fits = Instant::now()
                    .checked_add(left)
                    .is_some_and(|t| t <= ctx.deadline);
                if !fits {
                    let mut report = finish(last_report, written, consumer_reports, attempts);
                    if optional {
                        // Every consumer works as things are; the next run drops the old CA.
                        report.note = Some(format!(
                            "{reason}; that is past --timeout, so a run after {} finishes it",
                            crate::timefmt::rfc3339(ready_at)
                        ));
                        return Ok((report, None));
                    }
                    let e = Error::Timeout(format!(
                        "{reason}; that is past --timeout. Every bundle trusts every leaf that consumers may hold, so nothing breaks meanwhile: re-run certgen after {} to finish",
                        crate::timefmt::rfc3339(ready_at)
                    ));
                    return Ok((report, Some(e)));
                }
                tracing::info!(phase = "gate", "{reason}");
                tokio::time::sleep(left).await;
                // The wait was timed on this process's monotonic clock: for the state it was
                // computed for, the gate is open even if the store's clock disagrees.
                plan_options.gate_waited = Some(state);
            }
        }
    }
    Err(Error::Unfinished(MAX_STEPS))
}

/// Whether a `caBundle` target differs from the bundle of the Secret it follows (so a run with
/// nothing else to do still has this to write).
async fn webhooks_behind(
    ctx: &Context<'_>,
    bundles: &std::collections::BTreeMap<String, Vec<u8>>,
) -> Result<bool, Error> {
    let Some(api) = ctx.webhooks else {
        return Ok(false);
    };
    for target in &ctx.config.webhooks {
        let Some(bundle) = bundles.get(&target.bundle_from) else {
            continue;
        };
        if api.is_refused(target.kind, &target.name) {
            continue;
        }
        let observed = match api.get(target.kind, &target.name).await {
            Ok(observed) => observed,
            Err(e) => {
                api.refuse(target.kind, &target.name, e)?;
                continue;
            }
        };
        if let crate::k8s::WebhookObserved::Present(o) = observed
            && !o.holds(bundle)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes each `caBundle` target that differs from its Secret's bundle, fenced by the
/// resourceVersion and uid read (re-read and retried on a conflict). A target that does not
/// exist is reported and left alone: certgen does not create webhook configurations. Only the
/// first step reads every target (drift since the last run); later steps read a target only
/// when they wrote the Secret it follows.
async fn sync_webhooks(
    ctx: &Context<'_>,
    outcome: &engine::Outcome,
    first: bool,
) -> Result<Vec<Entry>, Error> {
    use crate::k8s::{WebhookObserved, webhooks::describe};
    use crate::store::StoreError;
    let Some(api) = ctx.webhooks else {
        return Ok(vec![]);
    };
    let mut entries = Vec::new();
    for target in &ctx.config.webhooks {
        let what = describe(target.kind, &target.name);
        let entry = |action, reason: String| Entry {
            secret: what.clone(),
            kind: plan::Kind::Webhook,
            action,
            reason,
            ca_sha256: None,
            not_after: None,
        };
        let Some(bundle) = outcome.bundles.get(&target.bundle_from) else {
            continue;
        };
        if !first && !outcome.written.contains(&target.bundle_from) {
            continue;
        }
        // Refused earlier in the run: left alone, as a rules review would have decided.
        if api.is_refused(target.kind, &target.name) {
            continue;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let observed = match api.get(target.kind, &target.name).await {
                Ok(observed) => observed,
                Err(e) => {
                    api.refuse(target.kind, &target.name, e)?;
                    break;
                }
            };
            let observed = match observed {
                WebhookObserved::Absent => {
                    entries.push(entry(
                        plan::Action::Keep,
                        format!(
                            "not found; its caBundle would follow Secret {}",
                            target.bundle_from
                        ),
                    ));
                    break;
                }
                WebhookObserved::Present(o) => o,
            };
            if observed.holds(bundle) {
                entries.push(entry(
                    plan::Action::Keep,
                    format!("caBundle is Secret {}'s ca.crt", target.bundle_from),
                ));
                break;
            }
            match api.put_ca_bundle(&observed, bundle).await {
                Ok(()) => {
                    let reason = format!("caBundle follows Secret {}'s ca.crt", target.bundle_from);
                    tracing::info!(webhook = %what, action = "update-bundle", "update-bundle {what}: {reason}");
                    entries.push(entry(plan::Action::UpdateBundle, reason));
                    break;
                }
                Err(StoreError::Conflict { what, detail }) if attempt < engine::MAX_ATTEMPTS => {
                    tracing::warn!(object = %what, attempt, "{detail}; re-reading");
                }
                Err(e @ StoreError::Conflict { .. }) => {
                    return Err(Error::Contended {
                        attempts: attempt,
                        last: e,
                    });
                }
                Err(e) => {
                    api.refuse(target.kind, &target.name, e)?;
                    break;
                }
            }
        }
    }
    Ok(entries)
}

/// Every write of every step, then the final state of the Secrets nothing wrote.
fn finish(
    last: Option<Report>,
    written: Vec<Entry>,
    consumers: Vec<ConsumerReport>,
    attempts: u32,
) -> Report {
    let last = last.expect("at least one step ran");
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

fn merge_consumers(all: &mut Vec<ConsumerReport>, new: Vec<ConsumerReport>) {
    for r in new {
        match all.iter_mut().find(|a| a.name == r.name) {
            None => all.push(r),
            Some(a) => {
                // Later steps add what they did; quiet states ("up-to-date", "hot") are shown once.
                let quiet = |d: &crate::report::DeploymentReport| {
                    d.action == "up-to-date" || d.action == "hot"
                };
                for d in r.deployments {
                    if !quiet(&d) || !a.deployments.iter().any(|x| x.name == d.name) {
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
