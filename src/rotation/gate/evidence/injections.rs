//! The `caBundle` targets cert-manager's CA injector writes, at the trust gate: certgen never
//! writes them (`rotation/webhooks.rs`), but the API server calls their webhook with what the
//! injector put there, so the new leaves wait until it holds the pending CA. The injector acts
//! at its own pace (its watch, its queue, a restart, a lost leader election: a second to
//! minutes), and nothing but a look at the target shows that it has: each look is fed here as
//! a plain value ([`Injection`]), and a target whose `caBundle` does not hold the pending CA in
//! every entry, or whose write the API server's cache does not show yet, keeps the gate shut.
//! No timer opens it for such a target (the timer is for what cannot be observed, and this can
//! be): a run ends at `--timeout` (exit 3) and the next run goes on. Once the cache shows the
//! write, it counts like certgen's own `caBundle` writes: [`POKE_SETTLE`] after it was
//! written, for the API server's informer.

use time::OffsetDateTime;
use tokio::time::Instant;

use super::{Evidence, POKE_SETTLE, RECHECK, soon};
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
pub(super) struct Injected {
    seen: Injection,
    shown: Option<Instant>,
}

impl Evidence {
    /// Records a look at the injected target `what` at the gate under way.
    pub fn observe_injection(&mut self, what: String, seen: Injection) {
        let shown = match &seen {
            Injection::Shown(_) => self
                .injections
                .get(&what)
                .and_then(|i| i.shown)
                .or_else(|| Some(Instant::now())),
            _ => None,
        };
        self.injections.insert(what, Injected { seen, shown });
    }

    /// What the injected targets still hold the gate for (`now`: the store's clock; `mono`:
    /// this process's): each one's line, and when to look again. Nothing when every one holds
    /// the pending CA and the API server has had [`POKE_SETTLE`] to load it.
    pub fn injections_waiting(
        &self,
        now: OffsetDateTime,
        mono: Instant,
    ) -> (Vec<String>, Option<Instant>) {
        let mut waiting = Vec::new();
        let mut recheck = None;
        for (what, i) in &self.injections {
            match &i.seen {
                Injection::Missing(why) => {
                    soon(mono + RECHECK, &mut recheck);
                    waiting.push(format!("{what} ({why})"));
                }
                Injection::Uncached => {
                    soon(mono + RECHECK, &mut recheck);
                    waiting.push(format!(
                        "{what} (cert-manager's CA injector added the pending CA; the API server's cache does not show it yet)"
                    ));
                }
                Injection::Shown(written) => {
                    // From the write as stored when known (an injector write seen late counts
                    // from when it was made), else from the first look that showed it.
                    let opens = match written {
                        Some(at) => {
                            let left = (*at + POKE_SETTLE - now).max(time::Duration::ZERO);
                            mono + std::time::Duration::try_from(left).unwrap_or(POKE_SETTLE)
                        }
                        None => i.shown.unwrap_or(mono) + POKE_SETTLE,
                    };
                    if mono < opens {
                        soon(opens, &mut recheck);
                        waiting.push(format!(
                            "{what} (cert-manager's CA injector added the pending CA; the API server loads it)"
                        ));
                    }
                }
            }
        }
        (waiting, recheck)
    }

    /// The report lines of the injected targets of a gate that opens.
    pub fn injection_lines(&self) -> Vec<GatePod> {
        self.injections
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

    /// Forgets the injected targets' looks: the next gate looks again.
    pub fn forget_injections(&mut self) {
        self.injections.clear();
    }
}
