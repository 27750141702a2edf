//! Waiting at a gate: on evidence first (every pod that mounts what changed was poked and had
//! time to load it, was shown by a probe of its own endpoint to hold it, was created since, or
//! is gone: `evidence.rs`), then, where pods cannot be observed, on the consumers' Service
//! probes, then on the timer, within the run's deadline. A cleanup gate that only the timer can
//! open and that lies far away is left to the next run in a cluster (docs/rotation.md).

use tokio::time::Instant;

use super::consumers;
use super::gate::{self, CLEANUP_WAIT, Evidence, Waited};
use super::invocation::Invocation;
use super::progress::{Learned, Progress};
use super::step::Outcome;
use crate::error::Error;
use crate::plan::Phase;
use crate::report::{GatePod, GateReport};
use crate::store::SecretStore;

/// How a gate ended.
pub(super) enum GateEnd {
    /// It is open: plan the next step.
    Open,
    /// The run ends here: a cleanup left to the next run (`note`), or the deadline (`error`).
    Stop {
        note: Option<String>,
        error: Option<Error>,
    },
}

/// How long until `ready_at` on the store's clock, as a duration (zero when past).
fn until_ready<S: SecretStore>(store: &S, ready_at: time::OffsetDateTime) -> std::time::Duration {
    let left = (ready_at - store.now()).max(time::Duration::ZERO);
    std::time::Duration::try_from(left).unwrap_or(std::time::Duration::MAX)
}

/// Which gate a gate phase is, for people: the one before the leaves (`pending` CA staged),
/// the one before a cleanup only (`optional`), or another.
fn gate_name(pending: bool, optional: bool) -> &'static str {
    match (pending, optional) {
        (true, _) => "trust → leaves",
        (false, true) => "leaves → cleanup",
        (false, false) => "before the next step",
    }
}

/// What the probes of the hot-reloading consumers can prove at this gate: at the trust gate
/// that each accepts a client certificate from the pending CA, at the others that each serves
/// the leaf as stored. `false` when not every hot consumer can be probed, or by `until`.
async fn probed(inv: &Invocation<'_>, outcome: &Outcome, until: Instant) -> bool {
    if !consumers::all_hot_probed(inv.config) {
        return false;
    }
    match &outcome.phase {
        Phase::Gate {
            pending: Some(_), ..
        } => {
            let (Some(pending), signer) = (&outcome.pending, outcome.signer.as_ref()) else {
                return false;
            };
            consumers::trust_confirmed(
                inv.config,
                inv.endpoints,
                pending,
                signer.map(|s| &s.cert),
                until,
            )
            .await
        }
        _ => consumers::leaves_confirmed(inv.config, inv.endpoints, outcome, until).await,
    }
}

/// Waits at the gate `outcome` ends in, as long as it takes and the deadline allows.
pub(super) async fn at_gate<S: SecretStore>(
    store: &S,
    inv: &Invocation<'_>,
    outcome: &Outcome,
    push: Option<&gate::Push<'_>>,
    evidence: &mut Evidence,
    progress: &mut Progress,
) -> Result<GateEnd, Error> {
    let Phase::Gate {
        ready_at,
        reason,
        pending,
        state,
        optional,
    } = &outcome.phase
    else {
        return Ok(GateEnd::Open);
    };
    let at = Reached {
        name: gate_name(pending.is_some(), *optional),
        started: Instant::now(),
        ca: &inv.config.ca.secret_name,
        reason,
        ready_at: *ready_at,
        state: *state,
        pending: *pending,
        optional: *optional,
        // A cleanup nobody waits for (in a cluster, without --wait) is left to the next run
        // when what is left is far away or a kubelet not live: nothing breaks meanwhile.
        impatient: *optional && inv.endpoints.is_some() && !inv.options.wait,
    };
    // At the trust gate, the caBundle targets cert-manager's CA injector writes must hold the
    // pending CA, as the API server loaded it, before any leaf it signs is served.
    evidence.forget_injections();
    let injector = injector(inv, *pending, progress);
    let probe_until = Instant::now()
        .checked_add(until_ready(store, *ready_at))
        .map_or(inv.deadline, |t| t.min(inv.deadline));
    // Evidence first: every pod that mounts what changed shown to hold it (evidence.rs), by
    // its kubelet or by a probe of that pod's own endpoint (probes.rs). A Service probe shows
    // what the pods that answered hold, not what every other pod that mounts the Secrets
    // holds (a peer that is no declared consumer: one failed handshake in 452 on the real
    // node, bench/rotation-speed), so it is asked only where pods cannot be observed
    // (`Waited::Unobservable`), below.
    if let Some(push) = push {
        tracing::info!(
            phase = "gate",
            "{} gate: the pods that mount what changed were poked; waiting for their kubelets",
            at.name
        );
        let other = progress.other_written_at;
        let store_now = || store.now();
        let waited = push
            .wait(
                evidence,
                outcome,
                other,
                &store_now,
                (inv.deadline, at.impatient),
                injector.as_ref(),
            )
            .await?;
        match waited {
            Waited::Open(pods) => {
                loaded(injector.as_ref(), progress);
                return Ok(at.opened(pods, evidence, progress));
            }
            Waited::Stopped {
                held,
                waiting,
                timer,
            } => return Ok(at.stopped(&held, &waiting, timer, evidence, progress)),
            Waited::Unobservable => {}
        }
    }
    // The pods cannot be observed: the injected targets are looked at alone, then probes can
    // still open the gate early, else the timer.
    if let Some(injector) = &injector {
        let store_now = || store.now();
        if let Err(waiting) = injector.wait(evidence, &store_now, inv.deadline).await {
            return Ok(at.stopped(&[], &waiting, None, evidence, progress));
        }
        loaded(Some(injector), progress);
    }
    Ok(at
        .probe_or_timer(store, inv, outcome, probe_until, evidence, progress)
        .await)
}

/// Notes that every injected target holds the pending CA, loaded (the gate's look saw it):
/// the next plan need not wait for its last read to show it.
fn loaded(injector: Option<&gate::Injector<'_>>, progress: &mut Progress) {
    if let Some(i) = injector {
        progress.note(Learned::InjectionsLoaded(i.ca));
    }
}

/// The trust gate's look at the `caBundle` targets cert-manager's CA injector writes (as this
/// run's reads found them): `None` at any other gate, or with none.
fn injector<'a>(
    inv: &Invocation<'a>,
    pending: Option<[u8; 32]>,
    progress: &Progress,
) -> Option<gate::Injector<'a>> {
    let (api, ca) = (inv.webhooks?, pending?);
    let targets: Vec<_> = inv
        .config
        .webhooks
        .iter()
        .filter(|w| {
            progress
                .injected
                .contains(&crate::outside::describe_target(w.kind, &w.name))
        })
        .map(|w| (w.kind, w.name.clone()))
        .collect();
    (!targets.is_empty()).then_some(gate::Injector { api, targets, ca })
}

/// A gate this run reached: what its report and its end need.
struct Reached<'a> {
    name: &'static str,
    started: Instant,
    /// The CA Secret, which the gate's Events are about.
    ca: &'a str,
    /// Why the gate is there (the plan's words).
    reason: &'a str,
    ready_at: time::OffsetDateTime,
    state: [u8; 32],
    /// The pending CA whose trust the gate waits for (the trust -> leaves gate).
    pending: Option<[u8; 32]>,
    /// A gate the run may leave to the next one (the leaves -> cleanup gate).
    optional: bool,
    /// A cleanup nobody waits for: left to the next run rather than waited out.
    impatient: bool,
}

impl Reached<'_> {
    /// Where the pods cannot be observed: every hot-reloading consumer's probe can open the
    /// gate early (until `until`), else its timer, waited out when it fits before the deadline.
    async fn probe_or_timer<S: SecretStore>(
        &self,
        store: &S,
        inv: &Invocation<'_>,
        outcome: &Outcome,
        until: Instant,
        evidence: &Evidence,
        progress: &mut Progress,
    ) -> GateEnd {
        if probed(inv, outcome, until).await {
            tracing::info!(
                phase = "gate",
                "{} gate: every hot-reloading consumer's probe shows it holds what was written",
                self.name
            );
            progress.note(Learned::GateOpened {
                report: self.report("probe", None, evidence.injection_lines()),
                state: if self.pending.is_some() {
                    None
                } else {
                    Some(self.state)
                },
                events: vec![],
            });
            if let Some(fp) = self.pending {
                progress.note(Learned::TrustConfirmed(fp));
            }
            return GateEnd::Open;
        }
        let left = until_ready(store, self.ready_at);
        let fits = Instant::now()
            .checked_add(left)
            .is_some_and(|t| t <= inv.deadline);
        let leave = self.impatient && left > CLEANUP_WAIT;
        if !fits || leave {
            return stop(self.reason, self.ready_at, self.optional, fits);
        }
        gate::wait_timer(left, self.reason).await;
        // The wait was timed on this process's monotonic clock: for the state it was computed for,
        // the gate is open even if the store's clock disagrees.
        let mut r = self.report(
            "timer",
            Some(crate::timefmt::at_second(self.ready_at)),
            evidence.injection_lines(),
        );
        r.pokes = evidence.pokes_at_gate();
        progress.note(Learned::GateOpened {
            report: r,
            state: Some(self.state),
            events: vec![],
        });
        GateEnd::Open
    }

    fn report(&self, by: &str, timer_at: Option<String>, pods: Vec<GatePod>) -> GateReport {
        GateReport {
            gate: self.name.to_string(),
            opened_by: by.to_string(),
            seconds: (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            timer_at,
            pokes: None,
            pods,
        }
    }

    /// Every pod that mounts what changed holds it: the gate opens.
    fn opened(&self, pods: Vec<GatePod>, evidence: &Evidence, progress: &mut Progress) -> GateEnd {
        tracing::info!(
            phase = "gate",
            "{} gate: every pod that mounts what changed holds it ({})",
            self.name,
            summary(&pods)
        );
        // A pod that only its timer covered makes the gate the timer's; one that probes of
        // the pods themselves opened for every pod (gone ones aside), the probes'.
        let by = if pods.iter().any(|p| p.opened_by == "timer") {
            "timer"
        } else if pods.iter().any(|p| p.opened_by == "probe")
            && pods
                .iter()
                .all(|p| p.opened_by == "probe" || p.opened_by == "gone")
        {
            "probe"
        } else {
            "evidence"
        };
        let mut r = self.report(by, None, pods);
        r.pokes = evidence.pokes_at_gate();
        let events = crate::events::of_gate(self.ca, &r, evidence.held());
        progress.note(Learned::GateOpened {
            report: r,
            state: Some(self.state),
            events,
        });
        GateEnd::Open
    }

    /// The evidence did not come before the deadline (or, for an impatient cleanup, is far
    /// away or held by a kubelet not live): the run stops here, `held` and `waiting` named.
    fn stopped(
        &self,
        held: &[String],
        waiting: &[String],
        timer: Option<time::OffsetDateTime>,
        evidence: &Evidence,
        progress: &mut Progress,
    ) -> GateEnd {
        let kubelets = evidence.held();
        let mut pods: Vec<GatePod> = held
            .iter()
            .chain(waiting)
            .map(|w| {
                let (pod, why) = w.split_once(" (").unwrap_or((w.as_str(), ""));
                GatePod {
                    name: pod.to_string(),
                    node: kubelets.get(pod).map(|(n, _)| n.clone()),
                    opened_by: if held.contains(w) { "held" } else { "waiting" }.into(),
                    detail: Some(why.trim_end_matches(')').to_string()),
                }
            })
            .collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        let mut r = self.report("held", None, pods);
        r.pokes = evidence.pokes_at_gate();
        let events = crate::events::of_gate(self.ca, &r, kubelets);
        progress.note(Learned::GateOpened {
            report: r,
            state: None,
            events,
        });
        let after = timer.unwrap_or(self.ready_at);
        let reason = self.reason;
        if self.impatient {
            let why = if held.is_empty() {
                "certgen does not wait that long without --wait"
            } else {
                "a kubelet is not seen live, and certgen does not wait for it without --wait"
            };
            let note = format!(
                "{reason}; {why}, so a later run finishes it (the chart's CronJob does){}",
                if held.is_empty() {
                    format!(", after {}", crate::timefmt::at_second(after))
                } else {
                    format!(": {}", held.join(", "))
                }
            );
            tracing::info!(phase = "gate", "{note}");
            return GateEnd::Stop {
                note: Some(note),
                error: None,
            };
        }
        let why = if held.is_empty() {
            format!("still waiting for {}", waiting.join(", "))
        } else {
            format!(
                "held by pods whose kubelet is not seen live: {}",
                held.join(", ")
            )
        };
        GateEnd::Stop {
            note: None,
            error: Some(Error::Timeout(format!(
                "the {} gate did not open before --timeout: {why}. Every bundle trusts every leaf that consumers may hold, so nothing breaks meanwhile: re-run certgen to finish",
                self.name
            ))),
        }
    }
}

/// "3 poke plus live kubelet, 1 created after the write": how many pods each kind of evidence
/// covered.
fn summary(pods: &[GatePod]) -> String {
    let mut by: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for p in pods {
        *by.entry(p.opened_by.as_str()).or_default() += 1;
    }
    if by.is_empty() {
        return "no pod mounts what changed".into();
    }
    by.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The end of a run at a gate it will not wait for: an `optional` cleanup is left to the next
/// run (every consumer works as things are); anything else is past `--timeout`.
fn stop(reason: &str, ready_at: time::OffsetDateTime, optional: bool, fits: bool) -> GateEnd {
    let after = crate::timefmt::at_second(ready_at);
    if optional {
        let why = if fits {
            "certgen does not wait that long without --wait (no pod could be poked to prove it sooner)"
        } else {
            "that is past --timeout"
        };
        let note = format!(
            "{reason}; {why}, so a run after {after} finishes it (the chart's CronJob does)"
        );
        tracing::info!(phase = "gate", "{note}");
        return GateEnd::Stop {
            note: Some(note),
            error: None,
        };
    }
    GateEnd::Stop {
        note: None,
        error: Some(Error::Timeout(format!(
            "{reason}; that is past --timeout. Every bundle trusts every leaf that consumers may hold, so nothing breaks meanwhile: re-run certgen after {after} to finish"
        ))),
    }
}
