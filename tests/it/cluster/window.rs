//! Renewal windows (issue 45) on the real control plane, where `now` is the API server's clock:
//! the window is placed two days after the time the API server stamped on the CA Secret it
//! created, never the test machine's. A routine renewal outside it is held (exit 0, nothing
//! written, a `WaitingForRenewalWindow` Event, no `RenewalOverdue`), and one that cannot wait
//! goes with a `RenewalOutsideWindow` Warning.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use super::cluster;
use crate::util::{profile, tempdir, write};

#[tokio::test(flavor = "multi_thread")]
async fn a_window_holds_a_routine_renewal_on_the_api_servers_clock() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("certgen-window").await;
    let tmp = tempdir();
    let base = profile();
    let short = write(
        tmp.path(),
        "short.yaml",
        &base
            .replace("validity: 1825d", "validity: 30d")
            .replace("renewBefore: 30d", "renewBefore: 1d"),
    );
    let due = write(
        tmp.path(),
        "due.yaml",
        &base
            .replace("validity: 1825d", "validity: 60d")
            .replace("renewBefore: 30d", "renewBefore: 45d"),
    );
    c.certgen(&ns.name)
        .quiet()
        .args(["--config", short.to_str().unwrap()])
        .run_async()
        .await
        .ok();
    // The store's clock: when the API server created the CA Secret.
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &ns.name);
    let created = secrets
        .get("envoy-gateway-ca")
        .await
        .unwrap()
        .metadata
        .creation_timestamp
        .unwrap()
        .0;
    let at = created + jiff::SignedDuration::from_hours(48);
    let at = at.to_zoned(jiff::tz::TimeZone::UTC);
    let window = format!(
        "{} {} {} {} *;1h;UTC",
        at.minute(),
        at.hour(),
        at.day(),
        at.month()
    );
    let before = c.versions(&ns.name).await;
    let held = c
        .certgen(&ns.name)
        .quiet()
        .args([
            "--config",
            due.to_str().unwrap(),
            "--renewal-window",
            &window,
            "--events",
        ])
        .run_async()
        .await
        .ok()
        .json();
    assert_eq!(held["writes"], 0, "{held}");
    assert_eq!(held["renewalWindow"]["open"], false, "{held}");
    assert_eq!(
        held["renewalWindow"]["waiting"].as_array().unwrap().len(),
        3,
        "{held}"
    );
    assert_eq!(
        c.versions(&ns.name).await,
        before,
        "a held run writes nothing"
    );
    let events: Api<Event> = Api::namespaced(c.client.clone(), &ns.name);
    let reasons = |list: Vec<Event>| -> Vec<(String, String)> {
        list.into_iter()
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.regarding.and_then(|r| r.name).unwrap_or_default(),
                )
            })
            .collect()
    };
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=certgen");
    let seen = reasons(events.list(&lp).await.unwrap().items);
    assert!(
        seen.contains(&("WaitingForRenewalWindow".into(), "envoy".into())),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|(r, _)| r == "RenewalOverdue"),
        "held is not overdue: {seen:?}"
    );
    let check = c
        .certgen(&ns.name)
        .check()
        .args([
            "--config",
            due.to_str().unwrap(),
            "--renewal-window",
            &window,
        ])
        .run_async()
        .await
        .ok()
        .json();
    assert_eq!(check["healthy"], true, "{check}");

    // A margin longer than what is left: the renewal cannot wait, and says so.
    let now = c
        .certgen(&ns.name)
        .quiet()
        .args([
            "--config",
            due.to_str().unwrap(),
            "--renewal-window",
            &window,
            "--renewal-window-margin",
            "40d",
            "--events",
        ])
        .run_async()
        .await
        .ok()
        .json();
    assert_eq!(now["writes"], 3, "{now}");
    let seen = reasons(events.list(&lp).await.unwrap().items);
    assert!(
        seen.contains(&("RenewalOutsideWindow".into(), "envoy".into())),
        "{seen:?}"
    );
}
