//! `certgen handover cert-manager`: the cert-manager objects that continue what certgen wrote,
//! planned as data from what is stored (pure: the objects, and every reason to refuse).
//!
//! A CA `Issuer` on certgen's own CA Secret, so the first certificates cert-manager issues are
//! signed by the CA every bundle already trusts; one `Certificate` per TLS Secret with the
//! same Secret name, SANs, key algorithm and encoding, usages and validity (cert-manager writes
//! the same data keys, `ca.crt` included); and, for each `caBundle` target, the CA injector
//! annotation that hands it to cert-manager. A Certificate issues into the existing Secret at
//! once: a new key and leaf from the same CA, and `ca.crt` becomes that CA alone. That drops
//! the previous CA certgen keeps in the bundles after a rotation, which is safe only once no
//! consumer presents a leaf it signed: so a hand-over is refused unless `check` finds nothing
//! due and no rotation in progress. After it, the objects carry [`HANDED_OVER`], and certgen's
//! runs stand down on those Secrets (`plan/handed.rs`).
//!
//! Writing the objects (`--apply`) is the caller's, through the Kubernetes adapter.

use std::time::Duration;

use serde_json::{Value, json};

use crate::certmanager::{HANDED_OVER, INJECT_CA_FROM};
use crate::config::{Config, TlsSecret, WebhookKind};
use crate::pki::KeyAlgorithm;
use crate::plan::Invalid;
use crate::report::CheckReport;
use crate::secret::Layout;

/// What a hand-over creates, in the order it must be applied.
#[derive(Debug, Clone)]
pub struct HandOver {
    /// The CA `Issuer` on certgen's CA Secret (first: the Certificates need it ready).
    pub issuer: Value,
    /// One `Certificate` per TLS Secret.
    pub certificates: Vec<Value>,
    /// The annotation that hands each `caBundle` target to cert-manager's CA injector.
    pub targets: Vec<TargetAnnotation>,
}

/// A `caBundle` target and the CA injector annotation it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetAnnotation {
    pub kind: WebhookKind,
    pub name: String,
    /// `namespace/certificate` of the Certificate whose Secret it follows.
    pub value: String,
}

impl TargetAnnotation {
    /// The annotation key.
    pub const KEY: &'static str = INJECT_CA_FROM;
}

/// Whether cert-manager can take over `config`'s Secrets as they are laid out: it issues
/// only TLS Secrets in the `kubernetes.io/tls` layout, and its CA Issuer reads only that
/// layout too. Refused (with nothing written) otherwise.
fn layouts_fit(config: &Config) -> Result<(), Invalid> {
    if config.tls.is_empty() {
        return Err(Invalid {
            object: format!("profile {}", config.profile),
            problem: "declares no TLS Secret: nothing for cert-manager to issue".into(),
            fix: "nothing was written".into(),
        });
    }
    if let Some(t) = config.tls.iter().find(|t| t.layout != Layout::default()) {
        return Err(Invalid {
            object: format!("Secret {}/{}", config.namespace, t.name),
            problem: format!(
                "keeps its certificate in data keys {}, {}, {} of a {} Secret, and cert-manager writes only ca.crt, tls.crt and tls.key in a kubernetes.io/tls Secret",
                t.layout.bundle, t.layout.cert, t.layout.key, t.layout.type_
            ),
            fix: "nothing was written; its consumers would lose their files: keep certgen for this profile".into(),
        });
    }
    if config.ca.layout != Layout::default() {
        let l = &config.ca.layout;
        return Err(Invalid {
            object: format!("Secret {}/{}", config.namespace, config.ca.secret_name),
            problem: format!(
                "keeps the CA in data keys {} and {} of a {} Secret, and cert-manager's CA Issuer reads only tls.crt and tls.key",
                l.cert, l.key, l.type_
            ),
            fix: "nothing was written; the tools that read this CA Secret would lose it: keep certgen for this profile".into(),
        });
    }
    Ok(())
}

/// The Certificate cert-manager issues Secret `t` from, with the Issuer `issuer_name`, marked
/// with `marks` as certgen's hand-over.
fn certificate(config: &Config, t: &TlsSecret, issuer_name: &str, marks: &Value) -> Value {
    let leaf = &t.leaf;
    let mut usages = vec!["digital signature"];
    if is_rsa(leaf.key_algorithm) {
        usages.push("key encipherment");
    }
    if leaf.usages.server {
        usages.push("server auth");
    }
    if leaf.usages.client {
        usages.push("client auth");
    }
    let mut spec = json!({
        "secretName": t.name,
        "commonName": leaf.common_name,
        "duration": go_duration(leaf.validity),
        "renewBefore": go_duration(t.renew_before),
        "privateKey": private_key(leaf.key_algorithm),
        "usages": usages,
        "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": issuer_name},
        "secretTemplate": {"annotations": marks, "labels": config.labels},
        "revisionHistoryLimit": 1,
    });
    if !leaf.dns_names.is_empty() {
        spec["dnsNames"] = json!(leaf.dns_names);
    }
    if !leaf.ip_addresses.is_empty() {
        let ips: Vec<String> = leaf.ip_addresses.iter().map(|i| i.to_string()).collect();
        spec["ipAddresses"] = json!(ips);
    }
    json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": t.name, "namespace": config.namespace, "annotations": marks},
        "spec": spec,
    })
}

/// The hand-over of `config`'s Secrets, judged on `check`'s report of what is stored.
pub fn plan(config: &Config, check: &CheckReport) -> Result<HandOver, Invalid> {
    layouts_fit(config)?;
    if !check.healthy || check.rotation.is_some() {
        let mut problems: Vec<String> = check
            .secrets
            .iter()
            .flat_map(|r| r.problems.iter().map(move |p| format!("{}: {p}", r.secret)))
            .collect();
        if let Some(r) = &check.rotation {
            problems.insert(0, format!("a rotation is in progress ({r})"));
        }
        return Err(Invalid {
            object: format!("namespace {}", config.namespace),
            problem: format!(
                "certgen check does not find the Secrets settled: {}",
                problems.join("; ")
            ),
            fix: "nothing was written. cert-manager replaces each bundle with its issuing CA alone, which is safe only once every consumer presents a leaf from the active CA: run certgen (the CronJob does) until `certgen check` exits 0, then hand over".into(),
        });
    }
    let ns = &config.namespace;
    let issuer_name = config.ca.secret_name.clone();
    let marks = json!({ HANDED_OVER: config.profile });
    let issuer = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Issuer",
        "metadata": {"name": issuer_name, "namespace": ns, "annotations": marks},
        "spec": {"ca": {"secretName": config.ca.secret_name}},
    });
    let certificates = config
        .tls
        .iter()
        .map(|t| certificate(config, t, &issuer_name, &marks))
        .collect();
    let targets = config
        .webhooks
        .iter()
        .map(|w| TargetAnnotation {
            kind: w.kind,
            name: w.name.clone(),
            value: format!("{ns}/{}", w.bundle_from),
        })
        .collect();
    Ok(HandOver {
        issuer,
        certificates,
        targets,
    })
}

impl HandOver {
    /// The objects as YAML documents, with what to do with the `caBundle` targets in comments:
    /// what `certgen handover cert-manager` prints.
    pub fn to_yaml(&self, config: &Config) -> String {
        let mut out = format!(
            "# cert-manager objects that continue what certgen wrote in namespace {} (profile {}).\n\
             # Apply the Issuer first; each Certificate then issues into its existing Secret from the\n\
             # same CA. certgen's runs stand down on these Secrets once the Certificates exist.\n\
             # `certgen handover cert-manager --apply` does all of it and waits for each object.\n",
            config.namespace, config.profile
        );
        for object in std::iter::once(&self.issuer).chain(&self.certificates) {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(object).expect("JSON values serialize"));
        }
        for t in &self.targets {
            out.push_str(&format!(
                "# {} {} follows Secret {}'s ca.crt. Hand it to cert-manager's CA injector\n\
                 # (certgen then never writes it):\n\
                 #   kubectl annotate {} {} {}={}\n",
                t.kind.as_str(),
                t.name,
                t.value.rsplit('/').next().unwrap_or_default(),
                t.kind.as_str().to_lowercase(),
                t.name,
                TargetAnnotation::KEY,
                t.value
            ));
        }
        out
    }
}

fn is_rsa(k: KeyAlgorithm) -> bool {
    matches!(
        k,
        KeyAlgorithm::Rsa2048 | KeyAlgorithm::Rsa3072 | KeyAlgorithm::Rsa4096
    )
}

/// cert-manager's `privateKey` for certgen's key algorithm: the same algorithm and size,
/// PKCS#8 as certgen writes, a new key on every issuance as certgen does.
fn private_key(k: KeyAlgorithm) -> Value {
    let (algorithm, size) = match k {
        KeyAlgorithm::EcdsaP256 => ("ECDSA", Some(256)),
        KeyAlgorithm::EcdsaP384 => ("ECDSA", Some(384)),
        KeyAlgorithm::Ed25519 => ("Ed25519", None),
        KeyAlgorithm::Rsa2048 => ("RSA", Some(2048)),
        KeyAlgorithm::Rsa3072 => ("RSA", Some(3072)),
        KeyAlgorithm::Rsa4096 => ("RSA", Some(4096)),
    };
    let mut key = json!({"algorithm": algorithm, "encoding": "PKCS8", "rotationPolicy": "Always"});
    if let Some(size) = size {
        key["size"] = json!(size);
    }
    key
}

/// A duration as Go's `time.ParseDuration` reads it (cert-manager's `duration` fields), in
/// the largest whole unit.
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        crate::config::test_profile(Some("ns"))
    }

    fn healthy(config: &Config) -> CheckReport {
        CheckReport::new(
            config,
            "namespace ns".into(),
            None,
            vec![],
            vec![],
            crate::report::NextRun::Nothing,
            time::OffsetDateTime::UNIX_EPOCH,
        )
    }

    #[test]
    fn the_objects_continue_what_certgen_wrote() {
        let config = config();
        let h = plan(&config, &healthy(&config)).unwrap();
        assert_eq!(h.issuer["spec"]["ca"]["secretName"], "envoy-gateway-ca");
        assert_eq!(
            h.issuer["metadata"]["annotations"][HANDED_OVER],
            "envoy-gateway"
        );
        let names: Vec<&str> = h
            .certificates
            .iter()
            .map(|c| c["spec"]["secretName"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["envoy-gateway", "envoy", "envoy-rate-limit"]);
        let gw = &h.certificates[0]["spec"];
        assert_eq!(gw["commonName"], "envoy-gateway");
        assert_eq!(
            gw["dnsNames"],
            json!([
                "envoy-gateway",
                "envoy-gateway.ns",
                "envoy-gateway.ns.svc",
                "envoy-gateway.ns.svc.cluster.local"
            ])
        );
        assert_eq!(
            gw["privateKey"],
            json!({"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8", "rotationPolicy": "Always"})
        );
        assert_eq!(
            gw["usages"],
            json!(["digital signature", "server auth", "client auth"])
        );
        assert_eq!(gw["duration"], "43800h");
        assert_eq!(gw["renewBefore"], "720h");
        assert_eq!(gw["issuerRef"]["name"], "envoy-gateway-ca");
        assert_eq!(
            gw["secretTemplate"]["annotations"][HANDED_OVER],
            "envoy-gateway"
        );
        assert_eq!(
            gw["secretTemplate"]["labels"]["control-plane"],
            "envoy-gateway"
        );
        assert_eq!(
            h.targets,
            [TargetAnnotation {
                kind: WebhookKind::MutatingWebhookConfiguration,
                name: "envoy-gateway-topology-injector.ns".into(),
                value: "ns/envoy-gateway".into(),
            }]
        );
        let yaml = h.to_yaml(&config);
        assert_eq!(yaml.matches("\n---\n").count() + 1, 4 + 1, "{yaml}");
        assert!(yaml.contains("kubectl annotate mutatingwebhookconfiguration envoy-gateway-topology-injector.ns cert-manager.io/inject-ca-from=ns/envoy-gateway"), "{yaml}");
        // What is printed reads back as the objects.
        let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(docs[0], h.issuer);
        assert_eq!(docs[1..], h.certificates[..]);
    }

    #[test]
    fn rsa_keys_keep_their_size_and_key_encipherment() {
        let mut config = config();
        config.tls[0].leaf.key_algorithm = KeyAlgorithm::Rsa3072;
        let h = plan(&config, &healthy(&config)).unwrap();
        let spec = &h.certificates[0]["spec"];
        assert_eq!(spec["privateKey"]["algorithm"], "RSA");
        assert_eq!(spec["privateKey"]["size"], 3072);
        assert_eq!(
            spec["usages"],
            json!([
                "digital signature",
                "key encipherment",
                "server auth",
                "client auth"
            ])
        );
    }

    #[test]
    fn refused_while_a_rotation_runs_or_for_other_data_keys() {
        let config = config();
        let rotating = CheckReport::new(
            &config,
            "namespace ns".into(),
            Some("trust since 2026-11-25T00:00:00Z".into()),
            vec![],
            vec![],
            crate::report::NextRun::Nothing,
            time::OffsetDateTime::UNIX_EPOCH,
        );
        let e = plan(&config, &rotating).unwrap_err();
        assert!(e.problem.contains("a rotation is in progress"), "{e}");
        assert!(e.fix.contains("nothing was written"), "{e}");
        let mut other = config.clone();
        other.tls[1].layout.bundle = "ca".into();
        let e = plan(&other, &healthy(&other)).unwrap_err();
        assert_eq!(e.object, "Secret ns/envoy");
        assert!(
            e.problem.contains("keeps its certificate in data keys ca,"),
            "{e}"
        );
    }

    #[test]
    fn durations_read_back_in_go() {
        assert_eq!(go_duration(Duration::from_secs(3600 * 24)), "24h");
        assert_eq!(go_duration(Duration::from_secs(90)), "90s");
        assert_eq!(go_duration(Duration::from_secs(120)), "2m");
    }
}
