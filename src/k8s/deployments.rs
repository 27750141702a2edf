//! Deployments in one namespace: read, restarted like `kubectl rollout restart`, and watched
//! until their rollout is done (what to restart and when a rollout is done are
//! [`crate::rollout`]'s pure decisions).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::time::Instant;

use crate::rollout::{
    FINGERPRINT, RESTARTED_AT, RolloutError, RolloutState, Target, rollout_state,
};
use crate::store::{ApiFailure, StoreError};

fn api_failure(verb: &'static str, namespace: &str, name: &str, err: kube::Error) -> StoreError {
    ApiFailure::from_kube(verb, "deployments", "apps", namespace, name, err)
}

/// Deployments in one namespace.
pub struct Deployments {
    api: Api<Deployment>,
    namespace: String,
    /// Whether a 403 skips restarts for the rest of the run instead of failing it.
    skip_refused: bool,
    /// Why restarts are skipped, once the API server refused one of their requests.
    refused: std::sync::Mutex<Option<String>>,
}

impl Deployments {
    /// Deployments in `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            skip_refused: false,
            refused: std::sync::Mutex::new(None),
        }
    }

    /// Restarts are an extra nobody asked for (no `--wait`), so no rules review proved their
    /// verbs before the run: a 403 on a Deployment request skips every restart for the rest of
    /// the run, with a warning and a report line, instead of failing it (src/access.rs).
    pub fn skip_refused(mut self) -> Self {
        self.skip_refused = true;
        self
    }

    /// Why restarts are skipped in this run, once a request was refused.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().expect("not poisoned").clone()
    }

    /// Takes `e` as the reason to skip restarts from now on when it is a 403 and refusals are
    /// skipped; gives `e` back otherwise.
    pub fn refuse(&self, e: StoreError) -> Result<String, StoreError> {
        let StoreError::Api(failure) = &e else {
            return Err(e);
        };
        if !self.skip_refused || failure.status != Some(403) {
            return Err(e);
        }
        let note = format!(
            "not restarted: this identity may not {} deployments.apps in namespace {} (403); restart it after a rotation (kubectl rollout restart), or grant that verb",
            failure.verb, self.namespace
        );
        let mut refused = self.refused.lock().expect("not poisoned");
        if refused.is_none() {
            tracing::warn!("{note}");
        }
        Ok(refused.get_or_insert(note).clone())
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// One Deployment by name; `None` when it does not exist.
    pub async fn get(&self, name: &str) -> Result<Option<Deployment>, StoreError> {
        self.api
            .get_opt(name)
            .await
            .map_err(|e| api_failure("get", &self.namespace, name, e))
    }

    /// The Deployments matching a label selector.
    pub async fn select(&self, selector: &str) -> Result<Vec<Deployment>, StoreError> {
        let list = self
            .api
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| api_failure("list", &self.namespace, selector, e))?;
        Ok(list.items)
    }

    /// Patches the pod template like `kubectl rollout restart`, recording `fp`. The patch is
    /// conditional on the UID certgen saw. Returns the wait target (the new generation).
    pub async fn restart(
        &self,
        d: &Deployment,
        fp: &str,
        now: time::OffsetDateTime,
    ) -> Result<Result<Target, RolloutError>, StoreError> {
        let name = d.metadata.name.clone().unwrap_or_default();
        if d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false) {
            return Ok(Err(RolloutError::Paused {
                namespace: self.namespace.clone(),
                name,
            }));
        }
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let patch = json!({
            "metadata": {"uid": uid},
            "spec": {"template": {"metadata": {"annotations": {
                RESTARTED_AT: crate::timefmt::rfc3339(now),
                FINGERPRINT: fp,
            }}}}
        });
        let pp = PatchParams {
            field_manager: Some("certgen".into()),
            ..PatchParams::default()
        };
        match self.api.patch(&name, &pp, &Patch::Strategic(&patch)).await {
            Ok(patched) => Ok(Ok(Target {
                name,
                uid,
                generation: patched.metadata.generation.unwrap_or(0),
            })),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                let new = self
                    .get(&name)
                    .await?
                    .and_then(|d| d.metadata.uid)
                    .unwrap_or_default();
                Ok(Err(if new.is_empty() {
                    RolloutError::Deleted {
                        namespace: self.namespace.clone(),
                        name,
                    }
                } else {
                    RolloutError::Recreated {
                        namespace: self.namespace.clone(),
                        name,
                        old: uid,
                        new,
                    }
                }))
            }
            Err(e) => Err(api_failure("patch", &self.namespace, &name, e)),
        }
    }

    /// Watches one Deployment until its rollout is done, fails, or the deadline passes
    /// (`Ok(None)`: still progressing, with the last state in `last`).
    pub async fn wait(
        &self,
        target: &Target,
        deadline: Instant,
        last: &std::sync::Mutex<BTreeMap<String, String>>,
    ) -> Result<Option<Duration>, RolloutError> {
        let started = Instant::now();
        let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
        let mut stream = watcher(self.api.clone(), config).default_backoff().boxed();
        let err = |message: String| RolloutError::Watch {
            namespace: self.namespace.clone(),
            name: target.name.clone(),
            message,
        };
        loop {
            let event = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => return Ok(None),
                Ok(None) => return Err(err("the watch ended".into())),
                Ok(Some(Err(e))) => {
                    // Refusals (403, 401) do not heal by retrying: report them as API failures.
                    // Anything else (a dropped connection, a 5xx) is retried with backoff.
                    let refused = match &e {
                        watcher::Error::InitialListFailed(kube::Error::Api(s))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        | watcher::Error::WatchFailed(kube::Error::Api(s)) => {
                            matches!(s.code, 401 | 403).then(|| (s.code, s.message.clone()))
                        }
                        watcher::Error::WatchError(s) if matches!(s.code, 401 | 403) => {
                            Some((s.code, s.message.clone()))
                        }
                        _ => None,
                    };
                    if let Some((code, message)) = refused {
                        let verb = if matches!(e, watcher::Error::InitialListFailed(_)) {
                            "list"
                        } else {
                            "watch"
                        };
                        return Err(RolloutError::Refused(api_failure(
                            verb,
                            &self.namespace,
                            &target.name,
                            kube::Error::Api(Box::new(
                                kube::core::Status::failure(&message, "Forbidden").with_code(code),
                            )),
                        )));
                    }
                    tracing::debug!(deployment = %target.name, "watch error, retrying: {e}");
                    continue;
                }
                Ok(Some(Ok(event))) => event,
            };
            let (obj, deleted) = match event {
                watcher::Event::Apply(d) | watcher::Event::InitApply(d) => (d, false),
                watcher::Event::Delete(d) => (d, true),
                watcher::Event::Init | watcher::Event::InitDone => continue,
            };
            let uid = obj.metadata.uid.clone().unwrap_or_default();
            if uid != target.uid {
                return Err(RolloutError::Recreated {
                    namespace: self.namespace.clone(),
                    name: target.name.clone(),
                    old: target.uid.clone(),
                    new: uid,
                });
            }
            if deleted {
                return Err(RolloutError::Deleted {
                    namespace: self.namespace.clone(),
                    name: target.name.clone(),
                });
            }
            match rollout_state(&obj, target.generation) {
                RolloutState::Done => {
                    last.lock()
                        .unwrap()
                        .insert(target.name.clone(), "rolled out".into());
                    return Ok(Some(started.elapsed()));
                }
                RolloutState::Failed(message) => {
                    return Err(RolloutError::Failed {
                        namespace: self.namespace.clone(),
                        name: target.name.clone(),
                        message,
                    });
                }
                RolloutState::Progressing(message) => {
                    last.lock().unwrap().insert(target.name.clone(), message);
                }
            }
        }
    }
}
