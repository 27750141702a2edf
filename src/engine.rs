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
    random_bytes,
};
use crate::plan::{self, Action, CaRef, Kind, ObservedState, Options, Phase, Plan, Signer};
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

/// What a run's writes answer to: the run lock (asked before every write: a run that lost it
/// stops), and a count of the writes made (exit 2 promises that nothing was written).
pub struct Guard<'a> {
    pub held: &'a (dyn Fn() -> bool + Sync),
    pub writes: std::sync::atomic::AtomicUsize,
}

impl<'a> Guard<'a> {
    /// A guard over `held`, with no write made yet.
    pub fn new(held: &'a (dyn Fn() -> bool + Sync)) -> Self {
        Self {
            held,
            writes: 0.into(),
        }
    }

    /// The writes made so far.
    pub fn writes(&self) -> usize {
        self.writes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// How a run behaves.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    pub plan: Options,
    pub dry_run: bool,
}

/// What a run leaves behind, for the steps after it (restarts, waits, probes).
#[derive(Debug, Clone)]
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
    /// When each Secret was last written, on the store's clock (now, for this step's writes).
    pub written_at: BTreeMap<String, OffsetDateTime>,
    /// Each TLS Secret's `ca.crt` after the step, for the `caBundle` targets that follow it.
    pub bundles: BTreeMap<String, Vec<u8>>,
    /// What this step did, and so what comes next.
    pub phase: Phase,
    /// Whether this step stored a CA (so `--overwrite` has been acted on).
    pub ca_written: bool,
    /// Whether this step stored HMAC bytes (so `--rotate-hmac` has been acted on).
    pub hmac_written: bool,
    /// What the step's plan was made from (the last read, after any re-plan).
    pub observed: ObservedState,
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

/// Runs one step of certgen's main job against a store: observe, plan, apply. A lost race
/// (a write's precondition failed) or a broken connection re-reads and re-plans, a bounded
/// number of times. Every write goes through `guard`.
pub async fn run<S: SecretStore>(
    store: &S,
    config: &Config,
    options: RunOptions,
    guard: &Guard<'_>,
) -> Result<Outcome, Error> {
    run_from(store, config, options, guard, None).await
}

/// [`run`], planning its first attempt from `seed` instead of reading the store (the caller
/// proves that what it read earlier is still current; see the driver). A re-plan after a lost
/// race reads the store as usual.
pub async fn run_from<S: SecretStore>(
    store: &S,
    config: &Config,
    options: RunOptions,
    guard: &Guard<'_>,
    mut seed: Option<ObservedState>,
) -> Result<Outcome, Error> {
    let mut plan_options = options.plan;
    let mut done: Vec<Entry> = Vec::new();
    let mut attempt = 1;
    let mut ca_written = false;
    let mut hmac_written = false;
    let mut first_ca_version: Option<Option<String>> = None;
    loop {
        let read = match seed.take() {
            Some(o) => Ok(o),
            None => observe(store, config).await,
        };
        let observed = match read {
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
        // If the CA Secret changed since the first read (a CA write whose answer was lost, or
        // another run's rotation), --overwrite has been acted on: never a second new CA.
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
        let now = store.now();
        let plan = plan::plan(config, &observed, now, plan_options, &|n| store.object(n))?;
        let phase = plan.phase.clone();
        if options.dry_run {
            let written: BTreeSet<String> = plan
                .secrets
                .iter()
                .filter(|s| s.action.writes())
                .map(|s| s.name.clone())
                .collect();
            // What is stored now: the final state when the plan writes nothing.
            let mut stored = Progress::default();
            for name in observed.secrets.keys() {
                stored.record(name, &observed, &BTreeMap::new(), None);
            }
            let mut report = Report::from_plan(&config.profile, store.describe(), &plan);
            let mut written = written;
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
            let signer = plan.ca.active.clone();
            return Ok(Outcome {
                report,
                digests: stored.digests,
                written,
                written_at: stored.written_at,
                bundles: stored.bundles,
                leaves: stored.leaves,
                signer,
                pending: plan.ca.pending,
                phase,
                ca_written: false,
                hmac_written: false,
                observed,
            });
        }
        let mut progress = Progress::default();
        let result = apply(store, config, plan, &observed, now, &mut progress, guard).await;
        ca_written |= progress.ca_written;
        hmac_written |= progress.hmac_written;
        // A stored new CA has acted on --overwrite, and stored HMAC bytes on --rotate-hmac:
        // re-plans continue from there, never a second time.
        if progress.ca_written {
            plan_options.overwrite = false;
        }
        if progress.hmac_written {
            plan_options.rotate_hmac = false;
        }
        merge(&mut done, std::mem::take(&mut progress.entries));
        match result {
            Ok(signer) => {
                let written = done
                    .iter()
                    .filter(|e| e.action.writes())
                    .map(|e| e.secret.clone())
                    .collect();
                return Ok(Outcome {
                    report: Report::new(&config.profile, store.describe(), false, attempt, done),
                    digests: progress.digests,
                    written,
                    written_at: progress.written_at,
                    bundles: progress.bundles,
                    leaves: progress.leaves,
                    signer,
                    pending: progress.pending.take(),
                    phase,
                    ca_written,
                    hmac_written,
                    observed,
                });
            }
            Err(ApplyError::Store(StoreError::Conflict { what, detail })) => {
                tracing::warn!(object = %what, attempt, "{detail}; re-reading and re-planning");
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
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)))
                    .await;
            }
            Err(ApplyError::Store(e)) => return Err(e.into()),
            Err(ApplyError::Issue(e)) => return Err(e.into()),
            Err(ApplyError::LockLost) => return Err(Error::LockLost),
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
    hmac_written: bool,
    digests: BTreeMap<String, String>,
    written_at: BTreeMap<String, OffsetDateTime>,
    bundles: BTreeMap<String, Vec<u8>>,
    leaves: BTreeMap<String, Cert>,
}

impl Progress {
    /// Records a Secret's data after the step: what was read, overlaid with what is written
    /// (`written_at` is `Some(now)` when the step writes it).
    fn record(
        &mut self,
        name: &str,
        observed: &ObservedState,
        written: &BTreeMap<String, Vec<u8>>,
        written_at: Option<OffsetDateTime>,
    ) {
        let base = observed.secrets.get(name).and_then(|o| o.present());
        let mut data = base.map(|s| s.data.clone()).unwrap_or_default();
        data.extend(written.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(crt) = data.get("tls.crt")
            && let Ok(mut chain) = crate::pki::parse_cert_chain(crt)
        {
            self.leaves.insert(name.to_string(), chain.remove(0));
        }
        if let Some(bundle) = data.get("ca.crt") {
            self.bundles.insert(name.to_string(), bundle.clone());
        }
        if let Some(at) = written_at.or_else(|| base.and_then(|s| s.written_at)) {
            self.written_at.insert(name.to_string(), at);
        }
        self.digests.insert(name.to_string(), data_digest(&data));
    }
}

enum ApplyError {
    Store(StoreError),
    Issue(crate::pki::IssueError),
    LockLost,
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

/// The certificates of a planned bundle, with this step's new CA in its place.
fn resolve(bundle: &[CaRef], new: Option<&CaKey>) -> Vec<Cert> {
    bundle
        .iter()
        .filter_map(|r| match r {
            CaRef::New => new.map(|n| n.cert.clone()),
            CaRef::Cert(c) => Some(c.clone()),
        })
        .collect()
}

/// Executes a plan: the CA Secret first (its key is stored before anything it signs), then the
/// other Secrets, concurrently. Every byte written was decided by the plan, but for the keys
/// and certificates generated here. Returns the CA that signs leaves after the step.
async fn apply<S: SecretStore>(
    store: &S,
    config: &Config,
    plan: Plan,
    observed: &ObservedState,
    now: OffsetDateTime,
    progress: &mut Progress,
    guard: &Guard<'_>,
) -> Result<Option<CaKey>, ApplyError> {
    let phase = plan.phase.name();
    // Every key this step needs, generated side by side (RSA keys take long and are
    // independent of each other): the new CA's, then each issued leaf's.
    let leaf_algorithms: Vec<(&str, crate::pki::KeyAlgorithm)> = plan
        .secrets
        .iter()
        .filter(|s| s.signer.is_some() && s.action.writes())
        .filter_map(|s| {
            let t = config.tls.iter().find(|t| t.name == s.name)?;
            Some((t.name.as_str(), t.leaf.key_algorithm))
        })
        .collect();
    let algorithms: Vec<_> = plan
        .generates_ca()
        .then_some(config.ca.spec.key_algorithm)
        .into_iter()
        .chain(leaf_algorithms.iter().map(|(_, a)| *a))
        .collect();
    let mut keys = generate_keys(&algorithms)?.into_iter();
    let new_ca = if plan.generates_ca() {
        let key = keys.next().expect("a key per algorithm");
        Some(issue_ca_with_key(&config.ca.spec, key, now)?.0)
    } else {
        None
    };
    let mut leaf_keys: BTreeMap<String, _> = leaf_algorithms
        .iter()
        .map(|(name, _)| name.to_string())
        .zip(keys)
        .collect();
    let ca_plan = plan.ca;
    let pem = |c: &Cert| c.pem().into_bytes();
    let bundle_bytes = |b: &[CaRef]| bundle_pem(&resolve(b, new_ca.as_ref())).into_bytes();

    let mut data = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    // The CA Secret's active CA: `tls.crt`/`tls.key`, and the annotation naming it.
    let make_active = |ca: &CaKey,
                       data: &mut BTreeMap<String, Vec<u8>>,
                       annotations: &mut BTreeMap<String, String>| {
        data.insert("tls.crt".to_string(), pem(&ca.cert));
        data.insert(
            "tls.key".to_string(),
            ca.key_pem().expose().as_bytes().to_vec(),
        );
        *annotations = ca_annotations(&ca.cert);
    };
    let (signer, pending, shown) = match ca_plan.action {
        Action::Create | Action::Rotate => {
            let ca = new_ca.clone().expect("generated above");
            make_active(&ca, &mut data, &mut annotations);
            let shown = ca.cert.clone();
            (Some(ca), None, Some(shown))
        }
        Action::Trust => {
            let ca = new_ca.clone().expect("generated above");
            data.insert("next.crt".to_string(), pem(&ca.cert));
            data.insert(
                "next.key".to_string(),
                ca.key_pem().expose().as_bytes().to_vec(),
            );
            if let Some(adopted) = &ca_plan.adopted {
                // Another tool's CA, kept as the active trust without its key.
                data.insert("tls.crt".to_string(), pem(adopted));
                data.insert("tls.key".to_string(), Vec::new());
            }
            let shown = ca.cert.clone();
            (ca_plan.active.clone(), Some(ca), Some(shown))
        }
        Action::Promote => {
            let ca = ca_plan
                .pending
                .clone()
                .expect("a promotion has a pending CA");
            make_active(&ca, &mut data, &mut annotations);
            let shown = ca.cert.clone();
            (Some(ca), None, Some(shown))
        }
        Action::UpdateBundle | Action::Keep | Action::Renew | Action::Repair => {
            let shown = ca_plan.active_cert().cloned();
            (ca_plan.active.clone(), ca_plan.pending.clone(), shown)
        }
    };
    if ca_plan.action.writes() {
        data.insert("ca.crt".to_string(), bundle_bytes(&ca_plan.bundle));
        let secret_keys = data
            .keys()
            .filter(|k| k.ends_with(".key"))
            .cloned()
            .collect();
        let write = SecretWrite {
            name: ca_plan.name.clone(),
            type_: TYPE_TLS,
            data,
            secret_keys,
            remove: ca_plan.remove.clone(),
            labels: labels(),
            annotations,
            expect: expect(&ca_plan.version),
        };
        put(store, &write, guard).await?;
        progress.ca_written = true;
        log_write(store, phase, &ca_plan.name, ca_plan.action, &ca_plan.reason);
    }
    progress.pending = pending.clone();
    progress.entries.push(Entry {
        secret: ca_plan.name.clone(),
        kind: Kind::Ca,
        action: ca_plan.action,
        reason: ca_plan.reason.clone(),
        ca_sha256: shown.as_ref().map(Cert::fingerprint_hex),
        not_after: shown.as_ref().map(|c| rfc3339(c.not_after)),
    });

    let mut writes = Vec::new();
    // Local mode: the CA's data is kept, but files consumers read are put back.
    if !ca_plan.action.writes()
        && let Some((write, action, reason)) =
            relink(observed.ca.as_ref(), progress.entries.last_mut())
    {
        writes.push((write, Kind::Ca, action, reason));
    }
    for s in plan.secrets {
        let mut entry = Entry::planned(&s);
        if s.action == Action::Keep
            && let Some((write, action, reason)) =
                relink(observed.secrets.get(&s.name), Some(&mut entry))
        {
            progress.record(&s.name, observed, &BTreeMap::new(), None);
            progress.entries.push(entry);
            writes.push((write, s.kind, action, reason));
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
                data.insert("ca.crt".to_string(), bundle_bytes(&s.bundle));
            }
            (_, _) => {
                let t = config
                    .tls
                    .iter()
                    .find(|t| t.name == s.name)
                    .expect("planned from config");
                let ca = match s.signer.expect("an issued leaf has a signer") {
                    Signer::Active => ca_plan.active.as_ref(),
                    Signer::Pending => ca_plan.pending.as_ref(),
                    Signer::New => new_ca.as_ref(),
                }
                .expect("the plan names a signer whose key it holds");
                let issued = match leaf_keys.remove(s.name.as_str()) {
                    Some(key) => issue_leaf_with_key(&t.leaf, key, ca, now)?,
                    None => issue_leaf(&t.leaf, ca, now)?,
                };
                data.insert("ca.crt".to_string(), bundle_bytes(&s.bundle));
                data.insert("tls.crt".to_string(), issued.cert.pem().into_bytes());
                data.insert(
                    "tls.key".to_string(),
                    issued.key.expose().as_bytes().to_vec(),
                );
                secret_keys.push("tls.key".to_string());
                annotations = ca_annotations(&ca.cert);
                entry.ca_sha256 = Some(ca.cert.fingerprint_hex());
                entry.not_after = Some(rfc3339(issued.cert.not_after));
            }
        }
        progress.record(&s.name, observed, &data, s.action.writes().then_some(now));
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
            writes.push((write, s.kind, s.action, s.reason.clone()));
        }
        progress.entries.push(entry);
    }
    // The CA is stored; the Secrets it signs are independent of each other.
    let results: Vec<Result<Kind, ApplyError>> = futures::stream::iter(writes)
        .map(|(write, kind, action, reason)| async move {
            put(store, &write, guard).await?;
            log_write(store, phase, &write.name, action, &reason);
            Ok(kind)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut first_error = None;
    for r in results {
        match r {
            Ok(Kind::Hmac) => progress.hmac_written = true,
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
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

/// Test-only fault injection (cargo feature `test-hooks`, never in a release build): with
/// `CERTGEN_TEST_CRASH_AFTER_WRITES=N` the process ends (exit 86, no cleanup, as if killed)
/// right after the N-th successful write of the run, so tests can stop a run at every step
/// boundary and check what a re-run makes of it.
#[cfg(feature = "test-hooks")]
pub const CRASH_ENV: &str = "CERTGEN_TEST_CRASH_AFTER_WRITES";

/// The exit status of an injected crash.
#[cfg(feature = "test-hooks")]
pub const CRASH_EXIT: i32 = 86;

#[cfg(feature = "test-hooks")]
static WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Writes through the store, unless the run lock was lost (then another run may be writing:
/// stop before this write, not after it).
async fn put<S: SecretStore>(
    store: &S,
    write: &SecretWrite,
    guard: &Guard<'_>,
) -> Result<(), ApplyError> {
    if !(guard.held)() {
        return Err(ApplyError::LockLost);
    }
    store.put(write).await?;
    guard
        .writes
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    #[cfg(feature = "test-hooks")]
    {
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if std::env::var(CRASH_ENV)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            == Some(n)
        {
            eprintln!("certgen: test fault injection ({CRASH_ENV}={n}): stopping after write {n}");
            std::process::exit(CRASH_EXIT);
        }
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
