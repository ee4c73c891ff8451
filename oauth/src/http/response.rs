//! The one place where outcomes and errors become HTTP responses: OAuth JSON errors with
//! their status codes, HTML pages with their security headers, redirects and cookies.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, StatusCode, header};

use crate::auth_server::{AuthorizeOutcome, AuthorizeResponse, Page};
use crate::config::OAuthConfig;
use crate::error::OAuthError;
use crate::pages;

fn no_store(resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let status = match &self {
            OAuthError::InvalidClient(_) => StatusCode::UNAUTHORIZED,
            OAuthError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            OAuthError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            OAuthError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        match &self {
            OAuthError::Unavailable(e) => {
                tracing::warn!(error = %e, "oauth endpoint: store unavailable")
            }
            OAuthError::Internal(e) => {
                tracing::error!(error = %e, "oauth endpoint: internal error")
            }
            other => tracing::debug!(error = other.code(), "oauth request refused"),
        }
        let body =
            serde_json::json!({ "error": self.code(), "error_description": self.description() });
        let mut resp = (status, Json(body)).into_response();
        no_store(&mut resp);
        let h = resp.headers_mut();
        match &self {
            OAuthError::InvalidClient(_) => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"pforte\", error=\"invalid_client\""),
                );
            }
            OAuthError::RateLimited { retry_after_secs } => {
                if let Ok(v) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                    h.insert(header::RETRY_AFTER, v);
                }
            }
            OAuthError::Unavailable(_) => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        resp
    }
}

/// Adds `Access-Control-Allow-Origin: *` (the API endpoints use no cookies).
pub(crate) async fn cors(resp: Response) -> Response {
    with_headers(
        resp,
        &[
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                "www-authenticate, retry-after",
            ),
        ],
    )
}

/// The answer to a CORS preflight.
pub(crate) fn preflight() -> Response {
    with_headers(
        StatusCode::NO_CONTENT.into_response(),
        &[
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, OPTIONS"),
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                "authorization, content-type, mcp-protocol-version",
            ),
            (header::ACCESS_CONTROL_MAX_AGE, "86400"),
        ],
    )
}

/// `resp` with each of `headers` set.
fn with_headers(mut resp: Response, headers: &[(HeaderName, &'static str)]) -> Response {
    let h = resp.headers_mut();
    for (name, value) in headers {
        h.insert(name.clone(), HeaderValue::from_static(value));
    }
    resp
}

/// The RFC 8414 document.
pub(crate) fn metadata(doc: serde_json::Value) -> Response {
    let mut resp = Json(doc).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    resp
}

/// A successful token response.
pub(crate) fn token(t: serde_json::Value) -> Response {
    let mut resp = Json(t).into_response();
    no_store(&mut resp);
    resp
}

/// A successful registration: 201 with the client information.
pub(crate) fn registered(v: serde_json::Value) -> Response {
    let mut resp = (StatusCode::CREATED, Json(v)).into_response();
    no_store(&mut resp);
    resp
}

/// A revocation: 200, empty.
pub(crate) fn revoked() -> Response {
    let mut resp = StatusCode::OK.into_response();
    no_store(&mut resp);
    resp
}

/// An `/authorize` outcome: page or 303, plus the session cookie.
pub(crate) fn authorize(out: AuthorizeResponse, cfg: &OAuthConfig) -> Response {
    let mut resp = match out.outcome {
        AuthorizeOutcome::Redirect { location } => {
            let mut r = StatusCode::SEE_OTHER.into_response();
            match HeaderValue::from_str(&location) {
                Ok(v) => {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
            r
        }
        AuthorizeOutcome::Page { page, status } => {
            let (html, form_origins): (String, Vec<&str>) = match &page {
                Page::Login(v) => (
                    pages::login(v),
                    v.provider_origins.iter().map(String::as_str).collect(),
                ),
                Page::Consent(v) => (pages::consent(v), vec![v.redirect_origin.as_str()]),
                Page::Error(v) => (pages::error(v), Vec::new()),
                Page::Account(v) => (pages::account::account(v), Vec::new()),
                Page::AccountLogin(v) => (
                    pages::account::login(v),
                    v.provider_origins.iter().map(String::as_str).collect(),
                ),
            };
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
            let mut r = (status, html).into_response();
            let h = r.headers_mut();
            for (name, value) in pforte_page::headers(&form_origins) {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    h.insert(HeaderName::from_static(name), v);
                }
            }
            r
        }
    };
    no_store(&mut resp);
    resp.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Some(secs) = out.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    if let Some(cookie) = out.set_session {
        let secure = if cfg.cookie_secure { "; Secure" } else { "" };
        let value = format!(
            "{}={}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
            cfg.cookie_name(),
            cookie.0.expose(),
            cfg.session_ttl_secs
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp
}
