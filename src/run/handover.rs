//! Running `certgen handover cert-manager` ([`crate::handover`]): read and judge the Secrets
//! as `check` does, plan the objects, print them, or with `--apply` create them in order and
//! wait for cert-manager at each step (the Issuer ready before any Certificate; every
//! Certificate issued before the `caBundle` targets are handed to the CA injector). The
//! orchestration, apart from the pure plan so that it never reaches the Kubernetes adapter.

use std::time::Duration;

use tokio::time::Instant;

use crate::cli::HandoverArgs;
use crate::config::{self, ConfigError};
use crate::error::Error;
use crate::k8s::{self, KubeStore, certificates};
use crate::store::SecretStore;

/// How often `--apply` looks at cert-manager's objects while it waits.
const POLL: Duration = Duration::from_millis(250);

/// `certgen handover cert-manager`: the YAML, or with `--apply` one line per object written.
pub async fn cert_manager(args: &HandoverArgs) -> Result<String, Error> {
    let (config, local) = config::resolve_target(&args.target.spec())?;
    if local.is_none() {
        config.one_cluster(&args.target.context, "certgen handover")?;
    }
    if local.is_some() {
        return Err(Error::Config(ConfigError {
            source_name: "command line".into(),
            message: "--local: a hand-over to cert-manager is of Secrets in a cluster; nothing was written".into(),
        }));
    }
    let client = k8s::client(args.target.cluster()).await?;
    let store = KubeStore::new(client.clone(), &config.namespace);
    let observed = crate::observe::observe(&store, &config).await?;
    let now = k8s::servertime::now().unwrap_or_else(time::OffsetDateTime::now_utc);
    let ctx = crate::check::Context {
        undos: Default::default(),
        propagation_delay: config::propagation_delay(None, false),
        ..Default::default()
    };
    let report = crate::check::check(&config, &observed, now, store.describe(), &ctx);
    let handover = crate::handover::plan(&config, &report)?;
    if !args.apply {
        return Ok(handover.to_yaml(&config));
    }
    let deadline = Instant::now() + args.timeout;
    let mut lines = Vec::new();
    let mut written = Vec::new();
    let what = certificates::apply(&client, &handover.issuer).await?;
    written.push(what.clone());
    wait_ready(&client, &handover.issuer, deadline)
        .await
        .map_err(|e| e.after(written.clone()))?;
    lines.push(format!("{what}: applied; ready"));
    for c in &handover.certificates {
        let what = certificates::apply(&client, c)
            .await
            .map_err(|e| Error::from(e).after(written.clone()))?;
        written.push(what);
    }
    for c in &handover.certificates {
        wait_ready(&client, c, deadline)
            .await
            .map_err(|e| e.after(written.clone()))?;
        // The Secret marked as handed over (the Certificate's secretTemplate): from then on
        // certgen's runs stand down on it.
        let secret = c["spec"]["secretName"].as_str().unwrap_or_default();
        wait_marked(&client, &config.namespace, secret, deadline)
            .await
            .map_err(|e| e.after(written.clone()))?;
        lines.push(format!(
            "Certificate {}/{}: applied; ready: cert-manager manages Secret {secret} from now on, renewing it from certgen's CA",
            config.namespace,
            c["metadata"]["name"].as_str().unwrap_or_default(),
        ));
    }
    let webhooks = k8s::WebhookStore::new(client.clone());
    for t in &handover.targets {
        let what = crate::outside::describe_target(t.kind, &t.name);
        match webhooks
            .annotate(
                t.kind,
                &t.name,
                crate::handover::TargetAnnotation::KEY,
                &t.value,
            )
            .await
        {
            Ok(true) => {
                written.push(what.clone());
                lines.push(format!(
                    "{what}: annotated {}={}: cert-manager's CA injector keeps its caBundle from now on; certgen never writes it",
                    crate::handover::TargetAnnotation::KEY,
                    t.value
                ));
            }
            Ok(false) => lines.push(format!("{what}: not found; nothing to hand over")),
            Err(e) => return Err(Error::from(e).after(written)),
        }
    }
    lines.push(format!(
        "Handed over: certgen's runs now leave these Secrets and Secret {}/{} to cert-manager and exit 0. Its CA's rotation is cert-manager's: docs/cert-manager.md.",
        config.namespace, config.ca.secret_name
    ));
    Ok(lines.join("\n") + "\n")
}

/// Waits until Secret `ns/name` carries the hand-over's mark, or `deadline` (exit 3).
async fn wait_marked(
    client: &kube::Client,
    ns: &str,
    name: &str,
    deadline: Instant,
) -> Result<(), Error> {
    let key = crate::certmanager::HANDED_OVER;
    while !certificates::secret_annotated(client, ns, name, key).await? {
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "Secret {ns}/{name} does not carry {key} yet: cert-manager has not applied its Certificate's secretTemplate"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Waits until cert-manager's `object` is `Ready`, or `deadline` (exit 3, naming its last
/// message).
async fn wait_ready(
    client: &kube::Client,
    object: &serde_json::Value,
    deadline: Instant,
) -> Result<(), Error> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    loop {
        let last = match certificates::ready(client, kind, ns, name).await? {
            None => return Ok(()),
            Some(message) => message,
        };
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "{kind} {ns}/{name} is not ready: {last} (is cert-manager running? `kubectl describe {} -n {ns} {name}`)",
                kind.to_lowercase()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}
