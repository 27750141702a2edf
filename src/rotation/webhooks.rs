//! The `caBundle` targets (webhook configurations, APIServices) that follow a TLS Secret's
//! bundle: written right after the Secret, so the API server trusts what the webhook serves.

use std::collections::BTreeMap;

use super::Invocation;
use super::step::{MAX_ATTEMPTS, Outcome};
use crate::error::Error;
use crate::observe::Snapshot;
use crate::outside::{
    TargetObserved as WebhookObserved, TargetRead as ObservedWebhook, describe_target as describe,
};
use crate::plan::Action;
use crate::report::Entry;
use crate::store::StoreError;

/// Whether a `caBundle` target differs from the bundle of the Secret it follows (so a run with
/// nothing else to do still has this to write).
pub(super) async fn behind(
    inv: &Invocation<'_>,
    bundles: &BTreeMap<String, Vec<u8>>,
) -> Result<bool, Error> {
    let targets = Targets::read(inv).await?;
    Ok(targets.is_some_and(|t| t.behind(inv, |secret| bundles.get(secret).map(Vec::as_slice))))
}

/// Every `caBundle` target as read before a run's first step, in the config's order (`None`:
/// refused, 403). The first step's gate counts from the newest of their writes as from a
/// Secret's: the API server must have loaded a bundle written there, perhaps by an earlier run
/// that repaired drift long after the Secret's own write, before the leaves that only it
/// trusts are served. The first step's [`sync`] writes from this read rather than reading
/// again (each write is fenced by the resourceVersion read, so nothing is lost if the object
/// changed in between).
pub(super) struct Targets(Vec<Option<WebhookObserved>>);

impl Targets {
    /// Reads every target once (nothing when the run has no `caBundle` store).
    pub(super) async fn read(inv: &Invocation<'_>) -> Result<Option<Self>, Error> {
        let Some(api) = inv.webhooks else {
            return Ok(None);
        };
        let mut read = Vec::with_capacity(inv.config.webhooks.len());
        for target in &inv.config.webhooks {
            read.push(api.read(target.kind, &target.name).await?);
        }
        Ok(Some(Self(read)))
    }

    /// The targets that exist, each with the Secret whose bundle it follows (absent and
    /// refused targets are left out).
    fn present<'a>(
        &'a self,
        inv: &'a Invocation<'_>,
    ) -> impl Iterator<Item = (&'a str, &'a ObservedWebhook)> {
        inv.config
            .webhooks
            .iter()
            .zip(&self.0)
            .filter_map(|(target, read)| match read {
                Some(WebhookObserved::Present(o)) => Some((target.bundle_from.as_str(), &**o)),
                _ => None,
            })
    }

    /// Whether a target does not hold the bundle `bundle_of` gives for the Secret it follows
    /// (a sync would write it). Absent and refused targets are never behind.
    pub(super) fn behind<'b>(
        &self,
        inv: &Invocation<'_>,
        bundle_of: impl Fn(&str) -> Option<&'b [u8]>,
    ) -> bool {
        self.present(inv)
            .any(|(secret, o)| bundle_of(secret).is_some_and(|bundle| !o.holds(bundle)))
    }

    /// Whether a target does not hold the `ca.crt` its Secret had in `observed`: the first
    /// step's sync will write it (drift), after that step's own writes.
    pub(super) fn behind_stored(&self, inv: &Invocation<'_>, observed: &Snapshot) -> bool {
        let layouts: BTreeMap<&str, String> = inv
            .config
            .tls
            .iter()
            .map(|t| (t.name.as_str(), t.layout.bundle.clone()))
            .collect();
        self.behind(inv, |secret| {
            let key = layouts.get(secret)?;
            observed
                .get(secret)
                .present()
                .and_then(|s| s.data.get(key))
                .map(Vec::as_slice)
        })
    }

    /// The newest write to any target, by the API server's clock.
    pub(super) fn written_at(&self, inv: &Invocation<'_>) -> Option<time::OffsetDateTime> {
        self.present(inv).filter_map(|(_, o)| o.written_at).max()
    }
}

/// Writes each `caBundle` target that differs from its Secret's bundle, fenced by the
/// resourceVersion and uid read (re-read and retried on a conflict). A target that does not
/// exist is reported and left alone: certgen does not create webhook configurations. Only the
/// first step reads every target (drift since the last run), from `read` when the targets were
/// read before it; later steps read a target only when they wrote the Secret it follows.
pub(super) async fn sync(
    inv: &Invocation<'_>,
    outcome: &Outcome,
    first: bool,
    read: Option<Targets>,
) -> Result<Vec<Entry>, Error> {
    let Some(api) = inv.webhooks else {
        return Ok(vec![]);
    };
    let mut read = read.map(|t| t.0.into_iter());
    let mut entries = Vec::new();
    for target in &inv.config.webhooks {
        let mut seen = read.as_mut().and_then(Iterator::next);
        let what = describe(target.kind, &target.name);
        let entry = |action, reason| Entry::webhook(&what, action, reason);
        let Some(bundle) = outcome.bundles.get(&target.bundle_from) else {
            continue;
        };
        if !first && !outcome.written.contains(&target.bundle_from) {
            continue;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Refused (403), now or earlier in the run: left alone, as a rules review would have
            // decided.
            let observed = match seen.take() {
                Some(observed) => observed,
                None => api.read(target.kind, &target.name).await?,
            };
            let Some(observed) = observed else {
                break;
            };
            let observed = match observed {
                WebhookObserved::Absent => {
                    entries.push(entry(
                        Action::Keep,
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
                    Action::Keep,
                    format!("caBundle is Secret {}'s ca.crt", target.bundle_from),
                ));
                break;
            }
            match api.put(&observed, bundle).await {
                Ok(()) => {
                    let reason = format!("caBundle follows Secret {}'s ca.crt", target.bundle_from);
                    tracing::info!(webhook = %what, action = "update-bundle", "update-bundle {what}: {reason}");
                    entries.push(entry(Action::UpdateBundle, reason));
                    break;
                }
                Err(StoreError::Conflict { what, detail }) if attempt < MAX_ATTEMPTS => {
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
