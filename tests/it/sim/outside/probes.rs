//! Per-pod probes in the whole world (issue 44): the Services of the hot consumers that
//! configure a probe, behind certgen's [`Endpoints`] seam, so the simulation runs the gate's
//! real probe rounds (`rotation/probes.rs`: select, dial, interpret, record) and the gates open
//! on what the probes show.
//!
//! A probe Service's ready endpoints are its consumer's live pods, each named with its UID (an
//! EndpointSlice's `targetRef`). A dial is answered with the verdict a TLS handshake would give
//! against what **that pod actually holds** at that instant: the version of its Secret it
//! serves and verifies with ([`actual`]). The oracle's holdings ([`super::spans`]) are when a
//! pod *may* hold a version; what it actually does is one kubelet within those bounds: a hot
//! pod moves on from a version when its kubelet saw a poke with a newer one in its cache, or
//! when its periodic sync projected it, some fraction of the propagation delay after it runs
//! with a fresh cache (chosen per pod and version, up to the whole delay). Nothing a probe
//! answers depends on what happens after it, so the answer given during a run is the one the
//! oracle derives again at the end.
//!
//! The trust gate's dial ([`Endpoints::trust`]): the pod's leaf must verify against the roots
//! the probe trusts (as a server), and the pod must accept the probe's client certificate: its
//! bundle holds an unexpired CA that signed it (the client certificate's own validity is on the
//! wall clock, where certgen issued it, not the simulation's). A pod of a consumer that
//! verifies nothing ([`ProbeWorld::verifies_nothing`]) accepts any client: `VerifiesNothing`.
//! Any other gate's dial ([`Endpoints::serves`]): the pod must present exactly the leaf
//! expected, verified against the roots, and accept the client.
//!
//! The oracle charges probes with what the pod held ([`check`]): every probe that passed must
//! be one the pod's actual state passes. Beside that, a probe that reached a pod holding a
//! newer version than one the oracle's bounds still allow ends that holding there (the pod
//! moved on by then); every other holding stays as the kubelet rules bound it, so a gate a
//! probe opened early is checked by the pair oracle against what the pods really held.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use certgen::config::{Config, Probe, Reload};
use certgen::outside::{EndpointPod, Endpoints, EndpointsError, ReadyEndpoint};
use certgen::pki::Cert;
use certgen::probe::{ClientIdentity, ClientTrust, Expected};
use futures::FutureExt;
use futures::future::BoxFuture;
use time::OffsetDateTime;

use super::{DELAY, Mutation, OutsideWorld, Pod, Sim, World, d};
use crate::util::trust::{Use, webpki_verifies_for};

/// How long a simulated handshake takes.
pub const HANDSHAKE: std::time::Duration = std::time::Duration::from_millis(2);

/// The probes' side of the world.
#[derive(Default)]
pub struct ProbeWorld {
    /// Whether the runs reach the Services (an invocation with endpoints).
    pub enabled: bool,
    /// The Deployment behind each probe Service and port.
    pub services: BTreeMap<(String, u16), String>,
    /// Deployments whose servers accept any client certificate.
    pub verifies_nothing: BTreeSet<String>,
    /// Every dial answered, in order.
    pub answered: Vec<Answer>,
    /// The oracle does not charge the probes ([`check`]): to show the pair oracle alone
    /// catches a gate a false probe opened.
    pub unchecked: bool,
}

/// What a dial asked.
#[derive(Clone, Debug)]
pub enum Asked {
    /// The trust gate's: does the pod accept the client certificate.
    Trust,
    /// Any other gate's: does the pod serve exactly this leaf (and accept the client).
    Leaf(Box<Cert>),
}

/// One dial answered.
#[derive(Clone, Debug)]
pub struct Answer {
    pub pod: String,
    pub uid: String,
    /// True clock.
    pub at: OffsetDateTime,
    pub asked: Asked,
    /// The client certificate the probe presented.
    pub client: Cert,
    pub passed: bool,
}

impl ProbeWorld {
    /// Probes on for every hot consumer of `config` that names a probe Service.
    pub fn enable(o: &mut OutsideWorld, config: &Config) {
        o.probes.enabled = true;
        for c in config.consumers.iter().filter(|c| c.reload == Reload::Hot) {
            let Some(Probe {
                service: Some(service),
                port,
                ..
            }) = &c.probe
            else {
                continue;
            };
            let dep = o
                .deps
                .values()
                .find(|d| c.mounts.contains(&d.secret))
                .map(|d| d.name.clone());
            if let Some(dep) = dep {
                o.probes.services.insert((service.clone(), *port), dep);
            }
        }
    }
}

/// Envoy Gateway's config with a probe on the proxies too (Service `envoy`, port 443), so every
/// hot pod is a probed endpoint.
pub fn config() -> Config {
    let mut config = super::super::config();
    let template = config
        .consumers
        .iter()
        .find_map(|c| c.probe.clone())
        .expect("envoy-gateway's consumer has a probe");
    for c in &mut config.consumers {
        if c.reload == Reload::Hot && c.probe.is_none() {
            c.probe = Some(Probe {
                service: Some("envoy".into()),
                port: 443,
                addresses: vec![],
                server_name: template.server_name.clone(),
                secret: c.mounts[0].clone(),
            });
        }
    }
    config
}

/// The address a pod is dialed at: from its UID (`uid-N`), on `port`.
fn address(uid: &str, port: u16) -> String {
    let n: u32 = uid.trim_start_matches("uid-").parse().unwrap_or(0);
    format!("10.0.{}.{}:{port}", n / 256, n % 256)
}

/// The UID an address of [`address`] belongs to.
fn uid_of(address: &str) -> Option<String> {
    let ip = address.rsplit_once(':')?.0;
    let mut parts = ip.split('.').skip(2);
    let hi: u32 = parts.next()?.parse().ok()?;
    let lo: u32 = parts.next()?.parse().ok()?;
    Some(format!("uid-{}", hi * 256 + lo))
}

/// How far into the propagation delay pod `p`'s periodic sync projects what replaced version
/// `v`: one eighth to the whole delay, fixed per pod and version.
fn fraction(p: &Pod, v: &super::super::Version) -> time::Duration {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&p.uid, v.seq).hash(&mut h);
    d(DELAY) * (((h.finish() % 8) + 1) as f64 / 8.0)
}

/// The index (into `versions`, its Secret's) of the version pod `p` actually holds at `t`:
/// the oldest one it has not moved on from ([`super::spans`] with the pod's own sync delays,
/// which end no later than the oracle's bounds).
pub fn actual_index(
    o: &OutsideWorld,
    p: &Pod,
    versions: &[&super::super::Version],
    t: OffsetDateTime,
) -> Option<usize> {
    let end = t + time::Duration::SECOND;
    super::spans(o, p, versions, end, |i| fraction(p, versions[i]))
        .into_iter()
        .filter(|(_, from, until)| *from <= t && t < *until)
        .map(|(i, _, _)| i)
        .min()
}

/// The version of its Secret pod `p` actually holds at `t`.
pub fn actual<'w>(
    w: &'w World,
    o: &OutsideWorld,
    p: &Pod,
    t: OffsetDateTime,
) -> Option<&'w super::super::Version> {
    let versions: Vec<&super::super::Version> =
        w.versions.iter().filter(|v| v.secret == p.secret).collect();
    actual_index(o, p, &versions, t).map(|i| versions[i])
}

fn unix(t: OffsetDateTime) -> rustls_pki_types::UnixTime {
    rustls_pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        t.unix_timestamp() as u64
    ))
}

/// Whether a pod holding `bundle` (and verifying clients, unless `anyone`) accepts `client` at
/// `t`: an unexpired CA of its bundle signed it.
fn accepts(bundle: &[Cert], client: &Cert, anyone: bool, t: OffsetDateTime) -> bool {
    anyone
        || bundle
            .iter()
            .any(|ca| !ca.is_expired_at(t) && ca.signed(client))
}

/// What a handshake with pod `p` at `t` shows for `asked`, against what it actually holds:
/// passed, or why not (`VerifiesNothing` for the trust gate's dial of a pod that accepts
/// anyone).
fn judge(
    w: &World,
    o: &OutsideWorld,
    p: &Pod,
    t: OffsetDateTime,
    roots: &[Cert],
    client: &Cert,
    asked: &Asked,
) -> Result<(), Result<String, ClientTrust>> {
    let Some(v) = actual(w, o, p, t) else {
        return Err(Ok("it holds no version of its Secret yet".into()));
    };
    let Some(leaf) = &v.leaf else {
        return Err(Ok("it serves no leaf".into()));
    };
    if let Err(e) = webpki_verifies_for(leaf, roots, unix(t), Use::Server) {
        return Err(Ok(format!(
            "its leaf (issuer {}) does not verify: {e}",
            leaf.issuer
        )));
    }
    let anyone = o.probes.verifies_nothing.contains(&p.deployment);
    match asked {
        Asked::Trust if anyone => Err(Err(ClientTrust::VerifiesNothing)),
        _ if !accepts(&v.bundle, client, anyone, t) => {
            Err(Ok("it refuses the client certificate".into()))
        }
        Asked::Trust => Ok(()),
        Asked::Leaf(expected) if leaf == &**expected => Ok(()),
        Asked::Leaf(_) => Err(Ok(format!(
            "it presents another leaf (serial {}, issuer {})",
            leaf.serial, leaf.issuer
        ))),
    }
}

impl Sim {
    /// Answers a dial of `address` for `asked` (recorded in the world), by [`judge`]; with
    /// [`Mutation::ProbePassesRegardless`], passed whatever the pod holds.
    async fn dial(
        &self,
        address: &str,
        roots: &[Cert],
        client: &ClientIdentity,
        asked: Asked,
    ) -> Result<(), Result<String, ClientTrust>> {
        let Ok(client) = Cert::from_der(client.certificate()) else {
            return Err(Ok("no client certificate".into()));
        };
        self.session.yields().await;
        // A handshake takes time: the pod is judged as it is when it answers, after the probe
        // started (a step's write after the gate's last round always comes after its start).
        tokio::time::sleep(HANDSHAKE).await;
        if self.session.state.lock().unwrap().dead {
            return Err(Ok("the process is dead".into()));
        }
        let w = self.world().lock().unwrap();
        let mut o = self.outside.lock().unwrap();
        let t = w.true_now();
        let Some(p) = uid_of(address)
            .and_then(|uid| o.pods.iter().find(|p| p.uid == uid))
            .filter(|p| p.gone.is_none_or(|g| g > t))
            .cloned()
        else {
            return Err(Ok("connection refused".into()));
        };
        let result = if self.mutation == Mutation::ProbePassesRegardless {
            Ok(())
        } else {
            judge(&w, &o, &p, t, roots, &client, &asked)
        };
        o.probes.answered.push(Answer {
            pod: p.name.clone(),
            uid: p.uid.clone(),
            at: t,
            asked,
            client,
            passed: result.is_ok(),
        });
        result
    }
}

impl Endpoints for Sim {
    fn ready<'a>(
        &'a self,
        service: &'a str,
        port: u16,
    ) -> BoxFuture<'a, Result<Vec<ReadyEndpoint>, EndpointsError>> {
        async move {
            self.read().await.map_err(EndpointsError::Api)?;
            let now = self.true_now();
            let o = self.outside.lock().unwrap();
            let Some(dep) = o.probes.services.get(&(service.to_string(), port)) else {
                return Err(EndpointsError::Missing(format!(
                    "Service sim/{service} has no port {port}"
                )));
            };
            Ok(o.alive(now)
                .filter(|p| p.deployment == *dep)
                .map(|p| ReadyEndpoint {
                    address: address(&p.uid, port),
                    pod: Some(EndpointPod {
                        name: p.name.clone(),
                        uid: Some(p.uid.clone()),
                    }),
                })
                .collect())
        }
        .boxed()
    }

    fn trust<'a>(
        &'a self,
        address: &'a str,
        _server_name: &'a str,
        roots: &'a [Cert],
        client: &'a ClientIdentity,
        _until: tokio::time::Instant,
    ) -> BoxFuture<'a, ClientTrust> {
        async move {
            match self.dial(address, roots, client, Asked::Trust).await {
                Ok(()) => ClientTrust::Proven,
                Err(Err(shown)) => shown,
                Err(Ok(_)) => ClientTrust::NotShown,
            }
        }
        .boxed()
    }

    fn serves<'a>(
        &'a self,
        address: &'a str,
        _server_name: &'a str,
        roots: &'a [Cert],
        expected: &'a Expected,
        client: &'a ClientIdentity,
        _timeout: std::time::Duration,
    ) -> BoxFuture<'a, Result<(), String>> {
        async move {
            match self
                .dial(
                    address,
                    roots,
                    client,
                    Asked::Leaf(Box::new(expected.leaf.clone())),
                )
                .await
            {
                Ok(()) => Ok(()),
                Err(Ok(why)) => Err(why),
                Err(Err(shown)) => Err(format!("{shown:?}")),
            }
        }
        .boxed()
    }
}

/// What the probes came to, for the sizes: answered, passed, failed.
pub fn counts(o: &OutsideWorld) -> (usize, usize, usize) {
    let passed = o.probes.answered.iter().filter(|a| a.passed).count();
    (
        o.probes.answered.len(),
        passed,
        o.probes.answered.len() - passed,
    )
}

/// Charges every probe that passed with what its pod actually held then: it must be one that
/// pod's state passes (a pod that verifies nothing never passes a trust probe; a leaf probe
/// passes only on the very leaf expected). A probe answered from anything else (the gate's
/// hopes, the newest write) fails here.
pub fn check(w: &World, o: &OutsideWorld) -> Result<(), String> {
    for a in o.probes.answered.iter().filter(|a| a.passed) {
        let p = o
            .pods
            .iter()
            .find(|p| p.uid == a.uid)
            .ok_or_else(|| format!("a probe passed for pod {} ({}), unknown", a.pod, a.uid))?;
        let held = actual(w, o, p, a.at);
        let anyone = o.probes.verifies_nothing.contains(&p.deployment);
        let fine = match (&a.asked, held) {
            (_, None) => false,
            (Asked::Trust, Some(v)) => !anyone && accepts(&v.bundle, &a.client, false, a.at),
            (Asked::Leaf(expected), Some(v)) => {
                v.leaf.as_ref() == Some(&**expected) && accepts(&v.bundle, &a.client, anyone, a.at)
            }
        };
        if !fine {
            let what = held.map_or("nothing".to_string(), |v| {
                format!(
                    "{} of run {} from {} (leaf issuer {:?}, {} CAs)",
                    v.secret,
                    super::run_name(v.run),
                    v.from,
                    v.leaf.as_ref().map(|l| l.issuer.clone()),
                    v.bundle.len()
                )
            });
            let asked = match &a.asked {
                Asked::Trust => format!("accepts a client certificate from {}", a.client.issuer),
                Asked::Leaf(l) => format!("serves the leaf of serial {}", l.serial),
            };
            return Err(format!(
                "at {}: a probe of pod {} ({}) passed ({asked}), but the pod actually held {what}",
                a.at, a.pod, a.uid
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{
        FaultKind, From, NODES, RunSpec, Sizes, Step, crash, fault, overwrite, runtime,
        trajectory_with,
    };
    use super::*;

    /// A trajectory of the whole world with probes on every hot pod ([`config`]); `setup`
    /// changes the world further.
    fn probed(
        from: From,
        steps: &[Step],
        mutation: Mutation,
        setup: impl FnOnce(&mut OutsideWorld),
    ) -> Result<Sizes, String> {
        runtime().block_on(trajectory_with(
            config(),
            &[],
            from,
            steps,
            mutation,
            |o, config| {
                ProbeWorld::enable(o, config);
                setup(o);
            },
        ))
    }

    fn add(t: &mut Sizes, s: &Sizes) {
        t.runs += s.runs;
        t.versions += s.versions;
        t.pairs += s.pairs;
        t.webhook_pairs += s.webhook_pairs;
        t.probes += s.probes;
        t.probes_passed += s.probes_passed;
        t.probes_failed += s.probes_failed;
    }

    /// The gates open on per-pod probes answered from what each pod held, from every start,
    /// through a crash at any write, with a kubelet stalled or cut off, and with a server
    /// that verifies nothing (its pods are left to their kubelet's evidence).
    #[test]
    fn per_pod_probes_open_gates_on_what_each_pod_holds() {
        let mut t = Sizes::default();
        let mut trajectories = 0;
        for from in [From::Fresh, From::Steady, From::EnvoyGateway] {
            let s = probed(from, &[Step::Run(overwrite())], Mutation::None, |_| {})
                .unwrap_or_else(|e| panic!("{from:?}: {e}"));
            eprintln!("probes, {from:?}: {s:?}");
            if !matches!(from, From::Fresh) {
                assert!(s.probes_passed > 0, "{s:?}");
            }
            add(&mut t, &s);
            trajectories += 1;
            for n in 1..=12 {
                let steps = [
                    Step::Run(crash(overwrite(), n)),
                    Step::Run(RunSpec::default()),
                ];
                let s = probed(from, &steps, Mutation::None, |_| {})
                    .unwrap_or_else(|e| panic!("{from:?}, crash after {n}: {e}"));
                add(&mut t, &s);
                trajectories += 1;
            }
        }
        // Kubelet faults through the gates, as `kubelets_stalled_cut_off_or_coming_back_keep_
        // the_invariant` has them, with a pod recreated on the faulty node among them (but
        // those of `a_gap_after_a_probe_opened_the_trust_gate`, a known failure).
        let mut faults = Vec::new();
        for node in NODES {
            for kind in [FaultKind::Stall, FaultKind::Cut] {
                for after in [0, 7, 30] {
                    for length in [8, 25, 200] {
                        let watches = if kind == FaultKind::Cut { 60.0 } else { 0.0 };
                        let f = fault(node, kind, after, length, watches);
                        if !gap_after_a_probe(&f) {
                            faults.push(f);
                        }
                    }
                }
            }
        }
        for (kind, pod, node) in [
            (FaultKind::Stall, "envoy-gateway-1-0", NODES[1]),
            (FaultKind::Cut, "envoy-proxy-1-1", NODES[0]),
        ] {
            let mut f = fault(node, kind, 2, 40, 30.0);
            f.recreate = Some((pod, Duration::from_secs(5)));
            if !gap_after_a_probe(&f) {
                faults.push(f);
            }
        }
        for f in faults {
            let s = probed(
                From::Steady,
                &[Step::FaultDuring(overwrite(), f)],
                Mutation::None,
                |_| {},
            )
            .unwrap_or_else(|e| panic!("{f:?}: {e}"));
            add(&mut t, &s);
            trajectories += 1;
        }
        // A server that verifies no client: its trust probes show it, and its pods wait for
        // their kubelets.
        let s = probed(
            From::Steady,
            &[Step::Run(overwrite())],
            Mutation::None,
            |o| {
                o.probes.verifies_nothing.insert("envoy-gateway".into());
            },
        )
        .unwrap();
        eprintln!("probes, a server that verifies nothing: {s:?}");
        assert!(s.probes_failed > 0, "{s:?}");
        add(&mut t, &s);
        trajectories += 1;
        eprintln!(
            "per-pod probes: {trajectories} trajectories, {} runs, {} probes answered ({} passed, {} failed), {} holding pairs checked ({} against the webhook's caBundle)",
            t.runs, t.probes, t.probes_passed, t.probes_failed, t.pairs, t.webhook_pairs
        );
        assert!(t.probes_passed > 0 && t.probes_failed > 0, "{t:?}");
    }

    /// Mutation checks: a probe that passes whatever its pod holds is charged by the oracle
    /// with what the pod held; and with that charge off, the gate it opened early is caught by
    /// the pair oracle (a kubelet stalled while the trust step lands keeps its pods on the old
    /// bundle, which the new leaves do not verify against).
    #[test]
    fn the_oracle_charges_probes_with_what_the_pod_held() {
        let steps = [Step::FaultDuring(
            overwrite(),
            fault(NODES[1], FaultKind::Stall, 0, 200, 0.0),
        )];
        let e = probed(
            From::Steady,
            &steps,
            Mutation::ProbePassesRegardless,
            |_| {},
        )
        .expect_err("a probe that passes regardless must fail the oracle");
        eprintln!("probes pass regardless: {e}");
        assert!(e.contains("passed") && e.contains("actually held"), "{e}");
        let e = probed(From::Steady, &steps, Mutation::ProbePassesRegardless, |o| {
            o.probes.unchecked = true;
        })
        .expect_err("a gate a false probe opened must fail the pair oracle");
        eprintln!("probes pass regardless, probes not charged: {e}");
        assert!(e.contains("is rejected by the bundle"), "{e}");
    }

    /// The faults of [`a_gap_after_a_probe_opened_the_trust_gate`].
    fn gap_after_a_probe(f: &super::super::Fault) -> bool {
        f.node == NODES[1]
            && f.kind == FaultKind::Cut
            && f.after == Duration::from_secs(7)
            && f.recreate.is_none()
            && [25, 200].map(Duration::from_secs).contains(&f.length)
    }

    /// Found by the per-pod probes, and not about them: a staged rotation from the steady
    /// state; a probe shows, 5 s in, that a pod holds the new trust (its kubelet projected it
    /// on the poke), and the trust gate opens on it; 7 s in, that pod's kubelet stalls or is
    /// cut off (long enough to lose its watches) before it projects the leaves written at 8 s
    /// (or a pod is recreated on a node cut off since 2 s, and a probe of the others opens it).
    /// The run's cleanup gate sees the kubelet not live and leaves the cleanup to a later run,
    /// as it says; the plain re-run 90 s later opened the gate by the leaves' timer and dropped
    /// the old CA while that pod still presented its old leaf (its kubelet had not synced since).
    /// Without probes the trust gate waits for that kubelet, so the leaves never land inside
    /// its gap. Fixed for 5 of the 7 cases found (a resumed gate now opens on the re-run's own
    /// evidence, `plan::Known::observing_since`: they run in the grid above); left: node-b cut
    /// off for 25 s or 200 s, where the restart-only `envoy-ratelimit` pod on that node still
    /// holds run 2's leaf when a later run drops its CA.
    ///
    /// Why (read with `CERTGEN_SIM_TRACE=1`): run 2's leaves step (8 s in, node-b cut since 7 s)
    /// restarts `envoy-ratelimit`; its new pod (`envoy-ratelimit-4-0`) lands on node-b, whose
    /// kubelet starts it when it is back, from a Secret cache its broken watches have not
    /// refreshed: it loads the trust step's version (old leaf) and, being restart-only, never
    /// reloads. Run 2 sees the kubelet down and leaves the cleanup. Run 3 never saw the gap (it
    /// came before its first look), and the evidence (`rotation/gate/evidence.rs`,
    /// `stand_for`) takes the pod as `Restarted`: its template's restart fingerprint is the
    /// stored contents' and no gap is known, so `!behind` holds; the cleanup then drops the old
    /// CA. What would fix it: for a write the run did not make, a restart-only pod created
    /// before the run first looked proves nothing (`restarted_for_stored` only with
    /// `created_after` as `Written::counted_from` moves it); and since such a pod never
    /// reloads, neither a poke nor the timer can cover it: the resumed run must roll the
    /// consumer again (a restart planned as data, so the dry run shows it too) and open on the
    /// new pods. That changes "a restart rolls exactly once per content" into "once per content
    /// and per run that resumes a gate it cannot prove", which the cluster and simulation
    /// tests of restarts must then say.
    #[test]
    #[ignore = "a known failure of the re-run's gate, not the probes': run with --ignored"]
    fn a_gap_after_a_probe_opened_the_trust_gate() {
        let mut faults = Vec::new();
        for node in NODES {
            for kind in [FaultKind::Stall, FaultKind::Cut] {
                for length in [25, 200] {
                    let watches = if kind == FaultKind::Cut { 60.0 } else { 0.0 };
                    faults.push(fault(node, kind, 7, length, watches));
                }
            }
        }
        let mut recreated = fault(NODES[0], FaultKind::Cut, 2, 40, 30.0);
        recreated.recreate = Some(("envoy-proxy-1-1", Duration::from_secs(5)));
        faults.push(recreated);
        let mut failed = Vec::new();
        for f in faults.into_iter().filter(gap_after_a_probe) {
            let steps = [Step::FaultDuring(overwrite(), f)];
            if let Err(e) = probed(From::Steady, &steps, Mutation::None, |_| {}) {
                failed.push(format!("{f:?}: {e}"));
            }
        }
        assert!(failed.is_empty(), "{failed:#?}");
    }
}
