//! A call through a virtual server whose member answers with an event stream (issue 42 point
//! 3): the client gets an event stream too — the member's notifications (progress with the
//! client's own token, logging) relayed as they arrive, the member's requests (sampling,
//! elicitation, roots, ping) relayed under an id of the gateway's (`asks.rs`), then the
//! response, the client's id unchanged; every relayed message keeps the member's bytes but a
//! mapped `id`. The client's answer to a member's request, POSTed on the same downstream
//! session, goes to the member that asked, on its member session, with the member's id. A
//! request of MCP 2026-07-28 without a session goes to the member as it is, on no member
//! session (`stateless_headers`).

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;
use tokio::sync::Notify;

use super::{INTERNAL_ERROR, asks::Ask, calls::Going, error};
use crate::{
    catalog::{Catalog, CatalogError, MemberAnswer, MemberEvents},
    mcp::{self, Malformed, Message},
    metrics::VirtualOutcome,
    proxy::{Gateway, RequestCtx},
    reply::{Rejection, Reply, events},
    virtual_server::{Event, classify, with_id},
};

/// What a call to a member came back with.
#[derive(Debug)]
pub(super) enum Called {
    /// One JSON-RPC message, answered as JSON.
    Whole(Value),
    /// The member's event stream, relayed as one.
    Events(Box<Relay>),
}

impl From<Value> for Called {
    fn from(answer: Value) -> Self {
        Self::Whole(answer)
    }
}

impl Called {
    /// The answer as one message (a stream read on to its response; what else it carries is
    /// dropped): for methods whose answers are not relayed as streams.
    pub(super) async fn whole(self) -> Value {
        match self {
            Self::Whole(answer) => answer,
            Self::Events(relay) => {
                let Relay { events, id, .. } = *relay;
                events.response(&id).await.unwrap_or_else(|e| {
                    error(&id, INTERNAL_ERROR, format!("the member's stream: {e}"))
                })
            }
        }
    }
}

/// A member's event stream on its way to the client, and where answers to its requests go.
#[derive(Debug)]
pub(super) struct Relay {
    pub(super) events: Box<MemberEvents>,
    /// The member route.
    pub(super) route: usize,
    /// The member's name (for the log).
    pub(super) name: String,
    /// The member session the call went on.
    pub(super) member: Option<String>,
    /// The headers the call went with.
    pub(super) extra: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The client's id of the call.
    pub(super) id: Value,
    /// The downstream session (the client's answers come on it; `None`: a stateless request,
    /// whose member's requests cannot be answered).
    pub(super) downstream: Option<String>,
}

/// What a virtual server's request phase answers with.
#[derive(Debug)]
pub(super) enum Answered {
    Reply(Reply),
    Relay(Box<Relay>),
}

impl From<Reply> for Answered {
    fn from(reply: Reply) -> Self {
        Self::Reply(reply)
    }
}

impl Gateway {
    /// `body` (a request with id `id`) sent to member route `route` of `catalog`: on
    /// `downstream`'s member session its answer as it comes (an event stream to relay); without
    /// a downstream session, or with no room to keep a member session, the answer whole, on a
    /// member session of its own.
    pub(super) async fn send_to_member(
        &self,
        catalog: &Catalog,
        (downstream, route): (Option<&str>, usize),
        (body, id): (Vec<u8>, &Value),
        extra: Vec<(http::HeaderName, http::HeaderValue)>,
        timeout: Duration,
    ) -> Result<Called, CatalogError> {
        let sessions = &self.member_sessions;
        let stateless = downstream
            .is_none()
            .then(|| stateless_headers(&body))
            .flatten();
        let (answer, member) = match (downstream, stateless) {
            (None, Some(headers)) => {
                // MCP 2026-07-28 without a session: straight to the member, as it came.
                let mut stateless = extra.clone();
                stateless.extend(headers);
                let sent = catalog.member_send(None, body.clone(), &stateless, timeout);
                match sent.await {
                    Ok((answer, _)) => (answer, None),
                    // A member of an earlier revision refuses a request without a session
                    // before doing anything: it gets one of its own, as older clients' do.
                    Err(CatalogError::Status(status)) if wants_a_session(status) => {
                        let call = (body, id);
                        return self
                            .own_session(catalog, route, call, &extra, timeout)
                            .await;
                    }
                    Err(e) => return Err(e),
                }
            }
            (Some(d), _) => {
                let sent = sessions.send(catalog, (d, route), body.clone(), &extra, timeout);
                match sent.await? {
                    Some(sent) => sent,
                    None => {
                        let call = (body, id);
                        return self
                            .own_session(catalog, route, call, &extra, timeout)
                            .await;
                    }
                }
            }
            (None, None) => {
                let call = (body, id);
                return self
                    .own_session(catalog, route, call, &extra, timeout)
                    .await;
            }
        };
        Ok(match answer {
            MemberAnswer::Whole(answer) => Called::Whole(answer),
            MemberAnswer::Events(events) => {
                let name = self.settings.routes.get(route).map(|r| r.name.clone());
                Called::Events(Box::new(Relay {
                    events,
                    route,
                    name: name.unwrap_or_default(),
                    member,
                    extra,
                    id: id.clone(),
                    downstream: downstream.map(str::to_owned),
                }))
            }
        })
    }

    /// `body` sent on a member session of its own, ended after the answer (read whole).
    async fn own_session(
        &self,
        catalog: &Catalog,
        route: usize,
        (body, id): (Vec<u8>, &Value),
        extra: &[(http::HeaderName, http::HeaderValue)],
        timeout: Duration,
    ) -> Result<Called, CatalogError> {
        let sessions = &self.member_sessions;
        let answer = sessions.call(catalog, (None, route), body, id, extra, timeout);
        answer.await.map(Called::Whole)
    }

    /// Writes `relay`'s event stream to the client until the member's response (or an error
    /// response, when the member's stream breaks); the member's requests held meanwhile end
    /// with it. The call's outcome is the response's (`Streamed` when the client cancelled).
    pub(super) async fn relay_member_stream(
        &self,
        session: &mut Session,
        mut relay: Relay,
        ctx: &RequestCtx,
    ) -> pingora::Result<VirtualOutcome> {
        events::write_head(session, ctx.framing()).await?;
        let stream = self.asks.number();
        let call = relay.id.to_string();
        let cancelled = Arc::new(Notify::new());
        let held = relay.downstream.as_deref().is_some_and(|d| {
            let going = Going {
                route: relay.route,
                member: relay.member.clone(),
                extra: relay.extra.clone(),
                cancelled: cancelled.clone(),
            };
            self.calls.hold(d, call.clone(), going)
        });
        let relayed = tokio::select! {
            relayed = self.relay_events(session, &mut relay, stream, ctx) => relayed,
            // The client cancelled the call: it expects no answer, and the member's stream
            // is dropped.
            () = cancelled.notified() => Ok(VirtualOutcome::Streamed),
        };
        self.asks.end_stream(stream);
        if let (true, Some(d)) = (held, relay.downstream.as_deref()) {
            self.calls.end(d, &call);
        }
        let outcome = relayed?;
        events::write_end(session).await?;
        Ok(outcome)
    }

    /// A client's `notifications/cancelled` (`body`) on `downstream`: to the member session of
    /// the relayed call it names, as it is (the member knows the call by the client's id), and
    /// that call's stream to the client ended; about any other call it reaches no member.
    pub(super) async fn cancel_call(&self, body: &Bytes, downstream: Option<&str>) {
        let Ok(message) = serde_json::from_slice::<Value>(body) else {
            return;
        };
        let id = message["params"]["requestId"].to_string();
        let Some(going) = downstream.and_then(|d| self.calls.get(d, &id)) else {
            return;
        };
        let (member, extra) = (going.member.as_deref(), &going.extra);
        self.to_asker(going.route, member, body.to_vec(), extra)
            .await;
        going.cancelled.notify_one();
    }

    /// The events of `relay` on to the client, up to and including the response: its outcome.
    async fn relay_events(
        &self,
        session: &mut Session,
        relay: &mut Relay,
        stream: u64,
        ctx: &RequestCtx,
    ) -> pingora::Result<VirtualOutcome> {
        loop {
            let data = match relay.events.next().await {
                Ok(Some(data)) => data,
                outcome => {
                    let why = match outcome {
                        Err(e) => e.to_string(),
                        _ => "its stream ended without an answer".to_owned(),
                    };
                    tracing::warn!(request_id = %ctx.request_id, route = %relay.name, error = %why, "virtual server: member stream broke");
                    let text = format!("the member {} answered: {why}", relay.name);
                    let answer = error(&relay.id, INTERNAL_ERROR, text).to_string();
                    events::write_event(session, answer.as_bytes()).await?;
                    return Ok(VirtualOutcome::Error);
                }
            };
            match classify(&data, &relay.id) {
                Event::Response => {
                    events::write_event(session, &data).await?;
                    let answer = serde_json::from_slice(&data).unwrap_or(Value::Null);
                    return Ok(VirtualOutcome::of_answer(&answer));
                }
                Event::Other => events::write_event(session, &data).await?,
                Event::Request(member_id) => {
                    let ask = Ask {
                        route: relay.route,
                        member: relay.member.clone(),
                        id: member_id.clone(),
                        extra: relay.extra.clone(),
                        stream,
                    };
                    let mapped = relay
                        .downstream
                        .as_deref()
                        .and_then(|d| self.asks.hold(d, ask))
                        .and_then(|ours| with_id(&data, ours.to_string().as_bytes()));
                    match mapped {
                        Some(mapped) => events::write_event(session, &mapped).await?,
                        // No session to answer on, or no room to hold it: the member is told.
                        None => self.refuse_ask(relay, &member_id).await,
                    }
                }
            }
        }
    }

    /// Tells the member its request `member_id` cannot reach the client now.
    async fn refuse_ask(&self, relay: &Relay, member_id: &[u8]) {
        let Ok(id) = serde_json::from_slice::<Value>(member_id) else {
            return;
        };
        let text = "the gateway cannot relay this request to the client now".to_owned();
        let body = error(&id, INTERNAL_ERROR, text).to_string().into_bytes();
        self.to_asker(relay.route, relay.member.as_deref(), body, &relay.extra)
            .await;
    }

    /// A client's answer (`body`, a JSON-RPC response) on downstream session `downstream`:
    /// to the member whose request it answers, with that member's id (202); an answer to no
    /// request held for this session reaches no member (400).
    pub(super) async fn client_answer(
        &self,
        body: &Bytes,
        message: &Message,
        downstream: Option<&str>,
    ) -> Result<Reply, Rejection> {
        let unknown = Rejection::Malformed(Malformed::NotJsonRpc(
            "an answer to no request pending on this session",
        ));
        let id: Value = serde_json::from_str(&message.id).unwrap_or(Value::Null);
        let Some(ask) = downstream.and_then(|d| self.asks.take(d, &id)) else {
            return Err(unknown);
        };
        let body = with_id(body, &ask.id).ok_or(unknown)?;
        self.to_asker(ask.route, ask.member.as_deref(), body, &ask.extra)
            .await;
        Ok(Reply::empty(202))
    }

    /// `body` POSTed to member route `route` on member session `member`; best effort (a lost
    /// answer is the member's timeout).
    async fn to_asker(
        &self,
        route: usize,
        member: Option<&str>,
        body: Vec<u8>,
        extra: &[(http::HeaderName, http::HeaderValue)],
    ) {
        let Some(catalog) = self.edge.catalogs.get(route) else {
            return;
        };
        let timeout = self
            .settings
            .routes
            .get(route)
            .map_or(Duration::from_secs(10), |r| {
                Duration::from_millis(r.read_timeout_ms)
            });
        if let Err(e) = catalog.member_reply(member, body, extra, timeout).await {
            let name = self
                .settings
                .routes
                .get(route)
                .map_or("", |r| r.name.as_str());
            tracing::warn!(route = %name, error = %e, "virtual server: an answer did not reach its member");
        }
    }
}

/// An answer of the gateway's own to a request of MCP 2026-07-28 (`method`), with the fields that
/// revision requires of a result: `resultType` (`"complete"`), and on a list `ttlMs` (0: stale at
/// once) and `cacheScope` (`"private"`) unless set — pure.
pub(super) fn for_2026_07_28(method: &str, mut answer: Value) -> Value {
    if let Some(result) = answer.get_mut("result").and_then(Value::as_object_mut) {
        result
            .entry("resultType")
            .or_insert_with(|| Value::from("complete"));
        let lists = method.ends_with("/list") || method == "server/discover";
        if lists {
            result.entry("ttlMs").or_insert_with(|| Value::from(0));
            result
                .entry("cacheScope")
                .or_insert_with(|| Value::from("private"));
        }
    }
    answer
}

/// Whether a member's answer `status` to a request of MCP 2026-07-28 without a session says it
/// wants one (servers of earlier revisions answer 400, 404 or 422 before doing anything) — pure.
fn wants_a_session(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 400 | 404 | 422)
}

/// The headers a request of MCP 2026-07-28 without a session carries to the member (`body`
/// as the member reads it): its revision (the body's `_meta` one), `Mcp-Method` and `Mcp-Name`
/// (the member's own name); `None` when the body is not such a request — pure.
fn stateless_headers(body: &[u8]) -> Option<Vec<(http::HeaderName, http::HeaderValue)>> {
    let message = mcp::inspect(body).ok()?;
    let version = message.meta_version.as_deref()?;
    if !mcp::requires_headers(Some(version.as_bytes())) {
        return None;
    }
    let mut headers = vec![
        (
            http::HeaderName::from_static("mcp-protocol-version"),
            http::HeaderValue::from_str(version).ok()?,
        ),
        (
            http::HeaderName::from_static("mcp-method"),
            http::HeaderValue::from_str(&message.method).ok()?,
        ),
    ];
    if let Some(name) = &message.target {
        let name = http::HeaderValue::from_str(name).ok()?;
        headers.push((http::HeaderName::from_static("mcp-name"), name));
    }
    Some(headers)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_member_that_refuses_a_request_for_want_of_a_session_gets_one() {
        for code in [400, 404, 422] {
            assert!(wants_a_session(
                reqwest::StatusCode::from_u16(code).unwrap()
            ));
        }
        for code in [401, 403, 429, 500, 502] {
            assert!(!wants_a_session(
                reqwest::StatusCode::from_u16(code).unwrap()
            ));
        }
    }

    #[test]
    fn a_2026_07_28_request_carries_its_revision_method_and_the_members_name() {
        let modern = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let headers: Vec<(String, String)> = stateless_headers(modern)
            .unwrap()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            headers,
            [
                ("mcp-protocol-version".to_owned(), "2026-07-28".to_owned()),
                ("mcp-method".to_owned(), "tools/call".to_owned()),
                ("mcp-name".to_owned(), "echo".to_owned()),
            ]
        );
        let older = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
        assert!(stateless_headers(older).is_none());
    }

    #[test]
    fn a_2026_07_28_answer_has_the_fields_that_revision_requires() {
        let listed = serde_json::json!({"id": 1, "result": {"tools": [], "cacheScope": "private"}});
        assert_eq!(
            for_2026_07_28("tools/list", listed)["result"],
            serde_json::json!({"tools": [], "cacheScope": "private", "ttlMs": 0, "resultType": "complete"})
        );
        let called = serde_json::json!({"id": 1, "result": {"content": []}});
        assert_eq!(
            for_2026_07_28("tools/call", called)["result"],
            serde_json::json!({"content": [], "resultType": "complete"})
        );
        let failed = serde_json::json!({"id": 1, "error": {"code": 1}});
        assert_eq!(for_2026_07_28("tools/list", failed.clone()), failed);
    }
}
