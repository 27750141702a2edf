//! The reads behind `certgen check` and the metrics: one observation of the Secrets, one read of
//! each `caBundle` target, `check`'s judgement of them, turned into gauge families by
//! [`super::health`]. After a run, the same plus the run's outcome.
//!
//! It reads through the same store and webhook adapter as a run, and writes nothing.

use std::path::PathBuf;

use super::{CaBundleTarget, Family, RunOutcome, TargetState};
use crate::check::Context;
use crate::cli::TargetArgs;
use crate::config::Config;
use crate::error::Error;
use crate::k8s::{KubeStore, WebhookObserved, WebhookStore, webhooks::describe};
use crate::observe::{self, Snapshot};
use crate::report::CheckReport;
use crate::store::{LocalStore, SecretStore, StoreError};

/// `check`'s report of the store and (with `webhooks`, in a cluster) of the `caBundle`
/// targets, and its gauges, judged at the store's "now" (the clock a run's gates use). A
/// Secret that cannot be read is reported on its row, not an error that would hide the others;
/// the first such read's error comes back too, since a run stops on it (exit 2).
pub async fn checked<S: SecretStore>(
    config: &Config,
    store: &S,
    webhooks: Option<&WebhookStore>,
) -> Result<(CheckReport, Vec<Family>, Option<StoreError>), Error> {
    let (observed, mut unreadable) = observe::observe_each(store, config).await?;
    let now = store.now();
    let targets = match webhooks {
        Some(api) => targets(config, &observed, api).await?,
        None => vec![],
    };
    let ctx = Context {
        propagation_delay: crate::config::propagation_delay(None, store.namespace().is_none()),
        targets,
        unreadable: unreadable
            .iter()
            .map(|(name, e)| (name.clone(), e.to_string()))
            .collect(),
    };
    let report = crate::check::check(config, &observed, now, store.describe(), &ctx)
        .with_exposed_keys(store.exposed_keys());
    let families = super::health(config, &observed, &report, now);
    let first = (!unreadable.is_empty()).then(|| unreadable.swap_remove(0).1);
    Ok((report, families, first))
}

/// Each `caBundle` target of `config`, read once and compared with the `ca.crt` of the Secret
/// it follows. A target this identity may not read is `refused` (with a warning); any other
/// failed read is an error.
async fn targets(
    config: &Config,
    observed: &Snapshot,
    api: &WebhookStore,
) -> Result<Vec<CaBundleTarget>, Error> {
    let mut out = Vec::with_capacity(config.webhooks.len());
    for t in &config.webhooks {
        let state = match api.get(t.kind, &t.name).await {
            Err(StoreError::Api(f)) if f.status == Some(403) => {
                tracing::warn!(
                    "{}: caBundle not checked: this identity may not {} it (403)",
                    describe(t.kind, &t.name),
                    f.verb
                );
                TargetState::Refused
            }
            Err(e) => return Err(e.into()),
            Ok(WebhookObserved::Absent) => TargetState::Absent,
            Ok(WebhookObserved::Present(o)) if o.injected.is_some() => TargetState::CertManager,
            Ok(WebhookObserved::Present(o)) => {
                let key = config.layout_of(&t.bundle_from).bundle;
                let bundle = observed
                    .get(&t.bundle_from)
                    .present()
                    .and_then(|s| s.data.get(&key));
                TargetState::of_entries(&o.bundles, bundle.map(Vec::as_slice))
            }
        };
        let kind = describe(t.kind, &t.name);
        let kind = kind.split_once(' ').map_or(kind.as_str(), |(k, _)| k);
        out.push(CaBundleTarget {
            kind: kind.to_string(),
            name: t.name.clone(),
            secret: t.bundle_from.clone(),
            state,
        });
    }
    Ok(out)
}

/// The metrics of a finished run: the state it left (observed again, as `check` would) and
/// its `outcome`. When the state cannot be read any more, the outcome alone, with a warning.
pub async fn after_run(
    config: &Config,
    local: &Option<PathBuf>,
    target: &TargetArgs,
    outcome: RunOutcome,
) -> String {
    let health = match local {
        Some(dir) => {
            let store = LocalStore::new(dir).with_secret_keys(config.private_data_keys());
            checked(config, &store, None).await
        }
        None => match crate::k8s::client(target.cluster()).await {
            Ok(client) => {
                let store = KubeStore::new(client.clone(), &config.namespace);
                let webhooks = WebhookStore::new(client);
                checked(config, &store, Some(&webhooks)).await
            }
            Err(e) => Err(e),
        },
    };
    let mut families = match health {
        Ok((_, families, _)) => families,
        Err(e) => {
            tracing::warn!(
                "the metrics give the run's outcome only: reading the Secrets after the run failed: {e}"
            );
            vec![]
        }
    };
    families.extend(super::run(config, &outcome));
    super::render(&families)
}
