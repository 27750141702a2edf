use time::macros::datetime;

use super::*;
use crate::observe::fixtures::installed;
use crate::pki::{CaKey, Issued, bundle_pem, issue_ca, issue_leaf};

const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
const DAY: time::Duration = time::Duration::DAY;

fn config() -> Config {
    crate::config::test_profile(None)
}

/// A staged rotation from `old` to `new`, one stored state per phase, each write stamped.
struct Rotating {
    config: Config,
    old: (CaKey, Issued),
    new: (CaKey, Issued),
    snapshot: Snapshot,
}

impl Rotating {
    fn start() -> Self {
        let config = config();
        let old = issue_ca(&config.ca.spec, NOW - 100 * DAY).unwrap();
        let new = issue_ca(&config.ca.spec, NOW - DAY).unwrap();
        let mut snapshot = installed(&config, &old, NOW - 100 * DAY);
        for s in snapshot.secrets.values_mut() {
            if let crate::secret::Observed::Present(s) = s {
                s.written_at = Some(NOW - 100 * DAY);
            }
        }
        Self {
            config,
            old,
            new,
            snapshot,
        }
    }

    fn ca_name(&self) -> String {
        self.config.ca.secret_name.clone()
    }

    /// The trust step at `at`: the pending CA, every bundle [new, old].
    fn trust(&mut self, at: OffsetDateTime) {
        let (cert, key) = (self.new.1.cert.pem(), self.new.1.key.expose().to_string());
        self.snapshot.edit(&self.ca_name(), |s| {
            s.data.insert("next.crt".into(), cert.into_bytes());
            s.data.insert("next.key".into(), key.into_bytes());
            s.written_at = Some(at);
        });
        self.snapshot
            .set_bundles(&[self.new.0.cert.clone(), self.old.0.cert.clone()]);
    }

    /// The promotion at `at`: the pending CA becomes the active one; leaves unchanged.
    fn promote(&mut self, at: OffsetDateTime) {
        let (cert, key) = (self.new.1.cert.pem(), self.new.1.key.expose().to_string());
        self.snapshot.edit(&self.ca_name(), |s| {
            s.data.remove("next.crt");
            s.data.remove("next.key");
            s.data.insert("tls.crt".into(), cert.into_bytes());
            s.data.insert("tls.key".into(), key.into_bytes());
            s.written_at = Some(at);
        });
    }

    /// Every leaf reissued by the new CA at `at`.
    fn leaves(&mut self, at: OffsetDateTime) {
        for t in self.config.tls.clone() {
            let leaf = issue_leaf(&t.leaf, &self.new.0, at).unwrap();
            self.snapshot.edit(&t.name, |s| {
                s.data
                    .insert("tls.crt".into(), leaf.cert.pem().into_bytes());
                s.data
                    .insert("tls.key".into(), leaf.key.expose().as_bytes().to_vec());
                s.written_at = Some(at);
            });
        }
    }

    fn phase(&self) -> Rotation {
        rotation(&self.config, &self.snapshot, NOW)
    }
}

#[test]
fn the_phase_follows_a_staged_rotation_with_its_start() {
    let mut r = Rotating::start();
    assert_eq!(
        r.phase(),
        Rotation {
            phase: "steady",
            since: None
        }
    );
    let trust_at = NOW - 3 * time::Duration::HOUR;
    r.trust(trust_at);
    assert_eq!(
        r.phase(),
        Rotation {
            phase: "trust",
            since: Some(trust_at)
        }
    );
    let promoted_at = NOW - 2 * time::Duration::HOUR;
    r.promote(promoted_at);
    assert_eq!(
        r.phase(),
        Rotation {
            phase: "leaves",
            since: Some(promoted_at)
        }
    );
    let leaves_at = NOW - time::Duration::HOUR;
    r.leaves(leaves_at);
    assert_eq!(
        r.phase(),
        Rotation {
            phase: "cleanup",
            since: Some(leaves_at)
        }
    );
    r.snapshot.set_bundles(&[r.new.0.cert.clone()]);
    assert_eq!(r.phase().phase, "steady");
}

#[test]
fn an_expired_prior_ca_is_no_cleanup_to_wait_for() {
    let mut r = Rotating::start();
    let expired = issue_ca(&r.config.ca.spec, NOW - 4000 * DAY).unwrap();
    assert!(expired.0.cert.is_expired_at(NOW));
    r.snapshot
        .set_bundles(&[r.old.0.cert.clone(), expired.0.cert.clone()]);
    assert_eq!(r.phase().phase, "steady");
}

fn rendered(r: &Rotating, targets: &[CaBundleTarget]) -> String {
    let ctx = crate::check::Context {
        targets: targets.to_vec(),
        ..Default::default()
    };
    let report = crate::check::check(&r.config, &r.snapshot, NOW, "test".into(), &ctx);
    render(&health(&r.config, &r.snapshot, &report, NOW))
}

fn sample<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[test]
fn health_gives_each_certificate_its_times_and_each_bundle_its_cas() {
    let mut r = Rotating::start();
    r.trust(NOW - time::Duration::HOUR);
    let text = rendered(&r, &[]);
    let leaf = r.config.tls[0].clone();
    let cert = crate::observe::parse::leaf(r.snapshot.get(&leaf.name).present().unwrap())
        .cert
        .ok()
        .unwrap()
        .clone();
    let labels = format!(
        "{{namespace=\"{}\",secret=\"{}\",kind=\"tls\"}}",
        r.config.namespace, leaf.name
    );
    let renew = cert.not_after - time::Duration::try_from(leaf.renew_before).unwrap();
    for (name, t) in [
        ("not_before", cert.not_before),
        ("not_after", cert.not_after),
        ("renewal_due", renew),
    ] {
        let line = format!(
            "certgen_certificate_{name}_timestamp_seconds{labels} {}",
            t.unix_timestamp()
        );
        assert!(text.contains(&line), "{line} not in\n{text}");
    }
    // Both CAs of every TLS bundle, by fingerprint, with their expiry.
    let bundle = format!(
        "certgen_bundle_cas{{namespace=\"{}\",secret=\"{}\"}} 2",
        r.config.namespace, leaf.name
    );
    assert!(text.contains(&bundle), "{text}");
    for ca in [&r.new.0.cert, &r.old.0.cert] {
        let line = format!(
            "certgen_bundle_ca_not_after_timestamp_seconds{{namespace=\"{}\",secret=\"{}\",ca_sha256=\"{}\"}} {}",
            r.config.namespace,
            leaf.name,
            ca.short_fingerprint(),
            ca.not_after.unix_timestamp()
        );
        assert!(text.contains(&line), "{line} not in\n{text}");
    }
    // The phase, as a state set, with its start.
    let phases = sample(&text, "certgen_rotation_phase{");
    assert_eq!(phases.len(), 4);
    assert_eq!(
        phases
            .iter()
            .filter(|l| l.ends_with(" 1"))
            .collect::<Vec<_>>(),
        [&format!(
            "certgen_rotation_phase{{namespace=\"{}\",profile=\"envoy-gateway\",phase=\"trust\"}} 1",
            r.config.namespace
        )]
    );
    assert_eq!(
        sample(&text, "certgen_rotation_phase_start_timestamp_seconds{").len(),
        1
    );
    assert!(text.contains(
        "certgen_check_healthy{namespace=\"envoy-gateway-system\",profile=\"envoy-gateway\"} 0"
    ));
}

#[test]
fn statuses_and_targets_are_state_sets() {
    let r = Rotating::start();
    let mut targets = vec![];
    for (name, state) in [
        ("a", TargetState::InSync),
        ("b", TargetState::Drifted),
        ("c", TargetState::Absent),
        ("d", TargetState::Refused),
    ] {
        targets.push(CaBundleTarget {
            writer: None,
            kind: "MutatingWebhookConfiguration".into(),
            name: name.into(),
            secret: "envoy-gateway".into(),
            state,
            pending_missing: None,
        });
    }
    let text = rendered(&r, &targets);
    let on: Vec<&str> = sample(&text, "certgen_cabundle_target_status{")
        .into_iter()
        .filter(|l| l.ends_with(" 1"))
        .collect();
    assert_eq!(on.len(), 4, "{text}");
    for (name, status) in [
        ("a", "in_sync"),
        ("b", "drifted"),
        ("c", "absent"),
        ("d", "refused"),
    ] {
        assert!(
            on.iter().any(|l| l.contains(&format!("target=\"{name}\""))
                && l.contains(&format!("status=\"{status}\""))),
            "{name} {status}: {on:?}"
        );
    }
    // Every Secret has exactly one status; here all are ok, and nothing is in rotation.
    let statuses = sample(&text, "certgen_secret_status{");
    let secrets = 1 + r.config.tls.len() + r.config.hmac.len();
    assert_eq!(statuses.len(), 6 * secrets);
    assert_eq!(
        statuses.iter().filter(|l| l.ends_with(" 1")).count(),
        secrets
    );
    assert!(
        statuses
            .iter()
            .filter(|l| l.ends_with(" 1"))
            .all(|l| l.contains("status=\"ok\""))
    );
    assert!(sample(&text, "certgen_rotation_phase_start_timestamp_seconds").is_empty());
}

#[test]
fn an_expired_certificate_shows_due_with_its_past_expiry() {
    let config = config();
    let ca = issue_ca(&config.ca.spec, NOW - 2000 * DAY).unwrap();
    let snapshot = installed(&config, &ca, NOW - 2000 * DAY);
    let report = crate::check::check(&config, &snapshot, NOW, "test".into(), &Default::default());
    let text = render(&health(&config, &snapshot, &report, NOW));
    let leaf = &config.tls[0].name;
    assert!(text.contains(&format!(
        "certgen_secret_status{{namespace=\"envoy-gateway-system\",secret=\"{leaf}\",kind=\"tls\",status=\"due\"}} 1"
    )), "{text}");
    let not_after = sample(&text, "certgen_certificate_not_after_timestamp_seconds{");
    assert!(
        not_after
            .iter()
            .filter(|l| l.contains("kind=\"tls\""))
            .all(|l| {
                let v: i64 = l.rsplit(' ').next().unwrap().parse().unwrap();
                v < NOW.unix_timestamp()
            })
    );
}

#[test]
fn no_key_material_in_any_metric() {
    let mut r = Rotating::start();
    r.trust(NOW - time::Duration::HOUR);
    let text = rendered(&r, &[]);
    let mut secrets: Vec<String> = vec![
        r.old.1.key.expose().to_string(),
        r.new.1.key.expose().to_string(),
    ];
    for o in r.snapshot.secrets.values() {
        if let Some(s) = o.present() {
            for (k, v) in &s.data {
                if k.ends_with(".key") || k == "hmac-secret" {
                    secrets.push(String::from_utf8_lossy(v).into_owned());
                }
            }
        }
    }
    assert!(!text.contains("PRIVATE KEY"));
    for secret in secrets {
        // Every line of the key's PEM body, long enough to be unmistakable.
        for line in secret
            .lines()
            .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
        {
            assert!(!text.contains(line), "key material in the metrics");
        }
    }
    // Nor any certificate body: metrics name certificates by fingerprint only.
    assert!(!text.contains("BEGIN"));
    let bundle = bundle_pem(&[r.new.0.cert.clone()]);
    let body = bundle.lines().nth(1).unwrap();
    assert!(!text.contains(body));
}

#[test]
fn run_metrics_name_the_outcome() {
    let config = config();
    let outcome = RunOutcome {
        exit_code: 3,
        finished_at: NOW,
        duration: std::time::Duration::from_millis(1500),
        writes: 4,
        dry_run: false,
        api_requests: Some(ApiRequests {
            get: 2,
            list: 1,
            ..Default::default()
        }),
    };
    let text = render(&run(&config, &outcome));
    let l = "{namespace=\"envoy-gateway-system\",profile=\"envoy-gateway\"}";
    for line in [
        format!("certgen_last_run_success{l} 0"),
        format!("certgen_last_run_exit_code{l} 3"),
        format!("certgen_last_run_timestamp_seconds{l} {}", NOW.unix_timestamp()),
        format!("certgen_last_run_duration_seconds{l} 1.5"),
        format!("certgen_last_run_writes{l} 4"),
        "certgen_last_run_api_requests{namespace=\"envoy-gateway-system\",profile=\"envoy-gateway\",verb=\"list\"} 1".into(),
    ] {
        assert!(text.contains(&line), "{line} not in\n{text}");
    }
}

/// Issue 32, finding 2: a bundle holding the same CA twice gives one series for it (the
/// Pushgateway refuses a push with the same series twice, node_exporter's textfile collector
/// errs on every scrape), and `check` is not healthy: the next run writes the bundle once.
#[test]
fn a_ca_twice_in_a_bundle_is_one_series_and_unhealthy() {
    let mut r = Rotating::start();
    let ca = r.old.0.cert.clone();
    let pem = crate::pki::bundle_pem(&[ca.clone(), ca.clone()]).into_bytes();
    r.snapshot.edit("envoy", |s| {
        s.data.insert("ca.crt".into(), pem);
    });
    let text = rendered(&r, &[]);
    let series = sample(
        &text,
        &format!(
            "certgen_bundle_ca_not_after_timestamp_seconds{{namespace=\"{}\",secret=\"envoy\",ca_sha256=\"{}\"}}",
            r.config.namespace,
            ca.short_fingerprint()
        ),
    );
    assert_eq!(series.len(), 1, "{text}");
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name_labels, _) = line.rsplit_once(' ').unwrap();
        assert!(seen.insert(name_labels), "{name_labels} twice in\n{text}");
    }
    assert!(
        text.contains(
            "certgen_check_healthy{namespace=\"envoy-gateway-system\",profile=\"envoy-gateway\"} 0"
        ),
        "{text}"
    );
}

/// Issue 32, finding 4: `certgen_check_healthy` follows the caBundle targets too: a drifted
/// one is a write of the next run.
#[test]
fn a_drifted_target_makes_the_check_unhealthy() {
    let r = Rotating::start();
    let target = |state| CaBundleTarget {
        writer: None,
        kind: "MutatingWebhookConfiguration".into(),
        name: "injector".into(),
        secret: "envoy-gateway".into(),
        state,
        pending_missing: None,
    };
    let healthy = |text: &str| {
        sample(text, "certgen_check_healthy{")[0]
            .rsplit_once(' ')
            .unwrap()
            .1
            .to_string()
    };
    assert_eq!(healthy(&rendered(&r, &[target(TargetState::InSync)])), "1");
    let drifted = rendered(&r, &[target(TargetState::Drifted)]);
    assert_eq!(healthy(&drifted), "0", "{drifted}");
    assert!(drifted.contains("status=\"drifted\"} 1"));
}

#[test]
fn a_member_of_a_set_names_its_set_and_no_other_cluster_does() {
    let config = config();
    let ca = issue_ca(&config.ca.spec, NOW - DAY).unwrap();
    let mut snapshot = installed(&config, &ca, NOW - DAY);
    let info = |snapshot: &Snapshot| {
        super::set_family(&config, snapshot).map(|f| crate::exposition::text::render(&[f]))
    };
    assert!(info(&snapshot).is_none(), "a cluster in no set");
    let record = crate::set::Record {
        id: "e0c78408542f1f8e".into(),
        members: vec!["a".into(), "b".into(), "c".into()],
        contexts: vec!["m0".into(), "m1".into(), "m2".into()],
        generation: 2,
    };
    snapshot.edit(&config.ca.secret_name, |s| {
        s.annotations.insert(
            crate::set::SET_ANNOTATION.to_string(),
            record.to_annotation(),
        );
    });
    let text = info(&snapshot).unwrap();
    assert!(
        text.contains(&format!(
            "certgen_set_info{{namespace=\"{}\",profile=\"{}\",set=\"e0c78408542f1f8e\",generation=\"2\",members=\"3\"}} 1",
            config.namespace, config.profile
        )),
        "{text}"
    );
}

#[test]
fn other_writers_name_at_most_five_managers_and_fold_the_rest() {
    let r = Rotating::start();
    let ctx = crate::check::Context {
        propagation_delay: std::time::Duration::from_secs(90),
        ..crate::check::Context::default()
    };
    let mut report = crate::check::check(&r.config, &r.snapshot, NOW, "test".into(), &ctx);
    let row = |i: usize, fight: bool| crate::report::WriterRow {
        kind: "Secret".into(),
        name: format!("s{i}"),
        manager: format!("manager-{i}"),
        operation: "Update".into(),
        time: Some("2026-06-01T11:00:00Z".into()),
        fields: vec!["data/ca.crt".into()],
        removed: false,
        origin: "overwrote",
        fight: if fight {
            vec!["2026-06-01T10:00:00Z".into(), "2026-06-01T11:00:00Z".into()]
        } else {
            vec![]
        },
        text: String::new(),
    };
    report.other_writers = (0..8).map(|i| row(i, i == 7)).collect();
    let text = render(&health(&r.config, &r.snapshot, &report, NOW));
    let written = sample(&text, "certgen_other_writer_timestamp_seconds{");
    assert_eq!(written.len(), 8, "{text}");
    let named: std::collections::BTreeSet<&str> = written
        .iter()
        .filter_map(|l| l.split("manager=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(named.len(), 6, "5 managers and other: {named:?}");
    assert!(
        named.contains("other") && !named.contains("manager-5"),
        "{named:?}"
    );
    assert_eq!(
        sample(&text, "certgen_fight_undos{"),
        [
            "certgen_fight_undos{namespace=\"envoy-gateway-system\",object_kind=\"Secret\",object=\"s7\",manager=\"other\"} 2"
        ]
    );
    assert_eq!(sample(&text, "certgen_fights{").len(), 1);
    assert!(
        sample(&text, "certgen_fights{")[0].ends_with(" 1"),
        "{text}"
    );
}
