//! What `create` and `patch` do, decided from what was read: pure functions. As in the main
//! job's planner, a plan generates no key: a Secret to create is planned as what it holds
//! ([`SecretToCreate`]: names, type, the CA and serving certificate to issue), and the run
//! fills it with keys when it writes ([`SecretToCreate::issue`]), so `--dry-run` generates
//! nothing and the adapter decides nothing.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use super::request::{CreateRequest, FailurePolicy, PatchRequest, Target};
use crate::certmanager::Injected;
use crate::config::{
    CaFile, Config, ConfigError, ConfigFile, DataKeysFile, SecretFile, SecretType, Usage,
    WebhookFile, WebhookKind,
};
use crate::outside::TargetObserved;
use crate::pki::{
    CaSpec, Cert, KeyAlgorithm, LeafSpec, SecretPem, Usages, bundle_pem, issue_ca, issue_leaf,
    load_signing_key, parse_cert_chain, parse_single_cert,
};
use crate::secret::{TYPE_OPAQUE, TYPE_TLS};
use crate::timefmt::HumanDuration;

/// A Secret as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservedSecret {
    Absent,
    Present {
        type_: String,
        data: BTreeMap<String, Vec<u8>>,
        /// When it was last written, by the API server's clock (`None`: unknown).
        written_at: Option<OffsetDateTime>,
    },
}

/// The Secret `create` writes (its key under [`SecretPem`], so it never reaches a log).
#[derive(Debug, Clone)]
pub struct NewSecret {
    pub namespace: String,
    pub name: String,
    pub type_: String,
    pub ca: (String, Vec<u8>),
    pub cert: (String, Vec<u8>),
    pub key: (String, SecretPem),
    /// For the report: the serving certificate.
    pub leaf: Cert,
}

/// A Secret `create` will create, before its keys exist: where, with which type and keys, and
/// the CA and serving certificate issued into it when the run writes it.
#[derive(Debug, Clone)]
pub struct SecretToCreate {
    pub namespace: String,
    pub name: String,
    pub type_: String,
    /// The data keys of the CA, the serving certificate and its key.
    pub keys: (String, String, String),
    pub ca: CaSpec,
    pub leaf: LeafSpec,
}

impl SecretToCreate {
    /// When its serving certificate will expire if issued at `now` (the report's "valid
    /// until", with no key generated).
    pub fn not_after(&self, now: OffsetDateTime) -> OffsetDateTime {
        let last = |d: std::time::Duration| {
            time::Duration::try_from(d)
                .ok()
                .and_then(|d| now.checked_add(d))
                .unwrap_or_else(|| time::PrimitiveDateTime::MAX.assume_utc())
        };
        last(self.leaf.validity).min(last(self.ca.validity))
    }

    /// The Secret with its keys: a CA and a serving certificate it signed, issued at `now`.
    pub fn issue(&self, now: OffsetDateTime) -> Result<NewSecret, ConfigError> {
        let failed = |e: crate::pki::IssueError| refuse("--host", e.to_string());
        let (ca, ca_issued) = issue_ca(&self.ca, now).map_err(failed)?;
        let leaf = issue_leaf(&self.leaf, &ca, now).map_err(failed)?;
        Ok(NewSecret {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            type_: self.type_.clone(),
            ca: (self.keys.0.clone(), ca_issued.cert.pem().into_bytes()),
            cert: (
                self.keys.1.clone(),
                bundle_pem(std::slice::from_ref(&leaf.cert)).into_bytes(),
            ),
            key: (self.keys.2.clone(), leaf.key),
            leaf: leaf.cert,
        })
    }
}

/// What `create` does.
#[derive(Debug, Clone)]
pub enum CreatePlan {
    /// The Secret does not exist: create it.
    Create(Box<SecretToCreate>),
    /// The Secret exists and is usable: no write. Each note is a warning for the operator.
    Keep { notes: Vec<String> },
    /// The Secret exists and is usable, and `caBundle` targets were named: certgen's main job
    /// runs on `config` (this Secret in its layout, certgen's CA Secret, the targets following
    /// the Secret's CA), renewing whatever is due in the staged order (trust, the gate, the
    /// serving certificate, the gate, the cleanup), or writing nothing when nothing is due.
    Renew {
        config: Box<Config>,
        /// Why it is due, if it is (empty: nothing is, or a renewal in progress continues).
        due: Vec<String>,
        notes: Vec<String>,
        /// The certificates outlive `--validity`: rotate to a new CA (staged) even if the
        /// engine's own rules see nothing due.
        rotate: bool,
    },
}

fn refuse(source: &str, message: String) -> ConfigError {
    ConfigError {
        source_name: source.to_string(),
        message,
    }
}

/// The CA bundle and certificate of an existing Secret `create` keeps: exactly the three keys
/// it writes, each usable (the bundle and certificate parse, the key matches the certificate)
/// and a CA in the bundle that signed the certificate. Refused otherwise, naming `object`.
fn stored_pair(
    req: &CreateRequest,
    data: &BTreeMap<String, Vec<u8>>,
    object: &str,
) -> Result<(Vec<Cert>, Cert), ConfigError> {
    let expected = req.keys.all();
    let foreign: Vec<&str> = data
        .keys()
        .map(String::as_str)
        .filter(|k| !expected.contains(k))
        .collect();
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|k| !data.contains_key(*k))
        .collect();
    if !foreign.is_empty() || !missing.is_empty() {
        let mut what = Vec::new();
        if !foreign.is_empty() {
            what.push(format!(
                "keys certgen does not write: {}",
                foreign.join(", ")
            ));
        }
        if !missing.is_empty() {
            what.push(format!("missing: {}", missing.join(", ")));
        }
        return Err(refuse(
            object,
            format!(
                "exists but is not the Secret `create` writes with keys {} ({}); nothing was written. If another tool owns it, pass another --secret-name; if it was created with other --ca-name/--cert-name/--key-name, pass those; to start over, delete it",
                expected.join(", "),
                what.join("; ")
            ),
        ));
    }
    let unusable = |key: &str, why: String| {
        refuse(
            object,
            format!(
                "{key}: {why}; nothing was written. Delete the Secret to have it created again"
            ),
        )
    };
    let bundle =
        parse_cert_chain(&data[&req.keys.ca]).map_err(|e| unusable(&req.keys.ca, e.to_string()))?;
    let leaf = parse_single_cert(&data[&req.keys.cert])
        .map_err(|e| unusable(&req.keys.cert, e.to_string()))?;
    load_signing_key(&leaf, &data[&req.keys.key])
        .map_err(|e| unusable(&req.keys.key, e.to_string()))?;
    if !bundle.iter().any(|ca| ca.signed(&leaf)) {
        return Err(unusable(
            &req.keys.ca,
            format!("no CA in it signed the certificate in {}", req.keys.cert),
        ));
    }
    Ok((bundle, leaf))
}

/// `create`: a new Secret when none exists; otherwise the existing one is checked and kept.
///
/// kube-webhook-certgen keeps any existing Secret that has a CA key. certgen keeps one that
/// holds exactly the three keys it writes with a CA that signs the certificate, whose key
/// matches; anything else is refused (exit 2, nothing written), since patching webhooks from a
/// Secret nobody can serve with breaks every admission call.
pub fn plan_create(
    req: &CreateRequest,
    observed: &ObservedSecret,
    now: OffsetDateTime,
) -> Result<CreatePlan, ConfigError> {
    let object = format!("Secret {}/{}", req.namespace, req.secret_name);
    let data = match observed {
        ObservedSecret::Absent => return Ok(CreatePlan::Create(Box::new(to_create(req)))),
        ObservedSecret::Present { type_, data, .. } => {
            let mut notes = Vec::new();
            if *type_ != req.secret_type {
                notes.push(format!(
                    "{object} is of type {type_}, not {} (--secret-type): kept as it is",
                    req.secret_type
                ));
            }
            (data, notes)
        }
    };
    let (data, mut notes) = data;
    let (bundle, leaf) = stored_pair(req, data, &object)?;
    let stored_type = match observed {
        ObservedSecret::Present { type_, .. } => type_.as_str(),
        ObservedSecret::Absent => unreachable!("an absent Secret is created above"),
    };
    // Without a target nothing is renewed, so a Secret the engine could not take (a --host
    // it would refuse) is kept as before, judged on expiry alone.
    let config = match engine_config(req, stored_type) {
        Err(_) if req.renewal.targets.is_empty() => None,
        other => other?,
    };
    let mut due = due(&config, &bundle, &leaf, now);
    let outlived = config
        .as_ref()
        .map(|_| outlives(&bundle, &leaf, req.renewal.validity))
        .unwrap_or_default();
    let rotate = !outlived.is_empty();
    due.extend(outlived);
    if req.renewal.targets.is_empty() {
        if !due.is_empty() {
            notes.push(format!(
                "{object} is due for renewal ({}); kept as it is: pass --webhook-name (or --apiservice-name) so that create can renew it with the caBundle in step (trust first, then the serving certificate, then the cleanup); a CA replaced without its caBundle in step makes the API server reject the webhook",
                due.join("; ")
            ));
        }
        return Ok(CreatePlan::Keep { notes });
    }
    let Some(config) = config else {
        notes.push(format!(
            "{object} is of type {stored_type}: certgen renews Secrets of type {TYPE_OPAQUE} or {TYPE_TLS} only; kept as it is"
        ));
        return Ok(CreatePlan::Keep { notes });
    };
    Ok(CreatePlan::Renew {
        config: Box::new(config),
        due,
        notes,
        rotate,
    })
}

/// Why the Secret's certificates outlive `--validity`: its CA or serving certificate lasts
/// longer than asked (by more than a tenth, which covers the backdating of `notBefore`). This is
/// how a Secret of kube-webhook-certgen's 100-year certificates moves to short ones: `create`
/// with `--validity` and a caBundle target rotates it, staged, once; the new certificates last
/// `--validity`, so later runs find nothing to do.
fn outlives(bundle: &[Cert], leaf: &Cert, validity: std::time::Duration) -> Vec<String> {
    let limit = time::Duration::try_from(validity + validity / 10).unwrap_or(time::Duration::MAX);
    let lifetime = |c: &Cert| c.not_after - c.not_before;
    // In whole days, as --validity is usually written (36500d), or as --validity says it.
    let days = |d: time::Duration| match d.whole_days() {
        0 => HumanDuration(d.unsigned_abs()).to_string(),
        n => format!("{n}d"),
    };
    let asked = HumanDuration(validity);
    let mut why = Vec::new();
    if let Some(ca) = bundle.iter().find(|ca| ca.signed(leaf))
        && lifetime(ca) > limit
    {
        why.push(format!(
            "its CA lasts {}, longer than --validity {asked}",
            days(lifetime(ca))
        ));
    }
    if lifetime(leaf) > limit {
        why.push(format!(
            "the serving certificate lasts {}, longer than --validity {asked}",
            days(lifetime(leaf))
        ));
    }
    why
}

/// Why the Secret is due, by the rules of the engine's config: its CA within `--renew-before`
/// (or expired), the serving certificate within half of it (or expired), or its SANs not
/// `--host`'s. Without a config (a Secret of a type certgen does not renew): expiry and SANs.
fn due(config: &Option<Config>, bundle: &[Cert], leaf: &Cert, now: OffsetDateTime) -> Vec<String> {
    let mut why = Vec::new();
    let Some(config) = config else {
        if leaf.is_expired_at(now) {
            why.push(format!(
                "the serving certificate expired at {}",
                crate::timefmt::rfc3339(leaf.not_after)
            ));
        }
        return why;
    };
    let t = &config.tls[0];
    if let Some(ca) = bundle.iter().find(|ca| ca.signed(leaf))
        && let Some(d) = crate::plan::rules::due(ca, config.ca.renew_before, now)
    {
        why.push(format!("its CA {d}"));
    }
    if let Some(d) = crate::plan::rules::due(leaf, t.renew_before, now) {
        why.push(format!("the serving certificate {d}"));
    }
    if let Some(d) = crate::plan::rules::san_drift(leaf, t) {
        let mut have: Vec<String> = leaf.dns_names.clone();
        have.extend(leaf.ip_addresses.iter().map(|ip| ip.to_string()));
        why.push(format!(
            "the serving certificate is valid for {} but --host asks for {} ({d})",
            have.join(","),
            t.leaf
                .dns_names
                .iter()
                .cloned()
                .chain(t.leaf.ip_addresses.iter().map(|ip| ip.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    why
}

/// The configuration certgen's main job renews the Secret with: the Secret in its layout
/// (kube-webhook-certgen's keys and type), certgen's CA Secret (`--ca-secret-name`), and the
/// `caBundle` targets following the Secret's CA. The CA lasts `--validity` and is due
/// `--renew-before` ahead; the serving certificate lasts as long, clipped to its CA, and is due
/// half as far ahead, so a renewal always replaces the CA first and the certificate with it.
/// `None` when the Secret's type is one certgen does not write.
fn engine_config(req: &CreateRequest, stored_type: &str) -> Result<Option<Config>, ConfigError> {
    match config_file(req, stored_type) {
        Some(file) => Config::from_built(file, "--host").map(Some),
        None => Ok(None),
    }
}

/// The config file certgen's main job renews the Secret with (see `engine_config`), for a
/// Secret of `secret_type` (`create --print-config` prints it for `--secret-type`); `None` for
/// a type certgen does not write.
pub fn config_file(req: &CreateRequest, secret_type: &str) -> Option<ConfigFile> {
    let r = &req.renewal;
    let secret_type = match secret_type {
        TYPE_OPAQUE => TYPE_OPAQUE,
        TYPE_TLS => TYPE_TLS,
        _ => return None,
    };
    // A certificate's common name holds 64 characters at most; the SANs carry the names.
    let common_name: String = req.hosts[0].chars().take(64).collect();
    let file = ConfigFile {
        clusters: Vec::new(),
        cluster_trust_bundles: Vec::new(),
        renewal: None,
        name: req.secret_name.clone(),
        namespace: req.namespace.clone(),
        cluster_domain: None,
        ca: CaFile {
            secret_name: Some(r.ca_secret_name.clone()),
            common_name: format!("{}-ca", req.secret_name).chars().take(64).collect(),
            key_algorithm: KeyAlgorithm::EcdsaP256,
            validity: HumanDuration(r.validity),
            renew_before: HumanDuration(r.renew_before),
            data_keys: None,
            secret_type: None,
        },
        secrets: vec![SecretFile {
            name: req.secret_name.clone(),
            r#type: SecretType::Tls,
            common_name: Some(common_name),
            dns_names: req.dns_names.clone(),
            ip_addresses: req.ip_addresses.iter().map(|ip| ip.to_string()).collect(),
            usages: Some(vec![Usage::Server]),
            key_algorithm: Some(KeyAlgorithm::EcdsaP256),
            validity: Some(HumanDuration(r.validity)),
            renew_before: Some(HumanDuration(r.renew_before / 2)),
            key: None,
            bytes: None,
            data_keys: Some(DataKeysFile {
                bundle: Some(req.keys.ca.clone()),
                cert: Some(req.keys.cert.clone()),
                key: Some(req.keys.key.clone()),
            }),
            secret_type: Some(secret_type.to_string()),
        }],
        consumers: Vec::new(),
        labels: BTreeMap::new(),
        webhooks: r
            .targets
            .iter()
            .map(|t| WebhookFile {
                kind: t.kind,
                name: t.name.clone(),
                ca_bundle_from: req.secret_name.clone(),
            })
            .collect(),
    };
    Some(file)
}

/// The Secret kube-webhook-certgen creates: a CA named after the Secret and a serving
/// certificate for `--host`, ECDSA P-256, valid `--validity`.
fn to_create(req: &CreateRequest) -> SecretToCreate {
    SecretToCreate {
        namespace: req.namespace.clone(),
        name: req.secret_name.clone(),
        type_: req.secret_type.clone(),
        keys: (
            req.keys.ca.clone(),
            req.keys.cert.clone(),
            req.keys.key.clone(),
        ),
        ca: CaSpec {
            common_name: format!("{}-ca", req.secret_name),
            validity: req.renewal.validity,
            key_algorithm: KeyAlgorithm::EcdsaP256,
        },
        leaf: LeafSpec {
            common_name: req.hosts[0].clone(),
            dns_names: req.dns_names.clone(),
            ip_addresses: req.ip_addresses.clone(),
            usages: Usages {
                server: true,
                client: false,
            },
            validity: req.renewal.validity,
            key_algorithm: KeyAlgorithm::EcdsaP256,
        },
    }
}

/// One webhook entry of a configuration, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedEntry {
    pub name: String,
    pub ca_bundle: Vec<u8>,
    pub failure_policy: Option<String>,
}

/// A `patch` target as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservedTarget {
    Absent,
    Present {
        /// Every webhook entry (one, unnamed, for an APIService).
        entries: Vec<ObservedEntry>,
        /// An APIService's `insecureSkipTLSVerify`.
        insecure_skip_tls_verify: bool,
        /// cert-manager's CA injector writes its `caBundle`: `patch` leaves it alone.
        injected: Option<Injected>,
    },
}

impl From<&TargetObserved> for ObservedTarget {
    /// What `patch` plans from of a target read through the `caBundle` seam.
    fn from(read: &TargetObserved) -> Self {
        let TargetObserved::Present(read) = read else {
            return Self::Absent;
        };
        Self::Present {
            entries: read
                .bundles
                .iter()
                .zip(&read.entries)
                .map(|(bundle, e)| ObservedEntry {
                    name: e.name.clone(),
                    ca_bundle: bundle.clone(),
                    failure_policy: e.failure_policy.clone(),
                })
                .collect(),
            insecure_skip_tls_verify: read.insecure_skip_tls_verify,
            injected: read.injected.clone(),
        }
    }
}

/// One target's write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetWrite {
    pub target: Target,
    /// The entries' names, for a server-side apply.
    pub entries: Vec<String>,
    /// What changes, for the report: `caBundle`, `failurePolicy`, `insecureSkipTLSVerify`.
    pub changes: Vec<&'static str>,
    /// The `caBundle` it gets: the Secret's CA, and the prior CA while it is kept.
    pub bundle: Vec<u8>,
    /// Whether the bundle keeps a prior CA the Secret no longer holds.
    pub keeps_prior: bool,
    /// The annotations the write sets (certgen's mark and record of undos, with
    /// `--patch-mode update`), planned from the target as read: see
    /// `crate::run::kwc::plan_targets`.
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// What `patch` does.
#[derive(Debug, Clone)]
pub struct PatchPlan {
    pub failure_policy: Option<FailurePolicy>,
    pub writes: Vec<TargetWrite>,
    /// Targets that already hold their bundle (and policy): no write; `true` when that bundle
    /// still keeps a prior CA.
    pub unchanged: Vec<(Target, bool)>,
    /// Targets cert-manager's CA injector writes: never written, said why.
    pub injected: Vec<(Target, Injected)>,
}

/// The CA bundle `patch` copies: the Secret's `--ca-name` key (`ca` when it is absent, as
/// kube-webhook-certgen reads it), which must be PEM certificates that sign the Secret's
/// serving certificate when it has one, so a `caBundle` never distrusts what the webhook serves.
pub fn patch_bundle(
    req: &PatchRequest,
    observed: &ObservedSecret,
) -> Result<SecretBundle, ConfigError> {
    let object = format!("Secret {}/{}", req.namespace, req.secret_name);
    let (type_, data, written_at) = match observed {
        ObservedSecret::Absent => {
            return Err(refuse(
                "--secret-name",
                format!("{object} does not exist: run `create` first; nothing was written"),
            ));
        }
        ObservedSecret::Present {
            type_,
            data,
            written_at,
        } => (type_, data, *written_at),
    };
    if let Some(want) = &req.secret_type
        && want != type_
    {
        return Err(refuse(
            "--secret-type",
            format!("{object} is of type {type_}, not {want}; nothing was written"),
        ));
    }
    let (key, pem) = match data.get(&req.ca_name) {
        Some(pem) => (req.ca_name.as_str(), pem),
        None => match data.get("ca") {
            Some(pem) => ("ca", pem),
            None => {
                return Err(refuse(
                    &object,
                    format!(
                        "has no {} key (--ca-name) and no ca key; its keys: {}; nothing was written",
                        req.ca_name,
                        data.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        },
    };
    let bundle = parse_cert_chain(pem)
        .map_err(|e| refuse(&object, format!("{key}: {e}; nothing was written")))?;
    // The serving certificate, when the Secret holds one: any other key holding exactly one
    // certificate that is not a CA.
    for (other, value) in data.iter().filter(|(k, _)| k.as_str() != key) {
        let Ok(leaf) = parse_single_cert(value) else {
            continue;
        };
        if leaf.is_ca {
            continue;
        }
        if !bundle.iter().any(|ca| ca.signed(&leaf)) {
            return Err(refuse(
                &object,
                format!(
                    "no CA in {key} signed the certificate in {other}: a caBundle from it would make the API server reject the webhook; nothing was written"
                ),
            ));
        }
    }
    Ok(SecretBundle {
        pem: pem.clone(),
        cas: bundle,
        written_at,
    })
}

/// The Secret's CA bundle as `patch` copies it.
#[derive(Debug, Clone)]
pub struct SecretBundle {
    /// As stored.
    pub pem: Vec<u8>,
    pub cas: Vec<Cert>,
    /// When the Secret was last written: the webhook may serve a certificate signed by a CA
    /// it no longer holds until `--propagation-delay` after this.
    pub written_at: Option<OffsetDateTime>,
}

/// The bundle a target gets: the Secret's, plus the one unexpired CA of the target's current
/// `caBundle` that the Secret no longer holds, while the webhook may still serve a certificate
/// it signed (until `delay` after the Secret's last write). So a Secret replaced in one step
/// (deleted, `create`d again) never leaves the API server distrusting the certificate the
/// webhook still serves; the prior CA goes on the first `patch` after the delay.
fn in_step(
    secret: &SecretBundle,
    current: &[ObservedEntry],
    now: OffsetDateTime,
    delay: std::time::Duration,
) -> (Vec<u8>, Option<Cert>) {
    // A delay of 0 says the webhook serves a new certificate at once: copy blindly, as
    // kube-webhook-certgen does (write times are rounded up to the next second).
    let settled = delay.is_zero()
        || secret.written_at.is_some_and(|at| {
            now >= at + time::Duration::try_from(delay).unwrap_or(time::Duration::MAX)
        });
    if settled || secret.cas.len() != 1 {
        return (secret.pem.clone(), None);
    }
    let held = |c: &Cert| {
        secret
            .cas
            .iter()
            .any(|s| s.fingerprint() == c.fingerprint())
    };
    let prior = current
        .iter()
        .filter_map(|e| parse_cert_chain(&e.ca_bundle).ok())
        .flatten()
        .find(|c| c.is_ca && !c.is_expired_at(now) && !held(c));
    match prior {
        None => (secret.pem.clone(), None),
        Some(prior) => {
            let mut pem = secret.pem.clone();
            if !pem.ends_with(b"\n") {
                pem.push(b'\n');
            }
            pem.extend_from_slice(prior.pem().as_bytes());
            (pem, Some(prior))
        }
    }
}

/// `patch`: every target must exist (all are read before any is written); a target is written
/// only when one of its entries lacks its bundle (see `in_step`) or the failure policy.
pub fn plan_patch(
    req: &PatchRequest,
    secret: &SecretBundle,
    observed: &[(Target, ObservedTarget)],
    now: OffsetDateTime,
) -> Result<PatchPlan, ConfigError> {
    let mut writes = Vec::new();
    let mut unchanged = Vec::new();
    let mut injected = Vec::new();
    for (target, state) in observed {
        let ObservedTarget::Present {
            entries,
            insecure_skip_tls_verify,
            injected: by,
        } = state
        else {
            return Err(refuse(
                target.flag,
                format!(
                    "{} does not exist: install the chart's webhook configuration first, or fix the name; nothing was written",
                    target.describe()
                ),
            ));
        };
        // Two writers on one caBundle would overwrite each other on every run: the injector's
        // wins, whatever certgen would write (its failure policy included).
        if let Some(by) = by {
            injected.push((target.clone(), by.clone()));
            continue;
        }
        let (bundle, prior) = in_step(secret, entries, now, req.propagation_delay);
        let mut changes = Vec::new();
        if entries.iter().any(|e| e.ca_bundle != bundle) {
            changes.push("caBundle");
        }
        if let Some(policy) = req.failure_policy
            && target.kind != WebhookKind::ApiService
            && entries
                .iter()
                .any(|e| e.failure_policy.as_deref() != Some(policy.as_str()))
        {
            changes.push("failurePolicy");
        }
        if target.kind == WebhookKind::ApiService && *insecure_skip_tls_verify {
            changes.push("insecureSkipTLSVerify");
        }
        if changes.is_empty() {
            unchanged.push((target.clone(), prior.is_some()));
        } else {
            writes.push(TargetWrite {
                target: target.clone(),
                entries: entries.iter().map(|e| e.name.clone()).collect(),
                changes,
                bundle,
                keeps_prior: prior.is_some(),
                annotations: Default::default(),
            });
        }
    }
    Ok(PatchPlan {
        failure_policy: req.failure_policy,
        writes,
        unchanged,
        injected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kwc::request::{Keys, PatchMode, Renewal};

    fn now() -> OffsetDateTime {
        time::macros::datetime!(2026-11-25 00:00 UTC)
    }

    fn req() -> CreateRequest {
        CreateRequest {
            namespace: "ns".into(),
            secret_name: "s".into(),
            secret_type: "Opaque".into(),
            keys: Keys {
                ca: "ca".into(),
                cert: "cert".into(),
                key: "key".into(),
            },
            hosts: vec!["svc".into(), "10.0.0.1".into()],
            dns_names: vec!["svc".into()],
            ip_addresses: vec!["10.0.0.1".parse().unwrap()],
            renewal: Renewal {
                validity: crate::kwc::VALIDITY,
                renew_before: crate::kwc::VALIDITY / 3,
                targets: Vec::new(),
                ca_secret_name: "s-ca".into(),
                propagation_delay: std::time::Duration::from_secs(120),
                timeout: std::time::Duration::from_secs(300),
            },
        }
    }

    /// `create --print-config` prints the config its renewals use: read back as a config
    /// file, it is the same config (layout, CA Secret, windows, targets), so `check --config`
    /// judges the Secret with `create`'s own renewal windows.
    #[test]
    fn the_printed_config_is_the_one_renewals_use() {
        let mut r = short(true);
        r.renewal.ca_secret_name = "certgen-ca".into();
        let file = config_file(&r, "Opaque").unwrap();
        let yaml = serde_saphyr::to_string(&file).unwrap();
        let back = Config::from_built(ConfigFile::parse(&yaml).unwrap(), "printed").unwrap();
        let used = engine_config(&r, "Opaque").unwrap().unwrap();
        assert_eq!(format!("{back:?}"), format!("{used:?}"));
        assert_eq!(back.ca.secret_name, "certgen-ca");
        assert_eq!(back.ca.renew_before, std::time::Duration::from_secs(600));
        assert_eq!(
            back.tls[0].renew_before,
            std::time::Duration::from_secs(300)
        );
        assert_eq!(back.tls[0].layout.bundle, "ca");
        assert_eq!(back.webhooks.len(), 1);
        // A type certgen does not write has no config.
        assert!(config_file(&r, "kubernetes.io/dockerconfigjson").is_none());
    }

    /// `req()` with 1-hour certificates due 10 minutes ahead, and a webhook to follow.
    fn short(targets: bool) -> CreateRequest {
        let mut r = req();
        r.renewal.validity = std::time::Duration::from_secs(3600);
        r.renewal.renew_before = std::time::Duration::from_secs(600);
        if targets {
            r.renewal.targets = vec![target(WebhookKind::ValidatingWebhookConfiguration)];
        }
        r
    }

    fn created_with(r: &CreateRequest) -> NewSecret {
        match plan_create(r, &ObservedSecret::Absent, now()).unwrap() {
            CreatePlan::Create(s) => {
                let made = s.issue(now()).unwrap();
                assert_eq!(made.leaf.not_after, s.not_after(now()), "the report's date");
                made
            }
            _ => panic!("expected a create"),
        }
    }

    #[test]
    fn the_first_create_issues_for_validity() {
        let s = created_with(&short(false));
        assert_eq!(s.leaf.not_after - now(), time::Duration::hours(1));
        let ca = parse_single_cert(&s.ca.1).unwrap();
        assert_eq!(ca.not_after - now(), time::Duration::hours(1));
    }

    #[test]
    fn a_due_secret_without_targets_is_kept_with_a_warning() {
        let r = short(false);
        let s = created_with(&r);
        // Not due yet: kept, no note.
        let CreatePlan::Keep { notes } = plan_create(&r, &stored(&s), now()).unwrap() else {
            panic!("expected keep")
        };
        assert!(notes.is_empty(), "{notes:?}");
        // Within --renew-before of its CA's expiry: kept, with one warning saying what to pass.
        let later = now() + time::Duration::minutes(55);
        let CreatePlan::Keep { notes } = plan_create(&r, &stored(&s), later).unwrap() else {
            panic!("expected keep")
        };
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("Secret ns/s is due for renewal (its CA expires in")
                && notes[0].contains("pass --webhook-name (or --apiservice-name)"),
            "{notes:?}"
        );
        // Expired: the same.
        let CreatePlan::Keep { notes } =
            plan_create(&r, &stored(&s), now() + time::Duration::hours(2)).unwrap()
        else {
            panic!("expected keep")
        };
        assert!(notes[0].contains("expired"), "{notes:?}");
    }

    #[test]
    fn a_host_the_engine_refuses_is_kept_without_targets_and_refused_with_them() {
        // kube-webhook-certgen takes `_` in a DNS name; certgen's config does not.
        let mut r = req();
        r.hosts = vec!["a_b".into()];
        r.dns_names = vec!["a_b".into()];
        r.ip_addresses.clear();
        let s = created_with(&r);
        let CreatePlan::Keep { notes } = plan_create(&r, &stored(&s), now()).unwrap() else {
            panic!("expected keep")
        };
        assert!(notes.is_empty(), "{notes:?}");
        r.renewal.targets = vec![target(WebhookKind::ValidatingWebhookConfiguration)];
        let e = plan_create(&r, &stored(&s), now()).unwrap_err();
        assert_eq!(e.source_name, "--host");
    }

    #[test]
    fn with_targets_the_engine_renews_in_the_secrets_own_layout() {
        let r = short(true);
        let s = created_with(&r);
        let plan = |at| plan_create(&r, &stored(&s), at).unwrap();
        // Nothing due: the engine still runs (it writes nothing, or finishes a renewal in
        // progress), with no reason given.
        let CreatePlan::Renew {
            config, due, notes, ..
        } = plan(now())
        else {
            panic!("expected the engine")
        };
        assert!(due.is_empty() && notes.is_empty(), "{due:?} {notes:?}");
        let t = &config.tls[0];
        assert_eq!(t.name, "s");
        assert_eq!(
            (
                t.layout.bundle.as_str(),
                t.layout.cert.as_str(),
                t.layout.key.as_str(),
                t.layout.type_
            ),
            ("ca", "cert", "key", TYPE_OPAQUE)
        );
        assert_eq!(config.ca.secret_name, "s-ca");
        assert_eq!(config.ca.renew_before, std::time::Duration::from_secs(600));
        assert_eq!(t.renew_before, std::time::Duration::from_secs(300));
        assert_eq!(t.leaf.dns_names, ["svc"]);
        assert_eq!(config.webhooks.len(), 1);
        assert_eq!(config.webhooks[0].bundle_from, "s");
        assert_eq!(config.webhooks[0].name, "w");
        // Due: the same, with the reason.
        let CreatePlan::Renew { due, .. } = plan(now() + time::Duration::minutes(55)) else {
            panic!("expected the engine")
        };
        assert!(due[0].starts_with("its CA expires in"), "{due:?}");
        // Other hosts count as due.
        let mut other = r.clone();
        other.dns_names = vec!["other".into()];
        let CreatePlan::Renew { due, .. } = plan_create(&other, &stored(&s), now()).unwrap() else {
            panic!("expected the engine")
        };
        assert!(due[0].contains("--host asks for other"), "{due:?}");
        // A Secret of a type certgen does not write: kept, with a note.
        let ObservedSecret::Present { data, .. } = stored(&s) else {
            unreachable!()
        };
        let custom = ObservedSecret::Present {
            type_: "example.com/webhook".into(),
            data,
            written_at: None,
        };
        let CreatePlan::Keep { notes } = plan_create(&r, &custom, now()).unwrap() else {
            panic!("expected keep")
        };
        assert!(
            notes
                .iter()
                .any(|n| n.contains("certgen renews Secrets of type")),
            "{notes:?}"
        );
    }

    #[test]
    fn certificates_that_outlive_validity_rotate_once_and_only_with_targets() {
        // kube-webhook-certgen's Secret: 100-year certificates.
        let mut old = req();
        old.renewal.targets = vec![target(WebhookKind::ValidatingWebhookConfiguration)];
        let s = created_with(&old);
        // The same Secret with the default --validity: nothing outlives it.
        let CreatePlan::Renew { due, rotate, .. } = plan_create(&old, &stored(&s), now()).unwrap()
        else {
            panic!("expected the engine")
        };
        assert!(due.is_empty() && !rotate, "{due:?}");
        // --validity=90d: both outlive it, and the engine is asked to rotate.
        let mut short = old.clone();
        short.renewal.validity = std::time::Duration::from_secs(90 * 86_400);
        short.renewal.renew_before = std::time::Duration::from_secs(30 * 86_400);
        let CreatePlan::Renew { due, rotate, .. } =
            plan_create(&short, &stored(&s), now()).unwrap()
        else {
            panic!("expected the engine")
        };
        assert!(rotate, "{due:?}");
        assert_eq!(
            due,
            [
                "its CA lasts 36500d, longer than --validity 90d",
                "the serving certificate lasts 36500d, longer than --validity 90d"
            ]
        );
        // Once rotated, the new certificates last --validity: nothing more to do.
        let renewed = created_with(&short);
        let CreatePlan::Renew { due, rotate, .. } =
            plan_create(&short, &stored(&renewed), now()).unwrap()
        else {
            panic!("expected the engine")
        };
        assert!(due.is_empty() && !rotate, "{due:?}");
        // Without a target: kept, with the reason and what to pass.
        short.renewal.targets.clear();
        let CreatePlan::Keep { notes } = plan_create(&short, &stored(&s), now()).unwrap() else {
            panic!("expected keep")
        };
        assert!(
            notes[0].contains("lasts 36500d, longer than --validity 90d")
                && notes[0].contains("pass --webhook-name"),
            "{notes:?}"
        );
    }

    fn stored(s: &NewSecret) -> ObservedSecret {
        ObservedSecret::Present {
            written_at: Some(now()),
            type_: s.type_.clone(),
            data: BTreeMap::from([
                (s.ca.0.clone(), s.ca.1.clone()),
                (s.cert.0.clone(), s.cert.1.clone()),
                (s.key.0.clone(), s.key.1.expose().as_bytes().to_vec()),
            ]),
        }
    }

    fn created() -> NewSecret {
        created_with(&req())
    }

    #[test]
    fn an_absent_secret_is_created_like_kube_webhook_certgens() {
        let s = created();
        assert_eq!(s.type_, "Opaque");
        assert_eq!(
            (s.ca.0.as_str(), s.cert.0.as_str(), s.key.0.as_str()),
            ("ca", "cert", "key")
        );
        assert_eq!(s.leaf.dns_names, ["svc"]);
        assert_eq!(
            s.leaf.ip_addresses,
            ["10.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        let ca = parse_single_cert(&s.ca.1).unwrap();
        assert!(ca.is_ca && ca.signed(&s.leaf));
        // 100 years, as kube-webhook-certgen's.
        assert!(s.leaf.not_after - now() > time::Duration::days(99 * 365));
    }

    #[test]
    fn an_existing_secret_that_is_usable_is_kept_without_a_write() {
        let s = created();
        let CreatePlan::Keep { notes } = plan_create(&req(), &stored(&s), now()).unwrap() else {
            panic!("expected keep")
        };
        assert!(notes.is_empty(), "{notes:?}");
        // Other hosts: kept, with a note (kube-webhook-certgen keeps it silently).
        let mut other = req();
        other.dns_names = vec!["other".into()];
        let CreatePlan::Keep { notes } = plan_create(&other, &stored(&s), now()).unwrap() else {
            panic!("expected keep")
        };
        assert!(notes[0].contains("--host asks for"), "{notes:?}");
    }

    #[test]
    fn a_secret_with_foreign_or_missing_keys_is_refused() {
        let s = created();
        let ObservedSecret::Present {
            type_, mut data, ..
        } = stored(&s)
        else {
            unreachable!()
        };
        data.insert("tls.crt".into(), b"x".to_vec());
        let e = plan_create(
            &req(),
            &ObservedSecret::Present {
                type_: type_.clone(),
                data: data.clone(),
                written_at: None,
            },
            now(),
        )
        .unwrap_err();
        assert_eq!(e.source_name, "Secret ns/s");
        assert!(
            e.message.contains("keys certgen does not write: tls.crt"),
            "{e}"
        );
        data.remove("tls.crt");
        data.remove("key");
        let e = plan_create(
            &req(),
            &ObservedSecret::Present {
                type_,
                data,
                written_at: None,
            },
            now(),
        )
        .unwrap_err();
        assert!(e.message.contains("missing: key"), "{e}");
    }

    #[test]
    fn a_secret_whose_ca_did_not_sign_its_certificate_is_refused() {
        let a = created();
        let b = created();
        let ObservedSecret::Present {
            type_, mut data, ..
        } = stored(&a)
        else {
            unreachable!()
        };
        data.insert("ca".into(), b.ca.1.clone());
        let e = plan_create(
            &req(),
            &ObservedSecret::Present {
                type_,
                data,
                written_at: None,
            },
            now(),
        )
        .unwrap_err();
        assert!(e.message.contains("no CA in it signed"), "{e}");
    }

    fn patch_req(policy: Option<FailurePolicy>) -> PatchRequest {
        PatchRequest {
            namespace: "ns".into(),
            secret_name: "s".into(),
            secret_type: None,
            ca_name: "ca".into(),
            targets: vec![target(WebhookKind::ValidatingWebhookConfiguration)],
            failure_policy: policy,
            mode: PatchMode::Update,
            propagation_delay: std::time::Duration::from_secs(120),
        }
    }

    fn target(kind: WebhookKind) -> Target {
        Target {
            kind,
            name: "w".into(),
            flag: "--webhook-name",
        }
    }

    fn entries(bundle: &[u8], policy: Option<&str>) -> ObservedTarget {
        ObservedTarget::Present {
            entries: ["a", "b"]
                .iter()
                .map(|n| ObservedEntry {
                    name: n.to_string(),
                    ca_bundle: bundle.to_vec(),
                    failure_policy: policy.map(str::to_string),
                })
                .collect(),
            insecure_skip_tls_verify: false,
            injected: None,
        }
    }

    #[test]
    fn patch_never_writes_a_target_the_ca_injector_manages() {
        let s = created();
        let secret = patch_bundle(&patch_req(None), &stored(&s)).unwrap();
        let t = target(WebhookKind::MutatingWebhookConfiguration);
        let by = Injected {
            annotation: crate::certmanager::INJECT_CA_FROM,
            value: "ns/serving".into(),
        };
        let ObservedTarget::Present {
            entries,
            insecure_skip_tls_verify,
            ..
        } = entries(b"injector's", Some("Ignore"))
        else {
            unreachable!()
        };
        let observed = ObservedTarget::Present {
            entries,
            insecure_skip_tls_verify,
            injected: Some(by.clone()),
        };
        // Whatever certgen would change (bundle and failure policy), nothing is written.
        let plan = plan_patch(
            &patch_req(Some(FailurePolicy::Fail)),
            &secret,
            &[(t.clone(), observed)],
            now(),
        )
        .unwrap();
        assert!(plan.writes.is_empty(), "{:?}", plan.writes);
        assert!(plan.unchanged.is_empty());
        assert_eq!(plan.injected, [(t, by)]);
    }

    #[test]
    fn patch_copies_the_secrets_ca_and_writes_only_what_differs() {
        let s = created();
        let secret = patch_bundle(&patch_req(None), &stored(&s)).unwrap();
        assert_eq!(secret.pem, s.ca.1);
        let bundle = secret.pem.clone();
        let t = target(WebhookKind::ValidatingWebhookConfiguration);
        let plan = |policy, current| {
            plan_patch(&patch_req(policy), &secret, &[(t.clone(), current)], now()).unwrap()
        };
        let p = plan(None, entries(b"", None));
        assert_eq!(p.writes[0].changes, ["caBundle"]);
        assert_eq!(p.writes[0].entries, ["a", "b"]);
        assert_eq!(p.writes[0].bundle, bundle);
        assert!(!p.writes[0].keeps_prior);
        let p = plan(None, entries(&bundle, None));
        assert!(p.writes.is_empty());
        assert_eq!(p.unchanged, [(t.clone(), false)]);
        let policy = Some(FailurePolicy::Ignore);
        let p = plan(policy, entries(&bundle, Some("Fail")));
        assert_eq!(p.writes[0].changes, ["failurePolicy"]);
        let p = plan(policy, entries(&bundle, Some("Ignore")));
        assert!(p.writes.is_empty());
    }

    #[test]
    fn patch_keeps_the_prior_ca_until_the_webhook_may_serve_the_new_certificate() {
        // The Secret was replaced in one step (deleted, created again) at now(); the webhook
        // configurations still trust the CA of the Secret before.
        let old = created();
        let new = created();
        let secret = patch_bundle(&patch_req(None), &stored(&new)).unwrap();
        let t = target(WebhookKind::ValidatingWebhookConfiguration);
        let at = |t0: OffsetDateTime, current: ObservedTarget| {
            plan_patch(&patch_req(None), &secret, &[(t.clone(), current)], t0).unwrap()
        };
        // Within the delay: [new, old], so the certificate the webhook still serves is trusted.
        let p = at(now(), entries(&old.ca.1, None));
        let w = &p.writes[0];
        assert!(w.keeps_prior);
        let cas = parse_cert_chain(&w.bundle).unwrap();
        assert_eq!(cas.len(), 2);
        assert!(cas[0].signed(&new.leaf) && cas[1].signed(&old.leaf));
        // A re-run within the delay writes nothing, and keeps it.
        let kept = w.bundle.clone();
        let p = at(now() + time::Duration::minutes(1), entries(&kept, None));
        assert!(p.writes.is_empty());
        assert_eq!(p.unchanged, [(t.clone(), true)]);
        // After the delay: the prior CA goes.
        let p = at(now() + time::Duration::minutes(3), entries(&kept, None));
        assert_eq!(p.writes[0].bundle, new.ca.1);
        assert!(!p.writes[0].keeps_prior);
        // Once the delay has passed, a stale caBundle is replaced outright.
        let p = at(now() + time::Duration::minutes(3), entries(&old.ca.1, None));
        assert_eq!(p.writes[0].bundle, new.ca.1);
        // A delay of 0: the blind copy.
        let mut zero = patch_req(None);
        zero.propagation_delay = std::time::Duration::ZERO;
        let p = plan_patch(
            &zero,
            &secret,
            &[(t.clone(), entries(&old.ca.1, None))],
            now(),
        )
        .unwrap();
        assert_eq!(p.writes[0].bundle, new.ca.1);
        // An unknown write time keeps the prior CA (it cannot be known to be safe to drop).
        let mut unknown = secret.clone();
        unknown.written_at = None;
        let p = plan_patch(
            &patch_req(None),
            &unknown,
            &[(t.clone(), entries(&old.ca.1, None))],
            now() + time::Duration::days(1),
        )
        .unwrap();
        assert!(p.writes[0].keeps_prior);
    }

    #[test]
    fn patch_refuses_a_missing_target_before_any_write() {
        let s = created();
        let secret = patch_bundle(&patch_req(None), &stored(&s)).unwrap();
        let v = target(WebhookKind::ValidatingWebhookConfiguration);
        let m = target(WebhookKind::MutatingWebhookConfiguration);
        let e = plan_patch(
            &patch_req(None),
            &secret,
            &[(v, entries(b"", None)), (m, ObservedTarget::Absent)],
            now(),
        )
        .unwrap_err();
        assert_eq!(e.source_name, "--webhook-name");
        assert!(
            e.message
                .contains("MutatingWebhookConfiguration w does not exist"),
            "{e}"
        );
    }

    #[test]
    fn patch_refuses_a_bundle_that_does_not_sign_the_serving_certificate() {
        let a = created();
        let b = created();
        let ObservedSecret::Present {
            type_, mut data, ..
        } = stored(&a)
        else {
            unreachable!()
        };
        data.insert("ca".into(), b.ca.1.clone());
        let e = patch_bundle(
            &patch_req(None),
            &ObservedSecret::Present {
                type_,
                data,
                written_at: None,
            },
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("no CA in ca signed the certificate in cert"),
            "{e}"
        );
        let e = patch_bundle(&patch_req(None), &ObservedSecret::Absent).unwrap_err();
        assert_eq!(e.source_name, "--secret-name");
    }

    #[test]
    fn patch_reads_ca_when_the_named_key_is_absent_and_checks_the_type() {
        let s = created();
        let mut r = patch_req(None);
        r.ca_name = "ca.crt".into();
        assert_eq!(patch_bundle(&r, &stored(&s)).unwrap().pem, s.ca.1);
        r.secret_type = Some("kubernetes.io/tls".into());
        assert_eq!(
            patch_bundle(&r, &stored(&s)).unwrap_err().source_name,
            "--secret-type"
        );
    }

    #[test]
    fn patch_stays_in_step_through_every_phase_of_a_staged_renewal() {
        // What `create`'s renewal leaves in the Secret after each step: trust ([new, old],
        // the old certificate), the serving certificate ([new, old], the new one), cleanup
        // ([new]). `patch` run after any of them (a chart's post-upgrade hook) accepts the
        // Secret and writes a caBundle that trusts the certificate it holds and, until the
        // cleanup, the one before.
        let (old, new) = (created(), created());
        let both = [new.ca.1.clone(), old.ca.1.clone()].concat();
        let phase = |bundle: &[u8], leaf: &NewSecret| {
            let mut secret = stored(leaf);
            if let ObservedSecret::Present { data, .. } = &mut secret {
                data.insert("ca".into(), bundle.to_vec());
            }
            secret
        };
        let t = target(WebhookKind::ValidatingWebhookConfiguration);
        let mut current = old.ca.1.clone();
        for (name, secret, trusted) in [
            ("trust", phase(&both, &old), vec![&old.leaf, &new.leaf]),
            ("leaves", phase(&both, &new), vec![&old.leaf, &new.leaf]),
            ("cleanup", phase(&new.ca.1, &new), vec![&new.leaf]),
        ] {
            let bundle =
                patch_bundle(&patch_req(None), &secret).unwrap_or_else(|e| panic!("{name}: {e}"));
            let p = plan_patch(
                &patch_req(None),
                &bundle,
                &[(t.clone(), entries(&current, None))],
                now() + time::Duration::hours(1),
            )
            .unwrap();
            if let Some(w) = p.writes.first() {
                current = w.bundle.clone();
            }
            let cas = parse_cert_chain(&current).unwrap();
            for leaf in trusted {
                assert!(
                    cas.iter().any(|ca| ca.signed(leaf)),
                    "{name}: the caBundle trusts every certificate the webhook may serve"
                );
            }
        }
        assert_eq!(current, new.ca.1, "after the cleanup: the new CA alone");
    }
}
