//! The driver that looks at the `caBundle` targets cert-manager's CA injector writes, for the
//! trust gate (the rule is `evidence/injections.rs`): each look reads the target, checks that
//! every entry's `caBundle` holds the pending CA, asks the API server's cache whether it shows
//! that version, and hands what it found to the [`Evidence`] as a plain value.

use time::OffsetDateTime;
use tokio::time::Instant;

use super::evidence::{Evidence, Injection, PROGRESS, RECHECK};
use crate::config::WebhookKind;
use crate::outside::{CaBundleTargets, TargetObserved, TargetRead, describe_target};
use crate::report::GatePod;

/// The injected targets a trust gate waits for, and the CA they must hold.
pub struct Injector<'a> {
    pub api: &'a dyn CaBundleTargets,
    /// The targets, by kind and name, that a read of this run found injected.
    pub targets: Vec<(WebhookKind, String)>,
    /// The pending CA's fingerprint: the next step's leaves are signed by it.
    pub ca: [u8; 32],
}

impl Injector<'_> {
    /// Looks at every target once and tells `ev` what each showed. A target no longer
    /// injected (the annotation removed) or gone is certgen's again or calls nothing: it is
    /// not waited for here.
    pub async fn look(&self, ev: &mut Evidence) {
        for (kind, name) in &self.targets {
            let what = describe_target(*kind, name);
            let seen = match self.api.read(*kind, name).await {
                Ok(TargetObserved::Present(read)) if read.injected.is_some() => {
                    self.judge(&read).await
                }
                Ok(_) => continue,
                Err(e) => Injection::Missing(format!("could not be read: {e}")),
            };
            ev.observe_injection(what, seen);
        }
    }

    async fn judge(&self, read: &TargetRead) -> Injection {
        let fp = crate::pki::hex(&self.ca);
        let fp = &fp[..16];
        let by = read
            .injected
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        match read.holds_ca(self.ca) {
            Ok(true) => {}
            Ok(false) => {
                return Injection::Missing(format!(
                    "its caBundle does not hold the pending CA {fp} yet: cert-manager's CA injector writes it ({by}), and the API server would reject the webhook's new leaf without it; {}",
                    crate::certmanager::PENDING_CA_FIX
                ));
            }
            Err(e) => return Injection::Missing(e),
        }
        match self.api.cached(read.kind, &read.name, &read.version).await {
            Ok(true) => Injection::Shown(read.written_at),
            Ok(false) => Injection::Uncached,
            Err(e) => Injection::Missing(format!("could not be read back from the cache: {e}")),
        }
    }

    /// Where pods cannot be observed: looks until every target holds the pending CA and the
    /// API server had time to load it, or `until`. `Ok` with the report lines; `Err` with what
    /// is still waited for.
    pub async fn wait(
        &self,
        ev: &mut Evidence,
        store_now: &dyn Fn() -> OffsetDateTime,
        until: Instant,
    ) -> Result<Vec<GatePod>, Vec<String>> {
        let mut said = Instant::now();
        loop {
            self.look(ev).await;
            let (waiting, recheck) = ev.injections_waiting(store_now(), Instant::now());
            if waiting.is_empty() {
                return Ok(ev.injection_lines());
            }
            let next = recheck.unwrap_or_else(|| Instant::now() + RECHECK);
            if next > until {
                return Err(waiting);
            }
            if said.elapsed() >= PROGRESS {
                tracing::info!(phase = "gate", "waiting for {}", waiting.join(", "));
                said = Instant::now();
            }
            tokio::time::sleep_until(next).await;
        }
    }
}
