//! How a run ended, as plain values ([`End`]), and the one place the driver writes a report's
//! fields from it ([`finish`]). Every ending of a run builds an `End`: a dry run, nothing to
//! write, a missed restart that failed, the steps done or stopped at a gate or a set's barrier.

use super::gate::Evidence;
use super::progress::Progress;
use super::step::Outcome;
use crate::lock;
use crate::report::{
    ConsumerReport, Entry, EventLine, GateReport, LockReport, PodReport, Pokes, Report,
    WindowReport, WriterRow,
};

/// How a run ended, as plain values: what its report is made of. Every ending of a run (a dry
/// run, nothing to write, a missed restart that failed, the steps done or stopped at a gate or a
/// set's barrier) builds one, and [`finish`] writes the report from it, as [`Progress::note`]
/// is the one author of the run's memory: a new report field is set there only.
pub(super) struct End {
    /// The plan's report of the look, or of the last step.
    pub(super) last: Report,
    /// When steps were taken, what the run's record says of them: the report is then the
    /// steps' ([`Report::after_steps`]), not the last plan's.
    pub(super) steps: Option<Stepped>,
    /// A dry run's report (the look's flag kept); every other run's is not.
    pub(super) dry_run: bool,
    /// The consumers' report lines.
    pub(super) consumers: Vec<ConsumerReport>,
    /// The run's Events, in order.
    pub(super) events: Vec<EventLine>,
    /// `caBundle` target writes a dry run plans, after its Secrets'.
    pub(super) planned: Vec<Entry>,
    /// The report lines of what the API server refused (403), before the refused restarts'.
    pub(super) refused: Vec<String>,
    /// Why restarts were skipped, said for each consumer it left alone.
    pub(super) restarts_refused: Option<String>,
    /// The pods' report lines, the run's pokes, and why pokes were refused.
    pub(super) pods: Vec<PodReport>,
    pub(super) pokes: Option<Pokes>,
    pub(super) pods_refused: Option<String>,
    /// Why the run stopped short (a gate, a set's barrier), and the set's barrier it holds at.
    pub(super) note: Option<String>,
    pub(super) held: Option<String>,
    /// A warning for the report (a dry run's missing namespace).
    pub(super) warning: Option<String>,
    /// The other writers the run found before it wrote (the look's, and the `caBundle`
    /// targets' when it read them), and whether they replace the last plan's list or only fill
    /// it when the plan found none (as after the steps and a missed restart).
    pub(super) writers: Option<(Vec<WriterRow>, Found)>,
    /// What became of the run lock.
    pub(super) lock: lock::Outcome,
}

/// How [`End::writers`] enter the report.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// In place of the last plan's (nothing to write: the look's plus the targets').
    Replace,
    /// Only where the last plan found none.
    Fill,
}

/// What the run's record says of its steps, for [`End::steps`].
pub(super) struct Stepped {
    pub(super) written: Vec<Entry>,
    pub(super) attempts: u32,
    pub(super) window: Option<WindowReport>,
    pub(super) gates: Vec<GateReport>,
}

impl End {
    /// An ending with nothing but `last`, the look's report.
    pub(super) fn of(last: Report) -> Self {
        Self {
            last,
            steps: None,
            dry_run: false,
            consumers: Vec::new(),
            events: Vec::new(),
            planned: Vec::new(),
            refused: Vec::new(),
            restarts_refused: None,
            pods: Vec::new(),
            pokes: None,
            pods_refused: None,
            note: None,
            held: None,
            warning: None,
            writers: None,
            lock: lock::Outcome::default(),
        }
    }

    /// The ending after the steps so far, the last being `outcome`: what `progress` recorded
    /// and what `evidence` saw of the pods.
    pub(super) fn stepped(outcome: &Outcome, progress: &Progress, evidence: &Evidence) -> Self {
        Self {
            steps: Some(Stepped {
                written: progress.written.clone(),
                attempts: progress.attempts,
                window: progress.window.clone(),
                gates: progress.gates.clone(),
            }),
            consumers: progress.consumers.clone(),
            events: progress.events.clone(),
            refused: progress.refused.values().cloned().collect(),
            restarts_refused: progress.restarts_refused.clone(),
            pods: evidence.pod_lines().to_vec(),
            pokes: evidence.pokes_in_run(),
            pods_refused: evidence.pokes_refused().cloned(),
            ..Self::of(outcome.report.clone())
        }
    }
}

/// The run's report, from how it ended: the one place the driver writes a report's fields.
pub(super) fn finish(end: End) -> Report {
    let mut report = match end.steps {
        Some(s) => {
            let mut report = Report::after_steps(&end.last, s.written, Vec::new(), s.attempts);
            report.renewal_window = s.window;
            report.gates = s.gates;
            report
        }
        None => end.last,
    };
    report.dry_run &= end.dry_run;
    report.consumers = end.consumers;
    report.secrets.extend(end.planned);
    report.events = end.events;
    report.pods = end.pods;
    report.pokes = end.pokes;
    report.note = end.note;
    report.held = end.held;
    match end.writers {
        Some((writers, Found::Replace)) => report.other_writers = writers,
        Some((writers, Found::Fill)) if report.other_writers.is_empty() => {
            report.other_writers = writers
        }
        _ => {}
    }
    report.skipped.extend(end.refused);
    let refused = refused_lines(&report, end.restarts_refused, end.pods_refused);
    report.skipped.extend(refused);
    // A refused lock is a skipped feature; a held Lease says whether it was taken over from a
    // crashed run and how its renewals went.
    report
        .skipped
        .extend(end.lock.refused().map(str::to_string));
    if let lock::Outcome::Lease(l) = end.lock {
        report.lock = Some(LockReport {
            lease: l.what,
            took_over: l.took_over,
            renewals: l.renewals,
            renewal_failures: l.renewal_failures,
            lost: l.lost,
        });
    }
    report.warnings.extend(end.warning);
    report
}

/// The report's lines for restarts and pokes the API server refused (403): a refusal of
/// restarts is said for each consumer it left alone.
fn refused_lines(report: &Report, restarts: Option<String>, pods: Option<String>) -> Vec<String> {
    let mut lines: Vec<String> = restarts
        .map(|note| report.consumers_noted(&note).collect())
        .unwrap_or_default();
    lines.extend(pods);
    lines
}
