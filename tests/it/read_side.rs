//! What operators read must be true (issue 32), in local mode through the binary: the Secret
//! type a config asks for is kept, key modes follow the Secret's layout, one unreadable file
//! does not blank `check` or its metrics, what another tool put in a certificate is printed
//! escaped and bounded, durations read as they were written. The cluster side (quota, partial
//! RBAC, the exporter's watch logs) is in `cluster::read_side`; the property that `check` and
//! a plain run agree is `one_judgement`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::util::{Run, certgen, check_local, profile, run_local, tempdir, write};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The built-in profile with `envoy`'s Secret given `extra` (YAML lines at its indentation).
fn profile_with(envoy_extra: &str) -> String {
    let text = profile();
    let anchor = "  - name: envoy\n    type: tls\n";
    assert!(text.contains(anchor), "{text}");
    text.replacen(anchor, &format!("{anchor}{envoy_extra}"), 1)
}

/// Issue 32, finding 3 (local mode): a config's `secretType: Opaque` with `tls.crt` and
/// `tls.key` data keys worked once, then every run exited 2, because the type was inferred
/// from the file names; `check` said healthy all along.
#[test]
fn an_opaque_secret_with_tls_file_names_keeps_its_type() {
    let t = tempdir();
    let config = write(
        t.path(),
        "certgen.yaml",
        &profile_with("    secretType: Opaque\n"),
    );
    let dir = t.path().join("certs");
    let args = ["--config", config.to_str().unwrap()];
    run_local(&dir, &args).ok();
    let again = run_local(&dir, &args).ok();
    assert_eq!(again.json()["writes"], 0, "{}", again.stdout);
    check_local(&dir, &args).ok();
    // A directory another tool wrote (no recorded type) is still typed by its files.
    let plain = t.path().join("plain");
    std::fs::create_dir_all(plain.join("envoy")).unwrap();
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::copy(dir.join("envoy").join(f), plain.join("envoy").join(f)).unwrap();
    }
    let check = check_local(&plain, &["--output", "json"]);
    let envoy = crate::util::check_row(&check.json(), "envoy").clone();
    assert!(
        !envoy["problems"].to_string().contains("has type"),
        "{envoy}"
    );
}

/// Issue 32, finding 5: a world-readable key was reported and fixed only when its data key
/// ended in `.key`; kube-webhook-certgen's layout names it `key`.
#[test]
fn key_modes_follow_the_secrets_layout() {
    let t = tempdir();
    let layout = "    secretType: Opaque\n    dataKeys:\n      bundle: ca\n      cert: cert\n      key: key\n";
    let config = write(t.path(), "certgen.yaml", &profile_with(layout));
    let dir = t.path().join("certs");
    let args = ["--config", config.to_str().unwrap()];
    run_local(&dir, &args).ok();
    let key = dir.join("envoy/..data/key");
    assert_eq!(mode(&key), 0o600, "written 0600");
    chmod(&key, 0o644);
    let check = check_local(&dir, &[&args[..], &["--output", "json"]].concat());
    assert_eq!(check.code, 1, "{}", check.stdout);
    let envoy = crate::util::check_row(&check.json(), "envoy").clone();
    assert_eq!(envoy["status"], "invalid", "{envoy}");
    assert!(
        envoy["problems"].to_string().contains("has mode 0644"),
        "{envoy}"
    );
    assert_eq!(check.json()["nextRun"]["writes"][0]["action"], "chmod");
    assert_eq!(mode(&key), 0o644, "check changes nothing");
    // Nor does a dry run: it says what the run will do.
    let dry = run_local(&dir, &[&args[..], &["--dry-run"]].concat()).ok();
    assert_eq!(mode(&key), 0o644, "a dry run changes nothing");
    assert!(
        dry.json()["keyModes"][0]
            .as_str()
            .unwrap()
            .contains("has mode 0644"),
        "{}",
        dry.stdout
    );
    run_local(&dir, &args).ok();
    assert_eq!(mode(&key), 0o600, "a run makes it 0600");
    check_local(&dir, &args).ok();
}

/// Issue 32, finding 4: one file over the 1 MiB bound made `check` fail as a whole (exit 2),
/// and `--output prometheus` print nothing, so a textfile consumer lost every series.
#[test]
fn one_oversized_file_leaves_every_other_secret_judged_and_measured() {
    let t = tempdir();
    let dir = t.path().join("certs");
    run_local(&dir, &[]).ok();
    std::fs::write(dir.join("envoy/ca.crt"), vec![b'#'; (1 << 20) + 1]).unwrap();
    // Exit 2, as the run's (which stops on it), with the whole report.
    let check = check_local(&dir, &["--output", "json"]);
    assert_eq!(check.code, 2, "{}{}", check.stdout, check.stderr);
    let report = check.json();
    let envoy = crate::util::check_row(&report, "envoy");
    assert_eq!(envoy["status"], "invalid", "{envoy}");
    assert!(
        envoy["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("cannot be read: "),
        "{envoy}"
    );
    assert_eq!(
        crate::util::check_row(&report, "envoy-gateway")["status"],
        "ok"
    );
    assert_eq!(report["nextRun"]["action"], "refuses");
    let metrics = check_local(&dir, &["--output", "prometheus"]);
    assert_eq!(metrics.code, 2);
    assert!(metrics.stderr.contains("larger than"), "{}", metrics.stderr);
    crate::metrics::assert_valid_exposition(&metrics.stdout);
    for secret in ["envoy-gateway", "envoy-rate-limit", "envoy-gateway-ca"] {
        assert!(
            metrics.stdout.contains(&format!(
                "certgen_certificate_not_after_timestamp_seconds{{namespace=\"envoy-gateway-system\",secret=\"{secret}\""
            )),
            "{secret}: {}",
            metrics.stdout
        );
    }
    assert!(metrics.stdout.contains(
        "certgen_secret_status{namespace=\"envoy-gateway-system\",secret=\"envoy\",kind=\"tls\",status=\"invalid\"} 1"
    ));
    // The run refuses, as check said.
    assert_eq!(run_local(&dir, &[]).code, 2);
}

/// A certificate whose subject is `cn`, self-signed, not a CA (PEM), and its key.
fn leaf_named(cn: &str) -> (String, String) {
    let mut params = rcgen::CertificateParams::new(vec!["x.example".to_string()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        rcgen::DnValue::Utf8String(cn.to_string()),
    );
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Issue 32, finding 7: subjects were printed raw (terminal escapes could clear the screen and
/// print a fake "Healthy" line) and unbounded (a 64 KB common name gave a 65 KB line).
#[test]
fn subjects_are_escaped_and_bounded_in_what_people_read() {
    let fake = "evil\u{1b}[2J\u{1b}[H\rHealthy: nothing is due.\u{1b}[8m";
    let long = "A".repeat(65_536);
    for cn in [fake.to_string(), long] {
        let t = tempdir();
        let dir = t.path().join("certs");
        run_local(&dir, &[]).ok();
        let (cert, key) = leaf_named(&cn);
        std::fs::write(dir.join("envoy-gateway-ca/tls.crt"), cert).unwrap();
        std::fs::write(dir.join("envoy-gateway-ca/tls.key"), key).unwrap();
        let check = check_local(&dir, &[]);
        assert_eq!(check.code, 1, "{}", check.stderr);
        let run = Run::of(certgen().args(["--local", dir.to_str().unwrap()]));
        assert_eq!(run.code, 2, "{}", run.stderr);
        for (what, text) in [("check", &check.stdout), ("run", &run.stderr)] {
            assert!(
                !text.contains('\u{1b}') && !text.contains('\r'),
                "{what}: {text:?}"
            );
            let widest = text.lines().map(str::len).max().unwrap_or(0);
            assert!(widest < 2_000, "{what}: a line of {widest} bytes");
            assert!(text.contains("is not a CA certificate"), "{what}: {text}");
        }
        if cn.starts_with("evil") {
            assert!(check.stdout.contains("\\x1b[2J"), "{}", check.stdout);
        }
    }
}

/// Issue 32, finding 7: durations were printed as "2months 29days 2h 52m 48s" for 90d.
#[test]
fn durations_read_as_they_are_written() {
    let t = tempdir();
    // A leaf's renewBefore must not exceed the CA's: 90d against the CA's 30d.
    let text = profile()
        .replacen("  renewBefore: 90d", "  renewBefore: 30d", 1)
        .replacen("    renewBefore: 30d", "    renewBefore: 90d", 1);
    let config = write(t.path(), "certgen.yaml", &text);
    let run = run_local(
        &t.path().join("certs"),
        &["--config", config.to_str().unwrap()],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("90d"), "{}", run.stderr);
    assert!(!run.stderr.contains("months"), "{}", run.stderr);
}

/// `certgen exporter` on a loopback port, its API server a closed port (the watches retry;
/// the HTTP server serves regardless), with the limits test hook; stopped by its PID.
struct Exporter {
    child: std::process::Child,
    addr: String,
}

impl Exporter {
    fn start(dir: &Path, limits: &str) -> Self {
        use std::io::BufRead;
        let kubeconfig = write(
            dir,
            "closed.kubeconfig",
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
        );
        let mut child = certgen()
            .args(["exporter", "--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kubeconfig)
            .env(certgen::exporter::http::LIMITS_ENV, limits)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(rest) = line.split("http://").nth(1) {
                    let addr: String = rest.chars().take_while(|c| *c != '/').collect();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the exporter says where it listens");
        Self { child, addr }
    }

    /// `GET path` on a new connection: its status line, or why there was none within 1 s.
    fn status(&self, path: &str) -> Result<String, String> {
        use std::io::{Read, Write};
        let started = std::time::Instant::now();
        let mut s = std::net::TcpStream::connect(&self.addr).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        write!(s, "GET {path} HTTP/1.0\r\n\r\n").map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| e.to_string())?;
        if started.elapsed() > std::time::Duration::from_secs(1) {
            return Err(format!("took {:?}", started.elapsed()));
        }
        Ok(out.lines().next().unwrap_or_default().to_string())
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the peer closed `s` within `within`.
fn closed(s: &std::net::TcpStream, within: std::time::Duration) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 16];
    let mut reader = s;
    match reader.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Issue 32, finding 1, through the binary: idle connections were never closed and nothing
/// capped them, so about 1,010 idle sockets took `/metrics` and `/healthz` down (the file
/// descriptors ran out) and each cost memory for good. With the cap at 8 (the test hook; the
/// exporter's own is 256) and a 500 ms header timeout (its own: 10 s): 40 idle sockets leave at
/// most 8 open, the oldest closed first, every one closed after the timeout, and the exporter
/// answers throughout, within a second.
#[test]
fn the_exporter_caps_and_times_out_idle_connections() {
    let t = tempdir();
    let exporter = Exporter::start(t.path(), "500,8");
    let idle: Vec<std::net::TcpStream> = (0..40)
        .map(|_| std::net::TcpStream::connect(&exporter.addr).unwrap())
        .collect();
    assert_eq!(exporter.status("/healthz"), Ok("HTTP/1.0 200 OK".into()));
    assert_eq!(exporter.status("/metrics"), Ok("HTTP/1.0 200 OK".into()));
    // Most were closed at once to keep the cap; the rest by the header timeout.
    let at_once = idle
        .iter()
        .filter(|s| closed(s, std::time::Duration::from_millis(100)))
        .count();
    assert!(at_once >= 30, "only {at_once} of 40 closed at once");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let all = idle
        .iter()
        .filter(|s| closed(s, std::time::Duration::from_millis(100)))
        .count();
    assert_eq!(all, 40, "still open after the header timeout");
    assert_eq!(exporter.status("/healthz"), Ok("HTTP/1.0 200 OK".into()));
}
