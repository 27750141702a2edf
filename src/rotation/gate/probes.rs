//! Per-pod probes at a gate where pods can be observed, dialed: each ready endpoint of a
//! hot-reloading consumer's Service whose EndpointSlice names its pod (`targetRef`) is probed
//! for the Secret that consumer's probe names, while that pod still waits for it. What a result
//! proves is `evidence.rs`'s rule ([`Evidence::probed`]); this only dials, bounded in time
//! (one attempt of at most [`PROBE_TIMEOUT`] per endpoint and round) and in concurrency
//! ([`PROBES_IN_FLIGHT`]). A failing probe opens nothing and fails nothing: the pod is left to
//! its kubelet's evidence or its timer.

use std::time::Duration;

use futures::StreamExt;
use time::OffsetDateTime;
use tokio::time::Instant;

use super::evidence::{Evidence, PodProbe};
use crate::config::{Config, Consumer, Probe, Reload};
use crate::outside::{EndpointPod, Endpoints, PodView};
use crate::pki::Cert;
use crate::plan::Phase;
use crate::probe::{ClientIdentity, ClientTrust, Expected};
use crate::rotation::step::Outcome;

/// The most one probe attempt may take (its handshakes included).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// At most this many probes in flight at once.
pub const PROBES_IN_FLIGHT: usize = 8;

/// Why a probe attempt did not pass.
enum NotPassed {
    /// The server accepts a client certificate from a CA nobody trusts: no trust probe of it
    /// can pass, so it is not probed again at this gate.
    VerifiesNothing,
    /// Anything else.
    Because(String),
}

impl std::fmt::Display for NotPassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::VerifiesNothing => f.write_str(
                "it accepts a client certificate from a CA nobody trusts, so no probe can show it trusts the new CA (not probed again at this gate)",
            ),
            Self::Because(why) => f.write_str(why),
        }
    }
}

/// What a probe at this gate checks.
enum Check {
    /// The trust gate: the server accepts a client certificate from the pending CA (and
    /// refuses one from a CA nobody trusts), its chain verified against the bundle written
    /// (pending and active CA).
    Trust {
        identity: ClientIdentity,
        roots: Vec<Cert>,
    },
    /// Any other gate (before a CA leaves the bundles): the server presents exactly the leaf
    /// now stored in the Secret the probe names, its chain verified against the active CA.
    Leaf {
        identity: ClientIdentity,
        issuer: Box<Cert>,
    },
}

impl Check {
    /// What the gate `outcome` ends in asks of a probe; `None` when certgen cannot present a
    /// client certificate (it does not hold the CA key).
    fn of(outcome: &Outcome) -> Option<Self> {
        let now = OffsetDateTime::now_utc();
        match &outcome.phase {
            Phase::Gate {
                pending: Some(_), ..
            } => {
                let pending = outcome.pending.as_ref()?;
                let mut roots = vec![pending.cert.clone()];
                roots.extend(outcome.signer.as_ref().map(|s| s.cert.clone()));
                Some(Self::Trust {
                    identity: ClientIdentity::issue(pending, now).ok()?,
                    roots,
                })
            }
            // Every other gate comes before a CA leaves the bundles: what matters is that no
            // pod presents a leaf that CA signed, and one that serves the stored leaf, from the
            // active CA, does not.
            _ => {
                let signer = outcome.signer.as_ref()?;
                Some(Self::Leaf {
                    identity: ClientIdentity::issue(signer, now).ok()?,
                    issuer: Box::new(signer.cert.clone()),
                })
            }
        }
    }
}

/// One endpoint to probe: where, its pod, the Secret and server name its consumer's probe
/// names.
struct Target {
    address: String,
    pod: EndpointPod,
    secret: String,
    server_name: String,
}

/// Probes, once each, the ready endpoints of every hot-reloading consumer's Service whose pod
/// (listed in `pods`, same UID when the endpoint gives one) mounts the Secret the probe names
/// and still waits for it; records the results in `ev`. A Service whose endpoints cannot be
/// read (absent, refused) is not asked again at this gate (said at debug level): its pods keep
/// their other evidence. In four jobs: [`select`] the endpoints, [`dial`] each, [`interpret`]
/// what it answered, [`record`] the results.
pub async fn round(
    config: &Config,
    endpoints: &dyn Endpoints,
    outcome: &Outcome,
    pods: &[PodView],
    ev: &mut Evidence,
) {
    let hot = hot(config);
    if hot.is_empty() {
        return;
    }
    let Some(check) = Check::of(outcome) else {
        return;
    };
    let targets = select(hot, endpoints, pods, ev).await;
    let (check, leaves) = (&check, &outcome.leaves);
    let results: Vec<(PodProbe, Option<String>)> = futures::stream::iter(targets)
        .map(|t| async move {
            let started = Instant::now();
            let result = tokio::time::timeout(PROBE_TIMEOUT, dial(endpoints, check, leaves, &t))
                .await
                .unwrap_or_else(|_| {
                    Err(NotPassed::Because(format!(
                        "no answer within {PROBE_TIMEOUT:?}"
                    )))
                });
            interpret(t, started, result)
        })
        .buffer_unordered(PROBES_IN_FLIGHT)
        .collect()
        .await;
    record(results, ev);
}

/// The hot-reloading consumers whose probe names a Service: with the probe and the Service.
fn hot(config: &Config) -> Vec<(&Consumer, &Probe, &String)> {
    config
        .consumers
        .iter()
        .filter(|c| c.reload == Reload::Hot)
        .filter_map(|c| Some((c, c.probe.as_ref()?)))
        .filter_map(|(c, p)| Some((c, p, p.service.as_ref()?)))
        .collect()
}

/// The endpoints to probe at this gate: each ready endpoint of a `hot` consumer's Service
/// whose pod mounts the Secret its probe names and still waits for it (the consumers whose
/// endpoints cannot be read are marked in `ev` and not asked again).
async fn select(
    hot: Vec<(&Consumer, &Probe, &String)>,
    endpoints: &dyn Endpoints,
    pods: &[PodView],
    ev: &mut Evidence,
) -> Vec<Target> {
    let mut targets = Vec::new();
    for (consumer, p, service) in hot {
        if ev.unprobeable(&consumer.name) || !pods.iter().any(|pod| ev.probe_wanted(pod, &p.secret))
        {
            continue;
        }
        let ready = match endpoints.ready(service, p.port).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(consumer = %consumer.name, "no per-pod probes at this gate: {e}");
                ev.observe_unprobeable(&consumer.name);
                continue;
            }
        };
        for e in ready {
            // An endpoint whose slice names no pod proves nothing about any pod.
            let Some(pod) = e.pod else { continue };
            let Some(view) = pods
                .iter()
                .find(|v| v.name == pod.name && pod.uid.as_ref().is_none_or(|u| *u == v.uid))
            else {
                continue;
            };
            if !view.secrets.contains(&p.secret)
                || !ev.probe_wanted(view, &p.secret)
                || ev.verifies_nothing(&pod.name)
            {
                continue;
            }
            targets.push(Target {
                address: e.address,
                pod,
                secret: p.secret.clone(),
                server_name: p.server_name.clone(),
            });
        }
    }
    targets
}

/// One attempt at `t` for what `check` asks (`leaves`: the leaf stored in each Secret),
/// through `endpoints` (a TLS handshake in a cluster).
async fn dial(
    endpoints: &dyn Endpoints,
    check: &Check,
    leaves: &std::collections::BTreeMap<String, Cert>,
    t: &Target,
) -> Result<(), NotPassed> {
    match check {
        Check::Trust { identity, roots } => {
            // One attempt: `until` now.
            match endpoints
                .trust(&t.address, &t.server_name, roots, identity, Instant::now())
                .await
            {
                ClientTrust::Proven => Ok(()),
                ClientTrust::VerifiesNothing => Err(NotPassed::VerifiesNothing),
                ClientTrust::NotShown => Err(NotPassed::Because(
                    "it does not accept a client certificate from the new CA yet".to_string(),
                )),
            }
        }
        Check::Leaf { identity, issuer } => {
            let Some(leaf) = leaves.get(&t.secret) else {
                return Err(NotPassed::Because(format!(
                    "no leaf stored in Secret {}",
                    t.secret
                )));
            };
            let expected = Expected {
                secret: t.secret.clone(),
                leaf: leaf.clone(),
                issuer: (**issuer).clone(),
            };
            endpoints
                .serves(
                    &t.address,
                    &t.server_name,
                    std::slice::from_ref(&**issuer),
                    &expected,
                    identity,
                    PROBE_TIMEOUT,
                )
                .await
                .map_err(NotPassed::Because)
        }
    }
}

/// What one attempt at `t` (begun at `started`) shows, for the evidence: its result, said in
/// the log, and the endpoint when the pod verifies nothing.
fn interpret(
    t: Target,
    started: Instant,
    result: Result<(), NotPassed>,
) -> (PodProbe, Option<String>) {
    let verifies_nothing = matches!(result, Err(NotPassed::VerifiesNothing));
    let result = result.map_err(|why| format!("{}: {why}", t.address));
    match &result {
        Ok(()) => {
            tracing::info!(pod = %t.pod.name, endpoint = %t.address, "probe of pod {} shows it holds Secret {}", t.pod.name, t.secret)
        }
        // Said once per pod and gate, in `record`.
        Err(_) if verifies_nothing => {}
        Err(why) => {
            tracing::debug!(pod = %t.pod.name, "probe of pod {} did not pass: {why}", t.pod.name)
        }
    }
    let probe = PodProbe {
        pod: t.pod,
        secret: t.secret,
        started,
        result,
    };
    (probe, verifies_nothing.then_some(t.address))
}

/// Records a round's results in `ev`: a pod that verifies nothing is said once and not
/// probed again at this gate.
fn record(results: Vec<(PodProbe, Option<String>)>, ev: &mut Evidence) {
    let mut probes = Vec::with_capacity(results.len());
    for (probe, verifies_nothing) in results {
        if let Some(endpoint) = verifies_nothing
            && ev.observe_verifies_nothing(&probe.pod.name)
        {
            tracing::warn!(
                pod = %probe.pod.name,
                endpoint,
                "pod {} accepts a client certificate from a CA nobody trusts: no probe can show it trusts the new CA, so its kubelet's evidence must (not probed again at this gate)",
                probe.pod.name
            );
        }
        probes.push(probe);
    }
    ev.probed(probes);
}
