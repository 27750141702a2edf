//! cert-manager's CA injector in the whole world (issue 44): another writer of the `caBundle`
//! target, which certgen never writes once the target carries the injector's annotation
//! (`cert-manager.io/inject-ca-from-secret`, `rotation/webhooks.rs`: `Read::Injected`).
//!
//! The injector copies its source Secret's `ca.crt` into the target at its own times: `lag`
//! after each version of the Secret lands (its watch, its queue, a restart or a lost leader
//! election make that anything from a second to minutes), reading the Secret as it stands then.
//! It merges, as cert-manager's `CAInjectorMerging` does by default since 1.19
//! (`docs/cert-manager.md`): it adds the source's CAs and keeps every unexpired CA already
//! there, and writes nothing when that changes nothing. Its writes are fields of field manager
//! `cert-manager-cainjector`, as the API server keeps them.
//!
//! Its writes are laid down lazily, in order, before anything observes the target (a run's
//! read, the oracle): each at the instant it was due, which is the same as an actor running
//! beside the runs, since nothing else writes an injected target. The oracle then checks every
//! webhook call against the `caBundle` versions the API server held, the injector's like
//! certgen's ([`super::check_holders`]).

use std::time::Duration;

use certgen::certmanager::INJECT_CA_FROM_SECRET;
use certgen::pki::{Cert, bundle_pem};
use time::OffsetDateTime;

use super::{BundleVersion, Mutation, OutsideWorld, World, d, field_write};

/// The run index the injector's writes carry.
pub const INJECTOR: usize = usize::MAX - 5;

/// The field manager it writes as (cert-manager 1.20).
pub const MANAGER: &str = "cert-manager-cainjector";

/// How long [`Mutation::InjectorDown`] keeps it down.
pub const DOWN: Duration = Duration::from_secs(600);

/// How long [`Mutation::InjectorUnloaded`] keeps the replaced `caBundle` in the API server.
pub const UNLOADED: Duration = Duration::from_secs(60);

/// The CA injector.
#[derive(Clone, Debug)]
pub struct Injector {
    /// The Secret whose `ca.crt` it copies.
    pub source: String,
    /// How long after a version of the source lands it writes.
    pub lag: Duration,
    /// The source's versions it has acted on.
    done: usize,
    /// When it last acted (its writes stay in order).
    last: Option<OffsetDateTime>,
    /// While it is down ([`Mutation::InjectorDown`]): a write due then is made when it is
    /// back, from the source as it stands then (a restarted injector reconciles every target).
    pub down: Option<(OffsetDateTime, OffsetDateTime)>,
    /// The API server keeps each `caBundle` it replaces for [`UNLOADED`] more
    /// ([`Mutation::InjectorUnloaded`]).
    pub unloaded: bool,
}

impl Injector {
    /// Puts the injector on the world's target, its source `source`, writing `lag` after each
    /// version of it lands (with [`Mutation::InjectorDown`], down for [`DOWN`] from a minute
    /// after `at`).
    pub fn install(
        o: &mut OutsideWorld,
        source: &str,
        lag: Duration,
        mutation: Mutation,
        at: OffsetDateTime,
    ) {
        let t = o.target.as_mut().expect("the world has a caBundle target");
        t.annotations
            .insert(INJECT_CA_FROM_SECRET.into(), format!("sim/{source}"));
        o.injector = Some(Self {
            source: source.into(),
            lag,
            done: 0,
            last: None,
            down: (mutation == Mutation::InjectorDown).then(|| {
                let from = at + time::Duration::MINUTE;
                (from, from + d(DOWN))
            }),
            unloaded: mutation == Mutation::InjectorUnloaded,
        });
    }
}

/// Lays down every injector write due by `now` (true clock), in order.
pub fn catch_up(w: &World, o: &mut OutsideWorld, now: OffsetDateTime) {
    let Some(mut inj) = o.injector.clone() else {
        return;
    };
    let versions: Vec<&super::super::Version> = w
        .versions
        .iter()
        .filter(|v| v.secret == inj.source)
        .collect();
    while inj.done < versions.len() {
        // In order, after every write the target has seen (another tool's at the start).
        let floor = o
            .target
            .as_ref()
            .and_then(|t| t.versions.last())
            .map(|v| v.from);
        let due = versions[inj.done].from + d(inj.lag);
        let due = inj
            .last
            .into_iter()
            .chain(floor)
            .fold(due, OffsetDateTime::max);
        // Down: it acts when it is back.
        let due = match inj.down {
            Some((from, until)) if due >= from && due < until => until,
            _ => due,
        };
        if due > now {
            break;
        }
        inj.done += 1;
        inj.last = Some(due);
        // The source as it stands when the injector reads it.
        let Some(source) = versions
            .iter()
            .rev()
            .find(|v| v.from <= due && v.until.is_none_or(|u| u > due))
        else {
            continue;
        };
        let t = o.target.as_mut().expect("an injected target");
        let held: &[Cert] = t.versions.last().map_or(&[], |v| &v.bundle);
        let mut merged: Vec<Cert> = source.bundle.clone();
        for c in held {
            if !c.is_expired_at(due) && !merged.iter().any(|m| m == c) {
                merged.push(c.clone());
            }
        }
        let same = merged.len() == held.len() && merged.iter().all(|c| held.contains(c));
        if same {
            continue;
        }
        let store_at = due + w.clock_offset;
        t.rv += 1;
        t.raw = bundle_pem(&merged).into_bytes();
        t.written_at = Some(store_at);
        if let Some(prev) = t.versions.last_mut() {
            prev.until = Some(if inj.unloaded { due + d(UNLOADED) } else { due });
        }
        t.versions.push(BundleVersion {
            from: due,
            until: None,
            bundle: merged,
            run: INJECTOR,
        });
        t.wrote(field_write(MANAGER, store_at, true, &[]));
    }
    o.injector = Some(inj);
}

/// The injector's writes that landed.
pub fn writes(o: &OutsideWorld) -> usize {
    o.target.as_ref().map_or(0, |t| {
        t.versions.iter().filter(|v| v.run == INJECTOR).count()
    })
}

#[cfg(test)]
mod tests {
    use super::super::{
        From, RunSpec, Sizes, Step, crash, overwrite, probes, runtime, trajectory_with,
    };
    use super::*;

    /// A trajectory with the injector on the target, copying `envoy-gateway`'s `ca.crt`
    /// `lag` after each version lands; probes on when `probed`.
    fn injected(
        from: From,
        steps: &[Step],
        lag: Duration,
        probed: bool,
        mutation: Mutation,
    ) -> Result<Sizes, String> {
        let config = if probed {
            probes::config()
        } else {
            super::super::super::config()
        };
        runtime().block_on(trajectory_with(
            config,
            &[],
            from,
            steps,
            mutation,
            |o, config| {
                Injector::install(o, "envoy-gateway", lag, mutation, super::super::super::BASE);
                if probed {
                    probes::ProbeWorld::enable(o, config);
                }
            },
        ))
    }

    /// The injector writes the webhook's `caBundle` at its own pace while certgen rotates
    /// (and never writes it itself): every webhook call, against whatever `caBundle` the API
    /// server held, verifies the leaf the webhook's pods served, from every start, through a
    /// crash at any write, with probes on or off, for an injector that keeps up with the gate.
    #[test]
    fn the_ca_injector_writes_the_webhooks_ca_bundle_beside_certgen() {
        let mut trajectories = 0;
        let (mut pairs, mut webhook, mut writes, mut runs) = (0, 0, 0, 0);
        for (lag, probed) in [
            (Duration::ZERO, false),
            (Duration::ZERO, true),
            (Duration::from_secs(1), false),
        ] {
            {
                for from in [From::Fresh, From::Steady, From::EnvoyGateway] {
                    let mut all = vec![vec![Step::Run(overwrite())]];
                    for n in 1..=8 {
                        all.push(vec![
                            Step::Run(crash(overwrite(), n)),
                            Step::Run(RunSpec::default()),
                        ]);
                    }
                    for steps in all {
                        let s = injected(from, &steps, lag, probed, Mutation::None).unwrap_or_else(
                            |e| panic!("lag {lag:?}, probes {probed}, {from:?} {steps:?}: {e}"),
                        );
                        assert_eq!(s.ca_bundle_writes, 0, "certgen wrote the target: {s:?}");
                        trajectories += 1;
                        pairs += s.pairs;
                        webhook += s.webhook_pairs;
                        writes += s.injector_writes;
                        runs += s.runs;
                    }
                }
            }
        }
        eprintln!(
            "CA injector: {trajectories} trajectories, {runs} runs, {writes} injector writes, {pairs} holding pairs checked ({webhook} webhook calls against the caBundle the API server held)"
        );
        assert!(writes > 0 && webhook > 0);
    }

    /// The oracle is not vacuous for the injector: an API server that keeps the `caBundle`
    /// the injector replaced for a minute more (while a read and its watch cache show the
    /// write, which is all certgen can see) fails webhook calls once certgen's leaves land.
    #[test]
    fn the_oracle_charges_webhook_calls_with_what_the_api_server_held() {
        let e = injected(
            From::Steady,
            &[Step::Run(overwrite())],
            Duration::from_secs(1),
            false,
            Mutation::InjectorUnloaded,
        )
        .expect_err("a caBundle the API server still held must fail the oracle");
        eprintln!("injector write unloaded: {e}");
        assert!(e.contains("the API server"), "{e}");
    }

    /// An injector slower than the trust gate would have opened on the pods alone (its queue,
    /// a restart, a lost leader election; or a second, when probes open the gate 5 s after the
    /// trust step while the API server's informer takes another 5 s): the gate waits until
    /// the target holds the pending CA and the API server has loaded it, so no webhook call
    /// fails. Without that wait (before this round) both cases failed the oracle.
    #[test]
    fn an_injector_slower_than_the_gate() {
        let mut failed = Vec::new();
        for (lag, probed) in [
            (Duration::from_secs(1), true),
            (Duration::from_secs(30), false),
            (Duration::from_secs(200), false),
        ] {
            for from in [From::Steady, From::EnvoyGateway] {
                if let Err(e) =
                    injected(from, &[Step::Run(overwrite())], lag, probed, Mutation::None)
                {
                    failed.push(format!("lag {lag:?}, probes {probed}, {from:?}: {e}"));
                }
            }
        }
        assert!(failed.is_empty(), "{failed:#?}");
    }

    /// An injector down for ten minutes from the trust step on (a crash loop): the trust gate
    /// holds until `--timeout` (exit 3, nothing but trust written), the runs after it hold too
    /// until the injector is back, and then the rotation finishes without a failed call.
    #[test]
    fn an_injector_that_is_down_holds_the_trust_gate_until_it_is_back() {
        let s = injected(
            From::Steady,
            &[Step::Run(overwrite())],
            Duration::from_secs(1),
            false,
            Mutation::InjectorDown,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        eprintln!("injector down: {s:?}");
        assert!(s.timeouts >= 1, "no run held at the trust gate: {s:?}");
        assert_eq!(s.ca_bundle_writes, 0, "certgen wrote the target: {s:?}");
        assert!(s.injector_writes >= 2 && s.webhook_pairs > 0, "{s:?}");
    }
}
