//! Gates that open on evidence, driven: after each step, poke every running pod that mounts a
//! changed Secret, read the Leases of their nodes' kubelets, and wait until the evidence
//! (`evidence.rs`, which says what counts and why) opens the gate. Every request goes through
//! the pacer (`pace.rs`) and the seam ([`crate::outside::PodsApi`]); the planner only learns
//! that a gate is open for a given stored state (`plan::Known::gate_waited`).

use std::collections::BTreeSet;
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use super::evidence::{Evidence, MAX_THROTTLED, Owners, PROGRESS, RECHECK, Tally, Verdict, Waited};
use super::injector::Injector;
use super::pace::Pacer;
use crate::config::{Config, Workload};
use crate::error::Error;
use crate::outside::{Endpoints, PodView, PodsApi, PokeAnswer, Workloads};
use crate::report::PodReport;
use crate::rotation::step::Outcome;
use crate::store::StoreError;

/// How far away a cleanup gate may be for a run that cannot open it on evidence to wait for
/// it (without `--wait`): further than this, the run ends at once and leaves the cleanup to the
/// next run (the chart's CronJob), since every consumer works as things are.
pub const CLEANUP_WAIT: Duration = Duration::from_secs(30);

/// Test hook (cargo feature `test-hooks`): `N:PATH` stops the run before the pokes that follow
/// its `N`-th step with pods to poke (1: the trust step of a rotation): it creates `PATH.reached`
/// and goes on once `PATH.go` exists, so a fault test can break a kubelet exactly between a
/// step's writes and its pokes.
#[cfg(feature = "test-hooks")]
pub const PAUSE_BEFORE_POKES_ENV: &str = "CERTGEN_TEST_PAUSE_BEFORE_POKES";

#[cfg(feature = "test-hooks")]
async fn pause_before_pokes() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static ROUNDS: AtomicUsize = AtomicUsize::new(0);
    let round = ROUNDS.fetch_add(1, Ordering::SeqCst) + 1;
    let Some((n, path)) = std::env::var(PAUSE_BEFORE_POKES_ENV)
        .ok()
        .and_then(|v| {
            v.split_once(':')
                .map(|(n, p)| (n.parse::<usize>().ok(), p.to_string()))
        })
        .and_then(|(n, p)| Some((n?, p)))
    else {
        return;
    };
    if round != n {
        return;
    }
    eprintln!("certgen: test hook ({PAUSE_BEFORE_POKES_ENV}): paused before the pokes of step {n}");
    let _ = std::fs::write(format!("{path}.reached"), b"");
    // Until the test says go, or is gone: a test that failed before saying it removes its
    // directory, and the run must then go on to its own end rather than wait forever (the
    // test's runtime waits for this process to exit).
    let go = std::path::PathBuf::from(format!("{path}.go"));
    let dir = go
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    while !go.exists() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            eprintln!("certgen: test hook ({PAUSE_BEFORE_POKES_ENV}): the test is gone; going on");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pushes Secret changes to pods and opens gates on evidence (in a cluster, with pokes on).
pub struct Push<'a> {
    pub pods: &'a dyn PodsApi,
    pub workloads: Option<&'a dyn Workloads>,
    /// The Services' endpoints, for per-pod probes of hot-reloading consumers (`probes.rs`).
    pub endpoints: Option<&'a dyn Endpoints>,
    pub config: &'a Config,
    pub delay: Duration,
    /// The budget of the pokes and Lease reads (`pace.rs`).
    pub pacer: Pacer,
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
        if ev.owners_known() {
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
        ev.observe_owners(owners);
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
        if let Some(note) = ev.pokes_refused() {
            return Ok(note.clone());
        }
        let note = format!(
            "pods not poked: this identity may not {} pods in namespace {} (403); gates wait out --propagation-delay instead (grant list and patch on pods to speed rotations up)",
            failure.verb,
            self.pods.namespace()
        );
        tracing::warn!("{note}");
        Ok(ev.observe_refusal(note))
    }

    /// Lists the pods, or `None` (pokes off for the rest of the run) when refused.
    async fn list(&self, ev: &mut Evidence) -> Result<Option<Vec<PodView>>, Error> {
        if ev.pokes_refused().is_some() {
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
        store_now: &dyn Fn() -> OffsetDateTime,
    ) -> Result<(), Error> {
        ev.observe_stored(&outcome.written_at, &outcome.written, &outcome.digests);
        ev.next_gate();
        let Some(pods) = self.list(ev).await? else {
            return Ok(());
        };
        self.owners(ev).await;
        ev.unowned(&pods, &self.managed());
        #[cfg(feature = "test-hooks")]
        if !ev.due(&pods, (now, Instant::now()), self.delay).is_empty() {
            pause_before_pokes().await;
        }
        self.poke(ev, &pods, outcome, now).await;
        // Each kubelet's Lease as it stands after the pokes: a renewal seen after this read
        // came after them.
        self.read_kubelets(ev, &pods, store_now).await;
        Ok(())
    }

    /// Reads the Lease of every node that runs a pod the gate waits for (once refused or
    /// absent, a node's Lease is not asked for again).
    async fn read_kubelets(
        &self,
        ev: &mut Evidence,
        pods: &[PodView],
        store_now: &dyn Fn() -> OffsetDateTime,
    ) {
        let nodes: Vec<String> = ev
            .nodes(pods, (store_now(), Instant::now()), self.delay)
            .into_iter()
            .filter(|n| !ev.lease_unreadable(n))
            .collect();
        let reads = self
            .pacer
            .run(&nodes, |n| async move {
                let read = self.pods.kubelet(n).await.map_err(|e| e.to_string());
                (read, store_now())
            })
            .await;
        for (node, ((read, now), mono)) in nodes.iter().zip(reads) {
            if let Err(e) = &read {
                tracing::warn!(node = %node, "{e}; pods on node {node} wait out --propagation-delay");
            }
            ev.saw(node, read, mono, now);
        }
    }

    async fn poke(
        &self,
        ev: &mut Evidence,
        pods: &[PodView],
        outcome: &Outcome,
        now: OffsetDateTime,
    ) {
        let due: Vec<PodView> = ev
            .due(pods, (now, Instant::now()), self.delay)
            .into_iter()
            .cloned()
            .collect();
        if due.is_empty() {
            return;
        }
        let due: Vec<(PodView, String)> = due
            .into_iter()
            .map(|p| {
                let fp = fingerprint(&p, outcome);
                (p, fp)
            })
            .collect();
        self.send(ev, &due, now).await;
    }

    /// Pokes each pod of `due` with its fingerprint, within the budget, and records the
    /// answers: at most the budget's pokes in flight, paced (`pace.rs`); a throttled one is
    /// asked again at a later look, after its Retry-After, while the others go on.
    async fn send(&self, ev: &mut Evidence, due: &[(PodView, String)], now: OffsetDateTime) {
        let started = (Instant::now(), crate::api_requests::throttled());
        let answers = self
            .pacer
            .run(due, |(p, fp)| self.pods.poke(&p.name, &p.uid, fp, now))
            .await;
        let mut tally = Tally {
            took: started.0.elapsed(),
            ..Tally::default()
        };
        let mut lines = Vec::new();
        for ((p, _), (answer, at)) in due.iter().zip(answers) {
            let answer = match answer {
                Ok(a) => Ok(a),
                Err(e) => match self.refuse(ev, e) {
                    Ok(note) => Err(note),
                    Err(e) => Err(e.to_string()),
                },
            };
            match &answer {
                Ok(PokeAnswer::Done) => tally.poked += 1,
                Ok(PokeAnswer::Throttled(wait)) => {
                    tally.throttled += 1;
                    self.pacer.quiet(*wait);
                }
                Ok(_) => {}
                Err(_) => tally.failed += 1,
            }
            let (action, detail) = match &answer {
                Ok(PokeAnswer::Done) => ("poked", None),
                Ok(PokeAnswer::Throttled(_)) if ev.throttled_times(&p.uid) + 1 >= MAX_THROTTLED => {
                    (
                        "failed",
                        Some(format!(
                            "the API server answered 429 {MAX_THROTTLED} times; waits out --propagation-delay"
                        )),
                    )
                }
                Ok(PokeAnswer::Throttled(wait)) => (
                    "throttled",
                    Some(format!(
                        "the API server answered 429: poked again after {}s",
                        wait.as_secs()
                    )),
                ),
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
                    .filter(|s| ev.written(s))
                    .cloned()
                    .collect(),
                action: action.into(),
                consumer: ev.owner_of(p),
                detail,
            });
            ev.record(p, answer, at);
        }
        // Each throttled answer the gate saw came after the client's own retries, each a 429
        // counted by the client (none in the simulation, which has no client).
        let answered = crate::api_requests::throttled().saturating_sub(started.1);
        tally.throttled = tally.throttled.max(answered);
        ev.observe_pokes(tally, lines);
    }

    /// Waits at a gate for evidence, until `until` at the latest. An `impatient` gate (a cleanup
    /// nobody waits for) stops as soon as what is left is a kubelet not live, or timers more than
    /// [`CLEANUP_WAIT`] away.
    pub async fn wait(
        &self,
        ev: &mut Evidence,
        outcome: &Outcome,
        other_written_at: Option<OffsetDateTime>,
        store_now: &dyn Fn() -> OffsetDateTime,
        (until, impatient): (Instant, bool),
        injector: Option<&Injector<'_>>,
    ) -> Result<Waited, Error> {
        ev.observe_stored(&outcome.written_at, &outcome.written, &outcome.digests);
        // A caBundle target written by an earlier run (or repaired) counts as well.
        ev.observe_other_stored(other_written_at);
        let mut said = Instant::now();
        loop {
            let Some(pods) = self.list(ev).await? else {
                return Ok(Waited::Unobservable);
            };
            // Pods that appeared or were missed since the step (or a gate resumed from an
            // earlier run), and pods whose kubelet came back from a gap: poked now.
            self.poke(ev, &pods, outcome, store_now()).await;
            self.read_kubelets(ev, &pods, store_now).await;
            // The pods a probe can reach through their own endpoint: each one that shows it
            // holds what was written needs no kubelet evidence for that Secret.
            if let Some(endpoints) = self.endpoints {
                super::probes::round(self.config, endpoints, outcome, &pods, ev).await;
            }
            // The caBundle targets cert-manager's CA injector writes (at the trust gate).
            if let Some(injector) = injector {
                injector.look(ev).await;
            }
            let now = store_now();
            let verdict = ev.verdict(&pods, now, Instant::now(), self.delay);
            let Verdict::Wait {
                recheck,
                timer,
                waiting,
                held,
            } = verdict
            else {
                let Verdict::Open(pods) = verdict else {
                    unreachable!()
                };
                return Ok(Waited::Open(pods));
            };
            let timer_left = timer.map(|t| Duration::try_from(t - now).unwrap_or(Duration::ZERO));
            let far = timer_left.is_some_and(|l| l > CLEANUP_WAIT);
            let next = match (recheck, timer_left) {
                (Some(r), Some(l)) => r.min(Instant::now() + l),
                (Some(r), None) => r,
                (None, Some(l)) => Instant::now() + l,
                (None, None) => Instant::now() + RECHECK,
            };
            if (impatient && (!held.is_empty() || far)) || next > until {
                return Ok(Waited::Stopped {
                    held,
                    waiting,
                    timer,
                });
            }
            if said.elapsed() >= PROGRESS {
                if !held.is_empty() {
                    tracing::warn!(
                        phase = "gate",
                        "held by kubelets not seen live: {}",
                        held.join(", ")
                    );
                }
                if !waiting.is_empty() {
                    tracing::info!(phase = "gate", "waiting for {}", waiting.join(", "));
                }
                said = Instant::now();
            }
            tokio::time::sleep_until(next.min(until)).await;
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
            return Ok((vec![], ev.pokes_refused().cloned()));
        };
        self.owners(&mut ev).await;
        ev.unowned(&pods, &self.managed());
        let mut lines = ev.pod_lines().to_vec();
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
        Ok((lines, ev.pokes_refused().cloned()))
    }
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
mod budget_tests;
