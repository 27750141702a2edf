//! Command-line definitions (clap derive) and nothing else: no IO, no defaults resolved here
//! beyond what clap shows in `--help`.

pub mod exporter;
pub mod kwc;
mod resolve;

pub use self::resolve::kwc_log_level;

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Examples:
  certgen --local ./certs              create the envoy-gateway Secrets as files under ./certs
  certgen --dry-run                    show what a run would do in the cluster
  certgen --overwrite                  rotate the CA, keeping the prior CA trusted
  certgen profile show > my.yaml       start a config for another control plane

";

/// Generates and rotates the mutual-TLS certificates of a Kubernetes control plane.
///
/// Without a subcommand, certgen ensures the profile's Secrets: it creates what is missing,
/// renews what is due and leaves the rest alone. A run with nothing to do writes nothing.
#[derive(Debug, Parser)]
#[command(name = "certgen", version, after_help = format!("{AFTER_HELP}{}", crate::exit::TABLE))]
#[command(args_conflicts_with_subcommands = true, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub global: GlobalArgs,
}

/// Options of every command.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Log format on standard error.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// More log output (-v debug, -vv trace of certgen's own decisions).
    #[arg(short, long, action = ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Only warnings and errors on standard error.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

/// Which Secrets, and the profile or config that describes them (the main job, `check` and
/// the exporter).
#[derive(Debug, Args)]
pub struct SecretsArgs {
    /// Built-in profile to use [default: envoy-gateway].
    #[arg(long, value_name = "NAME", conflicts_with = "config")]
    pub profile: Option<String>,
    /// YAML config file (start from `certgen profile show`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile's].
    #[arg(short, long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local].
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// The cluster's name, which `{cluster}` in the config's names and SANs becomes (Cilium's
    /// cluster.name), for a run in one cluster [default: its entry in the config's clusters:].
    #[arg(long, value_name = "NAME")]
    pub cluster_name: Option<String>,
}

/// When routine rotations may start (the main job, `check` and the exporter).
#[derive(Debug, Clone, Default, Args)]
pub struct WindowArgs {
    /// A renewal window, `CRON;DURATION[;TZ]` (cert-manager's cron, windowDuration and
    /// timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf
    /// within its renewBefore) starts only inside one, unless it would expire within
    /// --renewal-window-margin of the next. Repeatable; replaces the config's renewal.windows.
    #[arg(
        long,
        value_name = "CRON;DURATION[;TZ]",
        env = "CERTGEN_RENEWAL_WINDOW",
        value_delimiter = '|'
    )]
    pub renewal_window: Vec<crate::window::Window>,
    /// A routine rotation starts outside the windows when what it renews would expire within
    /// this long after the next window opens [default: the config's renewal.margin, or 24h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub renewal_window_margin: Option<std::time::Duration>,
}

/// Where the Secrets are and which profile describes them (the main job and `check`).
#[derive(Debug, Args)]
pub struct TargetArgs {
    #[command(flatten)]
    pub secrets: SecretsArgs,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the
    /// config home's `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+].
    #[arg(short, long, value_name = "DIR", num_args = 0..=1)]
    pub local: Option<Option<PathBuf>>,
    /// Envoy Gateway's config home: `--local` without DIR writes `DIR/certs` [default:
    /// ~/.config/envoy-gateway]. Only used with --local.
    #[arg(long, value_name = "DIR")]
    pub config_home: Option<PathBuf>,
    /// Leave Envoy Gateway's topology injector webhook alone: do not keep the caBundle of
    /// MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step.
    #[arg(long)]
    pub disable_topology_injector: bool,
    /// The topology injector's MutatingWebhookConfiguration when it is not named
    /// `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix).
    /// Without it, a run that does not find that name looks for the one labelled
    /// app.kubernetes.io/component=topology-injector whose webhook's Service is in the
    /// namespace, and says which it used.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "disable_topology_injector"
    )]
    pub topology_injector: Option<String>,
    /// Also publish the first TLS Secret's CA bundle as ClusterTrustBundles linked to SIGNER
    /// (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods
    /// that project them by signerName and a labelSelector. Repeatable; the config's
    /// `clusterTrustBundles:` sets labels and the Secret.
    #[arg(long, value_name = "SIGNER")]
    pub cluster_trust_bundle: Vec<String>,
    /// Format of the report on standard output (prometheus: metrics in Prometheus' text format).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every
    /// phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a
    /// --config that lists clusters:, leave it out to run over that list (given, the contexts
    /// must be the listed ones; one alone runs in that member).
    #[arg(long, value_name = "NAME")]
    pub context: Vec<String>,
}

/// Options of the main job.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Rotate now: a new CA, bundled with at most one prior CA, and new leaves.
    #[arg(short, long)]
    pub overwrite: bool,
    /// With --overwrite: wait for a renewal window too (by default a rotation asked for by
    /// hand starts at once, windows or not).
    #[arg(long, requires = "overwrite")]
    pub respect_window: bool,
    /// Also replace HMAC Secrets (they are left alone otherwise).
    #[arg(long)]
    pub rotate_hmac: bool,
    /// Take over Secrets owned by another manager and replace unusable contents.
    #[arg(long)]
    pub force: bool,
    /// With several --context: this context's cluster joins the set (it enters through a
    /// trust step). Repeatable.
    #[arg(long, value_name = "CONTEXT")]
    pub add_member: Vec<String>,
    /// With several --context: take this member (its kube-system UID, or its context) out of
    /// the set. Repeatable.
    #[arg(long, value_name = "UID|CONTEXT")]
    pub remove_member: Vec<String>,
    /// How a rotation reaches consumers: staged (trust first, then leaves) or immediate (one write).
    #[arg(long, value_enum, default_value_t = StrategyArg::Staged)]
    pub strategy: StrategyArg,
    /// How long hot-reloading consumers get to load a change before the next rotation phase
    /// relies on it [default: 2m in a cluster, 0s with --local].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub propagation_delay: Option<std::time::Duration>,
    /// Wait for the rollouts of restarted workloads (Deployments, StatefulSets, DaemonSets)
    /// before exiting (and for a cleanup gate that only --propagation-delay can open).
    #[arg(long)]
    pub wait: bool,
    /// Never annotate the pods that mount a changed Secret (which makes their kubelet load it
    /// at once and lets gates open on that evidence): every gate waits out --propagation-delay.
    #[arg(long)]
    pub no_poke: bool,
    /// At most N of a gate's requests (pod pokes, node Lease reads) started per second, evenly
    /// paced, 8 in flight per 100 [default: 100]. Raise it to rotate thousands of pods faster
    /// where the control plane has room; see docs/api-requests.md.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub poke_rate: Option<u32>,
    /// Verify over TLS that probed consumers serve the new certificates before exiting.
    #[arg(long)]
    pub probe: bool,
    /// Bound on all waiting and probing (e.g. 90s, 5m).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        value_parser = parse_duration,
        allow_hyphen_values = true
    )]
    pub timeout: std::time::Duration,
    /// Print the plan; generate and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also write the run's metrics (what `check --output prometheus` shows after the run,
    /// plus its outcome, duration, writes and API requests) to FILE for node-exporter's
    /// textfile collector, replacing it atomically.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
    /// Record Kubernetes Events (events.k8s.io/v1) on the Secrets, restarted workloads and
    /// caBundle targets: each write and restart, and a Warning for a certificate past its
    /// renewal time, an expired CA, or a rotation stuck past its gate. Needs create, get and
    /// patch on events (in `default` too for the Events of webhook configurations and
    /// APIServices, which are cluster-scoped); a refusal is a warning, never a failed run.
    #[arg(long)]
    pub events: bool,
    /// With --events: how long past its gate (the propagation delay after the phase began) a
    /// rotation may stay in one phase before a RotationStuck Warning.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub stuck_after: std::time::Duration,
    /// Also push the run's metrics to this Pushgateway (base URL, e.g.
    /// `http://pushgateway.monitoring:9091`), replacing the group job=certgen, namespace, profile.
    #[arg(long, value_name = "URL")]
    pub pushgateway: Option<String>,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    s.parse::<crate::timefmt::HumanDuration>().map(|d| d.0)
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Report expiry, trust and consistency of every Secret; exit 1 when action is due.
    ///
    /// The verdict is the planner's: NEXT RUN says what a plain run (no flags) would do with
    /// what was read, and check exits 0 exactly when that run would write nothing, wait for
    /// nothing and refuse nothing. Each Secret's row says why; in a cluster the caBundle
    /// targets are read too (a drifted one is a write). A Secret that cannot be read is on its
    /// row of the whole report, and the exit is 2, as the run's.
    Check(CheckArgs),
    /// Built-in profiles.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Serve the metrics of `check --output prometheus` on /metrics, from watches.
    ///
    /// A long-running process (the chart's `metrics.enabled` Deployment): one LIST (in pages of
    /// 20) + WATCH of the namespace's Secrets and one per kind of caBundle target keep its view
    /// current, and each scrape computes the metrics at its own time, without any API request.
    /// Serves /metrics, /healthz and /readyz (ready once every watch has listed); stops on
    /// SIGTERM. A connection that sends no request head within 10 s is closed, and at most 256
    /// are open (the longest-waiting idle one makes room). Needs get, list and watch on Secrets
    /// in the namespace, and list and watch on the caBundle targets' kinds.
    Exporter(exporter::ExporterArgs),
    /// kube-webhook-certgen's `create`: a CA and a serving certificate in a new Secret.
    ///
    /// The drop-in for kube-webhook-certgen's Job (certgen linked as `kube-webhook-certgen`
    /// runs it unchanged): same flags, same Secret type and keys, SANs from --host. An existing
    /// Secret is kept when usable; one holding other keys is refused (exit 2). certgen's
    /// additions renew it: with --webhook-name or --apiservice-name, a Secret that is due
    /// (--renew-before) is renewed through a staged rotation with those caBundles in step
    /// (trust first, the serving certificate after the gate, the cleanup last; a step whose
    /// gate is far off is left to the next run); without them it is kept, with a warning.
    // A flag given twice takes the last value, as kube-webhook-certgen's (pflag) do: charts
    // append overrides to their Jobs' args.
    #[command(args_override_self = true)]
    Create(kwc::KwcCreateArgs),
    /// kube-webhook-certgen's `patch`: the Secret's CA into webhook configurations' caBundle.
    ///
    /// Every entry of the ValidatingWebhookConfiguration and MutatingWebhookConfiguration
    /// --webhook-name (and an APIService) gets the CA, after every object was read and the CA
    /// checked against the Secret's certificate; only what differs is written.
    #[command(args_override_self = true)]
    Patch(kwc::KwcPatchArgs),
    /// Hand certgen's Secrets over to cert-manager with no TLS gap.
    #[command(subcommand)]
    Handover(HandoverCommand),
    /// Print shell completions.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page certgen(1) (roff), or write every page with --dir.
    Man {
        /// Write every man page into DIR instead: certgen.1 and one per subcommand
        /// (certgen-check.1, certgen-profile-show.1, ...), e.g. `--dir /usr/share/man/man1`.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `certgen handover ...`
#[derive(Debug, Subcommand)]
pub enum HandoverCommand {
    /// Print the cert-manager Issuer and Certificates that continue what certgen wrote, or
    /// create them with --apply.
    ///
    /// A CA Issuer on certgen's CA Secret (named like it), so cert-manager's first certificates
    /// come from the CA every bundle already trusts, and one Certificate per TLS Secret with the
    /// same Secret name, SANs, key algorithm, usages and validity. Each Certificate issues into
    /// its existing Secret at once: a new key and leaf from the same CA, with ca.crt that CA
    /// alone, so it is refused unless `certgen check` finds nothing due and no rotation in
    /// progress. With --apply it creates the Issuer, waits until it is ready, creates the
    /// Certificates, waits until each has issued, and annotates each caBundle target for
    /// cert-manager's CA injector (cert-manager.io/inject-ca-from). From then on certgen's runs
    /// leave those Secrets and the CA Secret alone and say so (exit 0); HMAC Secrets stay
    /// certgen's. Back to certgen: delete the Certificates (docs/cert-manager.md). Needs
    /// get/patch on issuers and certificates (cert-manager.io), and patch on the caBundle
    /// targets.
    CertManager(HandoverArgs),
}

/// `certgen handover cert-manager`
#[derive(Debug, Args)]
pub struct HandoverArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Create the objects and wait for cert-manager, instead of printing them.
    #[arg(long)]
    pub apply: bool,
    /// Bound on waiting for cert-manager with --apply.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        value_parser = parse_duration
    )]
    pub timeout: std::time::Duration,
}

/// `certgen check`
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: TargetArgs,
}

/// `certgen profile ...`
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print a built-in profile as YAML, a starting point for --config.
    Show {
        /// Profile name.
        #[arg(default_value = crate::profiles::DEFAULT)]
        name: String,
    },
    /// List the built-in profiles, one line each: its name and whose Secrets it writes.
    List,
}

/// Rotation strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    /// Trust first: every bundle gets the new CA beside the current one; leaves follow once
    /// consumers have it.
    Staged,
    /// Bundle and leaves in one write, for setups where every consumer restarts.
    Immediate,
}

/// Report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
    // Prometheus' text exposition format (src/exposition/). No doc comment: one would turn
    // every command's --help into clap's long layout.
    Prometheus,
}

/// Log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The command-line arguments, accepting Envoy Gateway's spelling: when the binary is invoked
/// as `envoy-gateway` (a link, so an image can replace Envoy Gateway's in its chart's certgen
/// Job, whose command is `envoy-gateway certgen`), the `certgen` word after it is dropped. Any
/// other `envoy-gateway` subcommand is an error naming what this binary is.
pub fn compat_args(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<Vec<std::ffi::OsString>, String> {
    let mut args: Vec<_> = args.into_iter().collect();
    let invoked_as = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if invoked_as == KWC_NAME {
        return kwc_args(args);
    }
    if invoked_as == "envoy-gateway" {
        match args.get(1).and_then(|a| a.to_str()) {
            Some("certgen") => {
                args.remove(1);
            }
            other => {
                return Err(format!(
                    "this is certgen, invoked as envoy-gateway: only `envoy-gateway certgen` is provided (got {})",
                    other.map_or("no subcommand".to_string(), |o| format!("{o:?}"))
                ));
            }
        }
    }
    Ok(args)
}

/// The name under which certgen takes kube-webhook-certgen's command line.
pub const KWC_NAME: &str = "kube-webhook-certgen";

/// kube-webhook-certgen's command line: `create` or `patch` (or `version`), with its
/// persistent flags (`--kubeconfig`, `--log-level`, `--log-format`) before or after the
/// command. Flags before the command are moved after it, where certgen's subcommands take
/// them; any other command is an error naming what this binary is, so that a mistyped Job
/// never runs certgen's own job instead.
fn kwc_args(mut args: Vec<std::ffi::OsString>) -> Result<Vec<std::ffi::OsString>, String> {
    let mut i = 1;
    while i < args.len() {
        let Some(arg) = args[i].to_str() else {
            return Err(format!("{KWC_NAME}: arguments must be UTF-8"));
        };
        match arg {
            "--kubeconfig" | "--log-level" | "--log-format" => i += 2,
            "-h" | "--help" if i + 1 == args.len() => return Ok(args),
            // `kube-webhook-certgen --version`, as `version` (exit 0, certgen's version).
            "--version" => {
                args.truncate(1);
                args.push("--version".into());
                return Ok(args);
            }
            a if a.starts_with('-') => i += 1,
            "create" | "patch" => {
                let command = args.remove(i);
                args.insert(1, command);
                return Ok(args);
            }
            "version" => {
                args.truncate(1);
                args.push("--version".into());
                return Ok(args);
            }
            other => {
                return Err(format!(
                    "this is certgen, invoked as {KWC_NAME}: only `create`, `patch` and `version` are provided (got {other:?})"
                ));
            }
        }
    }
    Err(format!(
        "this is certgen, invoked as {KWC_NAME}: give a command, `create` or `patch`"
    ))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn kube_webhook_certgens_command_line_is_accepted_when_invoked_as_it() {
        let os = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let kwc = "/usr/local/bin/kube-webhook-certgen";
        assert_eq!(
            super::compat_args(os(&[kwc, "--log-level", "debug", "create", "--host=a"])).unwrap(),
            os(&[kwc, "create", "--log-level", "debug", "--host=a"])
        );
        assert_eq!(
            super::compat_args(os(&[kwc, "patch", "--webhook-name=w"])).unwrap(),
            os(&[kwc, "patch", "--webhook-name=w"])
        );
        assert_eq!(
            super::compat_args(os(&[kwc, "version"])).unwrap(),
            os(&[kwc, "--version"])
        );
        assert_eq!(
            super::compat_args(os(&[kwc, "--version"])).unwrap(),
            os(&[kwc, "--version"])
        );
        assert_eq!(
            super::compat_args(os(&[kwc, "--log-level", "info", "--version"])).unwrap(),
            os(&[kwc, "--version"])
        );
        for refused in [&[kwc][..], &[kwc, "--log-level=info"], &[kwc, "serve"]] {
            assert!(
                super::compat_args(os(refused))
                    .unwrap_err()
                    .contains("invoked as kube-webhook-certgen"),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn envoy_gateways_command_is_accepted_when_invoked_as_envoy_gateway() {
        let os = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(
            super::compat_args(os(&["/usr/local/bin/envoy-gateway", "certgen", "-o"])).unwrap(),
            os(&["/usr/local/bin/envoy-gateway", "-o"])
        );
        assert!(
            super::compat_args(os(&["envoy-gateway", "server"]))
                .unwrap_err()
                .contains("only `envoy-gateway certgen`")
        );
        // As certgen, nothing is rewritten.
        assert_eq!(
            super::compat_args(os(&["certgen", "certgen"])).unwrap(),
            os(&["certgen", "certgen"])
        );
    }

    #[test]
    fn the_poke_rate_reaches_the_run_options_and_stays_in_range() {
        use clap::Parser;
        let rate = |args: &[&str]| {
            super::Cli::try_parse_from([&["certgen"][..], args].concat())
                .map(|cli| cli.run.options(false).poke_rate.map(|r| r.get()))
                .map_err(|e| e.to_string())
        };
        assert_eq!(rate(&[]), Ok(None));
        assert_eq!(rate(&["--poke-rate", "250"]), Ok(Some(250)));
        for bad in ["0", "1001", "-5", "fast"] {
            let err = rate(&[&format!("--poke-rate={bad}")]).unwrap_err();
            assert!(err.contains("--poke-rate"), "{bad}: {err}");
        }
    }

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
