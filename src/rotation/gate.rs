//! Gates that open on evidence: pushed propagation ("pokes") and what it proves.
//!
//! A kubelet refreshes a pod's Secret volumes when it syncs the pod: every `syncFrequency`
//! (1 min by default) plus up to 50 % jitter, and also whenever the pod object changes. So
//! after each step's writes certgen annotates every running pod that mounts a changed Secret
//! (its own metadata, never the template: nothing restarts), and the kubelet re-projects the
//! Secret within half a second (measured: CONTRIBUTING.md, "Pushed propagation"). The code
//! path, in Kubernetes v1.36: the kubelet's pod config sees an annotation change as an update
//! (`pkg/kubelet/config/config.go`, `podsDifferSemantically`), the pod worker syncs the pod,
//! `WaitForAttachAndMount` calls `ReprocessPod`, and the volume populator marks every volume
//! whose plugin `RequiresRemount` (Secret, projected, ConfigMap, downward API) for a remount,
//! which reads the Secret from the kubelet's Secret manager again (its watch, or with the
//! `Cache` strategy a fresh GET, since the pod update re-registers the pod and invalidates the
//! cached object: `util/manager/cache_based_manager.go`, `AddReference`).
//!
//! A gate then opens once every pod that mounts a Secret written since the last gate
//! - was poked after that write and [`POKE_SETTLE`] has passed since the poke was answered, or
//! - was created after the write (it mounted the new bytes), or is gone, or
//! - (restart-only consumers) is a new pod of the rollout certgen started and waited for;
//!
//! and a `caBundle` target written meanwhile was written [`POKE_SETTLE`] ago (the API server
//! loads webhook configurations through an informer). A pod that could not be poked (403, an
//! API error, recreated under the same name), a terminating pod (its kubelet no longer syncs
//! its volumes) and an old pod of a restart-only consumer prove nothing: they keep the full
//! `--propagation-delay`, or open the gate by going away. So a lost poke never opens a gate
//! early. Probes (`consumers.rs`) and rollouts remain evidence as before.
//!
//! This module decides (pure functions over plain values, unit-tested) and drives the pokes
//! through the Kubernetes adapter ([`crate::k8s::Pods`]); the planner only learns that a gate
//! is open for a given stored state (`plan::Known::gate_waited`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use super::step::Outcome;
use crate::config::{Config, Kind, Reload, Workload};
use crate::error::Error;
use crate::outside::{PodView, PodsApi, PokeAnswer, Workloads};
use crate::report::PodReport;
use crate::store::StoreError;

/// How long after a poke was answered certgen takes the pod's kubelet to have re-projected
/// its Secrets: the largest delay measured on a real kubelet (CONTRIBUTING.md, "Pushed
/// propagation": 0.51 s over 64 samples, at `syncFrequency` 1m and 10s) plus a margin for a
/// busy node (a pod worker still in a previous sync, a slow disk): 5 s in all.
pub const POKE_SETTLE: Duration = Duration::from_secs(5);

/// How often a gate waiting on evidence looks at the pods again, and says what it waits for.
const RECHECK: Duration = Duration::from_secs(1);
const PROGRESS: Duration = Duration::from_secs(10);

/// A write to a managed Secret, as the evidence needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    /// Which of this run's steps wrote it (0: an earlier run).
    epoch: u64,
    /// A bound the write landed before, on the store's clock.
    by: OffsetDateTime,
}

/// A poke that landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Poked {
    /// When its answer came, on this process's monotonic clock.
    at: Instant,
    /// The epoch of this run's writes it came after.
    epoch: u64,
}

/// What this run has pushed and learned: a reducer over its steps and gates.
#[derive(Debug, Default)]
pub struct Evidence {
    epoch: u64,
    writes: BTreeMap<String, Written>,
    /// Pods (by UID) whose poke landed.
    poked: BTreeMap<String, Poked>,
    /// Pods (by UID) whose poke was lost, and why: they wait for the timer.
    lost: BTreeMap<String, String>,
    /// The pods' report lines.
    pub pods: Vec<PodReport>,
    /// Why pokes are off for the rest of the run, once the API server refused a pod request
    /// (403): the report line.
    pub refused: Option<String>,
    /// Which consumer owns which workload, once resolved.
    owners: Option<Owners>,
    /// The last write to a `caBundle` target in this run (monotonic clock).
    other: Option<Instant>,
    /// The last write to a `caBundle` target as stored (store clock; earlier runs' too).
    other_stored: Option<OffsetDateTime>,
    /// Each managed Secret's digest as stored now (restart fingerprints are made of them).
    digests: BTreeMap<String, String>,
}

/// Workload (kind, name) → (consumer name, reload, the Secrets it declares it mounts).
type Owners = BTreeMap<(Kind, String), (String, Reload, BTreeSet<String>)>;

/// The verdict of a gate on evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every pod holds what was written.
    Open,
    /// Not yet: look again at `recheck` (pokes settling, pods terminating). `waiting` says
    /// which pods, for the progress line.
    Wait {
        recheck: Instant,
        waiting: Vec<String>,
    },
    /// Only the timer can open it (a pod that could not be poked, or an old pod of a
    /// restart-only consumer): `why` names them.
    Timer { why: Vec<String> },
}

impl Evidence {
    /// Records a step's writes (TLS Secrets; `by` is a store-clock bound they landed before).
    pub fn wrote<'a>(&mut self, names: impl IntoIterator<Item = &'a String>, by: OffsetDateTime) {
        self.epoch += 1;
        for n in names {
            self.writes.insert(
                n.clone(),
                Written {
                    epoch: self.epoch,
                    by,
                },
            );
        }
    }

    /// Records a write to a `caBundle` target, now.
    pub fn wrote_other(&mut self) {
        self.other = Some(Instant::now());
    }

    /// What is stored now: write times (see [`Evidence::stored`]) and contents' digests.
    fn observe(&mut self, outcome: &Outcome) {
        self.stored(&outcome.written_at);
        self.digests = outcome.digests.clone();
    }

    /// Writes as stored (`written_at`: the stored write times, rounded up): those of earlier
    /// runs, and any other writer's since this run last looked. A stored time later than every
    /// write this run knows of for that Secret is a write it did not make: only pokes sent
    /// after now count for it.
    fn stored(&mut self, written_at: &BTreeMap<String, OffsetDateTime>) {
        for (n, at) in written_at {
            if self.writes.get(n).is_some_and(|w| *at <= w.by) {
                continue;
            }
            self.epoch += 1;
            self.writes.insert(
                n.clone(),
                Written {
                    epoch: self.epoch,
                    by: *at,
                },
            );
        }
    }

    /// The Secrets of `pod` whose last write its kubelet may not have projected yet (the timer
    /// alone does not cover it at `now`, it was not created after the write, and it is not a
    /// pod of the rollout certgen started for what is stored).
    fn pending<'a>(
        &'a self,
        pod: &'a PodView,
        now: OffsetDateTime,
        delay: Duration,
    ) -> impl Iterator<Item = (&'a String, Written)> + 'a {
        let restarted = self.restarted_for_stored(pod);
        pod.secrets.iter().filter_map(move |s| {
            let w = *self.writes.get(s)?;
            let timer = w.by.checked_add(time::Duration::try_from(delay).ok()?)?;
            let created_after = pod.created.is_some_and(|c| c >= w.by);
            (now < timer && !created_after && !restarted).then_some((s, w))
        })
    }

    /// Whether `pod` comes from the restart certgen made for what its restart-only consumer
    /// mounts as stored now: its template's restart fingerprint is that of the current
    /// contents (the patch that set it came after their writes, so the pod was created after
    /// them, whatever the seconds of its creation time say).
    fn restarted_for_stored(&self, pod: &PodView) -> bool {
        let Some(fp) = &pod.restart_fingerprint else {
            return false;
        };
        let owner = pod
            .owner
            .as_ref()
            .and_then(|d| self.owners.as_ref()?.get(d));
        owner.is_some_and(|(_, reload, mounts)| {
            *reload == Reload::Restart
                && *fp
                    == crate::rollout::fingerprint(mounts.iter().map(|m| {
                        (
                            m.as_str(),
                            self.digests.get(m).map(String::as_str).unwrap_or(""),
                        )
                    }))
        })
    }

    /// Whether `pod` belongs to a restart-only consumer (its pods load at start only).
    fn restart_only(&self, pod: &PodView) -> bool {
        let owners = self.owners.as_ref();
        pod.owner
            .as_ref()
            .and_then(|d| owners?.get(d))
            .is_some_and(|(_, reload, _)| *reload == Reload::Restart)
    }

    /// The pods to poke now: running, mounting a Secret written since they were created and
    /// not poked since that write; hot-reloading (a restart-only pod loads at start only).
    pub fn due<'a>(
        &'a self,
        pods: &'a [PodView],
        now: OffsetDateTime,
        delay: Duration,
    ) -> Vec<&'a PodView> {
        pods.iter()
            .filter(|p| !p.finished && !p.terminating && !self.restart_only(p))
            .filter(|p| {
                self.pending(p, now, delay)
                    .any(|(_, w)| self.poked.get(&p.uid).is_none_or(|k| k.epoch < w.epoch))
            })
            .collect()
    }

    /// Records the answer to a poke of `pod` sent after this run's latest writes.
    pub fn record(&mut self, pod: &PodView, answer: Result<PokeAnswer, String>, at: Instant) {
        match answer {
            Ok(PokeAnswer::Done) => {
                self.lost.remove(&pod.uid);
                self.poked.insert(
                    pod.uid.clone(),
                    Poked {
                        at,
                        epoch: self.epoch,
                    },
                );
            }
            // A gone pod holds nothing; the next look at the pods no longer lists it.
            Ok(PokeAnswer::Gone) => {}
            Ok(PokeAnswer::Recreated) => {
                self.lost
                    .insert(pod.uid.clone(), "recreated under the same name".into());
            }
            Err(e) => {
                self.lost.insert(pod.uid.clone(), e);
            }
        }
    }

    /// Whether the gate may open on evidence, looking at `pods` (listed after every write it
    /// covers) at `now` (store clock) and `mono` (this process's clock).
    pub fn verdict(
        &self,
        pods: &[PodView],
        now: OffsetDateTime,
        mono: Instant,
        delay: Duration,
    ) -> Verdict {
        let mut recheck: Option<Instant> = None;
        let mut waiting = Vec::new();
        let mut timer = Vec::new();
        if let Some(other) = self.other {
            let settled = other + POKE_SETTLE;
            if mono < settled {
                recheck = Some(settled);
                waiting.push("a caBundle target".to_string());
            }
        }
        if let Some(at) = self.other_stored {
            let left = (at + POKE_SETTLE - now).max(time::Duration::ZERO);
            if left > time::Duration::ZERO {
                let settled = mono + Duration::try_from(left).unwrap_or(POKE_SETTLE);
                recheck = Some(recheck.map_or(settled, |r| r.max(settled)));
                waiting.push("a caBundle target".to_string());
            }
        }
        for p in pods.iter().filter(|p| !p.finished) {
            let pending: Vec<_> = self.pending(p, now, delay).collect();
            let Some(newest) = pending.iter().map(|(_, w)| w.epoch).max() else {
                continue;
            };
            if p.terminating {
                // Its kubelet no longer syncs it: it proves the gate by going away.
                waiting.push(format!("{} (terminating)", p.name));
                recheck = Some(recheck.map_or(mono + RECHECK, |r| r.min(mono + RECHECK)));
                continue;
            }
            if self.restart_only(p) {
                timer.push(format!(
                    "{} (an old pod of a restart-only consumer)",
                    p.name
                ));
                continue;
            }
            if let Some(why) = self.lost.get(&p.uid) {
                timer.push(format!("{} (poke lost: {why})", p.name));
                continue;
            }
            match self.poked.get(&p.uid) {
                Some(k) if k.epoch >= newest => {
                    let settled = k.at + POKE_SETTLE;
                    if mono < settled {
                        waiting.push(format!("{} (poked)", p.name));
                        recheck = Some(recheck.map_or(settled, |r| r.min(settled)));
                    }
                }
                _ => timer.push(format!("{} (not poked)", p.name)),
            }
        }
        if !timer.is_empty() {
            Verdict::Timer { why: timer }
        } else if let Some(recheck) = recheck {
            Verdict::Wait { recheck, waiting }
        } else {
            Verdict::Open
        }
    }

    /// Report lines for pods that mount a managed Secret outside every declared consumer (or
    /// one its consumer does not declare): the configuration misses a consumer, whose pods
    /// certgen would neither restart nor probe. Warned about once per pod and Secret.
    fn unowned(&mut self, pods: &[PodView], managed: &BTreeSet<String>) {
        let Some(owners) = &self.owners else { return };
        let mut lines = Vec::new();
        for p in pods.iter().filter(|p| !p.finished) {
            let owner = p.owner.as_ref().and_then(|d| owners.get(d));
            let stray: Vec<String> = p
                .secrets
                .iter()
                .filter(|s| managed.contains(*s))
                .filter(|s| !owner.is_some_and(|(_, _, mounts)| mounts.contains(*s)))
                .cloned()
                .collect();
            if stray.is_empty() {
                continue;
            }
            let detail = match (owner, &p.owner) {
                (Some((c, _, _)), _) => format!(
                    "consumer {c} does not declare it mounts {}: add it to the consumer's mounts",
                    stray.join(", ")
                ),
                (None, Some((kind, d))) => format!(
                    "{} {d} is no declared consumer: add it to the config's consumers (with its kind and reload mode) so rotations restart or probe it",
                    kind.noun()
                ),
                (None, None) => "belongs to no declared consumer (no Deployment, StatefulSet or DaemonSet owns it): add its workload to the config's consumers".to_string(),
            };
            if self
                .pods
                .iter()
                .any(|r| r.name == p.name && r.action == "unowned")
            {
                continue;
            }
            tracing::warn!(pod = %p.name, "pod {} mounts managed Secret(s) {}: {detail}", p.name, stray.join(", "));
            lines.push(PodReport {
                name: p.name.clone(),
                secrets: stray,
                action: "unowned".into(),
                consumer: owner.map(|(c, _, _)| c.clone()),
                detail: Some(detail),
            });
        }
        crate::report::merge_pods(&mut self.pods, lines);
    }
}

/// Pushes Secret changes to pods and opens gates on evidence (in a cluster, with pokes on).
pub struct Push<'a> {
    pub pods: &'a dyn PodsApi,
    pub workloads: Option<&'a dyn Workloads>,
    pub config: &'a Config,
    pub delay: Duration,
}

impl Push<'_> {
    /// The managed Secrets: what a pod may hold that certgen writes.
    fn managed(&self) -> BTreeSet<String> {
        self.config
            .secret_names()
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// Resolves which consumer owns which workload, once per run (a selector costs one list
    /// of its kind). `None` when a consumer's workloads cannot be listed: then no pod is
    /// called unowned.
    async fn owners(&self, ev: &mut Evidence) {
        if ev.owners.is_some() {
            return;
        }
        let mut owners = Owners::new();
        for c in &self.config.consumers {
            let names = match &c.workload {
                Some(Workload::Name(n)) => vec![n.clone()],
                Some(Workload::Selector(s)) => {
                    let Some(api) = self.workloads else { return };
                    match api.select(c.kind, s).await {
                        Ok(found) => found.into_iter().map(|w| w.name).collect(),
                        Err(e) => {
                            tracing::debug!("cannot resolve consumer {}: {e}", c.name);
                            return;
                        }
                    }
                }
                // Skipped for want of verbs, or a local-only consumer: its pods cannot be told.
                None if c.skipped.is_empty() => continue,
                None => return,
            };
            for n in names {
                owners.insert(
                    (c.kind, n),
                    (c.name.clone(), c.reload, c.mounts.iter().cloned().collect()),
                );
            }
        }
        ev.owners = Some(owners);
    }

    /// Takes a 403 as the reason to stop poking for the rest of the run (pokes are an extra:
    /// gates then wait out --propagation-delay, as under Envoy Gateway's own Role), kept in
    /// `ev`; gives any other error back.
    fn refuse(&self, ev: &mut Evidence, e: StoreError) -> Result<String, StoreError> {
        let StoreError::Api(failure) = &e else {
            return Err(e);
        };
        if failure.status != Some(403) {
            return Err(e);
        }
        let note = ev.refused.get_or_insert_with(|| {
            let note = format!(
                "pods not poked: this identity may not {} pods in namespace {} (403); gates wait out --propagation-delay instead (grant list and patch on pods to speed rotations up)",
                failure.verb,
                self.pods.namespace()
            );
            tracing::warn!("{note}");
            note
        });
        Ok(note.clone())
    }

    /// Lists the pods, or `None` (pokes off for the rest of the run) when refused.
    async fn list(&self, ev: &mut Evidence) -> Result<Option<Vec<PodView>>, Error> {
        if ev.refused.is_some() {
            return Ok(None);
        }
        match self.pods.list().await {
            Ok(p) => Ok(Some(p)),
            Err(e) => match self.refuse(ev, e) {
                Ok(_) => Ok(None),
                // Any other failure: no evidence, the timer decides.
                Err(e) => {
                    tracing::warn!("{e}; the gate waits out --propagation-delay");
                    Ok(None)
                }
            },
        }
    }

    /// After a step: pokes every pod that mounts what it wrote (and anything written before
    /// that no poke covers yet), and reports pods outside the declared consumers.
    pub async fn after_step(
        &self,
        ev: &mut Evidence,
        outcome: &Outcome,
        now: OffsetDateTime,
    ) -> Result<(), Error> {
        ev.observe(outcome);
        let Some(pods) = self.list(ev).await? else {
            return Ok(());
        };
        self.owners(ev).await;
        ev.unowned(&pods, &self.managed());
        self.poke(ev, &pods, outcome, now).await;
        Ok(())
    }

    async fn poke(
        &self,
        ev: &mut Evidence,
        pods: &[PodView],
        outcome: &Outcome,
        now: OffsetDateTime,
    ) {
        let due: Vec<PodView> = ev.due(pods, now, self.delay).into_iter().cloned().collect();
        if due.is_empty() {
            return;
        }
        let answers = futures::future::join_all(due.iter().map(|p| {
            let fp = fingerprint(p, outcome);
            async move {
                let answer = self.pods.poke(&p.name, &p.uid, &fp, now).await;
                (answer, Instant::now())
            }
        }))
        .await;
        let mut lines = Vec::new();
        for (p, (answer, at)) in due.iter().zip(answers) {
            let answer = match answer {
                Ok(a) => Ok(a),
                Err(e) => match self.refuse(ev, e) {
                    Ok(note) => Err(note),
                    Err(e) => Err(e.to_string()),
                },
            };
            let (action, detail) = match &answer {
                Ok(PokeAnswer::Done) => ("poked", None),
                Ok(PokeAnswer::Gone) => ("gone", None),
                Ok(PokeAnswer::Recreated) => (
                    "recreated",
                    Some(
                        "deleted and recreated under the same name: waits out --propagation-delay"
                            .to_string(),
                    ),
                ),
                Err(e) => (
                    "failed",
                    Some(format!("{e}; waits out --propagation-delay")),
                ),
            };
            tracing::info!(pod = %p.name, "{action} pod {}/{}", self.pods.namespace(), p.name);
            lines.push(PodReport {
                name: p.name.clone(),
                secrets: p
                    .secrets
                    .iter()
                    .filter(|s| ev.writes.contains_key(*s))
                    .cloned()
                    .collect(),
                action: action.into(),
                consumer: owner_name(ev, p),
                detail,
            });
            ev.record(p, answer, at);
        }
        crate::report::merge_pods(&mut ev.pods, lines);
    }

    /// Waits at a gate for evidence, until `until` at the latest. True when every pod holds
    /// what was written (the gate may open now); false when only the timer can open it.
    pub async fn wait(
        &self,
        ev: &mut Evidence,
        outcome: &Outcome,
        other_written_at: Option<OffsetDateTime>,
        store_now: &dyn Fn() -> OffsetDateTime,
        until: Instant,
    ) -> Result<bool, Error> {
        ev.observe(outcome);
        // A caBundle target written by an earlier run (or repaired) counts as well.
        ev.other_stored = other_written_at;
        let mut said = Instant::now();
        loop {
            let Some(pods) = self.list(ev).await? else {
                return Ok(false);
            };
            // Pods that appeared or were missed since the step (or a gate resumed from an
            // earlier run): poked now.
            self.poke(ev, &pods, outcome, store_now()).await;
            match ev.verdict(&pods, store_now(), Instant::now(), self.delay) {
                Verdict::Open => return Ok(true),
                Verdict::Timer { why } => {
                    tracing::info!(
                        phase = "gate",
                        "only --propagation-delay can open this gate: {}",
                        why.join(", ")
                    );
                    return Ok(false);
                }
                Verdict::Wait { recheck, waiting } => {
                    if recheck > until {
                        return Ok(false);
                    }
                    if said.elapsed() >= PROGRESS {
                        tracing::info!(phase = "gate", "waiting for {}", waiting.join(", "));
                        said = Instant::now();
                    }
                    tokio::time::sleep_until(recheck.min(until)).await;
                }
            }
        }
    }

    /// Dry run: the pods a run would poke after writing what `outcome` plans, as report lines,
    /// and why pokes would be off (the pods could not be listed: 403).
    pub async fn planned(
        &self,
        outcome: &Outcome,
    ) -> Result<(Vec<PodReport>, Option<String>), Error> {
        let mut ev = Evidence::default();
        let Some(pods) = self.list(&mut ev).await? else {
            return Ok((vec![], ev.refused));
        };
        self.owners(&mut ev).await;
        ev.unowned(&pods, &self.managed());
        let mut lines = ev.pods.clone();
        // As a run would: running pods that reload by themselves (a restart-only consumer's
        // pods are restarted instead, as the consumers' lines say).
        for p in pods
            .iter()
            .filter(|p| !p.finished && !p.terminating && !ev.restart_only(p))
        {
            let written: Vec<String> = p
                .secrets
                .iter()
                .filter(|s| outcome.written.contains(*s))
                .cloned()
                .collect();
            if written.is_empty() {
                continue;
            }
            lines.push(PodReport {
                name: p.name.clone(),
                secrets: written,
                action: "would-poke".into(),
                consumer: None,
                detail: None,
            });
        }
        Ok((lines, ev.refused))
    }
}

fn owner_name(ev: &Evidence, p: &PodView) -> Option<String> {
    let d = p.owner.as_ref()?;
    ev.owners.as_ref()?.get(d).map(|(c, _, _)| c.clone())
}

/// The value a poke sets: the fingerprint of the managed Secrets `pod` mounts, as written.
fn fingerprint(pod: &PodView, outcome: &Outcome) -> String {
    crate::rollout::fingerprint(
        pod.secrets
            .iter()
            .filter_map(|s| outcome.digests.get(s).map(|d| (s.as_str(), d.as_str()))),
    )
}

/// Sleeps `left` at a gate no evidence could open, saying every 10 s how long is left,
/// so that a run never sits silently for minutes.
pub async fn wait_timer(left: Duration, reason: &str) {
    let end = Instant::now() + left;
    tracing::info!(phase = "gate", "{reason}");
    loop {
        let now = Instant::now();
        if now >= end {
            return;
        }
        let step = (end - now).min(PROGRESS);
        tokio::time::sleep(step).await;
        let rest = end.saturating_duration_since(Instant::now());
        if !rest.is_zero() {
            tracing::info!(
                phase = "gate",
                "waiting out --propagation-delay: {}s left",
                rest.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const T0: OffsetDateTime = datetime!(2026-11-25 03:00:00 UTC);
    const DELAY: Duration = Duration::from_secs(120);

    fn pod(name: &str, uid: &str, secret: &str, created: OffsetDateTime) -> PodView {
        PodView {
            name: name.into(),
            uid: uid.into(),
            created: Some(created),
            terminating: false,
            finished: false,
            owner: Some((
                Kind::Deployment,
                name.rsplit_once('-').map_or(name, |(d, _)| d).to_string(),
            )),
            secrets: BTreeSet::from([secret.to_string()]),
            restart_fingerprint: None,
        }
    }

    fn secs(n: i64) -> time::Duration {
        time::Duration::seconds(n)
    }

    /// One write of `envoy` at T0, one hot pod mounting it created before.
    fn written() -> (Evidence, Vec<PodView>) {
        let mut ev = Evidence::default();
        ev.wrote(&["envoy".to_string()], T0);
        (ev, vec![pod("proxy-a", "u1", "envoy", T0 - secs(600))])
    }

    #[tokio::test(start_paused = true)]
    async fn a_poked_pod_opens_the_gate_only_once_the_settle_time_passed() {
        let (mut ev, pods) = written();
        assert_eq!(ev.due(&pods, T0, DELAY).len(), 1);
        let t = Instant::now();
        ev.record(&pods[0], Ok(PokeAnswer::Done), t);
        assert!(ev.due(&pods, T0, DELAY).is_empty(), "poked once per write");
        assert!(matches!(
            ev.verdict(&pods, T0, t + Duration::from_secs(1), DELAY),
            Verdict::Wait { recheck, .. } if recheck == t + POKE_SETTLE
        ));
        assert_eq!(ev.verdict(&pods, T0, t + POKE_SETTLE, DELAY), Verdict::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_poke_never_opens_the_gate_before_the_timer() {
        for answer in [
            Ok(PokeAnswer::Recreated),
            Err("pods \"proxy-a\" is forbidden (403)".to_string()),
            Err("the connection broke".to_string()),
        ] {
            let (mut ev, pods) = written();
            let t = Instant::now();
            ev.record(&pods[0], answer.clone(), t);
            let later = t + Duration::from_secs(100);
            assert!(
                matches!(
                    ev.verdict(&pods, T0 + secs(100), later, DELAY),
                    Verdict::Timer { .. }
                ),
                "{answer:?}"
            );
            // The timer covers it once the delay has passed since the write.
            assert_eq!(
                ev.verdict(&pods, T0 + secs(120), later, DELAY),
                Verdict::Open
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_poke_before_the_latest_write_proves_nothing_about_it() {
        let (mut ev, pods) = written();
        let t = Instant::now();
        ev.record(&pods[0], Ok(PokeAnswer::Done), t);
        // The next step writes again: the earlier poke is for the earlier bytes.
        ev.wrote(&["envoy".to_string()], T0 + secs(10));
        let later = t + Duration::from_secs(30);
        assert!(matches!(
            ev.verdict(&pods, T0 + secs(30), later, DELAY),
            Verdict::Timer { .. }
        ));
        assert_eq!(ev.due(&pods, T0 + secs(30), DELAY).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_by_someone_else_after_a_poke_needs_a_new_poke() {
        let (mut ev, pods) = written();
        let t = Instant::now();
        ev.record(&pods[0], Ok(PokeAnswer::Done), t);
        // The stored time of this run's own write does not count as a new write.
        ev.stored(&BTreeMap::from([("envoy".to_string(), T0)]));
        let settled = t + POKE_SETTLE;
        assert_eq!(ev.verdict(&pods, T0, settled, DELAY), Verdict::Open);
        // Another writer changed the Secret after that poke: it proves nothing for that write.
        ev.stored(&BTreeMap::from([("envoy".to_string(), T0 + secs(3))]));
        assert!(matches!(
            ev.verdict(&pods, T0 + secs(4), settled, DELAY),
            Verdict::Timer { .. }
        ));
        assert_eq!(ev.due(&pods, T0 + secs(4), DELAY).len(), 1);
        // So is a write of an earlier run, first seen at a gate: any poke from now on is after it.
        let mut fresh = Evidence::default();
        fresh.stored(&BTreeMap::from([("envoy".to_string(), T0)]));
        assert_eq!(fresh.due(&pods, T0, DELAY).len(), 1);
        fresh.record(&pods[0], Ok(PokeAnswer::Done), t);
        assert_eq!(fresh.verdict(&pods, T0, settled, DELAY), Verdict::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn pods_created_after_the_write_need_nothing_and_unpoked_ones_wait() {
        let (ev, _) = written();
        let new = vec![pod("proxy-b", "u2", "envoy", T0)];
        assert!(ev.due(&new, T0, DELAY).is_empty());
        assert_eq!(ev.verdict(&new, T0, Instant::now(), DELAY), Verdict::Open);
        // Created a second before the bound on the write: it may have mounted the old bytes.
        let old = vec![pod("proxy-c", "u3", "envoy", T0 - secs(1))];
        assert!(matches!(
            ev.verdict(&old, T0, Instant::now(), DELAY),
            Verdict::Timer { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn terminating_pods_and_old_restart_only_pods_are_waited_for_not_poked() {
        let (mut ev, mut pods) = written();
        pods[0].terminating = true;
        assert!(ev.due(&pods, T0, DELAY).is_empty());
        assert!(matches!(
            ev.verdict(&pods, T0, Instant::now(), DELAY),
            Verdict::Wait { .. }
        ));
        // Gone: nothing left to wait for.
        assert_eq!(ev.verdict(&[], T0, Instant::now(), DELAY), Verdict::Open);

        let mut owners = Owners::new();
        owners.insert(
            (Kind::Deployment, "ratelimit".into()),
            (
                "envoy-ratelimit".into(),
                Reload::Restart,
                BTreeSet::from(["envoy".into()]),
            ),
        );
        ev.owners = Some(owners);
        let old = vec![pod("ratelimit-x", "u9", "envoy", T0 - secs(60))];
        assert!(
            ev.due(&old, T0, DELAY).is_empty(),
            "poking cannot reload it"
        );
        assert!(matches!(
            ev.verdict(&old, T0, Instant::now(), DELAY),
            Verdict::Timer { .. }
        ));
        let new = vec![pod("ratelimit-y", "u10", "envoy", T0 + secs(3))];
        assert_eq!(ev.verdict(&new, T0, Instant::now(), DELAY), Verdict::Open);
        // A pod of certgen's restart for the stored contents, whose creation second does not
        // show it came after the write: its template's fingerprint does.
        ev.digests = BTreeMap::from([("envoy".to_string(), "d2".to_string())]);
        let mut restarted = pod("ratelimit-z", "u11", "envoy", T0 - secs(1));
        restarted.restart_fingerprint = Some(crate::rollout::fingerprint([("envoy", "d2")]));
        assert_eq!(
            ev.verdict(std::slice::from_ref(&restarted), T0, Instant::now(), DELAY),
            Verdict::Open
        );
        // A restart for other contents proves nothing about these.
        restarted.restart_fingerprint = Some(crate::rollout::fingerprint([("envoy", "d1")]));
        assert!(matches!(
            ev.verdict(&[restarted], T0, Instant::now(), DELAY),
            Verdict::Timer { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cabundle_write_settles_like_a_poke() {
        let mut ev = Evidence::default();
        ev.wrote_other();
        let t = Instant::now();
        assert!(matches!(
            ev.verdict(&[], T0, t, DELAY),
            Verdict::Wait { .. }
        ));
        assert_eq!(ev.verdict(&[], T0, t + POKE_SETTLE, DELAY), Verdict::Open);
        // One written by an earlier run, as stored: counted on the store's clock.
        let ev = Evidence {
            other_stored: Some(T0),
            ..Evidence::default()
        };
        assert!(matches!(
            ev.verdict(&[], T0 + secs(4), t, DELAY),
            Verdict::Wait { .. }
        ));
        assert_eq!(ev.verdict(&[], T0 + secs(5), t, DELAY), Verdict::Open);
    }

    #[test]
    fn a_pod_outside_every_consumer_is_reported_once() {
        let mut ev = Evidence::default();
        let mut owners = Owners::new();
        owners.insert(
            (Kind::Deployment, "proxy".into()),
            (
                "envoy-proxies".into(),
                Reload::Hot,
                BTreeSet::from(["envoy".into()]),
            ),
        );
        ev.owners = Some(owners);
        let managed = BTreeSet::from(["envoy".to_string(), "envoy-gateway".to_string()]);
        let mut stray = pod("debug-1", "u5", "envoy", T0);
        stray.owner = None;
        let pods = vec![
            pod("proxy-a", "u1", "envoy", T0),
            pod("proxy-b", "u2", "envoy-gateway", T0),
            stray,
            pod("other-a", "u6", "unmanaged", T0),
        ];
        ev.unowned(&pods, &managed);
        ev.unowned(&pods, &managed);
        let names: Vec<_> = ev
            .pods
            .iter()
            .map(|p| (p.name.as_str(), p.action.as_str()))
            .collect();
        assert_eq!(names, [("proxy-b", "unowned"), ("debug-1", "unowned")]);
        assert!(
            ev.pods[0]
                .detail
                .as_deref()
                .unwrap()
                .contains("does not declare")
        );
    }
}
