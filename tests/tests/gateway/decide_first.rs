//! The edge decides first: every refusal is made before an upstream connection is opened or
//! taken from the pool (a wire tap between the gateway and mcp-service finds nothing of a
//! refused request, not even its head), and early answers reach real clients whole — Node's
//! fetch and httpx2 over HTTP/1.1 (401 and 413 with a body still being sent), curl 7.88 over
//! HTTP/2 (the 401 where OAuth discovery starts), and the Python SDK's session survives a 413.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{process::Command, time::Duration};

use pforte_tests::{
    EchoUpstream, Limits, McpClient, McpService, Route, Stack, UpstreamAuth, WireTap, node22,
    python_sdk_or_skip, write_vault_key,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The gateway's `max_body_bytes` in these tests.
const MAX_BODY: u64 = 64 * 1024;

/// A body well over [`MAX_BODY`].
const BIG: usize = 1024 * 1024;

/// mcp-service behind a wire tap, a gateway in front of the tap.
async fn tapped(tls: bool) -> (Stack, WireTap, McpService) {
    let svc = McpService::start(&[]).unwrap();
    let tap = WireTap::start(&svc.addr.to_string()).await.unwrap();
    let mut builder = Stack::builder()
        .upstream(&tap.mcp_url())
        .max_body_bytes(MAX_BODY);
    if !tls {
        builder = builder.plain_http();
    }
    (builder.start().await, tap, svc)
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
}

/// POSTs `body` in `client`'s session with further `headers`; the answer's status and
/// request id.
async fn post(client: &McpClient, body: String, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut req = client.post_request();
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.body(body).send().await.unwrap();
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    (resp.status(), id)
}

#[tokio::test]
async fn refused_requests_put_nothing_on_the_upstream_wire() {
    let (stack, tap, _svc) = tapped(false).await;
    let gw = &stack.gw;
    let rw = gw.create_token("rw").await.unwrap();
    let ro = gw.create_scoped_token("ro", &["mcp:read"]).await.unwrap();
    let mut writer = gw.mcp(&rw);
    writer.open().await.unwrap();
    let mut reader = gw.mcp(&ro);
    reader.open().await.unwrap();
    // An admitted call: its head and body reach the upstream together.
    let whoami = call(2, "whoami", json!({})).to_string();
    let (status, admitted) = post(&reader, whoami.clone(), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(tap.saw(&admitted), "the admitted call reached the upstream");

    let write = call(3, "werkbaum_create", json!({"doc": "x", "text": "# x"})).to_string();
    let big = call(4, "whoami", json!({"pad": "x".repeat(BIG)})).to_string();
    let foreign = writer.session().unwrap().to_owned();
    let stranger = gw.mcp(&ro);
    let mut refusals: Vec<(&str, StatusCode, String)> = Vec::new();
    // 401: no credential.
    let resp = gw
        .http()
        .post(gw.mcp_url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(whoami.clone())
        .send()
        .await
        .unwrap();
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    refusals.push(("401", resp.status(), id));
    // 403: a write tool with a read-only token (decided on the body).
    let (s, id) = post(&reader, write.clone(), &[]).await;
    refusals.push(("403", s, id));
    // 400: a body that is not JSON-RPC.
    let (s, id) = post(&writer, "not json".to_owned(), &[]).await;
    refusals.push(("400 malformed", s, id));
    // 400: Mcp-Method saying something else than the body.
    let (s, id) = post(&writer, whoami.clone(), &[("mcp-method", "tools/list")]).await;
    refusals.push(("400 mismatch", s, id));
    // 413: a body over max_body_bytes.
    let (s, id) = post(&writer, big, &[]).await;
    refusals.push(("413", s, id));
    // 404: another principal's session.
    let (s, id) = post(&stranger, whoami.clone(), &[("mcp-session-id", &foreign)]).await;
    refusals.push(("404", s, id));

    let expected = [
        StatusCode::UNAUTHORIZED,
        StatusCode::FORBIDDEN,
        StatusCode::BAD_REQUEST,
        StatusCode::BAD_REQUEST,
        StatusCode::PAYLOAD_TOO_LARGE,
        StatusCode::NOT_FOUND,
    ];
    for ((what, status, id), want) in refusals.iter().zip(expected) {
        assert_eq!(*status, want, "{what}");
        assert!(
            !tap.saw(id),
            "{what}: the refused request reached the upstream"
        );
    }
    // The connection the refusals came on still works, and so does the upstream's.
    let (status, id) = post(&writer, whoami, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(tap.saw(&id));
    // Every request line the upstream got is a request the gateway admitted (the catalog's
    // own and the clients' admitted ones): as many POSTs as admitted ones at most.
    let lines = tap.request_lines();
    assert!(
        lines.iter().all(|l| !l.contains("werkbaum_create")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn early_answers_reach_node_fetch_and_httpx2_whole() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let node = match node22() {
        Ok(node) => node,
        Err(why) if !pforte_tests::in_ci() => {
            pforte_tests::skip(&why);
            return;
        }
        Err(why) => panic!("{why}"),
    };
    let (stack, tap, _svc) = tapped(false).await;
    let gw = &stack.gw;
    let token = gw.create_token("rw").await.unwrap();
    let before = tap.sent_len();

    let script = pforte_tests::target_dir()
        .join("..")
        .join("tests/conformance/early_answers.mjs");
    let out = Command::new(&node)
        .arg(&script)
        .args([&gw.mcp_url(), &token, &BIG.to_string(), "10"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: Vec<Value> = (0..10).flat_map(|_| [json!(401), json!(413)]).collect();
    assert_eq!(seen["statuses"], Value::Array(want), "Node's fetch");

    let script = pforte_tests::target_dir()
        .join("..")
        .join("tests/python/early_answers.py");
    let seen = pforte_tests::run_python_json(
        &python,
        &script,
        &[&gw.mcp_url(), &token, &BIG.to_string()],
        "",
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(seen["httpx"], json!([401, 413]), "httpx2: {seen}");
    // The SDK reports the 413 as an error response of the call ("MCPError: Server returned an
    // error response"), not a dead transport.
    assert!(
        seen["big"]
            .as_str()
            .unwrap_or_default()
            .starts_with("MCPError"),
        "the SDK's oversized call failed as a call: {seen}"
    );
    assert_eq!(seen["after"], json!(true), "the session survived: {seen}");
    // None of the oversized bodies reached the upstream.
    assert!(
        tap.sent_len() - before < BIG,
        "an oversized body went upstream"
    );
}

#[tokio::test]
async fn curl_over_http2_reads_every_early_401() {
    let (stack, _tap, _svc) = tapped(true).await;
    let gw = &stack.gw;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, gw.ca_pem().unwrap()).unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(
        &body,
        call(1, "whoami", json!({"pad": "x".repeat(8 * 1024)})).to_string(),
    )
    .unwrap();
    for round in 0..20 {
        let out = Command::new("curl")
            .args(["-sS", "--http2", "--cacert"])
            .arg(&ca)
            .args(["-o", "/dev/null", "-w", "%{http_version} %{http_code}"])
            .args(["-H", "content-type: application/json"])
            .args(["-H", "accept: application/json, text/event-stream"])
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .arg(gw.mcp_url())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said == "2 401",
            "round {round}: curl exit {:?}, {said}, {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn a_person_not_yet_connected_puts_nothing_on_a_per_user_routes_wire() {
    let echo = EchoUpstream::start().await.unwrap();
    let tap = WireTap::start(&echo.addr.to_string()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let stack = Stack::builder()
        .upstream("http://127.0.0.1:9/mcp")
        .plain_http()
        .limits(Limits::off())
        .vault_key(&key)
        .route(
            Route::url("search", &tap.mcp_url())
                .upstream_auth(UpstreamAuth::header("X-Api-Key").label("Search API key")),
        )
        .start()
        .await;
    let gw = &stack.gw;
    let hana = gw.create_token("hana").await.unwrap();
    let before = tap.sent_len();
    // The stand-in session and a call in it: the gateway's answers, nothing upstream.
    let mut standin = gw.mcp_at(&gw.route_url("search"), &hana);
    standin.open().await.unwrap();
    let (status, id) = post(&standin, call(2, "echo", json!({})).to_string(), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!tap.saw(&id), "the unconnected call reached the upstream");
    assert!(
        !tap.request_lines().iter().any(|l| l.starts_with("POST ")),
        "{:?}",
        tap.request_lines()
    );
    // What reached the upstream's wire meanwhile is the catalog's own traffic at most, never
    // a head of hana's.
    let sent = tap.sent_len() - before;
    assert!(
        !tap.saw("hana"),
        "hana's identity reached the upstream ({sent} bytes)"
    );
}
