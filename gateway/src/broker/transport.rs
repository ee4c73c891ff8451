//! The broker's HTTP: reqwest clients that follow no redirects, time out (5 s to connect, 10 s
//! in all) and trust the platform's roots plus a route's own CA; every answer read into memory
//! up to 512 KiB. One `send` serves both the `oauth2` crate (as its async HTTP client) and the
//! hand-written requests (metadata, registration, the MCP probe).

use std::time::Duration;

/// Largest answer read from an upstream or its authorization server.
pub(crate) const MAX_ANSWER_BYTES: usize = 512 * 1024;

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{}", chain(.0))]
    Request(#[from] reqwest::Error),
    #[error("answer larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    #[error("{0}")]
    Http(#[from] http::Error),
    #[error("CA file {path}: {reason}")]
    Ca { path: String, reason: String },
}

/// A client for upstreams whose certificates chain to the platform's roots or to `ca_pem`.
pub(crate) fn client(ca_pem: Option<(&str, &[u8])>) -> Result<reqwest::Client, HttpError> {
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10));
    if let Some((path, pem)) = ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| HttpError::Ca {
            path: path.to_owned(),
            reason: chain(&e),
        })?;
        if certs.is_empty() {
            return Err(HttpError::Ca {
                path: path.to_owned(),
                reason: "no certificate in it".into(),
            });
        }
        b = b.tls_certs_merge(certs);
    }
    Ok(b.build()?)
}

/// Sends `req` (no redirects followed) and reads the answer, at most [`MAX_ANSWER_BYTES`].
pub(crate) async fn send(
    http: &reqwest::Client,
    req: http::Request<Vec<u8>>,
) -> Result<http::Response<Vec<u8>>, HttpError> {
    let (parts, body) = req.into_parts();
    let mut resp = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await?;
    if resp
        .content_length()
        .is_some_and(|l| l > MAX_ANSWER_BYTES as u64)
    {
        return Err(HttpError::TooLarge);
    }
    let mut out = http::Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        out = out.header(k, v);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(HttpError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(out.body(body)?)
}

/// The async HTTP client handed to `oauth2`: [`send`] on `http`.
pub(crate) fn for_oauth2(
    http: &reqwest::Client,
) -> impl Fn(
    oauth2::HttpRequest,
) -> std::pin::Pin<Box<dyn Future<Output = Result<oauth2::HttpResponse, HttpError>> + Send>>
+ use<> {
    let http = http.clone();
    move |req| {
        let http = http.clone();
        Box::pin(async move { send(&http, req).await })
    }
}

/// A GET of `url` asking for JSON.
pub(crate) async fn get_json(
    http: &reqwest::Client,
    url: &url::Url,
) -> Result<http::Response<Vec<u8>>, HttpError> {
    let req = http::Request::get(url.as_str())
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())?;
    send(http, req).await
}

/// A POST of `body` as JSON to `url`, accepting `accept`.
pub(crate) async fn post_json(
    http: &reqwest::Client,
    url: &url::Url,
    body: &serde_json::Value,
    accept: &str,
) -> Result<http::Response<Vec<u8>>, HttpError> {
    let req = http::Request::post(url.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, accept)
        .body(body.to_string().into_bytes())?;
    send(http, req).await
}

/// An error with its sources, `: `-joined (reqwest hides the useful part in a source).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
