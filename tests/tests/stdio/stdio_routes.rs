//! stdio routes end to end: `[[routes]]` with `command = [...]` in a real `pforte serve`, the
//! gateway's stdio bridge running the children — the Python SDK server
//! (tests/fixtures/stdio/server.py) called by the Python SDK client, `mcp-service stdio` called
//! by rmcp, a crash mid-call, the per-route cap, no lockout at the per-person cap (ten health
//! checks that never DELETE, the Claude Code CLI's `claude mcp list` among them; a call in
//! flight never evicted), no child left after SIGTERM or SIGKILL of the
//! gateway, and the MCP conformance suite against tests/conformance/everything-server.cjs run
//! with its stdio transport. The hardening of children (tests/fixtures/stdio/plain_server.py, on
//! the standard library only): an oversized message, the whole process tree on SIGKILL, a
//! route's `user`, no inherited descriptor, a gateway that is not dumpable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use nix::sys::signal::Signal;
use pforte_tests::{
    EverythingServer, Gateway, GatewayConfig, Limits, Route, Stack, bin,
    conformance::{Results, run_suite, tools},
    eventually, reachable_copy, rmcp_client, run_python_json, write_config,
};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/stdio")
        .join(name)
}

fn python() -> Option<PathBuf> {
    pforte_tests::python_sdk_or_skip()
}

fn python_command(python: &Path) -> Vec<String> {
    vec![
        python.display().to_string(),
        fixture("server.py").display().to_string(),
    ]
}

/// Where the gateways of these tests send `/mcp`: nowhere (unused).
pub(crate) const NOWHERE: &str = "http://127.0.0.1:9/mcp";

/// A plain-HTTP gateway (limits off, many sessions per principal) with `route`; its
/// `[upstream]` points nowhere (unused).
pub(crate) async fn gateway(route: Route) -> Stack {
    gateway_through(route, &[]).await
}

/// [`gateway`] started through `wrapper` (see `StackBuilder::wrapper`).
async fn gateway_through(route: Route, wrapper: &[&str]) -> Stack {
    builder(route).wrapper(wrapper).start().await
}

fn builder(route: Route) -> pforte_tests::StackBuilder {
    Stack::builder()
        .upstream(NOWHERE)
        .plain_http()
        .limits(Limits::off().sessions_per_principal(1000))
        .route(route)
}

/// [`gateway`] for a route on the Python SDK's venv, whose interpreter may be a link into
/// root's own pyenv (`/root` is 0700: no other account runs it): a root gateway runs it as root,
/// the explicit opt-out (`stdio_user = "root"`; a gateway that is not root ignores it).
async fn sdk_gateway(route: Route) -> Stack {
    builder(route).stdio_user("root").start().await
}

/// The system's python3 (readable by every user, unlike a pyenv under /root), running the
/// SDK-free fixture with `args`.
fn plain_command(args: &[&str]) -> Vec<String> {
    let mut command = vec![
        "/usr/bin/python3".to_owned(),
        fixture("plain_server.py").display().to_string(),
    ];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    command
}

/// A field of /proc/PID/status in KiB (`VmHWM`: the peak resident set).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("{field} in {status}"))
}

/// Every running process whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) && alive(pid) {
            out.push((pid, cmdline));
        }
    }
    out
}

/// `initialize` through the gateway: the response.
async fn initialize(gw: &Gateway, url: &str, token: &str) -> reqwest::Response {
    gw.mcp_at(url, token)
        .protocol("2025-11-25")
        .initialize()
        .await
}

/// The processes whose parent is `pid`, with their command lines.
fn children_of(pid: u32) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            out.insert(child, String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    out
}

/// Whether `pid` runs (a zombie waiting to be reaped does not).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
    !state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
}

pub(crate) async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
    name: &str,
    args: Value,
) -> Result<String, String> {
    let params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    match client.call_tool(params).await {
        Ok(r) => Ok(r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_uses_a_python_sdk_server_through_a_stdio_route() {
    let Some(python) = python() else { return };
    let gw = sdk_gateway(Route::command("py", &python_command(&python))).await;
    let token = gw.create_token("py-client").await.unwrap();
    let url = format!("{}/py/mcp", gw.base);
    let out = run_python_json(
        &python,
        &fixture("client.py"),
        &[&url, &token],
        "",
        Duration::from_secs(120),
    )
    .await
    .unwrap();
    eprintln!("{out:#}");
    assert_eq!(out["echo"], "through the gateway");
    assert_eq!(out["progress"], "done after 3 steps");
    assert_eq!(out["progress_seen"], json!([1.0, 2.0, 3.0]));
    assert_eq!(out["sample"], "sampled: echo of hello");
    assert_eq!(out["elicit"], "hello Grace");
    assert!(
        out["tools"].as_array().unwrap().contains(&json!("crash")),
        "{out}"
    );
    // The SDK's default negotiation finds the server speaks 2026-07-28 (server/discover on a
    // pool child) and calls statelessly.
    assert_eq!(out["auto_version"], "2026-07-28");
    assert_eq!(out["auto_echo"], "stateless");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_service_stdio_is_a_route() {
    let data = tempfile::tempdir().unwrap();
    pforte_tests::open_to_children(data.path());
    let command = [bin("mcp-service").display().to_string(), "stdio".to_owned()];
    let gw = gateway(
        Route::command("plans", &command)
            .env("MCP_SERVICE_DATA_DIR", &data.path().display().to_string()),
    )
    .await;
    let token = gw.create_token("plans").await.unwrap();
    let url = format!("{}/plans/mcp", gw.base);
    let client = rmcp_client(&url, gw.http(), &token, &[]).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "whoami"), "{tools:?}");
    // The stdio server learns who calls (the bridge's identity), not `subject: -`.
    let who = call(&client, "whoami", json!({})).await.unwrap();
    assert!(who.contains("operator") && who.contains("plans"), "{who}");
    assert!(!who.contains("local"), "{who}");
    // /metrics counts the route's running child and the session bound to it.
    let metrics = gw
        .http()
        .get(format!("{}/metrics", gw.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |prefix: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} in {metrics}"))
    };
    assert!(
        value("pforte_stdio_children{route=\"plans\"}") >= 1.0,
        "{metrics}"
    );
    assert!(value("pforte_sessions_live ") >= 1.0, "{metrics}");
    let _ = client.cancel().await;

    // Only the gateway's user reaches the bridge: the socket 0600 in a 0700 directory.
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    let socket = gw.data_dir().join("run/stdio/plans.sock");
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket(), "{}", socket.display());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dir = std::fs::metadata(socket.parent().unwrap()).unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_an_error_and_the_next_call_works() {
    let Some(python) = python() else { return };
    let gw = sdk_gateway(Route::command("py", &python_command(&python))).await;
    let token = gw.create_token("crasher").await.unwrap();
    let url = format!("{}/py/mcp", gw.base);
    let client = rmcp_client(&url, gw.http(), &token, &[]).await.unwrap();
    let before = call(&client, "pid", json!({})).await.unwrap();
    let crashed = call(&client, "crash", json!({})).await.unwrap_err();
    assert!(
        crashed.contains("`py` exited") && crashed.contains("being restarted"),
        "{crashed}"
    );
    let back = eventually(Duration::from_secs(20), || {
        let attempt = call(&client, "pid", json!({}));
        async move {
            match attempt.await {
                Ok(_) => true,
                Err(e) => {
                    assert!(e.contains("retry in") || e.contains("starting"), "{e}");
                    false
                }
            }
        }
    })
    .await;
    assert!(back, "the server came back in the same session");
    let after = call(&client, "pid", json!({})).await.unwrap();
    assert_ne!(after, before, "a new process");
    assert_eq!(
        call(&client, "echo", json!({"text": "again"}))
            .await
            .unwrap(),
        "again"
    );
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_sessions_on_a_cap_of_sixteen_get_four_503s_through_the_gateway() {
    let Some(python) = python() else { return };
    let gw = sdk_gateway(
        Route::command("py", &python_command(&python))
            .max_children(16)
            .max_children_per_principal(32),
    )
    .await;
    let token = gw.create_token("many").await.unwrap();
    let url = format!("{}/py/mcp", gw.base);
    let opens = (0..20).map(|_| initialize(&gw, &url, &token));
    let answers = futures::future::join_all(opens).await;
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for r in &answers {
        *by_status.entry(r.status().as_u16()).or_default() += 1;
    }
    assert_eq!(by_status, BTreeMap::from([(200, 16), (503, 4)]));
    for r in answers.into_iter().filter(|r| r.status() == 503) {
        assert_eq!(r.headers()["retry-after"], "10");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_children"),
            "{v}"
        );
    }
}

/// Opens two sessions on a route whose children only a signal ends, then stops the gateway
/// with `signal`: none of them may be left.
async fn no_child_left_after(signal: Signal) {
    let Some(python) = python() else { return };
    let mut gw =
        sdk_gateway(Route::command("py", &python_command(&python)).env("FIXTURE_HOLD_ON_EOF", "1"))
            .await;
    let token = gw.create_token("stopper").await.unwrap();
    let url = format!("{}/py/mcp", gw.base);
    for _ in 0..2 {
        assert_eq!(initialize(&gw, &url, &token).await.status(), 200);
    }
    let gw_pid = gw.proc.child.id();
    let servers = || -> Vec<u32> {
        children_of(gw_pid)
            .into_iter()
            .filter(|(_, cmd)| cmd.contains("server.py"))
            .map(|(pid, _)| pid)
            .collect()
    };
    // The two sessions' and the gateway's own (its tool catalog's).
    let all_there = eventually(Duration::from_secs(10), || async { servers().len() == 3 }).await;
    assert!(all_there, "{:?}", children_of(gw_pid));
    let children = servers();
    gw.proc
        .signal_and_wait(signal, Duration::from_secs(15))
        .unwrap();
    let gone = eventually(Duration::from_secs(10), || async {
        children.iter().all(|p| !alive(*p))
    })
    .await;
    assert!(
        gone,
        "children outlived the gateway ({signal}): {:?}",
        children.iter().map(|p| (p, alive(*p))).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_is_left_after_the_gateway_stops_on_sigterm() {
    no_child_left_after(Signal::SIGTERM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_is_left_after_the_gateway_is_sigkilled() {
    no_child_left_after(Signal::SIGKILL).await;
}

/// The active conformance suite against tests/conformance/everything-server.cjs twice: over
/// streamable HTTP directly, and run with `--stdio` as a stdio route through the gateway. Every
/// check must end through the stdio route as it does directly, but DNS-rebinding protection
/// (the gateway's), which must pass, and the check of concurrent SSE answers, which JSON
/// answers make information only. Prints one row per check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_target_passes_through_a_stdio_route() {
    let Some((node, packages)) = tools() else {
        return;
    };
    let node_modules = packages.parent().unwrap().display().to_string();
    let command = [
        node.display().to_string(),
        pforte_tests::conformance_script("everything-server.cjs")
            .display()
            .to_string(),
        "--stdio".to_owned(),
    ];
    let gw = gateway(
        Route::command("everything", &command)
            .env("NODE_PATH", &node_modules)
            .max_children(64)
            .max_children_per_principal(64),
    )
    .await;
    let token = gw
        .create_scoped_token("conformance", &["mcp:read", "mcp:write"])
        .await
        .unwrap();
    let http_target = EverythingServer::start_conformance_target(&node, &packages).unwrap();
    let direct: Results = run_suite(&node, &packages, &http_target.url(), None);
    let url = format!("{}/everything/mcp", gw.base);
    let through: Results = run_suite(&node, &packages, &url, Some(&token));

    let mut wrong = Vec::new();
    let mut per_scenario: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    eprintln!("{:<75} {:<8} {:<8}", "scenario / check", "direct", "stdio");
    for (key, (status, error)) in &through {
        let (scenario, id) = key;
        let before = direct.get(key).map_or("-", |(s, _)| s.as_str());
        eprintln!(
            "{:<75} {before:<8} {status:<8}",
            format!("{scenario} / {id}")
        );
        let entry = per_scenario.entry(scenario).or_default();
        entry.1 += 1;
        if status == "SUCCESS" {
            entry.0 += 1;
        }
        let expected = if scenario == "dns-rebinding-protection" {
            "SUCCESS"
        } else {
            before
        };
        if status != expected {
            wrong.push(format!(
                "{scenario} / {id}: {status} through the stdio route, expected {expected} ({error})"
            ));
        }
    }
    // A single answer comes as one JSON body through the stdio route (issue 36: the Python SDK
    // reads at most 1 MiB per event); the suite then reports "SSE streams optional" as
    // information, not as a check.
    let json_answers = (
        "server-sse-multiple-streams",
        "server-sse-streams-functional",
    );
    for key in direct.keys() {
        if !through.contains_key(key) && (key.0.as_str(), key.1.as_str()) != json_answers {
            wrong.push(format!(
                "{} / {}: missing through the stdio route",
                key.0, key.1
            ));
        }
    }
    for (scenario, (ok, all)) in &per_scenario {
        eprintln!("{scenario}: {ok}/{all} checks pass through the stdio route");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Review finding "caps per (user, client)": a user who registers more OAuth clients gets no
/// more children of a stdio route; `max_children_per_principal` counts the person: the second
/// client's session closes the person's least recently used idle one (issue 36 point 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_second_client_gets_no_more_children() {
    let Some(python) = python() else { return };
    let gw = sdk_gateway(
        Route::command("py", &python_command(&python))
            .max_children(6)
            .max_children_per_principal(2),
    )
    .await;
    gw.add_user("alice", "alice-password-1").unwrap();
    gw.add_user("bob", "bob-password-22").unwrap();
    let url = format!("{}/py/mcp", gw.base);
    let token = |user: &'static str, password: &'static str| {
        pforte_tests::oauth::access_token_at(&url, None, user, password, "mcp:read")
    };
    // Each token comes from a client registered for it.
    let one = token("alice", "alice-password-1").await.unwrap();
    let two = token("alice", "alice-password-1").await.unwrap();
    let session = |token: &str| gw.mcp_at(&url, token).protocol("2025-11-25");
    let (mut first, mut second, mut third) = (session(&one), session(&one), session(&two));
    first.open().await.unwrap();
    second.open().await.unwrap();
    second.list_tools().await;
    third.open().await.unwrap();
    // The person's third child: the first (least recently used, idle) made room.
    assert_eq!(first.request("tools/list", json!({})).await.status(), 404);
    assert_eq!(second.request("tools/list", json!({})).await.status(), 200);
    assert_eq!(third.request("tools/list", json!({})).await.status(), 200);
    let bob = token("bob", "bob-password-22").await.unwrap();
    assert_eq!(initialize(&gw, &url, &bob).await.status(), 200);
}

/// Issue 36 point 5: health checks that never `DELETE` their sessions (`claude mcp list`, the
/// MCP inspector) are not locked out at `max_children_per_principal`: ten in a row on a cap of
/// 4 all succeed, the oldest idle sessions are closed to make room (an audit line names each)
/// and an evicted session's next request gets 404, so its client initializes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_health_checks_that_never_delete_all_succeed_on_a_cap_of_four() {
    let gw =
        gateway(Route::command("plain", &plain_command(&[])).max_children_per_principal(4)).await;
    let token = gw.create_token("ci").await.unwrap();
    let url = format!("{}/plain/mcp", gw.base);
    let mut checks = Vec::new();
    for i in 0..10 {
        let mut client = gw.mcp_at(&url, &token).protocol("2025-11-25");
        if let Err(refused) = client.open().await {
            panic!("health check {i}: {}", refused.status());
        }
        assert!(!client.list_tools().await.is_empty(), "health check {i}");
        checks.push(client);
    }
    for (i, client) in checks.iter().enumerate() {
        let status = client.request("tools/list", json!({})).await.status();
        // The last four hold the person's four children; the others were closed.
        let expected = if i >= 6 { 200 } else { 404 };
        assert_eq!(status, expected, "session {i}");
    }
    // A 404'd client initializes again and goes on.
    let mut again = gw.mcp_at(&url, &token).protocol("2025-11-25");
    again.open().await.unwrap();
    assert!(!again.list_tools().await.is_empty());
    let audit = gw.data_dir().join("audit.jsonl");
    let evictions = || {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == "session_evicted")
            .collect::<Vec<_>>()
    };
    let seen = eventually(Duration::from_secs(10), || {
        let n = evictions().len();
        async move { n >= 7 }
    })
    .await;
    let lines = evictions();
    assert!(seen, "seven evictions audited: {lines:?}");
    let line = &lines[0];
    assert_eq!(line["route"], "plain");
    assert_eq!(line["limit"], "max_children_per_principal");
    assert_eq!(line["max"], 4);
    assert_eq!(line["person"], "static:ci");
    assert_eq!(line["session"].as_str().unwrap().len(), 12, "{line}");
}

/// Issue 36 point 5 with the real client: ten `claude mcp list` runs in a row (the Claude Code
/// CLI's health check: initialize, list, never DELETE) against a stdio route with a cap of 4
/// children per person all show the server "Connected".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_claude_mcp_list_runs_all_connect_on_a_cap_of_four() {
    let claude = match pforte_tests::claude_code() {
        Ok(claude) => claude,
        Err(why) => {
            assert!(!pforte_tests::in_ci(), "{why}");
            pforte_tests::skip(&why);
            return;
        }
    };
    let gw =
        gateway(Route::command("plain", &plain_command(&[])).max_children_per_principal(4)).await;
    let token = gw.create_token("claude").await.unwrap();
    let url = format!("{}/plain/mcp", gw.base);
    let home = tempfile::tempdir().unwrap();
    let claude_run = |args: Vec<String>| {
        let claude = claude.clone();
        let home = home.path().to_owned();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            pforte_tests::run_claude(&claude, &home, &args)
        })
    };
    let auth = format!("Authorization: Bearer {token}");
    let add = [
        "mcp",
        "add",
        "--transport",
        "http",
        "plain",
        &url,
        "--header",
        &auth,
    ];
    claude_run(add.iter().map(|s| (*s).to_owned()).collect())
        .await
        .unwrap()
        .unwrap();
    for i in 0..10 {
        let out = claude_run(vec!["mcp".into(), "list".into()])
            .await
            .unwrap()
            .unwrap();
        let line = out
            .lines()
            .find(|l| l.contains("plain"))
            .unwrap_or_default();
        assert!(line.contains("Connected"), "run {i}: {out}");
    }
}

/// Issue 36 point 5: a session with a call in flight is never closed to make room, however
/// long ago its client last sent anything; the idle ones around it are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_a_call_in_flight_is_never_evicted() {
    let Some(python) = python() else { return };
    let gw =
        sdk_gateway(Route::command("py", &python_command(&python)).max_children_per_principal(2))
            .await;
    let token = gw.create_token("ci").await.unwrap();
    let url = format!("{}/py/mcp", gw.base);
    let mut busy = gw
        .mcp_at(&url, &token)
        .protocol("2025-11-25")
        .capabilities(json!({"sampling": {}}));
    busy.open().await.unwrap();
    // `sample` waits for the client's sampling answer, which never comes: the call stays in
    // flight. Its first event (the server's sampling request) shows it arrived.
    let mut call = busy.call_tool("sample", json!({"prompt": "hold"})).await;
    assert_eq!(call.status(), 200);
    // The event may come in several chunks (the bridge writes a message where it lies).
    let mut first = Vec::new();
    while !String::from_utf8_lossy(&first).contains("sampling/createMessage") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), call.chunk())
            .await
            .expect("the sampling request in time")
            .unwrap()
            .expect("the stream goes on until the sampling request");
        first.extend_from_slice(&chunk);
    }
    // Three more sessions on a cap of two: each closes the idle one, never the busy one.
    let mut idle = Vec::new();
    for i in 0..3 {
        let mut client = gw.mcp_at(&url, &token).protocol("2025-11-25");
        if let Err(refused) = client.open().await {
            panic!("session {i}: {}", refused.status());
        }
        idle.push(client);
    }
    assert_eq!(idle[0].request("tools/list", json!({})).await.status(), 404);
    assert_eq!(idle[1].request("tools/list", json!({})).await.status(), 404);
    assert_eq!(idle[2].request("tools/list", json!({})).await.status(), 200);
    assert_eq!(
        busy.request("ping", json!({})).await.status(),
        200,
        "the busy one lives"
    );
    drop(call);
}

/// Issue 36: past `max_line_bytes` only that call fails — found by its id wherever the message
/// has it (first, or last as the TypeScript SDK writes it) — and the child goes on: the same
/// process answers the next call at once. The gateway never holds the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_fails_only_its_call_memory_stays_bounded_and_the_child_lives_on() {
    let gw = gateway(Route::command("plain", &plain_command(&[])).max_line_bytes(1_048_576)).await;
    let token = gw.create_token("big").await.unwrap();
    let url = format!("{}/plain/mcp", gw.base);
    let client = rmcp_client(&url, gw.http(), &token, &[]).await.unwrap();
    assert_eq!(
        call(&client, "echo", json!({"text": "small"}))
            .await
            .unwrap(),
        "small"
    );
    let children = gw_children(&gw);
    assert!(!children.is_empty());
    let gw_pid = gw.proc.child.id();
    let peak_before = status_kib(gw_pid, "VmHWM");
    for id_last in [false, true] {
        // 96 MiB on one line against a bound of 1 MiB.
        let refused = call(
            &client,
            "big",
            json!({"bytes": 96 << 20, "id_last": id_last}),
        )
        .await
        .unwrap_err();
        assert!(
            refused.contains(
                "`plain` answered with a message larger than max_line_bytes (1048576 bytes); \
                 this call failed, the server goes on"
            ),
            "id last: {id_last}: {refused}"
        );
        assert_eq!(
            call(&client, "echo", json!({"text": "again"}))
                .await
                .unwrap(),
            "again",
            "the next call is answered at once"
        );
    }
    let peak_after = status_kib(gw_pid, "VmHWM");
    assert!(
        peak_after < peak_before + 48 * 1024,
        "the gateway's peak RSS went from {peak_before} KiB to {peak_after} KiB"
    );
    assert!(call(&client, "whoami", json!({})).await.is_ok());
    assert_eq!(gw_children(&gw), children, "the same children answer");
    let _ = client.cancel().await;
}

/// The pids of the stdio servers the gateway runs (under their `__stdio-exec` supervisors).
fn gw_children(gw: &Stack) -> std::collections::BTreeSet<u32> {
    processes_with("plain_server.py")
        .into_iter()
        .filter(|(_, cmd)| !cmd.contains("__stdio-exec"))
        .map(|(pid, _)| pid)
        .filter(|pid| descends_from(*pid, gw.proc.child.id()))
        .collect()
}

/// Whether `pid` is a descendant of `ancestor`.
fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..32 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            return false;
        };
        if ppid == ancestor {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        pid = ppid;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_tree_of_a_child_ends_when_the_gateway_is_sigkilled() {
    let marker = format!("pforte-tree-{}-{}", std::process::id(), rand_suffix());
    let mut gw = gateway(Route::command(
        "tree",
        &plain_command(&["--grandchild", &marker]),
    ))
    .await;
    let token = gw.create_token("tree").await.unwrap();
    let url = format!("{}/tree/mcp", gw.base);
    assert_eq!(initialize(&gw, &url, &token).await.status(), 200);
    // A detached grandchild (own session, SIGTERM and SIGHUP ignored) per child.
    let detached = eventually(Duration::from_secs(15), || async {
        processes_with(&marker)
            .iter()
            .any(|(_, cmd)| cmd.contains("grandchild-of"))
    })
    .await;
    assert!(detached, "{:?}", processes_with(&marker));
    gw.proc
        .signal_and_wait(Signal::SIGKILL, Duration::from_secs(15))
        .unwrap();
    let gone = eventually(Duration::from_secs(15), || async {
        processes_with(&marker).is_empty()
    })
    .await;
    let left = processes_with(&marker);
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
    assert!(gone, "processes of the tree outlived the gateway: {left:?}");
}

/// A marker unique to this test run: a fresh temporary directory's random name.
fn rand_suffix() -> String {
    let dir = tempfile::tempdir().unwrap();
    dir.path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches('.')
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_user_runs_its_children_as_that_user_away_from_the_gateways_files() {
    use std::os::unix::fs::PermissionsExt as _;
    // The fixture where nobody can read it, whatever the checkout's parents allow.
    let public = tempfile::tempdir().unwrap();
    std::fs::set_permissions(public.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = reachable_copy(&fixture("plain_server.py"), public.path());
    let command = vec!["/usr/bin/python3".to_owned(), script.display().to_string()];
    let gw = gateway(Route::command("nobody", &command).user("nobody")).await;
    let token = gw.create_token("nobody").await.unwrap();
    let url = format!("{}/nobody/mcp", gw.base);
    let client = rmcp_client(&url, gw.http(), &token, &[]).await.unwrap();
    let who: Value =
        serde_json::from_str(&call(&client, "whoami", json!({})).await.unwrap()).unwrap();
    assert_eq!(
        who,
        json!({"uid": 65534, "euid": 65534, "gid": 65534, "groups": [65534]})
    );
    let secrets = [
        gw.data_dir().join("pforte.db"),
        gw.data_dir().join("oauth.db"),
        PathBuf::from(format!("/proc/{}/environ", gw.proc.child.id())),
    ];
    for path in secrets {
        assert!(path.exists(), "{}", path.display());
        let opened = call(&client, "open", json!({"path": path})).await.unwrap();
        assert!(
            opened.starts_with("refused"),
            "{}: {opened}",
            path.display()
        );
    }
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_holds_only_stdin_stdout_and_stderr() {
    // The gateway inherits descriptor 7 without close-on-exec from the shell it is run by.
    let gw = gateway_through(
        Route::command("fds", &plain_command(&[])),
        &["sh", "-c", "exec 7</dev/null; exec \"$@\"", "sh"],
    )
    .await;
    let gw_fd = format!("/proc/{}/fd/7", gw.proc.child.id());
    assert!(
        std::fs::read_link(&gw_fd).is_ok(),
        "the gateway holds {gw_fd}"
    );
    let token = gw.create_token("fds").await.unwrap();
    let url = format!("{}/fds/mcp", gw.base);
    let client = rmcp_client(&url, gw.http(), &token, &[]).await.unwrap();
    let held: Vec<(i32, String)> =
        serde_json::from_str(&call(&client, "fds", json!({})).await.unwrap()).unwrap();
    let numbers: Vec<i32> = held.iter().map(|(fd, _)| *fd).collect();
    assert_eq!(numbers, [0, 1, 2], "{held:?}");
    let _ = client.cancel().await;
}

/// A temp dir owned by `nobody` with a gateway config in it (with `routes`); the config's path.
fn nobody_config(dir: &Path, routes: Vec<Route>) -> PathBuf {
    std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
    let mut config = GatewayConfig::new(NOWHERE);
    config.routes = routes;
    let config = write_config(dir, config).unwrap();
    std::os::unix::fs::chown(&config, Some(65534), Some(65534)).unwrap();
    config
}

/// `pforte ARGS --config CONFIG` as `nobody`, from a link of the binary beside the config.
fn pforte_as_nobody(args: &[&str], config: &Path) -> std::process::Command {
    use std::os::unix::process::CommandExt as _;
    let dir = config.parent().unwrap();
    let mut cmd = std::process::Command::new(reachable_copy(&bin("pforte"), dir));
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .uid(65534)
        .gid(65534);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_is_not_dumpable() {
    // Run as nobody: a process that is not dumpable has its /proc files owned by root, so a
    // stdio child of the same user could not read its environment.
    use std::os::unix::fs::MetadataExt as _;
    let dir = tempfile::tempdir().unwrap();
    let config = nobody_config(dir.path(), Vec::new());
    let mut gw =
        pforte_tests::Proc::spawn(pforte_as_nobody(&["serve", "--init"], &config)).unwrap();
    gw.wait_line("pforte listening on", Duration::from_secs(20))
        .unwrap();
    let pid = gw.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t65534\t")),
        "{status}"
    );
    let environ = std::fs::metadata(format!("/proc/{pid}/environ")).unwrap();
    assert_eq!(
        environ.uid(),
        0,
        "/proc/{pid}/environ belongs to the gateway's user"
    );
}

#[test]
fn a_route_user_needs_a_gateway_running_as_root() {
    let dir = tempfile::tempdir().unwrap();
    let route = Route::command("p", &plain_command(&[])).user("nobody");
    let config = nobody_config(dir.path(), vec![route]);
    let out = pforte_as_nobody(&["check"], &config).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "pforte: bad configuration: [[routes]] \"p\": user = \"nobody\" needs the gateway to run as root (it runs as uid 65534)"
    );
}
