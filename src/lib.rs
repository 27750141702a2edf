//! certgen: generates and rotates the mutual-TLS certificates of a Kubernetes control plane.
//!
//! The layers, each forgetting the one before: [`cli`] (clap, no IO) → [`config`] (one
//! resolution of flags, environment and file into validated values) → [`plan`] (pure decisions)
//! → [`engine`] (reads, applies, retries on lost races) over a [`store`] (Kubernetes or local
//! directory). [`pki`] is pure cryptography with `now` passed in. Only [`main`] turns results
//! into exit codes.

pub mod access;
pub mod apply;
pub mod check;
pub mod cli;
pub mod config;
pub mod consumers;
pub mod driver;
pub mod engine;
pub mod exit;
pub mod k8s;
pub mod lock;
pub mod metrics;
pub mod observe;
pub mod pki;
pub mod plan;
pub mod probe;
pub mod report;
pub mod rollout;
pub mod secret;
pub mod store;
pub mod timefmt;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, LogFormat, OutputFormat, ProfileCommand, RunArgs};
use crate::config::{Config, Env, Overrides, Source};
use crate::exit::Error;
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
    let cli = Cli::parse_from(args);
    init_logging(&cli);
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::CheckFailed) => Error::CheckFailed.exit_code(),
        Err(e) => {
            tracing::debug!(error = ?e, "run failed");
            eprintln!("certgen: error: {e}");
            e.exit_code()
        }
    }
}

fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let level = match (cli.global.quiet, cli.global.verbose) {
        (true, _) => "warn",
        (_, 0) => "info",
        (_, 1) => "debug",
        _ => "trace",
    };
    // Only certgen's own events: client libraries may log request bodies at debug level, and
    // request bodies carry private keys.
    let filter = EnvFilter::new(format!("warn,certgen={level}"));
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
            let text = config::builtin_profile(&name).ok_or_else(|| {
                Error::Config(config::ConfigError {
                    source_name: "profile show".into(),
                    message: format!(
                        "unknown profile {name:?}; built-in profiles: {}",
                        config::BUILTIN_PROFILES.join(", ")
                    ),
                })
            })?;
            print(text)
        }
        Some(Command::Profile(ProfileCommand::List)) => {
            print(&(config::BUILTIN_PROFILES.join("\n") + "\n"))
        }
        Some(Command::Completions { shell }) => print(&completions(shell)),
        Some(Command::Man) => print(&man_page()),
        Some(Command::Check(args)) => {
            runtime(args.target.local.is_some())?.block_on(check(args.target))
        }
        None => runtime(cli.run.target.local.is_some())?.block_on(run(cli.run)),
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

/// The configuration source the arguments select.
pub fn target_source(target: &cli::TargetArgs) -> Source {
    match (&target.config, &target.profile) {
        (Some(path), _) => Source::File(path.clone()),
        (None, Some(p)) => Source::Profile(p.clone()),
        (None, None) => Source::Profile(config::DEFAULT_PROFILE.to_string()),
    }
}

/// Every Secret name the config manages (the CA Secret first).
fn secret_names(config: &Config) -> Vec<&str> {
    std::iter::once(config.ca.secret_name.as_str())
        .chain(config.tls.iter().map(|t| t.name.as_str()))
        .chain(config.hmac.iter().map(|h| h.name.as_str()))
        .collect()
}

/// Resolves the configuration and the local directory (`None` in a cluster) of a target.
fn resolve_target(target: &cli::TargetArgs) -> Result<(Config, Option<PathBuf>), Error> {
    let overrides = Overrides {
        namespace: target.namespace.clone(),
        cluster_domain: target.cluster_domain.clone(),
    };
    let mut config = Config::resolve(&target_source(target), &overrides, &Env::from_process())?;
    if target.disable_topology_injector && !config.disable_topology_injector() {
        tracing::debug!("--disable-topology-injector: the config declares no topology injector");
    }
    let local = config::local_dir(
        target.local.clone(),
        target.config_home.as_deref(),
        config::home_dir().as_deref(),
    )?;
    if local.is_none() && target.config_home.is_some() {
        // Envoy Gateway ignores it in a cluster too; say so rather than stay silent.
        tracing::warn!("--config-home only matters with --local; ignored");
    }
    Ok((config, local))
}

async fn run(args: RunArgs) -> Result<(), Error> {
    let (mut config, local) = resolve_target(&args.target)?;
    // In a cluster: what this identity may do, once, before anything else (src/access.rs).
    let cluster = match &local {
        Some(_) => None,
        None => {
            let client = k8s::client(&args.target).await?;
            // The rules review is one request on every run. It is made only when --wait or
            // --probe was given, so that missing verbs fail the run before anything is
            // written; otherwise every optional feature is tried and a 403 skips it for the
            // rest of the run with the same warning and report line (src/access.rs).
            let access = if args.wait || args.probe {
                k8s::review(&client, &config.namespace).await
            } else {
                access::Access::unknown()
            };
            let asked = access::Asked {
                wait: args.wait,
                probe: args.probe,
            };
            let skipped = access::adapt(&mut config, &access, asked).map_err(Error::Store)?;
            Some((client, access, skipped))
        }
    };
    let config = config;
    // A kubelet re-syncs a pod's volumes every syncFrequency (1 m by default) plus up to 50 %
    // jitter, so a Secret update can take about 91 s to reach a pod with default settings
    // (measured on a real kubelet: up to 84.8 s). Two minutes leaves a margin.
    let default_delay = if local.is_some() { 0 } else { 120 };
    let plan = plan::Options {
        overwrite: args.overwrite,
        rotate_hmac: args.rotate_hmac,
        force: args.force,
        strategy: match args.strategy {
            cli::StrategyArg::Staged => plan::Strategy::Staged,
            cli::StrategyArg::Immediate => plan::Strategy::Immediate,
        },
        propagation_delay: args
            .propagation_delay
            .unwrap_or(std::time::Duration::from_secs(default_delay)),
        trust_confirmed: None,
        gate_waited: None,
        other_written_at: None,
    };
    // An absurd --timeout (10000y) means "no bound", not an overflow.
    let now = tokio::time::Instant::now();
    let deadline = now
        .checked_add(args.timeout)
        .unwrap_or_else(|| now + std::time::Duration::from_secs(100 * 365 * 86_400));
    let context = |deployments, client, webhooks, lock| driver::Context {
        config: &config,
        plan,
        dry_run: args.dry_run,
        wait: args.wait,
        probe: args.probe,
        deadline,
        deployments,
        client,
        webhooks,
        lock,
    };
    // Optional features the API server refused during the run (a 403 without a review).
    let mut refused: Vec<String> = Vec::new();
    let (report, failure) = match &local {
        Some(dir) => {
            let lock = lock::Target::File(dir.clone());
            driver::drive(&LocalStore::new(dir), context(None, None, None, lock)).await?
        }
        None => {
            let (client, access, _) = cluster.as_ref().expect("a cluster run has a client");
            let store = KubeStore::new(client.clone(), &config.namespace)
                .with_labels(config.labels.clone())
                .with_write_verb(access.secret_write_verb(&secret_names(&config)));
            if store.write_verb() == access::SecretWriteVerb::Update {
                tracing::info!(
                    "this identity may not patch the Secrets: certgen writes them with updates fenced by resourceVersion"
                );
            }
            let deployments = k8s::Deployments::new(client.clone(), &config.namespace);
            let deployments = if args.wait {
                deployments
            } else {
                deployments.skip_refused()
            };
            let lock = lock::Target::Lease {
                client: client.clone(),
                namespace: config.namespace.clone(),
                name: format!("{}-certgen-lock", config.profile),
            };
            let webhooks = k8s::WebhookStore::new(client.clone());
            let driven = driver::drive(
                &store,
                context(
                    Some(&deployments),
                    Some(client),
                    (!config.webhooks.is_empty()).then_some(&webhooks),
                    lock,
                ),
            )
            .await?;
            refused = webhooks.refusals();
            if let Some(note) = deployments.refused() {
                let (report, _) = &driven;
                refused.extend(
                    report
                        .consumers
                        .iter()
                        .filter(|c| c.note.as_deref() == Some(note.as_str()))
                        .map(|c| format!("consumer {}: {note}", c.name)),
                );
            }
            driven
        }
    };
    let mut report = report;
    if let Some((_, _, skipped)) = &cluster {
        report.api_requests = Some(metrics::snapshot());
        report.skipped = skipped.clone();
        report.skipped.extend(refused);
        report
            .skipped
            .extend(k8s::lease::skipped().map(str::to_string));
    }
    report.next_renewal = report::next_renewal(
        &config,
        report
            .secrets
            .iter()
            .filter_map(|e| Some((e.secret.as_str(), e.not_after.as_deref()?))),
    );
    match args.target.output {
        OutputFormat::Text => print(&report.to_text())?,
        OutputFormat::Json => print(&report.to_json())?,
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn check(target: cli::TargetArgs) -> Result<(), Error> {
    let (config, local) = resolve_target(&target)?;
    let now = time::OffsetDateTime::now_utc();
    let report = match &local {
        Some(dir) => {
            let store = LocalStore::new(dir);
            let observed = observe::observe(&store, &config).await?;
            check::check(&config, &observed, now, store.describe())
        }
        None => {
            let client = k8s::client(&target).await?;
            let store = KubeStore::new(client, &config.namespace);
            let observed = observe::observe(&store, &config).await?;
            check::check(&config, &observed, now, store.describe())
        }
    };
    match target.output {
        OutputFormat::Text => print(&report.to_text())?,
        OutputFormat::Json => print(&report.to_json())?,
    }
    if report.healthy {
        Ok(())
    } else {
        Err(Error::CheckFailed)
    }
}

/// Shell completions for `shell`, as checked in under `completions/`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "certgen", &mut out);
    String::from_utf8(out).expect("completions are UTF-8")
}

/// The man page, as checked in under `man/certgen.1`.
pub fn man_page() -> String {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .expect("rendering the man page into memory cannot fail");
    String::from_utf8(out).expect("the man page is UTF-8")
}
