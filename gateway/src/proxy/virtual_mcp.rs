//! A virtual server's MCP endpoint (`/NAME/mcp` of a `[[virtual]]`, issue 42), answered by the
//! gateway itself: the header steps of the admission for the virtual server's own resource (a
//! token bound to it, or a static token that may use it), the whole body read, then per
//! method: `initialize` (its own session, bound like an upstream's), `tools/list` (the members'
//! catalogs under the name map, filtered by each member route's policy), `tools/call` (the
//! name looked up — an unknown one answered before any member is touched —, decided by the
//! member route's policy on the member's own name, then sent with its name rewritten on the
//! member session `members.rs` holds for the downstream session; a member's event stream
//! relayed as one, its requests to the client mapped: `stream.rs`), search mode's `find_tools`
//! and `call_tool`, `ping`, a client's answer to a member's request (`stream.rs`), `GET` (the
//! session's event stream: `notices.rs`) and `DELETE` (the member sessions ended).

mod asks;
mod calls;
mod connect;
mod governance;
mod members;
mod notices;
mod resources;
mod stream;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use bytes::Bytes;
use pingora::{http::RequestHeader, proxy::Session};
use serde_json::{Value, json};

use super::{
    Gateway, Outcome, RequestCtx,
    admission::{Endpoint, SESSION_ID, asks_upgrade},
    mcp_headers::check_mcp_headers,
};
use crate::{
    catalog::CatalogError,
    config::Virtual,
    credentials::Missing,
    forward,
    mcp::{self, Kind, Message},
    metrics::VirtualOutcome,
    reply::{Rejection, Reply},
    virtual_server::{
        CALL_TOOL, Entry, FIND_TOOLS, MemberCatalog, NameMap, find_tools, find_tools_result,
        inner_call, name_map, rewrite_call_name, tools_list,
    },
};

pub(super) use asks::Asks;
pub(super) use calls::Calls;
use governance::ListView;
pub(super) use members::MemberSessions;
use stream::{Answered, Called};

/// JSON-RPC: the method is not served here.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: invalid params (an unknown tool, MCP's "Unknown tool").
const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: the member could not be reached.
const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC response with `result`.
fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error response.
fn error(id: &Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The protocol revision a virtual server answers `initialize` with: the client's when the
/// gateway knows it and it keeps sessions (up to 2025-11-25), else 2025-11-25.
pub(super) fn negotiated(requested: Option<&str>) -> &'static str {
    let sessions = &mcp::SUPPORTED_VERSIONS[1..];
    requested
        .and_then(|r| sessions.iter().find(|v| **v == r))
        .copied()
        .unwrap_or(sessions[0])
}

/// The capabilities a virtual server declares (its lists' changes announced on the session's
/// `GET` stream, `notices.rs`).
fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"listChanged": true},
        "prompts": {"listChanged": true},
    })
}

/// The `server/discover` result of a virtual server (MCP 2026-07-28): every revision the gateway
/// knows, so a client of 2026-07-28 stays stateless and older ones open a session.
fn discover_result() -> Value {
    json!({
        "supportedVersions": mcp::SUPPORTED_VERSIONS,
        "capabilities": capabilities(),
        "resultType": "complete",
    })
}

/// The `initialize` result of virtual server `v`.
fn initialize_result(v: &Virtual, requested: Option<&str>) -> Value {
    let mut info = json!({"name": v.server.name, "version": env!("CARGO_PKG_VERSION")});
    if let Some(title) = &v.server.title {
        info["title"] = Value::String(title.clone());
    }
    json!({
        "protocolVersion": negotiated(requested),
        "capabilities": capabilities(),
        "serverInfo": info,
    })
}

impl Gateway {
    /// A request to virtual server `index`: refused, or answered by the gateway.
    pub(super) async fn serve_virtual(
        &self,
        session: &mut Session,
        index: usize,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Outcome> {
        ctx.mcp.route = true;
        ctx.virtual_server = Some(index);
        let Some(v) = self.settings.virtuals.get(index) else {
            return Ok(Outcome::Refuse(Rejection::NotFound));
        };
        if asks_upgrade(session.req_header()) {
            session.set_keepalive(None);
            return Ok(Outcome::Refuse(Rejection::UpgradeRefused));
        }
        // The route admission's own header steps, for the virtual server's resource (it allows
        // no foreign origin).
        let endpoint = Endpoint {
            name: &v.server.name,
            resource: &v.resource,
            allowed_origins: &[],
        };
        if let Some(answer) = self.preflight(session.req_header(), endpoint.allowed_origins) {
            return Ok(answer);
        }
        if let Err(rejection) = self.header_steps(session.req_header(), endpoint, ctx).await {
            return Ok(Outcome::Refuse(rejection));
        }
        let downstream = session
            .req_header()
            .headers
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match session.req_header().method {
            http::Method::POST => {}
            http::Method::DELETE => return Ok(self.end_virtual_session(downstream, ctx).await),
            http::Method::GET => return self.virtual_stream(session, v, downstream, ctx).await,
            _ => {
                return Ok(Outcome::Refuse(Rejection::MethodNotAllowed {
                    allow: "GET, POST, DELETE",
                }));
            }
        }
        let body = match self.read_body(session, ctx).await? {
            Ok(body) => body,
            Err(rejection) => return Ok(Outcome::Refuse(rejection)),
        };
        Ok(
            match self
                .virtual_message(v, (session.req_header(), &body), downstream.as_deref(), ctx)
                .await
            {
                Ok(Answered::Reply(reply)) => Outcome::Answer(reply),
                Ok(Answered::Relay(relay)) => {
                    let outcome = self.relay_member_stream(session, *relay, ctx).await?;
                    if let Some((_, slot)) = ctx.member.as_mut() {
                        *slot = Some(outcome);
                    }
                    Outcome::Relayed
                }
                Err(rejection) => Outcome::Refuse(rejection),
            },
        )
    }

    /// `DELETE`: the downstream session's member sessions ended, its record forgotten.
    async fn end_virtual_session(&self, downstream: Option<String>, ctx: &RequestCtx) -> Outcome {
        let Some(id) = downstream else {
            return Outcome::Refuse(Rejection::SessionNotFound);
        };
        self.end_member_sessions(&id).await;
        if let Err(e) = self.edge.sessions.forget(&id, ctx.holder()).await {
            tracing::debug!(error = %e, "could not forget an ended session");
        }
        Outcome::Answer(Reply::empty(200))
    }

    /// Ends the member sessions downstream session `id` holds, each with the headers it was
    /// opened with.
    async fn end_member_sessions(&self, id: &str) {
        for (route, member, extra) in self.member_sessions.take(id) {
            if let Some(catalog) = self.edge.catalogs.get(route) {
                catalog.end_member_session(&member, &extra).await;
            }
        }
    }

    /// When a sweep is due (every minute, and after a virtual server's session opened): the
    /// member sessions of held downstream sessions that are no longer bound (expired, evicted
    /// to make room, or forgotten) are ended — at most [`members::SWEEP_MAX`] looked up.
    async fn sweep_member_sessions(&self, opened: bool) {
        if !self
            .member_sessions
            .start_sweep(self.clock.now_ms(), opened)
        {
            return;
        }
        for id in self.member_sessions.downstreams(members::SWEEP_MAX) {
            if let Ok(false) = self.edge.sessions.is_bound(&id).await {
                tracing::debug!(
                    "virtual server: a downstream session ended; its member sessions end"
                );
                self.end_member_sessions(&id).await;
            }
        }
    }

    /// One JSON-RPC message to the virtual server.
    async fn virtual_message(
        &self,
        v: &Virtual,
        (req, body): (&RequestHeader, &Bytes),
        downstream: Option<&str>,
        ctx: &mut RequestCtx,
    ) -> Result<Answered, Rejection> {
        let message = mcp::inspect(body).map_err(Rejection::Malformed)?;
        ctx.mcp.message = Some(message.clone());
        // The body steps' header match: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
        // say what the body says (the name the virtual server shows).
        check_mcp_headers(req, &message)?;
        self.sweep_member_sessions(false).await;
        if message.kind == Kind::Response {
            return Ok(self.client_answer(body, &message, downstream).await?.into());
        }
        if message.kind == Kind::Notification && message.method == "notifications/cancelled" {
            self.cancel_call(body, downstream).await;
        }
        if message.kind != Kind::Request {
            return Ok(Reply::empty(202).into());
        }
        let id: Value = serde_json::from_str(&message.id).unwrap_or(Value::Null);
        let principal = ctx.principal.clone().ok_or(Rejection::Internal)?;
        let answer = match message.method.as_str() {
            "initialize" => {
                let parsed: Value = serde_json::from_slice(body).unwrap_or_default();
                let requested = parsed["params"]["protocolVersion"].as_str();
                let answer = result(&id, initialize_result(v, requested));
                if ctx.in_session {
                    return Ok(Reply::json(200, &answer).into());
                }
                let session = uuid::Uuid::new_v4().simple().to_string();
                self.edge
                    .sessions
                    .bind(&session, ctx.holder(), None)
                    .await
                    .map_err(|_| Rejection::CredentialsUnavailable)?;
                self.opened_virtual_session(&session, body);
                // Opening it may have evicted an idle one that holds member sessions.
                self.sweep_member_sessions(true).await;
                return Ok(Reply::json(200, &answer).header(SESSION_ID, session).into());
            }
            "ping" => result(&id, json!({})),
            "server/discover" => result(&id, discover_result()),
            "tools/list" => {
                let (map, routes) = self.virtual_map(v);
                let view = self.list_view(&principal, &routes, ctx.client_ip).await?;
                let may = |e: &Entry| self.may_call(&view, routes[e.member], e);
                let list = tools_list(&v.server, &map, may);
                let list = self.with_connect_tools(v, (&map, &routes), ctx, list).await;
                result(&id, list)
            }
            "tools/call" => {
                let asked = (message.tool().unwrap_or_default(), &message);
                match self.connect_call(v, asked, downstream, ctx).await? {
                    Some((route, prompt)) => {
                        ctx.member = Some((route, Some(VirtualOutcome::Connect)));
                        prompt
                    }
                    None => {
                        let call = (body.to_vec(), &message, &id);
                        match self.virtual_call(v, (req, call), downstream, ctx).await? {
                            Called::Whole(answer) => answer,
                            Called::Events(relay) => return Ok(Answered::Relay(relay)),
                        }
                    }
                }
            }
            "resources/list"
            | "resources/templates/list"
            | "prompts/list"
            | "resources/read"
            | "prompts/get" => {
                let asked = (&body[..], &message, &id);
                self.virtual_resources(v, asked, downstream, ctx).await?
            }
            other => error(
                &id,
                METHOD_NOT_FOUND,
                format!("method {other:?} is not served by a virtual server"),
            ),
        };
        let modern = message.meta_version.as_deref().map(str::as_bytes);
        let answer = if mcp::requires_headers(modern) {
            stream::for_2026_07_28(&message.method, answer)
        } else {
            answer
        };
        Ok(Reply::json(200, &answer).into())
    }

    /// The name map over the members' catalogs as last listed, and each member's route index
    /// (`usize::MAX`: none, which validation rules out).
    pub(super) fn virtual_map(&self, v: &Virtual) -> (NameMap, Vec<usize>) {
        let routes: Vec<usize> = v
            .server
            .members
            .iter()
            .map(|m| self.settings.route_named(&m.route).unwrap_or(usize::MAX))
            .collect();
        let listed: Vec<Option<Arc<Vec<Value>>>> = routes
            .iter()
            .map(|&i| self.edge.catalogs.get(i).and_then(|c| c.definitions()))
            .collect();
        let none = BTreeMap::new();
        let catalogs: Vec<MemberCatalog<'_>> = routes
            .iter()
            .zip(&listed)
            .map(|(&i, tools)| MemberCatalog {
                tools: tools.as_deref().map(Vec::as_slice),
                rules: self.settings.routes.get(i).map_or(&none, |r| &r.tools),
            })
            .collect();
        (name_map(&v.server, &catalogs).0, routes)
    }

    /// Whether the caller of `view` is listed or found `entry` (of its member's route `route`):
    /// what that route's own list would show them (`governance.rs`).
    fn may_call(&self, view: &ListView<'_>, route: usize, entry: &Entry) -> bool {
        self.lists(view, route, entry)
    }

    /// `tools/call` on the virtual server: search mode's own tools answered, any other name
    /// looked up in the name map (unknown: a JSON-RPC error, no member touched), decided on the
    /// member route with the member's name, and sent to the member.
    async fn virtual_call(
        &self,
        v: &Virtual,
        (req, (mut body, message, id)): (&RequestHeader, (Vec<u8>, &Message, &Value)),
        downstream: Option<&str>,
        ctx: &mut RequestCtx,
    ) -> Result<Called, Rejection> {
        let principal = ctx.principal.clone().ok_or(Rejection::Internal)?;
        let (map, routes) = self.virtual_map(v);
        let mut shown = message.tool().unwrap_or_default().to_owned();
        if v.server.search && (shown == FIND_TOOLS || shown == CALL_TOOL) {
            let parsed: Value = serde_json::from_slice(&body).unwrap_or_default();
            let arguments = &parsed["params"]["arguments"];
            if shown == FIND_TOOLS {
                let view = self.list_view(&principal, &routes, ctx.client_ip).await?;
                // A per-user member the caller has not connected shows its connect tool in
                // the list, not its tools here.
                let mut waiting = Vec::new();
                for &route in &routes {
                    waiting.push(self.unconnected(route, ctx).await.is_some());
                }
                let may =
                    |e: &Entry| !waiting[e.member] && self.may_call(&view, routes[e.member], e);
                let query = arguments["query"].as_str().unwrap_or_default();
                let found = find_tools(&map, query, arguments["limit"].as_u64(), may);
                return Ok(result(id, find_tools_result(found)).into());
            }
            let (inner, args) = match inner_call(arguments) {
                Ok(call) => call,
                Err(e) => return Ok(error(id, INVALID_PARAMS, e.to_string()).into()),
            };
            shown = inner.to_owned();
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": shown, "arguments": args}});
            body = serde_json::to_vec(&call).map_err(|_| Rejection::Internal)?;
        }
        let Some(entry) = map.entries.get(&shown) else {
            return Ok(error(id, INVALID_PARAMS, format!("Unknown tool: {shown}")).into());
        };
        let route = routes[entry.member];
        ctx.member = Some((route, None));
        let Some(body) = rewrite_call_name(&body, &entry.original) else {
            return Ok(error(id, INVALID_PARAMS, "params.name is no string".to_owned()).into());
        };
        let inner = mcp::inspect(&body).map_err(Rejection::Malformed)?;
        if self.settings.admission.tool_policy {
            let policy = &self.routes.get(route).ok_or(Rejection::Internal)?.policy;
            policy
                .decide(&principal, &inner, entry.annotation())
                .map_err(Rejection::Forbidden)?;
        }
        // The member route's pins and `[[policy]]` rules, on its own name and the arguments.
        let ip = ctx.client_ip;
        (self.govern_call(req, (&body, &inner), &principal, route, ip)).await?;
        // The member's `Mcp-Param-*` declaration, on the arguments the member gets.
        self.check_params(req, (&body, &inner), route, &entry.original)?;
        let member = &self.settings.routes[route].name;
        (self.tool_budget(&entry.original, member, &ctx.person_key)).await?;
        match self.to_member(route, body, id, downstream, ctx).await? {
            Some(answer) => {
                let outcome = match &answer {
                    Called::Whole(answer) => VirtualOutcome::of_answer(answer),
                    // Set again from the response once the stream is relayed.
                    Called::Events(_) => VirtualOutcome::Streamed,
                };
                ctx.member = Some((route, Some(outcome)));
                Ok(answer)
            }
            // Not connected: the member route's connect prompt, for this member only.
            None => {
                ctx.member = Some((route, Some(VirtualOutcome::Connect)));
                Ok(self
                    .member_prompt(route, message, downstream, ctx)
                    .await?
                    .into())
            }
        }
    }

    /// `body` (a JSON-RPC request with id `id`, as the member reads it) sent to member route
    /// `route` on `downstream`'s member session: the member's answer (an event stream to relay,
    /// `stream.rs`), or a JSON-RPC error naming the member when it is unreachable or its answer
    /// unusable; `None` when the route takes each person's own credential and this person has
    /// none yet.
    async fn to_member(
        &self,
        route: usize,
        body: Vec<u8>,
        id: &Value,
        downstream: Option<&str>,
        ctx: &RequestCtx,
    ) -> Result<Option<Called>, Rejection> {
        let catalog = self.edge.catalogs.get(route).ok_or(Rejection::Internal)?;
        let extra = match self.member_headers(ctx, route).await {
            Ok(extra) => extra,
            Err(MemberHeaders::NotConnected) => return Ok(None),
            Err(MemberHeaders::Refused(rejection)) => return Err(rejection),
        };
        let timeout = Duration::from_millis(self.settings.routes[route].read_timeout_ms);
        let sent = self
            .send_to_member(catalog, (downstream, route), (body, id), extra, timeout)
            .await;
        let name = &self.settings.routes[route].name;
        Ok(Some(match sent {
            Ok(answer) => answer,
            Err(e @ (CatalogError::JsonRpc { .. } | CatalogError::Protocol(_)))
            | Err(e @ CatalogError::Status(_)) => {
                tracing::warn!(request_id = %ctx.request_id, route = %name, error = %e, "virtual server: member answer unusable");
                error(
                    id,
                    INTERNAL_ERROR,
                    format!("the member {name} answered: {e}"),
                )
                .into()
            }
            Err(e) => {
                tracing::warn!(request_id = %ctx.request_id, route = %name, error = %e, "virtual server: member unreachable");
                error(
                    id,
                    INTERNAL_ERROR,
                    format!("the member {name} is unreachable"),
                )
                .into()
            }
        }))
    }

    /// What a request to member route `route` carries for this caller: their identity (as
    /// the route discloses it) and, on a per-user route, their own upstream credential.
    async fn member_headers(
        &self,
        ctx: &RequestCtx,
        route: usize,
    ) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, MemberHeaders> {
        let principal = ctx
            .principal
            .as_ref()
            .ok_or(MemberHeaders::Refused(Rejection::Internal))?;
        let r = self
            .settings
            .routes
            .get(route)
            .ok_or(MemberHeaders::Refused(Rejection::Internal))?;
        let client_ip = ctx.client_ip.map(|ip| ip.to_string());
        let proto = if self.settings.listen.serves_https() {
            "https"
        } else {
            "http"
        };
        let disclose = forward::Disclose {
            identity: r.identity_headers,
            client_ip: r.forward_client_ip,
        };
        let set = forward::trusted_headers(
            principal,
            &r.name,
            &ctx.request_id,
            client_ip.as_deref(),
            proto,
            disclose,
        );
        let mut extra = Vec::with_capacity(set.len() + 1);
        for (name, value) in set {
            let header = http::HeaderName::from_bytes(name.as_bytes()).ok();
            let value = http::HeaderValue::try_from(value).ok();
            let (Some(name), Some(value)) = (header, value) else {
                return Err(MemberHeaders::Refused(Rejection::Internal));
            };
            extra.push((name, value));
        }
        if self.edge.credentials.per_user(route) {
            match self
                .edge
                .credentials
                .for_request(route, &ctx.person_key)
                .await
            {
                Ok(Some(injected)) => extra.push((injected.name, injected.value)),
                Ok(None) => {}
                Err(Missing::Connect(_)) => return Err(MemberHeaders::NotConnected),
                Err(Missing::Unavailable(_)) => {
                    return Err(MemberHeaders::Refused(
                        Rejection::UpstreamCredentialUnavailable,
                    ));
                }
            }
        }
        Ok(extra)
    }
}

/// Why a member request has no headers.
enum MemberHeaders {
    /// The member route takes each person's own credential, and this person has none yet.
    NotConnected,
    Refused(Rejection),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_keeps_a_session_revision_the_client_asks_for_else_2025_11_25() {
        assert_eq!(negotiated(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiated(Some("2024-11-05")), "2024-11-05");
        // Sessions fan out to member sessions: a stateless revision gets the newest with them.
        assert_eq!(negotiated(Some("2026-07-28")), "2025-11-25");
        assert_eq!(negotiated(Some("1999-01-01")), "2025-11-25");
        assert_eq!(negotiated(None), "2025-11-25");
    }
}
