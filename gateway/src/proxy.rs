//! The pingora phases. Each phase is thin: it reads the request, asks a plain function
//! (`auth`, `forward`, `reject`, `metadata`) for the decision, and applies it.

use std::{sync::Arc, time::Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::{
    Error, ErrorSource, ErrorType, Result,
    http::{RequestHeader, ResponseHeader},
    proxy::{FailToProxy, ProxyHttp, Session},
    upstreams::peer::HttpPeer,
};
use std::time::Duration;

use crate::{
    auth::{self, AuthFailure, Principal},
    clock::Clock,
    config::{MCP_PATH, Settings, normalise_origin},
    forward,
    limit::{Class, Decision, Policy, SharedLimiter},
    metadata,
    oauth::{self, AuthService},
    reject::{Rejection, Reply},
    tokens::TokenCache,
};

/// Per-request state shared by the phases.
#[derive(Debug)]
pub struct RequestCtx {
    pub request_id: String,
    pub principal: Option<Principal>,
    client_ip: Option<std::net::IpAddr>,
    /// The rate-limit decision for this request, reported in response headers.
    rate: Option<(Class, Policy, Decision)>,

    body_bytes: u64,
    started: Instant,
}

/// The gateway: settings, credential snapshots and the clock. No statics.
#[derive(Debug)]
pub struct Gateway {
    settings: Arc<Settings>,
    tokens: TokenCache,
    oauth: Arc<AuthService>,
    limiter: Arc<SharedLimiter>,
    clock: Arc<dyn Clock>,
    resource_metadata: Bytes,
}

impl Gateway {
    pub fn new(
        settings: Arc<Settings>,
        tokens: TokenCache,
        oauth: Arc<AuthService>,
        limiter: Arc<SharedLimiter>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let resource_metadata = Bytes::from(metadata::protected_resource(&settings).to_string());
        Self {
            settings,
            tokens,
            oauth,
            limiter,
            clock,
            resource_metadata,
        }
    }

    /// Authenticates the request's `Authorization` header: a static token or an OAuth access
    /// token, then the scopes every `/mcp` request needs.
    async fn authenticate(&self, req: &RequestHeader) -> Result<Principal, AuthFailure> {
        let values = req.headers.get_all(http::header::AUTHORIZATION);
        let token =
            auth::bearer_token(values.iter().map(|v| v.as_bytes()))?.ok_or(AuthFailure::Missing)?;
        let principal = if auth::looks_static(token) {
            auth::authenticate_static(token, &self.tokens.get(), self.clock.now())?
        } else {
            self.oauth.authenticate(token).await?
        };
        auth::require_scopes(&principal, &self.settings.file.required_scopes)?;
        Ok(principal)
    }

    /// Hands an authorization-server request to its router and writes the answer.
    async fn serve_auth_server(&self, session: &mut Session, ctx: &RequestCtx) -> Result<bool> {
        let mut body = bytes::BytesMut::new();
        while let Some(chunk) = session.read_request_body().await? {
            if body.len() + chunk.len() > oauth::MAX_AS_BODY {
                let limit = oauth::MAX_AS_BODY as u64;
                return self
                    .refuse(session, Rejection::PayloadTooLarge { limit }, ctx)
                    .await;
            }
            body.extend_from_slice(&chunk);
        }
        let req = session.req_header();
        let mut builder = http::Request::builder()
            .method(req.method.clone())
            .uri(req.uri.clone());
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        let request = builder
            .body(body.freeze())
            .map_err(|e| Error::explain(ErrorType::InvalidHTTPHeader, e.to_string()))?;
        // The resolved client (socket, or X-Forwarded-For from a trusted proxy), never the raw
        // peer: behind a proxy the peer is the proxy, and every user would share its throttles.
        let response = self.oauth.call(request, ctx.client_ip).await;
        let (parts, body) = response.into_parts();
        let mut resp = ResponseHeader::build(parts.status, Some(parts.headers.len() + 2))?;
        for (name, value) in &parts.headers {
            if name != http::header::CONTENT_LENGTH {
                resp.append_header(name.clone(), value.clone())?;
            }
        }
        resp.insert_header("content-length", body.len().to_string())?;
        resp.insert_header(forward::header::REQUEST_ID, ctx.request_id.as_str())?;
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(body), true).await?;
        Ok(true)
    }

    /// Decides on the rate limit of `class` for `key`; `Some(rejection)` when over it.
    async fn over_limit(&self, class: Class, key: &str, ctx: &mut RequestCtx) -> Option<Rejection> {
        let limits = &self.settings.file.limits;
        if !limits.enabled {
            return None;
        }
        let policy = limits.policy(class);
        let decision = self
            .limiter
            .check(&format!("{}:{key}", class.name()), policy)
            .await;
        ctx.rate = Some((class, policy, decision));
        (!decision.allowed).then_some(Rejection::RateLimited {
            class,
            policy,
            decision,
            oauth: class == Class::OAuth,
        })
    }

    /// The budget of one tool, per principal; `None` when the tool has none or is within it.
    async fn over_tool_limit(&self, tool: &str, ctx: &mut RequestCtx) -> Option<Rejection> {
        let policy = self.settings.file.limits.tool(tool)?;
        let principal = ctx.principal.as_ref()?;
        let key = format!(
            "tool:{tool}:{}:{}:{}",
            principal.kind.as_str(),
            principal.subject,
            principal.client
        );
        let decision = self.limiter.check(&key, policy).await;
        (!decision.allowed).then_some(Rejection::RateLimited {
            class: Class::Tool,
            policy,
            decision,
            oauth: false,
        })
    }

    /// Which tool a `/mcp` request calls: the `Mcp-Name` header (MCP 2026-07-28), else the
    /// JSON-RPC body. The body is read here with pingora's retry buffer on, so pingora forwards
    /// it unchanged afterwards; that buffer holds 64 KiB, so a larger `tools/call` body must
    /// name its tool in `Mcp-Name` (otherwise a padded body could slip past a tool budget).
    async fn called_tool(&self, session: &mut Session) -> Result<ToolCall> {
        let req = session.req_header();
        if let Some(name) = req.headers.get("mcp-name").and_then(|v| v.to_str().ok()) {
            return Ok(ToolCall::Named(name.to_owned()));
        }
        if req.method != http::Method::POST {
            return Ok(ToolCall::None);
        }
        let declared = req
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_none_or(|n| n > BODY_PEEK_LIMIT) {
            return Ok(ToolCall::Unknowable);
        }
        session.as_mut().enable_retry_buffering();
        let mut body = bytes::BytesMut::new();
        while let Some(chunk) = session.read_request_body().await? {
            body.extend_from_slice(&chunk);
            if body.len() > BODY_PEEK_LIMIT {
                return Ok(ToolCall::Unknowable);
            }
        }
        Ok(crate::limit::called_tool(&body).map_or(ToolCall::None, ToolCall::Named))
    }

    fn ip_key(ctx: &RequestCtx) -> String {
        ctx.client_ip
            .map_or_else(|| "unknown".to_owned(), |ip| ip.to_string())
    }

    /// The Origin rule: absent passes (non-browser clients); present must be allowed.
    fn origin_allowed(&self, req: &RequestHeader) -> bool {
        match req.headers.get(http::header::ORIGIN) {
            None => true,
            Some(v) => v
                .to_str()
                .ok()
                .and_then(normalise_origin)
                .is_some_and(|o| self.settings.allowed_origins.contains(&o)),
        }
    }

    async fn upstream_ready(&self) -> bool {
        let target = self.settings.upstream.authority.clone();
        matches!(
            tokio::time::timeout(
                Duration::from_millis(500),
                tokio::net::TcpStream::connect(target)
            )
            .await,
            Ok(Ok(_))
        )
    }

    async fn send(&self, session: &mut Session, reply: Reply, ctx: &RequestCtx) -> Result<()> {
        let mut resp = ResponseHeader::build(reply.status, Some(reply.headers.len() + 3))?;
        for (name, value) in &reply.headers {
            resp.insert_header(*name, value.as_str())?;
        }
        resp.insert_header("content-length", reply.body.len().to_string())?;
        resp.insert_header(forward::header::REQUEST_ID, ctx.request_id.as_str())?;
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(reply.body), true).await?;
        Ok(())
    }

    async fn refuse(
        &self,
        session: &mut Session,
        rejection: Rejection,
        ctx: &RequestCtx,
    ) -> Result<bool> {
        let reply = rejection.reply(&self.settings.resource_metadata_url(), &ctx.request_id);
        self.send(session, reply, ctx).await?;
        Ok(true)
    }
}

/// The most of a request body the gateway reads to find the called tool (pingora's retry
/// buffer, which replays it to the upstream).
const BODY_PEEK_LIMIT: usize = 64 * 1024;

/// What a `/mcp` request calls, as far as tool budgets care.
enum ToolCall {
    Named(String),
    None,
    /// A POST too large (or of unknown length) to read for the tool name, without `Mcp-Name`.
    Unknowable,
}

/// Which built-in route a path is.
enum Route {
    AuthServer,
    Favicon,
    Metrics,
    Health,
    Ready,
    ResourceMetadata,
    Mcp,
    Unknown,
}

fn route(path: &str) -> Route {
    if oauth::is_as_path(path) {
        return Route::AuthServer;
    }
    match path {
        "/healthz" => Route::Health,
        // Browsers ask for it on the login page; answer without an error in their console.
        "/favicon.ico" => Route::Favicon,
        "/metrics" => Route::Metrics,
        "/readyz" => Route::Ready,
        "/.well-known/oauth-protected-resource" => Route::ResourceMetadata,
        p if p == format!("/.well-known/oauth-protected-resource{MCP_PATH}") => {
            Route::ResourceMetadata
        }
        p if p == MCP_PATH => Route::Mcp,
        _ => Route::Unknown,
    }
}

/// Maps a pingora failure to what the client is told.
fn classify(e: &Error) -> Option<Rejection> {
    match e.etype() {
        ErrorType::HTTPStatus(413) => Some(Rejection::PayloadTooLarge { limit: 0 }),
        ErrorType::ConnectTimedout => Some(Rejection::UpstreamTimeout),
        ErrorType::ReadTimedout | ErrorType::WriteTimedout
            if e.esource() == &ErrorSource::Upstream =>
        {
            Some(Rejection::UpstreamTimeout)
        }
        _ => match e.esource() {
            ErrorSource::Upstream => Some(Rejection::UpstreamUnavailable),
            // The client went away or sent garbage; pingora reports it, nobody is listening.
            ErrorSource::Downstream => None,
            ErrorSource::Internal | ErrorSource::Unset => Some(Rejection::Internal),
        },
    }
}

/// Whether a failed request was the client's doing: it went away, sent something unusable, or
/// sent too large a body. pingora would log each at ERROR; the gateway's own `request` line
/// (info) already carries the error, so only failures on the gateway's or upstream's side keep
/// pingora's ERROR line.
fn is_client_side(e: &Error) -> bool {
    matches!(classify(e), None | Some(Rejection::PayloadTooLarge { .. }))
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> Self::CTX {
        RequestCtx {
            request_id: uuid::Uuid::new_v4().to_string(),
            principal: None,
            client_ip: None,
            rate: None,

            body_bytes: 0,
            started: Instant::now(),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let forwarded = session
            .req_header()
            .headers
            .get(forward::header::FORWARDED_FOR)
            .and_then(|v| v.to_str().ok());
        ctx.client_ip = forward::client_ip(peer, forwarded, &self.settings.file.trusted_proxies);
        let req = session.req_header();
        let get = req.method == http::Method::GET || req.method == http::Method::HEAD;
        match route(req.uri.path()) {
            Route::Health => {
                let reply = Reply::json(200, &serde_json::json!({"status": "ok"}));
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            Route::Ready => {
                if self.upstream_ready().await {
                    let reply = Reply::json(200, &serde_json::json!({"status": "ready"}));
                    self.send(session, reply, ctx).await?;
                    Ok(true)
                } else {
                    self.refuse(session, Rejection::NotReady, ctx).await
                }
            }
            Route::ResourceMetadata if get => {
                let mut reply = Reply::json(200, &serde_json::Value::Null);
                reply.body = self.resource_metadata.clone();
                reply
                    .headers
                    .push(("cache-control", "public, max-age=3600".to_owned()));
                reply
                    .headers
                    .push(("access-control-allow-origin", "*".to_owned()));
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            Route::ResourceMetadata => {
                self.refuse(
                    session,
                    Rejection::MethodNotAllowed { allow: "GET, HEAD" },
                    ctx,
                )
                .await
            }
            Route::Unknown => self.refuse(session, Rejection::NotFound, ctx).await,
            Route::Favicon => {
                let mut reply = Reply::json(204, &serde_json::Value::Null);
                reply.headers = vec![("cache-control", "public, max-age=86400".to_owned())];
                reply.body = Bytes::new();
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            // Operators scrape from the machine itself; the public never sees it.
            Route::Metrics if peer.is_some_and(|ip| ip.is_loopback()) => {
                let mut reply = Reply::json(200, &serde_json::Value::Null);
                reply.headers = vec![("content-type", "text/plain; version=0.0.4".to_owned())];
                reply.body = Bytes::from(self.limiter.metrics());
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            Route::Metrics => self.refuse(session, Rejection::NotFound, ctx).await,
            Route::AuthServer => {
                if req.method == http::Method::POST
                    && let Some(rejection) =
                        self.over_limit(Class::OAuth, &Self::ip_key(ctx), ctx).await
                {
                    return self.refuse(session, rejection, ctx).await;
                }
                self.serve_auth_server(session, ctx).await
            }
            Route::Mcp => {
                if !self.origin_allowed(req) {
                    return self.refuse(session, Rejection::OriginForbidden, ctx).await;
                }
                let limit = self.settings.file.max_body_bytes;
                let declared = req
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if declared.is_some_and(|n| n > limit) {
                    return self
                        .refuse(session, Rejection::PayloadTooLarge { limit }, ctx)
                        .await;
                }
                match self.authenticate(req).await {
                    Ok(principal) => {
                        let key = format!(
                            "{}:{}:{}",
                            principal.kind.as_str(),
                            principal.subject,
                            principal.client
                        );
                        ctx.principal = Some(principal);
                        if let Some(rejection) = self.over_limit(Class::Mcp, &key, ctx).await {
                            return self.refuse(session, rejection, ctx).await;
                        }
                        if self.settings.file.limits.tools.is_empty() {
                            return Ok(false);
                        }
                        let tool = match self.called_tool(session).await? {
                            ToolCall::Named(tool) => tool,
                            ToolCall::None => return Ok(false),
                            ToolCall::Unknowable => {
                                let limit = BODY_PEEK_LIMIT as u64;
                                let rejection = Rejection::ToolUnnamed { limit };
                                return self.refuse(session, rejection, ctx).await;
                            }
                        };
                        if let Some(rejection) = self.over_tool_limit(&tool, ctx).await {
                            return self.refuse(session, rejection, ctx).await;
                        }
                        Ok(false)
                    }
                    Err(failure) => {
                        let key = Self::ip_key(ctx);
                        let rejection =
                            match self.over_limit(Class::Unauthenticated, &key, ctx).await {
                                Some(limited) => limited,
                                None => Rejection::Unauthorized(failure),
                            };
                        self.refuse(session, rejection, ctx).await
                    }
                }
            }
        }
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if let Some(chunk) = body {
            ctx.body_bytes += chunk.len() as u64;
            if ctx.body_bytes > self.settings.file.max_body_bytes {
                return Error::e_explain(ErrorType::HTTPStatus(413), "request body over the limit");
            }
        }
        Ok(())
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let upstream = &self.settings.upstream;
        let addr = tokio::net::lookup_host(upstream.authority.as_str())
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| {
                Error::explain(
                    ErrorType::ConnectNoRoute,
                    format!("cannot resolve {}", upstream.authority),
                )
                .into_up()
            })?;
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(Duration::from_millis(
            self.settings.file.upstream.connect_timeout_ms,
        ));
        peer.options.read_timeout = Some(Duration::from_millis(
            self.settings.file.upstream.read_timeout_ms,
        ));
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let Some(principal) = &ctx.principal else {
            // request_filter lets only authenticated requests through; refuse loudly otherwise.
            return Error::e_explain(
                ErrorType::InternalError,
                "unauthenticated request reached the upstream phase",
            );
        };
        let stripped: Vec<http::HeaderName> = upstream_request
            .headers
            .keys()
            .filter(|name| forward::is_stripped(name.as_str()))
            .cloned()
            .collect();
        for name in &stripped {
            upstream_request.remove_header(name);
        }
        let client_ip = ctx.client_ip.map(|ip| ip.to_string());
        let proto = if self.settings.tls_enabled() || self.settings.file.behind_tls_proxy {
            "https"
        } else {
            "http"
        };
        for (name, value) in
            forward::trusted_headers(principal, &ctx.request_id, client_ip.as_deref(), proto)
        {
            upstream_request.insert_header(name, value)?;
        }
        upstream_request.insert_header(
            http::header::HOST,
            self.settings.upstream.authority.as_str(),
        )?;
        let path_and_query = upstream_request
            .uri
            .path_and_query()
            .map(|pq| pq.as_str().to_owned())
            .unwrap_or_else(|| MCP_PATH.to_owned());
        let path = forward::upstream_path(&path_and_query, MCP_PATH, &self.settings.upstream.path);
        let uri = path
            .parse::<http::Uri>()
            .map_err(|e| Error::explain(ErrorType::InvalidHTTPHeader, e.to_string()))?;
        upstream_request.set_uri(uri);
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        upstream_response.insert_header(forward::header::REQUEST_ID, ctx.request_id.as_str())?;
        if let Some((class, policy, decision)) = &ctx.rate {
            for (name, value) in crate::limit::headers(*class, *policy, decision) {
                upstream_response.insert_header(name, value)?;
            }
        }
        Ok(())
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Self::CTX,
    ) -> FailToProxy {
        let rejection = match classify(e) {
            Some(Rejection::PayloadTooLarge { .. }) => Some(Rejection::PayloadTooLarge {
                limit: self.settings.file.max_body_bytes,
            }),
            other => other,
        };
        let code = match rejection {
            Some(rejection) if session.response_written().is_none() => {
                let reply =
                    rejection.reply(&self.settings.resource_metadata_url(), &ctx.request_id);
                let status = reply.status;
                if let Err(err) = self.send(session, reply, ctx).await {
                    tracing::debug!(request_id = %ctx.request_id, error = %err, "could not send the error response");
                }
                status
            }
            _ => 0,
        };
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    fn suppress_error_log(&self, _session: &Session, _ctx: &Self::CTX, error: &Error) -> bool {
        is_client_side(error)
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let req = session.req_header();
        let (subject, client) = ctx
            .principal
            .as_ref()
            .map_or(("-", "-"), |p| (p.subject.as_str(), p.client.as_str()));
        tracing::info!(
            request_id = %ctx.request_id,
            method = %req.method,
            path = req.uri.path(),
            status,
            subject,
            client,
            ms = ctx.started.elapsed().as_millis() as u64,
            error = e.map(|e| e.to_string()),
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert!(matches!(route("/mcp"), Route::Mcp));
        assert!(matches!(route("/mcp/"), Route::Unknown));
        assert!(matches!(
            route("/.well-known/oauth-protected-resource/mcp"),
            Route::ResourceMetadata
        ));
        assert!(matches!(
            route("/.well-known/oauth-protected-resource"),
            Route::ResourceMetadata
        ));
        assert!(matches!(route("/healthz"), Route::Health));
    }

    #[test]
    fn only_failures_on_the_client_side_lose_pingoras_error_line() {
        assert!(is_client_side(
            &Error::new(ErrorType::ConnectionClosed).into_down()
        ));
        assert!(is_client_side(
            &Error::new(ErrorType::ReadError).into_down()
        ));
        assert!(is_client_side(&Error::new(ErrorType::HTTPStatus(413))));
        assert!(!is_client_side(
            &Error::new(ErrorType::ConnectRefused).into_up()
        ));
        assert!(!is_client_side(
            &Error::new(ErrorType::ReadTimedout).into_up()
        ));
        assert!(!is_client_side(&Error::new(ErrorType::InternalError)));
    }

    #[test]
    fn upstream_failures_map_to_502_and_504() {
        let refused = Error::new(ErrorType::ConnectRefused).into_up();
        assert_eq!(classify(&refused), Some(Rejection::UpstreamUnavailable));
        let timeout = Error::new(ErrorType::ConnectTimedout).into_up();
        assert_eq!(classify(&timeout), Some(Rejection::UpstreamTimeout));
        let read = Error::new(ErrorType::ReadTimedout).into_up();
        assert_eq!(classify(&read), Some(Rejection::UpstreamTimeout));
        let gone = Error::new(ErrorType::ConnectionClosed).into_down();
        assert_eq!(classify(&gone), None);
    }
}
