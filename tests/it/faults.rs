//! API faults without a cluster: the answers a real API server will not give on demand (429
//! with Retry-After, 503, 504, 500), from an HTTP-level fake behind certgen's real client layers
//! (`certgen::k8s::layered`). Transient answers are retried with backoff and a bound, Retry-After is
//! honoured, and a 500 is reported at once as an API failure (exit 5). A pod poke still throttled
//! after the retries is no failure: it says when to ask again (`PokeAnswer::Throttled`). A watch
//! cache that lags a `caBundle` write (504 at its resourceVersion) leaves it unseen.
//!
//! Faults on the way to a real API server (connections reset mid-request, slow answers,
//! dropped watches) are in `cluster::faults`, through a TCP proxy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use certgen::k8s::KubeStore;
use certgen::secret::Observed;
use certgen::store::{SecretStore, StoreError};
use kube::client::{Body, ClientBuilder};
use serde_json::json;

/// What a fake API server answers one request: status, JSON body, an extra header.
type Answer = (u16, serde_json::Value, Option<(&'static str, &'static str)>);

/// The requests a fake API server received, each as its path and query.
type Requests = Arc<std::sync::Mutex<Vec<String>>>;

/// How many requests a fake API server received.
fn count(requests: &Requests) -> usize {
    requests.lock().unwrap().len()
}

/// A fake API server behind certgen's real client layers (`certgen::k8s::layered`): the i-th
/// request (from 0) is answered `answer(i, path)`; every request is recorded.
fn scripted(
    answer: impl Fn(usize, &str) -> Answer + Clone + Send + 'static,
) -> (kube::Client, Requests) {
    let requests: Requests = Arc::default();
    let seen = requests.clone();
    let service = tower::service_fn(move |req: http::Request<Body>| {
        let mut all = seen.lock().unwrap();
        all.push(req.uri().to_string());
        let (status, body, header) = answer(all.len() - 1, req.uri().path());
        drop(all);
        async move {
            let mut resp = http::Response::builder()
                .status(status)
                .header("content-type", "application/json");
            if let Some((k, v)) = header {
                resp = resp.header(k, v);
            }
            Ok::<_, std::convert::Infallible>(
                resp.body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        }
    });
    (
        certgen::k8s::layered(ClientBuilder::new(service, "ns")),
        requests,
    )
}

/// A fake API server that answers with `script[i]` (status, extra header) for the i-th request
/// and with the last entry afterwards: a Secret, or a Status.
fn fake(script: Vec<(u16, Option<(&'static str, &'static str)>)>) -> (kube::Client, Requests) {
    scripted(move |n, path| {
        let (status, header) = script[n.min(script.len() - 1)];
        let body = if status == 200 {
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": path.rsplit('/').next().unwrap(), "resourceVersion": "7"},
                   "data": {"hmac-secret": "eA=="}})
        } else {
            json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": status,
                   "reason": "TooManyRequests", "message": format!("fake answer {status}")})
        };
        (status, body, header)
    })
}

#[tokio::test]
async fn a_429_is_retried_after_the_servers_retry_after() {
    let (client, calls) = fake(vec![(429, Some(("retry-after", "1"))), (200, None)]);
    let store = KubeStore::new(client, "ns");
    let started = Instant::now();
    let observed = store.get("envoy-oidc-hmac").await.unwrap();
    assert!(matches!(observed, Observed::Present(_)));
    assert_eq!(count(&calls), 2);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for Retry-After: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn unavailable_answers_are_retried_with_backoff() {
    let (client, calls) = fake(vec![(503, None), (503, None), (504, None), (200, None)]);
    let store = KubeStore::new(client, "ns");
    assert!(matches!(
        store.get("x").await.unwrap(),
        Observed::Present(_)
    ));
    assert_eq!(count(&calls), 4);
}

#[tokio::test]
async fn a_500_is_an_api_failure_at_once_and_exits_5() {
    let (client, calls) = fake(vec![(500, None)]);
    let store = KubeStore::new(client, "ns");
    let err = store.get("envoy").await.unwrap_err();
    assert_eq!(count(&calls), 1, "a 500 is not retried blindly");
    let StoreError::Api(f) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (f.verb, f.resource, f.status),
        ("get", "secrets", Some(500))
    );
    let message = err.to_string();
    assert!(
        message.contains(r#"get secrets "envoy" in namespace "ns""#)
            && message.contains("fake answer 500"),
        "{message}"
    );
    assert_eq!(certgen::error::Error::Store(err).code(), certgen::exit::API);
}

#[tokio::test]
async fn retries_are_bounded() {
    let (client, calls) = fake(vec![(503, None)]);
    let store = KubeStore::new(client, "ns");
    assert!(store.get("x").await.is_err());
    assert_eq!(count(&calls), 9, "one try and 8 retries");
}

/// A fake API server for pod pokes: the i-th PATCH is answered `script[i]` (the last entry
/// afterwards); a 429 carries `Retry-After: 1` and `retryAfterSeconds: 2` in its Status.
fn pods_fake(script: Vec<u16>) -> (kube::Client, Requests) {
    scripted(move |n, path| {
        let status = script[n.min(script.len() - 1)];
        let name = path.rsplit('/').next().unwrap();
        if status == 200 {
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": name, "namespace": "ns", "uid": "u1"}});
            (status, pod, None)
        } else {
            let throttled = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                "code": status, "reason": "TooManyRequests",
                "message": "too many requests, please try again later",
                "details": {"retryAfterSeconds": 2}});
            (
                status,
                throttled,
                (status == 429).then_some(("retry-after", "1")),
            )
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_poke_answered_429_is_retried_after_its_retry_after_and_the_429s_are_counted() {
    let (client, calls) = pods_fake(vec![429, 429, 200]);
    let pods = certgen::k8s::Pods::new(client, "ns");
    let before = certgen::api_requests::throttled();
    let started = tokio::time::Instant::now();
    let answer = pods
        .poke("proxy-a", "u1", "fp", time::OffsetDateTime::UNIX_EPOCH)
        .await
        .unwrap();
    assert_eq!(answer, certgen::k8s::PokeAnswer::Done);
    assert_eq!(count(&calls), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "waited for Retry-After twice: {:?}",
        started.elapsed()
    );
    assert!(certgen::api_requests::throttled() >= before + 2);
}

#[tokio::test(start_paused = true)]
async fn a_poke_still_throttled_after_the_retries_says_when_to_ask_again() {
    let (client, calls) = pods_fake(vec![429]);
    let pods = certgen::k8s::Pods::new(client, "ns");
    let answer = pods
        .poke("proxy-a", "u1", "fp", time::OffsetDateTime::UNIX_EPOCH)
        .await
        .unwrap();
    // Not an error (which would send the pod to its timer at once): not poked yet, with the
    // Status' retryAfterSeconds.
    assert_eq!(
        answer,
        certgen::k8s::PokeAnswer::Throttled(Duration::from_secs(2))
    );
    assert_eq!(count(&calls), 9, "one try and 8 retries");
}

/// A fake API server for the read-back of a `caBundle` write: the i-th request is answered
/// `script[i]` (the last entry afterwards); every request's query is recorded.
fn webhook_fake(script: Vec<u16>) -> (kube::Client, Requests) {
    scripted(move |n, _| {
        let status = script[n.min(script.len() - 1)];
        let body = if status == 200 {
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": "ValidatingWebhookConfiguration",
                   "metadata": {"name": "admission", "resourceVersion": "42"}})
        } else {
            json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": status,
                   "reason": "Timeout", "message": "Too large resource version: 41, current: 40",
                   "details": {"causes": [{"reason": "ResourceVersionTooLarge"}]}})
        };
        (status, body, None)
    })
}

/// A `caBundle` write counts only once the API server's watch cache shows it: the read back
/// asks for the version the write made ("not older than", which the server serves from that
/// cache), and a cache still behind after the server's own 3 s wait (504
/// `ResourceVersionTooLarge`, retried by the client) is "not yet", never "seen". A target
/// deleted since (404 at that version) is past the write.
#[tokio::test(start_paused = true)]
async fn a_ca_bundle_write_counts_only_once_the_api_servers_cache_shows_it() {
    use certgen::config::WebhookKind::ValidatingWebhookConfiguration as Kind;
    let (client, queries) = webhook_fake(vec![504, 504, 200]);
    let store = certgen::k8s::webhooks::WebhookStore::new(client);
    assert!(store.cached(Kind, "admission", "41").await.unwrap());
    let queries = queries.lock().unwrap().clone();
    assert_eq!(
        queries.len(),
        3,
        "two 504s retried, then shown: {queries:?}"
    );
    assert!(
        queries.iter().all(|q| q.contains("resourceVersion=41")),
        "every read back asks for the written version: {queries:?}"
    );

    let (client, queries) = webhook_fake(vec![504]);
    let store = certgen::k8s::webhooks::WebhookStore::new(client);
    assert!(
        !store.cached(Kind, "admission", "41").await.unwrap(),
        "a cache that stays behind is not yet, after the client's retries"
    );
    assert_eq!(count(&queries), 9, "one try and 8 retries");

    let (client, _) = webhook_fake(vec![404]);
    let store = certgen::k8s::webhooks::WebhookStore::new(client);
    assert!(store.cached(Kind, "admission", "41").await.unwrap());

    // Anything else is an error the run reports (and its gate then waits for the timer).
    let (client, _) = webhook_fake(vec![403]);
    let store = certgen::k8s::webhooks::WebhookStore::new(client);
    let e = store.cached(Kind, "admission", "41").await.unwrap_err();
    assert!(
        e.to_string().contains("validatingwebhookconfigurations"),
        "{e}"
    );
}
