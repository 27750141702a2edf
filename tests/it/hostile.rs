//! Local mode as root against a directory others may have prepared, through the binary: links
//! anywhere under `DIR` (the lock file included), directories and files other users own or can
//! write, private keys others can read, config files that are not regular files or too large,
//! the exit code after a write failed midway, errors as one JSON object, inputs that make
//! certificates nobody can use, old version directories left by killed runs, and the messages
//! of what used to be unhelpful errors (snapshots). Each test fails on the certgen before
//! these rules (issue 25).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::{KILLED, Run, certgen, check_local, kill_after_write, local, run_local, tempdir};

/// The uid that owns nothing here (`nobody`), to stand for another user.
const NOBODY: u32 = 65534;

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), None).unwrap();
}

/// Whether this process can act as another user would need (change owners): tests of foreign
/// ownership need root, which `tests/run-all` (and so CI) has.
fn root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
}

/// The version directory `..data` points to in `secret`.
fn version(secret: &Path) -> PathBuf {
    secret.join(std::fs::read_link(secret.join("..data")).unwrap())
}

/// The `..<hex>` version directories of `secret`.
fn versions(secret: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(secret)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("..") && n != "..data")
        .collect();
    out.sort();
    out
}

fn refused(r: &Run, names: &[&str]) {
    assert_eq!(r.code, 2, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    for name in names {
        assert!(r.stderr.contains(name), "no {name:?} in:\n{}", r.stderr);
    }
}

#[test]
fn no_link_under_dir_is_followed_the_lock_file_included() {
    let tmp = tempdir();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();

    // The lock file: a link to a file root must not create.
    let dir = tmp.path().join("lock");
    std::fs::create_dir(&dir).unwrap();
    let target = outside.join("nologin");
    std::os::unix::fs::symlink(&target, dir.join(".certgen.lock")).unwrap();
    refused(&run_local(&dir, &[]), &[".certgen.lock", "symbolic link"]);
    assert!(!target.exists(), "the lock's link was followed");

    // Under umask 000 the lock file is still 0600.
    let dir = tmp.path().join("umask");
    let r = Run::of(
        std::process::Command::new("sh")
            .args([
                "-c",
                "umask 000; exec \"$0\" --local \"$1\" -q",
                env!("CARGO_BIN_EXE_certgen"),
            ])
            .arg(&dir),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mode = std::fs::metadata(dir.join(".certgen.lock")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Every name certgen reads in a Secret it wrote: the version directory `..data` points
    // to, the annotations file, a key file, the certificate.
    // (The name in the version directory; none: the version directory itself.)
    let cases = [
        ("version directory", None),
        ("annotations", Some(".certgen-annotations.json")),
        ("key", Some("tls.key")),
        ("certificate", Some("tls.crt")),
    ];
    let link_it = |secret: &Path, name: Option<&str>| {
        let v = version(secret);
        let file = name.map_or(v.clone(), |n| v.join(n));
        let copy = outside.join(file.file_name().unwrap());
        std::fs::rename(&file, &copy).unwrap();
        std::os::unix::fs::symlink(&copy, &file).unwrap();
    };
    for (what, name) in cases {
        let dir = tmp.path().join(what.replace(' ', "-"));
        run_local(&dir, &[]).ok();
        link_it(&dir.join("envoy"), name);
        let r = run_local(&dir, &[]);
        refused(
            &r,
            &["symbolic link", &dir.join("envoy").display().to_string()],
        );
        let r = run_local(&dir, &["--force", "--overwrite"]);
        assert_eq!(
            r.code, 2,
            "{what}: --force does not follow it either: {}",
            r.stderr
        );
        let c = check_local(&dir, &[]);
        assert_eq!(c.code, 2, "{what}: check refuses it too: {}", c.stderr);
        for f in std::fs::read_dir(&outside).unwrap() {
            let f = f.unwrap().path();
            std::fs::remove_file(&f)
                .or_else(|_| std::fs::remove_dir_all(&f))
                .unwrap();
        }
    }
}

#[test]
fn directories_and_files_another_user_controls_are_refused() {
    let tmp = tempdir();
    let theirs = tempdir(); // what "nobody" prepared: a CA of their own

    // DIR writable by others.
    let dir = tmp.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o777);
    let r = run_local(&dir, &[]);
    refused(&r, &[&dir.display().to_string(), "mode 0777", "chmod go-w"]);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
    assert_eq!(check_local(&dir, &[]).code, 2);

    // A parent of DIR anyone may write (not sticky): DIR could be swapped for another.
    let public = tmp.path().join("public");
    std::fs::create_dir(&public).unwrap();
    chmod(&public, 0o777);
    refused(
        &run_local(&public.join("certs"), &[]),
        &[&public.display().to_string(), "chmod +t"],
    );
    // A sticky one (as /tmp is) is fine: only owners may move entries there.
    chmod(&public, 0o1777);
    run_local(&public.join("certs"), &[]).ok();

    // A Secret directory group-writable, after a run.
    let dir = tmp.path().join("secret-dir");
    run_local(&dir, &[]).ok();
    chmod(&dir.join("envoy"), 0o770);
    refused(
        &run_local(&dir, &[]),
        &[
            &dir.join("envoy").display().to_string(),
            "writable by group",
        ],
    );
    chmod(&dir.join("envoy"), 0o700);
    // A certificate others may write.
    let crt = version(&dir.join("envoy")).join("tls.crt");
    chmod(&crt, 0o666);
    refused(&run_local(&dir, &[]), &["tls.crt", "mode 0666"]);
    chmod(&crt, 0o644);
    run_local(&dir, &[]).ok();

    if !root() {
        eprintln!("skipped the foreign-owner cases: they need root (tests/run-all has it)");
        return;
    }
    // DIR owned by another user, holding their CA: root must not sign with it.
    let dir = theirs.path().join("certs");
    run_local(&dir, &[]).ok();
    let before = std::fs::read(dir.join("envoy-gateway-ca/tls.crt")).unwrap();
    for entry in walk(&dir) {
        chown(&entry, NOBODY);
    }
    let r = run_local(&dir, &["--overwrite"]);
    refused(&r, &[&dir.display().to_string(), "owned by uid 65534"]);
    assert_eq!(
        std::fs::read(dir.join("envoy-gateway-ca/tls.crt")).unwrap(),
        before
    );
    assert_eq!(check_local(&dir, &[]).code, 2);
    // Only the key file another user owns.
    let dir = tmp.path().join("their-key");
    run_local(&dir, &[]).ok();
    chown(&version(&dir.join("envoy")).join("tls.key"), NOBODY);
    refused(&run_local(&dir, &[]), &["tls.key", "owned by uid 65534"]);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_key_others_can_read_is_reported_by_check_and_made_private_by_a_run() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    let key = version(&dir.join("envoy")).join("tls.key");
    chmod(&key, 0o644);
    let c = check_local(dir, &["--output", "json"]);
    assert_eq!(c.code, 1, "{}", c.stdout);
    let report = c.json();
    let row = crate::util::check_row(&report, "envoy");
    assert_eq!(row["status"], "invalid");
    let problems = row["problems"].to_string();
    assert!(
        problems.contains("mode 0644") && problems.contains("--overwrite"),
        "{problems}"
    );
    assert_eq!(
        std::fs::metadata(&key).unwrap().mode() & 0o777,
        0o644,
        "check changes nothing"
    );
    let r = run_local(dir, &[]).ok();
    assert!(
        r.stderr.contains("made it 0600") || r.stderr.is_empty(),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o600);
    check_local(dir, &[]).ok();
}

/// Runs certgen with `args` and gives up (killing it, by its own handle) after 20 s.
fn bounded(args: &[&str]) -> (Run, Duration) {
    let start = Instant::now();
    let mut child = certgen()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("certgen {args:?} did not end within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (
        Run::from(child.wait_with_output().unwrap()),
        start.elapsed(),
    )
}

#[test]
fn config_files_that_are_not_regular_or_too_large_are_refused_at_once() {
    let tmp = tempdir();
    let fifo = tmp.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let big = tmp.path().join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len((4 << 20) + 1).unwrap();
    let dir = tmp.path().join("certs");
    for (config, says) in [
        (PathBuf::from("/dev/zero"), "not a regular file"),
        (PathBuf::from("/dev/urandom"), "not a regular file"),
        (fifo, "not a regular file"),
        (tmp.path().to_path_buf(), "not a regular file"),
        (big, "larger than 4 MiB"),
    ] {
        let config = config.to_str().unwrap();
        let (r, took) = bounded(&["--local", dir.to_str().unwrap(), "--config", config]);
        refused(&r, &[config, says]);
        assert!(took < Duration::from_secs(10), "{config}: {took:?}");
        assert!(!dir.exists(), "{config}: nothing written");
    }
}

#[test]
fn a_failure_after_a_write_is_exit_5_and_names_what_was_written() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    // The issue's reproduction: a directory where consumers read tls.key.
    std::fs::remove_file(dir.join("envoy/tls.key")).unwrap();
    std::fs::create_dir(dir.join("envoy/tls.key")).unwrap();
    let before = std::fs::read_link(dir.join("envoy/..data")).unwrap();
    let r = run_local(dir, &["--force"]);
    assert_eq!(r.code, 5, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert_ne!(
        std::fs::read_link(dir.join("envoy/..data")).unwrap(),
        before,
        "it did write"
    );
    let envoy = dir.join("envoy").display().to_string();
    assert!(
        r.stderr.contains("after this run had written"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains(&envoy), "{}", r.stderr);
    let out = r.json();
    assert_eq!(out["error"]["exitCode"], 5);
    assert!(
        out["error"]["written"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w == &envoy),
        "{out}"
    );
}

#[test]
fn errors_are_one_json_object_with_json_output_and_json_logs() {
    let tmp = tempdir();
    let dir = tmp.path();
    let bad_config = crate::util::write(dir, "bad.yaml", "name: x\nbogus: 1\n");
    let local_dir = dir.join("certs");
    let local_dir = local_dir.to_str().unwrap();
    // A config error, in a run and in check.
    for check in [false, true] {
        let mut cmd = certgen();
        if check {
            cmd.arg("check");
        }
        let r = Run::of(cmd.args([
            "--local",
            local_dir,
            "--config",
            bad_config.to_str().unwrap(),
            "--output",
            "json",
            "--log-format",
            "json",
        ]));
        assert_eq!(r.code, 2);
        let out = r.json();
        assert_eq!(out["kind"], "Error", "{out}");
        assert_eq!(out["error"]["kind"], "config");
        assert_eq!(out["error"]["exitCode"], 2);
        assert_eq!(out["error"]["object"], bad_config.to_str().unwrap());
        assert!(out["error"]["message"].as_str().unwrap().contains("bogus"));
        let last = r.stderr.lines().last().unwrap();
        let log: serde_json::Value = serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("stderr's last line is not JSON ({e}): {}", r.stderr));
        assert_eq!(log["level"], "ERROR");
        assert_eq!(log["error"]["exitCode"], 2);
        assert_eq!(r.stderr.lines().count(), 1, "one line: {}", r.stderr);
    }
    // A command line clap refuses, as JSON when JSON was asked for.
    let r = Run::of(certgen().args(["--local", local_dir, "--timeout", "-1s", "--output", "json"]));
    assert_eq!(r.code, 2);
    let out = r.json();
    assert_eq!(out["error"]["kind"], "usage", "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .contains("negative"),
        "{out}"
    );
    // Stored input certgen cannot use.
    run_local(Path::new(local_dir), &[]).ok();
    std::fs::write(
        Path::new(local_dir).join("envoy/tls.crt"),
        "-----BEGIN CERTIFICATE-----\ngarbage\n",
    )
    .unwrap();
    let r = run_local(Path::new(local_dir), &[]);
    assert_eq!(r.code, 2);
    let out = r.json();
    assert_eq!(out["error"]["kind"], "invalid-input", "{out}");
    assert!(
        out["error"]["object"].as_str().unwrap().ends_with("envoy"),
        "{out}"
    );
}

#[test]
fn inputs_that_make_unusable_certificates_are_refused() {
    let tmp = tempdir();
    let profile = crate::util::profile();
    // An IP address among the DNS names.
    for ip in ["10.0.0.1", "::1", "[fd00::1]", "10.0.0.300"] {
        let config = profile.replacen(
            "      - envoy-gateway\n",
            &format!("      - envoy-gateway\n      - \"{ip}\"\n"),
            1,
        );
        assert_ne!(config, profile);
        let file = crate::util::write(tmp.path(), "ip.yaml", &config);
        let r = run_local(
            &tmp.path().join("ip"),
            &["--config", file.to_str().unwrap()],
        );
        refused(&r, &["dnsNames[1]", "ipAddresses"]);
    }

    // Two private keys in one tls.key.
    let dir = tmp.path().join("two-keys");
    run_local(&dir, &[]).ok();
    let key = version(&dir.join("envoy")).join("tls.key");
    let one = std::fs::read_to_string(&key).unwrap();
    std::fs::write(&key, format!("{one}{one}")).unwrap();
    refused(&run_local(&dir, &[]), &["tls.key", "2 private keys"]);

    // An HMAC secret shorter than the profile's 32 bytes.
    let dir = tmp.path().join("short-hmac");
    run_local(&dir, &[]).ok();
    std::fs::write(
        version(&dir.join("envoy-oidc-hmac")).join("hmac-secret"),
        b"12345",
    )
    .unwrap();
    refused(&run_local(&dir, &[]), &["envoy-oidc-hmac", "5 bytes", "32"]);
    let c = check_local(&dir, &["--output", "json"]);
    assert_eq!(c.code, 1);
    assert!(c.stdout.contains("holds 5 bytes"), "{}", c.stdout);
    run_local(&dir, &["--force"]).ok();
    assert_eq!(
        std::fs::read(dir.join("envoy-oidc-hmac/hmac-secret"))
            .unwrap()
            .len(),
        32
    );

    // A Secret larger than the API server's 1 MiB: refused before anything is written.
    let names: String = (0..40_000)
        .map(|i| format!("      - name-{i:05}.envoy-gateway.example\n"))
        .collect();
    let config = profile.replacen(
        "      - envoy-gateway\n",
        &format!("      - envoy-gateway\n{names}"),
        1,
    );
    let file = crate::util::write(tmp.path(), "big.yaml", &config);
    let dir = tmp.path().join("big");
    let r = run_local(&dir, &["--config", file.to_str().unwrap()]);
    refused(&r, &["envoy-gateway", "1 MiB"]);
    let written: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name())
                .filter(|n| n != ".certgen.lock")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(written, Vec::<std::ffi::OsString>::new(), "nothing written");
}

#[test]
fn old_version_directories_do_not_outlive_a_complete_run() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    // Killed runs, each right after a write: their old versions stay behind.
    for n in [1, 3, 5] {
        let r = Run::of(kill_after_write(
            local(dir).args(["--overwrite", "--rotate-hmac"]),
            n,
        ));
        assert_eq!(r.code, KILLED, "{}", r.stderr);
    }
    // And a version a failed run staged (it holds a private key) but never switched to.
    let staged = dir.join("envoy/..0123456789abcdef");
    std::fs::create_dir(&staged).unwrap();
    std::fs::write(staged.join("tls.key"), "an old key").unwrap();
    let left: usize = crate::util::trust::PROFILE_SECRETS
        .iter()
        .map(|s| versions(&dir.join(s)).len())
        .sum();
    assert!(
        left > crate::util::trust::PROFILE_SECRETS.len(),
        "the kills left versions behind"
    );
    run_local(dir, &["--overwrite", "--rotate-hmac"]).ok();
    for secret in crate::util::trust::PROFILE_SECRETS {
        let secret = dir.join(secret);
        assert_eq!(
            versions(&secret),
            vec![
                std::fs::read_link(secret.join("..data"))
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            ],
            "{}",
            secret.display()
        );
    }
}

/// certgen's standard error for `args`, expecting exit `code`, with `dir` shown as `[DIR]`.
fn message(dir: &Path, args: &[&str], code: i32) -> String {
    let r = Run::of(certgen().args(args));
    assert_eq!(r.code, code, "{args:?}: {}", r.stderr);
    r.stderr.replace(dir.to_str().unwrap(), "[DIR]")
}

#[test]
fn messages_that_say_what_is_wrong_and_how_to_fix_it() {
    let tmp = tempdir();
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s.add_filter(r"\.\.[0-9a-f]{16}", "..[version]");
    let _guard = s.bind_to_scope();

    // An RSA-512 CA: too weak, not "does not match".
    let weak = dir.join("weak");
    let ca = weak.join("envoy-gateway-ca");
    std::fs::create_dir_all(&ca).unwrap();
    let (ok, text) = crate::util::trust::openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:512",
        "-nodes",
        "-subj",
        "/CN=weak",
        "-days",
        "30",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-keyout",
        ca.join("tls.key").to_str().unwrap(),
        "-out",
        ca.join("tls.crt").to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    chmod(&ca.join("tls.key"), 0o600);
    insta::assert_snapshot!(
        "rsa_512_ca",
        message(dir, &["--local", weak.to_str().unwrap()], 2)
    );

    // A truncated certificate: its marker as text, not a byte array.
    let cut = dir.join("cut");
    run_local(&cut, &[]).ok();
    let crt = version(&cut.join("envoy")).join("tls.crt");
    let pem = std::fs::read_to_string(&crt).unwrap();
    std::fs::write(&crt, &pem[..pem.len() / 2]).unwrap();
    insta::assert_snapshot!(
        "truncated_pem",
        message(dir, &["--local", cut.to_str().unwrap()], 2)
    );

    // A dangling ..data: the fix, and --force recovers it.
    let dangling = dir.join("dangling");
    run_local(&dangling, &[]).ok();
    std::fs::remove_dir_all(version(&dangling.join("envoy"))).unwrap();
    insta::assert_snapshot!(
        "dangling_data",
        message(dir, &["--local", dangling.to_str().unwrap()], 2)
    );
    run_local(&dangling, &["--force"]).ok();
    check_local(&dangling, &[]).ok();

    // A negative duration.
    insta::assert_snapshot!(
        "negative_duration",
        message(dir, &["--local", d, "--propagation-delay", "-1s"], 2)
    );
}
