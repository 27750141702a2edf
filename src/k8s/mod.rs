//! The Kubernetes adapter: every call certgen makes to the Kubernetes API, and the conversion
//! of its objects and errors into certgen's own types.
//!
//! The client and its layers, Secrets (the [`KubeStore`]), the run's Lease, the access review,
//! workloads of every kind (restarts and rollout watches), pods (listed and poked), a Service's endpoints (for probes), the
//! `caBundle` of webhook configurations and ClusterTrustBundles live here. The core (observe, plan, apply, report,
//! check, pki, config) never imports this module: it sees Kubernetes only through the store
//! trait ([`crate::store::SecretStore`]) and plain errors ([`crate::store::ApiFailure`]). This
//! module must not decide anything: what to write, restart or wait for is decided elsewhere.

mod access;
pub mod certificates;
mod client;
mod endpoints;
pub mod events;
pub mod kwc;
pub mod lease;
mod pods;
mod seams;
mod secrets;
pub mod servertime;
mod trust_bundles;
pub mod watch;
pub mod webhooks;
mod workloads;

pub use self::access::{may, refused_before_writing, review};
pub use self::client::{client, client_for, clients_built, layered};
pub use self::endpoints::{EndpointsError, ServiceEndpoints, service_endpoints};
#[cfg(feature = "test-hooks")]
pub use self::pods::{LOSE_POKE_ENV, POD_PAGE_ENV};
pub use self::pods::{POD_PAGE, POKE_FINGERPRINT, POKED_AT, PodView, Pods, PokeAnswer};
pub use self::secrets::KubeStore;
pub use self::trust_bundles::TrustBundleStore;
pub use self::webhooks::{ObservedWebhook, WebhookObserved, WebhookStore};
pub use self::workloads::Workloads;

use kube::api::ObjectMeta;

use crate::store::{ApiFailure, StoreError};

/// When an object was last changed, by the API server's clock: the newest managedFields time
/// (or the creation time), rounded up to the next second because the server truncates them.
/// A Secret's tells the gates when its bundle was written; a `caBundle` target's, when the API
/// server was given its bundle.
fn written_at(meta: &ObjectMeta) -> Option<time::OffsetDateTime> {
    let managed = meta
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.time.as_ref())
        .map(|t| t.0.as_second())
        .max();
    let seconds = managed.or(meta.creation_timestamp.as_ref().map(|t| t.0.as_second()))?;
    time::OffsetDateTime::from_unix_timestamp(seconds.checked_add(1)?).ok()
}

/// An object's `managedFields`, parsed by the one parser ([`crate::observe::writers`]).
fn field_writes(
    managed: Option<&[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry]>,
) -> Vec<crate::observe::writers::FieldWrite> {
    managed
        .unwrap_or_default()
        .iter()
        .map(|m| {
            crate::observe::writers::FieldWrite::parse(
                m.manager.as_deref().unwrap_or_default(),
                m.operation.as_deref().unwrap_or_default(),
                m.time
                    .as_ref()
                    .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok()),
                m.fields_v1.as_ref().map(|f| &f.0),
            )
        })
        .collect()
}

impl ApiFailure {
    /// A failed call to the Kubernetes API, with a hint people can act on. `group` is the
    /// resource's API group ("" for the core group), named in the RBAC hint.
    pub fn from_kube(
        verb: &'static str,
        resource: &'static str,
        group: &str,
        namespace: &str,
        name: &str,
        err: ::kube::Error,
    ) -> StoreError {
        let (status, message, hint) = match &err {
            ::kube::Error::Api(s) => {
                let group = if group.is_empty() {
                    String::new()
                } else {
                    format!(" (group {group})")
                };
                let scope = if namespace.is_empty() {
                    "cluster-wide (a ClusterRole)".to_string()
                } else {
                    format!("in namespace {namespace}")
                };
                let hint = match s.code {
                    403 if s.message.contains("exceeded quota") => {
                        ApiFailure::quota_hint(namespace)
                    }
                    403 => format!(
                        "; grant the {verb} verb on {resource}{group} {scope} to this identity (docs/rbac.md)"
                    ),
                    401 => {
                        "; the credentials were rejected: check --kubeconfig/--context".to_string()
                    }
                    404 if verb == "create" => format!("; does namespace {namespace} exist?"),
                    _ => String::new(),
                };
                (Some(s.code), format!("{} ({})", s.message, s.code), hint)
            }
            other => (None, other.to_string(), String::new()),
        };
        StoreError::Api(Box::new(Self {
            verb,
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
            status,
            message,
            hint,
        }))
    }
}
