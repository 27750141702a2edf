//! The `caBundle` targets cert-manager's CA injector writes, at the trust gate: certgen never
//! writes them (`rotation/webhooks.rs`), but the API server calls their webhook with what the
//! injector put there, so the new leaves wait until it holds the pending CA. The injector acts
//! at its own pace (its watch, its queue, a restart, a lost leader election: a second to
//! minutes), and nothing but a look at the target shows that it has: each look is fed here as
//! a plain value ([`Injection`]), and a target whose `caBundle` does not hold the pending CA in
//! every entry, or whose write the API server's cache does not show yet, keeps the gate shut.
//! No timer opens it for such a target (the timer is for what cannot be observed, and this can
//! be): a run ends at `--timeout` (exit 3) and the next run goes on. Once the cache shows the
//! write, it counts like certgen's own `caBundle` writes: the settle time (`POKE_SETTLE`) after
//! it was written, for the API server's informer. A leaf of the evidence: it imports nothing
//! from it (the evidence hands it the settle and recheck times).

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;
use tokio::time::Instant;

use crate::report::GatePod;

/// The report's word for what opened the gate for an injected target.
pub const INJECTED: &str = "cert-manager's CA injector";

/// What a look at an injected target found, as the gate judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    /// Its `caBundle` does not hold the pending CA in every entry yet, or it could not be read:
    /// why, for the report.
    Missing(String),
    /// It holds the pending CA, but the API server's cache does not show that version yet.
    Uncached,
    /// It holds the pending CA and the API server's cache shows it; the store time the object
    /// was last written (rounded up to the second), when known.
    Shown(Option<OffsetDateTime>),
}

/// An injected target at the gate under way: the latest look, and when a look first showed
/// it loaded (monotonic).
#[derive(Debug, Clone)]
struct Injected {
    seen: Injection,
    shown: Option<Instant>,
}

/// The injected targets at the gate under way, by target.
#[derive(Debug, Default)]
pub struct Injections(BTreeMap<String, Injected>);

impl Injections {
    /// Records a look at the injected target `what`.
    pub fn observe(&mut self, what: String, seen: Injection) {
        let shown = match &seen {
            Injection::Shown(_) => self
                .0
                .get(&what)
                .and_then(|i| i.shown)
                .or_else(|| Some(Instant::now())),
            _ => None,
        };
        self.0.insert(what, Injected { seen, shown });
    }

    /// What the injected targets still hold the gate for (`now`: the store's clock; `mono`:
    /// this process's): each one's line, and when to look again (`recheck` from now while a
    /// target lacks the CA or the cache does not show it; `settle` after the write once it
    /// does). Nothing when every one holds the pending CA and the settle time has passed.
    pub fn waiting(
        &self,
        (now, mono): (OffsetDateTime, Instant),
        (settle, recheck): (Duration, Duration),
    ) -> (Vec<String>, Option<Instant>) {
        let mut waiting = Vec::new();
        let mut next: Option<Instant> = None;
        let mut soon = |at: Instant| next = Some(next.map_or(at, |n| n.min(at)));
        for (what, i) in &self.0 {
            match &i.seen {
                Injection::Missing(why) => {
                    soon(mono + recheck);
                    waiting.push(format!("{what} ({why})"));
                }
                Injection::Uncached => {
                    soon(mono + recheck);
                    waiting.push(format!(
                        "{what} (cert-manager's CA injector added the pending CA; the API server's cache does not show it yet)"
                    ));
                }
                Injection::Shown(written) => {
                    // From the write as stored when known (an injector write seen late counts
                    // from when it was made), else from the first look that showed it.
                    let opens = match written {
                        Some(at) => {
                            let left = (*at + settle - now).max(time::Duration::ZERO);
                            mono + Duration::try_from(left).unwrap_or(settle)
                        }
                        None => i.shown.unwrap_or(mono) + settle,
                    };
                    if mono < opens {
                        soon(opens);
                        waiting.push(format!(
                            "{what} (cert-manager's CA injector added the pending CA; the API server loads it)"
                        ));
                    }
                }
            }
        }
        (waiting, next)
    }

    /// The report lines of the injected targets of a gate that opens.
    pub fn lines(&self) -> Vec<GatePod> {
        self.0
            .keys()
            .map(|what| GatePod {
                name: what.clone(),
                node: None,
                opened_by: INJECTED.into(),
                detail: Some(
                    "its caBundle holds the pending CA in every entry, and the API server's cache shows it"
                        .into(),
                ),
            })
            .collect()
    }

    /// Forgets every look: the next gate looks again.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}
