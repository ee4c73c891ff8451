//! The pingora phases. Each phase is a few lines: it asks a named module for the decision and
//! applies it. `ctx` holds what the phases share; `builtin` answers the gateway's own
//! endpoints; `auth_server` bridges to the authorization server; `admission` admits an `/mcp`
//! request (headers, then the whole body); `upstream` picks the peer and rewrites the request;
//! `respond` rewrites the answer; `observe` audits, counts and logs. Every answer the gateway
//! makes itself is written by `reply`.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use pforte_clock::Clock;
use pingora::{
    Error, Result,
    http::ResponseHeader,
    proxy::{FailToProxy, ProxyHttp, Session},
    upstreams::peer::HttpPeer,
};

use crate::{
    audit::AuditLog,
    balance::{self, Instances},
    catalog::Catalog,
    config::Settings,
    forward,
    limit::SharedLimiter,
    metrics::Metrics,
    oauth::AuthService,
    reply::{self, Rejection, Reply},
    sessions::Sessions,
    streams::Streams,
    tokens::TokenCache,
};

mod admission;
mod approval;
mod auth_server;
mod batched;
mod builtin;
mod connect;
mod console;
mod ctx;
mod exchange;
mod mcp_headers;
mod observe;
mod peers;
mod pinned;
mod pool;
mod relay;
mod respond;
mod rules;
mod stream_gate;
mod task_owner;
mod trace;
mod upstream;
mod virtual_mcp;
mod wire;

pub(crate) use batched::Batched;
pub(crate) use ctx::RequestCtx;
pub use wire::decode_answer;

use builtin::{Caller, Target};
use upstream::RouteEdge;

/// What the `/mcp` admission consults besides credentials: each route's tool catalog, the
/// session records, and the audit log; and what the console keeps of finished requests.
#[derive(Debug)]
pub(crate) struct McpEdge {
    /// One catalog per route, in the order of `Settings::routes`.
    pub(crate) catalogs: Vec<Arc<Catalog>>,
    pub(crate) sessions: Arc<Sessions>,
    /// Who created each task (`tasks/get|update|cancel` are the creator's).
    pub(crate) tasks: Arc<crate::tasks::Tasks>,
    /// Open SSE streams per principal.
    pub(crate) streams: Arc<Streams>,
    pub(crate) audit: Option<AuditLog>,
    /// The operator console's state (`/admin`): the request statistics it charts.
    pub(crate) console: crate::console::Console,
    /// `[telemetry]`: the tracer; `None`: no span is built.
    pub(crate) telemetry: Option<crate::telemetry::Telemetry>,
    /// Upstream credentials per user (`[routes.upstream_auth]`) and the connect flow.
    pub(crate) credentials: Arc<crate::credentials::Credentials>,
    /// The pinned tool definitions: which tools each route holds.
    pub(crate) pins: Arc<crate::pins::Pins>,
    /// Calls held for a person's approval (`effect = "approve"`, `proxy/approval.rs`).
    pub(crate) approvals: Option<Arc<dyn crate::approvals::ApprovalStore>>,
}

/// The gateway: settings, credential snapshots and the clock. No statics.
#[derive(Debug)]
pub(crate) struct GatewayState {
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
    /// Sessions whose first requests wait for their event stream (`stream_gate.rs`).
    stream_gate: stream_gate::StreamGate,
    /// The member sessions the virtual servers hold per downstream session.
    member_sessions: virtual_mcp::MemberSessions,
    /// Members' requests to clients awaiting their answers.
    asks: virtual_mcp::Asks,
    /// Calls whose member's stream is relayed (a client's cancellation finds its member).
    calls: virtual_mcp::Calls,
}

/// The gateway's phases over its shared state, and the upstream connections of one proxy
/// service: cheap to clone (a clone shares both). Each per-core service (`runtime =
/// "per-core"`) takes its own pool with [`Gateway::for_core`]: a kept-alive connection is
/// watched while idle by a task on the thread that released it, so taking it on another core's
/// thread would wait for that thread to hand it over.
#[derive(Debug, Clone)]
pub(crate) struct Gateway(Arc<GatewayState>, Arc<exchange::Upstreams>);

impl std::ops::Deref for Gateway {
    type Target = GatewayState;
    fn deref(&self) -> &GatewayState {
        &self.0
    }
}

/// Why the gateway cannot be built from valid settings.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GatewayError {
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
    #[error("[[routes]] {route:?}: the upstream peer: {reason}")]
    Peer { route: String, reason: String },
}

/// What the request phase decided: the one outcome every request ends in.
#[derive(Debug)]
enum Outcome {
    /// Admitted whole: on to the upstream with this body.
    Forward(Bytes),
    /// The gateway answers itself.
    Answer(Reply),
    /// The gateway refuses.
    Refuse(Rejection),
    /// The authorization server answered.
    Passed(http::Response<Bytes>),
    /// Already answered in full (a virtual server's relayed event stream).
    Relayed,
}

impl Gateway {
    pub(crate) fn new(
        settings: Arc<Settings>,
        tokens: TokenCache,
        oauth: Arc<AuthService>,
        limiter: Arc<SharedLimiter>,
        clock: Arc<dyn Clock>,
        edge: McpEdge,
        metrics: Arc<Metrics>,
    ) -> Result<Self, GatewayError> {
        let routes = (0..settings.routes.len())
            .map(|i| RouteEdge::new(&settings, i, clock.now_ms()))
            .collect::<Result<_, _>>()?;
        Ok(Self(
            Arc::new(GatewayState {
                settings,
                tokens,
                oauth,
                limiter,
                clock,
                routes,
                edge,
                metrics,
                request_ids: crate::request_id::RequestIds::random(),
                stream_gate: stream_gate::StreamGate::default(),
                member_sessions: virtual_mcp::MemberSessions::default(),
                asks: virtual_mcp::Asks::default(),
                calls: virtual_mcp::Calls::default(),
            }),
            Arc::default(),
        ))
    }

    /// The same gateway with a pool of upstream connections of its own, for one per-core
    /// service.
    pub(crate) fn for_core(&self) -> Self {
        Self(self.0.clone(), Arc::default())
    }

    /// Upstream connections: kept-alive ones pooled per peer, this service's.
    fn upstreams(&self) -> &exchange::Upstreams {
        &self.1
    }

    /// The instances of every balanced route, for the prober.
    pub(crate) fn balanced(&self) -> Vec<Arc<Instances>> {
        self.routes
            .iter()
            .filter_map(|r| r.instances.clone())
            .collect()
    }

    /// Whether `path` is an MCP route's endpoint (`/mcp` or `/NAME/mcp`).
    pub(crate) fn is_mcp_path(&self, path: &str) -> bool {
        matches!(Target::of(&self.settings, path), Target::Mcp(_))
    }

    /// The RFC 9728 URL a refusal names: the request's route's, else the default one.
    fn metadata_url(&self, ctx: &RequestCtx) -> String {
        match ctx.mcp_route.and_then(|i| self.settings.routes.get(i)) {
            Some(route) => route.metadata_url.clone(),
            None => match ctx
                .virtual_server
                .and_then(|i| self.settings.virtuals.get(i))
            {
                Some(v) => v.metadata_url.clone(),
                None => self.settings.resource_metadata_url(),
            },
        }
    }

    /// Where the request goes and who sent it: the connection's idle bound, the resolved
    /// client, the target.
    fn arrive(&self, session: &mut Session, ctx: &mut RequestCtx) -> (Target, Caller) {
        // pingora keeps an HTTP/1.1 connection open between requests without a time limit
        // unless told otherwise (or as long as the client's `Keep-Alive: timeout=` asks).
        let idle = keepalive(
            session.get_keepalive(),
            self.settings.listen.keepalive_timeout_secs,
        );
        session.set_keepalive(idle);
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let headers = &session.req_header().headers;
        // Every line, in order; a line that is not text is a hop that is no address.
        let forwarded: Vec<&str> = headers
            .get_all(forward::header::FORWARDED_FOR)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect();
        ctx.client_ip =
            forward::client_ip(peer, &forwarded, &self.settings.admission.trusted_proxies);
        let forwarded = !forwarded.is_empty() || headers.contains_key(http::header::FORWARDED);
        let req = session.req_header();
        let target = Target::of(&self.settings, req.uri.path());
        ctx.route = target.metric();
        ctx.mcp_route = target.route();
        let caller = Caller {
            get: req.method == http::Method::GET || req.method == http::Method::HEAD,
            peer,
            client: ctx.client_ip,
            forwarded,
        };
        (target, caller)
    }

    /// Applies the request phase's decision: forwarded and relayed, or answered by the gateway
    /// (an `/mcp` request's unread body settled around the answer, `admission.rs`).
    async fn apply(
        &self,
        session: &mut Session,
        outcome: Outcome,
        ctx: &mut RequestCtx,
    ) -> Result<bool> {
        let reply = match outcome {
            Outcome::Forward(body) => match self.exchange(session, ctx, body).await? {
                exchange::Relayed::Answered => return Ok(true),
                exchange::Relayed::Replaced(reply) => reply,
            },
            Outcome::Passed(response) => {
                Box::pin(reply::write_passed(session, response, &ctx.request_id)).await?;
                return Ok(true);
            }
            Outcome::Answer(reply) => reply,
            Outcome::Refuse(rejection) => self.refusal(rejection, ctx),
            Outcome::Relayed => return Ok(true),
        };
        // The gateway's own answer is no event stream: a `GET`'s stream slot goes before the
        // client can read the answer and ask again.
        ctx.mcp.stream = None;
        let unread = self.body_unread(session, ctx);
        if unread && session.downstream_session.is_http2() {
            // An HTTP/2 stream answered before its body is read is reset: read it first.
            Box::pin(self.settle_body(session, ctx)).await;
            Box::pin(reply::write(session, reply, ctx.framing())).await?;
        } else {
            // HTTP/1: the answer first, then the rest of the body (a lingering close when it
            // is over the bound), so the client is reading when the connection ends.
            Box::pin(reply::write(session, reply, ctx.framing())).await?;
            if unread {
                Box::pin(self.settle_body(session, ctx)).await;
            }
        }
        Ok(true)
    }

    /// The answer to a refused request, noted for the audit line.
    fn refusal(&self, rejection: Rejection, ctx: &mut RequestCtx) -> Reply {
        ctx.refused = Some(rejection.reason());
        match &rejection {
            Rejection::PolicyRule(refusal) => ctx.rule = Some(refusal.rule.clone()),
            Rejection::Held { rule, .. } => ctx.rule = Some(rule.clone()),
            _ => {}
        }
        rejection.reply(&self.metadata_url(ctx), &ctx.request_id)
    }
}

/// The keep-alive a client connection has before its request's arrival phase bounds it
/// (pingora's own default for a first request): seconds.
pub(crate) const FIRST_KEEPALIVE_SECS: u64 = 60;

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

/// Whether a failed request was the client's doing: it went away, sent something unusable, or
/// sent too large a body. pingora would log each at ERROR; the gateway's own `request` line
/// (info) already carries the error, so only failures on the gateway's or upstream's side keep
/// pingora's ERROR line.
fn is_client_side(e: &Error) -> bool {
    matches!(
        Rejection::from_proxy_error(e, 0),
        None | Some(Rejection::PayloadTooLarge { .. })
    )
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    /// No downstream modules: pingora's default adds a response-compression module to every
    /// request even at level 0, and the gateway compresses nothing.
    fn init_downstream_modules(&self, _modules: &mut pingora::modules::http::HttpModules) {}

    fn new_ctx(&self) -> Self::CTX {
        RequestCtx::new(self.request_ids.next_id(), self.clock.now_ms())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let (target, caller) = self.arrive(session, ctx);
        // Each step in a box of its own, freed when it is done: this future lives as long as
        // the answer is relayed (an event stream's whole life), and inline it would be as large
        // as the largest of them (docs/performance.md, "Long streams").
        let outcome = match target {
            Target::Mcp(route) => Box::pin(self.admit(session, route, ctx)).await?,
            Target::Virtual(index) => Box::pin(self.serve_virtual(session, index, ctx)).await?,
            Target::AuthServer => Box::pin(self.auth_server(session, ctx)).await?,
            Target::Console => Box::pin(self.console(session, ctx)).await?,
            Target::Connect => Box::pin(self.connect(session, ctx)).await?,
            builtin => Box::pin(self.builtin(builtin, caller)).await,
        };
        self.apply(session, outcome, ctx).await
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        self.peer(ctx).await
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Self::CTX,
        mut e: Box<Error>,
    ) -> Box<Error> {
        self.connect_failed(ctx, &mut e);
        e
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut pingora::http::RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        self.rewrite_request(upstream_request, ctx)?;
        self.trace_upstream(session.req_header(), upstream_request, ctx)
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        self.respond(upstream_response, ctx).await
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        self.respond_body(body, end_of_stream, ctx)?;
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
        let rejection = self
            .proxy_failed(ctx, e)
            .or_else(|| Rejection::from_proxy_error(e, self.settings.admission.max_body_bytes));
        let mut error_code = 0;
        if let Some(rejection) = rejection
            && session.response_written().is_none()
        {
            let reply = self.refusal(rejection, ctx);
            error_code = reply.status;
            if let Err(err) = reply::write(session, reply, ctx.framing()).await {
                tracing::debug!(request_id = %ctx.request_id, error = %err, "could not send the error response");
            }
        }
        FailToProxy {
            error_code,
            can_reuse_downstream: false,
        }
    }

    fn suppress_error_log(&self, _session: &Session, ctx: &Self::CTX, error: &Error) -> bool {
        ctx.refused.is_some() || is_client_side(error)
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        self.observe(session, e, ctx);
    }
}

#[cfg(test)]
mod tests;
