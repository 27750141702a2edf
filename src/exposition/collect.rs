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
use crate::outside::{CaBundleTargets, TargetObserved, TrustBundles};
use crate::report::CheckReport;
use crate::store::{SecretStore, StoreError};

/// `check`'s report of the store and (with `webhooks`, in a cluster) of the `caBundle`
/// targets, and its gauges, judged at the store's "now" (the clock a run's gates use). A
/// Secret that cannot be read is reported on its row, not an error that would hide the others;
/// the first such read's error comes back too, since a run stops on it (exit 2).
pub async fn checked<S: SecretStore>(
    config: &Config,
    store: &S,
    (webhooks, bundles): (Option<&dyn CaBundleTargets>, Option<&dyn TrustBundles>),
) -> Result<(CheckReport, Vec<Family>, Option<StoreError>), Error> {
    checked_as(config, store, (webhooks, bundles), false).await
}

/// [`checked`], for one member of `check` over a set of clusters (`in_set`): the verdict is
/// the set's run's, which may change the shared CA.
pub async fn checked_as<S: SecretStore>(
    config: &Config,
    store: &S,
    seams: (Option<&dyn CaBundleTargets>, Option<&dyn TrustBundles>),
    in_set: bool,
) -> Result<(CheckReport, Vec<Family>, Option<StoreError>), Error> {
    let mut read = judged(config, store, seams, in_set).await?;
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
    (webhooks, bundles): (Option<&dyn CaBundleTargets>, Option<&dyn TrustBundles>),
    in_set: bool,
) -> Result<Judged, Error> {
    let (observed, unreadable) = observe::observe_each(store, config).await?;
    let now = store.now();
    let mut targets = match webhooks {
        Some(api) => targets(config, &observed, api, now).await?,
        None => vec![],
    };
    if let Some(api) = bundles {
        targets.extend(trust_bundles(config, &observed, api, now).await?);
    }
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
        let (mut writer, mut pending_missing) = (None, None);
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
                let injected = o.injected.is_some();
                pending_missing =
                    crate::check::pending_not_injected(config, observed, injected, &o.bundles);
                TargetState::of_present(config, t, observed, injected, &o.bundles)
            }
        };
        out.push(CaBundleTarget {
            writer,
            kind,
            name: t.name.clone(),
            secret: t.bundle_from.clone(),
            state,
            pending_missing,
        });
    }
    Ok(out)
}

/// Each ClusterTrustBundle target of `config` (one row per signer), its bundles listed once.
/// 404 on a cluster before 1.37 is an error that says so.
async fn trust_bundles(
    config: &Config,
    observed: &Snapshot,
    api: &dyn TrustBundles,
    now: time::OffsetDateTime,
) -> Result<Vec<CaBundleTarget>, Error> {
    let mut out = Vec::new();
    for t in &config.trust_bundles {
        let read = match api.list(&t.signer).await {
            Err(StoreError::Api(f)) if f.status == Some(403) => {
                tracing::warn!(
                    "ClusterTrustBundles {}: not checked: this identity may not list clustertrustbundles (403)",
                    t.signer
                );
                None
            }
            Err(e) => return Err(e.into()),
            Ok(read) => Some(read),
        };
        out.push(trust_bundle_target(
            config,
            t,
            observed,
            read.as_deref(),
            now,
        ));
    }
    Ok(out)
}

/// One ClusterTrustBundle target's row, judged by the run's own rule
/// ([`crate::trust_bundles::actions`]) from its bundles as listed (`None`: refused): in step when
/// a run would act on none of them, `drifted` otherwise; the other writer of one of certgen's
/// bundles named. `check` and the exporter both judge with it.
pub fn trust_bundle_target(
    config: &Config,
    t: &crate::config::TrustBundle,
    observed: &Snapshot,
    read: Option<&[crate::trust_bundles::BundleRead]>,
    now: time::OffsetDateTime,
) -> CaBundleTarget {
    let mut writer = None;
    let state = match read {
        None => TargetState::Refused,
        Some(read) => {
            let key = config.layout_of(&t.bundle_from).bundle;
            let cas: Vec<(String, Option<crate::pki::Cert>)> = observed
                .get(&t.bundle_from)
                .present()
                .and_then(|s| s.data.get(&key))
                .and_then(|b| crate::pki::parse_cert_chain(b).ok())
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c.short_fingerprint(), Some(c)))
                .collect();
            writer = read
                .iter()
                .filter(|b| crate::trust_bundles::is_ours(&b.labels, &t.labels))
                .find_map(|b| crate::attribution::of_trust_bundle(&b.name, &b.writes, now));
            let (actions, _) = crate::trust_bundles::actions(&t.signer, &t.labels, read, &cas);
            if cas.is_empty() || actions.is_empty() {
                // (No Secret to compare with: the Secret's own row says why.)
                TargetState::InSync
            } else {
                TargetState::Drifted
            }
        }
    };
    CaBundleTarget {
        writer,
        kind: "ClusterTrustBundles".into(),
        name: t.signer.clone(),
        secret: t.bundle_from.clone(),
        state,
        pending_missing: None,
    }
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
    seams: (Option<&dyn CaBundleTargets>, Option<&dyn TrustBundles>),
) -> Result<Left, Error> {
    left_as(config, store, seams, false).await
}

/// [`left`], for a member of a set of clusters (`in_set`, as [`checked_as`]).
pub async fn left_as<S: SecretStore>(
    config: &Config,
    store: &S,
    seams: (Option<&dyn CaBundleTargets>, Option<&dyn TrustBundles>),
    in_set: bool,
) -> Result<Left, Error> {
    let read = judged(config, store, seams, in_set).await?;
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
