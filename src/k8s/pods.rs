//! Pods in one namespace: listed with the Secrets they mount, and "poked" (an annotation on the
//! pod's own metadata) so that their kubelet re-projects those Secrets now; and the heartbeat of
//! the kubelets that run them (the node Lease `kube-node-lease/<node>`, read by name). What to
//! poke, and what a poke proves, is [`crate::rotation`]'s (`gate.rs`, `evidence.rs`); this module
//! only converts and calls.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

pub use crate::outside::{KubeletLease, PodView, PokeAnswer};
use crate::store::{ApiFailure, StoreError};
use crate::workload::Kind;

/// The annotation a poke sets: the fingerprint of the managed Secrets the pod mounts (their
/// names and contents' digests), the value the pod is pushed to load.
pub const POKE_FINGERPRINT: &str = "certgen.dev/secrets-fingerprint";
/// The annotation a poke sets beside [`POKE_FINGERPRINT`]: when certgen poked it (RFC 3339, the
/// API server's clock). It changes on every poke, so a poke is always a change the kubelet acts
/// on, even when the fingerprint is the one an earlier poke already set.
pub const POKED_AT: &str = "certgen.dev/poked-at";

/// Test hook: the poke of every pod whose name starts with this variable's value fails with
/// an API error (500) without being sent, as a poke lost to the network or the server would.
#[cfg(feature = "test-hooks")]
pub const LOSE_POKE_ENV: &str = "CERTGEN_TEST_LOSE_POKE";

/// How many pods one LIST request asks for: client-go's pager and `kubectl get` use 500, which
/// keeps each answer small (a pod object is a few kB) while a namespace of 1,000 pods takes
/// two requests.
pub const POD_PAGE: u32 = 500;

/// Test hook: the page size of the pod LIST (instead of [`POD_PAGE`]), so a test sees pages
/// with a few dozen pods.
#[cfg(feature = "test-hooks")]
pub const POD_PAGE_ENV: &str = "CERTGEN_TEST_POD_PAGE";

fn pod_page() -> u32 {
    #[cfg(feature = "test-hooks")]
    if let Some(n) = std::env::var(POD_PAGE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    POD_PAGE
}

/// How long a 429 asks to wait: its Status' `details.retryAfterSeconds` (the API server also
/// sends it as the Retry-After header, which the client's retries already honoured), at
/// least 1 s.
fn retry_after(s: &kube::core::Status) -> std::time::Duration {
    let secs = s.details.as_ref().map_or(0, |d| d.retry_after_seconds);
    std::time::Duration::from_secs(u64::from(secs.max(1)))
}

/// Where kubelets keep their heartbeat Leases, one per node, named after it.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Pods in one namespace, and the node Leases of their kubelets.
pub struct Pods {
    api: Api<Pod>,
    leases: Api<Lease>,
    namespace: String,
    /// The ClusterTrustBundle targets (signer, configured labels): a pod that projects one's
    /// bundles by selector lists its mount name among its Secrets ([`view`]).
    trust: Vec<(String, BTreeMap<String, String>)>,
}

fn api_failure(verb: &'static str, namespace: &str, name: &str, err: kube::Error) -> StoreError {
    ApiFailure::from_kube(verb, "pods", "", namespace, name, err)
}

impl Pods {
    /// Pods in `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            leases: Api::namespaced(client, NODE_LEASE_NAMESPACE),
            namespace: namespace.to_string(),
            trust: Vec::new(),
        }
    }

    /// The ClusterTrustBundle targets of the run (signer, configured labels): a pod that
    /// projects one's bundles by `signerName` and a matching selector counts, for the gates,
    /// as mounting [`crate::trust_bundles::mount_name`] of that signer. A projection by name
    /// does not (the kubelet may keep it cached for 5 minutes: the driver waits its timer).
    pub fn projecting(mut self, trust: Vec<(String, BTreeMap<String, String>)>) -> Self {
        self.trust = trust;
        self
    }

    /// The heartbeat Lease of `node`'s kubelet (`kube-node-lease/<node>`), by name; `None` when
    /// it does not exist.
    pub async fn kubelet(&self, node: &str) -> Result<Option<KubeletLease>, StoreError> {
        let lease = self.leases.get_opt(node).await.map_err(|e| {
            ApiFailure::from_kube(
                "get",
                "leases",
                "coordination.k8s.io",
                NODE_LEASE_NAMESPACE,
                node,
                e,
            )
        })?;
        Ok(lease.map(|l| KubeletLease {
            version: l.metadata.resource_version.clone().unwrap_or_default(),
            renewed_at: super::written_at(&l.metadata),
            duration_seconds: l
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|d| u32::try_from(d).ok()),
        }))
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Every pod of the namespace, read consistently (no resourceVersion: a gate relies on it),
    /// in pages of [`POD_PAGE`].
    pub async fn list(&self) -> Result<Vec<PodView>, StoreError> {
        self.list_in_pages(pod_page()).await
    }

    /// Every pod of the namespace in pages of `limit`, as one consistent snapshot: the first
    /// page is a quorum read (no resourceVersion), and each `continue` token carries that
    /// page's resourceVersion, so the later pages show the namespace as it was then (the API
    /// server's chunked LIST, as `kubectl get` and client-go's pager do). A token that expired
    /// meanwhile (410 Gone: etcd compacted that revision, after about 5 minutes) starts the
    /// list over once, from a new snapshot.
    pub async fn list_in_pages(&self, limit: u32) -> Result<Vec<PodView>, StoreError> {
        let mut pods = Vec::new();
        let mut token: Option<String> = None;
        let mut restarted = false;
        loop {
            let mut lp = ListParams::default().limit(limit.max(1));
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = match self.api.list(&lp).await {
                Ok(page) => page,
                Err(kube::Error::Api(s)) if s.code == 410 && token.is_some() && !restarted => {
                    tracing::debug!("listing pods: continue token expired; listing again");
                    restarted = true;
                    pods.clear();
                    token = None;
                    continue;
                }
                Err(e) => return Err(api_failure("list", &self.namespace, "", e)),
            };
            pods.extend(page.items.iter().map(|p| self.view(p)));
            match page.metadata.continue_ {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => return Ok(pods),
            }
        }
    }

    /// Annotates the pod `name` (only if it still has `uid`) with `fingerprint` and `at`. Only
    /// the pod's own metadata changes: its spec, and so its containers, stay as they are.
    pub async fn poke(
        &self,
        name: &str,
        uid: &str,
        fingerprint: &str,
        at: time::OffsetDateTime,
    ) -> Result<PokeAnswer, StoreError> {
        #[cfg(feature = "test-hooks")]
        if std::env::var(LOSE_POKE_ENV).is_ok_and(|p| !p.is_empty() && name.starts_with(&p)) {
            eprintln!(
                "certgen: test fault injection ({LOSE_POKE_ENV}): the poke of pod {name} fails"
            );
            return Err(StoreError::Api(Box::new(ApiFailure {
                verb: "patch",
                resource: "pods",
                namespace: self.namespace.clone(),
                name: name.to_string(),
                status: Some(500),
                message: "injected fault (500)".into(),
                hint: String::new(),
            })));
        }
        // The UID in a merge patch is a precondition: another pod of the same name is a 409.
        let patch = json!({"metadata": {"uid": uid, "annotations": {
            POKE_FINGERPRINT: fingerprint,
            POKED_AT: crate::timefmt::rfc3339(at),
        }}});
        let pp = PatchParams {
            field_manager: Some("certgen".into()),
            ..PatchParams::default()
        };
        match self.api.patch(name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => Ok(PokeAnswer::Done),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(PokeAnswer::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(PokeAnswer::Recreated),
            // Still throttled after the client's retries (`client::layered`, which honour the
            // Retry-After header): the gate asks again later, no sooner than the Status says.
            Err(kube::Error::Api(s)) if s.code == 429 => Ok(PokeAnswer::Throttled(retry_after(&s))),
            Err(e) => Err(api_failure("patch", &self.namespace, name, e)),
        }
    }
}

impl Pods {
    /// The plain view of a pod, with the ClusterTrustBundles it projects by selector among its
    /// mounts ([`Pods::projecting`]).
    fn view(&self, p: &Pod) -> PodView {
        let mut v = view(p);
        if !self.trust.is_empty() {
            let projections = super::trust_bundles::projections(p);
            for (signer, labels) in &self.trust {
                if projections.iter().any(|pr| {
                    crate::trust_bundles::reads(pr, signer, labels)
                        == Some(crate::trust_bundles::Reads::BySelector)
                }) {
                    v.secrets.insert(crate::trust_bundles::mount_name(signer));
                }
            }
        }
        v
    }
}

/// The plain view of a pod.
fn view(p: &Pod) -> PodView {
    let meta = &p.metadata;
    let labels = meta.labels.clone().unwrap_or_default();
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .and_then(|o| match Kind::parse(&o.kind) {
            _ if o.kind == "ReplicaSet" => {
                deployment_of(&o.name, &labels).map(|d| (Kind::Deployment, d))
            }
            Some(kind) => Some((kind, o.name.clone())),
            None => None,
        });
    let mut secrets = BTreeSet::new();
    for v in p.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.insert(s);
        }
        for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = source.secret.as_ref() {
                secrets.insert(s.name.clone());
            }
        }
    }
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    PodView {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        created: meta
            .creation_timestamp
            .as_ref()
            .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok()),
        terminating: meta.deletion_timestamp.is_some(),
        finished: matches!(phase, Some("Succeeded" | "Failed")),
        owner,
        secrets,
        restart_fingerprint: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::rollout::FINGERPRINT).cloned()),
        node: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
    }
}

/// The Deployment a ReplicaSet named `rs` belongs to: the Deployment controller names its
/// ReplicaSets `<deployment>-<pod-template-hash>` and labels their pods with that hash.
fn deployment_of(rs: &str, labels: &BTreeMap<String, String>) -> Option<String> {
    let hash = labels.get("pod-template-hash")?;
    rs.strip_suffix(hash.as_str())?
        .strip_suffix('-')
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_mounts_the_secrets_of_its_secret_volumes_and_projected_sources() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "proxy-7d9f-abcde", "uid": "u1",
                "creationTimestamp": "2026-11-25T01:02:03Z",
                "labels": {"pod-template-hash": "7d9f"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "envoy-proxy-7d9f", "uid": "rs", "controller": true}],
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "c"}], "volumes": [
                {"name": "a", "secret": {"secretName": "envoy"}},
                {"name": "b", "projected": {"sources": [
                    {"secret": {"name": "envoy-gateway"}},
                    {"configMap": {"name": "not-a-secret"}},
                ]}},
                {"name": "c", "emptyDir": {}},
            ]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let v = view(&pod);
        assert_eq!(
            v.secrets,
            BTreeSet::from(["envoy".to_string(), "envoy-gateway".to_string()])
        );
        assert_eq!(v.owner, Some((Kind::Deployment, "envoy-proxy".to_string())));
        assert!(!v.terminating && !v.finished);
        assert_eq!(v.node.as_deref(), Some("node-1"));
        assert_eq!(
            v.created,
            Some(time::macros::datetime!(2026-11-25 01:02:03 UTC))
        );
    }

    #[test]
    fn a_stateful_or_daemon_set_owns_its_pods_directly() {
        for (kind, name) in [
            ("StatefulSet", "etcd"),
            ("DaemonSet", "agent"),
            ("Job", "once"),
        ] {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-0"), "uid": "u",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind,
                        "name": name, "uid": "o", "controller": true}]},
            }))
            .unwrap();
            let want = Kind::parse(kind).map(|k| (k, name.to_string()));
            assert_eq!(view(&pod).owner, want, "{kind}");
        }
    }

    #[test]
    fn only_a_replica_set_named_after_the_template_hash_names_a_deployment() {
        let labels = BTreeMap::from([("pod-template-hash".to_string(), "abc".to_string())]);
        assert_eq!(deployment_of("web-abc", &labels).as_deref(), Some("web"));
        assert_eq!(deployment_of("web-xyz", &labels), None);
        assert_eq!(deployment_of("web-abc", &BTreeMap::new()), None);
    }
}
