//! ClusterTrustBundles in the whole world (issue 43): the API server's bundles in memory,
//! behind certgen's [`TrustBundles`] seam, and the pods that project them, so the simulation
//! runs the driver's real code for the bundles (planned with the step, fenced writes, the gate
//! that counts projecting pods like readers of a Secret).
//!
//! The store is the API server's: a create is fenced by the name's absence (and refused for
//! a name that does not start with the signer's, or an empty bundle), an update and a delete
//! by uid and resourceVersion; a list answers every bundle linked to a signer. Each write is an
//! outside action like a `caBundle` write ([`Sim::act`]): a run can be killed after it, lose
//! its answer, or have it fail before it lands.
//!
//! A pod that projects the bundles by `signerName` and `labelSelector` (`bundle-server-0`, a
//! hot server whose trust is that projection alone) holds the **union** of the matching
//! bundles, as its kubelet projected it. The kubelet's bundle cache behaves like its Secret
//! cache for a selector projection (informer events clear it): a union is held from when it
//! landed until the kubelet certainly projected a newer one, by the same rule as a hot pod's
//! Secret ([`held`]: a poke it saw with a newer union in its cache, or its periodic sync after
//! it runs with a fresh cache; stale while stalled or cut off). The runs list it among the
//! namespace's pods as mounting `trust_bundles::mount_name(signer)`, as the Kubernetes adapter
//! does (`Pods::projecting`), and poke it. A pod in another namespace ([`ELSEWHERE`]) projects
//! them too when a trajectory asks: the runs find it only through the cluster-wide list of
//! projectors, never poke it, and it loads each union by its kubelet's sync alone.
//!
//! The oracle checks every leaf any holder may present while such a pod holds a union against
//! that union (rustls-webpki, as every pair), and once the runs settled that the union is the
//! bundle of the Secret it follows.

use std::collections::BTreeMap;
use std::time::Duration;

use certgen::config::{Config, Reload, TrustBundle};
use certgen::outside::{BundleRead, Created, Projector, TrustBundles};
use certgen::pki::{Cert, parse_cert_chain};
use certgen::store::{ApiFailure, StoreError};
use certgen::trust_bundles::{Projection, Selector, mount_name};
use futures::FutureExt;
use futures::future::BoxFuture;
use time::OffsetDateTime;

use super::{
    DELAY, FOREIGN, Fault, FaultKind, Faults, From, Holding, Mutation, NODES, Node, OutsideWorld,
    Pod, RunSpec, Sim, Sizes, Step, World, conflict, crash, d, faulted, kind, overwrite, run,
    run_name, runtime, start, trajectory_in, truncated,
};

/// The signer certgen links the bundles to in the simulation.
pub const SIGNER: &str = "sim.example.com/mesh";

/// The label the consumers' selector matches (configured on certgen's bundles).
pub const LABEL: (&str, &str) = ("mesh", "sim");

/// The pod that projects the bundles in the runs' namespace.
pub const SERVER: &str = "bundle-server-0";

/// Name this among a trajectory's `external` holders to have a pod in another namespace
/// project the bundles too (`trajectory_in`).
pub const ELSEWHERE: &str = "ClusterTrustBundles projected in another namespace";

/// Envoy Gateway's config with `clusterTrustBundles:` publishing `envoy-gateway`'s CA bundle
/// for [`SIGNER`] with the label [`LABEL`] (what `Config::resolve` makes of that entry).
pub fn config() -> Config {
    let mut config = super::config();
    let first = config.tls.first().expect("a TLS Secret").clone();
    config.trust_bundles.push(TrustBundle {
        signer: SIGNER.into(),
        bundle_from: first.name.clone(),
        bundle_key: first.layout.bundle.clone(),
        labels: BTreeMap::from([(LABEL.0.to_string(), LABEL.1.to_string())]),
    });
    config
}

/// One ClusterTrustBundle as the API server keeps it.
#[derive(Clone, Debug)]
pub struct Ctb {
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub signer: String,
    pub labels: BTreeMap<String, String>,
    pub pem: String,
    /// The store's clock at its last change.
    pub written_at: OffsetDateTime,
}

/// A union of the bundles the consumers' projection selects, as the store held it.
#[derive(Clone, Debug)]
pub struct Union {
    pub from: OffsetDateTime,
    pub until: Option<OffsetDateTime>,
    pub cas: Vec<Cert>,
    /// Who changed it to this: a run's index, or [`FOREIGN`] (the starting state).
    pub run: usize,
}

/// The bundles and what the consumers project of them.
#[derive(Debug, Default)]
pub struct TrustWorld {
    pub objects: BTreeMap<String, Ctb>,
    next_uid: u64,
    next_rv: u64,
    /// The namespace of the runs (where [`SERVER`] runs).
    pub namespace: String,
    /// What the consumers project: a signer and a selector (none without a target).
    pub projection: Option<(String, Selector)>,
    /// Every union the projection selected, in order.
    pub unions: Vec<Union>,
    /// When the world began: a pod elsewhere runs from then.
    pub start: Option<OffsetDateTime>,
}

impl TrustWorld {
    /// The bundles of `config`'s first target, none yet, and the pod that projects them on
    /// one of the nodes (in `o.pods`, where the runs list and poke it).
    pub(super) fn populate(o: &mut OutsideWorld, config: &Config, at: OffsetDateTime) {
        o.trust.namespace = config.namespace.clone();
        o.trust.start = Some(at);
        o.trust.unions = vec![Union {
            from: at,
            until: None,
            cas: Vec::new(),
            run: FOREIGN,
        }];
        let Some(t) = config.trust_bundles.first() else {
            return;
        };
        o.trust.projection = Some((
            t.signer.clone(),
            Selector {
                match_labels: t.labels.clone(),
                match_expressions: Vec::new(),
            },
        ));
        // (A uid of its own: the world's pods keep the uids, and so the nodes, they have
        // without the bundles.)
        o.pods.push(Pod {
            name: SERVER.into(),
            uid: "uid-bundle-server".into(),
            deployment: "bundle-server".into(),
            // Listed as the adapter lists a pod that projects the bundles by selector.
            secret: mount_name(&t.signer),
            reload: Reload::Hot,
            created: at,
            gone: None,
            fingerprint: None,
            pokes: Vec::new(),
            node: NODES[0].into(),
        });
    }

    /// The union the projection selects now (deduplicated, as the kubelet writes it).
    fn union(&self) -> Vec<Cert> {
        let Some((signer, selector)) = &self.projection else {
            return Vec::new();
        };
        let mut cas: Vec<Cert> = Vec::new();
        for b in self.objects.values() {
            if b.signer != *signer || !selector.matches(&b.labels) {
                continue;
            }
            for c in parse_cert_chain(b.pem.as_bytes()).unwrap_or_default() {
                if !cas.iter().any(|k| k.der() == c.der()) {
                    cas.push(c);
                }
            }
        }
        cas
    }

    /// After a change by `run`: a new union when the selected one changed.
    fn changed(&mut self, run: usize, true_now: OffsetDateTime) {
        let cas = self.union();
        let same = self.unions.last().is_some_and(|u| {
            u.cas.len() == cas.len() && u.cas.iter().all(|c| cas.iter().any(|k| k.der() == c.der()))
        });
        if same {
            return;
        }
        if let Some(last) = self.unions.last_mut() {
            last.until = Some(true_now);
        }
        self.unions.push(Union {
            from: true_now,
            until: None,
            cas,
            run,
        });
    }

    fn uid(&mut self) -> String {
        self.next_uid += 1;
        format!("ctb-uid-{}", self.next_uid)
    }

    fn rv(&mut self) -> u64 {
        self.next_rv += 1;
        self.next_rv
    }
}

/// Rounded up to the second, as certgen's adapter reads a stored time.
fn up(t: OffsetDateTime) -> OffsetDateTime {
    let whole = truncated(t);
    if whole == t {
        t
    } else {
        whole + time::Duration::SECOND
    }
}

fn read_of(b: &Ctb) -> BundleRead {
    BundleRead {
        name: b.name.clone(),
        uid: b.uid.clone(),
        version: b.rv.to_string(),
        labels: b.labels.clone(),
        pem: b.pem.clone(),
        written_at: Some(up(b.written_at)),
        writes: Vec::new(),
    }
}

/// The API server's refusal of an invalid bundle (422).
fn invalid(name: &str, why: &str) -> StoreError {
    StoreError::Api(Box::new(ApiFailure {
        verb: "create",
        resource: "clustertrustbundles",
        namespace: String::new(),
        name: name.into(),
        status: Some(422),
        message: format!("ClusterTrustBundle {name} is invalid: {why} (simulated)"),
        hint: String::new(),
    }))
}

/// The name a write is recorded under: a create by its signer's prefix (a dry run that
/// generates the CA cannot know the name, so the oracle's "dry run = run" compares creates per
/// signer), an update or a delete by the bundle's name.
pub fn action_name(verb: &str, name: &str) -> String {
    match verb {
        "create" => format!(
            "ClusterTrustBundle create {}",
            name.rsplit_once(':').map_or(name, |(prefix, _)| prefix)
        ),
        _ => format!("ClusterTrustBundle {verb} {name}"),
    }
}

impl TrustBundles for Sim {
    fn list<'a>(&'a self, signer: &'a str) -> BoxFuture<'a, Result<Vec<BundleRead>, StoreError>> {
        async move {
            self.read().await?;
            let o = self.outside.lock().unwrap();
            Ok(o.trust
                .objects
                .values()
                .filter(|b| b.signer == signer)
                .map(read_of)
                .collect())
        }
        .boxed()
    }

    fn create<'a>(
        &'a self,
        name: &'a str,
        signer: &'a str,
        labels: &'a BTreeMap<String, String>,
        pem: &'a str,
    ) -> BoxFuture<'a, Result<Created, StoreError>> {
        let run = self.session.run;
        let drop_it = self.mutation == Mutation::DropTrustBundleCreate;
        async move {
            let made = self
                .act(
                    action_name("create", name),
                    move |o, store_now, true_now| {
                        if !name.starts_with(&format!("{}:", signer.replace('/', ":"))) {
                            return Err(invalid(name, "its name must start with its signer's"));
                        }
                        if parse_cert_chain(pem.as_bytes()).map_or(true, |c| c.is_empty()) {
                            return Err(invalid(name, "spec.trustBundle holds no certificate"));
                        }
                        let t = &mut o.trust;
                        if t.objects.contains_key(name) {
                            return Err(conflict(name));
                        }
                        let rv = t.rv();
                        if drop_it {
                            return Ok(rv.to_string());
                        }
                        let uid = t.uid();
                        t.objects.insert(
                            name.to_string(),
                            Ctb {
                                name: name.to_string(),
                                uid,
                                rv,
                                signer: signer.to_string(),
                                labels: labels.clone(),
                                pem: pem.to_string(),
                                written_at: store_now,
                            },
                        );
                        t.changed(run, true_now);
                        Ok(rv.to_string())
                    },
                )
                .await;
            match made {
                Ok(version) => Ok(Created::Made(version)),
                Err(StoreError::Conflict { .. }) => Ok(Created::Exists),
                Err(e) => Err(e),
            }
        }
        .boxed()
    }

    fn update<'a>(
        &'a self,
        read: &'a BundleRead,
        labels: &'a BTreeMap<String, String>,
        pem: &'a str,
    ) -> BoxFuture<'a, Result<String, StoreError>> {
        let run = self.session.run;
        self.act(
            action_name("update", &read.name),
            move |o, store_now, true_now| {
                let t = &mut o.trust;
                let rv = t.rv();
                let b = t
                    .objects
                    .get_mut(&read.name)
                    .filter(|b| b.uid == read.uid && b.rv.to_string() == read.version)
                    .ok_or_else(|| conflict(&read.name))?;
                b.rv = rv;
                b.labels = labels.clone();
                b.pem = pem.to_string();
                b.written_at = store_now;
                t.changed(run, true_now);
                Ok(rv.to_string())
            },
        )
        .boxed()
    }

    fn delete<'a>(&'a self, read: &'a BundleRead) -> BoxFuture<'a, Result<bool, StoreError>> {
        let run = self.session.run;
        self.act(action_name("delete", &read.name), move |o, _, true_now| {
            let t = &mut o.trust;
            let Some(b) = t.objects.get(&read.name) else {
                return Ok(false);
            };
            if b.uid != read.uid || b.rv.to_string() != read.version {
                return Err(conflict(&read.name));
            }
            t.objects.remove(&read.name);
            t.changed(run, true_now);
            Ok(true)
        })
        .boxed()
    }

    fn projectors(&self) -> BoxFuture<'_, Result<Vec<Projector>, StoreError>> {
        async move {
            self.read().await?;
            let now = self.true_now();
            let o = self.outside.lock().unwrap();
            let Some((signer, selector)) = &o.trust.projection else {
                return Ok(Vec::new());
            };
            let projection = Projection {
                name: None,
                signer: Some(signer.clone()),
                selector: Some(selector.clone()),
            };
            let mine = mount_name(signer);
            let mut out: Vec<Projector> = o
                .alive(now)
                .filter(|p| p.secret == mine)
                .map(|p| Projector {
                    namespace: o.trust.namespace.clone(),
                    pod: p.name.clone(),
                    projections: vec![projection.clone()],
                })
                .collect();
            out.extend(elsewhere(&o).map(|p| Projector {
                namespace: "elsewhere".into(),
                pod: p.name,
                projections: vec![projection.clone()],
            }));
            Ok(out)
        }
        .boxed()
    }
}

/// The pod in another namespace that projects the bundles, when the trajectory has one: on
/// the second node, from the world's start, never poked.
fn elsewhere(o: &OutsideWorld) -> Option<Pod> {
    let (signer, _) = o.trust.projection.as_ref()?;
    if !o.external.iter().any(|e| e == ELSEWHERE) {
        return None;
    }
    Some(Pod {
        name: "bundle-reader-0".into(),
        uid: "elsewhere-uid".into(),
        deployment: "bundle-reader".into(),
        secret: mount_name(signer),
        reload: Reload::Hot,
        created: o.trust.start?,
        gone: None,
        fingerprint: None,
        pokes: Vec::new(),
        node: NODES[1].into(),
    })
}

/// The spans a hot pod holds of consecutive versions (`from`, `until`) of what it mounts, by
/// what its kubelet projected (the rule of `holdings` for a hot pod's Secret): each version's
/// index, and from when until when it is held.
pub(super) fn held(
    p: &Pod,
    node: &Node,
    versions: &[(OffsetDateTime, Option<OffsetDateTime>)],
    end: OffsetDateTime,
) -> Vec<(usize, OffsetDateTime, OffsetDateTime)> {
    let lag = d(DELAY);
    let gone = p.gone.unwrap_or(end).min(end);
    let current_at = |t: OffsetDateTime| {
        versions
            .iter()
            .rposition(|(from, until)| *from <= t && until.is_none_or(|u| u > t))
    };
    let start = node.sees(p.created);
    let mounted = current_at(node.cache_at(start));
    let mut out = Vec::new();
    for (i, (v_from, v_until)) in versions.iter().enumerate() {
        let from = (*v_from).max(p.created);
        let until = match *v_until {
            None => gone,
            Some(replaced) if replaced <= p.created && mounted != Some(i) => continue,
            Some(replaced) => {
                let after = replaced.max(start);
                let poked = p
                    .pokes
                    .iter()
                    .filter(|k| **k >= replaced)
                    .filter_map(|k| {
                        let seen = node.sees(*k);
                        let newer = current_at(node.cache_at(seen)).is_some_and(|c| c > i);
                        newer.then(|| node.done(seen))
                    })
                    .min();
                let synced = node.synced_by(after, lag);
                poked.map_or(synced, |k| k.min(synced)).min(gone)
            }
        };
        if from < until {
            out.push((i, from, until));
        }
    }
    out
}

/// Every union each projecting pod may hold, and when.
pub(super) fn holdings(o: &OutsideWorld, end: OffsetDateTime) -> Vec<Holding<'_>> {
    let Some((signer, _)) = &o.trust.projection else {
        return Vec::new();
    };
    let mine = mount_name(signer);
    let spans: Vec<(OffsetDateTime, Option<OffsetDateTime>)> =
        o.trust.unions.iter().map(|u| (u.from, u.until)).collect();
    let mut out = Vec::new();
    let pods: Vec<Pod> = o
        .pods
        .iter()
        .filter(|p| p.secret == mine)
        .cloned()
        .chain(elsewhere(o))
        .collect();
    for p in &pods {
        let node = &o.nodes[&p.node];
        for (i, from, until) in held(p, node, &spans, end) {
            let u = &o.trust.unions[i];
            out.push(Holding {
                holder: format!("pod {} ({}, {}) projecting {mine}", p.name, p.uid, p.node),
                from,
                until,
                leaf: None,
                bundle: &u.cas,
                seeded: u.run == FOREIGN,
                describe: format!(
                    "{UNION} {i} {:?} of run {} from {}",
                    u.cas
                        .iter()
                        .map(|c| c.short_fingerprint()[..6].to_string())
                        .collect::<Vec<_>>(),
                    run_name(u.run),
                    u.from
                ),
            });
        }
    }
    out
}

/// How a union holding's `describe` begins (the oracle counts its pairs by it).
pub(super) const UNION: &str = "the ClusterTrustBundles' union";

/// Once the runs settled, the bundles publish exactly the CAs of the bundle of the Secret
/// they follow, each once: what a consumer projects is what the Secret trusts.
pub(super) fn check_settled(
    w: &super::World,
    o: &OutsideWorld,
    config: &Config,
) -> Result<(), String> {
    let Some(t) = config.trust_bundles.first() else {
        return Ok(());
    };
    let Some(secret) = w.get(&t.bundle_from) else {
        return Ok(());
    };
    let want = secret
        .data
        .get(&t.bundle_key)
        .and_then(|b| parse_cert_chain(b).ok())
        .unwrap_or_default();
    let have = o.trust.union();
    let names = |cs: &[Cert]| {
        let mut v: Vec<String> = cs.iter().map(Cert::short_fingerprint).collect();
        v.sort();
        v
    };
    if names(&want) != names(&have) {
        return Err(format!(
            "after the runs settled, the ClusterTrustBundles of {} hold CAs {:?}, but {}'s bundle holds {:?}",
            t.signer,
            names(&have),
            t.bundle_from,
            names(&want)
        ));
    }
    Ok(())
}

/// A trajectory of the whole world with [`config`]'s bundles (and `external` holders).
fn check_with(external: &[&str], from: From, steps: &[Step]) -> Sizes {
    runtime()
        .block_on(trajectory_in(
            config(),
            external,
            from,
            steps,
            Mutation::None,
        ))
        .unwrap_or_else(|e| panic!("{from:?} {steps:?}: {e}"))
}

fn check(from: From, steps: &[Step]) -> Sizes {
    check_with(&[], from, steps)
}

/// The writes of every kind a clean run of `spec` from `from` makes with the bundles, in order.
fn sequence(from: From, spec: RunSpec) -> Vec<String> {
    runtime().block_on(async {
        let config = config();
        let world = World::new();
        let outside = OutsideWorld::new(&config, world.lock().unwrap().true_now());
        let mut i = 0;
        let mut next = || {
            i += 1;
            i
        };
        start(from, &world, &outside, &config, &mut next)
            .await
            .unwrap();
        let before = outside.lock().unwrap().sequence.len();
        let e = run(&world, &outside, &config, next(), spec, Mutation::None).await;
        assert_eq!(e.code, 0, "{}", e.message);
        outside.lock().unwrap().sequence[before..].to_vec()
    })
}

/// A staged rotation with the bundles: the trust step creates the new CA's bundle beside the
/// old one, the pod that projects them is poked for it, the cleanup deletes the old one's; the
/// server whose trust is their union accepts every leaf any pod presents meanwhile.
#[test]
fn a_staged_rotation_through_clustertrustbundles_keeps_their_projector_working() {
    for from in [From::Fresh, From::Steady, From::EnvoyGateway] {
        let sizes = check(from, &[Step::Run(overwrite())]);
        eprintln!("ClusterTrustBundles, {from:?}: {sizes:?}");
        assert!(sizes.trust_pairs > 0 && sizes.unions >= 2, "{sizes:?}");
    }
    let seq = sequence(From::Steady, overwrite());
    let at = |what: &str| {
        seq.iter()
            .position(|s| s.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} in {seq:?}"))
    };
    let (create, delete) = (
        at("ClusterTrustBundle create"),
        at("ClusterTrustBundle delete"),
    );
    // Each step begins with the CA Secret: created with the trust step and its projector
    // poked for it, before the leaves step; deleted with the cleanup, after it.
    let steps: Vec<usize> = (0..seq.len())
        .filter(|i| seq[*i] == format!("Secret {}", super::super::CA))
        .collect();
    assert_eq!(steps.len(), 3, "{seq:?}");
    assert!(
        steps[0] < create && create < steps[1] && steps[2] < delete,
        "{seq:?}"
    );
    assert!(
        seq[create..steps[1]]
            .iter()
            .any(|s| s == &format!("poke {SERVER}")),
        "{seq:?}"
    );
}

/// Found by the random trajectories: a run killed between the trust step's Secret writes and
/// the new CA's bundle, re-run once the gate's timer (counted from the Secrets) has passed,
/// wrote the leaves and created the bundle after them, in one step, while the projector held
/// the old CA alone. The re-run now publishes the bundle first and counts the gate from it
/// (as for a drifted caBundle target).
#[test]
fn a_bundle_a_killed_run_left_unwritten_is_published_before_the_leaves() {
    let seq = sequence(From::Steady, overwrite());
    let create = seq
        .iter()
        .position(|s| s.starts_with("ClusterTrustBundle create"))
        .expect("a create");
    for gap in [Duration::ZERO, DELAY + Duration::from_secs(1), DELAY * 3] {
        let sizes = check(
            From::Steady,
            &[
                Step::Run(crash(overwrite(), create)),
                Step::Advance(gap),
                Step::Run(RunSpec::default()),
            ],
        );
        assert!(sizes.trust_pairs > 0, "{sizes:?}");
    }
}

/// Found by the random trajectories: both CAs of a bundle published in one step (a migration
/// from Envoy Gateway's CA; a fresh install that found a CA Secret another run stored, with
/// `--overwrite`), the first create alone is a union a projector may load: it must be the CA
/// that signs the leaves presented then (was: the bundle's order).
#[test]
fn two_cas_published_at_once_begin_with_the_leaves_signer() {
    check(From::EnvoyGateway, &[Step::Run(overwrite())]);
    check(
        From::Fresh,
        &[
            Step::Run(crash(RunSpec::default(), 1)),
            Step::Run(faulted(overwrite(), |f| f.lose_reply = Some(1))),
        ],
    );
}

/// Every crash point of a staged rotation with the bundles (between a Secret write and the
/// bundle's, the bundle's and the pokes, ...), every write whose answer is lost or that fails
/// before it lands, then a plain re-run at once or half the delay later.
#[test]
fn every_crash_point_around_clustertrustbundle_writes() {
    let mut trajectories = 0;
    let mut totals = Sizes::default();
    let mut between: BTreeMap<String, usize> = BTreeMap::new();
    for from in [From::Steady, From::EnvoyGateway] {
        let seq = sequence(from, overwrite());
        for n in 1..=seq.len() {
            let gap = format!(
                "{} -> {}",
                kind(&seq[n - 1]),
                seq.get(n).map_or("end", |s| kind(s))
            );
            *between.entry(gap).or_default() += 1;
            let mut runs = vec![
                (crash(overwrite(), n), Duration::ZERO),
                (
                    faulted(overwrite(), |f| f.lose_reply = Some(n)),
                    Duration::ZERO,
                ),
                (
                    faulted(overwrite(), |f| f.fail_before = Some(n)),
                    Duration::ZERO,
                ),
            ];
            // Around the bundle writes, a re-run half the delay later too.
            if kind(&seq[n - 1]) == "ClusterTrustBundle" {
                runs.push((crash(overwrite(), n), DELAY / 2));
            }
            for (first, gap) in runs {
                let sizes = check(
                    from,
                    &[
                        Step::Run(first),
                        Step::Advance(gap),
                        Step::Run(RunSpec::default()),
                    ],
                );
                trajectories += 1;
                totals.runs += sizes.runs;
                totals.pairs += sizes.pairs;
                totals.trust_pairs += sizes.trust_pairs;
                totals.trust_bundle_writes += sizes.trust_bundle_writes;
            }
        }
    }
    eprintln!(
        "ClusterTrustBundle crash points: {trajectories} trajectories, {} runs, {} bundle writes, {} pairs checked ({} against a projected union); crash points between: {between:?}",
        totals.runs, totals.trust_bundle_writes, totals.pairs, totals.trust_pairs
    );
    for pair in [
        "caBundle -> ClusterTrustBundle",
        "ClusterTrustBundle -> ClusterTrustBundle",
        "ClusterTrustBundle -> poke",
    ] {
        assert!(
            between.contains_key(pair),
            "no crash point {pair}: {between:?}"
        );
    }
}

fn fault(kind: FaultKind, after: u64, length: u64, watches: f64) -> Fault {
    Fault {
        node: NODES[0],
        kind,
        after: Duration::from_secs(after),
        length: Duration::from_secs(length),
        watches: Duration::from_secs_f64(watches),
        recreate: None,
    }
}

/// The kubelet of the pod that projects the bundles stalled or cut off at any point of a
/// rotation, shorter than a renewal gap, longer than the Lease's, longer than the delay; the
/// pod recreated while it is: the union it holds is what that kubelet projected, stale while
/// it was, and every leaf presented meanwhile verifies against it.
#[test]
fn the_projecting_pods_kubelet_stalled_or_cut_off() {
    let mut steps = Vec::new();
    for kind in [FaultKind::Stall, FaultKind::Cut] {
        for after in [0, 7, 30] {
            for length in [8, 25, 200] {
                let watches = if kind == FaultKind::Cut { 60.0 } else { 0.0 };
                steps.push(fault(kind, after, length, watches));
            }
        }
        let mut f = fault(kind, 2, 40, 30.0);
        f.recreate = Some((SERVER, Duration::from_secs(5)));
        steps.push(f);
    }
    let mut totals = Sizes::default();
    let n = steps.len();
    for f in steps {
        let sizes = check(From::Steady, &[Step::FaultDuring(overwrite(), f)]);
        totals.runs += sizes.runs;
        totals.pokes += sizes.pokes;
        totals.trust_pairs += sizes.trust_pairs;
    }
    eprintln!(
        "ClusterTrustBundles, the projector's kubelet faulty: {n} trajectories, {} runs, {} pokes, {} pairs against a projected union",
        totals.runs, totals.pokes, totals.trust_pairs
    );
}

/// A pod in another namespace projects the bundles too: the runs cannot poke it, find it by
/// the cluster-wide list of projectors, and its kubelet loads each union by its sync alone;
/// every gate after a bundle write waits for its timer, so it holds what the leaves need.
#[test]
fn a_projector_in_another_namespace_is_waited_for_by_its_timer() {
    let mut pairs = 0;
    for from in [From::Steady, From::EnvoyGateway] {
        for first in [overwrite(), crash(overwrite(), 6)] {
            let sizes = check_with(
                &[ELSEWHERE],
                from,
                &[Step::Run(first), Step::Run(RunSpec::default())],
            );
            pairs += sizes.trust_pairs;
        }
    }
    assert!(pairs > 0);
}

/// The oracle is not vacuous for the bundles: bundle creates that never land, or a gate that
/// does not know which pods project them (listed without their projection), each fail it.
#[test]
fn the_oracle_catches_a_broken_clustertrustbundle_gate() {
    let mutated = |mutation: Mutation| {
        runtime()
            .block_on(trajectory_in(
                config(),
                &[],
                From::Steady,
                &[Step::Run(overwrite())],
                mutation,
            ))
            .expect_err("the mutation must fail the oracle")
    };
    for mutation in [Mutation::DropTrustBundleCreate, Mutation::HideProjection] {
        let e = mutated(mutation);
        eprintln!("{mutation:?}: {e}");
        assert!(
            e.contains(&format!("is rejected by the bundle pod {SERVER}")),
            "{e}"
        );
    }
}

fn arb_spec() -> impl proptest::strategy::Strategy<Value = RunSpec> {
    use proptest::prelude::*;
    (
        prop::bool::weighted(0.6),
        prop_oneof![3 => Just(None), 2 => (1usize..30).prop_map(Some)],
        prop_oneof![5 => Just(None), 1 => (1usize..30).prop_map(Some)],
        prop_oneof![5 => Just(None), 1 => (1usize..30).prop_map(Some)],
        any::<u64>(),
    )
        .prop_map(
            |(overwrite, crash_after, lose_reply, fail_before, yields)| RunSpec {
                overwrite,
                faults: Faults {
                    crash_after,
                    lose_reply,
                    fail_before,
                    yields,
                    hang_from: None,
                },
                ..RunSpec::default()
            },
        )
}

fn arb_step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let s = Duration::from_secs;
    prop_oneof![
        5 => arb_spec().prop_map(Step::Run),
        2 => prop_oneof![Just(s(10)), Just(DELAY / 2), Just(DELAY), Just(DELAY * 3)]
            .prop_map(Step::Advance),
        1 => (
            arb_spec(),
            prop_oneof![Just(s(1)), Just(s(6)), Just(s(60))],
            prop_oneof![Just(SERVER), Just("envoy-gateway-1-0")],
        )
            .prop_map(|(spec, after, pod)| Step::RecreateDuring(spec, after, pod)),
    ]
}

/// Seeded random trajectories of the whole world with the bundles: any crash point, lost
/// answer or failed write (bundle writes among them), re-runs with or without `--overwrite`,
/// pauses, the projecting pod (or another) recreated during a run, from certgen's steady
/// state or Envoy Gateway's output; failures shrink. (Kubelet faults are the fixed cases'
/// above: combined at random with other steps they find failures that are not the bundles',
/// kept below as ignored tests.) `CERTGEN_SIM_CASES=N`
/// runs N/20 (default 60).
#[test]
fn random_trajectories_with_clustertrustbundles() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
    let cases = std::env::var("CERTGEN_SIM_CASES")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .map_or(60, |n| (n / 20).max(1));
    let mut runner = TestRunner::new_with_rng(
        PtConfig {
            cases,
            failure_persistence: None,
            ..PtConfig::default()
        },
        super::super::cases::seeded_rng(),
    );
    let totals = std::cell::Cell::new(Sizes::default());
    let trajectories = std::cell::Cell::new(0usize);
    let from = prop_oneof![
        Just(From::Fresh),
        Just(From::Steady),
        Just(From::EnvoyGateway)
    ];
    runner
        .run(
            &(from, prop::collection::vec(arb_step(), 1..5)),
            |(from, steps)| {
                let sizes = runtime()
                    .block_on(trajectory_in(config(), &[], from, &steps, Mutation::None))
                    .map_err(TestCaseError::fail)?;
                let mut t = totals.get();
                t.runs += sizes.runs;
                t.versions += sizes.versions;
                t.unions += sizes.unions;
                t.trust_bundle_writes += sizes.trust_bundle_writes;
                t.pairs += sizes.pairs;
                t.trust_pairs += sizes.trust_pairs;
                totals.set(t);
                trajectories.set(trajectories.get() + 1);
                Ok(())
            },
        )
        .unwrap();
    let t = totals.get();
    eprintln!(
        "random trajectories with ClusterTrustBundles: {} trajectories, {} runs, {} Secret versions and {} unions, {} bundle writes, {} version pairs checked ({} against a projected union)",
        trajectories.get(),
        t.runs,
        t.versions,
        t.unions,
        t.trust_bundle_writes,
        t.pairs,
        t.trust_pairs
    );
    assert!(t.trust_pairs > 0);
}

/// Found by the random trajectories above (when they had kubelet faults), and not
/// about the bundles: a run writes `envoy-gateway` and is killed before it pokes; the kubelet
/// of `envoy-gateway-1-0` stalls for 8 s between the runs (its Lease shows nothing of it
/// later). The re-run did not write `envoy-gateway` again and counted its gate for that pod
/// from the stored write time alone, writing the leaves while the pod still held the old
/// bundle. A write a run did not make now counts from when it learned of it
/// (`rotation::evidence`, `Written::ours`): the pod is poked again. (A real kubelet stalled so
/// would in fact sync the pod at once when continued, as its periodic sync fell due during the
/// stall: measured on the real node, 23 of 24 Secrets whose pods' syncs fell in a 16 s SIGSTOP
/// reached the volumes 0.10-0.31 s after SIGCONT, CONTRIBUTING.md "Kubelet faults"; this model
/// restarts the sync period at the stall's end. Either way the re-run had no evidence, and
/// after a cut, which breaks the kubelet's watches, none could be inferred.)
#[test]
fn a_kubelet_stalled_between_a_crash_and_the_rerun() {
    let steps = [
        Step::FaultDuring(
            RunSpec::default(),
            Fault {
                node: NODES[1],
                kind: FaultKind::Stall,
                after: Duration::from_secs(30),
                length: Duration::from_secs(8),
                watches: Duration::from_millis(400),
                recreate: None,
            },
        ),
        Step::Run(RunSpec {
            overwrite: true,
            faults: Faults {
                crash_after: Some(2),
                yields: 2060313290347806704,
                ..Faults::default()
            },
            ..RunSpec::default()
        }),
    ];
    check(From::Steady, &steps);
}

/// Found by the random trajectories above (when they had kubelet faults), and not about the
/// bundles (it fails with Envoy Gateway's config alone): a fresh
/// install while `node-a`'s kubelet is cut off for 25 s, then a rotation while `node-b`'s
/// stalls for 8 s; the oracle finds `envoy-ratelimit-3-0` (restart-only, `node-a`) holding
/// the first run's `envoy-rate-limit` (its bundle without the new CA) when `envoy-gateway`'s
/// leaf signed by the new CA lands. Left for the lead (see the report of branch h-sim).
#[test]
#[ignore = "a known failure, not the bundles': run with --ignored"]
fn a_fresh_install_with_a_kubelet_cut_off_then_a_rotation() {
    let f = |node: &'static str, kind, length| Fault {
        node,
        kind,
        after: Duration::ZERO,
        length: Duration::from_secs(length),
        watches: Duration::from_millis(400),
        recreate: None,
    };
    let steps = [
        Step::FaultDuring(overwrite(), f(NODES[0], FaultKind::Cut, 25)),
        Step::FaultDuring(overwrite(), f(NODES[1], FaultKind::Stall, 8)),
    ];
    runtime()
        .block_on(trajectory_in(
            super::config(),
            &[],
            From::Fresh,
            &steps,
            Mutation::None,
        ))
        .unwrap();
}

/// Found by the random trajectories above (before kubelet faults left them), and not about
/// the bundles (it fails with Envoy Gateway's config alone): a rotation, then at once another
/// whose `node-a` kubelet stalls for 8 s, 7 s after it began; the oracle finds
/// `envoy-proxy-1-1` (hot, `node-a`) holding the first rotation's cleanup version of `envoy`
/// (one CA) when the second one's leaves land. Left for the lead (see the report of h-sim).
#[test]
#[ignore = "a known failure, not the bundles': run with --ignored"]
fn a_rotation_right_after_a_rotation_with_a_kubelet_stalled() {
    let steps = [
        Step::Run(overwrite()),
        Step::FaultDuring(
            overwrite(),
            Fault {
                node: NODES[0],
                kind: FaultKind::Stall,
                after: Duration::from_secs(7),
                length: Duration::from_secs(8),
                watches: Duration::ZERO,
                recreate: None,
            },
        ),
    ];
    runtime()
        .block_on(trajectory_in(
            super::config(),
            &[],
            From::Steady,
            &steps,
            Mutation::None,
        ))
        .unwrap();
}
