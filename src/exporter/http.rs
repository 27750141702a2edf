//! The exporter's HTTP server: hyper's HTTP/1 server on one listener, three routes.
//!
//! - `GET /metrics`: the families of [`State::families`] at the time of the request, in the
//!   text exposition format (version 0.0.4), through [`State::scrape`]'s memo;
//! - `GET /healthz`: 200 while the process serves (liveness);
//! - `GET /readyz`: 200 once every watch has listed what exists, else 503 (readiness).
//!
//! Anything else is 404 (405 for another method on a known path). Nothing here reads the
//! cluster: a scrape costs no API request. On shutdown the listener closes and requests in
//! flight finish (bounded by the caller).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::state::{Memo, State};
use crate::config::Config;

/// What a request needs: the config, the watches' state, and the last scrape's health
/// metrics ([`Memo`]: reused while exact).
#[derive(Clone)]
pub struct Shared {
    pub config: Arc<Config>,
    pub state: Arc<RwLock<State>>,
    pub memo: Arc<Mutex<Option<Memo>>>,
}

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

/// The answer to one request.
pub fn answer<B>(shared: &Shared, req: &Request<B>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz" | "/");
    if !known {
        return reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into());
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET and HEAD\n".into(),
        );
    }
    match path {
        "/metrics" => {
            let now = time::OffsetDateTime::now_utc();
            let text = {
                let mut memo = shared.memo.lock().expect("not poisoned");
                let state = shared.state.read().expect("not poisoned");
                state.scrape(&shared.config, now, crate::metrics::snapshot(), &mut memo)
            };
            reply(StatusCode::OK, TEXT_FORMAT, text)
        }
        "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if shared.state.read().expect("not poisoned").ready() => {
            reply(StatusCode::OK, "text/plain", "ok\n".into())
        }
        "/readyz" => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "the watches have not listed the Secrets and caBundle targets yet\n".into(),
        ),
        _ => reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            "<html><body><h1>certgen exporter</h1><p><a href=\"/metrics\">/metrics</a> <a href=\"/readyz\">/readyz</a> <a href=\"/healthz\">/healthz</a></p></body></html>\n".into(),
        ),
    }
}

/// Serves `listener` until `shutdown` resolves; then stops accepting and gives the requests
/// in flight up to `grace` to finish.
pub async fn serve(
    listener: TcpListener,
    shared: Shared,
    shutdown: impl std::future::Future<Output = ()>,
    grace: std::time::Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, do not spin.
                        tracing::warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let shared = shared.clone();
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let response = answer(&shared, &req);
                    async move { Ok::<_, Infallible>(response) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("a metrics connection ended: {e}");
                    }
                });
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
