//! Many Secrets read with one LIST when the Role grants it, and by name when it does not, on a
//! real API server with real RBAC.

use super::{cluster, rule};
use crate::util::{Run, certgen, tempdir, write};

/// A config with a CA and `n` TLS Secrets, no consumers.
fn config(n: usize) -> String {
    let mut text = String::from(
        "name: many\nnamespace: default\nca:\n  secretName: many-ca\n  commonName: many-ca\n  keyAlgorithm: ecdsa-p256\n  validity: 1825d\n  renewBefore: 90d\nsecrets:\n",
    );
    for i in 0..n {
        text.push_str(&format!(
            "- name: s-{i:02}\n  type: tls\n  dnsNames: [\"s-{i:02}.{{namespace}}.svc\"]\n"
        ));
    }
    text
}

fn run_as(kubeconfig: &std::path::Path, config: &std::path::Path, ns: &str) -> serde_json::Value {
    Run::from(
        certgen()
            .args([
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
                "-n",
                ns,
                "--output",
                "json",
                "-q",
            ])
            .output()
            .unwrap(),
    )
    .ok()
    .json()
}

#[tokio::test]
async fn twelve_secrets_are_read_with_one_list_when_granted_and_by_name_when_not() {
    let Some(c) = cluster().await else { return };
    let tmp = tempdir();
    let cfg = write(tmp.path(), "many.yaml", &config(12));
    let leases = rule(
        &["coordination.k8s.io"],
        &["leases"],
        &["get", "create", "update", "delete"],
    );

    let ns = c.namespace("list").await;
    let granted = c
        .service_account_kubeconfig(
            &ns.name,
            "with-list",
            vec![
                rule(&[""], &["secrets"], &["get", "list", "create", "patch"]),
                leases.clone(),
            ],
        )
        .await;
    let fresh = run_as(&granted, &cfg, &ns.name);
    assert_eq!(fresh["writes"], 13, "{fresh}");
    let noop = run_as(&granted, &cfg, &ns.name);
    assert_eq!(noop["writes"], 0, "{noop}");
    let requests = &noop["apiRequests"];
    // 13 Secrets: one LIST, no GET of a Secret.
    assert_eq!(requests["list"], 1, "{noop}");
    assert_eq!(requests["get"], 0, "{noop}");

    let ns = c.namespace("nolist").await;
    let refused = c
        .service_account_kubeconfig(
            &ns.name,
            "without-list",
            vec![
                rule(&[""], &["secrets"], &["get", "create", "patch"]),
                leases,
            ],
        )
        .await;
    let fresh = run_as(&refused, &cfg, &ns.name);
    assert_eq!(fresh["writes"], 13, "{fresh}");
    let noop = run_as(&refused, &cfg, &ns.name);
    assert_eq!(noop["writes"], 0, "{noop}");
    let requests = &noop["apiRequests"];
    // Refused once (403), then every Secret by name; never a second LIST.
    assert_eq!(requests["list"], 1, "{noop}");
    assert_eq!(requests["get"], 13, "{noop}");
}
