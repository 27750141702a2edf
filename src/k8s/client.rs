//! The Kubernetes client: its configuration (kubeconfig, context, in-cluster) and certgen's
//! layers over it: bounded retries, the request counter ([`crate::api_requests`]) and the API
//! server's clock ([`super::servertime`]).

use crate::config::ConfigError;
use crate::error::Error;

/// How many clients this process built (one per cluster job; logged at exit with `-v`).
static BUILT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many clients this process built.
pub fn clients_built() -> u64 {
    BUILT.load(std::sync::atomic::Ordering::Relaxed)
}

/// A client for the cluster a kubeconfig file and context name (resolved from
/// `--kubeconfig`/`--context` by `crate::cli`) select (or the default kubeconfig, or the pod's
/// service account), with certgen's layers.
pub async fn client(
    (kubeconfig, context): (Option<&std::path::Path>, Option<String>),
) -> Result<kube::Client, Error> {
    client_for(kubeconfig, context).await
}

/// [`client`] for a kubeconfig file and context given some other way (`certgen create` and
/// `patch` take only `--kubeconfig`).
pub async fn client_for(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
) -> Result<kube::Client, Error> {
    BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let has_context = context.is_some();
    let options = KubeConfigOptions {
        context,
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                Error::Config(ConfigError {
                    source_name: path.display().to_string(),
                    message: format!("cannot read the kubeconfig: {e}"),
                })
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None if has_context => kube::Config::from_kubeconfig(&options).await,
        None => kube::Config::infer().await.map_err(|e| {
            kube::config::KubeconfigError::ReadConfig(
                std::io::Error::other(e.to_string()),
                "the default kubeconfig or in-cluster configuration".into(),
            )
        }),
    };
    let config = config.map_err(|e| {
        Error::Config(ConfigError {
            source_name: "kubeconfig".into(),
            message: format!("{e}; pass --kubeconfig FILE, set KUBECONFIG, or run in a pod"),
        })
    })?;
    let mut config = config;
    config.default_retry = false;
    let builder =
        kube::client::ClientBuilder::try_from(config).map_err(|e| Error::Connect(e.to_string()))?;
    Ok(layered(builder))
}

/// certgen's client layers over any service: bounded retries and the request counter.
///
/// kube's default retry waits up to 1000 s between 15 attempts; certgen's runs are bounded by
/// `--timeout`, so 429/503/504 are retried up to 8 times, 100 ms to 5 s apart, honouring
/// Retry-After. Every request is counted for the report, and every 429 answer (retried ones
/// included).
pub fn layered<Svc, B>(builder: kube::client::ClientBuilder<Svc>) -> kube::Client
where
    Svc: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>
        + Send
        + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Into<tower::BoxError> + Send + Sync,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    let counting = tower::util::MapRequestLayer::new(|req: http::Request<kube::client::Body>| {
        crate::api_requests::record(&req);
        req
    });
    let policy = kube::client::retry::RetryPolicy::new(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(5),
        8,
        true,
    )
    .expect("valid retry bounds");
    // The API server's clock, for staged-rotation gates (see `servertime`).
    let clock = tower::util::MapResponseLayer::new(|res: http::Response<B>| {
        if let Some(date) = res
            .headers()
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
        {
            super::servertime::record(date);
        }
        res
    });
    // Every answer the retries see, 429s included (inside the retry layer, so each retried
    // 429 is counted and its Retry-After known to the pokes' pacing).
    let answers = tower::util::MapResponseLayer::new(|res: http::Response<B>| {
        crate::api_requests::record_answer(&res);
        res
    });
    builder
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&answers)
        .with_layer(&tower::retry::RetryLayer::new(policy))
        .with_layer(&counting)
        .with_layer(&clock)
        .build()
}
