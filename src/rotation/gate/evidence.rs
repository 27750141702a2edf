//! The gate's state machine: what opens a gate, the evidence (pushed propagation, "pokes", and
//! what a kubelet shows of having acted on them), judged by pure functions over plain values.
//! [`Evidence`] is fed each observation as a plain value (a write, a poke's answer, a Lease
//! read, a round of probes, ...) and keeps its state private; asked, it says which pods it still
//! waits for and why ([`Evidence::verdict`]). The driver that pokes and reads the Leases
//! through the seam is `push.rs`.
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
//! prove nothing: they keep the timer, or open the gate by going away. A pod is also covered,
//! for one Secret, by a probe of its own endpoint (its EndpointSlice's `targetRef`) that
//! started after that Secret's write and passed ([`PodProbe`]; dialed by `probes.rs`): a probe
//! proves what the pod it reached holds, for the Secret it names, and nothing about any other
//! pod or Secret; a kubelet seen not live still holds its pods. Rollouts remain evidence as
//! before. Every pod's line in the report says what opened the gate for it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use crate::config::{Config, Kind, Reload};
use crate::outside::{EndpointPod, KubeletLease, PodView, PokeAnswer};
use crate::report::{GatePod, PodReport, Pokes};

pub use self::injections::Injection;
use self::injections::Injections;

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

/// retries) before it counts as lost: the pod then waits for its timer, like any lost poke.
pub(super) const MAX_THROTTLED: u32 = 3;

/// How often a gate waiting on evidence looks at the pods again, and says what it waits for.
pub(super) const RECHECK: Duration = Duration::from_secs(1);
pub(super) const PROGRESS: Duration = Duration::from_secs(10);

/// A write to a managed Secret, as the evidence needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Written {
    /// Which of this run's steps wrote it (0: an earlier run).
    epoch: u64,
    /// A bound the write landed before, on the store's clock.
    by: OffsetDateTime,
    /// When this run learned of it (monotonic): a kubelet gap seen after it moves it.
    at: Instant,
    /// Made by this run. A write it did not make (an earlier run's, another writer's) counts
    /// from when this run learned of it: what a kubelet did between that write and this run's
    /// first look at its Lease is unknown (stalled or cut off meanwhile, which an earlier run
    /// may have seen and this one cannot), so its pods are poked again, and opened by evidence
    /// or by a whole timer from then (the simulation's
    /// `a_kubelet_stalled_between_a_crash_and_the_rerun`).
    ours: bool,
}

impl Written {
    /// The write's time and its time as the pod's kubelet may have seen it (`eff_by`), as a
    /// gate counts them: as stored for a write this run made; for one it did not, no earlier
    /// than when this run learned of it (`now` and `mono`: the store's and this process's
    /// clocks now). See [`Written::ours`].
    fn counted_from(
        &self,
        eff_by: OffsetDateTime,
        now: OffsetDateTime,
        mono: Instant,
    ) -> (OffsetDateTime, OffsetDateTime) {
        if self.ours {
            return (self.by, eff_by);
        }
        let waited = mono.saturating_duration_since(self.at);
        let learned = now - time::Duration::try_from(waited).unwrap_or(time::Duration::ZERO);
        (self.by.max(learned), eff_by.max(learned))
    }
}

/// A poke that landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Poked {
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
    Probe,
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
            Self::Probe => "probe",
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
    held: BTreeMap<String, (String, String)>,
    /// The pods' report lines.
    pods: Vec<PodReport>,
    /// Why pokes are off for the rest of the run, once the API server refused a pod request
    /// (403): the report line.
    refused: Option<String>,
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
    /// Writes some of whose readers the gate cannot observe (pods that project
    /// ClusterTrustBundles from another namespace, or one by name): by what was written, the
    /// store time its timer opens at and why only the timer counts.
    unobserved: BTreeMap<String, (OffsetDateTime, String)>,
    /// Those the gate under way waited for, by their timer: a line each when it opens.
    timed_unobserved: BTreeSet<String>,
    /// Each managed Secret's digest as stored now (restart fingerprints are made of them).
    digests: BTreeMap<String, String>,
    /// Per-pod probes that passed, by (pod name, the Secret the probe names): the pod's UID as
    /// the endpoint's `targetRef` gave it, and when each attempt started (monotonic).
    proven: BTreeMap<(String, String), Vec<Passed>>,
    /// Whether the gate under way probed pods, and why a pod's latest probe did not pass (by
    /// pod name): for the report lines of the pods probes did not open.
    probing: bool,
    probe_failed: BTreeMap<String, String>,
    /// Consumers whose Service's endpoints could not be read at the gate under way (absent,
    /// refused): not asked again until the next gate.
    unprobeable: BTreeSet<String>,
    /// Pods whose server accepted a client certificate from a CA nobody trusts at the gate under
    /// way (by pod name): no trust probe of them can pass, so they are not probed again, and it
    /// is said once, until the next gate.
    verifies_nothing: BTreeSet<String>,
    /// The `caBundle` targets cert-manager's CA injector writes, at the trust gate under way,
    /// by target: the latest look at each (`injections.rs`).
    injections: Injections,
}

/// A passing per-pod probe: the pod's UID as its endpoint's `targetRef` gave it, and when the
/// attempt started (monotonic).
type Passed = (Option<String>, Instant);

/// A per-pod probe at a gate, as the rule judges it (the driver that dials is `probes.rs`): a
/// probe of one ready endpoint of a hot-reloading consumer's Service, the pod its EndpointSlice
/// names, and whether it passed. It proves only the Secret it names, for that pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodProbe {
    /// The pod behind the endpoint (its `targetRef`).
    pub pod: EndpointPod,
    /// The Secret the consumer's probe names.
    pub secret: String,
    /// When the attempt started (monotonic): it proves nothing about a write made after.
    pub started: Instant,
    /// `Ok` when it passed; else why not.
    pub result: Result<(), String>,
}

/// What pokes cost: how many landed, the time spent sending them, 429s and failures.
#[derive(Debug, Default, Clone)]
pub(super) struct Tally {
    pub(super) poked: usize,
    pub(super) took: Duration,
    pub(super) throttled: u64,
    pub(super) failed: usize,
}

impl Tally {
    pub(super) fn add(&mut self, other: &Tally) {
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
pub(super) type Owners = BTreeMap<(Kind, String), (String, Reload, BTreeSet<String>)>;

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
                    ours: true,
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

    /// Records a write (`what`, made by `at` on the store's clock) some of whose readers the
    /// gate cannot observe: it holds every gate until `at` plus the delay plus `extra`, and
    /// the report says `why`. A later write of the same replaces it.
    pub fn unobserved(&mut self, what: String, at: OffsetDateTime, extra: Duration, why: String) {
        let at = time::Duration::try_from(extra)
            .ok()
            .and_then(|e| at.checked_add(e))
            .unwrap_or(at);
        self.unobserved.insert(what, (at, why));
    }

    /// Writes of other objects read back as stored (ClusterTrustBundles: the newest write to
    /// certgen's bundles of each signer, by its mount name), earlier runs' too: counted like a
    /// Secret's stored write time.
    pub fn stored_other(&mut self, written_at: &BTreeMap<String, OffsetDateTime>) {
        self.stored(written_at, &|_| true);
    }

    /// What is stored now, as a step read it: each managed Secret's write time (see
    /// [`Evidence::stored`]; `written`: the Secrets this run's step wrote) and its contents'
    /// digest.
    pub(super) fn observe_stored(
        &mut self,
        written_at: &BTreeMap<String, OffsetDateTime>,
        written: &BTreeSet<String>,
        digests: &BTreeMap<String, String>,
    ) {
        self.stored(written_at, &|n| written.contains(n));
        self.digests = digests.clone();
    }

    /// Writes as stored (`written_at`: the stored write times, rounded up): those of earlier
    /// runs, and any other writer's since this run last looked. A stored time later than every
    /// write this run knows of for that Secret is a write it did not make: only pokes sent
    /// after now count for it.
    fn stored(
        &mut self,
        written_at: &BTreeMap<String, OffsetDateTime>,
        ours: &dyn Fn(&str) -> bool,
    ) {
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
                    ours: ours(n),
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
        (secret, w): (&str, Written),
        now: OffsetDateTime,
        mono: Instant,
        delay: Duration,
    ) -> Stand {
        let (eff_at, eff_by, behind) = self.as_seen(pod, w, delay);
        let (by, eff_by) = w.counted_from(eff_by, now, mono);
        let timer = timer_of(eff_by, delay);
        let node = pod.node.as_deref().unwrap_or("");
        let kubelet = pod.node.as_ref().and_then(|n| self.kubelets.get(n));
        // Silent since before the write's timer passed: it may not have projected it.
        if let Some((_, silent, since)) = kubelet.and_then(|k| k.down)
            && timer_of(by, delay) > since
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
        // The pod itself, reached through its endpoint after the write, showed it holds it.
        if self.proven_since(pod, secret, w) {
            return Stand::Covered(Opened::Probe);
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
            .filter_map(|s| Some((s.as_str(), *self.writes.get(s)?)))
            .map(|w| self.stand_for(pod, w, now, mono, delay))
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
    pub(super) fn restart_only(&self, pod: &PodView) -> bool {
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
                    .filter_map(|s| Some((s.as_str(), self.writes.get(s)?)))
                    .any(|(s, w)| {
                        let (eff_at, _, _) = self.as_seen(p, *w, delay);
                        let open = matches!(
                            self.stand_for(p, (s, *w), now, mono, delay),
                            Stand::Covered(_)
                        );
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
                    detail: self
                        .held
                        .get(&p.name)
                        .map(|(_, w)| w.clone())
                        .or_else(|| self.not_probed(p, by)),
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
        for (what, (at, why)) in &self.unobserved {
            let opens = timer_of(*at, delay);
            if now < opens {
                self.timed_unobserved.insert(what.clone());
                timer = Some(timer.map_or(opens, |t| t.max(opens)));
                waiting.push(format!(
                    "{what} (only the timer: {why}; at {})",
                    crate::timefmt::at_second(opens)
                ));
            }
        }
        let (injected, again) = self.injections_waiting(now, mono);
        if let Some(at) = again {
            soon(at, &mut recheck);
        }
        waiting.extend(injected);
        for (name, opens) in self.unobserved_secrets(pods, delay) {
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
        for what in &self.timed_unobserved {
            let why = self.unobserved.get(what).map(|(_, w)| w.clone());
            lines.push(GatePod {
                name: what.clone(),
                node: None,
                opened_by: Opened::Timer.name().into(),
                detail: why,
            });
        }
        lines.extend(self.injection_lines());
        lines.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// The written Secrets that no declared consumer and no pod in `pods` mounts, with the store
    /// time their timer opens at.
    fn unobserved_secrets(
        &self,
        pods: &[PodView],
        delay: Duration,
    ) -> Vec<(String, OffsetDateTime)> {
        self.writes
            .iter()
            .filter(|(n, _)| self.undeclared.contains(*n))
            .filter(|(n, _)| !pods.iter().any(|p| !p.finished && p.secrets.contains(*n)))
            .map(|(n, w)| (n.clone(), timer_of(w.by, delay)))
            .collect()
    }

    /// Whether a probe of `pod` for `secret` could still prove something: the Secret was
    /// written and no passing probe of this pod started after that write.
    pub fn probe_wanted(&self, pod: &PodView, secret: &str) -> bool {
        self.writes.contains_key(secret) && !self.proven(pod, secret)
    }

    /// Whether a probe of `pod`'s own endpoint showed it holds `secret` as last written.
    fn proven(&self, pod: &PodView, secret: &str) -> bool {
        self.writes
            .get(secret)
            .is_some_and(|w| self.proven_since(pod, secret, *w))
    }

    /// Records the per-pod probes of one round at the gate under way.
    pub fn probed(&mut self, probes: Vec<PodProbe>) {
        self.probing = true;
        for p in probes {
            match p.result {
                Ok(()) => {
                    self.probe_failed.remove(&p.pod.name);
                    self.proven
                        .entry((p.pod.name, p.secret))
                        .or_default()
                        .push((p.pod.uid, p.started));
                }
                Err(why) => {
                    self.probe_failed.insert(p.pod.name, why);
                }
            }
        }
    }

    /// Whether a probe of `pod`'s own endpoint for `secret` passed, started after the write
    /// `w` (a probe of another pod, of another Secret, or from before the write proves nothing;
    /// an endpoint whose UID is not the pod's was another pod of that name).
    fn proven_since(&self, pod: &PodView, secret: &str, w: Written) -> bool {
        self.proven
            .get(&(pod.name.clone(), secret.to_string()))
            .is_some_and(|passes| {
                passes.iter().any(|(uid, started)| {
                    uid.as_ref().is_none_or(|u| *u == pod.uid) && *started >= w.at
                })
            })
    }

    /// Why probes did not open the gate for `pod` (covered `by` something else), at a gate
    /// where pods were probed: for its report line.
    fn not_probed(&self, pod: &PodView, by: Opened) -> Option<String> {
        if !self.probing || by == Opened::Probe {
            return None;
        }
        if let Some(why) = self.probe_failed.get(&pod.name) {
            return Some(format!("its probe did not pass: {why}"));
        }
        let proven: Vec<&str> = pod
            .secrets
            .iter()
            .filter(|s| self.proven(pod, s))
            .map(String::as_str)
            .collect();
        Some(if proven.is_empty() {
            "not probed: it is no ready endpoint of a probed hot-reloading consumer".into()
        } else {
            format!("its probe proves Secret {} only", proven.join(", "))
        })
    }

    /// Records a look at the injected `caBundle` target `what` at the trust gate under way
    /// (`injections.rs`).
    pub fn observe_injection(&mut self, what: String, seen: Injection) {
        self.injections.observe(what, seen);
    }

    /// What the injected targets still hold the gate for, and when to look again.
    pub fn injections_waiting(
        &self,
        now: OffsetDateTime,
        mono: Instant,
    ) -> (Vec<String>, Option<Instant>) {
        self.injections.waiting((now, mono), (POKE_SETTLE, RECHECK))
    }

    /// The report lines of the injected targets of a gate that opens.
    pub fn injection_lines(&self) -> Vec<GatePod> {
        self.injections.lines()
    }

    /// Forgets the injected targets' looks: the next gate looks again.
    pub fn forget_injections(&mut self) {
        self.injections.clear();
    }

    /// Starts the record of the next gate: the pods it waits for are its own.
    pub fn next_gate(&mut self) {
        self.tracked.clear();
        self.timed.clear();
        self.timed_unobserved.clear();
        self.held.clear();
        self.probing = false;
        self.probe_failed.clear();
        self.unprobeable.clear();
        self.verifies_nothing.clear();
        self.forget_injections();
        let gate = std::mem::take(&mut self.tally.0);
        self.tally.1.add(&gate);
    }

    /// Report lines for pods that mount a managed Secret outside every declared consumer (or
    /// one its consumer does not declare): the configuration misses a consumer, whose pods
    /// certgen would neither restart nor probe. Warned about once per pod and Secret.
    pub(super) fn unowned(&mut self, pods: &[PodView], managed: &BTreeSet<String>) {
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
                    "{} {d} is no declared consumer: it is poked, never restarted or probed (a config's `consumers` entry, with its kind and reload mode, makes rotations restart or probe it; `certgen create` declares none, and a webhook that reloads its certificate needs none)",
                    kind.noun()
                ),
                (None, None) => "belongs to no declared consumer (no Deployment, StatefulSet or DaemonSet owns it): it is poked, never restarted or probed (a config's `consumers` entry for its workload makes rotations restart or probe it)".to_string(),
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

/// What the driver hands the gate besides pokes and Leases, and what it asks back: plain
/// values in, plain values out (the fields stay the gate's).
impl Evidence {
    /// Whether the consumers' workloads were resolved already ([`Evidence::observe_owners`]).
    pub(super) fn owners_known(&self) -> bool {
        self.owners.is_some()
    }

    /// Which consumer owns which workload, resolved once per run by the driver.
    pub(super) fn observe_owners(&mut self, owners: Owners) {
        self.owners = Some(owners);
    }

    /// The consumer that owns `pod`'s workload, once resolved.
    pub(super) fn owner_of(&self, pod: &PodView) -> Option<String> {
        let d = pod.owner.as_ref()?;
        self.owners.as_ref()?.get(d).map(|(c, _, _)| c.clone())
    }

    /// The API server refused a pod request (403): pokes are off for the rest of the run, and
    /// `note` is the report's line unless an earlier refusal's is kept. The line kept.
    pub(super) fn observe_refusal(&mut self, note: String) -> String {
        self.refused.get_or_insert(note).clone()
    }

    /// Why pokes are off for the rest of the run (a 403 seen), the report's line.
    pub fn pokes_refused(&self) -> Option<&String> {
        self.refused.as_ref()
    }

    /// Whether `node`'s kubelet Lease was found unreadable (refused, absent, no renewal time):
    /// it is not asked for again.
    pub(super) fn lease_unreadable(&self, node: &str) -> bool {
        self.kubelets
            .get(node)
            .is_some_and(|k| k.unreadable.is_some())
    }

    /// Whether this run knows of a write to `secret` that a gate waits for.
    pub(super) fn written(&self, secret: &str) -> bool {
        self.writes.contains_key(secret)
    }

    /// How many times the API server throttled the poke of the pod `uid` (429) since it was
    /// last poked.
    pub(super) fn throttled_times(&self, uid: &str) -> u32 {
        self.throttled.get(uid).map_or(0, |(_, n)| *n)
    }

    /// A batch of pokes sent: what they cost, and the pods' report lines.
    pub(super) fn observe_pokes(&mut self, tally: Tally, lines: Vec<PodReport>) {
        self.tally.0.add(&tally);
        crate::report::merge_pods(&mut self.pods, lines);
    }

    /// The last write to a `caBundle` target as stored (store clock; earlier runs' too), read
    /// when a gate begins to wait.
    pub(super) fn observe_other_stored(&mut self, at: Option<OffsetDateTime>) {
        self.other_stored = at;
    }

    /// The pods' report lines.
    pub fn pod_lines(&self) -> &[PodReport] {
        &self.pods
    }

    /// Pods whose kubelet held a gate (not live) or put it behind (back from a gap), by name:
    /// (node, what was seen).
    pub fn held(&self) -> &BTreeMap<String, (String, String)> {
        &self.held
    }

    /// Whether the endpoints of `consumer`'s Service could not be read at the gate under way.
    pub(super) fn unprobeable(&self, consumer: &str) -> bool {
        self.unprobeable.contains(consumer)
    }

    /// The endpoints of `consumer`'s Service could not be read (absent, refused): not asked
    /// again until the next gate.
    pub(super) fn observe_unprobeable(&mut self, consumer: &str) {
        self.unprobeable.insert(consumer.to_string());
    }

    /// Whether `pod`'s server accepted a client certificate from a CA nobody trusts at the
    /// gate under way.
    pub(super) fn verifies_nothing(&self, pod: &str) -> bool {
        self.verifies_nothing.contains(pod)
    }

    /// `pod`'s server accepted a client certificate from a CA nobody trusts: not probed again
    /// until the next gate. Whether this is news at this gate (it is said once).
    pub(super) fn observe_verifies_nothing(&mut self, pod: &str) -> bool {
        self.verifies_nothing.insert(pod.to_string())
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

mod injections;
#[cfg(test)]
mod tests;
