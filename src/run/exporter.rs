//! `certgen exporter`'s job: resolve the config, listen, start the watches that keep the
//! exporter's state current ([`crate::exporter::state`]) and serve `/metrics`
//! ([`crate::exporter::http`]) until SIGTERM or SIGINT: the listener closes, scrapes in
//! flight finish (up to 5 s), the watches are dropped, exit 0. It never writes anything to the
//! cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use crate::cli::exporter::ExporterArgs;
use crate::config::{self, Config, ConfigError, WebhookKind};
use crate::error::Error;
use crate::exporter::{http, state};

/// How long scrapes in flight may take to finish after SIGTERM.
const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs the exporter until SIGTERM or SIGINT.
pub async fn run(args: &ExporterArgs) -> Result<(), Error> {
    let (config, _) = config::resolve_target(&args.target().spec())?;
    config.one_cluster(&args.target().context, "certgen exporter")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| {
            Error::Config(ConfigError {
                source_name: "command line".into(),
                message: format!(
                    "cannot listen on {} (--listen): {e}; pick another address or port",
                    args.listen
                ),
            })
        })?;
    let client = crate::k8s::client_for(args.kubeconfig.as_deref(), args.context.clone()).await?;
    let state = Arc::new(RwLock::new(state::State::new(&config)));
    // The watches' changes are applied on a thread of their own: a scrape recomputing the
    // metrics holds the state's read lock for a while (seconds with 10,000 Secrets), and a
    // watch waiting for the write lock must not hold a runtime worker meanwhile.
    let (changes, applied) = std::sync::mpsc::channel::<crate::k8s::watch::Change>();
    {
        let state = state.clone();
        std::thread::Builder::new()
            .name("certgen-state".into())
            .spawn(move || {
                for change in applied {
                    state.write().expect("not poisoned").apply(change);
                }
            })
            .map_err(|e| Error::Output(format!("cannot start a thread: {e}")))?;
    }
    let mut watches = watch_all(&client, &config, &changes).await;
    let address = listener.local_addr().map_or(args.listen, |a| a);
    tracing::info!(
        address = %address,
        namespace = %config.namespace,
        "serving certgen's metrics on http://{address}/metrics"
    );
    let shared = http::Shared {
        config: Arc::new(config),
        state,
        memo: Arc::default(),
    };
    http::serve(listener, shared, stop_signal(), GRACE).await;
    watches.shutdown().await;
    drop(changes);
    tracing::info!("stopped");
    Ok(())
}

/// Starts the watches that keep the state current, each sending its changes to `changes`:
/// the namespace's Secrets the config names, each kind of `caBundle` target it names, and the
/// topology injectors by label when the config looks for them that way (and this identity may
/// list and watch them all).
async fn watch_all(
    client: &kube::Client,
    config: &Config,
    changes: &std::sync::mpsc::Sender<crate::k8s::watch::Change>,
) -> tokio::task::JoinSet<()> {
    let apply = || {
        let changes = changes.clone();
        move |change| {
            // (Only fails once the applying thread is gone, at exit.)
            let _ = changes.send(change);
        }
    };
    let mut watches = tokio::task::JoinSet::new();
    let names: BTreeSet<String> = config
        .secret_names()
        .into_iter()
        .map(str::to_string)
        .collect();
    watches.spawn(crate::k8s::watch::secrets(
        client.clone(),
        config.namespace.clone(),
        names,
        apply(),
    ));
    let mut by_kind: BTreeMap<&'static str, (WebhookKind, BTreeSet<String>)> = BTreeMap::new();
    for t in &config.webhooks {
        by_kind
            .entry(state::kind_name(t.kind))
            .or_insert_with(|| (t.kind, BTreeSet::new()))
            .1
            .insert(t.name.clone());
    }
    for (kind, names) in by_kind.into_values() {
        watches.spawn(crate::k8s::watch::targets(
            client.clone(),
            kind,
            names,
            apply(),
        ));
    }
    for t in &config.trust_bundles {
        watches.spawn(crate::k8s::watch::trust_bundles(
            client.clone(),
            t.signer.clone(),
            apply(),
        ));
    }
    if state::looks_by_label(config) {
        // Only with the right to list and watch them all (the chart grants the injector by
        // name): a watch the API server refuses would retry its LIST for ever.
        let kind = WebhookKind::MutatingWebhookConfiguration;
        let mut allowed = true;
        for verb in ["list", "watch"] {
            allowed &= crate::k8s::may(client, verb, kind, None).await != Some(false);
        }
        if allowed {
            watches.spawn(crate::k8s::watch::topology_injectors(
                client.clone(),
                apply(),
            ));
        } else {
            tracing::info!(
                "not watching {} labelled {}: this identity may not list and watch them all, so a renamed topology injector shows as absent (name it with --topology-injector)",
                kind.plural(),
                crate::k8s::webhooks::TOPOLOGY_INJECTOR_LABEL
            );
            apply()(crate::k8s::watch::Change::InjectorsRefused);
        }
    }
    watches
}

/// Resolves on SIGTERM (what the kubelet sends) or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot handle SIGTERM: {e}; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
    }
}
