//! The steps of one invocation, in order: the read-only look, the run lock when anything is
//! to be written, then each step ([`step::step`]) followed by its `caBundle` targets
//! (`webhooks.rs`), its ClusterTrustBundles (`trust_bundles.rs`), the pushes to the pods
//! (`gate/`) and the consumers' restarts, waits and probes (`consumers.rs`), with the gates
//! waited out in between (`wait.rs`). How the run ended goes to `end.rs`, which writes the
//! report. A member of a set of clusters steps through the same code: what the set's barrier
//! says reaches it through [`SetMember`], which `mod.rs` wires to `set.rs`, so that this file
//! never imports the set's driver that calls it.

use std::collections::BTreeSet;

use futures::future::BoxFuture;

use super::consumers;
use super::end::{End, Found, finish};
use super::gate::{self, Evidence};
use super::invocation::Invocation;
use super::progress::{Learned, Progress};
use super::step::{self, InSet, Outcome, dry_look, look, step, step_in_set};
use super::trust_bundles;
use super::wait;
use super::webhooks;
use crate::apply::Guard;
use crate::error::Error;
use crate::lock::{self, LockError};
use crate::plan::{Barrier, Hold, Phase};
use crate::report::{Entry, Report};
use crate::store::SecretStore;

/// How many steps one invocation may take: trust, gate, leaves, gate, cleanup, and retries.
pub const MAX_STEPS: usize = 12;

/// What the set's barrier tells a member that arrived at it.
pub enum Arrival {
    /// Take the held step now.
    Go,
    /// End the run here: what to say, and the error to end with (none: a cleanup left to the
    /// next run).
    Stop {
        note: Option<String>,
        error: Option<Error>,
    },
}

/// A member of a set of clusters, as its steps see it: what the set's barrier holds back and
/// lets through. Implemented by `set::Member` (in `mod.rs`).
pub trait SetMember: Sync {
    /// What the next step may not do yet.
    fn hold(&self) -> Hold;
    /// The set as the next step's checks see it.
    fn in_set(&self) -> InSet<'_>;
    /// A step was taken: an opened barrier is used up.
    fn stepped(&self);
    /// The member's consumers hold only what is stored now (its gate is open).
    fn at_rest(&self, outcome: &Outcome);
    /// Waits at the set's barrier before `barrier` (the held step, planned as `phase`).
    fn arrive<'a>(&'a self, barrier: Barrier, phase: &'a Phase) -> BoxFuture<'a, Arrival>;
    /// Nothing left to do in this run; `cleanup_pending`: a cleanup waits behind a gate it
    /// could not wait for.
    fn done(&self, cleanup_pending: bool);
}
/// Runs certgen's main job and returns the report, plus the error to exit with (after printing).
pub async fn run<S: SecretStore>(
    store: &S,
    inv: Invocation<'_>,
) -> Result<(Report, Option<Error>), Error> {
    // A read-only look first: dry runs and runs with nothing to do never take the lock.
    // A dry run's look too: a gate it resumes is shown as a gate, as the steps will meet it.
    let mut seen = first_progress(store, &inv);
    trust_bundles::preflight(inv.trust_bundles, inv.config).await?;
    // A dry run's report is all it gives: its gates count from the caBundle targets' last
    // writes, as the run's steps would, and it lists the target writes its first step would
    // make (one read of each target; a real run reads them before its first step instead).
    let dry_targets = if inv.options.dry_run {
        webhooks::Targets::read(&inv, &BTreeSet::new()).await?
    } else {
        None
    };
    if let Some(at) = dry_targets.as_ref().and_then(|t| t.written_at(&inv)) {
        seen.note(Learned::OtherWritten(at));
    }
    if let Some(t) = &dry_targets {
        seen.note(Learned::InjectedRead(t.injected()));
    }
    let options = seen.plan_options(&inv.options);
    let looked = if inv.options.dry_run {
        let looked = dry_look(store, inv.config, options, seen.known()).await;
        dry_look_again(store, &inv, (looked, &mut seen), dry_targets.as_ref()).await
    } else {
        look(store, inv.config, options, seen.known()).await
    };
    let look = match looked {
        // Without the lock, another run may be between two writes: judge again under the lock,
        // where a real problem still stops the run before anything is written.
        Err(Error::Invalid(e)) if !inv.options.dry_run => {
            tracing::debug!("unusable state without the lock, re-checking under it: {e}");
            None
        }
        other => Some(other?),
    };
    let Some(look) = look else {
        return locked(store, &inv, None, false, (Vec::new(), None)).await;
    };
    // The other writers the run found before it wrote anything (issue 45).
    let mut writers = look.report.other_writers.clone();
    if inv.options.dry_run {
        return Ok((dry_run(store, &inv, look, dry_targets).await?, None));
    }
    // Targets refused (403) before the steps: said in the report, and not asked again.
    let mut refusals = Vec::new();
    if !needs_lock(store, &inv, &look, (&mut refusals, &mut writers)).await? {
        return nothing_to_write(store, &inv, look, (refusals, writers)).await;
    }
    // Every write of a fresh install is a create, which the API server refuses when the object
    // exists: two runs cannot both create a Secret, and the one that loses takes the lock, then
    // re-reads and continues from what the other stored (a re-plan, as after any lost race,
    // but under the lock: what it writes then may be updates). There is
    // nothing earlier to be consistent with, so neither the lock nor a second read under it can
    // change what is written: the look's read is the plan's input (docs/api-requests.md). Runs
    // without Lease verbs rely on the same fencing for every step.
    let fresh = fresh_install(&inv, &look);
    if fresh {
        tracing::debug!(
            "fresh install: creates only, each fenced by the Secret's absence; no run lock"
        );
    }
    locked(store, &inv, Some(&look), fresh, (refusals, Some(writers))).await
}

/// A run's record before its first look: a run that pokes pods and watches their kubelets
/// notes when it first looked, so that a gate it resumes (its newest write an earlier run's)
/// opens on this run's own evidence, not on the stored write's time alone
/// (`plan::Known::observing_since`).
pub(super) fn first_progress<S: SecretStore>(store: &S, inv: &Invocation<'_>) -> Progress {
    let mut progress = Progress::default();
    if inv.push().is_some() {
        progress.note(Learned::Observing(store.now()));
    }
    progress
}

/// Whether the run must take the lock: the look plans writes, a rotation is under way, or a
/// ClusterTrustBundle or `caBundle` target is behind its Secret. The targets' refusals (403)
/// and other writers, when they were read, are added to `refusals` and `writers`.
async fn needs_lock<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: &Outcome,
    (refusals, writers): (
        &mut Vec<webhooks::Refusal>,
        &mut Vec<crate::report::WriterRow>,
    ),
) -> Result<bool, Error> {
    if !look.written.is_empty()
        || look.phase != Phase::Steady
        || trust_bundles::behind(inv.trust_bundles, inv.config, look).await?
    {
        return Ok(true);
    }
    match webhooks::Targets::read(inv, &BTreeSet::new()).await? {
        Some(targets) => {
            *refusals = targets.refusals.clone();
            writers.extend(
                targets
                    .writers(store.now())
                    .iter()
                    .map(crate::report::WriterRow::of),
            );
            Ok(targets.behind(inv, |s| look.bundles.get(s).map(Vec::as_slice)))
        }
        None => Ok(false),
    }
}

/// A run with nothing to write: what the look saw is the final state, with the consumers'
/// waits and probes as asked. `refusals` and `writers`: the `caBundle` targets' (see
/// [`needs_lock`]) and the look's other writers.
async fn nothing_to_write<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: Outcome,
    (refusals, writers): (Vec<webhooks::Refusal>, Vec<crate::report::WriterRow>),
) -> Result<(Report, Option<Error>), Error> {
    let (consumers, mut verdict) = inv
        .consumers(
            store,
            &look,
            (inv.options.wait, inv.options.probe, false),
            None,
        )
        .await?;
    // The ClusterTrustBundles as they stand (each in step: a keep line per signer).
    let bundles = trust_bundles::planned(inv.trust_bundles, inv.config, &look).await?;
    let mut report = look.report;
    report.secrets.extend(bundles);
    let end = End {
        consumers,
        refused: refusals.into_iter().map(|r| r.note).collect(),
        restarts_refused: verdict.restarts_refused.take(),
        writers: Some((writers, Found::Replace)),
        ..End::of(report)
    };
    Ok((finish(end), verdict.into_error()))
}

/// A dry run plans as the run's first step will, under the lock: an --overwrite the look
/// found acted on (a rotation under way) is not acted on again (`locked`), and a caBundle
/// target that drifted from its Secret's stored bundle is written first, that step's gate
/// counting from then (`first_targets`). The dry run's look, again when either is so.
async fn dry_look_again<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    (looked, seen): (Result<Outcome, Error>, &mut Progress),
    targets: Option<&webhooks::Targets>,
) -> Result<Outcome, Error> {
    let Ok(l) = &looked else {
        return looked;
    };
    let mut again = false;
    if l.ca_written {
        seen.note(Learned::CaWritten);
        again = true;
    }
    if let Some(t) = targets
        && t.behind_stored(inv, &l.observed)
    {
        seen.note(Learned::OtherWritten(store.now()));
        again = true;
    }
    // The ClusterTrustBundles as `steps` counts them: their stored write, and a bundle
    // behind its Secret's stored bundle written first.
    if !fresh_install(inv, l) {
        let bundles_at = trust_bundles::written_at(inv.trust_bundles, inv.config).await?;
        if let Some(at) = bundles_at.values().max() {
            seen.note(Learned::OtherWritten(*at));
            again = true;
        }
        if trust_bundles::behind(inv.trust_bundles, inv.config, l).await? {
            seen.note(Learned::OtherWritten(store.now()));
            again = true;
        }
    }
    if !again {
        return looked;
    }
    let options = seen.plan_options(&inv.options);
    dry_look(store, inv.config, options, seen.known()).await
}

/// A dry run's report: every outside action its first step would take, from `look` (the
/// Secret writes), `targets` (the `caBundle` writes), the consumers (restarts) and the pods
/// (pokes).
async fn dry_run<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: Outcome,
    targets: Option<webhooks::Targets>,
) -> Result<Report, Error> {
    let (consumers, problems) = inv
        .consumers(store, &look, (false, false, true), None)
        .await?;
    let (pods, pods_refused) = match inv.push() {
        Some(push) if !look.written.is_empty() => push.planned(&look).await?,
        _ => (vec![], None),
    };
    let (mut planned, refused): (Vec<Entry>, Vec<String>) = match &targets {
        Some(targets) => (
            targets
                .planned(inv, &look)
                .iter()
                .map(|p| p.entry())
                .collect(),
            targets.refusals.iter().map(|r| r.note.clone()).collect(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    planned.extend(trust_bundles::planned(inv.trust_bundles, inv.config, &look).await?);
    // The Events of what it plans, caBundle targets' after their Secrets', as a run records.
    let secrets: Vec<Entry> = look
        .report
        .secrets
        .iter()
        .chain(&planned)
        .cloned()
        .collect();
    let warning = missing_namespace(store, &look).await;
    if let Some(warning) = &warning {
        tracing::warn!("{warning}");
    }
    Ok(finish(End {
        dry_run: true,
        planned,
        events: crate::events::of_step(&look.phase, &secrets),
        held: look.held.map(|b| step::held_name(b, &look.phase)),
        consumers,
        pods,
        pods_refused,
        refused,
        restarts_refused: problems.restarts_refused,
        warning,
        ..End::of(look.report)
    }))
}

/// A dry run in a cluster that found nothing stored: whether that is because the namespace
/// does not exist, which the real run would find only at its first write (exit 5).
async fn missing_namespace<S: SecretStore>(store: &S, look: &Outcome) -> Option<String> {
    let ns = store.namespace()?;
    let first = look.report.secrets.iter().find(|e| e.action.writes())?;
    if !look.observed.nothing_stored() || !store.known_missing(&first.secret).await {
        return None;
    }
    Some(format!(
        "namespace {ns} does not exist: the run would fail at its first write (exit 5); create it first (kubectl create namespace {ns}) or pass the namespace of your install with -n"
    ))
}

/// Whether the look found none of the Secrets in a cluster (a fresh install): every write is
/// then a create fenced by the API server, and the look's read can be planned from directly.
/// Not in local mode, whose file lock costs no request and whose creates are not exclusive
/// across processes without it.
fn fresh_install(inv: &Invocation<'_>, look: &Outcome) -> bool {
    !matches!(inv.lock, lock::Target::File(_)) && look.observed.nothing_stored()
}

/// Takes the lock (none for a `fresh` install until one of its creates loses a race, see
/// [`run`]), runs the steps, releases the lock. `refused`: `caBundle` targets the API server
/// refused before it; `writers`: the other writers the run found before it wrote.
async fn locked<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: Option<&Outcome>,
    fresh: bool,
    (refused, writers): (
        Vec<webhooks::Refusal>,
        Option<Vec<crate::report::WriterRow>>,
    ),
) -> Result<(Report, Option<Error>), Error> {
    let held = std::sync::Mutex::new(if fresh {
        lock::Held::Unlocked
    } else {
        take_lock(inv).await?
    });
    let mut progress = first_progress(store, inv);
    // A rotation the look found under way is the one an --overwrite asks for, even if
    // another run finishes it while this one waits for the lock.
    if look.is_some_and(|l| l.ca_written) {
        progress.note(Learned::CaWritten);
    }
    for r in refused {
        progress.note(Learned::Refused {
            what: r.what,
            note: r.note,
            injected: r.injected,
        });
    }
    let (result, writes) = {
        let still_held = || !held.lock().unwrap_or_else(|e| e.into_inner()).lost();
        let guard = Guard::new(&still_held);
        let result = steps(
            store,
            inv,
            &guard,
            (look, fresh),
            &held,
            &mut progress,
            None,
        )
        .await;
        (result, guard.written())
    };
    let held = held.into_inner().unwrap_or_else(|e| e.into_inner());
    // What became of the lock comes back as data, into the run's record and its report
    // (running without the lock the identity may not take is a skipped feature).
    progress.note(Learned::Lock(held.release().await));
    result
        .map(|(end, e)| {
            let end = End {
                lock: progress.lock.clone(),
                writers: writers.map(|w| (w, Found::Fill)),
                ..end
            };
            (finish(end), e)
        })
        .map_err(|e| e.after(writes))
}

pub(super) async fn take_lock(inv: &Invocation<'_>) -> Result<lock::Held, Error> {
    lock::take(&inv.lock, inv.deadline)
        .await
        .map_err(|e| match e {
            LockError::Contended { .. } => Error::Locked(e.to_string()),
            LockError::Store(s) => Error::Store(s),
        })
}

/// The steps of a run, from `look` when there was one; a `fresh` install plans its first step
/// from the look's read (see [`run`]). How they ended, for [`finish`] once the lock is released.
pub(super) async fn steps<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    guard: &Guard<'_>,
    (look, fresh): (Option<&Outcome>, bool),
    held: &std::sync::Mutex<lock::Held>,
    progress: &mut Progress,
    member: Option<&dyn SetMember>,
) -> Result<(End, Option<Error>), Error> {
    let push = inv.push();
    let mut evidence = gate::Evidence::new(inv.config);
    if let Some(stop) = missed_restarts(store, inv, look, fresh, progress).await? {
        return Ok(stop);
    }
    let mut targets = first_targets(store, inv, look, fresh, progress).await?;
    if !fresh {
        stored_bundles(store, inv, look, &mut evidence, progress).await?;
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
        let outcome = next_step(store, inv, guard, progress, (member, seed)).await?;
        // A member of a set whose next step waits for the others: the barrier.
        if let (Some(m), Some(barrier)) = (member, outcome.held) {
            m.at_rest(&outcome);
            match m.arrive(barrier, &outcome.phase).await {
                Arrival::Go => continue,
                Arrival::Stop { note, error } => {
                    let end = End {
                        note,
                        held: Some(step::held_name(barrier, &outcome.phase)),
                        ..End::stepped(&outcome, progress, &evidence)
                    };
                    return Ok((end, error));
                }
            }
        }
        if outcome.raced {
            raced(inv, &outcome, held, progress).await?;
            continue;
        }
        progress.note(Learned::Stepped {
            attempts: outcome.report.attempts,
        });
        let synced = after_step(
            store,
            inv,
            &outcome,
            (index == 0, targets.take()),
            (push.as_ref(), &mut evidence),
            progress,
        )
        .await?;
        let webhook_wrote = synced.iter().any(|e| e.action.writes());
        let problems = reload(store, inv, &outcome, &synced, progress).await?;
        if let Some(e) = problems.into_error() {
            return Ok((End::stepped(&outcome, progress, &evidence), Some(e)));
        }
        match &outcome.phase {
            Phase::Steady | Phase::Cleanup { last: true } => {
                if let Some(m) = member {
                    m.at_rest(&outcome);
                    m.done(false);
                }
                return Ok((End::stepped(&outcome, progress, &evidence), None));
            }
            Phase::Trust | Phase::Leaves | Phase::Cleanup { last: false } => continue,
            // A gate computed before a caBundle write: plan again, counting from that write.
            Phase::Gate { .. } if webhook_wrote => continue,
            Phase::Gate { .. } => {
                let push = push.as_ref();
                match wait::at_gate(store, inv, &outcome, push, &mut evidence, progress).await? {
                    wait::GateEnd::Open => continue,
                    wait::GateEnd::Stop { note, error } => {
                        if let (Some(m), None) = (member, &error) {
                            // Only a cleanup waits behind an optional gate.
                            m.done(true);
                        }
                        let end = End {
                            note,
                            ..End::stepped(&outcome, progress, &evidence)
                        };
                        return Ok((end, error));
                    }
                }
            }
        }
    }
    Err(Error::Unfinished(MAX_STEPS))
}

/// certgen's ClusterTrustBundles as stored, before the first step (earlier runs' writes too):
/// a gate counts from their newest write as from a Secret's, and the pods that project them
/// are poked for it.
async fn stored_bundles<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: Option<&Outcome>,
    evidence: &mut Evidence,
    progress: &mut Progress,
) -> Result<(), Error> {
    let bundles_at = trust_bundles::written_at(inv.trust_bundles, inv.config).await?;
    if let Some(at) = bundles_at.values().max() {
        progress.note(Learned::OtherWritten(*at));
    }
    evidence.stored_other(&bundles_at);
    // Readers the gate cannot observe count from the stored write, whichever run made it.
    for (what, at) in &bundles_at {
        unobserved_readers(inv, std::slice::from_ref(what), *at, evidence, progress).await;
    }
    // A bundle behind its Secret's stored bundle (a run killed between its Secret writes
    // and the bundle's) is written by the first step's sync, after the step's own writes:
    // as for a drifted caBundle target, that step's gate counts from now, so it writes no
    // leaf before the pods that project the bundles have the new CA.
    if let Some(look) = look
        && trust_bundles::behind(inv.trust_bundles, inv.config, look).await?
    {
        tracing::debug!("a ClusterTrustBundle is behind its Secret: written before any leaf");
        progress.note(Learned::OtherWritten(store.now()));
    }
    Ok(())
}

/// The run's next step, as `progress` has it; a member of a set steps within the set.
/// `seed`: what a fresh install's first step plans from (see [`run`]).
async fn next_step<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    guard: &Guard<'_>,
    progress: &Progress,
    (member, seed): (Option<&dyn SetMember>, Option<crate::observe::Snapshot>),
) -> Result<Outcome, Error> {
    let (mut options, known) = (progress.plan_options(&inv.options), progress.known());
    match member {
        None => step(store, inv.config, options, known, guard, seed).await,
        Some(m) => {
            options.hold = Some(m.hold());
            let in_set = m.in_set();
            let outcome = step_in_set(store, inv.config, (options, known), guard, &in_set).await;
            m.stepped();
            outcome
        }
    }
}

/// A fresh install's creates lost a race: another run got there first. What they wrote is
/// noted (an `--overwrite` has been acted on), and the run goes on from what the other stored
/// like any other run, under the lock.
async fn raced(
    inv: &Invocation<'_>,
    outcome: &Outcome,
    held: &std::sync::Mutex<lock::Held>,
    progress: &mut Progress,
) -> Result<(), Error> {
    tracing::debug!("another run created Secrets first: taking the run lock");
    progress.note(Learned::Stepped {
        attempts: outcome.report.attempts,
    });
    if outcome.ca_written {
        progress.note(Learned::CaWritten);
    }
    if outcome.hmac_written {
        progress.note(Learned::HmacWritten);
    }
    progress.note(Learned::Wrote(outcome.report.secrets.clone()));
    progress.note(Learned::Window(outcome.report.renewal_window.clone()));
    let taken = take_lock(inv).await?;
    *held.lock().unwrap_or_else(|e| e.into_inner()) = taken;
    Ok(())
}

/// Before anything is written: a restart-only consumer that missed the restart for what is
/// stored now (a run stopped between its writes and the patch) is restarted and waited for,
/// so the first step (perhaps the leaves, if the gate's time has passed) finds it loaded.
/// When nothing is stored there is no restart to have missed (and no workload read). The
/// run's end, when a restart or its rollout failed.
async fn missed_restarts<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: Option<&Outcome>,
    fresh: bool,
    progress: &mut Progress,
) -> Result<Option<(End, Option<Error>)>, Error> {
    let (Some(look), Some(_), false) = (look, inv.workloads, fresh) else {
        return Ok(None);
    };
    // What is stored, nothing written yet.
    let mut stored = look.clone();
    stored.written.clear();
    let (mut reports, mut problems) = inv
        .consumers(store, &stored, (true, false, false), None)
        .await?;
    if let Some(note) = problems.restarts_refused.take() {
        progress.note(Learned::RestartsRefused(note));
    }
    let events = crate::events::of_restarts(&reports);
    if let Some(e) = problems.into_error() {
        let end = End {
            consumers: reports,
            events,
            restarts_refused: progress.restarts_refused.clone(),
            ..End::of(look.report.clone())
        };
        return Ok(Some((end, Some(e))));
    }
    // Only a restart it made belongs in the report: the steps report the rest.
    for r in &mut reports {
        r.deployments.retain(|d| {
            !matches!(
                d.action.as_str(),
                "up-to-date" | "hot" | "already-restarted"
            )
        });
    }
    reports.retain(|r| !r.deployments.is_empty());
    crate::report::in_phase(&mut reports, "missed");
    progress.note(Learned::Consumers { reports, events });
    Ok(None)
}

/// The caBundle targets, read once before the first step (not for a fresh install: with no
/// Secret stored there is no bundle of an earlier run for them to have followed): a gate counts
/// from their last write as from a Secret's, across runs too.
async fn first_targets<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    look: Option<&Outcome>,
    fresh: bool,
    progress: &mut Progress,
) -> Result<Option<webhooks::Targets>, Error> {
    // (A target cert-manager's CA injector writes is read again: what it holds decides the
    // leaves, `plan::Known::injected`.)
    let refused = progress
        .refused
        .keys()
        .filter(|k| !progress.injected.contains(*k))
        .cloned()
        .collect();
    let targets = if fresh {
        None
    } else {
        webhooks::Targets::read(inv, &refused).await?
    };
    if let Some(t) = &targets {
        progress.note(Learned::InjectedRead(t.injected()));
    }
    for r in targets.iter().flat_map(|t| &t.refusals) {
        progress.note(Learned::Refused {
            what: r.what.clone(),
            note: r.note.clone(),
            injected: r.injected,
        });
    }
    if let Some(at) = targets.as_ref().and_then(|t| t.written_at(inv)) {
        progress.note(Learned::OtherWritten(at));
    }
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
        progress.note(Learned::OtherWritten(store.now()));
    }
    Ok(targets)
}

/// What follows a step's Secret writes: the caBundle targets (written right after their
/// Secret's bundle; a write there is one more change the API server must load before the next
/// step), then the pokes of every pod that mounts what was written, so its kubelet
/// re-projects the Secrets while restarts and rollouts run. `first`: the run's first step,
/// with the targets read before it. The caBundle targets' report lines.
async fn after_step<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    outcome: &Outcome,
    (first, targets): (bool, Option<webhooks::Targets>),
    (push, evidence): (Option<&gate::Push<'_>>, &mut gate::Evidence),
    progress: &mut Progress,
) -> Result<Vec<Entry>, Error> {
    let refused = progress.refused.keys().cloned().collect();
    let synced = webhooks::sync(inv, outcome, first, targets, &refused).await?;
    for r in synced.refusals {
        progress.note(Learned::Refused {
            what: r.what,
            note: r.note,
            injected: r.injected,
        });
    }
    let webhook_wrote = synced.entries.iter().any(|e| e.action.writes());
    if webhook_wrote {
        // Counted, by the timer and by evidence, from when the API server's cache shows the
        // writes (or gave up showing them), not from the write's answer: under load the cache
        // lags the write by seconds, and the admission path reads the cache.
        let unseen = match inv.webhooks {
            Some(api) => webhooks::cached(api, &synced.landed).await,
            None => None,
        };
        let at = store.now();
        progress.note(Learned::OtherWritten(at));
        match unseen {
            None => evidence.wrote_other(),
            Some(why) => {
                tracing::warn!("{why}: the gate waits for the timer");
                evidence.unseen_other(at, why);
            }
        }
    }
    let mut synced = synced.entries;
    // The ClusterTrustBundles that publish a Secret's bundle, right after it (and after the
    // caBundle targets): a write is one more change the pods that project them must load.
    let bundles = trust_bundles::sync(inv.trust_bundles, inv.config, outcome, first).await?;
    synced.extend(bundles.entries);
    if !bundles.wrote.is_empty() {
        let at = store.now();
        progress.note(Learned::OtherWritten(at));
        unobserved_readers(inv, &bundles.wrote, at, evidence, progress).await;
    }
    // Only changes: a Secret created by this step was mounted by no running pod.
    let tls: Vec<&String> = outcome
        .written
        .iter()
        .filter(|n| inv.config.tls.iter().any(|t| &t.name == *n))
        .filter(|n| outcome.observed.get(n).present().is_some())
        .collect();
    if let Some(push) = push
        && (webhook_wrote || !tls.is_empty() || !bundles.wrote.is_empty())
    {
        // The store's clock is never ahead of the server's, by up to a second.
        let by = store.now() + time::Duration::seconds(1);
        if !tls.is_empty() || !bundles.wrote.is_empty() {
            evidence.wrote(tls.into_iter().chain(&bundles.wrote), by);
        }
        push.after_step(evidence, outcome, store.now(), &|| store.now())
            .await?;
    }
    // Acted on: never a second new CA, or new HMAC bytes, in one invocation.
    if outcome.ca_written {
        progress.note(Learned::CaWritten);
    }
    if outcome.hmac_written {
        progress.note(Learned::HmacWritten);
    }
    // In the order written: the step's Secrets, then what follows their bundles.
    progress.note(Learned::Wrote(outcome.report.secrets.clone()));
    progress.note(Learned::Wrote(synced.clone()));
    progress.note(Learned::Window(outcome.report.renewal_window.clone()));
    Ok(synced)
}

/// The pods that read the ClusterTrustBundles in `wrote` (mount names, written by `at` on the
/// store's clock) where the gate cannot observe them (another namespace, a projection by
/// name), found by a cluster-wide list: each holds the gates until its timer, which for a
/// projection by name starts once the kubelet's cache may be stale no longer. The timer-only
/// path counts from there too.
async fn unobserved_readers(
    inv: &Invocation<'_>,
    wrote: &[String],
    at: time::OffsetDateTime,
    evidence: &mut gate::Evidence,
    progress: &mut Progress,
) {
    let Some(api) = inv.trust_bundles else { return };
    let unobserved = match api.projectors().await {
        Ok(p) => trust_bundles::unobserved(inv.config, wrote, &p),
        Err(e) => trust_bundles::unlisted(wrote, &e),
    };
    for u in unobserved {
        if !u.extra.is_zero() {
            progress.note(Learned::UnobservedUntil(
                at + time::Duration::try_from(u.extra).unwrap_or_default(),
            ));
        }
        tracing::warn!("{}: {}; the gate waits for its timer", u.what, u.why);
        evidence.unobserved(u.what, at, u.extra, u.why);
    }
}

/// The consumers after a step. A step that others follow relies on restart-only consumers
/// having loaded it: their rollouts are part of the gate, whatever --wait says. Probes verify
/// the end state. `synced`: the step's caBundle targets, whose writes are Events after the
/// Secrets' (each follows its Secret's bundle).
async fn reload<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    outcome: &Outcome,
    synced: &[Entry],
    progress: &mut Progress,
) -> Result<consumers::Problems, Error> {
    let last = matches!(outcome.phase, Phase::Steady | Phase::Cleanup { last: true });
    let wait = inv.options.wait || !last;
    let probe = inv.options.probe && last;
    let refused = progress.restarts_refused.clone();
    let (reports, mut problems) = inv
        .consumers(store, outcome, (wait, probe, false), refused)
        .await?;
    if let Some(note) = problems.restarts_refused.take() {
        progress.note(Learned::RestartsRefused(note));
    }
    let mut events = crate::events::of_step(&outcome.phase, &outcome.report.secrets);
    events.extend(crate::events::of_step(&outcome.phase, synced));
    events.extend(crate::events::of_restarts(&reports));
    let mut reports = reports;
    crate::report::in_phase(&mut reports, outcome.phase.name());
    progress.note(Learned::Consumers { reports, events });
    Ok(problems)
}
