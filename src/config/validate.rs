//! Validation of a parsed config file. Every message names the field and says how to fix it.

use std::time::Duration;

use super::{
    Ca, ConfigFile, HmacSecret, SecretFile, TlsSecret, default_key, parse_ip, render, usages,
};
use crate::pki::{CaSpec, LeafSpec};

/// Shortest validity certgen accepts: anything shorter is a typo, not a policy.
const MIN_VALIDITY: Duration = Duration::from_secs(3_600);
/// Longest validity: beyond 100 years X.509 dates and clients get unreliable.
const MAX_VALIDITY: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A Kubernetes namespace name (RFC 1123 label).
pub fn dns1123_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters".into());
    }
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

/// A Kubernetes object name (RFC 1123 subdomain).
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1 to 253 characters".into());
    }
    for label in s.split('.') {
        dns1123_label(label).map_err(|e| format!("label {label:?} {e}"))?;
    }
    Ok(())
}

/// A DNS name for a SAN; a leading `*` label is allowed when `wildcard` is true.
pub fn dns_name(s: &str, wildcard: bool) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1 to 253 characters".into());
    }
    for (i, label) in s.split('.').enumerate() {
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
    Ok(Ca {
        secret_name,
        spec: CaSpec {
            common_name: file.ca.common_name.clone(),
            validity: file.ca.validity.0,
            key_algorithm: file.ca.key_algorithm,
        },
        renew_before: file.ca.renew_before.0,
    })
}

pub fn tls(
    field: &str,
    s: &SecretFile,
    namespace: &str,
    cluster_domain: &str,
    ca: &Ca,
) -> Result<TlsSecret, String> {
    if s.key.is_some() || s.bytes.is_some() {
        return Err(format!(
            "{field}: key and bytes apply only to type hmac; remove them"
        ));
    }
    let common_name = s.common_name.clone().unwrap_or_else(|| s.name.clone());
    if common_name.is_empty() || common_name.len() > 64 {
        return Err(format!("{field}.commonName must be 1 to 64 characters"));
    }
    let mut dns_names = Vec::new();
    for (j, t) in s.dns_names.iter().enumerate() {
        let name = render(t, namespace, cluster_domain)
            .map_err(|e| format!("{field}.dnsNames[{j}]: {e}"))?;
        dns_name(&name, true).map_err(|e| format!("{field}.dnsNames[{j}] {name:?}: {e}"))?;
        if !dns_names.contains(&name) {
            dns_names.push(name);
        }
    }
    let mut ip_addresses = Vec::new();
    for (j, ip) in s.ip_addresses.iter().enumerate() {
        ip_addresses.push(parse_ip(ip).map_err(|e| format!("{field}.ipAddresses[{j}]: {e}"))?);
    }
    if dns_names.is_empty() && ip_addresses.is_empty() {
        return Err(format!(
            "{field}: a TLS Secret needs at least one of dnsNames or ipAddresses"
        ));
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
    let valid = s
        .validity
        .map_or(Duration::from_secs(365 * 86_400), |d| d.0);
    let renew_before = s
        .renew_before
        .map_or(Duration::from_secs(30 * 86_400), |d| d.0);
    validity(field, valid, renew_before)?;
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
    })
}

pub fn hmac(field: &str, s: &SecretFile) -> Result<HmacSecret, String> {
    let tls_only = s.common_name.is_some()
        || !s.dns_names.is_empty()
        || !s.ip_addresses.is_empty()
        || s.usages.is_some()
        || s.key_algorithm.is_some()
        || s.validity.is_some()
        || s.renew_before.is_some();
    if tls_only {
        return Err(format!(
            "{field}: commonName, dnsNames, ipAddresses, usages, keyAlgorithm, validity and renewBefore apply only to type tls; remove them"
        ));
    }
    let key = s.key.clone().unwrap_or_else(|| "hmac-secret".to_string());
    let key_ok = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if !key_ok {
        return Err(format!(
            "{field}.key {key:?} is not a valid Secret key (letters, digits, '-', '.', '_')"
        ));
    }
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
