//! What one invocation asks for, resolved once from the command line: the configuration and
//! where its Secrets live ([`resolve_target`]), and how the main job runs ([`RunOptions`]).
//! The command line's own types stay in `crate::cli`, which converts its arguments into the
//! plain [`TargetSpec`] and [`RunOptions`] here: this module never sees clap's types.

use std::path::PathBuf;
use std::time::Duration;

use super::{Config, ConfigError, Env, Overrides, Source, home_dir, local_dir};

/// How a CA rotation is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Trust first (every bundle gets the new CA beside the current one), then, once consumers
    /// have it, the leaves; then, once consumers present the new leaves, the old CA goes.
    #[default]
    Staged,
    /// Bundle and leaf in one write, for setups where every consumer restarts.
    Immediate,
}

/// How the main job runs, as asked on the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Rotate the CA now (`--overwrite`).
    pub overwrite: bool,
    /// Replace HMAC secrets (`--rotate-hmac`).
    pub rotate_hmac: bool,
    /// Take over Secrets owned by another manager and replace unusable contents (`--force`).
    pub force: bool,
    /// How a rotation reaches consumers (`--strategy`).
    pub strategy: Strategy,
    /// How long consumers get to load a change before the next step relies on it.
    pub propagation_delay: Duration,
    /// Print the plan; write nothing (`--dry-run`).
    pub dry_run: bool,
    /// Wait for the rollouts of restarted workloads (`--wait`).
    pub wait: bool,
    /// Probe consumers over TLS (`--probe`).
    pub probe: bool,
    /// Push Secret changes to the pods that mount them (not `--no-poke`).
    pub poke: bool,
    /// At most this many of a gate's requests started per second (`--poke-rate`); `None`: the
    /// default budget (100 a second, `rotation/gate/pace.rs`).
    pub poke_rate: Option<std::num::NonZeroU32>,
    /// The bound on the whole run (`--timeout`).
    pub timeout: Duration,
    /// Why `overwrite` is set, for the report.
    pub overwrite_why: OverwriteWhy,
    /// A member's dry run in a set of clusters: the steps its plan holds back, as the set's
    /// run plans that member's step (`None`: not a member of a set's dry run).
    pub set_member: Option<SetHold>,
    /// `--respect-window`: `--overwrite` waits for a renewal window too.
    pub respect_window: bool,
}

/// The rotation steps a member of a set of clusters holds back ([`RunOptions::set_member`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetHold {
    pub leaves: bool,
    pub cleanup: bool,
}

/// Why a run rotates the CA although nothing is due: `--overwrite` was given, or (`certgen
/// create`) the Secret's certificates outlive `--validity`. Only the report's reason differs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OverwriteWhy {
    /// `--overwrite`.
    #[default]
    Asked,
    /// The certificates last longer than this `--validity` (`certgen create`).
    OutlivesValidity(Duration),
    /// A run over a set of clusters: this member holds another CA than the set's (it joins
    /// the set, or was restored), and moves to the set's CA.
    JoinsSet,
    /// A run over a set of clusters: the set's CA rotates in every member at once, because
    /// `--overwrite` asked for it or it is due in some member.
    SetRotation,
}

impl OverwriteWhy {
    /// The reason a report gives for the rotation.
    pub fn reason(self) -> String {
        match self {
            Self::Asked => "--overwrite: rotating the CA".into(),
            Self::OutlivesValidity(v) => format!(
                "the certificates outlive --validity {}: rotating the CA",
                crate::timefmt::HumanDuration(v)
            ),
            Self::JoinsSet => "this cluster moves to its set's CA".into(),
            Self::SetRotation => "the set's CA rotates in every member".into(),
        }
    }
}

/// The propagation delay in a cluster when `--propagation-delay` is not given. A kubelet
/// re-syncs a pod's volumes every syncFrequency (1 m by default) plus up to 50 % jitter, so a
/// Secret update can take about 91 s to reach a pod with default settings (measured on a real
/// kubelet: up to 84.8 s). Two minutes leaves a margin. Locally it is 0 s.
pub const CLUSTER_PROPAGATION_DELAY: Duration = Duration::from_secs(120);

/// The propagation delay when none is asked for (`asked`): [`CLUSTER_PROPAGATION_DELAY`] in a
/// cluster, none for a local directory.
pub fn propagation_delay(asked: Option<Duration>, local: bool) -> Duration {
    asked.unwrap_or(if local {
        Duration::ZERO
    } else {
        CLUSTER_PROPAGATION_DELAY
    })
}

impl RunOptions {
    /// When a run started at `start` must be done by. An absurd `--timeout` (10000y) means
    /// "no bound", not an overflow.
    pub fn deadline(&self, start: tokio::time::Instant) -> tokio::time::Instant {
        start
            .checked_add(self.timeout)
            .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400))
    }
}

/// Where the configuration and the Secrets are, as asked (`--profile`, `--config`,
/// `--namespace`, `--cluster-domain`, `--local`, `--config-home`,
/// `--disable-topology-injector`).
#[derive(Debug, Clone, Default)]
pub struct TargetSpec {
    pub profile: Option<String>,
    pub config: Option<PathBuf>,
    pub namespace: Option<String>,
    pub cluster_domain: Option<String>,
    /// `--cluster-name`.
    pub cluster_name: Option<String>,
    /// The (first) `--context`: with a config that lists `clusters:`, the member to resolve.
    pub context: Option<String>,
    /// `--local` without a directory is `Some(None)`.
    pub local: Option<Option<PathBuf>>,
    pub config_home: Option<PathBuf>,
    pub disable_topology_injector: bool,
    /// `--topology-injector NAME`: the topology injector's name, when not Envoy Gateway's.
    pub topology_injector: Option<String>,
    /// `--cluster-trust-bundle SIGNER`s.
    pub cluster_trust_bundles: Vec<String>,
    /// `--renewal-window`: replaces the config's `renewal.windows` when given.
    pub renewal_windows: Vec<crate::window::Window>,
    /// `--renewal-window-margin`: replaces the config's `renewal.margin`.
    pub renewal_window_margin: Option<Duration>,
}

/// The configuration source the arguments select.
pub fn source(target: &TargetSpec) -> Source {
    match (&target.config, &target.profile) {
        (Some(path), _) => Source::File(path.clone()),
        (None, Some(p)) => Source::Profile(p.clone()),
        (None, None) => Source::Profile(crate::profiles::DEFAULT.to_string()),
    }
}

/// Resolves the configuration and the local directory (`None` in a cluster) of a target.
pub fn resolve_target(target: &TargetSpec) -> Result<(Config, Option<PathBuf>), ConfigError> {
    let overrides = Overrides {
        namespace: target.namespace.clone(),
        cluster_domain: target.cluster_domain.clone(),
        cluster_name: target.cluster_name.clone(),
    };
    let mut config = Config::resolve_for(
        &source(target),
        &overrides,
        &Env::from_process(),
        target.context.as_deref(),
        target.local.is_some(),
    )?;
    if target.disable_topology_injector && !config.disable_topology_injector() {
        tracing::debug!("--disable-topology-injector: the config declares no topology injector");
    }
    if let Some(name) = &target.topology_injector {
        config.name_topology_injector(name)?;
    }
    for signer in &target.cluster_trust_bundles {
        config.add_trust_bundle(signer)?;
    }
    // The command line's windows replace the file's (flag > file).
    if !target.renewal_windows.is_empty() {
        config.renewal.windows = target.renewal_windows.clone();
    }
    if let Some(m) = target.renewal_window_margin {
        config.renewal.margin = m;
    }
    let local = local_dir(
        target.local.clone(),
        target.config_home.as_deref(),
        home_dir().as_deref(),
    )?;
    if local.is_none() && target.config_home.is_some() {
        // Envoy Gateway ignores it in a cluster too; say so rather than stay silent.
        tracing::warn!("--config-home only matters with --local; ignored");
    }
    Ok((config, local))
}
