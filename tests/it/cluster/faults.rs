//! Network faults between certgen and the real API server: a TCP proxy on 127.0.0.1 (TLS passes
//! through untouched) that resets connections part-way through, slows every answer, or drops
//! long-lived connections such as watches. certgen must retry what is transient, resume watches,
//! and otherwise exit 5 leaving a state that a plain re-run converges from.
//!
//! The answers a real API server will not give on demand (429, 503, 500) come from an HTTP-level
//! fake in the top-level `faults`, without a cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Certgen, Cluster, cluster, deployment};
use crate::util::consumer;
use crate::util::trust::check_snapshot;

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Reset connection number `conn` (1-based) once `bytes` have gone upstream on it.
    ResetAfter { conn: usize, bytes: u64 },
    /// Delay every chunk from the server.
    Slow(Duration),
    /// Close every connection once it is this old (watches included).
    DropAfter(Duration),
}

struct Proxy {
    port: u16,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

async fn proxy(upstream: String, fault: Fault) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let started = Instant::now();
                let sent = Arc::new(AtomicU64::new(0));
                let up = {
                    let sent = sent.clone();
                    async move {
                        let mut buf = vec![0u8; 4096];
                        loop {
                            let k = match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => k,
                            };
                            if let Fault::ResetAfter { conn, bytes } = fault
                                && conn == n
                                && sent.load(Ordering::SeqCst) + k as u64 > bytes
                            {
                                // Forward part of this chunk, then cut the connection.
                                let part = (bytes - sent.load(Ordering::SeqCst)) as usize;
                                let _ = sw.write_all(&buf[..part]).await;
                                return;
                            }
                            sent.fetch_add(k as u64, Ordering::SeqCst);
                            if sw.write_all(&buf[..k]).await.is_err() {
                                return;
                            }
                        }
                    }
                };
                let down = async move {
                    let mut buf = vec![0u8; 4096];
                    loop {
                        let k = match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => k,
                        };
                        if let Fault::Slow(d) = fault {
                            tokio::time::sleep(d).await;
                        }
                        if cw.write_all(&buf[..k]).await.is_err() {
                            return;
                        }
                    }
                };
                let limit = match fault {
                    Fault::DropAfter(d) => d,
                    _ => Duration::from_secs(3600),
                };
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                    _ = tokio::time::sleep_until((started + limit).into()) => {}
                }
                // Dropping both halves closes (resets) the connection on both sides.
            });
        }
    });
    Proxy {
        port,
        connections,
        task,
    }
}

/// A kubeconfig like the admin one, but through the proxy.
fn kubeconfig_via(c: &Cluster, port: u16, dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let path = dir.join("proxied.kubeconfig");
    let proxied = text.replace(
        &format!("https://{}", upstream_of(c)),
        &format!("https://127.0.0.1:{port}"),
    );
    assert_ne!(proxied, text, "the kubeconfig's server was replaced");
    std::fs::write(&path, proxied).unwrap();
    path
}

fn upstream_of(c: &Cluster) -> String {
    let kc = kube::config::Kubeconfig::read_from(&c.kubeconfig).unwrap();
    let server = kc.clusters[0]
        .cluster
        .as_ref()
        .unwrap()
        .server
        .clone()
        .unwrap();
    server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

/// certgen in `ns` through `kubeconfig`, quiet, with a Lease that a run cut off by a fault does
/// not hold for long.
fn certgen_via(kubeconfig: &std::path::Path, ns: &str) -> Certgen {
    Certgen::new(kubeconfig).namespace(ns).quiet().short_lease()
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_reset_mid_request_are_retried_or_leave_a_state_a_rerun_converges_from() {
    let Some(c) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut survived = 0;
    let mut runs = 0;
    for conn in 1..=3 {
        for bytes in [700u64, 2500, 6000] {
            let ns = c.namespace(&format!("reset-{conn}-{bytes}")).await;
            certgen_via(&c.kubeconfig, &ns.name).run().ok();
            let p = proxy(upstream_of(&c), Fault::ResetAfter { conn, bytes }).await;
            let kc = kubeconfig_via(&c, p.port, tmp.path());
            let r = certgen_via(&kc, &ns.name)
                .arg("--overwrite")
                .run_async()
                .await;
            runs += 1;
            assert!(
                r.code == 0 || r.code == 5,
                "conn {conn}, {bytes} bytes: exit {}: {}",
                r.code,
                r.stderr
            );
            if r.code == 0 {
                survived += 1;
            } else {
                assert!(r.stderr.contains("kubernetes API"), "{}", r.stderr);
            }
            p.task.abort();
            let (failures, _) = check_snapshot(&c.snapshot(&ns.name).await);
            assert!(
                failures.is_empty(),
                "conn {conn}, {bytes} bytes: {failures:?}"
            );
            // A plain re-run finishes whatever was left.
            certgen_via(&c.kubeconfig, &ns.name).run().ok();
            let (failures, cas) = check_snapshot(&c.snapshot(&ns.name).await);
            assert!(
                failures.is_empty() && cas.len() <= 2,
                "conn {conn}, {bytes} bytes: {failures:?} {cas:?}"
            );
        }
    }
    eprintln!("reset faults: {survived} of {runs} runs completed despite the reset");
    assert!(survived > 0, "transient resets are retried");
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_answers_and_dropped_watches_do_not_fail_a_run() {
    let Some(c) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ns = c.namespace("faults-watch").await;
    // A rollout that takes a few seconds, so its watch is dropped several times.
    let d = deployment("envoy-ratelimit", 2, json!({"minReadySeconds": 3}));
    c.create_deployment(&ns.name, &d).await;

    let p = proxy(
        upstream_of(&c),
        Fault::DropAfter(Duration::from_millis(1500)),
    )
    .await;
    let kc = kubeconfig_via(&c, p.port, tmp.path());
    let report = certgen_via(&kc, &ns.name)
        .args(["--wait", "--timeout", "120s"])
        .run_async()
        .await
        .ok()
        .json();
    let rl = consumer(&report, "envoy-ratelimit");
    assert_eq!(rl["deployments"][0]["rollout"], "done", "{report}");
    assert!(
        p.connections.load(Ordering::SeqCst) > 2,
        "the watch was dropped and resumed"
    );
    p.task.abort();

    let p = proxy(upstream_of(&c), Fault::Slow(Duration::from_millis(30))).await;
    let kc = kubeconfig_via(&c, p.port, tmp.path());
    let started = Instant::now();
    certgen_via(&kc, &ns.name)
        .arg("--overwrite")
        .run_async()
        .await
        .ok();
    eprintln!(
        "a staged rotation through a 30 ms-per-chunk proxy took {:?}",
        started.elapsed()
    );
    p.task.abort();
    let (failures, _) = check_snapshot(&c.snapshot(&ns.name).await);
    assert!(failures.is_empty(), "{failures:?}");
}
