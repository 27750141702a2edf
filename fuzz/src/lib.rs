//! The checks behind certgen's fuzz targets, one public function per target, each taking the
//! raw fuzz input. The targets in `fuzz_targets/` only call these; `tests/it/fuzz_regressions.rs`
//! includes this file as a module and replays the seeds and every input in `fuzz/regressions/`
//! through the same functions, so a crash found here stays fixed under `cargo test`.
//!
//! A check panics (that is the finding) when certgen panics, or when one of the invariants
//! below does not hold. Errors certgen returns are the expected outcome for garbage input.
//!
//! This file must build both in the fuzz crate and inside certgen's `it` test binary: it uses
//! only certgen, `time` and `x509-parser`, and no `libfuzzer-sys`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use certgen::config::{
    Config, ConfigFile, Env, MAX_CONFIG, Overrides, Source, Strategy, read_bounded,
};
use certgen::observe::Snapshot;
use certgen::pki::{
    CaKey, Cert, KeyAlgorithm, KeyError, MAX_BUNDLE, bundle_pem, check_bundle, choose_prior_ca,
    issue_ca, issue_leaf, load_signing_key, parse_cert_chain, parse_single_cert, rotation_bundle,
    steady_bundle,
};
use certgen::plan::{Action, Kind, Known, Options, Phase};
use certgen::secret::{Observed, StoredSecret, TYPE_OPAQUE, TYPE_TLS};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The clock of checks that take no time from their input: 2026-06-01 12:00 UTC.
pub const NOW: OffsetDateTime = time::macros::datetime!(2026-06-01 12:00 UTC);

// ---------------------------------------------------------------------------------------------
// pem_bundle

/// Signature checks are costly: only this many certificates of a chain go through them.
const CHECKED: usize = 4;

/// Certificate parsing and the trust-bundle rules on arbitrary bytes.
///
/// The input is tried twice: as a PEM document (`parse_cert_chain`, what `tls.crt` and `ca.crt`
/// go through) and as one raw DER certificate (`Cert::from_der`, so the mutator works on X.509
/// structure directly instead of base64). Whatever parses goes through `check_bundle`,
/// `steady_bundle`, `choose_prior_ca`, `rotation_bundle` and the PEM round trip.
pub fn pem_bundle(data: &[u8]) {
    match parse_cert_chain(data) {
        Ok(certs) => {
            assert!(!certs.is_empty(), "Ok(chain) is never empty");
            match parse_single_cert(data) {
                Ok(single) => {
                    assert_eq!(certs.len(), 1);
                    assert_eq!(single, certs[0]);
                }
                Err(_) => assert_ne!(certs.len(), 1, "one certificate parses as a single"),
            }
            exercise_certs(&certs);
        }
        Err(e) => {
            assert!(parse_single_cert(data).is_err());
            let _ = e.to_string();
        }
    }
    if let Ok(cert) = Cert::from_der(data) {
        exercise_certs(std::slice::from_ref(&cert));
    }
}

fn exercise_certs(certs: &[Cert]) {
    let _ = check_bundle(certs).map_err(|e| e.to_string());

    // PEM round trip: what certgen writes back must parse to the same certificates.
    let pem = bundle_pem(certs);
    let again = parse_cert_chain(pem.as_bytes()).expect("certgen's own PEM parses");
    assert_eq!(again, certs, "bundle_pem round trip");

    let checked = &certs[..certs.len().min(CHECKED)];
    for cert in checked {
        let _ = format!("{cert:?}");
        assert_eq!(cert.fingerprint_hex().len(), 64);
        assert_eq!(cert.short_fingerprint().len(), 16);
        assert_eq!(parse_single_cert(cert.pem().as_bytes()).as_ref(), Ok(cert));
        for t in [NOW, cert.not_before, cert.not_after] {
            assert!(!(cert.is_valid_at(t) && cert.is_expired_at(t)));
            let steady = steady_bundle(cert, certs, t);
            assert!(!steady.is_empty() && steady.len() <= MAX_BUNDLE);
            assert_eq!(&steady[0], cert, "the active CA comes first");
            if let Some(prior) = steady.get(1) {
                assert_ne!(prior, cert);
                assert!(prior.is_ca && !prior.is_expired_at(t));
            }
        }
        for other in checked {
            let _ = cert.signed(other);
        }
    }
    if let Some(prior) = choose_prior_ca(checked, checked, NOW) {
        assert!(prior.is_ca && !prior.is_expired_at(NOW));
        assert!(checked.contains(&prior));
        let bundle = rotation_bundle(&checked[0], Some(&prior));
        assert!(bundle.len() <= MAX_BUNDLE);
    }
}

// ---------------------------------------------------------------------------------------------
// private_key

struct Fixture {
    cert: Cert,
    /// The raw public key bits of the certificate's SubjectPublicKeyInfo.
    public_key: Vec<u8>,
}

/// CA certificates certgen issued, one per algorithm (see `fuzz/gen-seeds --fixtures`).
static FIXTURES: LazyLock<Vec<Fixture>> = LazyLock::new(|| {
    [
        include_bytes!("../fixtures/ecdsa-p256.crt").as_slice(),
        include_bytes!("../fixtures/ecdsa-p384.crt").as_slice(),
        include_bytes!("../fixtures/ed25519.crt").as_slice(),
        include_bytes!("../fixtures/rsa-2048.crt").as_slice(),
    ]
    .into_iter()
    .map(|pem| {
        let cert = parse_single_cert(pem).expect("fixture certificate parses");
        let (_, x509) = X509Certificate::from_der(cert.der()).expect("fixture is X.509");
        let public_key = x509.public_key().subject_public_key.data.to_vec();
        Fixture { cert, public_key }
    })
    .collect()
});

const KEY_LABELS: [&str; 3] = ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"];

/// `load_signing_key` and `CaKey::from_pem` (which the planner runs on every stored CA) on
/// arbitrary key bytes, against fixed CA certificates of each algorithm certgen issues.
///
/// Byte 0 picks the certificate (low two bits: P-256, P-384, Ed25519, RSA-2048) and the
/// encoding (bits 2-4): 0 means the rest is PEM as stored in `tls.key`; 1 to 3 wrap the rest,
/// as DER, in a `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block so that the mutator
/// works on the DER structure.
pub fn private_key(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let fixture = &FIXTURES[usize::from(selector & 3)];
    let encoding = usize::from((selector >> 2) & 7);
    let wrapped;
    let key_pem: &[u8] = match encoding.checked_sub(1).and_then(|i| KEY_LABELS.get(i)) {
        Some(label) => {
            wrapped = pem_block(label, rest);
            wrapped.as_bytes()
        }
        None => rest,
    };

    match load_signing_key(&fixture.cert, key_pem) {
        Ok(pair) => {
            assert_eq!(
                pair.public_key_raw(),
                fixture.public_key.as_slice(),
                "a loaded key matches the certificate"
            );
            // A loaded CA key is written back (a staged rotation's promotion stores the pending
            // CA's key with `key_pem`): what certgen writes must load again.
            let ca = CaKey::from_pem(fixture.cert.clone(), key_pem)
                .expect("CaKey::from_pem agrees with load_signing_key");
            let stored = ca.key_pem();
            assert!(
                load_signing_key(&fixture.cert, stored.expose().as_bytes()).is_ok(),
                "CaKey::key_pem of a loaded key loads again"
            );
        }
        Err(
            e @ (KeyError::Unreadable
            | KeyError::Mismatch
            | KeyError::TooWeak(_)
            | KeyError::Several(_)),
        ) => {
            let _ = e.to_string();
            assert!(CaKey::from_pem(fixture.cert.clone(), key_pem).is_err());
        }
    }
}

/// A PEM block with 64-column base64, as OpenSSL writes it.
pub fn pem_block(label: &str, der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len() * 4 / 3 + 4);
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

// ---------------------------------------------------------------------------------------------
// config

/// A scratch file per process and thread (`-fork`/`-jobs` run several processes, `cargo test`
/// several threads).
fn scratch_file() -> PathBuf {
    let dir = PathBuf::from("/dev/shm");
    let dir = if dir.is_dir() {
        dir
    } else {
        std::env::temp_dir()
    };
    let thread: String = format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    dir.join(format!(
        "certgen-fuzz-config-{}-{thread}.yaml",
        std::process::id()
    ))
}

/// Configuration on arbitrary text: `ConfigFile::parse`, then the whole of `Config::resolve`
/// (read, parse, `flag > env > file` merge, validation, template rendering) from a file, since
/// the validation behind `resolve` is not public on its own.
///
/// Lines starting `#!ns=`, `#!cd=`, `#!env-ns=`, `#!env-eg-ns=` or `#!env-cd=` set the
/// `--namespace` and `--cluster-domain` overrides and the environment variables they stand
/// for; they are YAML comments, so the file stays the same YAML.
///
/// A configuration that resolves must be usable: its CA and every TLS leaf can be issued (RSA
/// is swapped for ECDSA P-256 to keep the check fast), the leaves carry exactly the rendered
/// SANs, and a plan over an empty store creates every Secret.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = ConfigFile::parse(text);

    let mut overrides = Overrides::default();
    let mut env = Env::default();
    for line in text.lines() {
        let Some((key, value)) = line.strip_prefix("#!").and_then(|l| l.split_once('=')) else {
            continue;
        };
        let value = Some(value.to_string());
        match key {
            "ns" => overrides.namespace = value,
            "cd" => overrides.cluster_domain = value,
            "env-ns" => env.certgen_namespace = value,
            "env-eg-ns" => env.envoy_gateway_namespace = value,
            "env-cd" => env.cluster_domain = value,
            _ => {}
        }
    }

    let scratch = scratch_file();
    std::fs::write(&scratch, data).expect("writing the scratch config file");
    let resolved = Config::resolve(&Source::File(scratch.clone()), &overrides, &env);
    let _ = std::fs::remove_file(&scratch);
    let config = match (parsed, resolved) {
        (Err(_), Ok(_)) => panic!("Config::resolve accepted text ConfigFile::parse rejects"),
        (_, Err(e)) => {
            assert!(!e.message.is_empty());
            let _ = e.to_string();
            return;
        }
        (Ok(_), Ok(config)) => config,
    };
    check_usable(&config);
}

/// The config file reader on what stands at `--config`: byte 0 picks what the rest becomes
/// (mod 7): 0 a regular file holding it (then the [`config`] checks); 1 a regular file grown
/// past the 4 MiB bound (sparse) with it at the start; 2 a FIFO nobody writes; 3 a Unix socket;
/// 4 a directory; 5 a link to `/dev/zero`; 6 a link to a regular file holding it.
///
/// Everything but a regular file within the bound is refused with a message and at once: a
/// FIFO or device is never read (a hang is a fuzzer timeout), an oversized file never loaded
/// whole.
pub fn config_file(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let scratch = scratch_file().with_extension("node");
    let _ = std::fs::remove_file(&scratch);
    let _ = std::fs::remove_dir(&scratch);
    let target = scratch.with_extension("target");
    let kind = selector % 7;
    match kind {
        0 => return config(rest),
        1 => {
            std::fs::write(&scratch, rest).unwrap();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&scratch)
                .unwrap();
            f.set_len(MAX_CONFIG + 1 + rest.len() as u64).unwrap();
        }
        2 => rustix::fs::mknodat(
            rustix::fs::CWD,
            &scratch,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap(),
        3 => drop(std::os::unix::net::UnixListener::bind(&scratch).unwrap()),
        4 => std::fs::create_dir(&scratch).unwrap(),
        5 => std::os::unix::fs::symlink("/dev/zero", &scratch).unwrap(),
        _ => {
            std::fs::write(&target, rest).unwrap();
            std::os::unix::fs::symlink(&target, &scratch).unwrap();
        }
    }
    let read = read_bounded(&scratch, MAX_CONFIG);
    let resolved = Config::resolve(
        &Source::File(scratch.clone()),
        &Overrides::default(),
        &Env::default(),
    );
    let _ = std::fs::remove_file(&scratch);
    let _ = std::fs::remove_dir(&scratch);
    let _ = std::fs::remove_file(&target);
    match kind {
        // A link to a regular file reads what it points to, as a plain file would.
        6 => assert_eq!(
            read.ok().as_deref().map(str::as_bytes),
            std::str::from_utf8(rest).ok().map(str::as_bytes)
        ),
        1 => {
            let e = read.expect_err("an oversized file is refused");
            assert!(e.contains("larger than 4 MiB"), "{e}");
            assert!(
                resolved
                    .expect_err("refused")
                    .message
                    .contains("larger than 4 MiB")
            );
        }
        _ => {
            let e = read.expect_err("a file that is not regular is refused");
            assert!(e.contains("not a regular file"), "{e}");
            assert!(
                resolved
                    .expect_err("refused")
                    .message
                    .contains("not a regular file")
            );
        }
    }
}

fn fast(alg: KeyAlgorithm) -> KeyAlgorithm {
    match alg {
        KeyAlgorithm::Rsa2048 | KeyAlgorithm::Rsa3072 | KeyAlgorithm::Rsa4096 => {
            KeyAlgorithm::EcdsaP256
        }
        other => other,
    }
}

fn check_usable(config: &Config) {
    assert!(!config.tls.is_empty() || !config.hmac.is_empty());
    let mut ca_spec = config.ca.spec.clone();
    ca_spec.key_algorithm = fast(ca_spec.key_algorithm);
    let (ca, _) = issue_ca(&ca_spec, NOW).expect("a resolved config's CA can be issued");
    assert!(ca.cert.is_ca && ca.cert.is_valid_at(NOW));
    for t in &config.tls {
        let mut spec = t.leaf.clone();
        spec.key_algorithm = fast(spec.key_algorithm);
        let leaf = issue_leaf(&spec, &ca, NOW)
            .unwrap_or_else(|e| panic!("a resolved config's leaf {:?} fails: {e}", t.name));
        assert_eq!(leaf.cert.dns_names, spec.dns_names, "{}: DNS SANs", t.name);
        assert_eq!(
            leaf.cert.ip_addresses, spec.ip_addresses,
            "{}: IP SANs",
            t.name
        );
        assert!(ca.cert.signed(&leaf.cert));
    }
    let planned = certgen::plan::plan(
        config,
        &Snapshot::default(),
        NOW,
        Options::default(),
        Known::default(),
        &|n| n.to_string(),
    )
    .expect("planning over an empty store succeeds");
    let ca_action = if config.tls.is_empty() {
        Action::Keep
    } else {
        Action::Create
    };
    assert_eq!(planned.ca.action, ca_action);
    assert_eq!(planned.secrets.len(), config.tls.len() + config.hmac.len());
    assert!(planned.secrets.iter().all(|s| s.action == Action::Create));
}

// ---------------------------------------------------------------------------------------------
// plan

/// The earliest and latest `now` a `plan` input may ask for (1970 to 2200): a real clock is
/// never outside that window.
const NOW_RANGE: std::ops::RangeInclusive<i64> = 0..=7_258_118_400;

/// The built-in profile every `plan` input is planned against.
pub static PROFILE: LazyLock<Config> = LazyLock::new(|| {
    Config::resolve(
        &Source::Profile("envoy-gateway".into()),
        &Overrides::default(),
        &Env::default(),
    )
    .expect("the built-in profile resolves")
});

/// A decoded `plan` input.
#[derive(Debug)]
pub struct PlanInput {
    pub now: OffsetDateTime,
    pub options: Options,
    /// What the run learned (probes that confirmed the pending CA).
    pub known: Known,
    pub observed: Snapshot,
}

/// Decodes a `plan` input against `config` (whose Secret names decide the default types).
///
/// The format is text with binary-safe values:
///
/// ```text
/// now=1795000000 delay=90 force overwrite immediate rotate-hmac     <- header line, any order
/// @@envoy-gateway-ca data:tls.crt                                    <- section header
/// -----BEGIN CERTIFICATE-----                                        <- value, up to the next
/// ...                                                                   "\n@@" or the end
/// @@envoy-gateway-ca ann:certgen.dev/trust-written-at
/// 2026-06-01T12:00:00Z
/// ```
///
/// Section fields: `data:KEY`, `ann:KEY`, `label:KEY`, `owner`, `type` (the Secret's type;
/// default `kubernetes.io/tls` for the CA and TLS Secrets, `Opaque` otherwise) and `present`
/// (value ignored). A Secret any section names is present; the others are absent. `now` is
/// seconds since 1970 (default [`NOW`]), `delay` the propagation delay in seconds (default 0);
/// `trust-confirmed` says probes confirmed the pending CA of the CA Secret's `next.crt`.
/// Unknown header tokens and fields are ignored, so every byte string decodes to something.
pub fn decode_plan_input(config: &Config, data: &[u8]) -> PlanInput {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i..]),
        None => (data, &data[data.len()..]),
    };
    let mut options = Options::default();
    let mut known = Known::default();
    let mut now = NOW;
    let mut trust_confirmed = false;
    for token in String::from_utf8_lossy(header).split_ascii_whitespace() {
        match token.split_once('=') {
            Some(("now", v)) => {
                if let Ok(secs) = v.parse::<i64>()
                    && NOW_RANGE.contains(&secs)
                    && let Ok(t) = OffsetDateTime::from_unix_timestamp(secs)
                {
                    now = t;
                }
            }
            Some(("delay", v)) => {
                if let Ok(secs) = v.parse::<u64>() {
                    options.propagation_delay = std::time::Duration::from_secs(secs);
                }
            }
            _ => match token {
                "force" => options.force = true,
                "overwrite" => options.overwrite = true,
                "immediate" => options.strategy = Strategy::Immediate,
                "rotate-hmac" => options.rotate_hmac = true,
                "trust-confirmed" => trust_confirmed = true,
                _ => {}
            },
        }
    }

    let mut secrets: BTreeMap<String, StoredSecret> = BTreeMap::new();
    let ca_name = config.ca.secret_name.clone();
    let default_type = |name: &str| {
        if name == ca_name || config.tls.iter().any(|t| t.name == name) {
            TYPE_TLS
        } else {
            TYPE_OPAQUE
        }
    };
    for section in split_sections(body) {
        let (head, value) = match section.iter().position(|&b| b == b'\n') {
            Some(i) => (&section[..i], &section[i + 1..]),
            None => (section, &section[section.len()..]),
        };
        let head = String::from_utf8_lossy(head);
        let (name, field) = head.split_once(' ').unwrap_or((&head, ""));
        if name.is_empty() {
            continue;
        }
        let secret = secrets
            .entry(name.to_string())
            .or_insert_with(|| StoredSecret {
                name: name.to_string(),
                type_: default_type(name).to_string(),
                data: BTreeMap::new(),
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                owners: Vec::new(),
                version: "1".to_string(),
                written_at: None,
                divergent: Vec::new(),
                certificate: None,
                writes: Vec::new(),
            });
        let text = || String::from_utf8_lossy(value).into_owned();
        if let Some(key) = field.strip_prefix("data:") {
            secret.data.insert(key.to_string(), value.to_vec());
        } else if let Some(key) = field.strip_prefix("ann:") {
            secret.annotations.insert(key.to_string(), text());
        } else if let Some(key) = field.strip_prefix("label:") {
            secret.labels.insert(key.to_string(), text());
        } else if field == "written-at" {
            secret.written_at = time::OffsetDateTime::parse(
                text().trim(),
                &time::format_description::well_known::Rfc3339,
            )
            .ok();
        } else if field == "owner" {
            secret.owners.push(text());
        } else if field == "type" {
            secret.type_ = text();
        }
    }

    if trust_confirmed {
        // Probes confirmed the pending CA in `next.crt` (or, when it does not parse, some other
        // CA: a confirmation that must not open the gate).
        known.trust_confirmed = Some(
            secrets
                .get(&ca_name)
                .and_then(|s| s.data.get("next.crt"))
                .and_then(|pem| parse_single_cert(pem).ok())
                .map_or([0xa5; 32], |c| c.fingerprint()),
        );
    }
    let mut observed = Snapshot::default();
    for (name, secret) in secrets {
        if name == ca_name {
            observed.ca = Some(Observed::Present(secret));
        } else {
            observed.secrets.insert(name, Observed::Present(secret));
        }
    }
    PlanInput {
        now,
        options,
        known,
        observed,
    }
}

/// Splits the body (which starts at the header's newline) at every `"\n@@"`.
fn split_sections(body: &[u8]) -> Vec<&[u8]> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= body.len() {
        if &body[i..i + 3] == b"\n@@" {
            starts.push(i);
            i += 3;
        } else {
            i += 1;
        }
    }
    starts
        .iter()
        .enumerate()
        .map(|(n, &start)| &body[start + 3..starts.get(n + 1).copied().unwrap_or(body.len())])
        .collect()
}

/// The planner on arbitrary stored Secrets of the built-in envoy-gateway profile (input format:
/// [`decode_plan_input`]). `plan` must return `Ok` or `Err(Invalid)` and never panic; on top:
/// - an `Invalid` names an object, a problem and a fix;
/// - with `--force`, only a Secret of the wrong type is an error (everything else is repaired);
/// - a plan covers every configured Secret, in order;
/// - while a gate holds (`Phase::Gate`), neither the CA nor any TLS Secret is written, and a
///   trust-to-leaves gate never holds once probes confirmed its pending CA;
/// - planning is deterministic.
pub fn plan(data: &[u8]) {
    let config = &*PROFILE;
    let input = decode_plan_input(config, data);
    let object = |n: &str| format!("Secret {n}");
    let result = certgen::plan::plan(
        config,
        &input.observed,
        input.now,
        input.options,
        input.known.clone(),
        &object,
    );
    let again = certgen::plan::plan(
        config,
        &input.observed,
        input.now,
        input.options,
        input.known.clone(),
        &object,
    );
    assert_eq!(format!("{result:?}"), format!("{again:?}"), "deterministic");

    let types_right = input
        .observed
        .ca
        .iter()
        .chain(input.observed.secrets.values())
        .filter_map(Observed::present)
        .all(|s| {
            let want =
                if s.name == config.ca.secret_name || config.tls.iter().any(|t| t.name == s.name) {
                    TYPE_TLS
                } else if config.hmac.iter().any(|h| h.name == s.name) {
                    TYPE_OPAQUE
                } else {
                    return true;
                };
            s.type_ == want
        });

    let planned = match result {
        Err(invalid) => {
            assert!(invalid.object.starts_with("Secret "));
            assert!(!invalid.problem.is_empty() && !invalid.fix.is_empty());
            assert!(
                !(input.options.force && types_right),
                "--force must repair everything but a wrong type: {invalid}"
            );
            return;
        }
        Ok(p) => p,
    };

    assert_eq!(planned.ca.name, config.ca.secret_name);
    let names: Vec<&str> = planned.secrets.iter().map(|s| s.name.as_str()).collect();
    let want: Vec<&str> = config
        .tls
        .iter()
        .map(|t| t.name.as_str())
        .chain(config.hmac.iter().map(|h| h.name.as_str()))
        .collect();
    assert_eq!(names, want, "every configured Secret is planned, in order");
    if let Phase::Gate {
        reason, pending, ..
    } = &planned.phase
    {
        assert!(!reason.is_empty());
        let pending_valid = planned
            .ca
            .pending
            .as_ref()
            .is_none_or(|p| p.cert.not_before <= input.now);
        assert!(
            pending.is_none() || *pending != input.known.trust_confirmed || !pending_valid,
            "probes that confirmed a valid pending CA open its gate"
        );
        assert_eq!(planned.ca.action, Action::Keep, "a gate writes no CA");
        for s in planned.secrets.iter().filter(|s| s.kind == Kind::Tls) {
            assert!(!s.action.writes(), "a gate writes no leaf: {s:?}");
        }
    }
    if planned.ca.action == Action::Promote {
        assert!(planned.ca.pending.is_some());
    }
    let _ = planned.writes();
}
