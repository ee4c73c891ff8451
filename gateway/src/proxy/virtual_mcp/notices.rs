//! A virtual server's `GET /NAME/mcp` (issue 42 point 2): the event stream of one downstream
//! session (admitted like a route's stream: its session's owner, a `Streams` slot of the
//! person's), on which the members' list changes become the virtual server's own
//! `notifications/tools/list_changed` (a member that went down, came back, or lists other
//! tools) and `notifications/resources/list_changed` / `notifications/prompts/list_changed`
//! (announced by a member); and what the session's member sessions send on their own streams
//! outside a call (log messages, notifications as they are; requests under an id of the
//! gateway's, answered like those of a call: `stream.rs`). A keep-alive comment every
//! [`KEEP_ALIVE`] (member sessions opened since are then listened to), and the stream ends once
//! its downstream session is gone.

use std::{collections::HashSet, time::Duration};

use futures::future::select_all;
use pingora::proxy::Session;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{
    catalog::{Changes, MemberEvents},
    config::Virtual,
    proxy::{Gateway, Outcome, RequestCtx},
    reply::{Rejection, events},
    virtual_server::{Event, classify, with_id},
};

use super::asks::Ask;

/// How often an idle stream carries a comment (and its session is looked up).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

impl Gateway {
    /// The event stream of downstream session `downstream` of virtual server `v`.
    pub(super) async fn virtual_stream(
        &self,
        session: &mut Session,
        v: &Virtual,
        downstream: Option<String>,
        ctx: &RequestCtx,
    ) -> pingora::Result<Outcome> {
        let Some(downstream) = downstream else {
            // The stream belongs to a session: without one there is nothing to send on it.
            return Ok(Outcome::Refuse(Rejection::SessionNotFound));
        };
        let mut watched: Vec<watch::Receiver<Changes>> = v
            .server
            .members
            .iter()
            .filter_map(|m| self.settings.route_named(&m.route))
            .filter_map(|i| self.edge.catalogs.get(i))
            .map(|c| c.changes())
            .collect();
        let mut seen: Vec<Changes> = watched.iter_mut().map(|w| *w.borrow_and_update()).collect();
        events::write_head(session, ctx.framing()).await?;
        let stream = self.asks.number();
        let mut members = Listening::default();
        self.listen_to_members(&downstream, &mut members).await;
        let ended = self
            .notices(
                session,
                &downstream,
                (&mut watched, &mut seen),
                &mut members,
                stream,
            )
            .await;
        self.asks.end_stream(stream);
        ended?;
        events::write_end(session).await?;
        Ok(Outcome::Relayed)
    }

    /// The stream's events until its session is gone, its client or a member's catalog left.
    async fn notices(
        &self,
        session: &mut Session,
        downstream: &str,
        (watched, seen): (&mut [watch::Receiver<Changes>], &mut [Changes]),
        members: &mut Listening,
        stream: u64,
    ) -> pingora::Result<()> {
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        loop {
            let changed = async {
                if watched.is_empty() {
                    return std::future::pending().await;
                }
                let (outcome, i, _) =
                    select_all(watched.iter_mut().map(|w| Box::pin(w.changed()))).await;
                outcome.map(|()| i)
            };
            let heard = async {
                if members.streams.is_empty() {
                    return std::future::pending().await;
                }
                let next = members
                    .streams
                    .iter_mut()
                    .map(|m| Box::pin(m.events.next()));
                let (outcome, i, _) = select_all(next).await;
                (outcome, i)
            };
            tokio::select! {
                (outcome, i) = heard => match outcome {
                    Ok(Some(data)) => self.relay_member_message(session, downstream, &members.streams[i], &data, stream).await?,
                    // That member's stream ended: not opened again for this stream.
                    _ => drop(members.streams.swap_remove(i)),
                },
                changed = changed => {
                    let Ok(i) = changed else { break };
                    let now = *watched[i].borrow_and_update();
                    let lists = now.since(seen[i]);
                    seen[i] = now;
                    for list in lists {
                        let note = json!({"jsonrpc": "2.0", "method": list.notification()});
                        events::write_event(session, note.to_string().as_bytes()).await?;
                    }
                }
                _ = tick.tick() => {
                    if let Ok(false) = self.edge.sessions.is_bound(downstream).await {
                        break;
                    }
                    self.listen_to_members(downstream, members).await;
                    events::write_comment(session).await?;
                }
            }
        }
        Ok(())
    }

    /// Opens the event streams of `downstream`'s member sessions not yet listened to.
    async fn listen_to_members(&self, downstream: &str, members: &mut Listening) {
        for (route, member, extra) in self.member_sessions.held_by(downstream) {
            if !members.tried.insert((route, member.clone())) {
                continue;
            }
            let Some(catalog) = self.edge.catalogs.get(route) else {
                continue;
            };
            match catalog.member_listen(&member, &extra).await {
                Ok(events) => members.streams.push(Member {
                    route,
                    member,
                    extra,
                    events,
                }),
                Err(e) => tracing::debug!(error = %e, "virtual server: a member session's stream"),
            }
        }
    }

    /// A message from a member session's own stream, relayed: a request under an id of the
    /// gateway's (held for `downstream` while this stream lasts), anything else as it is.
    async fn relay_member_message(
        &self,
        session: &mut Session,
        downstream: &str,
        from: &Member,
        data: &[u8],
        stream: u64,
    ) -> pingora::Result<()> {
        let Event::Request(member_id) = classify(data, &Value::Null) else {
            return events::write_event(session, data).await;
        };
        let ask = Ask {
            route: from.route,
            member: Some(from.member.clone()),
            id: member_id,
            extra: from.extra.clone(),
            stream,
        };
        let mapped = self
            .asks
            .hold(downstream, ask)
            .and_then(|ours| with_id(data, ours.to_string().as_bytes()));
        match mapped {
            Some(mapped) => events::write_event(session, &mapped).await,
            None => Ok(()),
        }
    }
}

/// The member sessions' streams a session's stream listens to.
#[derive(Default)]
struct Listening {
    streams: Vec<Member>,
    /// Every member session opened (or tried) once.
    tried: HashSet<(usize, String)>,
}

/// One member session's stream.
struct Member {
    route: usize,
    member: String,
    extra: Vec<(http::HeaderName, http::HeaderValue)>,
    events: Box<MemberEvents>,
}
