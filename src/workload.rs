//! The workload kinds a consumer may be (Deployment, StatefulSet, DaemonSet), and what "rolled
//! out" means for each: one small rule per kind, after `kubectl rollout status`
//! (`k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go`, v0.36.3), over a kind-neutral
//! [`RolloutStatus`].
//!
//! This module is pure and names no Kubernetes client type: the adapter
//! ([`crate::k8s::Workloads`]) reads each kind's object into a [`WorkloadView`], and everything
//! else (config, restarts, report, RBAC review) speaks of a [`Kind`]. Adding a kind is a variant
//! here with its rule, and its conversion in the adapter.
//!
//! Where certgen is stricter than kubectl, it is because a pod left on the old template keeps
//! the old certificates: a StatefulSet partition above 0 and the `OnDelete` strategy leave pods
//! that a restart does not replace. kubectl calls a partitioned rollout complete and refuses to
//! watch `OnDelete`; certgen reports both as failed rollouts, naming the pods left and the fix,
//! and calls an `OnDelete` workload rolled out once every pod runs the current template.

use std::fmt;

/// A kind of workload certgen restarts and waits for (all in the `apps/v1` API group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
pub enum Kind {
    #[default]
    Deployment,
    StatefulSet,
    DaemonSet,
}

impl Kind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Kind; 3] = [Kind::Deployment, Kind::StatefulSet, Kind::DaemonSet];

    /// The kind as Kubernetes writes it (`StatefulSet`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
        }
    }

    /// The kind as `kubectl` and messages write it (`statefulset`).
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Deployment => "deployment",
            Kind::StatefulSet => "statefulset",
            Kind::DaemonSet => "daemonset",
        }
    }

    /// The API resource (`statefulsets`), for RBAC and error messages.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Deployment => "deployments",
            Kind::StatefulSet => "statefulsets",
            Kind::DaemonSet => "daemonsets",
        }
    }

    /// The API group of every kind here.
    pub fn group(self) -> &'static str {
        "apps"
    }

    /// The `apiVersion` of its objects (for Events' `regarding`).
    pub fn api_version(self) -> &'static str {
        "apps/v1"
    }

    /// The kind named `s` as Kubernetes writes it; `None` for any other word.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether its rollout is done, judged no earlier than `generation` (the one certgen's
    /// restart produced): this kind's rule.
    pub fn rollout_state(self, s: &RolloutStatus, generation: i64) -> RolloutState {
        let want = generation.max(s.generation);
        if s.observed_generation < want || s.observed_generation == 0 {
            return RolloutState::Progressing(format!(
                "waiting for the controller to observe generation {want}"
            ));
        }
        match self {
            Kind::Deployment => deployment(s),
            Kind::StatefulSet => stateful_set(s),
            Kind::DaemonSet => daemon_set(s),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a rollout stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutState {
    Done,
    Progressing(String),
    Failed(String),
}

/// How a workload replaces its pods when its template changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// The controller replaces them (Deployment's RollingUpdate or Recreate, the others'
    /// RollingUpdate).
    #[default]
    Replace,
    /// Pods take the new template only when someone deletes them (StatefulSet, DaemonSet).
    OnDelete,
}

/// What the rollout rules read, whatever the kind: spec and status fields as plain numbers,
/// `0` where the API left a count out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutStatus {
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// `spec.replicas` (Deployment, StatefulSet; the API defaults it to 1).
    pub replicas: i32,
    pub strategy: Strategy,
    /// StatefulSet: `spec.updateStrategy.rollingUpdate.partition`.
    pub partition: i32,
    /// Deployment, StatefulSet: `status.updatedReplicas`; DaemonSet: `updatedNumberScheduled`.
    pub updated: i32,
    /// The pods that exist, old and new: Deployment and StatefulSet `status.replicas` (not
    /// terminating ones), DaemonSet `currentNumberScheduled`.
    pub current: i32,
    /// StatefulSet: `status.readyReplicas`.
    pub ready: i32,
    /// Deployment: `status.availableReplicas`; DaemonSet: `numberAvailable`.
    pub available: i32,
    /// DaemonSet: `status.desiredNumberScheduled`.
    pub desired: i32,
    /// StatefulSet: `status.currentRevision` and `status.updateRevision`.
    pub current_revision: String,
    pub update_revision: String,
    /// Deployment: the Progressing condition's message when its reason is
    /// `ProgressDeadlineExceeded`.
    pub deadline_exceeded: Option<String>,
}

/// A workload as the restart and wait see it (plain data read by the adapter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadView {
    pub kind: Kind,
    pub name: String,
    pub uid: String,
    /// `metadata.creationTimestamp` (the API server's clock, whole seconds).
    pub created: Option<time::OffsetDateTime>,
    /// The restart fingerprint its pod template carries (`certgen.dev/restart-fingerprint`).
    pub fingerprint: Option<String>,
    /// A paused Deployment (`spec.paused`): it would not roll.
    pub paused: bool,
    pub status: RolloutStatus,
}

/// kubectl's DeploymentStatusViewer: the progress deadline fails, then every replica must be
/// updated and available with no old replica left.
fn deployment(s: &RolloutStatus) -> RolloutState {
    if let Some(m) = &s.deadline_exceeded {
        return RolloutState::Failed(format!("progress deadline exceeded: {m}"));
    }
    if s.updated < s.replicas {
        return RolloutState::Progressing(format!(
            "{} of {} updated replicas",
            s.updated, s.replicas
        ));
    }
    if s.current > s.updated {
        return RolloutState::Progressing(format!(
            "{} old replicas pending termination",
            s.current - s.updated
        ));
    }
    if s.available < s.updated {
        return RolloutState::Progressing(format!(
            "{} of {} updated replicas available",
            s.available, s.updated
        ));
    }
    RolloutState::Done
}

/// kubectl's StatefulSetStatusViewer (every replica ready; with a RollingUpdate, the replicas
/// above the partition updated; the update revision current), except that a partition above 0
/// fails: the pods below it keep the old template, and so the old certificates.
fn stateful_set(s: &RolloutStatus) -> RolloutState {
    if s.strategy == Strategy::OnDelete {
        return on_delete(s.updated, s.replicas, s.current, s.ready);
    }
    if s.partition > 0 && s.replicas > 0 {
        let kept = s.partition.min(s.replicas);
        return RolloutState::Failed(format!(
            "its rollingUpdate partition is {}: {kept} of {} pods (the ordinals below it) keep the old pod template and the old certificates; set the partition to 0 for the rotation, or delete those pods",
            s.partition, s.replicas
        ));
    }
    if s.ready < s.replicas {
        return RolloutState::Progressing(format!("{} of {} pods ready", s.ready, s.replicas));
    }
    if s.updated < s.replicas {
        return RolloutState::Progressing(format!("{} of {} pods updated", s.updated, s.replicas));
    }
    if s.replicas > 0 && s.current_revision != s.update_revision {
        return RolloutState::Progressing(format!(
            "rolling update to revision {} not complete ({} pods updated)",
            s.update_revision, s.updated
        ));
    }
    RolloutState::Done
}

/// kubectl's DaemonSetStatusViewer: every scheduled pod updated, then available.
fn daemon_set(s: &RolloutStatus) -> RolloutState {
    if s.strategy == Strategy::OnDelete {
        return on_delete(s.updated, s.desired, s.current, s.available);
    }
    if s.updated < s.desired {
        return RolloutState::Progressing(format!("{} of {} pods updated", s.updated, s.desired));
    }
    if s.available < s.desired {
        return RolloutState::Progressing(format!(
            "{} of {} updated pods available",
            s.available, s.desired
        ));
    }
    RolloutState::Done
}

/// `OnDelete`: kubectl refuses to watch it ("rollout status is only available for
/// RollingUpdate strategy type"). Its pods never take a new template by themselves, so an old
/// pod still there (of `existing`, the ones not `updated`) is a failure naming the fix; pods
/// being created again after someone deleted them are progress; once every pod is updated and
/// ready, it is done.
fn on_delete(updated: i32, want: i32, existing: i32, ready: i32) -> RolloutState {
    let old = existing - updated;
    if old > 0 {
        return RolloutState::Failed(format!(
            "it uses the OnDelete update strategy: {old} of {want} pods keep the old pod template (and the old certificates) until deleted, which certgen does not do; delete them (kubectl delete pod), or switch to RollingUpdate"
        ));
    }
    if updated < want {
        return RolloutState::Progressing(format!("{updated} of {want} pods updated"));
    }
    if ready < want {
        return RolloutState::Progressing(format!("{ready} of {want} updated pods ready"));
    }
    RolloutState::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use RolloutState::*;

    fn progressing(state: RolloutState, want: &str) {
        match state {
            Progressing(m) => assert!(m.contains(want), "{m:?} should contain {want:?}"),
            other => panic!("expected progressing ({want}), got {other:?}"),
        }
    }

    fn failed(state: RolloutState, want: &str) {
        match state {
            Failed(m) => assert!(m.contains(want), "{m:?} should contain {want:?}"),
            other => panic!("expected failed ({want}), got {other:?}"),
        }
    }

    fn observed(generation: i64) -> RolloutStatus {
        RolloutStatus {
            generation,
            observed_generation: generation,
            ..RolloutStatus::default()
        }
    }

    #[test]
    fn kinds_parse_as_kubernetes_writes_them() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.as_str()), Some(k));
            assert_eq!(k.resource(), format!("{}s", k.noun()));
        }
        assert_eq!(Kind::parse("statefulset"), None);
        assert_eq!(Kind::parse("ReplicaSet"), None);
        assert_eq!(Kind::default(), Kind::Deployment);
    }

    /// kubectl's TestDeploymentStatusViewerStatus cases (rollout_status_test.go), and the
    /// generation certgen's own patch produced.
    #[test]
    fn deployments_follow_kubectls_rules() {
        let d = |gen_, obs, replicas, updated, current, available| RolloutStatus {
            generation: gen_,
            observed_generation: obs,
            replicas,
            updated,
            current,
            available,
            ..RolloutStatus::default()
        };
        let k = Kind::Deployment;
        // generation not yet observed
        progressing(
            k.rollout_state(&d(2, 1, 1, 1, 1, 1), 2),
            "observe generation 2",
        );
        // kubectl: 0 out of 1 new replicas have been updated
        progressing(k.rollout_state(&d(1, 1, 1, 0, 1, 1), 1), "0 of 1 updated");
        // kubectl: 1 old replicas are pending termination
        progressing(k.rollout_state(&d(1, 1, 1, 1, 2, 1), 1), "1 old replicas");
        // kubectl: 0 of 1 updated replicas are available
        progressing(
            k.rollout_state(&d(1, 1, 1, 1, 1, 0), 1),
            "0 of 1 updated replicas available",
        );
        assert_eq!(k.rollout_state(&d(1, 1, 1, 1, 1, 1), 1), Done);
        // Right after a restart the old status still looks complete: the generation the patch
        // produced decides.
        progressing(
            k.rollout_state(&d(2, 2, 2, 2, 2, 2), 3),
            "observe generation 3",
        );
        assert_eq!(
            k.rollout_state(&d(1, 1, 0, 0, 0, 0), 1),
            Done,
            "zero replicas"
        );
        let mut late = d(2, 2, 2, 1, 2, 1);
        late.deadline_exceeded = Some("ReplicaSet \"d-1\" has timed out progressing.".into());
        failed(k.rollout_state(&late, 2), "timed out");
    }

    /// kubectl's TestStatefulSetStatusViewerStatus cases, and certgen's stricter partition.
    #[test]
    fn stateful_sets_follow_kubectls_rules_except_partitions() {
        let k = Kind::StatefulSet;
        let s = |replicas, ready, updated, current_rev: &str, update_rev: &str| RolloutStatus {
            replicas,
            ready,
            updated,
            current_revision: current_rev.into(),
            update_revision: update_rev.into(),
            ..observed(3)
        };
        // kubectl: "Waiting for statefulset spec update to be observed..." (observed 0 too)
        let mut unobserved = s(3, 3, 3, "r1", "r1");
        unobserved.observed_generation = 2;
        progressing(k.rollout_state(&unobserved, 3), "observe generation 3");
        unobserved.observed_generation = 0;
        unobserved.generation = 0;
        progressing(k.rollout_state(&unobserved, 0), "observe generation 0");
        // kubectl: "Waiting for 2 pods to be ready..."
        progressing(
            k.rollout_state(&s(3, 1, 3, "r1", "r2"), 3),
            "1 of 3 pods ready",
        );
        // kubectl's partitioned branch with partition 0: updated below replicas waits
        progressing(
            k.rollout_state(&s(3, 3, 2, "r1", "r2"), 3),
            "2 of 3 pods updated",
        );
        // revisions differ: the controller has not completed the rolling update
        progressing(k.rollout_state(&s(3, 3, 3, "r1", "r2"), 3), "revision r2");
        assert_eq!(k.rollout_state(&s(3, 3, 3, "r2", "r2"), 3), Done);
        assert_eq!(
            k.rollout_state(&s(0, 0, 0, "r1", "r2"), 3),
            Done,
            "zero replicas"
        );
        // kubectl: "partitioned roll out complete: 1 new pods have been updated..." is done
        // there; here the two pods below the partition keep the old certificates.
        let mut partitioned = s(3, 3, 1, "r1", "r2");
        partitioned.partition = 2;
        failed(
            k.rollout_state(&partitioned, 3),
            "partition is 2: 2 of 3 pods",
        );
        // kubectl: "rollout status is only available for RollingUpdate strategy type"
        let mut on_delete = s(3, 3, 1, "r1", "r2");
        on_delete.strategy = Strategy::OnDelete;
        on_delete.current = 3;
        failed(
            k.rollout_state(&on_delete, 3),
            "OnDelete update strategy: 2 of 3 pods",
        );
        // Its old pods deleted, two created again so far.
        on_delete.current = 2;
        on_delete.updated = 2;
        progressing(k.rollout_state(&on_delete, 3), "2 of 3 pods updated");
        on_delete.current = 3;
        on_delete.updated = 3;
        on_delete.ready = 2;
        progressing(k.rollout_state(&on_delete, 3), "2 of 3 updated pods ready");
        on_delete.ready = 3;
        assert_eq!(
            k.rollout_state(&on_delete, 3),
            Done,
            "its pods were deleted"
        );
    }

    /// kubectl's TestDaemonSetStatusViewerStatus cases.
    #[test]
    fn daemon_sets_follow_kubectls_rules() {
        let k = Kind::DaemonSet;
        let s = |desired, updated, available| RolloutStatus {
            desired,
            updated,
            available,
            ..observed(2)
        };
        let mut unobserved = s(1, 1, 1);
        unobserved.observed_generation = 1;
        progressing(k.rollout_state(&unobserved, 2), "observe generation 2");
        // kubectl: "0 out of 1 new pods have been updated..."
        progressing(k.rollout_state(&s(1, 0, 0), 2), "0 of 1 pods updated");
        // kubectl: "1 of 2 updated pods are available..."
        progressing(
            k.rollout_state(&s(2, 2, 1), 2),
            "1 of 2 updated pods available",
        );
        assert_eq!(k.rollout_state(&s(2, 2, 2), 2), Done);
        assert_eq!(k.rollout_state(&s(0, 0, 0), 2), Done, "no node to run on");
        // kubectl refuses OnDelete; certgen says which pods keep the old template.
        let mut on_delete = s(2, 0, 2);
        on_delete.strategy = Strategy::OnDelete;
        on_delete.current = 2;
        failed(
            k.rollout_state(&on_delete, 2),
            "OnDelete update strategy: 2 of 2 pods",
        );
        on_delete.updated = 2;
        assert_eq!(k.rollout_state(&on_delete, 2), Done);
    }
}
