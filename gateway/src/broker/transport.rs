//! The broker's HTTP, on the one outbound client (`pforte_outbound`): no redirects, 5 s to
//! connect and 10 s in all, the platform's roots plus a route's own CA, the route's address
//! policy on every URL and resolved address, every answer read into memory up to 512 KiB. One
//! `send` serves both the `oauth2` crate (as its async HTTP client) and the hand-written
//! requests (metadata, registration, the MCP probe).

use std::time::Duration;

pub(crate) use pforte_outbound::Client;
use pforte_outbound::{AddressPolicy, Options, Trust};

/// Largest answer read from an upstream or its authorization server.
pub(crate) const MAX_ANSWER_BYTES: usize = 512 * 1024;

/// Why a request got no usable answer.
pub type HttpError = pforte_outbound::OutboundError;

/// A client for upstreams whose certificates chain to the platform's roots or to `ca_pem`,
/// held to `policy`.
pub(crate) fn client(
    ca_pem: Option<(&str, &[u8])>,
    policy: AddressPolicy,
) -> Result<Client, HttpError> {
    Client::new(Options {
        policy,
        trust: match ca_pem {
            None => Trust::System,
            Some((path, pem)) => Trust::SystemAnd {
                path: path.to_owned(),
                pem: pem.to_vec(),
            },
        },
        connect_timeout: Duration::from_secs(5),
        timeout: Some(Duration::from_secs(10)),
        idle_timeout: None,
        unix_socket: None,
    })
}

/// Sends `req` (no redirects followed) and reads the answer, at most [`MAX_ANSWER_BYTES`].
pub(crate) async fn send(
    http: &Client,
    req: http::Request<Vec<u8>>,
) -> Result<http::Response<Vec<u8>>, HttpError> {
    http.send(req, MAX_ANSWER_BYTES).await
}

/// The async HTTP client handed to `oauth2`: [`send`] on `http`.
pub(crate) fn for_oauth2(
    http: &Client,
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
    http: &Client,
    url: &url::Url,
) -> Result<http::Response<Vec<u8>>, HttpError> {
    let req = http::Request::get(url.as_str())
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())?;
    send(http, req).await
}

/// A POST of `body` as JSON to `url`, accepting `accept`.
pub(crate) async fn post_json(
    http: &Client,
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

pub(crate) use pforte_outbound::chain;
