//! Issue 42 points 4 and 6, a virtual server `/team/mcp` over mcp-service (route `mcp`) and a
//! per-user route (`search`: tests/src's echo upstream, which takes each person's own
//! `X-Api-Key`): a person who has not connected `search` sees, in place of its tools, its
//! connect tool `search_connect` — as the route's stand-in session shows `connect` — and every
//! call of it or of one of its tools gets the route's connect prompt (a tool error with the
//! single-use link; `-32042` for a client that declared URL elicitation) while `mcp`'s tools
//! work in the same session; once they enter their key through the link, `search`'s tools are
//! listed and called with their key. `/metrics` counts each call by virtual server, member and
//! outcome (`pforte_virtual_calls_total`), and each call's audit line names both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{
    EchoUpstream, Limits, McpClient, Prompt, Route, Stack, UpstreamAuth,
    connect::{enter_secret, metric_sum, metrics_text},
    oauth::Browser,
    rpc_answer, write_vault_key,
};
use serde_json::{Value, json};

/// The virtual servers: both members under their default prefixes, listed (`team`) and in
/// search mode (`found`).
const TEAM: &str = "[[virtual]]\nname = \"team\"\ntitle = \"Team tools\"\nmembers = [\"mcp\", \"search\"]\n\
    [[virtual]]\nname = \"found\"\nmembers = [\"mcp\", \"search\"]\nsearch = true\n";

/// A plain-HTTP gateway over mcp-service (`mcp`) and `search` (`echo`, each user's
/// `X-Api-Key`), restarted with [`TEAM`] appended to its configuration.
pub(super) async fn start(echo: &EchoUpstream, dir: &std::path::Path) -> Stack {
    let key = write_vault_key(dir).unwrap();
    let mut gw = Stack::builder()
        .plain_http()
        .limits(Limits::off())
        .vault_key(&key)
        .route(
            Route::url("search", &echo.mcp_url())
                .title("Search")
                .upstream_auth(UpstreamAuth::header("X-Api-Key").label("Search API key")),
        )
        .start()
        .await;
    gw.restart_with(TEAM).await.unwrap();
    gw
}

/// The names `client` lists, once `done` holds for them (at most 100 lists, 200 ms apart).
async fn listed_when(client: &McpClient, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut last = Vec::new();
    for _ in 0..100 {
        last = client
            .list_tools()
            .await
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("never listed as wanted: {last:?}");
}

/// `tools/call TOOL {}` on `client`: the JSON-RPC answer (panics unless 200).
async fn call(client: &McpClient, tool: &str) -> Value {
    call_with(client, tool, json!({})).await
}

/// `tools/call TOOL ARGS` on `client`: the JSON-RPC answer (panics unless 200).
async fn call_with(client: &McpClient, tool: &str, args: Value) -> Value {
    let resp = client.call_tool(tool, args).await;
    assert_eq!(resp.status(), 200, "tools/call {tool}");
    rpc_answer(resp).await
}

/// The connect prompt in `answer` (panics when it is something else).
fn prompt(answer: &Value) -> Prompt {
    Prompt::of(answer).unwrap_or_else(|| panic!("not a connect prompt: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_not_connected_asks_for_itself_only_and_works_once_connected() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&echo, dir.path()).await;
    let hana = gw.create_token("hana").await.unwrap();
    let team = gw.route_url("team");

    // Not connected to `search`: its connect tool in place of its tools, mcp-service's 13.
    let mut client = gw.mcp_at(&team, &hana);
    client.open().await.unwrap();
    let names = listed_when(&client, |n| n.len() == 14).await;
    assert!(names.contains(&"search_connect".to_owned()), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("mcp_") || n == "search_connect"),
        "{names:?}"
    );
    let listed = client.list_tools().await;
    let connect = listed
        .iter()
        .find(|t| t["name"] == "search_connect")
        .unwrap();
    assert_eq!(connect["title"], "Connect Search", "{connect}");
    assert!(
        connect["description"]
            .as_str()
            .unwrap()
            .contains("/connect/search?link="),
        "{connect}"
    );

    // Its call gets the route's prompt, a tool error with the link; mcp's tools work.
    let asked = prompt(&call(&client, "search_connect").await);
    assert!(matches!(asked, Prompt::ToolError { .. }), "{asked:?}");
    assert!(
        asked.text().starts_with("Search needs your account"),
        "{asked:?}"
    );
    let link = asked.link().clone();
    assert_eq!(link.path(), "/connect/search");
    let whoami = call(&client, "mcp_whoami").await;
    assert_eq!(whoami["result"]["isError"], false, "{whoami}");
    // A client that declared URL elicitation gets -32042 with the same link.
    let mut eliciting = gw
        .mcp_at(&team, &hana)
        .capabilities(json!({"elicitation": {"url": {}}}));
    eliciting.open().await.unwrap();
    let elicited = prompt(&call(&eliciting, "search_connect").await);
    assert!(
        matches!(elicited, Prompt::Elicitation { .. }),
        "{elicited:?}"
    );
    assert_eq!(elicited.link(), &link);
    assert!(
        echo.seen()
            .iter()
            .all(|s| s.rpc_method.as_deref() != Some("tools/call")),
        "nothing reached the member"
    );

    // Connected through the link: search's tools listed and called with hana's key, in the
    // same session.
    enter_secret(&Browser::new(None), &link, &[("x-api-key", "key-of-hana")])
        .await
        .unwrap();
    let names = listed_when(&client, |n| n.contains(&"search_echo".to_owned())).await;
    assert!(!names.contains(&"search_connect".to_owned()), "{names:?}");
    assert_eq!(names.len(), 15, "{names:?}");
    let echoed = call(&client, "search_echo").await;
    assert_eq!(echoed["result"]["isError"], false, "{echoed}");
    let last = echo
        .seen()
        .into_iter()
        .rev()
        .find(|s| s.rpc_method.as_deref() == Some("tools/call"))
        .unwrap();
    assert_eq!(last.header("x-api-key"), Some("key-of-hana"));

    // Another person, not connected: the member's tools are known now, and still not theirs —
    // listed as its connect tool, a call of one of them gets the prompt.
    let ivo = gw.create_token("ivo").await.unwrap();
    let mut other = gw.mcp_at(&team, &ivo);
    other.open().await.unwrap();
    let names = listed_when(&other, |n| n.len() == 14).await;
    assert!(
        names.contains(&"search_connect".to_owned()) && !names.contains(&"search_echo".to_owned()),
        "{names:?}"
    );
    let theirs = prompt(&call(&other, "search_echo").await);
    assert!(matches!(theirs, Prompt::ToolError { .. }), "{theirs:?}");
    assert_ne!(theirs.link(), &link, "a link of their own");
    let calls = echo
        .seen()
        .iter()
        .filter(|s| s.rpc_method.as_deref() == Some("tools/call"))
        .count();
    assert_eq!(calls, 1, "only hana's call reached the member");

    // Search mode: `find_tools` finds none of the member's tools for a person not connected
    // to it, and finds them for one who is.
    let found = gw.route_url("found");
    let find = |client: McpClient| async move {
        let mut client = client;
        client.open().await.unwrap();
        let answer = call_with(&client, "find_tools", json!({"query": "echo"})).await;
        answer.to_string()
    };
    let theirs = find(gw.mcp_at(&found, &ivo)).await;
    assert!(!theirs.contains("search_echo"), "{theirs}");
    let hanas = find(gw.mcp_at(&found, &hana)).await;
    assert!(hanas.contains("search_echo"), "{hanas}");

    // A refused call (a read-only token, a writing tool): counted, audited, never sent.
    let ro = gw
        .create_token_with("ro", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let mut reader = gw.mcp_at(&team, &ro);
    reader.open().await.unwrap();
    let denied = reader
        .call_tool("mcp_werkbaum_write", json!({"name": "x"}))
        .await;
    assert_eq!(denied.status(), 403);

    // /metrics: by virtual server, member and outcome.
    let text = metrics_text(&gw.http(), &gw.base).await.unwrap();
    let count = |member: &str, outcome: &str| {
        metric_sum(
            &text,
            "pforte_virtual_calls_total",
            &[
                "virtual=\"team\"",
                &format!("member=\"{member}\""),
                &format!("outcome=\"{outcome}\""),
            ],
        )
    };
    assert_eq!(count("search", "connect"), 3.0, "{text}");
    assert_eq!(count("search", "ok"), 1.0, "{text}");
    assert_eq!(count("mcp", "ok"), 1.0, "{text}");
    assert_eq!(count("mcp", "refused"), 1.0, "{text}");

    // The audit lines name the virtual server and the member.
    let audit = |name: &'static str| {
        let path = gw.data_dir().join("audit.jsonl");
        move || {
            let path = path.clone();
            async move {
                std::fs::read_to_string(&path)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|l| l["name"] == name)
                    .collect::<Vec<_>>()
            }
        }
    };
    for (name, member, decision) in [
        ("search_echo", "search", "allowed"),
        ("mcp_whoami", "mcp", "allowed"),
        ("mcp_werkbaum_write", "mcp", "denied"),
    ] {
        let lines = wait_lines(audit(name)).await;
        let line = lines.last().unwrap();
        assert_eq!(line["route"], "team", "{line}");
        assert_eq!(line["virtual"], "team", "{line}");
        assert_eq!(line["member"], member, "{line}");
        assert_eq!(line["decision"], decision, "{line}");
    }
    // A call to no member (an unknown name) names the virtual server and no member.
    let unknown = call(&client, "search_nope").await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let lines = wait_lines(audit("search_nope")).await;
    assert_eq!(lines[0]["virtual"], "team");
    assert_eq!(lines[0]["member"], Value::Null);
}

/// The lines `read` returns once there is one (within 10 s).
async fn wait_lines<F, Fut>(read: F) -> Vec<Value>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Vec<Value>>,
{
    for _ in 0..100 {
        let lines = read().await;
        if !lines.is_empty() {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no audit line");
}
