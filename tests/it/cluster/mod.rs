//! Tests against a real control plane started by `tests/testenv/up` (it exports `KUBECONFIG`),
//! and the fixture they share.
//!
//! Each test gets its own namespace, labelled `certgen.dev/test=true` so a leftover can be
//! found, and deleted when the test ends. Without `KUBECONFIG` these tests are skipped with a
//! note, except under `CI`, where an unreachable control plane fails the run.
//!
//! Every helper a cluster test needs lives here, once:
//! - [`cluster`] and [`Cluster`]: the connection, a fresh namespace ([`TestNs`]), Secrets and
//!   Deployments, identities with exactly the permissions a test grants
//!   ([`Cluster::service_account_kubeconfig`]), kubectl;
//! - [`Certgen`]: running the binary against the cluster, the one way every test does it;
//! - [`Cluster::snapshot`] and [`Cluster::versions`]: what the Secrets hold, for the
//!   pairwise-trust check (`util::trust::check_snapshot`) and for "nothing was written";
//! - [`deployment`] and [`rolled_out`]: consumers that kwok runs, and kubectl's rollout rule;
//! - [`Volume`] and [`kubelet`]: the kubelet stand-in that copies a Secret into a pod's
//!   directory with the kubelet's atomic `..data` swap;
//! - [`DeleteOnDrop`]: cluster-scoped objects that must not outlive the test;
//! - [`helm`]: the test helm, for the chart.
//!
//! A set of three control planes (issue 42) has its own fixture, `set.rs`.

mod bad_input;
mod cert_manager;
mod chart;
mod consumers;
mod doc_snippets;
mod eg_compat;
mod events;
mod exporter;
mod faults;
mod foreign;
mod harness;
mod kinds;
mod kwc;
mod kwc_renew;
mod kwc_rotation;
mod lost;
mod metrics;
mod on_call;
mod pokes;
mod probe;
mod profiles_compat;
mod read_side;
mod real_node;
mod real_node_ctb;
mod real_node_faults;
mod real_node_hook;
mod real_node_kinds;
mod real_node_set;
mod real_node_writers;
mod rotation;
mod rotation_speed;
mod set;
mod smoke;
mod store;
mod trust_bundles;
mod valid;
mod webhook;
mod window;
mod writers;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::{Value, json};

use crate::util::trust::{CA_SECRET, LEAF_SECRETS, PROFILE_SECRETS, Snapshot};
use crate::util::{Run, root};

/// The label on every test namespace.
pub const TEST_LABEL: &str = "certgen.dev/test";

/// A connection to the test cluster.
pub struct Cluster {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
}

/// The test cluster, or `None` (with a note) when none is configured outside CI.
pub async fn cluster() -> Option<Cluster> {
    let Some(kubeconfig) = std::env::var_os("KUBECONFIG").map(PathBuf::from) else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "CI is set but KUBECONFIG is not: cluster tests must run (use tests/run-all, the README's test command)"
            );
        }
        eprintln!(
            "note: KUBECONFIG is not set; skipping a cluster test (run tests/testenv/up first)"
        );
        return None;
    };
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    // Fail loudly if the server is unreachable: a set KUBECONFIG means a cluster is expected.
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!(
            "the control plane at KUBECONFIG={} is unreachable: {e}",
            kubeconfig.display()
        )
    });
    Some(Cluster { client, kubeconfig })
}

/// An object that lives as long as the test: deleted when this is dropped.
pub struct DeleteOnDrop {
    pub name: String,
    delete: Option<Box<dyn FnOnce() + Send>>,
}

/// A namespace that lives as long as the test.
pub type TestNs = DeleteOnDrop;

impl DeleteOnDrop {
    /// Deletes the cluster-scoped object `name` of kind `K` when dropped.
    pub fn new<K>(name: &str) -> Self
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + 'static,
        K::DynamicType: Default,
    {
        let target = name.to_string();
        let delete = move || {
            // Drop cannot be async and runs inside the test's runtime: delete from a thread
            // with a runtime of its own, without waiting for finalizers.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    if let Ok(client) = kube::Client::try_default().await {
                        let _ = Api::<K>::all(client)
                            .delete(&target, &Default::default())
                            .await;
                    }
                });
            })
            .join();
        };
        Self {
            name: name.to_string(),
            delete: Some(Box::new(delete)),
        }
    }
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        if let Some(delete) = self.delete.take() {
            delete();
        }
    }
}

/// The test environment's bin directory (kubectl and the control plane's binaries), from
/// `tests/testenv/build` (already cached when a cluster is up).
pub fn testenv_bin() -> PathBuf {
    let out = Command::new(root().join("tests/testenv/build"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "tests/testenv/build failed");
    let bin = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(bin.lines().last().unwrap().trim())
}

impl Cluster {
    /// Creates a fresh, labelled namespace.
    pub async fn namespace(&self, prefix: &str) -> TestNs {
        let suffix = certgen::pki::hex(&certgen::pki::random_bytes(3));
        let name = format!("{prefix}-{suffix}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    TEST_LABEL.to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        TestNs::new::<Namespace>(&name)
    }

    /// Secrets in a namespace.
    pub fn secrets(&self, ns: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Deployments in a namespace.
    pub fn deployments(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Creates `d` in `ns`.
    pub async fn create_deployment(&self, ns: &str, d: &Deployment) -> Api<Deployment> {
        let api = self.deployments(ns);
        api.create(&PostParams::default(), d).await.unwrap();
        api
    }

    /// certgen as the admin in namespace `ns`.
    pub fn certgen(&self, ns: &str) -> Certgen {
        Certgen::new(&self.kubeconfig).namespace(ns)
    }

    /// One read of the profile's TLS Secrets (each must exist) and its CA Secret (if it
    /// exists), for `util::trust::check_snapshot`.
    pub async fn snapshot(&self, ns: &str) -> Snapshot {
        let api = self.secrets(ns);
        let mut out = Snapshot::new();
        for name in LEAF_SECRETS {
            let s = api.get(name).await.unwrap();
            out.insert(name.to_string(), data_map(s));
        }
        if let Some(s) = api.get_opt(CA_SECRET).await.unwrap() {
            out.insert(CA_SECRET.to_string(), data_map(s));
        }
        out
    }

    /// The resourceVersion of each of the profile's Secrets (`None`: absent): equal before and
    /// after means nothing was written.
    pub async fn versions(&self, ns: &str) -> BTreeMap<String, Option<String>> {
        let api = self.secrets(ns);
        let mut out = BTreeMap::new();
        for name in PROFILE_SECRETS {
            let rv = api
                .get_opt(name)
                .await
                .unwrap()
                .and_then(|s| s.metadata.resource_version);
            out.insert(name.to_string(), rv);
        }
        out
    }

    /// Mints a kubeconfig for a new ServiceAccount bound to a Role with `rules` in `ns`,
    /// authenticated by a TokenRequest token, so certgen runs with exactly those permissions.
    pub async fn service_account_kubeconfig(
        &self,
        ns: &str,
        name: &str,
        rules: Vec<PolicyRule>,
    ) -> PathBuf {
        let pp = PostParams::default();
        let meta = |n: &str| ObjectMeta {
            name: Some(n.to_string()),
            namespace: Some(ns.to_string()),
            ..Default::default()
        };
        Api::<ServiceAccount>::namespaced(self.client.clone(), ns)
            .create(
                &pp,
                &ServiceAccount {
                    metadata: meta(name),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        Api::<Role>::namespaced(self.client.clone(), ns)
            .create(
                &pp,
                &Role {
                    metadata: meta(name),
                    rules: Some(rules),
                },
            )
            .await
            .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), ns)
            .create(
                &pp,
                &RoleBinding {
                    metadata: meta(name),
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name: name.into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: name.into(),
                        namespace: Some(ns.into()),
                        ..Default::default()
                    }]),
                },
            )
            .await
            .unwrap();
        self.token_kubeconfig(ns, name).await
    }

    /// A kubeconfig authenticating as the existing ServiceAccount `sa` in `ns` with a
    /// TokenRequest token; server and CA come from the admin kubeconfig.
    pub async fn token_kubeconfig(&self, ns: &str, sa: &str) -> PathBuf {
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token: TokenRequest = Api::<ServiceAccount>::namespaced(self.client.clone(), ns)
            .create_subresource("token", sa, &PostParams::default(), &request)
            .await
            .unwrap();
        let token = token.status.expect("TokenRequest status").token;
        let admin = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cluster = admin.clusters[0].cluster.clone().unwrap();
        let server = cluster.server.unwrap();
        let ca = cluster.certificate_authority_data.unwrap_or_else(|| {
            base64(&std::fs::read(cluster.certificate_authority.unwrap()).unwrap())
        });
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {sa}\n  user:\n    token: {token}\ncontexts:\n- name: {sa}\n  context:\n    cluster: test\n    user: {sa}\n    namespace: {ns}\ncurrent-context: {sa}\n"
        );
        let dir = std::env::temp_dir().join(format!("certgen-test-{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{sa}.kubeconfig"));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A client authenticated by `kubeconfig` (an identity from
    /// [`Cluster::service_account_kubeconfig`]), for tests that drive certgen's stores directly.
    pub async fn client_as(&self, kubeconfig: &Path) -> kube::Client {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// kubectl from the test control plane's build (already cached when a cluster is up), as
    /// the admin.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(testenv_bin().join("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// `kubectl ARGS -f -` with `yaml` on stdin; returns (success, stdout+stderr).
    pub fn kubectl_stdin(&self, args: &[&str], yaml: &str) -> (bool, String) {
        let mut child = self
            .kubectl()
            .args(args)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

/// A RBAC rule.
pub fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// The value of `key` in a Secret (empty when absent).
pub fn data(s: &Secret, key: &str) -> Vec<u8> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

/// Every key of a Secret with its value.
pub fn data_map(s: Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

/// Standard base64, as the API carries Secret data in JSON.
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

// ---- certgen against the cluster --------------------------------------------------------------

/// certgen run against the test cluster: the one way the cluster tests run the binary, from
/// [`Cluster::certgen`] (the admin, in a namespace) or [`Certgen::new`] (any identity).
///
/// It passes `--kubeconfig`, `-n` when a namespace is given, `--output json`, and
/// `--propagation-delay 0s` unless told otherwise, so that a staged rotation runs through every
/// phase without waiting 90 s per gate.
#[derive(Clone)]
pub struct Certgen {
    check: bool,
    kubeconfig: PathBuf,
    namespace: Option<String>,
    propagation_delay: String,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Certgen {
    /// certgen as the identity in `kubeconfig`, with no `-n` (a namespace from its arguments).
    pub fn new(kubeconfig: &Path) -> Self {
        Self {
            check: false,
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: None,
            propagation_delay: "0s".into(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// `-n ns`.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_string());
        self
    }

    /// `certgen check`, which writes nothing and waits for nothing.
    pub fn check(mut self) -> Self {
        self.check = true;
        self
    }

    /// `--propagation-delay d` instead of `0s`.
    pub fn propagation_delay(mut self, d: &str) -> Self {
        self.propagation_delay = d.to_string();
        self
    }

    /// `-q`: only errors on stderr.
    pub fn quiet(self) -> Self {
        self.arg("-q")
    }

    /// A run Lease of 2 s, so that one left behind by a killed run expires quickly.
    pub fn short_lease(self) -> Self {
        self.env(certgen::k8s::lease::LEASE_SECONDS_ENV, "2")
    }

    /// Stops the run as if killed right after its `n`-th write (see `util::KILLED`).
    pub fn kill_after_write(self, n: usize) -> Self {
        self.env(certgen::apply::CRASH_ENV, n.to_string())
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The command, to spawn or run.
    pub fn command(&self) -> Command {
        let mut cmd = crate::util::certgen();
        if self.check {
            cmd.arg("check");
        }
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        if let Some(ns) = &self.namespace {
            cmd.args(["-n", ns]);
        }
        cmd.args(["--output", "json"]);
        if !self.check {
            cmd.args(["--propagation-delay", &self.propagation_delay]);
        }
        cmd.args(&self.args);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Runs it to the end, blocking this thread.
    pub fn run(&self) -> Run {
        Run::of(&mut self.command())
    }

    /// Runs it to the end on a blocking thread.
    pub async fn run_async(&self) -> Run {
        crate::util::run_async(self.command()).await
    }
}

// ---- consumers ---------------------------------------------------------------------------------

/// A Deployment of `replicas` pods that kwok runs (they tolerate every taint), with `spec`
/// merged into its spec like a JSON merge patch (objects merge, anything else replaces).
pub fn deployment(name: &str, replicas: i32, spec: Value) -> Deployment {
    let mut d = json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": "fake.invalid/app:1"}],
                    "tolerations": [{"operator": "Exists"}]
                }
            }
        }
    });
    merge(&mut d["spec"], spec);
    serde_json::from_value(d).unwrap()
}

/// `spec` for [`deployment`], with pods that match no node: they stay Pending, and the rollout
/// never completes.
pub fn unschedulable(mut spec: Value) -> Value {
    merge(
        &mut spec,
        json!({"template": {"spec": {"nodeSelector": {"certgen.dev/no-such-node": "true"}}}}),
    );
    spec
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (k, v) in from {
                merge(into.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, from) => *into = from,
    }
}

/// Deployment `name`'s generation: it grows with every change to its spec (a restart too).
pub async fn generation(api: &Api<Deployment>, name: &str) -> Option<i64> {
    api.get(name).await.unwrap().metadata.generation
}

/// Waits until Deployment `name` has rolled out by kubectl's rule: the controller has seen its
/// latest generation, and every replica is updated and available, with no old ones left.
pub async fn rolled_out(api: &Api<Deployment>, name: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let d = api.get(name).await.unwrap();
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let s = d.status.clone().unwrap_or_default();
        if s.observed_generation == d.metadata.generation
            && s.updated_replicas == Some(want)
            && s.available_replicas == Some(want)
            && s.replicas == Some(want)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Deployment {name} did not roll out within {within:?}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---- the kubelet stand-in ----------------------------------------------------------------------

/// The files of one version of a pod's mounted TLS Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Mounted {
    pub ca: Vec<u8>,
    pub crt: Vec<u8>,
    pub key: Vec<u8>,
}

impl Mounted {
    fn of(data: &BTreeMap<String, Vec<u8>>) -> Option<Self> {
        Some(Self {
            ca: data.get("ca.crt")?.clone(),
            crt: data.get("tls.crt")?.clone(),
            key: data.get("tls.key")?.clone(),
        })
    }

    /// Writes the files into `dir`, as plain files, for a process that loads them once.
    pub fn write_to(&self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        for (f, b) in [
            ("ca.crt", &self.ca),
            ("tls.crt", &self.crt),
            ("tls.key", &self.key),
        ] {
            std::fs::write(dir.join(f), b).unwrap();
        }
    }
}

/// One pod's Secret volume, written the way the kubelet writes it: each version into a new
/// directory, then one rename of the `..data` link, with the top-level names linked through
/// `..data`; a reader never sees half a version. Like the kubelet, it only moves forward, never
/// back to data read before the version it holds (by resourceVersion).
pub struct Volume {
    dir: PathBuf,
    version: Mutex<u64>,
}

impl Volume {
    pub fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        Self {
            dir: dir.to_path_buf(),
            version: Mutex::new(0),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The version the volume holds, read consistently through `..data`.
    pub fn read(&self) -> Option<Mounted> {
        let version = std::fs::read_link(self.dir.join("..data")).ok()?;
        let v = self.dir.join(version);
        Some(Mounted {
            ca: std::fs::read(v.join("ca.crt")).ok()?,
            crt: std::fs::read(v.join("tls.crt")).ok()?,
            key: std::fs::read(v.join("tls.key")).ok()?,
        })
    }

    /// Mounts `s` unless the volume already holds it or something newer; returns whether it did.
    pub fn mount(&self, s: &Secret) -> bool {
        let rv = s
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut current = self.version.lock().unwrap();
        if rv <= *current {
            return false;
        }
        self.write(&data_map(s.clone()));
        *current = rv;
        true
    }

    fn write(&self, data: &BTreeMap<String, Vec<u8>>) {
        let random = || certgen::pki::hex(&certgen::pki::random_bytes(6));
        let version = format!("..{}", random());
        let v = self.dir.join(&version);
        std::fs::create_dir_all(&v).unwrap();
        for (k, bytes) in data {
            std::fs::write(v.join(k), bytes).unwrap();
        }
        let tmp = self.dir.join(format!("..data_tmp{}", random()));
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        for k in data.keys() {
            let link = self.dir.join(k);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(k), &link).unwrap();
            }
        }
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(self.dir.join(old));
        }
    }
}

/// A random duration up to `max`.
pub fn random_up_to(max: Duration) -> Duration {
    let b = certgen::pki::random_bytes(8);
    let ms = u64::from_le_bytes(b.try_into().unwrap()) % (max.as_millis() as u64 + 1);
    Duration::from_millis(ms)
}

/// The kubelet stand-in for one pod: polls Secret `name` every `every` and, when its
/// certificates change, mounts the new version into `volume` after a random delay up to
/// `max_delay` (the kubelet's sync lag), then calls `mounted`. Runs until `stop` is set.
pub fn kubelet(
    secrets: Api<Secret>,
    name: &str,
    volume: Arc<Volume>,
    every: Duration,
    max_delay: Duration,
    stop: Arc<AtomicBool>,
    mounted: impl Fn() + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let name = name.to_string();
    tokio::spawn(async move {
        let mut last = volume.read();
        while !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(every).await;
            let Ok(Some(s)) = secrets.get_opt(&name).await else {
                continue;
            };
            let Some(m) = Mounted::of(&data_map(s.clone())) else {
                continue;
            };
            if last.as_ref() != Some(&m) {
                tokio::time::sleep(random_up_to(max_delay)).await;
                if volume.mount(&s) {
                    mounted();
                }
                last = Some(m);
            }
        }
    })
}

// ---- helm --------------------------------------------------------------------------------------

/// certgen's Helm chart.
pub fn chart_dir() -> PathBuf {
    root().join("deploy/helm/certgen")
}

/// helm from `tests/testenv/build-helm` (built once per machine, then cached), or `None` with a
/// note when it cannot be built outside CI.
pub fn helm() -> Option<PathBuf> {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = HELM.get_or_init(|| {
        let script = root().join("tests/testenv/build-helm");
        // Progress (a cold build takes minutes) goes straight to the terminal.
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("{} exited with {}", script.display(), out.status));
        }
        let dir = String::from_utf8_lossy(&out.stdout);
        let helm = Path::new(dir.lines().last().unwrap_or_default().trim()).join("helm");
        if helm.is_file() {
            Ok(helm)
        } else {
            Err(format!(
                "{} printed no bin directory with helm",
                script.display()
            ))
        }
    });
    match built {
        Ok(helm) => Some(helm.clone()),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but helm is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("note: helm is unavailable ({e}); skipping a chart test");
            None
        }
    }
}

/// Runs helm; its stdout, or a panic with its stderr.
pub fn run_helm(helm: &Path, args: &[&str]) -> String {
    let out = try_helm(helm, args);
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs helm, whatever it ends with (for a test that expects it to fail).
pub fn try_helm(helm: &Path, args: &[&str]) -> std::process::Output {
    // No user configuration or repositories: the chart is rendered from the tree alone.
    let home = std::env::temp_dir().join("certgen-test-helm");
    Command::new(helm)
        .args(args)
        .env("HELM_CONFIG_HOME", &home)
        .env("HELM_CACHE_HOME", &home)
        .env("HELM_DATA_HOME", &home)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}
