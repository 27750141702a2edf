//! One rotation over a set of clusters that share a CA (`--context a --context b ...`).
//!
//! Every member runs the single-cluster steps side by side (its own store, clock, evidence and
//! gates), with the leaves step and the cleanup held back ([`crate::plan::Hold`]): a member
//! whose next step is held waits at the set's barrier. The barrier opens a step for everyone
//! only when no member is working any more (every write made, every gate open on that member's
//! own evidence and clock), so:
//!
//! - no member writes a leaf from the pending CA before every member trusts it and every
//!   member's consumers have loaded that trust;
//! - no member drops a CA before every member's leaves come from the new one, loaded.
//!
//! A member that fails (unreachable, RBAC, a lock held) never lets the others past the barrier:
//! they stop there, in the widest-trust state, and the run exits with that member's error (a
//! member that does not answer before `--timeout`: exit 3, naming it). The lock is taken in
//! every member, in the order of their UIDs, before anything is written. One CA: a member
//! whose plan makes a new CA stores the set's (the pending CA a member already holds, or one
//! made here once for all), so every member holds the same certificate and key. The verifier's
//! check before each write includes what the other members' consumers may hold.

use std::collections::BTreeMap;
use std::sync::Mutex;

use time::OffsetDateTime;
use tokio::sync::Notify;

use super::invocation::Invocation;
use super::step::{InSet, Others, Outcome, look};
use crate::apply::Guard;
use crate::config::OverwriteWhy;
use crate::error::Error;
use crate::lock;
use crate::pki::CaKey;
use crate::plan::{self, Barrier, Hold, Phase};
use crate::report::Report;
use crate::set::Record;
use crate::store::SecretStore;

/// One member of the set: its name (the context), its identity, its store and everything
/// else a single-cluster run gets.
pub struct MemberRun<'a, S> {
    pub name: String,
    /// Its `kube-system` Namespace UID.
    pub uid: String,
    pub store: &'a S,
    pub inv: Invocation<'a>,
}

/// What a member's run gave: its report, the failure it ended with, and the set's view of it.
pub struct MemberReport {
    pub name: String,
    pub uid: String,
    pub report: Report,
    pub failure: Option<Error>,
    /// The failure is only that it waited at the barrier for another member.
    pub waited: bool,
}

/// The set's run, member by member, and what ended it.
pub struct SetOutcome {
    pub members: Vec<MemberReport>,
    pub record: Option<Record>,
    /// What the set's run did about the CA, in one line.
    pub note: Option<String>,
}

impl SetOutcome {
    /// The error the run exits with: the first member's failure, named by the member.
    pub fn failure(&mut self) -> Option<Error> {
        let own = |m: &MemberReport| m.failure.is_some() && !m.waited;
        let i = match self.members.iter().position(own) {
            Some(i) => i,
            None => self.members.iter().position(|m| m.failure.is_some())?,
        };
        let m = &mut self.members[i];
        let e = m.failure.take()?;
        Some(named(&m.name, e))
    }
}

fn named(member: &str, e: Error) -> Error {
    match e {
        Error::Member { .. } => e,
        e => Error::Member {
            member: member.to_string(),
            source: Box::new(e),
        },
    }
}

/// Where a member is, for the barrier.
#[derive(Debug, Clone, PartialEq, Eq)]
enum At {
    /// Writing, restarting, or waiting at its own gate.
    Working,
    /// Its next step is held; every earlier write loaded (its gate open). `bool`: the held
    /// step is a cleanup before a new rotation's trust step (the last rotation's prior CA
    /// dropped first), which comes before every member's leaves.
    Held(Barrier, bool),
    /// Nothing left to do in this run; `cleanup_pending`: a cleanup waits behind a gate it
    /// could not wait for.
    Done { cleanup_pending: bool },
    /// It ended with an error.
    Failed(String),
    /// It stopped at the barrier when `--timeout` passed, waiting for another member.
    Waited,
}

/// What the barrier tells a member that arrived.
pub enum Arrival {
    /// Take the held step now.
    Go,
    /// End the run here: what to say, and the error to end with (none: a cleanup left to the
    /// next run).
    Stop {
        note: Option<String>,
        error: Option<Error>,
    },
}

enum Verdict {
    Go,
    Stop(Option<String>, Option<StopWhy>),
}

enum StopWhy {
    /// Another member failed.
    Failed(String, String),
}

#[derive(Default)]
struct State {
    at: BTreeMap<String, At>,
    verdicts: BTreeMap<String, Verdict>,
}

/// The set's phase barrier.
pub struct SetBarrier {
    state: Mutex<State>,
    changed: Notify,
    deadline: tokio::time::Instant,
}

impl SetBarrier {
    fn new(members: &[String], deadline: tokio::time::Instant) -> Self {
        let at = members.iter().map(|m| (m.clone(), At::Working)).collect();
        Self {
            state: Mutex::new(State {
                at,
                verdicts: BTreeMap::new(),
            }),
            changed: Notify::new(),
            deadline,
        }
    }

    fn set(&self, member: &str, at: At) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.at.insert(member.to_string(), at);
        Self::decide(&mut s);
        drop(s);
        self.changed.notify_waiters();
    }

    /// Opens what can be opened, under the state's lock.
    fn decide(s: &mut State) {
        if s.at.values().any(|a| *a == At::Working) {
            return;
        }
        let held: Vec<(String, Barrier, bool)> =
            s.at.iter()
                .filter_map(|(m, a)| match a {
                    At::Held(b, before_trust) => Some((m.clone(), *b, *before_trust)),
                    _ => None,
                })
                .collect();
        if held.is_empty() {
            return;
        }
        if let Some((member, why)) = s.at.iter().find_map(|(m, a)| match a {
            At::Failed(why) => Some((m.clone(), why.clone())),
            _ => None,
        }) {
            for (m, b, _) in held {
                s.at.insert(
                    m.clone(),
                    At::Done {
                        cleanup_pending: true,
                    },
                );
                let note = format!(
                    "the {} step waits for member {member}, which failed ({why}); every member is left trusting every leaf any member holds: re-run certgen over the set once {member} is back",
                    b.name()
                );
                s.verdicts.insert(
                    m,
                    Verdict::Stop(
                        Some(note),
                        Some(StopWhy::Failed(member.clone(), why.clone())),
                    ),
                );
            }
            return;
        }
        // In the order of a rotation: a cleanup before a new rotation's trust step first (the
        // last rotation's prior CA signs no leaf in any member: the set starts a rotation only
        // when none is under way), then the leaves (every member trusts the pending CA, each
        // gate open), then the cleanup (every member's leaves from the new CA, loaded).
        let open = if held.iter().any(|(_, _, before_trust)| *before_trust) {
            Some((Barrier::Cleanup, true))
        } else if held.iter().any(|(_, b, _)| *b == Barrier::Leaves) {
            Some((Barrier::Leaves, false))
        } else if s.at.values().any(|a| {
            *a == At::Done {
                cleanup_pending: true,
            }
        }) {
            None
        } else {
            Some((Barrier::Cleanup, false))
        };
        match open {
            Some((b, before_trust)) => {
                for (m, _, _) in held
                    .iter()
                    .filter(|(_, h, t)| *h == b && *t == before_trust)
                {
                    s.at.insert(m.clone(), At::Working);
                    s.verdicts.insert(m.clone(), Verdict::Go);
                }
            }
            None => {
                // A member could not wait for its cleanup gate: the cleanup is the next run's,
                // in every member.
                for (m, _, _) in held {
                    s.at.insert(
                        m.clone(),
                        At::Done {
                            cleanup_pending: true,
                        },
                    );
                    s.verdicts.insert(
                        m,
                        Verdict::Stop(
                            Some("the cleanup waits until every member's consumers have loaded the new leaves; the next run over the set does it".into()),
                            None,
                        ),
                    );
                }
            }
        }
    }

    /// Whether the member stopped at the barrier waiting for another.
    fn waited(&self, member: &str) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.at.get(member) == Some(&At::Waited)
    }

    async fn arrive(&self, member: &str, (barrier, before_trust): (Barrier, bool)) -> Arrival {
        self.set(member, At::Held(barrier, before_trust));
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(v) = s.verdicts.remove(member) {
                    return match v {
                        Verdict::Go => Arrival::Go,
                        Verdict::Stop(note, why) => Arrival::Stop {
                            note,
                            error: why.map(|StopWhy::Failed(m, why)| {
                                Error::Timeout(format!(
                                    "member {m} failed ({why}); the others stopped before the {} step",
                                    barrier.name()
                                ))
                            }),
                        },
                    };
                }
            }
            if tokio::time::timeout_at(self.deadline, notified)
                .await
                .is_err()
            {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                s.at.insert(member.to_string(), At::Waited);
                let working: Vec<String> =
                    s.at.iter()
                        .filter(|(_, a)| **a == At::Working)
                        .map(|(m, _)| m.clone())
                        .collect();
                return Arrival::Stop {
                    note: None,
                    error: Some(Error::Timeout(format!(
                        "the {} step waits for member{} {} (still writing or at its gate); nothing more was written in any member: re-run certgen over the set",
                        barrier.name(),
                        if working.len() == 1 { "" } else { "s" },
                        working.join(", ")
                    ))),
                };
            }
        }
    }
}

/// A member's part in the set's run, as the single-cluster steps see it.
pub struct Member<'a> {
    name: &'a str,
    barrier: &'a SetBarrier,
    ca: Option<&'a CaKey>,
    others: &'a Others,
    /// The barrier the set opened for this member's next step.
    ticket: Mutex<Option<Barrier>>,
    /// No other member (the simulation's mutation check, [`barrier_off`]).
    alone: Others,
}

impl<'a> Member<'a> {
    /// What the next step may not do yet.
    pub fn hold(&self) -> Hold {
        if !barrier_holds() {
            return Hold::default();
        }
        let ticket = *self.ticket.lock().unwrap_or_else(|e| e.into_inner());
        Hold {
            leaves: ticket != Some(Barrier::Leaves),
            cleanup: ticket != Some(Barrier::Cleanup),
        }
    }

    pub fn in_set(&self) -> InSet<'_> {
        InSet {
            member: self.name,
            ca: self.ca,
            others: if cross_checked() {
                self.others
            } else {
                &self.alone
            },
        }
    }

    /// A step was taken: an opened barrier is used up.
    pub fn stepped(&self) {
        *self.ticket.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The member's consumers hold only what is stored now (its gate is open): the other
    /// members' checks count this state alone for it from here on.
    pub fn at_rest(&self, outcome: &Outcome) {
        let stored = stored_held(outcome);
        let mut others = self.others.lock().unwrap_or_else(|e| e.into_inner());
        others.insert(self.name.to_string(), stored);
    }

    /// Waits at the set's barrier before `barrier` (the held step, planned as `phase`).
    pub async fn arrive(&self, barrier: Barrier, phase: &Phase) -> Arrival {
        let before_trust = matches!(phase, Phase::Cleanup { last: false });
        let arrival = self
            .barrier
            .arrive(self.name, (barrier, before_trust))
            .await;
        if matches!(arrival, Arrival::Go) {
            *self.ticket.lock().unwrap_or_else(|e| e.into_inner()) = Some(barrier);
        }
        arrival
    }

    pub fn done(&self, cleanup_pending: bool) {
        self.barrier.set(self.name, At::Done { cleanup_pending });
    }
}

/// Whether the set's barrier holds steps back: always, but in the simulation's mutation check,
/// which turns it off on its own thread to show that the oracle catches a member writing
/// leaves while another lacks the trust ([`barrier_off`], cargo feature `test-hooks`).
fn barrier_holds() -> bool {
    #[cfg(feature = "test-hooks")]
    if BARRIER_OFF.with(std::cell::Cell::get) > 0 {
        return false;
    }
    true
}

/// Whether the verifier's check before each write includes the other members: always, but
/// in the simulation's second mutation ([`barrier_off`] with `cross_check_too`).
fn cross_checked() -> bool {
    #[cfg(feature = "test-hooks")]
    if BARRIER_OFF.with(std::cell::Cell::get) > 1 {
        return false;
    }
    true
}

#[cfg(feature = "test-hooks")]
thread_local! {
    static BARRIER_OFF: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// The mutation of the set's barrier, for the simulation's mutation checks (cargo feature
/// `test-hooks`): while `on`, members of a set run on this thread take every step as soon
/// as their own gate opens, as if each were alone; with `cross_check_too`, the verifier's
/// check before each write also forgets the other members.
#[cfg(feature = "test-hooks")]
pub fn barrier_off(on: bool, cross_check_too: bool) {
    BARRIER_OFF.with(|b| b.set(u8::from(on) + u8::from(on && cross_check_too)));
}

/// Every TLS Secret of an outcome as stored (before = after).
fn stored_held(outcome: &Outcome) -> BTreeMap<String, plan::Held> {
    let mut held = BTreeMap::new();
    for (name, bundle) in &outcome.bundles {
        let bundle = crate::pki::parse_cert_chain(bundle).ok();
        let leaf = outcome.leaves.get(name).cloned();
        held.insert(
            name.clone(),
            plan::Held {
                before_leaf: leaf.clone(),
                before_bundle: bundle.clone(),
                after_leaf: leaf,
                after_bundle: bundle,
                fresh: false,
            },
        );
    }
    held
}

/// The CA the members' new-CA steps store, decided from every member's look; and, per
/// member, whether its run starts the set's rotation (`--overwrite` as the plan sees it).
struct Shared {
    ca: Option<CaKey>,
    /// Per member: whether its plan starts the set's rotation, and why.
    overwrite: Vec<Option<OverwriteWhy>>,
    note: Option<String>,
}

impl Shared {
    /// Each member's run starts the set's rotation (`--overwrite` as its plan sees it) as
    /// decided, saying why.
    fn apply<S>(&self, members: &mut [MemberRun<'_, S>]) {
        for (m, why) in members.iter_mut().zip(&self.overwrite) {
            m.inv.options.overwrite = why.is_some();
            if let Some(why) = why {
                m.inv.options.overwrite_why = *why;
            }
        }
    }
}

/// When the set's run must be done by: the earliest of its members' deadlines.
fn earliest_deadline<S>(members: &[MemberRun<'_, S>]) -> tokio::time::Instant {
    members
        .iter()
        .map(|m| m.inv.deadline)
        .min()
        .expect("a set has members")
}

/// Whether a member's look holds `ca`, pending or as the CA it signs with.
fn holds(l: &Outcome, ca: &CaKey) -> bool {
    let fp = |k: &CaKey| k.cert.fingerprint();
    l.pending.as_ref().is_some_and(|p| fp(p) == fp(ca))
        || l.signer.as_ref().is_some_and(|s| fp(s) == fp(ca))
}

/// The set's rotation under way: the pending CA some member holds (every member gets it),
/// with the first member holding it. Members holding different pending CAs are refused: a
/// set has one CA.
fn pending_ca<'m, S>(
    members: &'m [MemberRun<'_, S>],
    looks: &'m [Outcome],
) -> Result<Option<(&'m str, &'m CaKey)>, Error> {
    let mut pending: BTreeMap<[u8; 32], (&str, &CaKey)> = BTreeMap::new();
    for (m, l) in members.iter().zip(looks) {
        if let Some(p) = &l.pending {
            pending
                .entry(p.cert.fingerprint())
                .or_insert((m.name.as_str(), p));
        }
    }
    if pending.len() > 1 {
        let which: Vec<String> = members
            .iter()
            .zip(looks)
            .filter_map(|(m, l)| {
                Some(format!(
                    "{} holds {}",
                    m.name,
                    l.pending.as_ref()?.cert.short_fingerprint()
                ))
            })
            .collect();
        return Err(usage(format!(
            "the members hold different pending CAs ({}): a set has one CA. Finish or undo the rotation that was started in one member alone, then run certgen over the set",
            which.join(", ")
        )));
    }
    Ok(pending.into_values().next())
}

/// The set's CA among the active ones: the CA most members hold (certgen holding its key),
/// then the newest, then the first in the order of the command line; with the first member
/// holding it. Members with another CA move to it through a trust step (a member restored
/// from an older backup moves forward, and the fewest members change). `None`: no member
/// holds a CA certgen can sign with.
fn most_held<'m, S>(
    members: &'m [MemberRun<'_, S>],
    looks: &'m [Outcome],
) -> Option<(&'m str, &'m CaKey)> {
    let fp = |k: &CaKey| k.cert.fingerprint();
    let mut count: BTreeMap<[u8; 32], usize> = BTreeMap::new();
    for l in looks {
        if let Some(s) = &l.signer {
            *count.entry(fp(s)).or_default() += 1;
        }
    }
    members
        .iter()
        .zip(looks)
        .filter_map(|(m, l)| Some((m.name.as_str(), l.signer.as_ref()?)))
        .enumerate()
        .max_by_key(|(i, (_, s))| (count[&fp(s)], s.cert.not_before, std::cmp::Reverse(*i)))
        .map(|(_, a)| a)
}

/// Members that enter the set's CA `active` (held by `from`) in this run: those with nothing
/// stored, and those holding another CA (which move to it through a trust step). `None` when
/// every member already holds it. A rotation (asked, or due) then waits for the next run.
fn entering<S>(
    members: &[MemberRun<'_, S>],
    looks: &[Outcome],
    (from, active): (&str, &CaKey),
    overwrite: bool,
) -> Option<Shared> {
    let fresh: Vec<bool> = looks.iter().map(|l| l.observed.nothing_stored()).collect();
    let joining: Vec<&str> = members
        .iter()
        .zip(looks)
        .zip(&fresh)
        .filter(|((_, l), fresh)| !**fresh && !holds(l, active))
        .map(|((m, _), _)| m.name.as_str())
        .collect();
    if joining.is_empty() && !fresh.iter().any(|f| *f) {
        return None;
    }
    let entering: Vec<&str> = members
        .iter()
        .zip(&fresh)
        .filter(|(_, f)| **f)
        .map(|(m, _)| m.name.as_str())
        .chain(joining.iter().copied())
        .collect();
    let later = if overwrite || looks.iter().any(|l| l.new_ca) {
        "; the set's rotation waits for the next run, once every member trusts one CA"
    } else {
        ""
    };
    Some(Shared {
        ca: Some(active.clone()),
        overwrite: looks
            .iter()
            .zip(&fresh)
            .map(|(l, f)| (!f && !holds(l, active)).then_some(OverwriteWhy::JoinsSet))
            .collect(),
        note: Some(format!(
            "{} {} the set's CA {} (from {from}){later}",
            entering.join(", "),
            if entering.len() == 1 {
                "enters"
            } else {
                "enter"
            },
            active.cert.short_fingerprint()
        )),
    })
}

/// Decides the set's CA from what each member holds (`looks`, in the members' order).
fn shared_ca<S: SecretStore>(
    members: &[MemberRun<'_, S>],
    looks: &[Outcome],
    overwrite: bool,
) -> Result<Shared, Error> {
    // A pending CA anywhere is the set's rotation under way: every member gets it.
    if let Some((from, ca)) = pending_ca(members, looks)? {
        let overwrite = looks
            .iter()
            .map(|l| (!holds(l, ca)).then_some(OverwriteWhy::JoinsSet))
            .collect();
        return Ok(Shared {
            ca: Some(ca.clone()),
            overwrite,
            note: Some(format!(
                "the set's rotation to CA {} (pending in {from}) is under way: this run finishes it",
                ca.cert.short_fingerprint()
            )),
        });
    }
    let Some((from, active)) = most_held(members, looks) else {
        // No member holds a CA certgen can sign with: one new CA for all.
        return Ok(Shared {
            ca: Some(new_ca(members)?),
            overwrite: vec![overwrite.then_some(OverwriteWhy::Asked); members.len()],
            note: None,
        });
    };
    if let Some(shared) = entering(members, looks, (from, active), overwrite) {
        return Ok(shared);
    }
    // A member in the leaves step of the set's last rotation (a look finds a rotation under
    // way): this run finishes it, and begins no other (one rotation per due).
    if looks.iter().any(|l| l.ca_written) {
        return Ok(Shared {
            ca: None,
            overwrite: vec![None; members.len()],
            note: Some(format!(
                "the set's rotation to CA {} is under way: this run finishes it",
                active.cert.short_fingerprint()
            )),
        });
    }
    // One CA everywhere: a rotation (asked, or due in any member) is one for all.
    if overwrite || looks.iter().any(|l| l.new_ca) {
        let why = if overwrite {
            OverwriteWhy::Asked
        } else {
            OverwriteWhy::SetRotation
        };
        return Ok(Shared {
            ca: Some(new_ca(members)?),
            overwrite: vec![Some(why); members.len()],
            note: None,
        });
    }
    Ok(Shared {
        ca: None,
        overwrite: vec![None; members.len()],
        note: None,
    })
}

/// A new CA for the whole set, valid from the earliest of the members' clocks and this
/// machine's: no member sees it as not valid yet.
fn new_ca<S: SecretStore>(members: &[MemberRun<'_, S>]) -> Result<CaKey, Error> {
    let config = members[0].inv.config;
    let at: OffsetDateTime = members
        .iter()
        .flat_map(|m| [m.store.now(), m.store.writer_now()])
        .min()
        .expect("a set has members");
    let key = crate::pki::generate_keys(&[config.ca.spec.key_algorithm])?
        .pop()
        .expect("one key");
    Ok(crate::pki::issue_ca_with_key(&config.ca.spec, key, at)?.0)
}

fn usage(message: String) -> Error {
    Error::Config(crate::config::ConfigError {
        source_name: "the set of clusters".into(),
        message,
    })
}

/// The lock in every member, in the order of their UIDs, so that two runs over (parts of)
/// one set never hold a lock each that the other waits for. A member whose lock is refused or
/// not answered by `deadline` stops the run, and the locks taken are released.
async fn lock_all<S>(
    members: &[MemberRun<'_, S>],
    deadline: tokio::time::Instant,
) -> Result<Vec<Option<lock::Held>>, Error> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|a, b| members[*a].uid.cmp(&members[*b].uid));
    let mut locks: Vec<Option<lock::Held>> = (0..members.len()).map(|_| None).collect();
    for i in order {
        let m = &members[i];
        let taken = tokio::time::timeout_at(deadline, super::driver::take_lock(&m.inv)).await;
        let held = match taken {
            Ok(Ok(held)) => held,
            Ok(Err(e)) => {
                release_all(locks).await;
                return Err(named(&m.name, e));
            }
            Err(_) => {
                release_all(locks).await;
                return Err(named(
                    &m.name,
                    Error::Timeout("its run lock was not answered within --timeout; nothing was written in any member".into()),
                ));
            }
        };
        locks[i] = Some(held);
    }
    Ok(locks)
}

/// How a member's run in the set's ended: its report and the failure it ended with (or the
/// error that ended it before a report), and whether it only waited at the barrier.
type Ended = (Result<(Report, Option<Error>), Error>, bool);

/// One member's run in the set's: its steps under its lock, ended by `deadline` (and
/// [`GRACE`]); a failure of its own is told to the barrier, so the others stop there. Also
/// whether it only waited at the barrier for another member.
async fn member_at_barrier<S: SecretStore>(
    m: &MemberRun<'_, S>,
    held: lock::Held,
    member: Member<'_>,
    deadline: tokio::time::Instant,
) -> Ended {
    let barrier = member.barrier;
    let run = member_run(m.store, &m.inv, held, &member);
    let result = match tokio::time::timeout_at(deadline + GRACE, run).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout(format!(
            "it did not answer within --timeout; re-run certgen over the set once {} answers",
            m.name
        ))),
    };
    let waited = barrier.waited(&m.name);
    match &result {
        Ok((_, None)) => {}
        Ok((_, Some(_))) | Err(_) if waited => {}
        Ok((_, Some(e))) | Err(e) => {
            let why = e.to_string();
            barrier.set(&m.name, At::Failed(why));
        }
    }
    (result, waited)
}

/// Each member's report from its run's result (a run that ended in an error gets an empty
/// report).
fn member_reports<S: SecretStore>(
    members: &[MemberRun<'_, S>],
    results: Vec<Ended>,
) -> Vec<MemberReport> {
    let mut reports = Vec::new();
    for (m, (r, waited)) in members.iter().zip(results) {
        let (report, failure) = match r {
            Ok((report, failure)) => (report, failure),
            Err(e) => (
                Report::new(
                    &m.inv.config.profile,
                    m.store.describe(),
                    false,
                    0,
                    Vec::new(),
                ),
                Some(e),
            ),
        };
        reports.push(MemberReport {
            name: m.name.clone(),
            uid: m.uid.clone(),
            report,
            failure,
            waited,
        });
    }
    reports
}

/// Members created in this run get the record too, after their steps (not a member that
/// failed: it may not answer at all). A member that refuses it or does not answer is warned
/// about: its next run records it.
async fn record_created<S: SecretStore>(
    members: &[MemberRun<'_, S>],
    reports: &[MemberReport],
    record: &Record,
) {
    for (m, r) in members.iter().zip(reports) {
        if r.failure.is_some() && !r.waited {
            continue;
        }
        let record = async {
            let observed = crate::observe::observe(m.store, m.inv.config).await?;
            write_record(m, &observed, record).await
        };
        match tokio::time::timeout(GRACE, record).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("member {}: recording the set: {e}", m.name),
            Err(_) => tracing::warn!("member {}: recording the set: no answer", m.name),
        }
    }
}

/// Runs certgen's main job over a set of clusters. `record`: the membership this run writes
/// (made by [`crate::set::membership`] from what the members record).
pub async fn run<S: SecretStore + Sync>(
    mut members: Vec<MemberRun<'_, S>>,
    record: Record,
) -> Result<SetOutcome, Error> {
    let deadline = earliest_deadline(&members);
    let (read, shared) = decide(&members, deadline).await?;
    shared.apply(&mut members);
    let locks = lock_all(&members, deadline).await?;

    // The record first, in every member whose CA Secret exists: from here on its own runs
    // know the CA is shared.
    for (m, l) in members.iter().zip(&read) {
        if let Err(e) = write_record(m, &l.observed, &record).await {
            release_all(locks).await;
            return Err(named(&m.name, e));
        }
    }

    let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    let barrier = SetBarrier::new(&names, deadline);
    let others: Others = Mutex::new(
        members
            .iter()
            .zip(&read)
            .map(|(m, l)| (m.name.clone(), stored_held(l)))
            .collect(),
    );
    let runs = members.iter().zip(locks).map(|(m, held)| {
        let member = Member {
            name: &m.name,
            barrier: &barrier,
            ca: shared.ca.as_ref(),
            others: &others,
            ticket: Mutex::new(None),
            alone: Mutex::default(),
        };
        let span = tracing::info_span!("member", context = %m.name);
        tracing::Instrument::instrument(
            async move {
                let held = held.expect("every member's lock was taken");
                member_at_barrier(m, held, member, deadline).await
            },
            span,
        )
    });
    let results = futures::future::join_all(runs).await;
    let reports = member_reports(&members, results);
    record_created(&members, &reports, &record).await;
    Ok(SetOutcome {
        members: reports,
        record: Some(record),
        note: shared.note,
    })
}

/// Every member read first, side by side (a member that does not answer in time stops the run
/// before anything is written anywhere), and the set's CA decided from what they hold.
async fn decide<S: SecretStore + Sync>(
    members: &[MemberRun<'_, S>],
    deadline: tokio::time::Instant,
) -> Result<(Vec<Outcome>, Shared), Error> {
    let looks = futures::future::join_all(members.iter().map(|m| {
        let options = held_look(&m.inv.options);
        let read = look(m.store, m.inv.config, options, plan::Known::default());
        async move {
            match tokio::time::timeout_at(deadline, read).await {
                Ok(r) => r,
                Err(_) => Err(Error::Timeout(format!(
                    "it did not answer within --timeout; nothing was written in any member: re-run certgen over the set once {} answers",
                    m.name
                ))),
            }
        }
    }))
    .await;
    let mut read = Vec::new();
    for (m, l) in members.iter().zip(looks) {
        read.push(l.map_err(|e| named(&m.name, e))?);
    }
    let shared = shared_ca(members, &read, members[0].inv.options.overwrite)?;
    Ok((read, shared))
}

/// Whether a held step of a rotation is a cleanup before a new rotation's trust step.
fn before_trust(phase: &Phase) -> bool {
    matches!(phase, Phase::Cleanup { last: false })
}

pub use super::step::held_name;

/// The step the barrier opens at once for members whose first steps are `looks` (as
/// [`SetBarrier`] decides, when no member has anything to write or wait for first).
fn opens_at_once(looks: &[Outcome]) -> Option<(Barrier, bool)> {
    let at_rest = |l: &Outcome| {
        l.written.is_empty()
            && (l.held.is_some()
                || matches!(l.phase, Phase::Steady | Phase::Cleanup { last: true }))
    };
    if !looks.iter().all(at_rest) {
        return None;
    }
    let held: Vec<(Barrier, bool)> = looks
        .iter()
        .filter_map(|l| Some((l.held?, before_trust(&l.phase))))
        .collect();
    if held.iter().any(|(_, t)| *t) {
        Some((Barrier::Cleanup, true))
    } else if held.iter().any(|(b, _)| *b == Barrier::Leaves) {
        Some((Barrier::Leaves, false))
    } else if held.is_empty() {
        None
    } else {
        Some((Barrier::Cleanup, false))
    }
}

/// The options of a member's first look: its own run's, with every rotation step held back
/// as at the set's run's start.
fn held_look(o: &crate::config::RunOptions) -> plan::Options {
    plan::Options {
        overwrite: o.overwrite,
        force: o.force,
        strategy: o.strategy,
        propagation_delay: o.propagation_delay,
        hold: Some(Hold::ALL),
        ..plan::Options::default()
    }
}

/// The dry run's note: what the set's run decides about the CA, and the members where the run
/// would record the set first (where the record differs, or, for a member the run creates,
/// after its steps).
fn dry_run_note<S: SecretStore>(
    members: &[MemberRun<'_, S>],
    read: &[Outcome],
    record: &Record,
    decided: Option<String>,
) -> Result<Option<String>, Error> {
    let mut recording = Vec::new();
    for (m, l) in members.iter().zip(read) {
        let write = record_write(m.inv.config, &l.observed, record, &|n| m.store.object(n))
            .map_err(|e| named(&m.name, e))?;
        let created = l.observed.ca.as_ref().and_then(|o| o.present()).is_none();
        if write.is_some() || created {
            recording.push(m.name.clone());
        }
    }
    let recorded = (!recording.is_empty()).then(|| {
        format!(
            "the run would record the set (annotation {} on the CA Secret) in {}",
            crate::set::SET_ANNOTATION,
            recording.join(", ")
        )
    });
    Ok(match (decided, recorded) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    })
}

/// Where each member's first step would be, with the set's decision applied: the first look
/// again for a member whose `--overwrite` the decision changed (from `asked`), by `deadline`.
async fn looks_as_decided<S: SecretStore + Sync>(
    members: &[MemberRun<'_, S>],
    read: Vec<Outcome>,
    asked: bool,
    deadline: tokio::time::Instant,
) -> Result<Vec<Outcome>, Error> {
    let mut looks = Vec::new();
    for (m, l) in members.iter().zip(read) {
        if m.inv.options.overwrite == asked {
            looks.push(l);
            continue;
        }
        let options = held_look(&m.inv.options);
        let again = look(m.store, m.inv.config, options, plan::Known::default());
        let l = match tokio::time::timeout_at(deadline, again).await {
            Ok(r) => r.map_err(|e| named(&m.name, e))?,
            Err(_) => {
                return Err(named(
                    &m.name,
                    Error::Timeout("it did not answer within --timeout".into()),
                ));
            }
        };
        looks.push(l);
    }
    Ok(looks)
}

/// One member's dry run, ended by `deadline`: its report, or an empty one with the error.
async fn member_dry_run<S: SecretStore>(
    m: MemberRun<'_, S>,
    deadline: tokio::time::Instant,
) -> MemberReport {
    let span = tracing::info_span!("member", context = %m.name);
    let name = m.name.clone();
    let uid = m.uid.clone();
    let describe = m.store.describe();
    let profile = m.inv.config.profile.clone();
    let run = tracing::Instrument::instrument(super::driver::run(m.store, m.inv), span);
    let (report, failure) = match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok((report, failure))) => (report, failure),
        Ok(Err(e)) => (
            Report::new(&profile, describe, true, 0, Vec::new()),
            Some(e),
        ),
        Err(_) => (
            Report::new(&profile, describe, true, 0, Vec::new()),
            Some(Error::Timeout(format!(
                "it did not answer within --timeout; re-run the dry run once {name} answers"
            ))),
        ),
    };
    MemberReport {
        name,
        uid,
        report,
        failure,
        waited: false,
    }
}

/// `--dry-run` over a set: each member's dry run as the set's run would take its first step
/// there (the set's decision about the CA made from the same reads, every rotation step held
/// back as at the run's start), side by side; nothing is written and no lock is taken.
pub async fn dry_run<S: SecretStore + Sync>(
    mut members: Vec<MemberRun<'_, S>>,
    record: Record,
) -> Result<SetOutcome, Error> {
    let deadline = earliest_deadline(&members);
    let (read, shared) = decide(&members, deadline).await?;
    let note = dry_run_note(&members, &read, &record, shared.note.clone())?;
    let asked = members[0].inv.options.overwrite;
    shared.apply(&mut members);
    // Where each member's first step would be, with the set's decision: when every member is
    // at rest (its next step held, or nothing to do) the barrier opens at once, and the run's
    // first writes are the step it opens, which the dry run then shows.
    let looks = looks_as_decided(&members, read, asked, deadline).await?;
    let opens = opens_at_once(&looks);
    for (m, l) in members.iter_mut().zip(&looks) {
        let opened = l
            .held
            .filter(|b| Some((*b, before_trust(&l.phase))) == opens);
        m.inv.options.dry_run = true;
        m.inv.options.set_member = Some(crate::config::SetHold {
            leaves: opened != Some(Barrier::Leaves),
            cleanup: opened != Some(Barrier::Cleanup),
        });
    }
    let runs = members
        .into_iter()
        .map(|m| async move { member_dry_run(m, deadline).await });
    let members = futures::future::join_all(runs).await;
    Ok(SetOutcome {
        members,
        record: Some(record),
        note,
    })
}

/// How long past `--timeout` a member's run may take to end on its own (its waits end at the
/// deadline; a request in flight gets this long).
const GRACE: std::time::Duration = std::time::Duration::from_secs(10);

async fn release_all(locks: Vec<Option<lock::Held>>) {
    for l in locks.into_iter().flatten() {
        l.release().await;
    }
}

/// One member's steps, under its lock (taken by [`run`]).
async fn member_run<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    held: lock::Held,
    member: &Member<'_>,
) -> Result<(Report, Option<Error>), Error> {
    let held = Mutex::new(held);
    let mut progress = super::driver::first_progress(store, inv);
    let (result, writes) = {
        let still_held = || !held.lock().unwrap_or_else(|e| e.into_inner()).lost();
        let guard = Guard::new(&still_held);
        let result = super::driver::steps(
            store,
            inv,
            &guard,
            (None, false),
            &held,
            &mut progress,
            Some(member),
        )
        .await;
        (result, guard.written())
    };
    let held = held.into_inner().unwrap_or_else(|e| e.into_inner());
    progress.note(super::progress::Learned::Lock(held.release().await));
    result
        .map(|(end, e)| {
            let end = super::end::End {
                lock: progress.lock.clone(),
                ..end
            };
            (super::end::finish(end), e)
        })
        .map_err(|e| e.after(writes))
}

/// The write that records `record` on a member's CA Secret as `observed`: the same data,
/// the annotation [`crate::set::SET_ANNOTATION`], fenced by the version read. `None` when
/// there is nothing to record there: no CA Secret yet (a member the run creates gets the
/// record after its steps), the record already there, or a CA Secret of a type certgen does
/// not write. Planned as data, so that the dry run names the members it would record exactly
/// where the run writes.
fn record_write(
    config: &crate::config::Config,
    observed: &crate::observe::Snapshot,
    record: &Record,
    object: &dyn Fn(&str) -> String,
) -> Result<Option<crate::secret::SecretWrite>, Error> {
    let Some(ca) = observed.ca.as_ref().and_then(|o| o.present()) else {
        return Ok(None);
    };
    if Record::read(config, observed, object)?.as_ref() == Some(record) {
        return Ok(None);
    }
    let type_ = match ca.type_.as_str() {
        "kubernetes.io/tls" => "kubernetes.io/tls",
        "Opaque" | "" => "Opaque",
        other => {
            tracing::warn!(
                "{}: type {other}: the set is not recorded on it",
                object(&ca.name)
            );
            return Ok(None);
        }
    };
    let private = config.private_data_keys();
    Ok(Some(crate::secret::SecretWrite {
        name: ca.name.clone(),
        type_,
        data: ca.data.clone(),
        secret_keys: ca
            .data
            .keys()
            .filter(|k| private.contains(k))
            .cloned()
            .collect(),
        remove: Vec::new(),
        labels: BTreeMap::new(),
        annotations: [(
            crate::set::SET_ANNOTATION.to_string(),
            record.to_annotation(),
        )]
        .into(),
        expect: crate::secret::Expect::Version(ca.version.clone()),
    }))
}

/// Writes [`record_write`]'s write, if any.
async fn write_record<S: SecretStore>(
    m: &MemberRun<'_, S>,
    observed: &crate::observe::Snapshot,
    record: &Record,
) -> Result<(), Error> {
    if let Some(write) = record_write(m.inv.config, observed, record, &|n| m.store.object(n))? {
        m.store.put(&write).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(at: &[(&str, At)]) -> State {
        State {
            at: at.iter().map(|(m, a)| (m.to_string(), a.clone())).collect(),
            verdicts: BTreeMap::new(),
        }
    }

    fn opened(s: &State) -> Vec<&str> {
        s.verdicts
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::Go))
            .map(|(m, _)| m.as_str())
            .collect()
    }

    #[test]
    fn nothing_opens_while_a_member_works() {
        let mut s = state(&[("a", At::Held(Barrier::Leaves, false)), ("b", At::Working)]);
        SetBarrier::decide(&mut s);
        assert!(s.verdicts.is_empty());
    }

    #[test]
    fn the_leaves_open_before_any_cleanup_and_a_cleanup_before_trust_before_the_leaves() {
        let mut s = state(&[
            ("a", At::Held(Barrier::Leaves, false)),
            ("b", At::Held(Barrier::Cleanup, false)),
            (
                "c",
                At::Done {
                    cleanup_pending: false,
                },
            ),
        ]);
        SetBarrier::decide(&mut s);
        assert_eq!(opened(&s), ["a"]);

        let mut s = state(&[
            ("a", At::Held(Barrier::Leaves, false)),
            ("b", At::Held(Barrier::Cleanup, true)),
        ]);
        SetBarrier::decide(&mut s);
        assert_eq!(
            opened(&s),
            ["b"],
            "the member that does not trust the new CA yet goes first"
        );
    }

    #[test]
    fn a_failed_member_stops_the_others_and_a_cleanup_waits_for_a_member_that_could_not_wait() {
        let mut s = state(&[
            ("a", At::Held(Barrier::Leaves, false)),
            ("b", At::Failed("no answer".into())),
        ]);
        SetBarrier::decide(&mut s);
        assert!(opened(&s).is_empty());
        assert!(matches!(s.verdicts["a"], Verdict::Stop(_, Some(_))));

        let mut s = state(&[
            ("a", At::Held(Barrier::Cleanup, false)),
            (
                "b",
                At::Done {
                    cleanup_pending: true,
                },
            ),
        ]);
        SetBarrier::decide(&mut s);
        assert!(matches!(s.verdicts["a"], Verdict::Stop(Some(_), None)));
    }

    #[test]
    fn the_record_is_a_planned_write_of_the_same_data_where_it_differs() {
        use crate::observe::fixtures::installed;
        let config = crate::config::test_profile(None);
        let at = time::macros::datetime!(2026-06-01 12:00 UTC);
        let ca = crate::pki::issue_ca(&config.ca.spec, at).unwrap();
        let mut observed = installed(&config, &ca, at);
        let record = Record {
            id: "e0c78408542f1f8e".into(),
            members: vec!["a".into(), "b".into()],
            contexts: vec!["m0".into(), "m1".into()],
            generation: 1,
        };
        let name = |n: &str| n.to_string();
        let w = record_write(&config, &observed, &record, &name)
            .unwrap()
            .expect("a CA Secret without the record gets it");
        let stored = observed.ca().present().unwrap().clone();
        assert_eq!(w.name, config.ca.secret_name);
        assert_eq!(w.data, stored.data, "the same data");
        assert_eq!(w.expect, crate::secret::Expect::Version(stored.version));
        assert_eq!(w.secret_keys, ["tls.key"], "private by the layout");
        assert_eq!(
            w.annotations[crate::set::SET_ANNOTATION],
            record.to_annotation()
        );
        // Recorded already: nothing to write.
        observed.edit(&config.ca.secret_name, |s| {
            s.annotations
                .insert(crate::set::SET_ANNOTATION.into(), record.to_annotation());
        });
        assert!(
            record_write(&config, &observed, &record, &name)
                .unwrap()
                .is_none()
        );
        // No CA Secret yet: the member gets the record after its steps.
        observed.ca = Some(crate::secret::Observed::Absent);
        assert!(
            record_write(&config, &observed, &record, &name)
                .unwrap()
                .is_none()
        );
    }
}
