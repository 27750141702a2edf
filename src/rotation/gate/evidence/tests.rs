//! The evidence's rules, one situation each, on a paused clock.

use time::macros::datetime;

use super::*;

const T0: OffsetDateTime = datetime!(2026-11-25 03:00:00 UTC);
const DELAY: Duration = Duration::from_secs(120);
const NODE: &str = "node-1";

fn pod(name: &str, uid: &str, secret: &str, created: OffsetDateTime) -> PodView {
    PodView {
        name: name.into(),
        uid: uid.into(),
        created: Some(created),
        terminating: false,
        finished: false,
        owner: Some((
            Kind::Deployment,
            name.rsplit_once('-').map_or(name, |(d, _)| d).to_string(),
        )),
        secrets: BTreeSet::from([secret.to_string()]),
        restart_fingerprint: None,
        node: Some(NODE.into()),
    }
}

fn secs(n: i64) -> time::Duration {
    time::Duration::seconds(n)
}

fn dur(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A Lease read: version `v`, renewed at `renewed` (store clock), 40 s long.
fn lease(v: u32, renewed: OffsetDateTime) -> Result<Option<KubeletLease>, String> {
    Ok(Some(KubeletLease {
        version: v.to_string(),
        renewed_at: Some(renewed),
        duration_seconds: Some(40),
    }))
}

/// The store's time `t` after `t0` on the monotonic clock (the two clocks run together).
fn at(t0: Instant, n: u64) -> (Instant, OffsetDateTime) {
    (t0 + dur(n), T0 + secs(n as i64))
}

/// One write of `envoy` at T0, one hot pod on NODE mounting it created before, and its
/// kubelet's Lease read once (version 1, renewed at T0).
fn written() -> (Evidence, Vec<PodView>, Instant) {
    let t0 = Instant::now();
    let mut ev = Evidence::default();
    ev.wrote(&["envoy".to_string()], T0);
    ev.saw(NODE, lease(1, T0), t0, T0);
    (ev, vec![pod("proxy-a", "u1", "envoy", T0 - secs(600))], t0)
}

fn open_by(v: &Verdict) -> Vec<(&str, &str)> {
    match v {
        Verdict::Open(pods) => pods
            .iter()
            .map(|p| (p.name.as_str(), p.opened_by.as_str()))
            .collect(),
        Verdict::Wait { .. } => panic!("not open: {v:?}"),
    }
}

fn held(v: &Verdict) -> bool {
    matches!(v, Verdict::Wait { held, .. } if !held.is_empty())
}

#[tokio::test(start_paused = true)]
async fn a_poke_counts_once_its_kubelet_renewed_after_it_and_the_settle_time_passed() {
    let (mut ev, pods, t0) = written();
    assert_eq!(ev.due(&pods, (T0, Instant::now()), DELAY).len(), 1);
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    assert!(
        ev.due(&pods, (T0, Instant::now()), DELAY).is_empty(),
        "poked once per write"
    );
    // The read right after the poke: the version seen before it, which proves nothing.
    ev.saw(NODE, lease(1, T0), t0, T0);
    let (m, n) = at(t0, 6);
    ev.saw(NODE, lease(1, T0), m, n);
    assert!(
        matches!(ev.verdict(&pods, n, m, DELAY), Verdict::Wait { .. }),
        "the API server's acceptance is no evidence"
    );
    // A renewal after the poke; then the settle time from that renewal.
    let (m, n) = at(t0, 8);
    ev.saw(NODE, lease(2, n), m, n);
    assert!(matches!(
        ev.verdict(&pods, n, m, DELAY),
        Verdict::Wait { recheck: Some(r), .. } if r == m + POKE_SETTLE
    ));
    let (m, n) = at(t0, 8 + POKE_SETTLE.as_secs());
    assert_eq!(
        open_by(&ev.verdict(&pods, n, m, DELAY)),
        [("proxy-a", "poke plus live kubelet")]
    );
}

#[tokio::test(start_paused = true)]
async fn a_renewal_read_before_the_poke_is_not_after_it() {
    let (mut ev, pods, t0) = written();
    // The kubelet renewed (version 2) between a read before the poke and one after.
    let (m, n) = at(t0, 1);
    ev.record(&pods[0], Ok(PokeAnswer::Done), m);
    let (m, n2) = at(t0, 2);
    ev.saw(NODE, lease(2, n), m, n2);
    let (m, n) = at(t0, 10);
    ev.saw(NODE, lease(2, n2), m, n);
    let v = ev.verdict(&pods, n, m, DELAY);
    assert!(
        matches!(&v, Verdict::Wait { recheck: Some(r), held, .. } if *r == m + RECHECK && held.is_empty()),
        "{v:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_kubelet_seen_down_holds_the_gate_past_its_timer() {
    let (mut ev, pods, t0) = written();
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    // No renewal for 13 s (1.25 intervals of a 40 s Lease is 12.5 s): seen not live.
    for s in [5, 10, 12, 13, 121, 600] {
        let (m, n) = at(t0, s);
        ev.saw(NODE, lease(1, T0), m, n);
        let v = ev.verdict(&pods, n, m, DELAY);
        assert_eq!(held(&v), s >= 13, "{s}s: {v:?}");
    }
    assert!(ev.held.contains_key("proxy-a"));
    // A write whose timer had passed before the kubelet went silent is not held.
    let mut old = Evidence::default();
    old.wrote(&["envoy".to_string()], T0 - secs(600));
    old.saw(NODE, lease(1, T0), t0, T0 + secs(100));
    assert_eq!(open_by(&old.verdict(&pods, T0 + secs(100), t0, DELAY)), []);
}

#[tokio::test(start_paused = true)]
async fn a_kubelet_back_from_a_gap_needs_a_poke_after_its_watches_came_back() {
    let (mut ev, pods, t0) = written();
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    let (m, n) = at(t0, 20);
    ev.saw(NODE, lease(1, T0), m, n);
    assert!(held(&ev.verdict(&pods, n, m, DELAY)));
    // Back: renewed at 30 s. The poke before proves nothing, nor a renewal now.
    let (back, nb) = at(t0, 30);
    ev.saw(NODE, lease(2, nb), back, nb);
    let (m, n) = at(t0, 41);
    ev.saw(NODE, lease(3, n), m, n);
    let v = ev.verdict(&pods, n, m, DELAY);
    assert!(
        matches!(&v, Verdict::Wait { recheck: Some(r), held, .. } if *r == back + WATCHES_BACK && held.is_empty()),
        "{v:?}"
    );
    assert!(
        ev.due(&pods, (n, m), DELAY).is_empty(),
        "not before its watches are back"
    );
    // Its watches are back: poked again, then a renewal and the settle time.
    let (m, n) = at(t0, 30 + WATCHES_BACK.as_secs());
    assert_eq!(ev.due(&pods, (n, m), DELAY).len(), 1);
    ev.record(&pods[0], Ok(PokeAnswer::Done), m);
    ev.saw(NODE, lease(3, n), m, n);
    let (m, n) = at(t0, 40 + WATCHES_BACK.as_secs());
    ev.saw(NODE, lease(4, n), m, n);
    let (m, n) = at(t0, 40 + WATCHES_BACK.as_secs() + POKE_SETTLE.as_secs());
    assert_eq!(
        open_by(&ev.verdict(&pods, n, m, DELAY)),
        [("proxy-a", "poke plus live kubelet")]
    );
    assert!(
        ev.held["proxy-a"].1.contains("has not renewed"),
        "{:?}",
        ev.held
    );
    // The timer counts from its return too.
    let mut timer_only = Evidence::default();
    timer_only.wrote(&["envoy".to_string()], T0);
    timer_only.saw(NODE, lease(1, T0), t0, T0);
    timer_only.saw(NODE, lease(1, T0), t0 + dur(20), T0 + secs(20));
    timer_only.saw(NODE, lease(2, T0 + secs(30)), t0 + dur(30), T0 + secs(30));
    let lost = Err("the connection broke".to_string());
    timer_only.record(&pods[0], lost, t0);
    let v = timer_only.verdict(&pods, T0 + secs(121), t0 + dur(121), DELAY);
    assert!(
        matches!(&v, Verdict::Wait { timer: Some(t), .. } if *t == T0 + secs(30) + WATCHES_BACK + DELAY),
        "{v:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_gap_between_two_close_reads_is_seen_from_the_renewal_times() {
    let t0 = Instant::now();
    let mut ev = Evidence::default();
    ev.wrote(&["envoy".to_string()], T0);
    let pods = vec![pod("proxy-a", "u1", "envoy", T0 - secs(600))];
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    // Never silent longer than 12.5 s at a read, but the renewal read at 4 s came 14 s
    // after the one before it: a gap all the same.
    ev.saw(NODE, lease(1, T0 - secs(10)), t0, T0);
    ev.saw(NODE, lease(1, T0 - secs(10)), t0 + dur(2), T0 + secs(2));
    ev.saw(NODE, lease(2, T0 + secs(4)), t0 + dur(4), T0 + secs(4));
    let (m, n) = at(t0, 20);
    let v = ev.verdict(&pods, n, m, DELAY);
    assert!(
        matches!(&v, Verdict::Wait { recheck: Some(r), .. } if *r == t0 + dur(4) + WATCHES_BACK),
        "{v:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lost_poke_never_opens_the_gate_before_the_timer() {
    for answer in [
        Ok(PokeAnswer::Recreated),
        Err("pods \"proxy-a\" is forbidden (403)".to_string()),
        Err("the connection broke".to_string()),
    ] {
        let (mut ev, pods, t0) = written();
        ev.record(&pods[0], answer.clone(), t0);
        let (m, n) = at(t0, 100);
        ev.saw(NODE, lease(9, n), m, n);
        assert!(
            matches!(ev.verdict(&pods, n, m, DELAY), Verdict::Wait { timer: Some(t), .. } if t == T0 + secs(120)),
            "{answer:?}"
        );
        let (m, n) = at(t0, 120);
        ev.saw(NODE, lease(10, n), m, n);
        assert_eq!(
            open_by(&ev.verdict(&pods, n, m, DELAY)),
            [("proxy-a", "timer")]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_poke_before_the_latest_write_proves_nothing_about_it() {
    let (mut ev, pods, t0) = written();
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    ev.saw(NODE, lease(2, T0 + secs(5)), t0 + dur(5), T0 + secs(5));
    // The next step writes again: the earlier poke is for the earlier bytes.
    ev.wrote(&["envoy".to_string()], T0 + secs(10));
    let (m, n) = at(t0, 30);
    ev.saw(NODE, lease(3, n), m, n);
    assert!(matches!(
        ev.verdict(&pods, n, m, DELAY),
        Verdict::Wait { .. }
    ));
    assert_eq!(ev.due(&pods, (n, Instant::now()), DELAY).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_write_by_someone_else_after_a_poke_needs_a_new_poke() {
    let (mut ev, pods, t0) = written();
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    ev.saw(NODE, lease(2, T0 + secs(2)), t0 + dur(2), T0 + secs(2));
    // The stored time of this run's own write does not count as a new write.
    ev.stored(&BTreeMap::from([("envoy".to_string(), T0)]), &|_| false);
    let (m, n) = at(t0, 2 + POKE_SETTLE.as_secs());
    assert_eq!(open_by(&ev.verdict(&pods, n, m, DELAY)).len(), 1);
    // Another writer changed the Secret after that poke: it proves nothing for that write.
    ev.stored(
        &BTreeMap::from([("envoy".to_string(), T0 + secs(3))]),
        &|_| false,
    );
    assert!(matches!(
        ev.verdict(&pods, n, m, DELAY),
        Verdict::Wait { .. }
    ));
    assert_eq!(ev.due(&pods, (n, Instant::now()), DELAY).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_pod_created_after_the_write_counts_only_on_a_live_kubelet_without_a_gap() {
    let (mut ev, _, t0) = written();
    let new = vec![pod("proxy-b", "u2", "envoy", T0 + secs(1))];
    assert!(ev.due(&new, (T0, Instant::now()), DELAY).is_empty());
    assert_eq!(
        open_by(&ev.verdict(&new, T0 + secs(1), t0, DELAY)),
        [("proxy-b", "created after the write")]
    );
    // Created a second before the bound on the write: it may have mounted the old bytes.
    ev.next_gate();
    let old = vec![pod("proxy-c", "u3", "envoy", T0 - secs(1))];
    assert!(matches!(
        ev.verdict(&old, T0, t0, DELAY),
        Verdict::Wait { .. }
    ));
    // Not scheduled yet: only the timer.
    let mut pending = pod("proxy-d", "u4", "envoy", T0 + secs(1));
    pending.node = None;
    let v = ev.verdict(std::slice::from_ref(&pending), T0 + secs(1), t0, DELAY);
    assert!(matches!(v, Verdict::Wait { timer: Some(_), .. }), "{v:?}");
    // Created during a gap of its kubelet (cut off at 5 s, back at 40 s): it may have started
    // from a stale Secret cache, so it counts only from its kubelet's return.
    ev.saw(NODE, lease(1, T0), t0 + dur(20), T0 + secs(20));
    ev.saw(NODE, lease(2, T0 + secs(40)), t0 + dur(40), T0 + secs(40));
    let during = vec![pod("proxy-e", "u5", "envoy", T0 + secs(30))];
    let v = ev.verdict(&during, T0 + secs(41), t0 + dur(41), DELAY);
    assert!(matches!(v, Verdict::Wait { .. }), "{v:?}");
}

#[tokio::test(start_paused = true)]
async fn an_unreadable_lease_leaves_the_pod_to_the_timer_and_says_why() {
    let (mut ev, pods, t0) = written();
    let refused = "leases.coordination.k8s.io \"node-1\" is forbidden (403)".to_string();
    ev.saw(NODE, Err(refused), t0, T0);
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    let v = ev.verdict(&pods, T0 + secs(60), t0 + dur(60), DELAY);
    let Verdict::Wait { timer, waiting, .. } = &v else {
        panic!("{v:?}")
    };
    assert_eq!(*timer, Some(T0 + secs(120)));
    assert!(
        waiting[0].contains("proxy-a") && waiting[0].contains("forbidden"),
        "{waiting:?}"
    );
    assert_eq!(
        open_by(&ev.verdict(&pods, T0 + secs(120), t0 + dur(120), DELAY)),
        [("proxy-a", "timer")]
    );
    // No Lease at all: the same.
    let mut none = Evidence::default();
    none.wrote(&["envoy".to_string()], T0);
    none.saw(NODE, Ok(None), t0, T0);
    assert!(matches!(
        none.verdict(&pods, T0, t0, DELAY),
        Verdict::Wait { timer: Some(_), .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn terminating_pods_and_old_restart_only_pods_are_waited_for_not_poked() {
    let (mut ev, mut pods, t0) = written();
    pods[0].terminating = true;
    assert!(ev.due(&pods, (T0, Instant::now()), DELAY).is_empty());
    assert!(matches!(
        ev.verdict(&pods, T0, t0, DELAY),
        Verdict::Wait { .. }
    ));
    // Gone: nothing left to wait for, and the report says so.
    assert_eq!(
        open_by(&ev.verdict(&[], T0, t0, DELAY)),
        [("proxy-a", "gone")]
    );

    ev.next_gate();
    let mut owners = Owners::new();
    owners.insert(
        (Kind::Deployment, "ratelimit".into()),
        (
            "envoy-ratelimit".into(),
            Reload::Restart,
            BTreeSet::from(["envoy".into()]),
        ),
    );
    ev.owners = Some(owners);
    let old = vec![pod("ratelimit-x", "u9", "envoy", T0 - secs(60))];
    assert!(
        ev.due(&old, (T0, Instant::now()), DELAY).is_empty(),
        "poking cannot reload it"
    );
    assert!(matches!(
        ev.verdict(&old, T0, t0, DELAY),
        Verdict::Wait { timer: Some(_), .. }
    ));
    ev.next_gate();
    let new = vec![pod("ratelimit-y", "u10", "envoy", T0 + secs(3))];
    assert_eq!(
        open_by(&ev.verdict(&new, T0, t0, DELAY)),
        [("ratelimit-y", "created after the write")]
    );
    // A pod of certgen's restart for the stored contents, whose creation second does not
    // show it came after the write: its template's fingerprint does.
    ev.next_gate();
    ev.digests = BTreeMap::from([("envoy".to_string(), "d2".to_string())]);
    let mut restarted = pod("ratelimit-z", "u11", "envoy", T0 - secs(1));
    restarted.restart_fingerprint = Some(crate::rollout::fingerprint([("envoy", "d2")]));
    assert_eq!(
        open_by(&ev.verdict(std::slice::from_ref(&restarted), T0, t0, DELAY)),
        [("ratelimit-z", "restarted")]
    );
    // A restart for other contents proves nothing about these.
    ev.next_gate();
    restarted.restart_fingerprint = Some(crate::rollout::fingerprint([("envoy", "d1")]));
    assert!(matches!(
        ev.verdict(&[restarted], T0, t0, DELAY),
        Verdict::Wait { timer: Some(_), .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_cabundle_write_settles_like_a_poke() {
    let mut ev = Evidence::default();
    ev.wrote_other();
    let t = Instant::now();
    assert!(matches!(
        ev.verdict(&[], T0, t, DELAY),
        Verdict::Wait { .. }
    ));
    assert_eq!(open_by(&ev.verdict(&[], T0, t + POKE_SETTLE, DELAY)), []);
    // One written by an earlier run, as stored: counted on the store's clock.
    let mut ev = Evidence {
        other_stored: Some(T0),
        ..Evidence::default()
    };
    assert!(matches!(
        ev.verdict(&[], T0 + secs(4), t, DELAY),
        Verdict::Wait { .. }
    ));
    assert_eq!(open_by(&ev.verdict(&[], T0 + secs(5), t, DELAY)), []);
}

#[tokio::test(start_paused = true)]
async fn a_secret_no_pod_mounts_and_no_consumer_declares_waits_for_its_timer() {
    let undeclared = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    let mut ev = Evidence {
        undeclared: undeclared(&["webhook"]),
        ..Evidence::default()
    };
    ev.wrote(&["webhook".to_string(), "envoy".to_string()], T0);
    let t = Instant::now();
    let opens = T0 + time::Duration::try_from(DELAY).unwrap();
    // Whoever holds it (a webhook outside the cluster) cannot be observed: no evidence.
    match ev.verdict(&[], T0 + secs(1), t, DELAY) {
        Verdict::Wait {
            timer: Some(at),
            waiting,
            ..
        } => {
            assert_eq!(at, opens);
            assert!(
                waiting[0].starts_with("Secret webhook (only the timer"),
                "{waiting:?}"
            );
        }
        v => panic!("the gate opened with no pod and no consumer for the Secret: {v:?}"),
    }
    assert_eq!(
        open_by(&ev.verdict(&[], opens, t, DELAY)),
        [("Secret webhook", "timer")]
    );
    // A declared consumer with no pod (scaled to zero): its next pods start from the store.
    let mut ev = Evidence {
        undeclared: undeclared(&[]),
        ..Evidence::default()
    };
    ev.wrote(&["webhook".to_string()], T0);
    assert_eq!(open_by(&ev.verdict(&[], T0 + secs(1), t, DELAY)), []);
    // A pod that mounts it is evidence to wait for, as for any Secret.
    let mut ev = Evidence {
        undeclared: undeclared(&["webhook"]),
        ..Evidence::default()
    };
    ev.wrote(&["webhook".to_string()], T0);
    let mounting = pod("webhook-1", "u1", "webhook", T0 + secs(1));
    assert!(
        ev.unobserved_secrets(std::slice::from_ref(&mounting), DELAY)
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn a_cabundle_write_the_api_servers_cache_did_not_show_waits_for_the_timer() {
    let mut ev = Evidence::default();
    ev.unseen_other(T0, "not shown".into());
    let t = Instant::now();
    // Settled like a poke, but not shown: the timer, from the write.
    match ev.verdict(&[], T0 + secs(30), t + POKE_SETTLE, DELAY) {
        Verdict::Wait {
            timer: Some(at),
            waiting,
            ..
        } => {
            assert_eq!(at, T0 + time::Duration::try_from(DELAY).unwrap());
            assert!(
                waiting[0].contains("only the timer: not shown"),
                "{waiting:?}"
            );
        }
        v => panic!("the gate opened on a write nobody saw loaded: {v:?}"),
    }
    let opens = T0 + time::Duration::try_from(DELAY).unwrap();
    assert_eq!(open_by(&ev.verdict(&[], opens, t + POKE_SETTLE, DELAY)), []);
    // A later write the cache shows is past the earlier one: it settles like a poke.
    ev.wrote_other();
    let t = Instant::now();
    assert_eq!(
        open_by(&ev.verdict(&[], T0 + secs(31), t + POKE_SETTLE, DELAY)),
        []
    );
}

#[test]
fn the_worst_stand_wins() {
    let t = Instant::now();
    let cover = |o| Stand::Covered(o);
    assert_eq!(
        cover(Opened::Poke).worst(cover(Opened::Timer)),
        cover(Opened::Timer)
    );
    assert_eq!(
        cover(Opened::Timer).worst(Stand::Until(t, "x".into())),
        Stand::Until(t, "x".into())
    );
    assert_eq!(
        Stand::Until(t, "x".into()).worst(Stand::Timer(T0, "y".into())),
        Stand::Timer(T0, "y".into())
    );
    assert_eq!(
        Stand::Timer(T0 + secs(9), "late".into()).worst(Stand::Timer(T0, "y".into())),
        Stand::Timer(T0 + secs(9), "late".into())
    );
    assert_eq!(
        Stand::Timer(T0, "y".into()).worst(Stand::Held("h".into())),
        Stand::Held("h".into())
    );
}

#[test]
fn a_pod_outside_every_consumer_is_reported_once() {
    let mut ev = Evidence::default();
    let mut owners = Owners::new();
    owners.insert(
        (Kind::Deployment, "proxy".into()),
        (
            "envoy-proxies".into(),
            Reload::Hot,
            BTreeSet::from(["envoy".into()]),
        ),
    );
    ev.owners = Some(owners);
    let managed = BTreeSet::from(["envoy".to_string(), "envoy-gateway".to_string()]);
    let mut stray = pod("debug-1", "u5", "envoy", T0);
    stray.node = None;
    stray.owner = None;
    let pods = vec![
        pod("proxy-a", "u1", "envoy", T0),
        pod("proxy-b", "u2", "envoy-gateway", T0),
        stray,
        pod("other-a", "u6", "unmanaged", T0),
    ];
    ev.unowned(&pods, &managed);
    ev.unowned(&pods, &managed);
    let names: Vec<_> = ev
        .pods
        .iter()
        .map(|p| (p.name.as_str(), p.action.as_str()))
        .collect();
    assert_eq!(names, [("proxy-b", "unowned"), ("debug-1", "unowned")]);
    assert!(
        ev.pods[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("does not declare")
    );
}

/// A passing (or failing) probe of `pod`'s own endpoint for `secret`, started at `started`.
fn probe(pod: &PodView, secret: &str, started: Instant, ok: bool) -> PodProbe {
    PodProbe {
        pod: EndpointPod {
            name: pod.name.clone(),
            uid: Some(pod.uid.clone()),
        },
        secret: secret.into(),
        started,
        result: if ok { Ok(()) } else { Err("old leaf".into()) },
    }
}

#[tokio::test(start_paused = true)]
async fn a_probe_of_a_pods_own_endpoint_after_the_write_proves_that_pod_alone() {
    let (mut ev, mut pods, t0) = written();
    // Two pods of one consumer mount `envoy`; only proxy-a is a probed endpoint.
    pods.push(pod("proxy-b", "u2", "envoy", T0 - secs(600)));
    for p in &pods {
        ev.record(p, Ok(PokeAnswer::Done), t0);
    }
    let (m, n) = at(t0, 1);
    ev.probed(vec![probe(&pods[0], "envoy", m, true)]);
    assert!(!ev.probe_wanted(&pods[0], "envoy"));
    assert!(ev.probe_wanted(&pods[1], "envoy"));
    let v = ev.verdict(&pods, n, m, DELAY);
    let Verdict::Wait { waiting, .. } = &v else {
        panic!("proxy-b has no evidence yet: {v:?}")
    };
    assert!(
        waiting.len() == 1 && waiting[0].starts_with("proxy-b"),
        "{waiting:?}"
    );
    // proxy-b's kubelet renews: its poke counts, proxy-a stays the probe's.
    let (m, n) = at(t0, 3);
    ev.saw(NODE, lease(2, n), m, n);
    let (m, n) = at(t0, 3 + POKE_SETTLE.as_secs());
    let v = ev.verdict(&pods, n, m, DELAY);
    assert_eq!(
        open_by(&v),
        [("proxy-a", "probe"), ("proxy-b", "poke plus live kubelet")]
    );
    let Verdict::Open(lines) = &v else {
        unreachable!()
    };
    assert_eq!(
        lines[1].detail.as_deref(),
        Some("not probed: it is no ready endpoint of a probed hot-reloading consumer"),
        "the report says which pod no probe reached"
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_proves_nothing_begun_before_the_write_of_another_secret_or_another_pod() {
    let (mut ev, mut pods, t0) = written();
    pods[0].secrets.insert("envoy-gateway".into());
    // A probe begun before the write: nothing (the write comes 1 s later).
    let early = Instant::now();
    tokio::time::advance(dur(1)).await;
    ev.wrote(&["envoy".to_string(), "envoy-gateway".to_string()], T0);
    ev.probed(vec![probe(&pods[0], "envoy", early, true)]);
    assert!(
        ev.probe_wanted(&pods[0], "envoy"),
        "started before the write"
    );
    // A failing probe: nothing; a passing one of another pod of that name (another UID):
    // nothing.
    let (m, n) = at(t0, 2);
    ev.probed(vec![probe(&pods[0], "envoy", m, false)]);
    let mut other = probe(&pods[0], "envoy", m, true);
    other.pod.uid = Some("u-recreated".into());
    ev.probed(vec![other]);
    assert!(ev.probe_wanted(&pods[0], "envoy"));
    assert!(matches!(
        ev.verdict(&pods, n, m, DELAY),
        Verdict::Wait { .. }
    ));
    // A probe of `envoy` proves `envoy` only: `envoy-gateway` still needs its evidence.
    ev.probed(vec![probe(&pods[0], "envoy", m, true)]);
    assert!(!ev.probe_wanted(&pods[0], "envoy"));
    assert!(ev.probe_wanted(&pods[0], "envoy-gateway"));
    assert!(matches!(
        ev.verdict(&pods, n, m, DELAY),
        Verdict::Wait { .. }
    ));
    ev.probed(vec![probe(&pods[0], "envoy-gateway", m, true)]);
    assert_eq!(
        open_by(&ev.verdict(&pods, n, m, DELAY)),
        [("proxy-a", "probe")]
    );
    // The next write of `envoy` needs a probe begun after it.
    tokio::time::advance(dur(5)).await;
    ev.wrote(&["envoy".to_string()], T0 + secs(3));
    assert!(ev.probe_wanted(&pods[0], "envoy"));
}

#[tokio::test(start_paused = true)]
async fn a_kubelet_seen_down_still_holds_a_probed_pod() {
    let (mut ev, pods, t0) = written();
    let (m, n) = at(t0, 1);
    ev.probed(vec![probe(&pods[0], "envoy", m, true)]);
    assert_eq!(
        open_by(&ev.verdict(&pods, n, m, DELAY)),
        [("proxy-a", "probe")]
    );
    let (m, n) = at(t0, 14);
    ev.saw(NODE, lease(1, T0), m, n);
    assert!(held(&ev.verdict(&pods, n, m, DELAY)));
}

/// A gate resumed from an earlier run: that run's write, stored 10 minutes ago (its timer long
/// passed), proves nothing about a kubelet this run has not watched since (the earlier run may
/// have seen it cut off throughout: cluster::real_node_hook). Its pod is poked again and opens
/// on that evidence, or on a whole timer from when this run learned of the write.
#[tokio::test(start_paused = true)]
async fn an_earlier_runs_write_counts_from_when_this_run_learned_of_it() {
    let t0 = Instant::now();
    let mut ev = Evidence::default();
    ev.stored(
        &BTreeMap::from([("envoy".to_string(), T0 - secs(600))]),
        &|_| false,
    );
    ev.saw(NODE, lease(1, T0), t0, T0);
    let pods = vec![pod("proxy-a", "u1", "envoy", T0 - secs(900))];
    assert!(matches!(
        ev.verdict(&pods, T0, t0, DELAY),
        Verdict::Wait { .. }
    ));
    assert_eq!(ev.due(&pods, (T0, t0), DELAY).len(), 1);
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    ev.saw(NODE, lease(2, T0 + secs(4)), t0 + dur(4), T0 + secs(4));
    let (m, n) = at(t0, 4 + POKE_SETTLE.as_secs());
    assert_eq!(
        open_by(&ev.verdict(&pods, n, m, DELAY)),
        [("proxy-a", "poke plus live kubelet")]
    );
    // Without a poke (lost), the whole timer from when this run learned of the write.
    let mut ev = Evidence::default();
    ev.stored(
        &BTreeMap::from([("envoy".to_string(), T0 - secs(600))]),
        &|_| false,
    );
    ev.saw(NODE, lease(1, T0), t0, T0);
    ev.record(&pods[0], Err("refused".into()), t0);
    let v = ev.verdict(&pods, T0 + secs(60), t0 + dur(60), DELAY);
    assert!(
        matches!(v, Verdict::Wait { timer: Some(t), .. } if t == T0 + secs(120)),
        "{v:?}"
    );
    // The same write by this run: its own timer, long passed.
    let mut ev = Evidence::default();
    ev.stored(
        &BTreeMap::from([("envoy".to_string(), T0 - secs(600))]),
        &|_| true,
    );
    ev.saw(NODE, lease(1, T0), t0, T0);
    assert!(matches!(ev.verdict(&pods, T0, t0, DELAY), Verdict::Open(_)));
}

/// The trust gate and a `caBundle` target cert-manager's CA injector writes: a target whose
/// `caBundle` lacks the pending CA holds the gate past every timer (it can be observed, so no
/// timer stands for it); one the API server's cache does not show yet too; once shown, it
/// counts from its stored write plus the settle time, like certgen's own target writes.
#[tokio::test(start_paused = true)]
async fn an_injected_target_holds_the_trust_gate_until_it_holds_the_pending_ca() {
    let (mut ev, pods, t0) = written();
    ev.record(&pods[0], Ok(PokeAnswer::Done), t0);
    let (m, n) = at(t0, 3);
    ev.saw(NODE, lease(2, n), m, n);
    let hook = "MutatingWebhookConfiguration injected";
    // The pod is covered 5 s after its kubelet's renewal; the target still lacks the CA,
    // long after the pod's timer.
    for s in [9, 121, 600] {
        let (m, n) = at(t0, s);
        ev.saw(NODE, lease(s as u32, n), m, n);
        ev.observe_injection(hook.into(), Injection::Missing("no pending CA yet".into()));
        let v = ev.verdict(&pods, n, m, DELAY);
        assert!(
            matches!(&v, Verdict::Wait { recheck: Some(r), timer: None, waiting, .. }
                if *r == m + RECHECK && waiting == &[format!("{hook} (no pending CA yet)")]),
            "{s}s: {v:?}"
        );
    }
    // It holds the CA, the cache does not show it yet.
    let (m, n) = at(t0, 601);
    ev.observe_injection(hook.into(), Injection::Uncached);
    assert!(matches!(
        ev.verdict(&pods, n, m, DELAY),
        Verdict::Wait { .. }
    ));
    // Shown; written (as stored) 2 s ago: the settle time counts from that write.
    let (m, n) = at(t0, 602);
    ev.observe_injection(hook.into(), Injection::Shown(Some(n - secs(2))));
    let v = ev.verdict(&pods, n, m, DELAY);
    assert!(
        matches!(&v, Verdict::Wait { recheck: Some(r), .. } if *r == m + dur(3)),
        "{v:?}"
    );
    let (m, n) = at(t0, 605);
    ev.observe_injection(hook.into(), Injection::Shown(Some(n - secs(5))));
    assert_eq!(
        open_by(&ev.verdict(&pods, n, m, DELAY)),
        [(hook, injections::INJECTED), ("proxy-a", "timer")]
    );
    // The next gate looks again.
    ev.next_gate();
    assert_eq!(ev.injection_lines(), []);
}

/// A write time the target does not tell counts from the first look that showed it loaded,
/// not from a later look.
#[tokio::test(start_paused = true)]
async fn an_injected_write_of_unknown_time_counts_from_the_first_look_that_showed_it() {
    let mut ev = Evidence::default();
    let t0 = Instant::now();
    let hook = "ValidatingWebhookConfiguration injected";
    ev.observe_injection(hook.into(), Injection::Shown(None));
    tokio::time::advance(dur(3)).await;
    ev.observe_injection(hook.into(), Injection::Shown(None));
    let (w, r) = ev.injections_waiting(T0 + secs(3), Instant::now());
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(r, Some(t0 + POKE_SETTLE));
    tokio::time::advance(dur(2)).await;
    let (w, r) = ev.injections_waiting(T0 + secs(5), Instant::now());
    assert!(w.is_empty() && r.is_none(), "{w:?} {r:?}");
}
