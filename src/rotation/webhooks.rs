//! The `caBundle` targets (webhook configurations, APIServices) that follow a TLS Secret's
//! bundle, as planned actions: each step's target writes are planned as data ([`plan`], pure)
//! from what was read and the bundles the step leaves in its Secrets, written mechanically
//! right after the Secrets ([`execute`]), and their outcomes come back as data ([`Done`]): the
//! report lines and the targets the API server refused. A dry run lists the same planned
//! writes. Nothing here keeps state: what was refused earlier in the run is the caller's to
//! hold and hand back ([`super::Progress`]).

use std::collections::{BTreeMap, BTreeSet};

use super::invocation::Invocation;
use super::step::{MAX_ATTEMPTS, Outcome};
use crate::certmanager::injected_note;
use crate::config::{Webhook, WebhookKind};
use crate::error::Error;
use crate::observe::Snapshot;
use crate::outside::{
    CaBundleTargets, TargetFields, TargetObserved, TargetRead, describe_target as describe,
};
use crate::pki::{Cert, bundle_pem, parse_cert_chain};
use crate::plan::{Action, CaRef};
use crate::report::Entry;
use crate::store::StoreError;

/// What a read of one configured target found.
#[derive(Debug, Clone)]
pub(super) enum Read {
    /// The API server refused a request on it (403), now or earlier in the run, or
    /// cert-manager's CA injector manages it: left alone.
    Refused,
    /// cert-manager's CA injector writes its `caBundle` (`injected` is set): certgen never
    /// does, but a trust gate waits until it holds the pending CA.
    Injected(Box<TargetRead>),
    Absent,
    Present(Box<TargetRead>),
}

/// A target left alone for the rest of the run, with the report line that says so: the API
/// server refused it (403), or cert-manager's CA injector writes its `caBundle` (two writers
/// on one `caBundle` would overwrite each other on every run). Data the caller keeps, not
/// state of the adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `MutatingWebhookConfiguration name`.
    pub what: String,
    pub note: String,
    /// cert-manager's CA injector writes it (rather than a 403): a trust gate waits until it
    /// holds the pending CA (`gate::Injector`).
    pub injected: bool,
}

/// The refusal `e` is, when it is a 403 on `target`; `None` for any other error.
fn refusal(target: &Webhook, e: &StoreError) -> Option<Refusal> {
    let StoreError::Api(failure) = e else {
        return None;
    };
    if failure.status != Some(403) {
        return None;
    }
    let (plural, group) = (target.kind.plural(), target.kind.group());
    Some(Refusal {
        what: describe(target.kind, &target.name),
        note: format!(
            "{plural} {}: caBundle not kept in step: this identity may not {} {plural}.{group} (cluster-wide, 403); grant it, or pass --disable-topology-injector for Envoy Gateway's injector",
            target.name, failure.verb
        ),
        injected: false,
    })
}

/// Reads one target, unless it is in `refused`; a 403 is a [`Read::Refused`] with its
/// [`Refusal`], as is a target cert-manager's CA injector manages ([`Read::Injected`]); any
/// other error is given back.
async fn read_one(
    api: &dyn CaBundleTargets,
    target: &Webhook,
    refused: &BTreeSet<String>,
) -> Result<(Read, Option<Refusal>), StoreError> {
    if refused.contains(&describe(target.kind, &target.name)) {
        return Ok((Read::Refused, None));
    }
    match api.read(target.kind, &target.name).await {
        Ok(TargetObserved::Absent) => Ok((Read::Absent, None)),
        Ok(TargetObserved::Present(o)) => match &o.injected {
            Some(by) => {
                let what = describe(target.kind, &target.name);
                let note = injected_note(&what, by);
                Ok((
                    Read::Injected(o),
                    Some(Refusal {
                        what,
                        note,
                        injected: true,
                    }),
                ))
            }
            None => Ok((Read::Present(o), None)),
        },
        Err(e) => match refusal(target, &e) {
            Some(r) => Ok((Read::Refused, Some(r))),
            None => Err(e),
        },
    }
}

/// Every `caBundle` target as read, in the config's order, with the refusals the reads met.
/// The first step's gate counts from the newest of their writes as from a Secret's: the API
/// server must have loaded a bundle written there, perhaps by an earlier run that repaired
/// drift long after the Secret's own write, before the leaves that only it trusts are served.
/// The first step plans its target writes from this read rather than reading again (each
/// write is fenced by the resourceVersion read, so nothing is lost if the object changed in
/// between).
pub(super) struct Targets {
    reads: Vec<Read>,
    pub refusals: Vec<Refusal>,
}

impl Targets {
    /// The other writers of the targets as read (issue 45), judged at `now`.
    pub(super) fn writers(&self, now: time::OffsetDateTime) -> Vec<crate::attribution::Writer> {
        self.reads
            .iter()
            .filter_map(|r| match r {
                Read::Present(t) => {
                    let kind = describe(t.kind, &t.name);
                    let kind = kind.split_once(' ').map_or(kind.as_str(), |(k, _)| k);
                    let missing = t.bundles.iter().any(Vec::is_empty);
                    let recorded = crate::observe::writers::history(t.recorded.as_deref());
                    crate::attribution::of_target(kind, &t.name, &t.writes, missing, &recorded, now)
                }
                _ => None,
            })
            .collect()
    }

    /// Reads every target once (nothing when the run has no `caBundle` store), leaving out
    /// those `refused` earlier in the run.
    pub(super) async fn read(
        inv: &Invocation<'_>,
        refused: &BTreeSet<String>,
    ) -> Result<Option<Self>, Error> {
        let Some(api) = inv.webhooks else {
            return Ok(None);
        };
        let mut targets = Self {
            reads: Vec::with_capacity(inv.config.webhooks.len()),
            refusals: Vec::new(),
        };
        for target in &inv.config.webhooks {
            let (read, refusal) = read_one(api, target, refused).await?;
            targets.reads.push(read);
            targets.refusals.extend(refusal);
        }
        Ok(Some(targets))
    }

    /// The targets that exist, each with the Secret whose bundle it follows.
    fn present<'a>(
        &'a self,
        inv: &'a Invocation<'_>,
    ) -> impl Iterator<Item = (&'a str, &'a TargetRead)> {
        inv.config
            .webhooks
            .iter()
            .zip(&self.reads)
            .filter_map(|(target, read)| match read {
                Read::Present(o) => Some((target.bundle_from.as_str(), &**o)),
                _ => None,
            })
    }

    /// Whether a target does not hold the bundle `bundle_of` gives for the Secret it follows
    /// (a step would write it). Absent and refused targets are never behind.
    pub(super) fn behind<'b>(
        &self,
        inv: &Invocation<'_>,
        bundle_of: impl Fn(&str) -> Option<&'b [u8]>,
    ) -> bool {
        self.present(inv)
            .any(|(secret, o)| bundle_of(secret).is_some_and(|bundle| !o.holds(bundle)))
    }

    /// Whether a target does not hold the `ca.crt` its Secret had in `observed`: the first
    /// step will write it (drift), after that step's own writes.
    pub(super) fn behind_stored(&self, inv: &Invocation<'_>, observed: &Snapshot) -> bool {
        let layouts: BTreeMap<&str, String> = inv
            .config
            .tls
            .iter()
            .map(|t| (t.name.as_str(), t.layout.bundle.clone()))
            .collect();
        self.behind(inv, |secret| {
            let key = layouts.get(secret)?;
            observed
                .get(secret)
                .present()
                .and_then(|s| s.data.get(key))
                .map(Vec::as_slice)
        })
    }

    /// The target actions of a step that writes nothing (a dry run's look): every target, as
    /// the run's first step would plan them, at the look's clock.
    pub(super) fn planned(&self, inv: &Invocation<'_>, look: &Outcome) -> Vec<TargetPlan> {
        let reads: Vec<Option<Read>> = self.reads.iter().cloned().map(Some).collect();
        plan(
            &inv.config.webhooks,
            &reads,
            &Wanted::of(look),
            (look.phase.name(), look.now),
        )
    }

    /// The targets cert-manager's CA injector writes, as read: which CAs every entry holds.
    pub(super) fn injected(&self) -> Vec<crate::plan::InjectedTarget> {
        self.reads
            .iter()
            .filter_map(|r| match r {
                Read::Injected(o) => Some(crate::plan::InjectedTarget {
                    what: describe(o.kind, &o.name),
                    holds: o.cas_in_every_entry().unwrap_or_default(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The newest write to any target, by the API server's clock (the CA injector's writes
    /// too: the API server must load them like certgen's).
    pub(super) fn written_at(&self, inv: &Invocation<'_>) -> Option<time::OffsetDateTime> {
        let injected = self.reads.iter().filter_map(|r| match r {
            Read::Injected(o) => o.written_at,
            _ => None,
        });
        self.present(inv)
            .filter_map(|(_, o)| o.written_at)
            .chain(injected)
            .max()
    }
}

/// The `ca.crt` a step leaves in a TLS Secret, which the targets that follow it must hold.
#[derive(Debug, Clone)]
pub enum Wanted {
    /// The bytes stored (or written by the step).
    Stored(Vec<u8>),
    /// A dry run's plan: these CAs, one of which the step would generate.
    Planned(Vec<CaRef>),
}

impl Wanted {
    /// Each bundle the step leaves (`outcome.planned` over what is stored, for a dry run).
    pub fn of(outcome: &Outcome) -> BTreeMap<String, Self> {
        let mut wanted: BTreeMap<String, Self> = outcome
            .bundles
            .iter()
            .map(|(name, bytes)| (name.clone(), Self::Stored(bytes.clone())))
            .collect();
        for (name, refs) in &outcome.planned {
            let known: Option<Vec<Cert>> = refs
                .iter()
                .map(|r| match r {
                    CaRef::Cert(c) => Some(c.clone()),
                    CaRef::New => None,
                })
                .collect();
            let planned = match known {
                Some(certs) => Self::Stored(bundle_pem(&certs).into_bytes()),
                None => Self::Planned(refs.clone()),
            };
            wanted.insert(name.clone(), planned);
        }
        wanted
    }

    /// The CAs it holds, by short fingerprint ("new" for the one the step generates).
    fn cas(&self) -> Vec<String> {
        match self {
            Self::Stored(bytes) => parse_cert_chain(bytes)
                .unwrap_or_default()
                .iter()
                .map(Cert::short_fingerprint)
                .collect(),
            Self::Planned(refs) => refs
                .iter()
                .map(|r| match r {
                    CaRef::New => "new".to_string(),
                    CaRef::Cert(c) => c.short_fingerprint(),
                })
                .collect(),
        }
    }
}

/// One planned `caBundle` write: everything [`execute`] needs, nothing it decides.
#[derive(Debug, Clone)]
pub struct TargetWrite {
    /// The target as read: the write is fenced by its resourceVersion and uid.
    pub read: Box<TargetRead>,
    /// The TLS Secret whose bundle it follows.
    pub follows: String,
    /// That Secret's bundle key (`ca.crt`, or its layout's).
    pub key: String,
    /// The step it belongs to (the phase's name).
    pub step: &'static str,
    /// The CAs it will hold, by short fingerprint, in order.
    pub cas: Vec<String>,
    /// The PEM bundle written (`None` in a dry run whose step would generate a CA).
    pub bundle: Option<Vec<u8>>,
    /// The annotations the write sets, decided here on the store's clock: certgen's mark of
    /// the bundle and the record of undos ([`crate::attribution::target_annotations`]).
    pub annotations: BTreeMap<String, String>,
}

/// What a step does to one target.
#[derive(Debug, Clone)]
pub enum TargetPlan {
    Write(TargetWrite),
    /// Nothing to write: the report line says why.
    Keep {
        what: String,
        reason: String,
    },
}

impl TargetWrite {
    fn what(&self) -> String {
        describe(self.read.kind, &self.read.name)
    }

    /// Its report line (`done`: written, rather than planned).
    fn entry(&self) -> Entry {
        let reason = format!(
            "caBundle follows Secret {}'s {} ({} step; CAs {})",
            self.follows,
            self.key,
            self.step,
            self.cas.join(", ")
        );
        Entry::webhook(&self.what(), Action::UpdateBundle, reason)
            .holding(self.cas.clone(), self.step)
            .recording(
                self.annotations
                    .get(crate::observe::writers::HISTORY)
                    .cloned(),
            )
    }
}

impl TargetPlan {
    /// Its report line.
    pub fn entry(&self) -> Entry {
        match self {
            Self::Write(w) => w.entry(),
            Self::Keep { what, reason } => Entry::webhook(what, Action::Keep, reason.clone()),
        }
    }
}

/// Plans the target writes of a step, pure: each read target (`reads`, one per configured
/// target in `webhooks`, `None` for one this step leaves alone) that does not hold the bundle
/// the step leaves in the Secret it follows (`wanted`) is written; absent ones are reported
/// and left alone (certgen does not create webhook configurations), refused ones left out.
/// Each write carries every annotation it sets, judged at `now` (the store's clock): the
/// record of an undo standing as read is decided here, never by the adapter.
pub fn plan(
    webhooks: &[Webhook],
    reads: &[Option<Read>],
    wanted: &BTreeMap<String, Wanted>,
    (step, now): (&'static str, time::OffsetDateTime),
) -> Vec<TargetPlan> {
    let mut plans = Vec::new();
    for (target, read) in webhooks.iter().zip(reads) {
        let what = describe(target.kind, &target.name);
        let (Some(read), Some(want)) = (read, wanted.get(&target.bundle_from)) else {
            continue;
        };
        let keep = |reason: String| TargetPlan::Keep {
            what: what.clone(),
            reason,
        };
        match read {
            Read::Refused => {}
            Read::Injected(o) => plans.push(keep(format!(
                "managed by cert-manager: its CA injector writes this caBundle ({}); certgen never does",
                o.injected.as_ref().map(ToString::to_string).unwrap_or_default()
            ))),
            Read::Absent => plans.push(keep(format!(
                "not found; its caBundle would follow Secret {}",
                target.bundle_from
            ))),
            Read::Present(o) => match want {
                Wanted::Stored(bundle) if o.holds(bundle) => plans.push(keep(format!(
                    "caBundle is Secret {}'s {}",
                    target.bundle_from, target.bundle_key
                ))),
                _ => {
                    let bundle = match want {
                        Wanted::Stored(b) => Some(b.clone()),
                        Wanted::Planned(_) => None,
                    };
                    plans.push(TargetPlan::Write(TargetWrite {
                        annotations: crate::attribution::target_annotations(
                            o,
                            bundle.as_deref(),
                            now,
                        ),
                        read: o.clone(),
                        follows: target.bundle_from.clone(),
                        key: target.bundle_key.clone(),
                        step,
                        cas: want.cas(),
                        bundle,
                    }))
                }
            },
        }
    }
    plans
}

/// A `caBundle` write as the API server answered it: the object and the resourceVersion the
/// write made, to see it reach the API server's cache.
#[derive(Debug, Clone)]
pub struct Landed {
    pub kind: WebhookKind,
    pub name: String,
    pub version: String,
}

/// What became of one planned target action.
#[derive(Debug)]
pub enum Done {
    /// Nothing to write: the report line.
    Entry(Entry),
    /// Written: the report line and what the write made.
    Wrote(Entry, Landed),
    /// The object changed since it was read (or was recreated): re-read and re-plan.
    Conflict { what: String, error: StoreError },
    /// The API server refused the write (403): left alone for the rest of the run.
    Refused(Refusal),
}

/// Executes planned target actions in order, mechanically: each write as planned, fenced by
/// the read it was planned from; each outcome back as data. Any error other than a conflict or
/// a 403 stops it.
pub async fn execute(
    api: &dyn CaBundleTargets,
    webhooks: &[Webhook],
    plans: &[TargetPlan],
) -> Result<Vec<Done>, Error> {
    let mut done = Vec::with_capacity(plans.len());
    for p in plans {
        let TargetPlan::Write(w) = p else {
            done.push(Done::Entry(p.entry()));
            continue;
        };
        let bundle = w.bundle.as_deref().expect("a run plans bundles it has");
        let fields = TargetFields {
            annotations: w.annotations.clone(),
            ..TargetFields::default()
        };
        match api.put(&w.read, bundle, fields).await {
            Ok(version) => {
                let entry = w.entry();
                let what = w.what();
                tracing::info!(webhook = %what, action = "update-bundle", "update-bundle {what}: {}", entry.reason);
                let landed = Landed {
                    kind: w.read.kind,
                    name: w.read.name.clone(),
                    version,
                };
                done.push(Done::Wrote(entry, landed));
            }
            Err(error @ StoreError::Conflict { .. }) => done.push(Done::Conflict {
                what: w.what(),
                error,
            }),
            Err(e) => {
                let target = webhooks
                    .iter()
                    .find(|t| t.kind == w.read.kind && t.name == w.read.name)
                    .expect("planned from the config");
                match refusal(target, &e) {
                    Some(r) => done.push(Done::Refused(r)),
                    None => return Err(e.into()),
                }
            }
        }
    }
    Ok(done)
}

/// How long a step waits for the API server's cache to show its `caBundle` writes; a write not
/// shown by then is left to the timer (`--propagation-delay`).
pub const CACHED_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until the cache the API server loads the targets from shows every write in `landed`
/// (see [`CaBundleTargets::cached`]), up to [`CACHED_WITHIN`]. `None` once it does; else what
/// was not shown, for the gate's report: the writes then count only by the timer.
pub(super) async fn cached(api: &dyn CaBundleTargets, landed: &[Landed]) -> Option<String> {
    let start = tokio::time::Instant::now();
    let deadline = start + CACHED_WITHIN;
    for l in landed {
        let what = describe(l.kind, &l.name);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, api.cached(l.kind, &l.name, &l.version)).await {
                Ok(Ok(true)) => {
                    let took = start.elapsed();
                    tracing::debug!(target = %what, version = %l.version, "the API server's cache shows the write {took:?} after the step's writes");
                    break;
                }
                // The server waited for its cache before it said so; a short pause all the same.
                Ok(Ok(false)) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                Ok(Err(e)) => return Some(format!("{what} could not be read back: {e}")),
                Err(_) => {
                    return Some(format!(
                        "the API server's cache did not show {what} at resourceVersion {} within {}s",
                        l.version,
                        CACHED_WITHIN.as_secs()
                    ));
                }
            }
        }
    }
    None
}

/// What a step's target actions came to.
#[derive(Debug, Default)]
pub struct Synced {
    /// Report lines: written, kept, absent.
    pub entries: Vec<Entry>,
    /// Targets the API server refused in this step.
    pub refusals: Vec<Refusal>,
    /// The writes made, as the API server answered them.
    pub landed: Vec<Landed>,
}

/// The target actions after a step's Secret writes: planned from `read` (the targets as read
/// before the run's first step, for that step) or from a read now, executed, and after a lost
/// race (the object changed, or was recreated) re-read and re-planned, a bounded number of
/// times. Only the first step plans every target (drift since the last run); later steps only
/// those that follow a Secret they wrote. `refused`: targets refused earlier in the run.
pub(super) async fn sync(
    inv: &Invocation<'_>,
    outcome: &Outcome,
    first: bool,
    read: Option<Targets>,
    refused: &BTreeSet<String>,
) -> Result<Synced, Error> {
    let Some(api) = inv.webhooks else {
        return Ok(Synced::default());
    };
    let webhooks = &inv.config.webhooks;
    let wanted = Wanted::of(outcome);
    let step = outcome.phase.name();
    let mut synced = Synced::default();
    let mut refused = refused.clone();
    // The targets this step acts on (`false`: left alone).
    let mut todo: Vec<bool> = webhooks
        .iter()
        .map(|t| first || outcome.written.contains(&t.bundle_from))
        .collect();
    // The first step's read's refusals are the caller's already.
    let mut reads: Vec<Option<Read>> = match read {
        Some(t) => t.reads.into_iter().map(Some).collect(),
        None => vec![None; webhooks.len()],
    };
    for attempt in 1..=MAX_ATTEMPTS {
        for ((target, read), todo) in webhooks.iter().zip(&mut reads).zip(&todo) {
            if *todo && read.is_none() {
                let (r, refusal) = read_one(api, target, &refused).await?;
                *read = Some(r);
                if let Some(r) = refusal {
                    refused.insert(r.what.clone());
                    synced.refusals.push(r);
                }
            }
        }
        let acting: Vec<Option<Read>> = reads
            .iter()
            .zip(&todo)
            .map(|(r, t)| r.clone().filter(|_| *t))
            .collect();
        let plans = plan(webhooks, &acting, &wanted, (step, outcome.now));
        let mut lost = None;
        for d in execute(api, webhooks, &plans).await? {
            let (entry, landed) = match d {
                Done::Entry(e) => (e, None),
                Done::Wrote(e, landed) => (e, Some(landed)),
                Done::Refused(r) => {
                    if let Some(i) = webhooks
                        .iter()
                        .position(|t| describe(t.kind, &t.name) == r.what)
                    {
                        todo[i] = false;
                    }
                    tracing::warn!("{}", r.note);
                    refused.insert(r.what.clone());
                    synced.refusals.push(r);
                    continue;
                }
                Done::Conflict { what, error } => {
                    tracing::warn!(object = %what, attempt, "{error}; re-reading");
                    if let Some(i) = webhooks
                        .iter()
                        .position(|t| describe(t.kind, &t.name) == what)
                    {
                        reads[i] = None;
                    }
                    lost = Some(error);
                    continue;
                }
            };
            // Done with this target.
            if let Some(i) = webhooks
                .iter()
                .position(|t| describe(t.kind, &t.name) == entry.secret)
            {
                todo[i] = false;
            }
            synced.entries.push(entry);
            synced.landed.extend(landed);
        }
        match lost {
            None => return Ok(synced),
            Some(last) if attempt == MAX_ATTEMPTS => {
                return Err(Error::Contended {
                    attempts: attempt,
                    last,
                });
            }
            Some(_) => {}
        }
    }
    Ok(synced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certmanager::Injected;
    use crate::pki::{CaKey, CaSpec, KeyAlgorithm, issue_ca};

    fn ca() -> CaKey {
        let spec = CaSpec {
            common_name: "test".into(),
            validity: std::time::Duration::from_secs(86_400 * 365),
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        issue_ca(&spec, time::OffsetDateTime::now_utc()).unwrap().0
    }

    /// The store's clock in these tests.
    fn at() -> time::OffsetDateTime {
        time::macros::datetime!(2026-11-28 12:00 UTC)
    }

    fn target(name: &str) -> Webhook {
        Webhook {
            kind: WebhookKind::MutatingWebhookConfiguration,
            name: name.into(),
            bundle_from: "gw".into(),
            bundle_key: "ca.crt".into(),
        }
    }

    fn read(bundle: &[u8]) -> Read {
        Read::Present(Box::new(TargetRead {
            kind: WebhookKind::MutatingWebhookConfiguration,
            name: "w".into(),
            uid: "u".into(),
            version: "7".into(),
            bundles: vec![bundle.to_vec()],
            entries: vec![Default::default()],
            insecure_skip_tls_verify: false,
            written_at: None,
            injected: None,
            writes: Vec::new(),
            recorded: None,
            token: None,
        }))
    }

    #[test]
    fn a_target_behind_its_secret_is_a_planned_write_fenced_by_its_read() {
        let ca = ca();
        let pem = ca.cert.pem().into_bytes();
        let wanted = BTreeMap::from([("gw".to_string(), Wanted::Stored(pem.clone()))]);
        let plans = plan(
            &[target("w")],
            &[Some(read(b"old"))],
            &wanted,
            ("trust", at()),
        );
        let [TargetPlan::Write(w)] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        assert_eq!(w.read.version, "7");
        assert_eq!(w.bundle.as_deref(), Some(pem.as_slice()));
        assert_eq!(w.cas, [ca.cert.short_fingerprint()]);
        let entry = plans[0].entry();
        assert_eq!(entry.action, Action::UpdateBundle);
        assert_eq!(entry.step.as_deref(), Some("trust"));
        assert!(entry.reason.contains("trust step"), "{}", entry.reason);

        // Holding it already, absent, refused, or not acted on in this step: no write.
        let plans = plan(
            &[target("w")],
            &[Some(read(&pem))],
            &wanted,
            ("trust", at()),
        );
        assert!(matches!(plans.as_slice(), [TargetPlan::Keep { .. }]));
        let plans = plan(
            &[target("w")],
            &[Some(Read::Absent)],
            &wanted,
            ("trust", at()),
        );
        assert!(
            matches!(plans.as_slice(), [TargetPlan::Keep { reason, .. }] if reason.contains("not found"))
        );
        assert!(
            plan(
                &[target("w")],
                &[Some(Read::Refused)],
                &wanted,
                ("trust", at())
            )
            .is_empty()
        );
        assert!(plan(&[target("w")], &[None], &wanted, ("trust", at())).is_empty());
    }

    #[test]
    fn a_target_the_ca_injector_manages_is_never_written() {
        let ca = ca();
        let wanted =
            BTreeMap::from([("gw".to_string(), Wanted::Stored(ca.cert.pem().into_bytes()))]);
        let by = Injected {
            annotation: crate::certmanager::INJECT_CA_FROM_SECRET,
            value: "ns/gw".into(),
        };
        // Behind its Secret or not, planned or dry-run: kept, saying why.
        let plans = plan(
            &[target("w")],
            &[Some(injected(by.clone()))],
            &wanted,
            ("trust", at()),
        );
        let [TargetPlan::Keep { reason, .. }] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        assert!(reason.contains("managed by cert-manager"), "{reason}");
        assert!(
            reason.contains("cert-manager.io/inject-ca-from-secret: ns/gw"),
            "{reason}"
        );
        assert_eq!(plans[0].entry().action, Action::Keep);
    }

    /// A target as read that cert-manager's CA injector writes (`by`).
    fn injected(by: Injected) -> Read {
        let Read::Present(mut t) = read(b"") else {
            unreachable!()
        };
        t.injected = Some(by);
        Read::Injected(t)
    }

    /// A target whose `caBundle` another manager stripped after certgen's write, with one
    /// earlier strip recorded on it.
    fn stripped(bundle: &[u8], recorded: &str) -> Read {
        let Read::Present(mut t) = read(bundle) else {
            unreachable!()
        };
        let hook = serde_json::json!({"f:webhooks": {"k:{\"name\":\"a\"}": {"f:clientConfig": {"f:caBundle": {}}}}});
        let stamp = serde_json::json!({"f:metadata": {"f:annotations": {"f:x": {}}}});
        t.writes = vec![
            crate::secret::FieldWrite::parse(
                "certgen",
                "Update",
                Some(at() - time::Duration::hours(2)),
                Some(&hook),
            ),
            crate::secret::FieldWrite::parse(
                "tigera-operator",
                "Update",
                Some(at() - time::Duration::hours(1)),
                Some(&stamp),
            ),
        ];
        t.recorded = Some(recorded.into());
        Read::Present(t)
    }

    #[test]
    fn the_record_of_undos_and_the_mark_are_planned_on_the_stores_clock() {
        let ca = ca();
        let pem = ca.cert.pem().into_bytes();
        let wanted = BTreeMap::from([("gw".to_string(), Wanted::Stored(pem.clone()))]);
        let earlier = "tigera-operator@2026-11-28T09:00:00Z";
        let reads = [Some(stripped(b"", earlier))];
        let plans = plan(&[target("w")], &reads, &wanted, ("trust", at()));
        let [TargetPlan::Write(w)] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        use sha2::Digest as _;
        assert_eq!(
            w.annotations
                .get(crate::attribution::BUNDLE_ANNOTATION)
                .map(String::as_str),
            Some(crate::pki::hex(&sha2::Sha256::digest(&pem)).as_str())
        );
        let record = "tigera-operator@2026-11-28T09:00:00Z,tigera-operator@2026-11-28T11:00:00Z";
        assert_eq!(
            w.annotations
                .get(crate::observe::writers::HISTORY)
                .map(String::as_str),
            Some(record)
        );
        // The report line (and so the dry run's JSON) lists the record the write sets.
        assert_eq!(plans[0].entry().undone_by.as_deref(), Some(record));

        // The same read planned a day later: both undos are past the fight window, and the
        // record is cleared. The clock is the plan's parameter, nobody else's.
        let later = at() + time::Duration::hours(22);
        let plans = plan(&[target("w")], &reads, &wanted, ("trust", later));
        let [TargetPlan::Write(w)] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        assert_eq!(
            w.annotations
                .get(crate::observe::writers::HISTORY)
                .map(String::as_str),
            Some("tigera-operator@2026-11-28T11:00:00Z")
        );
        let plans = plan(
            &[target("w")],
            &reads,
            &wanted,
            ("trust", at() + time::Duration::hours(30)),
        );
        let [TargetPlan::Write(w)] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        assert_eq!(
            w.annotations
                .get(crate::observe::writers::HISTORY)
                .map(String::as_str),
            Some("")
        );
        assert_eq!(plans[0].entry().undone_by.as_deref(), Some(""));

        // Nothing undone and nothing recorded: the mark alone.
        let plans = plan(
            &[target("w")],
            &[Some(read(b"old"))],
            &wanted,
            ("trust", at()),
        );
        let [TargetPlan::Write(w)] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        assert_eq!(
            w.annotations.keys().collect::<Vec<_>>(),
            [crate::attribution::BUNDLE_ANNOTATION]
        );
        assert_eq!(plans[0].entry().undone_by, None);

        // A dry run whose step generates the CA does not know the bundle: no mark yet, the
        // record all the same.
        let wanted = BTreeMap::from([("gw".to_string(), Wanted::Planned(vec![CaRef::New]))]);
        let plans = plan(&[target("w")], &reads, &wanted, ("trust", at()));
        let [TargetPlan::Write(w)] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        assert_eq!(
            w.annotations.keys().collect::<Vec<_>>(),
            [crate::observe::writers::HISTORY]
        );
    }

    #[test]
    fn a_dry_run_plans_the_ca_it_would_generate() {
        let ca = ca();
        let wanted = BTreeMap::from([(
            "gw".to_string(),
            Wanted::Planned(vec![CaRef::New, CaRef::Cert(ca.cert.clone())]),
        )]);
        let plans = plan(
            &[target("w")],
            &[Some(read(b"old"))],
            &wanted,
            ("trust", at()),
        );
        let [TargetPlan::Write(w)] = plans.as_slice() else {
            panic!("{plans:?}")
        };
        assert_eq!(w.bundle, None);
        assert_eq!(w.cas, ["new".to_string(), ca.cert.short_fingerprint()]);
    }
}
