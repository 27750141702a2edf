//! Validation of a parsed config file. Every message names the field and says how to fix it.

use std::time::Duration;

use super::{
    Ca, Cluster, ClusterFile, ConfigFile, Consumer, ConsumerFile, DataKeysFile, HmacSecret, Kind,
    Names, Probe, ProbeFile, SecretFile, TlsSecret, Workload, default_key, parse_ip, render,
    usages,
};
use crate::pki::{CaSpec, LeafSpec};
use crate::secret::{Layout, TYPE_OPAQUE, TYPE_TLS};

/// Shortest validity certgen accepts: anything shorter is a typo, not a policy.
const MIN_VALIDITY: Duration = Duration::from_secs(3_600);
/// Longest validity: beyond 100 years X.509 dates and clients get unreliable.
const MAX_VALIDITY: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A Kubernetes namespace name (RFC 1123 label).
pub fn dns1123_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters".into());
    }
    dns1123_chars(s)
}

/// A Kubernetes object name (RFC 1123 subdomain, as the API server checks it:
/// `IsDNS1123Subdomain`, at most 253 characters in all, with no limit on each label's length,
/// so a Secret may be named with 100 characters and no dot).
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1 to 253 characters".into());
    }
    for label in s.split('.') {
        if label.is_empty() {
            return Err("has an empty label (two dots, or a dot at an end)".into());
        }
        dns1123_chars(label).map_err(|e| format!("label {label:?} {e}"))?;
    }
    Ok(())
}

/// The characters of an RFC 1123 label: lower-case letters, digits and inner '-'.
fn dns1123_chars(s: &str) -> Result<(), String> {
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("may contain only lower-case letters, digits and '-'".into());
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}

/// A DNS name for a SAN; a leading `*` label is allowed when `wildcard` is true.
pub fn dns_name(s: &str, wildcard: bool) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1 to 253 characters".into());
    }
    for (i, label) in s.split('.').enumerate() {
        // A wildcard only as the whole first label, followed by a name (Envoy Gateway's own
        // `*.{namespace}` has one label after it).
        if wildcard && i == 0 && label == "*" && s.len() > 2 {
            continue;
        }
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "label {label:?} is not a DNS label (letters, digits and inner '-', 1 to 63 characters{})",
                if wildcard {
                    "; only the first label may be '*'"
                } else {
                    ""
                }
            ));
        }
    }
    Ok(())
}

/// A DNS subjectAltName as a certificate holds it: a DNS name ([`dns_name`], a leading `*`
/// label allowed) that is not an IP address written as a name. The one rule of the config's
/// `dnsNames` and `certgen create --host`.
pub(crate) fn dns_san(name: &str) -> Result<(), String> {
    if looks_like_ip(name) {
        return Err(
            "an IP address written as a name, which never matches a connection to an IP address: give the address without leading zeros or brackets".into(),
        );
    }
    dns_name(name, true)
}

/// Whether a DNS SAN is really an IP address: one that parses as IPv4 or IPv6 (bracketed or
/// not), or whose last label is all digits (no top-level domain is: `10.0.0.300`, `1.2.3`).
fn looks_like_ip(name: &str) -> bool {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>().is_ok()
        || name
            .rsplit('.')
            .next()
            .is_some_and(|last| !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
}

fn validity(field: &str, validity: Duration, renew_before: Duration) -> Result<(), String> {
    if !(MIN_VALIDITY..=MAX_VALIDITY).contains(&validity) {
        return Err(format!("{field}.validity must be between 1h and 36500d"));
    }
    if renew_before >= validity {
        return Err(format!(
            "{field}.renewBefore must be shorter than {field}.validity, or every run would renew"
        ));
    }
    Ok(())
}

pub fn ca(file: &ConfigFile) -> Result<Ca, String> {
    let secret_name = file
        .ca
        .secret_name
        .clone()
        .unwrap_or_else(|| format!("{}-ca", file.name));
    dns1123_subdomain(&secret_name).map_err(|e| format!("ca.secretName {secret_name:?}: {e}"))?;
    if file.ca.common_name.trim().is_empty() || file.ca.common_name.len() > 64 {
        return Err("ca.commonName must be 1 to 64 characters".into());
    }
    validity("ca", file.ca.validity.0, file.ca.renew_before.0)?;
    let layout = layout("ca", &file.ca.data_keys, &file.ca.secret_type)?;
    for key in [&layout.bundle, &layout.cert, &layout.key] {
        if key == "next.crt" || key == "next.key" {
            return Err(format!(
                "ca.dataKeys: {key} holds a staged rotation's pending CA; give the bundle, the certificate and the key other names"
            ));
        }
    }
    Ok(Ca {
        layout,
        secret_name,
        spec: CaSpec {
            common_name: file.ca.common_name.clone(),
            validity: file.ca.validity.0,
            key_algorithm: file.ca.key_algorithm,
        },
        renew_before: file.ca.renew_before.0,
    })
}

/// The `clusters:` list of a set: at least two members, each context and each name once,
/// names and namespaces valid as Kubernetes names.
pub fn clusters(list: &[ClusterFile]) -> Result<Vec<Cluster>, String> {
    if list.len() == 1 {
        return Err("clusters: lists one cluster; a set has at least two (for one cluster, leave clusters: out and pass --context, and --cluster-name for {cluster})".into());
    }
    let mut out: Vec<Cluster> = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let field = format!("clusters[{i}]");
        if c.context.trim().is_empty() {
            return Err(format!(
                "{field}.context is empty; give the kubeconfig context that reaches the cluster"
            ));
        }
        if let Some(other) = out.iter().position(|m| m.context == c.context) {
            return Err(format!(
                "{field}.context {:?} is also clusters[{other}]'s: list each member once",
                c.context
            ));
        }
        if let Some(ns) = &c.namespace {
            dns1123_label(ns).map_err(|e| format!("{field}.namespace {ns:?}: {e}"))?;
        }
        if let Some(name) = &c.name {
            dns1123_label(name).map_err(|e| format!("{field}.name {name:?}: {e}"))?;
            if let Some(other) = out.iter().position(|m| m.name.as_ref() == Some(name)) {
                return Err(format!(
                    "{field}.name {name:?} is also clusters[{other}]'s: each cluster of a set needs its own name (ClusterMesh refuses two clusters with one cluster.name)"
                ));
            }
        }
        out.push(Cluster {
            context: c.context.clone(),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
        });
    }
    Ok(out)
}

pub fn tls(field: &str, s: &SecretFile, names: &Names<'_>, ca: &Ca) -> Result<TlsSecret, String> {
    if s.key.is_some() || s.bytes.is_some() {
        return Err(format!(
            "{field}: key and bytes apply only to type hmac; remove them"
        ));
    }
    let layout = layout(field, &s.data_keys, &s.secret_type)?;
    let common_name = match &s.common_name {
        Some(cn) => render(cn, names).map_err(|e| format!("{field}.commonName: {e}"))?,
        None => s.name.clone(),
    };
    if common_name.is_empty() || common_name.len() > 64 {
        return Err(format!("{field}.commonName must be 1 to 64 characters"));
    }
    let mut dns_names = Vec::new();
    for (j, t) in s.dns_names.iter().enumerate() {
        let name = render(t, names).map_err(|e| format!("{field}.dnsNames[{j}]: {e}"))?;
        if looks_like_ip(&name) {
            return Err(format!(
                "{field}.dnsNames[{j}] {name:?} is an IP address, and a DNS name never matches a connection to an IP address; list it under ipAddresses instead"
            ));
        }
        dns_san(&name).map_err(|e| format!("{field}.dnsNames[{j}] {name:?}: {e}"))?;
        if !dns_names.contains(&name) {
            dns_names.push(name);
        }
    }
    let mut ip_addresses = Vec::new();
    for (j, ip) in s.ip_addresses.iter().enumerate() {
        ip_addresses.push(parse_ip(ip).map_err(|e| format!("{field}.ipAddresses[{j}]: {e}"))?);
    }
    let usage_list = s
        .usages
        .clone()
        .unwrap_or_else(|| vec![super::Usage::Server, super::Usage::Client]);
    if usage_list.is_empty() {
        return Err(format!(
            "{field}.usages is empty; use [server], [client] or [server, client]"
        ));
    }
    // A server is verified by the name a client dials; a client alone by its chain (and an
    // etcd or Kubernetes server reads its common name as the user: Cilium's admin, remote and
    // local certificates carry no SAN).
    if dns_names.is_empty() && ip_addresses.is_empty() && usage_list.contains(&super::Usage::Server)
    {
        return Err(format!(
            "{field}: a server certificate needs at least one of dnsNames or ipAddresses (a certificate with usages: [client] alone may have none)"
        ));
    }
    let valid = s
        .validity
        .map_or(Duration::from_secs(365 * 86_400), |d| d.0);
    let renew_before = s
        .renew_before
        .map_or(Duration::from_secs(30 * 86_400), |d| d.0);
    validity(field, valid, renew_before)?;
    // A leaf never outlives its CA. If a leaf's renewal window were not inside the CA's, a CA
    // in the leaf's window but not yet in its own would make every run renew the clipped leaf.
    if renew_before >= ca.renew_before {
        return Err(format!(
            "{field}.renewBefore ({}) must be shorter than ca.renewBefore ({}): leaves are clipped to the CA's expiry, so the CA must be rotated before its leaves fall due",
            crate::timefmt::HumanDuration(renew_before),
            crate::timefmt::HumanDuration(ca.renew_before)
        ));
    }
    Ok(TlsSecret {
        name: s.name.clone(),
        leaf: LeafSpec {
            common_name,
            dns_names,
            ip_addresses,
            usages: usages(&usage_list),
            validity: valid,
            key_algorithm: default_key(ca, s.key_algorithm),
        },
        renew_before,
        layout,
    })
}

/// Why `value` is not a Secret data key certgen can write in both stores, if it is not:
/// Kubernetes' rule (`IsConfigMapKey` in k8s.io/apimachinery's `pkg/util/validation`:
/// `[-._a-zA-Z0-9]+`, at most 253 characters, not `.` or `..`, not starting with `..`), and not
/// starting with `.` at all, since a local directory keeps its own `..data`, version
/// directories and `.certgen-annotations.json` beside the files (and a consumer's `ls` hides
/// dot files). Checked before anything is written: the API server or the local store would
/// otherwise refuse the key after the CA Secret was written.
pub(crate) fn data_key_problem(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        Some("is empty")
    } else if value.len() > 253 {
        Some("is longer than 253 characters")
    } else if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        Some("may hold only letters, digits, '-', '.' and '_'")
    } else if value.starts_with('.') {
        Some(
            "must not start with '.' (Kubernetes refuses '..' at the start; certgen's local layout keeps its own '.' names)",
        )
    } else {
        None
    }
}

/// A Secret data key ([`data_key_problem`]), or the message naming `field`.
fn data_key(field: &str, value: &str) -> Result<(), String> {
    match data_key_problem(value) {
        None => Ok(()),
        Some(why) => Err(format!(
            "{field} {value:?} is not a valid Secret data key: it {why}"
        )),
    }
}

/// A TLS Secret's data keys and type: three distinct valid keys; `kubernetes.io/tls` (the
/// default) needs `tls.crt` and `tls.key`, as the API server requires.
fn layout(
    field: &str,
    data_keys: &Option<DataKeysFile>,
    secret_type: &Option<String>,
) -> Result<Layout, String> {
    let mut layout = Layout::default();
    if let Some(keys) = data_keys {
        for (name, given, slot) in [
            ("bundle", &keys.bundle, &mut layout.bundle),
            ("cert", &keys.cert, &mut layout.cert),
            ("key", &keys.key, &mut layout.key),
        ] {
            if let Some(k) = given {
                data_key(&format!("{field}.dataKeys.{name}"), k)?;
                *slot = k.clone();
            }
        }
    }
    if layout.bundle == layout.cert || layout.bundle == layout.key || layout.cert == layout.key {
        return Err(format!(
            "{field}.dataKeys: bundle, cert and key must be three different keys (got {}, {}, {})",
            layout.bundle, layout.cert, layout.key
        ));
    }
    layout.type_ = match secret_type.as_deref() {
        None | Some(TYPE_TLS) => TYPE_TLS,
        Some(TYPE_OPAQUE) => TYPE_OPAQUE,
        Some(other) => {
            return Err(format!(
                "{field}.secretType {other:?}: certgen writes TLS Secrets of type {TYPE_TLS} or {TYPE_OPAQUE}"
            ));
        }
    };
    if layout.type_ == TYPE_TLS && (layout.cert != "tls.crt" || layout.key != "tls.key") {
        return Err(format!(
            "{field}: a {TYPE_TLS} Secret must hold its certificate in tls.crt and its key in tls.key (the API server requires them); set secretType: {TYPE_OPAQUE} to use other keys"
        ));
    }
    Ok(layout)
}

pub fn hmac(field: &str, s: &SecretFile) -> Result<HmacSecret, String> {
    let tls_only = s.common_name.is_some()
        || !s.dns_names.is_empty()
        || !s.ip_addresses.is_empty()
        || s.usages.is_some()
        || s.key_algorithm.is_some()
        || s.validity.is_some()
        || s.renew_before.is_some()
        || s.data_keys.is_some()
        || s.secret_type.is_some();
    if tls_only {
        return Err(format!(
            "{field}: commonName, dnsNames, ipAddresses, usages, keyAlgorithm, validity, renewBefore, dataKeys and secretType apply only to type tls; remove them"
        ));
    }
    let key = s.key.clone().unwrap_or_else(|| "hmac-secret".to_string());
    data_key(&format!("{field}.key"), &key)?;
    let bytes = s.bytes.unwrap_or(32);
    if !(16..=1024).contains(&bytes) {
        return Err(format!("{field}.bytes must be between 16 and 1024"));
    }
    Ok(HmacSecret {
        name: s.name.clone(),
        key,
        bytes,
    })
}

/// A label selector in `key=value[,key=value]` form (equality only).
pub fn selector(s: &str) -> Result<(), String> {
    for term in s.split(',') {
        let Some((k, v)) = term.split_once('=') else {
            return Err(format!("term {term:?} is not key=value"));
        };
        let k = k.trim();
        let name = k.rsplit('/').next().unwrap_or(k);
        let ok = |x: &str| {
            x.len() <= 63
                && x.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        if k.is_empty() || !ok(name) || !ok(v.trim()) {
            return Err(format!("term {term:?} is not a valid label key=value"));
        }
    }
    Ok(())
}

/// A consumer's probe (in `field`): a service or static `host:port` addresses, a port, the
/// TLS Secret whose CA it checks (by default the consumer's first mount, `first_mount`) and
/// the name the server must present.
fn probe(
    field: &str,
    p: &ProbeFile,
    first_mount: &str,
    names: &Names<'_>,
    tls: &[TlsSecret],
) -> Result<Probe, String> {
    if p.service.is_none() && p.addresses.is_empty() {
        return Err(format!(
            "{field}.probe: give a service (cluster) or addresses (local mode)"
        ));
    }
    if let Some(s) = &p.service {
        dns1123_label(s).map_err(|e| format!("{field}.probe.service {s:?}: {e}"))?;
    }
    if p.port == 0 {
        return Err(format!("{field}.probe.port must be 1 to 65535"));
    }
    for (j, a) in p.addresses.iter().enumerate() {
        let ok = a
            .rsplit_once(':')
            .is_some_and(|(h, port)| !h.is_empty() && port.parse::<u16>().is_ok_and(|n| n > 0));
        if !ok {
            return Err(format!(
                "{field}.probe.addresses[{j}] {a:?} is not host:port"
            ));
        }
    }
    let secret = p.secret.clone().unwrap_or_else(|| first_mount.to_owned());
    if !tls.iter().any(|t| t.name == secret) {
        return Err(format!(
            "{field}.probe.secret {secret:?} is not a TLS Secret of this config"
        ));
    }
    let server_name = match (&p.server_name, &p.service) {
        (Some(n), _) => render(
            n,
            &Names {
                cluster_domain: "",
                ..*names
            },
        )
        .map_err(|e| format!("{field}.probe.serverName: {e}"))?,
        (None, Some(s)) => format!("{s}.{}.svc", names.namespace),
        (None, None) => {
            return Err(format!(
                "{field}.probe.serverName is required with static addresses"
            ));
        }
    };
    Ok(Probe {
        service: p.service.clone(),
        port: p.port,
        addresses: p.addresses.clone(),
        server_name,
        secret,
    })
}

/// A consumer (in `field`): the workload it names and how it reloads, the managed Secrets it
/// mounts (each one of this config's), and its probe.
pub fn consumer(
    field: &str,
    c: &ConsumerFile,
    names: &Names<'_>,
    tls: &[TlsSecret],
    hmac: &[HmacSecret],
) -> Result<Consumer, String> {
    let who = format!("{field} ({})", c.name);
    let kind = match &c.kind {
        None => Kind::Deployment,
        Some(k) => Kind::parse(k).ok_or_else(|| {
            let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
            format!(
                "{who}.kind {k:?} is not a workload kind certgen can restart; write one of {} (as Kubernetes spells it), or leave kind out for a Deployment",
                kinds.join(", ")
            )
        })?,
    };
    let named = match (&c.workload, &c.deployment) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{who}: give either workload or deployment, not both"
            ));
        }
        (Some(w), None) => Some(("workload", w)),
        (None, Some(d)) if kind != Kind::Deployment => {
            return Err(format!(
                "{who}: deployment: {d} names a Deployment, but its kind is {kind}; write workload: {d}"
            ));
        }
        (None, Some(d)) => Some(("deployment", d)),
        (None, None) => None,
    };
    let workload = match (named, &c.selector) {
        (Some((key, _)), Some(_)) => {
            return Err(format!("{who}: give either {key} or selector, not both"));
        }
        (Some((key, d)), None) => {
            dns1123_subdomain(d).map_err(|e| format!("{field}.{key} {d:?}: {e}"))?;
            Some(Workload::Name(d.clone()))
        }
        (None, Some(s)) => {
            selector(s).map_err(|e| format!("{field}.selector: {e}"))?;
            Some(Workload::Selector(s.clone()))
        }
        (None, None) => None,
    };
    if workload.is_none() && c.reload == super::Reload::Restart {
        return Err(format!(
            "{field}: reload: restart needs a workload to restart; give workload (or deployment) or selector"
        ));
    }
    if c.mounts.is_empty() {
        return Err(format!(
            "{field}.mounts is empty; list the managed Secrets it mounts"
        ));
    }
    for (j, m) in c.mounts.iter().enumerate() {
        if !tls.iter().any(|t| &t.name == m) && !hmac.iter().any(|h| &h.name == m) {
            return Err(format!(
                "{field}.mounts[{j}] {m:?} is not one of the Secrets in this config"
            ));
        }
    }
    let probe = match &c.probe {
        None => None,
        Some(p) => Some(probe(field, p, &c.mounts[0], names, tls)?),
    };
    Ok(Consumer {
        name: c.name.clone(),
        kind,
        workload,
        reload: c.reload,
        mounts: c.mounts.clone(),
        required: c.required,
        probe,
        skipped: Vec::new(),
    })
}

/// Labels for the Secrets certgen writes: Kubernetes label syntax, and not certgen's own
/// ownership label (certgen always sets that one).
pub fn labels(
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let part = |x: &str| {
        !x.is_empty()
            && x.len() <= 63
            && x.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && x.as_bytes()[0].is_ascii_alphanumeric()
            && x.as_bytes()[x.len() - 1].is_ascii_alphanumeric()
    };
    for (k, v) in labels {
        if k == super::MANAGED_BY_LABEL {
            return Err(format!(
                "labels.{k}: certgen sets this label itself ({}={}); remove it from labels",
                super::MANAGED_BY_LABEL,
                super::MANAGED_BY
            ));
        }
        let (prefix, name) = match k.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if let Some(p) = prefix {
            dns1123_subdomain(p).map_err(|e| format!("labels: key {k:?}: prefix {e}"))?;
        }
        if !part(name) {
            return Err(format!(
                "labels: key {k:?} is not a label key (an optional DNS prefix and '/', then 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
            ));
        }
        if !v.is_empty() && !part(v) {
            return Err(format!(
                "labels.{k}: value {v:?} is not a label value (empty, or 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
            ));
        }
    }
    Ok(labels.clone())
}

/// A `caBundle` target: its rendered name is an object name, and the Secret it follows is a
/// managed TLS Secret (whose `ca.crt` is the bundle).
pub fn webhook(
    field: &str,
    w: &super::WebhookFile,
    namespace: &str,
    tls: &[TlsSecret],
) -> Result<super::Webhook, String> {
    let name = w
        .name
        .replace("{namespace}", namespace)
        .replace("{clusterDomain}", "");
    if w.name.contains("{clusterDomain}") || name.contains('{') {
        return Err(format!(
            "{field}.name {:?}: the only placeholder in a webhook name is {{namespace}}",
            w.name
        ));
    }
    dns1123_subdomain(&name).map_err(|e| format!("{field}.name {name:?}: {e}"))?;
    let Some(followed) = tls.iter().find(|t| t.name == w.ca_bundle_from) else {
        return Err(format!(
            "{field}.caBundleFrom {:?} is not a TLS Secret of this config; name one of: {}",
            w.ca_bundle_from,
            tls.iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    Ok(super::Webhook {
        kind: w.kind,
        name,
        bundle_from: w.ca_bundle_from.clone(),
        bundle_key: followed.layout.bundle.clone(),
    })
}

/// A `clusterTrustBundles:` entry: a valid signer name, a TLS Secret of this config, valid
/// labels that do not set certgen's own.
pub fn trust_bundle(
    field: &str,
    b: &super::schema::TrustBundleFile,
    namespace: &str,
    tls: &[TlsSecret],
) -> Result<super::TrustBundle, String> {
    signer_name(&b.signer_name)
        .map_err(|e| format!("{field}.signerName {:?}: {e}", b.signer_name))?;
    let followed = match &b.bundle_from {
        None => tls.first().ok_or_else(|| {
            format!("{field}: this config has no TLS Secret whose CA bundle it could publish")
        })?,
        Some(name) => tls.iter().find(|t| &t.name == name).ok_or_else(|| {
            format!(
                "{field}.bundleFrom {name:?} is not a TLS Secret of this config; name one of: {}",
                tls.iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?,
    };
    let mut labels = labels(&b.labels).map_err(|e| format!("{field}.{e}"))?;
    for own in [
        super::MANAGED_BY_LABEL,
        "certgen.dev/ca",
        super::BUNDLE_NAMESPACE_LABEL,
        super::BUNDLE_FROM_LABEL,
    ] {
        if labels.contains_key(own) {
            return Err(format!(
                "{field}.labels sets {own:?}, which certgen sets on every bundle it writes; remove it"
            ));
        }
    }
    labels.extend(super::bundle_owner(namespace, &followed.name));
    Ok(super::TrustBundle {
        signer: b.signer_name.clone(),
        bundle_from: followed.name.clone(),
        bundle_key: followed.layout.bundle.clone(),
        labels,
    })
}

/// `renewal:`: each window parsed (its cron, duration and time zone), and the margin.
pub(super) fn renewal(
    file: Option<&super::schema::RenewalFile>,
) -> Result<crate::window::Windows, String> {
    let mut out = crate::window::Windows::default();
    let Some(file) = file else { return Ok(out) };
    for (i, w) in file.windows.iter().enumerate() {
        out.windows.push(
            crate::window::Window::new(&w.cron, w.window_duration.0, w.timezone.as_deref())
                .map_err(|e| format!("renewal.windows[{i}]: {e}"))?,
        );
    }
    if let Some(m) = file.margin {
        out.margin = m.0;
    }
    Ok(out)
}

/// A signer name as the API server accepts it for ClusterTrustBundles: `<domain>/<path>`, the
/// domain a DNS subdomain, the path non-empty; the bundle names made from it must fit in 253
/// characters with a 16-character fingerprint.
pub fn signer_name(signer: &str) -> Result<(), String> {
    let Some((domain, path)) = signer.split_once('/') else {
        return Err("a signer name is <domain>/<path>, for example example.com/mesh".into());
    };
    dns1123_subdomain(domain).map_err(|e| format!("its domain {domain:?}: {e}"))?;
    if !domain.contains('.') {
        return Err(format!(
            "its domain {domain:?} is not fully qualified (Kubernetes reserves names without a dot); use one you own, for example {domain}.example.com"
        ));
    }
    if path.is_empty()
        || path.split('/').any(|p| {
            p.is_empty()
                || p == "."
                || p == ".."
                || !p
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        })
    {
        return Err(format!(
            "its path {path:?} must be segments of letters, digits, '-', '.', '_'"
        ));
    }
    if signer.len() + 17 > 253 {
        return Err(
            "it is too long for the bundle names made from it (at most 236 characters)".into(),
        );
    }
    Ok(())
}
