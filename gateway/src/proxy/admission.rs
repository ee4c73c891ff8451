//! The `/mcp` admission: one pipeline of small steps, each returning early with the
//! `Rejection` that answers the request, all run before the upstream is touched: the header
//! steps (origin → size → authenticate → one `Mcp-Method` / `Mcp-Name` line each → session
//! binding → per-person limit → upstream credential; all but the last in `endpoint.rs`, which
//! virtual servers take too), then the whole body is read (bounded),
//! then the body steps (parse → header match → policy → tool budget). The outcome is one
//! `Outcome`: forward the body, answer, or refuse. An early answer settles the unread body around
//! it (`settle_body`) so that clients read it.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::{http::RequestHeader, proxy::Session};

mod endpoint;

pub(super) use endpoint::Endpoint;

use super::{
    Gateway, Outcome, RequestCtx,
    mcp_headers::{check_mcp_headers, check_param_headers},
};
use crate::{
    auth::{self, AuthFailure, Principal},
    catalog::Lookup,
    credentials::{self, Ask, Missing, answer},
    limit::{Class, Decision, Policy as LimitPolicy},
    mcp::{self, Kind, Message},
    metrics,
    policy::Annotation,
    reply::{Open, Rejection, Reply},
    sessions::Ownership,
};

/// The most of a refused request's body read and dropped before its connection closes.
const SETTLE_BYTES: usize = 16 * 1024 * 1024;

/// How long a refused request's body is read before its connection closes.
const SETTLE_TIME: Duration = Duration::from_secs(5);

/// Whether the client waits for `100 Continue` before it sends the body.
fn expects_continue(req: &RequestHeader) -> bool {
    req.headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Whether a request asks to switch protocols (`Upgrade`, or `upgrade` among its `Connection`
/// options): on an MCP route that would make a tunnel no admission step sees into, so it is
/// refused, whatever the upstream would answer.
pub(crate) fn asks_upgrade(req: &RequestHeader) -> bool {
    req.headers.contains_key(http::header::UPGRADE)
        || req
            .headers
            .get_all(http::header::CONNECTION)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
}

/// The header that names an MCP session.
pub(crate) const SESSION_ID: &str = "mcp-session-id";

/// The key that names a principal in session records: `kind:subject:client`.
pub(crate) fn principal_key(p: &Principal) -> String {
    format!("{}:{}:{}", p.kind.as_str(), p.subject, p.client)
}

impl Gateway {
    /// An `/mcp` request, decided whole before anything reaches the upstream: a CORS
    /// preflight is answered without credentials; anything else passes the header half of the
    /// pipeline, then its body is read (bounded by `max_body_bytes`) and passes the body half.
    /// Only then is it forwarded, head and body together.
    pub(super) async fn admit(
        &self,
        session: &mut Session,
        route: usize,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Outcome> {
        ctx.mcp.route = true;
        if asks_upgrade(session.req_header()) {
            // Nothing past this head is read as HTTP: the connection ends with the answer.
            session.set_keepalive(None);
            return Ok(Outcome::Refuse(Rejection::UpgradeRefused));
        }
        let req = session.req_header();
        if let Some(answer) = self.preflight(req, &self.settings.routes[route].allowed_origins) {
            return Ok(answer);
        }
        if let Err(rejection) = self.admit_headers(req, route, ctx).await {
            return Ok(Outcome::Refuse(rejection));
        }
        let body = match self.read_body(session, ctx).await? {
            Ok(body) => body,
            Err(rejection) => return Ok(Outcome::Refuse(rejection)),
        };
        Ok(self.admit_whole(session.req_header(), body, ctx).await)
    }

    /// The body half on the whole body: forwarded, refused, or (no upstream credential for
    /// this person) answered with the connect prompt.
    async fn admit_whole(&self, req: &RequestHeader, body: Bytes, ctx: &mut RequestCtx) -> Outcome {
        if ctx.mcp.inspect
            && let Err(rejection) = self.admit_body(req, &body, ctx).await
        {
            return Outcome::Refuse(rejection);
        }
        let Some(ask) = ctx.mcp.connect.take() else {
            return Outcome::Forward(body);
        };
        let Some(message) = ctx.mcp.message.clone() else {
            return Outcome::Refuse(Rejection::Internal);
        };
        // Audited as not forwarded, for this reason.
        ctx.refused = Some("upstream_not_connected");
        match self.connect_prompt(&message, &body, ask, ctx).await {
            Ok(reply) => Outcome::Answer(reply),
            Err(rejection) => Outcome::Refuse(rejection),
        }
    }

    /// Reads the request's whole body, counted against `max_body_bytes` (413 past it); an
    /// `Expect: 100-continue` is answered first. `Err`: the client went away or sent a broken
    /// body.
    pub(super) async fn read_body(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Result<Bytes, Rejection>> {
        let limit = self.settings.admission.max_body_bytes;
        if session.downstream_session.is_body_empty() {
            ctx.mcp.body_read = true;
            return Ok(Ok(Bytes::new()));
        }
        if expects_continue(session.req_header()) && !session.downstream_session.is_http2() {
            session
                .downstream_session
                .write_continue_response()
                .await
                .map_err(|e| e.into_down())?;
            ctx.mcp.continued = true;
        }
        let mut whole = BytesMut::new();
        let mut first: Option<Bytes> = None;
        while let Some(chunk) = session
            .downstream_session
            .read_request_body()
            .await
            .map_err(|e| e.into_down())?
        {
            ctx.body_bytes += chunk.len() as u64;
            if ctx.body_bytes > limit {
                return Ok(Err(Rejection::PayloadTooLarge { limit }));
            }
            // The usual single-chunk body is used where it lies; a split one is joined.
            match first.take() {
                None if whole.is_empty() => first = Some(chunk),
                None => whole.extend_from_slice(&chunk),
                Some(earlier) => {
                    whole.extend_from_slice(&earlier);
                    whole.extend_from_slice(&chunk);
                }
            }
        }
        ctx.mcp.body_read = true;
        Ok(Ok(first.unwrap_or_else(|| whole.freeze())))
    }

    /// Whether an `/mcp` request answered by the gateway left body bytes unread.
    pub(super) fn body_unread(&self, session: &mut Session, ctx: &RequestCtx) -> bool {
        ctx.mcp.route && !ctx.mcp.body_read && !session.downstream_session.is_body_done()
    }

    /// Reads and drops what is left of a refused request's body, at most [`SETTLE_BYTES`]
    /// within [`SETTLE_TIME`], so that the client reads the gateway's early answer instead of a
    /// reset; past either bound, or when the client awaits `100 Continue` and so sends nothing,
    /// the connection closes after the answer.
    pub(super) async fn settle_body(&self, session: &mut Session, ctx: &mut RequestCtx) {
        if expects_continue(session.req_header()) && !ctx.mcp.continued {
            session.set_keepalive(None);
            return;
        }
        let downstream = &mut session.downstream_session;
        let drained = tokio::time::timeout(SETTLE_TIME, async {
            let mut read = 0usize;
            loop {
                match downstream.read_request_body().await {
                    Ok(Some(chunk)) => {
                        read += chunk.len();
                        if read > SETTLE_BYTES {
                            return false;
                        }
                    }
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        })
        .await;
        ctx.mcp.body_read = true;
        if drained != Ok(true) {
            session.set_keepalive(None);
        }
    }

    /// The header half of the pipeline, applied in `request_filter`.
    async fn admit_headers(
        &self,
        req: &RequestHeader,
        route: usize,
        ctx: &mut RequestCtx,
    ) -> Result<(), Rejection> {
        let r = &self.settings.routes[route];
        let endpoint = Endpoint {
            name: &r.name,
            resource: &r.resource,
            allowed_origins: &r.allowed_origins,
        };
        self.header_steps(req, endpoint, ctx).await?;
        self.upstream_credential(req, route, ctx).await?;
        let policy_or_budgets = self.settings.admission.tool_policy
            || !self.settings.limits.tools.is_empty()
            || self.settings.rules.covers(&r.name);
        // Every body is read whole before the upstream is touched; it is parsed where a rule
        // needs the message, and on a route that keeps a credential per user (without one,
        // the gateway answers with the connect prompt, which needs the message's id).
        ctx.mcp.inspect = req.method == http::Method::POST
            && (policy_or_budgets || self.edge.credentials.per_user(route));
        Ok(())
    }

    /// The route's upstream credential for this person: the header to add upstream, or (none
    /// yet, or it stopped working) the connect prompt, answered once the body is read. A
    /// stream (`GET`) without one is refused at once; `DELETE` goes on without one.
    async fn upstream_credential(
        &self,
        req: &RequestHeader,
        route: usize,
        ctx: &mut RequestCtx,
    ) -> Result<(), Rejection> {
        let session = req.headers.get(SESSION_ID).and_then(|v| v.to_str().ok());
        let standin = session.is_some_and(credentials::is_standin);
        if self.edge.credentials.per_user(route) {
            ctx.mcp.url_elicitation = session.is_some_and(|id| self.edge.credentials.eliciting(id));
        }
        match self
            .edge
            .credentials
            .for_request(route, &ctx.person_key)
            .await
        {
            // Connected since the stand-in session began: the client starts a real one.
            Ok(_) if standin => Err(Rejection::SessionNotFound),
            Ok(injected) => {
                ctx.upstream_auth = injected;
                Ok(())
            }
            Err(Missing::Connect(ask)) => match req.method {
                http::Method::POST => {
                    ctx.mcp.connect = Some(ask);
                    Ok(())
                }
                http::Method::DELETE if standin => Err(Rejection::SessionNotFound),
                http::Method::DELETE => Ok(()),
                // No stream before the user connects (a client goes on without one).
                _ => Err(Rejection::MethodNotAllowed {
                    allow: "POST, DELETE",
                }),
            },
            Err(Missing::Unavailable(reason)) => {
                tracing::warn!(request_id = %ctx.request_id, route = %self.settings.routes[route].name, %reason, "upstream credential unavailable");
                Err(Rejection::UpstreamCredentialUnavailable)
            }
        }
    }

    /// A message on a route whose upstream credential is missing: the connect prompt (a
    /// single-use link for this principal) instead of the upstream's answer.
    async fn connect_prompt(
        &self,
        message: &Message,
        body: &[u8],
        ask: Ask,
        ctx: &RequestCtx,
    ) -> Result<Reply, Rejection> {
        let route = ctx.mcp_route.ok_or(Rejection::Internal)?;
        let principal = ctx.principal.as_ref().ok_or(Rejection::Internal)?;
        if message.kind != mcp::Kind::Request {
            return Ok(Reply::empty(202));
        }
        let url = self
            .edge
            .credentials
            .link(route, principal)
            .await
            .map_err(|_| Rejection::UpstreamCredentialUnavailable)?;
        let eliciting = ctx.mcp.url_elicitation;
        let r = &self.settings.routes[route];
        let elicitation_id = url.rsplit('=').next().unwrap_or_default();
        let prompt = answer::Prompt {
            title: r.title.as_deref().unwrap_or(&r.name),
            url: &url,
            elicitation_id: elicitation_id.get(..16).unwrap_or(elicitation_id),
            ask,
        };
        if let Some(json) = answer::standin_answer(message, body, &prompt) {
            let reply = Reply::json(200, &json);
            if message.method != "initialize" || ctx.in_session {
                return Ok(reply);
            }
            // The stand-in session: bound to this principal like an upstream's.
            let id = format!(
                "{}{}",
                credentials::STANDIN_SESSION_PREFIX,
                uuid::Uuid::new_v4().simple()
            );
            self.edge
                .sessions
                .bind(&id, ctx.holder(), None)
                .await
                .map_err(|_| Rejection::CredentialsUnavailable)?;
            // Its later calls are answered with -32042 when the client declared URL mode.
            if eliciting {
                self.edge.credentials.note_eliciting(&id);
            }
            return Ok(reply.header(SESSION_ID, id));
        }
        match answer::connect_answer(message, &prompt, eliciting) {
            Some(json) => Ok(Reply::json(200, &json)),
            None => Ok(Reply::empty(202)),
        }
    }

    /// The body half of the pipeline, on the whole body.
    async fn admit_body(
        &self,
        req: &RequestHeader,
        body: &[u8],
        ctx: &mut RequestCtx,
    ) -> Result<(), Rejection> {
        let message = mcp::inspect(body).map_err(Rejection::Malformed)?;
        let message = ctx.mcp.message.insert(message);
        check_mcp_headers(req, message)?;
        let principal = ctx.principal.as_ref().ok_or(Rejection::Internal)?;
        let route = ctx.mcp_route.ok_or(Rejection::Internal)?;
        if message.method == "initialize" {
            ctx.mcp.url_elicitation = answer::declares_url_elicitation(body);
        }
        if mcp::TASK_METHODS.contains(&message.method.as_str()) {
            let task = self
                .check_task(principal, message, route, &ctx.principal_key, ctx.instance)
                .await?;
            if task.instance.is_some() {
                ctx.instance = task.instance;
                ctx.task_pinned = true;
            }
            if message.method == "tasks/cancel" {
                ctx.mcp.cancels = Some(task.tool);
            }
        }
        if message.kind == Kind::Request
            && let Some(tool) = message.tool()
        {
            ctx.mcp.watch_task = Some(tool.to_owned());
        }
        if ctx.mcp.connect.is_some() {
            // Not connected: the gateway answers itself and no tool runs, so no tool policy or
            // budget applies (and the upstream's catalog is not asked).
            return Ok(());
        }
        if self.settings.admission.tool_policy {
            self.authorize(principal, message, route).await?;
        }
        self.check_pinned(message, route)?;
        ctx.mcp.attributes =
            (self.check_rules(req, body, message, principal, route, ctx.client_ip)).await?;
        ctx.mcp.filter_list = self.filters_list(principal, message, route);
        if let Some(tool) = message.tool() {
            self.check_params(req, (body, message), route, tool)?;
        }
        if let Some(tool) = message.tool() {
            let name = &self.settings.routes[route].name;
            self.tool_budget(tool, name, &ctx.person_key).await?;
        }
        Ok(())
    }

    /// A tool (`tool`, route `route`'s own name) that mirrors parameters into `Mcp-Param-*`
    /// headers, as the route's catalog last listed it: the headers must say what the arguments
    /// of `body` say.
    pub(super) fn check_params(
        &self,
        req: &RequestHeader,
        (body, message): (&[u8], &Message),
        route: usize,
        tool: &str,
    ) -> Result<(), Rejection> {
        match self
            .edge
            .catalogs
            .get(route)
            .and_then(|c| c.param_headers(tool))
        {
            Some(declared) => check_param_headers(req, body, message, &declared),
            None => Ok(()),
        }
    }

    /// A static token or an OAuth access token, then the baseline scopes. A failure spends the
    /// client IP's unauthenticated budget, and past it the answer is 429.
    pub(super) async fn authenticate_counting_failures(
        &self,
        req: &RequestHeader,
        (name, resource): (&str, &str),
        ctx: &mut RequestCtx,
    ) -> Result<Principal, Rejection> {
        match self.authenticate(req, (name, resource)).await {
            Ok(principal) => Ok(principal),
            // A valid token without the baseline scope is authenticated: no IP budget spent.
            Err(failure @ AuthFailure::InsufficientScope(_)) => Err(failure.into()),
            Err(failure) => {
                ctx.rate = self.limit(Class::Unauthenticated, &ctx.ip_key()).await?;
                Err(failure.into())
            }
        }
    }

    /// The `Authorization` header for the route (or virtual server) `name` at `resource`: a static
    /// or OAuth token (for that resource), then the baseline scopes. Counted by kind and outcome.
    async fn authenticate(
        &self,
        req: &RequestHeader,
        at: (&str, &str),
    ) -> Result<Principal, AuthFailure> {
        let values = req.headers.get_all(http::header::AUTHORIZATION);
        let token = auth::bearer_token(values.iter().map(|v| v.as_bytes()));
        let kind = metrics::credential_kind(token.as_ref().ok().copied().flatten());
        let result = self.check_credential(token, at).await;
        self.metrics.auth(kind, metrics::auth_reason(&result));
        result
    }

    async fn check_credential(
        &self,
        token: Result<Option<&str>, AuthFailure>,
        (name, resource): (&str, &str),
    ) -> Result<Principal, AuthFailure> {
        let token = token?.ok_or(AuthFailure::Missing)?;
        let principal = if auth::looks_static(token) {
            auth::authenticate_static(token, &self.tokens.get(), self.clock.now_secs())?
        } else {
            let principal = self.oauth.authenticate(token).await?;
            // An OAuth token is for one resource: another route's is not valid here.
            if auth::check_route(&principal, name, resource).is_err() {
                return Err(AuthFailure::OtherResource);
            }
            principal
        };
        auth::require_scopes(&principal, &self.settings.admission.required_scopes)?;
        Ok(principal)
    }

    /// A session belongs to the principal that opened it; another principal's credential gets
    /// the answer for an unknown session. A session id the gateway has no record of (never
    /// bound, expired, or opened before a restart without shared state) is refused the same
    /// way: 404, and the client opens a new session. It is never bound to whoever presents it
    /// first.
    pub(super) async fn check_session(
        &self,
        req: &RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<(), Rejection> {
        let Some(id) = req.headers.get(SESSION_ID).and_then(|v| v.to_str().ok()) else {
            return Ok(());
        };
        ctx.in_session = true;
        let instances = self.instances(ctx).cloned();
        let binding = match self.edge.sessions.check(id, ctx.holder()).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "session records unavailable");
                return Err(Rejection::CredentialsUnavailable);
            }
        };
        match binding.ownership {
            Ownership::Owner => {}
            Ownership::Foreign | Ownership::Unknown => return Err(Rejection::SessionNotFound),
        }
        ctx.session_use = Some(self.edge.sessions.in_use(id, ctx.holder()));
        if let Some(instances) = instances
            && !credentials::is_standin(id)
        {
            match instances.route_session(binding.instance.as_deref()) {
                Ok(i) => ctx.instance = Some(i),
                Err(gone) => {
                    tracing::info!(
                        request_id = %ctx.request_id,
                        route = instances.route(),
                        reason = gone.as_str(),
                        "session gone: 404, the client re-initializes"
                    );
                    return Err(Rejection::SessionNotFound);
                }
            }
        }
        if req.method == http::Method::DELETE {
            ctx.mcp.ends_session = Some(id.to_owned());
        }
        Ok(())
    }

    /// Bounds per person (all their clients together): a `POST` without `Mcp-Session-Id` opens
    /// a session (its answer's id is bound and counted) and needs room under
    /// `limits.sessions_per_principal`; a `GET` is an SSE stream and holds one of
    /// `limits.streams_per_principal` slots until it ends.
    pub(super) async fn check_open(
        &self,
        req: &RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<(), Rejection> {
        let limits = &self.settings.limits;
        let has_session = req.headers.contains_key(SESSION_ID);
        if req.method == http::Method::POST && !has_session {
            let max = limits.sessions_per_principal;
            // At the cap the person's least recently used idle session is closed (audited).
            let room = match self.edge.sessions.make_room(ctx.holder(), max).await {
                Ok(room) => room,
                Err(e) => {
                    tracing::warn!(error = %e, "session records unavailable");
                    return Err(Rejection::CredentialsUnavailable);
                }
            };
            if !room {
                return Err(Rejection::TooManyOpen {
                    what: Open::Sessions,
                    max,
                });
            }
            ctx.mcp.opens_session = true;
        } else if req.method == http::Method::GET {
            let max = limits.streams_per_principal;
            let slot = self.edge.streams.open(&ctx.person_key, max);
            ctx.mcp.stream = Some(slot.ok_or(Rejection::TooManyOpen {
                what: Open::Streams,
                max,
            })?);
        }
        Ok(())
    }

    /// The policy's decision on one message; a tool's annotation comes from the route's
    /// catalog.
    pub(super) async fn authorize(
        &self,
        principal: &Principal,
        message: &Message,
        route: usize,
    ) -> Result<(), Rejection> {
        let catalog = self.edge.catalogs.get(route).ok_or(Rejection::Internal)?;
        let annotation = match message.tool() {
            Some(tool) => match catalog.tool_or_refresh(tool).await {
                Lookup::ReadOnly => Annotation::ReadOnly,
                Lookup::Writes => Annotation::Writes,
                Lookup::Unknown => Annotation::Unknown,
            },
            None => Annotation::Unknown,
        };
        self.routes[route]
            .policy
            .decide(principal, message, annotation)
            .map_err(Rejection::Forbidden)
    }

    /// One rate-limit decision; over it is a refusal, within it the decision for the response
    /// headers (`None` with limits off).
    pub(super) async fn limit(
        &self,
        class: Class,
        key: &str,
    ) -> Result<Option<(Class, LimitPolicy, Decision)>, Rejection> {
        let limits = &self.settings.limits;
        if !limits.enabled {
            return Ok(None);
        }
        let policy = limits.policy(class);
        let decision = self
            .limiter
            .check(&format!("{}:{key}", class.name()), policy)
            .await;
        if decision.allowed {
            Ok(Some((class, policy, decision)))
        } else {
            Err(Rejection::RateLimited {
                class,
                policy,
                decision,
                oauth: class == Class::OAuth,
            })
        }
    }

    /// The budget of one tool, per route and person (`limits.tools`), by the name in the
    /// body.
    pub(super) async fn tool_budget(
        &self,
        tool: &str,
        route: &str,
        person_key: &str,
    ) -> Result<(), Rejection> {
        let Some(policy) = self.settings.limits.tool(tool) else {
            return Ok(());
        };
        if !self.settings.limits.enabled {
            return Ok(());
        }
        let decision = self
            .limiter
            .check(&format!("tool:{route}:{tool}:{person_key}"), policy)
            .await;
        if decision.allowed {
            Ok(())
        } else {
            Err(Rejection::RateLimited {
                class: Class::Tool,
                policy,
                decision,
                oauth: false,
            })
        }
    }
}
