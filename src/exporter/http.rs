//! The exporter's HTTP server: hyper's HTTP/1 server on one listener, three routes, and the
//! limits that keep it answering under hostile load.
//!
//! - `GET /metrics`: the families of [`State::families`] at the time of the request, in the
//!   text exposition format (version 0.0.4), through [`State::scrape_parts`]'s memo;
//! - `GET /healthz`: 200 while the process serves (liveness);
//! - `GET /readyz`: 200 once every watch has listed what exists, else 503 (readiness).
//!
//! Anything else is 404 (405 for another method on a known path). Nothing here reads the
//! cluster: a scrape costs no API request. On shutdown the listener closes and requests in
//! flight finish (bounded by the caller).
//!
//! # Limits (docs/exporter.md)
//!
//! - **Header read and idle timeout** ([`HEADER_TIMEOUT`]): a connection must send a request's
//!   whole head within it after it opens or after its last response (hyper's
//!   `header_read_timeout`, which needs a timer: the tokio one). An idle socket, a kept-alive
//!   connection between scrapes and a slowloris sending a byte at a time are all closed then.
//! - **Connection cap** ([`MAX_CONNECTIONS`]): at most that many connections are open. Every
//!   connection is accepted at once (so the kernel's accept queue never fills and a scrape's
//!   connection never waits behind attackers'); when the cap is reached, the connection that
//!   has waited longest without a request in progress (idle, or still sending its head) is
//!   closed to make room. A connection whose request is being answered is never closed; when
//!   every one is, the new connection is closed instead. A scraper sends its request as soon as
//!   it connects, so it is the newest and the last to be evicted.
//! - **Memory**: a connection's read buffer is bounded to [`MAX_BUF`] bytes (a longer head is
//!   refused with 431), so open connections cost at most about `MAX_CONNECTIONS` x 20 KB; every
//!   response of the same state shares the one rendering of the health metrics (`Bytes`), so a
//!   slow reader holds a reference, not a copy; a recompute runs on a blocking thread, so
//!   `/healthz` answers while it runs.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::state::{Memo, State};
use crate::config::Config;

/// How long a connection may take to send a request's head, counted from when it opened or
/// from its previous response: the header read timeout and the keep-alive idle timeout in one.
/// Prometheus sends its scrape at once and opens a new connection when a kept one was closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The most connections open at once (see the module's documentation for the policy at the
/// cap). Scrapers and probes need a handful.
pub const MAX_CONNECTIONS: usize = 256;

/// The read buffer of a connection: hyper's smallest. A request head longer than this is
/// refused (431).
pub const MAX_BUF: usize = 8192;

/// What a request needs: the config, the watches' state, and the last scrape's health
/// metrics ([`Memo`]: reused while exact).
#[derive(Clone)]
pub struct Shared {
    pub config: Arc<Config>,
    pub state: Arc<RwLock<State>>,
    pub memo: Arc<tokio::sync::Mutex<Option<Memo>>>,
}

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A response body of a few chunks, each shared ([`Bytes`]): the health metrics are the
/// memo's own rendering, not a copy per response.
#[derive(Debug, Default)]
pub struct Chunks(VecDeque<Bytes>);

impl Chunks {
    /// The chunks of a body, in order.
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        Self(chunks.into_iter().filter(|c| !c.is_empty()).collect())
    }

    /// The whole body in one piece (tests).
    pub fn concat(&self) -> Vec<u8> {
        self.0.iter().flat_map(|c| c.iter().copied()).collect()
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().0.pop_front().map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.iter().map(|c| c.len() as u64).sum())
    }
}

fn reply(status: StatusCode, content_type: &str, body: Chunks) -> Response<Chunks> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
        .expect("a valid response")
}

fn text(status: StatusCode, body: &'static str) -> Response<Chunks> {
    reply(
        status,
        "text/plain",
        Chunks::new([Bytes::from_static(body.as_bytes())]),
    )
}

/// The answer to one request. A recomputation of the health metrics runs on a blocking
/// thread.
pub async fn answer<B>(shared: &Shared, req: &Request<B>) -> Response<Chunks> {
    let path = req.uri().path();
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz" | "/");
    if !known {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match path {
        "/metrics" => {
            // One computation at a time, and it always finishes: it owns the memo's lock, so a
            // scrape dropped while it runs (a scraper that timed out and hung up) neither loses
            // the memo nor lets the next scrape start a second computation beside it. The
            // others wait for it and reuse its memo.
            let memo = shared.memo.clone().lock_owned().await;
            let (state, config) = (shared.state.clone(), shared.config.clone());
            let computed = tokio::task::spawn_blocking(move || {
                let mut memo = memo;
                // Read once the lock is held: a memo the previous holder left is then never
                // newer than this scrape's now.
                let now = time::OffsetDateTime::now_utc();
                let requests = crate::api_requests::snapshot();
                let state = state.read().expect("not poisoned");
                state.scrape_parts(&config, now, requests, &mut memo)
            })
            .await;
            match computed {
                Ok((health, own)) => reply(
                    StatusCode::OK,
                    TEXT_FORMAT,
                    Chunks::new([health, Bytes::from(own)]),
                ),
                Err(e) => {
                    tracing::warn!("computing the metrics failed: {e}");
                    text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "computing the metrics failed\n",
                    )
                }
            }
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if shared.state.read().expect("not poisoned").ready() => {
            text(StatusCode::OK, "ok\n")
        }
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the watches have not listed the Secrets and caBundle targets yet\n",
        ),
        _ => reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Chunks::new([Bytes::from_static(
                b"<html><body><h1>certgen exporter</h1><p><a href=\"/metrics\">/metrics</a> <a href=\"/readyz\">/readyz</a> <a href=\"/healthz\">/healthz</a></p></body></html>\n",
            )]),
        ),
    }
}

/// One open connection, as the cap sees it.
struct Open {
    /// Closes it (set once its task is spawned).
    abort: Option<tokio::task::AbortHandle>,
    /// Since when it has had no request in progress (`None`: a request is being answered).
    idle_since: Option<Instant>,
}

/// The open connections, for the cap's policy.
#[derive(Default)]
pub struct Connections {
    next: u64,
    open: HashMap<u64, Open>,
    /// Connections closed to make room, and new ones closed because every open one was busy.
    pub evicted: u64,
    pub refused: u64,
}

impl Connections {
    /// Makes room for one more under `cap`, and registers it: its id, or `None` when every
    /// open connection has a request in progress (then the new one is closed).
    fn admit(&mut self, cap: usize, now: Instant) -> Option<u64> {
        if self.open.len() >= cap {
            let oldest = self
                .open
                .iter()
                .filter_map(|(id, o)| o.idle_since.map(|t| (t, *id)))
                .min();
            let Some((_, victim)) = oldest else {
                self.refused += 1;
                return None;
            };
            if let Some(o) = self.open.remove(&victim)
                && let Some(abort) = o.abort
            {
                abort.abort();
            }
            self.evicted += 1;
        }
        let id = self.next;
        self.next += 1;
        self.open.insert(
            id,
            Open {
                abort: None,
                idle_since: Some(now),
            },
        );
        Some(id)
    }

    fn spawned(&mut self, id: u64, abort: tokio::task::AbortHandle) {
        match self.open.get_mut(&id) {
            Some(o) => o.abort = Some(abort),
            // Already finished (or evicted before its task was known).
            None => abort.abort(),
        }
    }

    fn busy(&mut self, id: u64, busy: bool) {
        if let Some(o) = self.open.get_mut(&id) {
            o.idle_since = (!busy).then(Instant::now);
        }
    }

    /// How many are open now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Removes a connection from the registry when its task ends, however it ends.
struct Registered {
    id: u64,
    conns: Arc<Mutex<Connections>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open
            .remove(&self.id);
    }
}

/// The server's limits ([`HEADER_TIMEOUT`], [`MAX_CONNECTIONS`]); tests use smaller ones.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: HEADER_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// Test-only (cargo feature `test-hooks`, never in a release build): the exporter's limits as
/// `HEADER_MS,MAX_CONNECTIONS`, so tests through the binary need not wait 10 s or open 257
/// connections.
#[cfg(feature = "test-hooks")]
pub const LIMITS_ENV: &str = "CERTGEN_TEST_EXPORTER_LIMITS";

impl Limits {
    /// The limits the exporter serves with: the defaults (the test hook aside).
    pub fn from_env() -> Self {
        #[cfg(feature = "test-hooks")]
        if let Some((ms, max)) = std::env::var(LIMITS_ENV).ok().and_then(|v| {
            let (ms, max) = v.split_once(',')?;
            Some((ms.parse().ok()?, max.parse().ok()?))
        }) {
            return Self {
                header_timeout: Duration::from_millis(ms),
                max_connections: max,
            };
        }
        Self::default()
    }
}

/// Serves `listener` until `shutdown` resolves; then stops accepting and gives the requests
/// in flight up to `grace` to finish.
pub async fn serve(
    listener: TcpListener,
    shared: Shared,
    shutdown: impl std::future::Future<Output = ()>,
    grace: Duration,
) {
    serve_with(
        listener,
        shared,
        shutdown,
        grace,
        Limits::from_env(),
        Arc::default(),
    )
    .await
}

/// [`serve`] with `limits`, keeping the open connections in `conns` (so a test can see them).
pub async fn serve_with(
    listener: TcpListener,
    shared: Shared,
    shutdown: impl std::future::Future<Output = ()>,
    grace: Duration,
    limits: Limits,
    conns: Arc<Mutex<Connections>>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_BUF)
        .max_headers(64);
    tokio::pin!(shutdown);
    let mut failing = false;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => {
                        failing = false;
                        a
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait, do not spin; say it once.
                        if !failing {
                            tracing::warn!("accepting a connection failed: {e}");
                            failing = true;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let admitted = conns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .admit(limits.max_connections, Instant::now());
                let Some(id) = admitted else {
                    drop(stream);
                    continue;
                };
                let registered = Registered { id, conns: conns.clone() };
                let shared = shared.clone();
                let on = conns.clone();
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let shared = shared.clone();
                    let on = on.clone();
                    async move {
                        on.lock().unwrap_or_else(|e| e.into_inner()).busy(id, true);
                        let response = answer(&shared, &req).await;
                        on.lock().unwrap_or_else(|e| e.into_inner()).busy(id, false);
                        Ok::<_, Infallible>(response)
                    }
                });
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                let task = tokio::spawn(async move {
                    let _registered = registered;
                    if let Err(e) = conn.await {
                        tracing::debug!("a metrics connection ended: {e}");
                    }
                });
                conns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .spawned(id, task.abort_handle());
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("closing metrics connections still open after {grace:?}");
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// A server with `limits` on a loopback port, over an empty state; its address, its
    /// connections, and the stop switch.
    struct Server {
        addr: std::net::SocketAddr,
        conns: Arc<Mutex<Connections>>,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    /// What requests need, for the envoy-gateway profile over an empty state.
    fn shared() -> Shared {
        let config = crate::config::Config::resolve(
            &crate::config::Source::Profile("envoy-gateway".into()),
            &crate::config::Overrides::default(),
            &crate::config::Env::default(),
        )
        .unwrap();
        Shared {
            state: Arc::new(RwLock::new(State::new(&config))),
            config: Arc::new(config),
            memo: Arc::default(),
        }
    }

    impl Server {
        fn start(limits: Limits) -> Self {
            let shared = shared();
            let conns: Arc<Mutex<Connections>> = Arc::default();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let (addr_tx, addr_rx) = std::sync::mpsc::channel();
            let seen = conns.clone();
            let thread = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                    addr_tx.send(listener.local_addr().unwrap()).unwrap();
                    let stop = async move {
                        let _ = stopped.await;
                    };
                    serve_with(listener, shared, stop, Duration::from_secs(1), limits, seen).await;
                });
            });
            Self {
                addr: addr_rx.recv().unwrap(),
                conns,
                stop: Some(stop),
                thread: Some(thread),
            }
        }

        fn open(&self) -> usize {
            self.conns.lock().unwrap().len()
        }

        /// `GET path` on a new connection: the status line, within `within`.
        fn get(&self, path: &str, within: Duration) -> String {
            let mut s = TcpStream::connect(self.addr).unwrap();
            s.set_read_timeout(Some(within)).unwrap();
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            out.lines().next().unwrap_or_default().to_string()
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.stop.take().unwrap().send(());
            let _ = self.thread.take().unwrap().join();
        }
    }

    /// Whether the server closed `s` (EOF or reset) within `within`.
    fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        s.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 64];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
                Err(_) => return true,
            }
        }
    }

    const QUICK: Limits = Limits {
        header_timeout: Duration::from_millis(300),
        max_connections: 8,
    };

    /// Issue 32, finding 1: an idle socket and a slowloris were never closed (hyper had no
    /// timer, so its 30 s header timeout never applied).
    #[test]
    fn idle_and_slow_connections_are_closed_after_the_header_timeout() {
        let server = Server::start(QUICK);
        let mut idle = TcpStream::connect(server.addr).unwrap();
        let mut slow = TcpStream::connect(server.addr).unwrap();
        let started = std::time::Instant::now();
        // One byte of a request head every 100 ms: never a whole head.
        let mut slow_writer = slow.try_clone().unwrap();
        let dribble = std::thread::spawn(move || {
            for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: yes".iter() {
                if slow_writer.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        assert!(closed_within(&mut idle, Duration::from_secs(3)), "idle");
        assert!(
            closed_within(&mut slow, Duration::from_secs(3)),
            "slowloris"
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        dribble.join().unwrap();
        // A kept-alive connection is closed as idle after its response, too.
        let mut kept = TcpStream::connect(server.addr).unwrap();
        write!(kept, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut head = [0u8; 15];
        kept.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200 OK");
        assert!(
            closed_within(&mut kept, Duration::from_secs(3)),
            "kept alive"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while server.open() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(server.open(), 0);
    }

    /// Issue 32, finding 1: nothing capped connections, so idle sockets exhausted the file
    /// descriptors (and memory) and scrapes timed out. At the cap, the oldest connection
    /// without a request in progress makes room, and a scrape still answers at once.
    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_for_a_scrape() {
        let limits = Limits {
            header_timeout: Duration::from_secs(60),
            max_connections: 8,
        };
        let server = Server::start(limits);
        let mut idle: Vec<TcpStream> = (0..20)
            .map(|_| {
                let s = TcpStream::connect(server.addr).unwrap();
                // Accepted in order: each a little older than the next.
                std::thread::sleep(Duration::from_millis(5));
                s
            })
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while server.conns.lock().unwrap().evicted < 12 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(server.open() <= 8, "{} open", server.open());
        // The 12 oldest were closed, the 8 newest are open.
        for (i, s) in idle.iter_mut().enumerate() {
            let closed = closed_within(s, Duration::from_millis(200));
            assert_eq!(closed, i < 12, "connection {i}");
        }
        let started = std::time::Instant::now();
        assert_eq!(
            server.get("/healthz", Duration::from_secs(2)),
            "HTTP/1.1 200 OK"
        );
        assert_eq!(
            server.get("/metrics", Duration::from_secs(2)),
            "HTTP/1.1 200 OK"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(server.open() <= 8);
    }

    /// A request head larger than the read buffer is refused, not buffered.
    #[test]
    fn a_huge_request_head_is_refused() {
        let server = Server::start(QUICK);
        let mut s = TcpStream::connect(server.addr).unwrap();
        let big = "a".repeat(64 * 1024);
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n"
        );
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(
            out.is_empty() || out.starts_with("HTTP/1.1 431"),
            "{}",
            &out[..out.len().min(200)]
        );
    }

    /// A scrape dropped while its metrics are computed (a scraper that timed out and hung up)
    /// lets the computation finish and keep its memo, and no second computation starts beside
    /// it. (Was: the memo moved into the computation was lost with the dropped scrape, and the
    /// lock was released, so under a soak's timeouts computations piled up on the blocking
    /// pool: RSS 35 -> 491 MB after the attackers stopped.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_scrape_neither_loses_the_memo_nor_doubles_the_work() {
        let shared = shared();
        let req = Request::get("/metrics").body(()).unwrap();
        // The computation cannot read the state while a watch writes it (a thread holds the
        // write lock until told to let go).
        let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let writer = {
            let state = shared.state.clone();
            std::thread::spawn(move || {
                let _writing = state.write().unwrap();
                held.0.send(()).unwrap();
                let _ = release.1.recv();
            })
        };
        held.1.recv().unwrap();
        let scrape = {
            let (shared, req) = (shared.clone(), req.clone());
            tokio::spawn(async move { answer(&shared, &req).await })
        };
        while shared.memo.try_lock().is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        scrape.abort();
        assert!(scrape.await.unwrap_err().is_cancelled());
        // The computation still holds the memo: a second scrape would wait for it.
        assert!(
            shared.memo.try_lock().is_err(),
            "the lock went with the scrape"
        );
        release.0.send(()).unwrap();
        writer.join().unwrap();
        let memo = tokio::time::timeout(Duration::from_secs(10), shared.memo.lock())
            .await
            .expect("the computation ends");
        assert!(memo.is_some(), "the memo went with the scrape");
        drop(memo);
        let answered = answer(&shared, &req).await;
        assert_eq!(answered.status(), StatusCode::OK);
    }

    #[test]
    fn a_body_of_chunks_is_their_concatenation() {
        let body = Chunks::new([Bytes::from_static(b"ab"), Bytes::new(), Bytes::from("cd")]);
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(4));
        assert_eq!(body.concat(), b"abcd");
    }
}
