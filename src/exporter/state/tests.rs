use time::macros::datetime;

use super::*;
use crate::exposition::render;
use crate::observe::fixtures::installed;
use crate::pki::issue_ca;

const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
const DAY: time::Duration = time::Duration::DAY;

fn config() -> Config {
    crate::config::test_profile(None)
}

/// The Secrets a run at `NOW` leaves, as the watch lists them.
fn listed(config: &Config) -> Vec<StoredSecret> {
    let ca = issue_ca(&config.ca.spec, NOW).unwrap();
    let snapshot = installed(config, &ca, NOW);
    snapshot
        .ca
        .into_iter()
        .chain(snapshot.secrets.into_values())
        .filter_map(|o| o.present().cloned())
        .collect()
}

/// A state with the Secrets a run at `NOW` leaves listed, and the `envoy-gateway` bundle.
fn with_secrets(config: &Config) -> (State, Vec<StoredSecret>, Vec<u8>) {
    let mut state = State::new(config);
    let secrets = listed(config);
    state.secrets_listed(secrets.clone());
    let bundle = secrets
        .iter()
        .find(|s| s.name == "envoy-gateway")
        .unwrap()
        .data["ca.crt"]
        .clone();
    (state, secrets, bundle)
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn healthy(config: &Config) -> String {
    format!(
        "certgen_check_healthy{{namespace=\"{}\",profile=\"envoy-gateway\"}}",
        config.namespace
    )
}

#[test]
fn nothing_but_the_exporters_own_metrics_before_the_secrets_are_listed() {
    let config = config();
    let state = State::new(&config);
    assert!(!state.ready());
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert!(!text.contains("certgen_check_healthy"), "{text}");
    assert!(!text.contains("certgen_secret_status"), "{text}");
    assert_eq!(
        value(&text, "certgen_exporter_watch_synced{resource=\"secrets\"}"),
        Some(0.0)
    );
}

#[test]
fn time_dependent_values_are_computed_at_the_scrape_not_at_the_event() {
    let config = config();
    let mut state = State::new(&config);
    state.secrets_listed(listed(&config));
    let fresh = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(value(&fresh, &healthy(&config)), Some(1.0), "{fresh}");
    // No event in between: the same state scraped 1,800 days later (leaves: 1825d, renewBefore 30d) is due.
    let later = render(&state.families(&config, NOW + 1800 * DAY, ApiRequests::default()));
    assert_eq!(value(&later, &healthy(&config)), Some(0.0), "{later}");
    let due = format!(
        "certgen_secret_status{{namespace=\"{}\",secret=\"envoy\",kind=\"tls\",status=\"due\"}}",
        config.namespace
    );
    assert_eq!(value(&later, &due), Some(1.0), "{later}");
}

#[test]
fn the_same_families_as_check_from_the_same_secrets() {
    let config = config();
    let (mut state, _, bundle) = with_secrets(&config);
    // Targets listed: the injector is present and in step.
    let injector = config.webhooks[0].clone();
    state.targets_listed(
        injector.kind,
        vec![(injector.name.clone(), vec![bundle].into())],
    );
    assert!(!state.ready(), "the labelled injectors are not listed yet");
    state.injectors_listed(vec![]);
    assert!(state.ready());
    let from_state = state.families(&config, NOW, ApiRequests::default());

    let observed = state.snapshot(&config);
    let targets = vec![CaBundleTarget {
        writer: None,
        kind: "MutatingWebhookConfiguration".into(),
        name: injector.name.clone(),
        secret: injector.bundle_from.clone(),
        state: TargetState::InSync,
        pending_missing: None,
    }];
    let ctx = crate::check::Context {
        undos: Default::default(),
        propagation_delay: crate::config::CLUSTER_PROPAGATION_DELAY,
        targets,
        unreadable: vec![],
        in_set: false,
    };
    let report = crate::check::check(
        &config,
        &observed,
        NOW,
        format!("namespace {}", config.namespace),
        &ctx,
    );
    let from_check = exposition::health(&config, &observed, &report, NOW);
    assert_eq!(from_state[..from_check.len()], from_check[..]);
}

#[test]
fn targets_follow_their_events_and_a_refusal() {
    let config = config();
    let t = config.webhooks[0].clone();
    let status = |text: &str| -> String {
        let prefix = format!(
            "certgen_cabundle_target_status{{namespace=\"{}\",target_kind=\"MutatingWebhookConfiguration\",target=\"{}\",secret=\"envoy-gateway\",status=\"",
            config.namespace, t.name
        );
        let on: Vec<_> = text
            .lines()
            .filter(|l| l.starts_with(&prefix) && l.ends_with(" 1"))
            .collect();
        assert_eq!(on.len(), 1, "{text}");
        on[0][prefix.len()..].split('"').next().unwrap().to_string()
    };
    let mut state = State::new(&config);
    state.secrets_listed(listed(&config));
    // Not listed yet: no target series, and not ready.
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert!(!text.contains("certgen_cabundle_target_status"), "{text}");
    assert!(!state.ready());

    state.targets_listed(t.kind, vec![]);
    state.injectors_refused();
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(status(&text), "absent");
    state.target_applied(t.kind, t.name.clone(), vec![b"old".to_vec()].into());
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(status(&text), "drifted");
    // cert-manager's CA injector writes it (its bundle is never the Secret's alone).
    state.target_applied(
        t.kind,
        t.name.clone(),
        crate::k8s::watch::TargetSeen {
            bundles: vec![b"injected".to_vec()],
            injected: true,
            writes: Vec::new(),
            recorded: Vec::new(),
        },
    );
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(status(&text), "cert_manager");
    state.target_deleted(t.kind, &t.name);
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(status(&text), "absent");
    state.targets_refused(t.kind);
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(status(&text), "refused");
    assert!(state.ready(), "a refused kind is known");
}

#[test]
fn a_deleted_secret_is_missing_and_a_relist_replaces_everything() {
    let config = config();
    let mut state = State::new(&config);
    let secrets = listed(&config);
    state.secrets_listed(secrets.clone());
    state.secret_deleted("envoy");
    let missing = format!(
        "certgen_secret_status{{namespace=\"{}\",secret=\"envoy\",kind=\"tls\",status=\"missing\"}}",
        config.namespace
    );
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(value(&text, &missing), Some(1.0), "{text}");
    state.secret_applied(secrets.iter().find(|s| s.name == "envoy").unwrap().clone());
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(value(&text, &missing), Some(0.0), "{text}");
    // A relist without it (deleted while the watch was down).
    state.secrets_listed(secrets.into_iter().filter(|s| s.name != "envoy").collect());
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert_eq!(value(&text, &missing), Some(1.0), "{text}");
}

#[test]
fn counters_are_typed_as_counters() {
    let config = config();
    let mut state = State::new(&config);
    state.secrets_listed(listed(&config));
    let requests = ApiRequests {
        list: 2,
        watch: 3,
        ..ApiRequests::default()
    };
    let text = render(&state.families(&config, NOW, requests));
    assert!(text.contains("# TYPE certgen_exporter_api_requests_total counter\n"));
    assert!(text.contains("# TYPE certgen_exporter_watch_events_total counter\n"));
    assert_eq!(
        value(&text, "certgen_exporter_api_requests_total{verb=\"watch\"}"),
        Some(3.0)
    );
    assert_eq!(
        value(
            &text,
            "certgen_exporter_watch_events_total{resource=\"secrets\"}"
        ),
        Some(5.0)
    );
}

#[test]
fn a_memoized_scrape_is_exactly_a_fresh_one_at_every_boundary_and_after_every_change() {
    let config = config();
    let mut state = State::new(&config);
    let secrets = listed(&config);
    state.secrets_listed(secrets.clone());
    let injector = config.webhooks[0].clone();
    state.targets_listed(injector.kind, vec![]);
    state.injectors_listed(vec![]);
    let fresh = |state: &State, at: OffsetDateTime| {
        render(&state.families(&config, at, ApiRequests::default()))
    };
    // Every boundary of the stored certificates, a second either side, in order: the memo
    // must follow each step of the step function (leaves due at 1795 days, expired at 1825;
    // the CA due at 3560, expired at 3650).
    let mut times = vec![NOW];
    for days in [1795, 1825, 3560, 3650] {
        let b = NOW + days * DAY;
        times.extend([b - time::Duration::SECOND, b, b + time::Duration::SECOND]);
    }
    let mut memo = None;
    let mut recomputed = 0;
    for at in &times {
        let before = memo.as_ref().map(|m: &Memo| m.from);
        let text = state.scrape(&config, *at, ApiRequests::default(), &mut memo);
        assert_eq!(text, fresh(&state, *at), "at {at}");
        recomputed += usize::from(memo.as_ref().map(|m| m.from) != before);
    }
    assert!(recomputed < times.len(), "the memo was never reused");
    let healthy = |t: &str| value(t, &healthy(&config));
    assert_eq!(
        healthy(&state.scrape(&config, NOW, ApiRequests::default(), &mut memo)),
        Some(1.0)
    );
    // A change invalidates it at once, whatever the time.
    state.secret_deleted("envoy");
    let text = state.scrape(&config, NOW, ApiRequests::default(), &mut memo);
    assert_eq!(text, fresh(&state, NOW));
    assert_eq!(healthy(&text), Some(0.0));
    state.secret_applied(secrets.into_iter().find(|s| s.name == "envoy").unwrap());
    let text = state.scrape(&config, NOW, ApiRequests::default(), &mut memo);
    assert_eq!(text, fresh(&state, NOW));
    assert_eq!(healthy(&text), Some(1.0));
}

/// The status line of the topology injector's target, and `certgen_check_healthy`.
fn injector_status(config: &Config, state: &State) -> (String, Option<f64>) {
    let text = render(&state.families(config, NOW, ApiRequests::default()));
    let prefix = format!(
        "certgen_cabundle_target_status{{namespace=\"{}\",target_kind=\"MutatingWebhookConfiguration\",target=\"{}\",secret=\"envoy-gateway\",status=\"",
        config.namespace, config.webhooks[0].name
    );
    let on: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.ends_with(" 1"))
        .collect();
    assert_eq!(on.len(), 1, "{text}");
    let status = on[0][prefix.len()..].split('"').next().unwrap().to_string();
    (status, value(&text, &healthy(config)))
}

/// An object labelled as the topology injector, calling Services in `namespaces`.
fn labelled(namespaces: &[&str], bundle: &[u8]) -> Labelled {
    Labelled {
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        seen: vec![bundle.to_vec()].into(),
    }
}

/// A Kustomize-renamed topology injector is found by its label, as a run finds it: one that
/// calls a Service in the namespace stands in for it; one of another namespace does not;
/// several make a run refuse, so the exporter says so and is not healthy.
#[test]
fn a_renamed_topology_injector_is_found_by_label_as_a_run_finds_it() {
    let config = config();
    let ns = config.namespace.clone();
    let (mut state, _, bundle) = with_secrets(&config);
    let kind = config.webhooks[0].kind;
    state.targets_listed(kind, vec![]);
    assert!(!state.ready(), "the labelled injectors are not listed yet");
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert!(!text.contains("certgen_cabundle_target_status"), "{text}");

    state.injectors_listed(vec![("other".into(), labelled(&["elsewhere"], &bundle))]);
    assert!(state.ready());
    assert_eq!(injector_status(&config, &state).0, "absent");

    state.injector_applied("dev-injector".into(), labelled(&[&ns], &bundle));
    assert_eq!(
        injector_status(&config, &state),
        ("in_sync".into(), Some(1.0))
    );
    state.injector_applied("dev-injector".into(), labelled(&[&ns], b"old"));
    assert_eq!(
        injector_status(&config, &state),
        ("drifted".into(), Some(0.0))
    );

    state.injector_applied("staging-injector".into(), labelled(&[&ns], &bundle));
    assert_eq!(
        injector_status(&config, &state),
        ("ambiguous".into(), Some(0.0))
    );

    // The object under the chart's name, once it exists, is the target whatever is labelled.
    state.target_applied(
        kind,
        config.webhooks[0].name.clone(),
        vec![bundle.clone()].into(),
    );
    assert_eq!(
        injector_status(&config, &state),
        ("in_sync".into(), Some(1.0))
    );
    state.target_deleted(kind, &config.webhooks[0].name);

    state.injector_deleted("staging-injector");
    state.injector_applied("dev-injector".into(), labelled(&[&ns], &bundle));
    assert_eq!(injector_status(&config, &state).0, "in_sync");
    // Without the right to list them, none is found by label (as for a run): absent.
    state.injectors_refused();
    assert_eq!(injector_status(&config, &state).0, "absent");
    assert!(state.ready());
}

/// A target the config names by another name is never looked for by label.
#[test]
fn only_the_charts_name_is_looked_for_by_label() {
    let mut config = config();
    config.name_topology_injector("my-injector").unwrap();
    assert!(!looks_by_label(&config));
    let mut state = State::new(&config);
    state.secrets_listed(listed(&config));
    state.targets_listed(config.webhooks[0].kind, vec![]);
    assert!(state.ready());
    state.injector_applied("dev-injector".into(), labelled(&[&config.namespace], b"x"));
    let text = render(&state.families(&config, NOW, ApiRequests::default()));
    assert!(
        text.contains("target=\"my-injector\",secret=\"envoy-gateway\",status=\"absent\"} 1"),
        "{text}"
    );
}
