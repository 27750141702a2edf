//! The built-in `cilium-hubble` and `contour` profiles on the real API server, compared field by
//! field with what each tool's own binary wrote there: cilium/certgen run with the Cilium
//! chart's tls-cronjob arguments, and `contour certgen --kube --secrets-format=compact`, each
//! recorded once side by side (`bench/profile-compat`, which calls [`record_another_tools_run`])
//! into `tests/it/fixtures/profiles/`. CI has neither binary nor the network to build them, so
//! the recordings are the reference here. certgen runs with the Secrets verbs the migration
//! guides (`docs/migrating-from-cilium.md`, `-contour.md`) ask for (get, create, update), and a second run writes nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use super::{cluster, data_map, rule};
use crate::util::secret_summary::{assert_compatible, fixture, summarize};

/// certgen's or another tool's Secret, summarised, with the namespace written `NAMESPACE`.
fn summary_of(s: Secret, ns: &str) -> Value {
    let name = s.metadata.name.clone().unwrap();
    let created = s.metadata.creation_timestamp.clone().unwrap().0;
    let created = ::time::OffsetDateTime::from_unix_timestamp(created.as_second()).unwrap();
    let labels = s.metadata.labels.clone().unwrap_or_default();
    let r#type = s.type_.clone();
    let v = summarize(
        &name,
        r#type.as_deref(),
        Some(&labels),
        &data_map(s),
        created,
    );
    let text = serde_json::to_string(&v).unwrap().replace(ns, "NAMESPACE");
    serde_json::from_str(&text).unwrap()
}

async fn profile_matches_its_tool(profile: &str, tool: &str, key_instead: Option<&str>) {
    profile_matches_its_tool_with(profile, &[], tool, key_instead).await;
}

/// [`profile_matches_its_tool`] with `extra` arguments to certgen. A profile whose CA Secret
/// is the tool's own (`cilium-clustermesh` keeps `cilium-ca`) writes it in the tool's type and
/// keys; any other leaves the tool's CA Secret alone.
async fn profile_matches_its_tool_with(
    profile: &str,
    extra: &[&str],
    tool: &str,
    key_instead: Option<&str>,
) {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace(&format!("prof-{profile}")).await;
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "certgen",
            vec![rule(&[""], &["secrets"], &["get", "create", "update"])],
        )
        .await;
    let run = super::Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .args(["--profile", profile])
        .args(extra)
        .run();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);

    let recorded = fixture(tool);
    let api = c.secrets(&ns.name);
    let mut versions = BTreeMap::new();
    for theirs in recorded["secrets"].as_array().unwrap() {
        let name = theirs["name"].as_str().unwrap();
        let s = api.get(name).await.unwrap();
        versions.insert(name.to_string(), s.metadata.resource_version.clone());
        assert_compatible(theirs, &summary_of(s, &ns.name), key_instead);
    }
    // The tool's own CA Secret (cilium/certgen's `cilium-ca`) is another tool's key store:
    // certgen keeps its CA in the profile's CA Secret and leaves that name alone.
    let config = certgen::config::Config::resolve(
        &certgen::config::Source::Profile(profile.into()),
        &certgen::config::Overrides {
            cluster_name: extra
                .iter()
                .position(|a| *a == "--cluster-name")
                .map(|i| extra[i + 1].to_string()),
            ..Default::default()
        },
        &certgen::config::Env::default(),
    )
    .unwrap();
    for observed in recorded["notWrittenObserved"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = observed["name"].as_str().unwrap();
        if name != config.ca.secret_name {
            assert!(api.get_opt(name).await.unwrap().is_none(), "{name} written");
            continue;
        }
        // The tool's CA Secret, kept by the profile in the tool's layout: its type, and every
        // key the tool wrote (certgen adds its bundle beside them).
        let s = api.get(name).await.unwrap();
        assert_eq!(
            s.type_.as_ref().map(|t| json!(t)),
            Some(observed["type"].clone()),
            "{name}"
        );
        versions.insert(name.to_string(), s.metadata.resource_version.clone());
        let keys = data_map(s);
        for k in observed["keys"].as_array().unwrap() {
            assert!(keys.contains_key(k.as_str().unwrap()), "{name}: no {k}");
        }
    }

    // Nothing is due: a second run writes nothing.
    let again = super::Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .args(["--profile", profile])
        .args(extra)
        .run();
    assert_eq!(again.code, 0, "{}", again.stderr);
    for (name, rv) in versions {
        let now = api.get(&name).await.unwrap().metadata.resource_version;
        assert_eq!(now, rv, "{name} rewritten by a run with nothing due");
    }
}

#[tokio::test]
async fn cilium_hubble_profile_writes_what_cilium_certgen_writes() {
    profile_matches_its_tool("cilium-hubble", "cilium-certgen", None).await;
}

#[tokio::test]
async fn cilium_clustermesh_profile_writes_what_cilium_certgen_writes() {
    profile_matches_its_tool_with(
        "cilium-clustermesh",
        &["--cluster-name", "default"],
        "cilium-certgen-clustermesh",
        None,
    )
    .await;
}

#[tokio::test]
async fn contour_profile_writes_what_contour_certgen_writes() {
    // Contour's keys are RSA 2048; the profile uses certgen's default ECDSA P-256, which both
    // consumers (Go's crypto/tls in contour, BoringSSL in Envoy) accept.
    profile_matches_its_tool("contour", "contour-certgen", Some("ecdsa-p256")).await;
}

/// Records another tool's Secrets as a fixture: `bench/profile-compat` runs the tool into
/// namespace `$CERTGEN_RECORD_NAMESPACE`, then this (ignored, so only on demand) with
/// `$CERTGEN_RECORD_SECRETS` (the Secrets to compare, comma-separated),
/// `$CERTGEN_RECORD_NOT_WRITTEN` (the tool's Secrets certgen does not write) and
/// `$CERTGEN_RECORD_TOOL` (which tool and version, how it ran), and writes the fixture to
/// `$CERTGEN_RECORD_OUT`.
#[tokio::test]
#[ignore = "records a fixture from another tool's run: bench/profile-compat"]
async fn record_another_tools_run() {
    let Some(c) = cluster().await else { return };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("set {k}"));
    let ns = var("CERTGEN_RECORD_NAMESPACE");
    let api = c.secrets(&ns);
    let mut secrets = Vec::new();
    for name in var("CERTGEN_RECORD_SECRETS").split(',') {
        secrets.push(summary_of(api.get(name).await.unwrap(), &ns));
    }
    let not_written: Vec<String> = std::env::var("CERTGEN_RECORD_NOT_WRITTEN")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut not_written_summaries = Vec::new();
    for name in &not_written {
        let s = api.get(name).await.unwrap();
        not_written_summaries.push(json!({
            "name": name,
            "type": s.type_,
            "keys": data_map(s).keys().cloned().collect::<Vec<_>>(),
        }));
    }
    let out = json!({
        "tool": var("CERTGEN_RECORD_TOOL"),
        "secrets": secrets,
        "notWritten": not_written,
        "notWrittenObserved": not_written_summaries,
    });
    std::fs::write(
        var("CERTGEN_RECORD_OUT"),
        serde_json::to_string_pretty(&out).unwrap() + "\n",
    )
    .unwrap();
}

/// A config that points certgen's CA Secret at cilium/certgen's (`cilium-ca`, Opaque, keys
/// `ca.crt`/`ca.key`, shared with Cilium's other certificates) is refused with exit 2 naming
/// that Secret, and nothing is written: not the Hubble Secrets, not `cilium-ca`.
#[tokio::test]
async fn a_ca_secret_that_is_cilium_certgens_own_is_refused_and_nothing_is_written() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("prof-cilium-ca").await;
    let api = c.secrets(&ns.name);
    let mut s = Secret::default();
    s.metadata.name = Some("cilium-ca".into());
    s.type_ = Some("Opaque".into());
    s.data = Some(BTreeMap::from([
        ("ca.crt".into(), k8s_openapi::ByteString(b"cert".to_vec())),
        ("ca.key".into(), k8s_openapi::ByteString(b"key".to_vec())),
    ]));
    let created = api
        .create(&kube::api::PostParams::default(), &s)
        .await
        .unwrap();
    let yaml = crate::util::run(&["profile", "show", "cilium-hubble"])
        .ok()
        .stdout
        .replace("secretName: cilium-hubble-ca", "secretName: cilium-ca");
    let tmp = crate::util::tempdir();
    let cfg = crate::util::write(tmp.path(), "hubble.yaml", &yaml);
    let run = c
        .certgen(&ns.name)
        .args(["--config", cfg.to_str().unwrap(), "--overwrite"])
        .run();
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains(&format!("Secret {}/cilium-ca", ns.name)),
        "{}",
        run.stderr
    );
    // Never "delete it" unqualified: that Secret holds the CA key ClusterMesh depends on.
    assert!(
        run.stderr.contains("give certgen a Secret name of its own"),
        "{}",
        run.stderr
    );
    let names: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert_eq!(names, ["cilium-ca"], "only the tool's CA Secret is there");
    let after = api.get("cilium-ca").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        created.metadata.resource_version
    );
}

/// The migration from cilium/certgen (`docs/migrating-from-cilium.md`), with Secrets as it writes them (an Opaque
/// `cilium-ca` holding its CA and key, each Hubble Secret's leaf signed by that CA and
/// `ca.crt` holding it alone): the first run adopts them and writes nothing; `--overwrite` moves
/// every Secret to certgen's CA (every leaf signed by it, every bundle trusting it) and never
/// touches `cilium-ca`.
#[tokio::test]
async fn migrating_from_cilium_certgen_adopts_then_rotates_and_leaves_cilium_ca_alone() {
    use certgen::pki::{CaSpec, KeyAlgorithm, LeafSpec, Usages, issue_ca, issue_leaf};
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("prof-cilium-adopt").await;
    let api = c.secrets(&ns.name);
    let now = ::time::OffsetDateTime::now_utc();
    let day = std::time::Duration::from_secs(86_400);
    let (ca, ca_issued) = issue_ca(
        &CaSpec {
            common_name: "Cilium CA".into(),
            validity: 1095 * day,
            key_algorithm: KeyAlgorithm::EcdsaP256,
        },
        now,
    )
    .unwrap();
    let ca_pem = ca_issued.cert.pem();
    let secret = |name: &str, r#type: &str, data: Vec<(&str, Vec<u8>)>| {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.type_ = Some(r#type.into());
        s.data = Some(
            data.into_iter()
                .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v)))
                .collect(),
        );
        s
    };
    let pp = kube::api::PostParams::default();
    let tool_ca = api
        .create(
            &pp,
            &secret(
                "cilium-ca",
                "Opaque",
                vec![
                    ("ca.crt", ca_pem.clone().into_bytes()),
                    ("ca.key", ca_issued.key.expose().as_bytes().to_vec()),
                ],
            ),
        )
        .await
        .unwrap();
    let recorded = fixture("cilium-certgen");
    let mut versions = BTreeMap::new();
    for t in recorded["secrets"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let eku = t["leaf"]["extKeyUsage"].as_array().unwrap();
        let leaf = issue_leaf(
            &LeafSpec {
                common_name: t["leaf"]["commonName"].as_str().unwrap().into(),
                dns_names: vec![t["leaf"]["commonName"].as_str().unwrap().into()],
                ip_addresses: vec![],
                usages: Usages {
                    server: eku.contains(&json!("serverAuth")),
                    client: eku.contains(&json!("clientAuth")),
                },
                validity: 365 * day,
                key_algorithm: KeyAlgorithm::EcdsaP256,
            },
            &ca,
            now,
        )
        .unwrap();
        let s = api
            .create(
                &pp,
                &secret(
                    name,
                    "kubernetes.io/tls",
                    vec![
                        ("ca.crt", ca_pem.clone().into_bytes()),
                        ("tls.crt", leaf.cert.pem().into_bytes()),
                        ("tls.key", leaf.key.expose().as_bytes().to_vec()),
                    ],
                ),
            )
            .await
            .unwrap();
        versions.insert(name.to_string(), s.metadata.resource_version);
    }

    // The first run adopts: nothing written, no certgen CA yet.
    let run = c
        .certgen(&ns.name)
        .args(["--profile", "cilium-hubble"])
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    for (name, rv) in &versions {
        let now = api.get(name).await.unwrap().metadata.resource_version;
        assert_eq!(&now, rv, "{name} written by the adopting run");
    }
    assert!(api.get_opt("cilium-hubble-ca").await.unwrap().is_none());

    // --overwrite moves everything to certgen's CA; cilium-ca is never written.
    let run = c
        .certgen(&ns.name)
        .args(["--profile", "cilium-hubble", "--overwrite"])
        .run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ours = api.get("cilium-hubble-ca").await.unwrap();
    let our_ca = certgen::pki::parse_single_cert(&super::data(&ours, "tls.crt")).unwrap();
    assert_ne!(our_ca, ca_issued.cert, "a CA of certgen's own");
    for name in versions.keys() {
        let s = api.get(name).await.unwrap();
        let leaf = certgen::pki::parse_single_cert(&super::data(&s, "tls.crt")).unwrap();
        let bundle = certgen::pki::parse_cert_chain(&super::data(&s, "ca.crt")).unwrap();
        assert!(our_ca.signed(&leaf), "{name}: leaf signed by certgen's CA");
        assert!(
            bundle.contains(&our_ca),
            "{name}: bundle trusts certgen's CA"
        );
    }
    let after = api.get("cilium-ca").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, tool_ca.metadata.resource_version,
        "cilium-ca untouched"
    );
}
