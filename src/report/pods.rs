//! The report's lines about pods (pokes, and pods that mount a managed Secret outside every
//! declared consumer) and about the gates a run waited at (how long, and what opened them).

use serde::Serialize;

/// One pod in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub name: String,
    /// The managed Secrets it mounts.
    pub secrets: Vec<String>,
    /// poked, would-poke, gone, recreated, failed, unowned.
    pub action: String,
    /// The declared consumer it belongs to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One gate this run waited at.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateReport {
    /// Why it waited (the plan's reason).
    pub reason: String,
    /// evidence (every pod poked and settled, created since, or gone), probe, or timer.
    pub opened_by: String,
    /// Seconds waited, on this process's clock.
    pub seconds: f64,
}

/// The text lines of the pods and gates.
pub fn text(pods: &[PodReport], gates: &[GateReport]) -> String {
    let mut out = String::new();
    if !pods.is_empty() {
        out.push_str("Pods:\n");
    }
    for p in pods {
        out.push_str(&format!(
            "  {} [{}]: {}",
            p.name,
            p.secrets.join(", "),
            p.action
        ));
        if let Some(c) = &p.consumer {
            out.push_str(&format!(" (consumer {c})"));
        }
        if let Some(d) = &p.detail {
            out.push_str(&format!(": {d}"));
        }
        out.push('\n');
    }
    for g in gates {
        out.push_str(&format!(
            "Gate: opened by {} after {:.1}s ({})\n",
            g.opened_by, g.seconds, g.reason
        ));
    }
    out
}

/// Merges `new` into `all`: one line per pod, the latest action winning, except that a warning
/// (unowned) is kept.
pub fn merge(all: &mut Vec<PodReport>, new: Vec<PodReport>) {
    for p in new {
        match all
            .iter_mut()
            .find(|a| a.name == p.name && (a.action == "unowned") == (p.action == "unowned"))
        {
            Some(a) => *a = p,
            None => all.push(p),
        }
    }
}
