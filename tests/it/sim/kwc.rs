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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certgen::config::WebhookKind;
use certgen::kwc::plan::patch_bundle;
use certgen::kwc::request::{Keys, Renewal};
use certgen::kwc::{
    CreatePlan, CreateRequest, ObservedSecret, PatchMode, PatchRequest, Target, plan_create,
};
use certgen::lock;
use certgen::rotation::{self, Invocation};
use certgen::run::kwc::{plan_targets, read_targets, renew_options, write_targets};
use certgen::secret::{Expect, Observed, SecretWrite, TYPE_TLS};
use certgen::store::SecretStore;
use time::OffsetDateTime;

use super::outside::{Mutation, OutsideWorld, Sim, check_holders};
use super::{
    CA, DELAY, Ended, Faults, RunSpec, Session, TLS, World, check_current, check_runs, config,
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

/// `create --secret-name envoy-gateway --host envoy-gateway --ca-name ca.crt --cert-name
/// tls.crt --key-name tls.key --secret-type kubernetes.io/tls --validity 2h --renew-before 40m
/// --webhook-name <the topology injector> --propagation-delay 90s --timeout T`.
fn create_request(timeout: Duration) -> CreateRequest {
    let config = config();
    CreateRequest {
        namespace: config.namespace.clone(),
        secret_name: TLS[0].into(),
        secret_type: TYPE_TLS.into(),
        keys: Keys {
            ca: "ca.crt".into(),
            cert: "tls.crt".into(),
            key: "tls.key".into(),
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
fn patch_request() -> PatchRequest {
    PatchRequest {
        namespace: config().namespace,
        secret_name: TLS[0].into(),
        secret_type: None,
        ca_name: "ca.crt".into(),
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

/// `create`: a new Secret when there is none; otherwise certgen's driver on the config
/// `plan_create` built. Its exit code and message.
async fn create(sim: &Sim, timeout: Duration) -> Result<(u8, String), String> {
    let req = create_request(timeout);
    let observed = read_secret(sim).await?;
    let now = sim.now();
    match plan_create(&req, &observed, now).map_err(|e| e.to_string())? {
        CreatePlan::Create(s) => {
            let made = s.issue(now).map_err(|e| e.to_string())?;
            let write = SecretWrite {
                name: made.name.clone(),
                type_: TYPE_TLS,
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
            let invocation = Invocation {
                config: &config,
                options,
                deadline: tokio::time::Instant::now() + options.timeout,
                workloads: Some(sim),
                endpoints: None,
                webhooks: Some(sim),
                pods: Some(sim),
                lock: lock::Target::None,
            };
            Ok(match rotation::run(sim, invocation).await {
                Ok((_, None)) => (0, String::new()),
                Ok((_, Some(e))) | Err(e) => (e.code(), e.to_string()),
            })
        }
    }
}

/// `patch`: what it wrote, one line per target.
async fn patch(sim: &Sim) -> Result<Vec<String>, String> {
    let req = patch_request();
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
}

/// Runs `steps` from a fresh namespace (the webhook configuration installed with no
/// `caBundle`, the webhook's pods waiting for their Secret), then `create` and `patch` once
/// more, which must write nothing; checks every holding.
pub async fn trajectory(steps: &[Step]) -> Result<Checked, String> {
    let world = World::new();
    world.lock().unwrap().serving_only = true;
    let outside = OutsideWorld::new(&config(), world.lock().unwrap().true_now());
    let mut ended: Vec<Ended> = Vec::new();
    let mut checked = Checked::default();
    // From the first patch on, the webhook must hold a caBundle.
    let mut first_ok: Option<OffsetDateTime> = None;
    for (i, step) in steps.iter().enumerate() {
        let index = i + 1;
        match *step {
            Step::Advance(d) => tokio::time::advance(d).await,
            Step::Create(_) | Step::Killed(_) => {
                let resumed = {
                    let mut w = world.lock().unwrap();
                    let mark = w.history.len();
                    w.run_marks.push(mark);
                    w.get(CA).is_some_and(|s| s.data.contains_key("next.crt"))
                };
                let (timeout, crash_after) = match *step {
                    Step::Killed(n) => (TIMEOUT, Some(n)),
                    Step::Create(timeout) => (timeout, None),
                    _ => unreachable!(),
                };
                let sim = killed(&world, &outside, index, crash_after);
                let (code, message) = match create(&sim, timeout).await {
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
                ended.push(Ended {
                    run: index,
                    spec: RunSpec::default(),
                    code,
                    message,
                    resumed,
                    note: None,
                    ca_disturbed: false,
                });
            }
            Step::Patch => {
                let lines = patch(&sim(&world, &outside, index)).await?;
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
    let (code, message) = create(&sim(&world, &outside, index), TIMEOUT).await?;
    let lines = patch(&sim(&world, &outside, index + 1)).await?;
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
    Ok(checked)
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
