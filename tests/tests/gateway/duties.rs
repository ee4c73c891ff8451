//! The duties MCP 2026-07-28 puts on an intermediary that reads bodies (issue 40), end to end
//! through the real gateway in front of the real mcp-service (and, for `Mcp-Param-*`, a server
//! on the official Python SDK): a list answer filtered per token is `cacheScope: "private"`
//! (its `ttlMs` kept) and an unfiltered one is the server's bytes; the protocol version header
//! against `_meta`; prompts and resources step up like tools; mirrored parameters checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{McpClient, Stack, eventually, header_server, python_sdk_or_skip, rpc_answer};
use serde_json::{Value, json};

/// The 2026-07-28 revision.
pub(super) const MODERN: &str = "2026-07-28";

/// A 2026-07-28 request (no session): `_meta` with the protocol version, client info and
/// capabilities.
pub(super) fn modern(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "duties", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// POSTs a 2026-07-28 `body` for `client` (stateless) with its standard headers and `extra`.
pub(super) async fn post_modern(
    client: &McpClient,
    body: &Value,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = client
        .post_request()
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", body["method"].as_str().unwrap());
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.body(body.to_string()).send().await.unwrap()
}

/// The one JSON-RPC message of an answer's body (JSON, or the SSE event carrying it).
fn message(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str(body) {
        return v;
    }
    let data = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim_start)
        .find(|d| d.starts_with('{'))
        .unwrap_or_else(|| panic!("no message in {body}"));
    serde_json::from_str(data).unwrap()
}

fn tool_count(answer: &Value) -> usize {
    answer["result"]["tools"].as_array().unwrap().len()
}

/// Issue 40, point 1: on 2026-07-28 (stateless) and 2025-11-25 (in a session) requests, a
/// read-only token's filtered `tools/list` says `cacheScope: "private"` with the server's
/// `ttlMs`; a token that sees everything gets the server's answer byte for byte.
#[tokio::test]
async fn a_filtered_list_is_private_and_an_unfiltered_one_is_the_servers() {
    let gw = Stack::start().await;
    let ro = gw
        .create_token_with("ro", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let rw = gw.create_token("rw").await.unwrap();
    let direct = McpClient::new(reqwest::Client::new(), &gw.service().url());
    let list = modern(1, "tools/list", json!({}));

    let server = post_modern(&direct, &list, &[]).await;
    assert_eq!(server.status(), 200);
    let server = server.text().await.unwrap();
    let server_answer = message(&server);
    assert_eq!(server_answer["result"]["cacheScope"], "public", "{server}");
    let ttl = server_answer["result"]["ttlMs"].clone();
    assert!(ttl.is_u64(), "{server}");

    // Unfiltered: the server's bytes.
    let all = post_modern(&gw.mcp(&rw), &list, &[]).await;
    assert_eq!(all.status(), 200);
    assert_eq!(all.text().await.unwrap(), server);

    // Filtered: private, the same ttl, fewer tools.
    let some = post_modern(&gw.mcp(&ro), &list, &[]).await;
    assert_eq!(some.status(), 200);
    let some = message(&some.text().await.unwrap());
    assert_eq!(some["result"]["cacheScope"], "private", "{some}");
    assert_eq!(some["result"]["ttlMs"], ttl);
    assert_eq!(tool_count(&some), 5);
    assert!(tool_count(&server_answer) > 5);

    // 2025-11-25, in a session: the same rule.
    let mut old_ro = gw.mcp(&ro).protocol("2025-11-25");
    old_ro.open().await.unwrap();
    let answer = rpc_answer(old_ro.request("tools/list", json!({})).await).await;
    assert_eq!(answer["result"]["cacheScope"], "private", "{answer}");
    assert_eq!(tool_count(&answer), 5);
    let mut old_direct =
        McpClient::new(reqwest::Client::new(), &gw.service().url()).protocol("2025-11-25");
    old_direct.open().await.unwrap();
    let mut old_rw = gw.mcp(&rw).protocol("2025-11-25");
    old_rw.open().await.unwrap();
    let want = rpc_answer(old_direct.request("tools/list", json!({})).await).await;
    let got = rpc_answer(old_rw.request("tools/list", json!({})).await).await;
    assert_eq!(got, want);
    assert_ne!(got["result"]["cacheScope"], "private");

    // Point 6: `server/discover` for a token that sees everything is the server's too.
    let discover = modern(2, "server/discover", json!({}));
    let server = post_modern(&direct, &discover, &[])
        .await
        .text()
        .await
        .unwrap();
    let all = post_modern(&gw.mcp(&rw), &discover, &[]).await;
    assert_eq!(all.text().await.unwrap(), server);
}

/// Issue 40, point 6: `server/discover` is filtered per token like `tools/list`: a token that
/// may list no tool (every read tool limited to someone else) is not told of tools, one that
/// may list some is; both answers are `cacheScope: "private"` with the server's `ttlMs`.
#[tokio::test]
async fn server_discover_is_filtered_per_token() {
    let mut builder = Stack::builder();
    for tool in [
        "werkbaum_check",
        "werkbaum_history",
        "werkbaum_inspect",
        "werkbaum_read",
        "whoami",
    ] {
        builder = builder.tool_users(tool, &["somebody-else"]);
    }
    let gw = builder.start().await;
    let ro = gw
        .create_token_with("ro", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let rw = gw.create_token("rw").await.unwrap();
    let direct = McpClient::new(reqwest::Client::new(), &gw.service().url());
    let discover = modern(3, "server/discover", json!({}));
    let server = message(
        &post_modern(&direct, &discover, &[])
            .await
            .text()
            .await
            .unwrap(),
    );
    assert!(
        server["result"]["capabilities"]["tools"].is_object(),
        "{server}"
    );

    // The gateway judges by its tool catalog, learned in the background at start: asked
    // until it has been (bounded).
    let reader_client = gw.mcp(&ro);
    let hidden = eventually(Duration::from_secs(10), || async {
        let answer = post_modern(&reader_client, &discover, &[]).await;
        let answer = message(&answer.text().await.unwrap());
        answer["result"]["capabilities"].get("tools").is_none()
    })
    .await;
    assert!(hidden, "the read-only token was still told of tools");
    let reader = post_modern(&reader_client, &discover, &[]).await;
    assert_eq!(reader.status(), 200);
    let reader = message(&reader.text().await.unwrap());
    let caps = reader["result"]["capabilities"].as_object().unwrap();
    assert!(!caps.contains_key("tools"), "{reader}");
    assert!(
        caps.contains_key("prompts") && caps.contains_key("resources"),
        "{reader}"
    );
    assert_eq!(reader["result"]["cacheScope"], "private");
    assert_eq!(reader["result"]["ttlMs"], server["result"]["ttlMs"]);
    assert_eq!(
        reader["result"]["supportedVersions"],
        server["result"]["supportedVersions"]
    );

    let writer = post_modern(&gw.mcp(&rw), &discover, &[]).await;
    let writer = message(&writer.text().await.unwrap());
    assert!(
        writer["result"]["capabilities"]["tools"].is_object(),
        "{writer}"
    );
    assert_eq!(writer["result"]["cacheScope"], "private");
}

/// POSTs `body` for `client` (stateless) with exactly `headers` beyond the defaults.
async fn post_exactly(
    client: &McpClient,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = client.post_request();
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(body.to_string()).send().await.unwrap()
}

/// Issue 40, point 3: `MCP-Protocol-Version` must say what `_meta` says (400 `HeaderMismatch`,
/// also when the body names a version and the header is missing), and a version the gateway
/// does not implement is answered 400 `UnsupportedProtocolVersionError` listing its versions.
#[tokio::test]
async fn the_version_header_must_match_meta_and_name_a_known_revision() {
    let gw = Stack::start().await;
    let rw = gw.create_token("rw").await.unwrap();
    let client = gw.mcp(&rw);
    let list = modern(7, "tools/list", json!({}));
    let method = ("mcp-method", "tools/list");

    for headers in [
        vec![("mcp-protocol-version", "2025-11-25"), method],
        vec![method],
    ] {
        let resp = post_exactly(&client, &list, &headers).await;
        assert_eq!(resp.status(), 400, "{headers:?}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        assert_eq!(answer["id"], 7);
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("MCP-Protocol-Version"),
            "{answer}"
        );
    }
    for requested in ["1900-01-01", "2099-01-01", "latest"] {
        let resp = post_exactly(
            &client,
            &list,
            &[("mcp-protocol-version", requested), method],
        )
        .await;
        assert_eq!(resp.status(), 400, "{requested}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32022, "{answer}");
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["data"]["requested"], requested);
        let supported = answer["error"]["data"]["supported"].as_array().unwrap();
        assert!(supported.contains(&json!(MODERN)), "{answer}");
        assert!(supported.contains(&json!("2025-11-25")), "{answer}");
    }
    // Two lines are two versions: refused.
    let twice = client
        .post_request()
        .header("mcp-protocol-version", MODERN)
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/list")
        .body(list.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 400);
    // Agreeing: answered by the service.
    let ok = post_modern(&client, &list, &[]).await;
    assert_eq!(ok.status(), 200);
}

/// The 403 step-up challenge: `WWW-Authenticate` names every scope needed.
async fn assert_challenge(resp: reqwest::Response, needed: &str) {
    assert_eq!(resp.status(), 403);
    let challenge = resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!("scope=\"{needed}\"")),
        "{challenge}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "insufficient_scope");
    assert_eq!(body["scope"], needed);
}

/// Issue 40, point 4: `[prompts.NAME]` and `[resources."URI"]` (a URI template too) give
/// prompts and resources their own scopes, with the same 403 `insufficient_scope` challenge
/// as tools, naming every scope needed; without a rule they need `mcp:read`.
#[tokio::test]
async fn prompts_and_resources_step_up_like_tools() {
    let gw = Stack::builder()
        .prompt_scopes("werkbaum/review", &["mcp:write"])
        .resource_scopes("werkbaum://doc/{uuid}", &["mcp:write"])
        .start()
        .await;
    let ro = gw
        .create_token_with("ro", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let rw = gw.create_token("rw").await.unwrap();
    let mut reader = gw.mcp(&ro);
    reader.open().await.unwrap();
    let mut writer = gw.mcp(&rw);
    writer.open().await.unwrap();
    let review = json!({"name": "werkbaum/review", "arguments": {"file": "plan.werkbaum"}});
    let doc = json!({"uri": "werkbaum://doc/123e4567-e89b-12d3-a456-426614174000"});

    assert_challenge(
        reader.request("prompts/get", review.clone()).await,
        "mcp:read mcp:write",
    )
    .await;
    assert_challenge(
        reader.request("resources/read", doc.clone()).await,
        "mcp:read mcp:write",
    )
    .await;
    // Without a rule: mcp:read is enough.
    let guide = reader
        .request("resources/read", json!({"uri": "werkbaum://guide"}))
        .await;
    assert_eq!(guide.status(), 200);
    let decompose = reader
        .request(
            "prompts/get",
            json!({"name": "werkbaum/decompose", "arguments": {"id": "#a", "file": "p.werkbaum"}}),
        )
        .await;
    assert_eq!(decompose.status(), 200);
    // With the scope: passed to the service.
    assert_eq!(writer.request("prompts/get", review).await.status(), 200);
    assert_eq!(writer.request("resources/read", doc).await.status(), 200);
}

/// Issue 40, point 2: for a tool whose schema mirrors `region` and `shard` into
/// `Mcp-Param-Region` / `Mcp-Param-Shard` (a server on the official Python SDK), the headers
/// must say what the arguments say — the Base64 sentinel decoded, the integer compared as a
/// number — else 400 `HeaderMismatch`; a CORS preflight may ask for them.
#[tokio::test]
async fn mirrored_parameters_must_match_their_headers() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let (_server, url) = header_server(&python).await;
    let gw = Stack::builder()
        .upstream(&url)
        .allowed_origins(&["https://app.example"])
        .start()
        .await;
    let rw = gw.create_token("rw").await.unwrap();
    let mut client = gw.mcp(&rw);
    client.open().await.unwrap();
    let call = |args: Value| {
        json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
            "params": {"name": "execute_sql", "arguments": args}})
    };
    let full = call(json!({"region": "us-west1", "query": "q", "shard": 42}));

    for headers in [
        vec![("mcp-param-region", "us-west1"), ("mcp-param-shard", "42")],
        vec![
            ("Mcp-Param-Region", "=?base64?dXMtd2VzdDE=?="),
            ("Mcp-Param-Shard", "42.0"),
        ],
    ] {
        let resp = post_exactly(&client, &full, &headers).await;
        assert_eq!(resp.status(), 200, "{headers:?}");
        let answer = rpc_answer(resp).await;
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(text, "q in us-west1 on shard 42", "{answer}");
    }
    for headers in [
        vec![("mcp-param-region", "us-east1"), ("mcp-param-shard", "42")],
        vec![("mcp-param-region", "us-west1"), ("mcp-param-shard", "43")],
        vec![("mcp-param-region", "us-west1")],
        vec![
            ("mcp-param-region", "us-west1"),
            ("mcp-param-region", "us-west1"),
            ("mcp-param-shard", "42"),
        ],
    ] {
        let resp = post_exactly(&client, &full, &headers).await;
        assert_eq!(resp.status(), 400, "{headers:?}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        assert_eq!(answer["id"], 11);
    }
    // A parameter not in the arguments: no header expected.
    let sparse = call(json!({"region": "eu", "query": "q"}));
    let resp = post_exactly(&client, &sparse, &[("mcp-param-region", "eu")]).await;
    assert_eq!(resp.status(), 200);
    // A browser may ask to send them.
    let preflight = gw
        .http()
        .request(reqwest::Method::OPTIONS, gw.mcp_url())
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type, mcp-param-region, mcp-param-shard",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    let allowed = preflight.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("mcp-param-region"), "{allowed}");
    assert!(allowed.contains("mcp-param-shard"), "{allowed}");
}

/// Issue 40, point 5 (its first part): `tasks/get`, `tasks/update` and `tasks/cancel` must
/// carry `Mcp-Name` = the task id (SEP-2663), on any revision: without it, or with another id,
/// 400 `HeaderMismatch` before the upstream is asked; with it, the header check passes (the
/// task, never created through the gateway, is then 404: `a_task_belongs_to_…` below).
#[tokio::test]
async fn task_requests_must_name_their_task() {
    let gw = Stack::start().await;
    let rw = gw.create_token("rw").await.unwrap();
    let mut client = gw.mcp(&rw);
    client.open().await.unwrap();
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let body = json!({"jsonrpc": "2.0", "id": 21, "method": method,
            "params": {"taskId": "786512e2-9e0d-44bd-8f29-789f320fe840"}});
        for headers in [vec![], vec![("mcp-name", "another-task")]] {
            let resp = post_exactly(&client, &body, &headers).await;
            assert_eq!(resp.status(), 400, "{method} {headers:?}");
            let answer: Value = resp.json().await.unwrap();
            assert_eq!(answer["error"]["code"], -32020, "{answer}");
            assert_eq!(answer["id"], 21);
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("Mcp-Name"),
                "{answer}"
            );
        }
        let named = post_exactly(
            &client,
            &body,
            &[("mcp-name", "786512e2-9e0d-44bd-8f29-789f320fe840")],
        )
        .await;
        let status = named.status();
        let text = named.text().await.unwrap();
        assert!(!text.contains("-32020"), "{method}: {status} {text}");
    }
}

/// The task a raw upstream creates for every `tools/call` (`?mode=call`).
pub(super) const TASK: &str = "786512e2-9e0d-44bd-8f29-789f320fe840";

/// A task-capable upstream in raw bytes: `?mode=call` answers with a `CreateTaskResult`
/// (SEP-2663), `?mode=get` with the task's status; anything else (the gateway's own catalog
/// requests) a JSON-RPC error.
pub(super) fn task_upstream(head: &str) -> Vec<u8> {
    task_answer(TASK, head)
}

/// [`task_upstream`]'s answer to `head`, for the task id `task`.
pub(super) fn task_answer(task: &str, head: &str) -> Vec<u8> {
    let line = head.lines().next().unwrap_or_default();
    let body = if line.contains("mode=call") {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "task", "taskId": task,
            "status": "working", "ttlMs": 60000, "pollIntervalMs": 100}})
    } else if line.contains("mode=get") {
        json!({"jsonrpc": "2.0", "id": 2, "result": {"resultType": "complete", "taskId": task,
            "status": "completed", "ttlMs": 60000}})
    } else {
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no"}})
    };
    let body = body.to_string();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A 2026-07-28 request of `token` to the gateway's `/mcp?mode=…`, named `name`.
pub(super) async fn post_mode(
    stack: &Stack,
    token: &str,
    mode: &str,
    body: &Value,
    name: &str,
) -> reqwest::Response {
    post_to(stack, &stack.gw.mcp_url(), token, mode, body, name).await
}

/// A 2026-07-28 request of `token` to `url?mode=…`, named `name`.
pub(super) async fn post_to(
    stack: &Stack,
    url: &str,
    token: &str,
    mode: &str,
    body: &Value,
    name: &str,
) -> reqwest::Response {
    stack
        .gw
        .http()
        .post(format!("{url}?mode={mode}"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", body["method"].as_str().unwrap())
        .header("mcp-name", name)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// Issue 40, point 3: a task is bound to the principal (and route) whose `tools/call` created
/// it. A creates a task through the gateway; B's `tasks/get|update|cancel` of it are 404 (the
/// JSON-RPC "task not found" error) and never reach the upstream; A's `tasks/get` does; a task
/// id the gateway never saw created is 404 for anyone.
#[tokio::test]
async fn a_task_belongs_to_the_principal_that_created_it() {
    let upstream = pforte_tests::RawUpstream::start(task_upstream).await;
    let stack = Stack::builder()
        .upstream(&upstream.mcp_url())
        .plain_http()
        .limits(pforte_tests::Limits::off())
        .start()
        .await;
    let a = stack.gw.create_token("task-a").await.unwrap();
    let b = stack.gw.create_token("task-b").await.unwrap();
    let gets = || {
        upstream
            .received()
            .iter()
            .map(|c| c.matches("mode=get").count())
            .sum::<usize>()
    };

    let call = modern(1, "tools/call", json!({"name": "slow", "arguments": {}}));
    let created = post_mode(&stack, &a, "call", &call, "slow").await;
    assert_eq!(created.status(), 200);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["result"]["taskId"], TASK, "{created}");

    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let ask = modern(2, method, json!({"taskId": TASK}));
        let refused = post_mode(&stack, &b, "get", &ask, TASK).await;
        assert_eq!(refused.status(), 404, "{method}");
        let refused: Value = refused.json().await.unwrap();
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(refused["id"], 2, "{refused}");
    }
    let unknown = modern(3, "tasks/get", json!({"taskId": "never-created"}));
    let refused = post_mode(&stack, &a, "get", &unknown, "never-created").await;
    assert_eq!(refused.status(), 404);
    assert_eq!(gets(), 0, "a refused task request reached the upstream");

    let ask = modern(4, "tasks/get", json!({"taskId": TASK}));
    let polled = post_mode(&stack, &a, "get", &ask, TASK).await;
    assert_eq!(polled.status(), 200);
    let polled: Value = polled.json().await.unwrap();
    assert_eq!(polled["result"]["status"], "completed", "{polled}");
    assert_eq!(gets(), 1);
}
