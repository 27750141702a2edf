//! What a control plane's certgen writes, reduced to the fields a side-by-side comparison looks
//! at: per Secret its type, keys and labels; of its leaf the common name, SANs, key usages, extended
//! key usages, lifetime and key type; of its `ca.crt` the CAs' common names. Serial numbers, keys and
//! times drop out, so the summary of another tool's run can be recorded once as a fixture
//! (`tests/it/fixtures/profiles/`) and compared with certgen's on every test run:
//! [`assert_compatible`] holds the rules, including the differences certgen makes on purpose.

use std::collections::BTreeMap;

use ::time::OffsetDateTime;
use serde_json::{Value, json};
use x509_parser::prelude::*;

/// The summary of one Secret: `type` and `labels` are `None` where the store has none (local
/// mode), and `created` is when its certificate was issued (a Secret's creationTimestamp, or
/// the run's start in local mode), from which the lifetime is counted.
pub fn summarize(
    name: &str,
    r#type: Option<&str>,
    labels: Option<&BTreeMap<String, String>>,
    data: &BTreeMap<String, Vec<u8>>,
    created: OffsetDateTime,
) -> Value {
    let mut out = json!({
        "name": name,
        "keys": data.keys().collect::<Vec<_>>(),
    });
    if let Some(t) = r#type {
        out["type"] = json!(t);
    }
    if let Some(l) = labels {
        out["labels"] = json!(l);
    }
    if let Some(pem) = data.get("tls.crt") {
        out["leaf"] = cert_summary(&first_der(pem), created);
    }
    if let Some(pem) = data.get("ca.crt") {
        out["caBundle"] = json!(
            ::pem::parse_many(pem)
                .unwrap()
                .iter()
                .map(|p| subject(p.contents()))
                .collect::<Vec<_>>()
        );
    }
    out
}

fn first_der(pem: &[u8]) -> Vec<u8> {
    ::pem::parse_many(pem).unwrap()[0].contents().to_vec()
}

fn subject(der: &[u8]) -> String {
    let (_, x) = X509Certificate::from_der(der).unwrap();
    common_name(&x)
}

/// The subject's common name: Contour's CA also carries a random serialNumber attribute.
fn common_name(x: &X509Certificate) -> String {
    x.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Common name, SANs, usages, lifetime (whole days from `created` to notAfter, rounded) and key.
pub fn cert_summary(der: &[u8], created: OffsetDateTime) -> Value {
    let (_, x) = X509Certificate::from_der(der).unwrap();
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = x.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(b) => ips.push(format!("{b:?}")),
                _ => {}
            }
        }
    }
    let mut ku = Vec::new();
    if let Ok(Some(k)) = x.key_usage() {
        let k = k.value;
        for (set, name) in [
            (k.digital_signature(), "digitalSignature"),
            (k.non_repudiation(), "contentCommitment"),
            (k.key_encipherment(), "keyEncipherment"),
            (k.data_encipherment(), "dataEncipherment"),
            (k.key_agreement(), "keyAgreement"),
            (k.key_cert_sign(), "keyCertSign"),
            (k.crl_sign(), "cRLSign"),
        ] {
            if set {
                ku.push(name);
            }
        }
    }
    let mut eku = Vec::new();
    if let Ok(Some(e)) = x.extended_key_usage() {
        let e = e.value;
        for (set, name) in [
            (e.any, "any"),
            (e.server_auth, "serverAuth"),
            (e.client_auth, "clientAuth"),
        ] {
            if set {
                eku.push(name);
            }
        }
    }
    let key = match x.public_key().parsed().unwrap() {
        x509_parser::public_key::PublicKey::RSA(r) => format!("rsa-{}", r.key_size()),
        x509_parser::public_key::PublicKey::EC(p) => format!("ecdsa-p{}", p.key_size()),
        x509_parser::public_key::PublicKey::Unknown(_) => "ed25519".to_string(),
        other => format!("{other:?}"),
    };
    let not_after = x.validity().not_after.to_datetime();
    let days = ((not_after - created).whole_seconds() as f64 / 86_400.0).round() as i64;
    json!({
        "commonName": common_name(&x),
        "dnsNames": dns,
        "ipAddresses": ips,
        "keyUsage": ku,
        "extKeyUsage": eku,
        "lifetimeDays": days,
        "key": key,
    })
}

/// A recorded run of another tool: `tests/it/fixtures/profiles/NAME.json`.
pub fn fixture(name: &str) -> Value {
    let path = super::root().join(format!("tests/it/fixtures/profiles/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// certgen's summary of Secret `name` (`ours`) is compatible with the other tool's (`theirs`):
/// what consumers read is the same, and where certgen differs it is on purpose:
/// - name, type, keys, common name, DNS and IP SANs, lifetime and the CAs' common names are equal (`type` and
///   labels only where both sides have them: local mode has neither);
/// - every label the tool sets is set, to the same value (certgen adds its managed-by label);
/// - extended key usages are equal where the tool sets some; where it sets none (any purpose,
///   Contour), certgen names the uses the profile declares;
/// - key usages are a subset of the tool's: certgen sets keyEncipherment only on RSA keys,
///   where it means something;
/// - the key type is the tool's, or `key_instead` when the profile chose another on purpose.
pub fn assert_compatible(theirs: &Value, ours: &Value, key_instead: Option<&str>) {
    let name = theirs["name"].as_str().unwrap();
    let ctx = |field: &str| format!("Secret {name}: {field}\n theirs: {theirs:#}\n ours: {ours:#}");
    assert_eq!(theirs["name"], ours["name"], "{}", ctx("name"));
    assert_eq!(theirs["keys"], ours["keys"], "{}", ctx("keys"));
    if !ours["type"].is_null() {
        assert_eq!(theirs["type"], ours["type"], "{}", ctx("type"));
    }
    if let (Some(t), Some(o)) = (theirs["labels"].as_object(), ours["labels"].as_object()) {
        for (k, v) in t {
            assert_eq!(o.get(k), Some(v), "{}", ctx("labels"));
        }
    }
    assert_eq!(theirs["caBundle"], ours["caBundle"], "{}", ctx("caBundle"));
    let (t, o) = (&theirs["leaf"], &ours["leaf"]);
    for field in ["commonName", "dnsNames", "ipAddresses", "lifetimeDays"] {
        assert_eq!(t[field], o[field], "{}", ctx(field));
    }
    let t_eku = t["extKeyUsage"].as_array().unwrap();
    let o_eku = o["extKeyUsage"].as_array().unwrap();
    if t_eku.is_empty() {
        assert!(!o_eku.is_empty(), "{}", ctx("extKeyUsage (named)"));
    } else {
        assert_eq!(t_eku, o_eku, "{}", ctx("extKeyUsage"));
    }
    let t_ku = t["keyUsage"].as_array().unwrap();
    for k in o["keyUsage"].as_array().unwrap() {
        assert!(t_ku.contains(k), "{}", ctx("keyUsage"));
    }
    let key = key_instead.map_or_else(|| t["key"].clone(), |k| json!(k));
    assert_eq!(key, o["key"], "{}", ctx("key"));
}
