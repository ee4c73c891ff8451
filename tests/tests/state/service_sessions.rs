//! What an idle MCP session costs in mcp-service (issue 27 point 5): sessions with an open
//! `GET /mcp` stream are light, and their memory goes back to the kernel once they end. Not a
//! timed test: it compares the service's resident memory before, during and after, with wide
//! margins (the figure for 1,000 sessions lives in docs/performance.md, from `pforte-soak`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{McpService, delete_session, eventually, open_session_stream, rss_kib};

/// Sessions held at once.
const SESSIONS: u64 = 200;
/// Bound on one idle session with its stream (KiB of RSS). With the service's own session
/// manager (`mcp-service/src/sessions.rs`) a release build measures about 42 KiB and a debug
/// build 42–43 KiB; rmcp's `LocalSessionManager` cost about 85 KiB, and before the tool
/// catalog was shared a session cost about 600 KiB, both above it.
const PER_SESSION_KIB: u64 = 80;

#[tokio::test]
async fn idle_sessions_are_light_and_give_their_memory_back() {
    let svc = McpService::start(&[]).unwrap();
    let pid = svc.proc.child.id();
    let url = svc.url();
    let http = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .build()
        .unwrap();
    // One session first: what every session shares (engine pool, catalog, store) exists.
    let (first, stream) = open_session_stream(&http, &url, None).await.unwrap();
    drop(stream);
    delete_session(&http, &url, None, &first).await.unwrap();
    let idle = rss_kib(pid).unwrap();

    let mut held = Vec::new();
    for _ in 0..SESSIONS {
        held.push(open_session_stream(&http, &url, None).await.unwrap());
    }
    let open = rss_kib(pid).unwrap();
    let per_session = open.saturating_sub(idle) / SESSIONS;
    eprintln!(
        "mcp-service RSS: idle {idle} KiB, {SESSIONS} sessions open {open} KiB ({per_session} KiB each)"
    );
    assert!(
        per_session <= PER_SESSION_KIB,
        "{SESSIONS} idle sessions cost {per_session} KiB each (idle {idle} KiB, open {open} KiB)"
    );

    // End them: the streams close, then DELETE each session.
    let sessions: Vec<String> = held.into_iter().map(|(id, _stream)| id).collect();
    for id in &sessions {
        delete_session(&http, &url, None, id).await.unwrap();
    }
    // Gone for the protocol too: a request in an ended session is refused.
    let gone = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", pforte_tests::ACCEPT_BOTH)
        .header("mcp-session-id", &sessions[0])
        .header("mcp-protocol-version", pforte_tests::PROTOCOL_VERSION)
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404, "an ended session is unknown");
    // The allocator returns freed pages after its decay time (10 s): at least three quarters
    // of what the sessions took goes back.
    let back = open.saturating_sub(idle) / 4 + idle;
    let returned = eventually(Duration::from_secs(60), || {
        let now = rss_kib(pid).unwrap_or(u64::MAX);
        async move { now <= back }
    })
    .await;
    assert!(
        returned,
        "after DELETE the service still holds {} KiB (idle {idle} KiB, open {open} KiB)",
        rss_kib(pid).unwrap()
    );
}
