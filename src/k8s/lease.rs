//! The run lock's Lease in a cluster: a `coordination.k8s.io/v1` Lease
//! (`<profile>-certgen-lock` in the Secrets' namespace), read, created, written and deleted
//! whole behind [`crate::outside::LeaseApi`], every write fenced by its resourceVersion.
//! Nothing is decided here: waiting, taking over an expired holder, renewing and giving up are
//! [`crate::lock`]'s.

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};

use crate::outside::{LeaseApi, LeaseRead};
use crate::store::{ApiFailure, StoreError};

/// Test-only (cargo feature `test-hooks`): the Lease duration in seconds (default 15), so crash
/// tests need not wait long.
#[cfg(feature = "test-hooks")]
pub const LEASE_SECONDS_ENV: &str = "CERTGEN_TEST_LEASE_SECONDS";

/// How long the run's Lease holds without a renewal: 15 s (the test hook aside).
pub fn lease_seconds() -> u32 {
    #[cfg(feature = "test-hooks")]
    if let Some(s) = std::env::var(LEASE_SECONDS_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s > 0)
    {
        return s;
    }
    15
}

/// One Lease in one namespace.
pub struct KubeLease {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl KubeLease {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    fn failure(&self, verb: &'static str, err: kube::Error) -> StoreError {
        if let kube::Error::Api(s) = &err
            && s.code == 409
        {
            return StoreError::Conflict {
                what: self.describe(),
                detail: format!("{verb}: {}", s.message),
            };
        }
        ApiFailure::from_kube(
            verb,
            "leases",
            "coordination.k8s.io",
            &self.namespace,
            &self.name,
            err,
        )
    }

    fn object(&self, version: Option<String>, spec: LeaseSpec) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: version,
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        }
    }
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn read(lease: &Lease) -> LeaseRead {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseRead {
        holder: spec.holder_identity.unwrap_or_default(),
        seconds: spec
            .lease_duration_seconds
            .unwrap_or(15)
            .max(1)
            .unsigned_abs(),
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
        transitions: spec.lease_transitions.unwrap_or(0),
        acquired_at: spec.acquire_time.and_then(|t| {
            time::OffsetDateTime::from_unix_timestamp_nanos(t.0.as_nanosecond()).ok()
        }),
    }
}

fn seconds(s: u32) -> Option<i32> {
    Some(i32::try_from(s).unwrap_or(i32::MAX))
}

impl LeaseApi for KubeLease {
    fn describe(&self) -> String {
        format!("Lease {}/{}", self.namespace, self.name)
    }

    fn read(&self) -> BoxFuture<'_, Result<Option<LeaseRead>, StoreError>> {
        async move {
            match self.api.get_opt(&self.name).await {
                Ok(lease) => Ok(lease.as_ref().map(read)),
                Err(e) => Err(self.failure("get", e)),
            }
        }
        .boxed()
    }

    fn create<'a>(
        &'a self,
        holder: &'a str,
        secs: u32,
    ) -> BoxFuture<'a, Result<LeaseRead, StoreError>> {
        async move {
            let lease = self.object(
                None,
                LeaseSpec {
                    holder_identity: Some(holder.into()),
                    lease_duration_seconds: seconds(secs),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    ..LeaseSpec::default()
                },
            );
            match self.api.create(&PostParams::default(), &lease).await {
                Ok(lease) => Ok(read(&lease)),
                Err(e) => Err(self.failure("create", e)),
            }
        }
        .boxed()
    }

    fn hold<'a>(
        &'a self,
        was: &'a LeaseRead,
        holder: &'a str,
        secs: u32,
    ) -> BoxFuture<'a, Result<LeaseRead, StoreError>> {
        async move {
            let renewal = was.holder == holder;
            // A renewal keeps the acquire time it was taken at; a take-over starts a new one.
            let acquired = was
                .acquired_at
                .filter(|_| renewal)
                .and_then(|t| Timestamp::from_nanosecond(t.unix_timestamp_nanos()).ok())
                .map_or_else(now_micro, MicroTime);
            let lease = self.object(
                Some(was.version.clone()),
                LeaseSpec {
                    holder_identity: Some(holder.into()),
                    lease_duration_seconds: seconds(secs),
                    acquire_time: Some(acquired),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(was.transitions + i32::from(!renewal)),
                    ..LeaseSpec::default()
                },
            );
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(lease) => Ok(read(&lease)),
                Err(e) => Err(self.failure("update", e)),
            }
        }
        .boxed()
    }

    fn delete<'a>(&'a self, version: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(version.to_string()),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            match self.api.delete(&self.name, &dp).await {
                Ok(_) => Ok(()),
                Err(e) => Err(self.failure("delete", e)),
            }
        }
        .boxed()
    }
}
