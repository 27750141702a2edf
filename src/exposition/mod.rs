//! Prometheus metrics of what certgen manages and of its runs, in the text exposition format:
//! `certgen check --output prometheus`, and every run's `--metrics-file` / `--pushgateway`.
//!
//! A pure rendering, like [`crate::report`]: [`health`] turns what `check` found (its
//! [`CheckReport`], the certificates of the [`Snapshot`] it judged, the `caBundle` targets as
//! read) into gauge families; [`run`] adds a run's outcome. Names follow Prometheus'
//! conventions: the `certgen_` prefix, base units, `_timestamp_seconds` for instants (Unix
//! time), every family with its HELP and TYPE line. Labels name objects and CAs by their
//! public SHA-256 fingerprint; nothing here ever sees key material (keys are never parsed into
//! anything this module reads). Where the text goes is [`sink`]'s job.

pub mod collect;
pub mod sink;
pub mod text;

use time::OffsetDateTime;

pub use self::text::{Family, render};
use crate::api_requests::ApiRequests;
pub use crate::check::{CaBundleTarget, TargetState};
use crate::config::Config;
use crate::observe::Snapshot;
use crate::observe::parse::{self, Field};
use crate::pki::Cert;
use crate::report::CheckReport;

/// The statuses of a Secret in `check` (`certgen_secret_status`), each exposed as 0 or 1.
/// `lost`: certgen's own CA Secret is gone while leaves it signed remain (its key is lost).
const SECRET_STATUSES: [&str; 6] = ["ok", "due", "missing", "invalid", "lost", "waiting"];
/// The rotation phases (`certgen_rotation_phase`).
pub const PHASES: [&str; 4] = ["steady", "trust", "leaves", "cleanup"];

/// The rotation phase the stored state is in, and since when (by the store's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// One of [`PHASES`].
    pub phase: &'static str,
    /// When the stored state entered the phase, as far as the writes tell: for `trust` and
    /// `leaves` the CA Secret's last write (the pending CA's, the promotion's), for `cleanup`
    /// the newest leaf write. `None` in `steady`, or when the store keeps no write times.
    pub since: Option<OffsetDateTime>,
}

/// The rotation phase of the stored state, derived from the certificates as the planner does:
/// a pending CA (`next.crt`) means the trust step is under way or waits for its gate; a leaf
/// not signed by the active CA while its bundle trusts the active CA means the leaves step;
/// a bundle still holding an unexpired CA other than the active one means the cleanup is due.
pub fn rotation(config: &Config, observed: &Snapshot, now: OffsetDateTime) -> Rotation {
    let steady = Rotation {
        phase: "steady",
        since: None,
    };
    let (Some(ca_secret), Some(ca)) = (
        observed.ca().present(),
        observed.ca_parsed(&config.ca.layout),
    ) else {
        return steady;
    };
    if matches!(ca.next_cert, Field::Ok(_)) {
        return Rotation {
            phase: "trust",
            since: ca_secret.written_at,
        };
    }
    let Field::Ok(active) = &ca.cert else {
        return steady;
    };
    let leaves: Vec<_> = config
        .tls
        .iter()
        .filter_map(|t| {
            let s = observed.get(&t.name).present()?;
            Some((s, observed.leaf_parsed(&t.name, &t.layout)?))
        })
        .collect();
    let trusts_active = |b: &Field<parse::Bundle>| {
        b.ok().is_some_and(|b| {
            b.certs
                .iter()
                .any(|c| c.fingerprint() == active.fingerprint())
        })
    };
    let leaves_due = leaves.iter().any(|(_, l)| {
        trusts_active(&l.bundle) && l.cert.ok().is_some_and(|leaf| !active.signed(leaf))
    });
    if leaves_due {
        return Rotation {
            phase: "leaves",
            since: ca_secret.written_at,
        };
    }
    let prior_trusted = leaves.iter().any(|(_, l)| {
        l.bundle.ok().is_some_and(|b| {
            b.certs
                .iter()
                .any(|c| c.fingerprint() != active.fingerprint() && !c.is_expired_at(now))
        })
    });
    if prior_trusted {
        return Rotation {
            phase: "cleanup",
            since: leaves.iter().filter_map(|(s, _)| s.written_at).max(),
        };
    }
    steady
}

fn seconds(t: OffsetDateTime) -> f64 {
    t.unix_timestamp() as f64
}

/// The certificate each Secret holds (the active CA for the CA Secret): Secret name, kind
/// (`ca`, `tls`), certificate and renewBefore.
pub fn certificates<'a>(
    config: &'a Config,
    observed: &Snapshot,
) -> Vec<(&'a str, &'static str, Cert, std::time::Duration)> {
    let mut out = Vec::new();
    if let Some(ca) = observed.ca_parsed(&config.ca.layout)
        && let Field::Ok(cert) = &ca.cert
    {
        out.push((
            config.ca.secret_name.as_str(),
            "ca",
            cert.clone(),
            config.ca.renew_before,
        ));
    }
    for t in &config.tls {
        if let Some(leaf) = observed.leaf_parsed(&t.name, &t.layout)
            && let Field::Ok(cert) = &leaf.cert
        {
            out.push((t.name.as_str(), "tls", cert.clone(), t.renew_before));
        }
    }
    out
}

/// The gauges of what `check` found: per Secret and certificate, per distinct CA in each
/// bundle, the rotation phase, and the `caBundle` targets (as `report` has them).
pub fn health(
    config: &Config,
    observed: &Snapshot,
    report: &CheckReport,
    now: OffsetDateTime,
) -> Vec<Family> {
    let mut healthy = Family::gauge(
        "certgen_check_healthy",
        "1 when a plain certgen run would write nothing, wait for nothing and refuse nothing (certgen check exits 0): every Secret is usable, unexpired, outside its renewal window, every caBundle target in step, and no rotation is in progress.",
    );
    healthy.push(
        vec![ns(config), ("profile", config.profile.clone())],
        f64::from(u8::from(report.healthy)),
    );

    let [status, problems] = secret_families(config, report);
    let [not_before, not_after, renewal] = certificate_families(config, observed);
    let [cas, ca_not_after] = bundle_families(config, report);
    let [phase, since] = rotation_families(config, observed, now);
    vec![
        healthy,
        status,
        problems,
        not_before,
        not_after,
        renewal,
        cas,
        ca_not_after,
        phase,
        since,
        target_family(config, report),
    ]
    .into_iter()
    .chain(window_families(config, report))
    .chain(writer_families(config, report))
    .chain(set_family(config, observed))
    .collect()
}

/// At most this many field managers are named in the `manager` label; the others are folded
/// into `other`, so a cluster full of writers cannot blow up the series.
pub const MANAGERS_NAMED: usize = 5;

/// The `manager` label of each other writer of `report`: the first [`MANAGERS_NAMED`]
/// distinct names (in the report's order), the rest `other`.
fn manager_labels(report: &CheckReport) -> Vec<String> {
    let mut named: Vec<&str> = Vec::new();
    report
        .other_writers
        .iter()
        .map(|w| {
            if named.contains(&w.manager.as_str()) {
                return w.manager.clone();
            }
            if named.len() < MANAGERS_NAMED {
                named.push(&w.manager);
                return w.manager.clone();
            }
            "other".into()
        })
        .collect()
}

/// The other writers (issue 45): when another field manager last wrote the fields certgen
/// owns on each object, and the fights.
fn writer_families(config: &Config, report: &CheckReport) -> Vec<Family> {
    let mut written = Family::gauge(
        "certgen_other_writer_timestamp_seconds",
        "When another field manager last wrote (or removed) the fields certgen owns on an object (Unix time, from managedFields); origin is overwrote, before_adoption or cainjector. At most 5 managers are named; the rest are `other`.",
    );
    let mut undos = Family::gauge(
        "certgen_fight_undos",
        "A fight: how many times within 24h the same other field manager undid certgen's write of this object (2 or more; absent when there is no fight).",
    );
    let mut fights = Family::gauge(
        "certgen_fights",
        "Objects another field manager keeps undoing certgen's writes on (certgen check exits 1 while it is above 0).",
    );
    let managers = manager_labels(report);
    for (w, manager) in report.other_writers.iter().zip(managers) {
        let labels = vec![
            ns(config),
            ("object_kind", w.kind.clone()),
            ("object", w.name.clone()),
            ("manager", manager),
        ];
        let mut with_origin = labels.clone();
        with_origin.push(("operation", w.operation.clone()));
        with_origin.push(("origin", w.origin.to_string()));
        let at = w
            .time
            .as_deref()
            .and_then(crate::timefmt::parse_rfc3339)
            .map_or(0.0, |t| t.unix_timestamp() as f64);
        written.push(with_origin, at);
        if !w.fight.is_empty() {
            undos.push(labels, w.fight.len() as f64);
        }
    }
    fights.push(
        vec![ns(config), ("profile", config.profile.clone())],
        report
            .other_writers
            .iter()
            .filter(|w| !w.fight.is_empty())
            .count() as f64,
    );
    vec![written, undos, fights]
}

/// The set of clusters this cluster's CA Secret records (issue 42), when it records one: its
/// id, generation and size, so that a member's exporter and `check` say that its CA is shared
/// and changes only by a run over the set (their next-run verdict predicts that refusal).
fn set_family(config: &Config, observed: &Snapshot) -> Option<Family> {
    let record = crate::set::Record::read(config, observed, &|n| n.to_string()).ok()??;
    let mut info = Family::gauge(
        "certgen_set_info",
        "1 when this cluster's CA Secret records a set of clusters sharing its CA (labels: the set's id, its generation, its number of members): the CA is created, rotated and dropped only by a certgen run over every member's context.",
    );
    info.push(
        vec![
            ns(config),
            ("profile", config.profile.clone()),
            ("set", record.id.clone()),
            ("generation", record.generation.to_string()),
            ("members", record.members.len().to_string()),
        ],
        1.0,
    );
    Some(info)
}

/// The renewal windows (issue 45), when configured: whether one is open, when the next opens,
/// and how many routine rotations wait for it.
fn window_families(config: &Config, report: &CheckReport) -> Vec<Family> {
    let Some(w) = &report.renewal_window else {
        return Vec::new();
    };
    let labels = || vec![ns(config), ("profile", config.profile.clone())];
    let mut open = Family::gauge(
        "certgen_renewal_window_open",
        "1 when a renewal window is open now: routine rotations may start.",
    );
    open.push(labels(), f64::from(u8::from(w.open)));
    let mut next = Family::gauge(
        "certgen_renewal_window_next_start_timestamp_seconds",
        "When the next renewal window opens (Unix time), while none is open; absent inside a window or when none opens again.",
    );
    if let Some(t) = w.next_start.as_deref().and_then(|s| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
    }) {
        next.push(labels(), t.unix_timestamp() as f64);
    }
    let mut waiting = Family::gauge(
        "certgen_renewal_window_waiting",
        "Routine rotations and renewals held for the next renewal window (each Secret's status is then `waiting`).",
    );
    waiting.push(labels(), w.waiting.len() as f64);
    vec![open, next, waiting]
}

/// The `namespace` label every series carries.
fn ns(config: &Config) -> (&'static str, String) {
    ("namespace", config.namespace.clone())
}

/// The labels of a series about one Secret.
fn secret_labels(config: &Config, secret: &str, kind: &str) -> Vec<(&'static str, String)> {
    vec![
        ns(config),
        ("secret", secret.to_string()),
        ("kind", kind.to_string()),
    ]
}

/// Each managed Secret's status and problems, as `check` reports them.
fn secret_families(config: &Config, report: &CheckReport) -> [Family; 2] {
    let mut status = Family::gauge(
        "certgen_secret_status",
        "The status of each managed Secret as certgen check reports it: 1 for the current status (ok, due, missing, invalid), 0 for the others.",
    );
    let mut problems = Family::gauge(
        "certgen_secret_problems",
        "The number of problems certgen check found with each managed Secret (certgen check lists them).",
    );
    for row in &report.secrets {
        for s in SECRET_STATUSES {
            let mut labels = secret_labels(config, &row.secret, row.kind);
            labels.push(("status", s.to_string()));
            status.push(labels, f64::from(u8::from(row.status == s)));
        }
        problems.push(
            secret_labels(config, &row.secret, row.kind),
            row.problems.len() as f64,
        );
    }

    [status, problems]
}

/// The times of the certificate each Secret holds.
fn certificate_families(config: &Config, observed: &Snapshot) -> [Family; 3] {
    let mut not_before = Family::gauge(
        "certgen_certificate_not_before_timestamp_seconds",
        "The notBefore of the certificate each Secret holds (the active CA for the CA Secret), in Unix time.",
    );
    let mut not_after = Family::gauge(
        "certgen_certificate_not_after_timestamp_seconds",
        "The notAfter of the certificate each Secret holds (the active CA for the CA Secret), in Unix time.",
    );
    let mut renewal = Family::gauge(
        "certgen_certificate_renewal_due_timestamp_seconds",
        "When a run renews the certificate each Secret holds (notAfter minus renewBefore), in Unix time.",
    );
    for (secret, kind, cert, renew_before) in certificates(config, observed) {
        let renew_at = cert
            .not_after
            .checked_sub(time::Duration::try_from(renew_before).unwrap_or(time::Duration::MAX))
            .unwrap_or(cert.not_before);
        not_before.push(
            secret_labels(config, secret, kind),
            seconds(cert.not_before),
        );
        not_after.push(secret_labels(config, secret, kind), seconds(cert.not_after));
        renewal.push(secret_labels(config, secret, kind), seconds(renew_at));
    }

    [not_before, not_after, renewal]
}

/// The trust bundles: how many CAs each holds, and until when each is valid.
fn bundle_families(config: &Config, report: &CheckReport) -> [Family; 2] {
    let mut cas = Family::gauge(
        "certgen_bundle_cas",
        "The number of CA certificates in each Secret's trust bundle (ca.crt); certgen keeps at most two.",
    );
    let mut ca_not_after = Family::gauge(
        "certgen_bundle_ca_not_after_timestamp_seconds",
        "The notAfter of each CA in each Secret's trust bundle (ca.crt), by the CA's SHA-256 fingerprint (first 16 hex digits), in Unix time.",
    );
    for row in report.secrets.iter().filter(|r| !r.bundle.is_empty()) {
        cas.push(
            vec![ns(config), ("secret", row.secret.clone())],
            row.bundle.len() as f64,
        );
        // One series per distinct CA: a bundle holding a CA twice (which check reports, and a
        // run writes once) would otherwise give the same series twice, which the Pushgateway
        // refuses and node_exporter's textfile collector reports as an error.
        let mut seen: Vec<&str> = Vec::new();
        for ca in &row.bundle {
            if seen.contains(&ca.sha256.as_str()) {
                continue;
            }
            seen.push(&ca.sha256);
            let Some(t) = crate::timefmt::parse_rfc3339(&ca.not_after) else {
                continue;
            };
            ca_not_after.push(
                vec![
                    ns(config),
                    ("secret", row.secret.clone()),
                    ("ca_sha256", ca.sha256.chars().take(16).collect()),
                ],
                seconds(t),
            );
        }
    }

    [cas, ca_not_after]
}

/// The rotation phase the stored certificates are in, and since when.
fn rotation_families(config: &Config, observed: &Snapshot, now: OffsetDateTime) -> [Family; 2] {
    let rot = rotation(config, observed, now);
    let mut phase = Family::gauge(
        "certgen_rotation_phase",
        "The CA rotation phase the stored certificates are in: 1 for the current phase (steady, trust, leaves, cleanup), 0 for the others.",
    );
    for p in PHASES {
        phase.push(
            vec![
                ns(config),
                ("profile", config.profile.clone()),
                ("phase", p.into()),
            ],
            f64::from(u8::from(rot.phase == p)),
        );
    }
    let mut since = Family::gauge(
        "certgen_rotation_phase_start_timestamp_seconds",
        "When the stored state entered its current rotation phase, by the store's clock (trust and leaves: the CA Secret's last write; cleanup: the newest leaf write), in Unix time; absent in steady state.",
    );
    if let Some(t) = rot.since.filter(|_| rot.phase != "steady") {
        since.push(
            vec![
                ns(config),
                ("profile", config.profile.clone()),
                ("phase", rot.phase.into()),
            ],
            seconds(t),
        );
    }

    [phase, since]
}

/// Each `caBundle` target's state against the Secret it follows.
fn target_family(config: &Config, report: &CheckReport) -> Family {
    let mut target = Family::gauge(
        "certgen_cabundle_target_status",
        "The state of each caBundle target (webhook configuration, APIService) against the ca.crt of the Secret it follows: 1 for the current state (in_sync, drifted, absent, refused, cert_manager: its CA injector writes it and certgen never does), 0 for the others.",
    );
    for t in &report.ca_bundle_targets {
        for s in TargetState::ALL.map(TargetState::name) {
            target.push(
                vec![
                    ns(config),
                    ("target_kind", t.kind.clone()),
                    ("target", t.name.clone()),
                    ("secret", t.secret.clone()),
                    ("status", s.into()),
                ],
                f64::from(u8::from(t.status == s)),
            );
        }
    }

    target
}

/// What a run did, for its metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunOutcome {
    /// The process exit code (0 done, see `certgen --help`).
    pub exit_code: u8,
    pub finished_at: OffsetDateTime,
    pub duration: std::time::Duration,
    pub writes: usize,
    pub dry_run: bool,
    /// Kubernetes API requests of the run (cluster runs only).
    pub api_requests: Option<ApiRequests>,
}

/// The gauges of a run's outcome.
pub fn run(config: &Config, outcome: &RunOutcome) -> Vec<Family> {
    let labels = || {
        vec![
            ("namespace", config.namespace.clone()),
            ("profile", config.profile.clone()),
        ]
    };
    let family = |name, help, value: f64| {
        let mut f = Family::gauge(name, help);
        f.push(labels(), value);
        f
    };
    let mut out = vec![
        family(
            "certgen_last_run_success",
            "1 when the last certgen run ended with exit code 0, else 0.",
            f64::from(u8::from(outcome.exit_code == 0)),
        ),
        family(
            "certgen_last_run_exit_code",
            "The exit code of the last certgen run (0 done, 1 verification failed, 2 bad input, 3 timed out, 4 contended, 5 API failure).",
            f64::from(outcome.exit_code),
        ),
        family(
            "certgen_last_run_timestamp_seconds",
            "When the last certgen run ended, in Unix time.",
            seconds(outcome.finished_at),
        ),
        family(
            "certgen_last_run_duration_seconds",
            "How long the last certgen run took, in seconds.",
            outcome.duration.as_secs_f64(),
        ),
        family(
            "certgen_last_run_writes",
            "The number of Secret writes the last certgen run made.",
            outcome.writes as f64,
        ),
        family(
            "certgen_last_run_dry_run",
            "1 when the last certgen run was a dry run (nothing written).",
            f64::from(u8::from(outcome.dry_run)),
        ),
    ];
    if let Some(r) = outcome.api_requests {
        let mut f = Family::gauge(
            "certgen_last_run_api_requests",
            "Kubernetes API requests the last certgen run made, by verb (retries included).",
        );
        for (verb, n) in [
            ("get", r.get),
            ("list", r.list),
            ("watch", r.watch),
            ("create", r.create),
            ("update", r.update),
            ("patch", r.patch),
            ("delete", r.delete),
            ("review", r.review),
        ] {
            let mut l = labels();
            l.push(("verb", verb.into()));
            f.push(l, n as f64);
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests;
