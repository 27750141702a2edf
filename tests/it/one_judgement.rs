//! One judgement (issue 32): `certgen check` exits 0 exactly when a plain run would write
//! nothing and refuse nothing. A property test over generated local stores, through the
//! binary as users run it: each store is judged by `certgen check`, planned by a plain
//! `certgen --dry-run`, and run for real by a plain `certgen` on a copy; the three must agree.
//!
//! A store is certgen's own installation, optionally part of a staged `--overwrite` (killed
//! after any of its writes), then up to three edits another writer could make: a bundle
//! holding a CA twice, an expired or foreign CA, garbage or a private key; a leaf of another
//! CA, expired, or with other SANs; a key missing, empty or another's; the CA key removed or a
//! leaf in its place; a pending CA of another; an HMAC key short or empty; a file over the 1 MiB
//! bound; a Secret deleted; a visible file replaced by a copy or by something else; a private
//! key file made readable by others.
//! `CERTGEN_JUDGEMENT_CASES` sets how many stores (default 96), `CERTGEN_JUDGEMENT_SEED` which
//! (default: a fixed seed, so CI replays what it found).

use std::path::Path;
use std::process::Command;

use certgen::config::Config;
use certgen::pki::{CaKey, Cert, bundle_pem, issue_ca, issue_leaf};
use proptest::prelude::*;
use proptest::test_runner::{Config as Cases, TestRunner};
use time::OffsetDateTime;

use crate::util::{KILLED, Run, builtin_config, certgen, kill_after_write, local, tempdir, tree};

/// An edit of one Secret of the store.
#[derive(Debug, Clone)]
enum Edit {
    /// `ca.crt` of a TLS Secret (index into the profile's TLS Secrets; the CA Secret with
    /// `None`) holds this.
    Bundle(Option<usize>, BundleEdit),
    /// A TLS Secret's leaf is replaced.
    Leaf(usize, LeafEdit),
    /// A TLS Secret's key is removed, emptied or another's.
    Key(usize, KeyEdit),
    /// The CA Secret: its key removed (another tool's CA), a leaf in its place, another
    /// tool's pending CA.
    Ca(CaEdit),
    /// The HMAC Secret's key: shorter than asked for, or empty.
    Hmac(bool),
    /// A file over the 1 MiB bound.
    Oversize(usize),
    /// A Secret deleted (index into every Secret's name).
    Delete(usize),
    /// A visible file of a TLS Secret replaced by a copy (true) or by another file (false).
    Diverge(usize, bool),
    /// A private key file made readable by others (index into every Secret's name).
    Exposed(usize),
}

#[derive(Debug, Clone, Copy)]
enum BundleEdit {
    Twice,
    WithExpired,
    WithForeign,
    ForeignOnly,
    Garbage,
    WithPrivateKey,
}

#[derive(Debug, Clone, Copy)]
enum LeafEdit {
    Foreign,
    Expired,
    OtherSans,
    Garbage,
}

#[derive(Debug, Clone, Copy)]
enum KeyEdit {
    Removed,
    Empty,
    Another,
}

#[derive(Debug, Clone, Copy)]
enum CaEdit {
    KeyRemoved,
    Leaf,
    ForeignPending,
}

fn edit() -> impl Strategy<Value = Edit> {
    let tls = 0..3usize;
    prop_oneof![
        (
            prop::option::weighted(0.8, tls.clone()),
            prop_oneof![
                Just(BundleEdit::Twice),
                Just(BundleEdit::WithExpired),
                Just(BundleEdit::WithForeign),
                Just(BundleEdit::ForeignOnly),
                Just(BundleEdit::Garbage),
                Just(BundleEdit::WithPrivateKey),
            ]
        )
            .prop_map(|(i, e)| Edit::Bundle(i, e)),
        (
            tls.clone(),
            prop_oneof![
                Just(LeafEdit::Foreign),
                Just(LeafEdit::Expired),
                Just(LeafEdit::OtherSans),
                Just(LeafEdit::Garbage),
            ]
        )
            .prop_map(|(i, e)| Edit::Leaf(i, e)),
        (
            tls.clone(),
            prop_oneof![
                Just(KeyEdit::Removed),
                Just(KeyEdit::Empty),
                Just(KeyEdit::Another)
            ]
        )
            .prop_map(|(i, e)| Edit::Key(i, e)),
        prop_oneof![
            Just(CaEdit::KeyRemoved),
            Just(CaEdit::Leaf),
            Just(CaEdit::ForeignPending)
        ]
        .prop_map(Edit::Ca),
        any::<bool>().prop_map(Edit::Hmac),
        tls.clone().prop_map(Edit::Oversize),
        (0..5usize).prop_map(Edit::Delete),
        (tls, any::<bool>()).prop_map(|(i, c)| Edit::Diverge(i, c)),
        (0..5usize).prop_map(Edit::Exposed),
    ]
}

/// A store: how far a staged `--overwrite` got (killed after that many writes; `None`: no
/// rotation), then the edits.
#[derive(Debug, Clone)]
struct Store {
    overwrite: Option<usize>,
    edits: Vec<Edit>,
}

fn store() -> impl Strategy<Value = Store> {
    (
        prop::option::weighted(0.4, 1..=14usize),
        prop::collection::vec(edit(), 0..=3),
    )
        .prop_map(|(overwrite, edits)| Store { overwrite, edits })
}

/// Certificates another writer may bring, made once per test.
struct Foreign {
    config: Config,
    other_ca: CaKey,
    expired_ca: Cert,
}

impl Foreign {
    fn new() -> Self {
        let config = builtin_config();
        let now = OffsetDateTime::now_utc();
        let (other_ca, _) = issue_ca(&config.ca.spec, now - time::Duration::DAY).unwrap();
        let short = certgen::pki::CaSpec {
            validity: std::time::Duration::from_secs(3_600),
            ..config.ca.spec.clone()
        };
        let (expired, _) = issue_ca(&short, now - time::Duration::DAY).unwrap();
        Self {
            config,
            other_ca,
            expired_ca: expired.cert,
        }
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

/// Writes `bytes` through the visible name (the link into certgen's copy, as a tool writing
/// the file would), creating it when missing.
fn put(path: &Path, bytes: &[u8]) {
    if path.parent().is_some_and(Path::exists) {
        std::fs::write(path, bytes).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
}

fn apply(dir: &Path, e: &Edit, f: &Foreign) {
    let tls = &f.config.tls;
    let ca_dir = dir.join(&f.config.ca.secret_name);
    let active = certgen::pki::parse_single_cert(&read(&ca_dir.join("tls.crt"))).ok();
    match e {
        Edit::Bundle(i, b) => {
            let d = match i {
                Some(i) => dir.join(&tls[*i].name),
                None => ca_dir.clone(),
            };
            let current = read(&d.join("ca.crt"));
            let current_pem = String::from_utf8_lossy(&current).to_string();
            let bytes = match b {
                BundleEdit::Twice => format!("{current_pem}{current_pem}").into_bytes(),
                BundleEdit::WithExpired => {
                    format!("{current_pem}{}", f.expired_ca.pem()).into_bytes()
                }
                BundleEdit::WithForeign => {
                    format!("{current_pem}{}", f.other_ca.cert.pem()).into_bytes()
                }
                BundleEdit::ForeignOnly => bundle_pem(std::slice::from_ref(&f.other_ca.cert)).into_bytes(),
                BundleEdit::Garbage => b"not a bundle\n".to_vec(),
                BundleEdit::WithPrivateKey => format!(
                    "{current_pem}-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"
                )
                .into_bytes(),
            };
            put(&d.join("ca.crt"), &bytes);
        }
        Edit::Leaf(i, l) => {
            let t = &tls[*i];
            let d = dir.join(&t.name);
            let now = OffsetDateTime::now_utc();
            let (cert, key) = match l {
                LeafEdit::Garbage => {
                    put(&d.join("tls.crt"), b"garbage");
                    return;
                }
                LeafEdit::Foreign => {
                    let leaf = issue_leaf(&t.leaf, &f.other_ca, now).unwrap();
                    (leaf.cert, leaf.key)
                }
                LeafEdit::Expired | LeafEdit::OtherSans => {
                    let Some(ca_key) =
                        certgen::pki::parse_single_cert(&read(&ca_dir.join("tls.crt")))
                            .ok()
                            .and_then(|c| {
                                certgen::pki::CaKey::from_pem(c, &read(&ca_dir.join("tls.key")))
                                    .ok()
                            })
                    else {
                        return;
                    };
                    let mut spec = t.leaf.clone();
                    let at = match l {
                        LeafEdit::Expired => {
                            spec.validity = std::time::Duration::from_secs(3_600);
                            now - time::Duration::hours(2)
                        }
                        _ => {
                            spec.dns_names.push("other.example".into());
                            now
                        }
                    };
                    match certgen::pki::issue_leaf(&spec, &ca_key, at) {
                        Ok(leaf) => (leaf.cert, leaf.key),
                        Err(_) => return,
                    }
                }
            };
            put(&d.join("tls.crt"), cert.pem().as_bytes());
            put(&d.join("tls.key"), key.expose().as_bytes());
        }
        Edit::Key(i, k) => {
            let path = dir.join(&tls[*i].name).join("tls.key");
            match k {
                KeyEdit::Removed => {
                    let _ = std::fs::remove_file(&path);
                }
                KeyEdit::Empty => put(&path, b""),
                KeyEdit::Another => {
                    let other =
                        issue_leaf(&tls[*i].leaf, &f.other_ca, OffsetDateTime::now_utc()).unwrap();
                    put(&path, other.key.expose().as_bytes());
                }
            }
        }
        Edit::Ca(c) => match c {
            CaEdit::KeyRemoved => put(&ca_dir.join("tls.key"), b""),
            CaEdit::Leaf => {
                let leaf =
                    issue_leaf(&tls[0].leaf, &f.other_ca, OffsetDateTime::now_utc()).unwrap();
                put(&ca_dir.join("tls.crt"), leaf.cert.pem().as_bytes());
                put(&ca_dir.join("tls.key"), leaf.key.expose().as_bytes());
            }
            CaEdit::ForeignPending => {
                if ca_dir.join("..data").exists() {
                    put(
                        &ca_dir.join("..data/next.crt"),
                        f.other_ca.cert.pem().as_bytes(),
                    );
                    put(
                        &ca_dir.join("..data/next.key"),
                        f.other_ca.key_pem().expose().as_bytes(),
                    );
                    for k in ["next.crt", "next.key"] {
                        let _ = std::fs::remove_file(ca_dir.join(k));
                        let _ = std::os::unix::fs::symlink(format!("..data/{k}"), ca_dir.join(k));
                    }
                }
                let _ = active;
            }
        },
        Edit::Hmac(short) => {
            let h = &f.config.hmac[0];
            let bytes = if *short { vec![7; 8] } else { vec![] };
            put(&dir.join(&h.name).join(&h.key), &bytes);
        }
        Edit::Oversize(i) => put(
            &dir.join(&tls[*i].name).join("ca.crt"),
            &vec![b'#'; (1 << 20) + 1],
        ),
        Edit::Delete(i) => {
            let names = f.config.secret_names();
            let _ = std::fs::remove_dir_all(dir.join(names[*i % names.len()]));
        }
        Edit::Exposed(i) => {
            use std::os::unix::fs::PermissionsExt;
            let names = f.config.secret_names();
            let name = names[*i % names.len()];
            let key = match f.config.hmac.iter().find(|h| h.name == name) {
                Some(h) => h.key.clone(),
                None => "tls.key".into(),
            };
            let path = dir.join(name).join("..data").join(key);
            if path.exists() {
                let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
            }
        }
        Edit::Diverge(i, copy) => {
            let path = dir.join(&tls[*i].name).join("tls.crt");
            let content = read(&path);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&path).unwrap();
                let bytes = if *copy { content } else { b"theirs".to_vec() };
                std::fs::write(&path, bytes).unwrap();
            }
        }
    }
}

/// Every file's bytes and mode under `dir`, links by target.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    tree(dir)
        .into_iter()
        .filter(|(p, _)| !p.ends_with(certgen::store::LOCK_FILE))
        .map(|(p, bytes)| {
            let mode = std::fs::symlink_metadata(dir.join(&p))
                .map(|m| m.permissions().mode())
                .unwrap_or(0);
            (p, bytes, mode)
        })
        .collect()
}

/// What each of the three said about one store.
#[derive(Debug)]
struct Judged {
    check: i32,
    next_run: serde_json::Value,
    /// Each row's status and how many problems it lists.
    statuses: Vec<(String, usize)>,
    dry_run: i32,
    planned: Vec<String>,
    /// Key files the dry run says a run makes 0600.
    key_modes: usize,
    run: i32,
    run_writes: u64,
    changed: bool,
}

fn judge(dir: &Path, copy: &Path) -> Judged {
    let check = Run::of(
        certgen()
            .args([
                "check",
                "--local",
                dir.to_str().unwrap(),
                "--output",
                "json",
            ])
            .arg("-q"),
    );
    let dry = Run::of(local(dir).arg("--dry-run"));
    let planned: Vec<String> = if dry.code == 0 {
        dry.json()["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["action"] != "keep")
            .map(|e| {
                format!(
                    "{} {}",
                    e["action"].as_str().unwrap(),
                    e["secret"].as_str().unwrap()
                )
            })
            .collect()
    } else {
        vec![]
    };
    let key_modes = if dry.code == 0 {
        dry.json()["keyModes"].as_array().map_or(0, Vec::len)
    } else {
        0
    };
    let before = snapshot(copy);
    let run = Run::of(local(copy).args(["--timeout", "5s"]));
    let run_writes = serde_json::from_str::<serde_json::Value>(&run.stdout)
        .ok()
        .and_then(|v| v["writes"].as_u64())
        .unwrap_or(0);
    let report =
        serde_json::from_str::<serde_json::Value>(&check.stdout).unwrap_or(serde_json::Value::Null);
    let statuses = report["secrets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["status"].as_str().unwrap_or_default().to_string(),
                r["problems"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    Judged {
        check: check.code,
        next_run: report["nextRun"].clone(),
        statuses,
        dry_run: dry.code,
        planned,
        key_modes,
        run: run.code,
        run_writes,
        changed: snapshot(copy) != before,
    }
}

/// Copies `from` to `to` as it is (links, modes).
fn copy_tree(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .args(["-a", from.to_str().unwrap(), to.to_str().unwrap()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn check_exits_0_exactly_when_a_plain_run_would_write_and_refuse_nothing() {
    let cases: u32 = std::env::var("CERTGEN_JUDGEMENT_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(96);
    let tmp = tempdir();
    let base = tmp.path().join("base");
    Run::of(&mut local(&base)).ok();
    let foreign = Foreign::new();
    // Seeded, like the simulation: a failure in CI replays as it was found
    // (CERTGEN_JUDGEMENT_SEED picks other stores).
    let mut seed = [0u8; 32];
    if let Some(n) = std::env::var("CERTGEN_JUDGEMENT_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        seed[..8].copy_from_slice(&n.to_le_bytes());
    }
    let rng = proptest::test_runner::TestRng::from_seed(
        proptest::test_runner::RngAlgorithm::ChaCha,
        &seed,
    );
    let mut runner = TestRunner::new_with_rng(
        Cases {
            cases,
            failure_persistence: None,
            ..Cases::default()
        },
        rng,
    );
    let counts = std::cell::RefCell::new(std::collections::BTreeMap::<String, u32>::new());
    let n = std::cell::Cell::new(0u32);
    runner
        .run(&store(), |s| {
            n.set(n.get() + 1);
            let case = tempdir();
            let dir = case.path().join("certs");
            copy_tree(&base, &dir);
            if let Some(k) = s.overwrite {
                let r = Run::of(kill_after_write(local(&dir).arg("--overwrite"), k));
                prop_assert!(r.code == KILLED || r.code == 0, "{}", r.stderr);
            }
            for e in &s.edits {
                apply(&dir, e, &foreign);
            }
            let copy = case.path().join("copy");
            copy_tree(&dir, &copy);
            let j = judge(&dir, &copy);
            let verdict = j.next_run["action"].as_str().unwrap_or("none").to_string();
            *counts.borrow_mut().entry(verdict.clone()).or_default() += 1;
            // check answers 0, 1, or 2 with its whole report when a Secret cannot be read
            // (as the run stops on it).
            prop_assert!(matches!(j.check, 0..=2), "{j:?}");
            prop_assert!(!j.statuses.is_empty(), "a whole report: {j:?}");
            let healthy = j.check == 0;
            let dry_quiet = j.dry_run == 0 && j.planned.is_empty() && j.key_modes == 0;
            let run_quiet = j.run == 0 && j.run_writes == 0 && !j.changed;
            prop_assert_eq!(healthy, run_quiet, "check vs a plain run: {:?}", j);
            // What check says row by row agrees with its exit: every Secret ok exactly when
            // healthy, and a problem on some row whenever not.
            prop_assert_eq!(
                healthy,
                j.statuses
                    .iter()
                    .all(|(status, problems)| status == "ok" && *problems == 0),
                "rows against the exit: {:?}",
                j
            );
            prop_assert_eq!(healthy, verdict == "nothing", "{:?}", j);
            // A dry run shows the first step: quiet exactly when check is healthy, or when
            // a rotation waits at a gate (which the real run then waits out and continues).
            prop_assert_eq!(
                healthy || verdict == "waits",
                dry_quiet,
                "check vs a plain dry run: {:?}",
                j
            );
            // The verdict's kind is the run's: a refusal is exit 2 of both runs, a write is
            // what the dry run plans.
            prop_assert_eq!(verdict == "refuses", j.dry_run == 2, "{:?}", j);
            prop_assert_eq!(verdict == "refuses", j.run == 2, "{:?}", j);
            if verdict == "writes" {
                let writes = j.next_run["writes"].as_array().unwrap();
                let chmods = writes.iter().filter(|w| w["action"] == "chmod").count();
                let mut said: Vec<String> = writes
                    .iter()
                    .filter(|w| w["action"] != "chmod")
                    .map(|w| {
                        format!(
                            "{} {}",
                            w["action"].as_str().unwrap(),
                            w["object"].as_str().unwrap()
                        )
                    })
                    .collect();
                let mut planned = j.planned.clone();
                said.sort();
                planned.sort();
                prop_assert_eq!(said, planned, "{:?}", j);
                prop_assert_eq!(chmods, j.key_modes, "{:?}", j);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "one judgement: {} generated stores, verdicts {:?}",
        n.get(),
        counts.borrow()
    );
    let counts = counts.into_inner();
    for kind in ["nothing", "writes", "refuses"] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) > 0,
            "no store judged {kind:?}: {counts:?}"
        );
    }
}
