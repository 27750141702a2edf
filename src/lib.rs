//! certgen: generates and rotates the mutual-TLS certificates of a Kubernetes control plane.
//!
//! The layers, each forgetting the one before: [`cli`] (clap, no IO) → [`config`] (one
//! resolution of flags, environment and file into validated values) → the [`rotation`] driver,
//! which runs each step as [`observe`] (read and parse every Secret) → [`plan`] (pure
//! decisions, down to every byte written) → [`apply`] (mechanical writes), then the consumers'
//! restarts and probes, and hands its results to [`report`]. [`check`] judges what
//! [`observe`] read. Secrets are reached through the [`store`] trait; every Kubernetes API
//! call is in the [`k8s`] adapter, which the core never imports. [`pki`] is pure cryptography
//! with `now` passed in. Only [`main`] turns results into exit codes.

pub mod access;
pub mod apply;
pub mod certmanager;
pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod events;
pub mod exit;
pub mod exporter;
pub mod exposition;
pub mod handover;
pub mod handover_run;
pub mod k8s;
pub mod kwc;
pub mod kwc_run;
pub mod lock;
pub mod metrics;
pub mod observe;
pub mod outside;
pub mod pki;
pub mod plan;
pub mod probe;
pub mod profiles;
pub mod report;
pub mod rollout;
pub mod rotation;
pub mod secret;
pub mod store;
pub mod text;
pub mod timefmt;
pub mod workload;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, LogFormat, OutputFormat, ProfileCommand, RunArgs};
use crate::error::Error;
use crate::k8s::KubeStore;
use crate::store::{LocalStore, SecretStore};

/// Parses the command line, runs, and returns the exit code. The binary's whole `main`.
pub fn main() -> ExitCode {
    let args = match cli::compat_args(std::env::args_os()) {
        Ok(args) => args,
        Err(message) => {
            let e = Error::Config(config::ConfigError {
                source_name: "command line".into(),
                message,
            });
            eprintln!("certgen: error: {e}");
            return e.exit_code();
        }
    };
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e, &args),
    };
    init_logging(&cli);
    let json_output = match &cli.command {
        None => cli.run.target.output == OutputFormat::Json,
        Some(Command::Check(args)) => args.target.output == OutputFormat::Json,
        Some(_) => false,
    };
    let json_log = cli.global.log_format == LogFormat::Json;
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::CheckFailed) => Error::CheckFailed.exit_code(),
        Err(e) => {
            tracing::debug!(error = ?e, "run failed");
            report_error(&e, json_output, json_log);
            e.exit_code()
        }
    }
}

/// A command line clap refused: as clap prints it, and also as one JSON object when the
/// arguments ask for JSON output or logs (a JSON consumer always gets one); help and
/// `--version` as clap prints them.
fn usage_error(e: clap::Error, args: &[std::ffi::OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) || !e.use_stderr() {
        e.exit();
    }
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let asks = |flag: &str| {
        args.windows(2).any(|w| w[0] == flag && w[1] == "json")
            || args.iter().any(|a| *a == format!("{flag}=json"))
    };
    let message = e.render().to_string();
    let first = message
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("error: ");
    let error = Error::Config(config::ConfigError {
        source_name: "command line".into(),
        message: first.to_string(),
    });
    if asks("--output") {
        let _ = print(&report::ErrorReport::new(error.to_object()).to_json());
    }
    if asks("--log-format") {
        report_error(&error, false, true);
    } else {
        let _ = e.print();
    }
    error.exit_code()
}

/// Tells the user why the run failed: one line on standard error (one JSON object with
/// `--log-format json`), and with `--output json` one JSON document on standard output, unless
/// the run's report there already holds the error.
fn report_error(e: &Error, json_output: bool, json_log: bool) {
    let object = e.to_object();
    if json_output && !matches!(e, Error::Reported(_)) {
        let _ = print(&report::ErrorReport::new(object.clone()).to_json());
    }
    if json_log {
        let line = serde_json::json!({
            "timestamp": timefmt::rfc3339(time::OffsetDateTime::now_utc()),
            "level": "ERROR",
            "message": object.message,
            "error": object,
        });
        eprintln!("{line}");
    } else {
        eprintln!("certgen: error: {e}");
    }
}

fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let kwc_level = match &cli.command {
        Some(Command::Create(a)) => a.common.log_level,
        Some(Command::Patch(a)) => a.common.log_level,
        _ => None,
    };
    let level = match (cli.global.quiet, cli.global.verbose) {
        _ if kwc_level.is_some() => kwc::log_level(kwc_level),
        (true, _) => "warn",
        (_, 0) => "info",
        (_, 1) => "debug",
        _ => "trace",
    };
    // Only certgen's own events: client libraries may log request bodies at debug level, and
    // request bodies carry private keys. kube-runtime's watcher logs each failed retry with a
    // debug dump, which certgen reports itself once per change of state (src/k8s/watch.rs);
    // under -q other libraries say only errors.
    let others = if cli.global.quiet { "error" } else { "warn" };
    let filter = EnvFilter::new(format!("{others},kube_runtime=off,certgen={level}"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match cli.global.log_format {
        LogFormat::Text => builder.with_target(false).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}

fn dispatch(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Some(Command::Profile(ProfileCommand::Show { name })) => {
            let text = profiles::builtin(&name).ok_or_else(|| {
                Error::Config(config::ConfigError {
                    source_name: "profile show".into(),
                    message: format!(
                        "unknown profile {name:?}; built-in profiles: {}",
                        profiles::NAMES.join(", ")
                    ),
                })
            })?;
            print(text)
        }
        Some(Command::Profile(ProfileCommand::List)) => print(&profiles::listing()),
        Some(Command::Completions { shell }) => print(&completions(shell)),
        Some(Command::Man { dir: None }) => print(&man_page()),
        Some(Command::Man { dir: Some(dir) }) => write_man_pages(&dir),
        Some(Command::Create(args)) => runtime(false)?
            .block_on(kwc_run::create(&args))
            .and_then(|lines| print(&(lines.join("\n") + "\n"))),
        Some(Command::Patch(args)) => runtime(false)?
            .block_on(kwc_run::patch(&args))
            .and_then(|lines| print(&(lines.join("\n") + "\n"))),
        Some(Command::Handover(cli::HandoverCommand::CertManager(args))) => runtime(false)?
            .block_on(handover_run::cert_manager(&args))
            .and_then(|text| print(&text)),
        Some(Command::Check(args)) => {
            runtime(args.target.local.is_some())?.block_on(check(args.target))
        }
        Some(Command::Exporter(args)) => runtime(false)?.block_on(exporter::run(&args)),
        None => runtime(cli.run.target.local.is_some())?.block_on(main_job(cli.run)),
    }
}

/// The async runtime of a run. Local mode does its file IO synchronously and talks to no
/// server, so one thread serves it (no worker threads to start: about a tenth of a local run's
/// time); a cluster run keeps two workers so the lock's renewal and the rollout watchers are
/// not held up by key generation.
fn runtime(local: bool) -> Result<tokio::runtime::Runtime, Error> {
    let mut builder = if local {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(2);
        builder
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| Error::Output(format!("cannot start the async runtime: {e}")))
}

fn print(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`certgen man | head`) is not an error worth reporting.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::Output(format!(
            "cannot write to standard output: {e}"
        ))),
    }
}

/// certgen's main job: resolve, run, print the report; with `--metrics-file`,
/// `--pushgateway` or `--output prometheus`, the metrics of the state it left and of its
/// outcome, whatever that was (src/exposition/).
async fn main_job(args: RunArgs) -> Result<(), Error> {
    let started = std::time::Instant::now();
    let sinks =
        exposition::sink::Sinks::new(args.metrics_file.clone(), args.pushgateway.as_deref())
            .map_err(|message| {
                Error::Config(config::ConfigError {
                    source_name: "command line".into(),
                    message,
                })
            })?;
    let (config, local) = config::resolve_target(&args.target.spec())?;
    // In a cluster, one client for the whole job: the run, its Events and its metrics.
    let (client, mut outcome) = match &local {
        Some(dir) => (None, local_job(&args, config.clone(), dir).await),
        None => match k8s::client(args.target.cluster()).await {
            Ok(client) => {
                let options = args.options(false);
                let outcome = cluster_job(&client, config.clone(), options).await;
                (Some(client), outcome)
            }
            Err(e) => (None, Err(e)),
        },
    };
    let api_requests = local.is_none().then(metrics::snapshot);
    let prometheus = args.target.output == OutputFormat::Prometheus;
    let wants_metrics = sinks.any() || prometheus;
    let wants_events = args.events && local.is_none() && !args.dry_run && outcome.is_ok();
    // What the run left, read once for both (`check`'s reads; the caBundle targets only for
    // the metrics).
    let left = if wants_metrics || wants_events {
        read_left(&config, &local, client.as_ref(), wants_metrics).await
    } else {
        None
    };
    if let Ok((report, _)) = &mut outcome {
        record_events(&args, &config, report, client.as_ref(), left.as_ref()).await;
    }
    let metrics = if wants_metrics {
        let (exit_code, writes) = match &outcome {
            Ok((report, failure)) => (failure.as_ref().map_or(0, Error::code), report.writes),
            Err(e @ Error::AfterWrites { written, .. }) => (e.code(), written.len()),
            Err(e) => (e.code(), 0),
        };
        let run = exposition::RunOutcome {
            exit_code,
            finished_at: time::OffsetDateTime::now_utc(),
            duration: started.elapsed(),
            writes,
            dry_run: args.dry_run,
            api_requests,
        };
        let text = exposition::collect::after_run(&config, left.as_ref(), run);
        let grouping = [
            ("namespace", config.namespace.as_str()),
            ("profile", config.profile.as_str()),
        ];
        for problem in sinks.deliver(&text, &grouping).await {
            tracing::warn!("{problem}");
        }
        Some(text)
    } else {
        None
    };
    if local.is_none() {
        let all = metrics::snapshot();
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
            let store = LocalStore::new(dir).with_secret_keys(config.private_data_keys());
            Some(exposition::collect::left(config, &store, None).await)
        }
        (None, Some(client)) => {
            let store = KubeStore::new(client.clone(), &config.namespace);
            let webhooks = k8s::WebhookStore::new(client.clone());
            Some(exposition::collect::left(config, &store, targets.then_some(&webhooks)).await)
        }
        (None, None) => None,
    }
}

/// With `--events` in a cluster: the Warnings of the state the run `left`, after the run's
/// own Events, then every Event recorded in order (a dry run's are only shown). Without it,
/// the report carries none.
async fn record_events(
    args: &RunArgs,
    config: &config::Config,
    report: &mut report::Report,
    client: Option<&kube::Client>,
    left: Option<&Result<exposition::collect::Left, Error>>,
) {
    let Some(client) = client.filter(|_| args.events) else {
        report.events.clear();
        return;
    };
    if args.dry_run {
        return;
    }
    match left {
        Some(Ok(left)) if left.complete => {
            let rotation = exposition::rotation(config, &left.observed, left.now);
            let delay = args.options(false).propagation_delay;
            report.events.extend(events::warnings(
                config,
                &left.observed,
                rotation,
                left.now,
                delay,
                args.stuck_after,
            ));
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
    args: &RunArgs,
    config: config::Config,
    dir: &std::path::Path,
) -> Result<(report::Report, Option<Error>), Error> {
    let options = args.options(true);
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
        deployments: None,
        client: None,
        webhooks: None,
        pods: None,
        lock,
    };
    let (mut report, failure) = rotation::run(&store, invocation).await?;
    report.key_modes = store
        .exposed_keys()
        .into_iter()
        .map(|(_, _, problem)| problem)
        .collect();
    Ok((report.with_next_renewal(&config), failure))
}

/// The main job in a cluster (and `certgen create`'s renewal, [`kwc_run`]): adapt to what this
/// identity may do, run the rotation driver against the API server; the report, and the failure
/// that ended the run after it had started.
pub(crate) async fn cluster_job(
    client: &kube::Client,
    mut config: config::Config,
    options: config::RunOptions,
) -> Result<(report::Report, Option<Error>), Error> {
    // What this identity may do, when that must be known before the first write
    // (src/access.rs). The rules review would be one request on every run. It is made only
    // when --wait or --probe was given, so that missing verbs fail the run before anything is
    // written; otherwise every optional feature is tried and a 403 skips it for the rest of
    // the run with the same warning and report line (src/access.rs).
    let access = if options.wait || options.probe {
        k8s::review(client, &config.namespace).await
    } else {
        access::Access::unknown()
    };
    let asked = access::Asked {
        wait: options.wait,
        probe: options.probe,
    };
    let skipped = access::adapt(&mut config, &access, asked).map_err(Error::Store)?;
    let config = config;
    let deadline = options.deadline(tokio::time::Instant::now());
    let store = KubeStore::new(client.clone(), &config.namespace)
        .with_labels(config.labels.clone())
        .with_write_verb(access.secret_write_verb(&config.secret_names()));
    if store.write_verb() == access::SecretWriteVerb::Update {
        tracing::info!(
            "this identity may not patch the Secrets: certgen writes them with updates fenced by resourceVersion"
        );
    }
    let workloads = k8s::Workloads::new(client.clone(), &config.namespace);
    let lock = lock::Target::Lease {
        lease: std::sync::Arc::new(k8s::lease::KubeLease::new(
            client.clone(),
            &config.namespace,
            &format!("{}-certgen-lock", config.profile),
        )),
        holder: lock::holder_identity(),
        seconds: k8s::lease::lease_seconds(),
    };
    let webhooks = k8s::WebhookStore::new(client.clone());
    // Pushed propagation (src/rotation/gate.rs): an extra like restarts, so a 403 turns
    // it off for the run with a report line, and the gates wait out the delay.
    let pods = k8s::Pods::new(client.clone(), &config.namespace);
    let endpoints = k8s::ServiceEndpoints {
        client: client.clone(),
        namespace: config.namespace.clone(),
    };
    let invocation = rotation::Invocation {
        config: &config,
        options,
        deadline,
        deployments: Some(&workloads),
        client: Some(&endpoints),
        webhooks: (!config.webhooks.is_empty()).then_some(&webhooks),
        pods: options.poke.then_some(&pods),
        lock,
    };
    let (report, failure) = rotation::run(&store, invocation).await?;
    // Optional features skipped for missing verbs: found by the review, refused by the
    // API server during the run (a 403 without a review), and the run lock.
    let mut skipped = skipped.clone();
    // The caBundle targets, restarts, pokes and the run lock it may not take (carried back in
    // the report by the run, as data).
    skipped.extend(report.skipped.iter().cloned());
    let report = report.in_cluster(metrics::snapshot(), skipped);
    Ok((report.with_next_renewal(&config), failure))
}

/// The local store for `config` in `dir`: the private keys of its layouts (HMAC keys
/// included) are kept 0600, and with `--force` a Secret whose `..data` link dangles is written
/// afresh.
fn local_store(dir: &std::path::Path, config: &config::Config, force: bool) -> LocalStore {
    LocalStore::new(dir)
        .replacing_dangling(force)
        .with_secret_keys(config.private_data_keys())
}

/// `certgen check`: observe, check, print the report; exit 1 when action is due. A Secret that
/// cannot be read is on its row of the whole report, and the exit is 2, as a run's would be.
async fn check(target: cli::TargetArgs) -> Result<(), Error> {
    let (config, local) = config::resolve_target(&target.spec())?;
    // The caBundle targets are read whatever the output: a run writes a drifted one, so the
    // verdict depends on them.
    let (report, families, unreadable) = match &local {
        Some(dir) => {
            let store = local_store(dir, &config, false).reporting_exposed_keys();
            exposition::collect::checked(&config, &store, None).await?
        }
        None => {
            let client = k8s::client(target.cluster()).await?;
            let store = KubeStore::new(client.clone(), &config.namespace);
            let webhooks = k8s::WebhookStore::new(client);
            exposition::collect::checked(&config, &store, Some(&webhooks)).await?
        }
    };
    match target.output {
        OutputFormat::Text => print(&report.to_text())?,
        OutputFormat::Json => print(&report.to_json())?,
        OutputFormat::Prometheus => print(&exposition::render(&families))?,
    }
    match unreadable {
        // The JSON report holds it already (its row, and nextRun); said on stderr otherwise.
        Some(e) if target.output == OutputFormat::Json => {
            Err(Error::Reported(Box::new(Error::Store(e))))
        }
        Some(e) => Err(Error::Store(e)),
        None if report.healthy => Ok(()),
        None => Err(Error::CheckFailed),
    }
}

/// Shell completions for `shell`, as checked in under `completions/`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "certgen", &mut out);
    String::from_utf8(out).expect("completions are UTF-8")
}

/// The root man page, certgen(1), as checked in under `man/certgen.1`.
pub fn man_page() -> String {
    man_pages().swap_remove(0).1
}

/// Every man page as `(file name, roff)`, as checked in under `man/`: `certgen.1` first, then
/// one per subcommand (`certgen-check.1`, `certgen-profile.1`, `certgen-profile-show.1`, ...).
/// The root page's SEE ALSO names every other page; each other page names the pages above it.
pub fn man_pages() -> Vec<(String, String)> {
    /// `cmd` and every subcommand below it, each with its ancestors' page names.
    fn walk(cmd: &clap::Command, parents: &[String], out: &mut Vec<(clap::Command, Vec<String>)>) {
        out.push((cmd.clone(), parents.to_vec()));
        let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
        let parents = [parents, &[name]].concat();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, &parents, out);
        }
    }
    // clap's `help` subcommand is not a page of certgen's.
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut commands = Vec::new();
    walk(&root, &[], &mut commands);
    let pages: Vec<_> = commands
        .into_iter()
        .map(|(cmd, parents)| (clap_mangen::Man::new(cmd), parents))
        .collect();
    let others: Vec<String> = pages[1..]
        .iter()
        .map(|(man, _)| man.get_filename().trim_end_matches(".1").to_string())
        .collect();
    pages
        .into_iter()
        .map(|(man, parents)| {
            let mut out = Vec::new();
            man.render(&mut out)
                .expect("rendering a man page into memory cannot fail");
            let mut page = String::from_utf8(out).expect("the man page is UTF-8");
            let see_also = if parents.is_empty() {
                &others
            } else {
                &parents
            };
            page.push_str(&see_also_section(see_also));
            (man.get_filename(), page)
        })
        .collect()
}

/// A roff SEE ALSO section naming `pages` of section 1: `.SH "SEE ALSO"` and `name(1), ...`.
fn see_also_section(pages: &[String]) -> String {
    use clap_mangen::roff::{Roff, bold, roman};
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]);
    let mut refs = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let sep = if i + 1 < pages.len() { ", " } else { "" };
        refs.push(bold(page.as_str()));
        refs.push(roman(format!("(1){sep}")));
    }
    roff.text(refs);
    roff.to_roff()
}

/// `certgen man --dir DIR`: every man page written into `DIR` (created if missing).
fn write_man_pages(dir: &std::path::Path) -> Result<(), Error> {
    let cannot = |path: &std::path::Path, e: std::io::Error| {
        Error::Output(format!("cannot write {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| cannot(dir, e))?;
    let pages = man_pages();
    for (file, page) in &pages {
        let path = dir.join(file);
        std::fs::write(&path, page).map_err(|e| cannot(&path, e))?;
    }
    tracing::info!(dir = %dir.display(), pages = pages.len(), "wrote the man pages");
    Ok(())
}
