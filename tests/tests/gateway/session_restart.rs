//! Issue 36 point 6: MCP sessions outlive a `pforte serve` restart on HTTP routes. A client
//! initializes through the gateway, the gateway is stopped (SIGTERM) and started again on the
//! same data dir (the records in `sessions.db`) or the same redis, and the same
//! `Mcp-Session-Id` keeps working; another principal still gets 404 with it. A stdio route's
//! session ends with the restart (its child is gone): 404, and a new session works.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_tests::{RedisServer, Route, Stack, rpc_answer};
use serde_json::json;

/// A stdio route `plain` on the standard-library fixture server.
fn stdio_route() -> Route {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/stdio/plain_server.py")
        .display()
        .to_string();
    Route::command("plain", &["/usr/bin/python3".to_owned(), fixture])
}

async fn a_session_outlives_a_restart_of(mut gw: Stack) {
    let alice = gw.create_token("alice").await.unwrap();
    let mallory = gw.create_token("mallory").await.unwrap();
    let mut client = gw.mcp(&alice);
    client.open().await.unwrap();
    let mut stdio = gw
        .mcp_at(&gw.route_url("plain"), &alice)
        .protocol("2025-11-25");
    stdio.open().await.unwrap();
    let session = client.session().unwrap().to_owned();
    let before = client.call_tool("whoami", json!({})).await;
    assert_eq!(before.status(), 200);

    gw.restart().await.unwrap();

    let after = client.call_tool("whoami", json!({})).await;
    assert_eq!(after.status(), 200, "the session outlived the restart");
    let answer = rpc_answer(after).await;
    assert!(answer["result"]["content"].is_array(), "{answer}");
    assert_eq!(client.session(), Some(session.as_str()));
    // Its owner is kept with it: another principal gets the answer for an unknown session.
    let stranger = gw.mcp(&mallory).in_session(Some(&session));
    assert_eq!(stranger.call_tool("whoami", json!({})).await.status(), 404);
    // And the session is still the owner's after that.
    assert_eq!(client.call_tool("whoami", json!({})).await.status(), 200);

    // The stdio session's child did not survive: 404, and the client opens a new one.
    assert_eq!(stdio.request("tools/list", json!({})).await.status(), 404);
    let mut again = gw
        .mcp_at(&gw.route_url("plain"), &alice)
        .protocol("2025-11-25");
    again.open().await.unwrap();
    assert!(!again.list_tools().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_outlives_a_restart_on_the_embedded_store() {
    a_session_outlives_a_restart_of(Stack::builder().route(stdio_route()).start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_outlives_a_restart_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    a_session_outlives_a_restart_of(
        Stack::builder()
            .redis(redis)
            .route(stdio_route())
            .start()
            .await,
    )
    .await;
}
