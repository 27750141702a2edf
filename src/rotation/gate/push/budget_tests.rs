//! The pokes' budget as the gate drives it (`Push::send` over a fake pods API): at most the
//! budget in flight, a throttled poke asked again only after its Retry-After while the others
//! go on, and a pod whose poke keeps being throttled holding its gate closed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use time::macros::datetime;

use super::*;
use crate::outside::KubeletLease;
use crate::rotation::gate::POKE_SETTLE;

const T0: OffsetDateTime = datetime!(2026-11-25 03:00:00 UTC);
const DELAY: Duration = Duration::from_secs(120);
const NODE: &str = "node-1";

/// A pods API whose pokes take 100 ms, counting how many are in flight; `throttle(name, n)`
/// says whether the `n`-th poke (from 1) of pod `name` is answered 429 (Retry-After 2 s).
struct Fake {
    throttle: fn(&str, usize) -> bool,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    calls: Mutex<Vec<(String, Instant)>>,
}

impl Fake {
    fn new(throttle: fn(&str, usize) -> bool) -> Self {
        Self {
            throttle,
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            calls: Mutex::new(Vec::new()),
        }
    }

    fn calls_of(&self, name: &str) -> Vec<Instant> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, at)| *at)
            .collect()
    }
}

impl PodsApi for Fake {
    fn namespace(&self) -> &str {
        "ns"
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<PodView>, StoreError>> {
        async { Ok(vec![]) }.boxed()
    }

    fn poke<'a>(
        &'a self,
        name: &'a str,
        _uid: &'a str,
        _fingerprint: &'a str,
        _at: OffsetDateTime,
    ) -> BoxFuture<'a, Result<PokeAnswer, StoreError>> {
        async move {
            let n = {
                let mut calls = self.calls.lock().unwrap();
                calls.push((name.to_string(), Instant::now()));
                calls.iter().filter(|(c, _)| c == name).count()
            };
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if (self.throttle)(name, n) {
                Ok(PokeAnswer::Throttled(Duration::from_secs(2)))
            } else {
                Ok(PokeAnswer::Done)
            }
        }
        .boxed()
    }

    fn kubelet<'a>(
        &'a self,
        _node: &'a str,
    ) -> BoxFuture<'a, Result<Option<KubeletLease>, StoreError>> {
        async { Ok(None) }.boxed()
    }
}

fn config() -> Config {
    crate::config::test_profile(Some("ns"))
}

fn pods(n: usize) -> Vec<PodView> {
    (0..n)
        .map(|i| PodView {
            name: format!("proxy-{i:02}"),
            uid: format!("u{i}"),
            created: Some(T0 - time::Duration::minutes(10)),
            terminating: false,
            finished: false,
            owner: None,
            secrets: BTreeSet::from(["envoy".to_string()]),
            restart_fingerprint: None,
            node: Some(NODE.into()),
        })
        .collect()
}

fn lease(v: u32, renewed: OffsetDateTime) -> Result<Option<KubeletLease>, String> {
    Ok(Some(KubeletLease {
        version: v.to_string(),
        renewed_at: Some(renewed),
        duration_seconds: Some(40),
    }))
}

fn push<'a>(fake: &'a Fake, config: &'a Config, pacer: Pacer) -> Push<'a> {
    Push {
        pods: fake,
        workloads: None,
        endpoints: None,
        config,
        delay: DELAY,
        pacer,
    }
}

/// One write of `envoy` at T0, `n` hot pods on NODE mounting it, and its kubelet's Lease read
/// once (version 1, renewed at T0).
fn written(n: usize) -> (Evidence, Vec<PodView>, Instant) {
    let mut ev = Evidence::default();
    ev.wrote(&["envoy".to_string()], T0);
    let t0 = Instant::now();
    ev.saw(NODE, lease(1, T0), t0, T0);
    (ev, pods(n), t0)
}

/// The pods due now, with a fingerprint, as `Push::poke` hands them to `send`.
fn due(ev: &Evidence, pods: &[PodView], now: OffsetDateTime) -> Vec<(PodView, String)> {
    ev.due(pods, (now, Instant::now()), DELAY)
        .into_iter()
        .map(|p| (p.clone(), "fp".to_string()))
        .collect()
}

fn waiting(v: &Verdict) -> Vec<String> {
    match v {
        Verdict::Wait { waiting, .. } => waiting.clone(),
        Verdict::Open(_) => panic!("open: {v:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn pokes_stay_in_budget_and_a_throttled_one_is_asked_again_after_its_retry_after() {
    let fake = Fake::new(|name, n| name == "proxy-07" && n == 1);
    let config = config();
    let push = push(&fake, &config, Pacer::new(4, 50));
    let (mut ev, pods, t0) = written(30);
    let first = due(&ev, &pods, T0);
    push.send(&mut ev, &first, T0).await;
    assert_eq!(
        fake.peak.load(Ordering::SeqCst),
        4,
        "pokes in flight at once"
    );
    // 30 pokes at 50/s: the last starts 0.58 s after the first.
    assert!(
        t0.elapsed() >= Duration::from_millis(580),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(
        ev.pokes_at_gate().map(|p| (p.poked, p.throttled)),
        Some((29, 1))
    );
    // Its kubelet renews after the pokes. The throttled pod is not poked yet: it holds the
    // gate, with what it waits for said.
    ev.saw(NODE, lease(1, T0), Instant::now(), T0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (m, n) = (Instant::now(), T0 + time::Duration::seconds(1));
    ev.saw(NODE, lease(2, n), m, n);
    let w = waiting(&ev.verdict(&pods, n, m + POKE_SETTLE, DELAY));
    assert!(
        w.len() == 1 && w[0].starts_with("proxy-07 (to be poked") && w[0].contains("429"),
        "{w:?}"
    );
    // Not asked again before its Retry-After, then asked again, and poked.
    assert!(due(&ev, &pods, n).is_empty(), "before its Retry-After");
    // Its answer came 100 ms after the call; Retry-After counts from the answer.
    let first = fake.calls_of("proxy-07")[0];
    tokio::time::sleep_until(first + Duration::from_millis(2050)).await;
    assert!(due(&ev, &pods, n).is_empty(), "before its Retry-After");
    tokio::time::sleep_until(first + Duration::from_millis(2100)).await;
    let again = due(&ev, &pods, n);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0.name, "proxy-07");
    push.send(&mut ev, &again, n).await;
    let calls = fake.calls_of("proxy-07");
    assert!(calls.len() == 2 && calls[1] - calls[0] >= Duration::from_secs(2));
    ev.saw(NODE, lease(2, n), Instant::now(), n);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (m, n) = (Instant::now(), T0 + time::Duration::seconds(4));
    ev.saw(NODE, lease(3, n), m, n);
    let v = ev.verdict(&pods, n, m + POKE_SETTLE, DELAY);
    assert!(matches!(&v, Verdict::Open(p) if p.len() == 30), "{v:?}");
    assert_eq!(
        ev.pokes_at_gate().map(|p| (p.poked, p.throttled)),
        Some((30, 1))
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_poke_keeps_being_throttled_keeps_its_gate_closed() {
    let fake = Fake::new(|name, _| name == "proxy-00");
    let config = config();
    let push = push(&fake, &config, Pacer::new(8, 100));
    let (mut ev, pods, t0) = written(3);
    // Looks every second, as a gate does, until the timer: the pod is asked again a bounded
    // number of times, and the gate stays closed for it whatever its kubelet shows.
    for s in 0..119 {
        let (m, n) = (
            t0 + Duration::from_secs(s),
            T0 + time::Duration::seconds(s as i64),
        );
        tokio::time::sleep_until(m).await;
        let d = due(&ev, &pods, n);
        push.send(&mut ev, &d, n).await;
        ev.saw(NODE, lease(s as u32 + 2, n), Instant::now(), n);
        let v = ev.verdict(&pods, n, Instant::now(), DELAY);
        let w = waiting(&v);
        assert!(w.iter().any(|w| w.starts_with("proxy-00")), "{s}s: {w:?}");
    }
    assert_eq!(fake.calls_of("proxy-00").len(), MAX_THROTTLED as usize);
    assert_eq!(ev.pokes_at_gate().map(|p| p.throttled), Some(3));
    // Lost after its last try: only its timer opens the gate.
    let n = T0 + time::Duration::seconds(120);
    let v = ev.verdict(&pods, n, Instant::now(), DELAY);
    assert!(
        matches!(&v, Verdict::Open(p) if p.iter().any(|p| p.name == "proxy-00" && p.opened_by == "timer")),
        "{v:?}"
    );
}
