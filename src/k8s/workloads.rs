//! Workloads in one namespace, whatever their kind (Deployment, StatefulSet, DaemonSet): read,
//! restarted like `kubectl rollout restart`, and watched until their rollout is done.
//!
//! One API generic over the resource (kube's `Api<K>`), as kube-rs does it: each kind is a
//! [`Kinded`] type that reads its object into the kind-neutral [`WorkloadView`], and
//! [`with_kind!`] picks the type for a [`Kind`]. What to restart and when a rollout is done
//! are [`crate::rollout`]'s and [`crate::workload`]'s pure decisions; adding a kind here is one
//! `impl Kinded` and one arm of the macro.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::time::Instant;

use crate::rollout::{FINGERPRINT, RESTARTED_AT, RolloutError, RolloutState, Target};
use crate::store::{ApiFailure, StoreError};
use crate::workload::{Kind, RolloutStatus, Strategy, WorkloadView};

/// How long a rollout's watch may be quiet before its pods are looked at for one the
/// scheduler cannot place.
const UNSCHEDULABLE_LOOK: Duration = Duration::from_secs(5);

/// A workload kind as a typed Kubernetes resource: what certgen reads of it.
pub trait Kinded:
    kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    const KIND: Kind;
    /// Its pod template.
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// Its rollout fields, kind-neutral (the generations are filled in by [`view`]).
    fn status(&self) -> RolloutStatus;
    /// Whether it is paused (only a Deployment can be).
    fn paused(&self) -> bool {
        false
    }
}

/// Picks the typed resource for a [`Kind`]: `with_kind!(kind, K => body)` runs `body` with
/// `K` the kind's type.
macro_rules! with_kind {
    ($kind:expr, $k:ident => $body:expr) => {
        match $kind {
            Kind::Deployment => {
                type $k = Deployment;
                $body
            }
            Kind::StatefulSet => {
                type $k = StatefulSet;
                $body
            }
            Kind::DaemonSet => {
                type $k = DaemonSet;
                $body
            }
        }
    };
}

impl Kinded for Deployment {
    const KIND: Kind = Kind::Deployment;
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
    fn paused(&self) -> bool {
        self.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
    }
    fn status(&self) -> RolloutStatus {
        let s = self.status.clone().unwrap_or_default();
        let deadline_exceeded = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Progressing")
            .filter(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
            .map(|c| c.message.clone().unwrap_or_else(|| "no message".into()));
        RolloutStatus {
            observed_generation: s.observed_generation.unwrap_or(0),
            replicas: self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            updated: s.updated_replicas.unwrap_or(0),
            current: s.replicas.unwrap_or(0),
            ready: s.ready_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
            deadline_exceeded,
            ..RolloutStatus::default()
        }
    }
}

impl Kinded for StatefulSet {
    const KIND: Kind = Kind::StatefulSet;
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
    fn status(&self) -> RolloutStatus {
        let spec = self.spec.as_ref();
        let update = spec.and_then(|s| s.update_strategy.as_ref());
        let s = self.status.clone().unwrap_or_default();
        RolloutStatus {
            observed_generation: s.observed_generation.unwrap_or(0),
            replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
            strategy: strategy(update.and_then(|u| u.type_.as_deref())),
            partition: update
                .and_then(|u| u.rolling_update.as_ref())
                .and_then(|r| r.partition)
                .unwrap_or(0),
            updated: s.updated_replicas.unwrap_or(0),
            current: s.replicas,
            ready: s.ready_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
            current_revision: s.current_revision.unwrap_or_default(),
            update_revision: s.update_revision.unwrap_or_default(),
            ..RolloutStatus::default()
        }
    }
}

impl Kinded for DaemonSet {
    const KIND: Kind = Kind::DaemonSet;
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
    fn status(&self) -> RolloutStatus {
        let update = self.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
        let s = self.status.clone().unwrap_or_default();
        RolloutStatus {
            observed_generation: s.observed_generation.unwrap_or(0),
            strategy: strategy(update.and_then(|u| u.type_.as_deref())),
            updated: s.updated_number_scheduled.unwrap_or(0),
            current: s.current_number_scheduled,
            ready: s.number_ready,
            available: s.number_available.unwrap_or(0),
            desired: s.desired_number_scheduled,
            ..RolloutStatus::default()
        }
    }
}

fn strategy(type_: Option<&str>) -> Strategy {
    match type_ {
        Some("OnDelete") => Strategy::OnDelete,
        _ => Strategy::Replace,
    }
}

/// The kind-neutral view of a workload object.
pub fn view<K: Kinded>(obj: &K) -> WorkloadView {
    let meta: &ObjectMeta = obj.meta();
    let mut status = obj.status();
    status.generation = meta.generation.unwrap_or(0);
    WorkloadView {
        kind: K::KIND,
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        created: meta
            .creation_timestamp
            .as_ref()
            .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok()),
        fingerprint: obj
            .template()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(FINGERPRINT).cloned()),
        paused: obj.paused(),
        status,
    }
}

fn api_failure(
    verb: &'static str,
    kind: Kind,
    namespace: &str,
    name: &str,
    err: kube::Error,
) -> StoreError {
    ApiFailure::from_kube(verb, kind.resource(), kind.group(), namespace, name, err)
}

/// Workloads of every kind in one namespace.
pub struct Workloads {
    client: kube::Client,
    namespace: String,
}

/// The rollout's last word, with why a pod of it cannot be scheduled after kubectl's counts
/// (replacing an earlier such reason).
fn note_unschedulable(
    last: &std::sync::Mutex<BTreeMap<String, String>>,
    target: &Target,
    why: &str,
) {
    let mut last = last.lock().unwrap();
    let label = target.label();
    let counts = last.get(&label).cloned().unwrap_or_default();
    let counts = counts.split("; pod ").next().unwrap_or_default();
    last.insert(label, format!("{counts}; {why}"));
}

impl Workloads {
    /// Workloads in `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
        }
    }

    fn api<K: Kinded>(&self) -> Api<K> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// One workload by kind and name; `None` when it does not exist.
    pub async fn get(&self, kind: Kind, name: &str) -> Result<Option<WorkloadView>, StoreError> {
        with_kind!(kind, K => self.get_as::<K>(name).await.map(|o| o.as_ref().map(view)))
    }

    async fn get_as<K: Kinded>(&self, name: &str) -> Result<Option<K>, StoreError> {
        self.api::<K>()
            .get_opt(name)
            .await
            .map_err(|e| api_failure("get", K::KIND, &self.namespace, name, e))
    }

    /// The workloads of `kind` matching a label selector.
    pub async fn select(
        &self,
        kind: Kind,
        selector: &str,
    ) -> Result<Vec<WorkloadView>, StoreError> {
        with_kind!(kind, K => {
            let list = self
                .api::<K>()
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| api_failure("list", kind, &self.namespace, selector, e))?;
            Ok(list.items.iter().map(view).collect())
        })
    }

    /// Patches the pod template like `kubectl rollout restart`, recording `fp`. The patch is
    /// conditional on the UID certgen saw. Returns the wait target (the new generation).
    pub async fn restart(
        &self,
        w: &WorkloadView,
        fp: &str,
        now: time::OffsetDateTime,
    ) -> Result<Result<Target, RolloutError>, StoreError> {
        with_kind!(w.kind, K => self.restart_as::<K>(w, fp, now).await)
    }

    async fn restart_as<K: Kinded>(
        &self,
        w: &WorkloadView,
        fp: &str,
        now: time::OffsetDateTime,
    ) -> Result<Result<Target, RolloutError>, StoreError> {
        let (kind, name) = (K::KIND, w.name.clone());
        if w.paused {
            return Ok(Err(RolloutError::Paused {
                kind,
                namespace: self.namespace.clone(),
                name,
            }));
        }
        let patch = json!({
            "metadata": {"uid": w.uid},
            "spec": {"template": {"metadata": {"annotations": {
                RESTARTED_AT: crate::timefmt::rfc3339(now),
                FINGERPRINT: fp,
            }}}}
        });
        let pp = PatchParams {
            field_manager: Some("certgen".into()),
            ..PatchParams::default()
        };
        match self
            .api::<K>()
            .patch(&name, &pp, &Patch::Strategic(&patch))
            .await
        {
            Ok(patched) => Ok(Ok(Target {
                kind,
                name,
                uid: w.uid.clone(),
                generation: patched.meta().generation.unwrap_or(0),
            })),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                let new = self
                    .get_as::<K>(&name)
                    .await?
                    .and_then(|d| d.meta().uid.clone())
                    .unwrap_or_default();
                Ok(Err(if new.is_empty() {
                    RolloutError::Deleted {
                        kind,
                        namespace: self.namespace.clone(),
                        name,
                    }
                } else {
                    RolloutError::Recreated {
                        kind,
                        namespace: self.namespace.clone(),
                        name,
                        old: w.uid.clone(),
                        new,
                    }
                }))
            }
            Err(e) => Err(api_failure("patch", kind, &self.namespace, &name, e)),
        }
    }

    /// Watches one workload until its rollout is done, fails, or the deadline passes
    /// (`Ok(None)`: still progressing, with the last state in `last`, keyed by
    /// [`Target::label`]).
    pub async fn wait(
        &self,
        target: &Target,
        deadline: Instant,
        last: &std::sync::Mutex<BTreeMap<String, String>>,
    ) -> Result<Option<Duration>, RolloutError> {
        with_kind!(target.kind, K => self.wait_as::<K>(target, deadline, last).await)
    }

    /// The first pod with the template's `labels` that the scheduler cannot place, in words
    /// (`pod NAME cannot be scheduled: 0/3 nodes are available: ...`). `None` when every pod
    /// is placed, or the pods cannot be read (the wait goes on without it).
    async fn unschedulable(&self, labels: Option<&BTreeMap<String, String>>) -> Option<String> {
        let labels = labels.filter(|l| !l.is_empty())?;
        let selector = labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| tracing::debug!("pods of {selector} not read: {e}"))
            .ok()?;
        list.items.iter().find_map(|pod| {
            let c = pod
                .status
                .as_ref()?
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .filter(|c| c.reason.as_deref() == Some("Unschedulable"))?;
            Some(format!(
                "pod {} cannot be scheduled: {}",
                pod.metadata.name.as_deref().unwrap_or("?"),
                c.message.as_deref().unwrap_or("no message").trim()
            ))
        })
    }

    /// A watch error that is a refusal (401, 403), as the API failure of the verb refused
    /// (`list` for the initial list, `watch` otherwise); `None` for errors retrying may heal.
    fn refused(&self, e: &watcher::Error, kind: Kind, target: &Target) -> Option<RolloutError> {
        let (code, message) = match e {
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s)) => {
                matches!(s.code, 401 | 403).then(|| (s.code, s.message.clone()))
            }
            watcher::Error::WatchError(s) if matches!(s.code, 401 | 403) => {
                Some((s.code, s.message.clone()))
            }
            _ => None,
        }?;
        let verb = if matches!(e, watcher::Error::InitialListFailed(_)) {
            "list"
        } else {
            "watch"
        };
        Some(RolloutError::Refused(api_failure(
            verb,
            kind,
            &self.namespace,
            &target.name,
            kube::Error::Api(Box::new(
                kube::core::Status::failure(&message, "Forbidden").with_code(code),
            )),
        )))
    }

    async fn wait_as<K: Kinded>(
        &self,
        target: &Target,
        deadline: Instant,
        last: &std::sync::Mutex<BTreeMap<String, String>>,
    ) -> Result<Option<Duration>, RolloutError> {
        let kind = K::KIND;
        let started = Instant::now();
        let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
        let mut stream = watcher(self.api::<K>(), config).default_backoff().boxed();
        let err = |message: String| RolloutError::Watch {
            kind,
            namespace: self.namespace.clone(),
            name: target.name.clone(),
            message,
        };
        // A rollout held by a pod the scheduler cannot place says so, not only kubectl's
        // counts: its pods are looked at whenever the watch is quiet for a while.
        let mut template: Option<BTreeMap<String, String>> = None;
        loop {
            let look_at = (Instant::now() + UNSCHEDULABLE_LOOK).min(deadline);
            let event = match tokio::time::timeout_at(look_at, stream.next()).await {
                Err(_) => {
                    if let Some(why) = self.unschedulable(template.as_ref()).await {
                        note_unschedulable(last, target, &why);
                    }
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    continue;
                }
                Ok(None) => return Err(err("the watch ended".into())),
                Ok(Some(Err(e))) => {
                    // Refusals (403, 401) do not heal by retrying: report them as API failures.
                    // Anything else (a dropped connection, a 5xx) is retried with backoff.
                    if let Some(refused) = self.refused(&e, kind, target) {
                        return Err(refused);
                    }
                    tracing::debug!(workload = %target.name, kind = %kind, "watch error, retrying: {e}");
                    continue;
                }
                Ok(Some(Ok(event))) => event,
            };
            let (obj, deleted) = match event {
                watcher::Event::Apply(d) | watcher::Event::InitApply(d) => (d, false),
                watcher::Event::Delete(d) => (d, true),
                watcher::Event::Init | watcher::Event::InitDone => continue,
            };
            template = obj
                .template()
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.labels.clone());
            let w = view(&obj);
            if w.uid != target.uid {
                return Err(RolloutError::Recreated {
                    kind,
                    namespace: self.namespace.clone(),
                    name: target.name.clone(),
                    old: target.uid.clone(),
                    new: w.uid,
                });
            }
            if deleted {
                return Err(RolloutError::Deleted {
                    kind,
                    namespace: self.namespace.clone(),
                    name: target.name.clone(),
                });
            }
            match kind.rollout_state(&w.status, target.generation) {
                RolloutState::Done => {
                    last.lock()
                        .unwrap()
                        .insert(target.label(), "rolled out".into());
                    return Ok(Some(started.elapsed()));
                }
                RolloutState::Failed(message) => {
                    return Err(RolloutError::Failed {
                        kind,
                        namespace: self.namespace.clone(),
                        name: target.name.clone(),
                        message,
                    });
                }
                RolloutState::Progressing(message) => {
                    last.lock().unwrap().insert(target.label(), message);
                }
            }
        }
    }
}
