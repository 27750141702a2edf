//! Apply: executes a plan, mechanically.
//!
//! Every byte written was decided by the plan ([`crate::plan::Write`]); apply only makes what
//! cannot exist before it runs (keys, the new CA, issued leaves, random bytes) and writes: the
//! CA Secret first and alone (its key is stored before anything it signs), then the other
//! Secrets concurrently, each write fenced by the version it was planned from and asked of the
//! run lock first. It must not decide what to write, nor re-read or retry (a lost race goes
//! back to the caller, which observes and plans again).

use std::collections::BTreeMap;

use futures::StreamExt;
use time::OffsetDateTime;

use crate::observe::Snapshot;
use crate::pki::{
    CaKey, Cert, IssueError, Issued, bundle_pem, generate_keys, issue_ca_with_key,
    issue_leaf_with_key, random_bytes,
};
use crate::plan::{Action, CA_ANNOTATION, CaRef, Content, Issue, Kind, Plan, Signer, Write};
use crate::report::Entry;
use crate::secret::{Layout, SecretWrite, data_digest};
use crate::store::{SecretStore, StoreError};

/// How many writes a step has in flight at once.
pub const CONCURRENCY: usize = 16;

/// What a run's writes answer to: the run lock (asked before every write: a run that lost it
/// stops), and a count of the writes made (exit 2 promises that nothing was written).
pub struct Guard<'a> {
    pub held: &'a (dyn Fn() -> bool + Sync),
    pub writes: std::sync::atomic::AtomicUsize,
    /// What was written (or partly written, when a write failed midway), in order.
    written: std::sync::Mutex<Vec<String>>,
}

impl<'a> Guard<'a> {
    /// A guard over `held`, with no write made yet.
    pub fn new(held: &'a (dyn Fn() -> bool + Sync)) -> Self {
        Self {
            held,
            writes: 0.into(),
            written: Default::default(),
        }
    }

    /// The objects written so far (a Secret written twice is named once).
    pub fn written(&self) -> Vec<String> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn record(&self, what: String) {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if !written.contains(&what) {
            written.push(what);
        }
    }

    /// The writes made so far.
    pub fn writes(&self) -> usize {
        self.writes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The most a Secret's data may hold: the API server refuses a larger Secret (1 MiB,
/// `MaxSecretSize`), and the local store reads back no larger file.
pub const MAX_SECRET_BYTES: usize = 1 << 20;

/// Refuses, before anything is written, a Secret larger than [`MAX_SECRET_BYTES`].
fn fits<S: SecretStore>(store: &S, write: &SecretWrite) -> Result<(), ApplyError> {
    let size: usize = write.data.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size <= MAX_SECRET_BYTES {
        return Ok(());
    }
    Err(ApplyError::Invalid(crate::plan::Invalid {
        object: store.object(&write.name),
        problem: format!(
            "would hold {size} bytes, more than the 1 MiB (1048576 bytes) the Kubernetes API server accepts for one Secret"
        ),
        fix: "nothing was written; list fewer or shorter dnsNames and ipAddresses for it (each SAN is stored in its certificate)".into(),
    }))
}

/// Why applying a plan stopped.
#[derive(Debug)]
pub enum ApplyError {
    Store(StoreError),
    Issue(IssueError),
    /// A Secret that cannot be written as planned (too large): nothing was written.
    Invalid(crate::plan::Invalid),
    /// The run lock may have been taken over: stopped before the next write.
    LockLost,
}

impl From<StoreError> for ApplyError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<IssueError> for ApplyError {
    fn from(e: IssueError) -> Self {
        Self::Issue(e)
    }
}

/// What a step leaves behind, recorded as its writes are made (or, for a dry run, what is
/// stored): the report's entries and what the consumers' steps need.
#[derive(Debug, Default)]
pub struct Applied {
    pub entries: Vec<Entry>,
    /// The CA that signs leaves after the step, when certgen holds its key.
    pub signer: Option<CaKey>,
    /// A staged rotation's pending CA after the step.
    pub pending: Option<CaKey>,
    /// Whether the step wrote the CA Secret.
    pub ca_written: bool,
    /// Whether the step stored a newly generated CA (so `--overwrite` has been acted on; a
    /// cleanup that rewrites the CA Secret's bundle before a new rotation's trust step has not).
    pub new_ca_written: bool,
    /// Whether the step stored HMAC bytes (so `--rotate-hmac` has been acted on).
    pub hmac_written: bool,
    /// Digest of each Secret's data after the step.
    pub digests: BTreeMap<String, String>,
    /// When each Secret was last written, on the store's clock (now, for this step's writes).
    pub written_at: BTreeMap<String, OffsetDateTime>,
    /// Each TLS Secret's `ca.crt` after the step.
    pub bundles: BTreeMap<String, Vec<u8>>,
    /// The leaf each TLS Secret holds after the step.
    pub leaves: BTreeMap<String, Cert>,
    /// The data keys of each TLS Secret whose layout is not the default, for
    /// [`Applied::record`].
    pub layouts: BTreeMap<String, Layout>,
    /// The CA a step that makes a new one stores instead of generating it: a set of
    /// clusters' shared CA, made once for every member (`rotation::set`).
    pub given_ca: Option<CaKey>,
}

impl Applied {
    /// Records a Secret's data after the step: what was read, overlaid with what is written
    /// (`written_at` is `Some(now)` when the step changes its data).
    pub fn record(
        &mut self,
        name: &str,
        observed: &Snapshot,
        written: &BTreeMap<String, Vec<u8>>,
        written_at: Option<OffsetDateTime>,
    ) {
        let base = observed.get(name).present();
        let mut data = base.map(|s| s.data.clone()).unwrap_or_default();
        data.extend(written.iter().map(|(k, v)| (k.clone(), v.clone())));
        let layout = self.layouts.get(name).cloned().unwrap_or_default();
        if let Some(crt) = data.get(&layout.cert)
            && let Ok(mut chain) = crate::pki::parse_cert_chain(crt)
        {
            self.leaves.insert(name.to_string(), chain.remove(0));
        }
        if let Some(bundle) = data.get(&layout.bundle) {
            self.bundles.insert(name.to_string(), bundle.clone());
        }
        if let Some(at) = written_at.or_else(|| base.and_then(|s| s.written_at)) {
            self.written_at.insert(name.to_string(), at);
        }
        self.digests.insert(name.to_string(), data_digest(&data));
    }
}

/// What this step generated: the new CA, when the plan makes one.
struct Made {
    new_ca: Option<CaKey>,
    /// The writer's clock, recorded on every write ([`crate::store::WRITER_CLOCK`]).
    writer_clock: String,
}

impl Made {
    fn new_ca(&self) -> &CaKey {
        self.new_ca
            .as_ref()
            .expect("a plan that refers to a new CA generates it")
    }

    fn cert<'a>(&'a self, r: &'a CaRef) -> &'a Cert {
        match r {
            CaRef::New => &self.new_ca().cert,
            CaRef::Cert(c) => c,
        }
    }

    fn key<'a>(&'a self, signer: &'a Signer) -> &'a CaKey {
        match signer {
            Signer::New => self.new_ca(),
            Signer::Held(k) => k,
        }
    }

    /// A planned write with every key's bytes, and the leaf it issued.
    fn write(
        &self,
        name: &str,
        planned: &Write,
        issued: Option<&Issued>,
    ) -> (SecretWrite, Option<Cert>) {
        let leaf = || issued.expect("a write with a leaf issues it");
        let data = planned
            .data
            .iter()
            .map(|(key, content)| {
                let bytes = match content {
                    Content::Bundle(refs) => {
                        let certs: Vec<Cert> = refs.iter().map(|r| self.cert(r).clone()).collect();
                        bundle_pem(&certs).into_bytes()
                    }
                    Content::Cert(r) => self.cert(r).pem().into_bytes(),
                    Content::Key(signer) => self.key(signer).key_pem().expose().as_bytes().to_vec(),
                    Content::LeafCert => leaf().cert.pem().into_bytes(),
                    Content::LeafKey => leaf().key.expose().as_bytes().to_vec(),
                    Content::Random(n) => random_bytes(*n),
                    Content::Empty => Vec::new(),
                };
                (key.clone(), bytes)
            })
            .collect();
        let mut annotations: BTreeMap<String, String> = planned
            .ca_annotation
            .as_ref()
            .map(|r| self.cert(r))
            .map(|ca| BTreeMap::from([(CA_ANNOTATION.to_string(), ca.fingerprint_hex())]))
            .unwrap_or_default();
        annotations.extend(planned.annotations.clone());
        if !planned.relinks() {
            annotations.insert(
                crate::store::WRITER_CLOCK.to_string(),
                self.writer_clock.clone(),
            );
        }
        let write = SecretWrite {
            name: name.to_string(),
            type_: planned.type_,
            data,
            secret_keys: planned.secret_keys.clone(),
            remove: planned.remove.clone(),
            labels: planned.labels.clone(),
            annotations,
            expect: planned.expect.clone(),
        };
        (write, issued.map(|i| i.cert.clone()))
    }
}

/// What a step's writes must pass before the first of them (the verifier's check of every
/// state consumers may hold, `rotation::step`), given what the step leaves: a refusal
/// stops the step with nothing written.
pub type Check<'a> = &'a dyn Fn(&Applied) -> Result<(), crate::plan::Invalid>;

/// Everything `plan` issues, made before any write: every key this step needs (generated side
/// by side) and the certificates, the new CA's (or `given_ca`, the set's) and each leaf's, by
/// Secret name.
fn make<'p, S: SecretStore>(
    store: &S,
    plan: &'p Plan,
    given_ca: Option<CaKey>,
    now: OffsetDateTime,
) -> Result<(Made, BTreeMap<&'p str, Issued>), ApplyError> {
    // Every key this step needs, generated side by side (RSA keys take long and are
    // independent of each other): the new CA's, then each issued leaf's.
    let issues: Vec<(&str, &Issue)> = plan
        .secrets
        .iter()
        .filter_map(|s| Some((s.name.as_str(), s.write.as_ref()?.issue.as_ref()?)))
        .collect();
    let algorithms: Vec<_> = plan
        .ca
        .new
        .iter()
        .filter(|_| given_ca.is_none())
        .map(|spec| spec.key_algorithm)
        .chain(issues.iter().map(|(_, i)| i.spec.key_algorithm))
        .collect();
    let mut keys = generate_keys(&algorithms)?.into_iter();
    // Certificates are valid from the earlier of the store's clock and the writer's: neither
    // clock running ahead of the consumers' makes a certificate that is not valid yet.
    let writer_now = store.writer_now();
    let issue_at = now.min(writer_now);
    let made = Made {
        new_ca: match &plan.ca.new {
            Some(_) if given_ca.is_some() => given_ca,
            Some(spec) => {
                let key = keys.next().expect("a key per algorithm");
                Some(issue_ca_with_key(spec, key, issue_at)?.0)
            }
            None => None,
        },
        writer_clock: writer_now.unix_timestamp_nanos().to_string(),
    };
    let mut issued: BTreeMap<&str, Issued> = BTreeMap::new();
    for ((name, issue), key) in issues.into_iter().zip(keys) {
        let leaf = issue_leaf_with_key(&issue.spec, key, made.key(&issue.signer), issue_at)?;
        issued.insert(name, leaf);
    }
    Ok((made, issued))
}

/// The step's writes after the CA Secret's (every other Secret, and a relink of the CA's
/// files), side by side (at most [`CONCURRENCY`] at once), each through `guard` and logged
/// for `phase`; an HMAC Secret written is recorded in `applied`. Every write is tried; the
/// first error is returned.
async fn put_all<S: SecretStore>(
    store: &S,
    writes: Vec<(SecretWrite, Kind, Action, String)>,
    guard: &Guard<'_>,
    phase: &str,
    applied: &mut Applied,
) -> Result<(), ApplyError> {
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
            Ok(Kind::Hmac) => applied.hmac_written = true,
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Executes `plan` (made from `observed` at `now`): the CA Secret first, then the other
/// Secrets, concurrently. Every write goes through `guard`, and none is made unless `check`
/// accepts what the step leaves; what was done is recorded in `applied`, also when a write
/// fails. With `dry`, it stops after `check`: keys and certificates made, nothing written.
#[allow(clippy::too_many_arguments)] // the step's inputs, each used once
pub async fn apply<S: SecretStore>(
    store: &S,
    plan: Plan,
    observed: &Snapshot,
    now: OffsetDateTime,
    applied: &mut Applied,
    guard: &Guard<'_>,
    check: Check<'_>,
    dry: bool,
) -> Result<(), ApplyError> {
    let phase = plan.phase.name();
    let (made, issued) = make(store, &plan, applied.given_ca.clone(), now)?;
    let ca = &plan.ca;
    let mut writes = Vec::new();
    let mut ca_write = None;
    if let Some(planned) = &ca.write {
        let (write, _) = made.write(&ca.name, planned, None);
        if planned.relinks() {
            // Local mode: only the files consumers read are put back; it signs nothing.
            writes.push((write, Kind::Ca, ca.action, ca.reason.clone()));
        } else {
            ca_write = Some(write);
        }
    }
    let resolve_key = |s: &Option<Signer>| s.as_ref().map(|s| made.key(s).clone());
    applied.signer = resolve_key(&ca.after.signer);
    applied.pending = resolve_key(&ca.after.pending);
    let shown = ca.after.shown.as_ref().map(|r| made.cert(r));
    applied.entries.push(Entry::ca(ca, shown));

    for s in &plan.secrets {
        let mut entry = Entry::planned(s);
        match &s.write {
            None => applied.record(&s.name, observed, &BTreeMap::new(), None),
            Some(planned) => {
                let (write, leaf) = made.write(&s.name, planned, issued.get(s.name.as_str()));
                if let (Some(leaf), Some(issue)) = (&leaf, &planned.issue) {
                    entry = entry.issued(&made.key(&issue.signer).cert, leaf);
                }
                // A relink changes no data: what consumers load is as it was.
                let changed = !planned.relinks();
                applied.record(&s.name, observed, &write.data, changed.then_some(now));
                writes.push((write, s.kind, s.action, s.reason.clone()));
            }
        }
        applied.entries.push(entry);
    }
    // Nothing is written unless every Secret fits the API server's limit (and the local
    // store's, which reads back no file larger).
    for write in ca_write.iter().chain(writes.iter().map(|(w, ..)| w)) {
        fits(store, write)?;
    }
    // Nor unless every leaf consumers may present verifies against every bundle they may hold,
    // before and after these writes.
    check(applied).map_err(ApplyError::Invalid)?;
    if dry {
        return Ok(());
    }
    if let Some(write) = ca_write {
        put(store, &write, guard).await?;
        applied.ca_written = true;
        applied.new_ca_written |= made.new_ca.is_some();
        log_write(store, phase, &ca.name, ca.action, &ca.reason);
    }
    // The CA is stored; the Secrets it signs are independent of each other.
    put_all(store, writes, guard, phase, applied).await?;
    // Every write durable before the run reports it (and before the lock is released).
    store.flush().await?;
    Ok(())
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
    match store.put(write).await {
        Ok(()) => guard.record(store.object(&write.name)),
        // Failed after consumers could read part of it: a write all the same.
        Err(e) if e.wrote() => {
            guard.record(store.object(&write.name));
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    }
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
    let action = action.name();
    let namespace = store.namespace().unwrap_or("");
    tracing::info!(secret = %name, namespace, action, phase, "{action} {}: {reason}", store.object(name));
}
