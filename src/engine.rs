//! Orchestration: observe every Secret, plan, apply. A write that loses a race (the Secret
//! changed since it was read) makes the run re-read and re-plan, a bounded number of times; it
//! never overwrites blindly. Keys are generated only after every read succeeded.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use time::OffsetDateTime;

use crate::config::{Config, MANAGED_BY, MANAGED_BY_LABEL};
use crate::exit::Error;
use crate::pki::{
    CaKey, Cert, bundle_pem, generate_keys, issue_ca_with_key, issue_leaf, issue_leaf_with_key,
    random_bytes, rotation_bundle,
};
use crate::plan::{
    self, Action, Kind, LEAVES_WRITTEN_AT, ObservedState, Options, Phase, Plan, TRUST_WRITTEN_AT,
};
use crate::report::{Entry, Report, rfc3339};
use crate::store::{
    Expect, Observed, SecretStore, SecretWrite, StoreError, TYPE_OPAQUE, TYPE_TLS, data_digest,
};

/// How many reads or writes a run has in flight at once.
pub const CONCURRENCY: usize = 16;

/// How many times a run re-reads and re-plans after losing a race.
pub const MAX_ATTEMPTS: u32 = 5;

/// The annotation holding the SHA-256 of the CA that signed a Secret's certificate.
pub const CA_ANNOTATION: &str = "certgen.dev/ca-sha256";

/// How a run behaves.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    pub plan: Options,
    pub dry_run: bool,
}

/// What a run leaves behind, for the steps after it (restarts, waits, probes).
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    /// Digest of each managed Secret's data after the run (empty for a dry run).
    pub digests: BTreeMap<String, String>,
    /// The Secrets written in this run (planned to be written, for a dry run).
    pub written: BTreeSet<String>,
    /// The leaf each TLS Secret holds after the run.
    pub leaves: BTreeMap<String, Cert>,
    /// The CA that signs leaves now, when certgen holds its key.
    pub signer: Option<CaKey>,
    /// A staged rotation's pending CA, when one is stored after this step.
    pub pending: Option<CaKey>,
    /// Where a staged rotation stands after this step.
    pub phase: Phase,
    /// Whether this step stored a new CA (so `--overwrite` has been acted on).
    pub rotation_started: bool,
}

/// Reads every Secret the config names. Any error other than "not found" stops the run here,
/// before a key is generated.
pub async fn observe<S: SecretStore>(
    store: &S,
    config: &Config,
) -> Result<ObservedState, StoreError> {
    let names: Vec<&String> = std::iter::once(&config.ca.secret_name)
        .chain(config.tls.iter().map(|t| &t.name))
        .chain(config.hmac.iter().map(|h| &h.name))
        .collect();
    // One LIST when the store can and may, else by name with bounded concurrency.
    let keys: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
    let reads = store.get_many(&keys).await?;
    let mut state = ObservedState::default();
    for (name, observed) in names.into_iter().zip(reads) {
        if *name == config.ca.secret_name {
            state.ca = Some(observed);
        } else {
            state.secrets.insert(name.clone(), observed);
        }
    }
    Ok(state)
}

/// Runs certgen's main job against a store. `clock` is read once per attempt.
pub async fn run<S: SecretStore>(
    store: &S,
    config: &Config,
    options: RunOptions,
    clock: impl Fn() -> OffsetDateTime,
) -> Result<Outcome, Error> {
    let mut plan_options = options.plan;
    let mut done: Vec<Entry> = Vec::new();
    let mut attempt = 1;
    let mut first_ca_version: Option<Option<String>> = None;
    loop {
        let observed = match observe(store, config).await {
            Ok(o) => o,
            Err(e) if transient(&e) && attempt < MAX_ATTEMPTS => {
                tracing::warn!(attempt, "{e}; retrying");
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)))
                    .await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if !plan_options.force
            && let Some(d) = foreign_file(&observed)
        {
            return Err(plan::Invalid {
                object: d.path.clone(),
                problem: format!(
                    "{}; certgen cannot tell whether it or its own copy in ..data/{} is the one meant",
                    d.what(),
                    d.key
                ),
                fix: "nothing was written; delete it to have certgen link its own copy back, or run with --force to replace it".into(),
            }
            .into());
        }
        // If the CA Secret changed since the first read (a CA write whose answer was lost, say;
        // the lock keeps other certgen runs out), --overwrite has been acted on: never rotate twice.
        let ca_version = observed
            .ca
            .as_ref()
            .and_then(|o| o.present())
            .map(|s| s.version.clone());
        match &first_ca_version {
            None => first_ca_version = Some(ca_version),
            Some(first) if *first != ca_version => plan_options.overwrite = false,
            Some(_) => {}
        }
        let now = clock();
        let plan = plan::plan(config, &observed, now, plan_options, &|n| store.object(n))?;
        let phase = plan.phase.clone();
        if options.dry_run {
            let mut written: BTreeSet<String> = plan
                .secrets
                .iter()
                .filter(|s| s.action.writes())
                .map(|s| s.name.clone())
                .collect();
            // What is stored now: the final state when the plan writes nothing.
            let mut stored = Progress::default();
            for name in observed.secrets.keys() {
                stored.record(name, &observed, false, &BTreeMap::new());
            }
            let mut report = Report::from_plan(&config.profile, store.describe(), &plan);
            // Files consumers read that a run would put back (local mode).
            for entry in report.secrets.iter_mut().filter(|e| !e.action.writes()) {
                let stored = if entry.secret == config.ca.secret_name {
                    observed.ca.as_ref()
                } else {
                    observed.secrets.get(&entry.secret)
                };
                if relink(stored, Some(entry)).is_some() {
                    written.insert(entry.secret.clone());
                }
            }
            return Ok(Outcome {
                report,
                digests: stored.digests,
                written,
                leaves: stored.leaves,
                signer: plan.ca.active,
                pending: plan.ca.pending,
                phase,
                rotation_started: false,
            });
        }
        let mut progress = Progress::default();
        match apply(store, config, plan, &observed, now, &mut progress).await {
            Ok(signer) => {
                merge(&mut done, progress.entries);
                let written = done
                    .iter()
                    .filter(|e| e.action.writes())
                    .map(|e| e.secret.clone())
                    .collect();
                return Ok(Outcome {
                    report: Report::new(&config.profile, store.describe(), false, attempt, done),
                    digests: progress.digests,
                    written,
                    leaves: progress.leaves,
                    signer,
                    pending: progress.pending.take(),
                    phase,
                    rotation_started: progress.ca_written
                        || options.plan.overwrite != plan_options.overwrite,
                });
            }
            Err(ApplyError::Store(StoreError::Conflict { what, detail })) => {
                tracing::warn!(object = %what, attempt, "{detail}; re-reading and re-planning");
                if progress.ca_written {
                    // The new CA is stored; re-planning continues that rotation instead of
                    // starting another one (never a third CA).
                    plan_options.overwrite = false;
                }
                merge(&mut done, progress.entries);
                if attempt >= MAX_ATTEMPTS {
                    return Err(Error::Contended {
                        attempts: attempt,
                        last: StoreError::Conflict { what, detail },
                    });
                }
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50 * u64::from(attempt))).await;
            }
            // The connection broke, perhaps mid-write: whether the write landed or not, its
            // precondition makes a re-read and re-plan safe.
            Err(ApplyError::Store(e)) if transient(&e) && attempt < MAX_ATTEMPTS => {
                tracing::warn!(attempt, "{e}; re-reading and re-planning");
                if progress.ca_written {
                    plan_options.overwrite = false;
                }
                merge(&mut done, progress.entries);
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)))
                    .await;
            }
            Err(ApplyError::Store(e)) => return Err(e.into()),
            Err(ApplyError::Issue(e)) => return Err(e.into()),
        }
    }
}

/// A failure worth another attempt: the connection broke or timed out before an HTTP answer.
/// (429/503/504 are retried below, in the client, honouring Retry-After.)
fn transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Api(f) if f.status.is_none())
}

/// Later entries replace earlier ones for the same Secret; Keep never hides a write.
fn merge(done: &mut Vec<Entry>, new: Vec<Entry>) {
    for entry in new {
        match done.iter_mut().find(|e| e.secret == entry.secret) {
            Some(old) if entry.action.writes() || !old.action.writes() => *old = entry,
            Some(_) => {}
            None => done.push(entry),
        }
    }
}

#[derive(Default)]
struct Progress {
    entries: Vec<Entry>,
    pending: Option<CaKey>,
    ca_written: bool,
    digests: BTreeMap<String, String>,
    leaves: BTreeMap<String, Cert>,
}

impl Progress {
    /// Records a Secret's data after the run: what was read, overlaid with what was written.
    fn record(
        &mut self,
        name: &str,
        observed: &ObservedState,
        is_ca: bool,
        written: &BTreeMap<String, Vec<u8>>,
    ) {
        let base = if is_ca {
            observed.ca.as_ref()
        } else {
            observed.secrets.get(name)
        };
        let mut data = base
            .and_then(|o| o.present())
            .map(|s| s.data.clone())
            .unwrap_or_default();
        data.extend(written.iter().map(|(k, v)| (k.clone(), v.clone())));
        if !is_ca
            && let Some(crt) = data.get("tls.crt")
            && let Ok(mut chain) = crate::pki::parse_cert_chain(crt)
        {
            self.leaves.insert(name.to_string(), chain.remove(0));
        }
        self.digests.insert(name.to_string(), data_digest(&data));
    }
}

enum ApplyError {
    Store(StoreError),
    Issue(crate::pki::IssueError),
}

impl From<StoreError> for ApplyError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}
impl From<crate::pki::IssueError> for ApplyError {
    fn from(e: crate::pki::IssueError) -> Self {
        Self::Issue(e)
    }
}

fn expect(version: &Option<String>) -> Expect {
    match version {
        None => Expect::Absent,
        Some(v) => Expect::Version(v.clone()),
    }
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())])
}

fn ca_annotations(ca: &Cert) -> BTreeMap<String, String> {
    BTreeMap::from([(CA_ANNOTATION.to_string(), ca.fingerprint_hex())])
}

async fn apply<S: SecretStore>(
    store: &S,
    config: &Config,
    plan: Plan,
    observed: &ObservedState,
    now: OffsetDateTime,
    progress: &mut Progress,
) -> Result<Option<CaKey>, ApplyError> {
    let Plan {
        ca: ca_plan,
        secrets,
        phase,
    } = plan;
    let ca_entry = |action: Action, reason: String, cert: &Cert| Entry {
        secret: ca_plan.name.clone(),
        kind: Kind::Ca,
        action,
        reason,
        ca_sha256: Some(cert.fingerprint_hex()),
        not_after: Some(rfc3339(cert.not_after)),
    };
    let ca_write = |data: BTreeMap<String, Vec<u8>>,
                    remove: Vec<String>,
                    annotations: BTreeMap<String, String>| {
        let secret_keys = data
            .keys()
            .filter(|k| k.ends_with(".key"))
            .cloned()
            .collect();
        SecretWrite {
            name: ca_plan.name.clone(),
            type_: TYPE_TLS,
            data,
            secret_keys,
            remove,
            labels: labels(),
            annotations,
            expect: expect(&ca_plan.version),
        }
    };
    let pem = |c: &Cert| c.pem().into_bytes();
    let phase = match phase {
        Phase::Steady => "steady",
        Phase::Trust => "trust",
        Phase::Gate { .. } => "gate",
        Phase::Leaves => "leaves",
    };
    let now_text = rfc3339(now);

    // Every key this step needs, generated side by side (RSA keys take long; they are
    // independent of each other): the CA's when one is issued, then each new leaf's.
    let ca_issues = matches!(
        ca_plan.action,
        Action::Create | Action::Rotate | Action::Trust
    );
    let leaf_algorithms: Vec<(&str, crate::pki::KeyAlgorithm)> = secrets
        .iter()
        .filter(|s| {
            s.kind != Kind::Hmac
                && !matches!(
                    s.action,
                    Action::Keep | Action::UpdateBundle | Action::Repair
                )
        })
        .filter_map(|s| {
            let t = config.tls.iter().find(|t| t.name == s.name)?;
            Some((t.name.as_str(), t.leaf.key_algorithm))
        })
        .collect();
    let algorithms: Vec<_> = ca_issues
        .then_some(config.ca.spec.key_algorithm)
        .into_iter()
        .chain(leaf_algorithms.iter().map(|(_, a)| *a))
        .collect();
    let mut keys = generate_keys(&algorithms)?.into_iter();
    let mut ca_key = if ca_issues { keys.next() } else { None };
    let mut leaf_keys: BTreeMap<&str, _> = leaf_algorithms
        .iter()
        .map(|(name, _)| *name)
        .zip(keys)
        .collect();
    let mut new_ca = |spec: &crate::pki::CaSpec| {
        let key = ca_key
            .take()
            .expect("a CA key was generated for this action");
        issue_ca_with_key(spec, key, now)
    };

    // The CA first: its key is stored before anything it signs.
    let (signer, bundle): (Option<CaKey>, Vec<Cert>) = match ca_plan.action {
        Action::Create | Action::Rotate => {
            let (ca, issued) = new_ca(&config.ca.spec)?;
            let bundle = rotation_bundle(&ca.cert, ca_plan.prior.as_ref());
            let data = BTreeMap::from([
                ("ca.crt".to_string(), bundle_pem(&bundle).into_bytes()),
                ("tls.crt".to_string(), pem(&issued.cert)),
                (
                    "tls.key".to_string(),
                    issued.key.expose().as_bytes().to_vec(),
                ),
            ]);
            let mut annotations = ca_annotations(&ca.cert);
            annotations.insert(LEAVES_WRITTEN_AT.into(), now_text.clone());
            put(store, &ca_write(data, vec![], annotations)).await?;
            progress.ca_written = true;
            let reason = match &ca_plan.prior {
                Some(p) => format!(
                    "{}; prior CA {} stays trusted",
                    ca_plan.reason,
                    p.short_fingerprint()
                ),
                None => ca_plan.reason.clone(),
            };
            log_write(store, phase, &ca_plan.name, ca_plan.action, &reason);
            progress
                .entries
                .push(ca_entry(ca_plan.action, reason, &ca.cert));
            (Some(ca), bundle)
        }
        Action::Trust => {
            let active = ca_plan
                .active
                .expect("a trust phase starts from an active CA");
            let (pending, issued) = new_ca(&config.ca.spec)?;
            let bundle = rotation_bundle(&pending.cert, Some(&active.cert));
            let data = BTreeMap::from([
                ("ca.crt".to_string(), bundle_pem(&bundle).into_bytes()),
                ("next.crt".to_string(), pem(&issued.cert)),
                (
                    "next.key".to_string(),
                    issued.key.expose().as_bytes().to_vec(),
                ),
            ]);
            let annotations = BTreeMap::from([(TRUST_WRITTEN_AT.to_string(), now_text.clone())]);
            put(store, &ca_write(data, vec![], annotations)).await?;
            progress.ca_written = true;
            let reason = format!(
                "{}; pending CA {}",
                ca_plan.reason,
                pending.cert.short_fingerprint()
            );
            log_write(store, phase, &ca_plan.name, Action::Trust, &reason);
            progress
                .entries
                .push(ca_entry(Action::Trust, reason, &pending.cert));
            progress.pending = Some(pending);
            (Some(active), bundle)
        }
        Action::Promote => {
            let pending = ca_plan.pending.expect("a promotion has a pending CA");
            let data = BTreeMap::from([
                (
                    "ca.crt".to_string(),
                    bundle_pem(&ca_plan.bundle).into_bytes(),
                ),
                ("tls.crt".to_string(), pem(&pending.cert)),
                (
                    "tls.key".to_string(),
                    pending.key_pem().expose().as_bytes().to_vec(),
                ),
            ]);
            let mut annotations = ca_annotations(&pending.cert);
            annotations.insert(LEAVES_WRITTEN_AT.into(), now_text.clone());
            let remove = vec!["next.crt".to_string(), "next.key".to_string()];
            put(store, &ca_write(data, remove, annotations)).await?;
            progress.ca_written = true;
            log_write(
                store,
                phase,
                &ca_plan.name,
                Action::Promote,
                &ca_plan.reason,
            );
            progress.entries.push(ca_entry(
                Action::Promote,
                ca_plan.reason.clone(),
                &pending.cert,
            ));
            (Some(pending), ca_plan.bundle)
        }
        Action::UpdateBundle => {
            let has_pending = ca_plan.pending.is_some();
            progress.pending = ca_plan.pending;
            let ca = ca_plan
                .active
                .expect("UpdateBundle is planned only with an active CA");
            let data = BTreeMap::from([(
                "ca.crt".to_string(),
                bundle_pem(&ca_plan.bundle).into_bytes(),
            )]);
            let mut annotations = ca_annotations(&ca.cert);
            if has_pending {
                annotations.insert(TRUST_WRITTEN_AT.into(), now_text.clone());
            }
            put(store, &ca_write(data, vec![], annotations)).await?;
            log_write(
                store,
                phase,
                &ca_plan.name,
                Action::UpdateBundle,
                &ca_plan.reason,
            );
            progress.entries.push(ca_entry(
                Action::UpdateBundle,
                ca_plan.reason.clone(),
                &ca.cert,
            ));
            (Some(ca), ca_plan.bundle)
        }
        Action::Keep | Action::Renew | Action::Repair => {
            progress.pending = ca_plan.pending;
            progress.entries.push(Entry {
                secret: ca_plan.name.clone(),
                kind: Kind::Ca,
                action: Action::Keep,
                reason: ca_plan.reason.clone(),
                ca_sha256: ca_plan.active.as_ref().map(|c| c.cert.fingerprint_hex()),
                not_after: ca_plan.active.as_ref().map(|c| rfc3339(c.cert.not_after)),
            });
            (ca_plan.active, ca_plan.bundle)
        }
    };

    let mut writes = Vec::new();
    // Local mode: the CA's data is kept, but files consumers read are put back.
    if !ca_plan.action.writes()
        && let Some(write) = relink(observed.ca.as_ref(), progress.entries.last_mut())
    {
        writes.push(write);
    }
    for s in secrets {
        let mut entry = Entry::planned(&s);
        if s.action == Action::Keep
            && let Some(write) = relink(observed.secrets.get(&s.name), Some(&mut entry))
        {
            progress.record(&s.name, observed, false, &BTreeMap::new());
            progress.entries.push(entry);
            writes.push(write);
            continue;
        }
        let mut data = BTreeMap::new();
        let mut secret_keys = Vec::new();
        let mut annotations = BTreeMap::new();
        let type_ = match s.kind {
            Kind::Hmac => TYPE_OPAQUE,
            _ => TYPE_TLS,
        };
        match (s.kind, s.action) {
            (_, Action::Keep) => {}
            (Kind::Hmac, _) => {
                let h = config
                    .hmac
                    .iter()
                    .find(|h| h.name == s.name)
                    .expect("planned from config");
                data.insert(h.key.clone(), random_bytes(h.bytes));
                secret_keys.push(h.key.clone());
            }
            (_, Action::UpdateBundle) => {
                let ca = signer.as_ref().expect("a bundle update has a CA");
                data.insert("ca.crt".to_string(), bundle_pem(&bundle).into_bytes());
                annotations = ca_annotations(&ca.cert);
            }
            (_, _) => {
                let t = config
                    .tls
                    .iter()
                    .find(|t| t.name == s.name)
                    .expect("planned from config");
                let ca = signer.as_ref().expect("a leaf is issued only with a CA");
                let issued = match leaf_keys.remove(s.name.as_str()) {
                    Some(key) => issue_leaf_with_key(&t.leaf, key, ca, now)?,
                    None => issue_leaf(&t.leaf, ca, now)?,
                };
                data.insert("ca.crt".to_string(), bundle_pem(&bundle).into_bytes());
                data.insert("tls.crt".to_string(), issued.cert.pem().into_bytes());
                data.insert(
                    "tls.key".to_string(),
                    issued.key.expose().as_bytes().to_vec(),
                );
                secret_keys.push("tls.key".to_string());
                annotations = ca_annotations(&ca.cert);
                entry.not_after = Some(rfc3339(issued.cert.not_after));
            }
        }
        if let (Kind::Tls, Some(ca)) = (s.kind, &signer) {
            entry.ca_sha256 = Some(ca.cert.fingerprint_hex());
        }
        progress.record(&s.name, observed, false, &data);
        if s.action.writes() {
            let write = SecretWrite {
                name: s.name.clone(),
                type_,
                data,
                secret_keys,
                remove: vec![],
                labels: labels(),
                annotations,
                expect: expect(&s.version),
            };
            writes.push((write, s.action, s.reason.clone()));
        }
        progress.entries.push(entry);
    }
    // The CA is stored; the Secrets it signs are independent of each other.
    let results: Vec<Result<(), StoreError>> = futures::stream::iter(writes)
        .map(|(write, action, reason)| async move {
            put(store, &write).await?;
            log_write(store, phase, &write.name, action, &reason);
            Ok(())
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    // Every write durable before the run reports it (and before the lock is released).
    store.flush().await?;
    Ok(signer)
}

/// The first visible file certgen cannot account for (local mode), in any observed Secret.
fn foreign_file(observed: &ObservedState) -> Option<&crate::store::Divergence> {
    observed
        .ca
        .iter()
        .chain(observed.secrets.values())
        .filter_map(Observed::present)
        .flat_map(|s| &s.divergent)
        .find(|d| !d.repairable())
}

/// A write that changes no data but puts back the files consumers read (local mode), for a
/// Secret the plan keeps; its entry becomes a repair naming the files.
fn relink(
    observed: Option<&Observed>,
    entry: Option<&mut Entry>,
) -> Option<(SecretWrite, Action, String)> {
    let s = observed?.present()?;
    if s.divergent.is_empty() {
        return None;
    }
    let reason = format!(
        "restoring what consumers read: {}",
        s.divergent
            .iter()
            .map(|d| d.describe())
            .collect::<Vec<_>>()
            .join("; ")
    );
    if let Some(entry) = entry {
        entry.action = Action::Repair;
        entry.reason = reason.clone();
    }
    let write = SecretWrite {
        name: s.name.clone(),
        type_: if s.type_ == TYPE_OPAQUE {
            TYPE_OPAQUE
        } else {
            TYPE_TLS
        },
        data: BTreeMap::new(),
        secret_keys: vec![],
        remove: vec![],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        expect: Expect::Version(s.version.clone()),
    };
    Some((write, Action::Repair, reason))
}

/// Test-only fault injection: with `CERTGEN_TEST_CRASH_AFTER_WRITES=N` the process ends (exit
/// 86, no cleanup, as if killed) right after the N-th successful write of the run, so tests can
/// stop a run at every step boundary and check what a re-run makes of it.
pub const CRASH_ENV: &str = "CERTGEN_TEST_CRASH_AFTER_WRITES";

/// The exit status of an injected crash.
pub const CRASH_EXIT: i32 = 86;

static WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Writes through the store, counting writes for fault injection.
async fn put<S: SecretStore>(store: &S, write: &SecretWrite) -> Result<(), StoreError> {
    store.put(write).await?;
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    if std::env::var(CRASH_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        == Some(n)
    {
        eprintln!("certgen: test fault injection ({CRASH_ENV}={n}): stopping after write {n}");
        std::process::exit(CRASH_EXIT);
    }
    Ok(())
}

/// One log event per write, with stable fields: secret, namespace (in a cluster), action, phase.
fn log_write<S: SecretStore>(store: &S, phase: &str, name: &str, action: Action, reason: &str) {
    let action = action_name(action);
    let namespace = store.namespace().unwrap_or("");
    tracing::info!(secret = %name, namespace, action, phase, "{action} {}: {reason}", store.object(name));
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Keep => "keep",
        Action::Create => "create",
        Action::Renew => "renew",
        Action::UpdateBundle => "update-bundle",
        Action::Rotate => "rotate",
        Action::Trust => "trust",
        Action::Promote => "promote",
        Action::Repair => "repair",
    }
}
