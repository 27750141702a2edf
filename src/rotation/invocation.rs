//! One invocation of the main job: what it needs besides the store (the configuration, the
//! run's options, its deadline and the seams it acts through), and the two ways the driver's
//! steps hand parts of it down: the gate's driver ([`gate::Push`]) and the consumers'
//! restarts, waits and probes ([`consumers::reload`], fed plain values). A leaf below every
//! other driver file, so that none of them reaches back up into `mod.rs` for it.

use tokio::time::Instant;

use super::consumers;
use super::gate;
use super::step::Outcome;
use crate::config::{Config, RunOptions};
use crate::error::Error;
use crate::lock;
use crate::outside::{CaBundleTargets, Endpoints, PodsApi, TrustBundles, Workloads};
use crate::report::ConsumerReport;
use crate::store::SecretStore;

/// One invocation of the main job: everything it needs besides the store.
pub struct Invocation<'a> {
    pub config: &'a Config,
    pub options: RunOptions,
    /// When the run must be done by ([`RunOptions::deadline`]).
    pub deadline: Instant,
    /// The consumers' workloads, of every kind (in a cluster).
    pub workloads: Option<&'a dyn Workloads>,
    /// The Services' endpoints probes dial (in a cluster; its presence means a cluster run).
    pub endpoints: Option<&'a dyn Endpoints>,
    /// The `caBundle` targets' store (in a cluster with `webhooks:` configured).
    pub webhooks: Option<&'a dyn CaBundleTargets>,
    /// The ClusterTrustBundles' store (in a cluster with `clusterTrustBundles:` configured).
    pub trust_bundles: Option<&'a dyn TrustBundles>,
    /// The namespace's pods, to push Secret changes to (in a cluster, unless `--no-poke`).
    pub pods: Option<&'a dyn PodsApi>,
    pub lock: lock::Target,
}

impl Invocation<'_> {
    /// Pushed propagation, when this run may poke pods.
    pub(super) fn push(&self) -> Option<gate::Push<'_>> {
        Some(gate::Push {
            pods: self.pods?,
            workloads: self.workloads,
            endpoints: self.endpoints,
            config: self.config,
            delay: self.options.propagation_delay,
            pacer: gate::Pacer::for_rate(self.options.poke_rate),
        })
    }

    /// Restarts, waits and probes for what `outcome` holds, as asked. `refused`: why restarts
    /// are skipped, when a workload request was refused earlier in the run.
    pub(super) async fn consumers<S: SecretStore>(
        &self,
        store: &S,
        outcome: &Outcome,
        (wait, probe, dry_run): (bool, bool, bool),
        refused: Option<String>,
    ) -> Result<(Vec<ConsumerReport>, consumers::Problems), Error> {
        let tasks = consumers::Tasks {
            wait,
            probe,
            dry_run,
            deadline: self.deadline,
            skip_refused: !self.options.wait,
        };
        consumers::reload(
            self.config,
            outcome,
            (self.workloads, self.endpoints),
            tasks,
            store.now(),
            refused,
        )
        .await
    }
}
