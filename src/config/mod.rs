//! Profiles and configuration: the YAML schema, built-in profiles, validation, and the one place
//! where flags, environment and file are merged (`flag > env > file > default`), and where the
//! main job's flags are resolved ([`RunOptions`]).
//!
//! The result, [`Config`], holds only validated values: rendered SANs, parsed durations, known
//! algorithms. Nothing after this module sees clap or raw YAML.

mod run;
mod schema;
mod validate;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use run::{
    CLUSTER_PROPAGATION_DELAY, OverwriteWhy, RunOptions, SetHold, Strategy, TargetSpec,
    propagation_delay, resolve_target, source,
};
pub use schema::{
    CaFile, ClusterFile, ConfigFile, ConsumerFile, DataKeysFile, ProbeFile, Reload, SecretFile,
    SecretType, Usage, WebhookFile, WebhookKind,
};

use crate::pki::{CaSpec, KeyAlgorithm, LeafSpec, Usages};
use crate::profiles;
pub use crate::workload::Kind;
pub(crate) use validate::{data_key_problem, dns_san, dns1123_label, dns1123_subdomain};

/// The label every Secret certgen writes carries.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "certgen";

/// The name (before `.{namespace}`) of Envoy Gateway's topology injector
/// MutatingWebhookConfiguration, the target `--disable-topology-injector` removes.
pub const TOPOLOGY_INJECTOR_PREFIX: &str = "envoy-gateway-topology-injector";

/// Envoy Gateway's config home below the home directory (v1.6+): `~/.config/envoy-gateway`.
pub const EG_CONFIG_HOME: &str = ".config/envoy-gateway";

/// The name of the envoy-gateway config (the profile's `name`): the one `ENVOY_GATEWAY_NAMESPACE`
/// applies to.
const ENVOY_GATEWAY: &str = "envoy-gateway";

/// Where `--local` writes when given without a directory, Envoy Gateway v1.6+'s rule:
/// `<config home>/certs`, the config home being `--config-home` or `~/.config/envoy-gateway`.
/// `home` is the user's home directory (`None` when it cannot be found).
pub fn local_dir(
    local: Option<Option<PathBuf>>,
    config_home: Option<&Path>,
    home: Option<&Path>,
) -> Result<Option<PathBuf>, ConfigError> {
    match local {
        None => Ok(None),
        Some(Some(dir)) => Ok(Some(dir)),
        Some(None) => {
            let config_home = match (config_home, home) {
                (Some(c), _) => c.to_path_buf(),
                (None, Some(h)) => h.join(EG_CONFIG_HOME),
                (None, None) => {
                    return Err(ConfigError::new(
                        "--local",
                        "cannot find the home directory for the default ~/.config/envoy-gateway/certs; pass --local DIR or --config-home DIR",
                    ));
                }
            };
            Ok(Some(config_home.join("certs")))
        }
    }
}

/// The user's home directory as Envoy Gateway finds it (Go's `user.Current().HomeDir`:
/// `$HOME`, else the passwd entry of the current user).
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(passwd_home)
}

fn passwd_home() -> Option<PathBuf> {
    let uid = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid = uid
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2] == uid).then(|| PathBuf::from(f[5]))
    })
}

/// A configuration error: names the field (and line where known) and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct ConfigError {
    pub source_name: String,
    pub message: String,
}

impl ConfigError {
    fn new(source_name: &str, message: impl Into<String>) -> Self {
        Self {
            source_name: source_name.to_string(),
            message: message.into(),
        }
    }
}

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum Source {
    Profile(String),
    File(PathBuf),
}

/// The environment variables certgen reads, captured once so resolution stays testable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    pub certgen_namespace: Option<String>,
    /// Kept even when set and empty: Envoy Gateway would use the empty namespace, so certgen
    /// refuses it instead of silently using another one.
    pub envoy_gateway_namespace: Option<String>,
    pub cluster_domain: Option<String>,
}

impl Env {
    /// Reads the process environment; empty values count as unset, except
    /// `ENVOY_GATEWAY_NAMESPACE` (see [`Env::envoy_gateway_namespace`]).
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self {
            certgen_namespace: var("CERTGEN_NAMESPACE"),
            envoy_gateway_namespace: std::env::var("ENVOY_GATEWAY_NAMESPACE").ok(),
            cluster_domain: var("KUBERNETES_CLUSTER_DOMAIN"),
        }
    }
}

/// Values given on the command line that override the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub namespace: Option<String>,
    pub cluster_domain: Option<String>,
    /// `--cluster-name`: what `{cluster}` becomes in a run in one cluster.
    pub cluster_name: Option<String>,
}

/// A member of a set of clusters as the config file lists it (`clusters:`), validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The kubeconfig context that reaches it.
    pub context: String,
    /// Its namespace, when not the file's.
    pub namespace: Option<String>,
    /// What `{cluster}` becomes for it.
    pub name: Option<String>,
}

/// The names a template may use: `{namespace}`, `{clusterDomain}`, and `{cluster}` when the
/// run knows the cluster's name (`Err` says why it does not, and how to give it).
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    pub namespace: &'a str,
    pub cluster_domain: &'a str,
    pub cluster: Result<&'a str, &'a str>,
}

/// What a configuration was resolved from, kept so that each member of a set can be resolved
/// from the same file with its own namespace and name ([`Config::member`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    source_name: String,
    file: ConfigFile,
    overrides: Overrides,
    env: Env,
    /// `--disable-topology-injector` was applied.
    injector_disabled: bool,
    /// `--topology-injector NAME` was applied.
    injector_named: Option<String>,
    /// `--cluster-trust-bundle SIGNER`s applied.
    trust_signers: Vec<String>,
}

/// A validated TLS Secret to manage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSecret {
    pub name: String,
    pub leaf: LeafSpec,
    pub renew_before: Duration,
    /// Its data keys and type (certgen's own unless the config says otherwise).
    pub layout: crate::secret::Layout,
}

impl Config {
    /// The layout of the managed TLS Secret `name` (the default for any other name).
    pub fn layout_of(&self, name: &str) -> crate::secret::Layout {
        self.tls
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.layout.clone())
            .unwrap_or_default()
    }
}

/// A validated HMAC Secret to manage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmacSecret {
    pub name: String,
    pub key: String,
    pub bytes: usize,
}

/// The CA, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ca {
    pub secret_name: String,
    pub spec: CaSpec,
    pub renew_before: Duration,
    /// The CA Secret's data keys and type: `bundle` its trust bundle, `cert` and `key` the
    /// active CA (certgen's own `ca.crt`, `tls.crt`, `tls.key` unless the config says
    /// otherwise). A staged rotation's pending CA is always in `next.crt` and `next.key`.
    pub layout: crate::secret::Layout,
}

/// Which workloads (of the consumer's [`Kind`]) a consumer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// One workload by name.
    Name(String),
    /// Every workload of the kind matching a label selector.
    Selector(String),
}

/// A validated TLS probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub service: Option<String>,
    pub port: u16,
    pub addresses: Vec<String>,
    pub server_name: String,
    /// The managed TLS Secret the server presents.
    pub secret: String,
}

/// A validated consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    pub name: String,
    /// The kind of its workloads (Deployment unless the config says otherwise).
    pub kind: Kind,
    pub workload: Option<Workload>,
    pub reload: Reload,
    pub mounts: Vec<String>,
    pub required: bool,
    pub probe: Option<Probe>,
    /// What certgen will not do for this consumer, and why (missing RBAC verbs), for the report.
    pub skipped: Vec<String>,
}

/// A validated `caBundle` target: a cluster-scoped object whose CA bundle follows the `ca.crt`
/// of the managed TLS Secret `bundle_from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub kind: WebhookKind,
    /// The rendered name.
    pub name: String,
    pub bundle_from: String,
    /// The data key of that Secret's bundle (its layout's: `ca.crt`, or `ca` in
    /// kube-webhook-certgen's), for what reports say.
    pub bundle_key: String,
}

/// The label on each ClusterTrustBundle certgen writes: the namespace of the Secret it publishes.
pub const BUNDLE_NAMESPACE_LABEL: &str = "certgen.dev/namespace";
/// The label on each ClusterTrustBundle certgen writes: the Secret it publishes (its name, or
/// a digest of a name too long for a label value).
pub const BUNDLE_FROM_LABEL: &str = "certgen.dev/bundle-from";

/// The labels that say which installation of certgen a ClusterTrustBundle belongs to (the
/// Secret it publishes): two installations with one signer never take each other's bundles
/// for their own.
pub fn bundle_owner(namespace: &str, secret: &str) -> [(String, String); 2] {
    let secret = if secret.len() <= 63 {
        secret.to_string()
    } else {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(secret.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{hex}", &secret[..46])
    };
    [
        (BUNDLE_NAMESPACE_LABEL.to_string(), namespace.to_string()),
        (BUNDLE_FROM_LABEL.to_string(), secret),
    ]
}

/// A validated ClusterTrustBundle target: the CA bundle of the managed TLS Secret
/// `bundle_from`, published as one bundle per CA linked to `signer` (`crate::trust_bundles`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustBundle {
    pub signer: String,
    pub bundle_from: String,
    /// The data key of that Secret's bundle (its layout's).
    pub bundle_key: String,
    /// Labels on every bundle, beside certgen's own: the configured ones and the installation's
    /// ([`bundle_owner`]); a bundle of the signer without all of them is another writer's.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// The resolved, validated configuration the engine runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub profile: String,
    pub namespace: String,
    pub cluster_domain: String,
    pub ca: Ca,
    pub tls: Vec<TlsSecret>,
    pub hmac: Vec<HmacSecret>,
    pub consumers: Vec<Consumer>,
    /// Labels for every Secret certgen writes, besides [`MANAGED_BY_LABEL`] (which is always set).
    pub labels: std::collections::BTreeMap<String, String>,
    /// `caBundle` targets (none after `--disable-topology-injector` removed the injector's).
    pub webhooks: Vec<Webhook>,
    /// ClusterTrustBundle targets (`clusterTrustBundles:`, `--cluster-trust-bundle`).
    pub trust_bundles: Vec<TrustBundle>,
    /// The members of a set the file lists (`clusters:`); empty without that list.
    pub clusters: Vec<Cluster>,
    /// What `{cluster}` became, when the run knows the cluster's name.
    pub cluster_name: Option<String>,
    /// What this configuration was resolved from (`None` when built in code).
    origin: Option<std::sync::Arc<Origin>>,
    /// When routine rotations may start (`renewal:`, `--renewal-window`): none, any time.
    pub renewal: crate::window::Windows,
}

impl Config {
    /// Loads the source, applies `flag > env > file > default`, validates and renders templates.
    pub fn resolve(source: &Source, overrides: &Overrides, env: &Env) -> Result<Self, ConfigError> {
        Self::resolve_for(source, overrides, env, None, true)
    }

    /// [`Config::resolve`] for the cluster reached by `context` (`--context`): when the file
    /// lists `clusters:`, that member's namespace and name (a context it does not list is
    /// refused). Without a context, a file with `clusters:` resolves for its first member
    /// (a set's run resolves each member with [`Config::member`]), unless `local`.
    pub fn resolve_for(
        source: &Source,
        overrides: &Overrides,
        env: &Env,
        context: Option<&str>,
        local: bool,
    ) -> Result<Self, ConfigError> {
        let (name, file) = match source {
            Source::Profile(p) => {
                let json = profiles::builtin_json(p).ok_or_else(|| {
                    ConfigError::new(
                        "--profile",
                        format!(
                            "unknown profile {p:?}; built-in profiles: {} (or pass --config FILE)",
                            profiles::NAMES.join(", ")
                        ),
                    )
                })?;
                (format!("profile {p}"), ConfigFile::parse_json(json))
            }
            Source::File(path) => (
                path.display().to_string(),
                ConfigFile::parse(&read_config_file(path)?),
            ),
        };
        let file = file.map_err(|m| ConfigError::new(&name, m))?;
        let mut config = Self::from_file_for(file.clone(), overrides, env, context, local)
            .map_err(|m| ConfigError::new(&name, m))?;
        config.origin = Some(std::sync::Arc::new(Origin {
            source_name: name,
            file,
            overrides: overrides.clone(),
            env: env.clone(),
            injector_disabled: false,
            injector_named: None,
            trust_signers: Vec::new(),
        }));
        Ok(config)
    }

    /// The configuration of the set's member reached by `context`: the same file resolved with
    /// that member's `namespace` and `name` from `clusters:` (a context the list does not name
    /// gets the file's namespace and no cluster name), and the same command-line edits. Errors
    /// name the member. A configuration built in code is every member's.
    pub fn member(&self, context: &str) -> Result<Config, ConfigError> {
        let Some(origin) = &self.origin else {
            return Ok(self.clone());
        };
        let err =
            |m: String| ConfigError::new(&origin.source_name, format!("member {context}: {m}"));
        if origin.overrides.cluster_name.is_some() {
            return Err(err("--cluster-name names the one cluster of a run in one cluster; in a set, each member's name comes from the config's clusters: list (name: under its context)".into()));
        }
        let mut config = Self::from_file_for(
            origin.file.clone(),
            &origin.overrides,
            &origin.env,
            Some(context),
            false,
        )
        .map_err(err)?;
        config.origin = Some(origin.clone());
        if origin.injector_disabled {
            config.disable_topology_injector();
        }
        if let Some(name) = &origin.injector_named {
            config.name_topology_injector(name)?;
        }
        for signer in &origin.trust_signers {
            config.add_trust_bundle(signer)?;
        }
        Ok(config)
    }

    /// For a command that works in one cluster (the exporter, the hand-over): refuses a set,
    /// whether named by several `--context` or by the file's `clusters:` without one, rather
    /// than run with the first member's values.
    pub fn one_cluster(&self, flags: &[String], command: &str) -> Result<(), ConfigError> {
        match self.set_contexts(flags, false)? {
            None => Ok(()),
            Some(contexts) => Err(ConfigError::new(
                "--context",
                format!(
                    "{command} works in one cluster, and this names a set ({}): pass the --context of one member, or --cluster-name NAME in a cluster without a kubeconfig context",
                    contexts.join(", ")
                ),
            )),
        }
    }

    /// The contexts of a set to run over, given the `--context` flags: `None` for a run in one
    /// cluster. Without `clusters:` in the file, several flags are a set. With it, no flag
    /// runs over the list, one flag runs in that member alone, and several must name exactly
    /// the listed contexts.
    pub fn set_contexts(
        &self,
        flags: &[String],
        local: bool,
    ) -> Result<Option<Vec<String>>, ConfigError> {
        let listed: Vec<String> = self.clusters.iter().map(|c| c.context.clone()).collect();
        let source_name = self
            .origin
            .as_ref()
            .map_or("--context", |o| o.source_name.as_str());
        if listed.is_empty() || local {
            return Ok((flags.len() > 1).then(|| flags.to_vec()));
        }
        match flags {
            [] => Ok(Some(listed)),
            [_] => Ok(None),
            _ => {
                let mut given = flags.to_vec();
                given.sort();
                given.dedup();
                let mut want = listed.clone();
                want.sort();
                if given == want {
                    Ok(Some(flags.to_vec()))
                } else {
                    let missing: Vec<&str> = want
                        .iter()
                        .filter(|c| !given.contains(c))
                        .map(String::as_str)
                        .collect();
                    let extra: Vec<&str> = given
                        .iter()
                        .filter(|c| !want.contains(c))
                        .map(String::as_str)
                        .collect();
                    let mut why = Vec::new();
                    if !missing.is_empty() {
                        why.push(format!("leave out {}", missing.join(", ")));
                    }
                    if !extra.is_empty() {
                        why.push(format!(
                            "add {}, which the list does not name",
                            extra.join(", ")
                        ));
                    }
                    Err(ConfigError::new(
                        source_name,
                        format!(
                            "the --context flags ({}) do not match the config's clusters: list ({}): they {}; give no --context to run over the list, name every listed context, or edit clusters: (a new member also needs --add-member)",
                            flags.join(", "),
                            listed.join(", "),
                            why.join(" and ")
                        ),
                    ))
                }
            }
        }
    }

    /// A configuration built in code (`certgen create`'s renewal), validated like a file;
    /// errors name `source_name`.
    pub fn from_built(file: ConfigFile, source_name: &str) -> Result<Self, ConfigError> {
        Self::from_file(file, &Overrides::default(), &Env::default())
            .map_err(|m| ConfigError::new(source_name, m))
    }

    fn from_file(file: ConfigFile, overrides: &Overrides, env: &Env) -> Result<Self, String> {
        Self::from_file_for(file, overrides, env, None, true)
    }

    fn from_file_for(
        file: ConfigFile,
        overrides: &Overrides,
        env: &Env,
        context: Option<&str>,
        local: bool,
    ) -> Result<Self, String> {
        let clusters = validate::clusters(&file.clusters)?;
        let member = member_of(
            &clusters,
            context,
            local || overrides.cluster_name.is_some(),
        )?;
        let namespace = match (&overrides.namespace, &env.certgen_namespace) {
            (Some(n), _) | (None, Some(n)) => n.clone(),
            // Envoy Gateway's variable names Envoy Gateway's namespace: it applies to the
            // envoy-gateway config only, never to another control plane's run in the same pod.
            (None, None) => match env
                .envoy_gateway_namespace
                .as_deref()
                .filter(|_| file.name == ENVOY_GATEWAY)
            {
                // Envoy Gateway would write Secrets with an empty namespace (and fail); falling
                // back to the profile's namespace would write somewhere nobody asked for.
                Some("") => {
                    return Err("ENVOY_GATEWAY_NAMESPACE is set but empty; set it to the namespace of the Secrets (Envoy Gateway's chart sets it from metadata.namespace), unset it to use the profile's namespace, or pass -n/--namespace".into());
                }
                Some(n) => n.to_string(),
                None => member
                    .and_then(|m| m.namespace.clone())
                    .unwrap_or_else(|| file.namespace.clone()),
            },
        };
        validate::dns1123_label(&namespace).map_err(|e| format!("namespace {namespace:?}: {e}"))?;
        let cluster_domain = overrides
            .cluster_domain
            .clone()
            .or_else(|| env.cluster_domain.clone())
            .or(file.cluster_domain.clone())
            .unwrap_or_else(|| "cluster.local".to_string());
        validate::dns_name(&cluster_domain, false)
            .map_err(|e| format!("clusterDomain {cluster_domain:?}: {e}"))?;
        validate::dns1123_subdomain(&file.name)
            .map_err(|e| format!("name {:?}: {e}", file.name))?;
        let cluster_name = match (&overrides.cluster_name, member) {
            (Some(n), _) => {
                validate::dns1123_label(n).map_err(|e| format!("--cluster-name {n:?}: {e}"))?;
                Some(n.clone())
            }
            (None, Some(m)) => m.name.clone(),
            (None, None) => None,
        };
        let unnamed = unnamed(member, context);
        let names = Names {
            namespace: &namespace,
            cluster_domain: &cluster_domain,
            cluster: cluster_name.as_deref().ok_or(unnamed.as_str()),
        };

        let ca = validate::ca(&file)?;
        let (tls, hmac) = secrets(&file, &names, &ca)?;
        let mut consumers: Vec<Consumer> = Vec::new();
        for (i, c) in file.consumers.iter().enumerate() {
            let field = format!("consumers[{i}]");
            if consumers.iter().any(|k| k.name == c.name) {
                return Err(format!("{field}.name {:?} is used twice", c.name));
            }
            consumers.push(validate::consumer(&field, c, &names, &tls, &hmac)?);
        }
        let labels = validate::labels(&file.labels)?;
        let (webhooks, trust_bundles) = targets(&file, &namespace, &tls)?;
        let renewal = validate::renewal(file.renewal.as_ref())?;
        Ok(Self {
            profile: file.name,
            namespace,
            cluster_domain,
            ca,
            tls,
            hmac,
            consumers,
            labels,
            webhooks,
            trust_bundles,
            clusters,
            cluster_name,
            origin: None,
            renewal,
        })
    }
}

/// The member of the config's `clusters:` list a run is in: the one `context` names (refused
/// when it is not listed), else the first; none when the list is empty, or when the run has
/// values of its own (`own`: one directory, or `--cluster-name`) and names no context.
fn member_of<'c>(
    clusters: &'c [Cluster],
    context: Option<&str>,
    own: bool,
) -> Result<Option<&'c Cluster>, String> {
    Ok(match (context, clusters.first()) {
        (_, None) => None,
        (Some(c), Some(_)) => Some(clusters.iter().find(|m| m.context == c).ok_or_else(|| {
            format!(
                "context {c:?} is not in the config's clusters: list ({}); name a listed context, or add it to clusters: (with its name)",
                clusters.iter().map(|m| m.context.as_str()).collect::<Vec<_>>().join(", ")
            )
        })?),
        // A run in one directory, or one that names its cluster: the file's own values.
        (None, Some(_)) if own => None,
        (None, Some(first)) => Some(first),
    })
}

/// Why `{cluster}` cannot be rendered when the run has no cluster name: what to name, where.
fn unnamed(member: Option<&Cluster>, context: Option<&str>) -> String {
    match (member, context) {
        (Some(m), _) => format!(
            "member {} has no name: give it one in the config's clusters: list (- context: {}, name: NAME; Cilium's cluster.name)",
            m.context, m.context
        ),
        (None, Some(c)) => format!(
            "the config names no cluster for context {c}: list it under clusters: with its name (- context: {c}, name: NAME; Cilium's cluster.name), or pass --cluster-name NAME for a run in this cluster alone"
        ),
        (None, None) => "this run names no cluster: pass --cluster-name NAME (Cilium's cluster.name), or run with --context and a config whose clusters: list names it".to_string(),
    }
}

/// The file's Secrets, validated, TLS and HMAC apart: each named once (the CA Secret counts
/// too), and at least one.
fn secrets(
    file: &ConfigFile,
    names: &Names<'_>,
    ca: &Ca,
) -> Result<(Vec<TlsSecret>, Vec<HmacSecret>), String> {
    let mut tls = Vec::new();
    let mut hmac = Vec::new();
    let mut seen = vec![ca.secret_name.clone()];
    for (i, s) in file.secrets.iter().enumerate() {
        let field = format!("secrets[{i}]");
        validate::dns1123_subdomain(&s.name)
            .map_err(|e| format!("{field}.name {:?}: {e}", s.name))?;
        if seen.contains(&s.name) {
            return Err(format!(
                "{field}.name {:?} is used twice (the CA Secret counts too); give each Secret its own name",
                s.name
            ));
        }
        seen.push(s.name.clone());
        match s.r#type {
            SecretType::Tls => tls.push(validate::tls(&field, s, names, ca)?),
            SecretType::Hmac => hmac.push(validate::hmac(&field, s)?),
        }
    }
    if tls.is_empty() && hmac.is_empty() {
        return Err("secrets: the list is empty; declare at least one Secret".into());
    }
    Ok((tls, hmac))
}

/// The file's `caBundle` targets and ClusterTrustBundles, validated against its TLS Secrets:
/// each target listed once, one entry per signer.
fn targets(
    file: &ConfigFile,
    namespace: &str,
    tls: &[TlsSecret],
) -> Result<(Vec<Webhook>, Vec<TrustBundle>), String> {
    let mut webhooks: Vec<Webhook> = Vec::new();
    for (i, w) in file.webhooks.iter().enumerate() {
        let field = format!("webhooks[{i}]");
        let hook = validate::webhook(&field, w, namespace, tls)?;
        if webhooks
            .iter()
            .any(|k| k.kind == hook.kind && k.name == hook.name)
        {
            return Err(format!(
                "{field}: {:?} {} is listed twice",
                hook.kind, hook.name
            ));
        }
        webhooks.push(hook);
    }
    let mut trust_bundles: Vec<TrustBundle> = Vec::new();
    for (i, b) in file.cluster_trust_bundles.iter().enumerate() {
        let field = format!("clusterTrustBundles[{i}]");
        let bundle = validate::trust_bundle(&field, b, namespace, tls)?;
        if trust_bundles.iter().any(|k| k.signer == bundle.signer) {
            return Err(format!(
                "{field}.signerName {:?} is listed twice; one entry per signer",
                bundle.signer
            ));
        }
        trust_bundles.push(bundle);
    }
    Ok((webhooks, trust_bundles))
}

impl Config {
    /// `--disable-topology-injector` (Envoy Gateway's meaning): leave the topology injector
    /// MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` alone. Returns
    /// whether the config had it.
    pub fn disable_topology_injector(&mut self) -> bool {
        let injector = format!("{TOPOLOGY_INJECTOR_PREFIX}.{}", self.namespace);
        let before = self.webhooks.len();
        if let Some(origin) = &mut self.origin {
            std::sync::Arc::make_mut(origin).injector_disabled = true;
        }
        self.webhooks.retain(|w| {
            !(w.kind == WebhookKind::MutatingWebhookConfiguration && w.name == injector)
        });
        self.webhooks.len() != before
    }

    /// `--cluster-trust-bundle SIGNER`: publish the first TLS Secret's CA bundle as
    /// ClusterTrustBundles linked to `signer`, unless the config already lists that signer
    /// (then its entry stands). Kept for every member of a set.
    pub fn add_trust_bundle(&mut self, signer: &str) -> Result<(), ConfigError> {
        let source = self.origin.as_ref().map_or_else(
            || "--cluster-trust-bundle".to_string(),
            |o| o.source_name.clone(),
        );
        if self.trust_bundles.iter().any(|b| b.signer == signer) {
            return Ok(());
        }
        validate::signer_name(signer).map_err(|e| {
            ConfigError::new(&source, format!("--cluster-trust-bundle {signer:?}: {e}"))
        })?;
        let Some(first) = self.tls.first() else {
            return Err(ConfigError::new(
                &source,
                "--cluster-trust-bundle: this config has no TLS Secret whose CA bundle it could publish",
            ));
        };
        self.trust_bundles.push(TrustBundle {
            signer: signer.to_string(),
            bundle_from: first.name.clone(),
            bundle_key: first.layout.bundle.clone(),
            labels: bundle_owner(&self.namespace, &first.name)
                .into_iter()
                .collect(),
        });
        if let Some(origin) = &mut self.origin {
            let origin = std::sync::Arc::make_mut(origin);
            if !origin.trust_signers.iter().any(|s| s == signer) {
                origin.trust_signers.push(signer.to_string());
            }
        }
        Ok(())
    }

    /// `--topology-injector NAME`: the topology injector MutatingWebhookConfiguration is
    /// `name` (a Kustomize-renamed `envoy-gateway-topology-injector.<namespace>`).
    pub fn name_topology_injector(&mut self, name: &str) -> Result<(), ConfigError> {
        let injector = format!("{TOPOLOGY_INJECTOR_PREFIX}.{}", self.namespace);
        let target = self
            .webhooks
            .iter_mut()
            .find(|w| w.kind == WebhookKind::MutatingWebhookConfiguration && w.name == injector);
        match (target, validate::dns1123_subdomain(name)) {
            (Some(w), Ok(())) => {
                w.name = name.to_string();
                if let Some(origin) = &mut self.origin {
                    std::sync::Arc::make_mut(origin).injector_named = Some(name.to_string());
                }
                Ok(())
            }
            (Some(_), Err(why)) => Err(ConfigError {
                source_name: "--topology-injector".into(),
                message: format!("{name:?} is not a valid object name: it {why}"),
            }),
            (None, _) => Err(ConfigError {
                source_name: "--topology-injector".into(),
                message: format!(
                    "profile {} declares no topology injector ({injector}) to rename",
                    self.profile
                ),
            }),
        }
    }

    /// Every Secret name the config manages (the CA Secret first).
    pub fn secret_names(&self) -> Vec<&str> {
        std::iter::once(self.ca.secret_name.as_str())
            .chain(self.tls.iter().map(|t| t.name.as_str()))
            .chain(self.hmac.iter().map(|h| h.name.as_str()))
            .collect()
    }

    /// The data keys that hold private material, by the Secrets' layouts (not by how a name
    /// ends): the CA Secret's keys, each TLS Secret's key (`tls.key`, or kube-webhook-certgen's
    /// `key`), each HMAC Secret's key. A local directory keeps their files 0600.
    pub fn private_data_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = vec![self.ca.layout.key.clone(), "next.key".into()];
        keys.extend(self.tls.iter().map(|t| t.layout.key.clone()));
        keys.extend(self.hmac.iter().map(|h| h.key.clone()));
        keys.sort();
        keys.dedup();
        keys
    }
}

/// The most a config file may hold.
pub const MAX_CONFIG: u64 = 4 << 20;

fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    let name = path.display().to_string();
    read_bounded(path, MAX_CONFIG).map_err(|m| ConfigError::new(&name, m))
}

/// Reads the config file at `path`: a regular file of at most `limit` bytes, refused at once
/// otherwise (a device such as `/dev/zero` or a FIFO is never read from, and a file growing
/// while read is cut at the bound), and UTF-8 text.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| {
        format!("cannot read the config file: {e}; check the path given to --config")
    };
    let not_regular = || {
        "the config file is not a regular file (a directory, device, FIFO or socket); pass the path of a YAML file to --config"
            .to_string()
    };
    // What stands there first (a socket cannot even be opened), then the open file again.
    if !std::fs::metadata(path).map_err(cannot)?.is_file() {
        return Err(not_regular());
    }
    // Non-blocking, so that opening a FIFO put there meanwhile does not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let too_big = || {
        format!(
            "the config file is larger than {} MiB; is this the right file?",
            limit >> 20
        )
    };
    if meta.len() > limit {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| "the config file is not UTF-8 text".to_string())
}

/// Renders `{namespace}`, `{clusterDomain}` and `{cluster}` in a name or SAN template.
pub fn render(template: &str, names: &Names<'_>) -> Result<String, String> {
    let mut out = template
        .replace("{namespace}", names.namespace)
        .replace("{clusterDomain}", names.cluster_domain);
    if out.contains("{cluster}") {
        match names.cluster {
            Ok(cluster) => out = out.replace("{cluster}", cluster),
            Err(why) => return Err(format!("{template:?} uses {{cluster}}, but {why}")),
        }
    }
    if let Some(start) = out.find('{') {
        let rest = &out[start..];
        let end = rest.find('}').map_or(rest.len(), |e| e + 1);
        return Err(format!(
            "unknown placeholder {}; the placeholders are {{namespace}}, {{clusterDomain}} and {{cluster}}",
            &rest[..end]
        ));
    }
    Ok(out)
}

/// Parses an IP address SAN.
pub(crate) fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not an IPv4 or IPv6 address"))
}

/// The key algorithm a Secret uses when it does not name one: the CA's.
pub(crate) fn default_key(ca: &Ca, given: Option<KeyAlgorithm>) -> KeyAlgorithm {
    given.unwrap_or(ca.spec.key_algorithm)
}

/// Leaf usages from the config list.
pub(crate) fn usages(list: &[Usage]) -> Usages {
    Usages {
        server: list.contains(&Usage::Server),
        client: list.contains(&Usage::Client),
    }
}

/// The unit tests' config: the built-in envoy-gateway profile, in `namespace` when given.
#[cfg(test)]
pub(crate) fn test_profile(namespace: Option<&str>) -> Config {
    Config::resolve(
        &Source::Profile("envoy-gateway".into()),
        &Overrides {
            namespace: namespace.map(str::to_string),
            ..Overrides::default()
        },
        &Env::default(),
    )
    .unwrap()
}

#[cfg(test)]
mod tests;
