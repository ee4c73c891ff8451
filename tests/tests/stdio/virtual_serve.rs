//! Issue 42, a virtual server served at `/team/mcp` over mcp-service (route `mcp`) and a stdio
//! route (`plain`, tests/fixtures/stdio/plain_server.py, which logs every call it gets): the
//! official MCP Python SDK (tests/python/virtual_client.py) lists the merged, prefixed tools,
//! calls one tool of each member — each call reaches its member (mcp-service's `whoami` answers
//! with the caller; the stdio server's call log grows by exactly that call) — and an unknown
//! name gets a JSON-RPC error before any member is touched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{Route, Stack, eventually, python_sdk_or_skip, run_python_json};
use serde_json::{Value, json};

use super::stdio_routes::fixture;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_every_members_tools_through_one_virtual_server() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    pforte_tests::open_to_children(&dir.path().join("log"));
    let calls = dir.path().join("log").join("calls");
    let mut gw = Stack::builder()
        .plain_http()
        .route(
            Route::command(
                "plain",
                &[
                    "/usr/bin/python3".to_owned(),
                    fixture("plain_server.py").display().to_string(),
                ],
            )
            .env("PLAIN_CALL_LOG", &calls.display().to_string()),
        )
        .start()
        .await;
    let base = std::fs::read_to_string(gw.config_path()).unwrap();
    let team =
        "\n[[virtual]]\nname = \"team\"\ntitle = \"Team tools\"\nmembers = [\"mcp\", \"plain\"]\n";
    std::fs::write(gw.config_path(), format!("{base}{team}")).unwrap();
    gw.restart().await.unwrap();
    let token = gw.create_token("alice").await.unwrap();
    let url = gw.route_url("team");

    // Both members' catalogs are loaded: 13 of mcp-service, 6 of the stdio server.
    let mut client = gw.mcp_at(&url, &token);
    client.open().await.unwrap();
    let loaded = eventually(Duration::from_secs(20), || async {
        if client.list_tools().await.len() == 19 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        false
    })
    .await;
    assert!(loaded, "{:?}", client.tool_names().await);
    let logged = || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(logged().is_empty(), "listing called nothing");

    let wanted = json!({"mcp_whoami": {}, "plain_echo": {"text": "through team"}});
    let seen = run_python_json(
        &python,
        &pforte_tests::target_dir()
            .join("..")
            .join("tests/python/virtual_client.py"),
        &[&url, &token, &wanted.to_string()],
        "",
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(seen["server"], "team", "{seen}");
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(tools.len(), 19, "{seen}");
    let mut sorted = tools.clone();
    sorted.sort_unstable();
    assert_eq!(tools, sorted, "a stable order, by shown name: {seen}");
    assert!(
        tools
            .iter()
            .all(|t| t.starts_with("mcp_") || t.starts_with("plain_")),
        "{seen}"
    );
    for t in [
        "mcp_whoami",
        "mcp_werkbaum_read",
        "plain_echo",
        "plain_whoami",
    ] {
        assert!(tools.contains(&t), "{t}: {seen}");
    }

    let echo = &seen["calls"]["plain_echo"];
    assert_eq!(echo["error"], false, "{seen}");
    assert_eq!(echo["text"], "through team", "{seen}");
    let whoami = &seen["calls"]["mcp_whoami"];
    assert_eq!(whoami["error"], false, "{seen}");
    assert!(
        whoami["text"].as_str().unwrap().contains("operator"),
        "mcp-service saw the caller: {seen}"
    );
    // The stdio member got exactly the one call meant for it, under its own name; the unknown
    // name reached no member.
    assert_eq!(logged(), ["echo"], "{seen}");
    let unknown = seen["unknown"].as_str().unwrap();
    assert!(unknown.contains("Unknown tool: no_such_tool"), "{seen}");

    // By hand: the unknown name is a JSON-RPC error (-32602), and still no member is touched.
    let answer = pforte_tests::rpc_answer(client.call_tool("plain_nope", json!({})).await).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(logged(), ["echo"]);
    let answer = pforte_tests::rpc_answer(
        client
            .call_tool("plain_echo", json!({"text": "again"}))
            .await,
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "again", "{answer}");
    assert_eq!(logged(), ["echo", "echo"]);
    assert_eq!(client.delete().await.status(), 200);
}
