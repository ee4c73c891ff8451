//! A virtual server's `GET /NAME/mcp` (issue 42 point 2): the event stream of one downstream
//! session (admitted like a route's stream: its session's owner, a `Streams` slot of the
//! person's), on which the members' list changes become the virtual server's own
//! `notifications/tools/list_changed` (a member that went down, came back, or lists other
//! tools) and `notifications/resources/list_changed` / `notifications/prompts/list_changed`
//! (announced by a member); a keep-alive comment every [`KEEP_ALIVE`], and the stream ends once
//! its downstream session is gone.

use std::time::Duration;

use futures::future::select_all;
use pingora::proxy::Session;
use serde_json::json;
use tokio::sync::watch;

use crate::{
    catalog::Changes,
    config::Virtual,
    proxy::{Gateway, Outcome, RequestCtx},
    reply::{Rejection, events},
};

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
            tokio::select! {
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
                    if let Ok(false) = self.edge.sessions.is_bound(&downstream).await {
                        break;
                    }
                    events::write_comment(session).await?;
                }
            }
        }
        events::write_end(session).await?;
        Ok(Outcome::Relayed)
    }
}
