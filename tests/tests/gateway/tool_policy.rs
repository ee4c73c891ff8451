//! MCP-aware authorization end to end, with the real gateway and mcp-service: per-tool scopes
//! from the service's annotations, `tools/list` filtered per principal, the step-up challenge,
//! `[tools.NAME]` rules, header/body agreement, batches, session ownership, the audit log and
//! the CORS door. Static tokens through rmcp's client, OAuth tokens through the real flow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use pforte_tests::{Budget, Gateway, Limits, McpClient, Stack, StackBuilder, oauth};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The tools annotated `readOnlyHint: true`.
const READ_TOOLS: [&str; 5] = [
    "werkbaum_check",
    "werkbaum_history",
    "werkbaum_inspect",
    "werkbaum_read",
    "whoami",
];
/// Every other tool: they need `mcp:write`.
const WRITE_TOOLS: [&str; 8] = [
    "werkbaum_add_node",
    "werkbaum_apply_ops",
    "werkbaum_create",
    "werkbaum_move_node",
    "werkbaum_remove_node",
    "werkbaum_set_size",
    "werkbaum_set_status",
    "werkbaum_write",
];

const PASSWORD: &str = "correct horse battery staple";

/// A session of `token`'s, opened by hand (initialize, initialized): for what rmcp's client
/// never sends.
async fn open(gw: &Gateway, token: &str) -> McpClient {
    let mut client = gw.mcp(token);
    client.open().await.unwrap();
    client
}

/// POSTs `body` in `client`'s session with further `headers`.
async fn post_with(
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

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The 403 of a call beyond the token's scopes: a step-up challenge naming every scope needed.
async fn assert_step_up(resp: reqwest::Response, tool: &str) {
    assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{tool}");
    let challenge = resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"mcp:read mcp:write\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("resource_metadata=\"https://127.0.0.1:"),
        "{challenge}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["tool"], tool);
    assert_eq!(body["missing_scope"], "mcp:write");
}

/// The stack `builder` describes, with 2 MiB bodies (for the padded calls).
async fn start(builder: StackBuilder) -> Stack {
    builder.max_body_bytes(2 * 1024 * 1024).start().await
}

#[tokio::test]
async fn a_read_only_static_token_sees_and_calls_only_the_read_tools() {
    let gw = start(Stack::builder()).await;
    let ro = gw
        .create_token_with("ci", &["--scope", "mcp:read"])
        .await
        .unwrap();
    // A real client: rmcp lists and calls.
    let client = gw.rmcp_client(&ro, &[]).await.unwrap();
    let listed: BTreeSet<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(listed, names(&READ_TOOLS));
    let me = client
        .call_tool(rmcp::model::CallToolRequestParams::new("whoami"))
        .await
        .unwrap();
    assert_ne!(me.is_error, Some(true));
    client.cancel().await.unwrap();

    let raw = open(&gw, &ro).await;
    for tool in WRITE_TOOLS {
        assert_step_up(raw.call_tool(tool, json!({})).await, tool).await;
    }
    for tool in READ_TOOLS {
        let resp = raw.call_tool(tool, json!({})).await;
        assert_eq!(resp.status(), 200, "{tool}");
    }
    // However much padding precedes the name, the body is read: still refused.
    let padded = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"arguments":{{"pad":"{}"}},"name":"werkbaum_create"}}}}"#,
        "x".repeat(1024 * 1024)
    );
    assert_step_up(raw.post_raw(padded).await, "werkbaum_create").await;
    // A token with both scopes sees all thirteen.
    let rw = gw.create_token("rw").await.unwrap();
    let all = open(&gw, &rw).await.tool_names().await;
    assert_eq!(all.len(), READ_TOOLS.len() + WRITE_TOOLS.len());
}

#[tokio::test]
async fn headers_must_say_what_the_body_says_and_batches_are_refused() {
    let gw = start(
        Stack::builder().limits(Limits::default().tool("werkbaum_create", Budget::new(1, 3600, 1))),
    )
    .await;
    let rw = gw.create_token("rw").await.unwrap();
    let raw = open(&gw, &rw).await;
    let whoami = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"whoami","arguments":{}}});
    let create = json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"werkbaum_create","arguments":{}}});
    // base64 of "whoami" and of "werkbaum_create".
    let b64_whoami = "=?base64?d2hvYW1p?=";
    let b64_create = "=?base64?d2Vya2JhdW1fY3JlYXRl?=";
    for (body, name) in [
        (&create, "whoami"),
        (&create, b64_whoami),
        (&whoami, "werkbaum_create"),
        (&whoami, b64_create),
    ] {
        let resp = post_with(&raw, body, &[("mcp-name", name)]).await;
        assert_eq!(resp.status(), 400, "{name}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        assert_eq!(answer["id"], body["id"]);
    }
    let wrong_method = post_with(&raw, &whoami, &[("mcp-method", "tools/list")]).await;
    assert_eq!(wrong_method.status(), 400);
    // Agreeing headers, in either form, pass.
    let ok = post_with(
        &raw,
        &whoami,
        &[("mcp-method", "tools/call"), ("mcp-name", b64_whoami)],
    )
    .await;
    assert_eq!(ok.status(), 200);
    // The budget of werkbaum_create counts the body's name: the second create is 429 even when
    // the header would claim another tool (that is a 400 above, never a free pass).
    let first = post_with(&raw, &create, &[("mcp-name", "werkbaum_create")]).await;
    assert_eq!(first.status(), 200);
    let second = raw.post(&create).await;
    assert_eq!(second.status(), 429);
    // Batches (removed in 2025-06-18) are refused with a JSON-RPC error.
    let batch = raw.post_raw(format!("[{whoami},{whoami}]")).await;
    assert_eq!(batch.status(), 400);
    let answer: Value = batch.json().await.unwrap();
    assert_eq!(answer["error"]["code"], -32600);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("batch")
    );
    let garbage = raw.post_raw("{not json").await;
    assert_eq!(garbage.status(), 400);
    let answer: Value = garbage.json().await.unwrap();
    assert_eq!(answer["error"]["code"], -32700);
}

#[tokio::test]
async fn a_session_belongs_to_the_principal_that_opened_it() {
    let gw = start(Stack::builder()).await;
    let a = gw.create_token("a").await.unwrap();
    let b = gw.create_token("b").await.unwrap();
    let owner = open(&gw, &a).await;
    let thief = gw.mcp(&b).in_session(owner.session());
    let stolen = thief.call_tool("whoami", json!({})).await;
    assert_eq!(stolen.status(), 404);
    let stream = thief.stream().await;
    assert_eq!(stream.status(), 404);
    // The owner's session is untouched.
    assert_eq!(owner.call_tool("whoami", json!({})).await.status(), 200);
}

#[tokio::test]
async fn oauth_grants_and_tool_rules_decide_and_the_audit_log_records_it() {
    let gw = start(Stack::builder().tool_users("werkbaum_history", &["alice"])).await;
    gw.add_user("alice", PASSWORD).unwrap();
    gw.add_user("bob", PASSWORD).unwrap();
    let alice_ro = oauth::access_token(&gw, "alice", PASSWORD, "mcp:read")
        .await
        .unwrap();
    let alice = oauth::access_token(&gw, "alice", PASSWORD, "mcp:read mcp:write")
        .await
        .unwrap();
    let bob = oauth::access_token(&gw, "bob", PASSWORD, "mcp:read mcp:write")
        .await
        .unwrap();

    let ro = open(&gw, &alice_ro).await;
    assert_eq!(ro.tool_names().await, names(&READ_TOOLS));
    for tool in WRITE_TOOLS {
        assert_step_up(ro.call_tool(tool, json!({})).await, tool).await;
    }
    assert_eq!(ro.call_tool("whoami", json!({})).await.status(), 200);

    let history = json!({"document": "00000000-0000-4000-8000-000000000000"});
    let alice_session = open(&gw, &alice).await;
    assert_eq!(
        alice_session
            .call_tool("werkbaum_history", history.clone())
            .await
            .status(),
        200
    );
    let bob_session = open(&gw, &bob).await;
    let refused = bob_session.call_tool("werkbaum_history", history).await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["reason"], "user_not_allowed");
    let bobs = bob_session.tool_names().await;
    assert!(!bobs.contains("werkbaum_history"));
    assert_eq!(bobs.len(), READ_TOOLS.len() + WRITE_TOOLS.len() - 1);

    // The audit log: one line per named call and per refusal; never arguments or tokens.
    let path = gw.data_dir().join("audit.jsonl");
    let found = pforte_tests::eventually(std::time::Duration::from_secs(5), || {
        let path = path.clone();
        async move { std::fs::read_to_string(&path).is_ok_and(|t| t.contains("user_not_allowed")) }
    })
    .await;
    assert!(found, "audit log at {}", path.display());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&alice) && !text.contains(&bob) && !text.contains("00000000-0000"));
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let allowed = lines
        .iter()
        .find(|l| l["name"] == "werkbaum_history" && l["decision"] == "allowed")
        .expect("alice's call");
    assert_eq!(allowed["principal"]["subject"], "alice");
    assert_eq!(allowed["principal"]["kind"], "oauth");
    assert_eq!(allowed["method"], "tools/call");
    assert_eq!(allowed["route"], "mcp");
    assert_eq!(allowed["upstream_status"], 200);
    assert!(
        allowed["request_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    assert!(allowed["duration_ms"].is_u64() && allowed["time"].is_string());
    let denied = lines
        .iter()
        .find(|l| l["name"] == "werkbaum_history" && l["decision"] == "denied")
        .expect("bob's refusal");
    assert_eq!(denied["principal"]["subject"], "bob");
    assert_eq!(denied["reason"], "user_not_allowed");
    let step_up = lines
        .iter()
        .find(|l| l["name"] == "werkbaum_create" && l["decision"] == "denied")
        .expect("the read-only grant's refusal");
    assert_eq!(step_up["reason"], "insufficient_scope");
}

#[tokio::test]
async fn cors_only_where_configured_and_the_own_origin_always_passes() {
    let gw = Stack::builder()
        .allowed_origins(&["https://app.example"])
        .start()
        .await;
    let http = gw.http();
    let preflight = |origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, gw.mcp_url())
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type, mcp-session-id",
            )
            .send()
    };
    let ok = preflight("https://app.example").await.unwrap();
    assert_eq!(ok.status(), 204);
    let h = ok.headers();
    assert_eq!(h["access-control-allow-origin"], "https://app.example");
    let allow = h["access-control-allow-headers"].to_str().unwrap();
    for name in [
        "Authorization",
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "Mcp-Name",
        "Last-Event-ID",
    ] {
        assert!(allow.contains(name), "{allow}");
    }
    assert!(
        h["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("WWW-Authenticate")
    );
    assert_eq!(h["vary"], "Origin");
    let foreign = preflight("https://evil.example").await.unwrap();
    assert_eq!(foreign.status(), 403);
    assert!(
        foreign
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );

    // A real request from the allowed origin carries the CORS headers, even when refused.
    let unauthenticated = http
        .post(gw.mcp_url())
        .header("origin", "https://app.example")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(
        unauthenticated.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let token = gw.create_token("web").await.unwrap();
    let raw = open(&gw, &token).await;
    let own = gw.base.replace("127.0.0.1", "localhost");
    for origin in [gw.base.clone(), own] {
        let ping = json!({"jsonrpc":"2.0","id":3,"method":"ping"});
        let resp = post_with(&raw, &ping, &[("origin", origin.as_str())]).await;
        assert_eq!(resp.status(), 200, "{origin}");
        assert!(resp.headers().get("access-control-allow-origin").is_none());
    }
}

#[tokio::test]
async fn no_allowed_origins_means_no_cors_headers() {
    let gw = Stack::builder().allowed_origins(&[]).start().await;
    let resp = gw
        .http()
        .request(reqwest::Method::OPTIONS, gw.mcp_url())
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert!(resp.headers().get("access-control-allow-origin").is_none());
}

/// A read-only token calling a tool with a 1 MiB name, five times: each 403 body and each audit
/// line name a bounded piece of it (before: the name whole in the line and twice in the body —
/// ten 4 MiB calls added 42 MB to `audit.jsonl`).
#[tokio::test]
async fn a_huge_tool_name_costs_a_bounded_audit_line_and_refusal() {
    let gw = start(Stack::builder()).await;
    let ro = gw
        .create_token_with("ci", &["--scope", "mcp:read"])
        .await
        .unwrap();
    let raw = open(&gw, &ro).await;
    let path = gw.data_dir().join("audit.jsonl");
    let size = || std::fs::metadata(&path).map_or(0, |m| m.len());
    let lines = || {
        std::fs::read_to_string(&path)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let huge = format!("werkbaum_\u{1b}[31m\u{202e}{}", "x".repeat(1024 * 1024));
    const CALLS: usize = 5;
    let (before_size, before_lines) = (size(), lines());
    for _ in 0..CALLS {
        let resp = raw.call_tool(&huge, json!({})).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let body = resp.bytes().await.unwrap();
        assert!(body.len() < 4096, "a refusal of {} bytes", body.len());
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(
            body["tool"]
                .as_str()
                .unwrap()
                .ends_with(&format!("…(+{} bytes)", huge.len() - 256)),
            "{body}"
        );
    }
    let all = pforte_tests::eventually(std::time::Duration::from_secs(5), || {
        let done = lines() >= before_lines + CALLS;
        async move { done }
    })
    .await;
    assert!(all, "{CALLS} audit lines");
    let grown = size() - before_size;
    assert!(
        grown < (CALLS as u64) * 2048,
        "the audit log grew by {grown} bytes for {CALLS} calls"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let name = last["name"].as_str().unwrap();
    assert!(
        name.starts_with("werkbaum_\\u{1b}[31m\\u{202e}xxx"),
        "{name}"
    );
    assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'));
}

/// Two `Mcp-Name` (or `Mcp-Method`) lines: refused, whether they agree with the body or not
/// (before: only the first was checked, all were forwarded).
#[tokio::test]
async fn a_repeated_mcp_header_is_refused() {
    let gw = start(Stack::builder()).await;
    let rw = gw.create_token("rw").await.unwrap();
    let raw = open(&gw, &rw).await;
    let whoami = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"whoami","arguments":{}}});
    for headers in [
        [("mcp-name", "whoami"), ("mcp-name", "werkbaum_create")],
        [("mcp-name", "whoami"), ("mcp-name", "whoami")],
        [("mcp-method", "tools/call"), ("mcp-method", "tools/list")],
    ] {
        let resp = post_with(&raw, &whoami, &headers).await;
        assert_eq!(resp.status(), 400, "{headers:?}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
    }
    let once = post_with(
        &raw,
        &whoami,
        &[("mcp-method", "tools/call"), ("mcp-name", "whoami")],
    )
    .await;
    assert_eq!(once.status(), 200);
}

/// A request that declares MCP 2026-07-28 must send `Mcp-Method` and `Mcp-Name` with a call,
/// a read and a prompt; older revisions need not; methods that name nothing need no name.
#[tokio::test]
async fn protocol_2026_07_28_requires_the_mcp_headers() {
    let gw = start(Stack::builder()).await;
    let rw = gw.create_token("rw").await.unwrap();
    let raw = open(&gw, &rw).await;
    let whoami = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"whoami","arguments":{}}});
    let modern = ("mcp-protocol-version", "2026-07-28");
    for headers in [
        vec![modern],
        vec![modern, ("mcp-method", "tools/call")],
        vec![modern, ("mcp-name", "whoami")],
    ] {
        // The client sends 2025-06-18; a second line would be two versions: replace it.
        let resp = raw
            .post_request()
            .headers(header_map(&headers))
            .body(whoami.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{headers:?}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        assert_eq!(answer["id"], 5);
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("missing"),
            "{answer}"
        );
    }
    // The same call under 2025-06-18 passes without them.
    assert_eq!(raw.post(&whoami).await.status(), 200);
}

/// Headers that replace (not add to) what a request builder set.
fn header_map(headers: &[(&'static str, &'static str)]) -> reqwest::header::HeaderMap {
    let mut map = reqwest::header::HeaderMap::new();
    for (k, v) in headers {
        map.insert(*k, reqwest::header::HeaderValue::from_static(v));
    }
    map
}
