//! The command line's arguments as the plain values the rest of certgen takes: `config`
//! (what to run on, how), `kwc` (`create` and `patch`'s flags) and the Kubernetes adapter
//! (which cluster) never see clap's types.

use std::path::Path;

use super::{RunArgs, StrategyArg, TargetArgs};
use crate::config::{RunOptions, Strategy, TargetSpec, propagation_delay};

impl TargetArgs {
    /// Where the configuration and the Secrets are, as asked.
    pub fn spec(&self) -> TargetSpec {
        TargetSpec {
            profile: self.secrets.profile.clone(),
            config: self.secrets.config.clone(),
            namespace: self.secrets.namespace.clone(),
            cluster_domain: self.secrets.cluster_domain.clone(),
            cluster_name: self.secrets.cluster_name.clone(),
            context: self.context.first().cloned(),
            local: self.local.clone(),
            config_home: self.config_home.clone(),
            disable_topology_injector: self.disable_topology_injector,
            topology_injector: self.topology_injector.clone(),
            cluster_trust_bundles: self.cluster_trust_bundle.clone(),
            renewal_windows: self.window.renewal_window.clone(),
            renewal_window_margin: self.window.renewal_window_margin,
        }
    }

    /// The kubeconfig file and context asked for (`--kubeconfig`, `--context`; the first, when
    /// several name a set of clusters).
    pub fn cluster(&self) -> (Option<&Path>, Option<String>) {
        (self.kubeconfig.as_deref(), self.context.first().cloned())
    }
}

impl RunArgs {
    /// The options asked for, for a run in a local directory (`local`) or in a cluster.
    pub fn options(&self, local: bool) -> RunOptions {
        RunOptions {
            overwrite: self.overwrite,
            rotate_hmac: self.rotate_hmac,
            force: self.force,
            strategy: match self.strategy {
                StrategyArg::Staged => Strategy::Staged,
                StrategyArg::Immediate => Strategy::Immediate,
            },
            propagation_delay: propagation_delay(self.propagation_delay, local),
            dry_run: self.dry_run,
            wait: self.wait,
            probe: self.probe,
            poke: !self.no_poke,
            poke_rate: self.poke_rate.and_then(std::num::NonZeroU32::new),
            timeout: self.timeout,
            overwrite_why: crate::config::OverwriteWhy::Asked,
            set_member: None,
            respect_window: self.respect_window,
        }
    }
}

impl super::kwc::KwcCreateArgs {
    /// `certgen create`'s flags, for [`crate::kwc::CreateRequest::from_flags`] to validate.
    pub fn flags(&self) -> crate::kwc::CreateFlags {
        crate::kwc::CreateFlags {
            host: self.host.clone(),
            secret_name: self.secret_name.clone(),
            namespace: self.namespace.clone(),
            secret_type: self.secret_type.clone(),
            ca_name: self.ca_name.clone(),
            cert_name: self.cert_name.clone(),
            key_name: self.key_name.clone(),
            validity: self.validity,
            renew_before: self.renew_before,
            webhook_name: self.webhook_name.clone(),
            apiservice_name: self.apiservice_name.clone(),
            patch_validating: self.patch_validating,
            patch_mutating: self.patch_mutating,
            ca_secret_name: self.ca_secret_name.clone(),
            propagation_delay: self.propagation_delay,
            timeout: self.timeout,
        }
    }
}

impl super::kwc::KwcPatchArgs {
    /// `certgen patch`'s flags, for [`crate::kwc::PatchRequest::from_flags`] to validate.
    pub fn flags(&self) -> crate::kwc::PatchFlags {
        crate::kwc::PatchFlags {
            secret_name: self.secret_name.clone(),
            namespace: self.namespace.clone(),
            secret_type: self.secret_type.clone(),
            ca_name: self.ca_name.clone(),
            webhook_name: self.webhook_name.clone(),
            apiservice_name: self.apiservice_name.clone(),
            patch_validating: self.patch_validating,
            patch_mutating: self.patch_mutating,
            patch_failure_policy: self.patch_failure_policy.clone(),
            patch_mode: self.patch_mode.clone(),
            propagation_delay: self.propagation_delay,
        }
    }
}

/// The tracing level of kube-webhook-certgen's `--log-level` (`fatal` and `panic` log errors).
pub fn kwc_log_level(level: Option<super::kwc::KwcLogLevel>) -> &'static str {
    use super::kwc::KwcLogLevel as L;
    match level {
        Some(L::Trace) => "trace",
        Some(L::Debug) => "debug",
        None | Some(L::Info) => "info",
        Some(L::Warn) => "warn",
        Some(L::Error | L::Fatal | L::Panic) => "error",
    }
}
