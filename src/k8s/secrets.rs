//! The Kubernetes store: Secrets in one namespace, read consistently and written with
//! resourceVersion preconditions (create, or JSON merge patch carrying the resourceVersion; or,
//! where the identity may not `patch` Secrets, as under Envoy Gateway's chart Role, an `update`
//! of the whole Secret carrying the resourceVersion it was read at).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::access::SecretWriteVerb;
use crate::secret::{Expect, Observed, SecretWrite, StoredSecret};
use crate::store::{ApiFailure, SecretStore, StoreError};

mod list;

pub use self::list::PAGE_SIZE;

const FIELD_MANAGER: &str = "certgen";

/// Secrets in one namespace of a cluster.
pub struct KubeStore {
    api: Api<Secret>,
    namespace: String,
    /// Labels added to every write (the profile's `labels:`); the write's own labels win.
    labels: BTreeMap<String, String>,
    /// 0: patch, falling back to update on a 403; 1: update.
    verb: AtomicU8,
    /// The last version read of each Secret: the base of an update, so it costs no extra read.
    read: Mutex<HashMap<String, Secret>>,
}

impl KubeStore {
    /// A store for `namespace` through `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            labels: BTreeMap::new(),
            verb: AtomicU8::new(0),
            read: Mutex::new(HashMap::new()),
        }
    }

    /// Adds `labels` to every Secret written (for the envoy-gateway profile,
    /// `control-plane: envoy-gateway`, as Envoy Gateway's certgen writes).
    pub fn with_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// Writes changes with `verb` from the start (when access discovery found that `patch` is
    /// not granted). Without it, a 403 on the first patch switches to update for the run.
    pub fn with_write_verb(self, verb: SecretWriteVerb) -> Self {
        self.verb
            .store(u8::from(verb == SecretWriteVerb::Update), Ordering::SeqCst);
        self
    }

    /// How changes are written now.
    pub fn write_verb(&self) -> SecretWriteVerb {
        if self.verb.load(Ordering::SeqCst) == 1 {
            SecretWriteVerb::Update
        } else {
            SecretWriteVerb::Patch
        }
    }

    fn labels_for(&self, write: &SecretWrite) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.extend(write.labels.clone());
        labels
    }

    /// The fenced update: the Secret as last read at `rv` (read again if the cache holds another
    /// version), with the write's keys, labels and annotations applied, sent with `rv`.
    async fn update(&self, write: &SecretWrite, rv: &str) -> Result<(), StoreError> {
        let cached = self.read.lock().unwrap().get(&write.name).cloned();
        let base = match cached {
            Some(s) if s.metadata.resource_version.as_deref() == Some(rv) => s,
            _ => match self.api.get_opt(&write.name).await {
                Ok(Some(s)) => s,
                Ok(None) => {
                    return Err(StoreError::Conflict {
                        what: self.object(&write.name),
                        detail: "it was deleted after certgen read it".into(),
                    });
                }
                Err(e) => return Err(self.api_error("get", &write.name, e)),
            },
        };
        if base.metadata.resource_version.as_deref() != Some(rv) {
            return Err(StoreError::Conflict {
                what: self.object(&write.name),
                detail: format!("resourceVersion is no longer {rv}"),
            });
        }
        let mut secret = base;
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        for k in &write.remove {
            data.remove(k);
        }
        for (k, v) in &write.data {
            data.insert(k.clone(), ByteString(v.clone()));
        }
        // Only the raw `data` is sent back; `stringData` is write-only and never read.
        secret.string_data = None;
        secret
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(self.labels_for(write));
        if !write.annotations.is_empty() {
            secret
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(write.annotations.clone());
        }
        secret.metadata.resource_version = Some(rv.to_string());
        // Managed fields are the server's; sending them back stale is refused or ignored.
        secret.metadata.managed_fields = None;
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        match self.api.replace(&write.name, &pp, &secret).await {
            Ok(_) => Ok(()),
            Err(e) if self.lost_race(&e) => Err(self.conflict(&write.name, rv, &e)),
            Err(e) if is_status(&e, 403) => {
                let mut err = self.api_error("update", &write.name, e);
                if let StoreError::Api(f) = &mut err
                    && !f.quota()
                {
                    f.hint = format!(
                        "; grant the patch verb on secrets in namespace {} to this identity (or update: certgen writes with update where patch is not granted, and this identity has neither)",
                        self.namespace
                    );
                }
                Err(err)
            }
            Err(e) => Err(self.api_error("update", &write.name, e)),
        }
    }

    /// Whether a fenced write failed because the Secret changed (409) or went away (404)
    /// since it was read: a lost race, re-read and re-planned, never an API failure.
    fn lost_race(&self, err: &kube::Error) -> bool {
        is_status(err, 409) || is_status(err, 404)
    }

    /// The conflict a lost race (see [`Self::lost_race`]) is reported as.
    fn conflict(&self, name: &str, rv: &str, err: &kube::Error) -> StoreError {
        let detail = if is_status(err, 404) {
            "it was deleted after certgen read it".to_string()
        } else {
            format!("resourceVersion is no longer {rv}")
        };
        StoreError::Conflict {
            what: self.object(name),
            detail,
        }
    }

    fn api_error(&self, verb: &'static str, name: &str, err: kube::Error) -> StoreError {
        ApiFailure::from_kube(verb, "secrets", "", &self.namespace, name, err)
    }

    /// A Secret cert-manager issued into, with the `Certificate` its annotation names as read
    /// (one request, only for such a Secret): whether cert-manager still issues into it.
    pub(super) async fn with_certificate(&self, o: Observed) -> Result<Observed, StoreError> {
        let Observed::Present(mut s) = o else {
            return Ok(o);
        };
        if let Some(name) = crate::certmanager::certificate_of(&s.annotations, &s.name) {
            let client = self.api.clone().into_client();
            s.certificate = Some(Box::new(
                super::certificates::certificate(&client, &self.namespace, name).await?,
            ));
        }
        Ok(Observed::Present(s))
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

/// Whether a 403 is a missing verb (RBAC), not a ResourceQuota's refusal, which no other verb
/// gets past.
fn is_forbidden_verb(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 403 && !s.message.contains("exceeded quota"))
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

    fn now(&self) -> time::OffsetDateTime {
        super::servertime::now().unwrap_or_else(time::OffsetDateTime::now_utc)
    }

    async fn known_missing(&self, probe: &str) -> bool {
        // A server-side dry run of the create a run would send: the API server authorizes it
        // and runs admission (NamespaceLifecycle answers 404 for a namespace that does not
        // exist), and stores nothing. Any other answer (created, 403, 409) says nothing.
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(probe.to_string()),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        };
        let params = PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        matches!(self.api.create(&params, &secret).await, Err(e) if is_status(&e, 404))
    }

    async fn get(&self, name: &str) -> Result<Observed, StoreError> {
        // No resourceVersion: a consistent (quorum) read, as a read that gates writes must be.
        match self.api.get_opt(name).await {
            Ok(None) => Ok(Observed::Absent),
            Ok(Some(secret)) => {
                self.read
                    .lock()
                    .unwrap()
                    .insert(name.to_string(), secret.clone());
                self.with_certificate(Observed::Present(from_secret(secret)))
                    .await
            }
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
                        labels: Some(self.labels_for(write)),
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
            Expect::Version(rv) if self.write_verb() == SecretWriteVerb::Update => {
                self.update(write, rv).await
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
                        "labels": self.labels_for(write),
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
                    Err(e) if self.lost_race(&e) => Err(self.conflict(&write.name, rv, &e)),
                    // Not allowed to patch (Envoy Gateway's chart Role grants get, create and
                    // update): write the same change as a fenced update, for the rest of the
                    // run too. Deciding on the server's own answer to the real request, rather
                    // than on a guess, costs one refused request where patch is missing and
                    // nothing where it is granted; access discovery (src/access.rs) usually
                    // spares even that request by selecting update before the first write.
                    Err(e) if is_forbidden_verb(&e) => {
                        tracing::warn!(
                            "this identity may not patch Secrets in namespace {}; writing them with updates fenced by resourceVersion instead",
                            self.namespace
                        );
                        self.verb.store(1, Ordering::SeqCst);
                        self.update(write, rv).await
                    }
                    Err(e) => Err(self.api_error("patch", &write.name, e)),
                }
            }
        }
    }
}

pub(super) fn from_secret(secret: Secret) -> StoredSecret {
    let meta = secret.metadata;
    StoredSecret {
        written_at: super::written_at(&meta),
        writes: super::field_writes(meta.managed_fields.as_deref()),
        name: meta.name.unwrap_or_default(),
        type_: secret
            .type_
            .unwrap_or_else(|| crate::secret::TYPE_OPAQUE.to_string()),
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
        certificate: None,
    }
}
