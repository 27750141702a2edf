//! certgen's main job: resolve, run (in a cluster or locally), record Events, deliver the
//! metrics, print the report.

use super::{local_store, print};
use crate::cli::{OutputFormat, RunArgs};
use crate::error::Error;
use crate::k8s::KubeStore;
use crate::store::SecretStore;
use crate::{api_requests, config, events, exposition, k8s, lock, report, rotation};

/// certgen's main job: resolve, run, print the report; with `--metrics-file`,
/// `--pushgateway` or `--output prometheus`, the metrics of the state it left and of its
/// outcome, whatever that was (src/exposition/).
pub async fn run(args: RunArgs) -> Result<(), Error> {
    let (config, local) = config::resolve_target(&args.target.spec())?;
    if let Some(contexts) = config.set_contexts(&args.target.context, local.is_some())? {
        return super::set::run(args, &contexts).await;
    }
    let started = std::time::Instant::now();
    // The run's options, derived once (a local run's defaults differ: no propagation delay).
    let options = args.options(local.is_some());
    let sinks =
        exposition::sink::Sinks::new(args.metrics_file.clone(), args.pushgateway.as_deref())
            .map_err(|message| {
                Error::Config(config::ConfigError {
                    source_name: "command line".into(),
                    message,
                })
            })?;
    // In a cluster, one client for the whole job: the run, its Events and its metrics.
    let (client, mut outcome) = match &local {
        Some(dir) => (None, local_job(options, config.clone(), dir).await),
        None => match k8s::client(args.target.cluster()).await {
            Ok(client) => {
                let outcome = super::cluster::job(&client, config.clone(), options).await;
                (Some(client), outcome)
            }
            Err(e) => (None, Err(e)),
        },
    };
    let api_requests = local.is_none().then(api_requests::snapshot);
    let prometheus = args.target.output == OutputFormat::Prometheus;
    let wants_metrics = sinks.any() || prometheus;
    let wants_events = args.events && local.is_none() && !args.dry_run && outcome.is_ok();
    if let (true, false, Some(client), Err(Error::SharedCaDue { message, .. })) =
        (args.events, args.dry_run, client.as_ref(), &outcome)
    {
        shared_ca_due(client, &config, message).await;
    }
    // What the run left, read once for both (`check`'s reads; the caBundle targets only for
    // the metrics).
    let left = if wants_metrics || wants_events {
        read_left(&config, &local, client.as_ref(), wants_metrics).await
    } else {
        None
    };
    if let Ok((report, _)) = &mut outcome {
        let delay = options.propagation_delay;
        record_events(
            &args,
            &config,
            report,
            client.as_ref(),
            (left.as_ref(), delay),
        )
        .await;
    }
    let metrics = if wants_metrics {
        let run = (&outcome, started, args.dry_run, api_requests);
        Some(deliver_metrics(&config, run, left.as_ref(), &sinks).await)
    } else {
        None
    };
    if local.is_none() {
        let all = api_requests::snapshot();
        tracing::debug!(
            requests = all.total,
            get = all.get,
            list = all.list,
            clients = k8s::clients_built(),
            "API requests of the whole job (the run's, then its Events' and metrics')"
        );
    }
    let (mut report, failure) = outcome?;
    match args.target.output {
        OutputFormat::Text => print(&report.to_text())?,
        OutputFormat::Json => {
            // One JSON document: a failure after the report is part of it.
            report.error = failure.as_ref().map(Error::to_object);
            print(&report.to_json())?;
            if let Some(e) = failure {
                return Err(Error::Reported(Box::new(e)));
            }
        }
        OutputFormat::Prometheus => print(metrics.as_deref().unwrap_or_default())?,
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What a run ended with: the report and the failure that ended it after it had started, or
/// the error that stopped it.
type Outcome = Result<(report::Report, Option<Error>), Error>;

/// A member of a set of clusters whose own run found the shared CA due: a Warning Event on
/// the CA Secret, so that the people who watch this cluster see what to run.
async fn shared_ca_due(client: &kube::Client, config: &config::Config, message: &str) {
    let recorder = k8s::events::KubeEvents::new(client.clone(), &config.namespace);
    let mut lines = [crate::report::EventLine {
        type_: "Warning",
        reason: "SharedCADue",
        kind: "Secret",
        name: config.ca.secret_name.clone(),
        action: "check",
        note: message.to_string(),
        outcome: "planned",
    }];
    for refusal in k8s::events::record_all(&recorder, &mut lines).await {
        tracing::warn!("{refusal}");
    }
}

/// The metrics of the state the run `left` and of its outcome (the job's `outcome`, when it
/// `started`, whether a dry run, its API requests), delivered to the `sinks`. The exposition
/// text.
async fn deliver_metrics(
    config: &config::Config,
    (outcome, started, dry_run, api_requests): (
        &Outcome,
        std::time::Instant,
        bool,
        Option<api_requests::ApiRequests>,
    ),
    left: Option<&Result<exposition::collect::Left, Error>>,
    sinks: &exposition::sink::Sinks,
) -> String {
    let (exit_code, writes) = match outcome {
        Ok((report, failure)) => (failure.as_ref().map_or(0, Error::code), report.writes),
        Err(e @ Error::AfterWrites { written, .. }) => (e.code(), written.len()),
        Err(e) => (e.code(), 0),
    };
    let run = exposition::RunOutcome {
        exit_code,
        finished_at: time::OffsetDateTime::now_utc(),
        duration: started.elapsed(),
        writes,
        dry_run,
        api_requests,
    };
    let text = exposition::collect::after_run(config, left, run);
    let grouping = [
        ("namespace", config.namespace.as_str()),
        ("profile", config.profile.as_str()),
    ];
    for problem in sinks.deliver(&text, &grouping).await {
        tracing::warn!("{problem}");
    }
    text
}

/// What a run left, read once after it for its Events and metrics (`targets`: the `caBundle`
/// targets too). `None` when a cluster run has no client (it failed to connect).
async fn read_left(
    config: &config::Config,
    local: &Option<std::path::PathBuf>,
    client: Option<&kube::Client>,
    targets: bool,
) -> Option<Result<exposition::collect::Left, Error>> {
    match (local, client) {
        (Some(dir), _) => {
            let store = local_store(dir, config, false);
            Some(exposition::collect::left(config, &store, (None, None)).await)
        }
        (None, Some(client)) => {
            let store = KubeStore::new(client.clone(), &config.namespace);
            let webhooks = k8s::WebhookStore::new(client.clone());
            let bundles = k8s::TrustBundleStore::new(client.clone());
            let seams = (
                targets.then_some(&webhooks as _),
                (targets && !config.trust_bundles.is_empty()).then_some(&bundles as _),
            );
            Some(exposition::collect::left(config, &store, seams).await)
        }
        (None, None) => None,
    }
}

/// With `--events` in a cluster: the Warnings of the state the run `left` (judged with the
/// run's propagation delay), after the run's own Events, then every Event recorded in order (a
/// dry run's are only shown). Without it, the report carries none.
async fn record_events(
    args: &RunArgs,
    config: &config::Config,
    report: &mut report::Report,
    client: Option<&kube::Client>,
    (left, delay): (
        Option<&Result<exposition::collect::Left, Error>>,
        std::time::Duration,
    ),
) {
    let Some(client) = client.filter(|_| args.events) else {
        report.events.clear();
        return;
    };
    if args.dry_run {
        return;
    }
    report
        .events
        .extend(events::of_window(report.renewal_window.as_ref()));
    let writers = events::of_writers(&report.other_writers);
    report.events.extend(writers);
    match left {
        Some(Ok(left)) if left.complete => {
            let rotation = exposition::rotation(config, &left.observed, left.now);
            // A renewal held for a window is not overdue: its WaitingForRenewalWindow says so.
            let waiting: Vec<String> = report
                .renewal_window
                .iter()
                .flat_map(|w| w.waiting.iter().map(|h| h.secret.clone()))
                .collect();
            report.events.extend(
                events::warnings(
                    config,
                    &left.observed,
                    rotation,
                    left.now,
                    delay,
                    args.stuck_after,
                )
                .into_iter()
                .filter(|e| !(e.reason == "RenewalOverdue" && waiting.contains(&e.name))),
            );
        }
        Some(Err(e)) => {
            tracing::warn!("no Warning Events: reading the Secrets after the run failed: {e}")
        }
        _ => tracing::warn!("no Warning Events: the Secrets were not read after the run"),
    }
    let recorder = k8s::events::KubeEvents::new(client.clone(), &config.namespace);
    let refusals = k8s::events::record_all(&recorder, &mut report.events).await;
    report.skipped.extend(refusals);
}

/// The run in local mode: the rotation driver against the directory; the report, and the
/// failure that ended the run after it had started.
async fn local_job(
    options: config::RunOptions,
    config: config::Config,
    dir: &std::path::Path,
) -> Result<(report::Report, Option<Error>), Error> {
    let deadline = options.deadline(tokio::time::Instant::now());
    let lock = lock::Target::File(dir.to_path_buf());
    let mut store = local_store(dir, &config, options.force);
    if options.dry_run {
        // A dry run changes nothing, file modes included: it reports them.
        store = store.reporting_exposed_keys();
    }
    let invocation = rotation::Invocation {
        config: &config,
        options,
        deadline,
        workloads: None,
        endpoints: None,
        webhooks: None,
        trust_bundles: None,
        pods: None,
        lock,
    };
    let (mut report, failure) = rotation::run(&store, invocation).await?;
    report.key_modes = store
        .exposed_keys()
        .into_iter()
        .map(|(_, _, problem)| problem)
        .collect();
    let now = store.now();
    Ok((report.with_next_renewal(&config, now), failure))
}
