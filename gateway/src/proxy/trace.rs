//! One request's trace, when `[telemetry]` is on: the server span started (at the request's
//! arrival) when the request goes upstream or ends, the upstream call's span and the
//! `traceparent` the upstream receives, and the attributes the span ends with. With telemetry
//! off every function here returns at its first line.

use std::borrow::Cow;

use opentelemetry::KeyValue;
use pingora::{Error, Result, http::RequestHeader};

use crate::{logging, telemetry::TRACEPARENT};

use super::{Gateway, RequestCtx};

/// The server span's name: the MCP method and tool (`tools/call NAME`), the method, or the
/// HTTP method and path before the body is read.
fn span_name(req: &RequestHeader, ctx: &RequestCtx) -> String {
    match ctx.mcp.message.as_ref() {
        Some(m) if !m.method.is_empty() => match m.tool() {
            Some(tool) => format!("{} {}", m.method, logging::clip(tool, 128)),
            None => logging::clip(&m.method, 128).into_owned(),
        },
        _ => format!("{} {}", req.method, logging::clip(req.uri.path(), 128)),
    }
}

/// Unix milliseconds of an instant of this request (its arrival plus the time since).
fn unix_ms(ctx: &RequestCtx, at: std::time::Instant) -> u64 {
    ctx.arrived_ms
        .saturating_add(at.saturating_duration_since(ctx.started).as_millis() as u64)
}

impl Gateway {
    /// Starts the request's server span if it has none (MCP requests only).
    fn ensure_trace(&self, req: &RequestHeader, ctx: &mut RequestCtx) {
        let Some(telemetry) = &self.edge.telemetry else {
            return;
        };
        if ctx.trace.is_some() || !ctx.mcp.route {
            return;
        }
        let route = ctx
            .mcp_route
            .and_then(|i| self.settings.routes.get(i))
            .map_or("-", |r| r.name.as_str());
        let header = req.headers.get(TRACEPARENT).and_then(|v| v.to_str().ok());
        let meta = ctx
            .mcp
            .message
            .as_ref()
            .and_then(|m| m.traceparent.as_deref());
        let attributes = vec![
            KeyValue::new("pforte.route", route.to_owned()),
            KeyValue::new("http.request.method", req.method.as_str().to_owned()),
            KeyValue::new("pforte.request_id", ctx.request_id.clone()),
        ];
        let name = span_name(req, ctx);
        ctx.trace = Some(telemetry.request(name, ctx.arrived_ms, header, meta, attributes));
    }

    /// Before the request goes upstream, when it carries a `traceparent` header: its server
    /// span, the upstream call's span, and that span's `traceparent` on the upstream request
    /// (replacing the client's). Without the header the body may still name the parent
    /// (`_meta.traceparent`), and the body is read only after the upstream has the request's
    /// header: the spans are then made when the request ends, and the upstream reads the
    /// caller's context from the body itself.
    pub(super) fn trace_upstream(
        &self,
        client_req: &RequestHeader,
        upstream_req: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some(telemetry) = &self.edge.telemetry else {
            return Ok(());
        };
        if client_req.headers.get(TRACEPARENT).is_none() {
            return Ok(());
        }
        self.ensure_trace(client_req, ctx);
        let route = ctx
            .mcp_route
            .and_then(|i| self.settings.routes.get(i))
            .map_or("-", |r| r.name.as_str());
        let Some(trace) = ctx.trace.as_mut() else {
            return Ok(());
        };
        if trace.has_upstream() {
            // A retry on another instance: the same call.
            return Ok(());
        }
        if let Some(value) = telemetry.upstream(trace, route, None) {
            upstream_req.insert_header(TRACEPARENT, value)?;
        }
        Ok(())
    }

    /// The request ended: its spans end with what it was, and what became of it.
    pub(super) fn end_trace(
        &self,
        req: &RequestHeader,
        e: Option<&Error>,
        ctx: &mut RequestCtx,
        status: u16,
    ) {
        let Some(telemetry) = &self.edge.telemetry else {
            return;
        };
        self.ensure_trace(req, ctx);
        let Some(mut trace) = ctx.trace.take() else {
            return;
        };
        trace.rename(span_name(req, ctx));
        if !trace.has_upstream()
            && let Some(sent) = ctx.upstream_sent
        {
            let route = ctx
                .mcp_route
                .and_then(|i| self.settings.routes.get(i))
                .map_or("-", |r| r.name.as_str());
            let _ = telemetry.upstream(&mut trace, route, Some(unix_ms(ctx, sent)));
        }
        let mut attributes = Vec::with_capacity(4);
        if let Some(m) = &ctx.mcp.message
            && !m.method.is_empty()
        {
            attributes.push(KeyValue::new(
                "mcp.method.name",
                logging::clip(&m.method, 128).into_owned(),
            ));
            if let Some(tool) = m.tool() {
                attributes.push(KeyValue::new(
                    "gen_ai.tool.name",
                    logging::clip(tool, 128).into_owned(),
                ));
            }
        }
        if let Some(p) = &ctx.principal {
            let kind = p.kind.as_str();
            attributes.push(KeyValue::new("pforte.principal.kind", kind));
            trace.event(
                "authenticated",
                vec![KeyValue::new("pforte.principal.kind", kind)],
            );
        }
        match ctx.refused {
            Some(reason) => {
                trace.event("refused", vec![KeyValue::new("pforte.reason", reason)]);
                attributes.push(KeyValue::new("pforte.refused", reason));
            }
            None if ctx.upstream_sent.is_some() || e.is_some() => {
                trace.event("admitted", Vec::new())
            }
            None => {}
        }
        let failed: Option<String> = e
            .filter(|e| !super::is_client_side(e))
            .map(|e| Cow::from(e.etype().as_str()).into_owned());
        let upstream_status = if ctx.upstream_sent.is_some() && failed.is_none() {
            status
        } else {
            0
        };
        trace.end(status, upstream_status, failed, attributes);
    }
}
