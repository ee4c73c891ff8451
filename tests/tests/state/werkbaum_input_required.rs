//! Werkbaum on MCP 2026-07-28 (issue 40 point 6): stateless requests (no `initialize`, the
//! protocol version, client info and capabilities in each request's `_meta`), `server/discover`,
//! and input-required results (SEP-2322) where Werkbaum asks the person — which side of a
//! conflicting edit wins, and whether a subtree is really to be deleted — answered the way a
//! 2026-07-28 client does: the same call again with `inputResponses` and the echoed
//! `requestState`: by hand (the wire, directly and through the gateway), and by a real SDK
//! client (rmcp 3.11 on 2026-07-28, `server/discover` lifecycle, its handler as the person)
//! through the gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_tests::{Limits, McpClient, Stack, rpc_answer};
use serde_json::{Value, json};

const V2026: &str = "2026-07-28";

/// One stateless 2026-07-28 request: `method` with `params` and the per-request `_meta`
/// (a client that can elicit, or not); the JSON-RPC answer.
async fn stateless(mcp: &McpClient, method: &str, mut params: Value, elicits: bool) -> Value {
    let caps = if elicits {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientInfo": {"name": "werkbaum-2026-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let mut req = mcp
        .post_request()
        .header("mcp-protocol-version", V2026)
        .header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        req = req.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = req.body(body.to_string()).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{method}");
    rpc_answer(resp).await
}

/// `tools/call NAME ARGS` (with `extra` params: `inputResponses`, `requestState`): its result.
async fn call(mcp: &McpClient, name: &str, args: Value, extra: Value, elicits: bool) -> Value {
    let mut params = json!({"name": name, "arguments": args});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    let answer = stateless(mcp, "tools/call", params, elicits).await;
    answer
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{name}: {answer}"))
}

fn accept(key: &str, content: Value) -> Value {
    json!({key: {"action": "accept", "content": content}})
}

fn base(result: &Value) -> Value {
    let s = &result["structuredContent"];
    json!({"version": s["version"], "checksum": s["checksum"]})
}

/// The whole dialogue against one MCP endpoint.
async fn dialogue(mcp: &McpClient) {
    // server/discover: the versions, the capabilities, no session.
    let discover = stateless(mcp, "server/discover", json!({}), true).await;
    let versions = &discover["result"]["supportedVersions"];
    assert!(
        versions.as_array().unwrap().contains(&json!(V2026)),
        "{discover}"
    );
    assert!(discover["result"]["capabilities"]["tools"].is_object());

    let plan = "# Plan\n[ ] a #a\n  [ ] a1 #a1\n[ ] b #b";
    let created = call(
        mcp,
        "werkbaum_create",
        json!({"title": "t", "text": plan}),
        json!({}),
        true,
    )
    .await;
    let doc = created["structuredContent"]["document"]
        .as_str()
        .unwrap()
        .to_owned();
    let v1 = base(&created);

    // Someone else writes version 2; our edit on version 1 conflicts: the person is asked.
    let theirs = call(
        mcp,
        "werkbaum_set_status",
        json!({"document": doc, "base": v1, "id": "b", "status": "done"}),
        json!({}),
        true,
    )
    .await;
    assert_eq!(theirs["structuredContent"]["version"], 2, "{theirs}");
    let mine = json!({"document": doc, "base": v1, "id": "a", "status": "done"});
    let asked = call(mcp, "werkbaum_set_status", mine.clone(), json!({}), true).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let question = &asked["inputRequests"]["werkbaum_conflict"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    let state = asked["requestState"].clone();
    assert!(state.is_string(), "{asked}");

    // `theirs`: nothing written.
    let kept = call(mcp, "werkbaum_set_status", mine.clone(),
        json!({"inputResponses": accept("werkbaum_conflict", json!({"winner": "theirs"})), "requestState": state}), true).await;
    assert_eq!(kept["isError"], true, "{kept}");
    assert_eq!(
        kept["structuredContent"]["error"]["code"], "keptTheirs",
        "{kept}"
    );

    // `mine`: the edit is applied on version 2, as version 3.
    let won = call(mcp, "werkbaum_set_status", mine.clone(),
        json!({"inputResponses": accept("werkbaum_conflict", json!({"winner": "mine"})), "requestState": state}), true).await;
    assert_eq!(won["resultType"], "complete", "{won}");
    assert_eq!(won["structuredContent"]["version"], 3, "{won}");
    let v3 = base(&won);

    // A tampered requestState is refused.
    let tampered = stateless(
        mcp,
        "tools/call",
        json!({"name": "werkbaum_set_status", "arguments": mine,
        "requestState": "not-ours!"}),
        true,
    )
    .await;
    assert!(tampered.get("error").is_some(), "{tampered}");

    // Deleting a subtree asks for confirmation; declining writes nothing, confirming deletes.
    let remove = json!({"document": doc, "base": v3, "id": "a", "discard": false});
    let asked = call(mcp, "werkbaum_remove_node", remove.clone(), json!({}), true).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert!(
        asked["inputRequests"]["werkbaum_removal"].is_object(),
        "{asked}"
    );
    let state = asked["requestState"].clone();
    let no = call(mcp, "werkbaum_remove_node", remove.clone(),
        json!({"inputResponses": accept("werkbaum_removal", json!({"confirm": false})), "requestState": state}), true).await;
    assert_eq!(no["structuredContent"]["error"]["code"], "declined", "{no}");
    let yes = call(mcp, "werkbaum_remove_node", remove.clone(),
        json!({"inputResponses": accept("werkbaum_removal", json!({"confirm": true})), "requestState": state}), true).await;
    assert_eq!(yes["structuredContent"]["version"], 4, "{yes}");

    // A client that cannot elicit is never asked: the conflict stays a tool error.
    let stale = call(
        mcp,
        "werkbaum_set_status",
        json!({"document": doc, "base": v1, "id": "b", "status": "planned"}),
        json!({}),
        false,
    )
    .await;
    assert_eq!(
        stale["structuredContent"]["error"]["code"], "conflict",
        "{stale}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn werkbaum_asks_the_person_on_2026_07_28_directly_and_through_the_gateway() {
    let stack = Stack::builder()
        .plain_http()
        .limits(Limits::off())
        .start()
        .await;
    // Directly against the service.
    dialogue(&McpClient::new(stack.http(), &stack.service().url())).await;
    // Through the gateway, with a token that may write.
    let token = stack
        .create_scoped_token("werkbaum-2026", &["mcp:read", "mcp:write"])
        .await
        .unwrap();
    dialogue(&stack.mcp(&token)).await;
}

/// A person at an rmcp client (the Rust SDK, on 2026-07-28): answers Werkbaum's questions
/// with `winner` and `confirm`, and remembers what was asked.
#[derive(Clone)]
struct Person {
    winner: &'static str,
    confirm: bool,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Person {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("werkbaum-person", "1.0"),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::V_2026_07_28)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _ctx: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let asked = serde_json::to_value(&request).unwrap();
        let message = asked["message"].as_str().unwrap_or_default().to_owned();
        self.asked.lock().unwrap().push(message);
        let content = if asked["requestedSchema"]["properties"]["winner"].is_object() {
            json!({"winner": self.winner})
        } else {
            json!({"confirm": self.confirm})
        };
        Ok(serde_json::from_value(json!({"action": "accept", "content": content})).unwrap())
    }
}

/// `tools/call` through the rmcp client (which fulfils input requests and retries by itself):
/// the structured result.
async fn rmcp_call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, Person>,
    name: &str,
    args: Value,
) -> Value {
    let result = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new(name.to_owned())
                .with_arguments(args.as_object().unwrap().clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::to_value(&result).unwrap()
}

/// The same questions answered by a real SDK client through the gateway: rmcp 3.11's client on
/// 2026-07-28 gets the input-required result, asks its handler (the person), and retries with
/// the answer and the state — the person's `mine` writes over the other edit, their `confirm`
/// deletes the subtree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_rmcp_client_answers_werkbaums_questions_through_the_gateway() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    use rmcp::transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    };
    let stack = Stack::builder()
        .plain_http()
        .limits(Limits::off())
        .start()
        .await;
    let token = stack
        .create_scoped_token("person", &["mcp:read", "mcp:write"])
        .await
        .unwrap();
    let person = Person {
        winner: "mine",
        confirm: true,
        asked: Default::default(),
    };
    let config =
        StreamableHttpClientTransportConfig::with_uri(stack.mcp_url()).auth_header(token.clone());
    let transport = StreamableHttpClientTransport::with_client(stack.http(), config);
    // 2026-07-28 from the start: `server/discover`, no `initialize`.
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    };
    let client = person
        .clone()
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .unwrap();
    let who = rmcp_call(&client, "whoami", json!({})).await;
    assert_eq!(who["structuredContent"]["protocolVersion"], V2026, "{who}");

    let plan = "# Plan\n[ ] a #a\n  [ ] a1 #a1\n[ ] b #b";
    let created = rmcp_call(
        &client,
        "werkbaum_create",
        json!({"title": "t", "text": plan}),
    )
    .await;
    let doc = created["structuredContent"]["document"]
        .as_str()
        .unwrap()
        .to_owned();
    let v1 = base(&created);
    // Another writer (by hand, same token) moves the document to version 2.
    let other = stack.mcp(&token);
    let theirs = call(
        &other,
        "werkbaum_set_status",
        json!({"document": doc, "base": v1, "id": "b", "status": "done"}),
        json!({}),
        false,
    )
    .await;
    assert_eq!(theirs["structuredContent"]["version"], 2, "{theirs}");

    // The SDK client's edit on version 1: the person is asked and chooses `mine`.
    let won = rmcp_call(
        &client,
        "werkbaum_set_status",
        json!({"document": doc, "base": v1, "id": "a", "status": "done"}),
    )
    .await;
    assert_eq!(won["structuredContent"]["version"], 3, "{won}");
    let removed = rmcp_call(
        &client,
        "werkbaum_remove_node",
        json!({"document": doc, "base": base(&won), "id": "a", "discard": false}),
    )
    .await;
    assert_eq!(removed["structuredContent"]["version"], 4, "{removed}");
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].contains("Which side wins") && asked[1].contains("Delete node"),
        "{asked:?}"
    );
    let _ = client.cancel().await;
}
