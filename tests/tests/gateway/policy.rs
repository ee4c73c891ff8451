//! `[[policy]]` rules over claims and arguments end to end (issue 43 point 2), with the real
//! gateway and mcp-service: a call denied by its arguments (rmcp's client, the official Rust
//! SDK) never reaches the upstream's wire, the same tool with other arguments does; an
//! `approve` rule holds the call (the caller gets the approval's link); a rule that does not
//! read `args` cuts `tools/list` per person (an OAuth user's roles through the real flow, a
//! static token through rmcp); a 2026-07-28 client reads the structured denial; the audit
//! line, the metric and `pforte check` name the rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_tests::{
    McpService, OAuth, PolicyRule, Role, Stack, WireTap,
    connect::{metric_sum, metrics_text},
    eventually, oauth,
};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use super::duties::{MODERN, modern, post_modern};

const PASSWORD: &str = "correct horse battery staple";

/// The worked example of docs/policy.md, on mcp-service's `werkbaum_read`.
fn no_secret_docs() -> PolicyRule {
    PolicyRule::new(
        "no-secret-docs",
        r#"tool.name == "werkbaum_read" && args.document.startsWith("secret-")"#,
        "deny",
    )
    .message("Secret documents are read by hand.")
}

fn read(document: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("werkbaum_read")
        .with_arguments(json!({"document": document}).as_object().unwrap().clone())
}

/// The audit lines once `count` of them name `rule` (they are written off the request path).
async fn audit_lines(gw: &pforte_tests::Gateway, rule: &str, count: usize) -> Vec<Value> {
    let path = gw.data_dir().join("audit.jsonl");
    let needle = format!("\"rule\":\"{rule}\"");
    let found =
        eventually(std::time::Duration::from_secs(5), || {
            let (path, needle) = (path.clone(), needle.clone());
            async move {
                std::fs::read_to_string(&path).is_ok_and(|t| t.matches(&needle).count() >= count)
            }
        })
        .await;
    assert!(found, "fewer than {count} audit lines name {rule}");
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_rule_denies_by_argument_before_the_upstream_sees_the_call() {
    let svc = McpService::start(&[]).unwrap();
    let tap = WireTap::start(&svc.addr.to_string()).await.unwrap();
    let stack = Stack::builder()
        .upstream(&tap.mcp_url())
        .plain_http()
        .policy(no_secret_docs())
        .policy(
            PolicyRule::new(
                "approve-creates",
                r#"tool.name == "werkbaum_create""#,
                "approve",
            )
            .message("Creating a plan needs an approval."),
        )
        .start()
        .await;
    let gw = &stack.gw;
    let token = gw.create_token("ci").await.unwrap();
    let client = gw.rmcp_client(&token, &[]).await.unwrap();

    // Allowed: another document (the service answers, whatever it finds).
    let open = client.call_tool(read("open-plan-0001")).await;
    assert!(open.is_ok(), "{open:?}");
    assert!(
        tap.saw("open-plan-0001"),
        "the allowed call reached the upstream"
    );
    // Denied by its argument: the SDK reports the refusal, the upstream never saw it.
    let denied = client.call_tool(read("secret-plan-0001")).await;
    assert!(denied.is_err(), "{denied:?}");
    assert!(
        !tap.saw("secret-plan-0001"),
        "the denied call reached the upstream"
    );
    client.cancel().await.unwrap();

    // What the refusal says, to a client before 2026-07-28.
    let mut raw = gw.mcp(&token);
    raw.open().await.unwrap();
    let resp = raw
        .call_tool("werkbaum_read", json!({"document": "secret-plan-0002"}))
        .await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["reason"], "policy_denied");
    assert_eq!(body["rule"], "no-secret-docs");
    assert_eq!(body["message"], "Secret documents are read by hand.");
    // An approve rule: the call is held, its caller told where it waits for a person
    // (tests/tests/oauth/approvals.rs has the rest of the approval's life).
    let resp = raw
        .call_tool("werkbaum_create", json!({"document": "x", "text": "# x"}))
        .await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["result"]["isError"], true, "{body}");
    let held = &body["result"]["_meta"]["io.modelcontextprotocol/authorization"];
    assert_eq!(held["remediation"], "available", "{body}");
    assert!(
        body["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Creating a plan needs an approval."),
        "{body}"
    );
    // Nothing of either refused call went upstream.
    assert!(!tap.saw("secret-plan-0002") && !tap.saw("werkbaum_create"));

    // The audit line and the metric name the rule.
    // The held call's `approval_requested` line and its request line both name the rule.
    audit_lines(gw, "approve-creates", 2).await;
    let lines = audit_lines(gw, "no-secret-docs", 2).await;
    let denials: Vec<&Value> = lines
        .iter()
        .filter(|l| l["rule"] == "no-secret-docs")
        .collect();
    assert_eq!(denials.len(), 2, "{lines:?}");
    assert!(denials.iter().all(|l| l["reason"] == "policy_denied"
        && l["decision"] == "denied"
        && l["name"] == "werkbaum_read"));
    assert!(
        lines
            .iter()
            .filter(|l| l["name"] == "werkbaum_read" && l["decision"] == "allowed")
            .all(|l| l["rule"].is_null())
    );
    assert!(lines.iter().any(|l| l["rule"] == "approve-creates"
        && l["reason"] == "approval_required"
        && l["name"] == "werkbaum_create"));
    let text = metrics_text(&gw.http(), &gw.base).await.unwrap();
    let denied = metric_sum(
        &text,
        "pforte_policy_decisions_total",
        &["rule=\"no-secret-docs\"", "effect=\"deny\""],
    );
    assert_eq!(denied, 2.0, "{text}");
}

#[tokio::test]
async fn a_rule_without_args_cuts_tools_list_per_person() {
    let rule = PolicyRule::new(
        "history-for-finance",
        r#"tool.name == "werkbaum_history" && !("finance" in user.roles)"#,
        "deny",
    )
    .message("Only finance reads the history.");
    let everyone = Role {
        users: vec!["*".to_owned()],
        scopes: Some(vec!["mcp:read".to_owned(), "mcp:write".to_owned()]),
        ..Role::default()
    };
    let finance = Role {
        users: vec!["alice".to_owned()],
        ..Role::default()
    };
    let stack = Stack::builder()
        .oauth(
            OAuth::default()
                .role("everyone", everyone)
                .role("finance", finance),
        )
        .policy(rule)
        .start()
        .await;
    let gw = &stack.gw;
    gw.add_user("alice", PASSWORD).unwrap();
    gw.add_user("bob", PASSWORD).unwrap();
    let alice = oauth::access_token(gw, "alice", PASSWORD, "mcp:read mcp:write")
        .await
        .unwrap();
    let bob = oauth::access_token(gw, "bob", PASSWORD, "mcp:read mcp:write")
        .await
        .unwrap();

    let mut alices = gw.mcp(&alice);
    alices.open().await.unwrap();
    let mut bobs = gw.mcp(&bob);
    bobs.open().await.unwrap();
    let alice_sees = alices.tool_names().await;
    let bob_sees = bobs.tool_names().await;
    assert!(alice_sees.contains("werkbaum_history"), "{alice_sees:?}");
    assert!(!bob_sees.contains("werkbaum_history"), "{bob_sees:?}");
    assert_eq!(bob_sees.len(), alice_sees.len() - 1);
    // The list answer is marked private (another person sees another list).
    let resp = bobs.request("tools/list", json!({})).await;
    let answer = pforte_tests::rpc_answer(resp).await;
    assert_eq!(answer["result"]["cacheScope"], "private", "{answer}");

    let history = json!({"document": "00000000-0000-4000-8000-000000000000"});
    let refused = bobs.call_tool("werkbaum_history", history.clone()).await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["rule"], "history-for-finance");
    assert_eq!(
        alices.call_tool("werkbaum_history", history).await.status(),
        200
    );

    // A static token holds no role: rmcp's client does not see the tool either.
    let token = gw.create_token("ci").await.unwrap();
    let client = gw.rmcp_client(&token, &[]).await.unwrap();
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        !listed.contains(&"werkbaum_history".to_owned()),
        "{listed:?}"
    );
    assert_eq!(listed.len(), bob_sees.len());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2026_07_28_client_reads_the_structured_denial() {
    let stack = Stack::builder().policy(no_secret_docs()).start().await;
    let gw = &stack.gw;
    let token = gw.create_token("ci").await.unwrap();
    let client = gw.mcp(&token);
    let call = modern(
        7,
        "tools/call",
        json!({"name": "werkbaum_read", "arguments": {"document": "secret-plan-0003"}}),
    );
    let resp = post_modern(&client, &call, &[("mcp-name", "werkbaum_read")]).await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], 7);
    let error = &body["error"];
    assert_eq!(error["code"], -32003);
    assert_eq!(error["message"], "Secret documents are read by hand.");
    assert_eq!(
        error["data"]["authorization"],
        json!({"reason": "insufficient_authorization", "remediationHints": []})
    );
    assert_eq!(error["data"]["rule"], "no-secret-docs");
    assert_eq!(error["data"]["reason"], "policy_denied");
    // The same client's other calls go on.
    let other = modern(
        8,
        "tools/call",
        json!({"name": "werkbaum_read", "arguments": {"document": "open-plan-0003"}}),
    );
    let resp = post_modern(&client, &other, &[("mcp-name", "werkbaum_read")]).await;
    assert_eq!(resp.status(), 200, "{MODERN}");
}
