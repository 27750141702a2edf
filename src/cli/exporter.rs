//! `certgen exporter`'s options (clap only).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::{OutputFormat, SecretsArgs, TargetArgs, WindowArgs};

/// `certgen exporter`
#[derive(Debug, Args)]
pub struct ExporterArgs {
    #[command(flatten)]
    pub secrets: SecretsArgs,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Do not watch Envoy Gateway's topology injector webhook (its caBundle metrics).
    #[arg(long)]
    pub disable_topology_injector: bool,
    /// The topology injector's MutatingWebhookConfiguration when Kustomize renamed it.
    /// Without it, a renamed one is found as a run finds it: the one labelled
    /// app.kubernetes.io/component=topology-injector whose webhook's Service is in the
    /// namespace (when this identity may list and watch mutatingwebhookconfigurations).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "disable_topology_injector"
    )]
    pub topology_injector: Option<String>,
    /// Watch the ClusterTrustBundles certgen publishes for SIGNER (as `run
    /// --cluster-trust-bundle`). Repeatable.
    #[arg(long, value_name = "SIGNER")]
    pub cluster_trust_bundle: Vec<String>,
    /// Address to serve /metrics, /healthz and /readyz on.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9090")]
    pub listen: SocketAddr,
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl ExporterArgs {
    /// The same target as `certgen check` with these options (always a cluster).
    pub fn target(&self) -> TargetArgs {
        TargetArgs {
            secrets: SecretsArgs {
                profile: self.secrets.profile.clone(),
                config: self.secrets.config.clone(),
                namespace: self.secrets.namespace.clone(),
                cluster_domain: self.secrets.cluster_domain.clone(),
                cluster_name: self.secrets.cluster_name.clone(),
            },
            window: self.window.clone(),
            local: None,
            config_home: None,
            disable_topology_injector: self.disable_topology_injector,
            topology_injector: self.topology_injector.clone(),
            cluster_trust_bundle: self.cluster_trust_bundle.clone(),
            output: OutputFormat::Prometheus,
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone().into_iter().collect(),
        }
    }
}
