//! Staged rotation: trust first, then leaves, each step gated on consumers having had time to
//! load the previous one. The phase is derived from the certificates (a pending CA in the CA
//! Secret, which CAs each bundle holds, who signed each leaf) and the recorded write times.

use std::collections::BTreeMap;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{Action, CaPlan, Kind, Parsed, Phase, SecretPlan, same_certs};
use crate::config::Config;
use crate::pki::{CaKey, Cert, rotation_bundle};

/// When the trust phase of the rotation in progress finished writing.
pub const TRUST_WRITTEN_AT: &str = "certgen.dev/trust-written-at";
/// When the leaves of the last rotation were written.
pub const LEAVES_WRITTEN_AT: &str = "certgen.dev/leaves-written-at";

/// What the staged planner needs from the main planner.
pub(super) struct Inputs<'a> {
    pub config: &'a Config,
    pub now: OffsetDateTime,
    pub delay: std::time::Duration,
    pub trust_confirmed: Option<[u8; 32]>,
    pub ca_name: &'a str,
    pub ca_version: Option<String>,
    pub ca_annotations: &'a BTreeMap<String, String>,
    pub ca_bundle: &'a [Cert],
    pub parsed: &'a [Parsed],
    pub reasons: Vec<Option<(Action, String)>>,
    pub versions: Vec<Option<String>>,
}

fn recorded(annotations: &BTreeMap<String, String>, key: &str) -> Option<OffsetDateTime> {
    annotations
        .get(key)
        .and_then(|v| OffsetDateTime::parse(v, &Rfc3339).ok())
}

fn delay(d: std::time::Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// `at + d`, saturating at the last instant `time` represents instead of overflowing.
fn after(at: OffsetDateTime, d: std::time::Duration) -> OffsetDateTime {
    at.checked_add(delay(d))
        .unwrap_or_else(|| time::PrimitiveDateTime::MAX.assume_utc())
}

fn not_after(p: &Parsed) -> Option<OffsetDateTime> {
    match p {
        Parsed::Ok(l) => Some(l.cert.not_after),
        _ => None,
    }
}

/// Plans for the TLS Secrets during the trust phase: bundles become `trust` (when the pending CA
/// exists), leaves stay; anything due is still signed by the current CA.
fn trust_secrets(inputs: &mut Inputs<'_>, trust: Option<&[Cert]>) -> Vec<SecretPlan> {
    let mut out = Vec::new();
    for (i, t) in inputs.config.tls.iter().enumerate() {
        let p = &inputs.parsed[i];
        let (action, reason) = match (p, inputs.reasons[i].take()) {
            (Parsed::Missing, _) => (
                Action::Create,
                "missing; signed by the current CA during the trust phase".to_string(),
            ),
            (_, Some((action, why))) => (
                action,
                format!("{why}; signed by the current CA during the trust phase"),
            ),
            (Parsed::Ok(l), None) if trust.is_none_or(|tb| !same_certs(&l.bundle, tb)) => (
                Action::UpdateBundle,
                "trust phase: the new CA is trusted beside the current one".to_string(),
            ),
            (_, None) => (Action::Keep, "trusts the pending CA".to_string()),
        };
        out.push(SecretPlan {
            name: t.name.clone(),
            kind: Kind::Tls,
            action,
            reason,
            version: inputs.versions[i].clone(),
            not_after: not_after(p),
        });
    }
    out
}

/// Finishes a rotation whose pending CA exists: completes the trust phase, waits out the gate,
/// or promotes the pending CA and writes the leaves.
pub(super) fn resume(
    mut inputs: Inputs<'_>,
    active: CaKey,
    pending: CaKey,
) -> (CaPlan, Vec<SecretPlan>, Phase) {
    let trust = rotation_bundle(&pending.cert, Some(&active.cert));
    let mut secrets = trust_secrets(&mut inputs, Some(&trust));
    let ca_needs_trust = !same_certs(inputs.ca_bundle, &trust);
    let trust_incomplete = ca_needs_trust || secrets.iter().any(|s| s.action.writes());
    let ca = |action, reason: String, active, pending, version| CaPlan {
        name: inputs.ca_name.to_string(),
        action,
        reason,
        active,
        version,
        prior: None,
        bundle: trust.clone(),
        pending,
    };
    if trust_incomplete {
        // The CA Secret is written (again) so the trust phase's recorded time follows its
        // last bundle write, which the gate counts from.
        let (action, reason) = (
            Action::UpdateBundle,
            format!(
                "trust phase resumed: pending CA {} trusted beside the current one",
                pending.cert.short_fingerprint()
            ),
        );
        let plan = ca(
            action,
            reason,
            Some(active),
            Some(pending),
            inputs.ca_version.clone(),
        );
        return (plan, secrets, Phase::Trust);
    }
    // A recorded time in the future (clock skew, or a hand-edited annotation) counts as now.
    let since = recorded(inputs.ca_annotations, TRUST_WRITTEN_AT)
        .unwrap_or(inputs.now)
        .min(inputs.now);
    let ready_at = after(since, inputs.delay);
    let pending_fp = pending.cert.fingerprint();
    let confirmed = inputs.trust_confirmed == Some(pending_fp);
    if inputs.now < ready_at && !confirmed {
        let reason = format!(
            "every bundle trusts the pending CA {}; leaves wait until {} so consumers have loaded it",
            pending.cert.short_fingerprint(),
            crate::report::rfc3339(ready_at)
        );
        let plan = ca(
            Action::Keep,
            reason.clone(),
            Some(active),
            Some(pending),
            inputs.ca_version.clone(),
        );
        let pending = Some(pending_fp);
        return (
            plan,
            secrets,
            Phase::Gate {
                ready_at,
                reason,
                pending,
            },
        );
    }
    for (i, s) in secrets.iter_mut().enumerate() {
        (s.action, s.reason) = match inputs.parsed[i] {
            Parsed::Missing => (Action::Create, "missing".to_string()),
            _ => (
                Action::Renew,
                "leaves phase: signed by the new CA".to_string(),
            ),
        };
    }
    let reason = format!(
        "leaves phase: the pending CA {} becomes active",
        pending.cert.short_fingerprint()
    );
    let version = inputs.ca_version.clone();
    (
        ca(
            Action::Promote,
            reason,
            Some(active),
            Some(pending),
            version,
        ),
        secrets,
        Phase::Leaves,
    )
}

/// Starts a staged rotation: gated on the leaves of the previous rotation having had time to
/// reach every consumer when this trust change drops that rotation's prior CA.
pub(super) fn start(
    mut inputs: Inputs<'_>,
    active: CaKey,
    reason: String,
) -> (CaPlan, Vec<SecretPlan>, Phase) {
    let drops_a_ca = inputs.ca_bundle.iter().any(|c| *c != active.cert);
    let last_leaves = recorded(inputs.ca_annotations, LEAVES_WRITTEN_AT).map(|t| t.min(inputs.now));
    if drops_a_ca
        && let Some(at) = last_leaves
        && inputs.now < after(at, inputs.delay)
    {
        let ready_at = after(at, inputs.delay);
        let why = format!(
            "{reason}; waiting until {} so consumers present the leaves of the previous rotation before its CA is dropped",
            crate::report::rfc3339(ready_at)
        );
        let secrets = inputs
            .config
            .tls
            .iter()
            .enumerate()
            .map(|(i, t)| SecretPlan {
                name: t.name.clone(),
                kind: Kind::Tls,
                action: Action::Keep,
                reason: "waiting".into(),
                version: inputs.versions[i].clone(),
                not_after: not_after(&inputs.parsed[i]),
            })
            .collect();
        let plan = CaPlan {
            name: inputs.ca_name.to_string(),
            action: Action::Keep,
            reason: why.clone(),
            active: Some(active),
            version: inputs.ca_version.clone(),
            prior: None,
            bundle: vec![],
            pending: None,
        };
        return (
            plan,
            secrets,
            Phase::Gate {
                ready_at,
                reason: why,
                pending: None,
            },
        );
    }
    let secrets = trust_secrets(&mut inputs, None);
    let plan = CaPlan {
        name: inputs.ca_name.to_string(),
        action: Action::Trust,
        reason: format!("{reason} (staged: trust phase)"),
        active: Some(active),
        version: inputs.ca_version.clone(),
        prior: None,
        bundle: vec![],
        pending: None,
    };
    (plan, secrets, Phase::Trust)
}
