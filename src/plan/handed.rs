//! Standing down after `certgen handover cert-manager`: once cert-manager's `Certificate`s,
//! made by the hand-over, issue into the profile's TLS Secrets, the plan keeps every one of
//! them and the CA Secret (cert-manager's CA `Issuer` signs with it) exactly as they are, and
//! says who manages them now; HMAC Secrets stay certgen's. A hand-over of only some of the TLS
//! Secrets is refused: a CA rotation would then reach only part of the bundles.

use super::{Action, CaPlan, CasAfter, Invalid, Kind, SecretPlan};
use crate::config::Config;
use crate::observe::Snapshot;
use crate::secret::CertificateSeen;

/// The CA Secret's and the TLS Secrets' plans when the profile was handed over to
/// cert-manager; `None` when none of its TLS Secrets was.
pub(super) fn stand_down(
    config: &Config,
    observed: &Snapshot,
    object: &dyn Fn(&str) -> String,
) -> Result<Option<(CaPlan, Vec<SecretPlan>)>, Invalid> {
    let handed = |name: &str| {
        observed
            .get(name)
            .present()
            .and_then(|s| match s.certificate.as_deref() {
                Some(CertificateSeen::Present {
                    name,
                    handed_over: Some(_),
                }) => Some(name.clone()),
                _ => None,
            })
    };
    let (over, kept): (Vec<_>, Vec<_>) = config.tls.iter().partition(|t| handed(&t.name).is_some());
    if over.is_empty() {
        return Ok(None);
    }
    if let Some(t) = kept.first() {
        return Err(Invalid {
            object: object(&t.name),
            problem: format!(
                "Secrets {} were handed over to cert-manager, but not this one: certgen cannot rotate a CA whose Secrets it only partly manages",
                over.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
            fix: "nothing was written; finish the hand-over (certgen handover cert-manager --apply), or hand the others back by deleting their Certificates (docs/cert-manager.md)".into(),
        });
    }
    let tls = config
        .tls
        .iter()
        .map(|t| {
            let certificate = handed(&t.name).unwrap_or_default();
            SecretPlan {
                name: t.name.clone(),
                kind: Kind::Tls,
                action: Action::Keep,
                reason: format!(
                    "managed by cert-manager since certgen's hand-over (Certificate {certificate} issues into it): certgen leaves it alone"
                ),
                not_after: None,
                write: None,
            }
        })
        .collect();
    let ca = CaPlan {
        name: config.ca.secret_name.clone(),
        action: Action::Keep,
        reason: "cert-manager's CA Issuer signs with it since certgen's hand-over: certgen leaves it alone (its rotation is cert-manager's: docs/cert-manager.md)".into(),
        active: None,
        adopted: None,
        pending: None,
        bundle: Vec::new(),
        new: None,
        write: None,
        after: CasAfter {
            signer: None,
            pending: None,
            shown: None,
        },
        derived: None,
    };
    Ok(Some((ca, tls)))
}
