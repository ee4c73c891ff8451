//! OpenTelemetry traces (`[telemetry]`): the tracer provider with its OTLP/HTTP (JSON)
//! exporter on the batch processor's own thread, and one request's spans — a server span per
//! proxied request whose parent is the request's `traceparent` header or its MCP body's
//! `params._meta.traceparent`, admission outcomes as events, and the upstream call as a client
//! child span (whose context is the `traceparent` the upstream receives when the request's
//! header carried one: see `proxy/trace.rs`). Attributes carry the
//! route, methods, status, tool name and the principal's kind: never a token, subject or
//! argument value. Off (no `otlp_endpoint`): nothing here runs and no span is built.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::{
    Context, KeyValue,
    propagation::{Extractor, Injector, TextMapPropagator},
    trace::{SpanKind, Status, TraceContextExt, Tracer as _},
};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    Resource,
    propagation::TraceContextPropagator,
    trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider},
};

use crate::config;

mod otlp_http;

/// The header (and `_meta` key) of W3C trace context.
pub(crate) const TRACEPARENT: &str = "traceparent";

/// Starting the exporter failed.
#[derive(Debug, thiserror::Error)]
#[error("telemetry.otlp_endpoint: {0}")]
pub(crate) struct TelemetryError(String);

/// The process's tracer; dropping it flushes what is queued.
#[derive(Debug)]
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(2));
    }
}

impl Telemetry {
    /// The tracer for `settings`, exporting on a thread of its own.
    pub(crate) fn start(settings: &config::Telemetry) -> Result<Self, TelemetryError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(settings.traces_url.clone())
            .with_timeout(Duration::from_secs(10))
            .with_http_client(
                otlp_http::OtlpHttp::new().map_err(|e| TelemetryError(e.to_string()))?,
            )
            .build()
            .map_err(|e| TelemetryError(e.to_string()))?;
        let batch = BatchConfigBuilder::default()
            .with_scheduled_delay(Duration::from_millis(settings.export_interval_ms))
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder_empty()
                    .with_service_name(settings.service_name.clone())
                    .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                    .build(),
            )
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "pforte");
        Ok(Self {
            provider,
            tracer,
            propagator: TraceContextPropagator::new(),
        })
    }

    /// The parent a `traceparent` names (the header's, else the body's); an absent or
    /// malformed one: a new trace.
    fn parent(&self, header: Option<&str>, meta: Option<&str>) -> Context {
        for candidate in [header, meta].into_iter().flatten() {
            let cx = self.propagator.extract(&One(candidate));
            if cx.span().span_context().is_valid() {
                return cx;
            }
        }
        Context::new()
    }

    /// A request's server span, started when the request arrived (`arrived_ms`, Unix ms).
    pub(crate) fn request(
        &self,
        name: String,
        arrived_ms: u64,
        header: Option<&str>,
        meta: Option<&str>,
        attributes: Vec<KeyValue>,
    ) -> RequestTrace {
        let parent = self.parent(header, meta);
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(at(arrived_ms))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        RequestTrace {
            cx: parent.with_span(span),
            upstream: None,
        }
    }

    /// Starts the upstream call's client span under `trace` (at `since_ms`, Unix ms; `None`:
    /// now) and returns the `traceparent` value naming it, for the upstream request.
    pub(crate) fn upstream(
        &self,
        trace: &mut RequestTrace,
        route: &str,
        since_ms: Option<u64>,
    ) -> Option<String> {
        let mut builder = self
            .tracer
            .span_builder(format!("upstream {route}"))
            .with_kind(SpanKind::Client)
            .with_attributes([KeyValue::new("pforte.route", route.to_owned())]);
        if let Some(ms) = since_ms {
            builder = builder.with_start_time(at(ms));
        }
        let span = builder.start_with_context(&self.tracer, &trace.cx);
        let cx = trace.cx.with_span(span);
        let mut carrier = Carrier(None);
        self.propagator.inject_context(&cx, &mut carrier);
        trace.upstream = Some(cx);
        carrier.0
    }
}

/// One request's spans.
#[derive(Debug)]
pub(crate) struct RequestTrace {
    cx: Context,
    upstream: Option<Context>,
}

impl RequestTrace {
    /// Whether the upstream call has its span already.
    pub(crate) fn has_upstream(&self) -> bool {
        self.upstream.is_some()
    }

    /// Names the server span (once the body says what the request is).
    pub(crate) fn rename(&self, name: String) {
        self.cx.span().update_name(name);
    }

    /// An event on the server span (an admission outcome).
    pub(crate) fn event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        self.cx.span().add_event(name, attributes);
    }

    /// Ends the spans: the upstream one with the upstream's status (`0`: none came), the server
    /// one with `attributes` and the client's status; 5xx and failures are errors.
    pub(crate) fn end(
        self,
        status: u16,
        upstream_status: u16,
        failed: Option<String>,
        attributes: Vec<KeyValue>,
    ) {
        if let Some(cx) = self.upstream {
            let span = cx.span();
            if upstream_status > 0 {
                span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(upstream_status),
                ));
            }
            match (&failed, upstream_status) {
                (Some(why), _) => span.set_status(Status::error(why.clone())),
                (None, 500..) => span.set_status(Status::error("upstream 5xx")),
                (None, 0) => {}
                (None, _) => span.set_status(Status::Ok),
            }
            span.end();
        }
        let span = self.cx.span();
        span.set_attributes(attributes);
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 || failed.is_some() {
            span.set_status(Status::error(failed.unwrap_or_else(|| format!("{status}"))));
        }
        span.end();
    }
}

/// Unix milliseconds as a span timestamp.
fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A carrier holding one `traceparent` value.
struct One<'a>(&'a str);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT).then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

/// Receives the `traceparent` a propagator writes (`tracestate` is not passed on).
struct Carrier(Option<String>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = Some(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn off_line() -> Telemetry {
        // Nothing listens on port 9: spans are dropped after the export fails.
        let settings = config::Telemetry {
            traces_url: "http://127.0.0.1:9/v1/traces".to_owned(),
            service_name: "test".to_owned(),
            export_interval_ms: 60_000,
        };
        match Telemetry::start(&settings) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn the_header_parent_wins_the_body_one_follows_and_a_bad_one_starts_a_trace() {
        let t = off_line();
        let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let meta = "00-11111111111111111111111111111111-2222222222222222-01";
        let trace_of = |cx: &Context| cx.span().span_context().trace_id().to_string();
        assert_eq!(
            trace_of(&t.parent(Some(header), Some(meta))),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(
            trace_of(&t.parent(None, Some(meta))),
            "11111111111111111111111111111111"
        );
        assert_eq!(
            trace_of(&t.parent(Some("00-zz-bad"), Some(meta))),
            "11111111111111111111111111111111"
        );
        assert!(
            !t.parent(Some("garbage"), None)
                .span()
                .span_context()
                .is_valid()
        );
    }

    #[test]
    fn the_upstream_traceparent_names_the_client_span_in_the_callers_trace() {
        let t = off_line();
        let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let mut trace = t.request("POST /mcp".to_owned(), 0, Some(header), None, Vec::new());
        let sent = t.upstream(&mut trace, "mcp", None);
        let sent = sent.unwrap_or_default();
        assert!(
            sent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{sent}"
        );
        assert!(
            !sent.contains("b7ad6b7169203331"),
            "a span of its own: {sent}"
        );
        trace.end(200, 200, None, Vec::new());
    }
}
