//! A Service's ready endpoints, from its EndpointSlices: where `--probe` dials, and which pod
//! each belongs to (`endpoints[].targetRef`), so a probe proves what that pod holds.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use crate::store::ApiFailure;

pub use crate::outside::EndpointsError;
use crate::outside::{EndpointPod, ReadyEndpoint};

/// The Services of one namespace, for probes ([`crate::outside::Endpoints`]).
pub struct ServiceEndpoints {
    pub client: kube::Client,
    pub namespace: String,
}

/// The ready endpoints (`ip:port`) behind a Service port, from its EndpointSlices, each with
/// the pod its `targetRef` names (kind Pod, in `namespace`; none otherwise).
pub async fn service_endpoints(
    client: &kube::Client,
    namespace: &str,
    service: &str,
    port: u16,
) -> Result<Vec<ReadyEndpoint>, EndpointsError> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let svc = services
        .get_opt(service)
        .await
        .map_err(|e| {
            EndpointsError::Api(ApiFailure::from_kube(
                "get", "services", "", namespace, service, e,
            ))
        })?
        .ok_or_else(|| {
            EndpointsError::Missing(format!("Service {namespace}/{service} does not exist"))
        })?;
    let port_name = svc
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.port == i32::from(port))
        .ok_or_else(|| {
            EndpointsError::Missing(format!("Service {namespace}/{service} has no port {port}"))
        })?
        .name;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .map_err(|e| {
            EndpointsError::Api(ApiFailure::from_kube(
                "list",
                "endpointslices",
                "discovery.k8s.io",
                namespace,
                "",
                e,
            ))
        })?;
    let mut out: Vec<ReadyEndpoint> = Vec::new();
    for slice in list.items {
        let Some(target) = slice
            .ports
            .unwrap_or_default()
            .into_iter()
            .find(|p| p.name == port_name)
            .and_then(|p| p.port)
        else {
            continue;
        };
        for ep in slice.endpoints {
            if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            let pod = ep.target_ref.as_ref().and_then(|r| pod_of(r, namespace));
            for address in ep.addresses {
                let addr = match address.parse::<std::net::IpAddr>() {
                    Ok(ip) => SocketAddr::new(ip, target as u16).to_string(),
                    Err(_) => format!("{address}:{target}"),
                };
                if !out.iter().any(|e| e.address == addr) {
                    out.push(ReadyEndpoint {
                        address: addr,
                        pod: pod.clone(),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The pod an endpoint's `targetRef` names: kind Pod, in the Service's namespace (an empty
/// namespace is the slice's own), with a name.
fn pod_of(r: &k8s_openapi::api::core::v1::ObjectReference, namespace: &str) -> Option<EndpointPod> {
    let pod = r.kind.as_deref() == Some("Pod")
        && r.namespace
            .as_deref()
            .is_none_or(|n| n.is_empty() || n == namespace);
    Some(EndpointPod {
        name: r.name.clone().filter(|n| pod && !n.is_empty())?,
        uid: r.uid.clone().filter(|u| !u.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;

    fn target(kind: &str, namespace: Option<&str>, name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some(kind.into()),
            namespace: namespace.map(Into::into),
            name: Some(name.into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn only_a_pod_of_the_services_namespace_is_an_endpoints_pod() {
        assert_eq!(
            pod_of(&target("Pod", Some("ns"), "gw-1"), "ns"),
            Some(EndpointPod {
                name: "gw-1".into(),
                uid: Some("u1".into())
            })
        );
        assert!(pod_of(&target("Pod", None, "gw-1"), "ns").is_some());
        assert_eq!(pod_of(&target("Pod", Some("other"), "gw-1"), "ns"), None);
        assert_eq!(pod_of(&target("Node", Some("ns"), "gw-1"), "ns"), None);
        assert_eq!(pod_of(&target("Pod", Some("ns"), ""), "ns"), None);
    }
}
