//! A virtual server's resources and prompts (issue 42 point 2): `resources/list`,
//! `resources/templates/list` and `prompts/list` asked of every member the caller may ask (on
//! the downstream session's member sessions) and merged by `virtual_server::merge` (a member
//! that is down, serves none, or whose person is not connected: absent from the lists, never a
//! failed list); `resources/read` routed to the member listing the URI (or whose template
//! matches it) unchanged, `prompts/get` to the member of the shown name with `params.name`
//! rewritten to the member's own; both decided by the member route's policy first. Only a
//! member's first page is listed.

use serde_json::{Value, json};

use super::{INVALID_PARAMS, error, result};
use crate::{
    auth::Principal,
    config::Virtual,
    mcp::{self, Message},
    metrics::VirtualOutcome,
    proxy::{Gateway, RequestCtx},
    reply::Rejection,
    virtual_server::{MemberLists, Merged, merge, rewrite_call_name},
};

/// MCP: the resource is not known (`resources/read`).
const RESOURCE_NOT_FOUND: i64 = -32002;

/// The lists a request needs from the members.
#[derive(Debug, Clone, Copy, Default)]
struct Wanted {
    resources: bool,
    templates: bool,
    prompts: bool,
}

impl Wanted {
    /// What `method` (a list, `resources/read` or `prompts/get`) needs.
    fn of(method: &str) -> Self {
        Self {
            resources: matches!(method, "resources/list" | "resources/read"),
            templates: matches!(method, "resources/templates/list" | "resources/read"),
            prompts: matches!(method, "prompts/list" | "prompts/get"),
        }
    }
}

/// One member's lists as it answered them.
#[derive(Debug, Default)]
struct Answered {
    resources: Option<Vec<Value>>,
    templates: Option<Vec<Value>>,
    prompts: Option<Vec<Value>>,
}

/// The array `key` of a member's answer `answer` to a list request, if it has one.
fn listed(answer: Option<Value>, key: &str) -> Option<Vec<Value>> {
    match answer?.get_mut("result")?.get_mut(key)?.take() {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

impl Gateway {
    /// `resources/list`, `resources/templates/list`, `prompts/list`, `resources/read` or
    /// `prompts/get` (`message`, whose `body`) on virtual server `v`: the answer for the client.
    pub(super) async fn virtual_resources(
        &self,
        v: &Virtual,
        (body, message, id): (&[u8], &Message, &Value),
        downstream: Option<&str>,
        ctx: &mut RequestCtx,
    ) -> Result<Value, Rejection> {
        let principal = ctx.principal.clone().ok_or(Rejection::Internal)?;
        let (merged, routes) = self
            .merged(v, Wanted::of(&message.method), &principal, downstream, ctx)
            .await?;
        if message.method.ends_with("/list") {
            // Two members' prompts under one shown name (both left out), or one URI listed by
            // two (served from the first): named for the operator, the rest served.
            for problem in &merged.problems {
                tracing::warn!(virtual_server = %v.server.name, %problem, "virtual server: the members' lists collide");
            }
        }
        let target = message.target.as_deref().unwrap_or_default();
        let (member, body) = match message.method.as_str() {
            "resources/list" => return Ok(result(id, json!({"resources": merged.resources}))),
            "resources/templates/list" => {
                return Ok(result(id, json!({"resourceTemplates": merged.templates})));
            }
            "prompts/list" => return Ok(result(id, json!({"prompts": merged.prompts}))),
            "resources/read" => match merged.resource_member(target) {
                Some(member) => (member, body.to_vec()),
                None => {
                    let text = format!("Resource not found: {target}");
                    return Ok(error(id, RESOURCE_NOT_FOUND, text));
                }
            },
            _ => match merged.prompt(target) {
                Some((member, name)) => match rewrite_call_name(body, name) {
                    Some(body) => (member, body),
                    None => return Ok(error(id, INVALID_PARAMS, "params.name".to_owned())),
                },
                None => {
                    let text = format!("Unknown prompt: {target}");
                    return Ok(error(id, INVALID_PARAMS, text));
                }
            },
        };
        let route = routes[member];
        ctx.member = Some((route, None));
        let inner = mcp::inspect(&body).map_err(Rejection::Malformed)?;
        if self.settings.admission.tool_policy {
            self.authorize(&principal, &inner, route).await?;
        }
        let (answer, outcome) = match self.to_member(route, body, id, downstream, ctx).await? {
            Some(answer) => {
                let answer = answer.whole().await;
                let outcome = VirtualOutcome::of_answer(&answer);
                (answer, outcome)
            }
            // Not connected: the member route's connect prompt (a JSON-RPC error naming the
            // link, or -32042).
            None => (
                self.member_prompt(route, message, downstream, ctx).await?,
                VirtualOutcome::Connect,
            ),
        };
        ctx.member = Some((route, Some(outcome)));
        Ok(answer)
    }

    /// The members' lists `wanted` merged, and each member's route index. A member the caller
    /// may not ask for a list (its route's policy) is left out like one that is down.
    async fn merged(
        &self,
        v: &Virtual,
        wanted: Wanted,
        principal: &Principal,
        downstream: Option<&str>,
        ctx: &RequestCtx,
    ) -> Result<(Merged, Vec<usize>), Rejection> {
        let (map, routes) = self.virtual_map(v);
        let mut answered = Vec::with_capacity(routes.len());
        for &route in &routes {
            let mut lists = Answered::default();
            let asks = [
                (wanted.resources, "resources/list", "resources"),
                (
                    wanted.templates,
                    "resources/templates/list",
                    "resourceTemplates",
                ),
                (wanted.prompts, "prompts/list", "prompts"),
            ];
            for (_, method, key) in asks.into_iter().filter(|(w, _, _)| *w) {
                let items = self.member_list(route, method, principal, downstream, ctx);
                let items = listed(items.await?, key);
                match method {
                    "resources/list" => lists.resources = items,
                    "resources/templates/list" => lists.templates = items,
                    _ => lists.prompts = items,
                }
            }
            answered.push(lists);
        }
        let lists: Vec<MemberLists<'_>> = answered
            .iter()
            .map(|a| MemberLists {
                resources: a.resources.as_deref(),
                templates: a.templates.as_deref(),
                prompts: a.prompts.as_deref(),
            })
            .collect();
        Ok((merge(&v.server, &map, &lists), routes))
    }

    /// Member route `route`'s answer to the list request `method` (`None`: not asked — its
    /// policy refuses the caller —, not connected, or unreachable).
    async fn member_list(
        &self,
        route: usize,
        method: &str,
        principal: &Principal,
        downstream: Option<&str>,
        ctx: &RequestCtx,
    ) -> Result<Option<Value>, Rejection> {
        let id = json!(0);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method}).to_string();
        if self.settings.admission.tool_policy {
            let message = mcp::inspect(body.as_bytes()).map_err(Rejection::Malformed)?;
            let policy = &self.routes.get(route).ok_or(Rejection::Internal)?.policy;
            if policy
                .decide(principal, &message, crate::policy::Annotation::Unknown)
                .is_err()
            {
                return Ok(None);
            }
        }
        match self
            .to_member(route, body.into_bytes(), &id, downstream, ctx)
            .await
        {
            Ok(Some(answer)) => Ok(Some(answer.whole().await)),
            Ok(None) => Ok(None),
            Err(Rejection::UpstreamCredentialUnavailable) => Ok(None),
            Err(other) => Err(other),
        }
    }
}
