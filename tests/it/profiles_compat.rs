//! The built-in profiles for other control planes, through the binary in local mode:
//! `profile list` names each with a line about it, `profile show` round-trips each, and each
//! profile writes what its tool writes, compared with the recorded run of that tool
//! (`tests/it/fixtures/profiles/`; the same on the real API server, with Secret types and
//! labels: `cluster::profiles_compat`).

use std::collections::BTreeMap;

use crate::util::secret_summary::{assert_compatible, fixture, summarize};
use crate::util::{
    KILLED, Run, check_local, kill_after_write, local, run, run_local, tempdir, write,
};

#[test]
fn profile_list_names_every_builtin_profile_with_a_line_about_it() {
    let out = run(&["profile", "list"]).ok().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    for (line, (name, mentions)) in lines.iter().zip([
        ("envoy-gateway", "envoy-rate-limit"),
        ("cilium-hubble", "hubble-server-certs"),
        ("cilium-clustermesh", "cilium-ca"),
        ("contour", "contourcert"),
    ]) {
        assert!(line.starts_with(&format!("{name} ")), "{line}");
        assert!(line.contains(mentions), "{line}");
    }
}

#[test]
fn profile_show_round_trips_every_builtin_profile() {
    let tmp = tempdir();
    for name in [
        "envoy-gateway",
        "cilium-hubble",
        "cilium-clustermesh",
        "contour",
    ] {
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
            if name == "cilium-clustermesh" {
                all.extend(["--cluster-name", "mesh-1"]);
            }
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
fn local_summaries(
    profile: &str,
    extra: &[&str],
    names: &[&str],
) -> BTreeMap<String, serde_json::Value> {
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
    ]
    .iter()
    .chain(extra)
    .copied()
    .collect::<Vec<_>>())
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

fn matches_recording(profile: &str, extra: &[&str], tool: &str, key_instead: Option<&str>) {
    let recorded = fixture(tool);
    let theirs = recorded["secrets"].as_array().unwrap();
    let names: Vec<&str> = theirs.iter().map(|s| s["name"].as_str().unwrap()).collect();
    let ours = local_summaries(profile, extra, &names);
    for t in theirs {
        assert_compatible(t, &ours[t["name"].as_str().unwrap()], key_instead);
    }
}

#[test]
fn cilium_hubble_profile_writes_what_cilium_certgen_writes() {
    matches_recording("cilium-hubble", &[], "cilium-certgen", None);
}

#[test]
fn cilium_clustermesh_profile_writes_what_cilium_certgen_writes() {
    matches_recording(
        "cilium-clustermesh",
        &["--cluster-name", "default"],
        "cilium-certgen-clustermesh",
        None,
    );
}

#[test]
fn contour_profile_writes_what_contour_certgen_writes() {
    // Contour's keys are RSA 2048; the profile uses certgen's default ECDSA P-256.
    matches_recording("contour", &[], "contour-certgen", Some("ecdsa-p256"));
}

#[test]
fn an_unknown_profile_is_refused_naming_every_builtin_one() {
    for args in [
        &["--profile", "cilium", "--dry-run"][..],
        &["profile", "show", "cilium"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        for name in [
            "envoy-gateway",
            "cilium-hubble",
            "cilium-clustermesh",
            "contour",
        ] {
            assert!(r.stderr.contains(name), "{args:?}: {}", r.stderr);
        }
    }
}

/// The ClusterMesh leaves, with the purpose each is verified for: the etcd server's, and the
/// clients the agents, KVStoreMesh and the clustermesh-apiserver present.
const MESH_LEAVES: &[(&str, &str)] = &[
    ("clustermesh-apiserver-server-cert", "sslserver"),
    ("clustermesh-apiserver-admin-cert", "sslclient"),
    ("clustermesh-apiserver-remote-cert", "sslclient"),
    ("clustermesh-apiserver-local-cert", "sslclient"),
    ("hubble-server-certs", "sslserver"),
    ("hubble-relay-client-certs", "sslclient"),
];

/// Cilium's shared CA as users copy it between clusters, and as Cilium's certgen leaves it: an
/// Opaque `cilium-ca` with the CA in `ca.crt` and its key in `ca.key`, nothing else. The
/// `cilium-clustermesh` profile adopts it without a gap (the same CA signs every leaf), keeps
/// Cilium's layout through a staged rotation (`ca.crt` one certificate, the active CA, and
/// `ca.key` its key, 0600; the pending CA in `next.*` meanwhile), and never leaves a leaf its
/// peers' bundles do not trust.
#[test]
fn cilium_clustermesh_adopts_a_shared_cilium_ca_and_rotates_it_in_ciliums_layout() {
    use crate::util::trust::{fingerprints, openssl, openssl_verify};
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let ca_dir = dir.join("cilium-ca");
    std::fs::create_dir_all(&ca_dir).unwrap();
    let key = ca_dir.join("ca.key");
    let crt = ca_dir.join("ca.crt");
    let (ok, text) = openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        key.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    let (ok, text) = openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        key.to_str().unwrap(),
        "-subj",
        "/CN=Cilium CA",
        "-days",
        "1095",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        crt.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shared = fingerprints(&std::fs::read(&crt).unwrap());
    let profile = [
        "--profile",
        "cilium-clustermesh",
        "--cluster-name",
        "mesh-1",
        "--propagation-delay",
        "1s",
    ];
    let file = |secret: &str, key: &str| dir.join(secret).join(key);
    let verify_all = |ca: &std::path::Path| {
        for (leaf, purpose) in MESH_LEAVES {
            let (ok, text) = openssl_verify(ca, &file(leaf, "tls.crt"), purpose);
            assert!(ok, "{leaf} {purpose} against {}: {text}", ca.display());
        }
    };
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    // Adopted: the same CA, Cilium's keys, every leaf signed by it.
    let r = run_local(&dir, &profile).ok().json();
    assert_eq!(r["secrets"][0]["secret"], "cilium-ca", "{r}");
    assert_eq!(r["secrets"][0]["action"], "update-bundle", "{r}");
    assert_eq!(
        r["secrets"][0]["reason"],
        "adopting the CA as it is: recording its trust bundle"
    );
    assert_eq!(fingerprints(&std::fs::read(&crt).unwrap()), shared);
    let (ok, text) = openssl(&["pkey", "-in", key.to_str().unwrap(), "-noout"]);
    assert!(ok, "{text}");
    assert_eq!(mode(&file("cilium-ca", "..data/ca.key")), 0o600);
    verify_all(&crt);
    let (ok, text) = openssl(&[
        "x509",
        "-noout",
        "-subject",
        "-in",
        file("clustermesh-apiserver-admin-cert", "tls.crt")
            .to_str()
            .unwrap(),
    ]);
    assert!(ok && text.contains("CN = admin-mesh-1"), "{text}");
    // A second run writes nothing.
    assert_eq!(run_local(&dir, &profile).ok().json()["writes"], 0);

    // Stopped after the trust step (the CA Secret and 9 bundles): the active CA is still the
    // shared one, alone in ca.crt; the pending one waits in next.crt, its key 0600; every
    // bundle trusts both, and every leaf still verifies.
    let r = Run::of(kill_after_write(
        local(&dir).args(profile).arg("--overwrite"),
        10,
    ));
    assert_eq!(r.code, KILLED, "{}", r.stderr);
    assert_eq!(fingerprints(&std::fs::read(&crt).unwrap()), shared);
    let pending = fingerprints(&std::fs::read(file("cilium-ca", "next.crt")).unwrap());
    assert_eq!(pending.len(), 1);
    assert_eq!(mode(&file("cilium-ca", "..data/next.key")), 0o600);
    for (leaf, _) in MESH_LEAVES {
        let bundle = fingerprints(&std::fs::read(file(leaf, "ca.crt")).unwrap());
        assert_eq!(bundle.len(), 2, "{leaf}");
        assert!(
            bundle.contains(&shared[0]) && bundle.contains(&pending[0]),
            "{leaf}"
        );
    }
    verify_all(&crt);

    // The rotation finishes: ca.crt is the new CA alone, ca.key its key, next.* gone.
    run_local(&dir, &[&profile[..], &["--overwrite"]].concat()).ok();
    assert_eq!(fingerprints(&std::fs::read(&crt).unwrap()), pending);
    let public = |args: &[&str]| {
        let (ok, text) = openssl(args);
        assert!(ok, "{text}");
        text
    };
    assert_eq!(
        public(&["pkey", "-in", key.to_str().unwrap(), "-pubout"]),
        public(&["x509", "-noout", "-pubkey", "-in", crt.to_str().unwrap()])
    );
    assert!(!file("cilium-ca", "next.crt").exists());
    assert_eq!(
        fingerprints(&std::fs::read(file("cilium-ca", "bundle.crt")).unwrap()),
        pending
    );
    verify_all(&crt);
    let c = check_local(&dir, &profile[..4]);
    assert_eq!(c.code, 0, "{}", c.stdout);
}
