//! The API calls of `certgen create` and `certgen patch` ([`crate::kwc`]): read and create
//! one Secret; read and write the `caBundle` (and `failurePolicy`) of webhook configurations
//! and an APIService. It decides nothing: the plan says what to write.
//!
//! Webhook configurations and APIServices are handled as [`DynamicObject`]s so an update sends
//! back every field as read (unknown ones included), changing only what the plan names, fenced
//! by the resourceVersion read (a 409 is a [`StoreError::Conflict`]: exit 4, re-run).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::webhooks::{api, resource};
use crate::config::{MANAGED_BY, MANAGED_BY_LABEL, WebhookKind};
use crate::kwc::plan::{NewSecret, ObservedEntry, ObservedSecret, ObservedTarget, TargetWrite};
use crate::kwc::request::{FailurePolicy, Target};
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

fn failure(verb: &'static str, t: &Target, e: kube::Error) -> StoreError {
    super::webhooks::failure(verb, t.kind, &t.name, e)
}

fn decode(v: Option<&Value>) -> Vec<u8> {
    v.and_then(|v| serde_json::from_value::<ByteString>(v.clone()).ok())
        .map(|b| b.0)
        .unwrap_or_default()
}

/// Reads a target; `Absent` only on 404. The object is kept for an update.
pub async fn get_target(
    client: &kube::Client,
    t: &Target,
) -> Result<(ObservedTarget, Option<DynamicObject>), StoreError> {
    let object = match api(client, t.kind).get_opt(&t.name).await {
        Ok(Some(o)) => o,
        Ok(None) => return Ok((ObservedTarget::Absent, None)),
        Err(e) => return Err(failure("get", t, e)),
    };
    let injected = object
        .metadata
        .annotations
        .as_ref()
        .and_then(crate::certmanager::injected);
    let observed = match t.kind {
        WebhookKind::ApiService => ObservedTarget::Present {
            entries: vec![ObservedEntry {
                name: String::new(),
                ca_bundle: decode(object.data.pointer("/spec/caBundle")),
                failure_policy: None,
            }],
            insecure_skip_tls_verify: object
                .data
                .pointer("/spec/insecureSkipTLSVerify")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            injected,
        },
        WebhookKind::MutatingWebhookConfiguration | WebhookKind::ValidatingWebhookConfiguration => {
            ObservedTarget::Present {
                entries: object
                    .data
                    .get("webhooks")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|w| ObservedEntry {
                        name: w
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        ca_bundle: decode(w.pointer("/clientConfig/caBundle")),
                        failure_policy: w
                            .get("failurePolicy")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    })
                    .collect(),
                insecure_skip_tls_verify: false,
                injected,
            }
        }
    };
    Ok((observed, Some(object)))
}

/// Writes one target with an update of the object as read (fenced by its resourceVersion and
/// uid), changing only the `caBundle`, `failurePolicy` and `insecureSkipTLSVerify` fields.
pub async fn update_target(
    client: &kube::Client,
    mut object: DynamicObject,
    w: &TargetWrite,
    bundle: &[u8],
    policy: Option<FailurePolicy>,
) -> Result<(), StoreError> {
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).expect("bytes serialize");
    match w.target.kind {
        WebhookKind::ApiService => {
            if let Some(spec) = object.data.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("caBundle".into(), encoded);
                spec.insert("insecureSkipTLSVerify".into(), Value::Bool(false));
            }
        }
        WebhookKind::MutatingWebhookConfiguration | WebhookKind::ValidatingWebhookConfiguration => {
            for hook in object
                .data
                .get_mut("webhooks")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
            {
                if let Some(p) = policy {
                    hook.insert("failurePolicy".into(), Value::String(p.as_str().into()));
                }
                let cc = hook
                    .entry("clientConfig")
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Some(cc) = cc.as_object_mut() {
                    cc.insert("caBundle".into(), encoded.clone());
                }
            }
        }
    }
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let name = w.target.name.clone();
    match api(client, w.target.kind)
        .replace(&name, &pp, &object)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Err(StoreError::Conflict {
            what: w.target.describe(),
            detail: "it changed after certgen read it; re-run".into(),
        }),
        Err(e) => Err(failure("update", &w.target, e)),
    }
}

/// Writes one webhook configuration's entries with a server-side apply (`--patch-mode patch`):
/// only `clientConfig.caBundle` and `failurePolicy` of each entry, by name.
pub async fn apply_target(
    client: &kube::Client,
    w: &TargetWrite,
    bundle: &[u8],
    policy: Option<FailurePolicy>,
) -> Result<(), StoreError> {
    let (resource, _, _) = resource(w.target.kind);
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).expect("bytes serialize");
    let spec = match w.target.kind {
        WebhookKind::ApiService => {
            json!({"spec": {"caBundle": encoded, "insecureSkipTLSVerify": false}})
        }
        WebhookKind::MutatingWebhookConfiguration | WebhookKind::ValidatingWebhookConfiguration => {
            let hooks: Vec<Value> = w
                .entries
                .iter()
                .map(|name| {
                    let mut hook = json!({"name": name, "clientConfig": {"caBundle": encoded}});
                    if let Some(p) = policy {
                        hook["failurePolicy"] = Value::String(p.as_str().into());
                    }
                    hook
                })
                .collect();
            json!({"webhooks": hooks})
        }
    };
    let mut body = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": w.target.name},
    });
    if let (Some(body), Some(spec)) = (body.as_object_mut(), spec.as_object()) {
        body.extend(spec.clone());
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    match api(client, w.target.kind)
        .patch(&w.target.name, &pp, &Patch::Apply(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => Err(failure("patch", &w.target, e)),
    }
}

/// Whether this identity may `verb` the target `t`, by a SelfSubjectAccessReview naming it
/// (exact, including `resourceNames` rules). `Ok(None)` when the review itself failed: the
/// write then finds out.
pub async fn may(
    client: &kube::Client,
    verb: &'static str,
    t: &Target,
) -> Result<Option<bool>, StoreError> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let (_, plural, group) = resource(t.kind);
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_string()),
                resource: Some(plural.to_string()),
                verb: Some(verb.to_string()),
                name: Some(t.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(r) => Ok(r.status.map(|s| s.allowed)),
        Err(e) => {
            tracing::debug!(
                "the access review of {verb} {plural} {} failed: {e}",
                t.name
            );
            Ok(None)
        }
    }
}

/// The refusal of `verb` on `t` that an access review found before any write.
pub fn refused_before_writing(verb: &'static str, t: &Target) -> StoreError {
    let (_, plural, group) = resource(t.kind);
    StoreError::Api(Box::new(ApiFailure {
        verb,
        resource: plural,
        namespace: String::new(),
        name: t.name.clone(),
        status: Some(403),
        message: "this identity may not (an access review, made before the first write); nothing was written".into(),
        hint: format!(
            "; grant the {verb} verb on {plural} (group {group}) cluster-wide (a ClusterRole) to this identity, as kube-webhook-certgen's patch Job needs"
        ),
    }))
}
