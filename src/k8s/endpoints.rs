//! A Service's ready endpoints, from its EndpointSlices: where `--probe` dials.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use crate::store::ApiFailure;

pub use crate::outside::EndpointsError;

/// The Services of one namespace, for probes ([`crate::outside::Endpoints`]).
pub struct ServiceEndpoints {
    pub client: kube::Client,
    pub namespace: String,
}

/// The ready endpoints (`ip:port`) behind a Service port, from its EndpointSlices.
pub async fn service_endpoints(
    client: &kube::Client,
    namespace: &str,
    service: &str,
    port: u16,
) -> Result<Vec<String>, EndpointsError> {
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
    let mut out = Vec::new();
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
            for address in ep.addresses {
                let addr = match address.parse::<std::net::IpAddr>() {
                    Ok(ip) => SocketAddr::new(ip, target as u16).to_string(),
                    Err(_) => format!("{address}:{target}"),
                };
                if !out.contains(&addr) {
                    out.push(addr);
                }
            }
        }
    }
    Ok(out)
}
