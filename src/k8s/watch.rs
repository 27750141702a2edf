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
//!   named ones kept. Only the decoded `caBundle`s are kept. Where the config names Envoy
//!   Gateway's topology injector by its chart's name, the objects labelled as that injector are
//!   watched too (by label), so that a Kustomize-renamed one is found as a run finds it.
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
    /// A complete LIST of the objects labelled as Envoy Gateway's topology injector, by name.
    InjectorsListed(Vec<(String, Labelled)>),
    /// An object labelled as the topology injector was created or changed.
    InjectorApplied(String, Labelled),
    /// An object labelled as the topology injector was deleted (or lost the label).
    InjectorDeleted(String),
    /// The API server refused to list or watch them (403): none is found by label.
    InjectorsRefused,
    /// A complete LIST of the ClusterTrustBundles of a signer.
    BundlesListed(String, Vec<crate::trust_bundles::BundleRead>),
    /// A bundle of the signer was created or changed.
    BundleApplied(String, crate::trust_bundles::BundleRead),
    /// A bundle of the signer was deleted.
    BundleDeleted(String, String),
    /// The API server refused to list or watch the signer's bundles (403).
    BundlesRefused(String),
}

/// An object labelled as Envoy Gateway's topology injector: a stand-in for the injector the
/// config names by its chart's name, when no object has that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// The namespaces of the Services its webhooks call: it stands in for the injector of
    /// these namespaces.
    pub namespaces: BTreeSet<String>,
    pub seen: TargetSeen,
}

/// A `caBundle` target as the watch saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetSeen {
    /// Each entry's `caBundle`.
    pub bundles: Vec<Vec<u8>>,
    /// cert-manager's CA injector writes them (it carries one of its annotations).
    pub injected: bool,
    /// Who wrote which fields (`managedFields`, parsed by [`crate::observe::writers`]).
    pub writes: Vec<crate::secret::FieldWrite>,
    /// The undos recorded on it (annotation `certgen.dev/undone-by`).
    pub recorded: Vec<crate::observe::writers::Undo>,
}

impl From<Vec<Vec<u8>>> for TargetSeen {
    fn from(bundles: Vec<Vec<u8>>) -> Self {
        Self {
            bundles,
            injected: false,
            writes: Vec::new(),
            recorded: Vec::new(),
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

/// What one watch saw of the objects it keeps, by name.
enum Seen<T> {
    /// A complete LIST (the watch started or restarted).
    Listed(Vec<(String, T)>),
    Applied(String, T),
    Deleted(String),
    /// The API server refused the LIST or WATCH (403); the watch retries.
    Refused,
}

/// Runs one watch of `api` until dropped: `keep` converts each object it keeps (by name) and
/// drops the others; `emit` gets what was seen. `what` names the watched objects in the log;
/// `refused` is the hint a 403 adds to it.
async fn follow<K, T>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    refused: &str,
    keep: impl Fn(K) -> Option<(String, T)>,
    emit: impl Fn(Seen<T>),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut listing = Vec::new();
    let mut failing = false;
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                // `Init` comes before the LIST is even sent: only a complete LIST or a watch
                // event shows that the watch works again.
                if failing && !matches!(event, Event::Init | Event::InitApply(_)) {
                    tracing::info!("the watch of {what} works again");
                    failing = false;
                }
                match event {
                    Event::Init => listing.clear(),
                    Event::InitApply(o) => listing.extend(keep(o)),
                    Event::InitDone => emit(Seen::Listed(std::mem::take(&mut listing))),
                    Event::Apply(o) => {
                        if let Some((name, t)) = keep(o) {
                            emit(Seen::Applied(name, t));
                        }
                    }
                    Event::Delete(o) => {
                        if let Some((name, _)) = keep(o) {
                            emit(Seen::Deleted(name));
                        }
                    }
                }
            }
            Err(e) => {
                if forbidden(&e) {
                    emit(Seen::Refused);
                }
                if !failing {
                    let hint = if forbidden(&e) { refused } else { "" };
                    tracing::warn!("watching {what} failed (retrying): {e}{hint}");
                    failing = true;
                }
            }
        }
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
    let keep = |s: Secret| -> Option<(String, StoredSecret)> {
        let name = s.metadata.name.clone().filter(|n| names.contains(n))?;
        Some((name, super::secrets::from_secret(s)))
    };
    follow(
        api,
        config(),
        &format!("Secrets in namespace {namespace}"),
        "; grant list and watch on secrets in this namespace (docs/rbac.md)",
        keep,
        |seen| {
            on(match seen {
                Seen::Listed(l) => Change::SecretsListed(l.into_iter().map(|(_, s)| s).collect()),
                Seen::Applied(_, s) => Change::SecretApplied(s),
                Seen::Deleted(name) => Change::SecretDeleted(name),
                Seen::Refused => Change::SecretsRefused,
            })
        },
    )
    .await;
}

/// What the exporter keeps of a `caBundle` target: its entries' bundles, and whether
/// cert-manager's CA injector writes them.
fn target_seen(kind: WebhookKind, name: &str, o: &DynamicObject) -> TargetSeen {
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
            tracing::warn!("{}: {e}", super::webhooks::describe(kind, name));
            vec![e.into_bytes()]
        }
    };
    TargetSeen {
        bundles,
        injected,
        writes: super::field_writes(o.metadata.managed_fields.as_deref()),
        recorded: crate::observe::writers::history(
            o.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::observe::writers::HISTORY))
                .map(String::as_str),
        ),
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
        let seen = target_seen(kind, &name, &o);
        Some((name, seen))
    };
    let refused = format!(
        "; the targets are reported refused until list and watch on {plural} are granted (a ClusterRole)"
    );
    follow(api, config, plural, &refused, keep, |seen| {
        on(match seen {
            Seen::Listed(l) => Change::TargetsListed(kind, l),
            Seen::Applied(name, t) => Change::TargetApplied(kind, name, t),
            Seen::Deleted(name) => Change::TargetDeleted(kind, name),
            Seen::Refused => Change::TargetsRefused(kind),
        })
    })
    .await;
}

/// Follows the ClusterTrustBundles linked to `signer` (field selector `spec.signerName`),
/// handing every change to `on`, until dropped.
pub async fn trust_bundles(
    client: kube::Client,
    signer: String,
    on: impl Fn(Change) + Send + 'static,
) {
    let api = super::trust_bundles::api(client);
    let config = config().fields(&format!("spec.signerName={signer}"));
    let keep = |o: DynamicObject| -> Option<(String, crate::trust_bundles::BundleRead)> {
        let read = super::trust_bundles::read_of(&o);
        Some((read.name.clone(), read))
    };
    let refused = "; the bundles are reported refused until list and watch on clustertrustbundles (group certificates.k8s.io) are granted (a ClusterRole)";
    follow(
        api,
        config,
        &format!("clustertrustbundles of signer {signer}"),
        refused,
        keep,
        |seen| {
            let signer = signer.clone();
            on(match seen {
                Seen::Listed(l) => {
                    Change::BundlesListed(signer, l.into_iter().map(|(_, b)| b).collect())
                }
                Seen::Applied(_, b) => Change::BundleApplied(signer, b),
                Seen::Deleted(name) => Change::BundleDeleted(signer, name),
                Seen::Refused => Change::BundlesRefused(signer),
            })
        },
    )
    .await;
}

/// Follows the MutatingWebhookConfigurations labelled as Envoy Gateway's topology injector
/// ([`super::webhooks::TOPOLOGY_INJECTOR_LABEL`]), handing every change to `on`, until dropped:
/// a Kustomize-renamed injector is found as a run finds it. Started only when the config names
/// the injector by its chart's name. A 403 (the chart grants list and watch on the injector by
/// name only) means none is found by label, as for a run: the target is then `absent` unless
/// its own name exists, and the log says to name it with `--topology-injector`.
pub async fn topology_injectors(client: kube::Client, on: impl Fn(Change) + Send + 'static) {
    let kind = WebhookKind::MutatingWebhookConfiguration;
    let (resource, plural, _) = super::webhooks::resource(kind);
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let label = super::webhooks::TOPOLOGY_INJECTOR_LABEL;
    let config = config().labels(label);
    let keep = |o: DynamicObject| -> Option<(String, Labelled)> {
        let name = o.metadata.name.clone()?;
        let labelled = Labelled {
            namespaces: super::webhooks::service_namespaces(&o.data),
            seen: target_seen(kind, &name, &o),
        };
        Some((name, labelled))
    };
    let refused = format!(
        "; a topology injector that was renamed is not found by label without list and watch on all {plural}: name it with --topology-injector"
    );
    follow(
        api,
        config,
        &format!("{plural} labelled {label}"),
        &refused,
        keep,
        |seen| {
            on(match seen {
                Seen::Listed(l) => Change::InjectorsListed(l),
                Seen::Applied(name, l) => Change::InjectorApplied(name, l),
                Seen::Deleted(name) => Change::InjectorDeleted(name),
                Seen::Refused => Change::InjectorsRefused,
            })
        },
    )
    .await;
}
