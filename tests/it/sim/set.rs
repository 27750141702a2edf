//! A set of clusters in the simulation: three worlds (API servers with their own clocks), runs
//! of certgen's real set driver over all of them (`rotation::set`), the members' own
//! single-cluster runs in between, and an oracle that checks pairs across members.
//!
//! Consumers of every member talk to consumers of every other member: a version of a TLS
//! Secret in one member may be held from when it landed until the propagation delay after the
//! next version landed there, and every leaf so held must verify against every bundle held at
//! the same instant in any other member (and within each member, as the single-cluster oracle
//! checks). Besides: a set run publishes at most one new CA over all members, a member's own
//! single-cluster run publishes none, every member ends with the same CA, and once runs stop,
//! plain set runs converge to a state where one more writes nothing.
//!
//! Faults: a member that stops answering at each of its store calls of a rotation (every
//! point of every phase), the process killed after each of its writes (between two members'
//! writes too), a member's own run in between, a member restored from an earlier state, a
//! member whose clock is ahead or behind, and members added to the set.

use std::collections::BTreeMap;

use certgen::rotation::set::MemberRun;
use certgen::set::{Record, SET_ANNOTATION};

use super::*;

const MEMBERS: usize = 3;

/// The worlds of a set, and which runs were single-cluster runs (and in which member).
struct Set {
    worlds: Vec<Arc<Mutex<World>>>,
    single: BTreeMap<usize, usize>,
    /// The set runs and how they ended: (index, exit code, message).
    ended: Vec<(usize, u8, String)>,
    next: usize,
    /// The first set run whose dry run planned other writes than its first step made.
    dry_differs: Option<String>,
}

/// One step of a set's trajectory.
#[derive(Clone, Copy, Debug)]
enum SetOp {
    /// A run over the first `members` members (the others are not in the set yet; more than
    /// before: `--add-member` for the new ones).
    Run {
        members: usize,
        overwrite: bool,
        /// A member that stops answering at its N-th Secret read or write.
        hang: Option<(usize, usize)>,
        /// The process is killed after the set's N-th write.
        crash_after: Option<usize>,
    },
    /// A member's own single-cluster run (its CronJob), with or without `--overwrite`.
    Single { member: usize, overwrite: bool },
    /// Time passes.
    Wait(u64),
    /// A member's Secrets restored from a backup taken `back` writes ago (kept to the state after
    /// the set's first run).
    Restore { member: usize, back: usize },
}

fn config() -> Config {
    super::config()
}

/// The built-in profile in other layouts: its CA Secret in Cilium's (`cilium-ca`'s: Opaque,
/// the active CA in `ca.crt`, its key in `ca.key`, certgen's bundle in `bundle.crt`), as the
/// `cilium-clustermesh` profile keeps it, and its TLS Secrets in kube-webhook-certgen's
/// (Opaque, `ca`, `cert`, `key`), as a config's `dataKeys` give them: the same trajectories,
/// through the layouts' parsers, writes and the set's standing.
fn other_layouts_config() -> Config {
    use certgen::secret::{Layout, TYPE_OPAQUE};
    let mut c = config();
    c.ca.layout = Layout {
        bundle: "bundle.crt".into(),
        cert: "ca.crt".into(),
        key: "ca.key".into(),
        type_: TYPE_OPAQUE,
    };
    for t in &mut c.tls {
        t.layout = Layout {
            bundle: "ca".into(),
            cert: "cert".into(),
            key: "key".into(),
            type_: TYPE_OPAQUE,
        };
    }
    c
}

impl Set {
    fn new(clock_offsets: [i64; MEMBERS], config: &Config) -> Self {
        let worlds: Vec<_> = (0..MEMBERS)
            .map(|i| {
                let w = World::new();
                {
                    let mut w = w.lock().unwrap();
                    w.clock_offset = time::Duration::seconds(clock_offsets[i]);
                    w.ca_cert_key = config.ca.layout.cert.clone();
                    let leaves = &config.tls[0].layout;
                    w.keys = (leaves.bundle.clone(), leaves.cert.clone());
                }
                w
            })
            .collect();
        Self {
            worlds,
            single: BTreeMap::new(),
            ended: Vec::new(),
            next: 0,
            dry_differs: None,
        }
    }

    /// A set of three members with these clocks, installed by a run over all of them.
    async fn installed(clock_offsets: [i64; MEMBERS], config: &Config) -> Self {
        let mut set = Self::new(clock_offsets, config);
        let install = SetOp::Run {
            members: MEMBERS,
            overwrite: false,
            hang: None,
            crash_after: None,
        };
        assert_eq!(set.run(config, install).await.0, 0, "the install");
        set
    }

    fn record(&self, member: usize) -> Option<Record> {
        let w = self.worlds[member].lock().unwrap();
        let text = w.get(CA)?.annotations.get(SET_ANNOTATION)?.clone();
        Some(serde_json::from_str(&text).expect("a record the driver wrote parses"))
    }

    /// A run of the set driver over the first `n` members: its exit code and message.
    async fn run(&mut self, config: &Config, op: SetOp) -> (u8, String) {
        let SetOp::Run {
            members: n,
            overwrite,
            hang,
            crash_after,
        } = op
        else {
            unreachable!()
        };
        let index = self.next;
        self.next += 1;
        let spec = RunSpec {
            overwrite,
            faults: Faults {
                crash_after,
                ..Faults::default()
            },
            timeout: Some(Duration::from_secs(600)),
            ..RunSpec::default()
        };
        let hang_of = |i: usize| hang.filter(|(m, _)| *m == i).map(|(_, at)| at);
        // One process: every member's store shares its write count and its death.
        let root = Session::new(&self.worlds[0], index, spec.faults);
        let sessions: Vec<Session> = (0..n)
            .map(|i| root.beside(&self.worlds[i], hang_of(i)))
            .collect();
        let uids: Vec<(String, String)> = (0..n)
            .map(|i| (format!("m{i}"), format!("uid-{i}")))
            .collect();
        let recorded: Vec<(String, Option<Record>)> =
            (0..n).map(|i| (format!("m{i}"), self.record(i))).collect();
        let previous = recorded
            .iter()
            .filter_map(|(_, r)| r.as_ref())
            .map(|r| r.members.len())
            .max();
        let added: Vec<String> = match previous {
            Some(p) if p < n => (p..n).map(|i| format!("m{i}")).collect(),
            _ => Vec::new(),
        };
        let record = certgen::set::membership(&uids, &recorded, (&added, &[]))
            .unwrap_or_else(|e| panic!("run {index}: membership: {e}"));
        let options = options(&spec);
        // The oracle's "dry run = run": a run without faults is preceded by the set's dry run
        // from the same state, whose plan each member's first step must match.
        let faultless = hang.is_none() && crash_after.is_none();
        let dry = if faultless {
            let dry_sessions: Vec<Session> = (0..n)
                .map(|i| Session::new(&self.worlds[i], DRY, Faults::default()))
                .collect();
            let mut dry_options = options;
            dry_options.dry_run = true;
            let runs: Vec<MemberRun<'_, Session>> = dry_sessions
                .iter()
                .enumerate()
                .map(|(i, s)| MemberRun {
                    name: format!("m{i}"),
                    uid: format!("uid-{i}"),
                    store: s,
                    inv: invocation(config, dry_options, certgen::lock::Target::None),
                })
                .collect();
            let out = Box::pin(certgen::rotation::set::dry_run(runs, record.clone())).await;
            Some(match out {
                Ok(out) => Ok(out
                    .members
                    .iter()
                    .map(|m| match &m.failure {
                        None => Ok(planned_writes(&m.report)),
                        Some(e) => Err(e.to_string()),
                    })
                    .collect::<Vec<_>>()),
                Err(e) => Err(e.to_string()),
            })
        } else {
            None
        };
        let marks: Vec<Mark> = (0..n)
            .map(|i| self.worlds[i].lock().unwrap().mark())
            .collect();
        let runs: Vec<MemberRun<'_, Session>> = sessions
            .iter()
            .enumerate()
            .map(|(i, s)| MemberRun {
                name: format!("m{i}"),
                uid: format!("uid-{i}"),
                store: s,
                inv: invocation(config, options, lease::target(s)),
            })
            .collect();
        let result = tokio::select! {
            r = Box::pin(certgen::rotation::set::run(runs, record)) => Some(r),
            () = root.died.notified() => None,
        };
        let (code, message) = match result {
            Some(Ok(mut out)) => match out.failure() {
                None => (0, String::new()),
                Some(e) => (e.code(), e.to_string()),
            },
            Some(Err(e)) => (e.code(), e.to_string()),
            None => (5, "killed".into()),
        };
        if tracing_asked() {
            let now = self.worlds[0].lock().unwrap().true_now();
            eprintln!(
                "set run {index} ({op:?}) ended at {} with {code}: {message}",
                now.time()
            );
        }
        if let Some(dry) = dry {
            let differs = dry_set_differs(&self.worlds, index, &marks, code, &dry);
            if let Some(d) = differs {
                self.dry_differs
                    .get_or_insert(format!("set run {index} ({op:?}): {d}"));
            }
        }
        self.ended.push((index, code, message.clone()));
        (code, message)
    }

    /// A member's own single-cluster run.
    async fn single(&mut self, config: &Config, member: usize, overwrite: bool) -> Ended {
        let index = self.next;
        self.next += 1;
        self.single.insert(index, member);
        let spec = RunSpec {
            overwrite,
            ..RunSpec::default()
        };
        Box::pin(super::run(&self.worlds[member], config, index, spec)).await
    }

    /// A member's Secrets as they were `back` writes ago (never before `floor`, the history's
    /// length after the set's first run): a restore from a backup.
    fn restore(&mut self, member: usize, back: usize, floor: usize) {
        let mut w = self.worlds[member].lock().unwrap();
        let at = w.history.len().saturating_sub(back).max(floor);
        let mut then: BTreeMap<String, Option<StoredSecret>> = BTreeMap::new();
        for (name, s) in &w.history[..at] {
            then.insert(name.clone(), s.clone());
        }
        for (name, s) in then {
            let now = w.get(&name).cloned();
            match (s, now) {
                (Some(s), Some(n)) if s.data == n.data && s.annotations == n.annotations => {}
                (Some(s), _) => w.replace(s),
                (None, Some(_)) => w.delete(&name),
                (None, None) => {}
            }
        }
    }

    /// The set's CAs: each member's active and pending CA.
    fn cas(&self, n: usize) -> Vec<Cas> {
        (0..n)
            .map(|i| {
                let w = self.worlds[i].lock().unwrap();
                let first = |k: &str| {
                    let b = w.get(CA)?.data.get(k)?.clone();
                    Some(parse_cert_chain(&b).ok()?.first()?.fingerprint())
                };
                (first(&w.ca_cert_key), first("next.crt"))
            })
            .collect()
    }
}

/// Where a set run's first step in each member differs from what the set's dry run from the
/// same state planned there (as [`dry_run_is_the_run`] judges one run).
fn dry_set_differs(
    worlds: &[Arc<Mutex<World>>],
    index: usize,
    marks: &[Mark],
    code: u8,
    dry: &Result<Vec<Result<BTreeSet<String>, String>>, String>,
) -> Option<String> {
    let planned = match dry {
        Err(why) if code == 0 => {
            return Some(format!(
                "the set's dry run failed ({why}), the run exited 0"
            ));
        }
        Err(_) => return None,
        Ok(p) => p,
    };
    for (i, (w, mark)) in worlds.iter().zip(marks).enumerate().take(planned.len()) {
        let (wrote, at) = w.lock().unwrap().first_step(index, mark.trail);
        let at_once = at == Some(mark.at);
        let differs = match &planned[i] {
            Err(why) if code == 0 => {
                Some(format!("m{i}'s dry run failed ({why}), the run exited 0"))
            }
            Err(_) => None,
            Ok(p) if p.is_empty() && at_once => Some(format!(
                "m{i}'s dry run planned nothing, its first step wrote {wrote:?} at once"
            )),
            Ok(p) if !p.is_empty() && *p != wrote => Some(format!(
                "m{i}'s dry run planned {p:?}, its first step wrote {wrote:?}"
            )),
            Ok(_) => None,
        };
        if differs.is_some() {
            return differs;
        }
    }
    None
}

/// Every leaf any member's consumers may hold against every bundle another member's may hold
/// at the same instant, at both ends of the time they overlap: the pairs checked.
fn check_across(
    worlds: &[std::sync::MutexGuard<'_, World>],
    end: OffsetDateTime,
) -> Result<usize, String> {
    let lag = time::Duration::try_from(DELAY).unwrap();
    let mut pairs = 0;
    for (a, wa) in worlds.iter().enumerate() {
        for (b, wb) in worlds.iter().enumerate().filter(|(b, _)| *b != a) {
            for va in &wa.versions {
                let Some(leaf) = &va.leaf else { continue };
                let held_a = (va.from, va.until.map_or(end, |u| u + lag).min(end));
                for vb in &wb.versions {
                    let held_b = (vb.from, vb.until.map_or(end, |u| u + lag).min(end));
                    let (from, until) = (held_a.0.max(held_b.0), held_a.1.min(held_b.1));
                    if from >= until {
                        continue;
                    }
                    // A restore (another writer) that left a leaf or a bundle which a version
                    // written before it does not match: the restore's doing, not certgen's
                    // (also while certgen's later writes carry that leaf or bundle on
                    // unchanged). Whatever certgen writes after a restore is checked against it.
                    let leaf_from = first_held(&wa.versions, va, |x, y| x.leaf == y.leaf);
                    let bundle_from = first_held(&wb.versions, vb, |x, y| x.bundle == y.bundle);
                    if (leaf_from.run == FOREIGN && bundle_from.from <= leaf_from.from)
                        || (bundle_from.run == FOREIGN && leaf_from.from <= bundle_from.from)
                    {
                        continue;
                    }
                    pairs += 1;
                    let last = (until - time::Duration::seconds(1)).max(from);
                    for at in [from, last] {
                        if let Err(why) = wa.verifies(leaf, &vb.bundle, at) {
                            return Err(format!(
                                "m{a}'s {} (written by run {} at {}) is refused by m{b}'s {} bundle (written by run {} at {}) at {at}: {why}",
                                va.secret, va.run, va.from, vb.secret, vb.run, vb.from
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(pairs)
}

/// The first of the versions of `v`'s Secret, back from `v`, that hold what `same` compares
/// (the version that wrote a leaf, or a bundle, later versions carried on unchanged).
fn first_held<'a>(
    versions: &'a [Version],
    v: &'a Version,
    same: impl Fn(&Version, &Version) -> bool,
) -> &'a Version {
    let mut first = v;
    for earlier in versions
        .iter()
        .rev()
        .filter(|e| e.secret == v.secret && e.seq < v.seq)
    {
        if !same(earlier, first) {
            break;
        }
        first = earlier;
    }
    first
}

/// A member's active and pending CA, by fingerprint.
type Cas = (Option<[u8; 32]>, Option<[u8; 32]>);

/// What a set's trajectory checked.
#[derive(Debug, Default, Clone, Copy)]
struct SetChecked {
    runs: usize,
    pairs_within: usize,
    pairs_across: usize,
}

/// Runs `ops` on a fresh set (first a run installing all three members), then plain runs
/// until the set settles, and checks everything the module promises.
async fn set_trajectory(offsets: [i64; MEMBERS], ops: &[SetOp]) -> Result<SetChecked, String> {
    set_trajectory_with(&config(), offsets, ops).await
}

/// [`set_trajectory`] with `config`; a CA Secret in another layout must keep it to the end.
async fn set_trajectory_with(
    config: &Config,
    offsets: [i64; MEMBERS],
    ops: &[SetOp],
) -> Result<SetChecked, String> {
    let config = config.clone();
    let mut set = Set::new(offsets, &config);
    let install = SetOp::Run {
        members: MEMBERS,
        overwrite: false,
        hang: None,
        crash_after: None,
    };
    let (code, msg) = set.run(&config, install).await;
    if code != 0 {
        return Err(format!("the install over the set exited {code}: {msg}"));
    }
    let floors: Vec<usize> = set
        .worlds
        .iter()
        .map(|w| w.lock().unwrap().history.len())
        .collect();
    let mut members = MEMBERS;
    for op in ops {
        match *op {
            SetOp::Run { members: n, .. } => {
                members = members.max(n);
                set.run(&config, *op).await;
            }
            SetOp::Single { member, overwrite } => {
                let e = set.single(&config, member, overwrite).await;
                if e.code != 0 && e.code != 1 && e.code != 3 {
                    return Err(format!(
                        "m{member}'s own run exited {}: {}",
                        e.code, e.message
                    ));
                }
                if e.code == 1 && !e.message.contains("run certgen with the set's contexts") {
                    return Err(format!(
                        "m{member}'s own run exited 1 without naming the set: {}",
                        e.message
                    ));
                }
            }
            SetOp::Wait(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
            SetOp::Restore { member, back } => set.restore(member, back, floors[member]),
        }
    }
    // Plain runs over the set until one writes nothing.
    let mut settled = false;
    for _ in 0..6 {
        tokio::time::sleep(DELAY + Duration::from_secs(1)).await;
        let before: usize = set.worlds.iter().map(|w| w.lock().unwrap().log.len()).sum();
        let (code, msg) = set
            .run(
                &config,
                SetOp::Run {
                    members,
                    overwrite: false,
                    hang: None,
                    crash_after: None,
                },
            )
            .await;
        let after: usize = set.worlds.iter().map(|w| w.lock().unwrap().log.len()).sum();
        if code != 0 {
            return Err(format!(
                "a plain run over the settled set exited {code}: {msg}"
            ));
        }
        if before == after {
            settled = true;
            break;
        }
    }
    if !settled {
        return Err("plain runs over the set never stopped writing".into());
    }
    if let Some(d) = &set.dry_differs {
        return Err(format!("dry run = run: {d}"));
    }
    let cas = set.cas(members);
    if cas.iter().any(|c| c != &cas[0]) || cas[0].1.is_some() {
        return Err(format!("the settled set holds more than one CA: {cas:?}"));
    }
    let end = set.worlds[0].lock().unwrap().true_now() + time::Duration::seconds(1);
    let worlds: Vec<_> = set.worlds.iter().map(|w| w.lock().unwrap()).collect();
    let mut checked = SetChecked {
        runs: set.next,
        ..SetChecked::default()
    };
    for (i, w) in worlds.iter().enumerate() {
        checked.pairs_within += check_pairs(w, end)
            .map_err(|e| format!("within m{i}: {e}"))?
            .pairs;
    }
    checked.pairs_across = check_across(&worlds, end)?;
    // The CA Secret keeps its layout: its type, the active CA alone in its certificate key,
    // its key beside it, and no key of another layout.
    let layout = &config.ca.layout;
    for (i, w) in worlds.iter().enumerate() {
        let ca = w.get(CA).ok_or(format!("m{i} has no CA Secret"))?;
        let allowed = [&layout.bundle, &layout.cert, &layout.key];
        if let Some(k) = ca.data.keys().find(|k| !allowed.contains(k)) {
            return Err(format!(
                "m{i}'s CA Secret holds {k}, not a key of its layout"
            ));
        }
        let certs = ca.data.get(&layout.cert).map(|b| parse_cert_chain(b));
        if !matches!(&certs, Some(Ok(c)) if c.len() == 1) || !ca.data.contains_key(&layout.key) {
            return Err(format!(
                "m{i}'s CA Secret does not hold one CA in {} and its key in {}",
                layout.cert, layout.key
            ));
        }
        if ca.type_ != layout.type_ {
            return Err(format!("m{i}'s CA Secret has type {}", ca.type_));
        }
        for t in &config.tls {
            let s = w.get(&t.name).ok_or(format!("m{i} has no {}", t.name))?;
            let l = &t.layout;
            let allowed = [&l.bundle, &l.cert, &l.key];
            if let Some(k) = s.data.keys().find(|k| !allowed.contains(k)) {
                return Err(format!(
                    "m{i}'s {} holds {k}, not a key of its layout",
                    t.name
                ));
            }
            if s.type_ != l.type_ {
                return Err(format!("m{i}'s {} has type {}", t.name, s.type_));
            }
        }
    }
    // One new CA per set run, over all members; none from a member's own run.
    let mut published: BTreeMap<usize, BTreeSet<[u8; 32]>> = BTreeMap::new();
    for w in &worlds {
        for (fp, run) in &w.cas {
            published.entry(*run).or_default().insert(*fp);
        }
    }
    for (run, cas) in &published {
        if let Some(m) = set.single.get(run) {
            return Err(format!("m{m}'s own run {run} published a CA in a set"));
        }
        if cas.len() > 1 {
            return Err(format!("set run {run} published {} CAs", cas.len()));
        }
    }
    Ok(checked)
}

fn check(offsets: [i64; MEMBERS], ops: &[SetOp]) -> SetChecked {
    runtime()
        .block_on(set_trajectory(offsets, ops))
        .unwrap_or_else(|e| panic!("{offsets:?} {ops:?}: {e}"))
}

fn rotate(hang: Option<(usize, usize)>, crash_after: Option<usize>) -> SetOp {
    SetOp::Run {
        members: MEMBERS,
        overwrite: true,
        hang,
        crash_after,
    }
}

const SKEWED: [i64; MEMBERS] = [0, 40, -30];

/// A staged rotation over three members with clocks that disagree: every cross-member pair
/// verifies throughout, and the set ends on one new CA.
#[test]
fn a_rotation_over_three_members_breaks_no_pair_across_them() {
    let c = check(SKEWED, &[rotate(None, None)]);
    assert!(c.pairs_across > 0, "{c:?}");
    eprintln!("set: one rotation, {c:?}");
}

/// A member that stops answering at each of its Secret reads and writes of a rotation (every
/// point of every phase, in each member): no pair breaks across members, and the next runs
/// finish the rotation with one CA.
#[test]
fn a_member_unreachable_at_any_point_breaks_nothing() {
    let mut total = SetChecked::default();
    let mut trajectories = 0;
    for member in 0..MEMBERS {
        for at in 1..=40 {
            let c = check(SKEWED, &[rotate(Some((member, at)), None)]);
            trajectories += 1;
            total.runs += c.runs;
            total.pairs_across += c.pairs_across;
            total.pairs_within += c.pairs_within;
        }
    }
    eprintln!("set: a member unreachable at each call: {trajectories} trajectories, {total:?}");
}

/// A member that stops answering in the leaves step (after the barrier opened, so every member
/// trusts the new CA): the members still reachable go on and finish their leaves, which every
/// member trusts, and nobody cleans up; the run exits 3 naming the member. Every point of m2's
/// calls is tried; the ones that fall in its leaves step are counted (some must).
#[test]
fn reachable_members_finish_their_leaves_when_one_stops_in_the_leaves_step() {
    let mut in_leaves = 0;
    for at in 1..=40 {
        runtime().block_on(async {
            let config = config();
            let mut set = Set::installed(SKEWED, &config).await;
            let old = set.cas(MEMBERS)[0].0.unwrap();
            let (code, message) = set.run(&config, rotate(Some((2, at)), None)).await;
            let cas = set.cas(MEMBERS);
            let promoted = |i: usize| cas[i].0 != Some(old);
            if !(0..MEMBERS).any(promoted) {
                return;
            }
            if code == 0 {
                // m2 stopped answering only after its last call of the run.
                return;
            }
            in_leaves += 1;
            assert_eq!(code, 3, "at {at}: {message}");
            assert!(message.contains("m2"), "at {at}: {message}");
            for i in 0..2 {
                let w = set.worlds[i].lock().unwrap();
                let active = parse_cert_chain(&w.get(CA).unwrap().data[&w.ca_cert_key])
                    .unwrap()
                    .remove(0);
                for t in TLS {
                    let leaf = parse_cert_chain(&w.get(t).unwrap().data["tls.crt"]).unwrap();
                    let bundle = parse_cert_chain(&w.get(t).unwrap().data["ca.crt"]).unwrap();
                    assert!(
                        promoted(i) && active.signed(&leaf[0]),
                        "at {at}: m{i}'s {t} did not go on to the new CA"
                    );
                    assert!(
                        bundle.iter().any(|c| c.fingerprint() == old),
                        "at {at}: m{i}'s {t} bundle dropped the old CA while m2 was unreachable"
                    );
                }
            }
        });
    }
    assert!(
        in_leaves > 0,
        "no point of m2's calls fell in its leaves step"
    );
    eprintln!("set: m2 unreachable after the leaves barrier opened at {in_leaves} points of 40");
}

/// The same trajectories with the CA Secret in Cilium's layout (the `cilium-clustermesh`
/// profile's `cilium-ca`) and the TLS Secrets in kube-webhook-certgen's: one rotation, a member
/// unreachable at each of its first 40 calls, the process killed after each of 40 writes. No
/// pair breaks within or across members, the set ends on one CA, and every member's Secrets
/// keep their layouts.
#[test]
fn the_same_trajectories_keep_other_layouts() {
    let config = other_layouts_config();
    let mut ops = vec![vec![rotate(None, None)]];
    ops.extend((1..=40).map(|at| vec![rotate(Some((1, at)), None)]));
    ops.extend((1..=40).map(|n| vec![rotate(None, Some(n))]));
    let mut total = SetChecked::default();
    for op in &ops {
        let c = runtime()
            .block_on(set_trajectory_with(&config, SKEWED, op))
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
        total.runs += c.runs;
        total.pairs_across += c.pairs_across;
        total.pairs_within += c.pairs_within;
    }
    assert!(total.pairs_across > 0, "{total:?}");
    eprintln!(
        "set, Cilium's CA layout and kube-webhook-certgen's leaves: {} trajectories, {total:?}",
        ops.len()
    );
}

/// A member unreachable during the trust step: no member writes a leaf, and the run exits 3
/// naming it.
#[test]
fn a_member_unreachable_during_trust_stops_every_leaf() {
    runtime().block_on(async {
        let config = config();
        let mut set = Set::installed(SKEWED, &config).await;
        let leaves = |set: &Set| -> Vec<Vec<u8>> {
            set.worlds
                .iter()
                .flat_map(|w| {
                    let w = w.lock().unwrap();
                    TLS.iter()
                        .map(|t| w.get(t).unwrap().data["tls.crt"].clone())
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let before = leaves(&set);
        // m2 answers its reads, then stops before its trust write.
        let (code, message) = set.run(&config, rotate(Some((2, 6)), None)).await;
        assert_eq!(code, 3, "{message}");
        assert!(message.contains("m2"), "{message}");
        assert_eq!(
            leaves(&set),
            before,
            "a leaf changed while m2 lacked the trust"
        );
    });
}

/// The process killed after each write of a rotation over the set (between two members'
/// writes too), then plain runs: one CA in the end, no pair broken.
#[test]
fn a_crash_between_any_two_writes_breaks_nothing() {
    let mut n = 0;
    for after in 1..=40 {
        check(SKEWED, &[rotate(None, Some(after))]);
        n += 1;
    }
    eprintln!("set: crash after each write: {n} trajectories");
}

/// A member's own single-cluster runs (its CronJob) in every phase of an interrupted set
/// rotation: they never publish a CA or promote one, and say what to run instead.
#[test]
fn a_members_own_run_never_forks_the_shared_ca() {
    for at in [3, 8, 14, 20, 30] {
        for member in 0..MEMBERS {
            check(
                SKEWED,
                &[
                    rotate(None, Some(at)),
                    SetOp::Single {
                        member,
                        overwrite: true,
                    },
                    SetOp::Wait(200),
                    SetOp::Single {
                        member,
                        overwrite: false,
                    },
                ],
            );
        }
    }
}

/// A member restored from a backup in the middle of a set rotation and after it: the next
/// set runs bring it back to the set's CA through a trust step.
#[test]
fn a_member_restored_from_a_backup_rejoins_through_trust() {
    for back in [2, 5, 9, 14] {
        for member in 0..MEMBERS {
            check(
                SKEWED,
                &[
                    rotate(None, None),
                    SetOp::Wait(100),
                    SetOp::Restore { member, back },
                    rotate(None, None),
                ],
            );
        }
    }
}

/// A set of two members that a third joins (`--add-member`), with a rotation before and after.
#[test]
fn a_member_added_enters_through_trust() {
    let c = runtime().block_on(async {
        let config = config();
        let mut set = Set::new(SKEWED, &config);
        let two = |overwrite| SetOp::Run {
            members: 2,
            overwrite,
            hang: None,
            crash_after: None,
        };
        assert_eq!(set.run(&config, two(false)).await.0, 0);
        assert_eq!(set.run(&config, two(true)).await.0, 0);
        // The third member was installed alone before it joins: its own CA.
        let alone = set.single(&config, 2, false).await;
        assert_eq!(alone.code, 0, "{}", alone.message);
        assert_eq!(set.run(&config, rotate(None, None)).await.0, 0);
        tokio::time::sleep(DELAY * 3).await;
        assert_eq!(set.run(&config, rotate(None, None)).await.0, 0);
        tokio::time::sleep(DELAY * 3).await;
        set.run(
            &config,
            SetOp::Run {
                members: 3,
                overwrite: false,
                hang: None,
                crash_after: None,
            },
        )
        .await;
        let cas = set.cas(3);
        assert!(cas.iter().all(|c| c == &cas[0]), "{cas:?}");
        let end = set.worlds[0].lock().unwrap().true_now();
        let worlds: Vec<_> = set.worlds.iter().map(|w| w.lock().unwrap()).collect();
        // Pairs with the new member are checked only from when it joined: before, it had a CA
        // of its own, which the set never trusted (and is not certgen's doing).
        for (i, w) in worlds.iter().enumerate() {
            check_pairs(w, end).unwrap_or_else(|e| panic!("within m{i}: {e}"));
        }
        check_across(&worlds[..2], end).unwrap()
    });
    assert!(c > 0);
}

/// The mutation checks: with the barrier off (each member takes its steps as soon as its own
/// gate opens) and the verifier's check blind to the other members, a member unreachable
/// during the trust step lets the others write leaves it does not trust, and the oracle says
/// so. With the barrier off alone, the verifier's check across members refuses those leaves
/// (exit 2) before they are written: the second line of defence.
#[test]
fn the_oracle_catches_leaves_written_while_a_member_lacks_the_trust() {
    certgen::rotation::set::barrier_off(true, true);
    let caught = runtime().block_on(set_trajectory(SKEWED, &[rotate(Some((2, 6)), None)]));
    certgen::rotation::set::barrier_off(false, false);
    let e = caught.expect_err("leaves without every member's trust must break a pair");
    assert!(e.contains("is refused by m2's"), "{e}");

    certgen::rotation::set::barrier_off(true, false);
    let refused = runtime().block_on(async {
        let config = config();
        let mut set = Set::new(SKEWED, &config);
        let install = SetOp::Run {
            members: MEMBERS,
            overwrite: false,
            hang: None,
            crash_after: None,
        };
        set.run(&config, install).await;
        set.run(&config, rotate(Some((2, 6)), None)).await
    });
    certgen::rotation::set::barrier_off(false, false);
    assert!(
        refused.1.contains("would break mutual TLS") && refused.1.contains("m2/"),
        "{refused:?}"
    );
}

fn arb_set_op() -> impl proptest::strategy::Strategy<Value = SetOp> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (
            any::<bool>(),
            prop_oneof![3 => Just(None), 1 => ((0..MEMBERS), 1usize..40).prop_map(Some)],
            prop_oneof![3 => Just(None), 1 => (1usize..40).prop_map(Some)],
        )
            .prop_map(|(overwrite, hang, crash_after)| SetOp::Run {
                members: MEMBERS,
                overwrite,
                hang,
                crash_after,
            }),
        2 => ((0..MEMBERS), any::<bool>())
            .prop_map(|(member, overwrite)| SetOp::Single { member, overwrite }),
        2 => (1u64..300).prop_map(SetOp::Wait),
        1 => ((0..MEMBERS), 1usize..15).prop_map(|(member, back)| SetOp::Restore { member, back }),
    ]
}

/// Seeded random trajectories over the set: rotations with members unreachable and the
/// process killed anywhere, members' own runs, time passing and restores, in any order, with
/// clocks that disagree. `CERTGEN_SIM_SET_CASES=N` runs N instead of the default (200).
#[test]
fn random_set_trajectories_keep_the_invariant() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
    let cases = std::env::var("CERTGEN_SIM_SET_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut runner = TestRunner::new_with_rng(
        PtConfig {
            cases,
            failure_persistence: None,
            ..PtConfig::default()
        },
        super::cases::seeded_rng(),
    );
    let totals = std::cell::Cell::new((0usize, SetChecked::default()));
    let offsets = prop_oneof![Just([0, 0, 0]), Just(SKEWED), Just([-50, 20, 0])];
    runner
        .run(
            &(offsets, prop::collection::vec(arb_set_op(), 1..6)),
            |(offsets, ops)| {
                let c = runtime()
                    .block_on(set_trajectory(offsets, &ops))
                    .map_err(TestCaseError::fail)?;
                let (n, mut t) = totals.get();
                t.runs += c.runs;
                t.pairs_within += c.pairs_within;
                t.pairs_across += c.pairs_across;
                totals.set((n + 1, t));
                Ok(())
            },
        )
        .unwrap();
    let (n, t) = totals.get();
    eprintln!(
        "set: random trajectories: {n} trajectories over 3 members, {} runs, {} pairs within members and {} across them checked",
        t.runs, t.pairs_within, t.pairs_across
    );
}
