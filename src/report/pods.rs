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
    /// poked, would-poke, gone, recreated, throttled (429: poked again later), failed, unowned.
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
    /// Which gate: `trust → leaves`, `leaves → cleanup`, or `before the next step`.
    pub gate: String,
    /// evidence (every pod shown to hold what was written), probe, timer, or `held` (not
    /// opened: the run ended first).
    pub opened_by: String,
    /// Seconds waited, on this process's clock.
    pub seconds: f64,
    /// When the timer opened it (RFC 3339, to the second): only when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timer_at: Option<String>,
    /// The pokes for this gate: after the step before it, and while it waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pokes: Option<Pokes>,
    /// What opened it for each pod that mounts what changed (or why it still waits).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<GatePod>,
}

/// What pokes cost: how many landed, how long sending them took, and what the API server
/// pushed back with.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pokes {
    /// Pokes that landed (a pod poked again, after its kubelet came back, counts twice).
    pub poked: usize,
    /// Seconds spent sending them, on this process's clock (paced: `docs/api-requests.md`).
    pub seconds: f64,
    /// 429 answers to them (each retried after its Retry-After).
    pub throttled: u64,
    /// Pokes that failed for good (those pods wait for their timer).
    pub failed: usize,
}

impl Pokes {
    /// "1000 pods poked in 3.2s, 0 throttled".
    pub fn text(&self) -> String {
        let failed = if self.failed > 0 {
            format!(", {} failed", self.failed)
        } else {
            String::new()
        };
        format!(
            "{} pods poked in {:.1}s, {} throttled{failed}",
            self.poked, self.seconds, self.throttled
        )
    }
}

/// One pod at a gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatePod {
    pub name: String,
    /// The node whose kubelet projects its volumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// probe, poke plus live kubelet, created after the write, gone, restarted, timer, or
    /// held (its kubelet not seen live when the run ended).
    pub opened_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
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
        let how = match (g.opened_by.as_str(), &g.timer_at) {
            ("timer", Some(at)) => format!("opened by --propagation-delay ({at})"),
            ("held", _) => "not opened: held until the run ended".to_string(),
            (by, _) => format!("opened by {by}"),
        };
        let pokes = g
            .pokes
            .as_ref()
            .map(|p| format!("; {}", p.text()))
            .unwrap_or_default();
        out.push_str(&format!(
            "Gate ({}): {how} after {}s{pokes}\n",
            g.gate,
            g.seconds.round()
        ));
        for p in &g.pods {
            let node = p
                .node
                .as_ref()
                .map(|n| format!(" (node {n})"))
                .unwrap_or_default();
            out.push_str(&format!("  {}{node}: {}", p.name, p.opened_by));
            if let Some(d) = &p.detail {
                out.push_str(&format!("; {d}"));
            }
            out.push('\n');
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_line_says_how_many_pods_were_poked_and_how_long_it_took() {
        let gate = GateReport {
            gate: "trust → leaves".into(),
            opened_by: "evidence".into(),
            seconds: 6.04,
            timer_at: None,
            pokes: Some(Pokes {
                poked: 1000,
                seconds: 3.2,
                throttled: 0,
                failed: 0,
            }),
            pods: vec![],
        };
        assert_eq!(
            text(&[], std::slice::from_ref(&gate)),
            "Gate (trust → leaves): opened by evidence after 6s; 1000 pods poked in 3.2s, 0 throttled\n"
        );
        let json = serde_json::to_value(&gate).unwrap();
        assert_eq!(
            json["pokes"],
            serde_json::json!({"poked": 1000, "seconds": 3.2, "throttled": 0, "failed": 0})
        );
        let failed = Pokes {
            failed: 2,
            throttled: 5,
            ..gate.pokes.unwrap()
        };
        assert_eq!(
            failed.text(),
            "1000 pods poked in 3.2s, 5 throttled, 2 failed"
        );
    }
}
