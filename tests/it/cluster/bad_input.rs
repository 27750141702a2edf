//! Stored Secrets certgen refuses on a real API server: owned by another tool (a live
//! cert-manager Certificate, Helm), garbage, a key that does not match, a missing key, the wrong type; and a namespace
//! that does not exist. Every refusal names the Secret, says how to fix it, exits with its code,
//! and writes nothing. The full matrix of bad input, in local mode: the top-level `bad_input`.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{base64, cluster, data};
async fn create_secret(
    api: &Api<Secret>,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    data: &[(&str, &[u8])],
) {
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &s).await.unwrap();
}

/// A Secret cert-manager issues into: refused while its Certificate exists, `--force` or not,
/// naming the Certificate and the fix; once the Certificate is gone, nobody issues into it and
/// certgen judges its contents like any other Secret's (here: garbage, refused as such). Needs
/// cert-manager's CRDs (`tests/testenv/cert-manager-up`); the Certificate names another Secret,
/// so cert-manager's controller leaves this one alone.
#[tokio::test]
async fn a_secret_owned_by_cert_manager_is_refused_and_nothing_is_written() {
    let Some(c) = cluster().await else { return };
    if std::env::var_os("CERTGEN_CERT_MANAGER").is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: cert-manager's CRDs must be installed (tests/testenv/cert-manager-up)"
        );
        eprintln!("note: CERTGEN_CERT_MANAGER is not set; skipping a cert-manager test");
        return;
    }
    let ns = c.namespace("foreign").await;
    let api = c.secrets(&ns.name);
    create_secret(
        &api,
        "envoy",
        &[],
        &[("cert-manager.io/certificate-name", "envoy")],
        &[("tls.crt", b"x"), ("tls.key", b"y")],
    )
    .await;
    let (ok, out) = c.kubectl_stdin(
        &["apply"],
        &format!(
            "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {{name: envoy, namespace: {}}}\nspec: {{secretName: not-this-one, commonName: x, issuerRef: {{name: missing}}}}\n",
            ns.name
        ),
    );
    assert!(ok, "{out}");
    let before = c.versions(&ns.name).await;
    for force in [false, true] {
        let mut certgen = c.certgen(&ns.name).quiet();
        if force {
            certgen = certgen.args(["--force", "--overwrite"]);
        }
        let r = certgen.run();
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(
            r.stderr.contains(&format!("Secret {}/envoy", ns.name)),
            "{}",
            r.stderr
        );
        assert!(
            r.stderr.contains("Certificate envoy issues into it")
                && r.stderr.contains("delete the Certificate")
                && r.stderr.contains("--force does not take"),
            "{}",
            r.stderr
        );
        assert_eq!(
            c.versions(&ns.name).await,
            before,
            "nothing written, not even the CA"
        );
    }
    let out = c
        .kubectl()
        .args(["delete", "certificate", "envoy", "-n", &ns.name])
        .output()
        .unwrap();
    assert!(out.status.success());
    let r = c.certgen(&ns.name).quiet().run();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("tls.crt: no PEM certificate"),
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn bad_stored_input_in_the_cluster_is_refused_with_nothing_written() {
    let Some(c) = cluster().await else { return };
    let other = c.namespace("bad-src").await;
    c.certgen(&other.name).quiet().run().ok();
    let foreign_key = data(
        &c.secrets(&other.name).get("envoy").await.unwrap(),
        "tls.key",
    );
    let cases: Vec<(&str, &str, serde_json::Value, &str)> = vec![
        (
            "garbage",
            "envoy",
            json!({"data": {"tls.crt": "Z2FyYmFnZQ=="}}),
            "tls.crt: no PEM certificate",
        ),
        (
            "mismatch",
            "envoy",
            json!({"data": {"tls.key": base64(&foreign_key)}}),
            "does not match",
        ),
        (
            "no-key",
            "envoy-oidc-hmac",
            json!({"data": {"hmac-secret": null, "x": "eA=="}}),
            "\"hmac-secret\" is missing",
        ),
        (
            "helm",
            "envoy-rate-limit",
            json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"}}}),
            "managed by \"Helm\"",
        ),
    ];
    for (label, secret, patch, expect) in cases {
        let ns = c.namespace(&format!("bad-{label}")).await;
        c.certgen(&ns.name).quiet().run().ok();
        c.secrets(&ns.name)
            .patch(secret, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let before = c.versions(&ns.name).await;
        for extra in [&[][..], &["--overwrite"][..]] {
            let r = c.certgen(&ns.name).quiet().args(extra).run();
            assert_eq!(r.code, 2, "{label}: {}", r.stderr);
            assert!(
                r.stderr.contains(&format!("Secret {}/{secret}", ns.name)),
                "{label}: {}",
                r.stderr
            );
            assert!(r.stderr.contains(expect), "{label}: {}", r.stderr);
            assert_eq!(
                c.versions(&ns.name).await,
                before,
                "{label}: nothing written"
            );
        }
    }

    // A Secret of the wrong type cannot be fixed in place, even with --force.
    let ns = c.namespace("bad-type").await;
    let s: Secret = serde_json::from_value(
        json!({"metadata": {"name": "envoy"}, "type": "Opaque", "data": {"x": "eA=="}}),
    )
    .unwrap();
    c.secrets(&ns.name)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    let r = c.certgen(&ns.name).quiet().args(["--force"]).run();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("has type \"Opaque\"") && r.stderr.contains("delete it"),
        "{}",
        r.stderr
    );

    // A namespace that does not exist: a dry run says so (and what to do) instead of planning
    // writes that would fail; the real run's error names verb, resource and namespace.
    let r = c
        .certgen("no-such-namespace-certgen")
        .quiet()
        .args(["--dry-run"])
        .run()
        .ok();
    let warnings = r.json()["warnings"].to_string();
    assert!(
        warnings.contains("namespace no-such-namespace-certgen does not exist")
            && warnings.contains("kubectl create namespace no-such-namespace-certgen"),
        "{}",
        r.stdout
    );
    let mut text = crate::util::certgen();
    text.arg("--kubeconfig").arg(&c.kubeconfig).args([
        "-n",
        "no-such-namespace-certgen",
        "--dry-run",
    ]);
    let text = crate::util::Run::of(&mut text).ok();
    assert!(
        text.stdout
            .contains("Warning: namespace no-such-namespace-certgen does not exist"),
        "{}",
        text.stdout
    );
    // In a namespace that exists, a fresh install's dry run warns of nothing.
    let ns = c.namespace("fresh-dry-run").await;
    let r = c.certgen(&ns.name).quiet().args(["--dry-run"]).run().ok();
    assert!(r.json()["warnings"].is_null(), "{}", r.stdout);
    let r = c.certgen("no-such-namespace-certgen").quiet().run();
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr.contains("no-such-namespace-certgen"),
        "{}",
        r.stderr
    );
}
