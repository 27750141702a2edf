//! The Kubernetes Events of a run, planned as data ([`EventLine`]): one per write of each step
//! (its reason from the write and the step's phase: `TrustAdded`, `CAPromoted`,
//! `LeavesRotated`, `TrustCleanedUp`, `Renewed`, ...), one per restart (`Restarted`), one per
//! gate (`GateOpened`, on the CA Secret: what opened it for each pod) and a `Warning` on each
//! pod whose kubelet held a gate or put it behind (`KubeletNotLive`, `KubeletBehind`), and the
//! `Warning`s of the state a run leaves: a certificate past its renewal time, an expired CA, a
//! rotation stuck past its gate.
//!
//! Pure: what the report already holds, the state as read, and `now` in; lines out. The report
//! shows them (a dry run's as `planned`); the Kubernetes adapter (`crate::k8s::events`) records
//! them. It must not record anything, nor carry key material (lines name objects and CAs by
//! fingerprint only).

use std::time::Duration;

use time::OffsetDateTime;

use crate::config::{Config, WebhookKind};
use crate::exposition::Rotation;
use crate::observe::Snapshot;
use crate::observe::parse::Field;
use crate::plan::{Action, Kind, Phase};
use crate::report::{ConsumerReport, Entry, EventLine, GateReport};

fn line(
    type_: &'static str,
    reason: &'static str,
    kind: &'static str,
    name: &str,
    action: &'static str,
    note: String,
) -> EventLine {
    EventLine {
        type_,
        reason,
        kind,
        name: name.to_string(),
        action,
        note,
        outcome: "planned",
    }
}

/// The reason of a write `action` made in a step of `phase`.
fn reason(action: Action, phase: &Phase) -> Option<&'static str> {
    Some(match (action, phase) {
        (Action::Keep, _) => return None,
        (Action::Create, _) => "Created",
        (Action::Trust, _) | (Action::UpdateBundle, Phase::Trust) => "TrustAdded",
        (Action::UpdateBundle, Phase::Cleanup { .. }) => "TrustCleanedUp",
        (Action::UpdateBundle, _) => "BundleUpdated",
        (Action::Promote, _) => "CAPromoted",
        (Action::Renew, Phase::Leaves) => "LeavesRotated",
        (Action::Renew, _) => "Renewed",
        (Action::Rotate, _) => "CARotated",
        (Action::Repair, _) => "Repaired",
        (Action::Delete, _) => "TrustCleanedUp",
    })
}

/// The object a report entry is about: (kind, name).
fn object(e: &Entry) -> Option<(&'static str, &str)> {
    if e.kind == Kind::TrustBundle {
        // `ClusterTrustBundle <name>`; a signer's "nothing to do" line is about no object.
        return e
            .secret
            .strip_prefix("ClusterTrustBundle ")
            .map(|n| ("ClusterTrustBundle", n));
    }
    if e.kind != Kind::Webhook {
        return Some(("Secret", &e.secret));
    }
    // A target's line names it as `Kind name` (`crate::outside::describe_target`).
    let (kind, name) = e.secret.split_once(' ')?;
    Some((WebhookKind::parse(kind)?.as_str(), name))
}

/// One Normal Event per write of a step whose phase is `phase`: on the Secret, or on the
/// `caBundle` target (webhook configuration, APIService) whose bundle the step moved.
pub fn of_step(phase: &Phase, entries: &[Entry]) -> Vec<EventLine> {
    entries
        .iter()
        .filter_map(|e| {
            let reason = reason(e.action, phase)?;
            let (kind, name) = object(e)?;
            let note = match e.action {
                Action::Create => created_note(e),
                _ => e.reason.clone(),
            };
            Some(line("Normal", reason, kind, name, e.action.name(), note))
        })
        .collect()
}

/// What a `Created` Event says: what was created, and why (the plan's reason, `missing` for a
/// Secret that did not exist). CAs by short fingerprint only.
fn created_note(e: &Entry) -> String {
    let short = |fp: &str| fp.get(..16).unwrap_or(fp).to_string();
    let until = e
        .not_after
        .as_deref()
        .map(|t| format!(", valid until {t}"))
        .unwrap_or_default();
    let what = match (e.kind, e.ca_sha256.as_deref()) {
        (Kind::Ca, Some(fp)) => format!("created the CA keypair (CA {}{until})", short(fp)),
        (Kind::Ca, None) => format!("created the CA keypair{until}"),
        (Kind::Tls, Some(fp)) => format!(
            "created a certificate and key signed by CA {}{until}, with the trust bundle",
            short(fp)
        ),
        (Kind::Tls, None) => format!("created a certificate and key{until}, with the trust bundle"),
        (Kind::Hmac, _) => "created a new random HMAC key".to_string(),
        (Kind::Webhook, _) => "wrote the caBundle".to_string(),
        (Kind::TrustBundle, _) => "published a CA as a ClusterTrustBundle".to_string(),
    };
    let why = match e.reason.as_str() {
        "missing" => "the Secret did not exist".to_string(),
        other => other.to_string(),
    };
    format!("{what}: {why}")
}

/// One Normal Event per workload certgen restarted.
pub fn of_restarts(consumers: &[ConsumerReport]) -> Vec<EventLine> {
    consumers
        .iter()
        .flat_map(|c| c.deployments.iter().map(move |d| (c, d)))
        .filter(|(_, d)| d.action == "restarted")
        .map(|(c, d)| {
            line(
                "Normal",
                "Restarted",
                d.kind.as_str(),
                &d.name,
                "restart",
                format!(
                    "restarted by certgen (consumer {}) to load the certificates just written",
                    c.name
                ),
            )
        })
        .collect()
}

/// The longest note a gate's Event carries (the API server takes up to 1 kB).
const GATE_NOTE: usize = 900;

/// The Events of a gate: one Normal `GateOpened` on the CA Secret `ca_secret` saying what
/// opened it for each pod (or `GateHeld` when the run ended before it opened), and one Warning
/// per pod in `kubelets` (pod → (node, what was seen)): `KubeletNotLive` when its kubelet was
/// not seen live, `KubeletBehind` when it came back from a gap and the gate waited for its
/// watches.
pub fn of_gate(
    ca_secret: &str,
    gate: &GateReport,
    kubelets: &std::collections::BTreeMap<String, (String, String)>,
) -> Vec<EventLine> {
    let held = gate.opened_by == "held";
    let mut note = if held {
        format!(
            "the {} gate did not open in {}s:",
            gate.gate,
            gate.seconds.round()
        )
    } else {
        format!(
            "the {} gate opened by {} after {}s:",
            gate.gate,
            gate.opened_by,
            gate.seconds.round()
        )
    };
    if gate.pods.is_empty() {
        note.push_str(" no pod mounts what changed, or none could be observed");
    }
    for (i, p) in gate.pods.iter().enumerate() {
        let item = format!(" {} ({}),", p.name, p.opened_by);
        if note.len() + item.len() > GATE_NOTE {
            note.push_str(&format!(" and {} more", gate.pods.len() - i));
            break;
        }
        note.push_str(&item);
    }
    let note = note.trim_end_matches(',').to_string();
    let mut out = vec![line(
        "Normal",
        if held { "GateHeld" } else { "GateOpened" },
        "Secret",
        ca_secret,
        "gate",
        note,
    )];
    for (pod, (_, why)) in kubelets {
        let not_live = gate
            .pods
            .iter()
            .any(|p| &p.name == pod && p.opened_by == "held")
            || why.contains("has not renewed");
        out.push(line(
            "Warning",
            if not_live {
                "KubeletNotLive"
            } else {
                "KubeletBehind"
            },
            "Pod",
            pod,
            "gate",
            format!("certgen's {} gate waited for this pod: {why}", gate.gate),
        ));
    }
    out
}

/// The Events of the renewal windows (issue 45): a Warning on each Secret whose routine
/// rotation started outside every window because it could not wait (`RenewalOutsideWindow`,
/// with the reason), and a Normal `WaitingForRenewalWindow` on each Secret held for the next.
pub fn of_window(window: Option<&crate::report::WindowReport>) -> Vec<EventLine> {
    let Some(w) = window else {
        return Vec::new();
    };
    let mut out: Vec<EventLine> = w
        .emergency
        .iter()
        .filter_map(|e| {
            let (secret, why) = e.split_once(": ")?;
            Some(line(
                "Warning",
                "RenewalOutsideWindow",
                "Secret",
                secret,
                "renew",
                why.to_string(),
            ))
        })
        .collect();
    out.extend(w.waiting.iter().map(|h| {
        line(
            "Normal",
            "WaitingForRenewalWindow",
            "Secret",
            &h.secret,
            "check",
            format!(
                "{} ({}) waits for the renewal window opening at {}",
                h.what,
                h.due,
                w.next_start.as_deref().unwrap_or("-")
            ),
        )
    }));
    out
}

/// A Warning on each object whose fields certgen owns were last written by another field
/// manager (`OtherWriter`), or that another manager keeps undoing (`FightDetected`), naming
/// the manager, its operation and time.
pub fn of_writers(writers: &[crate::report::WriterRow]) -> Vec<EventLine> {
    writers
        .iter()
        .map(|w| {
            let kind = match w.kind.as_str() {
                "MutatingWebhookConfiguration" => "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration" => "ValidatingWebhookConfiguration",
                "APIService" => "APIService",
                "CustomResourceDefinition" => "CustomResourceDefinition",
                _ => "Secret",
            };
            let (reason, note) = if w.fight.is_empty() {
                ("OtherWriter", w.text.clone())
            } else {
                (
                    "FightDetected",
                    format!(
                        "{}; certgen does not retry against it: see docs/troubleshooting.md#another-writer-keeps-undoing-certgen",
                        w.text
                    ),
                )
            };
            line("Warning", reason, kind, &w.name, "check", note)
        })
        .collect()
}

/// The Warnings of the state a run left: a certificate past its renewal time (the run could
/// not renew it), an expired CA (active, or in a bundle), and a rotation whose phase began more
/// than `propagation_delay + stuck_after` ago (stuck past its gate).
pub fn warnings(
    config: &Config,
    observed: &Snapshot,
    rotation: Rotation,
    now: OffsetDateTime,
    propagation_delay: Duration,
    stuck_after: Duration,
) -> Vec<EventLine> {
    let mut out = Vec::new();
    for (secret, kind, cert, renew_before) in crate::exposition::certificates(config, observed) {
        if cert.not_after <= now {
            let reason = if kind == "ca" { "CAExpired" } else { "Expired" };
            out.push(line(
                "Warning",
                reason,
                "Secret",
                secret,
                "check",
                format!(
                    "the certificate ({}) expired at {}; run certgen to replace it",
                    cert.short_fingerprint(),
                    crate::timefmt::rfc3339(cert.not_after)
                ),
            ));
        } else if cert.not_after
            - time::Duration::try_from(renew_before).unwrap_or(time::Duration::MAX)
            <= now
        {
            out.push(line(
                "Warning",
                "RenewalOverdue",
                "Secret",
                secret,
                "check",
                format!(
                    "the certificate ({}) expires at {}, within renewBefore, and was not renewed: see the run's log or certgen check",
                    cert.short_fingerprint(),
                    crate::timefmt::rfc3339(cert.not_after)
                ),
            ));
        }
    }
    // A CA in a bundle that has expired (the active one is covered above).
    for t in &config.tls {
        let Some(leaf) = observed.leaf_parsed(&t.name, &t.layout) else {
            continue;
        };
        if let Field::Ok(b) = &leaf.bundle {
            for ca in b.certs.iter().filter(|c| c.not_after <= now) {
                out.push(line(
                    "Warning",
                    "CAExpired",
                    "Secret",
                    &t.name,
                    "check",
                    format!(
                        "the trust bundle holds CA {}, expired at {}; run certgen to drop it",
                        ca.short_fingerprint(),
                        crate::timefmt::rfc3339(ca.not_after)
                    ),
                ));
            }
        }
    }
    if let Some(since) = rotation.since.filter(|_| rotation.phase != "steady") {
        let limit = propagation_delay.saturating_add(stuck_after);
        let limit = time::Duration::try_from(limit).unwrap_or(time::Duration::MAX);
        if since.checked_add(limit).is_some_and(|t| t <= now) {
            out.push(line(
                "Warning",
                "RotationStuck",
                "Secret",
                &config.ca.secret_name,
                "check",
                format!(
                    "the rotation has been in its {} phase since {}, past its gate by more than {}; see the run's log, then run certgen to resume it",
                    rotation.phase,
                    crate::timefmt::rfc3339(since),
                    crate::timefmt::HumanDuration(stuck_after)
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::DeploymentReport;

    fn entry(secret: &str, kind: Kind, action: Action) -> Entry {
        Entry {
            secret: secret.into(),
            kind,
            action,
            reason: format!("{} {secret}", action.name()),
            ca_sha256: None,
            not_after: None,
            cas: Vec::new(),
            step: None,
            undone_by: None,
        }
    }

    #[test]
    fn each_write_gets_the_reason_of_its_phase() {
        let trust = [
            entry("ca", Kind::Ca, Action::Trust),
            entry("envoy", Kind::Tls, Action::UpdateBundle),
            entry(
                "MutatingWebhookConfiguration hook",
                Kind::Webhook,
                Action::UpdateBundle,
            ),
            entry("hmac", Kind::Hmac, Action::Keep),
        ];
        let reasons = |phase: &Phase, entries: &[Entry]| -> Vec<(&'static str, String)> {
            of_step(phase, entries)
                .into_iter()
                .map(|l| (l.reason, l.name))
                .collect()
        };
        assert_eq!(
            reasons(&Phase::Trust, &trust),
            [
                ("TrustAdded", "ca".into()),
                ("TrustAdded", "envoy".into()),
                ("TrustAdded", "hook".into())
            ]
        );
        let kinds: Vec<&str> = of_step(&Phase::Trust, &trust)
            .iter()
            .map(|l| l.kind)
            .collect();
        assert_eq!(kinds, ["Secret", "Secret", "MutatingWebhookConfiguration"]);
        let leaves = [
            entry("ca", Kind::Ca, Action::Promote),
            entry("envoy", Kind::Tls, Action::Renew),
        ];
        assert_eq!(
            reasons(&Phase::Leaves, &leaves),
            [
                ("CAPromoted", "ca".into()),
                ("LeavesRotated", "envoy".into())
            ]
        );
        let cleanup = [
            entry("envoy", Kind::Tls, Action::UpdateBundle),
            entry(
                "ValidatingWebhookConfiguration hook",
                Kind::Webhook,
                Action::UpdateBundle,
            ),
            entry("APIService api", Kind::Webhook, Action::Keep),
        ];
        assert_eq!(
            reasons(&Phase::Cleanup { last: true }, &cleanup),
            [
                ("TrustCleanedUp", "envoy".into()),
                ("TrustCleanedUp", "hook".into())
            ]
        );
        let plain = [
            entry("envoy", Kind::Tls, Action::Renew),
            entry("new", Kind::Tls, Action::Create),
        ];
        assert_eq!(
            reasons(&Phase::Steady, &plain),
            [("Renewed", "envoy".into()), ("Created", "new".into())]
        );
        assert!(
            of_step(&Phase::Trust, &trust)
                .iter()
                .all(|l| l.type_ == "Normal" && l.outcome == "planned")
        );
    }

    #[test]
    fn a_created_event_says_what_was_created_and_why() {
        let fp = "ab".repeat(32);
        let created = |kind, reason: &str| {
            let e = Entry {
                reason: reason.into(),
                ca_sha256: (kind != Kind::Hmac).then(|| fp.clone()),
                not_after: Some("2031-06-01T12:00:00Z".into()),
                ..entry("s", kind, Action::Create)
            };
            of_step(&Phase::Steady, &[e]).remove(0).note
        };
        assert_eq!(
            created(Kind::Ca, "missing"),
            "created the CA keypair (CA abababababababab, valid until 2031-06-01T12:00:00Z): the Secret did not exist"
        );
        assert_eq!(
            created(Kind::Tls, "missing"),
            "created a certificate and key signed by CA abababababababab, valid until 2031-06-01T12:00:00Z, with the trust bundle: the Secret did not exist"
        );
        assert_eq!(
            created(Kind::Hmac, "missing"),
            "created a new random HMAC key: the Secret did not exist"
        );
        // Another reason is passed on as it is; the full fingerprint never is.
        let note = created(Kind::Tls, "a data key was empty");
        assert!(note.ends_with(": a data key was empty"), "{note}");
        assert!(!note.contains(&fp), "{note}");
    }

    const NOW: OffsetDateTime = time::macros::datetime!(2026-06-01 12:00 UTC);
    const DAY: time::Duration = time::Duration::DAY;

    fn config() -> Config {
        crate::config::test_profile(None)
    }

    /// The Warnings of certgen's installation made `ago` before NOW, with `rotation`.
    fn warned(ago: time::Duration, rotation: Rotation) -> Vec<(&'static str, String)> {
        let config = config();
        let ca = crate::pki::issue_ca(&config.ca.spec, NOW - ago).unwrap();
        let observed = crate::observe::fixtures::installed(&config, &ca, NOW - ago);
        let hour = Duration::from_secs(3600);
        let lines = warnings(
            &config,
            &observed,
            rotation,
            NOW,
            Duration::from_secs(120),
            hour,
        );
        assert!(lines.iter().all(|l| l.type_ == "Warning"));
        lines.into_iter().map(|l| (l.reason, l.name)).collect()
    }

    const STEADY: Rotation = Rotation {
        phase: "steady",
        since: None,
    };

    #[test]
    fn warnings_name_what_a_run_left_undone() {
        // Fresh: nothing.
        assert!(warned(DAY, STEADY).is_empty());
        // Leaves (5 years) within their 30 days' renewBefore, not renewed.
        let overdue = warned(1815 * DAY, STEADY);
        assert_eq!(overdue.len(), 3, "{overdue:?}");
        assert!(overdue.iter().all(|(r, _)| *r == "RenewalOverdue"));
        // Leaves expired.
        assert!(
            warned(1830 * DAY, STEADY)
                .iter()
                .all(|(r, _)| *r == "Expired")
        );
        // The CA (10 years) expired: on the CA Secret and on each bundle that holds it.
        let expired = warned(3700 * DAY, STEADY);
        let ca: Vec<_> = expired.iter().filter(|(r, _)| *r == "CAExpired").collect();
        assert_eq!(ca.len(), 1 + 3, "{expired:?}");
        assert!(ca.iter().any(|(_, n)| n == "envoy-gateway-ca"));
    }

    #[test]
    fn a_rotation_is_stuck_once_past_its_gate_by_more_than_stuck_after() {
        let in_trust = |ago: time::Duration| Rotation {
            phase: "trust",
            since: Some(NOW - ago),
        };
        // Gate 2 minutes + 1 hour.
        assert!(warned(DAY, in_trust(time::Duration::minutes(61))).is_empty());
        assert_eq!(
            warned(DAY, in_trust(time::Duration::minutes(63))),
            [("RotationStuck", "envoy-gateway-ca".to_string())]
        );
    }

    #[test]
    fn only_restarts_are_events() {
        let consumers = [ConsumerReport {
            name: "ratelimit".into(),
            reload: crate::config::Reload::Restart,
            deployments: vec![
                DeploymentReport::new("envoy-ratelimit", "restarted"),
                DeploymentReport::new("other", "up-to-date"),
            ],
            note: None,
            probes: vec![],
        }];
        let lines = of_restarts(&consumers);
        assert_eq!(lines.len(), 1);
        assert_eq!(
            (lines[0].reason, lines[0].kind, lines[0].name.as_str()),
            ("Restarted", "Deployment", "envoy-ratelimit")
        );
    }
}
