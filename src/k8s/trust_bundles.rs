//! ClusterTrustBundles (`certificates.k8s.io/v1`, GA and always on since Kubernetes 1.37):
//! list, create, update and delete, each fenced, and the pods anywhere in the cluster that
//! project them. Spoken as dynamic objects: the pinned `k8s-openapi` (Kubernetes 1.33's API)
//! has the `v1beta1` type only, which a 1.37 API server does not serve by default. Nothing is
//! decided here (`crate::rotation::trust_bundles` plans every write).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
    Preconditions,
};
use serde_json::json;

use crate::outside::{BundleRead, Created, Projector};
use crate::store::{ApiFailure, StoreError};
use crate::trust_bundles::{Projection, Requirement, Selector};

const FIELD_MANAGER: &str = "certgen";
const GROUP: &str = "certificates.k8s.io";
const PLURAL: &str = "clustertrustbundles";

/// The ClusterTrustBundles of the cluster one client reaches.
#[derive(Clone)]
pub struct TrustBundleStore {
    client: kube::Client,
    api: Api<DynamicObject>,
}

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, "v1", "ClusterTrustBundle"),
        PLURAL,
    )
}

fn failure(verb: &'static str, name: &str, e: kube::Error) -> StoreError {
    let mut failure = ApiFailure::from_kube(verb, PLURAL, GROUP, "", name, e);
    if let StoreError::Api(f) = &mut failure {
        if f.status == Some(404) && verb == "list" {
            f.hint = "; ClusterTrustBundles need Kubernetes 1.37 or later (certificates.k8s.io/v1); remove clusterTrustBundles: and --cluster-trust-bundle on older clusters".into();
        }
        if f.status == Some(403) && matches!(verb, "create" | "update") {
            f.hint.push_str(
                "; a signer-linked bundle also needs the attest verb on signers (certificates.k8s.io) for that signer name (docs/rbac.md)",
            );
        }
    }
    failure
}

fn conflict(name: &str, detail: impl Into<String>) -> StoreError {
    StoreError::Conflict {
        what: format!("ClusterTrustBundle {name}"),
        detail: detail.into(),
    }
}

/// The ClusterTrustBundles of the cluster `client` reaches, as dynamic objects.
pub(super) fn api(client: kube::Client) -> Api<DynamicObject> {
    Api::all_with(client, &resource())
}

/// The plain view of one bundle.
pub(super) fn read_of(o: &DynamicObject) -> BundleRead {
    BundleRead {
        name: o.metadata.name.clone().unwrap_or_default(),
        uid: o.metadata.uid.clone().unwrap_or_default(),
        version: o.metadata.resource_version.clone().unwrap_or_default(),
        labels: o.metadata.labels.clone().unwrap_or_default(),
        pem: o.data["spec"]["trustBundle"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        written_at: super::written_at(&o.metadata),
        writes: super::field_writes(o.metadata.managed_fields.as_deref()),
    }
}

impl TrustBundleStore {
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all_with(client.clone(), &resource()),
            client,
        }
    }

    /// Before the run's first write: the API server serves ClusterTrustBundles (a list; 404 on
    /// a cluster before 1.37), and an access review says this identity may create, update and
    /// delete them and attest for `signer` (every authenticated user may list them, so the list
    /// alone proves nothing). A refusal names the verb and the fix; nothing was written.
    pub async fn preflight(&self, signer: &str) -> Result<(), StoreError> {
        self.list(signer).await?;
        let checks: [(&'static str, &'static str, Option<&str>); 4] = [
            ("create", PLURAL, None),
            ("update", PLURAL, None),
            ("delete", PLURAL, None),
            ("attest", "signers", Some(signer)),
        ];
        for (verb, plural, name) in checks {
            if super::access::may_on(&self.client, verb, (GROUP, plural), name).await == Some(false)
            {
                let on = name.map(|n| format!(" {n:?}")).unwrap_or_default();
                return Err(StoreError::Api(Box::new(ApiFailure {
                    verb,
                    resource: if plural == PLURAL { PLURAL } else { "signers" },
                    namespace: String::new(),
                    name: name.unwrap_or_default().to_string(),
                    status: Some(403),
                    message: "this identity may not (an access review, made before the first write); nothing was written".into(),
                    hint: format!(
                        "; grant the {verb} verb on {plural}{on} (group {GROUP}) cluster-wide (a ClusterRole) to this identity: the chart does when clusterTrustBundles is set (docs/rbac.md)"
                    ),
                })));
            }
        }
        Ok(())
    }

    /// Every bundle linked to `signer` (the API server's field selector `spec.signerName`).
    pub async fn list(&self, signer: &str) -> Result<Vec<BundleRead>, StoreError> {
        let lp = ListParams::default().fields(&format!("spec.signerName={signer}"));
        let list = self
            .api
            .list(&lp)
            .await
            .map_err(|e| failure("list", "", e))?;
        Ok(list.items.iter().map(read_of).collect())
    }

    pub async fn create(
        &self,
        name: &str,
        signer: &str,
        labels: &BTreeMap<String, String>,
        pem: &str,
    ) -> Result<Created, StoreError> {
        let mut object = DynamicObject::new(name, &resource()).data(json!({
            "spec": {"signerName": signer, "trustBundle": pem}
        }));
        object.metadata.labels = Some(labels.clone());
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        match self.api.create(&pp, &object).await {
            Ok(made) => Ok(Created::Made(
                made.metadata.resource_version.unwrap_or_default(),
            )),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::Exists),
            Err(e) => Err(failure("create", name, e)),
        }
    }

    pub async fn update(
        &self,
        read: &BundleRead,
        labels: &BTreeMap<String, String>,
        pem: &str,
    ) -> Result<String, StoreError> {
        let current = match self.api.get_opt(&read.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Err(conflict(&read.name, "it was deleted after certgen read it")),
            Err(e) => return Err(failure("get", &read.name, e)),
        };
        let mut object = current;
        object.data["spec"]["trustBundle"] = json!(pem);
        object.metadata.labels = Some(labels.clone());
        // Preconditions of an update: a change or a recreation since the read is a 409.
        object.metadata.resource_version = Some(read.version.clone());
        object.metadata.uid = Some(read.uid.clone());
        object.metadata.managed_fields = None;
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        match self.api.replace(&read.name, &pp, &object).await {
            Ok(w) => Ok(w.metadata.resource_version.unwrap_or_default()),
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => Err(conflict(
                &read.name,
                format!(
                    "resourceVersion is no longer {} or uid is no longer {}",
                    read.version, read.uid
                ),
            )),
            Err(e) => Err(failure("update", &read.name, e)),
        }
    }

    pub async fn delete(&self, read: &BundleRead) -> Result<bool, StoreError> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(read.uid.clone()),
                resource_version: Some(read.version.clone()),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&read.name, &dp).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(conflict(
                &read.name,
                format!(
                    "resourceVersion is no longer {} or uid is no longer {}",
                    read.version, read.uid
                ),
            )),
            Err(e) => Err(failure("delete", &read.name, e)),
        }
    }

    /// Every pod in the cluster whose projected volumes have `clusterTrustBundle` sources
    /// (a cluster-wide read of pods, in pages).
    pub async fn projectors(&self) -> Result<Vec<Projector>, StoreError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let mut out = Vec::new();
        let mut lp = ListParams::default().limit(super::POD_PAGE);
        loop {
            let page = api
                .list(&lp)
                .await
                .map_err(|e| ApiFailure::from_kube("list", "pods", "", "", "", e))?;
            for p in &page.items {
                let projections = projections(p);
                if projections.is_empty() {
                    continue;
                }
                out.push(Projector {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    pod: p.metadata.name.clone().unwrap_or_default(),
                    projections,
                });
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => return Ok(out),
            }
        }
    }
}

/// The `clusterTrustBundle` sources of a pod's projected volumes, as plain data.
pub(super) fn projections(p: &Pod) -> Vec<Projection> {
    p.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .filter_map(|source| source.cluster_trust_bundle.as_ref())
        .map(|c| Projection {
            name: c.name.clone(),
            signer: c.signer_name.clone(),
            selector: c.label_selector.as_ref().map(|s| Selector {
                match_labels: s.match_labels.clone().unwrap_or_default(),
                match_expressions: s
                    .match_expressions
                    .iter()
                    .flatten()
                    .map(|e| Requirement {
                        key: e.key.clone(),
                        operator: e.operator.clone(),
                        values: e.values.clone().unwrap_or_default(),
                    })
                    .collect(),
            }),
        })
        .collect()
}
