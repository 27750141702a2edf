//! The Kubernetes adapter's side of the seams in [`crate::outside`]: each trait implemented by
//! the adapter object that already makes those calls, converting Kubernetes objects into the
//! seams' plain data and back. Nothing is decided here.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::{Pods, ServiceEndpoints, WebhookStore, service_endpoints};
use crate::config::WebhookKind;
use crate::outside::{
    BundleRead, CaBundleTargets, Created, Endpoints, EndpointsError, Kind, KubeletLease, PodView,
    PodsApi, PokeAnswer, Projector, ReadyEndpoint, RolloutProgress, TargetFields, TargetObserved,
    TargetRead, TrustBundles, WorkloadView, Workloads,
};
use crate::pki::Cert;
use crate::probe::{ClientIdentity, ClientTrust, Expected};
use crate::rollout::{RolloutError, Target};
use crate::store::StoreError;

impl CaBundleTargets for WebhookStore {
    fn read<'a>(
        &'a self,
        kind: WebhookKind,
        name: &'a str,
    ) -> BoxFuture<'a, Result<TargetObserved, StoreError>> {
        self.get(kind, name).boxed()
    }

    fn put<'a>(
        &'a self,
        read: &'a TargetRead,
        bundle: &'a [u8],
        fields: TargetFields,
    ) -> BoxFuture<'a, Result<String, StoreError>> {
        self.put_ca_bundle(read, bundle, fields).boxed()
    }

    fn apply<'a>(
        &'a self,
        read: &'a TargetRead,
        bundle: &'a [u8],
        fields: TargetFields,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.apply_fields(read, bundle, fields).boxed()
    }

    fn cached<'a>(
        &'a self,
        kind: WebhookKind,
        name: &'a str,
        version: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        WebhookStore::cached(self, kind, name, version).boxed()
    }
}

impl Workloads for super::Workloads {
    fn namespace(&self) -> &str {
        super::Workloads::namespace(self)
    }

    fn get<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<WorkloadView>, StoreError>> {
        super::Workloads::get(self, kind, name).boxed()
    }

    fn select<'a>(
        &'a self,
        kind: Kind,
        selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<WorkloadView>, StoreError>> {
        super::Workloads::select(self, kind, selector).boxed()
    }

    fn restart<'a>(
        &'a self,
        w: &'a WorkloadView,
        fingerprint: &'a str,
        now: time::OffsetDateTime,
    ) -> BoxFuture<'a, Result<Result<Target, RolloutError>, StoreError>> {
        super::Workloads::restart(self, w, fingerprint, now).boxed()
    }

    fn wait<'a>(
        &'a self,
        target: &'a Target,
        deadline: Instant,
        last: &'a RolloutProgress,
    ) -> BoxFuture<'a, Result<Option<Duration>, RolloutError>> {
        super::Workloads::wait(self, target, deadline, last).boxed()
    }
}

impl PodsApi for Pods {
    fn namespace(&self) -> &str {
        Pods::namespace(self)
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<PodView>, StoreError>> {
        Pods::list(self).boxed()
    }

    fn poke<'a>(
        &'a self,
        name: &'a str,
        uid: &'a str,
        fingerprint: &'a str,
        at: time::OffsetDateTime,
    ) -> BoxFuture<'a, Result<PokeAnswer, StoreError>> {
        Pods::poke(self, name, uid, fingerprint, at).boxed()
    }

    fn kubelet<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<KubeletLease>, StoreError>> {
        Pods::kubelet(self, node).boxed()
    }
}

impl TrustBundles for super::TrustBundleStore {
    fn list<'a>(&'a self, signer: &'a str) -> BoxFuture<'a, Result<Vec<BundleRead>, StoreError>> {
        super::TrustBundleStore::list(self, signer).boxed()
    }

    fn create<'a>(
        &'a self,
        name: &'a str,
        signer: &'a str,
        labels: &'a BTreeMap<String, String>,
        pem: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        super::TrustBundleStore::create(self, name, signer, labels, pem).boxed()
    }

    fn update<'a>(
        &'a self,
        read: &'a BundleRead,
        labels: &'a BTreeMap<String, String>,
        pem: &'a str,
    ) -> BoxFuture<'a, Result<String, StoreError>> {
        super::TrustBundleStore::update(self, read, labels, pem).boxed()
    }

    fn delete<'a>(&'a self, read: &'a BundleRead) -> BoxFuture<'a, Result<bool, StoreError>> {
        super::TrustBundleStore::delete(self, read).boxed()
    }

    fn projectors(&self) -> BoxFuture<'_, Result<Vec<Projector>, StoreError>> {
        super::TrustBundleStore::projectors(self).boxed()
    }

    fn preflight<'a>(&'a self, signer: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        super::TrustBundleStore::preflight(self, signer).boxed()
    }
}

impl Endpoints for ServiceEndpoints {
    fn ready<'a>(
        &'a self,
        service: &'a str,
        port: u16,
    ) -> BoxFuture<'a, Result<Vec<ReadyEndpoint>, EndpointsError>> {
        service_endpoints(&self.client, &self.namespace, service, port).boxed()
    }

    fn trust<'a>(
        &'a self,
        address: &'a str,
        server_name: &'a str,
        roots: &'a [Cert],
        client: &'a ClientIdentity,
        until: Instant,
    ) -> BoxFuture<'a, ClientTrust> {
        crate::probe::client_trust(address, server_name, roots, client, until).boxed()
    }

    fn serves<'a>(
        &'a self,
        address: &'a str,
        server_name: &'a str,
        roots: &'a [Cert],
        expected: &'a Expected,
        client: &'a ClientIdentity,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), String>> {
        crate::probe::serves(address, server_name, roots, expected, client, timeout).boxed()
    }
}
