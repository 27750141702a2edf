//! The built-in `cilium-hubble` and `contour` profiles on the real API server, compared field by
//! field with what each tool's own binary wrote there: cilium/certgen run with the Cilium
//! chart's tls-cronjob arguments, and `contour certgen --kube --secrets-format=compact`, each
//! recorded once side by side (`bench/profile-compat`, which calls [`record_another_tools_run`])
//! into `tests/it/fixtures/profiles/`. CI has neither binary nor the network to build them, so
//! the recordings are the reference here. certgen runs with the Secrets verbs the migration
//! section of the README asks for (get, create, update), and a second run writes nothing.

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
    for name in recorded["notWritten"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        assert!(api.get_opt(name).await.unwrap().is_none(), "{name} written");
    }

    // Nothing is due: a second run writes nothing.
    let again = super::Certgen::new(&kubeconfig)
        .namespace(&ns.name)
        .args(["--profile", profile])
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
