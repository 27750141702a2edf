//! `certgen create` and `certgen patch` (the kube-webhook-certgen drop-in) in the whole world
//! of [`super::outside`], checked by the same oracle: the webhook's pods hold each version of
//! its Secret as their kubelet projects it, the API server holds each `caBundle` version until
//! its informer has the next, and every `caBundle` it may hold must verify every certificate
//! the webhook may serve at the same instant.
//!
//! The commands run their own code on the simulation's seams: `create` plans with
//! `kwc::plan_create`, issues a new Secret's keys with `SecretToCreate::issue` and renews an
//! existing one with certgen's driver under `run::kwc::renew_options`; `patch` reads, plans
//! and writes its targets with `run::kwc::{read_targets, plan_targets, write_targets}` through
//! the `caBundle` seam. Only the Secret's read and creation (`k8s::kwc` in a cluster) are
//! written here, against the simulated store.
//!
//! The world is Envoy Gateway's: the webhook is its topology injector, served by the
//! `envoy-gateway` Deployment (hot reload), whose Secret `create` writes with Envoy Gateway's
//! key names, as a chart running kube-webhook-certgen with `--ca-name`, `--cert-name` and
//! `--key-name` would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certgen::config::WebhookKind;
use certgen::kwc::plan::patch_bundle;
use certgen::kwc::request::{Keys, Renewal};
use certgen::kwc::{
    CreatePlan, CreateRequest, ObservedSecret, PatchMode, PatchRequest, Target, plan_create,
};
use certgen::rotation;
use certgen::run::kwc::{plan_targets, read_targets, renew_options, write_targets};
use certgen::secret::{Expect, Observed, SecretWrite, TYPE_TLS};
use certgen::store::SecretStore;
use time::OffsetDateTime;

use super::outside::{Mutation, OutsideWorld, Sim, check_holders};
use super::{
    CA, DELAY, Ended, FOREIGN, Faults, RunSpec, Session, TLS, World, check_current, check_runs,
    config, dry_run_is_the_run, planned_writes,
};

/// How long `create`'s certificates last, and how far ahead of its CA's expiry it renews.
const VALIDITY: Duration = Duration::from_secs(2 * 3600);
const RENEW_BEFORE: Duration = Duration::from_secs(40 * 60);
/// `create`'s `--timeout`: long enough for a whole staged renewal.
const TIMEOUT: Duration = Duration::from_secs(600);

/// The webhook Envoy Gateway's world has.
fn target() -> Target {
    let t = &config().webhooks[0];
    Target {
        kind: t.kind,
        name: t.name.clone(),
        flag: match t.kind {
            WebhookKind::ApiService => "--apiservice-name",
            _ => "--webhook-name",
        },
    }
}

/// The Secret's layout: the data keys and type `create` is told to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Envoy Gateway's key names, as a chart passes them with `--ca-name ca.crt --cert-name
    /// tls.crt --key-name tls.key --secret-type kubernetes.io/tls`.
    EnvoyGateway,
    /// kube-webhook-certgen's defaults (kube-prometheus-stack's chart): `ca`, `cert`, `key`,
    /// type `Opaque`.
    KubeWebhookCertgen,
}

impl Layout {
    /// The data keys of the CA, the certificate and its key.
    fn keys(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::EnvoyGateway => ("ca.crt", "tls.crt", "tls.key"),
            Self::KubeWebhookCertgen => ("ca", "cert", "key"),
        }
    }

    fn secret_type(self) -> &'static str {
        match self {
            Self::EnvoyGateway => TYPE_TLS,
            Self::KubeWebhookCertgen => "Opaque",
        }
    }
}

/// `create --secret-name envoy-gateway --host envoy-gateway --validity 2h --renew-before 40m
/// --webhook-name <the topology injector> --propagation-delay 90s --timeout T`, with the key
/// names and type of `layout`.
fn create_request(timeout: Duration, layout: Layout) -> CreateRequest {
    let config = config();
    let (ca, cert, key) = layout.keys();
    CreateRequest {
        namespace: config.namespace.clone(),
        secret_name: TLS[0].into(),
        secret_type: layout.secret_type().into(),
        keys: Keys {
            ca: ca.into(),
            cert: cert.into(),
            key: key.into(),
        },
        hosts: vec![TLS[0].into()],
        dns_names: vec![TLS[0].into()],
        ip_addresses: vec![],
        renewal: Renewal {
            validity: VALIDITY,
            renew_before: RENEW_BEFORE,
            targets: vec![target()],
            ca_secret_name: CA.into(),
            propagation_delay: DELAY,
            timeout,
        },
    }
}

/// `patch` of the same Secret into the webhook, as the chart's post-install Job runs it.
fn patch_request(layout: Layout) -> PatchRequest {
    PatchRequest {
        namespace: config().namespace,
        secret_name: TLS[0].into(),
        secret_type: None,
        ca_name: layout.keys().0.into(),
        targets: vec![target()],
        failure_policy: None,
        mode: PatchMode::Update,
        propagation_delay: DELAY,
    }
}

/// One step of a `create`/`patch` trajectory.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// `create`, with this `--timeout`.
    Create(Duration),
    /// `create`, killed right after its N-th write of any kind lands (1-based).
    Killed(usize),
    Patch,
    Advance(Duration),
}

/// The Secret as `create` and `patch` read it (in a cluster, `k8s::kwc::get_secret`).
async fn read_secret(sim: &Sim) -> Result<ObservedSecret, String> {
    Ok(match sim.get(TLS[0]).await.map_err(|e| e.to_string())? {
        Observed::Absent => ObservedSecret::Absent,
        Observed::Present(s) => ObservedSecret::Present {
            type_: s.type_,
            data: s.data,
            written_at: s.written_at,
        },
    })
}

fn sim(world: &Arc<Mutex<World>>, outside: &Arc<Mutex<OutsideWorld>>, index: usize) -> Sim {
    killed(world, outside, index, None)
}

/// [`sim`], whose process dies right after its `crash_after`-th write.
fn killed(
    world: &Arc<Mutex<World>>,
    outside: &Arc<Mutex<OutsideWorld>>,
    index: usize,
    crash_after: Option<usize>,
) -> Sim {
    let faults = Faults {
        crash_after,
        ..Faults::default()
    };
    Sim {
        session: Session::new(world, index, faults),
        outside: outside.clone(),
        mutation: Mutation::None,
    }
}

/// `create --dry-run`, as [`create`] would run from the world as it is: the writes it plans,
/// named as [`World::trail`] names them, or the error it exits with.
async fn create_dry(
    sim: &Sim,
    timeout: Duration,
    layout: Layout,
) -> Result<BTreeSet<String>, String> {
    let req = create_request(timeout, layout);
    let observed = read_secret(sim).await?;
    let now = sim.now();
    match plan_create(&req, &observed, now).map_err(|e| e.to_string())? {
        // Planned as what it holds: the one Secret.
        CreatePlan::Create(_) => Ok(BTreeSet::from([format!("Secret {}", TLS[0])])),
        CreatePlan::Keep { .. } => Ok(BTreeSet::new()),
        CreatePlan::Renew { config, rotate, .. } => {
            let options = renew_options(&req, rotate, true);
            match rotation::run(sim, sim.invocation(&config, options)).await {
                Ok((report, None)) => Ok(planned_writes(&report)),
                Ok((_, Some(e))) | Err(e) => Err(e.to_string()),
            }
        }
    }
}

/// `create`: a new Secret when there is none; otherwise certgen's driver on the config
/// `plan_create` built. Its exit code and message.
async fn create(sim: &Sim, timeout: Duration, layout: Layout) -> Result<(u8, String), String> {
    let req = create_request(timeout, layout);
    let observed = read_secret(sim).await?;
    let now = sim.now();
    match plan_create(&req, &observed, now).map_err(|e| e.to_string())? {
        CreatePlan::Create(s) => {
            let made = s.issue(now).map_err(|e| e.to_string())?;
            let write = SecretWrite {
                name: made.name.clone(),
                type_: layout.secret_type(),
                data: BTreeMap::from([
                    made.ca.clone(),
                    made.cert.clone(),
                    (made.key.0.clone(), made.key.1.expose().as_bytes().to_vec()),
                ]),
                secret_keys: vec![made.key.0.clone()],
                remove: vec![],
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                expect: Expect::Absent,
            };
            sim.put(&write).await.map_err(|e| e.to_string())?;
            Ok((0, String::new()))
        }
        CreatePlan::Keep { notes } => Err(format!("create kept the Secret: {notes:?}")),
        CreatePlan::Renew { config, rotate, .. } => {
            let options = renew_options(&req, rotate, false);
            Ok(
                match rotation::run(sim, sim.invocation(&config, options)).await {
                    Ok((_, None)) => (0, String::new()),
                    Ok((_, Some(e))) | Err(e) => (e.code(), e.to_string()),
                },
            )
        }
    }
}

/// `patch`: what it wrote, one line per target.
async fn patch(sim: &Sim, layout: Layout) -> Result<Vec<String>, String> {
    let req = patch_request(layout);
    let bundle = patch_bundle(&req, &read_secret(sim).await?).map_err(|e| e.to_string())?;
    let read = read_targets(&req, sim).await.map_err(|e| e.to_string())?;
    let plan = plan_targets(&req, &bundle, &read, sim.now()).map_err(|e| e.to_string())?;
    write_targets(&req, &bundle, &plan, &read, sim, false)
        .await
        .map_err(|e| e.to_string())
}

/// What a `create`/`patch` trajectory checked.
#[derive(Debug, Default)]
pub struct Checked {
    pub sizes: super::outside::Sizes,
    /// Runs of `create` that exited 3 (a gate not open within `--timeout`).
    pub unfinished: usize,
    /// Runs of `create` killed after a write.
    pub killed: usize,
    /// `patch` runs that wrote.
    pub patches: usize,
    /// CAs certgen published over the trajectory.
    pub new_cas: usize,
}

/// Where a `create`/`patch` trajectory starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A fresh namespace: the webhook configuration installed with no `caBundle`, the
    /// webhook's pods waiting for their Secret.
    Fresh,
    /// kube-webhook-certgen's own output, as a chart that ran it for years left it: a Secret
    /// whose CA and certificate last 100 years, and the `caBundle` patched with that CA.
    /// `create --validity 2h` moves it to certificates of 2 hours, staged, once.
    Century,
}

/// Runs `steps` from a fresh namespace in Envoy Gateway's key names; see [`trajectory_with`].
pub async fn trajectory(steps: &[Step]) -> Result<Checked, String> {
    trajectory_with(Start::Fresh, Layout::EnvoyGateway, steps).await
}

/// Runs `steps` from `start`, with the Secret in `layout`, then `create` and `patch` once
/// more, which must write nothing; checks every holding. Before each `create` run, a `create
/// --dry-run` from the same state: its plan must be the run's first step (the oracle's "dry
/// run = run").
pub async fn trajectory_with(
    start: Start,
    layout: Layout,
    steps: &[Step],
) -> Result<Checked, String> {
    let world = World::new();
    {
        let mut w = world.lock().unwrap();
        w.serving_only = true;
        let (ca, cert, _) = layout.keys();
        w.keys = (ca.into(), cert.into());
    }
    let outside = OutsideWorld::new(&config(), world.lock().unwrap().true_now());
    let mut ended: Vec<Ended> = Vec::new();
    let mut checked = Checked::default();
    // From the first patch on, the webhook must hold a caBundle.
    let mut first_ok: Option<OffsetDateTime> = None;
    if start == Start::Century {
        century(&world, &outside, layout);
        first_ok = Some(world.lock().unwrap().true_now());
    }
    for (i, step) in steps.iter().enumerate() {
        let index = i + 1;
        match *step {
            Step::Advance(d) => tokio::time::advance(d).await,
            Step::Create(_) | Step::Killed(_) => {
                let (timeout, crash_after) = match *step {
                    Step::Killed(n) => (TIMEOUT, Some(n)),
                    Step::Create(timeout) => (timeout, None),
                    _ => unreachable!(),
                };
                let dry = Box::pin(create_dry(
                    &sim(&world, &outside, super::DRY),
                    timeout,
                    layout,
                ))
                .await;
                let (mark, resumed) = {
                    let mut w = world.lock().unwrap();
                    let mark = w.history.len();
                    w.run_marks.push(mark);
                    (w.mark(), w.under_way())
                };
                let sim = killed(&world, &outside, index, crash_after);
                let (code, message) = match Box::pin(create(&sim, timeout, layout)).await {
                    Err(e) if crash_after.is_some() => (5, e),
                    other => other?,
                };
                let dead = sim.session.state.lock().unwrap().dead;
                match code {
                    _ if dead => checked.killed += 1,
                    0 => {}
                    3 => checked.unfinished += 1,
                    _ => return Err(format!("create (step {index}) exited {code}: {message}")),
                }
                let mut e = Ended {
                    run: index,
                    spec: RunSpec {
                        faults: Faults {
                            crash_after,
                            ..Faults::default()
                        },
                        ..RunSpec::default()
                    },
                    code,
                    message,
                    resumed,
                    note: None,
                    ca_disturbed: false,
                    dry_run_differs: None,
                };
                e.dry_run_differs =
                    dry_run_is_the_run(&world.lock().unwrap(), &e, mark, &dry).err();
                ended.push(e);
            }
            Step::Patch => {
                let lines = patch(&sim(&world, &outside, index), layout).await?;
                if lines.iter().any(|l| l.contains(": wrote ")) {
                    checked.patches += 1;
                }
                first_ok.get_or_insert(world.lock().unwrap().true_now());
            }
        }
    }
    // Runs stop: once the delay has passed, neither command has anything left to write.
    tokio::time::advance(DELAY + Duration::from_secs(1)).await;
    let before = (
        world.lock().unwrap().log.len(),
        outside.lock().unwrap().log.len(),
    );
    let index = steps.len() + 1;
    let (code, message) = create(&sim(&world, &outside, index), TIMEOUT, layout).await?;
    let lines = patch(&sim(&world, &outside, index + 1), layout).await?;
    let after = (
        world.lock().unwrap().log.len(),
        outside.lock().unwrap().log.len(),
    );
    if code != 0 || after != before {
        return Err(format!(
            "create and patch with nothing due wrote (create exited {code}: {message}; patch: {lines:?})"
        ));
    }
    let w = world.lock().unwrap();
    let o = outside.lock().unwrap();
    check_runs(&w, &ended)?;
    check_current(&w, w.true_now())?;
    let end = w.true_now() + time::Duration::try_from(DELAY).unwrap();
    checked.sizes = check_holders(&w, &o, end, first_ok)?;
    checked.sizes.runs = ended.len();
    checked.new_cas = w.cas.values().filter(|r| **r != FOREIGN).count();
    Ok(checked)
}

/// [`Start::Century`]: kube-webhook-certgen's Secret (a CA and a serving certificate of 100
/// years, made a year ago), and the webhook's `caBundle` patched with that CA.
fn century(world: &Arc<Mutex<World>>, outside: &Arc<Mutex<OutsideWorld>>, layout: Layout) {
    use certgen::pki::{CaSpec, KeyAlgorithm, issue_ca, issue_leaf};
    let century = Duration::from_secs(100 * 365 * 86_400);
    let at = world.lock().unwrap().true_now() - time::Duration::days(365);
    let spec = CaSpec {
        common_name: "webhook-ca".into(),
        validity: century,
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    let (ca, _) = issue_ca(&spec, at).unwrap();
    let mut leaf = config().tls[0].leaf.clone();
    leaf.validity = century;
    let issued = issue_leaf(&leaf, &ca, at).unwrap();
    let (ca_key, cert_key, key_key) = layout.keys();
    let pem = ca.cert.pem().into_bytes();
    world.lock().unwrap().seed(
        TLS[0],
        layout.secret_type(),
        BTreeMap::from([
            (ca_key.to_string(), pem.clone()),
            (cert_key.to_string(), issued.cert.pem().into_bytes()),
            (key_key.to_string(), issued.key.expose().as_bytes().to_vec()),
        ]),
    );
    outside.lock().unwrap().patched(&pem, at);
}

/// A chart's life: `create` and `patch` at install; `create` as a CronJob every 30 minutes,
/// which renews the Secret (staged: trust, the serving certificate, the cleanup) twice in 5
/// hours, once stopped at a gate by a short `--timeout` and finished by the next run; and
/// `patch` between the runs (an upgrade runs both Jobs again), in the middle of a renewal too.
pub fn chart_life() -> Vec<Step> {
    chart_life_with(Step::Create(Duration::from_secs(2)))
}

/// [`chart_life`] with `first` the run that meets the first renewal.
fn chart_life_with(first: Step) -> Vec<Step> {
    let min = |m: u64| Duration::from_secs(m * 60);
    let mut steps = vec![Step::Create(TIMEOUT), Step::Patch];
    for i in 0..10 {
        steps.push(Step::Advance(min(30)));
        // The third run meets the first renewal: stopped at its first gate, patched, resumed.
        steps.push(if i == 2 { first } else { Step::Create(TIMEOUT) });
        steps.push(Step::Advance(Duration::from_secs(20 + 7 * i)));
        steps.push(Step::Patch);
    }
    steps
}

#[test]
fn create_renewals_with_patch_between_keep_the_webhook_trusted() {
    let checked = super::runtime()
        .block_on(trajectory(&chart_life()))
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{checked:?}");
    let s = &checked.sizes;
    // Two renewals: the first CA, then two more, each put in the caBundle by create's driver.
    assert!(s.ca_bundle_writes >= 4, "{s:?}");
    assert!(s.webhook_pairs > 0 && s.pairs > 0, "{s:?}");
    assert!(checked.unfinished >= 1, "{checked:?}");
    assert!(checked.patches >= 1, "{checked:?}");
}

/// The run that meets the first renewal killed after each of its writes (Secrets, the
/// `caBundle`, pokes), then `patch`, then `create` again every 30 minutes.
#[test]
fn create_killed_after_any_write_of_a_renewal_with_patch_after() {
    let mut killed = 0;
    for n in 1..=12 {
        let checked = super::runtime()
            .block_on(trajectory(&chart_life_with(Step::Killed(n))))
            .unwrap_or_else(|e| panic!("killed after write {n}: {e}"));
        killed += checked.killed;
    }
    eprintln!("{killed} of 12 runs killed");
    // The last one outlived its writes: every write of the renewal was a crash point.
    assert!(
        (6..12).contains(&killed),
        "{killed} killed: widen the range"
    );
}

/// [`chart_life`] in kube-webhook-certgen's own layout (`ca`, `cert`, `key`, `Opaque`), as
/// kube-prometheus-stack's chart runs it: the same holdings, and every `create --dry-run` plans
/// the `caBundle` writes its run makes (issue 46, B3: it showed the webhook as `keep`, reading
/// the bundle under `ca.crt`).
#[test]
fn create_renewals_in_kube_webhook_certgens_layout_and_their_dry_runs() {
    let checked = super::runtime()
        .block_on(trajectory_with(
            Start::Fresh,
            Layout::KubeWebhookCertgen,
            &chart_life(),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{checked:?}");
    let s = &checked.sizes;
    assert!(s.ca_bundle_writes >= 4, "{s:?}");
    assert!(s.webhook_pairs > 0 && s.pairs > 0, "{s:?}");
    assert!(checked.unfinished >= 1, "{checked:?}");
}

/// Moving kube-webhook-certgen's 100-year Secret to 2-hour certificates (the migration guide's
/// path), the run that starts it stopped at every point: killed after each of its writes, or
/// out of `--timeout` at its first gate. The next `create` finishes that rotation and begins no
/// other (issue 46, B1: it finished it, then rotated again to a second new CA): one new CA in
/// all, in both layouts, and every dry run is its run.
#[test]
fn a_resumed_create_finishes_its_rotation_and_begins_no_other() {
    let mut trajectories = 0;
    for layout in [Layout::KubeWebhookCertgen, Layout::EnvoyGateway] {
        let mut first = vec![Step::Create(Duration::from_secs(2))];
        first.extend((1..=10).map(Step::Killed));
        for stop in first {
            let steps = [
                stop,
                Step::Advance(Duration::from_secs(30)),
                Step::Create(TIMEOUT),
                Step::Patch,
                Step::Advance(Duration::from_secs(20 * 60)),
                Step::Create(TIMEOUT),
            ];
            let checked = super::runtime()
                .block_on(trajectory_with(Start::Century, layout, &steps))
                .unwrap_or_else(|e| panic!("{layout:?} {stop:?}: {e}"));
            assert_eq!(checked.new_cas, 1, "{layout:?} {stop:?}: {checked:?}");
            trajectories += 1;
        }
    }
    eprintln!("resumed create: {trajectories} trajectories, one new CA each");
}

/// The mutation check of B1: with a rotation found under way leaving `--overwrite` set (the
/// defect), the oracle sees the resumed run begin a second rotation.
#[test]
fn the_oracle_catches_a_resumed_create_that_rotates_again() {
    certgen::rotation::resumed_rotation_keeps_overwrite(true);
    let result = super::runtime().block_on(trajectory_with(
        Start::Century,
        Layout::KubeWebhookCertgen,
        &[
            Step::Create(Duration::from_secs(2)),
            Step::Advance(Duration::from_secs(30)),
            Step::Create(TIMEOUT),
        ],
    ));
    certgen::rotation::resumed_rotation_keeps_overwrite(false);
    let err = result.expect_err("a resumed rotation followed by another must fail the oracle");
    assert!(err.contains("began a second rotation"), "{err}");
}
