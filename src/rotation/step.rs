//! One step: observe every Secret, plan, apply. A write that loses a race (the Secret changed
//! since it was read) makes the step re-read and re-plan, a bounded number of times; it never
//! overwrites blindly. Keys are generated only after every read succeeded. [`look`] is the same
//! step writing nothing (a dry run, and the read-only look every run starts with).

use std::collections::{BTreeMap, BTreeSet};

use time::OffsetDateTime;

use crate::apply::{Applied, ApplyError, Guard, apply};
use crate::config::Config;
use crate::error::Error;
use crate::observe::{Snapshot, observe};
use crate::pki::{CaKey, Cert};
use crate::plan::{self, CaRef, Content, Known, Options, Phase};
use crate::report::{Entry, Report};
use crate::store::{SecretStore, StoreError};

/// How many times a step re-reads and re-plans after losing a race.
pub const MAX_ATTEMPTS: u32 = 5;

/// What a step leaves behind, for what follows it (restarts, waits, probes, the next step).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub report: Report,
    /// Digest of each managed Secret's data after the run (empty for a dry run).
    pub digests: BTreeMap<String, String>,
    /// The Secrets written in this run (planned to be written, for a dry run).
    pub written: BTreeSet<String>,
    /// The leaf each TLS Secret holds after the run.
    pub leaves: BTreeMap<String, Cert>,
    /// The CA that signs leaves now, when certgen holds its key.
    pub signer: Option<CaKey>,
    /// A staged rotation's pending CA, when one is stored after this step.
    pub pending: Option<CaKey>,
    /// When each Secret was last written, on the store's clock (now, for this step's writes).
    pub written_at: BTreeMap<String, OffsetDateTime>,
    /// Each TLS Secret's `ca.crt` after the step, for the `caBundle` targets that follow it.
    pub bundles: BTreeMap<String, Vec<u8>>,
    /// A step that writes nothing ([`look`]): the `ca.crt` its plan would write to each Secret,
    /// by CA (one of them perhaps the CA the step would generate), over [`Self::bundles`].
    pub planned: BTreeMap<String, Vec<CaRef>>,
    /// What this step did, and so what comes next.
    pub phase: Phase,
    /// Whether `--overwrite` has been acted on in this step: it stored a new CA, found the
    /// CA Secret changed under it (a CA write whose answer was lost, or another run's), or
    /// found a rotation under way ([`plan::Plan::under_way`]: a pending CA, or the leaves step
    /// of one), which the run finishes instead of beginning another: one rotation per due.
    pub ca_written: bool,
    /// Whether this step stored HMAC bytes (so `--rotate-hmac` has been acted on).
    pub hmac_written: bool,
    /// A step planned from an earlier read (a fresh install's, without the lock) lost a race:
    /// another run wrote first. What it wrote is here; the caller takes the lock and goes on.
    pub raced: bool,
    /// What the step's plan was made from (the last read, after any re-plan).
    pub observed: Snapshot,
    /// In a set of clusters: the step planned next is held back by the set's barrier
    /// ([`plan::Hold`]); nothing was written.
    pub held: Option<plan::Barrier>,
    /// The step's plan makes a new CA (a look's: would make).
    pub new_ca: bool,
    /// The store's clock when the step's outcome was made: what the `caBundle` writes that
    /// follow the step are planned at (their record of undos, `webhooks::plan`).
    pub now: OffsetDateTime,
}

/// A step of one member of a set of clusters (`super::set`): the set's shared CA, stored
/// where the plan makes a new CA, and what the other members' consumers may hold, which the
/// verifier's check before each write includes.
pub struct InSet<'a> {
    /// The member's name in messages and in [`Others`]' keys (its context).
    pub member: &'a str,
    pub ca: Option<&'a CaKey>,
    pub others: &'a Others,
}

/// What each member's consumers may hold, by member, then by TLS Secret: as its last step
/// read and left it until its gate opened, then as stored.
pub type Others = std::sync::Mutex<BTreeMap<String, BTreeMap<String, plan::Held>>>;

/// Plans one step from what is stored now and writes nothing: the outcome says what the step
/// would write, and what is stored (the final state, when it would write nothing).
pub async fn look<S: SecretStore>(
    store: &S,
    config: &Config,
    options: Options,
    known: Known,
) -> Result<Outcome, Error> {
    looking(store, config, (options, known), Mode::Look).await
}

/// [`look`] for `--dry-run`: the step's keys and certificates are made in memory and the
/// verifier's check runs on them as before a real write, so a step the run
/// would refuse is refused here with the same line. Nothing is written; the keys are dropped.
pub async fn dry_look<S: SecretStore>(
    store: &S,
    config: &Config,
    options: Options,
    known: Known,
) -> Result<Outcome, Error> {
    looking(store, config, (options, known), Mode::DryRun).await
}

/// A step that writes nothing, as [`look`] or [`dry_look`].
async fn looking<S: SecretStore>(
    store: &S,
    config: &Config,
    flags: (Options, Known),
    mode: Mode,
) -> Result<Outcome, Error> {
    run(
        store,
        config,
        flags,
        mode,
        &Guard::new(&|| true),
        None,
        None,
    )
    .await
}

/// Runs one step of certgen's main job against a store: observe, plan, apply. A lost race
/// (a write's precondition failed) or a broken connection re-reads and re-plans, a bounded
/// number of times. Every write goes through `guard`. With `seed`, the step plans from it
/// instead of reading the store (the caller proves that what it read earlier is still current;
/// see [`super::run`]), and a lost race ends it ([`Outcome::raced`]): the caller takes the
/// lock before it re-reads.
pub async fn step<S: SecretStore>(
    store: &S,
    config: &Config,
    options: Options,
    known: Known,
    guard: &Guard<'_>,
    seed: Option<Snapshot>,
) -> Result<Outcome, Error> {
    run(
        store,
        config,
        (options, known),
        Mode::Write,
        guard,
        seed,
        None,
    )
    .await
}

/// [`step`] for a member of a set of clusters ([`InSet`]).
pub async fn step_in_set<S: SecretStore>(
    store: &S,
    config: &Config,
    (options, known): (Options, Known),
    guard: &Guard<'_>,
    set: &InSet<'_>,
) -> Result<Outcome, Error> {
    run(
        store,
        config,
        (options, known),
        Mode::Write,
        guard,
        None,
        Some(set),
    )
    .await
}

/// Whether a step writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Look,
    /// A look whose step is made in memory and checked, as `--dry-run` reports it.
    DryRun,
    Write,
}

/// [`step`] or [`look`].
async fn run<S: SecretStore>(
    store: &S,
    config: &Config,
    (options, known): (Options, Known),
    mode: Mode,
    guard: &Guard<'_>,
    mut seed: Option<Snapshot>,
    set: Option<&InSet<'_>>,
) -> Result<Outcome, Error> {
    let seeded = seed.is_some();
    let mut done: Vec<Entry> = Vec::new();
    let mut attempt = 1;
    let mut ca_written = false;
    let mut hmac_written = false;
    // Whether --overwrite and --rotate-hmac have been acted on in this step (see
    // `Options::after`): re-plans continue from there, never a second time.
    let mut acted = (false, false);
    let mut first_ca_version: Option<Option<String>> = None;
    // Boxed: held across the step's awaits, it would otherwise grow every future that
    // contains this one (the simulation's deepest crash-point test runs near the test
    // thread's stack).
    let mut window: Option<Box<crate::report::WindowReport>>;
    loop {
        let observed = read(store, config, &mut seed, &mut attempt).await?;
        // If the CA Secret changed since the first read (a CA write whose answer was lost, or
        // another run's rotation), --overwrite has been acted on.
        if ca_changed(&mut first_ca_version, &observed) {
            acted.0 = true;
            ca_written = true;
        }
        let now = store.now();
        let known = Known {
            writer_now: Some(store.writer_now()),
            ..known.clone()
        };
        let options = options.after(acted.0, acted.1);
        let plan = plan::plan(config, &observed, now, options, known, &|n| store.object(n))?;
        window = crate::report::WindowReport::of(&config.renewal, &plan.window).map(Box::new);
        // A run in one cluster may not change a CA that a set shares; a member's step (its
        // run's or its dry run's) is the set's to decide.
        if options.hold.is_none() {
            crate::set::refuse_shared_ca(config, &observed, (&plan, options.overwrite), &|n| {
                store.object(n)
            })?;
        }
        // A member of a set of clusters: a step the set's barrier holds back writes nothing.
        if let Some(barrier) = options.hold.and_then(|h| h.stops(&plan.phase)) {
            return Ok(held_back(looked(store, config, plan, observed), barrier));
        }
        // A rotation under way is the rotation an `--overwrite` asks for: the run finishes it
        // and begins no other.
        if plan.under_way && under_way_acts_on_overwrite() {
            acted.0 = true;
            ca_written = true;
        }
        if !matches!(mode, Mode::Write) {
            let look = match mode {
                Mode::DryRun => {
                    dry_run(store, config, plan, observed, (now, options), guard).await?
                }
                _ => looked(store, config, plan, observed),
            };
            return Ok(Outcome { ca_written, ..look });
        }
        let phase = plan.phase.clone();
        let (result, mut progress) =
            apply_step(store, config, (plan, &observed), (now, options), guard, set).await;
        ca_written |= progress.new_ca_written;
        hmac_written |= progress.hmac_written;
        // A stored CA has acted on --overwrite, and stored HMAC bytes on --rotate-hmac.
        acted.0 |= progress.ca_written;
        acted.1 |= progress.hmac_written;
        crate::report::merge(&mut done, std::mem::take(&mut progress.entries));
        let raced = seeded && matches!(result, Err(ApplyError::Store(StoreError::Conflict { .. })));
        // Done; or a plan from an earlier read (a fresh install's creates, made without the
        // lock) that lost a race: another run got there first, and the caller goes on under the
        // lock instead of re-planning here. The CA Secret (a fresh install's first write)
        // appeared under the run either way: --overwrite has been acted on.
        if let Err(e) = result
            && !raced
        {
            let pause = again(e, attempt)?;
            attempt += 1;
            tokio::time::sleep(pause).await;
            continue;
        }
        let mut outcome = outcome(store, config, (attempt, done), progress, phase, observed);
        if !raced {
            outcome.report.renewal_window = window.map(|w| *w);
        }
        return Ok(Outcome {
            raced,
            ca_written: ca_written || raced,
            hmac_written,
            ..outcome
        });
    }
}

/// A member's step that the set's `barrier` holds back: the look, writing nothing, each write
/// it planned said to wait for the set.
/// The name of a held step in reports: `leaves`, `cleanup`, or `cleanup-before-trust` (a
/// cleanup of a rotation held before a new rotation's trust step).
pub fn held_name(barrier: plan::Barrier, phase: &Phase) -> String {
    if barrier == plan::Barrier::Cleanup && matches!(phase, Phase::Cleanup { last: false }) {
        "cleanup-before-trust".into()
    } else {
        barrier.name().into()
    }
}

fn held_back(mut held: Outcome, barrier: plan::Barrier) -> Outcome {
    held.written.clear();
    held.planned.clear();
    held.held = Some(barrier);
    for e in &mut held.report.secrets {
        if e.action.writes() {
            e.action = plan::Action::Keep;
            e.reason = format!(
                "held: the {} step waits until every member of the set is ready for it",
                barrier.name()
            );
        }
    }
    held
}

/// Applies `plan`, made from `observed`, checking the step before its first write
/// ([`check_step`]); the result, and what was applied.
async fn apply_step<S: SecretStore>(
    store: &S,
    config: &Config,
    (plan, observed): (plan::Plan, &Snapshot),
    (now, options): (OffsetDateTime, Options),
    guard: &Guard<'_>,
    set: Option<&InSet<'_>>,
) -> (Result<(), ApplyError>, Applied) {
    let mut progress = Applied {
        layouts: layouts(config),
        given_ca: set.and_then(|s| s.ca.cloned()),
        ..Applied::default()
    };
    let verify = |after: &Applied| check_step(store, config, observed, after, (now, options), set);
    let result = apply(
        store,
        plan,
        observed,
        now,
        &mut progress,
        guard,
        &verify,
        false,
    )
    .await;
    (result, progress)
}

/// Whether the CA Secret's version differs from the first one this step read (`first`, set by
/// the first call): a CA write whose answer was lost, or another run's rotation.
fn ca_changed(first: &mut Option<Option<String>>, observed: &Snapshot) -> bool {
    let now = ca_version(observed);
    match first {
        None => {
            *first = Some(now);
            false
        }
        Some(first) => *first != now,
    }
}

/// A dry run's step: what a run would write, checked as a run checks it before its writes;
/// nothing is written.
async fn dry_run<S: SecretStore>(
    store: &S,
    config: &Config,
    plan: plan::Plan,
    observed: Snapshot,
    (now, options): (OffsetDateTime, Options),
    guard: &Guard<'_>,
) -> Result<Outcome, Error> {
    let mut progress = Applied {
        layouts: layouts(config),
        ..Applied::default()
    };
    let verify =
        |after: &Applied| check_step(store, config, &observed, after, (now, options), None);
    let made = plan.clone();
    let dry = apply(
        store,
        made,
        &observed,
        now,
        &mut progress,
        guard,
        &verify,
        true,
    );
    match dry.await {
        Ok(()) => Ok(looked(store, config, plan, observed)),
        Err(ApplyError::Invalid(e)) => Err(e.into()),
        Err(e) => Err(again(e, MAX_ATTEMPTS).unwrap_err()),
    }
}

/// The Secrets for the next attempt: the `seed` when there is one, else a read, retried while
/// it fails for a reason that passes (`attempt` counts the attempts).
async fn read<S: SecretStore>(
    store: &S,
    config: &Config,
    seed: &mut Option<Snapshot>,
    attempt: &mut u32,
) -> Result<Snapshot, Error> {
    loop {
        let read = match seed.take() {
            Some(o) => Ok(o),
            None => observe(store, config).await,
        };
        match read {
            Ok(o) => return Ok(o),
            Err(e) if transient(&e) && *attempt < MAX_ATTEMPTS => {
                tracing::warn!(attempt = *attempt, "{e}; retrying");
                *attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(*attempt)))
                    .await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The verifier's check before a step's writes ([`plan::step_check`]): every TLS Secret as
/// read (`observed`) and as the step leaves it (`after`), each leaf against each bundle at the
/// store's `now`. A refusal names the pair: the Secret whose leaf is rejected, the Secret whose
/// bundle rejects it, and why; nothing has been written.
fn check_step<S: SecretStore>(
    store: &S,
    config: &Config,
    observed: &Snapshot,
    after: &Applied,
    (now, options): (OffsetDateTime, Options),
    set: Option<&InSet<'_>>,
) -> Result<(), plan::Invalid> {
    if !live_check() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let verifier = crate::pki::Verifier::new(now);
    // Each distinct bundle parsed once (a thousand Secrets share a few).
    let mut parsed: BTreeMap<Vec<u8>, Option<Vec<Cert>>> = BTreeMap::new();
    let mut parse = |bytes: &[u8]| -> Option<Vec<Cert>> {
        if let Some(p) = parsed.get(bytes) {
            return p.clone();
        }
        let p = crate::pki::parse_cert_chain(bytes).ok();
        parsed.insert(bytes.to_vec(), p.clone());
        p
    };
    let mut held = BTreeMap::new();
    for t in &config.tls {
        let before = observed.get(&t.name).present();
        let before_data = |key: &str| before.and_then(|s| s.data.get(key));
        let before_bundle = before_data(&t.layout.bundle).and_then(|b| parse(b));
        let after_bundle = after.bundles.get(&t.name).and_then(|b| parse(b));
        let before_leaf = before_data(&t.layout.cert)
            .and_then(|b| crate::pki::parse_cert_chain(b).ok())
            .and_then(|c| c.into_iter().next());
        let after_leaf = after.leaves.get(&t.name).cloned();
        let fresh = after_leaf.is_some() && after_leaf != before_leaf;
        held.insert(
            t.name.clone(),
            plan::Held {
                before_leaf,
                before_bundle,
                after_leaf,
                after_bundle,
                fresh,
            },
        );
    }
    // In a set of clusters, every leaf and bundle the other members' consumers may hold too,
    // each named `member/secret`: a step that would break a pair across clusters is refused
    // like one within a member.
    let own = set.map(|_| held.clone());
    if let Some(set) = set {
        let others = set.others.lock().unwrap_or_else(|e| e.into_inner());
        for (member, secrets) in others.iter().filter(|(m, _)| *m != set.member) {
            for (name, h) in secrets {
                let h = plan::Held {
                    fresh: false,
                    ..h.clone()
                };
                held.insert(format!("{member}/{name}"), h);
            }
        }
    }
    let verdict = plan::step_check(config, &verifier, &held, options.strategy);
    if let (Some(set), Some(own), Ok(())) = (set, own, &verdict) {
        // What this member's consumers may hold from now until its gate opens again.
        let mut others = set.others.lock().unwrap_or_else(|e| e.into_inner());
        others.insert(set.member.to_string(), own);
    }
    // What the check cost (bench/verifier reads it).
    tracing::debug!(
        secrets = held.len(),
        verifications = verifier.verifications.get(),
        micros = started.elapsed().as_micros() as u64,
        "pre-write check: every leaf against every bundle consumers may hold"
    );
    verdict.map_err(|b| plan::Invalid {
        object: store.object(&b.leaf),
        problem: b.to_string(),
        fix: "nothing was written. certgen's planner should never plan such a step: if another tool changed these Secrets since certgen's last run, restore them from one writer; otherwise please report it with the output of `certgen check` and `certgen --dry-run`".into(),
    })
}

/// Whether a rotation found under way acts on `--overwrite` (one rotation per due): always,
/// but in the simulation's mutation check, which turns it off on its own thread to show that
/// the oracle catches a run that begins a second rotation ([`resumed_rotation_keeps_overwrite`],
/// cargo feature `test-hooks`).
fn under_way_acts_on_overwrite() -> bool {
    #[cfg(feature = "test-hooks")]
    if KEEPS_OVERWRITE.with(std::cell::Cell::get) {
        return false;
    }
    true
}

#[cfg(feature = "test-hooks")]
thread_local! {
    static KEEPS_OVERWRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The mutation of issue 46's B1, for the simulation's mutation check (cargo feature
/// `test-hooks`): while `on`, runs on this thread leave `--overwrite` set when they find a
/// rotation under way, so a resumed rotation is finished and then another begun.
#[cfg(feature = "test-hooks")]
pub fn resumed_rotation_keeps_overwrite(on: bool) {
    KEEPS_OVERWRITE.with(|k| k.set(on));
}

/// Whether the verifier's check before each step's writes runs: always, but for certgen's own
/// tests, which turn it off to show that the planner alone keeps the invariant
/// (`CERTGEN_TEST_LIVE_VERIFIER=off`, cargo feature `test-hooks`).
fn live_check() -> bool {
    #[cfg(feature = "test-hooks")]
    if std::env::var("CERTGEN_TEST_LIVE_VERIFIER").as_deref() == Ok("off") {
        return false;
    }
    true
}

/// The outcome of a step whose last attempt (number `attempt`, every write in `done`) applied
/// `applied`, planned from `observed`.
fn outcome<S: SecretStore>(
    store: &S,
    config: &Config,
    (attempt, done): (u32, Vec<Entry>),
    mut applied: Applied,
    phase: Phase,
    observed: Snapshot,
) -> Outcome {
    let written = done
        .iter()
        .filter(|e| e.action.writes())
        .map(|e| e.secret.clone())
        .collect();
    Outcome {
        report: Report::new(&config.profile, store.describe(), false, attempt, done),
        digests: applied.digests,
        written,
        written_at: applied.written_at,
        bundles: applied.bundles,
        planned: BTreeMap::new(),
        leaves: applied.leaves,
        signer: applied.signer.take(),
        pending: applied.pending.take(),
        phase,
        ca_written: false,
        hmac_written: false,
        raced: false,
        observed,
        held: None,
        new_ca: false,
        now: store.now(),
    }
}

/// The CA Secret's version as read (`None` when it is absent).
fn ca_version(observed: &Snapshot) -> Option<String> {
    let ca = observed.ca.as_ref().and_then(|o| o.present());
    ca.map(|s| s.version.clone())
}

/// What a step that writes nothing found: what `plan` would write, and what is stored now
/// (the final state when the plan writes nothing).
fn looked<S: SecretStore>(
    store: &S,
    config: &Config,
    plan: plan::Plan,
    observed: Snapshot,
) -> Outcome {
    let new_ca = plan.ca.new.is_some();
    // The Secrets the plan writes, the CA Secret included.
    let written: BTreeSet<String> = std::iter::once(&plan.ca.name)
        .filter(|_| plan.ca.action.writes())
        .chain(
            plan.secrets
                .iter()
                .filter(|s| s.action.writes())
                .map(|s| &s.name),
        )
        .cloned()
        .collect();
    let mut stored = Applied {
        layouts: layouts(config),
        ..Applied::default()
    };
    for name in observed.secrets.keys() {
        stored.record(name, &observed, &BTreeMap::new(), None);
    }
    let mut report = Report::from_plan(&config.profile, store.describe(), &plan);
    report.other_writers =
        crate::attribution::of_snapshot(config, &observed, &BTreeMap::new(), store.now())
            .iter()
            .map(crate::report::WriterRow::of)
            .collect();
    for w in report.other_writers.iter().filter(|w| !w.fight.is_empty()) {
        tracing::warn!(
            "{}; this run writes what its plan says once and never retries against it: see docs/troubleshooting.md#another-writer-keeps-undoing-certgen",
            w.text
        );
    }
    report.renewal_window = crate::report::WindowReport::of(&config.renewal, &plan.window);
    // Each TLS Secret's bundle under its own layout's key (kube-webhook-certgen's `ca`, say),
    // as the run's writes record it ([`Applied::record`]).
    let planned = config
        .tls
        .iter()
        .filter_map(|t| {
            let s = plan.secrets.iter().find(|s| s.name == t.name)?;
            match s.write.as_ref()?.data.get(&t.layout.bundle)? {
                Content::Bundle(refs) => Some((s.name.clone(), refs.clone())),
                _ => None,
            }
        })
        .collect();
    Outcome {
        report,
        digests: stored.digests,
        written,
        written_at: stored.written_at,
        bundles: stored.bundles,
        planned,
        leaves: stored.leaves,
        signer: plan.ca.active,
        pending: plan.ca.pending,
        phase: plan.phase,
        ca_written: false,
        hmac_written: false,
        raced: false,
        observed,
        held: None,
        new_ca,
        now: store.now(),
    }
}

/// After a failed apply in attempt `attempt`: how long to pause before re-reading and
/// re-planning (a lost race, or a connection that broke, perhaps mid-write: whether the write
/// landed or not, its precondition makes a re-read and re-plan safe), or the error to stop with.
fn again(e: ApplyError, attempt: u32) -> Result<std::time::Duration, Error> {
    match e {
        ApplyError::Store(StoreError::Conflict { what, detail }) => {
            tracing::warn!(object = %what, attempt, "{detail}; re-reading and re-planning");
            if attempt >= MAX_ATTEMPTS {
                return Err(Error::Contended {
                    attempts: attempt,
                    last: StoreError::Conflict { what, detail },
                });
            }
            Ok(std::time::Duration::from_millis(
                50 * u64::from(attempt + 1),
            ))
        }
        ApplyError::Store(e) if transient(&e) && attempt < MAX_ATTEMPTS => {
            tracing::warn!(attempt, "{e}; re-reading and re-planning");
            Ok(std::time::Duration::from_millis(
                200 * u64::from(attempt + 1),
            ))
        }
        ApplyError::Store(e) => Err(e.into()),
        ApplyError::Issue(e) => Err(e.into()),
        ApplyError::Invalid(e) => Err(e.into()),
        ApplyError::LockLost => Err(Error::LockLost),
    }
}

/// A failure worth another attempt: the connection broke or timed out before an HTTP answer.
/// (429/503/504 are retried below, in the client, honouring Retry-After.)
fn transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Api(f) if f.status.is_none())
}

/// The TLS Secrets whose data keys are not certgen's own.
fn layouts(config: &Config) -> BTreeMap<String, crate::secret::Layout> {
    config
        .tls
        .iter()
        .filter(|t| t.layout != crate::secret::Layout::default())
        .map(|t| (t.name.clone(), t.layout.clone()))
        .collect()
}
