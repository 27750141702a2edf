//! The Kubernetes store: Secrets in one namespace, read consistently and written with
//! resourceVersion preconditions (create, or JSON merge patch carrying the resourceVersion).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{ApiFailure, Expect, Observed, SecretStore, SecretWrite, StoreError, StoredSecret};

mod list;

const FIELD_MANAGER: &str = "certgen";

/// Secrets in one namespace of a cluster.
pub struct KubeStore {
    api: Api<Secret>,
    namespace: String,
}

impl KubeStore {
    /// A store for `namespace` through `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
        }
    }

    fn api_error(&self, verb: &'static str, name: &str, err: kube::Error) -> StoreError {
        ApiFailure::from_kube(verb, "secrets", "", &self.namespace, name, err)
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

impl SecretStore for KubeStore {
    fn describe(&self) -> String {
        format!("namespace {}", self.namespace)
    }

    fn namespace(&self) -> Option<&str> {
        Some(&self.namespace)
    }

    fn object(&self, name: &str) -> String {
        format!("Secret {}/{name}", self.namespace)
    }

    async fn get(&self, name: &str) -> Result<Observed, StoreError> {
        // No resourceVersion: a consistent (quorum) read, as a read that gates writes must be.
        match self.api.get_opt(name).await {
            Ok(None) => Ok(Observed::Absent),
            Ok(Some(secret)) => Ok(Observed::Present(from_secret(secret))),
            Err(e) => Err(self.api_error("get", name, e)),
        }
    }

    async fn get_many(&self, names: &[&str]) -> Result<Vec<Observed>, StoreError> {
        list::get_many(self, names).await
    }

    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError> {
        match &write.expect {
            Expect::Absent => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(write.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        labels: Some(write.labels.clone()),
                        annotations: Some(write.annotations.clone()).filter(|a| !a.is_empty()),
                        ..ObjectMeta::default()
                    },
                    type_: Some(write.type_.to_string()),
                    data: Some(
                        write
                            .data
                            .iter()
                            .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                            .collect(),
                    ),
                    ..Secret::default()
                };
                let pp = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                match self.api.create(&pp, &secret).await {
                    Ok(_) => Ok(()),
                    Err(e) if is_status(&e, 409) => Err(StoreError::Conflict {
                        what: self.object(&write.name),
                        detail: "it was created by someone else after certgen found it missing"
                            .into(),
                    }),
                    Err(e) => Err(self.api_error("create", &write.name, e)),
                }
            }
            Expect::Version(rv) => {
                let mut data: BTreeMap<&String, Option<ByteString>> = write
                    .data
                    .iter()
                    .map(|(k, v)| (k, Some(ByteString(v.clone()))))
                    .collect();
                // null deletes a key in a JSON merge patch.
                data.extend(write.remove.iter().map(|k| (k, None)));
                let patch = json!({
                    "metadata": {
                        "resourceVersion": rv,
                        "labels": write.labels,
                        "annotations": write.annotations,
                    },
                    "data": data,
                });
                let pp = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                };
                match self
                    .api
                    .patch(&write.name, &pp, &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) if is_status(&e, 409) => Err(StoreError::Conflict {
                        what: self.object(&write.name),
                        detail: format!("resourceVersion is no longer {rv}"),
                    }),
                    Err(e) if is_status(&e, 404) => Err(StoreError::Conflict {
                        what: self.object(&write.name),
                        detail: "it was deleted after certgen read it".into(),
                    }),
                    Err(e) => Err(self.api_error("patch", &write.name, e)),
                }
            }
        }
    }
}

fn from_secret(secret: Secret) -> StoredSecret {
    let meta = secret.metadata;
    StoredSecret {
        name: meta.name.unwrap_or_default(),
        type_: secret
            .type_
            .unwrap_or_else(|| super::TYPE_OPAQUE.to_string()),
        data: secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
        labels: meta.labels.unwrap_or_default(),
        annotations: meta.annotations.unwrap_or_default(),
        owners: meta
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .map(|o| format!("{}/{}", o.kind, o.name))
            .collect(),
        version: meta.resource_version.unwrap_or_default(),
        divergent: Vec::new(),
    }
}
