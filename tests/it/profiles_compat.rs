//! The built-in profiles for other control planes, through the binary in local mode:
//! `profile list` names each with a line about it, `profile show` round-trips each, and each
//! profile writes what its tool writes, compared with the recorded run of that tool
//! (`tests/it/fixtures/profiles/`; the same on the real API server, with Secret types and
//! labels: `cluster::profiles_compat`).

use std::collections::BTreeMap;

use crate::util::secret_summary::{assert_compatible, fixture, summarize};
use crate::util::{run, tempdir, write};

#[test]
fn profile_list_names_every_builtin_profile_with_a_line_about_it() {
    let out = run(&["profile", "list"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (line, (name, mentions)) in lines.iter().zip([
        ("envoy-gateway", "envoy-rate-limit"),
        ("cilium-hubble", "hubble-server-certs"),
        ("contour", "contourcert"),
    ]) {
        assert!(line.starts_with(&format!("{name} ")), "{line}");
        assert!(line.contains(mentions), "{line}");
    }
}

#[test]
fn profile_show_round_trips_every_builtin_profile() {
    let tmp = tempdir();
    for name in ["envoy-gateway", "cilium-hubble", "contour"] {
        let yaml = run(&["profile", "show", name]).ok().stdout;
        let cfg = write(tmp.path(), &format!("{name}.yaml"), &yaml);
        let dry = |args: &[&str]| {
            let dir = tmp.path().join(format!("{name}-{}", args.len()));
            let mut all = vec![
                "--local",
                dir.to_str().unwrap(),
                "--dry-run",
                "--output",
                "json",
            ];
            all.extend_from_slice(args);
            run(&all).ok().json()
        };
        let a = dry(&["--profile", name]);
        let b = dry(&["--config", cfg.to_str().unwrap(), "-q"]);
        assert_eq!(a["secrets"], b["secrets"], "{name}");
    }
}

/// The namespace of the local runs, written `NAMESPACE` in summaries like the recordings.
const NS: &str = "recorded-ns";

/// `--local DIR` with `--profile name` and `-n NS`, summarised like the recording.
fn local_summaries(profile: &str, names: &[&str]) -> BTreeMap<String, serde_json::Value> {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let before = time::OffsetDateTime::now_utc();
    run(&[
        "--profile",
        profile,
        "-n",
        NS,
        "--local",
        dir.to_str().unwrap(),
        "-q",
    ])
    .ok();
    names
        .iter()
        .map(|name| {
            let data = ["ca.crt", "tls.crt", "tls.key"]
                .into_iter()
                .map(|k| {
                    (
                        k.to_string(),
                        std::fs::read(dir.join(name).join(k)).unwrap(),
                    )
                })
                .collect();
            let v = summarize(name, None, None, &data, before);
            let text = serde_json::to_string(&v).unwrap().replace(NS, "NAMESPACE");
            (name.to_string(), serde_json::from_str(&text).unwrap())
        })
        .collect()
}

fn matches_recording(profile: &str, tool: &str, key_instead: Option<&str>) {
    let recorded = fixture(tool);
    let theirs = recorded["secrets"].as_array().unwrap();
    let names: Vec<&str> = theirs.iter().map(|s| s["name"].as_str().unwrap()).collect();
    let ours = local_summaries(profile, &names);
    for t in theirs {
        assert_compatible(t, &ours[t["name"].as_str().unwrap()], key_instead);
    }
}

#[test]
fn cilium_hubble_profile_writes_what_cilium_certgen_writes() {
    matches_recording("cilium-hubble", "cilium-certgen", None);
}

#[test]
fn contour_profile_writes_what_contour_certgen_writes() {
    // Contour's keys are RSA 2048; the profile uses certgen's default ECDSA P-256.
    matches_recording("contour", "contour-certgen", Some("ecdsa-p256"));
}

#[test]
fn an_unknown_profile_is_refused_naming_every_builtin_one() {
    for args in [
        &["--profile", "cilium", "--dry-run"][..],
        &["profile", "show", "cilium"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        for name in ["envoy-gateway", "cilium-hubble", "contour"] {
            assert!(r.stderr.contains(name), "{args:?}: {}", r.stderr);
        }
    }
}
