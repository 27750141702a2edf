//! cert-manager's objects, as certgen reads and writes them: the `Certificate` a Secret's
//! annotation names (read for every Secret cert-manager issued into, so certgen knows whether
//! cert-manager still does), and the `Issuer`s and `Certificate`s `certgen handover
//! cert-manager --apply` creates. Decides nothing: [`crate::certmanager`] and
//! [`crate::handover`] do.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::Value;

use crate::certmanager::HANDED_OVER;
use crate::secret::CertificateSeen;
use crate::store::{ApiFailure, StoreError};

const FIELD_MANAGER: &str = "certgen";
const GROUP: &str = "cert-manager.io";

/// `cert-manager.io/v1` `kind`, whose plural is `plural`.
fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", kind), plural)
}

fn certificates(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("Certificate", "certificates"),
    )
}

/// Reads Certificate `namespace/name`: gone on a 404 (also when cert-manager's CRDs are not
/// installed), unreadable on a 403, an error otherwise.
pub async fn certificate(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<CertificateSeen, StoreError> {
    match certificates(client, namespace).get_opt(name).await {
        Ok(None) => Ok(CertificateSeen::Gone { name: name.into() }),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            Ok(CertificateSeen::Gone { name: name.into() })
        }
        Ok(Some(o)) => Ok(CertificateSeen::Present {
            name: name.into(),
            handed_over: o
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(HANDED_OVER))
                .cloned(),
        }),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(CertificateSeen::Unreadable {
            name: name.into(),
            why: format!(
                "this identity may not get certificates.cert-manager.io in namespace {namespace} (403)"
            ),
        }),
        Err(e) => Err(ApiFailure::from_kube(
            "get",
            "certificates",
            GROUP,
            namespace,
            name,
            e,
        )),
    }
}

/// What `apply` did with one object.
#[derive(Debug)]
pub struct Applied {
    /// `Issuer ns/name`.
    pub what: String,
    /// Its `Ready` condition after the wait, or why not.
    pub ready: Result<(), String>,
}

/// Server-side applies one cert-manager object (`Issuer` or `Certificate`, as JSON), owned by
/// field manager `certgen`.
pub async fn apply(client: &kube::Client, object: &Value) -> Result<String, StoreError> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let (plural, what): (&'static str, _) = match kind {
        "Issuer" => ("issuers", format!("Issuer {namespace}/{name}")),
        _ => ("certificates", format!("Certificate {namespace}/{name}")),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource(kind, plural));
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &pp, &Patch::Apply(object))
        .await
        .map_err(|e| ApiFailure::from_kube("patch", plural, GROUP, namespace, name, e))?;
    Ok(what)
}

/// Whether Secret `namespace/name` carries annotation `key` (cert-manager applied a
/// Certificate's `secretTemplate` to it).
pub async fn secret_annotated(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<bool, StoreError> {
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), namespace);
    let s = api
        .get_metadata(name)
        .await
        .map_err(|e| ApiFailure::from_kube("get", "secrets", "", namespace, name, e))?;
    Ok(s.metadata.annotations.is_some_and(|a| a.contains_key(key)))
}

/// Whether `Issuer`/`Certificate` `namespace/name` has condition `Ready=True`: `Ok(None)` when
/// it is not there yet, `Ok(Some(message))` with the condition's message when it is not ready.
pub async fn ready(
    client: &kube::Client,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, StoreError> {
    let plural = if kind == "Issuer" {
        "issuers"
    } else {
        "certificates"
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource(kind, plural));
    let o = api
        .get(name)
        .await
        .map_err(|e| ApiFailure::from_kube("get", plural, GROUP, namespace, name, e))?;
    let conditions = o.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = conditions.iter().find(|c| c["type"] == "Ready");
    Ok(match ready {
        Some(c) if c["status"] == "True" => None,
        Some(c) => Some(c["message"].as_str().unwrap_or("not ready").to_string()),
        None => Some("no Ready condition yet".to_string()),
    })
}
