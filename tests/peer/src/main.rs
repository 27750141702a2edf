//! certgen-test-peer: a mutual-TLS peer for certgen's real-node tests.
//!
//! It loads `ca.crt`, `tls.crt` and `tls.key` from a mounted Secret directory, serves mutual TLS
//! on a loopback port (client certificates required, verified against `ca.crt`), dials other
//! peers continuously (their chain verified against `ca.crt`, our leaf presented), and appends
//! one JSON line per event to an output file that the test reads from the node's disk:
//!
//! - `load`: certificates (re)loaded, with the kubelet's `..data` version directory and short
//!   SHA-256 fingerprints of the CAs and the leaf;
//! - `fail`: one failed handshake (`role` client or server, `kind` tls or io, the error);
//! - `unreachable`: a dial that found nothing listening (not a handshake);
//! - `stats`: running totals, every second;
//! - `file`: the watched file's content changed (for measuring Secret propagation).
//!
//! With `--reload hot` it polls `..data` (the symlink the kubelet swaps atomically when a Secret
//! changes) and switches to the new certificates for every later handshake; with
//! `--reload start` it reads them once, like a process that only loads certificates at start.
//! Names in server certificates are not checked (rustls refuses Envoy Gateway's single-label
//! wildcard SANs); chain, validity and key usage are. The peer stops on SIGTERM or after
//! `--max-seconds`, so its dial loop is bounded in time.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore,
    ServerConfig, ServerConnection, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

const USAGE: &str = "\
usage: certgen-test-peer --name NAME --certs DIR --out FILE [--listen ADDR]
         [--dial NAME=ADDR@SERVER_NAME]... [--reload hot|start] [--interval-ms N]
         [--watch FILE] [--max-seconds N]";

struct Args {
    name: String,
    certs: PathBuf,
    out: PathBuf,
    listen: Option<SocketAddr>,
    dial: Vec<Target>,
    hot: bool,
    interval: Duration,
    watch: Option<PathBuf>,
    max: Duration,
}

struct Target {
    name: String,
    addr: SocketAddr,
    server_name: ServerName<'static>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut name, mut certs, mut out, mut listen, mut watch) = (None, None, None, None, None);
    let (mut dial, mut hot, mut interval_ms, mut max_s) = (Vec::new(), true, 100u64, 3600u64);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--name" => name = Some(value()?),
            "--certs" => certs = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--listen" => listen = Some(value()?.parse().map_err(|e| format!("--listen: {e}"))?),
            "--watch" => watch = Some(PathBuf::from(value()?)),
            "--reload" => {
                hot = match value()?.as_str() {
                    "hot" => true,
                    "start" => false,
                    other => return Err(format!("--reload {other}: expected hot or start")),
                }
            }
            "--interval-ms" => {
                interval_ms = value()?
                    .parse()
                    .map_err(|e| format!("--interval-ms: {e}"))?
            }
            "--max-seconds" => {
                max_s = value()?
                    .parse()
                    .map_err(|e| format!("--max-seconds: {e}"))?
            }
            "--dial" => {
                let v = value()?;
                let (peer, rest) = v.split_once('=').ok_or(format!("--dial {v}: no '='"))?;
                let (addr, sni) = rest.split_once('@').ok_or(format!("--dial {v}: no '@'"))?;
                dial.push(Target {
                    name: peer.to_string(),
                    addr: addr.parse().map_err(|e| format!("--dial {v}: {e}"))?,
                    server_name: ServerName::try_from(sni.to_string())
                        .map_err(|e| format!("--dial {v}: {e}"))?,
                });
            }
            "--help" | "-h" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(Args {
        name: name.ok_or(format!("--name is required\n{USAGE}"))?,
        certs: certs.ok_or(format!("--certs is required\n{USAGE}"))?,
        out: out.ok_or(format!("--out is required\n{USAGE}"))?,
        listen,
        dial,
        hot,
        interval: Duration::from_millis(interval_ms.max(1)),
        watch,
        max: Duration::from_secs(max_s),
    })
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The event log: one JSON object per line, appended and flushed at once.
struct Log(Mutex<File>);

impl Log {
    fn event(&self, ev: &str, fields: &str) {
        let line = if fields.is_empty() {
            format!("{{\"t\":{},\"ev\":\"{ev}\"}}\n", now_ms())
        } else {
            format!("{{\"t\":{},\"ev\":\"{ev}\",{fields}}}\n", now_ms())
        };
        let mut f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A full disk must not stop the handshakes; the test notices missing lines.
        let _ = f.write_all(line.as_bytes());
    }
}

#[derive(Default)]
struct Counters {
    ok: AtomicU64,
    fail: AtomicU64,
    unreachable: AtomicU64,
    served_ok: AtomicU64,
    served_fail: AtomicU64,
}

/// Certificates loaded from one version of the Secret directory.
struct Loaded {
    version: String,
    server: Option<Arc<ServerConfig>>,
    client: Arc<ClientConfig>,
}

fn fingerprint(der: &[u8]) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The kubelet's current version directory (`..data` points at it), or "" for a plain directory.
fn data_version(dir: &Path) -> String {
    std::fs::read_link(dir.join("..data"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Chain, validity and key usage, as rustls checks them; names are not compared.
#[derive(Debug)]
struct TrustOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for TrustOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn load(
    dir: &Path,
    serve: bool,
    provider: &Arc<CryptoProvider>,
) -> Result<(Loaded, String), String> {
    let version = data_version(dir);
    // Read through the version directory itself, so the three files come from one Secret version
    // even if the kubelet swaps `..data` meanwhile.
    let base = if version.is_empty() {
        dir.to_path_buf()
    } else {
        dir.join(&version)
    };
    let read_certs = |name: &str| -> Result<Vec<CertificateDer<'static>>, String> {
        let path = base.join(name);
        let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .collect();
        let certs = certs.map_err(|e| format!("{}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: no certificate", path.display()));
        }
        Ok(certs)
    };
    let cas = read_certs("ca.crt")?;
    let chain = read_certs("tls.crt")?;
    let key_path = base.join("tls.key");
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("{}: {e}", key_path.display()))?;
    let mut roots = RootCertStore::empty();
    for ca in &cas {
        roots.add(ca.clone()).map_err(|e| format!("ca.crt: {e}"))?;
    }
    let roots = Arc::new(roots);
    let server = if serve {
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| format!("client verifier: {e}"))?;
        let cfg = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("server certificate: {e}"))?;
        Some(Arc::new(cfg))
    } else {
        None
    };
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| format!("server verifier: {e}"))?;
    let client = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(TrustOnly(verifier)))
        .with_client_auth_cert(chain.clone(), key)
        .map_err(|e| format!("client certificate: {e}"))?;
    let cas_json: Vec<String> = cas.iter().map(|c| json_str(&fingerprint(c))).collect();
    let fields = format!(
        "\"data\":{},\"ca\":[{}],\"leaf\":{}",
        json_str(&version),
        cas_json.join(","),
        json_str(&fingerprint(&chain[0]))
    );
    Ok((
        Loaded {
            version,
            server,
            client: Arc::new(client),
        },
        fields,
    ))
}

/// "tls" when rustls refused the peer (or was refused by it), "io" otherwise.
fn kind(e: &io::Error) -> &'static str {
    if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
        "tls"
    } else {
        "io"
    }
}

fn dial_once(t: &Target, cfg: Arc<ClientConfig>) -> Result<Result<(), io::Error>, io::Error> {
    let mut sock = TcpStream::connect_timeout(&t.addr, Duration::from_secs(1))?;
    let handshake = (|| {
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        sock.set_write_timeout(Some(Duration::from_secs(3)))?;
        sock.set_nodelay(true)?;
        let mut conn = ClientConnection::new(cfg, t.server_name.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut tls = rustls::Stream::new(&mut conn, &mut sock);
        // The server writes one byte after the handshake. Reading it is what surfaces a client
        // certificate the server refused: under TLS 1.3 the client finishes first.
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte)?;
        conn.send_close_notify();
        let _ = conn.complete_io(&mut sock);
        Ok(())
    })();
    Ok(handshake)
}

fn serve_one(mut sock: TcpStream, cfg: Arc<ServerConfig>) -> io::Result<()> {
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(Duration::from_secs(3)))?;
    sock.set_write_timeout(Some(Duration::from_secs(3)))?;
    sock.set_nodelay(true)?;
    let mut conn =
        ServerConnection::new(cfg).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    conn.writer().write_all(b"k")?;
    conn.send_close_notify();
    while conn.wants_write() {
        conn.write_tls(&mut sock)?;
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("certgen-test-peer: {e}");
            std::process::exit(2);
        }
    };
    let file = match OpenOptions::new().create(true).append(true).open(&args.out) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("certgen-test-peer: {}: {e}", args.out.display());
            std::process::exit(1);
        }
    };
    let log = Arc::new(Log(Mutex::new(file)));
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("certgen-test-peer: signal handler: {e}");
            std::process::exit(1);
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    log.event(
        "start",
        &format!(
            "\"name\":{},\"reload\":\"{}\",\"pid\":{}",
            json_str(&args.name),
            if args.hot { "hot" } else { "start" },
            std::process::id()
        ),
    );

    let serve = args.listen.is_some();
    // The Secret may not be mounted yet in a test that starts peers early: retry for a while.
    let deadline = Instant::now() + Duration::from_secs(60);
    let loaded = loop {
        match load(&args.certs, serve, &provider) {
            Ok((l, fields)) => {
                log.event("load", &fields);
                break l;
            }
            Err(e) if Instant::now() < deadline && !stop.load(Ordering::Relaxed) => {
                log.event("load_error", &format!("\"err\":{}", json_str(&e)));
                thread::sleep(Duration::from_secs(1));
            }
            Err(e) => {
                eprintln!("certgen-test-peer: loading {}: {e}", args.certs.display());
                std::process::exit(1);
            }
        }
    };
    let current = Arc::new(RwLock::new(Arc::new(loaded)));
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let running = {
        let stop = stop.clone();
        let max = args.max;
        move || !stop.load(Ordering::Relaxed) && started.elapsed() < max
    };
    let mut threads = Vec::new();

    if args.hot {
        let (log, current, dir, running) = (
            log.clone(),
            current.clone(),
            args.certs.clone(),
            running.clone(),
        );
        let provider = provider.clone();
        threads.push(thread::spawn(move || {
            while running() {
                thread::sleep(Duration::from_millis(50));
                let seen = current.read().unwrap().version.clone();
                if data_version(&dir) == seen {
                    continue;
                }
                match load(&dir, serve, &provider) {
                    Ok((l, fields)) => {
                        log.event("load", &fields);
                        *current.write().unwrap() = Arc::new(l);
                    }
                    Err(e) => log.event("load_error", &format!("\"err\":{}", json_str(&e))),
                }
            }
        }));
    }

    if let Some(path) = args.watch.clone() {
        let (log, running) = (log.clone(), running.clone());
        threads.push(thread::spawn(move || {
            let mut last: Option<String> = None;
            while running() {
                let now = std::fs::read_to_string(&path).ok();
                if now != last {
                    if let Some(content) = &now {
                        let content: String = content.trim().chars().take(200).collect();
                        log.event("file", &format!("\"content\":{}", json_str(&content)));
                    }
                    last = now;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }));
    }

    if let Some(addr) = args.listen {
        let listener = match reuseport_listener(addr) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("certgen-test-peer: listening on {addr}: {e}");
                std::process::exit(1);
            }
        };
        let (log, current, counters, running) = (
            log.clone(),
            current.clone(),
            counters.clone(),
            running.clone(),
        );
        threads.push(thread::spawn(move || {
            let mut workers: Vec<thread::JoinHandle<()>> = Vec::new();
            loop {
                // Once stopping, take what is already queued, then close at once: connections
                // left in the queue of a closed listener are reset. From then on the kernel
                // sends new connections to the other pod sharing the port.
                let stopping = !running();
                match listener.accept() {
                    Ok((sock, from)) => {
                        let cfg = current.read().unwrap().server.clone().expect("serving");
                        let (log, counters) = (log.clone(), counters.clone());
                        workers.push(thread::spawn(move || match serve_one(sock, cfg) {
                            Ok(()) => {
                                counters.served_ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                counters.served_fail.fetch_add(1, Ordering::Relaxed);
                                log.event(
                                    "fail",
                                    &format!(
                                        "\"role\":\"server\",\"peer\":{},\"kind\":\"{}\",\"err\":{}",
                                        json_str(&from.to_string()),
                                        kind(&e),
                                        json_str(&e.to_string())
                                    ),
                                );
                            }
                        }));
                        workers.retain(|w| !w.is_finished());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if stopping {
                            break;
                        }
                        thread::sleep(Duration::from_millis(2))
                    }
                    Err(_) if stopping => break,
                    Err(e) => {
                        log.event("accept_error", &format!("\"err\":{}", json_str(&e.to_string())));
                        thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            // Let the handshakes in flight finish.
            drop(listener);
            for w in workers {
                let _ = w.join();
            }
        }));
    }

    for t in args.dial {
        let (log, current, counters, running) = (
            log.clone(),
            current.clone(),
            counters.clone(),
            running.clone(),
        );
        let interval = args.interval;
        threads.push(thread::spawn(move || {
            let mut last_unreachable_log = None::<Instant>;
            while running() {
                let cfg = current.read().unwrap().client.clone();
                match dial_once(&t, cfg) {
                    Ok(Ok(())) => {
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => {
                        counters.fail.fetch_add(1, Ordering::Relaxed);
                        log.event(
                            "fail",
                            &format!(
                                "\"role\":\"client\",\"peer\":{},\"kind\":\"{}\",\"err\":{}",
                                json_str(&t.name),
                                kind(&e),
                                json_str(&e.to_string())
                            ),
                        );
                    }
                    Err(e) => {
                        counters.unreachable.fetch_add(1, Ordering::Relaxed);
                        // At most one line a second: a peer that is not up yet is not news.
                        if last_unreachable_log
                            .is_none_or(|t0| t0.elapsed() >= Duration::from_secs(1))
                        {
                            last_unreachable_log = Some(Instant::now());
                            log.event(
                                "unreachable",
                                &format!(
                                    "\"peer\":{},\"err\":{}",
                                    json_str(&t.name),
                                    json_str(&e.to_string())
                                ),
                            );
                        }
                    }
                }
                thread::sleep(interval);
            }
        }));
    }

    let stats = |log: &Log| {
        log.event(
            "stats",
            &format!(
                "\"ok\":{},\"fail\":{},\"unreachable\":{},\"served_ok\":{},\"served_fail\":{}",
                counters.ok.load(Ordering::Relaxed),
                counters.fail.load(Ordering::Relaxed),
                counters.unreachable.load(Ordering::Relaxed),
                counters.served_ok.load(Ordering::Relaxed),
                counters.served_fail.load(Ordering::Relaxed)
            ),
        )
    };
    let mut last_stats = Instant::now();
    while running() {
        thread::sleep(Duration::from_millis(100));
        if last_stats.elapsed() >= Duration::from_secs(1) {
            last_stats = Instant::now();
            stats(&log);
        }
    }
    for t in threads {
        let _ = t.join();
    }
    stats(&log);
    log.event("stop", "");
}

fn reuseport_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    // The old and the new pod of a rolling restart listen on the same port at once.
    sock.set_reuse_port(true)?;
    sock.bind(&addr.into())?;
    sock.listen(128)?;
    let listener: TcpListener = sock.into();
    listener.set_nonblocking(true)?;
    Ok(listener)
}
