//! The Secret calls of `certgen create` and `certgen patch` ([`crate::kwc`]): read and create
//! one Secret. It decides nothing: the plan says what to write. Their webhook configurations
//! and APIServices are read and written through the `caBundle` seam, as the engine's are
//! ([`super::WebhookStore`]).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

use crate::config::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::kwc::plan::{NewSecret, ObservedSecret};
use crate::store::{ApiFailure, StoreError};

const FIELD_MANAGER: &str = "certgen";

/// Reads the Secret; `Absent` only on 404.
pub async fn get_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<ObservedSecret, StoreError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(None) => Ok(ObservedSecret::Absent),
        Ok(Some(s)) => Ok(ObservedSecret::Present {
            written_at: super::written_at(&s.metadata),
            type_: s.type_.unwrap_or_else(|| "Opaque".into()),
            data: s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        }),
        Err(e) => Err(ApiFailure::from_kube(
            "get", "secrets", "", namespace, name, e,
        )),
    }
}

/// Creates the Secret; one that appeared since it was read is a conflict (exit 4).
pub async fn create_secret(client: &kube::Client, s: &NewSecret) -> Result<(), StoreError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let data = BTreeMap::from([
        (s.ca.0.clone(), ByteString(s.ca.1.clone())),
        (s.cert.0.clone(), ByteString(s.cert.1.clone())),
        (
            s.key.0.clone(),
            ByteString(s.key.1.expose().as_bytes().to_vec()),
        ),
    ]);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(s.name.clone()),
            namespace: Some(s.namespace.clone()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_string(),
                MANAGED_BY.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some(s.type_.clone()),
        data: Some(data),
        ..Default::default()
    };
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&pp, &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(StoreError::Conflict {
            what: format!("Secret {}/{}", s.namespace, s.name),
            detail: "another writer created it after certgen read it; re-run".into(),
        }),
        Err(e) => Err(ApiFailure::from_kube(
            "create",
            "secrets",
            "",
            &s.namespace,
            &s.name,
            e,
        )),
    }
}
