//! Where a run's metrics go: a file for node-exporter's textfile collector (replaced
//! atomically, so the collector never reads half a file), or a Pushgateway (one `PUT` of the
//! run's group, replacing what the previous run pushed).
//!
//! Delivery is an extra: a file that cannot be written or a Pushgateway that does not answer
//! is the caller's warning, never a failed run. Only the destination's syntax is checked up
//! front (a bad URL is bad usage, exit 2, before anything is done).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full};

/// How long a push may take, connection included.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the metrics of a run go (both may be given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sinks {
    /// A `.prom` file for node-exporter's textfile collector.
    pub file: Option<PathBuf>,
    /// The Pushgateway's base URL (`http://pushgateway.monitoring:9091`).
    pub pushgateway: Option<http::Uri>,
}

impl Sinks {
    /// The sinks of `file` and `pushgateway` (as given on the command line); a Pushgateway URL
    /// that is not `http://` or `https://` with a host is refused with the fix.
    pub fn new(file: Option<PathBuf>, pushgateway: Option<&str>) -> Result<Self, String> {
        let pushgateway = match pushgateway {
            None => None,
            Some(url) => {
                let uri: http::Uri = url.parse().map_err(|e| {
                    format!("--pushgateway {url:?} is not a URL ({e}); give the Pushgateway's base URL, e.g. http://pushgateway.monitoring:9091")
                })?;
                let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
                if !scheme_ok || uri.host().is_none() || uri.query().is_some() {
                    return Err(format!(
                        "--pushgateway {url:?} must be an http:// or https:// URL with a host and no query, e.g. http://pushgateway.monitoring:9091"
                    ));
                }
                Some(uri)
            }
        };
        Ok(Self { file, pushgateway })
    }

    /// Whether any sink is set.
    pub fn any(&self) -> bool {
        self.file.is_some() || self.pushgateway.is_some()
    }

    /// Delivers `text` to every sink; the problems, one line each, for the caller to warn
    /// about (empty when everything was delivered).
    pub async fn deliver(&self, text: &str, grouping: &[(&str, &str)]) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(path) = &self.file
            && let Err(e) = write_file(path, text)
        {
            problems.push(format!("metrics not written to {}: {e}", path.display()));
        }
        if let Some(base) = &self.pushgateway {
            let url = push_url(base, grouping);
            if let Err(e) = push(&url, text).await {
                problems.push(format!("metrics not pushed to {url}: {e}"));
            }
        }
        problems
    }
}

/// Replaces `path` with `text` atomically: written beside it under a name the textfile
/// collector ignores (it reads only `*.prom`), flushed to disk, then renamed over it.
pub fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The URL of the run's group: `BASE/metrics/job/certgen/LABEL/VALUE...`, each value
/// base64url-encoded (`LABEL@base64/...`) when it could not stand in a path as it is.
pub fn push_url(base: &http::Uri, grouping: &[(&str, &str)]) -> String {
    let mut url = base.to_string().trim_end_matches('/').to_string();
    url.push_str("/metrics/job/certgen");
    for (label, value) in grouping {
        let plain = !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
        if plain {
            url.push_str(&format!("/{label}/{value}"));
        } else {
            let encoded = base64::engine::general_purpose::URL_SAFE.encode(value);
            url.push_str(&format!(
                "/{label}@base64/{}",
                if encoded.is_empty() { "=" } else { &encoded }
            ));
        }
    }
    url
}

/// One `PUT` of `text` to `url` (the Pushgateway replaces the group with it).
async fn push(url: &str, text: &str) -> Result<(), String> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| format!("no trusted root certificates for https: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector);
    let request = http::Request::put(url)
        .header(
            http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )
        .body(Full::new(bytes::Bytes::from(text.to_string())))
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(PUSH_TIMEOUT, async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Ok::<_, String>((status, body))
    })
    .await
    .map_err(|_| format!("no answer within {}s", PUSH_TIMEOUT.as_secs()))??;
    match answer {
        (status, _) if status.is_success() => Ok(()),
        (status, body) => Err(format!(
            "the Pushgateway answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_url_encodes_what_a_path_cannot_hold() {
        let base: http::Uri = "http://127.0.0.1:9091/".parse().unwrap();
        assert_eq!(
            push_url(
                &base,
                &[("namespace", "envoy-gateway-system"), ("profile", "a/b")]
            ),
            "http://127.0.0.1:9091/metrics/job/certgen/namespace/envoy-gateway-system/profile@base64/YS9i"
        );
    }

    #[test]
    fn bad_pushgateway_urls_are_refused_with_the_fix() {
        for url in [
            "127.0.0.1:9091",
            "ftp://x",
            "http://",
            "http://x?y=1",
            "not a url",
        ] {
            let e = Sinks::new(None, Some(url)).unwrap_err();
            assert!(
                e.contains("--pushgateway") && e.contains("http://"),
                "{url}: {e}"
            );
        }
        assert!(Sinks::new(None, Some("https://pg.monitoring:9091")).is_ok());
    }

    #[test]
    fn the_file_is_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("certgen-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("certgen.prom");
        write_file(&path, "a 1\n").unwrap();
        write_file(&path, "b 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b 2\n");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("certgen.prom")]);
        assert!(write_file(&dir.join("missing/x.prom"), "a 1\n").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
