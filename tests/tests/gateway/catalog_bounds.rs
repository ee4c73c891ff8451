//! End to end, the bounds of the gateway's own MCP client of an upstream (issue 38 M2): an
//! upstream on 127.0.0.1 that sends its catalog's GET event stream one 256 MiB line, then
//! answers `tools/list` with 256 MiB of JSON, then behaves. The gateway drops each past its
//! cap (8 MiB) and retries with backoff, its resident memory stays within 100 MB of what it was
//! at start (`/proc/PID/status` VmRSS), and the catalog learns the behaving upstream's tools. A
//! silent stream is dropped after `stream_idle` and opened again (the catalog used directly).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, Method},
    response::{IntoResponse, Response},
    routing::any,
};
use pforte::for_tests::{Catalog, CatalogOptions};
use pforte_tests::{Limits, Stack, eventually, rpc_answer};
use serde_json::{Value, json};

/// What the upstream does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The GET stream: `data: ` and 256 MiB without a line end.
    HugeLine,
    /// `tools/list`: 256 MiB of JSON that never closes.
    HugeJson,
    /// The GET stream opens and says nothing.
    Silent,
    /// Lists `fresh_tool` (read-only), answers calls, a quiet GET stream.
    Good,
}

const HUGE: usize = 256 * 1024 * 1024;
const CHUNK: usize = 1024 * 1024;

struct Upstream {
    mode: Mutex<Mode>,
    /// GET streams opened.
    streams: AtomicUsize,
    /// `tools/list` answered with the huge body.
    huge_lists: AtomicUsize,
    /// `tools/list` answered well.
    good_lists: AtomicUsize,
    /// Bytes of huge bodies written.
    written: AtomicU64,
}

impl Upstream {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

/// A body of `prefix` then `HUGE` bytes of `A`, counted in `written` as they go.
fn huge(up: Arc<Upstream>, prefix: &'static [u8]) -> Body {
    let stream = futures::stream::unfold(0usize, move |sent| {
        let up = Arc::clone(&up);
        async move {
            if sent == 0 {
                return Some((Ok::<_, std::io::Error>(Bytes::from_static(prefix)), 1));
            }
            if sent > HUGE {
                return None;
            }
            up.written.fetch_add(CHUNK as u64, Ordering::Relaxed);
            Some((Ok(Bytes::from(vec![b'A'; CHUNK])), sent + CHUNK))
        }
    });
    Body::from_stream(stream)
}

/// A GET stream that sends one comment, then nothing, open until the client goes.
fn quiet() -> Body {
    let first = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b": hi\n\n"))]);
    Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending()))
}

fn json_answer(value: Value) -> Response {
    (
        [
            ("content-type", "application/json"),
            ("mcp-session-id", "s1"),
        ],
        value.to_string(),
    )
        .into_response()
}

async fn serve(
    State(up): State<Arc<Upstream>>,
    method: Method,
    _headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mode = up.mode();
    if method == Method::GET {
        up.streams.fetch_add(1, Ordering::SeqCst);
        let body = match mode {
            Mode::HugeLine => huge(Arc::clone(&up), b"data: "),
            _ => quiet(),
        };
        return ([("content-type", "text/event-stream")], body).into_response();
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return axum::http::StatusCode::BAD_REQUEST.into_response();
    };
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or("") {
        "initialize" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "bounds", "version": "1"}}})),
        "tools/list" if mode == Mode::HugeJson => {
            up.huge_lists.fetch_add(1, Ordering::SeqCst);
            (
                [("content-type", "application/json")],
                huge(
                    Arc::clone(&up),
                    b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[{\"name\":\"",
                ),
            )
                .into_response()
        }
        "tools/list" => {
            up.good_lists.fetch_add(1, Ordering::SeqCst);
            json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "fresh_tool", "inputSchema": {"type": "object"},
                 "annotations": {"readOnlyHint": true}}]}}))
        }
        "tools/call" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": "fresh"}], "isError": false}})),
        _ if message.get("id").is_none() => axum::http::StatusCode::ACCEPTED.into_response(),
        _ => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
    }
}

async fn upstream(mode: Mode) -> (String, Arc<Upstream>) {
    let up = Arc::new(Upstream {
        mode: Mutex::new(mode),
        streams: AtomicUsize::new(0),
        huge_lists: AtomicUsize::new(0),
        good_lists: AtomicUsize::new(0),
        written: AtomicU64::new(0),
    });
    let app = Router::new()
        .fallback(any(serve))
        .with_state(Arc::clone(&up));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, up)
}

/// The resident memory of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Waits (at most 60 s) until `done`, sampling the gateway's RSS; the largest seen.
async fn peak_until(pid: u32, mut done: impl FnMut() -> bool) -> u64 {
    let mut peak = rss_kb(pid);
    for _ in 0..600 {
        peak = peak.max(rss_kb(pid));
        if done() {
            return peak;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not done in 60 s (peak RSS {peak} kB)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_huge_catalog_answers_are_dropped_and_the_gateway_stays_small() {
    let (url, up) = upstream(Mode::HugeLine).await;
    let gw = Stack::builder()
        .upstream(&url)
        .plain_http()
        .limits(Limits::off())
        .start()
        .await;
    let pid = gw.gw.proc.child.id();
    let start = rss_kb(pid);
    const ROOM_KB: u64 = 100 * 1024;

    // One line of 256 MiB on the GET stream: dropped at the cap, opened again after a backoff.
    let peak = peak_until(pid, || up.streams.load(Ordering::SeqCst) >= 3).await;
    eprintln!("gateway RSS: {start} kB at start, peak {peak} kB on three huge SSE lines");
    assert!(
        peak < start + ROOM_KB,
        "RSS {start} kB at start, {peak} kB on a huge SSE line"
    );
    let written = up.written.load(Ordering::SeqCst);
    assert!(
        written < 3 * HUGE as u64,
        "the streams were dropped early: {written} bytes written"
    );

    // tools/list answered with 256 MiB of JSON: refused at the cap, retried with backoff.
    up.set(Mode::HugeJson);
    let peak = peak_until(pid, || up.huge_lists.load(Ordering::SeqCst) >= 3).await;
    eprintln!("gateway RSS: peak {peak} kB on three huge tools/list answers");
    assert!(
        peak < start + ROOM_KB,
        "RSS {start} kB at start, {peak} kB on a huge JSON answer"
    );

    // The upstream behaves again: the catalog learns `fresh_tool` on its own, read-only, so a
    // token with `mcp:read` alone may call it.
    up.set(Mode::Good);
    assert!(
        eventually(Duration::from_secs(30), || async {
            up.good_lists.load(Ordering::SeqCst) >= 1
        })
        .await,
        "the catalog never listed again"
    );
    let reader = gw
        .create_token_with("reader", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let mut client = gw.mcp(&reader);
    client.open().await.unwrap();
    let answer = rpc_answer(client.call_tool("fresh_tool", json!({})).await).await;
    assert_eq!(answer["result"]["content"][0]["text"], "fresh", "{answer}");
    assert!(rss_kb(pid) < start + ROOM_KB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_catalog_stream_is_dropped_after_its_idle_time_and_opened_again() {
    let (url, up) = upstream(Mode::Silent).await;
    let opts = CatalogOptions {
        stream_idle: Duration::from_millis(300),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..CatalogOptions::default()
    };
    let catalog = Arc::new(Catalog::new(url, opts).unwrap());
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let runner = tokio::spawn(Arc::clone(&catalog).run(Some(shutdown)));
    assert!(
        eventually(Duration::from_secs(10), || async {
            up.streams.load(Ordering::SeqCst) >= 3
        })
        .await,
        "the silent stream was not dropped and opened again"
    );
    assert_eq!(catalog.len(), 1, "the catalog kept its tools");
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap();
}
