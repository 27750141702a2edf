//! The rules of one leaf, shared by the planner, `check` and `create`: when a certificate is
//! due ([`due`]), when its SANs drifted from the config ([`san_drift`]), when a TLS verifier
//! would refuse it whatever its CA ([`leaf_refusal`]); and one configured TLS Secret as the
//! planner sees it (`LeafIn`), with the plans it makes for it.

use std::time::Duration;

use time::OffsetDateTime;

use super::stored::{Leaf, Parsed};
use super::writes::{self, Issue, Write};
use super::{Action, CaRef, Kind, SecretPlan, Signer};
use crate::config::TlsSecret;
use crate::pki::Cert;

fn days(d: time::Duration) -> String {
    let h = d.whole_hours();
    let m = d.whole_minutes();
    if h.abs() >= 48 {
        format!("{} days", h / 24)
    } else if h.abs() >= 2 {
        format!("{h} hours")
    } else if m.abs() >= 2 {
        // (Not "0 hours" for 59 minutes.)
        format!("{m} minutes")
    } else {
        format!("{} seconds", d.whole_seconds())
    }
}

fn span(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// `at + d`, saturating at the last instant `time` represents instead of overflowing.
pub(super) fn after(at: OffsetDateTime, d: Duration) -> OffsetDateTime {
    at.checked_add(span(d))
        .unwrap_or_else(|| time::PrimitiveDateTime::MAX.assume_utc())
}

/// Why a certificate is due for renewal at `now`, if it is: not valid yet (a verifier rejects
/// it before its `notBefore`: it was issued by a clock ahead of the store's), expired, or
/// within `renew_before` of its expiry.
pub fn due(cert: &Cert, renew_before: Duration, now: OffsetDateTime) -> Option<String> {
    if now < cert.not_before {
        return Some(format!(
            "is not valid before {} (issued by a clock ahead of the store's)",
            crate::timefmt::at_second(cert.not_before)
        ));
    }
    let left = cert.not_after - now;
    if left <= time::Duration::ZERO {
        Some(format!("expired {} ago", days(-left)))
    } else if left <= span(renew_before) {
        Some(format!("expires in {}, within renewBefore", days(left)))
    } else {
        None
    }
}

/// Why a leaf's SANs no longer match the config's, if they do not: the names it adds and drops.
pub fn san_drift(cert: &Cert, t: &TlsSecret) -> Option<String> {
    let mut have: Vec<String> = cert.dns_names.clone();
    have.extend(cert.ip_addresses.iter().map(|i| i.to_string()));
    let mut want: Vec<String> = t.leaf.dns_names.clone();
    want.extend(t.leaf.ip_addresses.iter().map(|i| i.to_string()));
    let added: Vec<&str> = want
        .iter()
        .filter(|w| !have.contains(w))
        .map(String::as_str)
        .collect();
    let removed: Vec<&str> = have
        .iter()
        .filter(|h| !want.contains(h))
        .map(String::as_str)
        .collect();
    if added.is_empty() && removed.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!("adds {}", added.join(", ")));
    }
    if !removed.is_empty() {
        parts.push(format!("drops {}", removed.join(", ")));
    }
    Some(format!("SANs changed in the config: {}", parts.join("; ")))
}

/// Why a TLS verifier would reject this stored leaf whatever its CA, if it would: it lacks a
/// usage its Secret is configured for, or carries a critical extension verifiers do not know.
pub fn leaf_refusal(cert: &Cert, t: &TlsSecret) -> Option<String> {
    crate::pki::leaf_shape_problem(cert, t.leaf.usages)
}

pub(super) fn same(bundle: &[Cert], target: &[Cert]) -> bool {
    bundle.len() == target.len() && bundle.iter().zip(target).all(|(a, b)| a == b)
}

pub(super) fn refs(certs: &[Cert]) -> Vec<CaRef> {
    certs.iter().cloned().map(CaRef::Cert).collect()
}

/// One configured TLS Secret as observed.
pub(super) struct LeafIn<'a> {
    pub(super) cfg: &'a TlsSecret,
    pub(super) parsed: Parsed,
    pub(super) version: Option<String>,
}

impl LeafIn<'_> {
    pub(super) fn ok(&self) -> Option<&Leaf> {
        match &self.parsed {
            Parsed::Ok(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn not_after(&self) -> Option<OffsetDateTime> {
        self.ok().map(|l| l.cert.not_after)
    }

    pub(super) fn plan(
        &self,
        action: Action,
        reason: impl Into<String>,
        write: Option<Write>,
    ) -> SecretPlan {
        SecretPlan {
            name: self.cfg.name.clone(),
            kind: Kind::Tls,
            action,
            reason: reason.into(),
            not_after: self.not_after(),
            write,
        }
    }

    pub(super) fn keep(&self, reason: impl Into<String>) -> SecretPlan {
        self.plan(Action::Keep, reason, None)
    }

    pub(super) fn bundle_update(
        &self,
        bundle: Vec<CaRef>,
        reason: impl Into<String>,
    ) -> SecretPlan {
        let write = writes::tls(&self.version, &bundle, None, &self.cfg.layout);
        self.plan(Action::UpdateBundle, reason, Some(write))
    }

    pub(super) fn issue(
        &self,
        signer: Signer,
        bundle: Vec<CaRef>,
        reason: impl Into<String>,
    ) -> SecretPlan {
        let action = match self.parsed {
            Parsed::Missing => Action::Create,
            _ => Action::Renew,
        };
        let issue = Issue {
            spec: self.cfg.leaf.clone(),
            signer,
        };
        let write = writes::tls(&self.version, &bundle, Some(issue), &self.cfg.layout);
        self.plan(action, reason, Some(write))
    }

    /// Why this leaf must be issued again by `signer` (the CA that should have signed it), if
    /// it must: missing, unusable, issued by another CA, due, or its SANs changed.
    pub(super) fn issue_reason(&self, signer: &Cert, now: OffsetDateTime) -> Option<String> {
        match &self.parsed {
            Parsed::Missing => Some("missing".into()),
            Parsed::Broken(why) => Some(format!("unusable ({why}); replaced because of --force")),
            Parsed::Ok(l) => {
                if !signer.signed(&l.cert) {
                    return Some("issued by a CA other than the active one".into());
                }
                due(&l.cert, self.cfg.renew_before, now)
                    .or_else(|| san_drift(&l.cert, self.cfg))
                    .or_else(|| leaf_refusal(&l.cert, self.cfg))
            }
        }
    }

    /// When this leaf is due only because it entered its renewBefore (valid, signed by
    /// `active`, its SANs and usages as configured): the routine renewal a renewal window may
    /// hold. Its expiry and the reason it is due.
    pub(super) fn routine(
        &self,
        active: &Cert,
        now: OffsetDateTime,
    ) -> Option<(OffsetDateTime, String)> {
        let l = self.ok()?;
        let routine = active.signed(&l.cert)
            && now >= l.cert.not_before
            && now < l.cert.not_after
            && san_drift(&l.cert, self.cfg).is_none()
            && leaf_refusal(&l.cert, self.cfg).is_none();
        routine
            .then(|| due(&l.cert, self.cfg.renew_before, now))
            .flatten()
            .map(|d| (l.cert.not_after, d))
    }

    /// Why this leaf is issued again by `active` in this step, if doing so helps: a leaf that
    /// is due only because it is clipped to the active CA's expiry would be due again at once,
    /// so it waits for the next CA (which the CA's own, longer, renewBefore brings first).
    ///
    /// Likewise a leaf that is not valid yet because the active CA is not (a leaf's
    /// `notBefore` never precedes its CA's): the same CA would issue it with the same
    /// `notBefore`. A leaf not valid yet from a valid CA is issued again by it at once: the
    /// bundles trust that CA already, so no gate is needed.
    pub(super) fn renewal(&self, active: &Cert, now: OffsetDateTime) -> Option<String> {
        let why = self.issue_reason(active, now)?;
        if let Parsed::Ok(l) = &self.parsed
            && active.signed(&l.cert)
            && !l.cert.is_expired_at(now)
            && san_drift(&l.cert, self.cfg).is_none()
            && (due(active, self.cfg.renew_before, now).is_some()
                || (now < l.cert.not_before && now < active.not_before))
        {
            return None;
        }
        Some(why)
    }
}

#[cfg(test)]
mod tests {
    use super::days;
    use time::Duration;

    #[test]
    fn a_span_is_said_in_the_unit_that_fits_it() {
        assert_eq!(days(Duration::days(30)), "30 days");
        assert_eq!(days(Duration::hours(47)), "47 hours");
        assert_eq!(days(Duration::minutes(59)), "59 minutes");
        assert_eq!(days(Duration::minutes(119)), "119 minutes");
        assert_eq!(days(Duration::seconds(90)), "90 seconds");
    }
}
