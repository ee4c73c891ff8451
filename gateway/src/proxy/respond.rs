//! The upstream's answer on its way back: a new session is bound to its owner, an ended one
//! forgotten, a task a `tools/call` created recorded as its caller's (a cancelled one audited),
//! a `tools/list` answer filtered for the principal, and every answer carries the
//! request id, CORS and rate-limit headers.

use bytes::Bytes;
use pingora::{Error, ErrorType, Result, http::ResponseHeader};

use crate::{catalog, cors, forward, limit, policy, reply::Reply, tasks};

use super::{Gateway, RequestCtx, admission::SESSION_ID};

/// The largest `tools/list` answer the gateway holds to filter.
const MAX_LIST_ANSWER: usize = 8 * 1024 * 1024;

/// Whether an upstream answer is an event stream.
fn is_event_stream(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

impl Gateway {
    /// The answer's header: session records, the list filter's framing, the gateway's headers.
    pub(super) async fn respond(
        &self,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(sent) = ctx.upstream_sent {
            self.metrics
                .upstream_first_byte(ctx.mcp_route, sent.elapsed());
            self.reached(ctx, true);
        }
        let ok = resp.status.is_success();
        if ok && is_event_stream(resp) {
            ctx.stream = Some(self.metrics.stream_opened());
        }
        self.note_cancel(resp.status.as_u16(), ctx);
        if ok {
            self.record_session(resp, ctx).await;
            ctx.mcp.task_sse = is_event_stream(resp);
        } else {
            ctx.mcp.watch_task = None;
        }
        if ctx.mcp.filter_list {
            if ok {
                ctx.mcp.list_is_sse = is_event_stream(resp);
                // The filtered answer has another length; it goes out chunked.
                resp.remove_header(&http::header::CONTENT_LENGTH);
                resp.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
            } else {
                ctx.mcp.filter_list = false;
            }
        }
        if let Some(origin) = &ctx.cors_origin {
            for (name, value) in cors::response_headers(origin) {
                resp.insert_header(name, value)?;
            }
        }
        resp.insert_header(forward::header::REQUEST_ID, ctx.request_id.as_str())?;
        if let Some((class, policy, decision)) = &ctx.rate {
            for (name, value) in limit::headers(*class, *policy, decision) {
                resp.insert_header(name, value)?;
            }
        }
        Ok(())
    }

    /// The upstream answered 401 to the credential Pforte added: never passed on as a 401 (the
    /// client would take it for its own token's). One refresh of an OAuth credential (unless
    /// another request just made one); the gateway's answer says to try again, or carries the
    /// connect prompt when the upstream refused the refresh too.
    pub(super) async fn upstream_refused(&self, ctx: &mut RequestCtx) -> Reply {
        let (Some(route), Some(sent)) = (ctx.mcp_route, ctx.upstream_auth.as_ref()) else {
            return Reply::empty(502);
        };
        let sent = sent
            .value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default()
            .to_owned();
        let outcome = self
            .edge
            .credentials
            .unauthorized(route, &ctx.person_key, &sent)
            .await;
        let ask = match outcome {
            Ok(()) => None,
            Err(crate::credentials::Missing::Connect(ask)) => Some(ask),
            Err(crate::credentials::Missing::Unavailable(reason)) => {
                tracing::warn!(request_id = %ctx.request_id, %reason, "the upstream refused its credential");
                Some(crate::credentials::Ask::Reconnect)
            }
        };
        // The gateway answers in the upstream's place.
        ctx.refused = Some("upstream_unauthorized");
        let Some(message) = ctx.mcp.message.clone() else {
            // A stream or a DELETE: no message to answer; a plain refusal.
            return Reply::json(
                502,
                &serde_json::json!({"error": "upstream_unauthorized",
                    "error_description": "the upstream refused the route's credential; call again"}),
            );
        };
        let body = match ask {
            None => crate::credentials::answer::retry_answer(&message),
            Some(ask) => {
                let principal = ctx.principal.clone();
                let url = match principal {
                    Some(p) => self.edge.credentials.link(route, &p).await.ok(),
                    None => None,
                };
                let r = &self.settings.routes[route];
                let url = url.unwrap_or_else(|| format!("{}/connections", self.settings.base_url));
                let eliciting = ctx.mcp.url_elicitation;
                crate::credentials::answer::connect_answer(
                    &message,
                    &crate::credentials::answer::Prompt {
                        title: r.title.as_deref().unwrap_or(&r.name),
                        url: &url,
                        elicitation_id: url.rsplit('=').next().unwrap_or_default(),
                        ask,
                    },
                    eliciting,
                )
            }
        };
        match body {
            Some(json) => Reply::json(200, &json),
            None => Reply::empty(202),
        }
    }

    /// A successful `initialize` binds its `Mcp-Session-Id` to the principal; a successful
    /// `DELETE` forgets the session.
    async fn record_session(&self, resp: &ResponseHeader, ctx: &mut RequestCtx) {
        let sessions = &self.edge.sessions;
        if ctx.mcp.opens_session
            && ctx.mcp.url_elicitation
            && let Some(id) = resp.headers.get(SESSION_ID).and_then(|v| v.to_str().ok())
        {
            self.edge.credentials.note_eliciting(id);
        }
        if ctx.mcp.opens_session
            && let Some(id) = resp.headers.get(SESSION_ID).and_then(|v| v.to_str().ok())
            && let Err(e) = sessions
                .bind(id, ctx.holder(), self.instance_url(ctx))
                .await
        {
            tracing::warn!(request_id = %ctx.request_id, error = %e, "could not record the session's owner");
        }
        if let Some(id) = ctx.mcp.ends_session.take()
            && let Err(e) = sessions.forget(&id, ctx.holder()).await
        {
            tracing::debug!(error = %e, "could not forget an ended session");
        }
        // The upstream no longer knows the session (a stdio bridge closed it, or restarted).
        if resp.status == http::StatusCode::NOT_FOUND
            && let Some(in_use) = &ctx.session_use
            && let Err(e) = sessions.forget_in_use(in_use, ctx.holder()).await
        {
            tracing::debug!(error = %e, "could not forget a session gone upstream");
        }
    }

    /// The whole answer of a `tools/call` has been read: when it creates a task, the task is
    /// recorded as the principal's on this route (before the answer's last bytes leave, so the
    /// client's first `tasks/get` finds it) and audited.
    pub(super) async fn note_task(&self, ctx: &mut RequestCtx) {
        let Some(tool) = ctx.mcp.watch_task.take() else {
            return;
        };
        let held = std::mem::take(&mut ctx.mcp.task_held);
        let Some(task_id) = tasks::created(&held, ctx.mcp.task_sse) else {
            return;
        };
        let Some(route) = ctx.mcp_route.and_then(|i| self.settings.routes.get(i)) else {
            return;
        };
        let record = tasks::TaskRecord {
            owner: ctx.principal_key.clone(),
            route: route.name.clone(),
            tool,
            // The instance that holds the task: its requests go there.
            instance: self.instance_url(ctx).map(str::to_owned),
        };
        if let Err(e) = self.edge.tasks.record(&task_id, &record).await {
            tracing::warn!(request_id = %ctx.request_id, error = %e, "could not record a task's creator: its requests will get 404");
        }
        if let Some(audit) = &self.edge.audit {
            audit.record(&crate::audit::TaskEvent {
                time_ms: self.clock.now_ms(),
                event: "task_created",
                request_id: &ctx.request_id,
                route: &route.name,
                principal: ctx
                    .principal
                    .as_ref()
                    .map(crate::audit::AuditPrincipal::from),
                tool: &record.tool,
                task: &task_id,
                status: None,
            });
        }
    }

    /// The upstream answered an admitted `tasks/cancel` (`status`): audited as
    /// `task_cancelled`.
    fn note_cancel(&self, status: u16, ctx: &mut RequestCtx) {
        let Some(tool) = ctx.mcp.cancels.take() else {
            return;
        };
        let (Some(audit), Some(route), Some(task)) = (
            &self.edge.audit,
            ctx.mcp_route.and_then(|i| self.settings.routes.get(i)),
            ctx.mcp.message.as_ref().and_then(|m| m.target.as_deref()),
        ) else {
            return;
        };
        audit.record(&crate::audit::TaskEvent {
            time_ms: self.clock.now_ms(),
            event: "task_cancelled",
            request_id: &ctx.request_id,
            route: &route.name,
            principal: ctx
                .principal
                .as_ref()
                .map(crate::audit::AuditPrincipal::from),
            tool: &tool,
            task,
            status: Some(status),
        });
    }

    /// A chunk of the answer's body: held while a `tools/list` answer is filtered, which goes
    /// out whole, with only what the principal may see.
    pub(super) fn respond_body(
        &self,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if ctx.mcp.watch_task.is_some()
            && let Some(chunk) = body.as_ref()
        {
            if ctx.mcp.task_held.len() + chunk.len() > tasks::MAX_WATCHED {
                // Too long for a task handle: a plain result.
                ctx.mcp.watch_task = None;
                ctx.mcp.task_held = Vec::new();
            } else {
                ctx.mcp.task_held.extend_from_slice(chunk);
            }
        }
        if !ctx.mcp.filter_list {
            return Ok(());
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
            return Ok(());
        }
        ctx.mcp.filter_list = false;
        let held = std::mem::take(&mut ctx.mcp.list_held).freeze();
        let Some(principal) = &ctx.principal else {
            return Error::e_explain(ErrorType::InternalError, "tools/list without a principal");
        };
        let Some(route) = ctx.mcp_route.filter(|i| *i < self.routes.len()) else {
            return Error::e_explain(ErrorType::InternalError, "tools/list without a route");
        };
        // The policy's, the pins' and the `[[policy]]` rules' word (a held tool is absent).
        let keep =
            |name: &str, annotation: policy::Annotation| {
                self.listed(principal, route, name, annotation)
                    && !ctx.mcp.attributes.as_ref().is_some_and(|a| {
                        self.hidden_by_rules(principal, a, route, name, ctx.client_ip)
                    })
            };
        let discover = ctx
            .mcp
            .message
            .as_ref()
            .is_some_and(|m| m.method == "server/discover");
        let filtered = if discover {
            // Whether the principal may list any tool the catalog knows (an empty catalog: it
            // cannot tell, so the server's word stands).
            let tools = ctx
                .mcp_route
                .and_then(|i| self.edge.catalogs.get(i))
                .map(|c| c.tools())
                .unwrap_or_default();
            let visible = tools.is_empty()
                || tools.iter().any(|(name, read_only)| {
                    let annotation = if *read_only {
                        policy::Annotation::ReadOnly
                    } else {
                        policy::Annotation::Writes
                    };
                    keep(name, annotation)
                });
            catalog::filter_discover(&held, ctx.mcp.list_is_sse, visible)
        } else {
            // And the pins': each listed definition the approved one, whoever the upstream
            // told what (its own catalog may have been listed another).
            let unseen = std::cell::RefCell::new(Vec::new());
            let keep_listed = |name: &str, annotation: policy::Annotation, tool: &[u8]| {
                keep(name, annotation) && self.pin_lists(route, name, tool, &unseen)
            };
            let private = self.lists_privately(principal, route);
            let filtered = catalog::filter_listed(&held, ctx.mcp.list_is_sse, keep_listed, private);
            self.edge
                .pins
                .record_served(&self.settings.routes[route].name, unseen.into_inner());
            filtered
        };
        *body = match filtered {
            Ok(Some(filtered)) => Some(filtered),
            Ok(None) => Some(held),
            Err(e) => {
                return Error::e_explain(
                    ErrorType::Custom("tools/list unreadable"),
                    format!("cannot filter the tools/list answer: {e}"),
                );
            }
        };
        Ok(())
    }
}
