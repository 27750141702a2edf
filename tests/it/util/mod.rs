//! Helpers shared by every test file: running the binary and reading what it wrote. The cluster
//! tests' own helpers (namespaces, running certgen against the cluster, the kubelet stand-in)
//! are on the cluster fixture, `cluster/mod.rs`.
//!
//! - here: the binary ([`certgen`], [`Run`], [`local`]), files ([`tree`], [`write`]), reports
//!   ([`consumer`]), generated files that must not go stale ([`check_generated`]);
//! - [`trust`]: openssl, fingerprints, rustls-webpki, and the pairwise-trust check of a snapshot
//!   of the profile's Secrets that every rotation test relies on;
//! - [`tls`]: mutual-TLS configurations and servers (rustls, `openssl s_server`) on 127.0.0.1;
//! - [`envoy_gateway`]: Secrets as Envoy Gateway's own certgen writes them, made with openssl.
//! - [`secret_summary`]: another tool's Secrets and certgen's, reduced to what a side-by-side
//!   comparison looks at, and the rules that comparison holds.

pub mod envoy_gateway;
pub mod secret_summary;
pub mod tls;
pub mod trust;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `program` (certgen under any name) with a clean environment for the variables certgen reads.
pub fn command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    for var in [
        "CERTGEN_NAMESPACE",
        "ENVOY_GATEWAY_NAMESPACE",
        "KUBERNETES_CLUSTER_DOMAIN",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The binary under test: this build's, or `CERTGEN_TEST_BINARY` (to show that a test fails
/// with an earlier build, say).
pub fn certgen() -> Command {
    command(&binary())
}

/// The path of the binary under test (see [`certgen`]).
pub fn binary() -> PathBuf {
    std::env::var_os("CERTGEN_TEST_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_certgen")))
}

/// The result of one run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Self {
        let run = Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert_no_key_material(&run.stdout);
        assert_no_key_material(&run.stderr);
        run
    }

    /// Runs `cmd` to the end.
    pub fn of(cmd: &mut Command) -> Self {
        Self::from(cmd.output().expect("run certgen"))
    }

    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "certgen failed:\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("bad JSON ({e}):\n{}", self.stdout))
    }
}

/// Runs certgen with `args`.
pub fn run(args: &[&str]) -> Run {
    Run::of(certgen().args(args))
}

/// Runs `cmd` to the end on a blocking thread, so the test's runtime keeps serving the servers,
/// stand-ins and watches it runs beside.
pub async fn run_async(mut cmd: Command) -> Run {
    tokio::task::spawn_blocking(move || Run::of(&mut cmd))
        .await
        .unwrap()
}

/// certgen in local mode on `dir`, quiet, with a JSON report.
pub fn local(dir: &Path) -> Command {
    let mut cmd = certgen();
    cmd.args(["--local", dir.to_str().unwrap(), "-q", "--output", "json"]);
    cmd
}

/// Runs [`local`] with `extra` flags.
pub fn run_local(dir: &Path, extra: &[&str]) -> Run {
    Run::of(local(dir).args(extra))
}

/// Runs `certgen check --local DIR` with `extra` flags.
pub fn check_local(dir: &Path, extra: &[&str]) -> Run {
    Run::of(
        certgen()
            .args(["check", "--local", dir.to_str().unwrap()])
            .args(extra),
    )
}

/// Runs `--overwrite` on `dir`, stopped right after its leaves phase (trust: CA Secret + 3
/// bundles; leaves: promotion + 3 leaves), before the cleanup.
pub fn overwrite_until_cleanup(dir: &Path) {
    let r = Run::of(kill_after_write(local(dir).arg("--overwrite"), 8));
    assert_eq!(r.code, KILLED, "{}", r.stderr);
}

/// The built-in envoy-gateway profile, resolved as a run resolves it (no overrides, no
/// environment).
pub fn builtin_config() -> certgen::config::Config {
    use certgen::config::{Config, Env, Overrides, Source};
    Config::resolve(
        &Source::Profile("envoy-gateway".into()),
        &Overrides::default(),
        &Env::default(),
    )
    .unwrap()
}

/// The built-in profile as a config file (`certgen profile show`), for tests to edit.
pub fn profile() -> String {
    run(&["profile", "show"]).ok().stdout
}

/// Makes `cmd` stop as if killed right after its `n`-th write (certgen's test hook).
pub fn kill_after_write(cmd: &mut Command, n: usize) -> &mut Command {
    cmd.env(certgen::apply::CRASH_ENV, n.to_string())
}

/// The exit code of a run stopped by [`kill_after_write`].
pub const KILLED: i32 = certgen::apply::CRASH_EXIT;

/// Markers of private keys: PEM armour, and the base64 openings of PKCS#8 (P-256, P-384,
/// Ed25519, RSA) and PKCS#1 DER, which appear however a key were printed as PEM or base64.
pub const KEY_MARKERS: &[&str] = &[
    "PRIVATE KEY",
    "MIGHAgEAMBMG",
    "MIG2AgEAMBAG",
    "MC4CAQAwBQYDK2Vw",
    "AgEAMA0GCSqGSIb3DQEBAQUABIIE",
    "AoIBAQ",
];

/// Fails if `text` contains anything that looks like private-key material.
pub fn assert_no_key_material(text: &str) {
    for marker in KEY_MARKERS {
        assert!(
            !text.contains(marker),
            "output contains key material ({marker}):\n{text}"
        );
    }
}

/// Every regular file under `dir`, by relative path.
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                // Links are recorded by target, never followed.
                let target = std::fs::read_link(&p).unwrap();
                out.insert(rel, format!("-> {}", target.display()).into_bytes());
            } else if meta.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// A temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Writes `text` to `dir/name`, returning the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The entry of consumer `name` in a run's JSON report.
pub fn consumer<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    entry(report, "consumers", "name", name)
}

/// The row of Secret `secret` in a `certgen check` JSON report.
pub fn check_row<'a>(report: &'a serde_json::Value, secret: &str) -> &'a serde_json::Value {
    entry(report, "secrets", "secret", secret)
}

/// The element of `report[list]` whose `key` is `value`.
fn entry<'a>(
    report: &'a serde_json::Value,
    list: &str,
    key: &str,
    value: &str,
) -> &'a serde_json::Value {
    report[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[key] == value)
        .unwrap_or_else(|| panic!("no {list} entry with {key} {value:?} in {report}"))
}

/// A checked-in file generated from the tree (docs, completions, manifests): fails when `path`
/// differs from `generated`, or writes it when `CERTGEN_UPDATE_DOCS` is set. `tests` is the test
/// filter that regenerates it.
pub fn check_generated(path: &Path, generated: &str, tests: &str) {
    if std::env::var_os("CERTGEN_UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: regenerate with `CERTGEN_UPDATE_DOCS=1 cargo test --test it {tests}`",
        path.display()
    );
}

/// The parameters of a self-signed CA with one constraint no TLS verifier lets pass for the
/// built-in profile's leaves (`critical`, `excluded`, `permitted`, `no-cert-sign`,
/// `client-only`), validity left to the caller.
pub fn constrained_ca_params(kind: &str) -> rcgen::CertificateParams {
    use rcgen::{
        BasicConstraints, CertificateParams, CustomExtension, DnType, ExtendedKeyUsagePurpose,
        GeneralSubtree, IsCa, KeyUsagePurpose, NameConstraints,
    };
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("constrained {kind}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    match kind {
        "critical" => {
            let mut ext =
                CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 55555, 1], vec![5, 0]);
            ext.set_criticality(true);
            params.custom_extensions.push(ext);
        }
        "excluded" => {
            params.name_constraints = Some(NameConstraints {
                permitted_subtrees: vec![],
                excluded_subtrees: vec![GeneralSubtree::DnsName("envoy-gateway-system".into())],
            });
        }
        "permitted" => {
            params.name_constraints = Some(NameConstraints {
                permitted_subtrees: vec![GeneralSubtree::DnsName("example.com".into())],
                excluded_subtrees: vec![],
            });
        }
        "no-cert-sign" => params.key_usages = vec![KeyUsagePurpose::DigitalSignature],
        "client-only" => params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth],
        other => panic!("unknown constraint {other}"),
    }
    params
}
