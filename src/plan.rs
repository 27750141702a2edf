//! Pure planning: observed Secrets + config + `now` → the actions of this run, each with the
//! reason people will read in the report.
//!
//! Nothing here reads the clock, the network or files, and nothing generates keys: `--dry-run`
//! prints the plan exactly as `apply` would execute it. Problems with what is stored (garbage
//! PEM, a key that does not match, a Secret owned by another manager) are [`Invalid`] errors
//! that name the object and the fix; `--force` turns the repairable ones into renewals.

use std::collections::BTreeMap;

mod staged;

pub use staged::{LEAVES_WRITTEN_AT, TRUST_WRITTEN_AT};
use std::time::Duration;

use time::OffsetDateTime;

use crate::config::{Config, HmacSecret, MANAGED_BY, MANAGED_BY_LABEL, TlsSecret};
use crate::pki::{
    CaKey, Cert, check_bundle, choose_prior_ca, parse_cert_chain, parse_single_cert, steady_bundle,
};
use crate::store::{Observed, StoredSecret, TYPE_OPAQUE, TYPE_TLS};

/// Options that change what is planned.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Rotate the CA now (`--overwrite`).
    pub overwrite: bool,
    /// Replace HMAC secrets too when rotating.
    pub rotate_hmac: bool,
    /// Take over Secrets owned by another manager and replace unusable contents.
    pub force: bool,
    /// How a rotation reaches consumers.
    pub strategy: Strategy,
    /// How long hot-reloading consumers get to load a change before the next phase relies on it.
    pub propagation_delay: Duration,
    /// Every hot-reloading consumer was probed and accepted a client certificate from the
    /// pending CA with this fingerprint: the trust phase has reached them, whatever the delay.
    pub trust_confirmed: Option<[u8; 32]>,
}

/// How a CA rotation is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Trust first (every bundle gets the new CA beside the current one), then, once consumers
    /// have it, the leaves.
    #[default]
    Staged,
    /// Bundle and leaf in one write, for setups where every consumer restarts.
    Immediate,
}

/// Where a rotation stands after this plan's writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// No rotation in progress (or a one-write rotation).
    Steady,
    /// Staged step 1: a pending CA is being made trusted everywhere; leaves are unchanged.
    Trust,
    /// Nothing may be written before `ready_at`: consumers may not have loaded the last change.
    Gate {
        ready_at: OffsetDateTime,
        reason: String,
        /// The pending CA's fingerprint when this is the trust-to-leaves gate, which probes
        /// that accept a client certificate from that CA may open early.
        pending: Option<[u8; 32]>,
    },
    /// Staged step 3: the pending CA becomes active and signs every leaf.
    Leaves,
}

/// Everything read from the store, by Secret name.
#[derive(Debug, Clone, Default)]
pub struct ObservedState {
    pub ca: Option<Observed>,
    pub secrets: BTreeMap<String, Observed>,
}

impl ObservedState {
    fn get(&self, name: &str) -> &Observed {
        self.secrets.get(name).unwrap_or(&Observed::Absent)
    }
}

/// A stored object certgen cannot use as it is, and will not touch.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{object}: {problem}; {fix}")]
pub struct Invalid {
    pub object: String,
    pub problem: String,
    pub fix: String,
}

/// What happens to one Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Nothing to do.
    Keep,
    /// Write it for the first time.
    Create,
    /// New key and certificate (or new random bytes), same CA unless the CA rotates.
    Renew,
    /// Only `ca.crt` changes.
    UpdateBundle,
    /// A new CA (the CA Secret only).
    Rotate,
    /// Staged rotation: a new CA stored as pending and added to every bundle (CA Secret only).
    Trust,
    /// Staged rotation: the pending CA becomes the active one (CA Secret only).
    Promote,
    /// Local mode: the data is right, but files consumers read are not the links into it
    /// ([`crate::store::StoredSecret::divergent`]); the links are put back, the data kept.
    Repair,
}

impl Action {
    /// Whether the action writes.
    pub fn writes(self) -> bool {
        self != Self::Keep
    }
}

/// The plan for the CA.
#[derive(Debug)]
pub struct CaPlan {
    pub name: String,
    pub action: Action,
    pub reason: String,
    /// The CA that signs this run's leaves, when it already exists.
    pub active: Option<CaKey>,
    /// The version the CA Secret was read at (`None`: absent).
    pub version: Option<String>,
    /// For Rotate: the prior CA that stays trusted beside the new one.
    pub prior: Option<Cert>,
    /// For Keep/UpdateBundle/Promote: the trust bundle every Secret should hold.
    pub bundle: Vec<Cert>,
    /// A staged rotation's pending CA (for Promote, and while its trust phase is resumed).
    pub pending: Option<CaKey>,
}

/// The plan for one Secret.
#[derive(Debug, Clone)]
pub struct SecretPlan {
    pub name: String,
    pub kind: Kind,
    pub action: Action,
    pub reason: String,
    pub version: Option<String>,
    /// The current leaf's expiry, for the report.
    pub not_after: Option<OffsetDateTime>,
}

/// The kind of a managed Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ca,
    Tls,
    Hmac,
}

/// The whole plan of a run.
#[derive(Debug)]
pub struct Plan {
    pub ca: CaPlan,
    pub secrets: Vec<SecretPlan>,
    pub phase: Phase,
}

impl Plan {
    /// Whether the run writes anything.
    pub fn writes(&self) -> bool {
        self.ca.action.writes() || self.secrets.iter().any(|s| s.action.writes())
    }
}

/// A TLS Secret as parsed.
struct Leaf {
    cert: Cert,
    bundle: Vec<Cert>,
}

enum Parsed {
    Missing,
    /// Unusable and `--force` was given: replace it.
    Broken(String),
    Ok(Box<Leaf>),
}

fn foreign_owner(s: &StoredSecret) -> Option<String> {
    if let Some(owner) = s.owners.first() {
        return Some(format!("it is owned by {owner} (ownerReferences)"));
    }
    if let Some(k) = s
        .annotations
        .keys()
        .find(|k| k.starts_with("cert-manager.io/"))
    {
        return Some(format!("it is managed by cert-manager (annotation {k})"));
    }
    match s.labels.get(MANAGED_BY_LABEL) {
        Some(v) if v != MANAGED_BY => {
            Some(format!("it is managed by {v:?} (label {MANAGED_BY_LABEL})"))
        }
        _ => None,
    }
}

struct Ctx<'a> {
    options: Options,
    object: &'a dyn Fn(&str) -> String,
}

impl Ctx<'_> {
    fn invalid(&self, name: &str, problem: impl Into<String>, fix: impl Into<String>) -> Invalid {
        Invalid {
            object: (self.object)(name),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    /// A repairable problem: an error, or with `--force` a reason to replace the contents.
    fn broken(&self, name: &str, problem: String) -> Result<Parsed, Invalid> {
        if self.options.force {
            Ok(Parsed::Broken(problem))
        } else {
            Err(self.invalid(
                name,
                problem,
                "nothing was written; fix or delete it, or run with --force to have certgen replace its contents",
            ))
        }
    }

    fn check_common(&self, s: &StoredSecret, want_type: &str) -> Result<(), Invalid> {
        if let Some(owner) = foreign_owner(s)
            && !self.options.force
        {
            return Err(self.invalid(
                &s.name,
                format!("refusing to take it over: {owner}"),
                "remove it from the other manager, choose another Secret name, or run with --force",
            ));
        }
        if s.type_ != want_type {
            return Err(self.invalid(
                &s.name,
                format!("has type {:?}, expected {want_type:?}", s.type_),
                "the type of a Secret cannot be changed: delete it and run certgen again",
            ));
        }
        Ok(())
    }

    fn parse_tls(&self, name: &str, observed: &Observed) -> Result<Parsed, Invalid> {
        let Some(s) = observed.present() else {
            return Ok(Parsed::Missing);
        };
        self.check_common(s, TYPE_TLS)?;
        let key = |k: &str| s.data.get(k).filter(|v| !v.is_empty());
        let (Some(crt), Some(key_pem)) = (key("tls.crt"), key("tls.key")) else {
            return self.broken(name, "tls.crt or tls.key is missing or empty".into());
        };
        let cert = match parse_cert_chain(crt) {
            Ok(mut chain) => chain.remove(0),
            Err(e) => return self.broken(name, format!("tls.crt: {e}")),
        };
        if let Err(e) = crate::pki::load_signing_key(&cert, key_pem) {
            return self.broken(name, format!("tls.key: {e}"));
        }
        let bundle = match key("ca.crt").map(|b| parse_cert_chain(b)) {
            None => Vec::new(),
            Some(Ok(b)) => b,
            Some(Err(e)) => return self.broken(name, format!("ca.crt: {e}")),
        };
        if let Err(e) = check_bundle(&bundle) {
            return self.broken(name, format!("ca.crt: {e}"));
        }
        Ok(Parsed::Ok(Box::new(Leaf { cert, bundle })))
    }
}

fn days(d: time::Duration) -> String {
    let h = d.whole_hours();
    if h.abs() >= 48 {
        format!("{} days", h / 24)
    } else {
        format!("{h} hours")
    }
}

pub(crate) fn due(cert: &Cert, renew_before: Duration, now: OffsetDateTime) -> Option<String> {
    let left = cert.not_after - now;
    if left <= time::Duration::ZERO {
        Some(format!("expired {} ago", days(-left)))
    } else if left <= time::Duration::try_from(renew_before).unwrap_or(time::Duration::MAX) {
        Some(format!("expires in {}, within renewBefore", days(left)))
    } else {
        None
    }
}

pub(crate) fn san_drift(cert: &Cert, t: &TlsSecret) -> Option<String> {
    let mut have: Vec<String> = cert.dns_names.clone();
    have.extend(cert.ip_addresses.iter().map(|i| i.to_string()));
    let mut want: Vec<String> = t.leaf.dns_names.clone();
    want.extend(t.leaf.ip_addresses.iter().map(|i| i.to_string()));
    let added: Vec<&String> = want.iter().filter(|w| !have.contains(w)).collect();
    let removed: Vec<&String> = have.iter().filter(|h| !want.contains(h)).collect();
    if added.is_empty() && removed.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!(
            "adds {}",
            added
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !removed.is_empty() {
        parts.push(format!(
            "drops {}",
            removed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Some(format!("SANs changed in the config: {}", parts.join("; ")))
}

fn same_certs(a: &[Cert], b: &[Cert]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Plans a run. `object` names a Secret for messages (`Secret ns/name` or a path).
pub fn plan(
    config: &Config,
    observed: &ObservedState,
    now: OffsetDateTime,
    options: Options,
    object: &dyn Fn(&str) -> String,
) -> Result<Plan, Invalid> {
    let ctx = Ctx { options, object };
    let ca_name = config.ca.secret_name.as_str();

    // The CA Secret.
    let ca_observed = observed.ca.clone().unwrap_or(Observed::Absent);
    let mut ca_problem = None;
    let mut active: Option<CaKey> = None;
    let mut ca_bundle: Vec<Cert> = Vec::new();
    if let Some(s) = ca_observed.present() {
        ctx.check_common(s, TYPE_TLS)?;
        let loaded = (|| -> Result<(CaKey, Vec<Cert>), String> {
            let crt = s.data.get("tls.crt").ok_or("tls.crt is missing")?;
            let key = s.data.get("tls.key").ok_or("tls.key is missing")?;
            let cert = parse_single_cert(crt).map_err(|e| format!("tls.crt: {e}"))?;
            if !cert.is_ca {
                return Err(format!(
                    "tls.crt ({}) is not a CA certificate",
                    cert.subject
                ));
            }
            let ca = CaKey::from_pem(cert, key).map_err(|e| format!("tls.key: {e}"))?;
            let bundle = match s.data.get("ca.crt") {
                None => Vec::new(),
                Some(b) => parse_cert_chain(b).map_err(|e| format!("ca.crt: {e}"))?,
            };
            check_bundle(&bundle).map_err(|e| format!("ca.crt: {e}"))?;
            Ok((ca, bundle))
        })();
        match loaded {
            Ok((ca, bundle)) => {
                active = Some(ca);
                ca_bundle = bundle;
            }
            Err(problem) => match ctx.broken(ca_name, problem)? {
                Parsed::Broken(p) => ca_problem = Some(p),
                _ => unreachable!("broken() returns Broken or an error"),
            },
        }
    }

    // The TLS Secrets.
    let mut parsed = Vec::new();
    for t in &config.tls {
        parsed.push(ctx.parse_tls(&t.name, observed.get(&t.name))?);
    }
    let leaves: Vec<Cert> = parsed
        .iter()
        .filter_map(|p| match p {
            Parsed::Ok(l) => Some(l.cert.clone()),
            _ => None,
        })
        .collect();

    // Per-leaf reasons to issue, judged against the active CA (if any).
    let leaf_reason = |t: &TlsSecret, p: &Parsed| -> Option<(Action, String)> {
        match p {
            Parsed::Missing => Some((Action::Create, "missing".into())),
            Parsed::Broken(why) => Some((
                Action::Renew,
                format!("unusable ({why}); replaced because of --force"),
            )),
            Parsed::Ok(l) => {
                if let Some(ca) = &active
                    && !ca.cert.signed(&l.cert)
                {
                    return Some((
                        Action::Renew,
                        "issued by a CA other than the active one".into(),
                    ));
                }
                due(&l.cert, t.renew_before, now)
                    .or_else(|| san_drift(&l.cert, t))
                    .map(|why| (Action::Renew, why))
            }
        }
    };

    let reasons: Vec<Option<(Action, String)>> = config
        .tls
        .iter()
        .zip(&parsed)
        .map(|(t, p)| leaf_reason(t, p))
        .collect();

    let versions: Vec<Option<String>> = config
        .tls
        .iter()
        .map(|t| observed.get(&t.name).present().map(|s| s.version.clone()))
        .collect();
    let no_annotations = BTreeMap::new();
    let ca_annotations = ca_observed
        .present()
        .map_or(&no_annotations, |s| &s.annotations);
    let ca_version = ca_observed.present().map(|s| s.version.clone());
    let staged_inputs = |reasons| staged::Inputs {
        config,
        now,
        delay: options.propagation_delay,
        trust_confirmed: options.trust_confirmed,
        ca_name,
        ca_version: ca_version.clone(),
        ca_annotations,
        ca_bundle: &ca_bundle,
        parsed: &parsed,
        reasons,
        versions: versions.clone(),
    };

    // A staged rotation in progress is finished first, whatever the flags: never a third CA.
    let pending = match ca_observed.present() {
        Some(s) if ca_problem.is_none() => parse_pending(&ctx, ca_name, s)?,
        _ => None,
    };
    if let Some(pending) = pending
        && let Some(active_ca) = active.take()
    {
        let (ca_plan, mut secrets, phase) =
            staged::resume(staged_inputs(reasons), active_ca, pending);
        secrets.extend(hmac_plans(&ctx, config, observed, options)?);
        return Ok(Plan {
            ca: ca_plan,
            secrets,
            phase,
        });
    }

    // Decide the CA.
    let ca_due = active
        .as_ref()
        .and_then(|ca| due(&ca.cert, config.ca.renew_before, now));
    let mut rotate_reason = if options.overwrite {
        Some("--overwrite: rotating the CA".to_string())
    } else if let Some(p) = &ca_problem {
        Some(format!(
            "the CA Secret is unusable ({p}); replaced because of --force"
        ))
    } else {
        ca_due.map(|d| format!("the CA {d}"))
    };
    let mut create_reason = None;
    if rotate_reason.is_none() && active.is_none() && !config.tls.is_empty() {
        let anything_due = reasons.iter().any(Option::is_some);
        if leaves.is_empty() {
            create_reason = Some("missing".to_string());
        } else if anything_due {
            rotate_reason = Some(
                "no CA key is available to sign (the Secrets were made by another tool); moving to a certgen CA"
                    .to_string(),
            );
        }
    }

    // Staging protects peers that trust the active CA; an expired one protects nobody.
    let active_usable = active.as_ref().is_some_and(|a| !a.cert.is_expired_at(now));
    if let Some(reason) = &rotate_reason
        && options.strategy == Strategy::Staged
        && ca_problem.is_none()
        && active_usable
        && let Some(active_ca) = active.take()
    {
        let (ca_plan, mut secrets, phase) =
            staged::start(staged_inputs(reasons), active_ca, reason.clone());
        secrets.extend(hmac_plans(&ctx, config, observed, options)?);
        return Ok(Plan {
            ca: ca_plan,
            secrets,
            phase,
        });
    }

    let mut candidates: Vec<Cert> = Vec::new();
    if let Some(ca) = &active {
        candidates.push(ca.cert.clone());
    }
    candidates.extend(ca_bundle.iter().cloned());
    for p in &parsed {
        if let Parsed::Ok(l) = p {
            candidates.extend(l.bundle.iter().cloned());
        }
    }

    let (ca_plan, rotating) = if let Some(reason) = rotate_reason {
        let prior = choose_prior_ca(&candidates, &leaves, now);
        let action = if ca_observed.present().is_some() {
            Action::Rotate
        } else {
            Action::Create
        };
        (
            CaPlan {
                name: ca_name.into(),
                action,
                reason,
                active: None,
                version: ca_version,
                prior,
                bundle: vec![],
                pending: None,
            },
            true,
        )
    } else if let Some(reason) = create_reason {
        (
            CaPlan {
                name: ca_name.into(),
                action: Action::Create,
                reason,
                active: None,
                version: ca_version,
                prior: None,
                bundle: vec![],
                pending: None,
            },
            true,
        )
    } else if let Some(ca) = active {
        let current = if ca_bundle.is_empty() {
            vec![ca.cert.clone()]
        } else {
            ca_bundle.clone()
        };
        let bundle = steady_bundle(&ca.cert, &current, now);
        let (action, reason) = if same_certs(&bundle, &ca_bundle) {
            (
                Action::Keep,
                format!("valid until {}", ca.cert.not_after.date()),
            )
        } else {
            (
                Action::UpdateBundle,
                "trust bundle out of date (expired or extra CAs dropped)".to_string(),
            )
        };
        (
            CaPlan {
                name: ca_name.into(),
                action,
                reason,
                active: Some(ca),
                version: ca_version,
                prior: None,
                bundle,
                pending: None,
            },
            false,
        )
    } else {
        let reason = if config.tls.is_empty() {
            "no TLS Secrets are configured".to_string()
        } else {
            "not created: the existing leaves are valid and were issued by another tool's CA; a certgen CA is created at the next renewal".to_string()
        };
        (
            CaPlan {
                name: ca_name.into(),
                action: Action::Keep,
                reason,
                active: None,
                version: None,
                prior: None,
                bundle: vec![],
                pending: None,
            },
            false,
        )
    };

    let mut secrets = Vec::new();
    for ((t, p), reason) in config.tls.iter().zip(&parsed).zip(reasons) {
        let version = observed.get(&t.name).present().map(|s| s.version.clone());
        let not_after = match p {
            Parsed::Ok(l) => Some(l.cert.not_after),
            _ => None,
        };
        let (action, reason) = if rotating {
            match p {
                Parsed::Missing => (Action::Create, "missing".to_string()),
                _ => (Action::Renew, "signed by the new CA".to_string()),
            }
        } else if let Some(r) = reason {
            r
        } else {
            match (p, ca_plan.active.is_some()) {
                (Parsed::Ok(l), true) if !same_certs(&l.bundle, &ca_plan.bundle) => (
                    Action::UpdateBundle,
                    "ca.crt differs from the CA's trust bundle".to_string(),
                ),
                (Parsed::Ok(l), _) => (
                    Action::Keep,
                    format!("valid until {}", l.cert.not_after.date()),
                ),
                _ => unreachable!("missing and broken leaves always have a reason"),
            }
        };
        secrets.push(SecretPlan {
            name: t.name.clone(),
            kind: Kind::Tls,
            action,
            reason,
            version,
            not_after,
        });
    }
    secrets.extend(hmac_plans(&ctx, config, observed, options)?);
    Ok(Plan {
        ca: ca_plan,
        secrets,
        phase: Phase::Steady,
    })
}

fn hmac_plans(
    ctx: &Ctx<'_>,
    config: &Config,
    observed: &ObservedState,
    options: Options,
) -> Result<Vec<SecretPlan>, Invalid> {
    config
        .hmac
        .iter()
        .map(|h| plan_hmac(ctx, h, observed.get(&h.name), options))
        .collect()
}

/// The pending CA of a staged rotation (`next.crt`/`next.key` in the CA Secret), if any.
fn parse_pending(ctx: &Ctx<'_>, ca_name: &str, s: &StoredSecret) -> Result<Option<CaKey>, Invalid> {
    let (crt, key) = (s.data.get("next.crt"), s.data.get("next.key"));
    if crt.is_none() && key.is_none() {
        return Ok(None);
    }
    let loaded = (|| -> Result<CaKey, String> {
        let crt = crt.ok_or("next.key is present but next.crt is missing")?;
        let key = key.ok_or("next.crt is present but next.key is missing")?;
        let cert = parse_single_cert(crt).map_err(|e| format!("next.crt: {e}"))?;
        if !cert.is_ca {
            return Err(format!(
                "next.crt ({}) is not a CA certificate",
                cert.subject
            ));
        }
        CaKey::from_pem(cert, key).map_err(|e| format!("next.key: {e}"))
    })();
    match loaded {
        Ok(ca) => Ok(Some(ca)),
        // With --force an unusable pending CA is dropped and a rotation starts afresh.
        Err(problem) => ctx
            .broken(ca_name, format!("pending CA: {problem}"))
            .map(|_| None),
    }
}

fn plan_hmac(
    ctx: &Ctx<'_>,
    h: &HmacSecret,
    observed: &Observed,
    options: Options,
) -> Result<SecretPlan, Invalid> {
    let mut plan = SecretPlan {
        name: h.name.clone(),
        kind: Kind::Hmac,
        action: Action::Keep,
        reason: "present".into(),
        version: observed.present().map(|s| s.version.clone()),
        not_after: None,
    };
    match observed.present() {
        None => {
            plan.action = Action::Create;
            plan.reason = "missing".into();
        }
        Some(s) => {
            ctx.check_common(s, TYPE_OPAQUE)?;
            let usable = s.data.get(&h.key).is_some_and(|v| !v.is_empty());
            if !usable {
                if !options.force {
                    return Err(ctx.invalid(
                        &h.name,
                        format!("key {:?} is missing or empty", h.key),
                        "nothing was written; delete the Secret to have it recreated, or run with --force",
                    ));
                }
                plan.action = Action::Renew;
                plan.reason = format!("key {:?} missing; replaced because of --force", h.key);
            } else if options.rotate_hmac {
                plan.action = Action::Renew;
                plan.reason = "--rotate-hmac".into();
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests;
