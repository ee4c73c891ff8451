//! A virtual server's per-user member whose person has not connected it (issue 42 point 4),
//! answered as the member route answers before the connection: a call of one of its tools (or
//! of its connect tool, `<prefix>connect`) gets the member's connect prompt (so does a
//! `resources/read` or `prompts/get` routed to it, though its lists stay empty until then) (`credentials/answer.rs`: a tool error with the single-use link,
//! `-32042` for a client whose `initialize` declared URL elicitation, else a JSON-RPC error
//! naming the link); `tools/list` shows the member's connect tool in place of its tools. The
//! other members are untouched.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Gateway, RequestCtx};
use crate::{
    config::Virtual,
    credentials::{
        Ask, Missing,
        answer::{Prompt, connect_answer, connect_tool},
    },
    mcp::Message,
    reply::Rejection,
    virtual_server::{NameMap, connect_member, connect_name, without_unconnected},
};

impl Gateway {
    /// Why this caller has no working credential for member route `route` (`None`: the route
    /// keeps none per user, the caller has one, or the vault did not answer — the call then
    /// meets that on its way).
    pub(super) async fn unconnected(&self, route: usize, ctx: &RequestCtx) -> Option<Ask> {
        if !self.edge.credentials.per_user(route) {
            return None;
        }
        match self
            .edge
            .credentials
            .for_request(route, &ctx.person_key)
            .await
        {
            Err(Missing::Connect(ask)) => Some(ask),
            _ => None,
        }
    }

    /// Member route `route`'s single-use connect link for this caller.
    async fn connect_link(&self, route: usize, ctx: &RequestCtx) -> Result<String, Rejection> {
        let principal = ctx.principal.as_ref().ok_or(Rejection::Internal)?;
        self.edge
            .credentials
            .link(route, principal)
            .await
            .map_err(|_| Rejection::UpstreamCredentialUnavailable)
    }

    /// The connect prompt of member route `route` as the answer to `message` (a request on
    /// downstream session `downstream`), in the form its client understands.
    pub(super) async fn member_prompt(
        &self,
        route: usize,
        message: &Message,
        downstream: Option<&str>,
        ctx: &RequestCtx,
    ) -> Result<Value, Rejection> {
        let ask = self.unconnected(route, ctx).await.unwrap_or(Ask::Connect);
        let url = self.connect_link(route, ctx).await?;
        let r = &self.settings.routes[route];
        let prompt = Prompt::for_link(r.title.as_deref().unwrap_or(&r.name), &url, ask);
        let eliciting = downstream.is_some_and(|id| self.edge.credentials.eliciting(id));
        connect_answer(message, &prompt, eliciting).ok_or(Rejection::Internal)
    }

    /// A `tools/call` of `shown` that is an unconnected member's connect tool (no member tool
    /// is shown under that name): that member's route and its connect prompt.
    pub(super) async fn connect_call(
        &self,
        v: &Virtual,
        (shown, message): (&str, &Message),
        downstream: Option<&str>,
        ctx: &RequestCtx,
    ) -> Result<Option<(usize, Value)>, Rejection> {
        let Some(member) = connect_member(&v.server.members, shown) else {
            return Ok(None);
        };
        let (map, routes) = self.virtual_map(v);
        let Some(&route) = routes
            .get(member)
            .filter(|_| !map.entries.contains_key(shown))
        else {
            return Ok(None);
        };
        if self.unconnected(route, ctx).await.is_none() {
            return Ok(None);
        }
        let answer = self.member_prompt(route, message, downstream, ctx).await?;
        Ok(Some((route, answer)))
    }

    /// `list` (this caller's `tools/list` result) with each per-user member the caller has
    /// not connected shown as the route shows it then: its connect tool, not its tools.
    pub(super) async fn with_connect_tools(
        &self,
        v: &Virtual,
        (map, routes): (&NameMap, &[usize]),
        ctx: &RequestCtx,
        mut list: Value,
    ) -> Value {
        let mut waiting = BTreeSet::new();
        let mut connects = Vec::new();
        for (m, (member, &route)) in v.server.members.iter().zip(routes).enumerate() {
            let Some(ask) = self.unconnected(route, ctx).await else {
                continue;
            };
            waiting.insert(m);
            let Ok(url) = self.connect_link(route, ctx).await else {
                continue;
            };
            let r = &self.settings.routes[route];
            let prompt = Prompt::for_link(r.title.as_deref().unwrap_or(&r.name), &url, ask);
            let mut tool = connect_tool(&prompt);
            tool["name"] = Value::String(connect_name(member));
            connects.push(tool);
        }
        without_unconnected(&mut list, map, &waiting, connects, v.server.search);
        list
    }
}
