//! The run's memory: what this invocation has written, learned and been refused, as one record
//! updated at one site ([`Progress::note`]). The planner sees it only through
//! [`Progress::plan_options`] (the run's flags less what has been acted on) and
//! [`Progress::known`] (what was learned): the flags themselves ([`RunOptions`]) never change
//! during a run.

use std::collections::{BTreeMap, BTreeSet};

use time::OffsetDateTime;

use crate::config::RunOptions;
use crate::lock;
use crate::plan;
use crate::report::{self, ConsumerReport, Entry, EventLine, GateReport};

/// What a run has done and learned so far.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    /// `--overwrite` has been acted on: a new CA was stored, the CA Secret changed under the
    /// run (a CA write whose answer was lost, or another run's), or a rotation was found under
    /// way (finished, never begun again). Never a second new CA.
    pub ca_written: bool,
    /// `--rotate-hmac` has been acted on: new HMAC bytes were stored.
    pub hmac_written: bool,
    /// Probes showed every hot-reloading consumer trusts the pending CA with this fingerprint.
    pub trust_confirmed: Option<[u8; 32]>,
    /// The gate for the stored state with this digest was waited out (or opened on evidence).
    pub gate_waited: Option<[u8; 32]>,
    /// The last write to a `caBundle` target, on the store's clock (earlier runs' included).
    pub other_written_at: Option<OffsetDateTime>,
    /// Until when readers the gate cannot observe may hold the old trust ([`Learned::UnobservedUntil`]).
    pub unobserved_until: Option<OffsetDateTime>,
    /// When this run, able to observe pods, first looked ([`Learned::Observing`]).
    pub observing_since: Option<OffsetDateTime>,
    /// The entries of every write (Secrets and `caBundle` targets), in order.
    pub written: Vec<Entry>,
    /// The consumers' report lines, merged over the steps.
    pub consumers: Vec<ConsumerReport>,
    /// The run's Events, in order: each step's writes, then its restarts.
    pub events: Vec<EventLine>,
    /// How each gate opened.
    pub gates: Vec<GateReport>,
    /// Store attempts over every step.
    pub attempts: u32,
    /// What became of the run lock (known once it is released).
    pub lock: lock::Outcome,
    /// What the API server refused in this run (403), by object, with the report line: left
    /// alone for the rest of the run.
    pub refused: BTreeMap<String, String>,
    /// Those of them cert-manager's CA injector writes (the `caBundle` targets): a trust gate
    /// waits until each holds the pending CA.
    pub injected: BTreeSet<String>,
    /// Those targets as last read: which CAs each holds ([`Learned::InjectedRead`]).
    pub injected_reads: Vec<plan::InjectedTarget>,
    /// A gate saw every one of them hold the pending CA with this fingerprint, loaded.
    pub injected_loaded: Option<[u8; 32]>,
    /// Why restarts are skipped for the rest of the run, once a workload request was refused
    /// (403, without `--wait`).
    pub restarts_refused: Option<String>,
    /// The renewal windows over the steps: the last step's next window, every emergency.
    pub window: Option<crate::report::WindowReport>,
}

/// One thing a run learned.
#[derive(Debug)]
pub enum Learned {
    /// A step stored a new CA (or found the CA Secret changed under it).
    CaWritten,
    /// A step stored HMAC bytes.
    HmacWritten,
    /// A step is done: whatever gate was waited out was for the state before it.
    Stepped { attempts: u32 },
    /// Something was written: these entries (only those that write are kept).
    Wrote(Vec<Entry>),
    /// A `caBundle` target was written (or found drifted) at this store time.
    OtherWritten(OffsetDateTime),
    /// Readers of a ClusterTrustBundle the gate cannot observe may hold the old trust until
    /// this store time (a projection by name, behind the kubelet's cache).
    UnobservedUntil(OffsetDateTime),
    /// The run pokes pods and watches their kubelets, and first looked at this store time:
    /// a gate for writes stored before it opens on this run's evidence
    /// ([`plan::Known::observing_since`]).
    Observing(OffsetDateTime),
    /// The consumers' lines after a step, and its Events.
    Consumers {
        reports: Vec<ConsumerReport>,
        events: Vec<EventLine>,
    },
    /// A gate opened for the stored state with this digest (`None`: opened by a probe, or not
    /// opened at all), with its Events.
    GateOpened {
        report: GateReport,
        state: Option<[u8; 32]>,
        events: Vec<EventLine>,
    },
    /// Probes confirmed the pending CA with this fingerprint.
    TrustConfirmed([u8; 32]),
    /// The run lock was released (or never taken): what became of it.
    Lock(lock::Outcome),
    /// The API server refused a request on `what` (403), or cert-manager's CA injector writes
    /// it (`injected`): the report line says what is skipped.
    Refused {
        what: String,
        note: String,
        injected: bool,
    },
    /// The `caBundle` targets cert-manager's CA injector writes, as read.
    InjectedRead(Vec<plan::InjectedTarget>),
    /// A trust gate saw every such target hold the pending CA with this fingerprint, loaded.
    InjectionsLoaded([u8; 32]),
    /// A workload request was refused (403, without `--wait`): no more restarts in this run.
    RestartsRefused(String),
    /// What the renewal windows did in a step (issue 45).
    Window(Option<crate::report::WindowReport>),
}

impl Progress {
    /// Records what the run learned: the only place its memory changes.
    pub fn note(&mut self, learned: Learned) {
        match learned {
            Learned::CaWritten => self.ca_written = true,
            Learned::HmacWritten => self.hmac_written = true,
            Learned::Stepped { attempts } => {
                self.attempts += attempts;
                self.gate_waited = None;
            }
            Learned::Wrote(entries) => self
                .written
                .extend(entries.into_iter().filter(|e| e.action.writes())),
            // The latest: a timer pushed past a kubelet's cache is never pulled back.
            Learned::UnobservedUntil(at) => {
                self.unobserved_until = Some(self.unobserved_until.map_or(at, |t| t.max(at)));
            }
            // The first look only: later looks see this run's own writes.
            Learned::Observing(at) => {
                self.observing_since.get_or_insert(at);
            }
            Learned::OtherWritten(at) => {
                self.other_written_at = Some(self.other_written_at.map_or(at, |t| t.max(at)));
            }
            Learned::Consumers { reports, events } => {
                self.events.extend(events);
                report::merge_consumers(&mut self.consumers, reports);
            }
            Learned::GateOpened {
                report,
                state,
                events,
            } => {
                self.gates.push(report);
                self.events.extend(events);
                if state.is_some() {
                    self.gate_waited = state;
                }
            }
            Learned::TrustConfirmed(fp) => self.trust_confirmed = Some(fp),
            Learned::Lock(outcome) => self.lock = outcome,
            Learned::Refused {
                what,
                note,
                injected,
            } => {
                if injected {
                    self.injected.insert(what.clone());
                }
                self.refused.entry(what).or_insert(note);
            }
            Learned::InjectedRead(reads) => self.injected_reads = reads,
            Learned::InjectionsLoaded(fp) => self.injected_loaded = Some(fp),
            Learned::RestartsRefused(note) => {
                self.restarts_refused.get_or_insert(note);
            }
            Learned::Window(w) => {
                self.window = match (self.window.take(), w) {
                    (Some(a), Some(b)) => Some(a.merge(b)),
                    (a, b) => b.or(a),
                };
            }
        }
    }

    /// The run's flags for the next step, less what has been acted on ([`plan::Options::after`]).
    pub fn plan_options(&self, run: &RunOptions) -> plan::Options {
        plan::Options::from_run(run).after(self.ca_written, self.hmac_written)
    }

    /// What the planner is told the run has learned: derived here, from this record only.
    pub fn known(&self) -> plan::Known {
        plan::Known {
            trust_confirmed: self.trust_confirmed,
            gate_waited: self.gate_waited,
            other_written_at: self.other_written_at,
            unobserved_until: self.unobserved_until,
            writer_now: None,
            observing_since: self.observing_since,
            injected: self.injected_reads.clone(),
            injected_loaded: self.injected_loaded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_acted_on_are_not_acted_on_again() {
        let run = RunOptions {
            overwrite: true,
            rotate_hmac: true,
            ..RunOptions::default()
        };
        let mut p = Progress::default();
        assert!(p.plan_options(&run).overwrite && p.plan_options(&run).rotate_hmac);
        p.note(Learned::CaWritten);
        p.note(Learned::HmacWritten);
        let o = p.plan_options(&run);
        assert!(!o.overwrite && !o.rotate_hmac);
    }

    #[test]
    fn a_waited_gate_holds_until_the_next_step() {
        let mut p = Progress::default();
        let report = GateReport {
            gate: "trust → leaves".into(),
            opened_by: "timer".into(),
            seconds: 1.0,
            timer_at: None,
            pokes: None,
            pods: vec![],
        };
        p.note(Learned::GateOpened {
            report,
            state: Some([1; 32]),
            events: vec![],
        });
        assert_eq!(p.known().gate_waited, Some([1; 32]));
        p.note(Learned::Stepped { attempts: 2 });
        assert_eq!(p.known().gate_waited, None);
        assert_eq!(p.attempts, 2);
        assert_eq!(p.gates.len(), 1);
    }
}
