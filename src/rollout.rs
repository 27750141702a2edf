//! When to restart a Deployment that does not hot-reload, and when its rollout is done.
//!
//! The restart is what `kubectl rollout restart` does (a `restartedAt` pod-template annotation),
//! plus a certgen annotation with the fingerprint of the Secrets' contents, so repeating a run
//! never rolls a Deployment twice for the same certificates. The patch carries the UID certgen
//! saw, and the wait is bound to that UID and to the generation the patch produced: a
//! Deployment deleted and recreated under the same name is an error, never followed.
//!
//! [`rollout_state`] is the pure predicate (kubectl's rollout-status rules);
//! [`crate::k8s::Deployments::wait`] wraps it in a watch with a deadline. This module makes no
//! API call: the restart's patch and the watch are the Kubernetes adapter's ([`crate::k8s`]).

use k8s_openapi::api::apps::v1::Deployment;
use sha2::{Digest, Sha256};

use crate::pki::hex;
use crate::store::StoreError;

/// The pod-template annotation `kubectl rollout restart` sets.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// The pod-template annotation recording which Secret contents a restart was for.
pub const FINGERPRINT: &str = "certgen.dev/restart-fingerprint";

/// The fingerprint of the contents of the Secrets a consumer mounts: `(name, digest)` pairs.
pub fn fingerprint<'a>(mounts: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut pairs: Vec<(&str, &str)> = mounts.into_iter().collect();
    pairs.sort();
    let mut h = Sha256::new();
    for (name, digest) in pairs {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(digest.as_bytes());
        h.update([0]);
    }
    hex(&h.finalize())[..16].to_string()
}

/// Where a rollout stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutState {
    Done,
    Progressing(String),
    Failed(String),
}

/// kubectl's rollout-status rules, judged no earlier than `generation` (the one our patch
/// produced): the controller must have observed it, the progress deadline must not be exceeded,
/// and every replica must be updated and available with no old replica left.
pub fn rollout_state(d: &Deployment, generation: i64) -> RolloutState {
    let observed = d
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or(0);
    let want_generation = generation.max(d.metadata.generation.unwrap_or(0));
    if observed < want_generation {
        return RolloutState::Progressing(format!(
            "waiting for the controller to observe generation {want_generation}"
        ));
    }
    let Some(status) = &d.status else {
        return RolloutState::Progressing("no status yet".into());
    };
    let deadline = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing");
    if let Some(c) = deadline
        && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    {
        return RolloutState::Failed(format!(
            "progress deadline exceeded: {}",
            c.message.as_deref().unwrap_or("no message")
        ));
    }
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let current = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < replicas {
        return RolloutState::Progressing(format!("{updated} of {replicas} updated replicas"));
    }
    if current > updated {
        return RolloutState::Progressing(format!(
            "{} old replicas pending termination",
            current - updated
        ));
    }
    if available < updated {
        return RolloutState::Progressing(format!(
            "{available} of {updated} updated replicas available"
        ));
    }
    RolloutState::Done
}

/// A Deployment to restart or that was restarted, as the wait needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub uid: String,
    pub generation: i64,
}

/// What happened to one Deployment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartAction {
    /// Patched now.
    Restarted,
    /// Its pod template already carries this fingerprint.
    AlreadyRestarted,
    /// Nothing it mounts changed.
    UpToDate,
}

/// Decides whether a Deployment needs a restart for content fingerprint `fp`.
///
/// A Deployment that certgen never restarted (no fingerprint) is up to date only if it was
/// created after the last write to what it mounts: otherwise a run may have written the Secrets
/// and stopped before restarting it, and its pods may still hold the previous contents.
pub fn restart_needed(
    d: &Deployment,
    fp: &str,
    mounts_written: bool,
    mounts_last_written: Option<time::OffsetDateTime>,
) -> RestartAction {
    let recorded = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(FINGERPRINT));
    let created = d
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t.0.as_second()).ok());
    restart_decision(
        recorded.map(String::as_str),
        created,
        fp,
        mounts_written,
        mounts_last_written,
    )
}

/// [`restart_needed`] over plain values: the fingerprint the pod template records, when the
/// workload was created (the API server's clock, whole seconds).
pub fn restart_decision(
    recorded: Option<&str>,
    created: Option<time::OffsetDateTime>,
    fp: &str,
    mounts_written: bool,
    mounts_last_written: Option<time::OffsetDateTime>,
) -> RestartAction {
    // Both on the API server's clock: the creation time truncated to the second, the write
    // time rounded up to the next one (so a Deployment created in the same second as the
    // write counts as older: a needless restart rather than a missed one).
    let predates_write = match (created, mounts_last_written) {
        (Some(c), Some(w)) => c < w,
        (None, Some(_)) => true,
        (_, None) => false,
    };
    match recorded {
        Some(r) if r == fp => RestartAction::AlreadyRestarted,
        // A previous run changed the Secrets but did not get to restart it.
        Some(_) => RestartAction::Restarted,
        None if mounts_written || predates_write => RestartAction::Restarted,
        None => RestartAction::UpToDate,
    }
}

/// A problem with one Deployment that the report names.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(
        "deployment {namespace}/{name} is paused; resume it (kubectl rollout resume) or remove it from the consumers"
    )]
    Paused { namespace: String, name: String },
    #[error(
        "deployment {namespace}/{name} was deleted and recreated (uid {old} -> {new}); not following the new object"
    )]
    Recreated {
        namespace: String,
        name: String,
        old: String,
        new: String,
    },
    #[error("deployment {namespace}/{name} was deleted while certgen waited for its rollout")]
    Deleted { namespace: String, name: String },
    #[error("deployment {namespace}/{name}: {message}")]
    Failed {
        namespace: String,
        name: String,
        message: String,
    },
    /// The API server refused the request; exits 5 like every refused API call.
    #[error(transparent)]
    Refused(StoreError),
    #[error("the watch on deployment {namespace}/{name} failed: {message}")]
    Watch {
        namespace: String,
        name: String,
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(value: serde_json::Value) -> Deployment {
        serde_json::from_value(value).unwrap()
    }

    fn d(
        generation: i64,
        observed: i64,
        replicas: i32,
        updated: i32,
        current: i32,
        available: i32,
    ) -> Deployment {
        deployment(json!({
            "metadata": {"name": "d", "generation": generation, "uid": "u"},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": {
                "observedGeneration": observed,
                "updatedReplicas": updated,
                "replicas": current,
                "availableReplicas": available,
            }
        }))
    }

    #[test]
    fn rollout_state_follows_kubectls_rules() {
        use RolloutState::*;
        let cases = [
            (d(2, 1, 2, 2, 2, 2), 2, "observe generation 2"),
            (d(2, 2, 2, 1, 3, 2), 2, "1 of 2 updated"),
            (d(2, 2, 2, 2, 3, 2), 2, "1 old replicas pending"),
            (d(2, 2, 2, 2, 2, 1), 2, "1 of 2 updated replicas available"),
        ];
        for (dep, generation, want) in cases {
            match rollout_state(&dep, generation) {
                Progressing(msg) => assert!(msg.contains(want), "{msg} vs {want}"),
                other => panic!("expected progressing ({want}), got {other:?}"),
            }
        }
        assert_eq!(rollout_state(&d(2, 2, 2, 2, 2, 2), 2), Done);
        // Right after a restart the old status still looks complete: the generation our patch
        // produced decides (is_deployment_completed alone would be wrong here).
        assert!(matches!(
            rollout_state(&d(2, 2, 2, 2, 2, 2), 3),
            Progressing(_)
        ));
        assert_eq!(
            rollout_state(&d(1, 1, 0, 0, 0, 0), 1),
            Done,
            "zero replicas is done"
        );
    }

    #[test]
    fn a_progress_deadline_fails_fast() {
        let mut dep = d(2, 2, 2, 1, 2, 1);
        dep.status.as_mut().unwrap().conditions = Some(vec![
            serde_json::from_value(json!({
                "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                "message": "ReplicaSet \"d-1\" has timed out progressing."
            }))
            .unwrap(),
        ]);
        assert!(
            matches!(rollout_state(&dep, 2), RolloutState::Failed(m) if m.contains("timed out"))
        );
    }

    #[test]
    fn restarts_are_keyed_by_fingerprint() {
        let with = |fp: Option<&str>| {
            let annotations = fp.map(|f| json!({FINGERPRINT: f})).unwrap_or(json!({}));
            deployment(json!({
                "metadata": {"name": "d", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"selector": {}, "template": {"metadata": {"annotations": annotations}}}
            }))
        };
        let before = Some(time::macros::datetime!(2026-01-01 00:00:00 UTC));
        let after = Some(time::macros::datetime!(2026-01-01 00:00:01 UTC));
        assert_eq!(
            restart_needed(&with(Some("abc")), "abc", true, after),
            RestartAction::AlreadyRestarted
        );
        assert_eq!(
            restart_needed(&with(Some("old")), "abc", false, before),
            RestartAction::Restarted
        );
        assert_eq!(
            restart_needed(&with(None), "abc", true, after),
            RestartAction::Restarted
        );
        // Created after the last write: its pods mount what is stored.
        assert_eq!(
            restart_needed(&with(None), "abc", false, before),
            RestartAction::UpToDate
        );
        // Written after it was created, and never restarted for it: a run stopped between the
        // write and the restart.
        assert_eq!(
            restart_needed(&with(None), "abc", false, after),
            RestartAction::Restarted
        );
        assert_eq!(
            restart_needed(&with(None), "abc", false, None),
            RestartAction::UpToDate
        );
        assert_eq!(
            fingerprint([("a", "1"), ("b", "2")]),
            fingerprint([("b", "2"), ("a", "1")])
        );
        assert_ne!(fingerprint([("a", "1")]), fingerprint([("a", "2")]));
    }
}
