//! What a finished request leaves behind: its audit line (every `/mcp` request that names a
//! tool, resource or prompt, and every refusal), its metrics, and its `request` log line.

use std::borrow::Cow;

use pingora::{Error, http::RequestHeader, proxy::Session};

use crate::{
    audit::{AuditDecision, AuditPrincipal, AuditRecord},
    catalog,
    config::DEFAULT_ROUTE,
    logging,
    mcp::{Kind, Message},
    metrics,
};

use super::{Gateway, RequestCtx};

/// A field's value when there is none.
const NONE: Cow<'static, str> = Cow::Borrowed("-");

/// A request line's decided fields (see `Gateway::request_line`).
struct RequestLine<'a> {
    route: &'a str,
    subject: &'a str,
    client: &'a str,
    client_ip: Cow<'a, str>,
    user_agent: Cow<'a, str>,
    reason: &'a str,
    error: Cow<'a, str>,
    warn: bool,
}

impl Gateway {
    /// Everything a finished request leaves behind; `status` is what the client got (0: none).
    pub(super) fn observe(&self, session: &Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let req = session.req_header();
        if ctx.mcp.route {
            self.audit(req, ctx, status);
        }
        self.count(req, e, ctx, status);
        self.console_note(e, ctx, status);
        self.end_trace(req, e, ctx, status);
        self.log_request(req, e, ctx, status);
    }

    /// The request's log line: written straight into the log batch when the subscriber takes
    /// plain lines (`logging::write_request`), as a tracing event otherwise (a terminal).
    fn log_request(&self, req: &RequestHeader, e: Option<&Error>, ctx: &RequestCtx, status: u16) {
        let line = self.request_line(req, e, ctx, status);
        let enabled = if line.warn {
            tracing::enabled!(tracing::Level::WARN)
        } else {
            tracing::enabled!(tracing::Level::INFO)
        };
        if !enabled {
            return;
        }
        let path = logging::untrusted(req.uri.path()).to_cow();
        let ms = ctx.started.elapsed().as_millis() as u64;
        let fields = logging::RequestLine {
            request_id: &ctx.request_id,
            method: req.method.as_str(),
            path: &path,
            route: line.route,
            status,
            subject: line.subject,
            client: line.client,
            client_ip: &line.client_ip,
            user_agent: &line.user_agent,
            ms,
            reason: line.reason,
            error: &line.error,
        };
        if logging::write_request(self.clock.now_ms(), line.warn, module_path!(), &fields) {
            return;
        }
        macro_rules! request_line {
            ($level:ident) => {
                tracing::$level!(
                    request_id = %ctx.request_id,
                    method = %req.method,
                    path = %path,
                    route = line.route,
                    status,
                    subject = line.subject,
                    client = line.client,
                    client_ip = %line.client_ip,
                    user_agent = %line.user_agent,
                    ms,
                    reason = line.reason,
                    error = %line.error,
                    "request"
                )
            };
        }
        if line.warn {
            request_line!(warn);
        } else {
            request_line!(info);
        }
    }

    /// The fields of a request's log line that take a decision: which route, who, why it ended
    /// without the upstream's answer (a refusal's reason, or the client's doing), the gateway's
    /// or upstream's failure, and whether it is a warning (a 5xx, or a failure on our side).
    fn request_line<'a>(
        &'a self,
        req: &'a RequestHeader,
        e: Option<&Error>,
        ctx: &'a RequestCtx,
        status: u16,
    ) -> RequestLine<'a> {
        let (subject, client) = ctx
            .principal
            .as_ref()
            .map_or(("-", "-"), |p| (p.subject.as_str(), p.client.as_str()));
        let client_side = e.is_some_and(super::is_client_side);
        let (reason, error) = match (ctx.refused, e) {
            // A refusal names its reason; it never reached an upstream to fail at.
            (Some(reason), _) => (reason, NONE),
            (None, Some(_)) if client_side => ("client", NONE),
            (None, Some(e)) => ("-", logging::untrusted(&e.to_string()).to_string().into()),
            (None, None) => ("-", NONE),
        };
        RequestLine {
            route: self.route_name(ctx).unwrap_or("-"),
            subject,
            client,
            client_ip: ctx.client_ip.map_or(NONE, |ip| ip.to_string().into()),
            user_agent: req
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map_or(NONE, |ua| logging::untrusted(ua).to_cow()),
            reason,
            warn: status >= 500 || (e.is_some() && !client_side && ctx.refused.is_none()),
            error,
        }
    }

    /// The route's name, or the virtual server's (`[[virtual]]`) for a request to one.
    fn route_name(&self, ctx: &RequestCtx) -> Option<&str> {
        match ctx.mcp_route.and_then(|i| self.settings.routes.get(i)) {
            Some(r) => Some(&r.name),
            None => ctx
                .virtual_server
                .and_then(|i| self.settings.virtuals.get(i))
                .map(|v| v.server.name.as_str()),
        }
    }

    /// The virtual server's name (`[[virtual]]`) for a request to one.
    fn virtual_name(&self, ctx: &RequestCtx) -> Option<&str> {
        let v = self.settings.virtuals.get(ctx.virtual_server?)?;
        Some(v.server.name.as_str())
    }

    /// The audit line of one `/mcp` request, when it names something or was refused.
    fn audit(&self, req: &RequestHeader, ctx: &RequestCtx, status: u16) {
        let Some(log) = &self.edge.audit else { return };
        let target = ctx.mcp.message.as_ref().and_then(|m| m.target.as_deref());
        if target.is_none() && ctx.refused.is_none() {
            return;
        }
        let method = match &ctx.mcp.message {
            Some(m) if m.kind == Kind::Response => "response",
            Some(m) => m.method.as_str(),
            None => req.method.as_str(),
        };
        let record = AuditRecord {
            time_ms: ctx.arrived_ms,
            request_id: &ctx.request_id,
            route: self.route_name(ctx).unwrap_or(DEFAULT_ROUTE),
            virtual_server: self.virtual_name(ctx),
            member: ctx
                .member
                .and_then(|(i, _)| self.settings.routes.get(i))
                .map(|r| r.name.as_str()),
            principal: ctx.principal.as_ref().map(AuditPrincipal::from),
            method,
            name: target,
            decision: if ctx.refused.is_some() {
                AuditDecision::Denied
            } else {
                AuditDecision::Allowed
            },
            reason: ctx.refused,
            rule: ctx.rule.as_deref(),
            upstream_status: ctx.refused.is_none().then_some(status),
            duration_ms: ctx.started.elapsed().as_millis() as u64,
        };
        log.record(&record);
    }

    /// The metrics of one finished request (its `tools/call`, an upstream failure).
    fn count(&self, req: &RequestHeader, e: Option<&Error>, ctx: &mut RequestCtx, status: u16) {
        let took = ctx.started.elapsed();
        let method = metrics::method_class(&req.method);
        self.metrics
            .request(ctx.route, ctx.mcp_route, method, status, took);
        if let Some(kind) = e.and_then(metrics::upstream_failure) {
            self.metrics.upstream_failure(ctx.mcp_route, kind);
        }
        if let Some(tool) = ctx.mcp.message.as_ref().and_then(Message::tool)
            && let Some(i) = ctx.mcp_route
        {
            let known = self
                .edge
                .catalogs
                .get(i)
                .is_some_and(|c| c.tool(tool) != catalog::Lookup::Unknown)
                || self.settings.routes[i].tools.contains_key(tool)
                || self.settings.limits.tools.contains_key(tool);
            self.metrics
                .tool_call(i, tool, known, metrics::tool_decision(ctx.refused));
        }
        if let (Some(name), Some((member, outcome))) = (self.virtual_name(ctx), ctx.member) {
            let outcome = match (ctx.refused, outcome) {
                (Some(_), _) => metrics::VirtualOutcome::Refused,
                (None, outcome) => outcome.unwrap_or(metrics::VirtualOutcome::Error),
            };
            self.metrics.virtual_call(name, member, outcome);
        }
        ctx.stream = None;
    }
}
