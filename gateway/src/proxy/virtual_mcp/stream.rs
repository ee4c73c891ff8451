//! A call through a virtual server whose member answers with an event stream (issue 42 point
//! 3): the client gets an event stream too — the member's notifications (progress with the
//! client's own token, logging) relayed as they arrive, the member's requests (sampling,
//! elicitation, roots, ping) relayed under an id of the gateway's (`asks.rs`), then the
//! response, the client's id unchanged; every relayed message keeps the member's bytes but a
//! mapped `id`. The client's answer to a member's request, POSTed on the same downstream
//! session, goes to the member that asked, on its member session, with the member's id.

use std::time::Duration;

use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;

use super::{INTERNAL_ERROR, asks::Ask, error};
use crate::{
    catalog::{Catalog, CatalogError, MemberAnswer, MemberEvents},
    mcp::{Malformed, Message},
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
    /// The downstream session (the client's answers come on it).
    pub(super) downstream: String,
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
        let own = |body| sessions.call(catalog, (None, route), body, id, &extra, timeout);
        let Some(downstream) = downstream else {
            return own(body).await.map(Called::Whole);
        };
        match sessions
            .send(catalog, (downstream, route), body.clone(), &extra, timeout)
            .await?
        {
            Some((MemberAnswer::Whole(answer), _)) => Ok(Called::Whole(answer)),
            Some((MemberAnswer::Events(events), member)) => {
                let name = self.settings.routes.get(route).map(|r| r.name.clone());
                Ok(Called::Events(Box::new(Relay {
                    events,
                    route,
                    name: name.unwrap_or_default(),
                    member,
                    extra,
                    id: id.clone(),
                    downstream: downstream.to_owned(),
                })))
            }
            None => own(body).await.map(Called::Whole),
        }
    }

    /// Writes `relay`'s event stream to the client until the member's response (or an error
    /// response, when the member's stream breaks); the member's requests held meanwhile end
    /// with it.
    pub(super) async fn relay_member_stream(
        &self,
        session: &mut Session,
        mut relay: Relay,
        ctx: &RequestCtx,
    ) -> pingora::Result<()> {
        events::write_head(session, ctx.framing()).await?;
        let stream = self.asks.number();
        let relayed = self.relay_events(session, &mut relay, stream, ctx).await;
        self.asks.end_stream(stream);
        relayed?;
        events::write_end(session).await
    }

    /// The events of `relay` on to the client, up to and including the response.
    async fn relay_events(
        &self,
        session: &mut Session,
        relay: &mut Relay,
        stream: u64,
        ctx: &RequestCtx,
    ) -> pingora::Result<()> {
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
                    return events::write_event(session, answer.as_bytes()).await;
                }
            };
            match classify(&data, &relay.id) {
                Event::Response => return events::write_event(session, &data).await,
                Event::Other => events::write_event(session, &data).await?,
                Event::Request(member_id) => {
                    let ask = Ask {
                        route: relay.route,
                        member: relay.member.clone(),
                        id: member_id.clone(),
                        extra: relay.extra.clone(),
                        stream,
                    };
                    let mapped = self
                        .asks
                        .hold(&relay.downstream, ask)
                        .and_then(|ours| with_id(&data, ours.to_string().as_bytes()));
                    match mapped {
                        Some(mapped) => events::write_event(session, &mapped).await?,
                        // No room to hold it: the member is told at once.
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
        let text = "the gateway holds too many requests to clients; try again later".to_owned();
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
