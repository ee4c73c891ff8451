//! The pingora phases. Each phase is thin: it reads the request, asks a plain function
//! (`auth`, `mcp`, `policy`, `forward`, `reject`, `metadata`) or the admission pipeline
//! (`proxy/admission.rs`) for the decision, and applies it.

use std::{sync::Arc, time::Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pforte_clock::Clock;
use pingora::{
    Error, ErrorSource, ErrorType, Result,
    http::{RequestHeader, ResponseHeader},
    proxy::{FailToProxy, ProxyHttp, Session},
    upstreams::peer::HttpPeer,
};
use std::time::Duration;

use crate::{
    audit::{AuditDecision, AuditLog, AuditPrincipal, AuditRecord},
    auth::{self, AuthFailure, Principal},
    balance::{self, Instances},
    catalog::{self, Catalog},
    config::{self, Settings, Upstream, UpstreamKind},
    forward,
    limit::{Class, Decision, Policy, SharedLimiter},
    mcp::{Kind, Message},
    metadata,
    metrics::{self, Metrics, OpenStream, RouteLabel},
    oauth::{self, AuthService},
    policy,
    reject::{Rejection, Reply},
    sessions::Sessions,
    tokens::TokenCache,
};

mod admission;
mod cors;

/// Per-request state shared by the phases.
#[derive(Debug)]
pub struct RequestCtx {
    pub request_id: String,
    pub principal: Option<Principal>,
    /// `kind:subject:client`, formatted once when the request is authenticated: who owns the
    /// sessions it opens.
    principal_key: String,
    /// `auth::person_key`: whom its sessions, streams, rates and tool budgets count against.
    person_key: String,
    client_ip: Option<std::net::IpAddr>,
    /// The rate-limit decision for this request, reported in response headers.
    rate: Option<(Class, Policy, Decision)>,
    /// An allowed foreign browser origin: answers carry CORS headers for it.
    cors_origin: Option<String>,
    /// Why the gateway refused the request, for the audit log.
    refused: Option<&'static str>,
    mcp: Exchange,
    body_bytes: u64,
    started: Instant,
    /// Wall-clock arrival, milliseconds since the epoch (the audit line's time).
    arrived_ms: u64,
    /// The route as a metrics label.
    route: RouteLabel,
    /// The MCP route (index into `Settings::routes`) of a `/NAME/mcp` request or its RFC 9728
    /// document.
    mcp_route: Option<usize>,
    /// When the request went upstream (for the time to its response header).
    upstream_sent: Option<Instant>,
    /// Counts an event-stream answer as open until the context drops.
    stream: Option<OpenStream>,
    /// A balanced route: the instance (index into the route's `urls`) the request goes to.
    instance: Option<usize>,
    /// The request carries `Mcp-Session-Id` (it must reach the session's instance).
    in_session: bool,
    /// Failed attempts to connect to an instance (a retry goes to another one).
    connect_failures: usize,
}

/// What the gateway keeps of one `/mcp` exchange between phases.
#[derive(Debug, Default)]
struct Exchange {
    /// The request is for `/mcp` (audited).
    route: bool,
    /// The body is read whole and admitted before it goes upstream.
    inspect: bool,
    /// Body chunks held until the body is whole.
    held: BytesMut,
    message: Option<Message>,
    /// A refusal decided in the body phase, answered by `fail_to_proxy`.
    rejection: Option<Rejection>,
    /// A `tools/list` answer to filter for the principal.
    filter_list: bool,
    list_is_sse: bool,
    list_held: BytesMut,
    /// An `initialize`: the answer's `Mcp-Session-Id` is bound to the principal.
    opens_session: bool,
    /// A `DELETE` of this session: its record goes when the upstream agrees.
    ends_session: Option<String>,
    /// An SSE stream's slot among the principal's; released when the context drops.
    stream: Option<crate::streams::StreamSlot>,
}

/// What the `/mcp` admission consults besides credentials: each route's tool catalog, the
/// session records, and the audit log.
#[derive(Debug)]
pub struct McpEdge {
    /// One catalog per route, in the order of `Settings::routes`.
    pub catalogs: Vec<Arc<Catalog>>,
    pub sessions: Arc<Sessions>,
    /// Open SSE streams per principal.
    pub streams: Arc<crate::streams::Streams>,
    pub audit: Option<AuditLog>,
}

/// The gateway: settings, credential snapshots and the clock. No statics.
#[derive(Debug)]
pub struct Gateway {
    settings: Arc<Settings>,
    tokens: TokenCache,
    oauth: Arc<AuthService>,
    limiter: Arc<SharedLimiter>,
    clock: Arc<dyn Clock>,
    /// Per route, in the order of `Settings::routes`.
    routes: Vec<RouteEdge>,
    edge: McpEdge,
    metrics: Arc<Metrics>,
    request_ids: crate::request_id::RequestIds,
}

/// What the request path keeps per route besides its settings.
struct RouteEdge {
    /// The RFC 9728 document, serialised once.
    metadata: Bytes,
    policy: policy::Policy,
    /// An https upstream's own CA (`ca_file`), parsed once; `None`: the system roots.
    ca: Option<Arc<pingora::protocols::tls::CaType>>,
    /// A route with several `urls`: its instances and their health.
    instances: Option<Arc<Instances>>,
}

impl std::fmt::Debug for RouteEdge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteEdge")
            .field("policy", &self.policy)
            .field("ca", &self.ca.is_some())
            .finish_non_exhaustive()
    }
}

/// Why the gateway cannot be built from valid settings.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("[[routes]] {route:?}: ca_file {path}: {reason}")]
    CaFile {
        route: String,
        path: String,
        reason: String,
    },
    #[error("[[routes]] {route:?}: urls: {source}")]
    Instances {
        route: String,
        source: balance::BalanceError,
    },
}

/// The instances of a route with several `urls`, named by their URLs (`scheme://host:port/path`,
/// derived from the configuration alike on every gateway); `None` for any other route.
fn instances_of(route: &config::Route) -> Result<Option<Arc<Instances>>, GatewayError> {
    let UpstreamKind::Replicas { instances, .. } = &route.upstream else {
        return Ok(None);
    };
    if instances.len() < 2 {
        return Ok(None);
    }
    let urls: Vec<String> = instances.iter().map(Upstream::http_url).collect();
    Instances::new(&route.name, &urls)
        .map(|i| Some(Arc::new(i)))
        .map_err(|source| GatewayError::Instances {
            route: route.name.clone(),
            source,
        })
}

/// The upstream a request of `route` goes to: instance `instance` of a balanced route, else
/// the route's one upstream.
fn upstream_of(route: &config::Route, instance: Option<usize>) -> &Upstream {
    match (&route.upstream, instance) {
        (UpstreamKind::Replicas { instances, .. }, Some(i)) => {
            instances.get(i).unwrap_or_else(|| route.upstream.primary())
        }
        _ => route.upstream.primary(),
    }
}

/// The certificates of a PEM CA file, as pingora's per-peer CA list.
fn load_ca(path: &std::path::Path) -> Result<Arc<pingora::protocols::tls::CaType>, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".to_owned());
    }
    Ok(certs
        .into_iter()
        .map(|der| {
            pingora::utils::tls::WrappedX509::new(der.to_vec(), pingora::utils::tls::parse_x509)
        })
        .collect::<Vec<_>>()
        .into())
}

/// The largest `tools/list` answer the gateway holds to filter.
const MAX_LIST_ANSWER: usize = 8 * 1024 * 1024;

impl Gateway {
    pub fn new(
        settings: Arc<Settings>,
        tokens: TokenCache,
        oauth: Arc<AuthService>,
        limiter: Arc<SharedLimiter>,
        clock: Arc<dyn Clock>,
        edge: McpEdge,
        metrics: Arc<Metrics>,
    ) -> Result<Self, GatewayError> {
        let mut routes = Vec::with_capacity(settings.routes.len());
        for (i, route) in settings.routes.iter().enumerate() {
            let ca = match route.upstream.ca_file() {
                Some(path) => Some(load_ca(path).map_err(|reason| GatewayError::CaFile {
                    route: route.name.clone(),
                    path: path.display().to_string(),
                    reason,
                })?),
                None => None,
            };
            routes.push(RouteEdge {
                metadata: Bytes::from(metadata::protected_resource(&settings, route).to_string()),
                policy: settings.route_policy(i),
                ca,
                instances: instances_of(route)?,
            });
        }
        Ok(Self {
            settings,
            tokens,
            oauth,
            limiter,
            clock,
            routes,
            edge,
            metrics,
            request_ids: crate::request_id::RequestIds::random(),
        })
    }

    /// The instances of every balanced route, for the prober.
    pub fn balanced(&self) -> Vec<Arc<Instances>> {
        self.routes
            .iter()
            .filter_map(|r| r.instances.clone())
            .collect()
    }

    /// The request's route's instances, when it is balanced.
    fn instances(&self, ctx: &RequestCtx) -> Option<&Arc<Instances>> {
        ctx.mcp_route
            .and_then(|i| self.routes.get(i))
            .and_then(|r| r.instances.as_ref())
    }

    /// The instance a balanced route's request went to, and the URL naming it.
    fn instance_url(&self, ctx: &RequestCtx) -> Option<&str> {
        let i = ctx.instance?;
        Some(self.instances(ctx)?.get(i)?.url.as_str())
    }

    /// The RFC 9728 URL a refusal names: the request's route's, else the default one.
    fn metadata_url(&self, ctx: &RequestCtx) -> String {
        match ctx.mcp_route.and_then(|i| self.settings.routes.get(i)) {
            Some(route) => route.metadata_url.clone(),
            None => self.settings.resource_metadata_url(),
        }
    }

    /// Authenticates the request's `Authorization` header for route `route`: a static token
    /// or an OAuth access token (for this route's resource), then the scopes every `/mcp`
    /// request needs.
    async fn authenticate(
        &self,
        req: &RequestHeader,
        route: &crate::config::Route,
    ) -> Result<Principal, AuthFailure> {
        let values = req.headers.get_all(http::header::AUTHORIZATION);
        let token = auth::bearer_token(values.iter().map(|v| v.as_bytes()));
        let kind = metrics::credential_kind(token.as_ref().ok().copied().flatten());
        let result = self.check_credential(token, route).await;
        self.metrics.auth(kind, metrics::auth_reason(&result));
        result
    }

    async fn check_credential(
        &self,
        token: Result<Option<&str>, AuthFailure>,
        route: &crate::config::Route,
    ) -> Result<Principal, AuthFailure> {
        let token = token?.ok_or(AuthFailure::Missing)?;
        let principal = if auth::looks_static(token) {
            auth::authenticate_static(token, &self.tokens.get(), self.clock.now_secs())?
        } else {
            let principal = self.oauth.authenticate(token).await?;
            // An OAuth token is for one resource: another route's is not valid here.
            if auth::check_route(&principal, &route.name, &route.resource).is_err() {
                return Err(AuthFailure::OtherResource);
            }
            principal
        };
        auth::require_scopes(&principal, &self.settings.file.required_scopes)?;
        Ok(principal)
    }

    /// Hands an authorization-server request to its router and writes the answer.
    async fn serve_auth_server(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
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

    /// The client IP as a limit key (IPv6 by its /64).
    fn ip_key(ctx: &RequestCtx) -> String {
        crate::limit::ip_key(ctx.client_ip)
    }

    /// Ready when every route's upstream accepts a connection.
    async fn upstream_ready(&self) -> bool {
        let wait = Duration::from_millis(500);
        for (route, edge) in self.settings.routes.iter().zip(&self.routes) {
            // A balanced route is ready while one of its instances is up (the prober knows).
            if let Some(instances) = &edge.instances {
                if instances.any_healthy() {
                    continue;
                }
                return false;
            }
            let upstream = route.upstream.primary();
            let up = match &upstream.socket {
                Some(path) => matches!(
                    tokio::time::timeout(wait, tokio::net::UnixStream::connect(path)).await,
                    Ok(Ok(_))
                ),
                None => matches!(
                    tokio::time::timeout(
                        wait,
                        tokio::net::TcpStream::connect(upstream.authority.as_str())
                    )
                    .await,
                    Ok(Ok(_))
                ),
            };
            if !up {
                return false;
            }
        }
        true
    }

    async fn send(&self, session: &mut Session, reply: Reply, ctx: &RequestCtx) -> Result<()> {
        let mut resp = ResponseHeader::build(reply.status, Some(reply.headers.len() + 6))?;
        for (name, value) in &reply.headers {
            resp.insert_header(*name, value.as_str())?;
        }
        if let Some(origin) = &ctx.cors_origin {
            for (name, value) in cors::response_headers(origin) {
                resp.insert_header(name, value)?;
            }
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
        ctx: &mut RequestCtx,
    ) -> Result<bool> {
        ctx.refused = Some(rejection.reason());
        let reply = rejection.reply(&self.metadata_url(ctx), &ctx.request_id);
        self.send(session, reply, ctx).await?;
        Ok(true)
    }

    /// Answers a CORS preflight of `/mcp` without credentials: 204 for an allowed origin.
    async fn preflight(
        &self,
        session: &mut Session,
        route: usize,
        ctx: &mut RequestCtx,
    ) -> Result<bool> {
        match self.check_origin(session.req_header(), route) {
            Ok(Some(origin)) => {
                let reply = Reply {
                    status: 204,
                    headers: cors::preflight_headers(&origin),
                    body: Bytes::new(),
                };
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            // Same-origin pages need no preflight; no CORS headers for them either.
            Ok(None) => {
                let reply = Reply {
                    status: 204,
                    headers: vec![("allow", cors::ALLOW_METHODS.to_owned())],
                    body: Bytes::new(),
                };
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            Err(rejection) => self.refuse(session, rejection, ctx).await,
        }
    }

    /// The audit line of one `/mcp` request: every request that names a tool, resource or
    /// prompt, and every refusal.
    fn audit(&self, session: &Session, ctx: &RequestCtx, status: u16) {
        let Some(log) = &self.edge.audit else { return };
        let target = ctx.mcp.message.as_ref().and_then(|m| m.target.as_deref());
        if target.is_none() && ctx.refused.is_none() {
            return;
        }
        let method = match &ctx.mcp.message {
            Some(m) if m.kind == Kind::Response => "response",
            Some(m) => m.method.as_str(),
            None => session.req_header().method.as_str(),
        };
        let record = AuditRecord {
            time_ms: ctx.arrived_ms,
            request_id: &ctx.request_id,
            route: ctx
                .mcp_route
                .and_then(|i| self.settings.routes.get(i))
                .map_or(crate::config::DEFAULT_ROUTE, |r| r.name.as_str()),
            principal: ctx.principal.as_ref().map(AuditPrincipal::from),
            method,
            name: target,
            decision: if ctx.refused.is_some() {
                AuditDecision::Denied
            } else {
                AuditDecision::Allowed
            },
            reason: ctx.refused,
            upstream_status: ctx.refused.is_none().then_some(status),
            duration_ms: ctx.started.elapsed().as_millis() as u64,
        };
        log.record(&record);
    }
}

/// Whether an upstream answer is an event stream.
fn is_event_stream(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

impl Gateway {
    /// The metrics of one finished request (its `tools/call`, an upstream failure).
    fn count(&self, req: &RequestHeader, e: Option<&Error>, ctx: &mut RequestCtx, status: u16) {
        let took = ctx.started.elapsed();
        let method = metrics::method_class(&req.method);
        self.metrics.request(ctx.route, method, status, took);
        if let Some(kind) = e.and_then(metrics::upstream_failure) {
            self.metrics.upstream_failure(kind);
        }
        if let Some(tool) = ctx.mcp.message.as_ref().and_then(Message::tool)
            && let Some(i) = ctx.mcp_route
        {
            let known = self
                .edge
                .catalogs
                .get(i)
                .is_some_and(|c| c.tool(tool) != catalog::Lookup::Unknown)
                || self.settings.routes[i].tools.contains_key(tool)
                || self.settings.file.limits.tools.contains_key(tool);
            self.metrics
                .tool_call(tool, known, metrics::tool_decision(ctx.refused));
        }
        ctx.stream = None;
    }
}

/// Which built-in route a path is.
enum Route {
    AuthServer,
    Favicon,
    Metrics,
    Health,
    Ready,
    /// The RFC 9728 document of route `usize`.
    ResourceMetadata(usize),
    /// The MCP endpoint of route `usize` (`/mcp` or `/NAME/mcp`).
    Mcp(usize),
    Unknown,
}

impl Route {
    /// The route as a metrics label (every MCP route is `mcp`: the label stays bounded).
    fn metric(&self) -> RouteLabel {
        match self {
            Self::Mcp(_) => RouteLabel::Mcp,
            Self::AuthServer => RouteLabel::OAuth,
            Self::ResourceMetadata(_) => RouteLabel::WellKnown,
            Self::Health | Self::Ready => RouteLabel::Health,
            Self::Metrics => RouteLabel::Metrics,
            Self::Favicon | Self::Unknown => RouteLabel::Other,
        }
    }
}

fn route(settings: &Settings, path: &str) -> Route {
    if oauth::is_as_path(path) {
        return Route::AuthServer;
    }
    match path {
        "/healthz" => Route::Health,
        // Browsers ask for it on the login page; answer without an error in their console.
        "/favicon.ico" => Route::Favicon,
        "/metrics" => Route::Metrics,
        "/readyz" => Route::Ready,
        p if p.starts_with("/.well-known/oauth-protected-resource") => settings
            .route_for_metadata(p)
            .map_or(Route::Unknown, Route::ResourceMetadata),
        p => settings
            .route_for_path(p)
            .map_or(Route::Unknown, Route::Mcp),
    }
}

/// How long a client connection may idle before its next request: pingora's setting for it
/// (`None`: closes after this request; `Some(0)`: no limit; `Some(s)`: what the client's
/// `Keep-Alive: timeout=s` asked) bounded by `keepalive_timeout_secs`.
fn keepalive(current: Option<u64>, max_secs: u64) -> Option<u64> {
    match current {
        None => None,
        Some(0) => Some(max_secs),
        Some(asked) => Some(asked.min(max_secs)),
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
            request_id: self.request_ids.next_id(),
            principal: None,
            principal_key: String::new(),
            person_key: String::new(),
            client_ip: None,
            rate: None,
            cors_origin: None,
            refused: None,
            mcp: Exchange::default(),
            body_bytes: 0,
            started: Instant::now(),
            arrived_ms: self.clock.now_ms(),
            route: RouteLabel::Other,
            mcp_route: None,
            upstream_sent: None,
            stream: None,
            instance: None,
            in_session: false,
            connect_failures: 0,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        // pingora keeps an HTTP/1.1 connection open between requests without a time limit
        // unless told otherwise (or as long as the client's `Keep-Alive: timeout=` asks).
        let idle = keepalive(
            session.get_keepalive(),
            self.settings.file.keepalive_timeout_secs,
        );
        session.set_keepalive(idle);
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let trusted = &self.settings.file.trusted_proxies;
        let headers = &session.req_header().headers;
        // Every line, in order; a line that is not text is a hop that is no address.
        let forwarded: Vec<&str> = headers
            .get_all(forward::header::FORWARDED_FOR)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect();
        ctx.client_ip = forward::client_ip(peer, &forwarded, trusted);
        let forwarded_any = !forwarded.is_empty() || headers.contains_key(http::header::FORWARDED);
        let req = session.req_header();
        let get = req.method == http::Method::GET || req.method == http::Method::HEAD;
        let route = route(&self.settings, req.uri.path());
        ctx.route = route.metric();
        if let Route::Mcp(i) | Route::ResourceMetadata(i) = route {
            ctx.mcp_route = Some(i);
        }
        match route {
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
            Route::ResourceMetadata(i) if get => {
                let mut reply = Reply::json(200, &serde_json::Value::Null);
                reply.body = self.routes[i].metadata.clone();
                reply
                    .headers
                    .push(("cache-control", "public, max-age=3600".to_owned()));
                reply
                    .headers
                    .push(("access-control-allow-origin", "*".to_owned()));
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            Route::ResourceMetadata(_) => {
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
            Route::Metrics
                if forward::metrics_allowed(peer, ctx.client_ip, forwarded_any, trusted) =>
            {
                let mut reply = Reply::json(200, &serde_json::Value::Null);
                reply.headers = vec![("content-type", metrics::CONTENT_TYPE.to_owned())];
                reply.body = Bytes::from(self.metrics.encode().map_err(|_| {
                    Error::explain(ErrorType::InternalError, "metrics not encodable")
                })?);
                self.send(session, reply, ctx).await?;
                Ok(true)
            }
            Route::Metrics => self.refuse(session, Rejection::NotFound, ctx).await,
            Route::AuthServer => {
                if req.method == http::Method::POST {
                    let key = Self::ip_key(ctx);
                    match self.limit(Class::OAuth, &key).await {
                        Ok(rate) => ctx.rate = rate,
                        Err(rejection) => return self.refuse(session, rejection, ctx).await,
                    }
                }
                self.serve_auth_server(session, ctx).await
            }
            Route::Mcp(i) if cors::is_preflight(&req.method, &req.headers) => {
                ctx.mcp.route = true;
                self.preflight(session, i, ctx).await
            }
            Route::Mcp(i) => {
                ctx.mcp.route = true;
                match self.admit_headers(session.req_header(), i, ctx).await {
                    Ok(()) => Ok(false),
                    Err(rejection) => self.refuse(session, rejection, ctx).await,
                }
            }
        }
    }

    async fn request_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if let Some(chunk) = body {
            ctx.body_bytes += chunk.len() as u64;
            if ctx.body_bytes > self.settings.file.max_body_bytes {
                return Error::e_explain(ErrorType::HTTPStatus(413), "request body over the limit");
            }
        }
        if !ctx.mcp.inspect {
            return Ok(());
        }
        if !end_of_stream {
            // Hold the chunk: nothing reaches the upstream before the whole body is admitted.
            if let Some(chunk) = body.take() {
                ctx.mcp.held.extend_from_slice(&chunk);
            }
            *body = Some(Bytes::new());
            return Ok(());
        }
        ctx.mcp.inspect = false;
        // The usual single-chunk body is read where it lies; only a split one is joined, once.
        let whole = match body.take() {
            Some(chunk) if ctx.mcp.held.is_empty() => chunk,
            chunk => {
                if let Some(chunk) = chunk {
                    ctx.mcp.held.extend_from_slice(&chunk);
                }
                std::mem::take(&mut ctx.mcp.held).freeze()
            }
        };
        match self.admit_body(session.req_header(), &whole, ctx).await {
            Ok(()) => {
                *body = Some(whole);
                Ok(())
            }
            Err(rejection) => {
                ctx.mcp.rejection = Some(rejection);
                Error::e_explain(ErrorType::Custom("refused"), "refused by the /mcp policy")
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let Some(i) = ctx.mcp_route else {
            return Error::e_explain(ErrorType::InternalError, "no route for the upstream");
        };
        let route = &self.settings.routes[i];
        if let Some(instances) = self.instances(ctx) {
            // A session's instance was decided by the admission; anything else is balanced,
            // and a retry after a failed connect avoids the instance that failed.
            let chosen = match ctx.instance {
                Some(i) if ctx.in_session || ctx.connect_failures == 0 => Some(i),
                Some(failed) => instances.pick_other(failed),
                None => instances.pick(),
            };
            ctx.instance = Some(chosen.ok_or_else(|| {
                Error::explain(
                    ErrorType::ConnectNoRoute,
                    format!("route {:?}: no instance is up", route.name),
                )
                .into_up()
            })?);
        }
        let upstream = upstream_of(route, ctx.instance);
        let mut peer = match &upstream.socket {
            Some(path) => HttpPeer::new_uds(&path.to_string_lossy(), false, String::new())
                .map_err(|e| e.into_up())?,
            None => {
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
                // https: the host is the SNI and the name verified (system roots or ca_file).
                let sni = if upstream.tls {
                    upstream.host.clone()
                } else {
                    String::new()
                };
                HttpPeer::new(addr, upstream.tls, sni)
            }
        };
        // Each route keeps its own upstream connections: pingora's reuse key does not include
        // the per-peer CA, so without this a connection verified for one route's `ca_file`
        // would be reused by another route to the same address with another (or no) CA.
        peer.group_key = i as u64;
        if upstream.tls {
            peer.options.ca = self.routes[i].ca.clone();
            peer.options.verify_cert = true;
            peer.options.verify_hostname = true;
        }
        peer.options.connection_timeout = Some(Duration::from_millis(route.connect_timeout_ms));
        peer.options.read_timeout = Some(Duration::from_millis(route.read_timeout_ms));
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        Ok(Box::new(peer))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Self::CTX,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let (Some(instances), Some(i)) = (self.instances(ctx), ctx.instance) {
            if balance::marks_down(&e) {
                instances.mark_down(i, self.clock.now_ms(), e.etype().as_str());
            }
            ctx.connect_failures += 1;
            if balance::retries_elsewhere(ctx.in_session, instances.len(), ctx.connect_failures) {
                e.set_retry(true);
            }
        }
        e
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
        let Some(route) = ctx.mcp_route.and_then(|i| self.settings.routes.get(i)) else {
            return Error::e_explain(ErrorType::InternalError, "no route for the upstream");
        };
        let upstream = upstream_of(route, ctx.instance);
        for (name, value) in forward::trusted_headers(
            principal,
            &route.name,
            &ctx.request_id,
            client_ip.as_deref(),
            proto,
        ) {
            upstream_request.insert_header(name, value)?;
        }
        upstream_request.insert_header(http::header::HOST, upstream.authority.as_str())?;
        let path_and_query = upstream_request
            .uri
            .path_and_query()
            .map(|pq| pq.as_str().to_owned())
            .unwrap_or_else(|| route.path.clone());
        let path = forward::upstream_path(&path_and_query, &route.path, &upstream.path);
        let uri = path
            .parse::<http::Uri>()
            .map_err(|e| Error::explain(ErrorType::InvalidHTTPHeader, e.to_string()))?;
        upstream_request.set_uri(uri);
        ctx.upstream_sent = Some(Instant::now());
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if let Some(sent) = ctx.upstream_sent {
            self.metrics.upstream_first_byte(sent.elapsed());
        }
        let ok = upstream_response.status.is_success();
        if ok && is_event_stream(upstream_response) {
            ctx.stream = Some(self.metrics.stream_opened());
        }
        if ctx.mcp.opens_session
            && ok
            && let Some(id) = upstream_response
                .headers
                .get(admission::SESSION_ID)
                .and_then(|v| v.to_str().ok())
            && let Err(e) = self
                .edge
                .sessions
                .bind(id, ctx.holder(), self.instance_url(ctx))
                .await
        {
            tracing::warn!(request_id = %ctx.request_id, error = %e, "could not record the session's owner");
        }
        if let Some(id) = ctx.mcp.ends_session.take()
            && ok
            && let Err(e) = self.edge.sessions.forget(&id, ctx.holder()).await
        {
            tracing::debug!(error = %e, "could not forget an ended session");
        }
        if ctx.mcp.filter_list {
            if ok {
                ctx.mcp.list_is_sse = upstream_response
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("text/event-stream"));
                // The filtered answer has another length; it goes out chunked.
                upstream_response.remove_header(&http::header::CONTENT_LENGTH);
                upstream_response.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
            } else {
                ctx.mcp.filter_list = false;
            }
        }
        if let Some(origin) = &ctx.cors_origin {
            for (name, value) in cors::response_headers(origin) {
                upstream_response.insert_header(name, value)?;
            }
        }
        upstream_response.insert_header(forward::header::REQUEST_ID, ctx.request_id.as_str())?;
        if let Some((class, policy, decision)) = &ctx.rate {
            for (name, value) in crate::limit::headers(*class, *policy, decision) {
                upstream_response.insert_header(name, value)?;
            }
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        if !ctx.mcp.filter_list {
            return Ok(None);
        }
        if let Some(chunk) = body.take() {
            if ctx.mcp.list_held.len() + chunk.len() > MAX_LIST_ANSWER {
                return Error::e_explain(
                    ErrorType::Custom("list too large"),
                    "tools/list answer over the filter's limit",
                );
            }
            ctx.mcp.list_held.extend_from_slice(&chunk);
        }
        if !end_of_stream {
            return Ok(None);
        }
        ctx.mcp.filter_list = false;
        let held = std::mem::take(&mut ctx.mcp.list_held).freeze();
        let Some(principal) = &ctx.principal else {
            return Error::e_explain(ErrorType::InternalError, "tools/list without a principal");
        };
        let Some(edge) = ctx.mcp_route.and_then(|i| self.routes.get(i)) else {
            return Error::e_explain(ErrorType::InternalError, "tools/list without a route");
        };
        let keep = |name: &str, annotation: policy::Annotation| {
            edge.policy.may_list(principal, name, annotation)
        };
        *body = match catalog::filter_tools_list(&held, ctx.mcp.list_is_sse, keep) {
            Ok(Some(filtered)) => Some(filtered),
            Ok(None) => Some(held),
            Err(e) => {
                return Error::e_explain(
                    ErrorType::Custom("tools/list unreadable"),
                    format!("cannot filter the tools/list answer: {e}"),
                );
            }
        };
        Ok(None)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Self::CTX,
    ) -> FailToProxy {
        // The connection closes after a failed proxy attempt; say so, so that no client sends
        // its next request into a closing socket.
        session.set_keepalive(None);
        let mut instance_gone = false;
        if let (Some(instances), Some(i)) = (self.instances(ctx), ctx.instance)
            && ctx.mcp.rejection.is_none()
            && balance::marks_down(e)
        {
            instances.mark_down(i, self.clock.now_ms(), e.etype().as_str());
            // A session whose instance cannot be reached is gone: the client re-initializes
            // (onto an instance that is up) instead of retrying into a 502.
            instance_gone = ctx.in_session && ctx.connect_failures > 0;
        }
        let rejection = match ctx.mcp.rejection.take() {
            Some(rejection) => Some(rejection),
            None if instance_gone => Some(Rejection::SessionNotFound),
            None => match classify(e) {
                Some(Rejection::PayloadTooLarge { .. }) => Some(Rejection::PayloadTooLarge {
                    limit: self.settings.file.max_body_bytes,
                }),
                other => other,
            },
        };
        let code = match rejection {
            Some(rejection) if session.response_written().is_none() => {
                ctx.refused = Some(rejection.reason());
                let reply = rejection.reply(&self.metadata_url(ctx), &ctx.request_id);
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

    fn suppress_error_log(&self, _session: &Session, ctx: &Self::CTX, error: &Error) -> bool {
        ctx.refused.is_some() || is_client_side(error)
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        if ctx.mcp.route {
            self.audit(session, ctx, status);
        }
        let req = session.req_header();
        self.count(req, e, ctx, status);
        let (subject, client) = ctx
            .principal
            .as_ref()
            .map_or(("-", "-"), |p| (p.subject.as_str(), p.client.as_str()));
        tracing::info!(
            request_id = %ctx.request_id,
            method = %req.method,
            path = %crate::logging::untrusted(req.uri.path()),
            status,
            subject,
            client,
            ms = ctx.started.elapsed().as_millis() as u64,
            error = e.map(|e| crate::logging::untrusted(&e.to_string()).to_string()),
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let text = "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[[routes]]\nname = \"plans\"\nurl = \"http://127.0.0.1:2/mcp\"";
        match toml::from_str::<crate::config::GatewayConfig>(text).map(|c| c.validate()) {
            Ok(Ok(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_route_with_several_urls_is_balanced_over_its_instances() {
        let text = "[[routes]]\nname = \"plans\"\nurls = [\"http://127.0.0.1:2/mcp\", \"http://127.0.0.1:3/base/mcp\"]\n[[routes]]\nname = \"one\"\nurls = [\"http://127.0.0.1:4/mcp\"]\n[[routes]]\nname = \"plain\"\nurl = \"http://127.0.0.1:5/mcp\"";
        let s = match toml::from_str::<crate::config::GatewayConfig>(text).map(|c| c.validate()) {
            Ok(Ok(s)) => s,
            other => panic!("{other:?}"),
        };
        let Ok(Some(plans)) = instances_of(&s.routes[0]) else {
            panic!("plans is balanced");
        };
        let urls: Vec<&str> = plans.all().iter().map(|i| i.url.as_str()).collect();
        assert_eq!(
            urls,
            ["http://127.0.0.1:2/mcp", "http://127.0.0.1:3/base/mcp"]
        );
        // One instance, or one url: nothing to balance.
        assert!(matches!(instances_of(&s.routes[1]), Ok(None)));
        assert!(matches!(instances_of(&s.routes[2]), Ok(None)));
        // Each instance brings its own authority and path; no instance means the first.
        assert_eq!(upstream_of(&s.routes[0], Some(1)).authority, "127.0.0.1:3");
        assert_eq!(upstream_of(&s.routes[0], Some(1)).path, "/base/mcp");
        assert_eq!(upstream_of(&s.routes[0], None).authority, "127.0.0.1:2");
        assert_eq!(upstream_of(&s.routes[0], Some(9)).authority, "127.0.0.1:2");
        assert_eq!(upstream_of(&s.routes[2], Some(1)).authority, "127.0.0.1:5");
    }

    #[test]
    fn routes() {
        let s = settings();
        assert!(matches!(route(&s, "/mcp"), Route::Mcp(0)));
        assert!(matches!(route(&s, "/plans/mcp"), Route::Mcp(1)));
        assert!(matches!(route(&s, "/mcp/"), Route::Unknown));
        assert!(matches!(route(&s, "/other/mcp"), Route::Unknown));
        assert!(matches!(
            route(&s, "/.well-known/oauth-protected-resource/mcp"),
            Route::ResourceMetadata(0)
        ));
        assert!(matches!(
            route(&s, "/.well-known/oauth-protected-resource/plans/mcp"),
            Route::ResourceMetadata(1)
        ));
        assert!(matches!(
            route(&s, "/.well-known/oauth-protected-resource"),
            Route::ResourceMetadata(0)
        ));
        assert!(matches!(
            route(&s, "/.well-known/oauth-protected-resource/nope/mcp"),
            Route::Unknown
        ));
        assert!(matches!(route(&s, "/healthz"), Route::Health));
    }

    #[test]
    fn routes_have_bounded_metric_labels() {
        let s = settings();
        for (path, label) in [
            ("/mcp", RouteLabel::Mcp),
            ("/plans/mcp", RouteLabel::Mcp),
            ("/token", RouteLabel::OAuth),
            ("/authorize", RouteLabel::OAuth),
            ("/.well-known/oauth-authorization-server", RouteLabel::OAuth),
            (
                "/.well-known/oauth-protected-resource/mcp",
                RouteLabel::WellKnown,
            ),
            ("/healthz", RouteLabel::Health),
            ("/readyz", RouteLabel::Health),
            ("/metrics", RouteLabel::Metrics),
            ("/favicon.ico", RouteLabel::Other),
            ("/anything/else", RouteLabel::Other),
        ] {
            assert_eq!(route(&s, path).metric(), label, "{path}");
        }
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
    fn idle_connections_are_bounded_by_keepalive_timeout_secs() {
        assert_eq!(
            keepalive(Some(0), 60),
            Some(60),
            "pingora's default: forever"
        );
        assert_eq!(keepalive(Some(5), 60), Some(5), "a client may ask for less");
        assert_eq!(keepalive(Some(86_400), 60), Some(60), "not for more");
        assert_eq!(keepalive(None, 60), None, "Connection: close stays closed");
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
