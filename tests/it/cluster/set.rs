//! Tests against a *set* of three test control planes (issue 42: one CA across clusters), and the
//! fixture they share. `tests/testenv/set-up` starts two extra control planes beside the main one
//! and exports `CERTGEN_SET_KUBECONFIG` (contexts `m0` = the main plane, `m1`, `m2` = the extras)
//! and `CERTGEN_SET_DIRS` (the extras' state directories, in m1, m2 order).
//!
//! - [`Set::get`]: the members, each with its context, a client and (m1, m2) its kube-apiserver's
//!   recorded PID; `None` with a note outside CI when the set is not configured (a panic under
//!   `CI`, as `cluster()` does). Set tests take one lock: they pause members, so they never run
//!   beside each other, in this process or another (a file lock in m1's state directory:
//!   tests/run-all runs `cluster::set` in one process and `cluster::real_node_set`, which uses the
//!   set too, in the real-node group's).
//! - [`Set::pause`]: SIGSTOP to exactly one member's recorded kube-apiserver PID (after checking
//!   that `/proc/PID/cmdline` names its state directory), resumed by the guard's drop, also on a
//!   panic. m0 is never paused: other tests share it.
//! - [`Set::namespace`]: one namespace of one name in every member, deleted when dropped.
//! - [`Set::certgen`]: the binary with `--kubeconfig $CERTGEN_SET_KUBECONFIG --context m0
//!   --context m1 --context m2`, through the cluster tests' `Certgen` builder.
//! - [`Set::snapshots`], [`Set::versions`] and [`check_across`]: what every member's Secrets hold,
//!   and the cross-member trust check (every leaf any member holds against every bundle any
//!   member holds, by rustls-webpki), for one instant ([`check_across`]) or for every instant a
//!   watch saw ([`Recorder`]).
//!
//! The tests written against the set interface (`SET-SPEC` of issue 42) are in [`spec`]; the
//! cross-cluster handshake harness is [`handshakes`]. The test here checks the fixture itself.

mod clustermesh;
mod handshakes;
mod spec;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;

use super::{Certgen, TEST_LABEL, data_map};
use crate::util::trust::{
    CA_SECRET, LEAF_SECRETS, PROFILE_SECRETS, Snapshot, check_snapshot, fingerprints, webpki_trusts,
};

/// The set kubeconfig's variable.
pub const SET_KUBECONFIG_ENV: &str = "CERTGEN_SET_KUBECONFIG";
/// The extras' state directories' variable (m1, m2).
pub const SET_DIRS_ENV: &str = "CERTGEN_SET_DIRS";
/// The members' contexts, in order.
pub const CONTEXTS: [&str; 3] = ["m0", "m1", "m2"];

/// One member of the set.
pub struct Member {
    pub context: &'static str,
    pub client: kube::Client,
    /// The state directory of an extra (m1, m2); `None` for m0, which tests never stop.
    pub dir: Option<PathBuf>,
    /// Its kube-apiserver's PID, as `tests/testenv/up` recorded it (m1, m2).
    pub apiserver_pid: Option<i32>,
}

impl Member {
    /// Secrets in a namespace of this member.
    pub fn secrets(&self, ns: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), ns)
    }
}

/// The set: three members reached through one kubeconfig.
pub struct Set {
    pub kubeconfig: PathBuf,
    pub members: Vec<Member>,
    _serial: tokio::sync::MutexGuard<'static, ()>,
    /// The lock across processes (released when the file is closed).
    _across: std::fs::File,
}

/// Set tests pause members: one at a time in this process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The set, one test at a time across processes: an exclusive lock on `set.lock` in m1's state
/// directory, waited for (polled, so that no runtime thread blocks). A set test in another
/// process pausing m1 or m2 in the middle of this one's rotation would fail it for nothing.
async fn lock_across_processes(m1_dir: &Path) -> std::fs::File {
    let path = m1_dir.join("set.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let started = Instant::now();
    let mut noted = false;
    loop {
        match file.try_lock() {
            Ok(()) => {
                if noted {
                    eprintln!(
                        "set: took {} after {:.0}s",
                        path.display(),
                        started.elapsed().as_secs_f64()
                    );
                }
                return file;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                if !noted {
                    eprintln!(
                        "set: another process's set test holds {}; waiting",
                        path.display()
                    );
                    noted = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(std::fs::TryLockError::Error(e)) => panic!("locking {}: {e}", path.display()),
        }
    }
}

/// A client for `context` of `kubeconfig`.
pub async fn client_for(kubeconfig: &Path, context: &str) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig).unwrap(),
        &KubeConfigOptions {
            context: Some(context.to_string()),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("context {context} of {}: {e}", kubeconfig.display()));
    kube::Client::try_from(config).unwrap()
}

/// The API server URL of `context` in `kubeconfig`.
fn server_of(kubeconfig: &Kubeconfig, context: &str) -> String {
    let cluster = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .unwrap_or_else(|| panic!("no context {context}"));
    kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster)
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .unwrap_or_else(|| panic!("no server for context {context}"))
}

/// The PID recorded for `name` in a testenv state directory's `pids` file.
pub fn recorded_pid(dir: &Path, name: &str) -> i32 {
    let pids = std::fs::read_to_string(dir.join("pids")).unwrap();
    pids.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(n, _)| *n == name)
        .and_then(|(_, pid)| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {}/pids", dir.display()))
}

/// The process state letter of `pid` (`T` stopped, `S` sleeping, ...), from /proc/PID/stat.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

impl Set {
    /// The set, or `None` (with a note) when none is configured outside CI.
    pub async fn get() -> Option<Set> {
        let Some(kubeconfig) = std::env::var_os(SET_KUBECONFIG_ENV).map(PathBuf::from) else {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "CI is set but {SET_KUBECONFIG_ENV} is not: set tests must run (tests/run-all starts the set with tests/testenv/set-up)"
                );
            }
            eprintln!(
                "note: {SET_KUBECONFIG_ENV} is not set; skipping a set test (run tests/testenv/set-up after tests/testenv/up)"
            );
            return None;
        };
        let dirs: Vec<PathBuf> = std::env::var(SET_DIRS_ENV)
            .unwrap_or_else(|_| panic!("{SET_KUBECONFIG_ENV} is set but {SET_DIRS_ENV} is not"))
            .split_whitespace()
            .map(PathBuf::from)
            .collect();
        assert_eq!(
            dirs.len(),
            2,
            "{SET_DIRS_ENV}: the state directories of m1 and m2"
        );
        let serial = SERIAL.lock().await;
        let across = lock_across_processes(&dirs[0]).await;
        let parsed = Kubeconfig::read_from(&kubeconfig).unwrap();
        let mut members = Vec::new();
        for (i, context) in CONTEXTS.into_iter().enumerate() {
            let client = client_for(&kubeconfig, context).await;
            client.apiserver_version().await.unwrap_or_else(|e| {
                panic!(
                    "member {context} of {} is unreachable: {e}",
                    kubeconfig.display()
                )
            });
            let dir = i.checked_sub(1).map(|j| dirs[j].clone());
            let apiserver_pid = dir.as_ref().map(|d| {
                // The state directory is this context's control plane: same API server URL.
                let own = Kubeconfig::read_from(d.join("admin.kubeconfig")).unwrap();
                assert_eq!(
                    server_of(&own, "certgen-testenv"),
                    server_of(&parsed, context),
                    "{SET_DIRS_ENV} is not in m1, m2 order"
                );
                recorded_pid(d, "kube-apiserver")
            });
            members.push(Member {
                context,
                client,
                dir,
                apiserver_pid,
            });
        }
        Some(Set {
            kubeconfig,
            members,
            _serial: serial,
            _across: across,
        })
    }

    /// The member with `context`.
    pub fn member(&self, context: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.context == context)
            .unwrap_or_else(|| panic!("no member {context}"))
    }

    /// Stops `context`'s kube-apiserver (SIGSTOP to its recorded PID) until the guard is
    /// dropped. Only m1 and m2 can be paused.
    pub fn pause(&self, context: &str) -> Paused {
        let m = self.member(context);
        let (Some(dir), Some(pid)) = (&m.dir, m.apiserver_pid) else {
            panic!("{context} is shared with other tests and is never paused");
        };
        // The recorded PID is still that kube-apiserver, started for this state directory.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains("kube-apiserver") && cmdline.contains(dir.to_str().unwrap()),
            "pid {pid} is not {context}'s kube-apiserver: {cmdline:?}"
        );
        stop(pid, format!("set member {context}'s kube-apiserver"))
    }

    /// A fresh namespace of one name in every member, labelled like every test namespace.
    pub async fn namespace(&self, prefix: &str) -> SetNs {
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
        let guard = SetNs {
            name: name.clone(),
            kubeconfig: self.kubeconfig.clone(),
        };
        for m in &self.members {
            Api::<Namespace>::all(m.client.clone())
                .create(&PostParams::default(), &ns)
                .await
                .unwrap();
        }
        guard
    }

    /// certgen over the whole set (`--context m0 --context m1 --context m2`) in namespace `ns`.
    pub fn certgen(&self, ns: &str) -> Certgen {
        self.certgen_in(ns, &CONTEXTS)
    }

    /// certgen with these contexts of the set kubeconfig (one: a single-cluster run).
    pub fn certgen_in(&self, ns: &str, contexts: &[&str]) -> Certgen {
        let mut c = Certgen::new(&self.kubeconfig).namespace(ns);
        for context in contexts {
            c = c.args(["--context", context]);
        }
        c
    }

    /// Every member's snapshot of the profile's Secrets (as `Cluster::snapshot`), by context.
    pub async fn snapshots(&self, ns: &str) -> BTreeMap<String, Snapshot> {
        let mut out = BTreeMap::new();
        for m in &self.members {
            let api = m.secrets(ns);
            let mut snap = Snapshot::new();
            for name in LEAF_SECRETS.iter().chain(&[CA_SECRET]) {
                if let Some(s) = api.get_opt(name).await.unwrap() {
                    snap.insert(name.to_string(), data_map(s));
                }
            }
            out.insert(m.context.to_string(), snap);
        }
        out
    }

    /// Every member's resourceVersion of each of the profile's Secrets (`None`: absent), by
    /// context: equal before and after means nothing was written anywhere.
    pub async fn versions(&self, ns: &str) -> BTreeMap<String, BTreeMap<String, Option<String>>> {
        let mut out = BTreeMap::new();
        for m in &self.members {
            let api = m.secrets(ns);
            let mut v = BTreeMap::new();
            for name in PROFILE_SECRETS {
                let rv = api
                    .get_opt(name)
                    .await
                    .unwrap()
                    .and_then(|s| s.metadata.resource_version);
                v.insert(name.to_string(), rv);
            }
            out.insert(m.context.to_string(), v);
        }
        out
    }
}

/// Stops the process `pid` (SIGSTOP; the caller has checked that the PID is still `what`) and
/// waits until the kernel shows it stopped; resumed when the guard is dropped.
pub fn stop(pid: i32, what: String) -> Paused {
    let raw = rustix::process::Pid::from_raw(pid).expect("a positive PID");
    rustix::process::kill_process(raw, rustix::process::Signal::STOP).unwrap();
    let guard = Paused { pid, what };
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_state(pid) != Some('T') {
        assert!(Instant::now() < deadline, "{} did not stop", guard.what);
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("stopped {} (pid {pid})", guard.what);
    guard
}

/// A stopped process (a paused member's kube-apiserver, cert-manager's CA injector): resumed
/// (SIGCONT to the same PID) when dropped, however the test ends.
pub struct Paused {
    pid: i32,
    what: String,
}

impl Drop for Paused {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.pid).expect("a positive PID");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
        eprintln!("resumed {} (pid {})", self.what, self.pid);
    }
}

/// A namespace in every member, deleted from every member when dropped (without waiting for
/// finalizers; a member that does not answer within 10 s keeps it).
pub struct SetNs {
    pub name: String,
    kubeconfig: PathBuf,
}

impl Drop for SetNs {
    fn drop(&mut self) {
        let (name, kubeconfig) = (self.name.clone(), self.kubeconfig.clone());
        // Drop cannot be async and runs inside the test's runtime: delete from a thread with a
        // runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for context in CONTEXTS {
                    let delete = async {
                        let client = client_for(&kubeconfig, context).await;
                        let _ = Api::<Namespace>::all(client)
                            .delete(&name, &Default::default())
                            .await;
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(10), delete).await;
                }
            });
        })
        .join();
    }
}

// ---- trust across members ----------------------------------------------------------------------

/// Snapshots by member context.
pub type Snapshots = BTreeMap<String, Snapshot>;

/// The cross-member guarantee at one instant: each member's own (`check_snapshot`: pairs within
/// it, bundles of at most two distinct CAs), and every leaf that any member holds verifies
/// (rustls-webpki, now) against every bundle that any member holds. Members without the
/// profile's TLS Secrets yet are skipped. Returns the failures.
pub fn check_across(snaps: &Snapshots) -> Vec<String> {
    let mut failures = Vec::new();
    let complete = |s: &Snapshot| {
        LEAF_SECRETS
            .iter()
            .all(|n| s.get(*n).is_some_and(|d| d.contains_key("tls.crt")))
    };
    for (m, s) in snaps.iter().filter(|(_, s)| complete(s)) {
        let (own, _) = check_snapshot(s);
        failures.extend(own.into_iter().map(|f| format!("{m}: {f}")));
    }
    for (lm, ls) in snaps.iter().filter(|(_, s)| complete(s)) {
        for (bm, bs) in snaps.iter().filter(|(m, s)| *m != lm && complete(s)) {
            for leaf in LEAF_SECRETS {
                for bundle in LEAF_SECRETS {
                    if !webpki_trusts(&bs[bundle]["ca.crt"], &ls[leaf]["tls.crt"]) {
                        failures.push(format!(
                            "{lm}'s {leaf} leaf is not trusted by {bm}'s {bundle} bundle"
                        ));
                    }
                }
            }
        }
    }
    failures
}

/// The fingerprint of the active CA (`tls.crt` of the CA Secret) in each member, by context.
pub fn active_cas(snaps: &Snapshots) -> BTreeMap<String, Option<String>> {
    snaps
        .iter()
        .map(|(m, s)| {
            let fp = s
                .get(CA_SECRET)
                .and_then(|d| d.get("tls.crt"))
                .map(|b| fingerprints(b)[0].clone());
            (m.clone(), fp)
        })
        .collect()
}

/// The CA Secret's `tls.crt` and `tls.key` bytes in each member, by context.
pub fn ca_bytes(snaps: &Snapshots) -> BTreeMap<String, (Vec<u8>, Vec<u8>)> {
    snaps
        .iter()
        .filter_map(|(m, s)| {
            let d = s.get(CA_SECRET)?;
            Some((
                m.clone(),
                (d.get("tls.crt")?.clone(), d.get("tls.key")?.clone()),
            ))
        })
        .collect()
}

// ---- watching every member ---------------------------------------------------------------------

/// One Secret version a watch saw.
#[derive(Clone)]
pub struct Seen {
    /// Since the recorder started.
    pub at: Duration,
    pub member: String,
    pub secret: String,
    pub resource_version: String,
    pub data: BTreeMap<String, Vec<u8>>,
}

/// Watches the namespace's Secrets in every member and records each version with the time the
/// watch saw it, until [`Recorder::stop`].
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    /// Starts the watches; returns once each has delivered its initial list.
    pub async fn start(set: &Set, ns: &str) -> Self {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let started = Instant::now();
        let mut tasks = Vec::new();
        let mut ready = Vec::new();
        for m in &set.members {
            let (seen, api, member) = (seen.clone(), m.secrets(ns), m.context.to_string());
            let (tx, rx) = tokio::sync::oneshot::channel();
            ready.push(rx);
            tasks.push(tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Ok(Some(ev)) = stream.try_next().await {
                    match ev {
                        watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                            seen.lock().unwrap().push(Seen {
                                at: started.elapsed(),
                                member: member.clone(),
                                secret: s.metadata.name.clone().unwrap_or_default(),
                                resource_version: s
                                    .metadata
                                    .resource_version
                                    .clone()
                                    .unwrap_or_default(),
                                data: data_map(s),
                            });
                        }
                        watcher::Event::InitDone => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        _ => {}
                    }
                }
            }));
        }
        for rx in ready {
            tokio::time::timeout(Duration::from_secs(30), rx)
                .await
                .expect("every member's watch lists within 30 s")
                .unwrap();
        }
        Self { seen, tasks }
    }

    /// What was seen so far, in the order it was seen.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops the watches; returns every version seen, in order.
    pub fn stop(self) -> Vec<Seen> {
        for t in &self.tasks {
            t.abort();
        }
        self.seen()
    }
}

/// The states the watches saw, one after each recorded version of one of the profile's TLS
/// Secrets or its CA Secret (the latest version of every member's Secrets at that moment), with
/// that version.
pub fn states(seen: &[Seen]) -> Vec<(Seen, Snapshots)> {
    let mut now = Snapshots::new();
    let mut out = Vec::new();
    let profile = |name: &str| name == CA_SECRET || LEAF_SECRETS.contains(&name);
    for s in seen.iter().filter(|s| profile(&s.secret)) {
        now.entry(s.member.clone())
            .or_default()
            .insert(s.secret.clone(), s.data.clone());
        out.push((s.clone(), now.clone()));
    }
    out
}

/// Whether every bundle in every member of `snaps` holds the CA with fingerprint `ca`.
pub fn every_bundle_holds(snaps: &Snapshots, ca: &str, members: usize) -> bool {
    snaps.len() == members
        && snaps.values().all(|s| {
            LEAF_SECRETS.iter().all(|n| {
                s.get(*n)
                    .and_then(|d| d.get("ca.crt"))
                    .is_some_and(|b| fingerprints(b).iter().any(|f| f == ca))
            })
        })
}

/// The distinct CAs (fingerprints) in any Secret of `snaps`.
pub fn cas_anywhere(snaps: &Snapshots) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in snaps.values() {
        for d in s.values() {
            for key in ["ca.crt", "next.crt"] {
                if let Some(b) = d.get(key) {
                    out.extend(fingerprints(b));
                }
            }
        }
        if let Some(b) = s.get(CA_SECRET).and_then(|d| d.get("tls.crt")) {
            out.extend(fingerprints(b));
        }
    }
    out
}

// ---- the fixture itself ------------------------------------------------------------------------

/// The fixture works without certgen's set support: three different clusters (kube-system
/// UIDs), a namespace in each, a paused m2 whose API server does not answer while m0 and m1 do,
/// and answers again once resumed (also when the guard is dropped by a panic).
#[tokio::test(flavor = "multi_thread")]
async fn the_set_fixture_starts_three_clusters_and_pauses_exactly_one() {
    let Some(set) = Set::get().await else { return };
    let mut uids = BTreeSet::new();
    for m in &set.members {
        let ks = Api::<Namespace>::all(m.client.clone())
            .get("kube-system")
            .await
            .unwrap();
        uids.insert(ks.metadata.uid.unwrap());
    }
    assert_eq!(uids.len(), 3, "three clusters, not one reached three ways");

    let ns = set.namespace("set-fixture").await;
    for m in &set.members {
        let got = Api::<Namespace>::all(m.client.clone())
            .get(&ns.name)
            .await
            .unwrap();
        assert_eq!(got.metadata.name.as_deref(), Some(ns.name.as_str()));
    }

    let ping = |m: &Member| {
        let api = Api::<Namespace>::all(m.client.clone());
        async move {
            tokio::time::timeout(Duration::from_secs(3), api.get("kube-system"))
                .await
                .map(|r| r.is_ok())
        }
    };
    {
        let _paused = set.pause("m2");
        assert_eq!(
            process_state(set.member("m2").apiserver_pid.unwrap()),
            Some('T')
        );
        assert!(
            ping(set.member("m2")).await.is_err(),
            "a request to the paused m2 times out"
        );
        assert_eq!(ping(set.member("m0")).await, Ok(true));
        assert_eq!(ping(set.member("m1")).await, Ok(true));
    }
    assert_ne!(
        process_state(set.member("m2").apiserver_pid.unwrap()),
        Some('T')
    );
    assert_eq!(ping(set.member("m2")).await, Ok(true), "m2 answers again");

    // A panic while paused resumes it too.
    let pid = set.member("m1").apiserver_pid.unwrap();
    let caught = {
        let paused = set.pause("m1");
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _paused = paused;
            panic!("a test failing while m1 is paused");
        }))
    };
    assert!(caught.is_err());
    assert_ne!(process_state(pid), Some('T'), "the panic resumed m1");
    assert_eq!(ping(set.member("m1")).await, Ok(true));

    // m0 is shared with every other test: `pause` refuses it, having no PID to stop.
    assert!(set.member("m0").apiserver_pid.is_none() && set.member("m0").dir.is_none());
}
