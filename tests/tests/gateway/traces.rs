//! OpenTelemetry traces end to end: the gateway exports to an OTLP/HTTP receiver this test
//! runs on 127.0.0.1; a `tools/call` with a `traceparent` header and one with
//! `params._meta.traceparent` arrive as spans in the caller's trace, under the caller's span,
//! with the route, status and MCP method, and without the bearer token or an argument value;
//! the upstream receives a `traceparent` naming the gateway's upstream span (header case).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use pforte_tests::{Route, Stack};
use serde_json::{Value, json};

/// What the receiver got: each POST /v1/traces body as text.
type Bodies = Arc<Mutex<Vec<String>>>;

/// An OTLP/HTTP receiver (JSON) on 127.0.0.1: its base URL and what it recorded.
async fn otlp_receiver() -> (String, Bodies) {
    use axum::{body::Bytes, routing::post};
    let bodies: Bodies = Arc::default();
    let seen = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&body).into_owned());
                ([("content-type", "application/json")], "{}")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), bodies)
}

/// An MCP-shaped upstream that records each request's `traceparent` and answers every
/// JSON-RPC request with an empty result.
async fn recording_upstream() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    use axum::{Json, extract::Request};
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |req: Request| {
        let record = record.clone();
        async move {
            let traceparent = req
                .headers()
                .get("traceparent")
                .map(|v| v.to_str().unwrap().to_owned());
            record.lock().unwrap().push(traceparent);
            let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                .await
                .unwrap();
            let id = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(Value::Null);
            Json(json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}}))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), seen)
}

/// Every span in the recorded bodies.
fn spans(bodies: &[String]) -> Vec<Value> {
    bodies
        .iter()
        .filter_map(|b| serde_json::from_str::<Value>(b).ok())
        .flat_map(|doc| doc["resourceSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|rs| rs["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|ss| ss["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// A span attribute's value as text (strings, and integers however they are encoded).
fn attribute(span: &Value, key: &str) -> Option<String> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| match &a["value"] {
            v if v["stringValue"].is_string() => v["stringValue"].as_str().unwrap().to_owned(),
            v if !v["intValue"].is_null() => match &v["intValue"] {
                Value::String(s) => s.clone(),
                n => n.to_string(),
            },
            v => v.to_string(),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_arrive_in_the_callers_trace_with_attributes_and_no_secrets() {
    let (receiver, bodies) = otlp_receiver().await;
    let (upstream, upstream_seen) = recording_upstream().await;
    let gw = Stack::builder()
        .route(Route::url("rec", &upstream))
        .otlp_endpoint(&receiver)
        .start()
        .await;
    let token = gw.create_token("tracer").await.unwrap();
    let url = format!("{}/rec/mcp", gw.base);
    let secret_arg = "ARGUMENT-VALUE-7f3a";

    // 1. The parent in the traceparent header.
    let header_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let header_parent = "00f067aa0ba902b7";
    let call = |meta: Option<&str>| {
        let mut params = json!({"name": "lookup", "arguments": {"query": secret_arg}});
        if let Some(tp) = meta {
            params["_meta"] = json!({"traceparent": tp});
        }
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    };
    let resp = gw
        .mcp_at(&url, &token)
        .header(
            "traceparent",
            &format!("00-{header_trace}-{header_parent}-01"),
        )
        .post(&call(None))
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    // 2. The parent in params._meta.traceparent.
    let meta_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let meta_parent = "10f067aa0ba902b8";
    let resp = gw
        .mcp_at(&url, &token)
        .post(&call(Some(&format!("00-{meta_trace}-{meta_parent}-01"))))
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    // The spans arrive (exported every 100 ms).
    let deadline = Instant::now() + Duration::from_secs(15);
    let found = loop {
        let recorded = spans(&bodies.lock().unwrap());
        let server = |trace: &str| {
            recorded
                .iter()
                .find(|s| s["traceId"] == trace && s["name"] == "tools/call lookup")
                .cloned()
        };
        if let (Some(a), Some(b)) = (server(header_trace), server(meta_trace)) {
            break Some((a, b, recorded));
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (by_header, by_meta, recorded) =
        found.unwrap_or_else(|| panic!("no server spans in {:?}", bodies.lock().unwrap()));

    for (span, parent) in [(&by_header, header_parent), (&by_meta, meta_parent)] {
        assert_eq!(span["parentSpanId"], parent, "{span}");
        assert_eq!(
            attribute(span, "pforte.route").as_deref(),
            Some("rec"),
            "{span}"
        );
        assert_eq!(
            attribute(span, "mcp.method.name").as_deref(),
            Some("tools/call")
        );
        assert_eq!(
            attribute(span, "gen_ai.tool.name").as_deref(),
            Some("lookup")
        );
        assert_eq!(
            attribute(span, "http.response.status_code").as_deref(),
            Some("200")
        );
        assert_eq!(
            attribute(span, "pforte.principal.kind").as_deref(),
            Some("static")
        );
    }

    // The upstream call is a child span of each; the upstream got the traceparent of the one
    // the header named (with only `_meta`, the gateway has sent the upstream the request's
    // header before it reads the body: the upstream reads `_meta` from the body itself).
    let child_of = |server: &Value| {
        recorded
            .iter()
            .find(|s| s["traceId"] == server["traceId"] && s["parentSpanId"] == server["spanId"])
            .cloned()
            .unwrap_or_else(|| panic!("no upstream span under {server}"))
    };
    let child = child_of(&by_header);
    assert_eq!(child["name"], "upstream rec");
    assert_eq!(child_of(&by_meta)["name"], "upstream rec");
    let sent: Vec<String> = upstream_seen
        .lock()
        .unwrap()
        .iter()
        .flatten()
        .cloned()
        .collect();
    let expected = format!("00-{header_trace}-{}-01", child["spanId"].as_str().unwrap());
    assert_eq!(
        sent,
        [expected],
        "the client's own span id is not passed on"
    );

    // No secret anywhere in what the receiver recorded.
    let raw = bodies.lock().unwrap().join("\n");
    assert!(
        !raw.contains(&token),
        "the bearer token leaked into a trace"
    );
    assert!(
        !raw.contains(secret_arg),
        "an argument value leaked into a trace"
    );
    assert!(!raw.contains("operator"), "the subject leaked into a trace");

    println!(
        "a server span as the OTLP receiver recorded it:\n{}",
        serde_json::to_string_pretty(&by_header).unwrap()
    );
}
