//! A webhook's certificate rotated under load: a real TLS admission webhook on 127.0.0.1 serves
//! the certificate of a Secret and reloads it after a kubelet-like lag; the API server calls it
//! (a ValidatingWebhookConfiguration with `failurePolicy: Fail`, a fresh TLS handshake per call)
//! for every ConfigMap created while the certificate is rotated. Counted: admission calls and
//! rejected creates.
//!
//! - certgen's staged rotation (the main job with a config whose `webhooks:` target is this
//!   configuration, `--overwrite`, a propagation delay above the lag): no failure.
//! - the one-write replacement kube-webhook-certgen's users do today (delete the Secret, run
//!   `create`, then `patch`; certgen's drop-in, which writes what kube-webhook-certgen writes,
//!   or kube-webhook-certgen itself with `CERTGEN_KWC_BIN=PATH`): failures, so the check can
//!   see them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::kwc::link_in;
use super::{Cluster, DeleteOnDrop, cluster, data_map};
use crate::util::{command, write};

/// The lag between a Secret's change and the webhook serving it: 0.5 to 1.5 s, like a kubelet
/// with a short sync period (it is about a minute with the defaults).
pub(super) const LAG_MS: (u64, u64) = (500, 1500);

/// What the webhook serves: PEM certificate and key.
type Serving = Arc<Mutex<Option<(Vec<u8>, Vec<u8>)>>>;

pub(super) struct Webhook {
    pub(super) port: u16,
    pub(super) calls: Arc<AtomicUsize>,
    pub(super) handshake_failures: Arc<AtomicUsize>,
    serving: Serving,
}

fn server_config(serving: &Serving) -> Option<Arc<rustls::ServerConfig>> {
    let (cert, key) = serving.lock().unwrap().clone()?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .ok()?;
    let key = PrivateKeyDer::from_pem_slice(&key).ok()?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .ok()?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Some(Arc::new(config))
}

/// Reads one HTTP/1.1 request and answers an AdmissionReview with "allowed".
async fn admit<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_end, length) = loop {
        let Ok(n) = s.read(&mut chunk).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (i + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let Ok(n) = s.read(&mut chunk).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let review: Value =
        serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or_default();
    let body = json!({
        "apiVersion": review["apiVersion"].as_str().unwrap_or("admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": true},
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let ok = s.write_all(response.as_bytes()).await.is_ok();
    let _ = s.shutdown().await;
    ok
}

impl Webhook {
    pub(super) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let serving: Serving = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let handshake_failures = Arc::new(AtomicUsize::new(0));
        let (s, c, f) = (serving.clone(), calls.clone(), handshake_failures.clone());
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                // The certificate of the moment, for every connection (hot reload).
                let Some(config) = server_config(&s) else {
                    continue;
                };
                let (c, f) = (c.clone(), f.clone());
                tokio::spawn(async move {
                    match tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
                        Ok(tls) => {
                            if admit(tls).await {
                                c.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(_) => {
                            f.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        Self {
            port,
            calls,
            handshake_failures,
            serving,
        }
    }

    /// The kubelet stand-in: follows the Secret's `cert`/`key` keys and installs each change
    /// after a random lag in [`LAG_MS`].
    pub(super) fn follow(
        &self,
        c: &Cluster,
        ns: &str,
        secret: &str,
        keys: (&'static str, &'static str),
    ) {
        self.follow_switching(c, ns, secret, Arc::new(Mutex::new(keys)));
    }

    /// [`Webhook::follow`], with the Secret's keys the webhook serves read from `keys` at every
    /// poll: switching them is a restarted pod serving other files.
    pub(super) fn follow_switching(
        &self,
        c: &Cluster,
        ns: &str,
        secret: &str,
        keys: Arc<Mutex<(&'static str, &'static str)>>,
    ) {
        let api = c.secrets(ns);
        let secret = secret.to_string();
        let serving = self.serving.clone();
        tokio::spawn(async move {
            let mut seen: Option<(Vec<u8>, Vec<u8>)> = None;
            loop {
                let (cert_key, key_key) = *keys.lock().unwrap();
                if let Ok(Some(s)) = api.get_opt(&secret).await {
                    let d = data_map(s);
                    if let (Some(cert), Some(key)) = (d.get(cert_key), d.get(key_key)) {
                        let now = Some((cert.clone(), key.clone()));
                        if now != seen {
                            let first = seen.is_none() && serving.lock().unwrap().is_none();
                            seen = now.clone();
                            let serving = serving.clone();
                            let r = u16::from_le_bytes([
                                certgen::pki::random_bytes(2)[0],
                                certgen::pki::random_bytes(2)[1],
                            ]) as u64;
                            let lag = LAG_MS.0 + r % (LAG_MS.1 - LAG_MS.0);
                            tokio::spawn(async move {
                                if !first {
                                    tokio::time::sleep(Duration::from_millis(lag)).await;
                                }
                                *serving.lock().unwrap() = now;
                            });
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
}

/// Creates ConfigMaps one after another until `stop`; returns (created, rejected, a sample of
/// the rejections).
async fn load(api: Api<ConfigMap>, stop: Arc<AtomicBool>) -> (usize, usize, Vec<String>) {
    let (mut ok, mut failed, mut sample) = (0, 0, Vec::new());
    let mut i = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("load-{i}")}})).unwrap();
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => ok += 1,
            Err(e) => {
                failed += 1;
                if sample.len() < 2 {
                    // The API server's message names the TLS failure; the rest repeats it.
                    sample.push(e.to_string().chars().take(300).collect());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (ok, failed, sample)
}

/// The webhook configuration: every ConfigMap created in `ns` is admitted by the webhook on
/// `port`, and a failed call rejects the create.
pub(super) async fn configuration(c: &Cluster, ns: &str, port: u16) -> DeleteOnDrop {
    let name = format!("{ns}-admission");
    let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"certgen.dev/test": "true"}},
        "webhooks": [{
            "name": "load.certgen.dev",
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate")},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                       "operations": ["CREATE"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        }]
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(c.client.clone())
        .create(&PostParams::default(), &v)
        .await
        .unwrap();
    DeleteOnDrop::new::<ValidatingWebhookConfiguration>(&name)
}

/// Waits until a ConfigMap create passes the webhook.
async fn admitted(api: &Api<ConfigMap>) {
    for i in 0..150 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("ready-{i}")}})).unwrap();
        if api.create(&PostParams::default(), &cm).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the webhook never admitted a ConfigMap");
}

pub(super) struct Counts {
    pub(super) calls: usize,
    pub(super) created: usize,
    pub(super) rejected: usize,
    pub(super) handshake_failures: usize,
    pub(super) sample: Vec<String>,
}

/// Runs `rotate` while ConfigMaps are created, then counts.
pub(super) async fn under_load<F: std::future::Future<Output = ()>>(
    c: &Cluster,
    ns: &str,
    webhook: &Webhook,
    rotate: F,
) -> Counts {
    let api: Api<ConfigMap> = Api::namespaced(c.client.clone(), ns);
    admitted(&api).await;
    let calls0 = webhook.calls.load(Ordering::SeqCst);
    let fails0 = webhook.handshake_failures.load(Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(load(api, stop.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    rotate.await;
    // Past the longest lag: every change has reached the webhook.
    tokio::time::sleep(Duration::from_millis(LAG_MS.1 + 1500)).await;
    stop.store(true, Ordering::SeqCst);
    let (created, rejected, sample) = load.await.unwrap();
    Counts {
        calls: webhook.calls.load(Ordering::SeqCst) - calls0,
        created,
        rejected,
        handshake_failures: webhook.handshake_failures.load(Ordering::SeqCst) - fails0,
        sample,
    }
}

pub(super) fn report(what: &str, n: &Counts) {
    eprintln!(
        "{what}: admission calls {}, creates {} admitted / {} rejected, TLS handshakes refused by the webhook's client {}; {:?}",
        n.calls, n.created, n.rejected, n.handshake_failures, n.sample
    );
}

#[tokio::test]
async fn admission_calls_during_a_rotation_staged_and_one_write() {
    let Some(c) = cluster().await else { return };

    // certgen's staged rotation, the main job with the webhook as a `webhooks:` target.
    let ns = c.namespace("certgen-kwc-rot").await;
    let webhook = Webhook::start().await;
    let _v = configuration(&c, &ns.name, webhook.port).await;
    let tmp = crate::util::tempdir();
    let config = write(
        tmp.path(),
        "webhook.yaml",
        &format!(
            "name: webhook\nnamespace: {ns}\nca:\n  commonName: webhook-ca\n  validity: 3650d\n  renewBefore: 90d\nsecrets:\n  - name: webhook\n    type: tls\n    commonName: webhook\n    ipAddresses: [\"127.0.0.1\"]\n    usages: [server]\n    validity: 365d\n    renewBefore: 30d\nwebhooks:\n  - kind: ValidatingWebhookConfiguration\n    name: {ns}-admission\n    caBundleFrom: webhook\n",
            ns = ns.name
        ),
    );
    let certgen = c
        .certgen(&ns.name)
        .args(["--config", config.to_str().unwrap()])
        .propagation_delay("3s");
    certgen.run_async().await.ok();
    webhook.follow(&c, &ns.name, "webhook", ("tls.crt", "tls.key"));
    let mut run = None;
    let staged = under_load(&c, &ns.name, &webhook, async {
        run = Some(certgen.clone().arg("--overwrite").run_async().await.ok());
    })
    .await;
    // The webhook serving the Secret is no pod and no declared consumer: nothing shows what
    // it holds, so each gate waits for its timer (it opened 0.1 s after the leaves once, and
    // the API server then refused the webhook's old leaf).
    let run: Value = serde_json::from_str(&run.unwrap().stdout).unwrap();
    for gate in run["gates"].as_array().unwrap() {
        assert_eq!(gate["openedBy"], "timer", "{gate}");
        assert!(
            gate["pods"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "Secret webhook" && p["openedBy"] == "timer"),
            "the report says which Secret held the gate: {gate}"
        );
    }
    report("staged rotation (certgen --overwrite)", &staged);

    // The one-write replacement: delete the Secret, `create`, `patch`. With kube-webhook-
    // certgen's blind copy (certgen's `patch --propagation-delay=0s` does the same; or
    // kube-webhook-certgen itself, `CERTGEN_KWC_BIN`, built from its source, not in CI), then
    // with certgen's default `patch`, which keeps the prior CA in the caBundle for the delay.
    let kwc_bin = std::env::var_os("CERTGEN_KWC_BIN").map(std::path::PathBuf::from);
    let one_write =
        replace_in_one_write(&c, tmp.path(), kwc_bin, &["--propagation-delay=0s"]).await;
    report(
        "one-write replacement (delete, create, patch copying the CA blindly)",
        &one_write,
    );
    let in_step = replace_in_one_write(&c, tmp.path(), None, &[]).await;
    report(
        "one-write replacement (delete, create, certgen's patch keeping the prior CA)",
        &in_step,
    );

    assert!(staged.calls > 50, "the load reached the webhook");
    assert_eq!(
        (staged.rejected, staged.handshake_failures),
        (0, 0),
        "a staged rotation never fails an admission call: {:?}",
        staged.sample
    );
    assert!(
        one_write.rejected > 0,
        "the one-write replacement fails admission calls, and the check sees it"
    );
}

/// The Secret created by `create` and patched in by `patch` (certgen's drop-in, or `bin`),
/// then replaced under load: deleted, `create`d, `patch`ed (with `patch_extra`, unless `bin`).
async fn replace_in_one_write(
    c: &Cluster,
    tmp: &std::path::Path,
    bin: Option<std::path::PathBuf>,
    patch_extra: &[&str],
) -> Counts {
    let ns = c.namespace("certgen-kwc-one").await;
    let webhook = Webhook::start().await;
    let _v = configuration(c, &ns.name, webhook.port).await;
    let extra: Vec<String> = match bin {
        Some(_) => Vec::new(),
        None => patch_extra.iter().map(|a| a.to_string()).collect(),
    };
    let bin = bin.unwrap_or_else(|| link_in(&tmp.join("bin")));
    let kwc = |args: Vec<String>| {
        let mut cmd = command(&bin);
        cmd.args(args).arg("--kubeconfig").arg(&c.kubeconfig);
        crate::util::run_async(cmd)
    };
    let create = vec![
        "create".to_string(),
        "--host=127.0.0.1".into(),
        format!("--namespace={}", ns.name),
        "--secret-name=webhook".into(),
    ];
    let mut patch = vec![
        "patch".to_string(),
        format!("--webhook-name={}-admission", ns.name),
        "--patch-mutating=false".into(),
        format!("--namespace={}", ns.name),
        "--secret-name=webhook".into(),
    ];
    patch.extend(extra);
    kwc(create.clone()).await.ok();
    kwc(patch.clone()).await.ok();
    webhook.follow(c, &ns.name, "webhook", ("cert", "key"));
    under_load(c, &ns.name, &webhook, async {
        c.secrets(&ns.name)
            .delete("webhook", &Default::default())
            .await
            .unwrap();
        kwc(create.clone()).await.ok();
        kwc(patch.clone()).await.ok();
    })
    .await
}
