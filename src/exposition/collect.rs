//! The reads behind `certgen check` and the metrics: one observation of the Secrets, one read of
//! each `caBundle` target, `check`'s judgement of them, turned into gauge families by
//! [`super::health`]. After a run, the same plus the run's outcome.
//!
//! It reads through the same seams as a run (the Secret store, and the `caBundle` targets'
//! [`crate::outside::CaBundleTargets`]), never the Kubernetes adapter itself, and writes nothing.

use super::{CaBundleTarget, Family, RunOutcome, TargetState};
use crate::check::Context;
use crate::config::Config;
use crate::error::Error;
use crate::observe::{self, Snapshot};
use crate::outside::{CaBundleTargets, TargetObserved};
use crate::report::CheckReport;
use crate::store::{SecretStore, StoreError};

/// `check`'s report of the store and (with `webhooks`, in a cluster) of the `caBundle`
/// targets, and its gauges, judged at the store's "now" (the clock a run's gates use). A
/// Secret that cannot be read is reported on its row, not an error that would hide the others;
/// the first such read's error comes back too, since a run stops on it (exit 2).
pub async fn checked<S: SecretStore>(
    config: &Config,
    store: &S,
    webhooks: Option<&dyn CaBundleTargets>,
) -> Result<(CheckReport, Vec<Family>, Option<StoreError>), Error> {
    checked_as(config, store, webhooks, false).await
}

/// [`checked`], for one member of `check` over a set of clusters (`in_set`): the verdict is
/// the set's run's, which may change the shared CA.
pub async fn checked_as<S: SecretStore>(
    config: &Config,
    store: &S,
    webhooks: Option<&dyn CaBundleTargets>,
    in_set: bool,
) -> Result<(CheckReport, Vec<Family>, Option<StoreError>), Error> {
    let mut read = judged(config, store, webhooks, in_set).await?;
    let first = (!read.unreadable.is_empty()).then(|| read.unreadable.swap_remove(0).1);
    Ok((read.report, read.families, first))
}

/// One read of the store, judged as `check` judges it.
struct Judged {
    observed: Snapshot,
    /// The Secrets that could not be read (they are on their rows of the report).
    unreadable: Vec<(String, StoreError)>,
    /// The store's "now" the judgement was made at.
    now: time::OffsetDateTime,
    report: CheckReport,
    families: Vec<Family>,
}

/// Reads every Secret once (and each `caBundle` target through `webhooks`) and judges them
/// at the store's "now": `check`'s report and its gauges.
async fn judged<S: SecretStore>(
    config: &Config,
    store: &S,
    webhooks: Option<&dyn CaBundleTargets>,
    in_set: bool,
) -> Result<Judged, Error> {
    let (observed, unreadable) = observe::observe_each(store, config).await?;
    let now = store.now();
    let targets = match webhooks {
        Some(api) => targets(config, &observed, api, now).await?,
        None => vec![],
    };
    let ctx = Context {
        undos: Default::default(),
        propagation_delay: crate::config::propagation_delay(None, store.namespace().is_none()),
        targets,
        unreadable: unreadable
            .iter()
            .map(|(name, e)| (name.clone(), e.to_string()))
            .collect(),
        in_set,
    };
    let report = crate::check::check(config, &observed, now, store.describe(), &ctx)
        .with_exposed_keys(store.exposed_keys());
    let families = super::health(config, &observed, &report, now);
    Ok(Judged {
        observed,
        unreadable,
        now,
        report,
        families,
    })
}

/// Each `caBundle` target of `config`, read once and compared with the `ca.crt` of the Secret
/// it follows. A target this identity may not read is `refused` (with a warning); any other
/// failed read is an error.
async fn targets(
    config: &Config,
    observed: &Snapshot,
    api: &dyn CaBundleTargets,
    now: time::OffsetDateTime,
) -> Result<Vec<CaBundleTarget>, Error> {
    let mut out = Vec::with_capacity(config.webhooks.len());
    for t in &config.webhooks {
        let kind = t.kind.as_str().to_string();
        let mut writer = None;
        let state = match api.read(t.kind, &t.name).await {
            Err(StoreError::Api(f)) if f.status == Some(403) => {
                tracing::warn!(
                    "{kind} {}: caBundle not checked: this identity may not {} it (403)",
                    t.name,
                    f.verb
                );
                TargetState::Refused
            }
            Err(e) => return Err(e.into()),
            Ok(TargetObserved::Absent) => TargetState::Absent,
            Ok(TargetObserved::Present(o)) => {
                let missing = o.bundles.iter().any(Vec::is_empty);
                let recorded = crate::observe::writers::history(o.recorded.as_deref());
                writer = crate::attribution::of_target(
                    &kind, &t.name, &o.writes, missing, &recorded, now,
                );
                TargetState::of_present(config, t, observed, o.injected.is_some(), &o.bundles)
            }
        };
        out.push(CaBundleTarget {
            writer,
            kind,
            name: t.name.clone(),
            secret: t.bundle_from.clone(),
            state,
        });
    }
    Ok(out)
}

/// What a finished run left, read once after it (as `check` reads it) for its Warning Events
/// and its metrics: the Secrets, the store's "now" and the health gauges.
pub struct Left {
    pub observed: Snapshot,
    /// Every Secret could be read (local mode reads on when one cannot: `observed` lacks it).
    pub complete: bool,
    pub now: time::OffsetDateTime,
    pub families: Vec<Family>,
}

/// Reads what a run left: the Secrets once, and (with `webhooks`) each `caBundle` target.
pub async fn left<S: SecretStore>(
    config: &Config,
    store: &S,
    webhooks: Option<&dyn CaBundleTargets>,
) -> Result<Left, Error> {
    left_as(config, store, webhooks, false).await
}

/// [`left`], for a member of a set of clusters (`in_set`, as [`checked_as`]).
pub async fn left_as<S: SecretStore>(
    config: &Config,
    store: &S,
    webhooks: Option<&dyn CaBundleTargets>,
    in_set: bool,
) -> Result<Left, Error> {
    let read = judged(config, store, webhooks, in_set).await?;
    Ok(Left {
        observed: read.observed,
        complete: read.unreadable.is_empty(),
        now: read.now,
        families: read.families,
    })
}

/// The metrics of a finished run: the health gauges of the state it `left` (when it could be
/// read; else the outcome alone, with a warning) and its `outcome`.
pub fn after_run(
    config: &Config,
    left: Option<&Result<Left, Error>>,
    outcome: RunOutcome,
) -> String {
    let mut families = match left {
        Some(Ok(left)) => left.families.clone(),
        Some(Err(e)) => {
            tracing::warn!(
                "the metrics give the run's outcome only: reading the Secrets after the run failed: {e}"
            );
            vec![]
        }
        None => vec![],
    };
    families.extend(super::run(config, &outcome));
    super::render(&families)
}
