//! Issue 42, a virtual server served at `/team/mcp` over mcp-service (route `mcp`) and a stdio
//! route (`plain`, tests/fixtures/stdio/plain_server.py, which logs every call it gets): the
//! official MCP Python SDK (tests/python/virtual_client.py) lists the merged, prefixed tools,
//! calls one tool of each member — each call reaches its member (mcp-service's `whoami` answers
//! with the caller; the stdio server's call log grows by exactly that call) — and an unknown
//! name gets a JSON-RPC error before any member is touched. Also: the member routes' rules decide
//! (a token for one member route is refused, a read-only token sees and calls only reading tools),
//! search mode calls through `call_tool`, a request without a session reaches its member, and an
//! OAuth token is for the virtual server's resource alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use pforte_tests::{
    Budget, Limits, McpClient, OAuth, Route, Stack, StackBuilder,
    connect::{metric_sum, metrics_text},
    eventually, header_server,
    oauth::access_token_at,
    python_sdk_or_skip, rpc_answer, run_python_json,
};
use serde_json::{Value, json};

use super::stdio_routes::fixture;

/// The virtual server of the first test: default prefixes over both members.
pub(super) const TEAM: &str =
    "[[virtual]]\nname = \"team\"\ntitle = \"Team tools\"\nmembers = [\"mcp\", \"plain\"]\n";

/// A gateway over mcp-service (`mcp`) and the stdio route `plain` (its calls logged to the
/// returned file), restarted with `virtuals` appended to its configuration.
async fn start(virtuals: &str) -> (Stack, tempfile::TempDir, PathBuf) {
    start_with(Stack::builder().plain_http(), virtuals).await
}

/// [`start`] from `builder`.
pub(super) async fn start_with(
    builder: StackBuilder,
    virtuals: &str,
) -> (Stack, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    pforte_tests::open_to_children(&dir.path().join("log"));
    let calls = dir.path().join("log").join("calls");
    let mut gw = builder
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
    gw.restart_with(virtuals).await.unwrap();
    (gw, dir, calls)
}

/// The tool names the stdio server logged, one per call it got.
pub(super) fn logged(calls: &Path) -> Vec<String> {
    std::fs::read_to_string(calls)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Lists `client`'s tools until `n` are listed (both members' catalogs loaded).
pub(super) async fn until_listed(client: &McpClient, n: usize) {
    let loaded = eventually(Duration::from_secs(20), || async {
        if client.list_tools().await.len() == n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        false
    })
    .await;
    assert!(loaded, "{:?}", client.tool_names().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_every_members_tools_through_one_virtual_server() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let (gw, _dir, calls) = start(TEAM).await;
    let token = gw.create_token("alice").await.unwrap();
    let url = gw.route_url("team");

    // Both members' catalogs are loaded: 13 of mcp-service, 6 of the stdio server.
    let mut client = gw.mcp_at(&url, &token);
    client.open().await.unwrap();
    until_listed(&client, 19).await;
    let logged = || logged(&calls);
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
    let answer = rpc_answer(client.call_tool("plain_nope", json!({})).await).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(logged(), ["echo"]);
    let answer = rpc_answer(
        client
            .call_tool("plain_echo", json!({"text": "again"}))
            .await,
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "again", "{answer}");
    assert_eq!(logged(), ["echo", "echo"]);
    assert_eq!(client.delete().await.status(), 200);
}

/// `/find/mcp`: search mode over both members, `mcp_whoami` pinned.
const FIND: &str = "[[virtual]]\nname = \"find\"\nmembers = [\"mcp\", \"plain\"]\nsearch = true\npinned = [\"mcp_whoami\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_rules_decide_and_search_mode_calls_through_call_tool() {
    let (gw, _dir, calls) = start(&format!("{TEAM}\n{FIND}")).await;
    let token = gw.create_token("alice").await.unwrap();
    let team = gw.route_url("team");
    let mut client = gw.mcp_at(&team, &token);
    client.open().await.unwrap();
    until_listed(&client, 19).await;

    // A token for the route `mcp` alone does not open the virtual server over it.
    let narrow = gw
        .create_token_with("ci", &["--route", "mcp"])
        .await
        .unwrap();
    let refused = gw.mcp_at(&team, &narrow).initialize().await;
    assert_eq!(refused.status(), 403);
    // `pforte token create --route team`: a token for the virtual server alone opens it, and
    // none of its member routes.
    let only_team = gw
        .create_token_with("team-only", &["--route", "team"])
        .await
        .unwrap();
    let mut on_team = gw.mcp_at(&team, &only_team);
    on_team.open().await.unwrap();
    assert_eq!(on_team.list_tools().await.len(), 19);
    let on_member = gw.mcp_at(&gw.mcp_url(), &only_team).initialize().await;
    assert_eq!(on_member.status(), 403);

    // A read-only token sees only tools that only read (the stdio server's are not annotated:
    // they write) and is refused a writing tool, which never reaches its member.
    let ro = gw
        .create_token_with("ro", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let mut reader = gw.mcp_at(&team, &ro);
    reader.open().await.unwrap();
    let listed = reader.list_tools().await;
    assert!(!listed.is_empty());
    for tool in &listed {
        assert!(tool["name"].as_str().unwrap().starts_with("mcp_"), "{tool}");
        assert_eq!(tool["annotations"]["readOnlyHint"], true, "{tool}");
    }
    let denied = reader.call_tool("plain_echo", json!({"text": "no"})).await;
    assert_eq!(denied.status(), 403);
    assert!(logged(&calls).is_empty());

    // Search mode: the search tools and the pinned one; a found tool called through call_tool.
    let find = gw.route_url("find");
    let mut searcher = gw.mcp_at(&find, &token);
    searcher.open().await.unwrap();
    let names: Vec<String> = searcher
        .list_tools()
        .await
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["find_tools", "call_tool", "mcp_whoami"]);
    let found = rpc_answer(
        searcher
            .call_tool("find_tools", json!({"query": "echo"}))
            .await,
    )
    .await;
    assert_eq!(
        found["result"]["structuredContent"]["tools"][0]["name"], "plain_echo",
        "{found}"
    );
    let args = json!({"name": "plain_echo", "arguments": {"text": "found"}});
    let called = rpc_answer(searcher.call_tool("call_tool", args).await).await;
    assert_eq!(called["result"]["content"][0]["text"], "found", "{called}");
    assert_eq!(logged(&calls), ["echo"]);

    // A request without a session reaches its member on a member session of its own.
    let bare = gw.mcp_at(&find, &token);
    let answer = rpc_answer(bare.call_tool("plain_echo", json!({"text": "bare"})).await).await;
    assert_eq!(answer["result"]["content"][0]["text"], "bare", "{answer}");
    assert_eq!(logged(&calls), ["echo", "echo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_token_for_the_virtual_server_opens_it_and_no_member_route() {
    let (gw, _dir, calls) = start_with(Stack::builder().oauth(OAuth::default()), TEAM).await;
    gw.add_user("dora", "dora-password-1").unwrap();
    let team = gw.route_url("team");
    let scope = "mcp:read mcp:write";
    let token = access_token_at(&team, gw.ca_pem(), "dora", "dora-password-1", scope)
        .await
        .unwrap();
    let mut client = gw.mcp_at(&team, &token);
    client.open().await.unwrap();
    until_listed(&client, 19).await;
    let answer = rpc_answer(
        client
            .call_tool("plain_echo", json!({"text": "dora"}))
            .await,
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "dora", "{answer}");
    assert_eq!(logged(&calls), ["echo"]);

    // The virtual server's token is for its resource only, and a member route's is not for it.
    let on_member = gw.mcp_at(&gw.mcp_url(), &token).initialize().await;
    assert_eq!(on_member.status(), 401);
    let member = access_token_at(&gw.mcp_url(), gw.ca_pem(), "dora", "dora-password-1", scope)
        .await
        .unwrap();
    let on_team = gw.mcp_at(&team, &member).initialize().await;
    assert_eq!(on_team.status(), 401);
    assert_eq!(logged(&calls), ["echo"]);
}

/// Item 4 of the slice: a virtual server's requests take the route admission's own steps — a
/// CORS preflight answered without credentials, a foreign `Origin` refused, a declared body over
/// `max_body_bytes` refused before it is read, `Mcp-Method` / `Mcp-Name` /
/// `MCP-Protocol-Version` checked (one line each, known, saying what the body says, the name
/// being the one the virtual server shows), and a client IP that spent its unauthenticated
/// budget refused before any credential lookup — and no refused call reaches a member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_server_takes_the_route_admissions_steps() {
    let builder = Stack::builder()
        .plain_http()
        .limits(Limits::default().unauthenticated(Budget::new(20, 60, 20)));
    let (gw, _dir, calls) = start_with(builder, TEAM).await;
    let token = gw.create_token("alice").await.unwrap();
    let team = gw.route_url("team");
    let own = team.trim_end_matches("/team/mcp").to_owned();
    let http = gw.http();
    let preflight = |origin: &str| {
        http.request(reqwest::Method::OPTIONS, &team)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .send()
    };
    let ok = preflight(&own).await.unwrap();
    assert_eq!(ok.status(), 204);
    assert!(ok.headers().contains_key("allow"), "{:?}", ok.headers());
    assert_eq!(
        preflight("https://evil.example").await.unwrap().status(),
        403
    );

    let mut client = gw.mcp_at(&team, &token);
    client.open().await.unwrap();
    until_listed(&client, 19).await;
    let echo = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "plain_echo", "arguments": {"text": "hdr"}}});
    let send = |headers: &[(&str, &str)]| {
        let mut req = client.post_request();
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(echo.to_string()).send()
    };
    let foreign = send(&[("origin", "https://evil.example")]).await.unwrap();
    assert_eq!(foreign.status(), 403);
    for headers in [
        &[("mcp-method", "tools/list")][..],
        &[("mcp-name", "echo")],
        &[("mcp-name", "plain_echo"), ("mcp-name", "plain_echo")],
        &[("mcp-method", "tools/call"), ("mcp-method", "tools/call")],
    ] {
        let resp = send(headers).await.unwrap();
        assert_eq!(resp.status(), 400, "{headers:?}");
    }
    assert!(
        logged(&calls).is_empty(),
        "no refused call reached the member"
    );
    // The headers saying what the body says, by the shown name: the call goes through.
    let named = send(&[("mcp-method", "tools/call"), ("mcp-name", "plain_echo")]);
    let answer = rpc_answer(named.await.unwrap()).await;
    assert_eq!(answer["result"]["content"][0]["text"], "hdr", "{answer}");
    assert_eq!(logged(&calls), ["echo"]);

    // An unknown protocol revision (no session: the only version line).
    let bare = gw
        .mcp_at(&team, &token)
        .header("mcp-protocol-version", "1999-01-01");
    assert_eq!(bare.post(&echo).await.status(), 400);
    // A declared body over `max_body_bytes` (1 MiB).
    let big = client.post_raw(vec![b' '; 2 * 1024 * 1024]).await;
    assert_eq!(big.status(), 413);
    assert_eq!(logged(&calls), ["echo"]);

    // A spent client IP: refused (429) before its valid token is looked at.
    let mut failures = 0;
    loop {
        let resp = http
            .post(&team)
            .bearer_auth("pft_guess")
            .send()
            .await
            .unwrap();
        match resp.status().as_u16() {
            401 => failures += 1,
            429 => break,
            other => panic!("{other}"),
        }
        assert!(failures <= 20, "never limited");
    }
    assert_eq!(send(&[]).await.unwrap().status(), 429, "a valid token");
    assert_eq!(logged(&calls), ["echo"]);
}

/// Point 2's resources and prompts: `resources/list`, `resources/templates/list` and
/// `prompts/list` merged from the members (mcp-service has them; the stdio server answers
/// -32601 and adds none), prompts under the member's prefix; `resources/read` goes to the member
/// listing the URI (or whose template matches it), `prompts/get` to the prompt's member under its
/// own name, decided by the member route's `[prompts.NAME]` rule; an unknown URI or prompt name
/// is an error no member sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_prompts_of_the_members_are_merged_and_routed() {
    // The member route's rule, on its own prompt name.
    let builder = Stack::builder()
        .plain_http()
        .prompt_scopes("werkbaum/review", &["mcp:write"]);
    let (gw, _dir, calls) = start_with(builder, TEAM).await;
    let token = gw.create_token("alice").await.unwrap();
    let mut client = gw.mcp_at(&gw.route_url("team"), &token);
    let init = client.open().await.unwrap();
    for capability in ["tools", "resources", "prompts"] {
        assert!(init["capabilities"][capability].is_object(), "{init}");
    }
    let ask = |method: &'static str, params: Value| {
        let client = &client;
        async move { rpc_answer(client.request(method, params).await).await }
    };

    let resources = ask("resources/list", json!({})).await;
    let uris: Vec<&str> = resources["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{resources}"))
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(uris.contains(&"werkbaum://guide"), "{resources}");
    let templates = ask("resources/templates/list", json!({})).await;
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"], "werkbaum://doc/{uuid}",
        "{templates}"
    );
    let prompts = ask("prompts/list", json!({})).await;
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("{prompts}"))
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["mcp_werkbaum/decompose", "mcp_werkbaum/review"]);

    let guide = ask("resources/read", json!({"uri": "werkbaum://guide"})).await;
    let text = guide["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Werkbaum"), "{guide}");
    let review = json!({"name": "mcp_werkbaum/review", "arguments": {"file": "plan.werkbaum"}});
    let got = ask("prompts/get", review).await;
    let text = got["result"]["messages"][0]["content"]["text"].as_str();
    assert!(text.unwrap_or_default().contains("plan.werkbaum"), "{got}");
    // A read-only token is refused it by the member route's rule (403, as on the route).
    let ro = gw
        .create_token_with("ro", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let mut reader = gw.mcp_at(&gw.route_url("team"), &ro);
    reader.open().await.unwrap();
    let review = json!({"name": "mcp_werkbaum/review", "arguments": {"file": "plan.werkbaum"}});
    assert_eq!(reader.request("prompts/get", review).await.status(), 403);

    // The member's own name is not shown, so not found; nor is a URI no member serves.
    let own = json!({"name": "werkbaum/review", "arguments": {"file": "plan.werkbaum"}});
    let unknown = ask("prompts/get", own).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let nowhere = ask("resources/read", json!({"uri": "nowhere://x"})).await;
    assert_eq!(nowhere["error"]["code"], -32002, "{nowhere}");
    assert!(logged(&calls).is_empty(), "no tool of the stdio member ran");
    assert_eq!(client.delete().await.status(), 200);
}

/// Item 3 of the slice: a downstream session that ends without a `DELETE` — here evicted to make
/// room at `limits.sessions_per_principal = 1` when the same person opens another — has its
/// member sessions ended: the stdio member's child for it stops (`pforte_stdio_children`), and
/// the new session calls the member on a session of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_sessions_member_sessions_are_ended() {
    let builder = Stack::builder()
        .plain_http()
        .limits(Limits::default().sessions_per_principal(1));
    let (gw, _dir, calls) = start_with(builder, TEAM).await;
    let token = gw.create_token("alice").await.unwrap();
    let team = gw.route_url("team");
    let http = gw.http();
    let children = || async {
        let text = metrics_text(&http, &gw.base).await.unwrap();
        metric_sum(&text, "pforte_stdio_children", &["route=\"plain\""])
    };
    let settled = |want: f64| async move {
        eventually(Duration::from_secs(10), || async {
            if children().await == want {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            false
        })
        .await
    };

    let mut first = gw.mcp_at(&team, &token);
    first.open().await.unwrap();
    until_listed(&first, 19).await;
    let before = children().await;
    let answer = rpc_answer(
        first
            .call_tool("plain_echo", json!({"text": "first"}))
            .await,
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "first", "{answer}");
    assert!(
        settled(before + 1.0).await,
        "the member session's child runs"
    );

    // The same person opens another session: the first, idle, is evicted, and its member
    // session ends with it.
    let mut second = gw.mcp_at(&team, &token);
    second.open().await.unwrap();
    assert_eq!(first.call_tool("plain_echo", json!({})).await.status(), 404);
    assert!(
        settled(before).await,
        "the evicted session's member child stopped"
    );
    let answer = rpc_answer(
        second
            .call_tool("plain_echo", json!({"text": "second"}))
            .await,
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], "second", "{answer}");
    assert_eq!(logged(&calls), ["echo", "echo"]);
    assert_eq!(second.delete().await.status(), 200);
    assert!(settled(before).await, "DELETE ends the second's");
}

/// Item 4, the body half: a member tool that mirrors parameters into `Mcp-Param-*` headers (the
/// Python SDK's header server as the route `mcp`) is checked through the virtual server as on
/// its route, by the member's declaration: headers that say what the arguments say pass, others
/// are 400 (`-32020`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_tools_param_headers_are_checked_through_the_virtual_server() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let (_server, url) = header_server(&python).await;
    let (gw, _dir, _calls) = start_with(Stack::builder().plain_http().upstream(&url), TEAM).await;
    let token = gw.create_token("alice").await.unwrap();
    let mut client = gw.mcp_at(&gw.route_url("team"), &token);
    client.open().await.unwrap();
    let listed = eventually(Duration::from_secs(20), || async {
        if client.tool_names().await.contains("mcp_execute_sql") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        false
    })
    .await;
    assert!(listed, "{:?}", client.tool_names().await);
    let call = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {
        "name": "mcp_execute_sql", "arguments": {"region": "us-west1", "query": "q", "shard": 42}}});
    let send = |headers: &'static [(&'static str, &'static str)]| {
        let mut req = client.post_request();
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(call.to_string()).send()
    };
    let ok = send(&[("mcp-param-region", "us-west1"), ("mcp-param-shard", "42")]);
    let answer = rpc_answer(ok.await.unwrap()).await;
    let text = &answer["result"]["content"][0]["text"];
    assert_eq!(text, "q in us-west1 on shard 42", "{answer}");
    for headers in [
        &[("mcp-param-region", "us-east1"), ("mcp-param-shard", "42")][..],
        &[("mcp-param-region", "us-west1")],
    ] {
        let resp = send(headers).await.unwrap();
        assert_eq!(resp.status(), 400, "{headers:?}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        assert_eq!(answer["id"], 11);
    }
}
