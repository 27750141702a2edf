use super::*;
use std::collections::BTreeMap;

fn resolve_text(text: &str, overrides: &Overrides, env: &Env) -> Result<Config, String> {
    let file = ConfigFile::parse(text)?;
    Config::from_file(file, overrides, env)
}

fn eg() -> &'static str {
    crate::profiles::builtin("envoy-gateway").unwrap()
}

#[test]
fn envoy_gateway_profile_matches_envoy_gateway_certgen() {
    let c = Config::resolve(
        &Source::Profile("envoy-gateway".into()),
        &Overrides::default(),
        &Env::default(),
    )
    .unwrap();
    assert_eq!(c.namespace, "envoy-gateway-system");
    assert_eq!(c.ca.secret_name, "envoy-gateway-ca");
    let names: Vec<_> = c.tls.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["envoy-gateway", "envoy", "envoy-rate-limit"]);
    assert_eq!(
        c.tls[0].leaf.dns_names,
        [
            "envoy-gateway",
            "envoy-gateway.envoy-gateway-system",
            "envoy-gateway.envoy-gateway-system.svc",
            "envoy-gateway.envoy-gateway-system.svc.cluster.local"
        ]
    );
    assert_eq!(c.tls[1].leaf.dns_names, ["*.envoy-gateway-system"]);
    assert_eq!(c.tls[2].leaf.dns_names, ["*.envoy-gateway-system"]);
    assert_eq!(
        c.hmac,
        [HmacSecret {
            name: "envoy-oidc-hmac".into(),
            key: "hmac-secret".into(),
            bytes: 32
        }]
    );
    assert_eq!(c.ca.spec.key_algorithm, KeyAlgorithm::EcdsaP256);
}

#[test]
fn namespace_precedence_is_flag_then_certgen_env_then_envoy_env_then_file() {
    let env = Env {
        certgen_namespace: Some("from-certgen-env".into()),
        envoy_gateway_namespace: Some("from-eg-env".into()),
        cluster_domain: Some("corp.example".into()),
    };
    let flag = Overrides {
        namespace: Some("from-flag".into()),
        cluster_domain: Some("flag.example".into()),
        ..Overrides::default()
    };
    let c = resolve_text(eg(), &flag, &env).unwrap();
    assert_eq!(
        (c.namespace.as_str(), c.cluster_domain.as_str()),
        ("from-flag", "flag.example")
    );
    let c = resolve_text(eg(), &Overrides::default(), &env).unwrap();
    assert_eq!(
        (c.namespace.as_str(), c.cluster_domain.as_str()),
        ("from-certgen-env", "corp.example")
    );
    assert!(
        c.tls[0]
            .leaf
            .dns_names
            .contains(&"envoy-gateway.from-certgen-env.svc.corp.example".to_string())
    );
    let env = Env {
        envoy_gateway_namespace: Some("from-eg-env".into()),
        ..Env::default()
    };
    let c = resolve_text(eg(), &Overrides::default(), &env).unwrap();
    assert_eq!(c.namespace, "from-eg-env");
    assert_eq!(c.cluster_domain, "cluster.local");
    // Envoy Gateway's variable is Envoy Gateway's: another control plane keeps its namespace,
    // and an empty value is no error there.
    for env in [
        env,
        Env {
            envoy_gateway_namespace: Some(String::new()),
            ..Env::default()
        },
    ] {
        for (profile, namespace) in [
            ("contour", "projectcontour"),
            ("cilium-hubble", "kube-system"),
        ] {
            let text = crate::profiles::builtin(profile).unwrap();
            let c = resolve_text(text, &Overrides::default(), &env).unwrap();
            assert_eq!(c.namespace, namespace, "{profile}");
        }
    }
}

#[test]
fn unknown_fields_are_rejected_with_their_name() {
    let text = eg().replace("renewBefore: 90d", "renewBefore: 90d\n  pathLen: 3");
    let err = resolve_text(&text, &Overrides::default(), &Env::default()).unwrap_err();
    assert!(err.contains("pathLen"), "{err}");
}

#[test]
fn validation_names_the_field() {
    let cases = [
        (
            "validity: 1825d\n    renewBefore: 30d",
            "validity: 1825d\n    renewBefore: 2000d",
            "secrets[0].renewBefore",
        ),
        (
            "keyAlgorithm: ecdsa-p256\n  validity",
            "keyAlgorithm: dsa-512\n  validity",
            "dsa-512",
        ),
        (
            "- envoy-gateway.{namespace}.svc\n",
            "- envoy-gateway.{nmspace}.svc\n",
            "{nmspace}",
        ),
        (
            "name: envoy-rate-limit",
            "name: Envoy_Rate",
            "secrets[2].name",
        ),
        ("name: envoy-rate-limit", "name: envoy", "used twice"),
        ("validity: 1825d", "validity: forever", "forever"),
        ("bytes: 32", "bytes: 4", "secrets[3].bytes"),
        (
            "- \"*.{namespace}\"\n    usages: [server, client]\n    keyAlgorithm: ecdsa-p256\n    validity: 1825d\n    renewBefore: 30d\n  - name: envoy-rate-limit",
            "- \"a.*.{namespace}\"\n    usages: [server, client]\n    keyAlgorithm: ecdsa-p256\n    validity: 1825d\n    renewBefore: 30d\n  - name: envoy-rate-limit",
            "secrets[1].dnsNames[0]",
        ),
    ];
    for (from, to, expect) in cases {
        let text = eg().replacen(from, to, 1);
        assert_ne!(text, eg(), "case {expect} did not change the profile");
        let err = resolve_text(&text, &Overrides::default(), &Env::default()).unwrap_err();
        assert!(err.contains(expect), "expected {expect:?} in: {err}");
    }
    let bad_ns = Overrides {
        namespace: Some("Not_A_Namespace".into()),
        ..Overrides::default()
    };
    let err = resolve_text(eg(), &bad_ns, &Env::default()).unwrap_err();
    assert!(err.contains("namespace \"Not_A_Namespace\""), "{err}");
}

#[test]
fn yaml_errors_carry_a_line_number() {
    let err = resolve_text(
        "name: x\nnamespace: [unclosed\n",
        &Overrides::default(),
        &Env::default(),
    )
    .unwrap_err();
    assert!(err.contains("line") || err.contains(':'), "{err}");
}

#[test]
fn consumers_are_validated_against_the_secrets() {
    let c = resolve_text(eg(), &Overrides::default(), &Env::default()).unwrap();
    let names: Vec<_> = c.consumers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["envoy-gateway", "envoy-ratelimit", "envoy-proxies"]);
    let probe = c.consumers[0].probe.as_ref().unwrap();
    assert_eq!(
        (probe.port, probe.server_name.as_str()),
        (18000, "envoy-gateway.envoy-gateway-system.svc")
    );
    assert_eq!(c.consumers[1].reload, Reload::Restart);
    assert_eq!(
        c.consumers[2].workload,
        Some(Workload::Selector(
            "app.kubernetes.io/managed-by=envoy-gateway,app.kubernetes.io/component=proxy".into()
        ))
    );
    let cases = [
        (
            "mounts: [envoy-rate-limit]",
            "mounts: [rate-limit]",
            "consumers[1].mounts[0]",
        ),
        (
            "    deployment: envoy-ratelimit\n",
            "",
            "restart needs a workload",
        ),
        (
            "    deployment: envoy-ratelimit\n",
            "    kind: Statefulset\n    workload: envoy-ratelimit\n",
            "consumers[1] (envoy-ratelimit).kind \"Statefulset\" is not a workload kind certgen can restart; write one of Deployment, StatefulSet, DaemonSet",
        ),
        (
            "    deployment: envoy-ratelimit\n",
            "    kind: StatefulSet\n    deployment: envoy-ratelimit\n",
            "consumers[1] (envoy-ratelimit): deployment: envoy-ratelimit names a Deployment, but its kind is StatefulSet; write workload: envoy-ratelimit",
        ),
        (
            "    deployment: envoy-ratelimit\n",
            "    workload: envoy-ratelimit\n    deployment: envoy-ratelimit\n",
            "give either workload or deployment",
        ),
        (
            "    deployment: envoy-ratelimit\n",
            "    kind: DaemonSet\n    workload: envoy-ratelimit\n    selector: a=b\n",
            "give either workload or selector",
        ),
        (
            "selector: app.kubernetes.io/managed-by=envoy-gateway,",
            "selector: oops,",
            "consumers[2].selector",
        ),
        (
            "      port: 18000",
            "      port: 0",
            "consumers[0].probe.port",
        ),
        (
            "    reload: hot\n    mounts: [envoy]",
            "    reload: sometimes\n    mounts: [envoy]",
            "sometimes",
        ),
    ];
    for (from, to, expect) in cases {
        let text = eg().replacen(from, to, 1);
        assert_ne!(text, eg(), "case {expect} did not change the profile");
        let err = resolve_text(&text, &Overrides::default(), &Env::default()).unwrap_err();
        assert!(err.contains(expect), "expected {expect:?} in: {err}");
    }
}

#[test]
fn a_consumer_may_be_any_workload_kind_and_defaults_to_a_deployment() {
    let c = resolve_text(eg(), &Overrides::default(), &Env::default()).unwrap();
    assert!(c.consumers.iter().all(|c| c.kind == Kind::Deployment));
    for kind in Kind::ALL {
        let text = eg().replacen(
            "    deployment: envoy-ratelimit\n",
            &format!("    kind: {kind}\n    workload: envoy-ratelimit\n"),
            1,
        );
        let c = resolve_text(&text, &Overrides::default(), &Env::default()).unwrap();
        assert_eq!(c.consumers[1].kind, kind);
        assert_eq!(
            c.consumers[1].workload,
            Some(Workload::Name("envoy-ratelimit".into()))
        );
    }
}

#[test]
fn envoy_gateway_profile_keeps_envoy_gateways_labels_and_webhook() {
    let c = resolve_text(eg(), &Overrides::default(), &Env::default()).unwrap();
    assert_eq!(
        c.labels,
        BTreeMap::from([("control-plane".to_string(), "envoy-gateway".to_string())])
    );
    assert_eq!(
        c.webhooks,
        [Webhook {
            kind: WebhookKind::MutatingWebhookConfiguration,
            name: "envoy-gateway-topology-injector.envoy-gateway-system".into(),
            bundle_from: "envoy-gateway".into(),
            bundle_key: "ca.crt".into(),
        }]
    );
}

#[test]
fn envoy_gateway_profile_lifetimes_are_no_shorter_than_envoy_gateways() {
    // Envoy Gateway v1.9.1 (internal/crypto/certgen.go): CA and leaves valid 365 * 5 days.
    let c = resolve_text(eg(), &Overrides::default(), &Env::default()).unwrap();
    let five_years = std::time::Duration::from_secs(1825 * 86_400);
    assert!(c.ca.spec.validity >= five_years);
    for t in &c.tls {
        assert!(t.leaf.validity >= five_years, "{}", t.name);
    }
}

#[test]
fn disable_topology_injector_removes_only_the_injector() {
    let text = eg().replace(
        "webhooks:\n",
        "webhooks:\n  - kind: ValidatingWebhookConfiguration\n    name: other.{namespace}\n    caBundleFrom: envoy\n",
    );
    let env = Env {
        envoy_gateway_namespace: Some("eg".into()),
        ..Env::default()
    };
    let mut c = resolve_text(&text, &Overrides::default(), &env).unwrap();
    assert_eq!(c.webhooks.len(), 2);
    assert!(c.disable_topology_injector());
    assert_eq!(c.webhooks.len(), 1);
    assert_eq!(c.webhooks[0].name, "other.eg");
    assert!(!c.disable_topology_injector());
}

#[test]
fn bad_labels_and_webhooks_name_the_field() {
    let cases = [
        (
            "control-plane: envoy-gateway",
            "control-plane: -bad",
            "labels.control-plane",
        ),
        (
            "control-plane: envoy-gateway",
            "app.kubernetes.io/managed-by: helm",
            "certgen sets this label itself",
        ),
        (
            "control-plane: envoy-gateway",
            "bad key!: x",
            "is not a label key",
        ),
        (
            "caBundleFrom: envoy-gateway",
            "caBundleFrom: envoy-oidc-hmac",
            "webhooks[0].caBundleFrom",
        ),
        (
            "caBundleFrom: envoy-gateway",
            "caBundleFrom: nope",
            "not a TLS Secret",
        ),
        (
            "name: envoy-gateway-topology-injector.{namespace}",
            "name: x.{clusterDomain}",
            "webhooks[0].name",
        ),
        (
            "name: envoy-gateway-topology-injector.{namespace}",
            "name: Bad_Name",
            "webhooks[0].name",
        ),
        (
            "kind: MutatingWebhookConfiguration",
            "kind: Deployment",
            "Deployment",
        ),
    ];
    for (from, to, want) in cases {
        let text = eg().replace(from, to);
        assert_ne!(text, eg(), "{from} is in the profile");
        let err = resolve_text(&text, &Overrides::default(), &Env::default()).unwrap_err();
        assert!(err.contains(want), "{to}: {err}");
    }
}

#[test]
fn empty_envoy_gateway_namespace_is_refused_unless_overridden() {
    let env = Env {
        envoy_gateway_namespace: Some(String::new()),
        ..Env::default()
    };
    let err = resolve_text(eg(), &Overrides::default(), &env).unwrap_err();
    assert!(
        err.contains("ENVOY_GATEWAY_NAMESPACE is set but empty"),
        "{err}"
    );
    let flag = Overrides {
        namespace: Some("ns1".into()),
        ..Overrides::default()
    };
    assert_eq!(resolve_text(eg(), &flag, &env).unwrap().namespace, "ns1");
    let certgen_env = Env {
        certgen_namespace: Some("ns2".into()),
        ..env
    };
    let c = resolve_text(eg(), &Overrides::default(), &certgen_env).unwrap();
    assert_eq!(c.namespace, "ns2");
}

#[test]
fn local_default_is_envoy_gateways_config_home() {
    let home = Path::new("/home/u");
    let dir = |local, config_home: Option<&str>| {
        local_dir(local, config_home.map(Path::new), Some(home)).unwrap()
    };
    assert_eq!(dir(None, None), None);
    assert_eq!(dir(None, Some("/c")), None);
    assert_eq!(
        dir(Some(None), None),
        Some(PathBuf::from("/home/u/.config/envoy-gateway/certs"))
    );
    assert_eq!(dir(Some(None), Some("/c")), Some(PathBuf::from("/c/certs")));
    assert_eq!(
        dir(Some(Some(PathBuf::from("/d"))), Some("/c")),
        Some(PathBuf::from("/d"))
    );
    let err = local_dir(Some(None), None, None).unwrap_err();
    assert!(err.message.contains("--config-home"), "{err}");
}

#[test]
fn builtin_profiles_read_the_same_as_json_and_yaml() {
    for name in crate::profiles::NAMES {
        let yaml = ConfigFile::parse(crate::profiles::builtin(name).unwrap()).unwrap();
        let json = ConfigFile::parse_json(crate::profiles::builtin_json(name).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&json).unwrap(),
            serde_json::to_value(&yaml).unwrap(),
            "profile {name}: the JSON build.rs made differs from the YAML"
        );
    }
}

#[test]
fn a_tls_secret_may_declare_its_data_keys_and_type() {
    let base = "name: w\nnamespace: ns\nca:\n  commonName: w-ca\n  validity: 3650d\n  renewBefore: 90d\nsecrets:\n  - name: w\n    type: tls\n    dnsNames: [w.ns.svc]\n";
    let resolve = |extra: &str| {
        resolve_text(
            &format!("{base}{extra}"),
            &Overrides::default(),
            &Env::default(),
        )
    };
    // The default: certgen's own.
    let c = resolve("").unwrap();
    assert_eq!(c.tls[0].layout, crate::secret::Layout::default());
    // kube-webhook-certgen's.
    let c = resolve("    secretType: Opaque\n    dataKeys: {bundle: ca, cert: cert, key: key}\n")
        .unwrap();
    let l = &c.tls[0].layout;
    assert_eq!(
        (l.bundle.as_str(), l.cert.as_str(), l.key.as_str(), l.type_),
        ("ca", "cert", "key", "Opaque")
    );
    assert_eq!(c.layout_of("w"), *l);
    // Only the bundle renamed in a kubernetes.io/tls Secret.
    let c = resolve("    dataKeys: {bundle: ca}\n").unwrap();
    assert_eq!(c.tls[0].layout.bundle, "ca");
    // Each rule, named.
    for (extra, expect) in [
        (
            "    dataKeys: {cert: cert, key: key}\n",
            "must hold its certificate in tls.crt",
        ),
        (
            "    secretType: Opaque\n    dataKeys: {bundle: x, cert: x}\n",
            "secrets[0].dataKeys: bundle, cert and key must be three different keys",
        ),
        (
            "    secretType: Opaque\n    dataKeys: {key: a/b}\n",
            "secrets[0].dataKeys.key \"a/b\"",
        ),
        (
            "    secretType: kubernetes.io/basic-auth\n",
            "secrets[0].secretType \"kubernetes.io/basic-auth\"",
        ),
        ("    dataKeys: {crt: x}\n", "crt"),
    ] {
        let err = resolve(extra).unwrap_err();
        assert!(err.contains(expect), "expected {expect:?} in: {err}");
    }
    // Not for HMAC Secrets.
    let hmac = format!(
        "{}  - name: h\n    type: hmac\n    secretType: Opaque\n",
        base
    );
    let err = resolve_text(&hmac, &Overrides::default(), &Env::default()).unwrap_err();
    assert!(err.contains("secrets[1]: commonName"), "{err}");
}

#[test]
fn the_ca_secret_may_declare_its_data_keys_and_type() {
    let head =
        "name: w\nnamespace: ns\nca:\n  commonName: w-ca\n  validity: 3650d\n  renewBefore: 90d\n";
    let tail = "secrets:\n  - name: w\n    type: tls\n    dnsNames: [w.ns.svc]\n";
    let resolve = |extra: &str| {
        resolve_text(
            &format!("{head}{extra}{tail}"),
            &Overrides::default(),
            &Env::default(),
        )
    };
    assert_eq!(
        resolve("").unwrap().ca.layout,
        crate::secret::Layout::default()
    );
    // Cilium's shared `cilium-ca`.
    let c = resolve(
        "  secretType: Opaque\n  dataKeys: {cert: ca.crt, key: ca.key, bundle: bundle.crt}\n",
    )
    .unwrap();
    let l = &c.ca.layout;
    assert_eq!(
        (l.bundle.as_str(), l.cert.as_str(), l.key.as_str(), l.type_),
        ("bundle.crt", "ca.crt", "ca.key", "Opaque")
    );
    // The CA's key is private by the layout, the leaves' layouts untouched.
    assert_eq!(c.private_data_keys(), ["ca.key", "next.key", "tls.key"]);
    assert_eq!(c.tls[0].layout, crate::secret::Layout::default());
    for (extra, expect) in [
        (
            "  dataKeys: {cert: ca.crt, key: ca.key, bundle: b.crt}\n",
            "ca: a kubernetes.io/tls Secret must hold its certificate in tls.crt",
        ),
        (
            "  secretType: Opaque\n  dataKeys: {cert: ca.crt, key: ca.key}\n",
            "ca.dataKeys: bundle, cert and key must be three different keys",
        ),
        (
            "  secretType: Opaque\n  dataKeys: {cert: ca.crt, key: next.key, bundle: b.crt}\n",
            "ca.dataKeys: next.key holds a staged rotation's pending CA",
        ),
    ] {
        let err = resolve(extra).unwrap_err();
        assert!(err.contains(expect), "expected {expect:?} in: {err}");
    }
}

#[test]
fn a_client_certificate_may_have_no_san_but_a_server_certificate_may_not() {
    let base = "name: w\nnamespace: ns\nca:\n  commonName: w-ca\n  validity: 3650d\n  renewBefore: 90d\nsecrets:\n  - name: w\n    type: tls\n    commonName: admin-w\n";
    let resolve = |extra: &str| {
        resolve_text(
            &format!("{base}{extra}"),
            &Overrides::default(),
            &Env::default(),
        )
    };
    let c = resolve("    usages: [client]\n").unwrap();
    assert!(c.tls[0].leaf.dns_names.is_empty() && c.tls[0].leaf.ip_addresses.is_empty());
    assert_eq!(c.tls[0].leaf.common_name, "admin-w");
    for extra in [
        "    usages: [server]\n",
        "    usages: [server, client]\n",
        "",
    ] {
        let err = resolve(extra).unwrap_err();
        assert!(
            err.contains(
                "secrets[0]: a server certificate needs at least one of dnsNames or ipAddresses"
            ),
            "{extra:?}: {err}"
        );
    }
}

#[test]
fn the_cilium_clustermesh_profile_names_each_cluster_in_its_certificates() {
    let resolve = |name: Option<&str>| {
        Config::resolve(
            &Source::Profile("cilium-clustermesh".into()),
            &Overrides {
                cluster_name: name.map(String::from),
                ..Overrides::default()
            },
            &Env::default(),
        )
    };
    let err = resolve(None).unwrap_err().to_string();
    assert!(
        err.contains("uses {cluster}") && err.contains("--cluster-name"),
        "{err}"
    );
    let c = resolve(Some("mesh-1")).unwrap();
    assert_eq!(c.namespace, "kube-system");
    assert_eq!(c.ca.secret_name, "cilium-ca");
    assert_eq!(
        (
            c.ca.layout.cert.as_str(),
            c.ca.layout.key.as_str(),
            c.ca.layout.type_
        ),
        ("ca.crt", "ca.key", "Opaque")
    );
    let leaf = |n: &str| &c.tls.iter().find(|t| t.name == n).unwrap().leaf;
    let server = leaf("clustermesh-apiserver-server-cert");
    assert_eq!(server.common_name, "clustermesh-apiserver.kube-system.svc");
    assert_eq!(
        server.dns_names,
        ["clustermesh-apiserver.kube-system.svc", "*.mesh.cilium.io"]
    );
    assert_eq!(
        server.ip_addresses,
        [
            "127.0.0.1".parse::<std::net::IpAddr>().unwrap(),
            "::1".parse().unwrap()
        ]
    );
    assert_eq!(
        leaf("clustermesh-apiserver-admin-cert").common_name,
        "admin-mesh-1"
    );
    assert_eq!(
        leaf("clustermesh-apiserver-local-cert").common_name,
        "local-mesh-1"
    );
    assert_eq!(
        leaf("clustermesh-apiserver-remote-cert").common_name,
        "remote"
    );
    assert_eq!(
        leaf("hubble-server-certs").dns_names,
        ["*.mesh-1.hubble-grpc.cilium.io"]
    );
    // The clustermesh-apiserver's etcd reads its CA once: it is restarted, the agents are not.
    let reload = |n: &str| c.consumers.iter().find(|k| k.name == n).unwrap().reload;
    assert_eq!(reload("clustermesh-apiserver"), Reload::Restart);
    assert_eq!(reload("cilium-agent"), Reload::Hot);
}

#[test]
fn object_names_follow_the_api_servers_rule_not_a_labels() {
    use crate::config::{dns1123_label, dns1123_subdomain};
    // A Secret may be named with 100 characters and no dot (IsDNS1123Subdomain bounds the
    // whole name, not each label).
    assert_eq!(dns1123_subdomain(&"a".repeat(100)), Ok(()));
    assert_eq!(dns1123_subdomain(&format!("{}.b", "a".repeat(250))), Ok(()));
    assert!(dns1123_subdomain(&"a".repeat(254)).is_err());
    for bad in ["a..b", ".a", "a.", "-a", "a-", "A", "a_b", ""] {
        assert!(dns1123_subdomain(bad).is_err(), "{bad:?}");
    }
    // A namespace is a label: at most 63.
    assert_eq!(dns1123_label(&"a".repeat(63)), Ok(()));
    assert!(dns1123_label(&"a".repeat(64)).is_err());
}

/// A set's config: one CA, Hubble's per-cluster SAN, a per-member namespace.
const SET: &str = r#"
name: mesh
namespace: kube-system
ca: {commonName: Mesh CA, validity: 1095d, renewBefore: 90d}
secrets:
  - name: hubble-server-certs
    type: tls
    commonName: "*.{cluster}.hubble-grpc.cilium.io"
    dnsNames: ["*.{cluster}.hubble-grpc.cilium.io"]
  - name: admin
    type: tls
    commonName: "admin-{cluster}"
    dnsNames: ["admin.{namespace}.svc"]
    usages: [client]
clusters:
  - {context: kind-a, name: alpha}
  - {context: kind-b, name: beta, namespace: cilium}
"#;

fn set_config(text: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("set.yaml");
    std::fs::write(&path, text).unwrap();
    Config::resolve_for(&Source::File(path), overrides, &Env::default(), None, false)
}

#[test]
fn each_member_renders_cluster_and_namespace_from_its_clusters_entry() {
    let base = set_config(SET, &Overrides::default()).unwrap();
    assert_eq!(base.clusters.len(), 2);
    let a = base.member("kind-a").unwrap();
    let b = base.member("kind-b").unwrap();
    assert_eq!(a.cluster_name.as_deref(), Some("alpha"));
    assert_eq!(a.namespace, "kube-system");
    assert_eq!(a.tls[0].leaf.dns_names, ["*.alpha.hubble-grpc.cilium.io"]);
    assert_eq!(a.tls[0].leaf.common_name, "*.alpha.hubble-grpc.cilium.io");
    assert_eq!(a.tls[1].leaf.common_name, "admin-alpha");
    assert_eq!(b.namespace, "cilium");
    assert_eq!(b.tls[0].leaf.dns_names, ["*.beta.hubble-grpc.cilium.io"]);
    assert_eq!(b.tls[1].leaf.common_name, "admin-beta");
    assert_eq!(b.tls[1].leaf.dns_names, ["admin.cilium.svc"]);
    // The flag still wins over a member's namespace (flag > env > file).
    let flagged = set_config(
        SET,
        &Overrides {
            namespace: Some("ns-flag".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(flagged.member("kind-b").unwrap().namespace, "ns-flag");
}

#[test]
fn cluster_used_without_a_name_names_the_member_and_the_fix() {
    let unnamed = SET.replace(
        "{context: kind-b, name: beta, namespace: cilium}",
        "{context: kind-b}",
    );
    let base = set_config(&unnamed, &Overrides::default()).unwrap();
    let err = base.member("kind-b").unwrap_err().to_string();
    assert!(err.contains("member kind-b"), "{err}");
    assert!(err.contains("{cluster}"), "{err}");
    assert!(err.contains("- context: kind-b, name: NAME"), "{err}");
    // A context the list does not name, with {cluster}: refused, naming it.
    let err = base.member("kind-c").unwrap_err().to_string();
    assert!(err.contains("kind-c") && err.contains("clusters:"), "{err}");
    // No clusters: at all, a run in one cluster: --cluster-name is the fix.
    let single = SET.split("clusters:").next().unwrap();
    let file = ConfigFile::parse(single).unwrap();
    let err = Config::from_file(file.clone(), &Overrides::default(), &Env::default()).unwrap_err();
    assert!(err.contains("--cluster-name NAME"), "{err}");
    let named = Config::from_file(
        file,
        &Overrides {
            cluster_name: Some("solo".into()),
            ..Overrides::default()
        },
        &Env::default(),
    )
    .unwrap();
    assert_eq!(named.tls[1].leaf.common_name, "admin-solo");
}

#[test]
fn clusters_need_unique_contexts_and_names_and_two_members() {
    let twice = SET.replace("context: kind-b", "context: kind-a");
    let err = set_config(&twice, &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("clusters[1].context \"kind-a\" is also clusters[0]'s"),
        "{err}"
    );
    let same_name = SET.replace("name: beta", "name: alpha");
    let err = set_config(&same_name, &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("clusters[1].name \"alpha\" is also clusters[0]'s"),
        "{err}"
    );
    let bad_name = SET.replace("name: beta", "name: Beta_1");
    let err = set_config(&bad_name, &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("clusters[1].name \"Beta_1\""), "{err}");
    let one = SET.replace("  - {context: kind-b, name: beta, namespace: cilium}\n", "");
    let err = set_config(&one, &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("lists one cluster"), "{err}");
    let unknown = SET.replace("name: beta,", "nmae: beta,");
    assert!(set_config(&unknown, &Overrides::default()).is_err());
}

#[test]
fn context_flags_must_match_the_clusters_list() {
    let base = set_config(SET, &Overrides::default()).unwrap();
    let s = |v: &[&str]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    // No flag: the list is the set.
    assert_eq!(
        base.set_contexts(&[], false).unwrap(),
        Some(s(&["kind-a", "kind-b"]))
    );
    // The listed contexts in any order: the set, in the flags' order.
    assert_eq!(
        base.set_contexts(&s(&["kind-b", "kind-a"]), false).unwrap(),
        Some(s(&["kind-b", "kind-a"]))
    );
    // One listed context: a run in that member alone.
    assert_eq!(base.set_contexts(&s(&["kind-b"]), false).unwrap(), None);
    let err = base
        .set_contexts(&s(&["kind-a", "kind-c"]), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "do not match the config's clusters: list (kind-a, kind-b): they leave out kind-b"
        ),
        "{err}"
    );
    assert!(
        err.contains("add kind-c, which the list does not name"),
        "{err}"
    );
    assert!(
        err.contains("give no --context to run over the list"),
        "{err}"
    );
    // A context outside the list, alone: refused at resolution.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("set.yaml");
    std::fs::write(&path, SET).unwrap();
    let err = Config::resolve_for(
        &Source::File(path),
        &Overrides::default(),
        &Env::default(),
        Some("kind-c"),
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("context \"kind-c\" is not in the config's clusters: list"),
        "{err}"
    );
    // Without clusters:, several flags are the set, one is a single cluster.
    let eg = test_profile(None);
    assert_eq!(eg.set_contexts(&s(&["a"]), false).unwrap(), None);
    assert_eq!(
        eg.set_contexts(&s(&["a", "b"]), false).unwrap(),
        Some(s(&["a", "b"]))
    );
}

#[test]
fn cluster_name_flag_is_for_one_cluster_not_a_set() {
    let base = set_config(
        SET,
        &Overrides {
            cluster_name: Some("solo".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    // Named on the command line: the file's own values, not the first member's.
    assert_eq!(base.cluster_name.as_deref(), Some("solo"));
    let err = base.member("kind-a").unwrap_err().to_string();
    assert!(
        err.contains("--cluster-name names the one cluster"),
        "{err}"
    );
}

#[test]
fn one_cluster_commands_refuse_a_set_rather_than_take_its_first_member() {
    let base = set_config(SET, &Overrides::default()).unwrap();
    let err = base
        .one_cluster(&[], "certgen exporter")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("kind-a, kind-b") && err.contains("--cluster-name"),
        "{err}"
    );
    assert!(
        base.one_cluster(&["kind-b".into()], "certgen exporter")
            .is_ok()
    );
}

#[test]
fn cluster_trust_bundles_are_validated_and_carry_the_installations_labels() {
    let with = |entry: &str| format!("{}clusterTrustBundles:\n{entry}", eg());
    let c = resolve_text(
        &with("  - signerName: example.com/mesh\n    labels: {mesh: eg}\n"),
        &Overrides::default(),
        &Env::default(),
    )
    .unwrap();
    let b = &c.trust_bundles[0];
    assert_eq!(
        b.bundle_from, "envoy-gateway",
        "the first TLS Secret by default"
    );
    assert_eq!(b.labels.get("mesh").map(String::as_str), Some("eg"));
    assert_eq!(
        b.labels.get(BUNDLE_NAMESPACE_LABEL),
        Some(&c.namespace),
        "{:?}",
        b.labels
    );
    assert_eq!(
        b.labels.get(BUNDLE_FROM_LABEL).map(String::as_str),
        Some("envoy-gateway")
    );
    for (entry, want) in [
        (
            "  - signerName: mesh\n",
            "clusterTrustBundles[0].signerName",
        ),
        ("  - signerName: example/mesh\n", "not fully qualified"),
        (
            "  - signerName: example.com/mesh\n    bundleFrom: envoy-oidc-hmac\n",
            "clusterTrustBundles[0].bundleFrom",
        ),
        (
            "  - signerName: example.com/mesh\n    labels: {certgen.dev/namespace: x}\n",
            "certgen sets on every bundle",
        ),
        (
            "  - signerName: example.com/mesh\n  - signerName: example.com/mesh\n",
            "listed twice",
        ),
    ] {
        let err = resolve_text(&with(entry), &Overrides::default(), &Env::default()).unwrap_err();
        assert!(err.contains(want), "{entry}: {err}");
    }
}
