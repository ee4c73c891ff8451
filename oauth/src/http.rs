//! Thin axum adapters: extract raw inputs, call `AuthServer`, hand the outcome to
//! `http/response.rs` (the one place where outcomes and errors become HTTP responses).
//!
//! The client IP that keys the throttles comes only from the [`ClientIp`] request extension,
//! which the gateway sets from the address it resolved; no header can claim one.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::HeaderMap;
use http::request::Parts;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use crate::auth_server::AuthServer;

pub(crate) mod response;

/// The state every handler extracts.
type Server = State<Arc<AuthServer>>;

/// The client IP as a request extension, set by the gateway for each request it hands over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// Extracts the client IP: the [`ClientIp`] extension, else unknown (the throttles then key
/// the request as `unknown`).
struct PeerIp(Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for PeerIp {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(PeerIp(parts.extensions.get::<ClientIp>().map(|c| c.0)))
    }
}

/// The authorization server's routes: `/.well-known/oauth-authorization-server`,
/// `/.well-known/openid-configuration`, `/authorize` (GET, POST), `/token`, `/register`,
/// `/revoke`, `/account` (GET, POST), and `/oidc/callback` (OpenID providers send the browser
/// back there).
///
/// The metadata, token, registration and revocation endpoints answer CORS requests from any
/// origin (browser-based MCP clients call them; they use no cookies). `/authorize` does not.
pub fn router(server: Arc<AuthServer>) -> Router {
    let api = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(metadata).options(preflight),
        )
        .route(
            "/.well-known/openid-configuration",
            get(metadata).options(preflight),
        )
        .route("/token", post(token).options(preflight))
        .route("/register", post(register).options(preflight))
        .route("/revoke", post(revoke).options(preflight))
        .layer(axum::middleware::map_response(response::cors));
    Router::new()
        .route("/authorize", get(authorize_get).post(authorize_post))
        .route(crate::auth_server::OIDC_CALLBACK_PATH, get(oidc_callback))
        .route("/account", get(account_get).post(account_post))
        .merge(api)
        .with_state(server)
}

async fn preflight() -> Response {
    response::preflight()
}

/// The `Authorization` header, when present and text.
fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// The value of the session cookie named `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

async fn metadata(State(s): Server) -> Response {
    response::metadata(s.metadata())
}

async fn authorize_get(
    State(s): Server,
    PeerIp(ip): PeerIp,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let cfg = s.config();
    let out = s
        .authorize_get(
            q.as_deref().unwrap_or_default(),
            cookie(&headers, cfg.cookie_name()),
            ip,
        )
        .await;
    response::authorize(out, cfg)
}

async fn oidc_callback(
    State(s): Server,
    PeerIp(ip): PeerIp,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let cfg = s.config();
    let out = s
        .oidc_callback(
            q.as_deref().unwrap_or_default(),
            cookie(&headers, cfg.cookie_name()),
            ip,
        )
        .await;
    response::authorize(out, cfg)
}

async fn authorize_post(
    State(s): Server,
    PeerIp(ip): PeerIp,
    headers: HeaderMap,
    body: String,
) -> Response {
    let cfg = s.config();
    let out = s
        .authorize_post(&body, cookie(&headers, cfg.cookie_name()), ip)
        .await;
    response::authorize(out, cfg)
}

async fn account_get(State(s): Server, RawQuery(q): RawQuery, headers: HeaderMap) -> Response {
    let cfg = s.config();
    let out = s
        .account_get(
            q.as_deref().unwrap_or_default(),
            cookie(&headers, cfg.cookie_name()),
        )
        .await;
    response::authorize(out, cfg)
}

async fn account_post(
    State(s): Server,
    PeerIp(ip): PeerIp,
    headers: HeaderMap,
    body: String,
) -> Response {
    let cfg = s.config();
    let out = s
        .account_post(&body, cookie(&headers, cfg.cookie_name()), ip)
        .await;
    response::authorize(out, cfg)
}

async fn token(State(s): Server, PeerIp(ip): PeerIp, headers: HeaderMap, body: String) -> Response {
    match s.token_endpoint(&body, authorization(&headers), ip).await {
        Ok(t) => response::token(t),
        Err(e) => e.into_response(),
    }
}

async fn register(State(s): Server, PeerIp(ip): PeerIp, body: Bytes) -> Response {
    match s.register(&body, ip).await {
        Ok(v) => response::registered(v),
        Err(e) => e.into_response(),
    }
}

async fn revoke(
    State(s): Server,
    PeerIp(ip): PeerIp,
    headers: HeaderMap,
    body: String,
) -> Response {
    match s.revoke(&body, authorization(&headers), ip).await {
        Ok(()) => response::revoked(),
        Err(e) => e.into_response(),
    }
}
