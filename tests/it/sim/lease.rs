//! The run lock's Lease in the simulated world: the API server's `coordination.k8s.io/v1`
//! Lease, in memory, behind certgen's [`LeaseApi`] seam, so the simulation runs `src/lock.rs`'s
//! real code (waiting for a live holder, taking over an expired one, renewing, releasing).
//!
//! As the API server keeps it: one object with a holder identity, a duration, acquire and renew
//! times stamped on the store's clock (which may step), and a resourceVersion from the same
//! counter as the Secrets'; every update and the deletion are fenced by the version read (409 on
//! a change, as on a Lease gone since). Lease calls are the run's store calls: they yield like
//! the others (two runs interleave step by step) and count as writes for the faults (a kill
//! right after the Lease is taken or renewed, a lost answer, a write that never lands); a run
//! killed in a renewal, which runs in a task of its own, stops there as a killed process does.
//!
//! The oracle ([`check`]) knows nothing of the lock's code. From the order in which the store
//! saw every Lease change and every Secret write: no run writes a Secret under the Lease after
//! another run took it (two runs never both write under the lock), and a Lease is taken over
//! from another holder only once it went unchanged for its whole duration, by the true clock (a
//! crashed holder's, never a live one's, whatever the store's clock said). A run that holds no
//! Lease writes only creates (a fresh install's, fenced by the Secret's absence).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use certgen::lock;
use certgen::outside::{LeaseApi, LeaseRead};
use certgen::report::{LockReport, Report};
use certgen::store::StoreError;
use futures::FutureExt;
use futures::future::BoxFuture;
use time::OffsetDateTime;

use super::{Session, SessionState, World, broken, crashed};

/// The simulated runs' Lease duration, in seconds (certgen's default).
pub const SECONDS: u32 = 15;

/// The Lease as the API server stores it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub holder: String,
    pub seconds: u32,
    pub version: String,
    pub transitions: i32,
    /// On the store's clock.
    pub acquired_at: OffsetDateTime,
    pub renewed_at: OffsetDateTime,
}

/// A change of the Lease, as the store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Created,
    TookOver { from: String },
    Renewed,
    Deleted,
}

/// One change, where it falls among the Secret writes.
#[derive(Debug, Clone)]
pub struct Event {
    pub run: usize,
    pub change: Change,
    /// On the true clock.
    pub at: OffsetDateTime,
    /// How many Secret writes the store had taken before it ([`World::log`]'s length).
    pub log_at: usize,
    /// The Lease's last change before this one (true clock), and its duration then.
    pub before: Option<(OffsetDateTime, u32)>,
}

/// The Lease's part of the world.
#[derive(Debug, Default)]
pub struct LeaseState {
    /// Whether runs take the Lease (a cluster run whose identity may use Leases).
    pub on: bool,
    pub stored: Option<Stored>,
    /// When it last changed (true clock).
    changed_at: Option<OffsetDateTime>,
    pub log: Vec<Event>,
    /// What each run's report said of its Lease.
    pub reports: BTreeMap<usize, LockReport>,
}

/// The holder identity of run `index`.
pub fn holder(index: usize) -> String {
    format!("run-{index}")
}

/// The lock a run of `session` takes: the Lease when the world has one.
pub fn target(session: &Session) -> lock::Target {
    if !session.world.lock().unwrap().lease.on {
        return lock::Target::None;
    }
    lock::Target::Lease {
        lease: Arc::new(SimLease {
            world: session.world.clone(),
            run: session.run,
            faults: session.faults,
            state: session.state.clone(),
            died: session.died.clone(),
        }),
        holder: holder(session.run),
        seconds: SECONDS,
    }
}

/// Keeps what run `index`'s report said of its Lease.
pub fn ended(world: &Arc<Mutex<World>>, index: usize, report: &Report) {
    if let Some(l) = &report.lock {
        world.lock().unwrap().lease.reports.insert(index, l.clone());
    }
}

/// One run's handle on the Lease: the run's own faults and death.
struct SimLease {
    world: Arc<Mutex<World>>,
    run: usize,
    faults: super::Faults,
    state: Arc<Mutex<SessionState>>,
    died: Arc<tokio::sync::Notify>,
}

/// What a write does after it is counted.
enum Landing {
    /// It did not land (the connection broke before the server had it).
    Failed,
    Lands,
}

impl SimLease {
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

    fn dead(&self) -> bool {
        self.state.lock().unwrap().dead
    }

    /// Counts a write; whether it lands. The number, for what follows it.
    fn count(&self) -> Result<(usize, Landing), StoreError> {
        let mut s = self.state.lock().unwrap();
        if s.dead {
            return Err(crashed());
        }
        s.writes += 1;
        let n = s.writes;
        Ok((
            n,
            if self.faults.fail_before == Some(n) {
                Landing::Failed
            } else {
                Landing::Lands
            },
        ))
    }

    /// What follows write `n` once it landed: the process killed, the answer lost, or `ok`.
    fn after<T>(&self, n: usize, ok: T) -> Result<T, StoreError> {
        if self.faults.crash_after == Some(n) {
            self.state.lock().unwrap().dead = true;
            self.died.notify_one();
            return Err(crashed());
        }
        if self.faults.lose_reply == Some(n) {
            return Err(broken("lease"));
        }
        Ok(ok)
    }

    /// Stores `lease` (or deletes it) as a change by this run.
    fn change(world: &mut World, run: usize, change: Change, lease: Option<Stored>) {
        let at = world.true_now();
        let before = world
            .lease
            .changed_at
            .zip(world.lease.stored.as_ref().map(|l| l.seconds));
        let log_at = world.log.len();
        world.lease.log.push(Event {
            run,
            change,
            at,
            log_at,
            before,
        });
        world.lease.changed_at = lease.as_ref().map(|_| at);
        world.lease.stored = lease;
    }
}

fn conflict(detail: &str) -> StoreError {
    StoreError::Conflict {
        what: "Lease sim/envoy-gateway-certgen-lock".into(),
        detail: detail.into(),
    }
}

fn read(l: &Stored) -> LeaseRead {
    LeaseRead {
        holder: l.holder.clone(),
        seconds: l.seconds,
        version: l.version.clone(),
        transitions: l.transitions,
        acquired_at: Some(l.acquired_at),
    }
}

impl LeaseApi for SimLease {
    fn describe(&self) -> String {
        "Lease sim/envoy-gateway-certgen-lock".into()
    }

    fn read(&self) -> BoxFuture<'_, Result<Option<LeaseRead>, StoreError>> {
        async move {
            self.yields().await;
            if self.dead() {
                return Err(crashed());
            }
            Ok(self.world.lock().unwrap().lease.stored.as_ref().map(read))
        }
        .boxed()
    }

    fn create<'a>(
        &'a self,
        holder: &'a str,
        seconds: u32,
    ) -> BoxFuture<'a, Result<LeaseRead, StoreError>> {
        async move {
            self.yields().await;
            let (n, landing) = self.count()?;
            if let Landing::Failed = landing {
                return Err(broken("lease"));
            }
            let made = {
                let mut w = self.world.lock().unwrap();
                if w.lease.stored.is_some() {
                    return Err(conflict("already exists"));
                }
                let now = w.store_now();
                let version = w.next_rv.to_string();
                w.next_rv += 1;
                let lease = Stored {
                    holder: holder.into(),
                    seconds,
                    version,
                    transitions: 0,
                    acquired_at: now,
                    renewed_at: now,
                };
                Self::change(&mut w, self.run, Change::Created, Some(lease.clone()));
                read(&lease)
            };
            self.after(n, made)
        }
        .boxed()
    }

    fn hold<'a>(
        &'a self,
        was: &'a LeaseRead,
        holder: &'a str,
        seconds: u32,
    ) -> BoxFuture<'a, Result<LeaseRead, StoreError>> {
        async move {
            self.yields().await;
            let (n, landing) = self.count()?;
            if let Landing::Failed = landing {
                return Err(broken("lease"));
            }
            let made = {
                let mut w = self.world.lock().unwrap();
                let Some(current) = w.lease.stored.clone() else {
                    return Err(conflict("not found"));
                };
                if current.version != was.version {
                    return Err(conflict("the object has been modified"));
                }
                let now = w.store_now();
                let version = w.next_rv.to_string();
                w.next_rv += 1;
                let renewal = current.holder == holder;
                let lease = Stored {
                    holder: holder.into(),
                    seconds,
                    version,
                    transitions: current.transitions + i32::from(!renewal),
                    acquired_at: if renewal { current.acquired_at } else { now },
                    renewed_at: now,
                };
                let change = if renewal {
                    Change::Renewed
                } else {
                    Change::TookOver {
                        from: current.holder.clone(),
                    }
                };
                Self::change(&mut w, self.run, change, Some(lease.clone()));
                read(&lease)
            };
            self.after(n, made)
        }
        .boxed()
    }

    fn delete<'a>(&'a self, version: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            self.yields().await;
            let (n, landing) = self.count()?;
            if let Landing::Failed = landing {
                return Err(broken("lease"));
            }
            {
                let mut w = self.world.lock().unwrap();
                match &w.lease.stored {
                    Some(l) if l.version == version => {}
                    _ => return Err(conflict("precondition failed")),
                }
                Self::change(&mut w, self.run, Change::Deleted, None);
            }
            self.after(n, ())
        }
        .boxed()
    }
}

/// What the Lease checks counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct LeaseChecked {
    /// Secret writes made under the Lease, each checked against every acquisition before it.
    pub writes: usize,
    pub acquisitions: usize,
    /// Of them, expired Leases taken over from another holder.
    pub takeovers: usize,
    /// Creates made without the Lease (a fresh install's).
    pub unlocked_creates: usize,
}

/// The Lease's guarantees over everything the store saw (see the module's comment).
pub fn check(world: &World) -> Result<LeaseChecked, String> {
    let mut checked = LeaseChecked::default();
    let events = &world.lease.log;
    for e in events {
        if let Change::TookOver { from } = &e.change {
            checked.takeovers += 1;
            let Some((changed, seconds)) = e.before else {
                return Err(format!("run {} took over a Lease with no history", e.run));
            };
            let unchanged = e.at - changed;
            if unchanged < time::Duration::seconds(i64::from(seconds)) {
                return Err(format!(
                    "run {} took the Lease over from {from} at {} after it went unchanged for only {unchanged} (its duration is {seconds} s): the holder was alive",
                    e.run,
                    e.at.time()
                ));
            }
        }
    }
    let acquired = |e: &Event| matches!(e.change, Change::Created | Change::TookOver { .. });
    checked.acquisitions = events.iter().filter(|e| acquired(e)).count();
    for (p, (run, secret)) in world.log.iter().enumerate() {
        // The acquisitions the store saw before this write.
        let before: Vec<&Event> = events
            .iter()
            .filter(|e| e.log_at <= p && acquired(e))
            .collect();
        if *run == super::FOREIGN {
            continue;
        }
        if !before.iter().any(|e| e.run == *run) {
            // Not under the Lease: only a fresh install's creates, each fenced by the Secret's
            // absence (a run takes no lock for those).
            let created = world.history[..p]
                .iter()
                .rev()
                .find(|(name, _)| name == secret)
                .is_none_or(|(_, s)| s.is_none());
            if !created {
                return Err(format!(
                    "run {run} updated Secret {secret} without holding the Lease"
                ));
            }
            checked.unlocked_creates += 1;
            continue;
        }
        checked.writes += 1;
        let last = before.last().expect("one of them is this run's");
        if last.run != *run {
            return Err(format!(
                "run {run} wrote Secret {secret} after run {} took the Lease (at {}): two runs wrote under the lock at once",
                last.run,
                last.at.time()
            ));
        }
    }
    Ok(checked)
}

/// A trajectory on a world whose runs take the Lease, checked by the oracle of every
/// trajectory and by [`check`].
pub async fn trajectory(
    start: super::Start,
    ops: &[super::Op],
) -> Result<(super::Outcome, LeaseChecked), String> {
    let world = World::new();
    world.lock().unwrap().lease.on = true;
    let out = super::trajectory_in(&world, start, ops).await;
    let w = world.lock().unwrap();
    let checked = out.and_then(|out| Ok((out, check(&w)?)));
    if checked.is_err() && super::tracing_asked() {
        eprintln!("{}\nlease changes:", w.trace());
        for e in &w.lease.log {
            eprintln!(
                "  run {:>3} {:?} at {} after {} Secret writes",
                e.run,
                e.change,
                e.at.time(),
                e.log_at
            );
        }
        if let Some(l) = &w.lease.stored {
            eprintln!(
                "  left: held by {} since {}, renewed at {} (store clock)",
                l.holder, l.acquired_at, l.renewed_at
            );
        }
    }
    checked
}

#[cfg(test)]
mod cases {
    use std::time::Duration;

    use super::super::{DELAY, Faults, Op, RunSpec, Start, runtime};
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn overwrite() -> RunSpec {
        RunSpec {
            overwrite: true,
            ..RunSpec::default()
        }
    }

    fn plain() -> RunSpec {
        RunSpec::default()
    }

    fn faulted(mut spec: RunSpec, f: impl FnOnce(&mut Faults)) -> RunSpec {
        f(&mut spec.faults);
        spec
    }

    fn check_ok(start: Start, ops: &[Op]) -> (super::super::Outcome, LeaseChecked) {
        runtime()
            .block_on(trajectory(start, ops))
            .unwrap_or_else(|e| panic!("{start:?} {ops:?}: {e}"))
    }

    /// A rotation under the Lease: taken once, renewed through both gates, released.
    #[test]
    fn a_rotation_holds_the_lease_from_its_first_write_to_its_last() {
        let (out, checked) = check_ok(Start::Steady, &[Op::Run(overwrite())]);
        assert_eq!(out.ended[0].code, 0, "{}", out.ended[0].message);
        assert!(checked.writes >= 11, "{checked:?}");
        assert_eq!(checked.takeovers, 0, "{checked:?}");
    }

    /// Two runs at once on the same store, their store calls (the Lease's among them)
    /// interleaved step by step, from certgen's steady state and from the middle of a rotation:
    /// one holds the Lease and writes, the other waits for it (or gives up at --timeout, exit
    /// 4), and never writes while the first holds it.
    #[test]
    fn two_runs_at_once_on_the_lease_never_both_write() {
        let mut runs = 0;
        let mut waited = 0;
        for seed in 0..12u64 {
            let a = faulted(overwrite(), |f| f.yields = seed);
            let b = faulted(if seed % 2 == 0 { plain() } else { overwrite() }, |f| {
                f.yields = seed * 7 + 3
            });
            for start in [Start::Steady, Start::EnvoyGateway] {
                let (out, checked) = check_ok(start, &[Op::Concurrent(a, b)]);
                let (ea, eb) = (&out.ended[0], &out.ended[1]);
                for e in [ea, eb] {
                    assert!(e.code == 0 || e.code == 4, "run {}: {}", e.run, e.message);
                }
                runs += 2;
                // Both took the Lease, one after the other's release: the second waited.
                if checked.acquisitions >= 2 {
                    waited += 1;
                }
            }
        }
        assert!(
            waited >= 12,
            "the second run waited for the Lease in {waited} cases"
        );
        eprintln!(
            "two runs at once on the Lease: {runs} runs, the second waited in {waited} of 24"
        );
    }

    /// A run killed right after it took the Lease, or after any later write, leaves the Lease
    /// held: the next run that writes waits until it has gone unchanged for its whole duration, then takes
    /// it over, and says so in its report.
    #[test]
    fn a_crashed_runs_lease_is_taken_over_only_after_it_expires() {
        for n in [1, 2, 5] {
            let (out, checked) = check_ok(
                Start::Steady,
                &[
                    Op::Run(faulted(overwrite(), |f| f.crash_after = Some(n))),
                    Op::Run(overwrite()),
                ],
            );
            assert_eq!(checked.takeovers, 1, "crash after write {n}: {checked:?}");
            let next = &out.ended[1];
            assert_eq!(next.code, 0, "{}", next.message);
        }
        // The report of the run that took over names the crashed holder.
        runtime().block_on(async {
            let config = super::super::config();
            let world = World::new();
            world.lock().unwrap().lease.on = true;
            let run = super::super::run;
            assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
            let killed = faulted(overwrite(), |f| f.crash_after = Some(1));
            run(&world, &config, 2, killed).await;
            let started = tokio::time::Instant::now();
            assert_eq!(run(&world, &config, 3, overwrite()).await.code, 0);
            assert!(started.elapsed() >= Duration::from_secs(u64::from(SECONDS)));
            let w = world.lock().unwrap();
            let report = &w.lease.reports[&3];
            assert_eq!(report.took_over.as_deref(), Some("run-2"), "{report:?}");
            assert!(report.renewals > 0, "{report:?}");
            check(&w).unwrap();
        });
    }

    /// The store's clock steps back (an hour, or half a minute) while a run holds the Lease at a gate,
    /// so the renew times it stamps jump: another run started then still waits for the holder
    /// (expiry is judged by whether the Lease changes, timed on the waiting run's own clock).
    #[test]
    fn a_live_holder_keeps_its_lease_when_the_clocks_disagree() {
        for step in [-3600i64, -30] {
            runtime().block_on(async {
                let config = super::super::config();
                let world = World::new();
                world.lock().unwrap().lease.on = true;
                let run = super::super::run;
                assert_eq!(run(&world, &config, 1, plain()).await.code, 0);
                tokio::time::advance(DELAY * 2).await;
                let (a, b) = tokio::join!(run(&world, &config, 2, overwrite()), async {
                    // The first run is at its trust gate, renewing.
                    tokio::time::sleep(S * 20).await;
                    world.lock().unwrap().clock_offset += time::Duration::seconds(step);
                    run(&world, &config, 3, plain()).await
                });
                // (A clock stepped back an hour puts the pending CA's validity past --timeout:
                // exit 3, the next run finishes.)
                assert!(a.code == 0 || a.code == 3, "{}", a.message);
                assert!([0, 3, 4].contains(&b.code), "{}", b.message);
                let w = world.lock().unwrap();
                let checked = check(&w).unwrap_or_else(|e| panic!("clock step {step} s: {e}"));
                assert_eq!(checked.takeovers, 0, "{checked:?}");
                let end = w.true_now() + time::Duration::try_from(DELAY).unwrap();
                super::super::check_pairs(&w, end).unwrap();
            });
        }
    }

    /// What each write of run `run` was, in the order the store took them: the Lease's
    /// changes among the Secret writes.
    fn writes_of(world: &World, run: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut events = world.lease.log.iter().filter(|e| e.run == run).peekable();
        for (p, (by, secret)) in world.log.iter().enumerate() {
            while let Some(e) = events.next_if(|e| e.log_at <= p) {
                out.push(lease_kind(&e.change).to_string());
            }
            if *by == run {
                out.push(format!("Secret {secret}"));
            }
        }
        out.extend(events.map(|e| lease_kind(&e.change).to_string()));
        out
    }

    fn lease_kind(c: &Change) -> &'static str {
        match c {
            Change::Created | Change::TookOver { .. } => "Lease taken",
            Change::Renewed => "Lease renewed",
            Change::Deleted => "Lease released",
        }
    }

    /// Every crash point of a staged rotation under the Lease, from certgen's steady state and
    /// from Envoy Gateway's output: killed after each of its writes, the Lease's included
    /// (between taking the Lease and the first Secret write, between a Secret write and the
    /// next renewal, before the release), then a plain re-run at once or 45 s later, or an
    /// `--overwrite` at once; and each write's answer lost, or the write failed, then a plain
    /// re-run. The re-run waits for the killed run's Lease to expire; every pair is checked.
    /// (A gate renews the Lease many times over: the first two crash points of each such run
    /// of renewals stand for the others, which differ only in the time the run died.)
    #[test]
    fn every_crash_point_with_the_lease() {
        let mut trajectories = 0;
        let mut pairs = 0;
        let mut takeovers = 0;
        let mut between: BTreeMap<String, usize> = BTreeMap::new();
        for start in [Start::Steady, Start::EnvoyGateway] {
            // The clean rotation's writes, in order (the runs are deterministic).
            let writes = runtime().block_on(async {
                let world = World::new();
                world.lock().unwrap().lease.on = true;
                super::super::trajectory_in(&world, start, &[Op::Run(overwrite())])
                    .await
                    .unwrap();
                let w = world.lock().unwrap();
                let run = w
                    .lease
                    .log
                    .iter()
                    .find(|e| e.change == Change::Created)
                    .unwrap()
                    .run;
                writes_of(&w, run)
            });
            assert_eq!(writes.first().map(String::as_str), Some("Lease taken"));
            assert_eq!(writes.last().map(String::as_str), Some("Lease released"));
            for n in 1..=writes.len() {
                let after = writes.get(n).map_or("the end", String::as_str);
                // Of a gate's run of renewals, the first two crash points stand for the rest.
                let renewal = |i: usize| writes.get(i).is_some_and(|w| w == "Lease renewed");
                if renewal(n - 1) && renewal(n) && n >= 2 && renewal(n - 2) {
                    continue;
                }
                *between
                    .entry(format!("{} → {after}", writes[n - 1]))
                    .or_default() += 1;
                let killed = faulted(overwrite(), |f| f.crash_after = Some(n));
                let mut cases = vec![
                    vec![Op::Run(killed), Op::Run(plain())],
                    vec![Op::Run(killed), Op::Advance(S * 45), Op::Run(plain())],
                    vec![Op::Run(killed), Op::Run(overwrite())],
                    vec![
                        Op::Run(faulted(overwrite(), |f| f.lose_reply = Some(n))),
                        Op::Run(plain()),
                    ],
                    vec![
                        Op::Run(faulted(overwrite(), |f| f.fail_before = Some(n))),
                        Op::Run(plain()),
                    ],
                ];
                for ops in cases.drain(..) {
                    let (out, checked) = check_ok(start, &ops);
                    trajectories += 1;
                    pairs += out.checked.pairs;
                    takeovers += checked.takeovers;
                }
            }
        }
        eprintln!(
            "every crash point with the Lease: {trajectories} trajectories, {pairs} pairs checked, {takeovers} expired Leases taken over; crash points between {between:?}"
        );
    }

    /// Seeded random trajectories (the generator of `random_trajectories_keep_the_invariant`:
    /// any flags, crash points, lost answers, two runs at once, time jumps, clock steps,
    /// another writer) on a world whose runs take the Lease. `CERTGEN_SIM_CASES=N` runs N/5.
    #[test]
    fn random_trajectories_on_the_lease() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestRng, TestRunner};
        let cases = std::env::var("CERTGEN_SIM_CASES")
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .map_or(400, |n| (n / 5).max(1));
        let mut seed = [7u8; 32];
        if let Some(n) = std::env::var("CERTGEN_SIM_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            seed[..8].copy_from_slice(&n.to_le_bytes());
        }
        let mut runner = TestRunner::new_with_rng(
            PtConfig {
                cases,
                failure_persistence: None,
                ..PtConfig::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
        );
        let totals = std::cell::Cell::new((0usize, 0usize, 0usize, 0usize, 0usize));
        runner
            .run(
                &(
                    super::super::cases::arb_start(),
                    prop::collection::vec(super::super::cases::arb_op(), 1..7),
                ),
                |(start, ops)| {
                    let (out, checked) = runtime()
                        .block_on(trajectory(start, &ops))
                        .map_err(TestCaseError::fail)?;
                    let (t, r, p, w, k) = totals.get();
                    totals.set((
                        t + 1,
                        r + out.runs,
                        p + out.checked.pairs,
                        w + checked.writes,
                        k + checked.takeovers,
                    ));
                    Ok(())
                },
            )
            .unwrap();
        let (t, r, p, w, k) = totals.get();
        eprintln!(
            "random trajectories on the Lease: {t} trajectories, {r} runs, {p} version pairs checked, {w} Secret writes under the Lease checked, {k} expired Leases taken over"
        );
    }

    /// Found by `random_trajectories_on_the_lease`: two fresh installs at once, one with
    /// `--rotate-hmac`. A fresh install takes no lock (its writes are creates, fenced by the
    /// Secrets' absence); the one whose create lost the race re-planned on its own and replaced
    /// the HMAC bytes the other had just created, an update without the Lease. Now the loser
    /// takes the Lease before it re-reads.
    #[test]
    fn a_fresh_install_that_loses_a_race_takes_the_lease_before_it_updates() {
        let a = faulted(plain(), |f| f.yields = 13824427020546692);
        let b = RunSpec {
            rotate_hmac: true,
            faults: Faults {
                yields: 2991589575021961337,
                ..Faults::default()
            },
            ..RunSpec::default()
        };
        let (out, checked) = check_ok(Start::Fresh, &[Op::Concurrent(a, b)]);
        assert_eq!(out.ended[1].code, 0, "{}", out.ended[1].message);
        assert_eq!(checked.acquisitions, 1, "{checked:?}");
        assert!(checked.unlocked_creates > 0, "{checked:?}");
    }

    /// Found by `random_trajectories_keep_the_invariant` on the first version of the fix
    /// above: a fresh install with `--overwrite` whose create lost the race ended its step
    /// without noting that the CA Secret had appeared (its own or the other run's), so its next
    /// step rotated again and the run published two new CAs. Without and with the Lease.
    #[test]
    fn a_fresh_install_that_loses_a_race_never_publishes_a_second_ca() {
        let a = faulted(overwrite(), |f| f.yields = 6910879123161219567);
        let b = faulted(plain(), |f| f.yields = 506191992988971998);
        let ops = [Op::Concurrent(a, b)];
        runtime()
            .block_on(super::super::trajectory(Start::Fresh, &ops))
            .unwrap_or_else(|e| panic!("without the Lease: {e}"));
        check_ok(Start::Fresh, &ops);
    }
}
