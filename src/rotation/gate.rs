//! Gates that open on evidence: pushed propagation ("pokes"), and what a kubelet shows of having
//! acted on them.
//!
//! A kubelet refreshes a pod's Secret volumes when it syncs the pod: every `syncFrequency`
//! (1 min by default) plus up to 50 % jitter, and also whenever the pod object changes. So
//! after each step's writes certgen annotates every running pod that mounts a changed Secret
//! (its own metadata, never the template: nothing restarts), and a live kubelet re-projects the
//! Secret within half a second (measured: CONTRIBUTING.md, "Pushed propagation"). The code
//! path, in Kubernetes v1.36: the kubelet's pod config sees an annotation change as an update
//! (`pkg/kubelet/config/config.go`, `podsDifferSemantically`), the pod worker syncs the pod,
//! `WaitForAttachAndMount` calls `ReprocessPod`, and the volume populator marks every volume
//! whose plugin `RequiresRemount` (Secret, projected, ConfigMap, downward API) for a remount,
//! which reads the Secret from the kubelet's Secret manager again (its watch, or with the
//! `Cache` strategy a fresh GET, since the pod update re-registers the pod and invalidates the
//! cached object: `util/manager/cache_based_manager.go`, `AddReference`).
//!
//! That the API server accepted a poke proves nothing about the kubelet, which may be stopped,
//! restarting, starved or cut off from the API server. What a kubelet shows of itself is its
//! heartbeat: the Lease `kube-node-lease/<node>`, renewed every quarter of its
//! `leaseDurationSeconds` (10 s by default: `nodeLeaseRenewIntervalFraction` in
//! `pkg/kubelet/kubelet.go`; the renewal loop is `component-helpers/apimachinery/lease`
//! `controller.sync`) while the kubelet runs and reaches the API server. So the gate reads the
//! Lease of every node that runs a pod it waits for, from the pokes to the gate's end, and:
//!
//! - A poke counts once a renewal of its node's Lease is seen after it (a read after the poke
//!   showed one version, a later read another) and [`POKE_SETTLE`] has passed since that
//!   renewal: the kubelet was live after the poke, and had the settle time from then to act.
//! - A kubelet whose Lease is older than 1.25 renewal intervals is seen not live. Its pods hold
//!   the gate for as long as it stays so; the timer never opens it for them (a run ends at
//!   `--timeout`, exit 3, the next run goes on).
//! - A kubelet seen back after such a gap may act on stale caches: every watch it had broke,
//!   and client-go's reflector retries a broken watch after up to 30 s × (1 + jitter 1.0)
//!   (`tools/cache/reflector.go`, `defaultBackoffMax`, `defaultBackoffJitter`), so its Secret
//!   cache may lag until [`WATCHES_BACK`] after it returned (measured: its Lease renewed 1–4 s
//!   after reconnecting, its Secret watches came back 0.4–16 s after its pod watch). For its
//!   pods every write counts from then: they are poked again then, a pod created before then
//!   proves nothing, and the timer counts from then.
//! - A pod created after the write counts only when its kubelet is live and had no gap since
//!   the write (else from [`WATCHES_BACK`] after its return); a pod not scheduled yet, or whose
//!   kubelet's Lease cannot be read (RBAC, no Lease), waits for the timer, and the report says
//!   which pod and why.
//!
//! A gate then opens once every pod that mounts a Secret written since the last gate was
//! poked and its kubelet seen live after (above), or was created after the write, or is gone,
//! or (restart-only consumers) is a new pod of the rollout certgen started and waited for, or
//! its timer (`--propagation-delay` from the write, as its kubelet saw it) has passed while its
//! kubelet is not seen down; and a `caBundle` target written meanwhile was shown by the API
//! server's watch cache (read back at the write's resourceVersion; the cache feeds the API
//! server's informer of webhook configurations) [`POKE_SETTLE`] ago, or its timer passed when
//! the cache did not show it; and a TLS Secret written that no pod mounts and no declared
//! consumer mounts has passed its timer (whoever holds it cannot be observed). A pod
//! that could not be poked (403, an API error, recreated under the same name), a terminating
//! pod (its kubelet no longer syncs its volumes) and an old pod of a restart-only consumer
//! prove nothing: they keep the timer, or open the gate by going away. Probes
//! (`consumers.rs`) and rollouts remain evidence as before. Every pod's line in the report
//! says what opened the gate for it.
//!
//! This module decides (pure functions over plain values, unit-tested) and drives the pokes
//! and Lease reads through the seam ([`crate::outside::PodsApi`]); the planner only learns
//! that a gate is open for a given stored state (`plan::Known::gate_waited`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use super::pace::Pacer;
use super::step::Outcome;
use crate::config::{Config, Kind, Reload, Workload};
use crate::error::Error;
use crate::outside::{KubeletLease, PodView, PodsApi, PokeAnswer, Workloads};
use crate::report::{GatePod, PodReport, Pokes};
use crate::store::StoreError;

/// How long after a kubelet was seen live after a poke certgen takes it to have re-projected
/// the pod's Secrets: ten times the largest delay measured on an idle real kubelet (0.51 s,
/// CONTRIBUTING.md, "Pushed propagation"); `bench/poke-settle` measures it under stress.
pub const POKE_SETTLE: Duration = Duration::from_secs(5);

/// How long after a kubelet came back from a gap in its Lease renewals its Secret watches may
/// still be re-listing: client-go's reflector retries a broken watch after at most
/// 30 s × (1 + jitter 1.0) = 60 s, then lists; 5 s for that list.
pub const WATCHES_BACK: Duration = Duration::from_secs(65);

/// The kubelet's default renewal interval (a quarter of its default 40 s Lease), used when a
/// Lease does not say its duration.
const RENEW_INTERVAL: Duration = Duration::from_secs(10);

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
    while !std::path::Path::new(&format!("{path}.go")).exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many times a pod's poke may come back throttled (429, each after the client's own
/// retries) before it counts as lost: the pod then waits for its timer, like any lost poke.
const MAX_THROTTLED: u32 = 3;

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
    /// When this run learned of it (monotonic): a kubelet gap seen after it moves it.
    at: Instant,
}

/// A poke that landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Poked {
    /// When its answer came, on this process's monotonic clock.
    at: Instant,
    /// The epoch of this run's writes it came after.
    epoch: u64,
}

/// What the gate has seen of one node's kubelet: its heartbeat Lease, read at each look.
#[derive(Debug, Clone)]
pub struct Kubelet {
    /// Why its Lease cannot be used (refused, absent, no renewal time): its pods wait the timer.
    unreadable: Option<String>,
    /// How often it renews (a quarter of its Lease's duration).
    interval: Duration,
    /// The last read: when (monotonic), the version it showed, the renewal time it showed, and
    /// the store's time of the read.
    last: Option<(Instant, String, OffsetDateTime, OffsetDateTime)>,
    /// Renewals seen: the read that still showed the older version, and the one that showed
    /// the newer (monotonic).
    renewals: Vec<(Instant, Instant)>,
    /// Since when it is seen not live (the first read of the current gap), how long its Lease
    /// had not been renewed at the latest read, and its last renewal (store clock).
    down: Option<(Instant, Duration, OffsetDateTime)>,
    /// When it was seen back after its latest gap (monotonic, and the store's clock), and its
    /// last renewal before that gap (store clock).
    back: Option<(Instant, OffsetDateTime, OffsetDateTime)>,
}

impl Kubelet {
    fn new() -> Self {
        Self {
            unreadable: None,
            interval: RENEW_INTERVAL,
            last: None,
            renewals: Vec::new(),
            down: None,
            back: None,
        }
    }

    /// Longer than this without a renewal, the kubelet is not live: 1.25 renewal intervals
    /// (12.5 s). A cut that can break its connections lasts at least 15 s (client-go's HTTP/2
    /// health check closes a connection 15 s after an unanswered ping), so every such cut
    /// shows as a gap, with room for a read a second late and a renewal time rounded up.
    fn gap(&self) -> Duration {
        self.interval + self.interval / 4
    }

    /// Records a read of its Lease at `mono` (monotonic) and `now` (the store's clock).
    fn saw(
        &mut self,
        read: Result<Option<KubeletLease>, String>,
        mono: Instant,
        now: OffsetDateTime,
    ) {
        let lease = match read {
            Ok(Some(l)) => l,
            Ok(None) => {
                self.unreadable = Some("its node has no Lease in kube-node-lease".into());
                return;
            }
            Err(e) => {
                self.unreadable = Some(e);
                return;
            }
        };
        let Some(renewed) = lease.renewed_at else {
            self.unreadable = Some("its node's Lease shows no renewal time".into());
            return;
        };
        if let Some(d) = lease.duration_seconds.filter(|d| *d >= 4) {
            self.interval = Duration::from_secs(u64::from(d) / 4);
        }
        let gap = self.gap();
        let silent = Duration::try_from(now - renewed).unwrap_or(Duration::ZERO);
        if let Some((at, version, was_renewed, read_at)) = &self.last
            && *version != lease.version
        {
            self.renewals.push((*at, mono));
            // Read again within half an interval: no renewal can have been missed between the
            // two, so their renewal times are the kubelet's own interval.
            let dense = Duration::try_from(now - *read_at).is_ok_and(|d| d <= self.interval / 2);
            let interval = Duration::try_from(renewed - *was_renewed).unwrap_or(Duration::ZERO);
            if dense && interval > gap && self.down.is_none() {
                self.back = Some((mono, now, *was_renewed));
            }
        }
        if silent > gap {
            let since = self.down.map_or(mono, |(s, _, _)| s);
            self.down = Some((since, silent, renewed));
        } else if let Some((_, _, last)) = self.down.take() {
            self.back = Some((mono, now, last));
        }
        self.last = Some((mono, lease.version, renewed, now));
    }

    /// The first renewal seen whose earlier read came at or after `at`.
    fn renewed_after(&self, at: Instant) -> Option<Instant> {
        self.renewals
            .iter()
            .find(|(before, _)| *before >= at)
            .map(|(_, seen)| *seen)
    }
}

/// When the timer of a write made by `by` opens: `delay` later.
fn timer_of(by: OffsetDateTime, delay: Duration) -> OffsetDateTime {
    time::Duration::try_from(delay)
        .ok()
        .and_then(|d| by.checked_add(d))
        .unwrap_or(OffsetDateTime::from_unix_timestamp(253_402_300_799).unwrap_or(by))
}

/// What opened a gate for one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Opened {
    Gone,
    Restarted,
    Created,
    Poke,
    Timer,
}

impl Opened {
    /// The report's word for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gone => "gone",
            Self::Restarted => "restarted",
            Self::Created => "created after the write",
            Self::Poke => "poke plus live kubelet",
            Self::Timer => "timer",
        }
    }
}

/// Where one pod stands at a gate (the worst over the Secrets it mounts).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stand {
    /// It holds what was written.
    Covered(Opened),
    /// Look again at this instant: `why` says what it waits for.
    Until(Instant, String),
    /// Only its timer can open it, at this store time.
    Timer(OffsetDateTime, String),
    /// Its kubelet is seen not live: nothing but its return (or the pod going away) opens it.
    Held(String),
}

impl Stand {
    /// The worse of two: held, then the later timer, then the sooner recheck, then covered
    /// (the weaker evidence named).
    fn worst(self, other: Stand) -> Stand {
        use Stand::*;
        match (self, other) {
            (Held(a), _) | (_, Held(a)) => Held(a),
            (Timer(a, x), Timer(b, y)) => {
                if a >= b {
                    Timer(a, x)
                } else {
                    Timer(b, y)
                }
            }
            (t @ Timer(..), _) | (_, t @ Timer(..)) => t,
            (Until(a, x), Until(b, y)) => {
                if a <= b {
                    Until(a, x)
                } else {
                    Until(b, y)
                }
            }
            (u @ Until(..), _) | (_, u @ Until(..)) => u,
            (Covered(a), Covered(b)) => Covered(a.max(b)),
        }
    }
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
    /// Pods (by UID) whose poke the API server throttled (429) and that are not poked yet:
    /// not before when to ask again, and how many times it was throttled.
    throttled: BTreeMap<String, (Instant, u32)>,
    /// The pokes since the last gate, and over the whole run.
    tally: (Tally, Tally),
    /// The kubelets seen, by node.
    kubelets: BTreeMap<String, Kubelet>,
    /// Pods (by UID) a gate waited for: their name and node, to say "gone" once they are.
    tracked: BTreeMap<String, (String, Option<String>)>,
    /// Pods whose kubelet held a gate (not live) or put it behind (back from a gap), by name:
    /// (node, what was seen). Each gets a Warning Event.
    pub held: BTreeMap<String, (String, String)>,
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
    /// The TLS Secrets no declared consumer mounts (from the config, for the whole run:
    /// [`Evidence::new`]): one that no pod mounts either may be held by what the gate cannot
    /// observe (a process outside the cluster, a controller that reads it through the API), so
    /// only its timer opens the gate, whichever run wrote it.
    undeclared: BTreeSet<String>,
    /// Those of them the gate under way waited for, by their timer: a line each when it opens.
    timed: BTreeSet<String>,
    /// A write to a `caBundle` target the API server's cache did not show (store clock, why):
    /// it counts only by the timer, until a later write is shown (the cache is then past it).
    other_unseen: Option<(OffsetDateTime, String)>,
    /// Each managed Secret's digest as stored now (restart fingerprints are made of them).
    digests: BTreeMap<String, String>,
}

/// What pokes cost: how many landed, the time spent sending them, 429s and failures.
#[derive(Debug, Default, Clone)]
struct Tally {
    poked: usize,
    took: Duration,
    throttled: u64,
    failed: usize,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.poked += other.poked;
        self.took += other.took;
        self.throttled += other.throttled;
        self.failed += other.failed;
    }

    fn report(&self) -> Option<Pokes> {
        (self.poked + self.failed > 0 || self.throttled > 0).then(|| Pokes {
            poked: self.poked,
            seconds: (self.took.as_secs_f64() * 10.0).round() / 10.0,
            throttled: self.throttled,
            failed: self.failed,
        })
    }
}

/// Workload (kind, name) → (consumer name, reload, the Secrets it declares it mounts).
type Owners = BTreeMap<(Kind, String), (String, Reload, BTreeSet<String>)>;

/// How waiting at a gate on evidence ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// Every pod holds what was written: what opened the gate for each.
    Open(Vec<GatePod>),
    /// The pods cannot be observed (their list was refused or failed): only the timer decides.
    Unobservable,
    /// It stopped first (the deadline, or an impatient gate): the pods held by a kubelet not
    /// seen live, the others still waited for, and the store time the last timer opens at.
    Stopped {
        held: Vec<String>,
        waiting: Vec<String>,
        timer: Option<OffsetDateTime>,
    },
}

/// The verdict of a gate on evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every pod holds what was written: what opened the gate for each.
    Open(Vec<GatePod>),
    /// Not yet. `recheck`: when to look again; `timer`: the store time the last timer-bound pod
    /// opens at, if only timers are left besides rechecks; `waiting` and `held` say which pods,
    /// for the progress line and the report.
    Wait {
        recheck: Option<Instant>,
        timer: Option<OffsetDateTime>,
        waiting: Vec<String>,
        held: Vec<String>,
    },
}

impl Evidence {
    /// A run's evidence, before anything was pushed or seen: it knows which TLS Secrets of
    /// `config` no declared consumer mounts.
    pub fn new(config: &Config) -> Self {
        let undeclared = config
            .tls
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| !config.consumers.iter().any(|c| c.mounts.contains(n)))
            .collect();
        Self {
            undeclared,
            ..Self::default()
        }
    }

    /// Records a step's writes (TLS Secrets; `by` is a store-clock bound they landed before).
    pub fn wrote<'a>(&mut self, names: impl IntoIterator<Item = &'a String>, by: OffsetDateTime) {
        self.epoch += 1;
        let at = Instant::now();
        for n in names {
            self.writes.insert(
                n.clone(),
                Written {
                    epoch: self.epoch,
                    by,
                    at,
                },
            );
        }
    }

    /// Records writes to `caBundle` targets the API server's cache shows, now.
    pub fn wrote_other(&mut self) {
        self.other = Some(Instant::now());
        self.other_unseen = None;
    }

    /// Records a write to a `caBundle` target made at `at` (store clock) that the API server's
    /// cache did not show: only the timer opens the gate for it.
    pub fn unseen_other(&mut self, at: OffsetDateTime, why: String) {
        self.other = Some(Instant::now());
        self.other_unseen = Some((at, why));
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
        let now = Instant::now();
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
                    at: now,
                },
            );
        }
    }

    /// Records a read of `node`'s kubelet Lease (`Err`: why it cannot be read).
    pub fn saw(
        &mut self,
        node: &str,
        read: Result<Option<KubeletLease>, String>,
        mono: Instant,
        now: OffsetDateTime,
    ) {
        self.kubelets
            .entry(node.to_string())
            .or_insert_with(Kubelet::new)
            .saw(read, mono, now);
    }

    /// The write `w`, as the kubelet of `pod` may have seen it: moved to [`WATCHES_BACK`] after
    /// that kubelet came back from a gap seen since (monotonic, store clock).
    /// Only a gap that began before the write's own timer passed moves it (the kubelet had
    /// projected it otherwise).
    fn as_seen(
        &self,
        pod: &PodView,
        w: Written,
        delay: Duration,
    ) -> (Instant, OffsetDateTime, bool) {
        let back = pod
            .node
            .as_ref()
            .and_then(|n| self.kubelets.get(n)?.back)
            .filter(|(b, _, since)| *b >= w.at && timer_of(w.by, delay) > *since);
        match back {
            Some((b, bs, _)) => (b + WATCHES_BACK, bs + WATCHES_BACK, true),
            None => (w.at, w.by, false),
        }
    }

    /// Where `pod` stands for the write `w` of one Secret it mounts, at `now` (store clock) and
    /// `mono`; `None` once nothing of it is pending (its timer passed with its kubelet not seen
    /// down, and it was never held back).
    fn stand_for(
        &self,
        pod: &PodView,
        w: Written,
        now: OffsetDateTime,
        mono: Instant,
        delay: Duration,
    ) -> Stand {
        let (eff_at, eff_by, behind) = self.as_seen(pod, w, delay);
        let timer = timer_of(eff_by, delay);
        let node = pod.node.as_deref().unwrap_or("");
        let kubelet = pod.node.as_ref().and_then(|n| self.kubelets.get(n));
        // Silent since before the write's timer passed: it may not have projected it.
        if let Some((_, silent, since)) = kubelet.and_then(|k| k.down)
            && timer_of(w.by, delay) > since
        {
            return Stand::Held(format!(
                "its kubelet (node {node}) has not renewed its Lease for {}s",
                silent.as_secs()
            ));
        }
        let from = |t: OffsetDateTime| crate::timefmt::at_second(t);
        if now >= timer {
            return Stand::Covered(Opened::Timer);
        }
        let created_after = pod.created.is_some_and(|c| c >= eff_by);
        if self.restarted_for_stored(pod) && (!behind || created_after) {
            return Stand::Covered(Opened::Restarted);
        }
        if pod.terminating {
            return Stand::Until(mono + RECHECK, "terminating".into());
        }
        let Some(kubelet) = kubelet else {
            return match &pod.node {
                None => Stand::Timer(timer, "not on a node yet".into()),
                Some(_) => Stand::Until(mono + RECHECK, format!("reading node {node}'s Lease")),
            };
        };
        if let Some(why) = &kubelet.unreadable {
            return Stand::Timer(timer, format!("its kubelet cannot be observed: {why}"));
        }
        if created_after {
            return Stand::Covered(Opened::Created);
        }
        if self.restart_only(pod) {
            return Stand::Timer(timer, "an old pod of a restart-only consumer".into());
        }
        if let Some(why) = self.lost.get(&pod.uid) {
            return Stand::Timer(timer, format!("poke lost: {why}"));
        }
        let poked_since = self
            .poked
            .get(&pod.uid)
            .is_some_and(|k| k.epoch >= w.epoch && k.at >= eff_at);
        if !poked_since && let Some((after, n)) = self.throttled.get(&pod.uid) {
            return Stand::Until(
                if *after > mono {
                    *after
                } else {
                    mono + RECHECK
                },
                format!(
                    "to be poked: the API server throttled its poke (429) {n} time(s); asked again after its Retry-After"
                ),
            );
        }
        match self.poked.get(&pod.uid) {
            Some(k) if k.epoch >= w.epoch && k.at >= eff_at => match kubelet.renewed_after(k.at) {
                Some(seen) if mono >= seen + POKE_SETTLE => Stand::Covered(Opened::Poke),
                Some(seen) => Stand::Until(
                    seen + POKE_SETTLE,
                    format!("poked, its kubelet (node {node}) live since"),
                ),
                None => Stand::Until(
                    mono + RECHECK,
                    format!("poked, waiting for its kubelet (node {node}) to renew its Lease"),
                ),
            },
            _ if mono < eff_at => Stand::Until(
                eff_at,
                format!(
                    "its kubelet (node {node}) came back from a gap: its Secret watches may lag until {}",
                    from(eff_by)
                ),
            ),
            _ => Stand::Until(mono + RECHECK, "to be poked".into()),
        }
    }

    /// Where `pod` stands at a gate: `None` when it mounts nothing written since the last gate.
    fn stand(
        &self,
        pod: &PodView,
        now: OffsetDateTime,
        mono: Instant,
        delay: Duration,
    ) -> Option<Stand> {
        // A write whose timer had passed before this gate waited for the pod is not news.
        let tracked = self.tracked.contains_key(&pod.uid);
        pod.secrets
            .iter()
            .filter_map(|s| self.writes.get(s))
            .map(|w| self.stand_for(pod, *w, now, mono, delay))
            .filter(|s| tracked || *s != Stand::Covered(Opened::Timer))
            .reduce(Stand::worst)
    }

    /// Whether the gap of `pod`'s kubelet moved any of its writes (for the report and Events).
    fn behind(&self, pod: &PodView, delay: Duration) -> Option<String> {
        let node = pod.node.as_ref()?;
        let k = self.kubelets.get(node)?;
        let (back, back_by, since) = k.back?;
        pod.secrets
            .iter()
            .filter_map(|s| self.writes.get(s))
            .any(|w| back >= w.at && timer_of(w.by, delay) > since)
            .then(|| {
                format!(
                    "its kubelet (node {node}) came back from a gap in its Lease renewals at {}: its Secret watches may have lagged until {}",
                    crate::timefmt::at_second(back_by),
                    crate::timefmt::at_second(back_by + WATCHES_BACK)
                )
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

    /// The pods to poke now: running, hot-reloading (a restart-only pod loads at start only),
    /// mounting a Secret written since the last gate that no poke covers yet: not poked since
    /// that write, or only before its kubelet came back from a gap and its watches with it.
    pub fn due<'a>(
        &'a self,
        pods: &'a [PodView],
        (now, mono): (OffsetDateTime, Instant),
        delay: Duration,
    ) -> Vec<&'a PodView> {
        pods.iter()
            .filter(|p| !p.finished && !p.terminating && !self.restart_only(p))
            // Throttled: not before its Retry-After, and not after its last try.
            .filter(|p| {
                self.throttled
                    .get(&p.uid)
                    .is_none_or(|(after, n)| mono >= *after && *n < MAX_THROTTLED)
            })
            .filter(|p| {
                p.secrets
                    .iter()
                    .filter_map(|s| self.writes.get(s))
                    .any(|w| {
                        let (eff_at, _, _) = self.as_seen(p, *w, delay);
                        let open =
                            matches!(self.stand_for(p, *w, now, mono, delay), Stand::Covered(_));
                        !open
                            && mono >= eff_at
                            && self
                                .poked
                                .get(&p.uid)
                                .is_none_or(|k| k.epoch < w.epoch || k.at < eff_at)
                    })
            })
            .collect()
    }

    /// The nodes whose kubelet the gate must watch: those running a pod it waits for.
    pub fn nodes(
        &self,
        pods: &[PodView],
        (now, mono): (OffsetDateTime, Instant),
        delay: Duration,
    ) -> BTreeSet<String> {
        pods.iter()
            .filter(|p| !p.finished)
            .filter(|p| {
                self.stand(p, now, mono, delay)
                    .is_some_and(|s| !matches!(s, Stand::Covered(Opened::Timer)))
                    || p.node
                        .as_ref()
                        .is_some_and(|n| self.kubelets.get(n).is_some_and(|k| k.down.is_some()))
            })
            .filter_map(|p| p.node.clone())
            .collect()
    }

    /// Records the answer to a poke of `pod` sent after this run's latest writes.
    pub fn record(&mut self, pod: &PodView, answer: Result<PokeAnswer, String>, at: Instant) {
        match answer {
            Ok(PokeAnswer::Done) => {
                self.lost.remove(&pod.uid);
                self.throttled.remove(&pod.uid);
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
            // Not poked yet: asked again after its Retry-After, a few times at most, then lost.
            Ok(PokeAnswer::Throttled(wait)) => {
                let n = self.throttled.get(&pod.uid).map_or(0, |(_, n)| *n) + 1;
                self.throttled.insert(pod.uid.clone(), (at + wait, n));
                if n >= MAX_THROTTLED {
                    self.lost.insert(
                        pod.uid.clone(),
                        format!("the API server throttled it (429) {n} times"),
                    );
                }
            }
            Err(e) => {
                self.lost.insert(pod.uid.clone(), e);
            }
        }
    }

    /// The pokes since the last gate (sent after the step before it, and while it waited).
    pub fn pokes_at_gate(&self) -> Option<Pokes> {
        self.tally.0.report()
    }

    /// The pokes of the whole run.
    pub fn pokes_in_run(&self) -> Option<Pokes> {
        let mut all = self.tally.1.clone();
        all.add(&self.tally.0);
        all.report()
    }

    /// Whether the gate may open on evidence, looking at `pods` (listed after every write it
    /// covers) at `now` (store clock) and `mono` (this process's clock). Remembers the pods it
    /// waits for (to report them gone) and the pods whose kubelet held the gate.
    pub fn verdict(
        &mut self,
        pods: &[PodView],
        now: OffsetDateTime,
        mono: Instant,
        delay: Duration,
    ) -> Verdict {
        let Beyond {
            mut recheck,
            mut timer,
            mut waiting,
        } = self.beyond_pods(pods, now, mono, delay);
        let mut held = Vec::new();
        let mut lines = Vec::new();
        for p in pods.iter().filter(|p| !p.finished) {
            let Some(stand) = self.stand(p, now, mono, delay) else {
                continue;
            };
            self.tracked
                .insert(p.uid.clone(), (p.name.clone(), p.node.clone()));
            if let Some(why) = self.behind(p, delay) {
                let node = p.node.clone().unwrap_or_default();
                self.held.entry(p.name.clone()).or_insert((node, why));
            }
            match stand {
                Stand::Covered(by) => lines.push(GatePod {
                    name: p.name.clone(),
                    node: p.node.clone(),
                    opened_by: by.name().into(),
                    detail: self.held.get(&p.name).map(|(_, w)| w.clone()),
                }),
                Stand::Until(at, why) => {
                    soon(at, &mut recheck);
                    waiting.push(format!("{} ({why})", p.name));
                }
                Stand::Timer(at, why) => {
                    timer = Some(timer.map_or(at, |t| t.max(at)));
                    waiting.push(format!(
                        "{} (only the timer: {why}; at {})",
                        p.name,
                        crate::timefmt::at_second(at)
                    ));
                }
                Stand::Held(why) => {
                    soon(mono + RECHECK, &mut recheck);
                    let node = p.node.clone().unwrap_or_default();
                    self.held.insert(p.name.clone(), (node, why.clone()));
                    held.push(format!("{} ({why})", p.name));
                }
            }
        }
        if recheck.is_some() || timer.is_some() || !held.is_empty() {
            return Verdict::Wait {
                recheck,
                timer,
                waiting,
                held,
            };
        }
        self.finish_lines(pods, &mut lines);
        Verdict::Open(lines)
    }

    /// What holds a gate besides the pods: `caBundle` targets written (until the API server
    /// has loaded them, or their timer when its cache did not show the write) and Secrets no
    /// one can be seen to hold (their timer).
    fn beyond_pods(
        &mut self,
        pods: &[PodView],
        now: OffsetDateTime,
        mono: Instant,
        delay: Duration,
    ) -> Beyond {
        let mut recheck: Option<Instant> = None;
        let mut waiting = Vec::new();
        let mut timer: Option<OffsetDateTime> = None;
        if let Some(other) = self.other {
            let settled = other + POKE_SETTLE;
            if mono < settled {
                soon(settled, &mut recheck);
                waiting.push("a caBundle target".to_string());
            }
        }
        if let Some(at) = self.other_stored {
            let left = (at + POKE_SETTLE - now).max(time::Duration::ZERO);
            if left > time::Duration::ZERO {
                soon(
                    mono + Duration::try_from(left).unwrap_or(POKE_SETTLE),
                    &mut recheck,
                );
                waiting.push("a caBundle target".to_string());
            }
        }
        if let Some((at, why)) = &self.other_unseen {
            let opens = timer_of(*at, delay);
            if now < opens {
                timer = Some(timer.map_or(opens, |t| t.max(opens)));
                waiting.push(format!(
                    "a caBundle target (only the timer: {why}; at {})",
                    crate::timefmt::at_second(opens)
                ));
            }
        }
        for (name, opens) in self.unobserved(pods, delay) {
            if now < opens {
                self.timed.insert(name.clone());
                timer = Some(timer.map_or(opens, |t| t.max(opens)));
                waiting.push(format!(
                    "Secret {name} (only the timer: no pod mounts it and no consumer declares it, so whoever holds it cannot be observed; at {})",
                    crate::timefmt::at_second(opens)
                ));
            }
        }
        Beyond {
            recheck,
            timer,
            waiting,
        }
    }

    /// The report lines of a gate that opens: `lines` (the pods that hold what changed), plus
    /// the pods waited for that are gone and the Secrets only a timer covered, sorted.
    fn finish_lines(&self, pods: &[PodView], lines: &mut Vec<GatePod>) {
        // Pods waited for that are no longer listed are gone.
        let listed: BTreeSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        for (uid, (name, node)) in &self.tracked {
            if !listed.contains(uid.as_str()) && !lines.iter().any(|l| &l.name == name) {
                lines.push(GatePod {
                    name: name.clone(),
                    node: node.clone(),
                    opened_by: Opened::Gone.name().into(),
                    detail: None,
                });
            }
        }
        for name in &self.timed {
            lines.push(GatePod {
                name: format!("Secret {name}"),
                node: None,
                opened_by: Opened::Timer.name().into(),
                detail: Some(
                    "no pod mounts it and no consumer declares it: whoever holds it cannot be observed"
                        .into(),
                ),
            });
        }
        lines.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// The written Secrets that no declared consumer and no pod in `pods` mounts, with the store
    /// time their timer opens at.
    fn unobserved(&self, pods: &[PodView], delay: Duration) -> Vec<(String, OffsetDateTime)> {
        self.writes
            .iter()
            .filter(|(n, _)| self.undeclared.contains(*n))
            .filter(|(n, _)| !pods.iter().any(|p| !p.finished && p.secrets.contains(*n)))
            .map(|(n, w)| (n.clone(), timer_of(w.by, delay)))
            .collect()
    }

    /// Starts the record of the next gate: the pods it waits for are its own.
    pub fn next_gate(&mut self) {
        self.tracked.clear();
        self.timed.clear();
        self.held.clear();
        let gate = std::mem::take(&mut self.tally.0);
        self.tally.1.add(&gate);
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
        store_now: &dyn Fn() -> OffsetDateTime,
    ) -> Result<(), Error> {
        ev.observe(outcome);
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
            .filter(|n| ev.kubelets.get(n).is_none_or(|k| k.unreadable.is_none()))
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
        let started = (Instant::now(), crate::metrics::throttled());
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
                Ok(PokeAnswer::Throttled(_))
                    if ev
                        .throttled
                        .get(&p.uid)
                        .is_some_and(|(_, n)| n + 1 >= MAX_THROTTLED) =>
                {
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
                    .filter(|s| ev.writes.contains_key(*s))
                    .cloned()
                    .collect(),
                action: action.into(),
                consumer: owner_name(ev, p),
                detail,
            });
            ev.record(p, answer, at);
        }
        // Each throttled answer the gate saw came after the client's own retries, each a 429
        // counted by the client (none in the simulation, which has no client).
        let answered = crate::metrics::throttled().saturating_sub(started.1);
        tally.throttled = tally.throttled.max(answered);
        ev.tally.0.add(&tally);
        crate::report::merge_pods(&mut ev.pods, lines);
    }

    /// Waits at a gate for evidence, until `until` at the latest. An `impatient` gate (a cleanup
    /// nobody waits for) stops as soon as what is left is a kubelet not live, or timers more than
    /// [`super::CLEANUP_WAIT`] away.
    pub async fn wait(
        &self,
        ev: &mut Evidence,
        outcome: &Outcome,
        other_written_at: Option<OffsetDateTime>,
        store_now: &dyn Fn() -> OffsetDateTime,
        (until, impatient): (Instant, bool),
    ) -> Result<Waited, Error> {
        ev.observe(outcome);
        // A caBundle target written by an earlier run (or repaired) counts as well.
        ev.other_stored = other_written_at;
        let mut said = Instant::now();
        loop {
            let Some(pods) = self.list(ev).await? else {
                return Ok(Waited::Unobservable);
            };
            // Pods that appeared or were missed since the step (or a gate resumed from an
            // earlier run), and pods whose kubelet came back from a gap: poked now.
            self.poke(ev, &pods, outcome, store_now()).await;
            self.read_kubelets(ev, &pods, store_now).await;
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
            let far = timer_left.is_some_and(|l| l > super::CLEANUP_WAIT);
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

/// `recheck` moved to `at` if that is sooner.
fn soon(at: Instant, recheck: &mut Option<Instant>) {
    *recheck = Some(recheck.map_or(at, |r| r.min(at)));
}

/// What holds a gate besides the pods ([`Evidence::verdict`]): when to look again, the latest
/// timer, and what is waited for.
struct Beyond {
    recheck: Option<Instant>,
    timer: Option<OffsetDateTime>,
    waiting: Vec<String>,
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const T0: OffsetDateTime = datetime!(2026-11-25 03:00:00 UTC);
    const DELAY: Duration = Duration::from_secs(120);
    const NODE: &str = "node-1";

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
            node: Some(NODE.into()),
        }
    }

    fn secs(n: i64) -> time::Duration {
        time::Duration::seconds(n)
    }

    fn dur(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A Lease read: version `v`, renewed at `renewed` (store clock), 40 s long.
    fn lease(v: u32, renewed: OffsetDateTime) -> Result<Option<KubeletLease>, String> {
        Ok(Some(KubeletLease {
            version: v.to_string(),
            renewed_at: Some(renewed),
            duration_seconds: Some(40),
        }))
    }

    /// The store's time `t` after `t0` on the monotonic clock (the two clocks run together).
    fn at(t0: Instant, n: u64) -> (Instant, OffsetDateTime) {
        (t0 + dur(n), T0 + secs(n as i64))
    }

    /// One write of `envoy` at T0, one hot pod on NODE mounting it created before, and its
    /// kubelet's Lease read once (version 1, renewed at T0).
    fn written() -> (Evidence, Vec<PodView>, Instant) {
        let t0 = Instant::now();
        let mut ev = Evidence::default();
        ev.wrote(&["envoy".to_string()], T0);
        ev.saw(NODE, lease(1, T0), t0, T0);
        (ev, vec![pod("proxy-a", "u1", "envoy", T0 - secs(600))], t0)
    }

    fn open_by(v: &Verdict) -> Vec<(&str, &str)> {
        match v {
            Verdict::Open(pods) => pods
                .iter()
                .map(|p| (p.name.as_str(), p.opened_by.as_str()))
                .collect(),
            Verdict::Wait { .. } => panic!("not open: {v:?}"),
        }
    }

    fn held(v: &Verdict) -> bool {
        matches!(v, Verdict::Wait { held, .. } if !held.is_empty())
    }

    #[tokio::test(start_paused = true)]
    async fn a_poke_counts_once_its_kubelet_renewed_after_it_and_the_settle_time_passed() {
        let (mut ev, pods, t0) = written();
        assert_eq!(ev.due(&pods, (T0, Instant::now()), DELAY).len(), 1);
        ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
        assert!(
            ev.due(&pods, (T0, Instant::now()), DELAY).is_empty(),
            "poked once per write"
        );
        // The read right after the poke: the version seen before it, which proves nothing.
        ev.saw(NODE, lease(1, T0), t0, T0);
        let (m, n) = at(t0, 6);
        ev.saw(NODE, lease(1, T0), m, n);
        assert!(
            matches!(ev.verdict(&pods, n, m, DELAY), Verdict::Wait { .. }),
            "the API server's acceptance is no evidence"
        );
        // A renewal after the poke; then the settle time from that renewal.
        let (m, n) = at(t0, 8);
        ev.saw(NODE, lease(2, n), m, n);
        assert!(matches!(
            ev.verdict(&pods, n, m, DELAY),
            Verdict::Wait { recheck: Some(r), .. } if r == m + POKE_SETTLE
        ));
        let (m, n) = at(t0, 8 + POKE_SETTLE.as_secs());
        assert_eq!(
            open_by(&ev.verdict(&pods, n, m, DELAY)),
            [("proxy-a", "poke plus live kubelet")]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_read_before_the_poke_is_not_after_it() {
        let (mut ev, pods, t0) = written();
        // The kubelet renewed (version 2) between a read before the poke and one after.
        let (m, n) = at(t0, 1);
        ev.record(&pods[0], Ok(PokeAnswer::Done), m);
        let (m, n2) = at(t0, 2);
        ev.saw(NODE, lease(2, n), m, n2);
        let (m, n) = at(t0, 10);
        ev.saw(NODE, lease(2, n2), m, n);
        let v = ev.verdict(&pods, n, m, DELAY);
        assert!(
            matches!(&v, Verdict::Wait { recheck: Some(r), held, .. } if *r == m + RECHECK && held.is_empty()),
            "{v:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_kubelet_seen_down_holds_the_gate_past_its_timer() {
        let (mut ev, pods, t0) = written();
        ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
        // No renewal for 13 s (1.25 intervals of a 40 s Lease is 12.5 s): seen not live.
        for s in [5, 10, 12, 13, 121, 600] {
            let (m, n) = at(t0, s);
            ev.saw(NODE, lease(1, T0), m, n);
            let v = ev.verdict(&pods, n, m, DELAY);
            assert_eq!(held(&v), s >= 13, "{s}s: {v:?}");
        }
        assert!(ev.held.contains_key("proxy-a"));
        // A write whose timer had passed before the kubelet went silent is not held.
        let mut old = Evidence::default();
        old.wrote(&["envoy".to_string()], T0 - secs(600));
        old.saw(NODE, lease(1, T0), t0, T0 + secs(100));
        assert_eq!(open_by(&old.verdict(&pods, T0 + secs(100), t0, DELAY)), []);
    }

    #[tokio::test(start_paused = true)]
    async fn a_kubelet_back_from_a_gap_needs_a_poke_after_its_watches_came_back() {
        let (mut ev, pods, t0) = written();
        ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
        let (m, n) = at(t0, 20);
        ev.saw(NODE, lease(1, T0), m, n);
        assert!(held(&ev.verdict(&pods, n, m, DELAY)));
        // Back: renewed at 30 s. The poke before proves nothing, nor a renewal now.
        let (back, nb) = at(t0, 30);
        ev.saw(NODE, lease(2, nb), back, nb);
        let (m, n) = at(t0, 41);
        ev.saw(NODE, lease(3, n), m, n);
        let v = ev.verdict(&pods, n, m, DELAY);
        assert!(
            matches!(&v, Verdict::Wait { recheck: Some(r), held, .. } if *r == back + WATCHES_BACK && held.is_empty()),
            "{v:?}"
        );
        assert!(
            ev.due(&pods, (n, m), DELAY).is_empty(),
            "not before its watches are back"
        );
        // Its watches are back: poked again, then a renewal and the settle time.
        let (m, n) = at(t0, 30 + WATCHES_BACK.as_secs());
        assert_eq!(ev.due(&pods, (n, m), DELAY).len(), 1);
        ev.record(&pods[0], Ok(PokeAnswer::Done), m);
        ev.saw(NODE, lease(3, n), m, n);
        let (m, n) = at(t0, 40 + WATCHES_BACK.as_secs());
        ev.saw(NODE, lease(4, n), m, n);
        let (m, n) = at(t0, 40 + WATCHES_BACK.as_secs() + POKE_SETTLE.as_secs());
        assert_eq!(
            open_by(&ev.verdict(&pods, n, m, DELAY)),
            [("proxy-a", "poke plus live kubelet")]
        );
        assert!(
            ev.held["proxy-a"].1.contains("has not renewed"),
            "{:?}",
            ev.held
        );
        // The timer counts from its return too.
        let mut timer_only = Evidence::default();
        timer_only.wrote(&["envoy".to_string()], T0);
        timer_only.saw(NODE, lease(1, T0), t0, T0);
        timer_only.saw(NODE, lease(1, T0), t0 + dur(20), T0 + secs(20));
        timer_only.saw(NODE, lease(2, T0 + secs(30)), t0 + dur(30), T0 + secs(30));
        let lost = Err("the connection broke".to_string());
        timer_only.record(&pods[0], lost, t0);
        let v = timer_only.verdict(&pods, T0 + secs(121), t0 + dur(121), DELAY);
        assert!(
            matches!(&v, Verdict::Wait { timer: Some(t), .. } if *t == T0 + secs(30) + WATCHES_BACK + DELAY),
            "{v:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_gap_between_two_close_reads_is_seen_from_the_renewal_times() {
        let t0 = Instant::now();
        let mut ev = Evidence::default();
        ev.wrote(&["envoy".to_string()], T0);
        let pods = vec![pod("proxy-a", "u1", "envoy", T0 - secs(600))];
        ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
        // Never silent longer than 12.5 s at a read, but the renewal read at 4 s came 14 s
        // after the one before it: a gap all the same.
        ev.saw(NODE, lease(1, T0 - secs(10)), t0, T0);
        ev.saw(NODE, lease(1, T0 - secs(10)), t0 + dur(2), T0 + secs(2));
        ev.saw(NODE, lease(2, T0 + secs(4)), t0 + dur(4), T0 + secs(4));
        let (m, n) = at(t0, 20);
        let v = ev.verdict(&pods, n, m, DELAY);
        assert!(
            matches!(&v, Verdict::Wait { recheck: Some(r), .. } if *r == t0 + dur(4) + WATCHES_BACK),
            "{v:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_poke_never_opens_the_gate_before_the_timer() {
        for answer in [
            Ok(PokeAnswer::Recreated),
            Err("pods \"proxy-a\" is forbidden (403)".to_string()),
            Err("the connection broke".to_string()),
        ] {
            let (mut ev, pods, t0) = written();
            ev.record(&pods[0], answer.clone(), t0);
            let (m, n) = at(t0, 100);
            ev.saw(NODE, lease(9, n), m, n);
            assert!(
                matches!(ev.verdict(&pods, n, m, DELAY), Verdict::Wait { timer: Some(t), .. } if t == T0 + secs(120)),
                "{answer:?}"
            );
            let (m, n) = at(t0, 120);
            ev.saw(NODE, lease(10, n), m, n);
            assert_eq!(
                open_by(&ev.verdict(&pods, n, m, DELAY)),
                [("proxy-a", "timer")]
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_poke_before_the_latest_write_proves_nothing_about_it() {
        let (mut ev, pods, t0) = written();
        ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
        ev.saw(NODE, lease(2, T0 + secs(5)), t0 + dur(5), T0 + secs(5));
        // The next step writes again: the earlier poke is for the earlier bytes.
        ev.wrote(&["envoy".to_string()], T0 + secs(10));
        let (m, n) = at(t0, 30);
        ev.saw(NODE, lease(3, n), m, n);
        assert!(matches!(
            ev.verdict(&pods, n, m, DELAY),
            Verdict::Wait { .. }
        ));
        assert_eq!(ev.due(&pods, (n, Instant::now()), DELAY).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_by_someone_else_after_a_poke_needs_a_new_poke() {
        let (mut ev, pods, t0) = written();
        ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
        ev.saw(NODE, lease(2, T0 + secs(2)), t0 + dur(2), T0 + secs(2));
        // The stored time of this run's own write does not count as a new write.
        ev.stored(&BTreeMap::from([("envoy".to_string(), T0)]));
        let (m, n) = at(t0, 2 + POKE_SETTLE.as_secs());
        assert_eq!(open_by(&ev.verdict(&pods, n, m, DELAY)).len(), 1);
        // Another writer changed the Secret after that poke: it proves nothing for that write.
        ev.stored(&BTreeMap::from([("envoy".to_string(), T0 + secs(3))]));
        assert!(matches!(
            ev.verdict(&pods, n, m, DELAY),
            Verdict::Wait { .. }
        ));
        assert_eq!(ev.due(&pods, (n, Instant::now()), DELAY).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_created_after_the_write_counts_only_on_a_live_kubelet_without_a_gap() {
        let (mut ev, _, t0) = written();
        let new = vec![pod("proxy-b", "u2", "envoy", T0 + secs(1))];
        assert!(ev.due(&new, (T0, Instant::now()), DELAY).is_empty());
        assert_eq!(
            open_by(&ev.verdict(&new, T0 + secs(1), t0, DELAY)),
            [("proxy-b", "created after the write")]
        );
        // Created a second before the bound on the write: it may have mounted the old bytes.
        ev.next_gate();
        let old = vec![pod("proxy-c", "u3", "envoy", T0 - secs(1))];
        assert!(matches!(
            ev.verdict(&old, T0, t0, DELAY),
            Verdict::Wait { .. }
        ));
        // Not scheduled yet: only the timer.
        let mut pending = pod("proxy-d", "u4", "envoy", T0 + secs(1));
        pending.node = None;
        let v = ev.verdict(std::slice::from_ref(&pending), T0 + secs(1), t0, DELAY);
        assert!(matches!(v, Verdict::Wait { timer: Some(_), .. }), "{v:?}");
        // Created during a gap of its kubelet (cut off at 5 s, back at 40 s): it may have started
        // from a stale Secret cache, so it counts only from its kubelet's return.
        ev.saw(NODE, lease(1, T0), t0 + dur(20), T0 + secs(20));
        ev.saw(NODE, lease(2, T0 + secs(40)), t0 + dur(40), T0 + secs(40));
        let during = vec![pod("proxy-e", "u5", "envoy", T0 + secs(30))];
        let v = ev.verdict(&during, T0 + secs(41), t0 + dur(41), DELAY);
        assert!(matches!(v, Verdict::Wait { .. }), "{v:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_lease_leaves_the_pod_to_the_timer_and_says_why() {
        let (mut ev, pods, t0) = written();
        let refused = "leases.coordination.k8s.io \"node-1\" is forbidden (403)".to_string();
        ev.saw(NODE, Err(refused), t0, T0);
        ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
        let v = ev.verdict(&pods, T0 + secs(60), t0 + dur(60), DELAY);
        let Verdict::Wait { timer, waiting, .. } = &v else {
            panic!("{v:?}")
        };
        assert_eq!(*timer, Some(T0 + secs(120)));
        assert!(
            waiting[0].contains("proxy-a") && waiting[0].contains("forbidden"),
            "{waiting:?}"
        );
        assert_eq!(
            open_by(&ev.verdict(&pods, T0 + secs(120), t0 + dur(120), DELAY)),
            [("proxy-a", "timer")]
        );
        // No Lease at all: the same.
        let mut none = Evidence::default();
        none.wrote(&["envoy".to_string()], T0);
        none.saw(NODE, Ok(None), t0, T0);
        assert!(matches!(
            none.verdict(&pods, T0, t0, DELAY),
            Verdict::Wait { timer: Some(_), .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn terminating_pods_and_old_restart_only_pods_are_waited_for_not_poked() {
        let (mut ev, mut pods, t0) = written();
        pods[0].terminating = true;
        assert!(ev.due(&pods, (T0, Instant::now()), DELAY).is_empty());
        assert!(matches!(
            ev.verdict(&pods, T0, t0, DELAY),
            Verdict::Wait { .. }
        ));
        // Gone: nothing left to wait for, and the report says so.
        assert_eq!(
            open_by(&ev.verdict(&[], T0, t0, DELAY)),
            [("proxy-a", "gone")]
        );

        ev.next_gate();
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
            ev.due(&old, (T0, Instant::now()), DELAY).is_empty(),
            "poking cannot reload it"
        );
        assert!(matches!(
            ev.verdict(&old, T0, t0, DELAY),
            Verdict::Wait { timer: Some(_), .. }
        ));
        ev.next_gate();
        let new = vec![pod("ratelimit-y", "u10", "envoy", T0 + secs(3))];
        assert_eq!(
            open_by(&ev.verdict(&new, T0, t0, DELAY)),
            [("ratelimit-y", "created after the write")]
        );
        // A pod of certgen's restart for the stored contents, whose creation second does not
        // show it came after the write: its template's fingerprint does.
        ev.next_gate();
        ev.digests = BTreeMap::from([("envoy".to_string(), "d2".to_string())]);
        let mut restarted = pod("ratelimit-z", "u11", "envoy", T0 - secs(1));
        restarted.restart_fingerprint = Some(crate::rollout::fingerprint([("envoy", "d2")]));
        assert_eq!(
            open_by(&ev.verdict(std::slice::from_ref(&restarted), T0, t0, DELAY)),
            [("ratelimit-z", "restarted")]
        );
        // A restart for other contents proves nothing about these.
        ev.next_gate();
        restarted.restart_fingerprint = Some(crate::rollout::fingerprint([("envoy", "d1")]));
        assert!(matches!(
            ev.verdict(&[restarted], T0, t0, DELAY),
            Verdict::Wait { timer: Some(_), .. }
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
        assert_eq!(open_by(&ev.verdict(&[], T0, t + POKE_SETTLE, DELAY)), []);
        // One written by an earlier run, as stored: counted on the store's clock.
        let mut ev = Evidence {
            other_stored: Some(T0),
            ..Evidence::default()
        };
        assert!(matches!(
            ev.verdict(&[], T0 + secs(4), t, DELAY),
            Verdict::Wait { .. }
        ));
        assert_eq!(open_by(&ev.verdict(&[], T0 + secs(5), t, DELAY)), []);
    }

    #[tokio::test(start_paused = true)]
    async fn a_secret_no_pod_mounts_and_no_consumer_declares_waits_for_its_timer() {
        let undeclared = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        let mut ev = Evidence {
            undeclared: undeclared(&["webhook"]),
            ..Evidence::default()
        };
        ev.wrote(&["webhook".to_string(), "envoy".to_string()], T0);
        let t = Instant::now();
        let opens = T0 + time::Duration::try_from(DELAY).unwrap();
        // Whoever holds it (a webhook outside the cluster) cannot be observed: no evidence.
        match ev.verdict(&[], T0 + secs(1), t, DELAY) {
            Verdict::Wait {
                timer: Some(at),
                waiting,
                ..
            } => {
                assert_eq!(at, opens);
                assert!(
                    waiting[0].starts_with("Secret webhook (only the timer"),
                    "{waiting:?}"
                );
            }
            v => panic!("the gate opened with no pod and no consumer for the Secret: {v:?}"),
        }
        assert_eq!(
            open_by(&ev.verdict(&[], opens, t, DELAY)),
            [("Secret webhook", "timer")]
        );
        // A declared consumer with no pod (scaled to zero): its next pods start from the store.
        let mut ev = Evidence {
            undeclared: undeclared(&[]),
            ..Evidence::default()
        };
        ev.wrote(&["webhook".to_string()], T0);
        assert_eq!(open_by(&ev.verdict(&[], T0 + secs(1), t, DELAY)), []);
        // A pod that mounts it is evidence to wait for, as for any Secret.
        let mut ev = Evidence {
            undeclared: undeclared(&["webhook"]),
            ..Evidence::default()
        };
        ev.wrote(&["webhook".to_string()], T0);
        let mounting = pod("webhook-1", "u1", "webhook", T0 + secs(1));
        assert!(
            ev.unobserved(std::slice::from_ref(&mounting), DELAY)
                .is_empty()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cabundle_write_the_api_servers_cache_did_not_show_waits_for_the_timer() {
        let mut ev = Evidence::default();
        ev.unseen_other(T0, "not shown".into());
        let t = Instant::now();
        // Settled like a poke, but not shown: the timer, from the write.
        match ev.verdict(&[], T0 + secs(30), t + POKE_SETTLE, DELAY) {
            Verdict::Wait {
                timer: Some(at),
                waiting,
                ..
            } => {
                assert_eq!(at, T0 + time::Duration::try_from(DELAY).unwrap());
                assert!(
                    waiting[0].contains("only the timer: not shown"),
                    "{waiting:?}"
                );
            }
            v => panic!("the gate opened on a write nobody saw loaded: {v:?}"),
        }
        let opens = T0 + time::Duration::try_from(DELAY).unwrap();
        assert_eq!(open_by(&ev.verdict(&[], opens, t + POKE_SETTLE, DELAY)), []);
        // A later write the cache shows is past the earlier one: it settles like a poke.
        ev.wrote_other();
        let t = Instant::now();
        assert_eq!(
            open_by(&ev.verdict(&[], T0 + secs(31), t + POKE_SETTLE, DELAY)),
            []
        );
    }

    #[test]
    fn the_worst_stand_wins() {
        let t = Instant::now();
        let cover = |o| Stand::Covered(o);
        assert_eq!(
            cover(Opened::Poke).worst(cover(Opened::Timer)),
            cover(Opened::Timer)
        );
        assert_eq!(
            cover(Opened::Timer).worst(Stand::Until(t, "x".into())),
            Stand::Until(t, "x".into())
        );
        assert_eq!(
            Stand::Until(t, "x".into()).worst(Stand::Timer(T0, "y".into())),
            Stand::Timer(T0, "y".into())
        );
        assert_eq!(
            Stand::Timer(T0 + secs(9), "late".into()).worst(Stand::Timer(T0, "y".into())),
            Stand::Timer(T0 + secs(9), "late".into())
        );
        assert_eq!(
            Stand::Timer(T0, "y".into()).worst(Stand::Held("h".into())),
            Stand::Held("h".into())
        );
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
        stray.node = None;
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

#[cfg(test)]
mod budget_tests;
