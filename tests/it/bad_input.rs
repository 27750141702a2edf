//! Bad input through the binary, in local mode: a matrix of bad configs, flags and stored
//! Secrets where every case exits with the documented code, names the object, says how to fix
//! it, and writes nothing (files and their versions unchanged); named cases for what `--force`
//! repairs; and input that only looks bad (an expired CA, an absurd timeout), which runs. The
//! same refusals of stored Secrets on the real control plane are in `cluster::bad_input`.

use std::path::Path;

use crate::util::trust::{
    LEAF_SECRETS, check_snapshot, fingerprints, local_snapshot, openssl_verify,
};
use crate::util::{Run, certgen, check_local, profile, run, run_local, tempdir, tree, write};

struct Case {
    name: &'static str,
    /// Prepares the directory (an installation exists unless `fresh`); returns extra args.
    setup: fn(&Path, &Path) -> Vec<String>,
    fresh: bool,
    code: i32,
    /// Every one of these must appear in stderr.
    expect: &'static [&'static str],
}

/// Writes a config derived from the built-in profile by one replacement.
fn config(tmp: &Path, from: &str, to: &str) -> Vec<String> {
    let p = profile();
    assert!(p.contains(from), "{from:?} is not in the profile");
    let path = write(tmp, "bad.yaml", &p.replacen(from, to, 1));
    vec!["--config".into(), path.to_str().unwrap().into()]
}

fn put(dir: &Path, secret: &str, key: &str, bytes: &[u8]) {
    let data = dir.join(secret).join("..data");
    std::fs::write(data.join(key), bytes).unwrap();
}

fn get(dir: &Path, secret: &str, key: &str) -> Vec<u8> {
    std::fs::read(dir.join(secret).join(key)).unwrap()
}

fn other_install() -> tempfile::TempDir {
    let t = tempdir();
    run_local(t.path(), &[]).ok();
    t
}

const CASES: &[Case] = &[
    Case {
        name: "a consumer of a kind certgen cannot restart",
        fresh: false,
        code: 2,
        expect: &[
            "bad.yaml",
            "consumers[1] (envoy-ratelimit).kind \"ReplicaSet\"",
            "write one of Deployment, StatefulSet, DaemonSet",
        ],
        setup: |_, t| {
            config(
                t,
                "    deployment: envoy-ratelimit\n",
                "    kind: ReplicaSet\n    workload: envoy-ratelimit\n",
            )
        },
    },
    Case {
        name: "a StatefulSet consumer named as a deployment",
        fresh: false,
        code: 2,
        expect: &[
            "consumers[1] (envoy-ratelimit)",
            "its kind is StatefulSet; write workload: envoy-ratelimit",
        ],
        setup: |_, t| {
            config(
                t,
                "    deployment: envoy-ratelimit\n",
                "    kind: StatefulSet\n    deployment: envoy-ratelimit\n",
            )
        },
    },
    // Configuration (nothing is created).
    Case {
        name: "unknown top-level field",
        fresh: true,
        code: 2,
        expect: &["bad.yaml", "unknown field `colour`"],
        setup: |_, t| {
            config(
                t,
                "name: envoy-gateway\n",
                "name: envoy-gateway\ncolour: blue\n",
            )
        },
    },
    Case {
        name: "unknown field in a Secret",
        fresh: true,
        code: 2,
        expect: &["unknown field `bits`"],
        setup: |_, t| config(t, "bytes: 32", "bytes: 32\n    bits: 256"),
    },
    Case {
        name: "invalid namespace flag",
        fresh: true,
        code: 2,
        expect: &["namespace \"Bad_NS\"", "lower-case"],
        setup: |_, _| vec!["-n".into(), "Bad_NS".into()],
    },
    Case {
        name: "invalid Secret name",
        fresh: true,
        code: 2,
        expect: &["secrets[1].name \"Envoy\""],
        setup: |_, t| config(t, "- name: envoy\n", "- name: Envoy\n"),
    },
    Case {
        name: "unknown SAN placeholder",
        fresh: true,
        code: 2,
        expect: &["secrets[0].dnsNames[1]", "{ns}"],
        setup: |_, t| config(t, "envoy-gateway.{namespace}\n", "envoy-gateway.{ns}\n"),
    },
    Case {
        name: "invalid DNS SAN",
        fresh: true,
        code: 2,
        expect: &["secrets[0].dnsNames[0]", "a..b"],
        setup: |_, t| config(t, "      - envoy-gateway\n", "      - a..b\n"),
    },
    Case {
        name: "invalid IP SAN",
        fresh: true,
        code: 2,
        expect: &["ipAddresses[0]", "300.1.1.1"],
        setup: |_, t| {
            config(
                t,
                "    usages: [server, client]\n",
                "    ipAddresses: [\"300.1.1.1\"]\n    usages: [server, client]\n",
            )
        },
    },
    Case {
        name: "invalid duration",
        fresh: true,
        code: 2,
        expect: &["forever", "365d"],
        setup: |_, t| config(t, "validity: 3650d", "validity: forever"),
    },
    Case {
        name: "renewBefore not shorter than validity",
        fresh: true,
        code: 2,
        expect: &["ca.renewBefore must be shorter"],
        setup: |_, t| config(t, "renewBefore: 90d", "renewBefore: 4000d"),
    },
    Case {
        name: "unknown key algorithm",
        fresh: true,
        code: 2,
        expect: &["dsa", "ecdsa-p256"],
        setup: |_, t| {
            config(
                t,
                "keyAlgorithm: ecdsa-p256\n  validity",
                "keyAlgorithm: dsa\n  validity",
            )
        },
    },
    Case {
        name: "HMAC too short",
        fresh: true,
        code: 2,
        expect: &["secrets[3].bytes"],
        setup: |_, t| config(t, "bytes: 32", "bytes: 4"),
    },
    Case {
        name: "duplicate Secret names",
        fresh: true,
        code: 2,
        expect: &["used twice"],
        setup: |_, t| config(t, "- name: envoy-rate-limit", "- name: envoy"),
    },
    Case {
        name: "consumer mounts an unknown Secret",
        fresh: true,
        code: 2,
        expect: &["consumers[1].mounts[0]"],
        setup: |_, t| config(t, "mounts: [envoy-rate-limit]", "mounts: [rate-limit]"),
    },
    Case {
        name: "config file missing",
        fresh: true,
        code: 2,
        expect: &["nope.yaml", "cannot read the config file", "--config"],
        setup: |_, t| {
            vec![
                "--config".into(),
                t.join("nope.yaml").to_str().unwrap().into(),
            ]
        },
    },
    Case {
        name: "config is not text",
        fresh: true,
        code: 2,
        expect: &["not UTF-8"],
        setup: |_, t| {
            std::fs::write(t.join("bin.yaml"), [0xff, 0xfe, 0, 1]).unwrap();
            vec![
                "--config".into(),
                t.join("bin.yaml").to_str().unwrap().into(),
            ]
        },
    },
    Case {
        name: "unknown profile",
        fresh: true,
        code: 2,
        expect: &["unknown profile \"istio\"", "envoy-gateway"],
        setup: |_, _| vec!["--profile".into(), "istio".into()],
    },
    Case {
        name: "invalid --timeout",
        fresh: true,
        code: 2,
        expect: &["soon"],
        setup: |_, _| vec!["--timeout".into(), "soon".into()],
    },
    Case {
        name: "invalid cluster domain",
        fresh: true,
        code: 2,
        expect: &["clusterDomain \"-bad-\""],
        setup: |_, _| vec!["--cluster-domain=-bad-".into()],
    },
    // Stored contents (an installation exists; nothing in it changes).
    Case {
        name: "garbage tls.crt",
        fresh: false,
        code: 2,
        expect: &["/envoy:", "tls.crt: no PEM certificate", "--force"],
        setup: |d, _| {
            put(d, "envoy", "tls.crt", b"hello");
            vec![]
        },
    },
    Case {
        name: "truncated PEM",
        fresh: false,
        code: 2,
        expect: &["/envoy:", "malformed PEM", "--force"],
        setup: |d, _| {
            let c = get(d, "envoy", "tls.crt");
            put(d, "envoy", "tls.crt", &c[..c.len() / 2]);
            vec![]
        },
    },
    Case {
        name: "key does not match certificate",
        fresh: false,
        code: 2,
        expect: &["/envoy:", "does not match"],
        setup: |d, _| {
            let o = other_install();
            put(d, "envoy", "tls.key", &get(o.path(), "envoy", "tls.key"));
            vec![]
        },
    },
    Case {
        name: "non-CA certificate in ca.crt",
        fresh: false,
        code: 2,
        expect: &["/envoy:", "is not a CA certificate"],
        setup: |d, _| {
            let leaf = get(d, "envoy-gateway", "tls.crt");
            put(d, "envoy", "ca.crt", &leaf);
            vec![]
        },
    },
    Case {
        name: "three CAs in a bundle",
        fresh: false,
        code: 2,
        expect: &["/envoy:", "3 distinct CAs"],
        setup: |d, _| {
            let mut b = get(d, "envoy", "ca.crt");
            for _ in 0..2 {
                b.extend(get(other_install().path(), "envoy-gateway-ca", "tls.crt"));
            }
            put(d, "envoy", "ca.crt", &b);
            vec![]
        },
    },
    Case {
        name: "huge bundle",
        fresh: false,
        code: 2,
        expect: &["larger than 1 MiB"],
        setup: |d, _| {
            put(d, "envoy", "ca.crt", &vec![b'A'; 2 << 20]);
            vec![]
        },
    },
    Case {
        name: "missing tls.key",
        fresh: false,
        code: 2,
        expect: &["/envoy:", "tls.key is missing"],
        setup: |d, _| {
            std::fs::remove_file(d.join("envoy/..data/tls.key")).unwrap();
            vec![]
        },
    },
    Case {
        name: "CA key replaced",
        fresh: false,
        code: 2,
        expect: &["envoy-gateway-ca:", "tls.key"],
        setup: |d, _| {
            let o = other_install();
            put(
                d,
                "envoy-gateway-ca",
                "tls.key",
                &get(o.path(), "envoy-gateway-ca", "tls.key"),
            );
            vec![]
        },
    },
    Case {
        name: "CA certificate is a leaf",
        fresh: false,
        code: 2,
        expect: &["envoy-gateway-ca:", "is not a CA certificate"],
        setup: |d, _| {
            let leaf = get(d, "envoy", "tls.crt");
            put(d, "envoy-gateway-ca", "tls.crt", &leaf);
            vec![]
        },
    },
    Case {
        name: "HMAC key missing",
        fresh: false,
        code: 2,
        expect: &["envoy-oidc-hmac:", "\"hmac-secret\" is missing"],
        setup: |d, _| {
            put(d, "envoy-oidc-hmac", "other", b"x");
            std::fs::remove_file(d.join("envoy-oidc-hmac/..data/hmac-secret")).unwrap();
            vec![]
        },
    },
    Case {
        name: "pending CA without its key",
        fresh: false,
        code: 2,
        expect: &["envoy-gateway-ca:", "next.key is missing"],
        setup: |d, _| {
            let c = get(d, "envoy-gateway-ca", "tls.crt");
            put(d, "envoy-gateway-ca", "next.crt", &c);
            vec![]
        },
    },
    Case {
        name: "symlinked Secret directory",
        fresh: true,
        code: 2,
        expect: &["symbolic link"],
        setup: |d, t| {
            std::fs::create_dir_all(d).unwrap();
            std::os::unix::fs::symlink(t, d.join("envoy")).unwrap();
            vec![]
        },
    },
    Case {
        name: "a file where a Secret directory belongs",
        fresh: true,
        code: 2,
        expect: &["not a directory"],
        setup: |d, _| {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("envoy"), "x").unwrap();
            vec![]
        },
    },
    Case {
        name: "..data pointing elsewhere",
        fresh: false,
        code: 2,
        expect: &["..data", "points to"],
        setup: |d, _| {
            let link = d.join("envoy/..data");
            std::fs::remove_file(&link).unwrap();
            std::os::unix::fs::symlink("/etc", &link).unwrap();
            vec![]
        },
    },
];

#[test]
fn every_bad_input_is_refused_with_its_exit_code_a_named_object_and_no_write() {
    assert!(CASES.len() >= 30, "the matrix has {} cases", CASES.len());
    for case in CASES {
        let tmp = tempdir();
        let dir = tmp.path().join("certs");
        let aside = tmp.path().join("aside");
        std::fs::create_dir_all(&aside).unwrap();
        if !case.fresh {
            run_local(&dir, &[]).ok();
        }
        let extra = (case.setup)(&dir, &aside);
        let before = tree(&dir);
        let existed = dir.exists();
        for overwrite in [false, true] {
            let mut args: Vec<String> = vec!["--local".into(), dir.to_str().unwrap().into()];
            if overwrite {
                args.push("--overwrite".into());
            }
            args.extend(extra.iter().cloned());
            let r = Run::of(certgen().args(&args));
            assert_eq!(
                r.code, case.code,
                "{} (overwrite {overwrite}): {}",
                case.name, r.stderr
            );
            for e in case.expect {
                assert!(
                    r.stderr.contains(e),
                    "{}: {e:?} missing from: {}",
                    case.name,
                    r.stderr
                );
            }
            assert_eq!(tree(&dir), before, "{}: something was written", case.name);
            assert_eq!(dir.exists(), existed, "{}", case.name);
        }
    }
}

#[test]
fn an_expired_ca_is_replaced_and_never_kept_in_a_bundle() {
    // Not an error: a CA past its expiry is due. The Secrets' bundles trust the CA that signed
    // their leaves, not this one, so that CA is the trust consumers hold: a new CA is staged
    // against it (trust first), and the expired one is never put in a bundle.
    let tmp = tempdir();
    let dir = tmp.path();
    let p = profile()
        .replace("validity: 3650d", "validity: 1h")
        .replace("renewBefore: 90d", "renewBefore: 30m")
        .replace("renewBefore: 30d", "renewBefore: 10m");
    let short = write(dir, "short.yaml", &p);
    let certs = dir.join("certs");
    run_local(&certs, &["--config", short.to_str().unwrap()]).ok();
    // Replace the CA with one that expired: issue it in the past with the library.
    let spec = certgen::pki::CaSpec {
        common_name: "envoy-gateway".into(),
        validity: std::time::Duration::from_secs(3600),
        key_algorithm: certgen::pki::KeyAlgorithm::EcdsaP256,
    };
    let (_, expired) = certgen::pki::issue_ca(
        &spec,
        time::OffsetDateTime::now_utc() - time::Duration::days(2),
    )
    .unwrap();
    put(
        &certs,
        "envoy-gateway-ca",
        "tls.crt",
        expired.cert.pem().as_bytes(),
    );
    put(
        &certs,
        "envoy-gateway-ca",
        "tls.key",
        expired.key.expose().as_bytes(),
    );
    let report = run_local(&certs, &[]).ok().json();
    assert_eq!(report["secrets"][0]["action"], "trust", "{report}");
    let expired_fp = expired.cert.fingerprint_hex();
    for leaf in LEAF_SECRETS.iter().chain(&["envoy-gateway-ca"]) {
        let bundle = fingerprints(&get(&certs, leaf, "ca.crt"));
        assert!(
            !bundle.contains(&expired_fp),
            "{leaf}: the expired CA is not kept"
        );
        assert!(bundle.len() <= 2);
    }
    let (failures, _) = check_snapshot(&local_snapshot(&certs));
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn a_bad_config_exits_2_and_writes_nothing() {
    let tmp = tempdir();
    let cfg = write(
        tmp.path(),
        "bad.yaml",
        &profile().replace("bytes: 32", "bytes: 32\n    color: blue"),
    );
    let dir = tmp.path().join("certs");
    let r = run(&[
        "--config",
        cfg.to_str().unwrap(),
        "--local",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("bad.yaml") && r.stderr.contains("color"),
        "{}",
        r.stderr
    );
    assert!(!dir.exists());
}

/// A plain run and an `--overwrite` run on `dir` both exit 2, naming each of `names` and the
/// fix (`--force`) on stderr, and write nothing.
fn refused_with_and_without_overwrite(dir: &Path, names: &[&str]) {
    let before = tree(dir);
    for extra in [&[][..], &["--overwrite"][..]] {
        let r = run_local(dir, extra);
        assert_eq!(r.code, 2, "{extra:?}: {}", r.stderr);
        for name in names.iter().chain(&["--force"]) {
            assert!(
                r.stderr.contains(name),
                "{extra:?}: no {name:?} in {}",
                r.stderr
            );
        }
        assert_eq!(tree(dir), before, "{extra:?}: nothing written");
    }
}

#[test]
fn garbage_in_a_secret_is_refused_naming_it_and_force_repairs_it() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    std::fs::write(
        dir.join("envoy/tls.crt"),
        "-----BEGIN CERTIFICATE-----\ngarbage\n",
    )
    .unwrap();
    refused_with_and_without_overwrite(dir, &[&dir.join("envoy").display().to_string(), "tls.crt"]);
    run_local(dir, &["--force"]).ok();
    let (ok, text) = openssl_verify(
        &dir.join("envoy/ca.crt"),
        &dir.join("envoy/tls.crt"),
        "sslserver",
    );
    assert!(ok, "{text}");
}

#[test]
fn symlinked_secret_directories_are_refused() {
    let tmp = tempdir();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let dir = tmp.path().join("certs");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("envoy")).unwrap();
    let r = run_local(&dir, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    assert!(tree(&real).is_empty(), "nothing written through the link");
}

#[test]
fn a_visible_file_certgen_cannot_account_for_is_refused_naming_it() {
    let tmp = tempdir();
    let dir = tmp.path();
    run_local(dir, &[]).ok();
    let ca = dir.join("envoy/ca.crt");
    std::fs::remove_file(&ca).unwrap();
    // Someone else's file where the link was: certgen cannot tell which copy is meant.
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nsomeone else's\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    refused_with_and_without_overwrite(dir, &[&ca.display().to_string()]);
    let r = check_local(dir, &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains(&ca.display().to_string()), "{}", r.stdout);
    run_local(dir, &["--force"]).ok();
    assert!(
        std::fs::symlink_metadata(&ca)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    check_local(dir, &[]).ok();
}

#[test]
fn an_absurd_timeout_means_no_bound_not_a_panic() {
    // Was: `--timeout 584542046090y` overflowed the deadline and panicked (exit 101).
    let tmp = tempdir();
    run_local(tmp.path(), &["--timeout", "584542046090y"]).ok();
}
