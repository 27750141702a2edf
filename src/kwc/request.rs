//! Validated requests of `certgen create` and `certgen patch`, from their flags as plain
//! values ([`CreateFlags`], [`PatchFlags`]: the command line converts clap's arguments into
//! them, `src/cli/resolve.rs`), before any request to the cluster. Every error names the flag
//! and says how to fix it (exit 2).

use std::net::IpAddr;
use std::time::Duration;

use crate::config::{ConfigError, WebhookKind};

/// `certgen create`'s flags, as given (kube-webhook-certgen's, and certgen's renewal ones).
#[derive(Debug, Clone, Default)]
pub struct CreateFlags {
    pub host: Option<String>,
    pub secret_name: Option<String>,
    pub namespace: Option<String>,
    pub secret_type: String,
    pub ca_name: String,
    pub cert_name: String,
    pub key_name: String,
    pub validity: Option<Duration>,
    pub renew_before: Option<Duration>,
    pub webhook_name: Option<String>,
    pub apiservice_name: Option<String>,
    pub patch_validating: bool,
    pub patch_mutating: bool,
    pub ca_secret_name: Option<String>,
    pub propagation_delay: Option<Duration>,
    pub timeout: Option<Duration>,
}

/// `certgen patch`'s flags, as given.
#[derive(Debug, Clone, Default)]
pub struct PatchFlags {
    pub secret_name: Option<String>,
    pub namespace: Option<String>,
    pub secret_type: Option<String>,
    pub ca_name: String,
    pub webhook_name: Option<String>,
    pub apiservice_name: Option<String>,
    pub patch_validating: bool,
    pub patch_mutating: bool,
    pub patch_failure_policy: Option<String>,
    pub patch_mode: String,
    pub propagation_delay: Option<Duration>,
}

/// The keys of the Secret `create` writes and `patch` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl Keys {
    /// The three keys, in the order the Secret lists them.
    pub fn all(&self) -> [&str; 3] {
        [&self.ca, &self.cert, &self.key]
    }
}

/// A validated `create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    pub namespace: String,
    pub secret_name: String,
    /// The Secret's type (`Opaque` for an empty `--secret-type`).
    pub secret_type: String,
    pub keys: Keys,
    /// `--host`, in order, without repeats.
    pub hosts: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// certgen's additions: how long certificates last and when, and how, they are renewed.
    pub renewal: Renewal,
}

/// `create`'s renewal of an existing Secret (certgen's additions to kube-webhook-certgen's
/// flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// `--validity`: of the CA and the serving certificate.
    pub validity: std::time::Duration,
    /// `--renew-before`: a CA (and so its certificate) this close to expiry is due.
    pub renew_before: std::time::Duration,
    /// The `caBundle` targets that follow the Secret's CA: without one, nothing due is renewed.
    pub targets: Vec<Target>,
    /// `--ca-secret-name`: certgen's CA Secret, created when a renewal starts.
    pub ca_secret_name: String,
    /// `--propagation-delay`.
    pub propagation_delay: std::time::Duration,
    /// `--timeout`.
    pub timeout: std::time::Duration,
}

/// The shortest `--validity`: certgen's own bound for any certificate it issues.
pub const MIN_VALIDITY: std::time::Duration = std::time::Duration::from_secs(3_600);

/// A webhook configuration's failure policy (the `caBundle` seam's, which writes it).
pub use crate::outside::FailurePolicy;

/// How webhook configurations are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchMode {
    /// Read, then a full update fenced by the resourceVersion read (RBAC verb `update`).
    Update,
    /// Server-side apply of the `caBundle` (and `failurePolicy`) fields (RBAC verb `patch`).
    Patch,
}

/// An object whose `caBundle` `patch` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: WebhookKind,
    pub name: String,
    /// The flag that named it, for messages.
    pub flag: &'static str,
}

impl Target {
    /// `ValidatingWebhookConfiguration NAME`, for messages.
    pub fn describe(&self) -> String {
        crate::outside::describe_target(self.kind, &self.name)
    }
}

/// A validated `patch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchRequest {
    pub namespace: String,
    pub secret_name: String,
    /// The type the Secret must have, when `--secret-type` is given.
    pub secret_type: Option<String>,
    pub ca_name: String,
    /// In kube-webhook-certgen's order: the APIService, then validating, then mutating.
    pub targets: Vec<Target>,
    pub failure_policy: Option<FailurePolicy>,
    pub mode: PatchMode,
    /// How long after the Secret's last write the webhook may still serve a certificate from
    /// a CA the Secret no longer holds (the prior CA stays in the `caBundle` until then).
    pub propagation_delay: std::time::Duration,
}

fn bad(flag: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        source_name: flag.to_string(),
        message: message.into(),
    }
}

fn required(flag: &str, value: &Option<String>, what: &str) -> Result<String, ConfigError> {
    match value.as_deref() {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err(bad(
            flag,
            format!("is required: {what}; nothing was written"),
        )),
    }
}

/// A DNS-1123 label: a namespace.
fn check_label(flag: &str, value: &str) -> Result<(), ConfigError> {
    if crate::config::dns1123_label(value).is_ok() {
        Ok(())
    } else {
        Err(bad(
            flag,
            format!(
                "{value:?} is not a valid namespace (lower-case letters, digits and '-', at most 63)"
            ),
        ))
    }
}

/// A DNS-1123 subdomain: a Secret or a cluster-scoped object's name.
fn check_subdomain(flag: &str, value: &str) -> Result<(), ConfigError> {
    if crate::config::dns1123_subdomain(value).is_ok() {
        Ok(())
    } else {
        Err(bad(
            flag,
            format!(
                "{value:?} is not a valid object name (lower-case letters, digits, '-' and '.', at most 253)"
            ),
        ))
    }
}

/// A Secret data key, by the config's rule (Kubernetes' `IsConfigMapKey`, no leading `.`).
fn check_key(flag: &str, value: &str) -> Result<(), ConfigError> {
    match crate::config::data_key_problem(value) {
        None => Ok(()),
        Some(why) => Err(bad(
            flag,
            format!("{value:?} is not a valid Secret key: it {why}; nothing was written"),
        )),
    }
}

/// Secret types whose keys the API server prescribes: `create` cannot write its three keys
/// into them (except `kubernetes.io/tls` with `tls.crt` and `tls.key`).
const PRESCRIBED_TYPES: &[&str] = &[
    "kubernetes.io/service-account-token",
    "kubernetes.io/dockercfg",
    "kubernetes.io/dockerconfigjson",
    "kubernetes.io/basic-auth",
    "kubernetes.io/ssh-auth",
    "bootstrap.kubernetes.io/token",
];

impl CreateRequest {
    /// Validates `create`'s flags.
    pub fn from_flags(args: &CreateFlags) -> Result<Self, ConfigError> {
        let host = required(
            "--host",
            &args.host,
            "the comma-separated host names and IP addresses of the webhook's Service, e.g. --host=svc,svc.ns.svc",
        )?;
        let secret_name = required(
            "--secret-name",
            &args.secret_name,
            "the name of the Secret to create",
        )?;
        let namespace = required(
            "--namespace",
            &args.namespace,
            "the namespace of the Secret",
        )?;
        check_subdomain("--secret-name", &secret_name)?;
        check_label("--namespace", &namespace)?;
        check_key("--ca-name", &args.ca_name)?;
        check_key("--cert-name", &args.cert_name)?;
        check_key("--key-name", &args.key_name)?;
        let keys = Keys {
            ca: args.ca_name.clone(),
            cert: args.cert_name.clone(),
            key: args.key_name.clone(),
        };
        if keys.ca == keys.cert || keys.ca == keys.key || keys.cert == keys.key {
            return Err(bad(
                "--ca-name/--cert-name/--key-name",
                format!(
                    "must be three different keys (got {}, {}, {})",
                    keys.ca, keys.cert, keys.key
                ),
            ));
        }
        let secret_type = match args.secret_type.as_str() {
            "" => "Opaque".to_string(),
            t => t.to_string(),
        };
        if secret_type == "kubernetes.io/tls" && (keys.cert != "tls.crt" || keys.key != "tls.key") {
            return Err(bad(
                "--secret-type",
                "kubernetes.io/tls Secrets must hold tls.crt and tls.key: pass --cert-name=tls.crt --key-name=tls.key (and --ca-name=ca.crt if you like), or keep the default type Opaque",
            ));
        }
        if PRESCRIBED_TYPES.contains(&secret_type.as_str()) {
            return Err(bad(
                "--secret-type",
                format!(
                    "{secret_type} Secrets hold keys the API server prescribes, not a CA and a certificate: use Opaque (the default) or kubernetes.io/tls"
                ),
            ));
        }
        let mut hosts: Vec<String> = Vec::new();
        let mut dns_names = Vec::new();
        let mut ip_addresses = Vec::new();
        for h in host.split(',') {
            if h.is_empty() {
                return Err(bad(
                    "--host",
                    format!("{host:?} has an empty entry: separate names with single commas"),
                ));
            }
            if hosts.iter().any(|seen| seen == h) {
                continue;
            }
            // The config's rule for SANs: kube-webhook-certgen writes any string as a DNS
            // SAN, but one no verifier matches (`*`, `*.com`, `010.0.0.1`) is a certificate
            // that fails every handshake; refused here, before anything is written.
            if let Ok(ip) = h.parse::<IpAddr>() {
                ip_addresses.push(ip);
            } else if let Err(why) = crate::config::dns_san(h) {
                return Err(bad(
                    "--host",
                    format!(
                        "{h:?} is neither an IP address nor a DNS name a TLS client can match ({why}); nothing was written"
                    ),
                ));
            } else {
                dns_names.push(h.to_string());
            }
            hosts.push(h.to_string());
        }
        let renewal = Renewal::from_flags(args, &secret_name)?;
        Ok(Self {
            namespace,
            secret_name,
            secret_type,
            keys,
            hosts,
            dns_names,
            ip_addresses,
            renewal,
        })
    }
}

impl PatchRequest {
    /// Validates `patch`'s flags.
    pub fn from_flags(args: &PatchFlags) -> Result<Self, ConfigError> {
        let secret_name = required(
            "--secret-name",
            &args.secret_name,
            "the name of the Secret `create` wrote",
        )?;
        let namespace = required(
            "--namespace",
            &args.namespace,
            "the namespace of the Secret",
        )?;
        check_subdomain("--secret-name", &secret_name)?;
        check_label("--namespace", &namespace)?;
        check_key("--ca-name", &args.ca_name)?;
        let failure_policy = match args.patch_failure_policy.as_deref() {
            None | Some("") => None,
            Some("Ignore") => Some(FailurePolicy::Ignore),
            Some("Fail") => Some(FailurePolicy::Fail),
            Some(other) => {
                return Err(bad(
                    "--patch-failure-policy",
                    format!(
                        "{other:?} is not a failure policy: use Ignore or Fail, or leave it empty to keep each webhook's own; nothing was written"
                    ),
                ));
            }
        };
        let mode = match args.patch_mode.as_str() {
            "update" => PatchMode::Update,
            "patch" => PatchMode::Patch,
            other => {
                return Err(bad(
                    "--patch-mode",
                    format!("{other:?} is not a patch mode: use update or patch"),
                ));
            }
        };
        let targets = targets(
            args.webhook_name.as_deref(),
            args.apiservice_name.as_deref(),
            (args.patch_validating, args.patch_mutating),
        )?;
        if targets.is_empty() {
            return Err(bad(
                "--patch-validating/--patch-mutating",
                "both are false and no --apiservice-name is given: there is nothing to patch",
            ));
        }
        if failure_policy.is_some() && targets.iter().all(|t| t.kind == WebhookKind::ApiService) {
            return Err(bad(
                "--patch-failure-policy",
                "is given, but no webhook configuration is patched (--patch-validating=false --patch-mutating=false)",
            ));
        }
        Ok(Self {
            namespace,
            secret_name,
            secret_type: args.secret_type.clone().filter(|t| !t.is_empty()),
            ca_name: args.ca_name.clone(),
            targets,
            failure_policy,
            mode,
            propagation_delay: args
                .propagation_delay
                .unwrap_or(crate::config::CLUSTER_PROPAGATION_DELAY),
        })
    }
}

/// The objects named by `--webhook-name` (with `--patch-validating`/`--patch-mutating`) and
/// `--apiservice-name`, in kube-webhook-certgen's order: the APIService, then validating, then
/// mutating. Empty when neither name is given and both kinds are off.
fn targets(
    webhook: Option<&str>,
    apiservice: Option<&str>,
    (validating, mutating): (bool, bool),
) -> Result<Vec<Target>, ConfigError> {
    let webhook = webhook.filter(|n| !n.is_empty());
    let apiservice = apiservice.filter(|n| !n.is_empty());
    let mut targets = Vec::new();
    if let Some(name) = apiservice {
        check_subdomain("--apiservice-name", name)?;
        targets.push(Target {
            kind: WebhookKind::ApiService,
            name: name.to_string(),
            flag: "--apiservice-name",
        });
    }
    if validating || mutating {
        let Some(name) = webhook else {
            return Err(bad(
                "--webhook-name",
                "is required while --patch-validating or --patch-mutating is true (both default to true); pass --patch-validating=false --patch-mutating=false to patch only an APIService",
            ));
        };
        check_subdomain("--webhook-name", name)?;
        for (on, kind) in [
            (validating, WebhookKind::ValidatingWebhookConfiguration),
            (mutating, WebhookKind::MutatingWebhookConfiguration),
        ] {
            if on {
                targets.push(Target {
                    kind,
                    name: name.to_string(),
                    flag: "--webhook-name",
                });
            }
        }
    }
    Ok(targets)
}

impl Renewal {
    /// Validates `create`'s renewal flags (certgen's additions).
    fn from_flags(args: &CreateFlags, secret_name: &str) -> Result<Self, ConfigError> {
        let validity = args.validity.unwrap_or(super::VALIDITY);
        if !(MIN_VALIDITY..=super::VALIDITY).contains(&validity) {
            return Err(bad(
                "--validity",
                format!(
                    "{} is out of range: certificates last from 1h to 36500d (100 years, the default); nothing was written",
                    crate::timefmt::HumanDuration(validity)
                ),
            ));
        }
        let renew_before = args.renew_before.unwrap_or(validity / 3);
        if renew_before.is_zero() || renew_before >= validity {
            return Err(bad(
                "--renew-before",
                format!(
                    "{} must be above 0 and shorter than --validity ({}), or every run would renew; nothing was written",
                    crate::timefmt::HumanDuration(renew_before),
                    crate::timefmt::HumanDuration(validity)
                ),
            ));
        }
        // Without a name: no target, unless an APIService is named.
        let webhook = args.webhook_name.as_deref().filter(|n| !n.is_empty());
        let targets = if webhook.is_none() {
            targets(None, args.apiservice_name.as_deref(), (false, false))?
        } else if !args.patch_validating && !args.patch_mutating {
            return Err(bad(
                "--webhook-name",
                "is given, but --patch-validating=false and --patch-mutating=false leave nothing of it to follow; nothing was written",
            ));
        } else {
            targets(
                args.webhook_name.as_deref(),
                args.apiservice_name.as_deref(),
                (args.patch_validating, args.patch_mutating),
            )?
        };
        let ca_secret_name = match args.ca_secret_name.as_deref() {
            None | Some("") => {
                // Derived, and used only by a renewal, which needs a target: a --secret-name of
                // 251 to 253 characters is valid on its own and stays so without one.
                let derived = format!("{secret_name}-ca");
                if !targets.is_empty() && derived.len() > 253 {
                    return Err(bad(
                        "--ca-secret-name",
                        format!(
                            "is needed: the CA Secret's name derived from --secret-name ({derived:?}) is longer than 253 characters; pass a shorter --ca-secret-name; nothing was written"
                        ),
                    ));
                }
                derived
            }
            Some(name) => {
                check_subdomain("--ca-secret-name", name)?;
                name.to_string()
            }
        };
        if ca_secret_name == secret_name {
            return Err(bad(
                "--ca-secret-name",
                format!(
                    "{ca_secret_name:?} is the --secret-name: certgen's CA needs a Secret of its own"
                ),
            ));
        }
        Ok(Self {
            validity,
            renew_before,
            targets,
            ca_secret_name,
            propagation_delay: args
                .propagation_delay
                .unwrap_or(crate::config::CLUSTER_PROPAGATION_DELAY),
            timeout: args.timeout.unwrap_or(std::time::Duration::from_secs(300)),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn create(args: &[&str]) -> Result<CreateRequest, ConfigError> {
        let cli = Cli::try_parse_from([&["certgen", "create"], args].concat()).unwrap();
        let Some(Command::Create(a)) = cli.command else {
            panic!("not create")
        };
        CreateRequest::from_flags(&a.flags())
    }

    fn patch(args: &[&str]) -> Result<PatchRequest, ConfigError> {
        let cli = Cli::try_parse_from([&["certgen", "patch"], args].concat()).unwrap();
        let Some(Command::Patch(a)) = cli.command else {
            panic!("not patch")
        };
        PatchRequest::from_flags(&a.flags())
    }

    const BASE: [&str; 2] = ["--secret-name=s", "--namespace=ns"];

    #[test]
    fn create_defaults_are_kube_webhook_certgens() {
        let r = create(&[&BASE[..], &["--host=svc,svc.ns.svc,10.0.0.1,::1,svc"]].concat()).unwrap();
        assert_eq!(r.secret_type, "Opaque");
        assert_eq!(r.keys.all(), ["ca", "cert", "key"]);
        assert_eq!(r.dns_names, ["svc", "svc.ns.svc"]);
        assert_eq!(
            r.ip_addresses,
            [
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert_eq!(r.hosts.len(), 4);
    }

    #[test]
    fn create_refusals_name_the_flag() {
        let flag = |args: &[&str]| create(args).unwrap_err().source_name;
        assert_eq!(flag(&BASE), "--host");
        assert_eq!(flag(&["--host=a", "--namespace=ns"]), "--secret-name");
        assert_eq!(flag(&["--host=a", "--secret-name=s"]), "--namespace");
        assert_eq!(flag(&[&BASE[..], &["--host="]].concat()), "--host");
        assert_eq!(flag(&[&BASE[..], &["--host=a,,b"]].concat()), "--host");
        assert_eq!(flag(&[&BASE[..], &["--host=a b"]].concat()), "--host");
        assert_eq!(
            flag(&[&BASE[..], &["--host=a", "--secret-type=kubernetes.io/tls"]].concat()),
            "--secret-type"
        );
        assert_eq!(
            flag(
                &[
                    &BASE[..],
                    &["--host=a", "--secret-type=kubernetes.io/basic-auth"]
                ]
                .concat()
            ),
            "--secret-type"
        );
        assert_eq!(
            flag(&[&BASE[..], &["--host=a", "--cert-name=ca"]].concat()),
            "--ca-name/--cert-name/--key-name"
        );
        assert_eq!(
            flag(&[&BASE[..], &["--host=a", "--key-name=a/b"]].concat()),
            "--key-name"
        );
        assert_eq!(
            flag(&["--host=a", "--secret-name=s", "--namespace=NS"]),
            "--namespace"
        );
        // kubernetes.io/tls with its own keys is fine.
        let tls = create(
            &[
                &BASE[..],
                &[
                    "--host=a",
                    "--secret-type=kubernetes.io/tls",
                    "--cert-name=tls.crt",
                    "--key-name=tls.key",
                    "--ca-name=ca.crt",
                ],
            ]
            .concat(),
        )
        .unwrap();
        assert_eq!(tls.keys.all(), ["ca.crt", "tls.crt", "tls.key"]);
    }

    #[test]
    fn create_renewal_defaults_leave_kube_webhook_certgens_100_years() {
        let r = create(&[&BASE[..], &["--host=svc"]].concat()).unwrap();
        assert_eq!(r.renewal.validity, crate::kwc::VALIDITY);
        // A third of 100 years: a certificate `create` issued is not due for 66 years.
        assert_eq!(r.renewal.renew_before, crate::kwc::VALIDITY / 3);
        assert!(r.renewal.targets.is_empty());
        assert_eq!(r.renewal.ca_secret_name, "s-ca");
        let r = create(
            &[
                &BASE[..],
                &[
                    "--host=svc",
                    "--validity=90d",
                    "--renew-before=30d",
                    "--webhook-name=w",
                    "--patch-mutating=false",
                    "--apiservice-name=v1.m.io",
                    "--ca-secret-name=my-ca",
                ],
            ]
            .concat(),
        )
        .unwrap();
        assert_eq!(r.renewal.validity.as_secs(), 90 * 86_400);
        assert_eq!(r.renewal.renew_before.as_secs(), 30 * 86_400);
        let kinds: Vec<_> = r.renewal.targets.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            [
                WebhookKind::ApiService,
                WebhookKind::ValidatingWebhookConfiguration
            ]
        );
        assert_eq!(r.renewal.ca_secret_name, "my-ca");
        // An APIService alone.
        let r =
            create(&[&BASE[..], &["--host=svc", "--apiservice-name=v1.m.io"]].concat()).unwrap();
        assert_eq!(r.renewal.targets.len(), 1);
    }

    #[test]
    fn create_renewal_refusals_name_the_flag() {
        let flag = |extra: &[&str]| {
            create(&[&BASE[..], &["--host=svc"], extra].concat())
                .unwrap_err()
                .source_name
        };
        assert_eq!(flag(&["--validity=30m"]), "--validity");
        assert_eq!(flag(&["--validity=36501d"]), "--validity");
        assert_eq!(
            flag(&["--validity=1h", "--renew-before=1h"]),
            "--renew-before"
        );
        assert_eq!(flag(&["--renew-before=0s"]), "--renew-before");
        assert_eq!(flag(&["--webhook-name=Not_A_Name"]), "--webhook-name");
        assert_eq!(
            flag(&[
                "--webhook-name=w",
                "--patch-validating=false",
                "--patch-mutating=false"
            ]),
            "--webhook-name"
        );
        assert_eq!(flag(&["--apiservice-name=a/b"]), "--apiservice-name");
        assert_eq!(flag(&["--ca-secret-name=s"]), "--ca-secret-name");
        assert_eq!(flag(&["--ca-secret-name=A"]), "--ca-secret-name");
    }

    #[test]
    fn patch_targets_follow_the_flags() {
        let r = patch(&[&BASE[..], &["--webhook-name=w"]].concat()).unwrap();
        let kinds: Vec<_> = r.targets.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            [
                WebhookKind::ValidatingWebhookConfiguration,
                WebhookKind::MutatingWebhookConfiguration
            ]
        );
        assert_eq!(r.mode, PatchMode::Update);
        assert_eq!(r.failure_policy, None);
        let r = patch(
            &[
                &BASE[..],
                &[
                    "--webhook-name=w",
                    "--patch-mutating=false",
                    "--apiservice-name=v1.m.io",
                    "--patch-failure-policy=Ignore",
                    "--patch-mode=patch",
                ],
            ]
            .concat(),
        )
        .unwrap();
        let kinds: Vec<_> = r.targets.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            [
                WebhookKind::ApiService,
                WebhookKind::ValidatingWebhookConfiguration
            ]
        );
        assert_eq!(r.failure_policy, Some(FailurePolicy::Ignore));
        assert_eq!(r.mode, PatchMode::Patch);
        // The chart renders an empty policy when its value is empty: no policy.
        let r =
            patch(&[&BASE[..], &["--webhook-name=w", "--patch-failure-policy="]].concat()).unwrap();
        assert_eq!(r.failure_policy, None);
        // A flag given twice: the last one wins, as in pflag.
        let r = patch(
            &[
                &BASE[..],
                &[
                    "--webhook-name=w",
                    "--patch-failure-policy=",
                    "--patch-failure-policy=Fail",
                ],
            ]
            .concat(),
        )
        .unwrap();
        assert_eq!(r.failure_policy, Some(FailurePolicy::Fail));
        // `--patch-validating` alone is true, as in cobra.
        let r = patch(&[&BASE[..], &["--webhook-name=w", "--patch-validating"]].concat()).unwrap();
        assert_eq!(r.targets.len(), 2);
    }

    #[test]
    fn patch_refusals_name_the_flag() {
        let flag = |args: &[&str]| patch(args).unwrap_err().source_name;
        assert_eq!(
            flag(
                &[
                    &BASE[..],
                    &["--webhook-name=w", "--patch-failure-policy=Maybe"]
                ]
                .concat()
            ),
            "--patch-failure-policy"
        );
        assert_eq!(
            flag(&[&BASE[..], &["--webhook-name=w", "--patch-mode=apply"]].concat()),
            "--patch-mode"
        );
        assert_eq!(flag(&BASE), "--webhook-name");
        assert_eq!(
            flag(
                &[
                    &BASE[..],
                    &["--patch-validating=false", "--patch-mutating=false"]
                ]
                .concat()
            ),
            "--patch-validating/--patch-mutating"
        );
        assert_eq!(
            flag(
                &[
                    &BASE[..],
                    &[
                        "--patch-validating=false",
                        "--patch-mutating=false",
                        "--apiservice-name=a",
                        "--patch-failure-policy=Fail"
                    ]
                ]
                .concat()
            ),
            "--patch-failure-policy"
        );
        assert_eq!(
            flag(&["--webhook-name=w", "--namespace=ns"]),
            "--secret-name"
        );
    }
}
