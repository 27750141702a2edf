//! When to restart a workload that does not hot-reload, and what can go wrong with it.
//!
//! The restart is what `kubectl rollout restart` does (a `restartedAt` pod-template annotation),
//! plus a certgen annotation with the fingerprint of the Secrets' contents, so repeating a run
//! never rolls a workload twice for the same certificates. The patch carries the UID certgen
//! saw, and the wait is bound to that UID and to the generation the patch produced: a
//! workload deleted and recreated under the same name is an error, never followed.
//!
//! When a rollout is done is each kind's rule in [`crate::workload`];
//! [`crate::k8s::Workloads::wait`] wraps it in a watch with a deadline. This module makes no
//! API call: the restart's patch and the watch are the Kubernetes adapter's ([`crate::k8s`]).

use sha2::{Digest, Sha256};

use crate::pki::hex;
use crate::store::StoreError;
pub use crate::workload::RolloutState;
use crate::workload::{Kind, WorkloadView};

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

/// A workload to restart or that was restarted, as the wait needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
    pub uid: String,
    pub generation: i64,
}

impl Target {
    /// How progress lines and reports name it: `statefulset etcd`.
    pub fn label(&self) -> String {
        format!("{} {}", self.kind.noun(), self.name)
    }
}

/// What happened to one workload.
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

/// Decides whether a workload needs a restart for content fingerprint `fp`.
///
/// A workload that certgen never restarted (no fingerprint) is up to date only if it was
/// created after the last write to what it mounts: otherwise a run may have written the Secrets
/// and stopped before restarting it, and its pods may still hold the previous contents.
pub fn restart_needed(
    d: &WorkloadView,
    fp: &str,
    mounts_written: bool,
    mounts_last_written: Option<time::OffsetDateTime>,
) -> RestartAction {
    let recorded = d.fingerprint.as_ref();
    let created = d.created;
    // Both on the API server's clock: the creation time truncated to the second, the write
    // time rounded up to the next one (so a workload created in the same second as the
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

/// A problem with one workload that the report names (`kind` as kubectl writes it:
/// `statefulset ns/name`).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(
        "{} {namespace}/{name} is paused; resume it (kubectl rollout resume) or remove it from the consumers", kind.noun()
    )]
    Paused {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error(
        "{} {namespace}/{name} was deleted and recreated (uid {old} -> {new}); not following the new object", kind.noun()
    )]
    Recreated {
        kind: Kind,
        namespace: String,
        name: String,
        old: String,
        new: String,
    },
    #[error("{} {namespace}/{name} was deleted while certgen waited for its rollout", kind.noun())]
    Deleted {
        kind: Kind,
        namespace: String,
        name: String,
    },
    #[error("{} {namespace}/{name}: {message}", kind.noun())]
    Failed {
        kind: Kind,
        namespace: String,
        name: String,
        message: String,
    },
    /// The API server refused the request; exits 5 like every refused API call.
    #[error(transparent)]
    Refused(StoreError),
    #[error("the watch on {} {namespace}/{name} failed: {message}", kind.noun())]
    Watch {
        kind: Kind,
        namespace: String,
        name: String,
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::RolloutStatus;

    #[test]
    fn restarts_are_keyed_by_fingerprint() {
        let with = |fp: Option<&str>| WorkloadView {
            kind: Kind::StatefulSet,
            name: "d".into(),
            uid: "u".into(),
            created: Some(time::macros::datetime!(2026-01-01 00:00:00 UTC)),
            fingerprint: fp.map(str::to_string),
            paused: false,
            status: RolloutStatus::default(),
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
