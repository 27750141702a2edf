//! certgen under Envoy Gateway's name ([`link_in`]), and Secrets as Envoy Gateway's own certgen
//! writes them, made with the openssl CLI rather than
//! certgen's code: RSA-2048 PKCS#1 keys, one CA whose key is in no Secret, `ca.crt` = that CA in
//! every TLS Secret, the HMAC Secret, and no CA Secret. The local tests write them as files
//! ([`Output::write_local`]), the cluster tests as Secrets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::trust::openssl;

/// certgen linked as `dir/envoy-gateway`, as an image replacing Envoy Gateway's would ship it
/// (run it through `util::command`).
pub fn link_in(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let link = dir.join("envoy-gateway");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_certgen"), &link).unwrap();
    link
}

/// The HMAC Secret's key as Envoy Gateway's certgen left it.
pub const HMAC: [u8; 32] = [7; 32];

/// What varies between the Envoy Gateway installations the tests start from.
pub struct Options<'a> {
    /// The namespace in the leaves' SANs.
    pub namespace: &'a str,
    /// Lifetime of the CA and the leaves.
    pub days: u32,
    /// Whether the leaves carry the serverAuth and clientAuth EKUs (without, any use is allowed).
    pub ekus: bool,
    /// Whether `envoy-rate-limit` has a leaf of its own, or a copy of `envoy`'s.
    pub rate_limit_own_leaf: bool,
}

/// The installation the local tests start from: the profile's namespace, one-year certificates
/// without EKUs, and the rate limiter presenting envoy's leaf.
pub const LOCAL: Options<'static> = Options {
    namespace: "envoy-gateway-system",
    days: 365,
    ekus: false,
    rate_limit_own_leaf: false,
};

/// The CA certificate and the Secrets' data, by Secret name.
pub struct Output {
    pub ca: Vec<u8>,
    pub secrets: BTreeMap<&'static str, BTreeMap<String, Vec<u8>>>,
}

/// Issues the CA and the leaves as Envoy Gateway's certgen does.
pub fn generate(o: &Options) -> Output {
    let work = super::tempdir();
    let p = |f: &str| work.path().join(f).to_str().unwrap().to_string();
    let sh = |args: &[&str]| {
        let (ok, text) = openssl(args);
        assert!(ok, "openssl {args:?}: {text}");
    };
    let days = o.days.to_string();
    sh(&["genrsa", "-traditional", "-out", &p("ca.key"), "2048"]);
    sh(&[
        "req",
        "-x509",
        "-new",
        "-key",
        &p("ca.key"),
        "-subj",
        "/CN=envoy-gateway",
        "-days",
        &days,
        "-out",
        &p("ca.crt"),
    ]);
    let ns = o.namespace;
    let svc =
        |n: &str| format!("DNS:{n},DNS:{n}.{ns},DNS:{n}.{ns}.svc,DNS:{n}.{ns}.svc.cluster.local");
    let mut leaves = vec![
        ("envoy-gateway", "envoy-gateway", svc("envoy-gateway")),
        ("envoy", "*", format!("DNS:*.{ns}")),
    ];
    if o.rate_limit_own_leaf {
        leaves.push(("envoy-rate-limit", "*", format!("DNS:*.{ns}")));
    }
    let ekus = if o.ekus {
        "extendedKeyUsage=serverAuth,clientAuth\n"
    } else {
        ""
    };
    for (name, cn, sans) in leaves {
        let key = p(&format!("{name}.key"));
        let csr = p(&format!("{name}.csr"));
        let ext = p(&format!("{name}.ext"));
        sh(&["genrsa", "-traditional", "-out", &key, "2048"]);
        sh(&[
            "req",
            "-new",
            "-key",
            &key,
            "-subj",
            &format!("/CN={cn}"),
            "-out",
            &csr,
        ]);
        std::fs::write(
            &ext,
            format!("subjectAltName={sans}\nkeyUsage=digitalSignature,keyEncipherment\n{ekus}"),
        )
        .unwrap();
        sh(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            &days,
            "-extfile",
            &ext,
            "-out",
            &p(&format!("{name}.crt")),
        ]);
    }
    let read = |f: &str| std::fs::read(p(f)).unwrap();
    let ca = read("ca.crt");
    let rate_limit_leaf = if o.rate_limit_own_leaf {
        "envoy-rate-limit"
    } else {
        "envoy"
    };
    let mut secrets = BTreeMap::new();
    for (secret, leaf) in [
        ("envoy-gateway", "envoy-gateway"),
        ("envoy", "envoy"),
        ("envoy-rate-limit", rate_limit_leaf),
    ] {
        secrets.insert(
            secret,
            BTreeMap::from([
                ("ca.crt".to_string(), ca.clone()),
                ("tls.crt".to_string(), read(&format!("{leaf}.crt"))),
                ("tls.key".to_string(), read(&format!("{leaf}.key"))),
            ]),
        );
    }
    secrets.insert(
        "envoy-oidc-hmac",
        BTreeMap::from([("hmac-secret".to_string(), HMAC.to_vec())]),
    );
    Output { ca, secrets }
}

impl Output {
    /// Writes the Secrets under `dir` as plain files, one directory per Secret, as Envoy Gateway's
    /// certgen does in local mode.
    pub fn write_local(&self, dir: &Path) {
        for (secret, data) in &self.secrets {
            let d = dir.join(secret);
            std::fs::create_dir_all(&d).unwrap();
            for (key, bytes) in data {
                std::fs::write(d.join(key), bytes).unwrap();
            }
        }
    }
}

/// Envoy Gateway's own certgen, the real code: `envoy-gateway certgen` of v1.9.1 built from its
/// Go module by `bench/envoy-gateway-module/build-certgen` (once per machine, then cached;
/// its command's code copied unchanged, without the server that shares its package, which is
/// three quarters of the whole binary's build), or `None` with a note when it cannot be built
/// outside CI. Tests run it as `envoy-gateway certgen [flags]`.
pub fn real_binary() -> Option<PathBuf> {
    use std::process::{Command, Stdio};
    use std::sync::OnceLock;
    static EG: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = EG.get_or_init(|| {
        let script = super::root().join("bench/envoy-gateway-module/build-certgen");
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("{} exited with {}", script.display(), out.status));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{} printed no binary", script.display()))
        }
    });
    match built {
        Ok(p) => Some(p.clone()),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but Envoy Gateway's certgen is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("note: Envoy Gateway's certgen is unavailable ({e}); skipping");
            None
        }
    }
}
