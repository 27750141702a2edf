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
pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod exit;
pub mod k8s;
pub mod lock;
pub mod metrics;
pub mod observe;
pub mod pki;
pub mod plan;
pub mod probe;
pub mod profiles;
pub mod report;
pub mod rollout;
pub mod rotation;
pub mod secret;
pub mod store;
pub mod timefmt;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, LogFormat, OutputFormat, ProfileCommand, RunArgs};
use crate::config::RunOptions;
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
        Some(Command::Profile(ProfileCommand::List)) => print(&(profiles::NAMES.join("\n") + "\n")),
        Some(Command::Completions { shell }) => print(&completions(shell)),
        Some(Command::Man { dir: None }) => print(&man_page()),
        Some(Command::Man { dir: Some(dir) }) => write_man_pages(&dir),
        Some(Command::Check(args)) => {
            runtime(args.target.local.is_some())?.block_on(check(args.target))
        }
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

/// certgen's main job: resolve, then (in a cluster) adapt to what this identity may do, run
/// the rotation driver against the store, print the report.
async fn main_job(args: RunArgs) -> Result<(), Error> {
    let (mut config, local) = config::resolve_target(&args.target)?;
    let options = RunOptions::resolve(&args, local.is_some());
    // In a cluster: what this identity may do, when that must be known before the first write
    // (src/access.rs).
    let cluster = match &local {
        Some(_) => None,
        None => {
            let client = k8s::client(&args.target).await?;
            // The rules review would be one request on every run. It is made only when --wait
            // or --probe was given, so that missing verbs fail the run before anything is
            // written; otherwise every optional feature is tried and a 403 skips it for the
            // rest of the run with the same warning and report line (src/access.rs).
            let access = if options.wait || options.probe {
                k8s::review(&client, &config.namespace).await
            } else {
                access::Access::unknown()
            };
            let asked = access::Asked {
                wait: options.wait,
                probe: options.probe,
            };
            let skipped = access::adapt(&mut config, &access, asked).map_err(Error::Store)?;
            Some((client, access, skipped))
        }
    };
    let config = config;
    let deadline = options.deadline(tokio::time::Instant::now());
    let invocation = |deployments, client, webhooks, pods, lock| rotation::Invocation {
        config: &config,
        options,
        deadline,
        deployments,
        client,
        webhooks,
        pods,
        lock,
    };
    let (report, failure) = match &local {
        Some(dir) => {
            let lock = lock::Target::File(dir.clone());
            let store = LocalStore::new(dir);
            rotation::run(&store, invocation(None, None, None, None, lock)).await?
        }
        None => {
            let (client, access, skipped) = cluster.as_ref().expect("a cluster run has a client");
            let store = KubeStore::new(client.clone(), &config.namespace)
                .with_labels(config.labels.clone())
                .with_write_verb(access.secret_write_verb(&config.secret_names()));
            if store.write_verb() == access::SecretWriteVerb::Update {
                tracing::info!(
                    "this identity may not patch the Secrets: certgen writes them with updates fenced by resourceVersion"
                );
            }
            let deployments = k8s::Deployments::new(client.clone(), &config.namespace);
            let deployments = if options.wait {
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
            // Pushed propagation (src/rotation/gate.rs): an extra like restarts, so a 403 turns
            // it off for the run with a report line, and the gates wait out the delay.
            let pods = k8s::Pods::new(client.clone(), &config.namespace);
            let (report, failure) = rotation::run(
                &store,
                invocation(
                    Some(&deployments),
                    Some(client),
                    (!config.webhooks.is_empty()).then_some(&webhooks),
                    options.poke.then_some(&pods),
                    lock,
                ),
            )
            .await?;
            // Optional features skipped for missing verbs: found by the review, refused by the
            // API server during the run (a 403 without a review), and the run lock.
            let mut skipped = skipped.clone();
            skipped.extend(webhooks.refusals());
            if let Some(note) = deployments.refused() {
                skipped.extend(report.consumers_noted(&note));
            }
            skipped.extend(k8s::lease::skipped().map(str::to_string));
            skipped.extend(pods.refused());
            (report.in_cluster(metrics::snapshot(), skipped), failure)
        }
    };
    let report = report.with_next_renewal(&config);
    match args.target.output {
        OutputFormat::Text => print(&report.to_text())?,
        OutputFormat::Json => print(&report.to_json())?,
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `certgen check`: observe, check, print the report; exit 1 when action is due.
async fn check(target: cli::TargetArgs) -> Result<(), Error> {
    let (config, local) = config::resolve_target(&target)?;
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
