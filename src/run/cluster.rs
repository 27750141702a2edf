//! The main job in a cluster: what this identity may do, then the rotation driver against the
//! API server. Shared by the main job and `certgen create`'s renewal ([`super::kwc`]).

use crate::error::Error;
use crate::k8s::KubeStore;
use crate::{access, api_requests, config, k8s, lock, report, rotation};

/// What a run in one cluster needs besides its options, made for what this identity may do:
/// the config adapted to it, the Secret store, the stores of the other objects the run reads
/// or writes, the run lock, and the optional features skipped for missing verbs. One member of
/// a set of clusters gets the same ([`super::set`]).
pub(super) struct Parts {
    pub config: config::Config,
    pub store: KubeStore,
    pub workloads: k8s::Workloads,
    pub webhooks: k8s::WebhookStore,
    pub trust_bundles: k8s::TrustBundleStore,
    pub pods: k8s::Pods,
    pub endpoints: k8s::ServiceEndpoints,
    pub lock: Option<lock::Target>,
    pub skipped: Vec<String>,
}

/// The [`Parts`] of a run in the cluster `client` reaches.
pub(super) async fn parts(
    client: &kube::Client,
    mut config: config::Config,
    options: &config::RunOptions,
) -> Result<Parts, Error> {
    // What this identity may do, when that must be known before the first write
    // (src/access.rs). The rules review would be one request on every run. It is made only
    // when --wait or --probe was given, so that missing verbs fail the run before anything is
    // written; otherwise every optional feature is tried and a 403 skips it for the rest of
    // the run with the same warning and report line (src/access.rs).
    let access = if options.wait || options.probe {
        k8s::review(client, &config.namespace).await
    } else {
        access::Access::unknown()
    };
    let asked = access::Asked {
        wait: options.wait,
        probe: options.probe,
    };
    let skipped = access::adapt(&mut config, &access, asked).map_err(Error::Store)?;
    let store = KubeStore::new(client.clone(), &config.namespace)
        .with_labels(config.labels.clone())
        .with_write_verb(access.secret_write_verb(&config.secret_names()));
    if store.write_verb() == access::SecretWriteVerb::Update {
        tracing::info!(
            "this identity may not patch the Secrets: certgen writes them with updates fenced by resourceVersion"
        );
    }
    let lock = lock::Target::Lease {
        lease: std::sync::Arc::new(k8s::lease::KubeLease::new(
            client.clone(),
            &config.namespace,
            &format!("{}-certgen-lock", config.profile),
        )),
        holder: lock::holder_identity(),
        seconds: k8s::lease::lease_seconds(),
    };
    Ok(Parts {
        workloads: k8s::Workloads::new(client.clone(), &config.namespace),
        webhooks: k8s::WebhookStore::new(client.clone()),
        // Pushed propagation (src/rotation/gate/push.rs): an extra like restarts, so a 403 turns
        // it off for the run with a report line, and the gates wait out the delay.
        pods: k8s::Pods::new(client.clone(), &config.namespace).projecting(
            config
                .trust_bundles
                .iter()
                .map(|b| (b.signer.clone(), b.labels.clone()))
                .collect(),
        ),
        trust_bundles: k8s::TrustBundleStore::new(client.clone()),
        endpoints: k8s::ServiceEndpoints {
            client: client.clone(),
            namespace: config.namespace.clone(),
        },
        store,
        lock: Some(lock),
        skipped,
        config,
    })
}

/// The main job in a cluster (and `certgen create`'s renewal, [`super::kwc`]): adapt to what this
/// identity may do, run the rotation driver against the API server; the report, and the failure
/// that ended the run after it had started.
pub async fn job(
    client: &kube::Client,
    config: config::Config,
    options: config::RunOptions,
) -> Result<(report::Report, Option<Error>), Error> {
    let mut p = parts(client, config, &options).await?;
    let deadline = options.deadline(tokio::time::Instant::now());
    let (config, store) = (&p.config, &p.store);
    let lock = p.lock.take().expect("parts() gives the run lock");
    let invocation = rotation::Invocation {
        config,
        options,
        deadline,
        workloads: Some(&p.workloads),
        endpoints: Some(&p.endpoints),
        webhooks: (!config.webhooks.is_empty()).then_some(&p.webhooks),
        trust_bundles: (!config.trust_bundles.is_empty()).then_some(&p.trust_bundles),
        pods: options.poke.then_some(&p.pods),
        lock,
    };
    let (report, failure) = rotation::run(store, invocation).await?;
    // Optional features skipped for missing verbs: found by the review, refused by the
    // API server during the run (a 403 without a review), and the run lock.
    let mut skipped = p.skipped.clone();
    // The caBundle targets, restarts, pokes and the run lock it may not take (carried back in
    // the report by the run, as data).
    skipped.extend(report.skipped.iter().cloned());
    let report = report.in_cluster(api_requests::snapshot(), skipped);
    // Overdue or not by the store's clock after the run (a renewal left to the next run).
    let now = crate::store::SecretStore::now(store);
    Ok((report.with_next_renewal(config, now), failure))
}
