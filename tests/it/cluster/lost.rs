//! Issue 46, B2, on the real control plane, as the on-call walk found it: certgen's CA Secret
//! deleted while the leaves it signed remain. `check` (text, JSON and Prometheus) and the
//! exporter say `lost`, and `check` is not healthy, a plain run refuses with both ways out and writes nothing, and each way
//! out of `docs/alerts.md#certgencakeylost` works as written: the backup restored with
//! `kubectl apply -f` (healthy again, nothing rewritten), or `certgen --overwrite` (a new CA,
//! staged: every pair of Secrets verifies at the end, no bundle above two CAs).

use super::cluster;
use crate::util::trust::{check_snapshot, fingerprints};

#[tokio::test]
async fn a_deleted_ca_secret_is_said_and_both_runbook_ways_out_work() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-lost").await;
    let n = ns.name.as_str();
    c.certgen(n).run().ok();
    let installed = c.snapshot(n).await;
    let old_ca = installed["envoy-gateway-ca"]["tls.crt"].clone();

    // The backup an operator keeps (`kubectl get secret -o yaml`), then the deletion.
    let tmp = crate::util::tempdir();
    let backup = tmp.path().join("envoy-gateway-ca.backup.yaml");
    let out = c
        .kubectl()
        .args(["-n", n, "get", "secret", "envoy-gateway-ca", "-o", "yaml"])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&backup, &out.stdout).unwrap();
    let delete = || {
        let out = c
            .kubectl()
            .args(["-n", n, "delete", "secret", "envoy-gateway-ca"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    delete();

    // check: lost, not healthy, in every format.
    let r = c.certgen(n).check().run();
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let report = r.json();
    assert_eq!(report["healthy"], false, "{report}");
    let ca_row = report["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["secret"] == "envoy-gateway-ca")
        .unwrap();
    assert_eq!(ca_row["status"], "lost", "{ca_row}");
    let said = ca_row["problems"][0].as_str().unwrap();
    assert!(
        said.contains("is lost") && said.contains("from a backup") && said.contains("--overwrite"),
        "{said}"
    );
    let check_as = |output: &str| {
        crate::util::Run::of(
            crate::util::certgen()
                .arg("check")
                .arg("--kubeconfig")
                .arg(&c.kubeconfig)
                .args(["-n", n, "--output", output]),
        )
    };
    let text = check_as("text");
    assert!(
        text.stdout.contains("lost") && !text.stdout.contains("Healthy"),
        "{}",
        text.stdout
    );
    let prom = check_as("prometheus");
    assert!(
        prom.stdout.contains(&format!(
            "certgen_secret_status{{namespace=\"{n}\",secret=\"envoy-gateway-ca\",kind=\"ca\",status=\"lost\"}} 1"
        )),
        "{}",
        prom.stdout
    );
    assert!(
        prom.stdout.contains("certgen_check_healthy{"),
        "{}",
        prom.stdout
    );
    assert!(
        prom.stdout
            .lines()
            .any(|l| l.starts_with("certgen_check_healthy{") && l.ends_with(" 0")),
        "{}",
        prom.stdout
    );

    // The exporter, from its watches, says it too (the admin's identity here; the chart's is
    // tests/it/cluster/exporter.rs's).
    let exporter = super::exporter::Exporter::start(&c.kubeconfig, n);
    let lost_series = format!(
        "certgen_secret_status{{namespace=\"{n}\",secret=\"envoy-gateway-ca\",kind=\"ca\",status=\"lost\"}} 1"
    );
    exporter.metrics_until("the CA Secret lost", |t| t.contains(&lost_series));
    exporter.stop();

    // A plain run says the same, and writes nothing.
    let before = c.versions(n).await;
    let r = c.certgen(n).run();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("certgen's CA Secret is gone")
            && r.stderr.contains("from a backup")
            && r.stderr.contains("certgen --overwrite")
            && !r.stderr.contains("another tool's CA"),
        "{}",
        r.stderr
    );
    assert_eq!(c.versions(n).await, before, "nothing written");

    // Way 1: the backup restored, as the runbook says. Healthy again; nothing rewritten.
    let out = c
        .kubectl()
        .arg("apply")
        .arg("-f")
        .arg(&backup)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = c.certgen(n).check().run();
    assert_eq!(r.code, 0, "{}", r.stdout);
    let again = c.certgen(n).run().ok();
    assert_eq!(again.json()["writes"], 0, "{}", again.stdout);
    assert_eq!(c.snapshot(n).await["envoy-gateway-ca"]["tls.crt"], old_ca);

    // Way 2: deleted again, then `certgen --overwrite`: a new CA, staged to the end.
    delete();
    let r = c.certgen(n).arg("--overwrite").run().ok();
    let end = c.snapshot(n).await;
    assert_ne!(end["envoy-gateway-ca"]["tls.crt"], old_ca, "a new CA");
    let (failures, _) = check_snapshot(&end);
    assert!(failures.is_empty(), "{failures:?}");
    assert!(fingerprints(&end["envoy"]["ca.crt"]).len() <= 2);
    let reasons = r.json()["secrets"].to_string();
    assert!(reasons.contains("gone with the key of CA"), "{reasons}");
    let r = c.certgen(n).check().run();
    assert_eq!(r.code, 0, "healthy after the new CA: {}", r.stdout);
}
