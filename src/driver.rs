//! One invocation, start to end: a read-only look, the run lock when anything is to be written,
//! then the steps of a rotation (trust, gate, leaves) with the consumers' restarts and waits
//! after each, and finally the report.

use std::path::PathBuf;

use time::OffsetDateTime;
use tokio::time::Instant;

use crate::config::Config;
use crate::consumers::{self, ConsumerReport};
use crate::engine::{self, RunOptions};
use crate::exit::Error;
use crate::lock::{self, LockError};
use crate::plan::{self, Phase};
use crate::report::{Entry, Report};
use crate::rollout::Deployments;
use crate::store::SecretStore;

/// How many steps one invocation may take (trust, gate, leaves, and retries of those).
const MAX_STEPS: usize = 8;

/// What the run lock is.
pub enum LockTarget {
    Lease {
        client: kube::Client,
        namespace: String,
        name: String,
    },
    File(PathBuf),
}

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
    pub lock: LockTarget,
}

fn clock() -> OffsetDateTime {
    OffsetDateTime::now_utc()
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
        clock,
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
        let held = take_lock(&ctx).await?;
        let result = steps(store, &ctx).await;
        held.release().await;
        return result;
    };
    if ctx.dry_run {
        let options = consumers::Options {
            wait: false,
            probe: false,
            dry_run: true,
            deadline: ctx.deadline,
        };
        let (reports, _) =
            consumers::run(config, &look, ctx.deployments, ctx.client, options, clock()).await?;
        let mut report = look.report;
        report.consumers = reports;
        return Ok((report, None));
    }
    let needs_lock = !look.written.is_empty() || look.phase != Phase::Steady;
    if !needs_lock {
        // Nothing to write: what the look saw is the final state.
        let options = consumers::Options {
            wait: ctx.wait,
            probe: ctx.probe,
            dry_run: false,
            deadline: ctx.deadline,
        };
        let (reports, verdict) =
            consumers::run(config, &look, ctx.deployments, ctx.client, options, clock()).await?;
        let mut report = look.report;
        report.dry_run = false;
        report.consumers = reports;
        return Ok((report, verdict.into_error()));
    }
    let held = if needs_lock {
        Some(take_lock(&ctx).await?)
    } else {
        None
    };
    let result = steps(store, &ctx).await;
    if let Some(held) = held {
        if held.lost() {
            tracing::warn!(
                "the run lock was lost while running; every write was still fenced by its resourceVersion"
            );
        }
        held.release().await;
    }
    result
}

async fn take_lock(ctx: &Context<'_>) -> Result<lock::Held, Error> {
    let taken = match &ctx.lock {
        LockTarget::Lease {
            client,
            namespace,
            name,
        } => lock::acquire_lease(client, namespace, name, ctx.deadline).await,
        LockTarget::File(dir) => lock::acquire_file(dir, ctx.deadline).await,
    };
    taken.map_err(|e| match e {
        LockError::Contended { .. } => Error::Locked(e.to_string()),
        LockError::Store(s) => Error::Store(s),
    })
}

async fn steps<S: SecretStore>(
    store: &S,
    ctx: &Context<'_>,
) -> Result<(Report, Option<Error>), Error> {
    let config = ctx.config;
    let mut plan_options = ctx.plan;
    let mut written: Vec<Entry> = Vec::new();
    let mut last_report: Option<Report> = None;
    let mut consumer_reports: Vec<ConsumerReport> = Vec::new();
    let mut attempts = 0;
    for _ in 0..MAX_STEPS {
        let outcome = engine::run(
            store,
            config,
            RunOptions {
                plan: plan_options,
                dry_run: false,
            },
            clock,
        )
        .await?;
        attempts += outcome.report.attempts;
        if outcome.rotation_started {
            plan_options.overwrite = false;
        }
        written.extend(
            outcome
                .report
                .secrets
                .iter()
                .filter(|e| e.action.writes())
                .cloned(),
        );
        // Trust changes must reach restart-only consumers before the leaves change: their
        // rollouts are part of the gate, whatever --wait says.
        let more = matches!(outcome.phase, Phase::Trust | Phase::Gate { .. });
        let options = consumers::Options {
            wait: ctx.wait || more,
            probe: ctx.probe && !more,
            dry_run: false,
            deadline: ctx.deadline,
        };
        let (reports, verdict) = consumers::run(
            config,
            &outcome,
            ctx.deployments,
            ctx.client,
            options,
            clock(),
        )
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
            Phase::Steady | Phase::Leaves => break,
            Phase::Trust => continue,
            Phase::Gate {
                ready_at,
                reason,
                pending,
            } => {
                let wait = (ready_at - clock()).max(time::Duration::ZERO);
                let wait = std::time::Duration::try_from(wait).unwrap_or_default();
                let until = (Instant::now() + wait).min(ctx.deadline);
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
                if Instant::now() + wait > ctx.deadline {
                    let e = Error::Timeout(format!(
                        "{reason}; that is past --timeout. Every bundle trusts both CAs, so nothing breaks meanwhile: re-run certgen after {} to finish",
                        crate::report::rfc3339(ready_at)
                    ));
                    return Ok((
                        finish(last_report, written, consumer_reports, attempts),
                        Some(e),
                    ));
                }
                tracing::info!(phase = "gate", "{reason}");
                let left = (ready_at - clock()).max(time::Duration::ZERO);
                tokio::time::sleep(std::time::Duration::try_from(left).unwrap_or_default()).await;
            }
        }
    }
    Ok((
        finish(last_report, written, consumer_reports, attempts),
        None,
    ))
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
                let quiet = |d: &crate::consumers::DeploymentReport| {
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
