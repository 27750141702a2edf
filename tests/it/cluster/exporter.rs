//! `certgen exporter` on the real control plane, as the chart's exporter identity (the
//! rendered ServiceAccount, Role, ClusterRole and bindings, nothing more): its `/metrics`
//! before, during and after a staged rotation, checked by `promtool check metrics`; no key
//! material; watches, not reads (its own request counter: after many changes, still one LIST
//! per kind and no GET); and a stop by SIGTERM to its PID that ends it cleanly.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::metrics::injector;
use super::{DeleteOnDrop, chart_dir, cluster, helm, run_helm};
use crate::metrics::{assert_valid_exposition, value};
use crate::util::KILLED;

/// A running exporter, stopped (SIGKILL to its own PID) if the test ends without stopping it.
pub(crate) struct Exporter {
    child: Child,
    pub(crate) port: u16,
    /// Every line it wrote to standard error so far.
    pub(crate) lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Exporter {
    pub(crate) fn start(kubeconfig: &Path, ns: &str) -> Self {
        Self::start_with(kubeconfig, ns, &[], &[])
    }

    /// With `args` after the usual ones, and `env`; waits until it says where it listens (or,
    /// when `args` hold `-q`, which silences that line, until a free port it is given answers).
    pub(crate) fn start_with(
        kubeconfig: &Path,
        ns: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let quiet = args.contains(&"-q");
        let given = quiet.then(|| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        });
        let listen = format!("127.0.0.1:{}", given.unwrap_or(0));
        let mut child = crate::util::certgen()
            .args(["exporter", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["-n", ns, "--listen", &listen])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("exporter: {line}");
                if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
                    let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    let _ = tx.send(port.parse::<u16>().unwrap());
                }
                seen.lock().unwrap().push(line);
            }
        });
        let port = match given {
            Some(port) => {
                let deadline = Instant::now() + Duration::from_secs(30);
                while TcpStream::connect(("127.0.0.1", port)).is_err() {
                    assert!(Instant::now() < deadline, "the exporter never listened");
                    std::thread::sleep(Duration::from_millis(50));
                }
                port
            }
            None => rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the exporter says where it listens"),
        };
        Self { child, port, lines }
    }

    /// `GET path`: the status code and body.
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, body.to_string())
    }

    /// `/metrics` once `ok` holds for it (the watch delivers changes within seconds).
    pub(crate) fn metrics_until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = self.get("/metrics");
            assert_eq!(status, 200, "{body}");
            if ok(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "{what}: never seen in\n{body}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM to its PID; it must exit 0 within 10 s.
    pub(crate) fn stop(mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "the exporter ended with {status} on SIGTERM"
                );
                return;
            }
            assert!(Instant::now() < deadline, "the exporter ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The one sample at 1 among the phases.
fn phase(text: &str, run: &str) -> String {
    let prefix = format!("certgen_rotation_phase{{{run},phase=\"");
    let on: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.ends_with(" 1"))
        .collect();
    assert_eq!(on.len(), 1, "{text}");
    on[0][prefix.len()..].split('"').next().unwrap().to_string()
}

/// The CA fingerprints of `secret`'s bundle, as the metrics name them.
fn bundle_cas(text: &str, ns: &str, secret: &str) -> Vec<String> {
    let prefix = format!(
        "certgen_bundle_ca_not_after_timestamp_seconds{{namespace=\"{ns}\",secret=\"{secret}\",ca_sha256=\""
    );
    let mut cas: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect();
    cas.sort();
    cas
}

pub(crate) fn requests(text: &str, verb: &str) -> f64 {
    value(
        text,
        &format!("certgen_exporter_api_requests_total{{verb=\"{verb}\"}}"),
    )
}

#[tokio::test]
async fn the_exporter_follows_a_staged_rotation_from_watches_as_the_charts_identity() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("certgen-exporter").await;
    let injector_name = format!("envoy-gateway-topology-injector.{}", ns.name);
    Api::<MutatingWebhookConfiguration>::all(c.client.clone())
        .create(&PostParams::default(), &injector(&injector_name, &ns.name))
        .await
        .unwrap();
    let _injector = DeleteOnDrop::new::<MutatingWebhookConfiguration>(&injector_name);

    // The chart's exporter identity, exactly as rendered, checked by the API server.
    let chart = chart_dir();
    let rendered = run_helm(
        &helm,
        &[
            "template",
            "certgen",
            chart.to_str().unwrap(),
            "--namespace",
            &ns.name,
            "--set",
            "metrics.enabled=true",
        ],
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple::<Value>(&rendered)
        .unwrap()
        .into_iter()
        .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == "exporter")
        .collect();
    let identity: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] != "Deployment" && d["kind"] != "Service")
        .cloned()
        .collect();
    let cluster_role = identity
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole for the injector")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let _cr = DeleteOnDrop::new::<ClusterRole>(&cluster_role);
    let _crb = DeleteOnDrop::new::<ClusterRoleBinding>(&cluster_role);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string();
    let (ok, out) = c.kubectl_stdin(&["create", "--dry-run=server", "--validate=strict"], &list);
    assert!(ok, "the API server refused the rendered exporter:\n{out}");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": identity}).to_string();
    let (ok, out) = c.kubectl_stdin(&["create"], &list);
    assert!(ok, "{out}");
    let sa = docs.iter().find(|d| d["kind"] == "ServiceAccount").unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let kubeconfig = c.token_kubeconfig(&ns.name, &sa).await;

    // Installed by an admin run; then the exporter, ready once both watches listed.
    c.certgen(&ns.name).quiet().run().ok();
    let exporter = Exporter::start(&kubeconfig, &ns.name);
    let deadline = Instant::now() + Duration::from_secs(30);
    while exporter.get("/readyz").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "never ready: {:?}",
            exporter.get("/readyz")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(exporter.get("/healthz").0, 200);
    assert_eq!(exporter.get("/nothing").0, 404);

    let run = format!("namespace=\"{}\",profile=\"envoy-gateway\"", ns.name);
    let target = format!(
        "certgen_cabundle_target_status{{namespace=\"{}\",target_kind=\"MutatingWebhookConfiguration\",target=\"{injector_name}\",secret=\"envoy-gateway\",status=\"in_sync\"}}",
        ns.name
    );
    let before = exporter.metrics_until("the installed state", |t| {
        t.contains(&format!("certgen_check_healthy{{{run}}} 1"))
            && t.contains(&format!("{target} 1"))
    });
    assert_valid_exposition(&before);
    assert_eq!(phase(&before, &run), "steady");
    let ca_before = bundle_cas(&before, &ns.name, "envoy");
    assert_eq!(ca_before.len(), 1, "{before}");

    // During: a staged rotation stopped after its trust step (the CA Secret and 3 bundles).
    let r = c
        .certgen(&ns.name)
        .quiet()
        .arg("--overwrite")
        .kill_after_write(4)
        .run();
    assert_eq!(r.code, KILLED, "{}", r.stderr);
    let during = exporter.metrics_until("the trust phase", |t| phase(t, &run) == "trust");
    assert_valid_exposition(&during);
    assert_eq!(
        value(&during, &format!("certgen_check_healthy{{{run}}}")),
        0.0
    );
    let started = value(
        &during,
        &format!("certgen_rotation_phase_start_timestamp_seconds{{{run},phase=\"trust\"}}"),
    );
    assert!(started > 0.0);

    // After: the rest of the rotation; the bundle trusts the new CA, the phase is steady.
    c.certgen(&ns.name).quiet().run().ok();
    let after = exporter.metrics_until("the rotation's end", |t| {
        phase(t, &run) == "steady" && bundle_cas(t, &ns.name, "envoy") != ca_before
    });
    assert_valid_exposition(&after);
    let ca_after = bundle_cas(&after, &ns.name, "envoy");
    assert!(
        ca_after.iter().any(|ca| !ca_before.contains(ca)),
        "a new CA: {ca_before:?} -> {ca_after:?}"
    );
    exporter.metrics_until("the injector in step", |t| {
        t.contains(&format!("{target} 1"))
    });

    // No key material: no part of any stored key appears in any scrape.
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &ns.name);
    for s in secrets.list(&Default::default()).await.unwrap() {
        for (k, v) in s.data.unwrap_or_default() {
            if !k.ends_with(".key") && k != "hmac-secret" {
                continue;
            }
            let text = String::from_utf8_lossy(&v.0).to_string();
            let body: String = text
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .collect::<String>()
                .chars()
                .take(24)
                .collect();
            for scrape in [&before, &during, &after] {
                assert!(
                    body.len() < 8 || !scrape.contains(&body),
                    "{k} in the metrics"
                );
            }
        }
    }

    // Watches, not reads: many changes later, one LIST per kind (Secrets, webhook
    // configurations), never a GET, and the changes arrived as watch events.
    let last = exporter.get("/metrics").1;
    assert_eq!(requests(&last, "get"), 0.0, "{last}");
    assert_eq!(requests(&last, "list"), 2.0, "{last}");
    assert!(requests(&last, "watch") >= 2.0, "{last}");
    for verb in ["create", "update", "patch", "delete"] {
        assert_eq!(requests(&last, verb), 0.0, "{verb}");
    }
    let events = value(
        &last,
        "certgen_exporter_watch_events_total{resource=\"secrets\"}",
    );
    assert!(
        events >= 5.0 + 4.0 + 4.0,
        "listed 5, then the writes of the rotation: {events}"
    );

    exporter.stop();
}
