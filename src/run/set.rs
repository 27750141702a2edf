//! The main job and `check` over a set of clusters (`--context` more than once): one client
//! per member, each member identified by its `kube-system` Namespace UID, then the set's
//! rotation driver ([`crate::rotation::set`]) or a check of every member.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;

use super::cluster::Parts;
use super::print;
use crate::cli::{OutputFormat, RunArgs, TargetArgs};
use crate::config::{self, Config, ConfigError, Strategy};
use crate::error::Error;
use crate::k8s::{self, KubeStore};
use crate::set::{Record, Standing};
use crate::{api_requests, lock, observe, rotation};

/// How long the set's standing after a run waits for a member.
const AFTER_RUN: Duration = Duration::from_secs(10);

/// One member's connection: its context, client and identity.
struct Member {
    context: String,
    client: kube::Client,
    uid: String,
}

fn usage(message: String) -> Error {
    Error::Config(ConfigError {
        source_name: "command line".into(),
        message,
    })
}

fn named(member: &str, e: Error) -> Error {
    Error::Member {
        member: member.to_string(),
        source: Box::new(e),
    }
}

/// Connects to every context and reads its identity, side by side; a member that does not
/// answer within `timeout` stops the command (exit 3) before anything is read or written.
/// Two contexts that reach one cluster are refused.
async fn connect(
    target: &TargetArgs,
    contexts: &[String],
    timeout: Duration,
) -> Result<Vec<Member>, Error> {
    let kubeconfig = target.kubeconfig.as_deref();
    let members = futures::future::join_all(contexts.iter().map(|context| async move {
        let connect = async {
            let client = k8s::client_for(kubeconfig, Some(context.clone())).await?;
            let uid = cluster_uid(&client).await?;
            Ok::<_, Error>(Member {
                context: context.clone(),
                client,
                uid,
            })
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r.map_err(|e| named(context, e)),
            Err(_) => Err(named(
                context,
                Error::Timeout(format!(
                    "its API server did not answer within --timeout {}; nothing was read or written in any member",
                    crate::timefmt::HumanDuration(timeout)
                )),
            )),
        }
    }))
    .await;
    let members: Vec<Member> = members.into_iter().collect::<Result<_, _>>()?;
    for (i, a) in members.iter().enumerate() {
        if let Some(b) = members[i + 1..].iter().find(|b| b.uid == a.uid) {
            return Err(usage(format!(
                "contexts {} and {} reach the same cluster (kube-system UID {}): name each member of a set once",
                a.context, b.context, a.uid
            )));
        }
    }
    Ok(members)
}

/// A cluster's identity: its `kube-system` Namespace UID (stable across renamed contexts).
async fn cluster_uid(client: &kube::Client) -> Result<String, Error> {
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let ns = api.get("kube-system").await.map_err(|e| {
        Error::Connect(format!(
            "reading Namespace kube-system, the member's identity (a set needs get on namespaces): {e}"
        ))
    })?;
    ns.metadata
        .uid
        .ok_or_else(|| Error::Connect("Namespace kube-system has no UID".into()))
}

/// The configuration of the member reached by `context`: its namespace and cluster name from
/// the config's `clusters:` list, `{cluster}` rendered for it ([`Config::member`]).
fn member_config(config: &Config, context: &str) -> Result<Config, Error> {
    Ok(config.member(context)?)
}

/// What one member's run needs: a single-cluster run's [`Parts`], for the member's config.
async fn parts(m: &Member, config: &Config, options: &config::RunOptions) -> Result<Parts, Error> {
    super::cluster::parts(&m.client, member_config(config, &m.context)?, options).await
}

/// The run options of a set's main job, after refusing what a set cannot do: `--local` (one
/// directory) and `--strategy immediate` (which breaks every pair until each member has it).
fn set_options(args: &RunArgs) -> Result<config::RunOptions, Error> {
    if args.target.local.is_some() {
        return Err(usage(
            "--local runs on one directory: a set of clusters (several --context) needs clusters"
                .into(),
        ));
    }
    let options = args.options(false);
    if options.strategy == Strategy::Immediate {
        return Err(usage(
            "--strategy immediate writes bundles and leaves at once, which across clusters breaks every pair until each member has it: a set of clusters rotates in stages".into(),
        ));
    }
    Ok(options)
}

/// What each member records, read before anything else (a record that does not parse
/// refuses the run: certgen does not guess whether a CA is shared).
async fn recorded(
    members: &[Member],
    all: &[Parts],
) -> Result<Vec<(String, Option<Record>)>, Error> {
    let mut recorded = Vec::new();
    for (m, p) in members.iter().zip(all) {
        let observed = observe::observe(&p.store, &p.config)
            .await
            .map_err(|e| named(&m.context, e.into()))?;
        let record = Record::read(&p.config, &observed, &|n| {
            crate::store::SecretStore::object(&p.store, n)
        })
        .map_err(|e| named(&m.context, e))?;
        recorded.push((m.context.clone(), record));
    }
    Ok(recorded)
}

/// Each member's run for the set's driver: its identity, store and seams, and the lock its
/// [`Parts`] took (moved out of them).
fn member_runs<'a>(
    members: &[Member],
    all: &'a mut [Parts],
    options: config::RunOptions,
) -> Vec<rotation::set::MemberRun<'a, KubeStore>> {
    let deadline = options.deadline(tokio::time::Instant::now());
    let locks: Vec<lock::Target> = all.iter_mut().filter_map(|p| p.lock.take()).collect();
    members
        .iter()
        .zip(&*all)
        .zip(locks)
        .map(|((m, p), lock)| rotation::set::MemberRun {
            name: m.context.clone(),
            uid: m.uid.clone(),
            store: &p.store,
            inv: rotation::Invocation {
                config: &p.config,
                options,
                deadline,
                workloads: Some(&p.workloads),
                endpoints: Some(&p.endpoints),
                webhooks: (!p.config.webhooks.is_empty()).then_some(&p.webhooks as _),
                trust_bundles: (!p.config.trust_bundles.is_empty())
                    .then_some(&p.trust_bundles as _),
                pods: options.poke.then_some(&p.pods as _),
                lock,
            },
        })
        .collect()
}

/// Where every member stands after the run, read once more (side by side, and not for long:
/// a member that stopped answering is not waited for again): the set's line, or none when a
/// member could not be read.
async fn standing_after(members: &[Member], all: &[Parts]) -> Option<String> {
    let reads = futures::future::join_all(
        all.iter()
            .map(|p| tokio::time::timeout(AFTER_RUN, observe::observe(&p.store, &p.config))),
    )
    .await;
    let mut standings = Vec::new();
    for ((m, p), read) in members.iter().zip(all).zip(reads) {
        match read {
            Ok(Ok(o)) => standings.push(Standing::of(&p.config, &o)),
            Ok(Err(e)) => tracing::warn!("member {}: reading it after the run: {e}", m.context),
            Err(_) => tracing::warn!("member {}: reading it after the run: no answer", m.context),
        }
    }
    (standings.len() == all.len()).then(|| crate::set::set_line(&standings))
}

/// Each member's Events (with `--events`, not for a dry run), recorded as a single-cluster
/// run records its own; otherwise the Events are dropped from the reports.
async fn record_events(args: &RunArgs, outcome: &mut rotation::set::SetOutcome, all: &[Parts]) {
    if args.events && !args.dry_run {
        for (mr, p) in outcome.members.iter_mut().zip(all) {
            let recorder =
                k8s::events::KubeEvents::new(p.endpoints.client.clone(), &p.config.namespace);
            let record = k8s::events::record_all(&recorder, &mut mr.report.events);
            match tokio::time::timeout(AFTER_RUN, record).await {
                Ok(refusals) => mr.report.skipped.extend(refusals),
                Err(_) => tracing::warn!("member {}: recording its Events: no answer", mr.name),
            }
        }
    } else {
        for mr in &mut outcome.members {
            mr.report.events.clear();
        }
    }
}

/// One member's metric families after the run: what it leaves (when it answers in time) and
/// the run's outcome for it.
async fn member_families(
    mr: &rotation::set::MemberReport,
    p: &Parts,
    dry_run: bool,
    started: std::time::Instant,
) -> Vec<crate::exposition::Family> {
    let left = crate::exposition::collect::left_as(
        &p.config,
        &p.store,
        (
            Some(&p.webhooks),
            (!p.config.trust_bundles.is_empty()).then_some(&p.trust_bundles as _),
        ),
        true,
    );
    let mut families = match tokio::time::timeout(AFTER_RUN, left).await {
        Ok(Ok(left)) => left.families,
        Ok(Err(e)) => {
            tracing::warn!(
                "member {}: the metrics give the run's outcome only: {e}",
                mr.name
            );
            Vec::new()
        }
        Err(_) => Vec::new(),
    };
    let run = crate::exposition::RunOutcome {
        exit_code: mr.failure.as_ref().map_or(0, Error::code),
        finished_at: time::OffsetDateTime::now_utc(),
        duration: started.elapsed(),
        writes: mr.report.writes,
        dry_run,
        api_requests: None,
    };
    families.extend(crate::exposition::run(&p.config, &run));
    families
}

/// The set's metrics, labelled by cluster, delivered to the sinks (`--metrics-file`,
/// `--pushgateway`) and returned for `--output prometheus`; none when nobody asked for them.
async fn set_metrics(
    args: &RunArgs,
    sinks: &crate::exposition::sink::Sinks,
    outcome: &rotation::set::SetOutcome,
    all: &[Parts],
    config: &Config,
    started: std::time::Instant,
) -> Option<String> {
    let prometheus = args.target.output == OutputFormat::Prometheus;
    if !(sinks.any() || prometheus) {
        return None;
    }
    let mut per = Vec::new();
    for (mr, p) in outcome.members.iter().zip(all) {
        let families = member_families(mr, p, args.dry_run, started).await;
        per.push((mr.name.clone(), families));
    }
    let text = crate::exposition::render(&crate::exposition::text::by_cluster(per));
    let set_id = outcome
        .record
        .as_ref()
        .map(|r| r.id.clone())
        .unwrap_or_default();
    let grouping = [
        ("namespace", config.namespace.as_str()),
        ("profile", config.profile.as_str()),
        ("set", set_id.as_str()),
    ];
    for problem in sinks.deliver(&text, &grouping).await {
        tracing::warn!("{problem}");
    }
    Some(text)
}

/// Each member's finished report (taken out of the outcome): its name, its identity, and the
/// report with what the member skipped and its next renewal.
fn member_reports(
    outcome: &mut rotation::set::SetOutcome,
    all: &[Parts],
    config: &Config,
) -> Vec<(String, String, crate::report::Report)> {
    let mut reports = Vec::new();
    for (mr, p) in outcome.members.iter_mut().zip(all) {
        let mut skipped = p.skipped.clone();
        skipped.extend(mr.report.skipped.iter().cloned());
        let report = std::mem::replace(
            &mut mr.report,
            crate::report::Report::new(&config.profile, String::new(), false, 0, Vec::new()),
        );
        // The API requests are the whole process's (one counter for every member): the set's
        // report says them once.
        let mut report = report.in_cluster(api_requests::snapshot(), skipped);
        report.api_requests = None;
        let report = report.with_next_renewal(&p.config, crate::store::SecretStore::now(&p.store));
        reports.push((mr.name.clone(), mr.uid.clone(), report));
    }
    reports
}

/// The set's report as JSON: the set's record, its standing, its note, the API requests, each
/// member's report and the error the run ends with.
fn set_report_json(
    reports: &[(String, String, crate::report::Report)],
    outcome: &rotation::set::SetOutcome,
    line: Option<&String>,
    failure: Option<&Error>,
) -> String {
    let members: Vec<serde_json::Value> = reports
        .iter()
        .map(|(name, uid, r)| {
            serde_json::json!({
                "context": name,
                "uid": uid,
                "report": serde_json::from_str::<serde_json::Value>(&r.to_json()).unwrap_or_default(),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "apiVersion": "certgen/v1",
        "kind": "SetReport",
        "set": outcome.record.as_ref().map(|r| serde_json::json!({"id": r.id, "members": r.members, "generation": r.generation})),
        "standing": line,
        "note": outcome.note,
        "apiRequests": api_requests::snapshot(),
        "members": members,
        "error": failure.map(Error::to_object),
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    )
}

/// The set's report as text: each member's report under its heading, then the set's line and
/// note.
fn set_report_text(
    reports: &[(String, String, crate::report::Report)],
    outcome: &rotation::set::SetOutcome,
    line: Option<&String>,
) -> String {
    let mut text = String::new();
    for (name, uid, r) in reports {
        text.push_str(&format!("== Member {name} (kube-system {uid}) ==\n"));
        text.push_str(&r.to_text());
        text.push('\n');
    }
    if let Some(r) = &outcome.record {
        text.push_str(&format!(
            "Set {} ({} members, generation {})",
            r.id,
            r.members.len(),
            r.generation
        ));
        if let Some(line) = line {
            text.push_str(&format!(": {line}"));
        }
        text.push('\n');
    }
    if let Some(note) = &outcome.note {
        text.push_str(&format!("{note}\n"));
    }
    text
}

/// The main job over a set of clusters.
pub async fn run(args: RunArgs, contexts: &[String]) -> Result<(), Error> {
    let options = set_options(&args)?;
    let started = std::time::Instant::now();
    let sinks =
        crate::exposition::sink::Sinks::new(args.metrics_file.clone(), args.pushgateway.as_deref())
            .map_err(usage)?;
    let (config, _) = config::resolve_target(&args.target.spec())?;
    let members = connect(&args.target, contexts, args.timeout).await?;
    let mut all = Vec::new();
    for m in &members {
        all.push(
            parts(m, &config, &options)
                .await
                .map_err(|e| named(&m.context, e))?,
        );
    }
    let recorded = recorded(&members, &all).await?;
    let ids: Vec<(String, String)> = members
        .iter()
        .map(|m| (m.context.clone(), m.uid.clone()))
        .collect();
    let record = crate::set::membership(&ids, &recorded, (&args.add_member, &args.remove_member))
        .map_err(usage)?;
    let runs = member_runs(&members, &mut all, options);
    let mut outcome = if args.dry_run {
        rotation::set::dry_run(runs, record).await?
    } else {
        rotation::set::run(runs, record).await?
    };
    let line = standing_after(&members, &all).await;
    // Each member's Events and metrics (labelled by cluster), as a single-cluster run records
    // and delivers its own.
    record_events(&args, &mut outcome, &all).await;
    let metrics = set_metrics(&args, &sinks, &outcome, &all, &config, started).await;
    let failure = outcome.failure();
    let reports = member_reports(&mut outcome, &all, &config);
    match args.target.output {
        OutputFormat::Prometheus => print(metrics.as_deref().unwrap_or_default())?,
        OutputFormat::Json => {
            print(&set_report_json(
                &reports,
                &outcome,
                line.as_ref(),
                failure.as_ref(),
            ))?;
            if let Some(e) = failure {
                return Err(Error::Reported(Box::new(e)));
            }
        }
        OutputFormat::Text => print(&set_report_text(&reports, &outcome, line.as_ref()))?,
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What `check` gathers over the members, in the order they are read: the text and JSON of
/// each member's check, where each stands, whether all are healthy, the first error, and the
/// metrics (each member's, and whether it was reached).
struct SetCheck {
    text: String,
    json: Vec<serde_json::Value>,
    standings: Vec<Standing>,
    healthy: bool,
    first_error: Option<Error>,
    families: Vec<(String, Vec<crate::exposition::Family>)>,
    reachable: crate::exposition::Family,
}

impl SetCheck {
    fn new() -> Self {
        SetCheck {
            text: String::new(),
            json: Vec::new(),
            standings: Vec::new(),
            healthy: true,
            first_error: None,
            families: Vec::new(),
            reachable: crate::exposition::Family::gauge(
                "certgen_set_member_reachable",
                "Whether check read this member of the set of clusters (1) or it did not answer or failed (0).",
            ),
        }
    }

    /// Checks one member (within `timeout`) and adds what it found; a member that fails or
    /// does not answer is unknown, and its error is kept when it is the first.
    async fn member(
        &mut self,
        m: &Member,
        config: &Config,
        timeout: Duration,
    ) -> Result<(), Error> {
        let config = member_config(config, &m.context)?;
        let store = KubeStore::new(m.client.clone(), &config.namespace);
        let webhooks = k8s::WebhookStore::new(m.client.clone());
        let bundles = k8s::TrustBundleStore::new(m.client.clone());
        let bundles = (!config.trust_bundles.is_empty()).then_some(&bundles as _);
        let checked = tokio::time::timeout(
            timeout,
            crate::exposition::collect::checked_as(
                &config,
                &store,
                (Some(&webhooks), bundles),
                true,
            ),
        )
        .await;
        let up = matches!(checked, Ok(Ok(_)));
        self.reachable.push(
            vec![("cluster", m.context.clone())],
            f64::from(u8::from(up)),
        );
        let (report, member_families, unreadable) = match checked {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                self.unknown(m, e);
                return Ok(());
            }
            Err(_) => {
                let e = Error::Timeout("its API server did not answer within 30s".into());
                self.unknown(m, e);
                return Ok(());
            }
        };
        self.healthy &= report.healthy;
        self.families.push((m.context.clone(), member_families));
        if let Some(e) = unreadable {
            self.first_error
                .get_or_insert(named(&m.context, Error::Store(e)));
        }
        if let Ok(observed) = observe::observe(&store, &config).await {
            self.standings.push(Standing::of(&config, &observed));
        }
        self.text.push_str(&format!(
            "== Member {} (kube-system {}) ==\n",
            m.context, m.uid
        ));
        self.text.push_str(&report.to_text());
        self.text.push('\n');
        self.json.push(serde_json::json!({
            "context": m.context,
            "uid": m.uid,
            "report": serde_json::from_str::<serde_json::Value>(&report.to_json()).unwrap_or_default(),
        }));
        Ok(())
    }

    /// A member that could not be checked: unknown, with its error.
    fn unknown(&mut self, m: &Member, e: Error) {
        self.text.push_str(&format!(
            "== Member {} (kube-system {}) ==\nunknown: {e}\n\n",
            m.context, m.uid
        ));
        self.first_error.get_or_insert(named(&m.context, e));
    }

    /// Prints the set's check in `output` and ends as it says: the first error, exit 1 when a
    /// member is unhealthy, or success.
    fn finish(mut self, output: OutputFormat, members: usize) -> Result<(), Error> {
        let line = if self.standings.len() == members {
            crate::set::set_line(&self.standings)
        } else {
            format!(
                "unknown: {} of {} members could not be read",
                members - self.standings.len(),
                members
            )
        };
        match output {
            OutputFormat::Json => {
                let doc = serde_json::json!({
                    "apiVersion": "certgen/v1",
                    "kind": "SetCheck",
                    "set": line,
                    "healthy": self.healthy && self.first_error.is_none(),
                    "members": self.json,
                });
                print(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&doc).unwrap_or_default()
                ))?;
            }
            OutputFormat::Prometheus => {
                let mut all = crate::exposition::text::by_cluster(self.families);
                all.push(self.reachable);
                print(&crate::exposition::render(&all))?;
            }
            OutputFormat::Text => {
                self.text.push_str(&format!("set: {line}\n"));
                print(&self.text)?;
            }
        }
        match self.first_error {
            Some(e) => Err(e),
            None if self.healthy => Ok(()),
            None => Err(Error::CheckFailed),
        }
    }
}

/// `certgen check` over a set of clusters: each member's check, then the set's line. Exits 0
/// only when every member's check does; an unreachable member is unknown, and the exit is
/// its error's.
pub async fn check(target: TargetArgs, contexts: &[String]) -> Result<(), Error> {
    if target.local.is_some() {
        return Err(usage(
            "--local checks one directory: a set of clusters (several --context) needs clusters"
                .into(),
        ));
    }
    let (config, _) = config::resolve_target(&target.spec())?;
    let timeout = Duration::from_secs(30);
    let members = connect(&target, contexts, timeout).await?;
    let mut checked = SetCheck::new();
    for m in &members {
        checked.member(m, &config, timeout).await?;
    }
    checked.finish(target.output, members.len())
}
