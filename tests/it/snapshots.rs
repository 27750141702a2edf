//! Snapshots (insta) of what users read: the run report and `certgen check`, as text and JSON,
//! of local runs, and `--help` of every command. What varies between machines and days (dates,
//! CA fingerprints, remaining days, the temporary directory) is filtered out, in place and at
//! the same width, so the snapshots hold on any machine at any date and tables stay aligned.
//!
//! A change to a report or to help text shows up here as a diff. Review it, then accept it with
//! `INSTA_UPDATE=always cargo test --test it snapshots` (or `cargo insta review`), and commit
//! the files under `tests/it/snapshots/`.

use std::path::Path;

use crate::util::{Run, certgen, tempdir};

/// Filters for every snapshot: the temporary directory `dir`, CA digests and fingerprints,
/// timestamps and dates (in that order: a timestamp contains a date).
fn settings(dir: &Path) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s.add_filter(&literal(dir.to_str().unwrap()), "[DIR]");
    s.add_filter(r"\b[0-9a-f]{64}\b", "[ca-sha256]");
    // 16 hex digits, the fingerprint reports print; the placeholder keeps the width.
    s.add_filter(r"\b[0-9a-f]{16}\b", "[ca-fingerprint]");
    s.add_filter(
        r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z",
        "YYYY-MM-DDThh:mm:ssZ",
    );
    s.add_filter(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}\b", "YYYY-MM-DD hh:mm");
    s.add_filter(r"\b\d{4}-\d{2}-\d{2}\b", "YYYY-MM-DD");
    // Time left depends on the seconds between the write and the check.
    s.add_filter(r"\b\d{4}d\b", "NNNNd");
    s.add_filter(r#""residualSeconds": \d+"#, r#""residualSeconds": N"#);
    s
}

/// The same filters for a report of a cluster run in namespace `ns` (shown as `[NS]`), for a
/// snapshot taken in `tests/it/cluster/` and kept beside the others.
pub fn cluster_settings(ns: &str) -> insta::Settings {
    let mut s = settings(Path::new("/nonexistent-dir"));
    s.add_filter(&literal(ns), "[NS]");
    s.set_snapshot_path("../snapshots");
    s
}

/// `text` as a regular expression that matches it literally.
fn literal(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if r"\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// certgen with `args` (and `--output format`), expecting exit `code`; its standard output.
fn stdout(args: &[&str], format: &str, code: i32) -> String {
    let r = Run::from(
        certgen()
            .args(args)
            .args(["--output", format])
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, code, "{args:?}\n{}\n{}", r.stdout, r.stderr);
    r.stdout
}

/// Snapshots the text and the JSON report of `certgen args`, named `name_text`/`name_json`.
/// The text run comes first, so `args` must leave the directory as it found it (a dry run, a
/// no-op, `check`) for the JSON run to report the same thing.
fn both(settings: &insta::Settings, name: &str, args: &[&str], code: i32) {
    settings.bind(|| {
        insta::assert_snapshot!(format!("{name}_text"), stdout(args, "text", code));
        insta::assert_snapshot!(format!("{name}_json"), stdout(args, "json", code));
    });
}

#[test]
fn run_reports_of_a_fresh_install_a_no_op_and_a_dry_run_rotation() {
    let tmp = tempdir();
    let s = settings(tmp.path());
    for format in ["text", "json"] {
        let dir = tmp.path().join(format!("fresh-{format}"));
        s.bind(|| {
            insta::assert_snapshot!(
                format!("run_fresh_{format}"),
                stdout(&["--local", dir.to_str().unwrap()], format, 0)
            );
        });
    }
    let dir = tmp.path().join("fresh-text");
    let d = dir.to_str().unwrap();
    let before = crate::util::tree(&dir);
    both(&s, "run_no_op", &["--local", d], 0);
    both(
        &s,
        "run_dry_run_overwrite",
        &["--local", d, "--dry-run", "--overwrite"],
        0,
    );
    assert_eq!(
        crate::util::tree(&dir),
        before,
        "no-op and dry runs write nothing"
    );
}

#[test]
fn check_reports_of_a_healthy_directory_and_of_one_with_a_missing_file() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let d = dir.to_str().unwrap();
    let s = settings(tmp.path());
    crate::util::run(&["--local", d, "-q"]).ok();
    both(&s, "check_healthy", &["check", "--local", d], 0);
    // What consumers read is gone: check names the path and exits 1; a plain run restores it.
    std::fs::remove_file(dir.join("envoy/tls.crt")).unwrap();
    both(&s, "check_missing_file", &["check", "--local", d], 1);
    s.bind(|| {
        insta::assert_snapshot!("run_repair_text", stdout(&["--local", d], "text", 0));
    });
    crate::util::run(&["check", "--local", d]).ok();
}

#[test]
fn help_of_every_command() {
    let s = settings(Path::new("/nonexistent"));
    for command in [
        &[][..],
        &["check"],
        &["profile"],
        &["profile", "show"],
        &["profile", "list"],
        &["create"],
        &["patch"],
        &["completions"],
        &["man"],
    ] {
        // clap wraps help at the terminal's width: no terminal here, so $COLUMNS decides.
        let r = Run::from(
            certgen()
                .args(command)
                .arg("--help")
                .env("COLUMNS", "100")
                .output()
                .unwrap(),
        )
        .ok();
        let name = ["help"]
            .iter()
            .chain(command)
            .copied()
            .collect::<Vec<_>>()
            .join("_");
        s.bind(|| insta::assert_snapshot!(name, r.stdout));
    }
}
