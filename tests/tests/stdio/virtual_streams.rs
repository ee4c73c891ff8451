//! Issue 42 point 3, a virtual server's streams: `/team/mcp` over mcp-service (route `mcp`) and a
//! stdio route running a Python SDK server that talks back during a call
//! (tests/fixtures/stdio/server.py as `py`). The official Python SDK client
//! (tests/python/virtual_stream_client.py) gets the member's progress (its own token) and log
//! messages as they come and answers its sampling and elicitation requests through the virtual
//! server, and — point 3 — with the SDK's default negotiation stays stateless (MCP 2026-07-28)
//! and still gets a member's progress; by hand: a member's request reaches the client under an id of the gateway's, only
//! the asking session's answer to that id reaches the member (another session's, an unknown id
//! and a second answer are refused, 400), relayed notifications keep the member's bytes, and a
//! client's cancellation ends the relayed call.
//! Point 2: the session's `GET` stream announces `notifications/tools/list_changed` when a member
//! (mcp-service, killed) went down — its tools leave the list, which never fails — and when it
//! came back on its address; the stream is a session's, counted among the person's streams, and
//! ends with its session; what a member sends on its member session's own stream outside a call
//! reaches it too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{
    EchoUpstream, Events, Limits, Proc, Route, Stack, StackBuilder, bin, python_sdk_or_skip,
    run_python_json,
};
use serde_json::{Value, json};

use super::{stdio_routes::fixture, virtual_serve::until_listed};

/// The virtual server: mcp-service's 13 tools as `mcp_*`, the Python server's 8 as `py_*`.
const TEAM: &str = "[[virtual]]\nname = \"team\"\nmembers = [\"mcp\", \"py\"]\n";
const TOOLS: usize = 13 + 8;

/// A gateway over mcp-service (`mcp`) and the Python SDK stdio server (`py`, run as root: the
/// SDK's interpreter may live under root's 0700 home), serving [`TEAM`].
async fn start(python: &std::path::Path) -> Stack {
    start_with(Stack::builder(), python).await
}

/// [`start`] from `builder`.
async fn start_with(builder: StackBuilder, python: &std::path::Path) -> Stack {
    let command = [
        python.display().to_string(),
        fixture("server.py").display().to_string(),
    ];
    let mut gw = builder
        .plain_http()
        .route(Route::command("py", &command))
        .stdio_user("root")
        .start()
        .await;
    gw.restart_with(TEAM).await.unwrap();
    gw
}

/// The `data:` of every event in an event stream's text that holds `needle`.
fn data_with(stream: &str, needle: &str) -> Vec<String> {
    stream
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.contains(needle))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_gets_a_members_progress_logs_sampling_and_elicitation_through_a_virtual_server()
 {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let gw = start(&python).await;
    let token = gw.create_token("alice").await.unwrap();
    let url = gw.route_url("team");
    let mut client = gw.mcp_at(&url, &token);
    client.open().await.unwrap();
    until_listed(&client, TOOLS).await;

    let out = run_python_json(
        &python,
        &pforte_tests::target_dir()
            .join("..")
            .join("tests/python/virtual_stream_client.py"),
        &[&url, &token, "py_"],
        "",
        Duration::from_secs(90),
    )
    .await
    .unwrap();
    eprintln!("{out:#}");
    // Progress notifications carry the client's own token: the SDK's callback saw each.
    assert_eq!(out["progress"], "done after 3 steps", "{out}");
    assert_eq!(out["progress_seen"], json!([1.0, 2.0, 3.0]), "{out}");
    assert_eq!(out["log"], "logged a note", "{out}");
    assert_eq!(out["logs_seen"], json!(["a note"]), "{out}");
    // The member's sampling and elicitation requests reached the client, and its answers the
    // member.
    assert_eq!(out["sample"], "sampled: echo of hello", "{out}");
    assert_eq!(out["sampled_prompts"], json!(["hello"]), "{out}");
    assert_eq!(out["elicit"], "hello Grace", "{out}");
    // Point 3: the SDK's default negotiation finds the virtual server speaks 2026-07-28
    // (`server/discover`) and stays stateless; its calls go straight to the member — streamed
    // (a member session of the gateway's own would have answered whole, without progress).
    assert_eq!(out["auto_version"], "2026-07-28", "{out}");
    assert_eq!(out["auto_progress"], "done after 2 steps", "{out}");
    assert_eq!(out["auto_progress_seen"], json!([1.0, 2.0]), "{out}");
    assert_eq!(out["auto_echo"], "stateless", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_request_is_answered_only_by_the_session_it_was_relayed_to() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let gw = start(&python).await;
    let token = gw.create_token("alice").await.unwrap();
    let url = gw.route_url("team");
    let mut asked = gw.mcp_at(&url, &token);
    asked.open().await.unwrap();
    until_listed(&asked, TOOLS).await;
    let mut other = gw.mcp_at(&url, &token);
    other.open().await.unwrap();

    let call = json!({"jsonrpc": "2.0", "id": "call-7", "method": "tools/call",
                      "params": {"name": "py_sample", "arguments": {"prompt": "say hi"}}});
    let resp = asked.post(&call).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut events = Events::new(resp);
    let ask = events.next().await.expect("the member's request");
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
    assert_eq!(
        ask["params"]["messages"][0]["content"]["text"], "say hi",
        "{ask}"
    );
    let mapped = ask["id"].as_u64().expect("an id of the gateway's");
    let answer = |id: Value| {
        json!({"jsonrpc": "2.0", "id": id, "result": {"role": "assistant",
               "content": {"type": "text", "text": "hi there"}, "model": "test"}})
    };

    // Another session of the same person, an id never sent, an id of another type: refused,
    // and the member still waits.
    assert_eq!(other.post(&answer(json!(mapped))).await.status(), 400);
    assert_eq!(
        asked.post(&answer(json!(mapped + 1000))).await.status(),
        400
    );
    assert_eq!(
        asked
            .post(&answer(json!(mapped.to_string())))
            .await
            .status(),
        400
    );
    // The asking session's answer reaches the member, once.
    assert_eq!(asked.post(&answer(json!(mapped))).await.status(), 202);
    let done = events.next().await.expect("the call's response");
    assert_eq!(done["id"], "call-7", "the client's id: {done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "sampled: hi there",
        "{done}"
    );
    assert!(events.next().await.is_none(), "the stream ends with it");
    assert_eq!(asked.post(&answer(json!(mapped))).await.status(), 400);
    // A response without a session has nobody to go to.
    let sessionless = gw.mcp_at(&url, &token);
    assert_eq!(sessionless.post(&answer(json!(mapped))).await.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_notifications_keep_the_members_bytes() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let gw = start(&python).await;
    let token = gw.create_token("alice").await.unwrap();
    let mut team = gw.mcp_at(&gw.route_url("team"), &token);
    team.open().await.unwrap();
    until_listed(&team, TOOLS).await;
    let mut direct = gw.mcp_at(&gw.route_url("py"), &token);
    direct.open().await.unwrap();

    let call = |name: &str| {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": name, "arguments": {"steps": 2},
                          "_meta": {"progressToken": "token-of-the-client"}}})
    };
    let through_team = team.post(&call("py_progress")).await.text().await.unwrap();
    let straight = direct.post(&call("progress")).await.text().await.unwrap();
    let progress = data_with(&through_team, "notifications/progress");
    assert_eq!(progress.len(), 2, "{through_team}");
    assert!(
        progress[0].contains("\"token-of-the-client\""),
        "{through_team}"
    );
    // The member route relays the member's bytes as they are; the virtual server does too.
    assert_eq!(
        progress,
        data_with(&straight, "notifications/progress"),
        "{through_team}\n{straight}"
    );
    let response = data_with(&through_team, "done after 2 steps");
    assert_eq!(response, data_with(&straight, "done after 2 steps"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_stream_announces_a_member_that_went_down_and_came_back() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let limits = Limits::off().streams_per_principal(1);
    let mut gw = start_with(Stack::builder().limits(limits), &python).await;
    let token = gw.create_token("alice").await.unwrap();
    let url = gw.route_url("team");
    let mut client = gw.mcp_at(&url, &token);
    client.open().await.unwrap();
    until_listed(&client, TOOLS).await;

    // A stream is a session's, and counts among the person's streams.
    assert_eq!(gw.mcp_at(&url, &token).stream().await.status(), 404);
    let resp = client.stream().await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    assert_eq!(client.stream().await.status(), 429, "one stream per person");
    let mut notes = Events::new(resp);

    // mcp-service goes down: announced, and its tools leave the list (the rest is listed).
    let addr = gw.service().addr;
    let service = gw.service_mut();
    service.proc.child.kill().unwrap();
    service.proc.child.wait().unwrap();
    let note = notes.next().await.expect("an announcement");
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    let names = client.tool_names().await;
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("py_")), "{names:?}");

    // Back on its address: announced again, its tools listed again.
    let data = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(bin("mcp-service"));
    cmd.env("MCP_SERVICE_DATA_DIR", data.path())
        .args(["serve", "--listen", &addr.to_string()]);
    let mut back = Proc::spawn(cmd).unwrap();
    back.wait_line("listening on", Duration::from_secs(30))
        .unwrap();
    let note = notes.next().await.expect("an announcement");
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    assert_eq!(client.list_tools().await.len(), TOOLS);

    // The session ends: so does its stream.
    assert_eq!(client.delete().await.status(), 200);
    assert!(notes.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_member_sends_outside_a_call_reaches_the_sessions_stream() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let gw = start(&python).await;
    let token = gw.create_token("alice").await.unwrap();
    let mut client = gw.mcp_at(&gw.route_url("team"), &token);
    client.open().await.unwrap();
    until_listed(&client, TOOLS).await;
    // The first call opens the session's member session with `py`; the stream listens to it.
    let echoed =
        pforte_tests::rpc_answer(client.call_tool("py_echo", json!({"text": "x"})).await).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "x", "{echoed}");
    let resp = client.stream().await;
    assert_eq!(resp.status(), 200);
    let mut notes = Events::new(resp);
    // `changed` announces on the member session's own stream, not the call's.
    let called = pforte_tests::rpc_answer(client.call_tool("py_changed", json!({})).await).await;
    assert_eq!(
        called["result"]["content"][0]["text"], "announced",
        "{called}"
    );
    let note = notes.next().await.expect("the member's notification");
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_cancellation_ends_the_relayed_call() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let gw = start(&python).await;
    let token = gw.create_token("alice").await.unwrap();
    let mut client = gw.mcp_at(&gw.route_url("team"), &token);
    client.open().await.unwrap();
    until_listed(&client, TOOLS).await;
    let call = json!({"jsonrpc": "2.0", "id": "c-1", "method": "tools/call",
                      "params": {"name": "py_sample", "arguments": {"prompt": "never"}}});
    let mut events = Events::new(client.post(&call).await);
    let ask = events.next().await.expect("the member's request");
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "c-1", "reason": "the user stopped"}});
    assert_eq!(client.post(&cancel).await.status(), 202);
    // The client's stream ends without an answer (the member's request is no longer held).
    let rest = events.all().await;
    assert!(rest.is_empty(), "nothing after the cancellation: {rest:?}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"role": "assistant",
                        "content": {"type": "text", "text": "late"}, "model": "test"}});
    assert_eq!(client.post(&answer).await.status(), 400);
    // A cancellation of no relayed call reaches no member and is taken like any notification.
    assert_eq!(client.post(&cancel).await.status(), 202);
    // The session goes on.
    let echoed =
        pforte_tests::rpc_answer(client.call_tool("py_echo", json!({"text": "on"})).await).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "on", "{echoed}");
}

#[tokio::test]
async fn a_stateless_request_reaches_a_member_of_an_earlier_revision_on_a_session_of_its_own() {
    // The member keeps sessions as a server of MCP 2025-11-25 does: a request without one gets
    // 400, before anything is done.
    let echo = EchoUpstream::start().await.unwrap();
    echo.require_sessions();
    let mut gw = Stack::builder()
        .plain_http()
        .limits(Limits::off())
        .route(Route::url("old", &echo.mcp_url()))
        .start()
        .await;
    let team = "[[virtual]]\nname = \"team\"\nmembers = [\"old\"]\n";
    gw.restart_with(team).await.unwrap();
    let token = gw.create_token("t").await.unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "old_echo", "arguments": {},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "stateless", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let url = gw.route_url("team");
    let mut answer = Value::Null;
    // The member's catalog is listed shortly after the start.
    for _ in 0..100 {
        let resp = gw
            .http()
            .post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "old_echo")
            .json(&call)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        answer = pforte_tests::rpc_answer(resp).await;
        if answer.get("result").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // Tried without a session (400), then on a session the gateway opened for it.
    let calls: Vec<bool> = echo
        .seen()
        .iter()
        .filter(|s| s.rpc_method.as_deref() == Some("tools/call"))
        .map(|s| s.header("mcp-session-id").is_some())
        .collect();
    assert_eq!(calls, [false, true], "{calls:?}");
}
