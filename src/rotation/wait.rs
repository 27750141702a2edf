//! Waiting at a gate: on evidence first (every pod that mounts what changed was poked and had
//! time to load it, was created since, or is gone: `gate.rs`), then on probes for the trust
//! gate, then on the timer, within the run's deadline. A cleanup gate that only the timer can
//! open and that lies far away is left to the next run in a cluster (docs/rotation.md).

use tokio::time::Instant;

use super::progress::{Learned, Progress};
use super::step::Outcome;
use super::{CLEANUP_WAIT, Invocation, consumers, gate};
use crate::error::Error;
use crate::plan::Phase;
use crate::report::GateReport;
use crate::store::SecretStore;

/// How a gate ended.
pub(super) enum GateEnd {
    /// It is open: plan the next step.
    Open,
    /// The run ends here: a cleanup left to the next run (`note`), or the deadline (`error`).
    Stop {
        note: Option<String>,
        error: Option<Error>,
    },
}

/// How long until `ready_at` on the store's clock, as a duration (zero when past).
fn until_ready<S: SecretStore>(store: &S, ready_at: time::OffsetDateTime) -> std::time::Duration {
    let left = (ready_at - store.now()).max(time::Duration::ZERO);
    std::time::Duration::try_from(left).unwrap_or(std::time::Duration::MAX)
}

/// Waits at the gate `outcome` ends in, as long as it takes and the deadline allows.
pub(super) async fn at_gate<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    outcome: &Outcome,
    push: Option<&gate::Push<'_>>,
    evidence: &mut gate::Evidence,
    progress: &mut Progress,
) -> Result<GateEnd, Error> {
    let Phase::Gate {
        ready_at,
        reason,
        pending,
        state,
        optional,
    } = &outcome.phase
    else {
        return Ok(GateEnd::Open);
    };
    let until = Instant::now()
        .checked_add(until_ready(store, *ready_at))
        .map_or(inv.deadline, |t| t.min(inv.deadline));
    let started = Instant::now();
    let opened = |by: &str| GateReport {
        reason: reason.clone(),
        opened_by: by.to_string(),
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    };
    // Evidence first: every pod that mounts what changed was poked and had time to load it,
    // was created since, or is gone (gate.rs).
    if let Some(push) = push {
        tracing::info!(
            phase = "gate",
            "{reason}; pods that mount what changed were poked: waiting for the evidence"
        );
        let other = progress.other_written_at;
        if push
            .wait(evidence, outcome, other, &|| store.now(), until)
            .await?
        {
            tracing::info!(
                phase = "gate",
                "every pod that mounts what changed has loaded it (poked, created since, or gone)"
            );
            progress.note(Learned::GateOpened {
                report: opened("evidence"),
                state: Some(*state),
            });
            return Ok(GateEnd::Open);
        }
    }
    // Probes can open the trust-to-leaves gate early: when every hot-reloading consumer accepts
    // a client certificate from the pending CA, it has the new trust.
    if let (Some(fp), Some(pending)) = (pending, &outcome.pending) {
        tracing::info!(
            phase = "gate",
            "{reason}; probing hot-reloading consumers for the new trust"
        );
        let signer = outcome.signer.as_ref().map(|s| &s.cert);
        if consumers::trust_confirmed(inv.config, inv.client, pending, signer, until).await {
            tracing::info!(
                phase = "gate",
                "every hot-reloading consumer accepts the pending CA"
            );
            progress.note(Learned::GateOpened {
                report: opened("probe"),
                state: None,
            });
            progress.note(Learned::TrustConfirmed(*fp));
            return Ok(GateEnd::Open);
        }
    }
    let left = until_ready(store, *ready_at);
    let fits = Instant::now()
        .checked_add(left)
        .is_some_and(|t| t <= inv.deadline);
    // A cleanup no evidence can open is left to the next run when it is far away (in a
    // cluster, without --wait): nothing breaks meanwhile, and a run should not sit for minutes
    // on a step nobody waits for (docs/rotation.md).
    let leave = *optional && inv.client.is_some() && !inv.options.wait && left > CLEANUP_WAIT;
    if !fits || leave {
        return Ok(stop(reason, *ready_at, *optional, fits));
    }
    gate::wait_timer(left, reason).await;
    // The wait was timed on this process's monotonic clock: for the state it was computed for,
    // the gate is open even if the store's clock disagrees.
    progress.note(Learned::GateOpened {
        report: opened("timer"),
        state: Some(*state),
    });
    Ok(GateEnd::Open)
}

/// The end of a run at a gate it will not wait for: an `optional` cleanup is left to the next
/// run (every consumer works as things are); anything else is past `--timeout`.
fn stop(reason: &str, ready_at: time::OffsetDateTime, optional: bool, fits: bool) -> GateEnd {
    let after = crate::timefmt::rfc3339(ready_at);
    if optional {
        let why = if fits {
            "certgen does not wait that long without --wait (no pod could be poked to prove it sooner)"
        } else {
            "that is past --timeout"
        };
        let note = format!(
            "{reason}; {why}, so a run after {after} finishes it (the chart's CronJob does)"
        );
        tracing::info!(phase = "gate", "{note}");
        return GateEnd::Stop {
            note: Some(note),
            error: None,
        };
    }
    GateEnd::Stop {
        note: None,
        error: Some(Error::Timeout(format!(
            "{reason}; that is past --timeout. Every bundle trusts every leaf that consumers may hold, so nothing breaks meanwhile: re-run certgen after {after} to finish"
        ))),
    }
}
