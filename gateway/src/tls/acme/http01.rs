//! The plain HTTP listener of `[tls.acme] http_listen` (port 80): it answers the CA's http-01
//! requests (`GET /.well-known/acme-challenge/TOKEN`) from the tokens of the order in flight,
//! and sends every other request to the https URL of the same path (308), so `http://host/`
//! in a browser lands on the gateway. Bound before the server starts; its connections are
//! capped per IP and live at most `keepalive_timeout_secs` (`bounded.rs`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use async_trait::async_trait;
use http::{StatusCode, header};
use pingora::{server::ShutdownWatch, services::background::BackgroundService};

use crate::conns::Connections;

mod bounded;

/// http-01 answers by token, while an order is validated.
pub(crate) type HttpTokens = Arc<RwLock<HashMap<String, String>>>;

const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// The answer to one request on the plain listener: status, `Location` or body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Challenge(String),
    UnknownToken,
    Redirect(String),
}

/// What `path_and_query` gets, given the tokens in flight and the gateway's https base URL.
pub(crate) fn answer(
    path_and_query: &str,
    tokens: &HashMap<String, String>,
    base_url: &str,
) -> Answer {
    if let Some(token) = path_and_query.strip_prefix(CHALLENGE_PREFIX) {
        return match tokens.get(token) {
            Some(key_auth) => Answer::Challenge(key_auth.clone()),
            None => Answer::UnknownToken,
        };
    }
    let path = if path_and_query.starts_with('/') {
        path_and_query
    } else {
        "/"
    };
    Answer::Redirect(format!("{}{path}", base_url.trim_end_matches('/')))
}

pub(crate) struct Http01 {
    listener: Mutex<Option<std::net::TcpListener>>,
    tokens: HttpTokens,
    base_url: String,
    /// Open connections per IP (the main listener's `max_connections_per_ip`).
    conns: Arc<Connections>,
    /// How long one connection may live in all (`keepalive_timeout_secs`).
    lifetime: Duration,
}

impl Http01 {
    pub(crate) fn new(
        listener: std::net::TcpListener,
        tokens: HttpTokens,
        base_url: String,
        conns: Arc<Connections>,
        lifetime: Duration,
    ) -> Self {
        Self {
            listener: Mutex::new(Some(listener)),
            tokens,
            base_url,
            conns,
            lifetime,
        }
    }
}

#[async_trait]
impl BackgroundService for Http01 {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use axum::response::IntoResponse as _;
        let Some(listener) = self.listener.lock().ok().and_then(|mut l| l.take()) else {
            return;
        };
        let listener = match listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
        {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "acme http listener unusable");
                return;
            }
        };
        let tokens = self.tokens.clone();
        let base_url = self.base_url.clone();
        let app = axum::Router::new().fallback(move |uri: http::Uri| {
            let tokens = tokens.clone();
            let base_url = base_url.clone();
            async move {
                let pq = uri.path_and_query().map_or("/", |p| p.as_str());
                let decided = match tokens.read() {
                    Ok(map) => answer(pq, &map, &base_url),
                    Err(_) => Answer::UnknownToken,
                };
                match decided {
                    Answer::Challenge(key_auth) => (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/octet-stream")],
                        key_auth,
                    )
                        .into_response(),
                    Answer::UnknownToken => {
                        (StatusCode::NOT_FOUND, "no such ACME challenge\n").into_response()
                    }
                    Answer::Redirect(location) => (
                        StatusCode::PERMANENT_REDIRECT,
                        [(header::LOCATION, location)],
                    )
                        .into_response(),
                }
            }
        });
        tracing::info!(listen = ?listener.local_addr().ok(), "acme http listener started");
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        let listener = bounded::Bounded::new(listener, self.conns.clone(), self.lifetime);
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "acme http listener failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_answered_and_the_rest_goes_to_https() {
        let tokens = HashMap::from([("tok".to_owned(), "tok.thumb".to_owned())]);
        let base = "https://mcp.example.com";
        assert_eq!(
            answer("/.well-known/acme-challenge/tok", &tokens, base),
            Answer::Challenge("tok.thumb".into())
        );
        assert_eq!(
            answer("/.well-known/acme-challenge/other", &tokens, base),
            Answer::UnknownToken
        );
        assert_eq!(
            answer("/mcp?x=1", &tokens, base),
            Answer::Redirect("https://mcp.example.com/mcp?x=1".into())
        );
        assert_eq!(
            answer("", &tokens, "https://h:8443/"),
            Answer::Redirect("https://h:8443/".into())
        );
    }
}
