//! The YAML schema of a profile or `--config` file. Unknown fields are errors.

use serde::{Deserialize, Serialize};

use crate::pki::KeyAlgorithm;
use crate::timefmt::HumanDuration;

/// A profile or config file as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigFile {
    /// The profile's name; the CA Secret defaults to `<name>-ca`.
    pub name: String,
    /// The namespace of every Secret.
    pub namespace: String,
    /// The cluster DNS domain used in `{clusterDomain}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_domain: Option<String>,
    /// The CA.
    pub ca: CaFile,
    /// The Secrets to manage.
    pub secrets: Vec<SecretFile>,
    /// The workloads that mount those Secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<ConsumerFile>,
    /// Labels put on every Secret certgen writes, beside `app.kubernetes.io/managed-by`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Webhook configurations and APIServices whose `caBundle` follows a Secret's `ca.crt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<WebhookFile>,
    /// ClusterTrustBundles that publish a TLS Secret's CA bundle, one bundle per CA, for pods
    /// that project them by `signerName` and a `labelSelector` (issue 43).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_trust_bundles: Vec<TrustBundleFile>,
    /// The clusters of a set that shares the CA, with what differs between them: a run with
    /// this file and no `--context` runs over all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterFile>,
    /// When routine rotations may start (cert-manager's `spec.renewal` shape; issue 45).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewal: Option<RenewalFile>,
}

/// One member of a set of clusters, as the config file lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterFile {
    /// The kubeconfig context that reaches it.
    pub context: String,
    /// Its namespace of the Secrets, when not the file's `namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The cluster's name, which `{cluster}` in names and SANs becomes (Cilium's
    /// `cluster.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `renewal:`: the windows a routine rotation (the CA or a leaf within its renewBefore) waits
/// for, and how close to its expiry it may wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewalFile {
    /// cert-manager's `spec.renewal.windows[]`: a routine rotation starts only inside one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<WindowFile>,
    /// A routine rotation starts outside the windows when what it renews would expire within
    /// this long after the next window opens (default 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<HumanDuration>,
}

/// One renewal window, with cert-manager's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WindowFile {
    /// Five cron fields (minute hour day-of-month month day-of-week), or `@daily` and the like.
    pub cron: String,
    /// How long each opening lasts.
    pub window_duration: HumanDuration,
    /// An IANA time zone (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// The kind of object whose `caBundle` certgen keeps in step with a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebhookKind {
    /// `admissionregistration.k8s.io/v1`: every entry of `webhooks[]` gets the bundle.
    MutatingWebhookConfiguration,
    /// `admissionregistration.k8s.io/v1`: every entry of `webhooks[]` gets the bundle.
    ValidatingWebhookConfiguration,
    /// `apiregistration.k8s.io/v1`: `spec.caBundle`.
    #[serde(rename = "APIService")]
    ApiService,
}

impl WebhookKind {
    pub const ALL: [WebhookKind; 3] = [
        WebhookKind::MutatingWebhookConfiguration,
        WebhookKind::ValidatingWebhookConfiguration,
        WebhookKind::ApiService,
    ];

    /// The kind as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookKind::MutatingWebhookConfiguration => "MutatingWebhookConfiguration",
            WebhookKind::ValidatingWebhookConfiguration => "ValidatingWebhookConfiguration",
            WebhookKind::ApiService => "APIService",
        }
    }

    /// The `apiVersion` of its objects (for Events' `regarding`).
    pub fn api_version(self) -> &'static str {
        match self {
            WebhookKind::MutatingWebhookConfiguration
            | WebhookKind::ValidatingWebhookConfiguration => "admissionregistration.k8s.io/v1",
            WebhookKind::ApiService => "apiregistration.k8s.io/v1",
        }
    }

    /// Its API group. Every adapter, RBAC rule and metric label takes the group and the
    /// resource from here (one table, so a new kind cannot be half added).
    pub fn group(self) -> &'static str {
        match self {
            WebhookKind::MutatingWebhookConfiguration
            | WebhookKind::ValidatingWebhookConfiguration => "admissionregistration.k8s.io",
            WebhookKind::ApiService => "apiregistration.k8s.io",
        }
    }

    /// Its resource, as API paths and RBAC rules name it.
    pub fn plural(self) -> &'static str {
        match self {
            WebhookKind::MutatingWebhookConfiguration => "mutatingwebhookconfigurations",
            WebhookKind::ValidatingWebhookConfiguration => "validatingwebhookconfigurations",
            WebhookKind::ApiService => "apiservices",
        }
    }

    /// The kind named `s` as Kubernetes writes it; `None` for any other word.
    pub fn parse(s: &str) -> Option<WebhookKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One object whose `caBundle` follows a managed Secret's `ca.crt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookFile {
    pub kind: WebhookKind,
    /// The object's name (cluster-scoped); `{namespace}` is replaced by the namespace.
    pub name: String,
    /// The managed TLS Secret whose `ca.crt` bundle the `caBundle` follows.
    pub ca_bundle_from: String,
}

/// One `clusterTrustBundles:` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustBundleFile {
    /// The signer the bundles are linked to (`<domain>/<path>`): consumers select them by it.
    pub signer_name: String,
    /// The managed TLS Secret whose CA bundle is published (default: the first TLS Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_from: Option<String>,
    /// Labels put on every bundle, beside certgen's own: what consumers' `labelSelector`s match.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// How a consumer picks up new certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reload {
    /// It watches its files and reloads them by itself.
    Hot,
    /// It reads certificates only at start: certgen restarts its workload.
    Restart,
}

/// A workload that mounts managed Secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConsumerFile {
    /// A name for reports.
    pub name: String,
    /// The workload's kind: `Deployment` (the default), `StatefulSet` or `DaemonSet`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The workload, by name (any kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The Deployment, by name (the same as `workload` with the default kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// Or the workloads of the kind matching a label selector (`key=value,key2=value2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    pub reload: Reload,
    /// The managed Secrets it mounts.
    pub mounts: Vec<String>,
    /// A missing workload is an error instead of being reported and skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// A TLS endpoint that proves the consumer serves the new certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeFile>,
}

/// Where and how to probe a consumer over TLS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeFile {
    /// The Service whose ready endpoints are dialled (in a cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The Service port (number) to dial.
    pub port: u16,
    /// Static `host:port` addresses to dial instead (local mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The name the server certificate must be valid for (default: `<service>.{namespace}.svc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// The managed Secret whose certificate the server presents (default: the first mount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// The CA section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    pub common_name: String,
    #[serde(default)]
    pub key_algorithm: KeyAlgorithm,
    pub validity: HumanDuration,
    pub renew_before: HumanDuration,
    /// The CA Secret's data keys, when not `tls.crt`, `tls.key`, `ca.crt` (Cilium's shared
    /// `cilium-ca` holds its certificate in `ca.crt` and its key in `ca.key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_keys: Option<DataKeysFile>,
    /// The CA Secret's type: `kubernetes.io/tls` (the default) or `Opaque`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
}

/// The kind of a managed Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretType {
    /// `kubernetes.io/tls` with `ca.crt`, `tls.crt`, `tls.key`.
    Tls,
    /// `Opaque` with one key of random bytes.
    Hmac,
}

/// Extended key usages of a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Usage {
    Server,
    Client,
}

/// One managed Secret. Fields that do not apply to its `type` are rejected by validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretFile {
    pub name: String,
    pub r#type: SecretType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_addresses: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usages: Option<Vec<Usage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_algorithm: Option<KeyAlgorithm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
    /// A TLS Secret's data keys, when not `ca.crt`, `tls.crt`, `tls.key` (kube-webhook-
    /// certgen's Secrets hold `ca`, `cert`, `key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_keys: Option<DataKeysFile>,
    /// A TLS Secret's type: `kubernetes.io/tls` (the default) or `Opaque`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
}

/// The data keys of a TLS Secret or of the CA Secret; each defaults to certgen's own. In the CA
/// Secret, `bundle` is the trust bundle certgen keeps (the active CA and the prior one) and
/// `cert` the active CA's certificate alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DataKeysFile {
    /// The trust bundle (default `ca.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// The certificate (default `tls.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
    /// Its private key (default `tls.key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl ConfigFile {
    /// Parses YAML; the error names the field and the line where the parser knows them.
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    /// Parses a built-in profile in its JSON form ([`crate::profiles::builtin_json`]).
    pub fn parse_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}
