//! `certgen check`: what the store holds, judged as a plain run would judge it, printed as a
//! report, JSON or metrics; the exit code says whether a run has work to do.

use super::{local_store, print};
use crate::cli::{self, OutputFormat};
use crate::error::Error;
use crate::k8s::KubeStore;
use crate::{config, exposition, k8s};

/// `certgen check`: observe, check, print the report; exit 1 when action is due. A Secret that
/// cannot be read is on its row of the whole report, and the exit is 2, as a run's would be.
pub async fn run(target: cli::TargetArgs) -> Result<(), Error> {
    let (config, local) = config::resolve_target(&target.spec())?;
    if let Some(contexts) = config.set_contexts(&target.context, local.is_some())? {
        return super::set::check(target, &contexts).await;
    }
    // The caBundle targets are read whatever the output: a run writes a drifted one, so the
    // verdict depends on them.
    let (report, families, unreadable) = match &local {
        Some(dir) => {
            let store = local_store(dir, &config, false).reporting_exposed_keys();
            exposition::collect::checked(&config, &store, (None, None)).await?
        }
        None => {
            let client = k8s::client(target.cluster()).await?;
            let store = KubeStore::new(client.clone(), &config.namespace);
            let webhooks = k8s::WebhookStore::new(client.clone());
            let bundles = k8s::TrustBundleStore::new(client);
            let bundles = (!config.trust_bundles.is_empty()).then_some(&bundles as _);
            exposition::collect::checked(&config, &store, (Some(&webhooks), bundles)).await?
        }
    };
    match target.output {
        OutputFormat::Text => print(&report.to_text())?,
        OutputFormat::Json => print(&report.to_json())?,
        OutputFormat::Prometheus => print(&exposition::render(&families))?,
    }
    match unreadable {
        // The JSON report holds it already (its row, and nextRun); said on stderr otherwise.
        Some(e) if target.output == OutputFormat::Json => {
            Err(Error::Reported(Box::new(Error::Store(e))))
        }
        Some(e) => Err(Error::Store(e)),
        None if report.healthy => Ok(()),
        None => Err(Error::CheckFailed),
    }
}
