//! A client-side count of Kubernetes API requests, by verb, for the run's JSON report and the
//! benchmarks. Counted as requests leave the client (retries included); and the 429 answers
//! (API Priority and Fairness' rejections), with how long the latest asked clients to wait,
//! which the pokes' pacing honours (`rotation::gate`, its driver `push.rs`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

static GET: AtomicU64 = AtomicU64::new(0);
static LIST: AtomicU64 = AtomicU64::new(0);
static WATCH: AtomicU64 = AtomicU64::new(0);
static CREATE: AtomicU64 = AtomicU64::new(0);
static UPDATE: AtomicU64 = AtomicU64::new(0);
static PATCH: AtomicU64 = AtomicU64::new(0);
static DELETE: AtomicU64 = AtomicU64::new(0);
static REVIEW: AtomicU64 = AtomicU64::new(0);
static THROTTLED: AtomicU64 = AtomicU64::new(0);
/// Until when the latest 429 asked for quiet (now + its Retry-After).
static QUIET_UNTIL: Mutex<Option<Instant>> = Mutex::new(None);

/// Requests made so far, by verb.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ApiRequests {
    pub total: u64,
    pub reads: u64,
    pub writes: u64,
    pub get: u64,
    pub list: u64,
    pub watch: u64,
    pub create: u64,
    pub update: u64,
    pub patch: u64,
    pub delete: u64,
    /// Access reviews (a POST that changes nothing, counted with the reads).
    pub review: u64,
    /// Answers 429 Too Many Requests (each retried after its Retry-After; not requests).
    #[serde(skip_serializing_if = "is_zero")]
    pub throttled: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Records one answer: a 429 is counted, and its Retry-After (1 s when it has none) is the
/// quiet every client of this process keeps before a paced request ([`quiet_until`]).
pub fn record_answer<B>(res: &http::Response<B>) {
    if res.status() != http::StatusCode::TOO_MANY_REQUESTS {
        return;
    }
    THROTTLED.fetch_add(1, Ordering::Relaxed);
    let wait = res
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .unwrap_or(1);
    let until = Instant::now() + Duration::from_secs(wait.clamp(1, 60));
    let mut quiet = QUIET_UNTIL.lock().unwrap_or_else(|e| e.into_inner());
    *quiet = Some(quiet.map_or(until, |q| q.max(until)));
}

/// Until when the latest 429 asked for quiet, if that is still ahead.
pub fn quiet_until() -> Option<Instant> {
    let quiet = *QUIET_UNTIL.lock().unwrap_or_else(|e| e.into_inner());
    quiet.filter(|q| *q > Instant::now())
}

/// The 429 answers received so far.
pub fn throttled() -> u64 {
    THROTTLED.load(Ordering::Relaxed)
}

/// Records one request.
pub fn record<B>(req: &http::Request<B>) {
    let watch = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
    let counter = match *req.method() {
        http::Method::GET if watch => &WATCH,
        // A collection GET (no name after the resource) is a list.
        http::Method::GET if is_collection(req.uri().path()) => &LIST,
        http::Method::GET => &GET,
        http::Method::POST if req.uri().path().starts_with("/apis/authorization.k8s.io/") => {
            &REVIEW
        }
        http::Method::POST => &CREATE,
        http::Method::PUT => &UPDATE,
        http::Method::PATCH => &PATCH,
        http::Method::DELETE => &DELETE,
        _ => &GET,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

fn is_collection(path: &str) -> bool {
    // /api/v1/namespaces/NS/RESOURCE[/NAME] or /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME];
    // cluster-scoped: /api/v1/RESOURCE[/NAME] or /apis/GROUP/VERSION/RESOURCE[/NAME].
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.iter().position(|p| *p == "namespaces") {
        Some(i) if parts.len() > i + 2 => parts.len() == i + 3,
        _ if parts.first() == Some(&"apis") => parts.len() <= 4,
        _ => parts.len() <= 3,
    }
}

/// The counts so far.
pub fn snapshot() -> ApiRequests {
    let [get, list, watch, create, update, patch, delete, review] = [
        &GET, &LIST, &WATCH, &CREATE, &UPDATE, &PATCH, &DELETE, &REVIEW,
    ]
    .map(|c| c.load(Ordering::Relaxed));
    let reads = get + list + watch + review;
    let writes = create + update + patch + delete;
    ApiRequests {
        total: reads + writes,
        reads,
        writes,
        get,
        list,
        watch,
        create,
        update,
        patch,
        delete,
        review,
        throttled: throttled(),
    }
}

#[cfg(test)]
mod tests {
    use super::is_collection;

    #[test]
    fn collections_and_objects() {
        for (path, list) in [
            ("/api/v1/namespaces/ns/secrets", true),
            ("/api/v1/namespaces/ns/secrets/envoy", false),
            ("/apis/apps/v1/namespaces/ns/deployments", true),
            ("/apis/apps/v1/namespaces/ns/deployments/d", false),
            ("/api/v1/namespaces", true),
            ("/api/v1/namespaces/ns", false),
            (
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                true,
            ),
            (
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/x",
                false,
            ),
            ("/apis/apiregistration.k8s.io/v1/apiservices/v1.x.io", false),
        ] {
            assert_eq!(is_collection(path), list, "{path}");
        }
    }
}
