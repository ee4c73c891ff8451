//! The gateway's tool catalog declares the client capabilities at `initialize` (issue 36,
//! point 7): the npm everything server lists `get-roots-list` (annotated `readOnlyHint`) only to
//! clients that declared `roots`, and through the gateway an `mcp:read` token is admitted to it
//! — the catalog knows it as read-only — while a writing tool the server lists only to clients
//! that declared sampling is refused 403.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_tests::{
    EverythingServer, Limits, McpClient, Stack, conformance::tools, http_client, rpc_answer,
};
use serde_json::{Value, json};

/// The tool names `tools/list` gives a client of `url` that declared `capabilities`.
async fn listed(url: &str, capabilities: Value) -> Vec<String> {
    let mut client = McpClient::new(http_client(None), url).capabilities(capabilities);
    client.open().await.unwrap();
    client.tool_names().await.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_listed_only_to_clients_with_roots_is_in_the_catalog() {
    let Some((node, packages)) = tools() else {
        return;
    };
    let everything = EverythingServer::start(&node, &packages).unwrap();
    // Directly: the tool is there for a client with roots only.
    let bare = listed(&everything.url(), json!({})).await;
    assert!(!bare.iter().any(|t| t == "get-roots-list"), "{bare:?}");
    let with_roots = listed(&everything.url(), json!({"roots": {}})).await;
    assert!(
        with_roots.iter().any(|t| t == "get-roots-list"),
        "{with_roots:?}"
    );

    let gw = Stack::builder()
        .upstream(&everything.url())
        .plain_http()
        .limits(Limits::off())
        .start()
        .await;
    let reader = gw
        .create_scoped_token("reader", &["mcp:read"])
        .await
        .unwrap();
    let mut client = gw.mcp(&reader);
    client.open().await.unwrap();
    // Admitted (the catalog knows it reads; a tool it did not know would need mcp:write):
    // the server then answers for this session, which did not declare roots.
    let roots = client.call_tool("get-roots-list", json!({})).await;
    assert_eq!(roots.status(), 200, "get-roots-list with mcp:read");
    let answer = rpc_answer(roots).await;
    assert!(
        answer.get("result").is_some() || answer.get("error").is_some(),
        "{answer}"
    );
    // A writing tool listed only to clients with sampling: known as writing, refused.
    let sampling = client
        .call_tool("trigger-sampling-request", json!({}))
        .await;
    assert_eq!(
        sampling.status(),
        403,
        "trigger-sampling-request with mcp:read"
    );
}
