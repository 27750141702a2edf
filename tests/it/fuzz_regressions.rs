//! Regression tests for inputs the fuzzers found (see fuzz/README.md).
//!
//! The `replay_*` tests feed every committed seed (`fuzz/seeds/<target>/`) and every fixed crash
//! input (`fuzz/regressions/<target>/`) through the very checks the fuzz targets run:
//! `fuzz/src/lib.rs` is included here as a module, so a crash the fuzzer found stays fixed under
//! plain `cargo test`, without nightly or cargo-fuzz. The named tests below restate each crash
//! against certgen's API directly and assert the clean error certgen must return.
//!
//! Inputs of bugs not fixed yet go in `fuzz/regressions/open/<target>/` (not replayed; their
//! named tests are `#[ignore]`d). Once the bug is fixed: move the file up into
//! `fuzz/regressions/<target>/` and drop the `#[ignore]`.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/lib.rs"]
mod harness;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Every file of `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/`, sorted.
fn inputs(target: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("listing fuzz inputs").path();
            if path.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Runs `check` on every input of `target`, naming the input that panicked.
fn replay(target: &str, check: fn(&[u8])) {
    let files = inputs(target);
    assert!(
        !files.is_empty(),
        "no seeds for {target} in {}",
        fuzz_dir().display()
    );
    for path in files {
        let data = std::fs::read(&path).expect("reading a fuzz input");
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(
            outcome.is_ok(),
            "{target} panicked on {}; reproduce with `cargo +nightly fuzz run {target} {}`",
            path.display(),
            path.display()
        );
    }
}

#[test]
fn replay_pem_bundle() {
    replay("pem_bundle", harness::pem_bundle);
}

#[test]
fn replay_private_key() {
    replay("private_key", harness::private_key);
}

#[test]
fn replay_config() {
    replay("config", harness::config);
}

#[test]
fn replay_config_file() {
    replay("config_file", harness::config_file);
}

#[test]
fn replay_plan() {
    replay("plan", harness::plan);
}

// ---------------------------------------------------------------------------------------------
// Bugs the fuzz harness found (all fixed in 88e1137).

mod found {
    use std::collections::BTreeMap;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::time::Duration;

    use certgen::config::Config;
    use certgen::observe::Snapshot;
    use certgen::pki::{
        CaKey, Cert, bundle_pem, issue_ca, issue_leaf, load_signing_key, parse_single_cert,
    };
    use certgen::plan::{Options, plan};
    use certgen::secret::{Observed, StoredSecret, TYPE_TLS};
    use time::OffsetDateTime;
    use time::macros::datetime;

    use super::fuzz_dir;

    const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
    /// The last second `time` can represent: any positive delay added to it overflows.
    const END_OF_TIME: &str = "9999-12-31T23:59:59Z";

    fn profile() -> Config {
        crate::util::builtin_config()
    }

    /// A stored Secret; `written_at` (RFC 3339) is when the store says it was last written.
    fn secret(name: &str, data: &[(&str, Vec<u8>)], written_at: Option<&str>) -> Observed {
        use time::format_description::well_known::Rfc3339;
        Observed::Present(StoredSecret {
            name: name.to_string(),
            type_: TYPE_TLS.to_string(),
            data: data
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            owners: vec![],
            version: "1".into(),
            written_at: written_at.map(|w| OffsetDateTime::parse(w, &Rfc3339).unwrap()),
            divergent: vec![],
            certificate: None,
            writes: Vec::new(),
        })
    }

    fn pem(c: &Cert) -> Vec<u8> {
        c.pem().into_bytes()
    }

    /// Plans and requires a clean outcome: no panic, and an error (if any) naming the CA Secret.
    fn plan_cleanly(config: &Config, observed: &Snapshot, options: Options) {
        let object = |n: &str| format!("Secret {n}");
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            plan(config, observed, NOW, options, Default::default(), &object)
        }));
        match outcome {
            Err(_) => panic!("plan panicked instead of returning a plan or an Invalid error"),
            Ok(Err(invalid)) => assert_eq!(
                invalid.object,
                format!("Secret {}", config.ca.secret_name),
                "{invalid}"
            ),
            Ok(Ok(_)) => {}
        }
    }

    /// A staged rotation whose trust phase is complete (every bundle holds the pending and the
    /// active CA) and whose bundles the store says were written at `written_at`.
    fn trust_phase_done(config: &Config, written_at: &str) -> Snapshot {
        let (active, active_issued) = issue_ca(&config.ca.spec, NOW).unwrap();
        let (pending, pending_issued) = issue_ca(&config.ca.spec, NOW).unwrap();
        let trust = bundle_pem(&[pending.cert.clone(), active.cert.clone()]).into_bytes();
        let mut observed = Snapshot {
            ca: Some(secret(
                &config.ca.secret_name,
                &[
                    ("tls.crt", pem(&active.cert)),
                    ("tls.key", active_issued.key.expose().as_bytes().to_vec()),
                    ("ca.crt", trust.clone()),
                    ("next.crt", pem(&pending.cert)),
                    ("next.key", pending_issued.key.expose().as_bytes().to_vec()),
                ],
                None,
            )),
            secrets: BTreeMap::new(),
            ..Snapshot::default()
        };
        for t in &config.tls {
            let leaf = issue_leaf(&t.leaf, &active, NOW).unwrap();
            observed.secrets.insert(
                t.name.clone(),
                secret(
                    &t.name,
                    &[
                        ("tls.crt", pem(&leaf.cert)),
                        ("tls.key", leaf.key.expose().as_bytes().to_vec()),
                        ("ca.crt", trust.clone()),
                    ],
                    Some(written_at),
                ),
            );
        }
        observed
    }

    /// Fuzz target `plan` (input: fuzz/regressions/plan/trust-written-at-9999).
    ///
    /// The trust→leaves gate computed `since + delay` unchecked, with `since` from the stored
    /// Secret (then an annotation, now the store's write time): a value near the end of year
    /// 9999 panicked "resulting value is out of range" in `OffsetDateTime + Duration`. The stored
    /// time is whatever the store says, so `plan` must not trust it to be sane.
    #[test]
    fn plan_survives_trust_written_at_in_year_9999() {
        let config = profile();
        let observed = trust_phase_done(&config, END_OF_TIME);
        let options = Options {
            propagation_delay: Duration::from_secs(90),
            ..Options::default()
        };
        // The sane control: the same state with a real timestamp plans fine.
        let sane = trust_phase_done(&config, "2026-06-01T11:59:00Z");
        plan_cleanly(&config, &sane, options);
        plan_cleanly(&config, &observed, options);
    }

    /// Fuzz target `plan` (input: fuzz/regressions/plan/leaves-written-at-9999).
    ///
    /// The gate before a trust change drops the previous rotation's CA computed `at + delay`
    /// unchecked, with `at` the last leaf write: near the end of year 9999 it panicked.
    #[test]
    fn plan_survives_leaves_written_at_in_year_9999() {
        let config = profile();
        let (active, active_issued) = issue_ca(&config.ca.spec, NOW).unwrap();
        let (previous, _) = issue_ca(&config.ca.spec, NOW).unwrap();
        let observed = Snapshot {
            ca: Some(secret(
                &config.ca.secret_name,
                &[
                    ("tls.crt", pem(&active.cert)),
                    ("tls.key", active_issued.key.expose().as_bytes().to_vec()),
                    (
                        "ca.crt",
                        bundle_pem(&[active.cert.clone(), previous.cert.clone()]).into_bytes(),
                    ),
                ],
                Some(END_OF_TIME),
            )),
            secrets: BTreeMap::new(),
            ..Snapshot::default()
        };
        let mut observed = observed;
        for t in &config.tls {
            let leaf = issue_leaf(&t.leaf, &active, NOW).unwrap();
            let bundle = bundle_pem(&[active.cert.clone(), previous.cert.clone()]).into_bytes();
            observed.secrets.insert(
                t.name.clone(),
                secret(
                    &t.name,
                    &[
                        ("tls.crt", pem(&leaf.cert)),
                        ("tls.key", leaf.key.expose().as_bytes().to_vec()),
                        ("ca.crt", bundle),
                    ],
                    Some(END_OF_TIME),
                ),
            );
        }
        let options = Options {
            overwrite: true,
            propagation_delay: Duration::from_secs(90),
            ..Options::default()
        };
        plan_cleanly(&config, &observed, options);
    }

    /// The same root cause, reached from the command line: a huge
    /// `--propagation-delay` (e.g. `certgen --local DIR --propagation-delay 8000y` while a
    /// staged rotation's gate holds) panicked at the same `since + delay` in src/plan/staged.rs
    /// (exit 101).
    #[test]
    fn plan_survives_a_propagation_delay_past_year_9999() {
        let config = profile();
        let observed = trust_phase_done(&config, "2026-06-01T11:59:00Z");
        let options = Options {
            propagation_delay: Duration::from_secs(8_000 * 365 * 86_400),
            ..Options::default()
        };
        plan_cleanly(&config, &observed, options);
    }

    /// Fuzz target `private_key` (inputs: fuzz/regressions/private_key/*).
    ///
    /// `CaKey::from_pem` accepts PKCS#1 (`RSA PRIVATE KEY`) and SEC1 (`EC PRIVATE KEY`) keys,
    /// but `CaKey::key_pem` (documented "as PKCS#8 PEM") returned rcgen's `serialize_pem`, which
    /// wraps the DER it was given, PKCS#1 or SEC1, in a `PRIVATE KEY` (PKCS#8) label. Apply
    /// writes `pending.key_pem()` as the CA's `tls.key` when it promotes a staged rotation's
    /// pending CA (the plan's `Content::Key` in src/plan/writes.rs), so a `next.key` stored as
    /// PKCS#1 or SEC1 turned into a CA key no later run could read ("tls.key: no PEM private key
    /// found"), and only `--force` (an immediate rotation) got past it.
    #[test]
    fn ca_key_pem_of_pkcs1_or_sec1_key_reloads() {
        for (fixture, name) in [
            ("rsa-2048", "rsa-2048-pkcs1.pem"),
            ("ecdsa-p256", "ecdsa-p256-sec1.pem"),
        ] {
            let cert_pem = std::fs::read(fuzz_dir().join(format!("fixtures/{fixture}.crt")))
                .expect("fixture certificate");
            let cert = parse_single_cert(&cert_pem).unwrap();
            // The harness input is a selector byte, then the key PEM.
            let input = std::fs::read(fuzz_dir().join("regressions/private_key").join(name))
                .expect("regression input");
            let key_pem = &input[1..];
            let ca = CaKey::from_pem(cert.clone(), key_pem).expect("the key loads");
            let written = ca.key_pem();
            assert!(
                load_signing_key(&cert, written.expose().as_bytes()).is_ok(),
                "{fixture}: the key certgen writes back for a {name} CA key cannot be read again"
            );
        }
    }
}
