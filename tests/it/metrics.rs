//! Metrics through the binary, in local mode: `certgen check --output prometheus` in every
//! phase of a staged rotation, a run's `--metrics-file` and `--output prometheus`, and its
//! `--pushgateway` push (to a small Pushgateway-compatible receiver on 127.0.0.1), each checked
//! by Prometheus' own `promtool check metrics` (Debian's, fetched by `tests/testenv/promtool`).
//! The Kubernetes side (caBundle targets, API requests) is in `cluster::metrics`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::util::{
    KILLED, Run, assert_no_key_material, certgen, check_local, kill_after_write, local,
    overwrite_until_cleanup, root, run_local, tempdir,
};

/// promtool from `tests/testenv/promtool` (fetched once per machine, then cached), or `None`
/// with a note when it cannot be had outside CI.
pub fn promtool() -> Option<PathBuf> {
    static PROMTOOL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let got = PROMTOOL.get_or_init(|| {
        let script = root().join("tests/testenv/promtool");
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
            Err(format!("{} printed no promtool path", script.display()))
        }
    });
    match got {
        Ok(p) => Some(p.clone()),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but promtool is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("note: promtool is unavailable ({e}); skipping a promtool check");
            None
        }
    }
}

/// Runs `promtool check metrics` on `text`: its success and output.
pub fn promtool_check(promtool: &Path, text: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// Asserts that promtool accepts `text` (when promtool is available), and that `text` holds
/// no key material.
pub fn assert_valid_exposition(text: &str) {
    assert_no_key_material(text);
    assert!(
        !text.contains("BEGIN"),
        "a certificate in the metrics:\n{text}"
    );
    if let Some(p) = promtool() {
        let (ok, said) = promtool_check(&p, text);
        assert!(ok, "promtool check metrics failed:\n{said}\n{text}");
    }
}

/// The value of the one sample of `text` whose line starts with `series`.
pub fn value(text: &str, series: &str) -> f64 {
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(series)).collect();
    assert_eq!(lines.len(), 1, "{series}: {lines:?}\n{text}");
    lines[0].rsplit(' ').next().unwrap().parse().unwrap()
}

const NS: &str = "namespace=\"envoy-gateway-system\"";

fn phase(text: &str) -> String {
    let on: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("certgen_rotation_phase{") && l.ends_with(" 1"))
        .collect();
    assert_eq!(on.len(), 1, "{text}");
    on[0]
        .split("phase=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string()
}

fn check_prometheus(dir: &Path) -> Run {
    check_local(dir, &["--output", "prometheus"])
}

#[test]
fn promtool_is_not_vacuous() {
    let Some(p) = promtool() else { return };
    // A gauge named like a counter, and a line that is not the format at all.
    for bad in [
        "# HELP x_total A.\n# TYPE x_total gauge\nx_total 1\n",
        "certgen_x{a=\"1\" 1\n",
    ] {
        let (ok, said) = promtool_check(&p, bad);
        assert!(!ok, "promtool accepted {bad:?}: {said}");
    }
}

#[test]
fn check_output_passes_promtool_and_names_the_phase_of_a_staged_rotation() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    // Nothing yet: every Secret missing, exit 1 like the text report.
    let r = check_prometheus(&dir);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_valid_exposition(&r.stdout);
    assert_eq!(
        value(
            &r.stdout,
            &format!(
                "certgen_secret_status{{{NS},secret=\"envoy\",kind=\"tls\",status=\"missing\"}}"
            )
        ),
        1.0
    );

    run_local(&dir, &[]).ok();
    let r = check_prometheus(&dir);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_valid_exposition(&r.stdout);
    assert_eq!(phase(&r.stdout), "steady");
    assert_eq!(value(&r.stdout, "certgen_check_healthy{"), 1.0);
    assert_eq!(
        value(
            &r.stdout,
            &format!("certgen_bundle_cas{{{NS},secret=\"envoy\"}}")
        ),
        1.0
    );

    // Stopped after the trust step's CA Secret write, then after the leaves step.
    let r = Run::of(kill_after_write(local(&dir).arg("--overwrite"), 4));
    assert_eq!(r.code, KILLED, "{}", r.stderr);
    let r = check_prometheus(&dir);
    assert_valid_exposition(&r.stdout);
    assert_eq!(phase(&r.stdout), "trust");
    assert_eq!(
        value(
            &r.stdout,
            &format!("certgen_bundle_cas{{{NS},secret=\"envoy\"}}")
        ),
        2.0
    );
    let started = value(&r.stdout, "certgen_rotation_phase_start_timestamp_seconds{");
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as f64;
    assert!(
        (now - 120.0..=now + 5.0).contains(&started),
        "{started} vs {now}"
    );

    let fresh = tmp.path().join("fresh");
    run_local(&fresh, &[]).ok();
    overwrite_until_cleanup(&fresh);
    let r = check_prometheus(&fresh);
    assert_valid_exposition(&r.stdout);
    assert_eq!(phase(&r.stdout), "cleanup");

    run_local(&fresh, &[]).ok();
    let r = check_prometheus(&fresh);
    assert_eq!(phase(&r.stdout), "steady");
    assert_eq!(
        value(
            &r.stdout,
            &format!("certgen_bundle_cas{{{NS},secret=\"envoy\"}}")
        ),
        1.0
    );
}

#[test]
fn a_runs_metrics_file_is_what_it_prints_and_passes_promtool() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let file = tmp.path().join("textfile/certgen.prom");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let r = Run::of(certgen().args([
        "--local",
        dir.to_str().unwrap(),
        "-q",
        "--output",
        "prometheus",
        "--metrics-file",
        file.to_str().unwrap(),
    ]))
    .ok();
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written, r.stdout);
    assert_valid_exposition(&written);
    let run = format!("{{{NS},profile=\"envoy-gateway\"}}");
    assert_eq!(
        value(&written, &format!("certgen_last_run_success{run}")),
        1.0
    );
    assert_eq!(
        value(&written, &format!("certgen_last_run_exit_code{run}")),
        0.0
    );
    assert_eq!(
        value(&written, &format!("certgen_last_run_writes{run}")),
        5.0
    );
    assert!(value(&written, &format!("certgen_last_run_duration_seconds{run}")) > 0.0);
    // A local run makes no API requests: no such family.
    assert!(!written.contains("certgen_last_run_api_requests"));
    // Only the file itself is left in the collector's directory (the temporary name is gone).
    let names: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from("certgen.prom")]);
}

#[test]
fn a_failed_run_still_writes_its_outcome() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    run_local(&dir, &[]).ok();
    std::fs::write(dir.join("envoy/tls.crt"), "not a certificate\n").unwrap();
    let file = tmp.path().join("certgen.prom");
    let r = run_local(&dir, &["--metrics-file", file.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let written = std::fs::read_to_string(&file).unwrap();
    assert_valid_exposition(&written);
    let run = format!("{{{NS},profile=\"envoy-gateway\"}}");
    assert_eq!(
        value(&written, &format!("certgen_last_run_success{run}")),
        0.0
    );
    assert_eq!(
        value(&written, &format!("certgen_last_run_exit_code{run}")),
        2.0
    );
    assert_eq!(
        value(
            &written,
            &format!(
                "certgen_secret_status{{{NS},secret=\"envoy\",kind=\"tls\",status=\"invalid\"}}"
            )
        ),
        1.0
    );
}

#[test]
fn an_unwritable_metrics_file_is_a_warning_not_a_failed_run() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let file = tmp.path().join("no/such/dir/certgen.prom");
    let r = run_local(&dir, &["--metrics-file", file.to_str().unwrap()]).ok();
    assert!(r.stderr.contains("metrics not written to"), "{}", r.stderr);
}

#[test]
fn a_bad_pushgateway_url_is_refused_before_anything_is_written() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let r = run_local(&dir, &["--pushgateway", "pushgateway:9091"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--pushgateway"), "{}", r.stderr);
    assert!(!dir.exists());
}

/// What a Pushgateway-compatible receiver got: method, path, content type, body.
struct Pushed {
    method: String,
    path: String,
    content_type: String,
    body: String,
}

/// Serves one HTTP request on 127.0.0.1, answering `status`; its URL and what it received.
fn receiver(status: u16) -> (String, std::thread::JoinHandle<Pushed>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap().to_string(),
            parts.next().unwrap().to_string(),
        );
        let (mut length, mut content_type) = (0, String::new());
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap(),
                "content-type" => content_type = v.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 {status} X\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope"
        )
        .unwrap();
        Pushed {
            method,
            path,
            content_type,
            body: String::from_utf8(body).unwrap(),
        }
    });
    (url, handle)
}

#[test]
fn a_run_pushes_its_metrics_to_the_pushgateway_group() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let file = tmp.path().join("certgen.prom");
    let (url, got) = receiver(200);
    let r = run_local(
        &dir,
        &[
            "--pushgateway",
            &url,
            "--metrics-file",
            file.to_str().unwrap(),
        ],
    )
    .ok();
    let pushed = got.join().unwrap();
    assert_eq!(pushed.method, "PUT");
    assert_eq!(
        pushed.path,
        "/metrics/job/certgen/namespace/envoy-gateway-system/profile/envoy-gateway"
    );
    assert!(
        pushed.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        pushed.content_type
    );
    assert_eq!(pushed.body, std::fs::read_to_string(&file).unwrap());
    assert_valid_exposition(&pushed.body);
    assert!(!r.stderr.contains("not pushed"), "{}", r.stderr);
}

#[test]
fn a_pushgateway_that_refuses_is_a_warning_not_a_failed_run() {
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    let (url, got) = receiver(500);
    let r = run_local(&dir, &["--pushgateway", &url]).ok();
    got.join().unwrap();
    assert!(
        r.stderr.contains("not pushed") && r.stderr.contains("500"),
        "{}",
        r.stderr
    );
}

// ---- the real consumers: the Pushgateway and node_exporter's textfile collector ---------------

/// A Prometheus program from Debian's package, fetched by `tests/testenv/prometheus-bin`
/// (`pushgateway` or `node-exporter`), or `None` with a note when it cannot be had outside CI.
fn prometheus_bin(which: &str) -> Option<PathBuf> {
    let script = root().join("tests/testenv/prometheus-bin");
    let got = Command::new(&script)
        .arg(which)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))
        .and_then(|out| {
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if out.status.success() && path.is_file() {
                Ok(path)
            } else {
                Err(format!(
                    "{} {which} exited with {}",
                    script.display(),
                    out.status
                ))
            }
        });
    match got {
        Ok(p) => Some(p),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but {which} is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("note: {which} is unavailable ({e}); skipping");
            None
        }
    }
}

/// A program serving HTTP on a loopback port, stopped (by its own PID) when dropped.
struct Served {
    child: std::process::Child,
    addr: String,
}

impl Served {
    /// Starts `program` with `args`, the listen address passed as `--web.listen-address`, and
    /// waits until `ready` answers 200.
    fn start(program: &Path, args: &[&str], ready: &str) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(program)
            .arg(format!("--web.listen-address={addr}"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let served = Self { child, addr };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while http_get(&served.addr, ready).map(|(s, _)| s) != Some(200) {
            assert!(
                std::time::Instant::now() < deadline,
                "{} never ready",
                program.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        served
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` from `addr` (HTTP/1.0: a body without chunks): the status and the body.
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Issue 32, finding 2: a bundle holding the same CA twice gave that CA's series twice. The
/// Pushgateway refused the push (400, and certgen only warned) and node_exporter's textfile
/// collector reported an error on every scrape; `promtool check metrics` does not notice. Both
/// real programs (Debian's), fed by one dry run's `--pushgateway` and `--metrics-file`.
#[test]
fn a_ca_twice_in_a_bundle_is_accepted_by_the_real_pushgateway_and_textfile_collector() {
    let (Some(pushgateway), Some(node_exporter)) = (
        prometheus_bin("pushgateway"),
        prometheus_bin("node-exporter"),
    ) else {
        return;
    };
    let tmp = tempdir();
    let dir = tmp.path().join("certs");
    run_local(&dir, &[]).ok();
    // The CA twice in envoy's bundle (written through the link, as another tool would).
    let bundle = std::fs::read_to_string(dir.join("envoy/ca.crt")).unwrap();
    std::fs::write(dir.join("envoy/ca.crt"), format!("{bundle}{bundle}")).unwrap();

    let textfiles = tmp.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    let gateway = Served::start(&pushgateway, &[], "/-/ready");
    let exporter = Served::start(
        &node_exporter,
        &[
            "--collector.disable-defaults",
            "--collector.textfile",
            &format!("--collector.textfile.directory={}", textfiles.display()),
        ],
        "/metrics",
    );
    let file = textfiles.join("certgen.prom");
    let r = run_local(
        &dir,
        &[
            "--dry-run",
            "--pushgateway",
            &format!("http://{}", gateway.addr),
            "--metrics-file",
            file.to_str().unwrap(),
        ],
    )
    .ok();
    assert!(!r.stderr.contains("not pushed"), "{}", r.stderr);
    let text = std::fs::read_to_string(&file).unwrap();
    let series = "certgen_bundle_ca_not_after_timestamp_seconds{namespace=\"envoy-gateway-system\",secret=\"envoy\"";
    assert_eq!(
        text.lines().filter(|l| l.starts_with(series)).count(),
        1,
        "{text}"
    );

    // The Pushgateway accepted the group and serves the series once.
    let (status, pushed) = http_get(&gateway.addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    let envoy_cas = pushed
        .lines()
        .filter(|l| {
            l.starts_with("certgen_bundle_ca_not_after_timestamp_seconds{")
                && l.contains("secret=\"envoy\"")
        })
        .count();
    assert_eq!(envoy_cas, 1, "{pushed}");
    assert!(
        pushed
            .lines()
            .any(|l| l.starts_with("push_failure_time_seconds{") && l.ends_with(" 0")),
        "{pushed}"
    );
    // The textfile collector read the file without an error.
    let (status, scraped) = http_get(&exporter.addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        value(&scraped, "node_textfile_scrape_error"),
        0.0,
        "{scraped}"
    );
    let served = scraped
        .lines()
        .filter(|l| {
            l.starts_with("certgen_bundle_ca_not_after_timestamp_seconds{")
                && l.contains("secret=\"envoy\"")
        })
        .count();
    assert_eq!(served, 1, "{scraped}");
}

// ---- the chart's alerts ---------------------------------------------------------------------

/// The chart's PrometheusRule, rendered with its defaults (and `extra`) for release `certgen`
/// in envoy-gateway-system: its `spec`, a Prometheus rule file (`groups:`), as JSON.
fn rendered_rules(helm: &Path, extra: &[&str]) -> serde_json::Value {
    let chart = crate::cluster::chart_dir();
    let mut args = vec![
        "template",
        "certgen",
        chart.to_str().unwrap(),
        "--namespace",
        "envoy-gateway-system",
        "--set",
        "prometheusRule.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
        "--show-only",
        "templates/prometheusrule.yaml",
    ];
    args.extend(extra);
    let yaml = crate::cluster::run_helm(helm, &args);
    let doc: serde_json::Value = serde_saphyr::from_str(&yaml)
        .unwrap_or_else(|e| panic!("the PrometheusRule does not parse ({e}):\n{yaml}"));
    assert_eq!(doc["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(doc["kind"], "PrometheusRule");
    doc["spec"].clone()
}

fn alert_names(rules: &serde_json::Value) -> std::collections::BTreeSet<String> {
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

/// `promtool test rules` on the checked-in tests with `rules` as their rule file.
fn promtool_test_rules(promtool: &Path, rules: &serde_json::Value) -> (bool, String) {
    let tmp = tempdir();
    let tests = root().join("tests/it/alerts/certgen.rules.test.yaml");
    std::fs::copy(&tests, tmp.path().join("certgen.rules.test.yaml")).unwrap();
    // JSON is YAML: the rule file as rendered, without a second serializer in between.
    std::fs::write(
        tmp.path().join("certgen.rules.yaml"),
        serde_json::to_string_pretty(rules).unwrap(),
    )
    .unwrap();
    let out = Command::new(promtool)
        .args(["test", "rules", "certgen.rules.test.yaml"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let check = Command::new(promtool)
        .args(["check", "rules", "certgen.rules.yaml"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let said = [&out.stdout, &out.stderr, &check.stdout, &check.stderr]
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .join("");
    (out.status.success() && check.status.success(), said)
}

#[test]
fn every_alert_of_the_chart_fires_and_stays_quiet_as_promtool_tests_it() {
    let Some(helm) = crate::cluster::helm() else {
        return;
    };
    let Some(promtool) = promtool() else { return };
    let rules = rendered_rules(&helm, &[]);
    let (ok, said) = promtool_test_rules(&promtool, &rules);
    assert!(ok, "promtool test rules failed:\n{said}");

    // Every alert is tested firing (group "broken") and not firing (group "healthy").
    let tests: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("tests/it/alerts/certgen.rules.test.yaml")).unwrap(),
    )
    .unwrap();
    let cases = |group: &str, firing: bool| -> std::collections::BTreeSet<String> {
        let group = tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == group)
            .unwrap();
        group["alert_rule_test"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["exp_alerts"].as_array().unwrap().is_empty() != firing)
            .map(|c| c["alertname"].as_str().unwrap().to_string())
            .collect()
    };
    let alerts = alert_names(&rules);
    assert_eq!(alerts.len(), 11, "{alerts:?}");
    assert_eq!(
        cases("broken", true),
        alerts,
        "an alert is never tested firing"
    );
    assert_eq!(
        cases("healthy", false),
        alerts,
        "an alert is never tested quiet"
    );

    // The tests are not vacuous: a threshold of the chart's values changes what fires.
    let shorter = rendered_rules(&helm, &["--set", "prometheusRule.certificateExpiryDays=7"]);
    let (ok, said) = promtool_test_rules(&promtool, &shorter);
    assert!(
        !ok,
        "promtool test rules passed with a 7-day threshold:\n{said}"
    );
    assert!(said.contains("CertgenCertificateExpiringSoon"), "{said}");
}

/// Every alert names its runbook: `docs/alerts.md#<alert in lower case>` in its description,
/// an anchor that the page has (a section per alert), and with `runbookBaseUrl` set, the same
/// anchor as a `runbook_url` annotation.
#[test]
fn every_alert_points_to_its_runbook_section() {
    let Some(helm) = crate::cluster::helm() else {
        return;
    };
    let anchors = crate::doc_snippets::anchors(&root().join("docs/alerts.md"));
    let rules = |extra: &[&str]| -> Vec<(String, serde_json::Value)> {
        rendered_rules(&helm, extra)["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .map(|r| {
                (
                    r["alert"].as_str().unwrap().to_lowercase(),
                    r["annotations"].clone(),
                )
            })
            .collect()
    };
    let plain = rules(&[]);
    assert_eq!(plain.len(), 11);
    for (anchor, annotations) in &plain {
        assert!(
            anchors.contains(anchor),
            "docs/alerts.md has no section #{anchor}"
        );
        let description = annotations["description"].as_str().unwrap();
        assert!(
            description.ends_with(&format!("Runbook: docs/alerts.md#{anchor}")),
            "{description}"
        );
        assert!(annotations.get("runbook_url").is_none(), "{annotations}");
    }
    let base = "https://git.example.com/platform/certgen/blob/main/docs/alerts.md";
    for (anchor, annotations) in rules(&["--set", &format!("prometheusRule.runbookBaseUrl={base}")])
    {
        assert_eq!(annotations["runbook_url"], format!("{base}#{anchor}"));
    }
}
