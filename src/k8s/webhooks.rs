//! The `caBundle` of cluster-scoped objects that must trust a managed CA bundle:
//! MutatingWebhookConfiguration, ValidatingWebhookConfiguration (every entry of `webhooks[]`)
//! and APIService (`spec.caBundle`).
//!
//! A small adapter, like the Secret store: a read (absent is data, not an error) returns each
//! entry's bundle with the object's uid and resourceVersion; a write puts one bundle into every
//! entry with an `update` that carries both, so a change in between (409) or a deleted object
//! (404), or one deleted and recreated under the same name (a new uid), is a
//! [`StoreError::Conflict`] and the caller re-reads and re-plans. It decides nothing: what the
//! bundle should be is the planner's job. `certgen patch` (kube-webhook-certgen's) goes through
//! it too: a read also returns each entry's name and `failurePolicy`, a write may set the
//! policy, and `--patch-mode patch` writes with a server-side apply instead of an update.
//!
//! Why `update` and not `patch`: Envoy Gateway's chart grants `update` (and `patch`) on its
//! webhook and its own certgen uses `update`, so `update` is the verb every deployment has. A
//! JSON merge patch cannot address one entry of `webhooks[]` (it replaces the list), and the
//! update sends back the whole object as read (unknown fields included, through
//! [`DynamicObject`]), changing only the bundles.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::ByteString;
use kube::api::{
    Api, ApiResource, DynamicObject, GetParams, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::config::WebhookKind;
use crate::outside::{TargetEntry, TargetFields};
use crate::store::{ApiFailure, StoreError};

const FIELD_MANAGER: &str = "certgen";

/// The annotation certgen sets on a `caBundle` target it writes (planned, see
/// [`crate::attribution::target_annotations`]).
pub use crate::attribution::BUNDLE_ANNOTATION;

/// A target as read, and what a read found: the seam's types ([`crate::outside`]), the whole
/// object kept as the read's token for the write.
pub use crate::outside::{TargetObserved as WebhookObserved, TargetRead as ObservedWebhook};

/// Reads and writes `caBundle` targets through one client.
pub struct WebhookStore {
    client: kube::Client,
    /// Whether Envoy Gateway's topology injector not found by name is looked for by label.
    by_label: bool,
}

/// The target kind's API resource (v1), its resource (plural) and its group.
pub(super) fn resource(kind: WebhookKind) -> (ApiResource, &'static str, &'static str) {
    let gvk = GroupVersionKind::gvk(kind.group(), "v1", kind.as_str());
    (
        ApiResource::from_gvk_with_plural(&gvk, kind.plural()),
        kind.plural(),
        kind.group(),
    )
}

/// The objects of a target kind, cluster-wide.
fn api(client: &kube::Client, kind: WebhookKind) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource(kind).0)
}

/// A failed request `verb` on target `name` of `kind`, as the store reports it.
pub(super) fn failure(
    verb: &'static str,
    kind: WebhookKind,
    name: &str,
    e: kube::Error,
) -> StoreError {
    let (_, plural, group) = resource(kind);
    ApiFailure::from_kube(verb, plural, group, "", name, e)
}

/// `MutatingWebhookConfiguration envoy-gateway-topology-injector.ns`, for messages.
pub fn describe(kind: WebhookKind, name: &str) -> String {
    format!("{} {name}", resource(kind).0.kind)
}

impl WebhookStore {
    /// A store using `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            by_label: true,
        }
    }

    /// A store using `client` that reads every target by its name alone (`certgen patch`,
    /// as kube-webhook-certgen reads them).
    pub fn exact(client: kube::Client) -> Self {
        Self {
            client,
            by_label: false,
        }
    }

    fn api(&self, kind: WebhookKind) -> Api<DynamicObject> {
        api(&self.client, kind)
    }

    /// Reads a target; `Absent` only on 404. A consistent read (no resourceVersion). Envoy
    /// Gateway's topology injector (`envoy-gateway-topology-injector.<namespace>`) not found
    /// under that name is looked for by its label, [`TOPOLOGY_INJECTOR_LABEL`] (unless the
    /// store is [`WebhookStore::exact`]).
    pub async fn get(&self, kind: WebhookKind, name: &str) -> Result<WebhookObserved, StoreError> {
        let found = match self.api(kind).get_opt(name).await {
            Ok(None) if self.by_label => self.topology_injector(kind, name).await?,
            Ok(found) => found,
            Err(e) => return Err(failure("get", kind, name, e)),
        };
        match found {
            None => Ok(WebhookObserved::Absent),
            Some(object) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                let name = name.as_str();
                let bundles = bundles(kind, &object.data).map_err(|message| {
                    StoreError::Api(Box::new(ApiFailure {
                        verb: "get",
                        resource: resource(kind).1,
                        namespace: String::new(),
                        name: name.to_string(),
                        status: None,
                        message,
                        hint: String::new(),
                    }))
                })?;
                Ok(WebhookObserved::Present(Box::new(ObservedWebhook {
                    kind,
                    name: name.to_string(),
                    uid: object.metadata.uid.clone().unwrap_or_default(),
                    version: object.metadata.resource_version.clone().unwrap_or_default(),
                    bundles,
                    entries: entries(kind, &object.data),
                    insecure_skip_tls_verify: object
                        .data
                        .pointer("/spec/insecureSkipTLSVerify")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    written_at: super::written_at(&object.metadata),
                    writes: super::field_writes(object.metadata.managed_fields.as_deref()),
                    recorded: object
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(crate::observe::writers::HISTORY))
                        .cloned(),
                    injected: object
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(crate::certmanager::injected),
                    token: Some(Arc::new(object)),
                })))
            }
        }
    }

    /// Envoy Gateway's topology injector, when `name` is its chart's name
    /// (`envoy-gateway-topology-injector.<namespace>`) and no object has it: Kustomize's
    /// `namePrefix`/`nameSuffix` rename it, and keep its label. The one MutatingWebhookConfiguration
    /// labelled `app.kubernetes.io/component=topology-injector` whose webhook's Service is in
    /// `<namespace>` is taken, and named in the log; none is absence; several are an error that
    /// names them and `--topology-injector`.
    async fn topology_injector(
        &self,
        kind: WebhookKind,
        name: &str,
    ) -> Result<Option<DynamicObject>, StoreError> {
        let Some(namespace) = topology_namespace(kind, name) else {
            return Ok(None);
        };
        let lp = kube::api::ListParams::default().labels(TOPOLOGY_INJECTOR_LABEL);
        let list = match self.api(kind).list(&lp).await {
            Ok(list) => list,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                tracing::warn!(
                    "{}: not found, and this identity may not list mutatingwebhookconfigurations to find it by label {TOPOLOGY_INJECTOR_LABEL}; name it with --topology-injector",
                    describe(kind, name)
                );
                return Ok(None);
            }
            Err(e) => return Err(failure("list", kind, "", e)),
        };
        let mut found: Vec<DynamicObject> = list
            .items
            .into_iter()
            .filter(|o| serves_from(&o.data, namespace))
            .collect();
        match found.len() {
            0 => Ok(None),
            1 => {
                let o = found.remove(0);
                tracing::info!(
                    "{} not found: using {}, labelled {TOPOLOGY_INJECTOR_LABEL} with its webhook's Service in namespace {namespace} (--topology-injector names it explicitly)",
                    describe(kind, name),
                    describe(kind, o.metadata.name.as_deref().unwrap_or_default())
                );
                Ok(Some(o))
            }
            _ => Err(StoreError::Api(Box::new(ApiFailure {
                verb: "list",
                resource: "mutatingwebhookconfigurations",
                namespace: String::new(),
                name: String::new(),
                status: None,
                message: format!(
                    "{name} not found, and several objects labelled {TOPOLOGY_INJECTOR_LABEL} have their webhook's Service in namespace {namespace}: {}",
                    found
                        .iter()
                        .filter_map(|o| o.metadata.name.as_deref())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                hint: "; name the one certgen keeps in step with --topology-injector NAME".into(),
            }))),
        }
    }

    /// Sets annotation `key` to `value` on a target (a JSON merge patch of the annotation
    /// alone): `false` when it does not exist.
    pub async fn annotate(
        &self,
        kind: WebhookKind,
        name: &str,
        key: &str,
        value: &str,
    ) -> Result<bool, StoreError> {
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        let pp = kube::api::PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..kube::api::PatchParams::default()
        };
        match self
            .api(kind)
            .patch(name, &pp, &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(failure("patch", kind, name, e)),
        }
    }

    /// Writes `bundle` (PEM) into every entry's `caBundle` of the object as `read`, and
    /// `fields` (the planned annotations; for `certgen patch` also its policy), fenced by its
    /// resourceVersion and uid. Nothing else of the object changes. The resourceVersion the
    /// write made.
    pub async fn put_ca_bundle(
        &self,
        read: &ObservedWebhook,
        bundle: &[u8],
        fields: TargetFields,
    ) -> Result<String, StoreError> {
        let mut object = read
            .token
            .as_ref()
            .and_then(|t| t.downcast_ref::<DynamicObject>())
            .expect("a target read through this store")
            .clone();
        // The annotations the plan put on the write: certgen's mark of the bundle and the
        // record of undos (issue 45). Decided by the planner on the store's clock, not here.
        if !fields.annotations.is_empty() {
            object
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(fields.annotations.clone());
        }
        set_bundles(read.kind, &mut object.data, bundle, &fields);
        // Both are preconditions of an update: the API server answers 409 when either no
        // longer matches (a change, or an object deleted and recreated under the same name).
        object.metadata.resource_version = Some(read.version.clone());
        object.metadata.uid = Some(read.uid.clone());
        // Sent back as read, managedFields would overwrite the server's record, and the write
        // would show as nobody's: left out, the server records certgen as the writer of what
        // it changed (and another writer, such as cert-manager's CA injector, can see it).
        object.metadata.managed_fields = None;
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        match self.api(read.kind).replace(&read.name, &pp, &object).await {
            Ok(written) => Ok(written.metadata.resource_version.unwrap_or_default()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(StoreError::Conflict {
                what: describe(read.kind, &read.name),
                detail: format!(
                    "resourceVersion is no longer {} or uid is no longer {}",
                    read.version, read.uid
                ),
            }),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(StoreError::Conflict {
                what: describe(read.kind, &read.name),
                detail: "it was deleted after certgen read it".into(),
            }),
            Err(e) => Err(failure("update", read.kind, &read.name, e)),
        }
    }

    /// Writes `bundle` (and `fields`) into the entries of `read`, by name, with a server-side
    /// apply (field manager `certgen`, forced): only those fields, no fence. Annotations in
    /// `fields` become certgen's to own: a later apply without one removes it.
    pub async fn apply_fields(
        &self,
        read: &ObservedWebhook,
        bundle: &[u8],
        fields: TargetFields,
    ) -> Result<(), StoreError> {
        let (resource, _, _) = resource(read.kind);
        let encoded = serde_json::to_value(ByteString(bundle.to_vec())).expect("bytes serialize");
        let spec = match read.kind {
            WebhookKind::ApiService if fields.verify_tls => {
                json!({"spec": {"caBundle": encoded, "insecureSkipTLSVerify": false}})
            }
            WebhookKind::ApiService => json!({"spec": {"caBundle": encoded}}),
            WebhookKind::MutatingWebhookConfiguration
            | WebhookKind::ValidatingWebhookConfiguration => {
                let hooks: Vec<Value> = read
                    .entries
                    .iter()
                    .map(|e| {
                        let mut hook =
                            json!({"name": e.name, "clientConfig": {"caBundle": encoded}});
                        if let Some(p) = fields.failure_policy {
                            hook["failurePolicy"] = Value::String(p.as_str().into());
                        }
                        hook
                    })
                    .collect();
                json!({"webhooks": hooks})
            }
        };
        let mut metadata = json!({"name": read.name});
        if !fields.annotations.is_empty() {
            metadata["annotations"] = json!(fields.annotations);
        }
        let mut body = json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": metadata,
        });
        if let (Some(body), Some(spec)) = (body.as_object_mut(), spec.as_object()) {
            body.extend(spec.clone());
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        match self
            .api(read.kind)
            .patch(&read.name, &pp, &Patch::Apply(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(failure("patch", read.kind, &read.name, e)),
        }
    }

    /// Whether the API server's watch cache holds `version` of the target or a later one. A
    /// read at a resourceVersion ("not older than") is served from that cache, which also
    /// feeds the API server's own informer of webhook configurations (and the aggregator's of
    /// APIServices): the write is then on its way to the admission path. The server waits up
    /// to 3 s for its cache before it answers 504, retried by the client; a target deleted
    /// since (404 at that version) is past the write as well.
    pub async fn cached(
        &self,
        kind: WebhookKind,
        name: &str,
        version: &str,
    ) -> Result<bool, StoreError> {
        match self
            .api(kind)
            .get_metadata_with(name, &GetParams::at(version))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 504 => Ok(false),
            Err(e) => Err(failure("get", kind, name, e)),
        }
    }
}

/// The label Envoy Gateway's chart puts on its topology injector.
pub const TOPOLOGY_INJECTOR_LABEL: &str = "app.kubernetes.io/component=topology-injector";

/// The namespace of Envoy Gateway's topology injector when `name` is its chart's name for it
/// (`envoy-gateway-topology-injector.<namespace>`, a MutatingWebhookConfiguration): one not
/// found under that name is looked for by [`TOPOLOGY_INJECTOR_LABEL`] (run, `check` and the
/// exporter alike).
pub fn topology_namespace(kind: WebhookKind, name: &str) -> Option<&str> {
    name.strip_prefix(crate::config::TOPOLOGY_INJECTOR_PREFIX)
        .and_then(|rest| rest.strip_prefix('.'))
        .filter(|_| kind == WebhookKind::MutatingWebhookConfiguration)
}

/// The namespaces of the Services a webhook configuration's entries call.
pub(super) fn service_namespaces(data: &Value) -> BTreeSet<String> {
    data.get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|w| w.pointer("/clientConfig/service/namespace"))
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Whether a webhook configuration's entries call a Service in `namespace`.
fn serves_from(data: &Value, namespace: &str) -> bool {
    service_namespaces(data).contains(namespace)
}

/// The `caBundle` of each entry (decoded from base64), in order.
pub(super) fn bundles(kind: WebhookKind, data: &Value) -> Result<Vec<Vec<u8>>, String> {
    let decode = |v: Option<&Value>| -> Result<Vec<u8>, String> {
        match v {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(v) => serde_json::from_value::<ByteString>(v.clone())
                .map(|b| b.0)
                .map_err(|e| format!("caBundle is not base64: {e}")),
        }
    };
    match kind {
        WebhookKind::ApiService => Ok(vec![decode(data.pointer("/spec/caBundle"))?]),
        WebhookKind::MutatingWebhookConfiguration | WebhookKind::ValidatingWebhookConfiguration => {
            data.get("webhooks")
                .and_then(Value::as_array)
                .map(|list| list.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|w| decode(w.pointer("/clientConfig/caBundle")))
                .collect()
        }
    }
}

/// Each entry's name and `failurePolicy`, in the order of [`bundles`].
fn entries(kind: WebhookKind, data: &Value) -> Vec<TargetEntry> {
    match kind {
        WebhookKind::ApiService => vec![TargetEntry::default()],
        WebhookKind::MutatingWebhookConfiguration | WebhookKind::ValidatingWebhookConfiguration => {
            let field = |w: &Value, f: &str| w.get(f).and_then(Value::as_str).map(str::to_string);
            data.get("webhooks")
                .and_then(Value::as_array)
                .map(|list| list.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|w| TargetEntry {
                    name: field(w, "name").unwrap_or_default(),
                    failure_policy: field(w, "failurePolicy"),
                })
                .collect()
        }
    }
}

fn set_bundles(kind: WebhookKind, data: &mut Value, bundle: &[u8], fields: &TargetFields) {
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).expect("bytes serialize");
    match kind {
        WebhookKind::ApiService => {
            if let Some(spec) = data.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("caBundle".into(), encoded);
                if fields.verify_tls {
                    spec.insert("insecureSkipTLSVerify".into(), Value::Bool(false));
                }
            }
        }
        WebhookKind::MutatingWebhookConfiguration | WebhookKind::ValidatingWebhookConfiguration => {
            if let Some(list) = data.get_mut("webhooks").and_then(Value::as_array_mut) {
                for w in list {
                    if let Some(w) = w.as_object_mut() {
                        if let Some(p) = fields.failure_policy {
                            w.insert("failurePolicy".into(), Value::String(p.as_str().into()));
                        }
                        let cc = w
                            .entry("clientConfig")
                            .or_insert_with(|| Value::Object(Default::default()));
                        if let Some(cc) = cc.as_object_mut() {
                            cc.insert("caBundle".into(), encoded.clone());
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_and_sets_every_entry() {
        let mut data = json!({"webhooks": [
            {"name": "a", "clientConfig": {"caBundle": "b2xk"}},
            {"name": "b", "clientConfig": {"service": {"name": "x"}}},
        ]});
        let kind = WebhookKind::MutatingWebhookConfiguration;
        assert_eq!(bundles(kind, &data).unwrap(), [b"old".to_vec(), vec![]]);
        set_bundles(kind, &mut data, b"new", &TargetFields::default());
        assert_eq!(
            bundles(kind, &data).unwrap(),
            [b"new".to_vec(), b"new".to_vec()]
        );
        assert_eq!(data["webhooks"][1]["clientConfig"]["service"]["name"], "x");
    }

    #[test]
    fn holds_means_every_entry() {
        let mut w = ObservedWebhook {
            kind: WebhookKind::MutatingWebhookConfiguration,
            name: "w".into(),
            uid: "u".into(),
            version: "1".into(),
            bundles: vec![b"a".to_vec(), b"a".to_vec()],
            entries: vec![TargetEntry::default(); 2],
            insecure_skip_tls_verify: false,
            written_at: None,
            injected: None,
            writes: Vec::new(),
            recorded: None,
            token: None,
        };
        assert!(w.holds(b"a"));
        assert!(!w.holds(b"b"));
        w.bundles[1] = b"b".to_vec();
        assert!(!w.holds(b"a"));
        w.bundles.clear();
        assert!(w.holds(b"anything"));
    }

    #[test]
    fn api_service_bundle_is_in_spec() {
        let mut data = json!({"spec": {"service": {"name": "m"}, "groupPriorityMinimum": 100}});
        let kind = WebhookKind::ApiService;
        assert_eq!(bundles(kind, &data).unwrap(), [Vec::<u8>::new()]);
        set_bundles(kind, &mut data, b"pem", &TargetFields::default());
        assert_eq!(bundles(kind, &data).unwrap(), [b"pem".to_vec()]);
        assert_eq!(data["spec"]["groupPriorityMinimum"], 100);
    }

    #[test]
    fn patch_fields_are_read_and_set_on_every_entry_and_left_alone_otherwise() {
        let kind = WebhookKind::ValidatingWebhookConfiguration;
        let mut data = json!({"webhooks": [
            {"name": "a", "failurePolicy": "Fail", "clientConfig": {}},
            {"name": "b", "clientConfig": {}},
        ]});
        let entry = |name: &str, policy: Option<&str>| TargetEntry {
            name: name.into(),
            failure_policy: policy.map(str::to_string),
        };
        assert_eq!(
            entries(kind, &data),
            [entry("a", Some("Fail")), entry("b", None)]
        );
        // The driver's write: the bundle alone.
        set_bundles(kind, &mut data, b"pem", &TargetFields::default());
        assert_eq!(
            entries(kind, &data),
            [entry("a", Some("Fail")), entry("b", None)]
        );
        let fields = TargetFields {
            failure_policy: Some(crate::outside::FailurePolicy::Ignore),
            verify_tls: true,
            ..TargetFields::default()
        };
        set_bundles(kind, &mut data, b"pem", &fields);
        assert_eq!(
            entries(kind, &data),
            [entry("a", Some("Ignore")), entry("b", Some("Ignore"))]
        );
        let kind = WebhookKind::ApiService;
        let mut data = json!({"spec": {"insecureSkipTLSVerify": true}});
        set_bundles(kind, &mut data, b"pem", &TargetFields::default());
        assert_eq!(data["spec"]["insecureSkipTLSVerify"], true);
        set_bundles(kind, &mut data, b"pem", &fields);
        assert_eq!(data["spec"]["insecureSkipTLSVerify"], false);
        assert_eq!(entries(kind, &data), [TargetEntry::default()]);
    }

    #[test]
    fn a_bundle_that_is_not_base64_is_an_error() {
        let data = json!({"webhooks": [{"clientConfig": {"caBundle": "%%%"}}]});
        assert!(bundles(WebhookKind::ValidatingWebhookConfiguration, &data).is_err());
    }
}
