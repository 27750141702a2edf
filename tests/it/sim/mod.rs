//! A deterministic simulation of whole rotation trajectories, checked by an independent oracle.
//!
//! certgen's real driver, planner and apply step run against an in-memory store on a virtual
//! clock (tokio's paused time): the store is the API server, its clock is the only clock the
//! runs may use, and every write is kept as a version with the instant it landed. Runs are
//! stopped after any write (as if killed), have the answer to a write lost (it landed; the run
//! sees a broken connection), see a write fail before it lands, run two at a time with their
//! store calls interleaved, take any flags, and meet time jumps and the store's clock stepping
//! back. Starting states include a fresh namespace, certgen's steady state, Envoy Gateway's own
//! certgen output (no CA Secret), and CAs near or past expiry.
//!
//! The oracle knows nothing of certgen's phases. Consumers load each write at their own pace,
//! up to the propagation delay later, so a version of a Secret may be held from when it landed
//! until the delay after the next version landed. Every pair of versions that may be held at
//! the same instant (two peers, or two replicas of one) must complete mutual TLS: each leaf
//! verifies against the other's bundle with rustls-webpki, for server and client use, at that
//! instant. Besides: no bundle holds more than two CAs, or a duplicate, or a CA expired when
//! written; a run publishes at most one new CA, and none when it resumes a rotation (with
//! `--overwrite` too: one rotation per due); every run
//! exits non-zero or leaves nothing due but an optional cleanup; and once runs stop, plain runs
//! converge to a state where one more plain run writes nothing.

mod cases;
mod foreign;
mod kwc;
mod lease;
mod outside;
mod set;
mod unfinished;

pub use foreign::Foreign;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certgen::config::{Config, Env, Overrides, RunOptions, Source, Strategy as RotationStrategy};
use certgen::pki::{Cert, parse_cert_chain};
use certgen::rotation::{self, Invocation};
use certgen::secret::{Expect, Observed, SecretWrite, StoredSecret};
use certgen::store::{ApiFailure, SecretStore, StoreError};
use rustls_pki_types::UnixTime;
use time::OffsetDateTime;

/// The virtual clock's origin.
pub const BASE: OffsetDateTime = time::macros::datetime!(2026-06-01 00:00 UTC);

/// The propagation delay the runs use and the oracle assumes consumers take at most.
pub const DELAY: Duration = Duration::from_secs(90);

pub const TLS: [&str; 3] = ["envoy-gateway", "envoy", "envoy-rate-limit"];
pub const CA: &str = "envoy-gateway-ca";
pub const HMAC: &str = "envoy-oidc-hmac";

pub fn config() -> Config {
    Config::resolve(
        &Source::Profile("envoy-gateway".into()),
        &Overrides::default(),
        &Env::default(),
    )
    .unwrap()
}

/// One stored Secret and its history.
#[derive(Clone)]
struct Object {
    secret: StoredSecret,
}

/// A version of a TLS Secret, as consumers may hold it.
#[derive(Clone, Debug)]
pub struct Version {
    pub secret: String,
    pub from: OffsetDateTime,
    /// When the next version landed (None: still current).
    pub until: Option<OffsetDateTime>,
    pub leaf: Option<Cert>,
    pub bundle: Vec<Cert>,
    /// Who wrote it: the run's index.
    pub run: usize,
    /// When another writer deleted the Secret, ending this version.
    pub deleted_at: Option<OffsetDateTime>,
    /// Its place in [`World::history`].
    pub seq: usize,
}

/// The API server: objects, their versions, and the clock.
pub struct World {
    objects: BTreeMap<String, Object>,
    pub versions: Vec<Version>,
    next_rv: u64,
    /// The store clock's offset from the virtual clock (a step of the server's clock).
    pub clock_offset: time::Duration,
    /// The writer's (certgen's process) clock's offset from the virtual clock.
    pub writer_offset: time::Duration,
    /// How many clock steps were made.
    pub clock_steps: usize,
    start: tokio::time::Instant,
    /// Every CA fingerprint ever published in any Secret, and the run that published it first.
    pub cas: BTreeMap<[u8; 32], usize>,
    /// Writes to the HMAC Secret, per run.
    pub hmac_writes: BTreeMap<usize, usize>,
    /// Every write, in order: (run, Secret).
    pub log: Vec<(usize, String)>,
    /// Every Secret as each write or deletion left it, in order (for restored backups).
    pub history: Vec<(String, Option<StoredSecret>)>,
    /// Who made each entry of `history` (a run's index, or [`FOREIGN`]).
    pub history_by: Vec<usize>,
    /// Where `history` stood when each run started.
    pub run_marks: Vec<usize>,
    /// When another writer deleted certgen's CA Secret (its key store), on the true clock.
    pub ca_deleted: Vec<OffsetDateTime>,
    /// The run lock's Lease, when runs take it ([`lease`]).
    pub lease: lease::LeaseState,
    /// The leaves only serve (a webhook's, as `certgen create` issues them): the oracle checks
    /// them for server use alone, not for mutual TLS.
    pub serving_only: bool,
    /// The TLS Secrets' data keys of the bundle and the leaf: certgen's `ca.crt` and `tls.crt`,
    /// or another layout's (kube-webhook-certgen's `ca` and `cert`).
    pub keys: (String, String),
    /// The CA Secret's data key of its active CA: certgen's `tls.crt`, or another layout's
    /// (Cilium's `ca.crt`).
    pub ca_cert_key: String,
    /// Every Secret read and every write that landed (Secrets, and the outside world's
    /// actions), in order: where each step of a run begins and ends ([`World::first_step`]).
    pub trail: Vec<Trail>,
}

/// One entry of [`World::trail`].
#[derive(Clone, Debug)]
pub struct Trail {
    pub run: usize,
    /// The true instant.
    pub at: OffsetDateTime,
    /// What landed (`Secret NAME`, `caBundle NAME`, `restart NAME`, `poke NAME`); `None` for
    /// a read of a Secret.
    pub what: Option<String>,
}

/// The run index of writes made by another tool (and of seeded Secrets).
pub const FOREIGN: usize = usize::MAX;

impl World {
    pub fn new() -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self {
            objects: BTreeMap::new(),
            versions: Vec::new(),
            next_rv: 1,
            clock_offset: time::Duration::ZERO,
            writer_offset: time::Duration::ZERO,
            clock_steps: 0,
            start: tokio::time::Instant::now(),
            cas: BTreeMap::new(),
            hmac_writes: BTreeMap::new(),
            log: Vec::new(),
            history: Vec::new(),
            history_by: Vec::new(),
            run_marks: Vec::new(),
            ca_deleted: Vec::new(),
            lease: lease::LeaseState::default(),
            serving_only: false,
            keys: ("ca.crt".into(), "tls.crt".into()),
            ca_cert_key: "tls.crt".into(),
            trail: Vec::new(),
        }))
    }

    /// The true instant (the virtual clock), which consumers and the oracle live by.
    pub fn true_now(&self) -> OffsetDateTime {
        let elapsed = tokio::time::Instant::now() - self.start;
        BASE + time::Duration::try_from(elapsed).unwrap()
    }

    /// The store's clock: the true instant, unless the server's clock stepped.
    pub fn store_now(&self) -> OffsetDateTime {
        self.true_now() + self.clock_offset
    }

    /// The writer's (certgen's process) wall clock: the true instant, unless it stepped.
    pub fn writer_now(&self) -> OffsetDateTime {
        self.true_now() + self.writer_offset
    }

    /// Steps the store's clock (`store`) or the writer's by `secs` seconds. One of the two
    /// steps forward at a time: once one has, a forward step of the other is not made (both
    /// clocks stepped forward between a write and a later run shorten its gate: no run can
    /// tell; docs/rotation.md).
    pub fn step(&mut self, store: bool, secs: i64) {
        let by = time::Duration::seconds(secs);
        let (this, other) = if store {
            (&mut self.clock_offset, self.writer_offset)
        } else {
            (&mut self.writer_offset, self.clock_offset)
        };
        if secs > 0 && other > time::Duration::ZERO {
            return;
        }
        *this += by;
        self.clock_steps += 1;
    }

    pub fn get(&self, name: &str) -> Option<&StoredSecret> {
        self.objects.get(name).map(|o| &o.secret)
    }

    /// Stores a Secret as another tool would (outside any run: run index `usize::MAX`).
    pub fn seed(&mut self, name: &str, type_: &str, data: BTreeMap<String, Vec<u8>>) {
        let write = SecretWrite {
            name: name.into(),
            type_: if type_ == "kubernetes.io/tls" {
                "kubernetes.io/tls"
            } else {
                "Opaque"
            },
            data,
            secret_keys: vec![],
            remove: vec![],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            expect: Expect::Absent,
        };
        self.apply(&write, usize::MAX);
    }

    fn apply(&mut self, write: &SecretWrite, run: usize) {
        let mut secret = match self.objects.get(&write.name) {
            Some(o) => o.secret.clone(),
            None => StoredSecret {
                name: write.name.clone(),
                type_: write.type_.to_string(),
                data: BTreeMap::new(),
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                owners: vec![],
                version: String::new(),
                written_at: None,
                divergent: vec![],
                certificate: None,
                writes: Vec::new(),
            },
        };
        secret
            .data
            .extend(write.data.iter().map(|(k, v)| (k.clone(), v.clone())));
        for k in &write.remove {
            secret.data.remove(k);
        }
        secret.labels.extend(write.labels.clone());
        secret.annotations.extend(write.annotations.clone());
        self.store(secret, run);
    }

    /// Stores `secret` as the new version of its object, written by `run`, at the store's time.
    fn store(&mut self, mut secret: StoredSecret, run: usize) {
        let now = self.store_now();
        let rv = self.next_rv.to_string();
        self.next_rv += 1;
        let name = secret.name.clone();
        secret.version = rv;
        secret.written_at = Some(now);
        let (bundle_key, cert_key) = self.keys.clone();
        for key in [&*bundle_key, &*cert_key, "ca.crt", "tls.crt", "next.crt"] {
            if let Some(Ok(certs)) = secret.data.get(key).map(|b| parse_cert_chain(b)) {
                for c in certs.iter().filter(|c| c.is_ca) {
                    self.cas.entry(c.fingerprint()).or_insert(run);
                }
            }
        }
        if name == HMAC {
            *self.hmac_writes.entry(run).or_default() += 1;
        }
        self.log.push((run, name.clone()));
        self.landed(run, format!("Secret {name}"));
        if TLS.contains(&name.as_str()) {
            let true_now = self.true_now();
            // (A version deleted meanwhile ended with its deletion.)
            if let Some(prev) = self.versions.iter_mut().rev().find(|v| v.secret == name)
                && prev.until.is_none()
            {
                prev.until = Some(true_now);
            }
            let parse = |k: &str| {
                secret
                    .data
                    .get(k)
                    .and_then(|b| parse_cert_chain(b).ok())
                    .unwrap_or_default()
            };
            self.versions.push(Version {
                secret: name.clone(),
                from: true_now,
                until: None,
                leaf: parse(&cert_key).into_iter().next(),
                bundle: parse(&bundle_key),
                run,
                deleted_at: None,
                seq: self.history.len(),
            });
        }
        self.history.push((name.clone(), Some(secret.clone())));
        self.history_by.push(run);
        self.objects.insert(name.clone(), Object { secret });
    }

    /// Deletes a Secret (another tool, or a person): its last version ends now. (A kubelet
    /// keeps a deleted Secret's files in running pods; the model ends them with the deletion,
    /// like another writer's replacement: what certgen writes next must work with what the
    /// deletion left, and a recreated Secret cannot be signed by a CA whose key was deleted.)
    pub fn delete(&mut self, name: &str) {
        if self.objects.remove(name).is_none() {
            return;
        }
        let true_now = self.true_now();
        if name == CA {
            self.ca_deleted.push(true_now);
        }
        if let Some(prev) = self.versions.iter_mut().rev().find(|v| v.secret == name) {
            prev.until = Some(true_now);
            prev.deleted_at = Some(true_now);
        }
        self.log.push((FOREIGN, name.to_string()));
        self.history.push((name.to_string(), None));
        self.history_by.push(FOREIGN);
    }

    /// Whether a rotation is in progress, as the store shows it: a pending CA in certgen's CA
    /// Secret (`next.crt`) that has not yet signed every leaf (the trust phase; a CA Secret
    /// restored to a state whose rotation the leaves have finished is not one), or a TLS Secret
    /// whose bundle trusts the CA Secret's active CA while its leaf is not yet signed by it (the
    /// leaves phase).
    pub fn under_way(&self) -> bool {
        let Some(ca) = self.get(CA) else {
            return false;
        };
        let first = |b: &Vec<u8>| parse_cert_chain(b).ok().and_then(|c| c.into_iter().next());
        let (bundle_key, cert_key) = (&self.keys.0, &self.keys.1);
        let held: Vec<(Cert, Vec<Cert>)> = TLS
            .iter()
            .filter_map(|n| self.get(n))
            .filter_map(|s| {
                let leaf = s.data.get(cert_key).and_then(first)?;
                let bundle = s
                    .data
                    .get(bundle_key)
                    .and_then(|b| parse_cert_chain(b).ok())
                    .unwrap_or_default();
                Some((leaf, bundle))
            })
            .collect();
        if let Some(next) = ca.data.get("next.crt").and_then(first) {
            return held.iter().any(|(leaf, _)| !next.signed(leaf));
        }
        let Some(active) = ca.data.get(&self.ca_cert_key).and_then(first) else {
            return false;
        };
        held.iter()
            .any(|(leaf, bundle)| !active.signed(leaf) && bundle.contains(&active))
    }

    /// Records in [`World::trail`] that `what` landed, written by `run`.
    pub fn landed(&mut self, run: usize, what: String) {
        let at = self.true_now();
        self.trail.push(Trail {
            run,
            at,
            what: Some(what),
        });
    }

    /// The Secret, `caBundle` and ClusterTrustBundle writes of the first step `run` made after trail entry `from`:
    /// from its first such write up to its next read of a Secret (the next step's, or a
    /// re-plan's), and the instant that first write landed.
    pub fn first_step(
        &self,
        run: usize,
        from: usize,
    ) -> (BTreeSet<String>, Option<OffsetDateTime>) {
        let mut writes = BTreeSet::new();
        let mut at = None;
        for t in self.trail[from..].iter().filter(|t| t.run == run) {
            match &t.what {
                None if at.is_some() => break,
                None => {}
                Some(w)
                    if w.starts_with("Secret ")
                        || w.starts_with("caBundle ")
                        || w.starts_with("ClusterTrustBundle ") =>
                {
                    at.get_or_insert(t.at);
                    writes.insert(w.clone());
                }
                Some(_) => {}
            }
        }
        (writes, at)
    }

    /// Replaces a Secret whole, as a blind `update` (or a restore) by another tool does.
    pub fn replace(&mut self, secret: StoredSecret) {
        self.store(secret, FOREIGN);
    }
}

/// Faults injected into one run's store calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// The process dies right after its N-th write lands (1-based).
    pub crash_after: Option<usize>,
    /// The N-th write lands, but its answer is lost (a broken connection).
    pub lose_reply: Option<usize>,
    /// The N-th write does not land (a broken connection before the server got it).
    pub fail_before: Option<usize>,
    /// Seed for how many times each store call yields (interleaving of concurrent runs).
    pub yields: u64,
    /// From its N-th Secret read or write on (1-based), the store never answers: an API
    /// server stopped (SIGSTOP) or cut off, as a member of a set of clusters may be.
    pub hang_from: Option<usize>,
}

/// One run's view of the world.
pub struct Session {
    world: Arc<Mutex<World>>,
    run: usize,
    faults: Faults,
    state: Arc<Mutex<SessionState>>,
    /// Told when the process dies in a task of its own (a Lease renewal), so the whole run
    /// stops there, as a killed process does.
    died: Arc<tokio::sync::Notify>,
    /// Secret reads and writes made, for [`Faults::hang_from`].
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Default)]
struct SessionState {
    writes: usize,
    dead: bool,
    rng: u64,
}

fn broken(what: &str) -> StoreError {
    StoreError::Api(Box::new(ApiFailure {
        verb: "patch",
        resource: "secrets",
        namespace: "sim".into(),
        name: what.into(),
        status: None,
        message: "connection reset (simulated)".into(),
        hint: String::new(),
    }))
}

fn crashed() -> StoreError {
    StoreError::Local {
        path: "sim".into(),
        message: "the process was killed (simulated)".into(),
    }
}

impl Session {
    pub fn new(world: &Arc<Mutex<World>>, run: usize, faults: Faults) -> Self {
        Self {
            world: world.clone(),
            run,
            faults,
            state: Arc::new(Mutex::new(SessionState {
                rng: faults
                    .yields
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1),
                ..SessionState::default()
            })),
            died: Arc::new(tokio::sync::Notify::new()),
            calls: Arc::default(),
        }
    }

    /// Another store of the same process (a run over a set of clusters reaches each member
    /// through its own): it dies with this one, and `faults`' write counts are the process's.
    pub fn beside(&self, world: &Arc<Mutex<World>>, hang_from: Option<usize>) -> Self {
        Self {
            world: world.clone(),
            run: self.run,
            faults: Faults {
                hang_from,
                ..self.faults
            },
            state: self.state.clone(),
            died: self.died.clone(),
            calls: Arc::default(),
        }
    }

    /// A member that stopped answering: this call, and every one after, never returns.
    async fn answers(&self) {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if self.faults.hang_from.is_some_and(|from| n >= from) {
            std::future::pending::<()>().await;
        }
    }

    async fn yields(&self) {
        let n = {
            let mut s = self.state.lock().unwrap();
            s.rng = s
                .rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s.rng >> 61) as usize
        };
        for _ in 0..n {
            tokio::task::yield_now().await;
        }
    }
}

impl SecretStore for Session {
    fn describe(&self) -> String {
        "simulated store".into()
    }

    fn object(&self, name: &str) -> String {
        format!("Secret sim/{name}")
    }

    fn now(&self) -> OffsetDateTime {
        self.world.lock().unwrap().store_now()
    }

    fn writer_now(&self) -> OffsetDateTime {
        self.world.lock().unwrap().writer_now()
    }

    async fn get(&self, name: &str) -> Result<Observed, StoreError> {
        self.yields().await;
        self.answers().await;
        if self.state.lock().unwrap().dead {
            return Err(crashed());
        }
        let mut world = self.world.lock().unwrap();
        let at = world.true_now();
        world.trail.push(Trail {
            run: self.run,
            at,
            what: None,
        });
        Ok(match world.get(name) {
            None => Observed::Absent,
            Some(s) => Observed::Present(s.clone()),
        })
    }

    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError> {
        self.yields().await;
        self.answers().await;
        let n = {
            let mut s = self.state.lock().unwrap();
            if s.dead {
                return Err(crashed());
            }
            s.writes += 1;
            s.writes
        };
        if self.faults.fail_before == Some(n) {
            return Err(broken(&write.name));
        }
        {
            let mut world = self.world.lock().unwrap();
            let current = world.get(&write.name).map(|s| s.version.clone());
            match (&write.expect, current) {
                (Expect::Absent, None) => {}
                (Expect::Version(v), Some(c)) if *v == c => {}
                (_, _) => {
                    return Err(StoreError::Conflict {
                        what: write.name.clone(),
                        detail: "changed since it was read".into(),
                    });
                }
            }
            world.apply(write, self.run);
        }
        if self.faults.crash_after == Some(n) {
            self.state.lock().unwrap().dead = true;
            return Err(crashed());
        }
        if self.faults.lose_reply == Some(n) {
            return Err(broken(&write.name));
        }
        Ok(())
    }
}

/// One invocation of certgen.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunSpec {
    pub overwrite: bool,
    pub rotate_hmac: bool,
    pub immediate: bool,
    pub force: bool,
    pub faults: Faults,
    /// `--timeout` (default 5 minutes).
    pub timeout: Option<Duration>,
}

/// How a run ended.
#[derive(Debug)]
pub struct Ended {
    pub run: usize,
    pub spec: RunSpec,
    pub code: u8,
    pub message: String,
    /// A rotation was in progress when the run started ([`World::under_way`]).
    pub resumed: bool,
    pub note: Option<String>,
    /// Another writer replaced or deleted the CA Secret (certgen's key store) while this run
    /// ran: a CA whose key was taken away cannot be finished, so the one-new-CA rule does not
    /// hold for this run.
    pub ca_disturbed: bool,
    /// Where its dry run (made from the same state just before it, [`run_checked`]) and its
    /// first step differ: the oracle's "dry run = run".
    pub dry_run_differs: Option<String>,
}

fn options(spec: &RunSpec) -> RunOptions {
    RunOptions {
        overwrite: spec.overwrite,
        rotate_hmac: spec.rotate_hmac,
        force: spec.force,
        strategy: if spec.immediate {
            RotationStrategy::Immediate
        } else {
            RotationStrategy::Staged
        },
        propagation_delay: DELAY,
        dry_run: false,
        wait: false,
        probe: false,
        poke: false,
        poke_rate: None,
        timeout: spec.timeout.unwrap_or(Duration::from_secs(300)),
        overwrite_why: Default::default(),
        set_member: None,
        respect_window: false,
    }
}

/// An invocation of the main job on the store alone (no workloads, targets or pods), its
/// deadline `options.timeout` from now.
fn invocation(config: &Config, options: RunOptions, lock: certgen::lock::Target) -> Invocation<'_> {
    Invocation {
        config,
        options,
        deadline: tokio::time::Instant::now() + options.timeout,
        workloads: None,
        endpoints: None,
        webhooks: None,
        trust_bundles: None,
        pods: None,
        lock,
    }
}

/// Runs certgen's driver once against the world.
pub async fn run(world: &Arc<Mutex<World>>, config: &Config, index: usize, spec: RunSpec) -> Ended {
    let resumed = {
        let mut w = world.lock().unwrap();
        let mark = w.history.len();
        w.run_marks.push(mark);
        w.under_way()
    };
    let session = Session::new(world, index, spec.faults);
    let invocation = invocation(config, options(&spec), lease::target(&session));
    let result = tokio::select! {
        r = Box::pin(rotation::run(&session, invocation)) => Some(r),
        () = session.died.notified() => None,
    };
    let (code, message, note) = match result {
        Some(Ok((report, e))) => {
            lease::ended(world, index, &report);
            match e {
                None => (0, String::new(), report.note),
                Some(e) => (e.code(), e.to_string(), report.note),
            }
        }
        Some(Err(e)) => (e.code(), e.to_string(), None),
        // Killed in a Lease renewal: the process is gone, whatever it was doing.
        None => (5, crashed().to_string(), None),
    };
    if tracing_asked() {
        let now = world.lock().unwrap().true_now();
        eprintln!(
            "run {index} ({spec:?}) ended at {} with {code}: {message} {}",
            now.time(),
            note.as_deref().unwrap_or("")
        );
    }
    Ended {
        run: index,
        spec,
        code,
        message,
        resumed,
        note,
        ca_disturbed: false,
        dry_run_differs: None,
    }
}

/// The run index of dry runs: they write nothing, and their reads are theirs alone.
pub const DRY: usize = usize::MAX - 2;

/// A dry run with `spec`'s flags against the world as it is: its report, or the error the
/// dry run exits with.
pub async fn dry_run(
    world: &Arc<Mutex<World>>,
    config: &Config,
    spec: RunSpec,
) -> Result<certgen::report::Report, String> {
    let session = Session::new(world, DRY, Faults::default());
    let mut options = options(&spec);
    options.dry_run = true;
    let invocation = invocation(config, options, certgen::lock::Target::None);
    match Box::pin(rotation::run(&session, invocation)).await {
        Ok((report, None)) => Ok(report),
        Ok((_, Some(e))) | Err(e) => Err(e.to_string()),
    }
}

/// [`run`], after a dry run with the same flags from the same state, whose plan the oracle
/// compares with the run's first step ([`dry_run_is_the_run`]).
pub async fn run_checked(
    world: &Arc<Mutex<World>>,
    config: &Config,
    index: usize,
    spec: RunSpec,
) -> Ended {
    // (Boxed: two whole runs' futures side by side would not fit a test thread's stack.)
    let dry = Box::pin(dry_run(world, config, spec))
        .await
        .map(|r| planned_writes(&r));
    let mark = world.lock().unwrap().mark();
    let mut e = Box::pin(run(world, config, index, spec)).await;
    e.dry_run_differs = dry_run_is_the_run(&world.lock().unwrap(), &e, mark, &dry).err();
    e
}

/// Where a run starts in [`World::trail`], and when.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    pub trail: usize,
    pub at: OffsetDateTime,
}

impl World {
    /// Where the next run starts.
    pub fn mark(&self) -> Mark {
        Mark {
            trail: self.trail.len(),
            at: self.true_now(),
        }
    }
}

/// What a dry run's report plans to write, named as [`World::trail`] names writes: Secrets,
/// `caBundle` targets, and ClusterTrustBundles (`outside::bundles::action_name`).
pub fn planned_writes(report: &certgen::report::Report) -> BTreeSet<String> {
    report
        .secrets
        .iter()
        .filter(|e| e.action.writes())
        .map(|e| match e.kind {
            certgen::plan::Kind::Webhook => {
                let name = e.secret.rsplit(' ').next().unwrap_or(&e.secret);
                format!("caBundle {name}")
            }
            certgen::plan::Kind::TrustBundle => {
                let name = e
                    .secret
                    .strip_prefix("ClusterTrustBundle ")
                    .unwrap_or(&e.secret);
                let verb = match e.action {
                    certgen::plan::Action::Create => "create",
                    certgen::plan::Action::Delete => "delete",
                    _ => "update",
                };
                outside::bundles::action_name(verb, name)
            }
            _ => format!("Secret {}", e.secret),
        })
        .collect()
}

/// The oracle's "dry run = run": the dry run made from the state run `e` started from
/// (`mark`; its writes as [`planned_writes`] names them) plans exactly the writes of the run's
/// first step (Secrets, `caBundle` targets and ClusterTrustBundles).
/// A run with faults may stop or re-plan within that step: what it wrote is part of the plan.
/// A dry run that plans nothing (at a gate, or nothing due) is followed by no write before the
/// run has waited; a dry run that fails is followed by a run that fails before writing.
pub fn dry_run_is_the_run(
    world: &World,
    e: &Ended,
    mark: Mark,
    dry: &Result<BTreeSet<String>, String>,
) -> Result<(), String> {
    let (wrote, at) = world.first_step(e.run, mark.trail);
    let at_once = at == Some(mark.at);
    let planned = match dry {
        Err(why) if at_once || e.code == 0 => {
            return Err(format!(
                "run {}'s dry run failed ({why}), but the run exited {} and its first step wrote {wrote:?}",
                e.run, e.code
            ));
        }
        Err(_) => return Ok(()),
        Ok(planned) => planned,
    };
    let faulted = e.spec.faults.crash_after.is_some()
        || e.spec.faults.lose_reply.is_some()
        || e.spec.faults.fail_before.is_some();
    let differs = if planned.is_empty() {
        at_once
    } else if faulted {
        !wrote.is_subset(planned)
    } else {
        wrote != *planned
    };
    if differs {
        return Err(format!(
            "run {} ({:?}): its dry run planned {planned:?}, its first step wrote {wrote:?}{}",
            e.run,
            e.spec,
            if at_once { "" } else { " after waiting" }
        ));
    }
    Ok(())
}

/// A dry run's verdict on the stored state: whether anything is due (other than a cleanup
/// waiting for its gate), and why.
pub async fn due(world: &Arc<Mutex<World>>, config: &Config) -> Option<String> {
    verdict(world, config, false).await
}

/// Whether anything at all is left, a cleanup waiting for its gate included.
pub async fn unsettled(world: &Arc<Mutex<World>>, config: &Config) -> Option<String> {
    verdict(world, config, true).await
}

async fn verdict(world: &Arc<Mutex<World>>, config: &Config, strict: bool) -> Option<String> {
    let session = Session::new(world, usize::MAX - 1, Faults::default());
    let options = certgen::plan::Options::from_run(&options(&RunSpec::default()));
    let outcome = rotation::look(&session, config, options, Default::default()).await;
    match outcome {
        Err(e) => Some(format!("the plan fails: {e}")),
        Ok(o) => {
            let writes: Vec<String> = o
                .report
                .secrets
                .iter()
                .filter(|e| e.action.writes())
                .map(|e| format!("{} {:?}: {}", e.secret, e.action, e.reason))
                .collect();
            match o.phase {
                certgen::plan::Phase::Steady if writes.is_empty() => None,
                certgen::plan::Phase::Gate { optional: true, .. }
                    if writes.is_empty() && !strict =>
                {
                    None
                }
                phase => Some(format!("phase {}: {writes:?}", phase.name())),
            }
        }
    }
}

fn verifies(leaf: &Cert, bundle: &[Cert], at: OffsetDateTime) -> Result<(), String> {
    let time = UnixTime::since_unix_epoch(Duration::from_secs(at.unix_timestamp() as u64));
    crate::util::trust::webpki_verifies(leaf, bundle, time)
}

impl World {
    /// [`verifies`], for server use alone in a world whose leaves only serve.
    fn verifies(&self, leaf: &Cert, bundle: &[Cert], at: OffsetDateTime) -> Result<(), String> {
        let time = UnixTime::since_unix_epoch(Duration::from_secs(at.unix_timestamp() as u64));
        crate::util::trust::webpki_verifies_as(leaf, bundle, time, !self.serving_only)
    }
}

/// What the oracle checked.
#[derive(Debug, Default, Clone, Copy)]
pub struct Checked {
    /// Versions of TLS Secrets written.
    pub versions: usize,
    pub pairs: usize,
    /// Pairs that failed because of another tool's write (not certgen's doing: see
    /// [`foreign_root`]).
    pub foreign_failures: usize,
}

/// Checks every pair of versions consumers may hold at the same instant, up to `end`.
pub fn check_pairs(world: &World, end: OffsetDateTime) -> Result<Checked, String> {
    let lag = time::Duration::try_from(DELAY).unwrap();
    let versions = &world.versions;
    let mut checked = Checked {
        versions: versions.len(),
        pairs: 0,
        foreign_failures: 0,
    };
    for v in versions {
        let distinct: BTreeSet<[u8; 32]> = v.bundle.iter().map(Cert::fingerprint).collect();
        if distinct.len() != v.bundle.len() || v.bundle.len() > 2 {
            return Err(format!(
                "{} (written by run {} at {}): bundle of {} CAs ({} distinct)",
                v.secret,
                v.run,
                v.from,
                v.bundle.len(),
                distinct.len()
            ));
        }
        if let Some(c) = v.bundle.iter().find(|c| c.is_expired_at(v.from))
            && v.run != usize::MAX
        {
            return Err(format!(
                "{} (run {}): wrote an expired CA {} into the bundle",
                v.secret,
                v.run,
                c.short_fingerprint()
            ));
        }
    }
    for a in versions {
        for b in versions {
            // Both may be held from the later one's arrival until the lag after either was
            // replaced.
            let start = a.from.max(b.from);
            let held_until = |v: &Version| v.until.map_or(end, |u| (u + lag).min(end));
            let stop = held_until(a).min(held_until(b));
            if start >= stop && !(a.until.is_none() && b.until.is_none()) {
                continue;
            }
            let (Some(leaf), Some(_)) = (&a.leaf, b.bundle.first()) else {
                if a.leaf.is_none() {
                    continue;
                }
                return Err(format!(
                    "{} (run {}) has an empty bundle while {} may present a leaf",
                    b.secret, b.run, a.secret
                ));
            };
            // A leaf that has expired by then, or a bundle whose CAs all have, is a schedule's
            // fault (no run came in time), not a rotation's: nothing valid could pass there.
            // Runs never write either (checked above and by the convergence checks).
            if leaf.is_expired_at(start) || b.bundle.iter().all(|c| c.is_expired_at(start)) {
                continue;
            }
            checked.pairs += 1;
            if let Err(e) = world.verifies(leaf, &b.bundle, start) {
                let (ia, ib) = (index_of(versions, a), index_of(versions, b));
                // A deleted Secret's files stay in running pods, but a deletion leaves no write
                // time a run could count a gate from: what pods still hold of it after the
                // deletion is the deleting tool's doing.
                // (Any version of the Secret from before its deletion: the deletion ends the
                // last one, written at or after `v`.)
                let deleted = |v: &Version| {
                    let i = index_of(versions, v);
                    versions[i..]
                        .iter()
                        .any(|w| w.secret == v.secret && w.deleted_at.is_some_and(|d| d <= start))
                };
                // Nor can anything written after certgen's CA Secret was deleted (its key with
                // it) be signed by a CA what was written before trusts.
                let (first, last) = (a.from.min(b.from), a.from.max(b.from));
                let key_lost = world.ca_deleted.iter().any(|d| first < *d && *d <= last);
                // A leaf another writer issued by a clock ahead of the consumers' (the store's
                // stepped forward) is not valid yet whatever anyone writes next; certgen's own
                // never is (it issues at the earlier of the store's clock and its own).
                let not_yet = leaf.not_before > start
                    && versions[origin(versions, ia, |x, y| x.leaf == y.leaf)].run == FOREIGN;
                if not_yet
                    || deleted(a)
                    || deleted(b)
                    || key_lost
                    || erased(world, leaf, b.seq)
                    || swapped(versions, ib, a.from)
                    || foreign_root(versions, ia, ib, start, 0)
                {
                    checked.foreign_failures += 1;
                    continue;
                }
                let cas: Vec<String> = b.bundle.iter().map(Cert::short_fingerprint).collect();
                return Err(format!(
                    "at {start}: {}'s leaf (run {}, from {}, issuer {}) is rejected by {}'s bundle {cas:?} (run {}, from {}): {e}",
                    a.secret,
                    if a.run == usize::MAX {
                        "seed".into()
                    } else {
                        a.run.to_string()
                    },
                    a.from,
                    leaf.issuer,
                    b.secret,
                    if b.run == usize::MAX {
                        "seed".into()
                    } else {
                        b.run.to_string()
                    },
                    b.from,
                ));
            }
        }
    }
    Ok(checked)
}

/// Whether another writer erased every trace of the CA that signed `leaf` from the store
/// before history entry `seq` (a bundle written then): restored or deleted the last Secrets
/// that named it, certgen's CA Secret included. A run cannot trust a CA that nothing it reads
/// names; the peers still presenting its leaves are the erasing tool's doing.
fn erased(world: &World, leaf: &Cert, seq: usize) -> bool {
    let names = |s: &Option<StoredSecret>| {
        s.as_ref().is_some_and(|s| {
            [
                &*world.keys.0,
                &*world.keys.1,
                "ca.crt",
                "tls.crt",
                "next.crt",
            ]
            .iter()
            .any(|k| {
                s.data
                    .get(*k)
                    .and_then(|b| parse_cert_chain(b).ok())
                    .is_some_and(|certs| certs.iter().any(|c| c.is_ca && c.signed(leaf)))
            })
        })
    };
    let mut state: BTreeMap<&str, bool> = BTreeMap::new();
    let mut erased_by = None;
    for (i, (name, s)) in world.history[..seq].iter().enumerate() {
        let before = state.values().any(|n| *n);
        state.insert(name, names(s));
        let after = state.values().any(|n| *n);
        if before && !after {
            erased_by = Some(world.history_by[i]);
        } else if after {
            erased_by = None;
        }
    }
    erased_by == Some(FOREIGN)
}

/// Whether another writer wrote, after bundle version `b` and before `at`, a version of the same
/// Secret that shares no CA with it: consumers still holding `b` reject whatever the Secrets
/// present from then on, the other writer's leaves first; no write can be accepted by both.
fn swapped(versions: &[Version], b: usize, at: OffsetDateTime) -> bool {
    versions[b + 1..].iter().any(|v| {
        v.secret == versions[b].secret
            && v.run == FOREIGN
            && v.from <= at
            && !v.bundle.iter().any(|c| versions[b].bundle.contains(c))
    })
}

fn index_of(versions: &[Version], v: &Version) -> usize {
    versions
        .iter()
        .position(|x| std::ptr::eq(x, v))
        .expect("a version of the list")
}

/// The version of the same Secret before version `i`.
fn predecessor(versions: &[Version], i: usize) -> Option<usize> {
    versions[..i]
        .iter()
        .rposition(|v| v.secret == versions[i].secret)
}

/// The first of the consecutive versions of `i`'s Secret that hold what `i` holds (its leaf,
/// or its bundle): the write that brought it.
fn origin(versions: &[Version], i: usize, same: impl Fn(&Version, &Version) -> bool) -> usize {
    let mut j = i;
    while let Some(p) = predecessor(versions, j)
        && same(&versions[p], &versions[j])
    {
        j = p;
    }
    j
}

/// Whether a failing check (the leaf of version `a` against the bundle of version `b`) goes
/// back to another tool's write, not certgen's: the write that brought the later of the two
/// was another tool's, or certgen's write there only kept a failure that what it replaced had
/// already (the same leaf was rejected by the bundle it replaced, or the leaf it replaced was
/// rejected by the same bundle). certgen cannot undo another writer's one-step replacement;
/// it must never add a failure of its own, and it must repair the rest (the final state is
/// checked without this excuse).
pub fn foreign_root(
    versions: &[Version],
    a: usize,
    b: usize,
    at: OffsetDateTime,
    depth: usize,
) -> bool {
    if depth > 64 {
        return false;
    }
    // A failure a write only kept: the one before it failed too, for the other writer's
    // reason, or because nothing valid was there (an expired leaf, or a bundle of expired CAs:
    // a pair the oracle does not charge to anyone).
    let fails = |leaf: usize, bundle: usize| match &versions[leaf].leaf {
        Some(l) if !versions[bundle].bundle.is_empty() => {
            verifies(l, &versions[bundle].bundle, at).is_err()
        }
        _ => false,
    };
    let expired = |leaf: usize, bundle: usize| {
        versions[leaf]
            .leaf
            .as_ref()
            .is_some_and(|l| l.is_expired_at(at))
            || versions[bundle].bundle.iter().all(|c| c.is_expired_at(at))
    };
    let kept = |leaf: usize, bundle: usize| {
        fails(leaf, bundle)
            && (expired(leaf, bundle) || foreign_root(versions, leaf, bundle, at, depth + 1))
    };
    let la = origin(versions, a, |x, y| x.leaf == y.leaf);
    let lb = origin(versions, b, |x, y| x.bundle == y.bundle);
    let by_bundle =
        || versions[lb].run == FOREIGN || predecessor(versions, lb).is_some_and(|p| kept(a, p));
    let by_leaf =
        || versions[la].run == FOREIGN || predecessor(versions, la).is_some_and(|p| kept(p, b));
    match lb.cmp(&la) {
        std::cmp::Ordering::Greater => by_bundle(),
        std::cmp::Ordering::Less => by_leaf(),
        std::cmp::Ordering::Equal => by_bundle() || by_leaf(),
    }
}

/// The current version of every TLS Secret must trust every other's leaf, whoever wrote what
/// before: certgen repairs another writer's breakage once its runs settle.
pub fn check_current(world: &World, at: OffsetDateTime) -> Result<(), String> {
    let current: Vec<&Version> = world
        .versions
        .iter()
        .filter(|v| v.until.is_none())
        .collect();
    for a in &current {
        for b in &current {
            if let Some(leaf) = &a.leaf
                && let Err(e) = world.verifies(leaf, &b.bundle, at)
            {
                return Err(format!(
                    "after the runs settled, {}'s leaf (issuer {}) is rejected by {}'s bundle: {e}",
                    a.secret, leaf.issuer, b.secret
                ));
            }
        }
    }
    Ok(())
}

/// Run-level checks: new CAs per run, HMAC writes per run, and what an exit 0 leaves.
pub fn check_runs(world: &World, ended: &[Ended]) -> Result<(), String> {
    for e in ended {
        if let Some(why) = &e.dry_run_differs {
            return Err(format!("the dry run is not the run: {why}"));
        }
        let new_cas = world.cas.values().filter(|r| **r == e.run).count();
        if new_cas > 1 && !e.ca_disturbed {
            return Err(format!(
                "run {} ({:?}) published {new_cas} new CAs",
                e.run, e.spec
            ));
        }
        // One rotation per due: a run that finds a rotation under way finishes it and begins
        // no other, `--overwrite` or not (`certgen create` sets it while its certificates
        // outlive `--validity`, so a resumed renewal would otherwise rotate twice).
        if e.resumed && new_cas > 0 && !e.ca_disturbed {
            return Err(format!(
                "run {} ({:?}) resumed a rotation and published a new CA: it began a second rotation",
                e.run, e.spec
            ));
        }
        let hmac = world.hmac_writes.get(&e.run).copied().unwrap_or(0);
        let ambiguous = e.spec.faults.lose_reply.is_some() || e.spec.faults.fail_before.is_some();
        if e.spec.rotate_hmac && hmac > 1 && !ambiguous {
            return Err(format!("run {} wrote the HMAC Secret {hmac} times", e.run));
        }
    }
    Ok(())
}

/// Puts Secrets shaped like Envoy Gateway's own certgen output in the world: one CA (whose key
/// certgen never sees), three leaves signed by it with `ca.crt` = that CA, the HMAC Secret, and
/// no CA Secret. `rsa` uses RSA-2048 like Envoy Gateway (slow; for a few cases only).
pub fn seed_envoy_gateway(
    world: &Arc<Mutex<World>>,
    config: &Config,
    rsa: bool,
    at: OffsetDateTime,
) {
    use certgen::pki::{CaSpec, KeyAlgorithm, issue_ca, issue_leaf};
    let alg = if rsa {
        KeyAlgorithm::Rsa2048
    } else {
        KeyAlgorithm::EcdsaP256
    };
    let spec = CaSpec {
        common_name: "envoy-gateway".into(),
        validity: Duration::from_secs(5 * 365 * 86_400),
        key_algorithm: alg,
    };
    let (ca, _) = issue_ca(&spec, at).unwrap();
    let mut w = world.lock().unwrap();
    for t in &config.tls {
        let mut leaf_spec = t.leaf.clone();
        leaf_spec.key_algorithm = alg;
        leaf_spec.validity = Duration::from_secs(5 * 365 * 86_400);
        let issued = issue_leaf(&leaf_spec, &ca, at).unwrap();
        let data = BTreeMap::from([
            ("ca.crt".to_string(), ca.cert.pem().into_bytes()),
            ("tls.crt".to_string(), issued.cert.pem().into_bytes()),
            (
                "tls.key".to_string(),
                issued.key.expose().as_bytes().to_vec(),
            ),
        ]);
        w.seed(&t.name, "kubernetes.io/tls", data);
    }
    w.seed(
        HMAC,
        "Opaque",
        BTreeMap::from([("hmac-secret".to_string(), vec![7u8; 32])]),
    );
}

/// One step of a trajectory.
#[derive(Clone, Debug)]
pub enum Op {
    Run(RunSpec),
    /// Two runs at once, their store calls interleaved.
    Concurrent(RunSpec, RunSpec),
    /// Time passes with no run.
    Advance(Duration),
    /// The store's clock steps back (an NTP step on the API server).
    ClockBack(Duration),
    /// A clock steps by this many seconds, forward or back: the store's (the API server's)
    /// or the writer's (certgen's process), between runs.
    ClockStep {
        store: bool,
        secs: i64,
    },
    /// The same step while a run is between its steps, this long after it started.
    StepDuring(RunSpec, Duration, bool, i64),
    /// Another writer changes Secrets between runs.
    Foreign(Foreign),
    /// Another writer changes Secrets this long after a run started, while it runs (waiting
    /// at a gate, say).
    During(RunSpec, Duration, Foreign),
}

/// Where a trajectory starts.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    Fresh,
    Steady,
    EnvoyGateway,
    /// certgen's steady state, `days` before its CA expires (leaves renewed along the way).
    CaExpiresIn(i64),
    /// certgen's steady state, then Envoy Gateway's own `certgen --overwrite` over every TLS
    /// Secret (certgen's CA Secret untouched).
    EnvoyGatewayOverwrite,
}

/// The result of a trajectory.
#[derive(Debug)]
pub struct Outcome {
    pub checked: Checked,
    pub runs: usize,
    pub ended: Vec<Ended>,
}

/// Runs a trajectory and checks it. Returns a description of the first violation.
pub async fn trajectory(start: Start, ops: &[Op]) -> Result<Outcome, String> {
    let world = World::new();
    let out = trajectory_in(&world, start, ops).await;
    if out.is_err() && tracing_asked() {
        eprintln!("{}", world.lock().unwrap().trace());
    }
    out
}

/// `CERTGEN_SIM_TRACE=1`: a failing trajectory prints every run's end and every version.
pub(crate) fn tracing_asked() -> bool {
    std::env::var_os("CERTGEN_SIM_TRACE").is_some()
}

impl World {
    /// Every version of every TLS Secret, for reading a failing trajectory.
    pub fn trace(&self) -> String {
        let fp = |c: &Cert| c.short_fingerprint()[..6].to_string();
        let mut out = String::from("versions (secret, run, from .. until, leaf signer, bundle):\n");
        let cas: Vec<Cert> = self
            .versions
            .iter()
            .flat_map(|v| v.bundle.iter().cloned())
            .collect();
        for v in &self.versions {
            let signer = v.leaf.as_ref().map_or("-".to_string(), |l| {
                cas.iter()
                    .find(|c| c.signed(l))
                    .map_or(format!("?{}", l.issuer), fp)
            });
            let bundle: Vec<String> = v.bundle.iter().map(fp).collect();
            out += &format!(
                "  {:<17} {:>4} {} .. {} leaf {signer} bundle {bundle:?}{}\n",
                v.secret,
                if v.run == FOREIGN {
                    "othr".to_string()
                } else {
                    v.run.to_string()
                },
                v.from.time(),
                v.until.map_or("now".to_string(), |u| u.time().to_string()),
                if v.deleted_at.is_some() {
                    " (deleted)"
                } else {
                    ""
                },
            );
        }
        out
    }
}

async fn trajectory_in(
    world: &Arc<Mutex<World>>,
    start: Start,
    ops: &[Op],
) -> Result<Outcome, String> {
    let config = config();
    let world = world.clone();
    let mut index = 0;
    let mut ended: Vec<Ended> = Vec::new();
    let mut next = |spec: RunSpec| {
        index += 1;
        (index, spec)
    };
    match start {
        Start::Fresh => {}
        Start::Steady => {
            let (i, s) = next(RunSpec::default());
            let e = run(&world, &config, i, s).await;
            assert_eq!(e.code, 0, "{}", e.message);
        }
        Start::EnvoyGateway => {
            let at = world.lock().unwrap().true_now() - time::Duration::days(30);
            seed_envoy_gateway(&world, &config, false, at);
        }
        Start::EnvoyGatewayOverwrite => {
            let (i, s) = next(RunSpec::default());
            let e = run(&world, &config, i, s).await;
            assert_eq!(e.code, 0, "{}", e.message);
            tokio::time::advance(DELAY * 2).await;
            Foreign::EnvoyGateway {
                which: foreign::ALL_TLS,
            }
            .write(&world, &config);
        }
        Start::CaExpiresIn(days) => {
            let (i, s) = next(RunSpec::default());
            let e = run(&world, &config, i, s).await;
            assert_eq!(e.code, 0, "{}", e.message);
            // Hook-only: no run for years. (Leaves expire on the way; the oracle skips pairs
            // with an expired leaf: no run came in time.)
            let ca_days = config.ca.spec.validity.as_secs() as i64 / 86_400;
            tokio::time::advance(Duration::from_secs(((ca_days - days) * 86_400) as u64)).await;
        }
    }
    for op in ops {
        match op {
            Op::Run(spec) => {
                let (i, s) = next(*spec);
                let e = run_checked(&world, &config, i, s).await;
                ended.push(e);
            }
            Op::Concurrent(a, b) => {
                let (i, sa) = next(*a);
                let (j, sb) = next(*b);
                let (ea, eb) =
                    tokio::join!(run(&world, &config, i, sa), run(&world, &config, j, sb));
                ended.push(ea);
                ended.push(eb);
            }
            Op::Advance(d) => tokio::time::advance(*d).await,
            Op::ClockBack(d) => {
                world.lock().unwrap().clock_offset -= time::Duration::try_from(*d).unwrap();
            }
            Op::ClockStep { store, secs } => world.lock().unwrap().step(*store, *secs),
            Op::StepDuring(spec, after, store, secs) => {
                let (i, s) = next(*spec);
                let (e, ()) = tokio::join!(run(&world, &config, i, s), async {
                    tokio::time::sleep(*after).await;
                    world.lock().unwrap().step(*store, *secs);
                });
                ended.push(e);
            }
            Op::Foreign(f) => f.write(&world, &config),
            Op::During(spec, after, f) => {
                let (i, s) = next(*spec);
                let (mut e, ()) = tokio::join!(run(&world, &config, i, s), async {
                    tokio::time::sleep(*after).await;
                    f.write(&world, &config);
                });
                e.ca_disturbed = f.touches_ca();
                ended.push(e);
            }
        }
        // A run that exited 0 left nothing due (but a cleanup waiting for its gate), unless
        // another run (concurrent) was still between its writes.
        if let Some(e) = ended.last()
            && e.code == 0
            && matches!(op, Op::Run(..))
            && let Some(why) = due(&world, &config).await
        {
            return Err(format!("run {} exited 0 but left work due: {why}", e.run));
        }
    }
    // Runs stop: plain runs, the delay apart, converge; then one more writes nothing.
    let mut settled = false;
    let mut refused = false;
    // Another writer left leaves of two CAs certgen has no key for (or a CA no verifier
    // accepts): certgen refuses to guess (nothing written) and says how to fix it. The pairs so
    // far are checked.
    let refuses_to_guess = |m: &str| {
        m.contains("two CAs certgen has no key for")
            || m.contains("more CAs than a bundle can trust")
            || m.contains("would be rejected by TLS verifiers")
    };
    for _ in 0..6 {
        tokio::time::advance(DELAY + Duration::from_secs(1)).await;
        let (i, s) = next(RunSpec::default());
        let mut e = run_checked(&world, &config, i, s).await;
        // Another writer deleted certgen's CA Secret while leaves it signed remain: a plain
        // run refuses (nothing written), and the runbook's second way out, `--overwrite`,
        // starts a new CA, staged (the first, a restore, is the foreign writer's `Restore`).
        if e.code == 2 && e.message.contains("certgen's CA Secret is gone") {
            let (i, s) = next(RunSpec {
                overwrite: true,
                ..RunSpec::default()
            });
            let recovery = run_checked(&world, &config, i, s).await;
            ended.push(std::mem::replace(&mut e, recovery));
        }
        match e.code {
            0 => {}
            // A gate past --timeout (a pending CA not valid yet by a clock that stepped back):
            // the next run resumes.
            3 => tokio::time::advance(Duration::from_secs(3600)).await,
            2 if refuses_to_guess(&e.message) => {
                refused = true;
                ended.push(e);
                break;
            }
            _ => return Err(format!("a plain re-run exited {}: {}", e.code, e.message)),
        }
        ended.push(e);
        if unsettled(&world, &config).await.is_none() {
            settled = true;
            break;
        }
    }
    if refused {
        let w = world.lock().unwrap();
        let end = w.true_now() + time::Duration::try_from(DELAY).unwrap();
        check_runs(&w, &ended)?;
        let checked = check_pairs(&w, end)?;
        return Ok(Outcome {
            checked,
            runs: ended.len(),
            ended,
        });
    }
    if !settled {
        return Err(format!(
            "plain re-runs did not converge: {:?}",
            unsettled(&world, &config).await
        ));
    }
    tokio::time::advance(DELAY + Duration::from_secs(1)).await;
    let writes_before = world.lock().unwrap().log.len();
    let (i, s) = next(RunSpec::default());
    let e = run(&world, &config, i, s).await;
    let writes_after = world.lock().unwrap().log.len();
    if e.code != 0 || writes_after != writes_before {
        let w = world.lock().unwrap();
        let what: Vec<&String> = w.log[writes_before..].iter().map(|(_, n)| n).collect();
        return Err(format!(
            "a plain run with nothing due wrote {what:?} (exit {}: {})",
            e.code, e.message
        ));
    }
    ended.push(e);
    let w = world.lock().unwrap();
    let end = w.true_now() + time::Duration::try_from(DELAY).unwrap();
    check_runs(&w, &ended)?;
    check_current(&w, w.true_now())?;
    let checked = check_pairs(&w, end)?;
    Ok(Outcome {
        checked,
        runs: ended.len(),
        ended,
    })
}

/// A paused-clock runtime: every sleep of every run advances virtual time, deterministically.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}
