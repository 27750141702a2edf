//! The exporter's watches: one LIST+WATCH per resource kind (kube's
//! [`watcher()`](kube::runtime::watcher())), never a GET per object.
//!
//! - Secrets: one watch of the namespace's Secrets. RBAC cannot restrict a namespace-wide
//!   `list`/`watch` to names (`resourceNames` only applies to a request that names one object),
//!   so the Role grants them on every Secret of the namespace; only the Secrets the config
//!   manages are kept, converted at once into what `check` reads ([`StoredSecret`]), and the
//!   others are dropped as they arrive.
//! - `caBundle` targets: one watch per kind the config names (cluster-scoped). When the config
//!   names one object of a kind, the watch selects it by `metadata.name`, so a ClusterRole with
//!   `resourceNames` can grant it; with several, every object of the kind is watched and the
//!   named ones kept. Only the decoded `caBundle`s are kept.
//!
//! Each watch restarts itself after a failure with kube's default backoff; a 403 marks the
//! kind refused (targets) and is logged once per change of state (kube-runtime's own log lines
//! are turned off, see `init_logging`: they repeat every retry with a debug dump). This module decides nothing:
//! it hands each [`Change`] to its caller (the exporter's state, which its scrapes read).

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::config::WebhookKind;
use crate::secret::StoredSecret;

/// What a watch learned.
#[derive(Debug, Clone)]
pub enum Change {
    /// A complete LIST of the managed Secrets (the watch started or restarted).
    SecretsListed(Vec<StoredSecret>),
    /// A managed Secret was created or changed.
    SecretApplied(StoredSecret),
    /// A managed Secret was deleted.
    SecretDeleted(String),
    /// The API server refused the Secrets' LIST or WATCH (403); the watch retries.
    SecretsRefused,
    /// A complete LIST of the targets of a kind: each present one's caBundles, by name.
    TargetsListed(WebhookKind, Vec<(String, TargetSeen)>),
    /// A target was created or changed.
    TargetApplied(WebhookKind, String, TargetSeen),
    /// A target was deleted.
    TargetDeleted(WebhookKind, String),
    /// The API server refused the LIST or WATCH of a target kind (403); the watch retries.
    TargetsRefused(WebhookKind),
}

/// A `caBundle` target as the watch saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetSeen {
    /// Each entry's `caBundle`.
    pub bundles: Vec<Vec<u8>>,
    /// cert-manager's CA injector writes them (it carries one of its annotations).
    pub injected: bool,
}

impl From<Vec<Vec<u8>>> for TargetSeen {
    fn from(bundles: Vec<Vec<u8>>) -> Self {
        Self {
            bundles,
            injected: false,
        }
    }
}

/// The watcher's configuration: the first LIST in pages of [`super::secrets::PAGE_SIZE`] (a
/// namespace's other Secrets, of up to 1 MiB each, cost one page of memory at a time, not the
/// namespace: 100 unrelated 1 MB Secrets took the exporter to a 272 MB peak in one LIST), a
/// consistent read like every other read of certgen's. Not `resourceVersion=0` (the API
/// server's watch cache): on the test control plane (v1.36.3) a watch started from that LIST's
/// resourceVersion delivered no later change at all (kube 5.0's watcher, `any_semantic()`),
/// while the default semantic does; the LIST is made once per start or restart.
fn config() -> watcher::Config {
    watcher::Config {
        page_size: Some(super::secrets::PAGE_SIZE),
        ..watcher::Config::default()
    }
}

fn forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// Follows the managed Secrets `names` in `namespace`, handing every change to `on`, until
/// dropped.
pub async fn secrets(
    client: kube::Client,
    namespace: String,
    names: BTreeSet<String>,
    on: impl Fn(Change) + Send + 'static,
) {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let keep = |s: Secret| -> Option<StoredSecret> {
        let managed = s.metadata.name.as_ref().is_some_and(|n| names.contains(n));
        managed.then(|| super::secrets::from_secret(s))
    };
    let mut listing: Vec<StoredSecret> = Vec::new();
    let mut failing = false;
    let mut stream = watcher::watcher(api, config()).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                // `Init` comes before the LIST is even sent: only a complete LIST or a watch
                // event shows that the watch works again.
                if failing && !matches!(event, Event::Init | Event::InitApply(_)) {
                    tracing::info!("the watch of Secrets in namespace {namespace} works again");
                    failing = false;
                }
                match event {
                    Event::Init => listing.clear(),
                    Event::InitApply(s) => listing.extend(keep(s)),
                    Event::InitDone => {
                        let listed = std::mem::take(&mut listing);
                        on(Change::SecretsListed(listed));
                    }
                    Event::Apply(s) => {
                        if let Some(s) = keep(s) {
                            on(Change::SecretApplied(s));
                        }
                    }
                    Event::Delete(s) => {
                        if let Some(s) = keep(s) {
                            on(Change::SecretDeleted(s.name));
                        }
                    }
                }
            }
            Err(e) => {
                if forbidden(&e) {
                    on(Change::SecretsRefused);
                }
                if !failing {
                    let hint = if forbidden(&e) {
                        "; grant list and watch on secrets in this namespace (docs/rbac.md)"
                    } else {
                        ""
                    };
                    tracing::warn!(
                        "watching Secrets in namespace {namespace} failed (retrying): {e}{hint}"
                    );
                    failing = true;
                }
            }
        }
    }
}

/// Follows the `caBundle` targets `names` of `kind`, handing every change to `on`, until
/// dropped.
pub async fn targets(
    client: kube::Client,
    kind: WebhookKind,
    names: BTreeSet<String>,
    on: impl Fn(Change) + Send + 'static,
) {
    let (resource, plural, _) = super::webhooks::resource(kind);
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut config = config();
    if names.len() == 1 {
        let name = names.iter().next().expect("one name");
        config = config.fields(&format!("metadata.name={name}"));
    }
    let keep = |o: DynamicObject| -> Option<(String, TargetSeen)> {
        let name = o.metadata.name.clone().filter(|n| names.contains(n))?;
        let injected = o
            .metadata
            .annotations
            .as_ref()
            .and_then(crate::certmanager::injected)
            .is_some();
        let bundles = match super::webhooks::bundles(kind, &o.data) {
            Ok(b) => b,
            Err(e) => {
                // A bundle that is not base64 holds nothing the Secret's ca.crt could equal.
                tracing::warn!("{}: {e}", super::webhooks::describe(kind, &name));
                vec![e.into_bytes()]
            }
        };
        Some((name, TargetSeen { bundles, injected }))
    };
    let mut listing = Vec::new();
    let mut failing = false;
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                if failing && !matches!(event, Event::Init | Event::InitApply(_)) {
                    tracing::info!("the watch of {plural} works again");
                    failing = false;
                }
                match event {
                    Event::Init => listing.clear(),
                    Event::InitApply(o) => listing.extend(keep(o)),
                    Event::InitDone => {
                        let listed = std::mem::take(&mut listing);
                        on(Change::TargetsListed(kind, listed));
                    }
                    Event::Apply(o) => {
                        if let Some((name, b)) = keep(o) {
                            on(Change::TargetApplied(kind, name, b));
                        }
                    }
                    Event::Delete(o) => {
                        if let Some((name, _)) = keep(o) {
                            on(Change::TargetDeleted(kind, name));
                        }
                    }
                }
            }
            Err(e) => {
                if forbidden(&e) {
                    on(Change::TargetsRefused(kind));
                }
                if !failing {
                    let hint = if forbidden(&e) {
                        format!(
                            "; the targets are reported refused until list and watch on {plural} are granted (a ClusterRole)"
                        )
                    } else {
                        String::new()
                    };
                    tracing::warn!("watching {plural} failed (retrying): {e}{hint}");
                    failing = true;
                }
            }
        }
    }
}
