//! The test control plane works: Deployments roll out on the kwok node, a pod-template patch
//! rolls them again and removes the old pods, and a selector-less Service gets a hand-made
//! EndpointSlice.
//!
//! The API server refuses loopback addresses in EndpointSlices ("may not be in the loopback
//! range"), so a Service cannot point at 127.0.0.1 directly; the test pins that behaviour and
//! uses a TEST-NET-1 address (192.0.2.0/24, never routed, never dialled) instead. Probes in tests
//! map such endpoint addresses to loopback listeners.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{cluster, deployment, rolled_out};

#[tokio::test]
async fn deployments_roll_out_and_restart_and_services_point_at_loopback() {
    let Some(c) = cluster().await else { return };
    let ns = c.namespace("smoke").await;
    let deployments = c
        .create_deployment(&ns.name, &deployment("web", 2, json!({})))
        .await;
    rolled_out(&deployments, "web", Duration::from_secs(120)).await;

    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns.name);
    let lp = ListParams::default().labels("app=web");
    let first: Vec<String> = pods
        .list(&lp)
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(first.len(), 2, "two pods run on the kwok node");

    let patch = json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-11-21T00:00:00Z"
    }}}}});
    let patched = deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    rolled_out(&deployments, "web", Duration::from_secs(120)).await;

    let rs: Api<ReplicaSet> = Api::namespaced(c.client.clone(), &ns.name);
    assert_eq!(
        rs.list(&lp).await.unwrap().items.len(),
        2,
        "the restart made a second ReplicaSet"
    );
    let old_gone = async {
        loop {
            let now: Vec<String> = pods
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            if now.len() == 2 && now.iter().all(|n| !first.contains(n)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), old_gone)
        .await
        .expect("old pods disappear after the restart");

    let services: Api<Service> = Api::namespaced(c.client.clone(), &ns.name);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "peer"},
        "spec": {"ports": [{"name": "tls", "port": 18000, "protocol": "TCP"}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(c.client.clone(), &ns.name);
    let slice = |name: &str, address: &str| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "peer"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
            "ports": [{"name": "tls", "port": 43210, "protocol": "TCP"}]
        }))
        .unwrap()
    };
    let loopback = slices
        .create(&PostParams::default(), &slice("peer-loopback", "127.0.0.1"))
        .await;
    match loopback {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("loopback"), "{}", s.message),
        other => panic!("the API server accepted a loopback EndpointSlice: {other:?}"),
    }
    slices
        .create(&PostParams::default(), &slice("peer-testnet", "192.0.2.10"))
        .await
        .unwrap();
    let found = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=peer"))
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1);
    assert_eq!(found.items[0].endpoints[0].addresses, ["192.0.2.10"]);
}
