//! `certgen check`: expiry, trust and consistency of every Secret, like
//! `kubeadm certs check-expiration`.
//!
//! A pure function of what is stored (read through [`crate::observe`], parsed by its one
//! parser), the `caBundle` targets as read, the config and `now`.
//!
//! **One judgement.** The verdict is the planner's: [`crate::plan::plan`] is asked what a plain
//! run (no flags) would do with the same observation, and `check` is healthy exactly when that
//! run would write nothing, wait for nothing and refuse nothing ([`NextRun`]). Unlike the
//! planner, which stops at its first problem, `check` then explains: every problem it finds is
//! a typed [`Finding`] on its Secret's row, and a write the planner makes that no finding
//! explains is named with the planner's own reason, so a row is never `ok` while the next run
//! acts on it. The metrics and the exporter render this same report ([`crate::exposition`]).
//! It must not read, write or decide anything itself; the report it returns is rendered by
//! [`crate::report`].

use std::fmt;
use std::time::Duration;

use time::OffsetDateTime;

use crate::config::Config;
use crate::observe::Snapshot;
use crate::observe::parse::{self, Field};
use crate::pki::Cert;
use crate::plan::rules::{due, san_drift};
use crate::plan::{Invalid, Known, Options, Phase, Plan};
use crate::report::{BundleEntry, CheckReport, Row, TargetRow};
pub use crate::report::{NextRun, PlannedWrite};
use crate::secret::{Divergence, Observed, StoredSecret};

/// A `caBundle` target (webhook configuration, APIService) as read for `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaBundleTarget {
    /// `MutatingWebhookConfiguration`, `ValidatingWebhookConfiguration`, `APIService`.
    pub kind: String,
    pub name: String,
    /// The managed Secret whose `ca.crt` the target's `caBundle` follows.
    pub secret: String,
    pub state: TargetState,
    /// The other field manager that last wrote its `caBundle`, if one did.
    pub writer: Option<crate::attribution::Writer>,
    /// For a target cert-manager's CA injector writes: the pending CA of the staged rotation
    /// under way (short fingerprint) that its `caBundle` does not hold yet
    /// ([`pending_not_injected`]).
    pub pending_missing: Option<String>,
}

/// For a target cert-manager's CA injector writes (`injected`), whose entries hold `entries`
/// (one `caBundle` each): the pending CA of the staged rotation under way (the CA Secret's
/// `next.crt`, by its short fingerprint) when an entry does not hold it yet, or cannot be
/// read. A run's trust gate waits for the injector to add it (`rotation/gate/injector.rs`, by
/// the same rule: [`crate::outside::holds_ca`]); `check` says so on the target's row and
/// under `ACTION DUE`.
pub fn pending_not_injected(
    config: &Config,
    observed: &Snapshot,
    injected: bool,
    entries: &[Vec<u8>],
) -> Option<String> {
    if !injected {
        return None;
    }
    let data = observed.ca_parsed(&config.ca.layout)?;
    let Field::Ok(next) = &data.next_cert else {
        return None;
    };
    match crate::outside::holds_ca(entries, next.fingerprint()) {
        Ok(true) => None,
        Ok(false) | Err(_) => Some(next.short_fingerprint()),
    }
}

/// What the read of a `caBundle` target found. A run writes the targets that are
/// [`TargetState::Drifted`] and leaves every other state alone (new states join that rule in
/// [`TargetState::run_writes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetState {
    /// Every entry holds the Secret's `ca.crt` (or the Secret is not there to compare with).
    InSync,
    /// An entry's `caBundle` differs from the Secret's `ca.crt` (another bundle, garbage, or
    /// none): a run repairs it.
    Drifted,
    /// The object does not exist (certgen never creates it).
    Absent,
    /// This identity may not read it (403).
    Refused,
    /// cert-manager's CA injector writes its `caBundle` (it carries one of the injector's
    /// annotations): certgen never does.
    CertManager,
    /// Envoy Gateway's topology injector under its chart's name does not exist, and several
    /// objects labelled as that injector call a Service in its namespace: a run refuses to
    /// choose (the exporter's judgement; `check` and a run stop with that error).
    Ambiguous,
}

impl TargetState {
    /// Its name in reports and the metrics' `status` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::InSync => "in_sync",
            Self::Drifted => "drifted",
            Self::Absent => "absent",
            Self::Refused => "refused",
            Self::CertManager => "cert_manager",
            Self::Ambiguous => "ambiguous",
        }
    }

    /// What `check`'s table says.
    pub fn text(self) -> &'static str {
        match self {
            Self::InSync => "in step",
            Self::Drifted => "drifted (a run rewrites it)",
            Self::Absent => "not found",
            Self::Refused => "not readable (403)",
            Self::CertManager => "managed by cert-manager (its CA injector writes it)",
            Self::Ambiguous => {
                "not found, and several objects labelled app.kubernetes.io/component=topology-injector call a Service in its namespace: name the one to keep in step with --topology-injector"
            }
        }
    }

    /// Every state, in the order the metrics list them.
    pub const ALL: [Self; 6] = [
        Self::InSync,
        Self::Drifted,
        Self::Absent,
        Self::Refused,
        Self::CertManager,
        Self::Ambiguous,
    ];

    /// The state of a present target whose entries hold `entries` (one `caBundle` each), against
    /// the `ca.crt` of the Secret it follows (`None`: not stored). The run's rule
    /// (`outside::TargetRead::holds`): in sync when every entry holds exactly those bytes (a
    /// configuration without entries holds anything).
    pub fn of_entries(entries: &[Vec<u8>], bundle: Option<&[u8]>) -> Self {
        match bundle {
            Some(b) if !entries.iter().all(|e| e == b) => Self::Drifted,
            _ => Self::InSync,
        }
    }

    /// The state of target `t`, present with these `entries`, against the Secret it follows
    /// as `observed`: `check`'s and the exporter's one judgement of a target that exists.
    /// `injected`: cert-manager's CA injector writes it.
    pub fn of_present(
        config: &Config,
        t: &crate::config::Webhook,
        observed: &Snapshot,
        injected: bool,
        entries: &[Vec<u8>],
    ) -> Self {
        if injected {
            return Self::CertManager;
        }
        let key = config.layout_of(&t.bundle_from).bundle;
        let bundle = observed
            .get(&t.bundle_from)
            .present()
            .and_then(|s| s.data.get(&key));
        Self::of_entries(entries, bundle.map(Vec::as_slice))
    }

    /// Whether a plain run writes a target in this state.
    pub fn run_writes(self) -> bool {
        self == Self::Drifted
    }
}

/// What `check` judges besides the Secrets as read.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// How long a plain run lets consumers load a change before the next step relies on it
    /// (the store's default: [`crate::config::propagation_delay`]).
    pub propagation_delay: Duration,
    /// Each `caBundle` target as read (none when they were not read).
    pub targets: Vec<CaBundleTarget>,
    /// Secrets whose read failed although they exist (local mode: a file over the size bound,
    /// a link, another user's file): (Secret, why). A run refuses to go on; `check` reports
    /// them and judges the others.
    pub unreadable: Vec<(String, String)>,
    /// Judged as part of `check` over a set of clusters, whose run may change the shared CA:
    /// a member's own plain run refuses to, a run over the set does not.
    pub in_set: bool,
    /// Undos of certgen's writes seen besides those recorded on the objects (the exporter's
    /// memory of what it watched), by `Kind/name` ([`crate::attribution::key`]).
    pub undos: std::collections::BTreeMap<String, Vec<crate::observe::writers::Undo>>,
}

impl Context {
    /// Why Secret `name` could not be read, if it could not.
    fn unread(&self, name: &str) -> Option<String> {
        self.unreadable
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| why.clone())
    }
}

/// One problem `check` found with a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The CA Secret does not exist, while leaves need it.
    NoCa,
    /// The Secret does not exist.
    Missing,
    /// The Secret exists but cannot be read (local mode: a file over the size bound, a link,
    /// another user's file): a run stops before anything is written.
    Unreadable(String),
    /// Another manager owns the Secret: a run refuses to take it over (unless `--force`).
    ForeignOwner(String),
    /// A cert-manager `Certificate` issues into the Secret: a run refuses it, `--force` or not.
    CertManager(String),
    /// The Secret's type is not the one its role needs: a run refuses it (a type cannot be
    /// changed).
    WrongType { found: String, expected: String },
    /// A data key a run needs is not there, or is empty. `refused`: a run refuses the Secret
    /// (a certificate or key), rather than writing it (a trust bundle).
    KeyMissing { key: String, refused: bool },
    /// A data key holds something unusable: not PEM, a key that does not match its
    /// certificate, a bundle against the rules.
    Unusable { key: String, problem: String },
    /// The CA Secret's `tls.crt` is not a CA certificate.
    NotCa { key: String, subject: String },
    /// The CA expires within its renewBefore, or has expired.
    CaDue(String),
    /// The certificate expires within its renewBefore, or has expired.
    Due(String),
    /// The certificate's SANs are not the config's.
    SanDrift(String),
    /// The certificate was issued by no CA the CA Secret holds.
    UnknownIssuer,
    /// The certificate was issued by a CA the CA Secret holds, not the active one.
    OtherIssuer,
    /// The bundles of these peers do not trust the certificate.
    Untrusted(Vec<String>),
    /// A trust bundle holds the same CA more than once: a run writes it once.
    Duplicate {
        key: String,
        ca: String,
        times: usize,
    },
    /// A trust bundle holds an expired CA: a run drops it.
    ExpiredCa {
        key: String,
        ca: String,
        expired: String,
    },
    /// A staged rotation's pending CA (`next.crt`, `next.key`) a run cannot use: not a CA, a
    /// key missing or not matching. A run refuses it, or starts the rotation again with
    /// `--force`.
    PendingCa(String),
    /// An HMAC Secret without its key, or with an empty one.
    HmacKey(String),
    /// An HMAC key shorter than the profile asks for (the message says by how much).
    HmacShort(String),
    /// Local mode: a file consumers read is not the link into certgen's own copy.
    Divergent(Divergence),
    /// The TLS Secrets were written by another tool since certgen's last run: what they
    /// hold, and what the next run does about it (the planner's own reading).
    WrittenByAnotherTool { found: String, next: String },
    /// The next run writes this Secret for a reason no other finding gives: the planner's
    /// action and reason.
    NextRun { action: String, reason: String },
    /// The next run refuses to go on because of this Secret: the planner's error.
    Refused(String),
    /// certgen's own CA Secret is gone while leaves it signed remain: the key of a CA the
    /// consumers trust is lost ([`crate::plan::LostCa`]). Status `lost`.
    LostCa(String),
}

impl Finding {
    /// Whether the Secret is missing (status `missing`).
    fn missing(&self) -> bool {
        matches!(self, Self::NoCa | Self::Missing)
    }

    /// Whether a run refuses the Secret as stored (status `invalid`) rather than writing it
    /// (status `due`): the planner's errors, which `--force` or a person must resolve.
    fn invalid(&self) -> bool {
        match self {
            Self::KeyMissing { refused, .. } => *refused,
            Self::Unreadable(_)
            | Self::ForeignOwner(_)
            | Self::CertManager(_)
            | Self::WrongType { .. }
            | Self::Unusable { .. }
            | Self::NotCa { .. }
            | Self::PendingCa(_)
            | Self::Divergent(_)
            | Self::HmacKey(_)
            | Self::HmacShort(_)
            | Self::Refused(_)
            | Self::LostCa(_) => true,
            _ => false,
        }
    }
}

impl Finding {
    /// What it says about a state the next run keeps as it is.
    fn note(&self) -> String {
        match self {
            Self::NoCa => "no CA Secret: the leaves are kept with the CA that signed them (another tool's: certgen's own would be `lost`); certgen creates its own CA, staged, when a leaf or that CA falls due".into(),
            Self::UnknownIssuer => "issued by a CA whose key certgen does not hold; kept until it falls due".into(),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCa => f.write_str(
                "no CA Secret: leaves cannot be renewed until certgen creates one (run certgen)",
            ),
            Self::Missing => f.write_str("missing: run certgen to create it"),
            Self::Unreadable(why) => write!(
                f,
                "cannot be read: {why} (a run stops here before writing anything)"
            ),
            Self::ForeignOwner(owner) => write!(
                f,
                "a run refuses to take it over: {owner}; remove it from the other manager, choose another Secret name, or run certgen --force"
            ),
            Self::CertManager(why) => write!(
                f,
                "a run refuses to write it: {why}; leave it to cert-manager (remove it from certgen's config), or delete the Certificate to hand it to certgen (docs/cert-manager.md)"
            ),
            Self::WrongType { found, expected } => write!(
                f,
                "has type {found:?}, expected {expected:?}: a run refuses it (a Secret's type cannot be changed; delete it only if it is certgen's own, or give certgen another Secret name)"
            ),
            Self::KeyMissing { key, .. } => write!(f, "{key} is missing"),
            Self::Unusable { key, problem } => write!(f, "{key}: {problem}"),
            Self::NotCa { key, subject } => write!(f, "{key} ({subject}) is not a CA certificate"),
            Self::CaDue(why) => write!(f, "the CA {why}: run certgen to rotate it"),
            Self::Due(why) => write!(f, "the certificate {why}: run certgen to renew it"),
            Self::SanDrift(drift) => write!(f, "{drift}: run certgen to renew it"),
            Self::UnknownIssuer => f.write_str("issued by a CA certgen does not know"),
            Self::OtherIssuer => f.write_str("issued by a CA other than the active one"),
            Self::Untrusted(peers) => {
                write!(f, "not trusted by the bundle of {}", peers.join(", "))
            }
            Self::Duplicate { key, ca, times } => write!(
                f,
                "{key} holds CA {ca} {times} times: run certgen to write it once"
            ),
            Self::ExpiredCa { key, ca, expired } => write!(
                f,
                "{key} holds CA {ca}, expired {expired}: run certgen to drop it"
            ),
            Self::PendingCa(problem) => write!(
                f,
                "pending CA: {problem} (a run refuses it; run certgen --force to start the rotation again)"
            ),
            Self::HmacKey(key) => write!(f, "key {key:?} is missing or empty"),
            Self::HmacShort(why) => write!(f, "{why}: run certgen --rotate-hmac to replace it"),
            Self::Divergent(d) if d.repairable() => {
                write!(f, "{}: run certgen to restore it", d.describe())
            }
            Self::Divergent(d) => write!(
                f,
                "{}: certgen cannot tell which copy is meant; delete it to have certgen restore its own, or run certgen --force to replace it",
                d.describe()
            ),
            Self::WrittenByAnotherTool { found, next } => {
                write!(
                    f,
                    "written by another tool since certgen's last run: {found}; the next run: {next}"
                )
            }
            Self::NextRun { action, reason } => {
                write!(f, "the next run: {action} ({reason})")
            }
            Self::Refused(why) => write!(f, "the next run refuses: {why}"),
            Self::LostCa(problem) => write!(
                f,
                "{problem}. Restore the CA Secret from a backup to keep that CA, or run certgen --overwrite to stage a new one (docs/alerts.md#certgencakeylost)"
            ),
        }
    }
}

/// One Secret being checked: its row, and what was found.
struct Checked {
    row: Row,
    findings: Vec<Finding>,
}

impl Checked {
    fn new(secret: &str, kind: &'static str) -> Self {
        Self {
            row: Row::new(secret, kind),
            findings: Vec::new(),
        }
    }

    fn unusable(&mut self, key: &str, problem: impl fmt::Display) {
        self.findings.push(Finding::Unusable {
            key: key.to_string(),
            problem: problem.to_string(),
        });
    }

    /// The findings about the Secret as a whole, which a run judges before its contents: who
    /// manages it, and its type.
    fn judge_common(&mut self, s: &StoredSecret, want_type: &str) {
        match parse::foreign_owner(s) {
            Some(parse::Foreign::Other(owner)) => self.findings.push(Finding::ForeignOwner(owner)),
            Some(parse::Foreign::CertManager(why)) => self.findings.push(Finding::CertManager(why)),
            None => {}
        }
        if s.type_ != want_type {
            self.findings.push(Finding::WrongType {
                found: s.type_.clone(),
                expected: want_type.to_string(),
            });
        }
    }

    /// The duplicated and expired CAs of the bundle in `key`.
    fn judge_bundle(&mut self, key: &str, certs: &[Cert], now: OffsetDateTime) {
        let mut seen: Vec<[u8; 32]> = Vec::new();
        for c in certs {
            let fp = c.fingerprint();
            if seen.contains(&fp) {
                continue;
            }
            seen.push(fp);
            let times = certs.iter().filter(|o| o.fingerprint() == fp).count();
            if times > 1 {
                self.findings.push(Finding::Duplicate {
                    key: key.to_string(),
                    ca: c.short_fingerprint(),
                    times,
                });
            }
            if c.is_expired_at(now) {
                self.findings.push(Finding::ExpiredCa {
                    key: key.to_string(),
                    ca: c.short_fingerprint(),
                    expired: crate::timefmt::rfc3339(c.not_after),
                });
            }
        }
    }

    /// The row, its status following from the findings. When the next run does nothing
    /// (`quiet`), what was found explains a state certgen keeps (another tool's CA, adopted):
    /// notes, not problems, and the row is `ok`.
    fn finish(self, quiet: bool) -> Row {
        if quiet {
            return Row {
                notes: self.findings.iter().map(Finding::note).collect(),
                ..self.row
            };
        }
        let status = if self
            .findings
            .iter()
            .any(|f| matches!(f, Finding::LostCa(_)))
        {
            "lost"
        } else if self.findings.iter().any(Finding::missing) {
            "missing"
        } else if self.findings.iter().any(Finding::invalid) {
            "invalid"
        } else if !self.findings.is_empty() {
            "due"
        } else {
            "ok"
        };
        Row {
            status,
            problems: self.findings.iter().map(Finding::to_string).collect(),
            ..self.row
        }
    }
}

/// What a plain run does next: the planner's answer (`planned`: its first step over the same
/// observation, `None` when a Secret could not be read), in its own words.
fn next_run(planned: Option<&Result<Plan, Invalid>>, ctx: &Context) -> NextRun {
    match planned {
        None => {
            let (object, message) = ctx.unreadable.first().cloned().unwrap_or_default();
            NextRun::Refuses { object, message }
        }
        Some(Err(Invalid {
            object,
            problem,
            fix,
        })) => NextRun::Refuses {
            object: object.clone(),
            message: format!("{problem}; {fix}"),
        },
        Some(Ok(plan)) => from_plan(plan),
    }
}

/// The next run as `plan` (a plain run's first step) has it.
fn from_plan(plan: &Plan) -> NextRun {
    if let Phase::Gate {
        ready_at, reason, ..
    } = &plan.phase
    {
        return NextRun::Waits {
            until: crate::timefmt::rfc3339(*ready_at),
            reason: reason.clone(),
        };
    }
    let ca = std::iter::once((&plan.ca.name, plan.ca.action, &plan.ca.reason));
    let secrets = plan.secrets.iter().map(|s| (&s.name, s.action, &s.reason));
    let writes: Vec<PlannedWrite> = ca
        .chain(secrets)
        .filter(|(_, action, _)| action.writes())
        .map(|(name, action, reason)| PlannedWrite {
            object: name.clone(),
            action: action.name().to_string(),
            reason: reason.clone(),
        })
        .collect();
    if writes.is_empty() {
        NextRun::Nothing
    } else {
        NextRun::Writes { writes }
    }
}

/// The TLS Secrets' rows, appended to `rows` (a missing Secret's says so, unless it could not
/// be read), judged against the CAs `issuers` shows; and the leaves they hold, for the check
/// of trust between them.
fn leaf_rows(
    config: &Config,
    observed: &Snapshot,
    ctx: &Context,
    issuers: &Issuers<'_>,
    now: OffsetDateTime,
    rows: &mut Vec<Checked>,
) -> Vec<Leaf> {
    let mut leaves: Vec<Leaf> = Vec::new();
    for t in &config.tls {
        let Some(s) = observed.get(&t.name).present() else {
            let mut r = Checked::new(&t.name, "tls");
            if ctx.unread(&t.name).is_none() {
                r.findings.push(Finding::Missing);
            }
            rows.push(r);
            continue;
        };
        let data = observed
            .leaf_parsed(&t.name, &t.layout)
            .expect("the Secret is present");
        let (r, leaf) = leaf_row(t, (s, &data), issuers, now);
        if let Some((leaf, bundle)) = leaf {
            leaves.push(Leaf {
                row: rows.len(),
                cert: leaf,
                bundle,
                usages: t.leaf.usages,
            });
        }
        rows.push(r);
    }
    leaves
}

/// certgen's own CA Secret gone with its key while leaves it signed remain: never healthy,
/// whatever the leaves' expiry (the planner's same finding makes a plain run refuse). Said on
/// the CA's row (`rows[0]`); its leaves are fine as they are, their issuer the lost CA.
fn own_ca_lost(observed: &Snapshot, leaves: &[Leaf], now: OffsetDateTime, rows: &mut [Checked]) {
    let held = leaves.iter().map(|l| {
        (
            rows[l.row].row.secret.as_str(),
            &l.cert,
            l.bundle.as_slice(),
        )
    });
    if let Some(lost) = crate::plan::lost_ca(observed, held, now) {
        rows[0].findings.retain(|f| *f != Finding::NoCa);
        rows[0].findings.push(Finding::LostCa(lost.problem()));
        // Its leaves are fine as they are: their issuer is the lost CA, which the CA row says.
        for r in rows
            .iter_mut()
            .filter(|r| lost.secrets.contains(&r.row.secret))
        {
            r.findings.retain(|f| *f != Finding::UnknownIssuer);
            r.row.issuer = Some(lost.ca.short_fingerprint());
        }
    }
}

/// Each row's Secret that could not be read, and (local mode) the files consumers read that
/// are not certgen's own copy: judge what consumers read, not only what certgen stores.
fn unread_and_divergent(config: &Config, observed: &Snapshot, ctx: &Context, rows: &mut [Checked]) {
    for r in rows {
        if let Some(why) = ctx.unread(&r.row.secret) {
            r.findings.push(Finding::Unreadable(why));
        }
        let stored = observed
            .named(&r.row.secret, &config.ca.secret_name)
            .and_then(Observed::present);
        for d in stored.into_iter().flat_map(|s| &s.divergent) {
            r.findings.push(Finding::Divergent(d.clone()));
        }
    }
}

/// The caBundle targets' rows; a run writes the drifted ones (after its Secrets' writes, if
/// any), and a target a run cannot choose stops it before it writes anything (`next`).
fn with_targets(next: &mut NextRun, ctx: &Context) -> Vec<TargetRow> {
    let (targets, drifted) = target_rows(ctx);
    if !drifted.is_empty() {
        match next {
            NextRun::Nothing => *next = NextRun::Writes { writes: drifted },
            NextRun::Writes { writes } => writes.extend(drifted),
            NextRun::Waits { .. } | NextRun::Refuses { .. } => {}
        }
    }
    if let Some(t) = ctx
        .targets
        .iter()
        .find(|t| t.state == TargetState::Ambiguous)
        && !matches!(next, NextRun::Refuses { .. })
    {
        *next = NextRun::Refuses {
            object: format!("{} {}", t.kind, t.name),
            message: t.state.text().into(),
        };
    }
    targets
}

/// A routine rotation held for the renewal window `w`: healthy (a plain run writes nothing
/// and exits 0), but said as such on each row it holds, with the window it waits for.
fn waiting_for(w: &crate::report::WindowReport, rows: &mut [Row]) {
    for row in rows.iter_mut().filter(|r| r.status == "ok") {
        if let Some(held) = w.waiting.iter().find(|h| h.secret == row.secret) {
            row.status = "waiting";
            row.notes = vec![format!(
                "{} ({}) waits for the renewal window opening at {}",
                held.what,
                held.due,
                w.next_start.as_deref().unwrap_or("-")
            )];
        }
    }
}

/// Checks every Secret of `config` as stored (`observed`), and the `caBundle` targets and
/// unreadable Secrets of `ctx`: each problem on its row, and the verdict of a plain run.
pub fn check(
    config: &Config,
    observed: &Snapshot,
    now: OffsetDateTime,
    store: String,
    ctx: &Context,
) -> CheckReport {
    // The one judge of what is valid: rustls-webpki at `now` (`pki::Verifier`).
    let verifier = crate::pki::Verifier::new(now);
    let ca_unreadable = ctx.unread(&config.ca.secret_name).is_some();

    let Ca {
        mut row,
        active,
        known,
        rotation,
    } = ca_row(config, observed, &verifier, now, ca_unreadable);
    // What a plain run does (its first step, planned over the same observation; nothing can
    // be planned over a Secret that could not be read).
    let object = |name: &str| name.to_string();
    let options = Options {
        propagation_delay: ctx.propagation_delay,
        ..Options::default()
    };
    let planned = ctx
        .unreadable
        .is_empty()
        .then(|| crate::plan::plan(config, observed, now, options, Known::default(), &object));
    if let Some(Ok(p)) = &planned {
        another_writer(&mut row, p);
    }
    let mut rows = vec![row];

    // The leaves, then trust between them.
    let issuers = Issuers {
        active: active.as_ref(),
        known: &known,
        unknown: ca_unreadable,
    };
    let leaves = leaf_rows(config, observed, ctx, &issuers, now, &mut rows);
    trust_between(&leaves, &mut rows, &verifier, now);
    own_ca_lost(observed, &leaves, now, &mut rows);

    for h in &config.hmac {
        rows.push(hmac_row(h, observed, ctx.unread(&h.name).is_some()));
    }
    unread_and_divergent(config, observed, ctx, &mut rows);

    // The verdict: what a plain run does. Each write or refusal it makes is explained on its
    // row, by a finding above or by the planner's own reason.
    let mut next = next_run(planned.as_ref(), ctx);
    // A member of a set of clusters: a plain run here refuses to change the shared CA, and
    // says what to run instead (exit 1).
    if let (Some(Ok(p)), false) = (&planned, ctx.in_set)
        && let Err(crate::error::Error::SharedCaDue { object, message }) =
            crate::set::refuse_shared_ca(config, observed, (p, false), &object)
    {
        next = NextRun::Refuses { object, message };
    }
    explain(&next, &mut rows);
    let targets = with_targets(&mut next, ctx);
    let quiet = next == NextRun::Nothing;
    let window = match &planned {
        Some(Ok(p)) => crate::report::WindowReport::of(&config.renewal, &p.window),
        _ => None,
    };
    let mut rows: Vec<Row> = rows.into_iter().map(|r| r.finish(quiet)).collect();
    if let Some(w) = &window {
        waiting_for(w, &mut rows);
    }
    let mut report = CheckReport::new(config, store, rotation, rows, targets, next, now);
    report.renewal_window = window;
    // Other writers, named; a fight is never healthy (issue 45).
    let mut writers = crate::attribution::of_snapshot(config, observed, &ctx.undos, now);
    writers.extend(ctx.targets.iter().filter_map(|t| t.writer.clone()));
    report.other_writers = writers.iter().map(crate::report::WriterRow::of).collect();
    if writers.iter().any(|w| w.fight.is_some()) {
        report.healthy = false;
    }
    report
}

/// The CA Secret's row, and what it shows of the CAs.
struct Ca {
    row: Checked,
    /// The CA that signs now (`tls.crt`).
    active: Option<Cert>,
    /// Every CA the Secret holds: the active one, its bundle and a pending one.
    known: Vec<Cert>,
    /// A staged rotation in progress, said in words.
    rotation: Option<String>,
}

fn ca_row(
    config: &Config,
    observed: &Snapshot,
    verifier: &crate::pki::Verifier,
    now: OffsetDateTime,
    ca_unreadable: bool,
) -> Ca {
    let mut row = Checked::new(&config.ca.secret_name, "ca");
    let Some(s) = observed.ca().present() else {
        if !ca_unreadable && !config.tls.is_empty() {
            row.findings.push(Finding::NoCa);
        }
        return Ca {
            row,
            active: None,
            known: Vec::new(),
            rotation: None,
        };
    };
    let (mut active, mut known, mut rotation) = (None, Vec::new(), None);
    let layout = &config.ca.layout;
    row.judge_common(s, layout.type_);
    let data = parse::ca(s, layout);
    match data.cert {
        Field::Ok(cert) => {
            if !cert.is_ca {
                row.findings.push(Finding::NotCa {
                    key: layout.cert.clone(),
                    subject: cert.subject.clone(),
                });
            }
            if let Field::Bad(p) = &data.key {
                row.unusable(&layout.key, p);
            }
            if let Some(why) = due(&cert, config.ca.renew_before, now) {
                row.findings.push(Finding::CaDue(why));
            }
            if let Some(why) =
                crate::plan::ca_refusal(config, verifier, &cert).filter(|_| cert.is_ca)
            {
                row.unusable(
                    &layout.cert,
                    format!("TLS verifiers would reject this CA: {why}"),
                );
            }
            row.row.issuer = Some(cert.short_fingerprint());
            row.row = row.row.with_cert(&cert, now);
            known.push(cert.clone());
            active = Some(cert);
        }
        Field::Bad(p) => row.unusable(&layout.cert, p),
        Field::Absent | Field::Empty | Field::Unchecked => {
            row.findings.push(Finding::KeyMissing {
                key: layout.cert.clone(),
                refused: true,
            });
        }
    }
    match data.bundle {
        Field::Ok(b) => {
            if let Some(e) = &b.broken {
                row.unusable(&layout.bundle, e);
            }
            row.judge_bundle(&layout.bundle, &b.certs, now);
            row.row.bundle = BundleEntry::list(&b.certs, now);
            known.extend(b.certs);
        }
        Field::Bad(p) => row.unusable(&layout.bundle, p),
        Field::Absent | Field::Empty | Field::Unchecked => {}
    }
    // A staged rotation's pending CA, judged by the planner's own rules: a run refuses what is
    // reported here (or drops it with --force).
    match (data.next_cert, data.next_key) {
        (Field::Absent, Field::Absent) => {}
        (Field::Bad(p), _) => row.unusable("next.crt", p),
        (cert, key) => match crate::plan::pending_ca(cert, key) {
            Ok(p) => {
                rotation = Some(format!(
                    "staged rotation in progress: pending CA {} (run certgen to finish it)",
                    p.cert.short_fingerprint()
                ));
                known.push(p.cert);
            }
            Err(problem) => row.findings.push(Finding::PendingCa(problem)),
        },
    }
    Ca {
        row,
        active,
        known,
        rotation,
    }
}

/// Another writer since certgen's last run: the planner's reading of what the Secrets hold,
/// and what a plain run does next, on the CA's row.
fn another_writer(ca: &mut Checked, p: &Plan) {
    let Some(found) = p.ca.derived.clone() else {
        return;
    };
    let next = match &p.phase {
        Phase::Gate { reason, .. } => format!("waits: {reason}"),
        phase => format!(
            "{} step: {} ({})",
            phase.name(),
            p.ca.action.name(),
            p.ca.reason
        ),
    };
    ca.findings
        .push(Finding::WrittenByAnotherTool { found, next });
}

/// What a leaf's issuer is judged against.
struct Issuers<'a> {
    active: Option<&'a Cert>,
    known: &'a [Cert],
    /// The CA Secret could not be read: nothing is known of the issuers.
    unknown: bool,
}

/// A leaf that loads, for the trust between leaves.
struct Leaf {
    /// Its row's index.
    row: usize,
    cert: Cert,
    bundle: Vec<Cert>,
    usages: crate::pki::Usages,
}

/// A TLS Secret's row, and its leaf and bundle when the leaf loads: `s` as read, and its
/// `data` as the snapshot parsed it.
fn leaf_row(
    t: &crate::config::TlsSecret,
    (s, data): (&StoredSecret, &parse::LeafData),
    issuers: &Issuers<'_>,
    now: OffsetDateTime,
) -> (Checked, Option<(Cert, Vec<Cert>)>) {
    let mut r = Checked::new(&t.name, "tls");
    r.judge_common(s, t.layout.type_);
    let (crt, key, ca_crt) = (&t.layout.cert, &t.layout.key, &t.layout.bundle);
    let leaf = match &data.cert {
        Field::Ok(cert) => Some(cert.clone()),
        Field::Bad(p) => {
            r.unusable(crt, p);
            None
        }
        Field::Absent | Field::Empty | Field::Unchecked => {
            r.findings.push(Finding::KeyMissing {
                key: crt.clone(),
                refused: true,
            });
            None
        }
    };
    let bundle = match &data.bundle {
        Field::Ok(b) => {
            if let Some(e) = &b.broken {
                r.unusable(ca_crt, e);
            }
            r.judge_bundle(ca_crt, &b.certs, now);
            b.certs.clone()
        }
        Field::Bad(p) => {
            r.unusable(ca_crt, p);
            vec![]
        }
        Field::Absent | Field::Empty | Field::Unchecked => {
            r.findings.push(Finding::KeyMissing {
                key: ca_crt.clone(),
                refused: false,
            });
            vec![]
        }
    };
    r.row.bundle = BundleEntry::list(&bundle, now);
    let Some(leaf) = leaf else {
        return (r, None);
    };
    match &data.key {
        Field::Ok(()) => {}
        Field::Bad(p) => r.unusable(key, p),
        Field::Absent | Field::Empty | Field::Unchecked => {
            r.findings.push(Finding::KeyMissing {
                key: key.clone(),
                refused: true,
            });
        }
    }
    if let Some(why) = due(&leaf, t.renew_before, now) {
        r.findings.push(Finding::Due(why));
    }
    if let Some(drift) = san_drift(&leaf, t) {
        r.findings.push(Finding::SanDrift(drift));
    }
    r.row.issuer = issuers
        .known
        .iter()
        .find(|ca| ca.signed(&leaf))
        .map(Cert::short_fingerprint);
    match (issuers.active, &r.row.issuer) {
        // Nothing is known of the CA Secret: its own row says why.
        _ if issuers.unknown => {}
        (_, None) => r.findings.push(Finding::UnknownIssuer),
        (Some(a), Some(_)) if !a.signed(&leaf) => r.findings.push(Finding::OtherIssuer),
        _ => {}
    }
    r.row = r.row.with_cert(&leaf, now);
    (r, Some((leaf, bundle)))
}

/// Each leaf against each distinct unexpired bundle CA once (the verifier's judgement, for its
/// Secret's usages), then every peer's bundle by fingerprint: N x CAs verifications, not N x N
/// (a thousand Secrets whose bundles hold the same CA would otherwise cost a million).
fn trust_between(
    leaves: &[Leaf],
    rows: &mut [Checked],
    verifier: &crate::pki::Verifier,
    now: OffsetDateTime,
) {
    let mut bundle_cas: Vec<&Cert> = Vec::new();
    for ca in leaves.iter().flat_map(|l| &l.bundle) {
        if !ca.is_expired_at(now)
            && !bundle_cas
                .iter()
                .any(|c| c.fingerprint() == ca.fingerprint())
        {
            bundle_cas.push(ca);
        }
    }
    for leaf in leaves {
        let signers: Vec<[u8; 32]> = bundle_cas
            .iter()
            .filter(|ca| {
                verifier
                    .verify(&leaf.cert, std::slice::from_ref(**ca), leaf.usages)
                    .is_ok()
            })
            .map(|ca| ca.fingerprint())
            .collect();
        let rejecting: Vec<String> = leaves
            .iter()
            .filter(|peer| {
                !peer
                    .bundle
                    .iter()
                    .any(|ca| signers.contains(&ca.fingerprint()))
            })
            .map(|peer| rows[peer.row].row.secret.clone())
            .collect();
        if !rejecting.is_empty() {
            rows[leaf.row].findings.push(Finding::Untrusted(rejecting));
        }
    }
}

fn hmac_row(h: &crate::config::HmacSecret, observed: &Snapshot, unreadable: bool) -> Checked {
    let mut r = Checked::new(&h.name, "hmac");
    match observed.get(&h.name).present() {
        None if unreadable => {}
        None => r.findings.push(Finding::Missing),
        Some(s) => {
            r.judge_common(s, crate::secret::TYPE_OPAQUE);
            if parse::hmac(s, &h.key).missing() {
                r.findings.push(Finding::HmacKey(h.key.clone()));
            } else if let Some(short) = parse::hmac_short(s, &h.key, h.bytes) {
                r.findings.push(Finding::HmacShort(short));
            }
        }
    }
    r
}

/// Each write or refusal of the next run, explained on its row where no finding does.
fn explain(next: &NextRun, rows: &mut [Checked]) {
    match next {
        NextRun::Writes { writes } => {
            for w in writes {
                if let Some(r) = rows.iter_mut().find(|r| r.row.secret == w.object)
                    && r.findings.is_empty()
                {
                    r.findings.push(Finding::NextRun {
                        action: w.action.clone(),
                        reason: w.reason.clone(),
                    });
                }
            }
        }
        NextRun::Refuses { object, message } => {
            let row = rows
                .iter()
                .position(|r| r.row.secret == *object)
                .unwrap_or(0);
            if !rows[row].findings.iter().any(Finding::invalid) {
                rows[row].findings.push(Finding::Refused(message.clone()));
            }
        }
        NextRun::Nothing | NextRun::Waits { .. } => {}
    }
}

/// The `caBundle` targets' rows, and the writes a run makes to those that drifted.
fn target_rows(ctx: &Context) -> (Vec<TargetRow>, Vec<PlannedWrite>) {
    let targets = ctx
        .targets
        .iter()
        .map(|t| TargetRow {
            kind: t.kind.clone(),
            name: t.name.clone(),
            secret: t.secret.clone(),
            status: t.state.name(),
            text: t.state.text(),
            pending_missing: t.pending_missing.as_ref().map(|fp| {
                format!(
                    "its caBundle does not hold the pending CA {fp} yet: a run's trust gate waits for cert-manager's CA injector to add it; {}",
                    crate::certmanager::PENDING_CA_FIX
                )
            }),
        })
        .collect();
    let drifted = ctx
        .targets
        .iter()
        .filter(|t| t.state.run_writes())
        .map(|t| PlannedWrite {
            object: format!("{} {}", t.kind, t.name),
            action: "update-bundle".into(),
            reason: if t.kind == "ClusterTrustBundles" {
                format!(
                    "its bundles do not publish exactly the CAs of the ca.crt of Secret {} (one bundle per CA)",
                    t.secret
                )
            } else {
                format!(
                    "its caBundle differs from the ca.crt of Secret {}",
                    t.secret
                )
            },
        })
        .collect();
    (targets, drifted)
}

#[cfg(test)]
mod tests;
