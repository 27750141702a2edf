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
use crate::plan::{self, CaRef, Content, Options, Phase};
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
    /// Whether `--overwrite` has been acted on in this step: it stored a new CA, or found the
    /// CA Secret changed under it (a CA write whose answer was lost, or another run's).
    pub ca_written: bool,
    /// Whether this step stored HMAC bytes (so `--rotate-hmac` has been acted on).
    pub hmac_written: bool,
    /// What the step's plan was made from (the last read, after any re-plan).
    pub observed: Snapshot,
}

/// Plans one step from what is stored now and writes nothing: the outcome says what the step
/// would write, and what is stored (the final state, when it would write nothing).
pub async fn look<S: SecretStore>(
    store: &S,
    config: &Config,
    options: Options,
) -> Result<Outcome, Error> {
    run(
        store,
        config,
        options,
        Mode::Look,
        &Guard::new(&|| true),
        None,
    )
    .await
}

/// Runs one step of certgen's main job against a store: observe, plan, apply. A lost race
/// (a write's precondition failed) or a broken connection re-reads and re-plans, a bounded
/// number of times. Every write goes through `guard`. With `seed`, the first attempt plans
/// from it instead of reading the store (the caller proves that what it read earlier is still
/// current; see [`super::run`]); a re-plan after a lost race reads the store as usual.
pub async fn step<S: SecretStore>(
    store: &S,
    config: &Config,
    options: Options,
    guard: &Guard<'_>,
    seed: Option<Snapshot>,
) -> Result<Outcome, Error> {
    run(store, config, options, Mode::Write, guard, seed).await
}

/// Whether a step writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Look,
    Write,
}

/// [`step`] or [`look`].
async fn run<S: SecretStore>(
    store: &S,
    config: &Config,
    options: Options,
    mode: Mode,
    guard: &Guard<'_>,
    mut seed: Option<Snapshot>,
) -> Result<Outcome, Error> {
    let mut plan_options = options;
    let mut done: Vec<Entry> = Vec::new();
    let mut attempt = 1;
    let mut ca_written = false;
    let mut hmac_written = false;
    let mut first_ca_version: Option<Option<String>> = None;
    loop {
        let read = match seed.take() {
            Some(o) => Ok(o),
            None => observe(store, config).await,
        };
        let observed = match read {
            Ok(o) => o,
            Err(e) if transient(&e) && attempt < MAX_ATTEMPTS => {
                tracing::warn!(attempt, "{e}; retrying");
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)))
                    .await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // If the CA Secret changed since the first read (a CA write whose answer was lost, or
        // another run's rotation), --overwrite has been acted on: never a second new CA.
        let ca_version = observed
            .ca
            .as_ref()
            .and_then(|o| o.present())
            .map(|s| s.version.clone());
        match &first_ca_version {
            None => first_ca_version = Some(ca_version),
            Some(first) if *first != ca_version => {
                plan_options.overwrite = false;
                ca_written = true;
            }
            Some(_) => {}
        }
        let now = store.now();
        let plan = plan::plan(config, &observed, now, plan_options, &|n| store.object(n))?;
        let phase = plan.phase.clone();
        if mode == Mode::Look {
            return Ok(looked(store, config, plan, observed));
        }
        let mut progress = Applied::default();
        let result = apply(store, plan, &observed, now, &mut progress, guard).await;
        ca_written |= progress.new_ca_written;
        hmac_written |= progress.hmac_written;
        // A stored new CA has acted on --overwrite, and stored HMAC bytes on --rotate-hmac:
        // re-plans continue from there, never a second time.
        if progress.ca_written {
            plan_options.overwrite = false;
        }
        if progress.hmac_written {
            plan_options.rotate_hmac = false;
        }
        crate::report::merge(&mut done, std::mem::take(&mut progress.entries));
        match result {
            Ok(()) => {
                let written = done
                    .iter()
                    .filter(|e| e.action.writes())
                    .map(|e| e.secret.clone())
                    .collect();
                return Ok(Outcome {
                    report: Report::new(&config.profile, store.describe(), false, attempt, done),
                    digests: progress.digests,
                    written,
                    written_at: progress.written_at,
                    bundles: progress.bundles,
                    planned: BTreeMap::new(),
                    leaves: progress.leaves,
                    signer: progress.signer.take(),
                    pending: progress.pending.take(),
                    phase,
                    ca_written,
                    hmac_written,
                    observed,
                });
            }
            Err(e) => {
                let pause = again(e, attempt)?;
                attempt += 1;
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// What a step that writes nothing found: what `plan` would write, and what is stored now
/// (the final state when the plan writes nothing).
fn looked<S: SecretStore>(
    store: &S,
    config: &Config,
    plan: plan::Plan,
    observed: Snapshot,
) -> Outcome {
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
    let mut stored = Applied::default();
    for name in observed.secrets.keys() {
        stored.record(name, &observed, &BTreeMap::new(), None);
    }
    let report = Report::from_plan(&config.profile, store.describe(), &plan);
    let planned = plan
        .secrets
        .iter()
        .filter_map(|s| match s.write.as_ref()?.data.get("ca.crt")? {
            Content::Bundle(refs) => Some((s.name.clone(), refs.clone())),
            _ => None,
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
        observed,
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
