//! Command-line definitions of `certgen create` and `certgen patch`, the drop-in for
//! kube-webhook-certgen (jkroepke/kube-webhook-certgen and the retired ingress-nginx copy):
//! every flag of both, spelled as they spell them, and nothing else. No IO and no validation
//! here beyond what clap does: `src/cli/resolve.rs` converts them into [`crate::kwc::CreateFlags`]
//! and [`crate::kwc::PatchFlags`], and [`crate::kwc`] validates and says which flag is wrong.

use std::path::PathBuf;

use clap::{ArgAction, Args, ValueEnum};

/// A boolean flag written as kube-webhook-certgen's (cobra's) are: `--flag` alone is true,
/// `--flag=false` turns it off.
fn cobra_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (true or false)")),
    }
}

/// kube-webhook-certgen's log levels (both copies' spellings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KwcLogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
    Fatal,
    Panic,
}

/// Options both commands share (kube-webhook-certgen's persistent flags).
#[derive(Debug, Args)]
pub struct KwcCommon {
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Log level on standard error (kube-webhook-certgen's spelling; -v and -q work too).
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub log_level: Option<KwcLogLevel>,
    /// Print what would be done; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `certgen create`: kube-webhook-certgen's `create`.
#[derive(Debug, Args)]
pub struct KwcCreateArgs {
    /// Comma-separated host names and IP addresses the serving certificate is valid for
    /// (required).
    #[arg(long, value_name = "HOSTS")]
    pub host: Option<String>,
    /// Name of the Secret to create (required).
    #[arg(long, value_name = "NAME")]
    pub secret_name: Option<String>,
    /// Namespace of the Secret (required).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Type of the Secret.
    #[arg(long, value_name = "TYPE", default_value = "Opaque")]
    pub secret_type: String,
    /// Key of the CA certificate in the Secret.
    #[arg(long, value_name = "KEY", default_value = "ca")]
    pub ca_name: String,
    /// Key of the serving certificate in the Secret.
    #[arg(long, value_name = "KEY", default_value = "cert")]
    pub cert_name: String,
    /// Key of the serving certificate's private key in the Secret.
    #[arg(long, value_name = "KEY", default_value = "key")]
    pub key_name: String,
    /// Validity of the CA and the serving certificate (certgen's addition) [default: 36500d,
    /// kube-webhook-certgen's 100 years]. With a caBundle target, an existing Secret whose
    /// certificates last longer (kube-webhook-certgen's 100 years) is rotated to certificates
    /// of this validity, staged, once.
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration,
          help_heading = "certgen's additions: renewal")]
    pub validity: Option<std::time::Duration>,
    /// Renew the CA and the serving certificate this long before they expire (certgen's
    /// addition) [default: a third of --validity]. An existing Secret that is due is renewed
    /// only with a caBundle target (--webhook-name or --apiservice-name), through a staged
    /// rotation; without one it is kept, with a warning.
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration,
          help_heading = "certgen's additions: renewal")]
    pub renew_before: Option<std::time::Duration>,
    /// The ValidatingWebhookConfiguration and MutatingWebhookConfiguration whose caBundle
    /// follows the Secret's CA through a renewal, as `patch` names them (certgen's addition).
    #[arg(
        long,
        value_name = "NAME",
        help_heading = "certgen's additions: renewal"
    )]
    pub webhook_name: Option<String>,
    /// An APIService whose caBundle follows the Secret's CA through a renewal (certgen's
    /// addition).
    #[arg(
        long = "apiservice-name",
        value_name = "NAME",
        help_heading = "certgen's additions: renewal"
    )]
    pub apiservice_name: Option<String>,
    /// With --webhook-name: the ValidatingWebhookConfiguration follows
    /// (`--patch-validating=false`: leave it alone).
    #[arg(long, value_name = "BOOL", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", require_equals = true, value_parser = cobra_bool,
          action = ArgAction::Set, help_heading = "certgen's additions: renewal")]
    pub patch_validating: bool,
    /// With --webhook-name: the MutatingWebhookConfiguration follows
    /// (`--patch-mutating=false`: leave it alone).
    #[arg(long, value_name = "BOOL", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", require_equals = true, value_parser = cobra_bool,
          action = ArgAction::Set, help_heading = "certgen's additions: renewal")]
    pub patch_mutating: bool,
    /// The Secret holding certgen's CA and its key, created when a renewal starts (certgen's
    /// addition) [default: the --secret-name with -ca appended].
    #[arg(
        long,
        value_name = "NAME",
        help_heading = "certgen's additions: renewal"
    )]
    pub ca_secret_name: Option<String>,
    /// How long the webhook and the API server get to load each step of a renewal before the
    /// next relies on it (certgen's addition) [default: 2m].
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration,
          help_heading = "certgen's additions: renewal")]
    pub propagation_delay: Option<std::time::Duration>,
    /// Bound on a renewal's waiting (certgen's addition); on timeout the run exits 3 with
    /// every step so far safe, and the next `create` resumes [default: 5m].
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration,
          help_heading = "certgen's additions: renewal")]
    pub timeout: Option<std::time::Duration>,
    /// Print, as YAML, the config certgen renews this Secret with (its layout, certgen's CA
    /// Secret, the renewal windows and the caBundle targets above) and exit, reading and
    /// writing nothing (certgen's addition). Give it to `certgen check --config`, the
    /// exporter or the metrics to monitor what `create` manages with the same windows.
    #[arg(long, help_heading = "certgen's additions: renewal")]
    pub print_config: bool,
    #[command(flatten)]
    pub common: KwcCommon,
}

/// `certgen patch`: kube-webhook-certgen's `patch`.
#[derive(Debug, Args)]
pub struct KwcPatchArgs {
    /// Name of the Secret holding the CA (required).
    #[arg(long, value_name = "NAME")]
    pub secret_name: Option<String>,
    /// Namespace of the Secret (required).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// The Secret must be of this type (checked; unset: any type).
    #[arg(long, value_name = "TYPE")]
    pub secret_type: Option<String>,
    /// Key of the CA certificate in the Secret (`ca` is read when this key is absent).
    #[arg(long, value_name = "KEY", default_value = "ca")]
    pub ca_name: String,
    /// Name of the ValidatingWebhookConfiguration and MutatingWebhookConfiguration to patch.
    #[arg(long, value_name = "NAME")]
    pub webhook_name: Option<String>,
    /// Name of an APIService to patch.
    #[arg(long = "apiservice-name", value_name = "NAME")]
    pub apiservice_name: Option<String>,
    /// Patch the ValidatingWebhookConfiguration (`--patch-validating=false`: leave it alone).
    #[arg(long, value_name = "BOOL", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", require_equals = true, value_parser = cobra_bool,
          action = ArgAction::Set)]
    pub patch_validating: bool,
    /// Patch the MutatingWebhookConfiguration (`--patch-mutating=false`: leave it alone).
    #[arg(long, value_name = "BOOL", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", require_equals = true, value_parser = cobra_bool,
          action = ArgAction::Set)]
    pub patch_mutating: bool,
    /// Also set every webhook's failurePolicy: Ignore or Fail.
    #[arg(long, value_name = "POLICY")]
    pub patch_failure_policy: Option<String>,
    /// How webhook configurations are written: update (read, then a full update fenced by
    /// resourceVersion) or patch (server-side apply of the caBundle fields).
    #[arg(long, value_name = "MODE", default_value = "update")]
    pub patch_mode: String,
    /// How long a webhook may take to serve a replaced Secret's certificate: until then the
    /// caBundle keeps the prior CA beside the Secret's (certgen's addition) [default: 2m].
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    pub propagation_delay: Option<std::time::Duration>,
    #[command(flatten)]
    pub common: KwcCommon,
}
