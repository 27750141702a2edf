//! certgen: generates and rotates the mutual-TLS certificates of a Kubernetes control plane.
//!
//! The layers, each forgetting the one before: [`cli`] (clap, no IO) → [`config`] (one
//! resolution of flags, environment and file into validated values) → the [`rotation`] driver,
//! which runs each step as [`observe`] (read and parse every Secret) → [`plan`] (pure
//! decisions, down to every byte written) → [`apply`] (mechanical writes), then the consumers'
//! restarts and probes, and hands its results to [`report`]. [`check`] judges what
//! [`observe`] read. Secrets are reached through the [`store`] trait; every Kubernetes API
//! call is in the [`k8s`] adapter, which the core never imports. [`pki`] is pure cryptography
//! with `now` passed in. [`run`] wires the core to the outside world, one module per command's
//! job; this root only parses, sets up logging and dispatches. Only [`main`] turns results
//! into exit codes.

pub mod access;
pub mod api_requests;
pub mod apply;
pub mod attribution;
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
pub mod k8s;
pub mod kwc;
pub mod lock;
pub mod observe;
pub mod outside;
pub mod pki;
pub mod plan;
pub mod probe;
pub mod profiles;
pub mod report;
pub mod rollout;
pub mod rotation;
pub mod run;
pub mod secret;
pub mod set;
pub mod store;
pub mod text;
pub mod timefmt;
pub mod trust_bundles;
pub mod window;
pub mod workload;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, LogFormat, OutputFormat, ProfileCommand};
use crate::error::Error;

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
        let _ = run::print(&report::ErrorReport::new(error.to_object()).to_json());
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
        let _ = run::print(&report::ErrorReport::new(object.clone()).to_json());
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
        _ if kwc_level.is_some() => cli::kwc_log_level(kwc_level),
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
            run::print(text)
        }
        Some(Command::Profile(ProfileCommand::List)) => run::print(&profiles::listing()),
        Some(Command::Completions { shell }) => run::print(&completions(shell)),
        Some(Command::Man { dir: None }) => run::print(&man_page()),
        Some(Command::Man { dir: Some(dir) }) => write_man_pages(&dir),
        Some(Command::Create(args)) => runtime(false)?
            .block_on(run::kwc::create(&args))
            .and_then(|lines| run::print(&(lines.join("\n") + "\n"))),
        Some(Command::Patch(args)) => runtime(false)?
            .block_on(run::kwc::patch(&args))
            .and_then(|lines| run::print(&(lines.join("\n") + "\n"))),
        Some(Command::Handover(cli::HandoverCommand::CertManager(args))) => runtime(false)?
            .block_on(run::handover::cert_manager(&args))
            .and_then(|text| run::print(&text)),
        Some(Command::Check(args)) => {
            runtime(args.target.local.is_some())?.block_on(run::check::run(args.target))
        }
        Some(Command::Exporter(args)) => runtime(false)?.block_on(run::exporter::run(&args)),
        None => runtime(cli.run.target.local.is_some())?.block_on(run::job::run(cli.run)),
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
