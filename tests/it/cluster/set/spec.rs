//! The set of clusters as issue 42 specifies it, on three real control planes: one CA in every
//! member, a staged rotation whose phases are barriers over all members (no leaf changes
//! anywhere before every member's bundles hold the new CA; every cross-member pair verifies at
//! every instant the watches saw; 0 failed cross-cluster handshakes), a member's API server
//! stopped (SIGSTOP) before the run and at the trust gate, two contexts that reach one cluster,
//! a member's own single-cluster run, and `check` over the set.
//!
//! Every run uses the harness config (`harness::config_yaml`: a SAN per Secret that the
//! cross-cluster peers dial), a short propagation delay, `--no-poke` (kwok's pods and the
//! kubelet stand-ins answer no poke: the timer is under test) and a bounded `--timeout`; the
//! test kills a run that outlives its own deadline, so a hang fails instead of blocking.
//!
//! The checks of the rotation test are themselves checked on rotations that need no set
//! support: a staged rotation in m0 mirrored into m1 and m2 at once passes them, the same with
//! m2 mirrored later than the gate is refused (`the_set_rotation_checks_*`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams};
use kube::config::Kubeconfig;
use serde_json::json;

use super::handshakes::{Count, CrossPeers, MAX_SYNC_DELAY, render};
use super::{
    CONTEXTS, Recorder, Seen, Set, SetNs, Snapshots, active_cas, ca_bytes, cas_anywhere,
    check_across, every_bundle_holds, states,
};
use crate::cluster::{Certgen, data_map, deployment, harness::config_yaml};
use crate::util::Run;
use crate::util::trust::{CA_SECRET, LEAF_SECRETS, fingerprints};

/// The propagation delay of the set runs (ten times the stand-ins' longest sync delay).
const DELAY: &str = "3s";

/// A namespace in every member with the harness config's consumer (`envoy-ratelimit`, rolled
/// out by each member's kwok), and the config file.
struct Fixture {
    ns: SetNs,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

async fn fixture(set: &Set, prefix: &str) -> Fixture {
    let ns = set.namespace(prefix).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("set.yaml");
    std::fs::write(&config, config_yaml(&ns.name)).unwrap();
    for m in &set.members {
        Api::<Deployment>::namespaced(m.client.clone(), &ns.name)
            .create(
                &PostParams::default(),
                &deployment("envoy-ratelimit", 1, json!({})),
            )
            .await
            .unwrap();
    }
    Fixture {
        ns,
        config,
        _dir: dir,
    }
}

impl Fixture {
    /// `c` with the config, `--no-poke`, a short delay, quiet.
    fn with(&self, c: Certgen) -> Certgen {
        c.args(["--config", self.config.to_str().unwrap(), "--no-poke", "-q"])
            .propagation_delay(DELAY)
    }

    /// certgen with these contexts (one: a member's own single-cluster run).
    fn certgen(&self, set: &Set, contexts: &[&str]) -> Certgen {
        self.with(set.certgen_in(&self.ns.name, contexts))
    }

    /// A set run (every context) with `extra`.
    fn set_run(&self, set: &Set, extra: &[&str]) -> Certgen {
        self.with(set.certgen(&self.ns.name)).args(extra)
    }
}

/// Runs `cmd`, killing it (our child, by its PID) if it is not done within `within`.
pub(super) async fn run_within(mut cmd: Command, within: Duration) -> Run {
    tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + within;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "certgen did not end within {within:?}; stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Run::from(child.wait_with_output().unwrap())
    })
    .await
    .unwrap()
}

/// Each member's TLS Secrets' leaves (`tls.crt`), by (member, Secret).
fn leaves(snaps: &Snapshots) -> BTreeMap<(String, String), Vec<u8>> {
    let mut out = BTreeMap::new();
    for (m, s) in snaps {
        for name in LEAF_SECRETS {
            if let Some(crt) = s.get(name).and_then(|d| d.get("tls.crt")) {
                out.insert((m.clone(), name.to_string()), crt.clone());
            }
        }
    }
    out
}

/// The snapshots of `members` only (the others may be paused).
async fn snapshots_of(set: &Set, ns: &str, members: &[&str]) -> Snapshots {
    let mut out = Snapshots::new();
    for m in members {
        let api = set.member(m).secrets(ns);
        let mut snap = crate::util::trust::Snapshot::new();
        for name in LEAF_SECRETS.iter().chain(&[CA_SECRET]) {
            if let Some(s) = api.get_opt(name).await.unwrap() {
                snap.insert(name.to_string(), data_map(s));
            }
        }
        out.insert(m.to_string(), snap);
    }
    out
}

/// Installs over the whole set; asserts one CA (same certificate and key bytes) in every
/// member, every cross-member pair verifying, and the set recorded on every CA Secret.
/// Returns the CA's fingerprint.
async fn install(set: &Set, f: &Fixture) -> String {
    let r = run_within(
        f.set_run(set, &["--timeout", "60s"]).command(),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(r.code, 0, "set install: {}", r.stderr);
    let snaps = set.snapshots(&f.ns.name).await;
    let cas = ca_bytes(&snaps);
    assert_eq!(cas.len(), 3, "a CA Secret in every member");
    let first = cas.values().next().unwrap();
    assert!(
        cas.values().all(|c| c == first),
        "one CA (same tls.crt and tls.key) in every member"
    );
    let failures = check_across(&snaps);
    assert!(failures.is_empty(), "after install: {failures:?}");
    // The set is recorded on every member's CA Secret: one id, the three members' UIDs.
    let mut uids = BTreeSet::new();
    for m in &set.members {
        let ks = Api::<Namespace>::all(m.client.clone())
            .get("kube-system")
            .await
            .unwrap();
        uids.insert(ks.metadata.uid.unwrap());
    }
    let mut ids = BTreeSet::new();
    for m in &set.members {
        let ca = m.secrets(&f.ns.name).get(CA_SECRET).await.unwrap();
        let record = ca
            .metadata
            .annotations
            .unwrap_or_default()
            .get("certgen.dev/set")
            .cloned()
            .unwrap_or_else(|| panic!("{}: no certgen.dev/set on the CA Secret", m.context));
        let v: serde_json::Value = serde_json::from_str(&record).unwrap();
        let members: BTreeSet<String> = v["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string())
            .collect();
        assert_eq!(members, uids, "{}: the set's members", m.context);
        ids.insert(v["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 1, "one set id in every member");
    active_cas(&snaps)["m0"].clone().unwrap()
}

/// The stdout and stderr of a run, for messages.
fn said(r: &Run) -> String {
    format!("{}{}", r.stdout, r.stderr)
}

/// Whether `text` names context `name` as a word of its own (not inside `m1-x` or a path).
fn names(text: &str, name: &str) -> bool {
    regex::Regex::new(&format!(
        r"(^|[^A-Za-z0-9_.-]){}([^A-Za-z0-9_-]|$)",
        regex::escape(name)
    ))
    .unwrap()
    .is_match(text)
}

/// Waits until m0's CA Secret holds a pending CA (`next.crt`); returns its fingerprint.
async fn pending_in_m0(set: &Set, ns: &str, within: Duration) -> String {
    let api = set.member("m0").secrets(ns);
    let deadline = Instant::now() + within;
    loop {
        let ca = data_map(api.get(CA_SECRET).await.unwrap());
        if let Some(next) = ca.get("next.crt") {
            return fingerprints(next)[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no pending CA in m0 within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// After the pause is over and a re-run: one CA everywhere, `new`, not `old`; no CA but
/// these two anywhere; every cross-member pair verifies.
async fn one_new_ca_everywhere(set: &Set, ns: &str, old: &str) -> String {
    let snaps = set.snapshots(ns).await;
    let active = active_cas(&snaps);
    let new = active["m0"].clone().unwrap();
    assert_ne!(new, old, "rotated");
    assert!(
        active.values().all(|a| a.as_deref() == Some(new.as_str())),
        "one CA everywhere: {active:?}"
    );
    let cas = ca_bytes(&snaps);
    let first = cas.values().next().unwrap();
    assert!(cas.values().all(|c| c == first), "the same CA bytes");
    let anywhere = cas_anywhere(&snaps);
    let allowed: BTreeSet<String> = [old.to_string(), new.clone()].into();
    assert!(anywhere.is_subset(&allowed), "a third CA: {anywhere:?}");
    let failures = check_across(&snaps);
    assert!(failures.is_empty(), "{failures:?}");
    new
}

// ---- (a) install and a staged rotation over three members ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_rotation_changes_no_leaf_before_every_member_trusts_the_new_ca() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-rotate").await;
    let old = install(&set, &f).await;
    let before = leaves(&set.snapshots(&f.ns.name).await);
    let cmd = f
        .set_run(&set, &["--overwrite", "--timeout", "120s"])
        .command();
    let (r, seen, phases) = watched_rotation(&set, &f, &old, cmd).await;
    assert_eq!(r.code, 0, "set --overwrite: {}", r.stderr);
    assert_set_rotation(&set, &f, &old, &before, &seen, &phases).await;
}

/// Runs `cmd` (a rotation) while the watches record every member's Secrets and the
/// cross-cluster peers handshake, phases as m0's CA Secret shows them: a pending CA (trust),
/// then a new active CA (leaves), then the run's end (after). Returns the run, what the watches
/// saw and the handshakes by phase.
async fn watched_rotation(
    set: &Set,
    f: &Fixture,
    old: &str,
    cmd: Command,
) -> (Run, Vec<Seen>, Vec<(String, Count)>) {
    let recorder = Recorder::start(set, &f.ns.name).await;
    let peers = CrossPeers::start(set, &f.ns.name, "installed").await;
    let run = tokio::spawn(run_within(cmd, Duration::from_secs(240)));
    let m0 = set.member("m0").secrets(&f.ns.name);
    while !run.is_finished() {
        if let Ok(ca) = m0.get(CA_SECRET).await {
            let ca = data_map(ca);
            let active = fingerprints(&ca["tls.crt"])[0].clone();
            if active != old {
                peers.phase("leaves");
            } else if ca.contains_key("next.crt") {
                peers.phase("trust");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = run.await.unwrap();
    peers.phase("after");
    tokio::time::sleep(MAX_SYNC_DELAY * 3).await;
    let phases = peers.stop().await;
    let seen = recorder.stop();
    eprintln!(
        "set rotation, cross-cluster handshakes by phase:\n{}",
        render(&phases)
    );
    (r, seen, phases)
}

/// What a staged rotation over the set must show: one new CA everywhere at the end; at every
/// instant the watches saw, every cross-member pair verifies and no third CA exists; no leaf
/// changed in any member before every member's bundles held the new CA; no failed
/// cross-cluster handshake.
async fn assert_set_rotation(
    set: &Set,
    f: &Fixture,
    old: &str,
    before: &BTreeMap<(String, String), Vec<u8>>,
    seen: &[Seen],
    phases: &[(String, Count)],
) {
    let new = one_new_ca_everywhere(set, &f.ns.name, old).await;
    let violations = set_rotation_violations(old, &new, before, seen, phases);
    assert!(violations.is_empty(), "{violations:#?}");
}

/// The trajectory's violations of [`assert_set_rotation`]'s rules (the end state aside), the
/// first of each kind.
fn set_rotation_violations(
    old: &str,
    new: &str,
    before: &BTreeMap<(String, String), Vec<u8>>,
    seen: &[Seen],
    phases: &[(String, Count)],
) -> Vec<String> {
    let mut out = Vec::new();
    let allowed: BTreeSet<String> = [old.to_string(), new.to_string()].into();
    let mut all_trust: Option<usize> = None;
    let mut first_leaf: Option<(usize, String)> = None;
    let mut pair_failure = None;
    let mut third_ca = None;
    let history = states(seen);
    for (i, (s, snaps)) in history.iter().enumerate() {
        let at = format!(
            "{:?} ({}'s {} v{})",
            s.at, s.member, s.secret, s.resource_version
        );
        let failures = check_across(snaps);
        if pair_failure.is_none() && !failures.is_empty() {
            pair_failure = Some(format!("cross-member pairs fail at {at}: {failures:?}"));
        }
        let anywhere = cas_anywhere(snaps);
        if third_ca.is_none() && !anywhere.is_subset(&allowed) {
            third_ca = Some(format!("a third CA at {at}"));
        }
        if all_trust.is_none() && every_bundle_holds(snaps, new, 3) {
            all_trust = Some(i);
        }
        if first_leaf.is_none()
            && LEAF_SECRETS.contains(&s.secret.as_str())
            && s.data.get("tls.crt") != before.get(&(s.member.clone(), s.secret.clone()))
        {
            first_leaf = Some((i, at));
        }
    }
    out.extend(pair_failure);
    out.extend(third_ca);
    match (all_trust, &first_leaf) {
        (_, None) => out.push("no leaf changed".into()),
        (None, Some((_, which))) => out.push(format!(
            "a leaf changed ({which}) and the members' bundles never all held the new CA"
        )),
        (Some(t), Some((l, which))) if t > *l => out.push(format!(
            "a leaf changed ({which}) before every member's bundles held the new CA (at {:?})",
            history[t].0.at
        )),
        (Some(t), Some((_, which))) => eprintln!(
            "set rotation: {} Secret versions seen across 3 members; trust everywhere at {:?}, first leaf: {which}",
            history.len(),
            history[t].0.at
        ),
    }
    let handshakes: u64 = phases.iter().map(|(_, c)| c.handshakes).sum();
    let failed: Vec<&String> = phases.iter().flat_map(|(_, c)| &c.failures).collect();
    if handshakes < 100 {
        out.push(format!("only {handshakes} handshakes"));
    }
    if !failed.is_empty() {
        out.push(format!(
            "{} failed cross-cluster handshakes, first: {:?}",
            failed.len(),
            &failed[..failed.len().min(5)]
        ));
    }
    out
}

/// The checks of the set rotation test, shown to pass on a rotation that is right by
/// construction and needs no set support: a staged single-cluster rotation in m0 whose every
/// write a mirror copies into m1 and m2 at once (so every member holds the new trust long
/// before m0's gate lets a leaf change). It runs today; the set test above awaits the core.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_set_rotation_checks_accept_a_rotation_mirrored_from_m0() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-mirror").await;
    let r = f.certgen(&set, &["m0"]).run_async().await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mirror = mirror_m0(&set, &f.ns.name, Duration::ZERO).await;
    let old = active_cas(&set.snapshots(&f.ns.name).await)["m0"]
        .clone()
        .unwrap();
    let before = leaves(&set.snapshots(&f.ns.name).await);
    // Right by construction only while the mirror's copies land well inside m0's gates: under
    // CI's load its watch-then-write lagged past a 3 s gate once (8 failed handshakes with m1,
    // a mirror artefact, not certgen's), so m0's gates get 15 s here. (And only while it copies
    // a restart after the Secrets it follows, as certgen makes them: see `mirror_m0`.)
    let cmd = f
        .certgen(&set, &["m0"])
        .propagation_delay("15s")
        .args(["--overwrite", "--timeout", "120s"])
        .command();
    let (r, seen, phases) = watched_rotation(&set, &f, &old, cmd).await;
    assert_eq!(r.code, 0, "--overwrite in m0: {}", r.stderr);
    // The mirror has copied m0's last writes before it stops.
    mirrored(&set, &f.ns.name, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(mirror);
    assert_set_rotation(&set, &f, &old, &before, &seen, &phases).await;
}

/// Waits until m1's and m2's CA and leaf Secrets hold m0's data (the mirror caught up).
async fn mirrored(set: &Set, ns: &str, within: Duration) {
    let deadline = Instant::now() + within;
    let data = |s: k8s_openapi::api::core::v1::Secret| s.data.unwrap_or_default();
    loop {
        let mut behind = Vec::new();
        for name in std::iter::once(CA_SECRET).chain(LEAF_SECRETS.iter().copied()) {
            let want = data(set.member("m0").secrets(ns).get(name).await.unwrap());
            for m in ["m1", "m2"] {
                if data(set.member(m).secrets(ns).get(name).await.unwrap()) != want {
                    behind.push(format!("{m}/{name}"));
                }
            }
        }
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the mirror never caught up: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// And the same checks refuse a rotation that is wrong: m2 mirrored 6 s late, longer than m0's
/// gate (3 s), so m0's leaves change while m2's bundles lack the new CA. The violations name
/// the order, and the cross-cluster handshakes with m2 fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_set_rotation_checks_refuse_a_member_that_trusts_too_late() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-late").await;
    let r = f.certgen(&set, &["m0"]).run_async().await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lag = Duration::from_secs(6);
    let mirror = mirror_m0(&set, &f.ns.name, lag).await;
    let old = active_cas(&set.snapshots(&f.ns.name).await)["m0"]
        .clone()
        .unwrap();
    let before = leaves(&set.snapshots(&f.ns.name).await);
    let cmd = f
        .certgen(&set, &["m0"])
        .args(["--overwrite", "--timeout", "120s"])
        .command();
    let (r, seen, phases) = watched_rotation(&set, &f, &old, cmd).await;
    assert_eq!(r.code, 0, "--overwrite in m0: {}", r.stderr);
    tokio::time::sleep(lag + Duration::from_secs(1)).await;
    drop(mirror);
    let new = one_new_ca_everywhere(&set, &f.ns.name, &old).await;
    let violations = set_rotation_violations(&old, &new, &before, &seen, &phases);
    eprintln!("violations found: {violations:#?}");
    assert!(
        violations
            .iter()
            .any(|v| v.contains("before every member's bundles held the new CA")),
        "{violations:#?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains("cross-member pairs fail")),
        "{violations:#?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains("failed cross-cluster handshakes") && v.contains("m2/")),
        "{violations:#?}"
    );
}

/// Copies every version of the profile's Secrets that m0 holds in `ns` into m1 and m2 (each
/// `lag` after m0's watch saw it: none for m1, `m2_lag` for m2), from what m0 holds now on, and
/// m0's restarts of its consumer onto theirs, until dropped.
async fn mirror_m0(set: &Set, ns: &str, m2_lag: Duration) -> Mirror {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{ObjectMeta, Patch, PatchParams};
    use kube::runtime::watcher;

    let copy = |s: &Secret| Secret {
        metadata: ObjectMeta {
            name: s.metadata.name.clone(),
            labels: s.metadata.labels.clone(),
            annotations: s.metadata.annotations.clone(),
            ..Default::default()
        },
        type_: s.type_.clone(),
        data: s.data.clone(),
        ..Default::default()
    };
    let mut tasks = Vec::new();
    let mut ready = Vec::new();
    for (member, lag) in [("m1", Duration::ZERO), ("m2", m2_lag)] {
        let source = set.member("m0").secrets(ns);
        let target = set.member(member).secrets(ns);
        // The watch stamps each version when it arrives; the writer copies it `lag` after.
        let (tx, rx) = tokio::sync::oneshot::channel();
        ready.push(rx);
        let (versions, mut queue) = tokio::sync::mpsc::unbounded_channel();
        tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(source, watcher::Config::default()));
            let mut listed = false;
            while let Ok(Some(ev)) = stream.try_next().await {
                let arrived = tokio::time::Instant::now();
                match ev {
                    watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                        let _ = versions.send(Some((arrived, listed, s)));
                    }
                    watcher::Event::InitDone => {
                        listed = true;
                        let _ = versions.send(None);
                    }
                    _ => {}
                }
            }
        }));
        tasks.push(tokio::spawn(async move {
            let mut tx = Some(tx);
            while let Some(next) = queue.recv().await {
                let Some((arrived, late, s)) = next else {
                    // What m0 held when the mirror started is copied at once.
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                };
                let name = s.metadata.name.clone().unwrap_or_default();
                if name != CA_SECRET && !LEAF_SECRETS.contains(&name.as_str()) {
                    continue;
                }
                if late {
                    tokio::time::sleep_until(arrived + lag).await;
                }
                let mut c = copy(&s);
                match target.get_opt(&name).await.unwrap() {
                    Some(have) => {
                        c.metadata.resource_version = have.metadata.resource_version;
                        target
                            .replace(&name, &PostParams::default(), &c)
                            .await
                            .unwrap();
                    }
                    None => {
                        target.create(&PostParams::default(), &c).await.unwrap();
                    }
                }
            }
        }));
        // Restarts: m0's restart-only consumer's pod template annotations (the restart
        // patch), onto this member's.
        let source: Api<Deployment> = Api::namespaced(set.member("m0").client.clone(), ns);
        let target: Api<Deployment> = Api::namespaced(set.member(member).client.clone(), ns);
        let secrets = (set.member("m0").secrets(ns), set.member(member).secrets(ns));
        tasks.push(tokio::spawn(async move {
            let annotations = |d: Deployment| {
                d.spec
                    .and_then(|s| s.template.metadata)
                    .and_then(|m| m.annotations)
                    .unwrap_or_default()
            };
            let mut last = BTreeMap::new();
            loop {
                if let Ok(d) = source.get("envoy-ratelimit").await {
                    let now = annotations(d);
                    if now != last {
                        tokio::time::sleep(lag).await;
                        // certgen restarts a consumer after the Secret writes it follows; the
                        // Secrets' copier is another task, which may fall behind this one under
                        // load: a restart copied first let the member's restart-only peer start
                        // from the Secrets before m0's step (9 failed handshakes in a CI run, and
                        // one in a cold run; a mirror artefact, not certgen's). So the copy of a
                        // restart waits until the member holds what m0 holds.
                        caught_up(&secrets.0, &secrets.1, Duration::from_secs(30)).await;
                        let patch =
                            json!({"spec": {"template": {"metadata": {"annotations": now}}}});
                        target
                            .patch(
                                "envoy-ratelimit",
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await
                            .unwrap();
                        last = now;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    for rx in ready {
        rx.await.expect("the mirror copied what m0 holds");
    }
    Mirror(tasks)
}

/// Waits until `target` holds the data `source` holds in the CA and leaf Secrets (up to
/// `within`; then it goes on, and the checks say what that broke).
async fn caught_up(source: &Api<Secret>, target: &Api<Secret>, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let mut behind = false;
        for name in std::iter::once(CA_SECRET).chain(LEAF_SECRETS.iter().copied()) {
            let (a, b) = (source.get_opt(name).await, target.get_opt(name).await);
            let data = |s: Result<Option<Secret>, kube::Error>| {
                s.ok().flatten().and_then(|s| s.data).unwrap_or_default()
            };
            if data(a) != data(b) {
                behind = true;
                break;
            }
        }
        if !behind {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The mirror's tasks, stopped when dropped.
struct Mirror(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Mirror {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

// ---- (b) a member stopped before the run --------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_member_stopped_before_a_set_rotation_stops_it_before_any_leaf_changes() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-paused").await;
    let old = install(&set, &f).await;
    let before = leaves(&set.snapshots(&f.ns.name).await);
    let r = {
        let _paused = set.pause("m2");
        let r = run_within(
            f.set_run(&set, &["--overwrite", "--timeout", "15s"])
                .command(),
            Duration::from_secs(90),
        )
        .await;
        // Nothing to read from m2 yet; m0's and m1's leaves are unchanged.
        let now = leaves(&snapshots_of(&set, &f.ns.name, &["m0", "m1"]).await);
        for (k, crt) in &now {
            assert_eq!(
                Some(crt),
                before.get(k),
                "{k:?}'s leaf changed while m2 was stopped"
            );
        }
        r
    };
    assert_eq!(r.code, 3, "exit 3 with m2 unreachable: {}", said(&r));
    assert!(names(&said(&r), "m2"), "the message names m2: {}", said(&r));
    let snaps = set.snapshots(&f.ns.name).await;
    assert_eq!(leaves(&snaps), before, "no leaf changed in any member");
    let failures = check_across(&snaps);
    assert!(failures.is_empty(), "as left: {failures:?}");

    let r = run_within(
        f.set_run(&set, &["--overwrite", "--timeout", "60s"])
            .command(),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(r.code, 0, "the re-run after m2 is back: {}", r.stderr);
    one_new_ca_everywhere(&set, &f.ns.name, &old).await;
}

// ---- (c) a member stopped at the trust gate -----------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_member_stopped_at_the_trust_gate_lets_no_leaf_change_anywhere() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-gate").await;
    let old = install(&set, &f).await;
    let before = leaves(&set.snapshots(&f.ns.name).await);
    // A gate long enough to see every member's trust written and stop m2 within it.
    let child = tokio::spawn(run_within(
        f.set_run(&set, &["--overwrite", "--timeout", "30s"])
            .propagation_delay("10s")
            .command(),
        Duration::from_secs(120),
    ));
    let pending = pending_in_m0(&set, &f.ns.name, Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let snaps = set.snapshots(&f.ns.name).await;
        if every_bundle_holds(&snaps, &pending, 3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every member's bundles hold the pending CA"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = {
        let _paused = set.pause("m2");
        let r = child.await.unwrap();
        let now = leaves(&snapshots_of(&set, &f.ns.name, &["m0", "m1"]).await);
        for (k, crt) in &now {
            assert_eq!(
                Some(crt),
                before.get(k),
                "{k:?}'s leaf changed while m2 was stopped"
            );
        }
        r
    };
    assert_eq!(
        r.code,
        3,
        "exit 3 with m2 unreachable at the gate: {}",
        said(&r)
    );
    assert!(names(&said(&r), "m2"), "the message names m2: {}", said(&r));
    let snaps = set.snapshots(&f.ns.name).await;
    assert_eq!(leaves(&snaps), before, "no leaf written anywhere");
    let failures = check_across(&snaps);
    assert!(failures.is_empty(), "as left: {failures:?}");

    // A re-run resumes the rotation under way: the pending CA becomes everyone's CA.
    let r = run_within(
        f.set_run(&set, &["--timeout", "60s"]).command(),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(r.code, 0, "the re-run after m2 is back: {}", r.stderr);
    let new = one_new_ca_everywhere(&set, &f.ns.name, &old).await;
    assert_eq!(new, pending, "the re-run finished the rotation under way");
}

/// m2 stopped while the run waits at the gate after the leaves (every member's leaves come from
/// the new CA): no member drops the old CA (the cleanup waits for every member), exit 3 naming
/// m2; a re-run after m2 is back does the cleanup everywhere.
#[tokio::test(flavor = "multi_thread")]
async fn a_member_stopped_at_the_leaves_gate_holds_every_cleanup() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-lgate").await;
    let old = install(&set, &f).await;
    let before = leaves(&set.snapshots(&f.ns.name).await);
    let child = tokio::spawn(run_within(
        f.set_run(&set, &["--overwrite", "--timeout", "40s"])
            .propagation_delay("10s")
            .command(),
        Duration::from_secs(120),
    ));
    let pending = pending_in_m0(&set, &f.ns.name, Duration::from_secs(30)).await;
    // Every leaf of every member changed (the leaves step done everywhere), then stop m2 within
    // the gate that follows.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = leaves(&set.snapshots(&f.ns.name).await);
        if now.len() == before.len() && now.iter().all(|(k, v)| before.get(k) != Some(v)) {
            break;
        }
        assert!(Instant::now() < deadline, "every member's leaves changed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = {
        let _paused = set.pause("m2");
        let r = child.await.unwrap();
        let snaps = snapshots_of(&set, &f.ns.name, &["m0", "m1"]).await;
        assert!(
            every_bundle_holds(&snaps, &old, 2),
            "m0 and m1 still trust the old CA while m2 was stopped"
        );
        r
    };
    assert_eq!(
        r.code,
        3,
        "exit 3 with m2 unreachable at the gate: {}",
        said(&r)
    );
    assert!(names(&said(&r), "m2"), "the message names m2: {}", said(&r));
    let snaps = set.snapshots(&f.ns.name).await;
    assert!(
        every_bundle_holds(&snaps, &old, 3),
        "no member dropped the old CA"
    );
    assert!(every_bundle_holds(&snaps, &pending, 3));
    let failures = check_across(&snaps);
    assert!(failures.is_empty(), "as left: {failures:?}");

    // A re-run cleans up everywhere, and makes no other CA.
    let r = run_within(
        f.set_run(&set, &["--timeout", "60s"]).command(),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(r.code, 0, "the re-run after m2 is back: {}", r.stderr);
    let new = one_new_ca_everywhere(&set, &f.ns.name, &old).await;
    assert_eq!(new, pending);
    let snaps = set.snapshots(&f.ns.name).await;
    assert!(!every_bundle_holds(&snaps, &old, 3), "the old CA dropped");
    assert!(check_across(&snaps).is_empty());
}

// ---- (d) two contexts that reach one cluster ----------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn two_contexts_that_reach_one_cluster_are_refused_and_nothing_is_written() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-twice").await;
    // A fourth context, `zz-twin`, on m1's cluster and user.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = twice_kubeconfig(&set.kubeconfig, "m1", "zz-twin", dir.path());
    let before = set.versions(&f.ns.name).await;
    let r = run_within(
        Certgen::new(&kubeconfig)
            .namespace(&f.ns.name)
            .args(["--context", "m0", "--context", "m1", "--context", "m2"])
            .args(["--context", "zz-twin"])
            .args(["--config", f.config.to_str().unwrap(), "--no-poke", "-q"])
            .args(["--timeout", "30s"])
            .propagation_delay(DELAY)
            .command(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(r.code, 2, "{}", said(&r));
    let text = said(&r);
    assert!(
        names(&text, "m1") && names(&text, "zz-twin"),
        "the message names both contexts: {text}"
    );
    assert_eq!(set.versions(&f.ns.name).await, before, "nothing written");
    assert!(
        before
            .values()
            .flat_map(|v| v.values())
            .all(Option::is_none),
        "the namespace started empty"
    );
}

/// A copy of `kubeconfig` with context `alias` naming the same cluster and user as `of`.
fn twice_kubeconfig(kubeconfig: &Path, of: &str, alias: &str, dir: &Path) -> PathBuf {
    let mut k = Kubeconfig::read_from(kubeconfig).unwrap();
    let mut twin = k.contexts.iter().find(|c| c.name == of).unwrap().clone();
    twin.name = alias.to_string();
    k.contexts.push(twin);
    // JSON is YAML: kube reads it back as a kubeconfig.
    let path = dir.join("twice.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&k).unwrap()).unwrap();
    path
}

// ---- (e) a member's own single-cluster run ------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_members_own_overwrite_run_does_not_fork_the_shared_ca() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-single").await;
    install(&set, &f).await;
    let before = set.versions(&f.ns.name).await;
    let r = run_within(
        f.certgen(&set, &["m1"])
            .args(["--overwrite", "--timeout", "30s"])
            .command(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(r.code, 1, "{}", said(&r));
    assert!(
        said(&r).contains("run certgen with the set's contexts"),
        "{}",
        said(&r)
    );
    let after = set.versions(&f.ns.name).await;
    for m in CONTEXTS {
        assert_eq!(
            after[m][CA_SECRET], before[m][CA_SECRET],
            "{m}'s CA Secret unchanged"
        );
    }
    let snaps = set.snapshots(&f.ns.name).await;
    let cas = ca_bytes(&snaps);
    assert!(
        cas.values().all(|c| c == &cas["m0"]),
        "still one CA in every member"
    );
    let failures = check_across(&snaps);
    assert!(failures.is_empty(), "{failures:?}");
}

// ---- (f) check over the set ---------------------------------------------------------------------

/// `certgen check` over the set in text (the builder's runs are JSON).
fn check_text(set: &Set, f: &Fixture) -> Command {
    let mut cmd = crate::util::certgen();
    cmd.arg("check")
        .arg("--kubeconfig")
        .arg(&set.kubeconfig)
        .args(["-n", &f.ns.name, "--config", f.config.to_str().unwrap()])
        .args(["--output", "text"]);
    for c in CONTEXTS {
        cmd.args(["--context", c]);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn check_over_the_set_reports_every_member_and_names_an_unreachable_one() {
    let Some(set) = Set::get().await else { return };
    let f = fixture(&set, "set-check").await;
    install(&set, &f).await;
    let r = run_within(check_text(&set, &f), Duration::from_secs(60)).await;
    assert_eq!(r.code, 0, "{}", said(&r));
    // A section per member (a `== Member NAME ...` header), with a row per Secret.
    for m in CONTEXTS {
        let section: Vec<&str> = r
            .stdout
            .lines()
            .skip_while(|l| !(l.starts_with("== Member") && names(l, m)))
            .skip(1)
            .take_while(|l| !l.starts_with("== Member"))
            .collect();
        let rows = section
            .iter()
            .filter(|l| LEAF_SECRETS.iter().any(|s| l.starts_with(s)))
            .count();
        assert!(rows >= LEAF_SECRETS.len(), "rows of {m}:\n{}", r.stdout);
    }
    assert!(
        r.stdout.lines().any(|l| l.trim_start().starts_with("set:")),
        "a set line:\n{}",
        r.stdout
    );
    let json = run_within(
        set.certgen_in(&f.ns.name, &CONTEXTS)
            .check()
            .args(["--config", f.config.to_str().unwrap()])
            .command(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(json.code, 0, "{}", said(&json));
    json.json();

    let r = {
        let _paused = set.pause("m2");
        run_within(check_text(&set, &f), Duration::from_secs(90)).await
    };
    assert_ne!(r.code, 0, "an unreachable member: {}", said(&r));
    assert!(names(&said(&r), "m2"), "names m2: {}", said(&r));
}
