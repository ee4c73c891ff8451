//! The gateway's MCP-authorization building blocks used directly (`pforte::…`), against real
//! peers: the tool catalog against a real mcp-service (and a scripted upstream for JSON framing,
//! paging, `list_changed` and lost sessions), session bindings in a real redis-server, and the
//! audit log on disk (mode, keys, rotation, SIGHUP).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeSet,
    os::unix::fs::PermissionsExt as _,
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use pforte::for_tests::{
    AuditDecision, AuditLog, AuditPrincipal, AuditRecord, AuditSink, Catalog, CatalogOptions,
    Holder, Lookup, Ownership, SessionOptions, Sessions, filter_tools_list, reason,
};
use pforte_tests::{McpClient, McpService, Proc, RedisServer, bin, eventually, free_port};
use serde_json::{Value, json};

const READ_TOOLS: [&str; 5] = [
    "werkbaum_check",
    "werkbaum_history",
    "werkbaum_inspect",
    "werkbaum_read",
    "whoami",
];

fn fast() -> CatalogOptions {
    CatalogOptions {
        miss_wait: Duration::from_secs(2),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..CatalogOptions::default()
    }
}

// ---------------------------------------------------------------------------------------------
// catalog, against the real mcp-service

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_learns_the_real_services_tools_and_read_only_hints() {
    let svc = McpService::start(&[]).unwrap();
    let catalog = Arc::new(Catalog::new(svc.url(), fast()).unwrap());
    assert_eq!(catalog.tool("whoami"), Lookup::Unknown);
    assert_eq!(catalog.refresh().await.unwrap(), 13);
    assert_eq!(catalog.len(), 13);
    let reads: BTreeSet<&str> = READ_TOOLS
        .iter()
        .copied()
        .filter(|t| catalog.tool(t) == Lookup::ReadOnly)
        .collect();
    assert_eq!(reads.len(), 5);
    for tool in [
        "werkbaum_add_node",
        "werkbaum_apply_ops",
        "werkbaum_create",
        "werkbaum_move_node",
        "werkbaum_remove_node",
        "werkbaum_set_size",
        "werkbaum_set_status",
        "werkbaum_write",
    ] {
        assert_eq!(catalog.tool(tool), Lookup::Writes, "{tool}");
    }

    // A miss refreshes once (bounded), then answers Unknown; a second miss right after does
    // not refresh again.
    let before = catalog.generation();
    let started = Instant::now();
    assert_eq!(
        catalog.tool_or_refresh("no_such_tool").await,
        Lookup::Unknown
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(catalog.generation(), before + 1);
    assert_eq!(
        catalog.tool_or_refresh("no_such_tool").await,
        Lookup::Unknown
    );
    assert_eq!(catalog.generation(), before + 1);
    // A known tool never waits.
    assert_eq!(catalog.tool_or_refresh("whoami").await, Lookup::ReadOnly);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_waits_for_an_upstream_that_is_down_at_start() {
    let port = free_port();
    let catalog = Arc::new(Catalog::new(format!("http://127.0.0.1:{port}/mcp"), fast()).unwrap());
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let runner = tokio::spawn(Arc::clone(&catalog).run(Some(shutdown)));
    assert_eq!(catalog.tool("whoami"), Lookup::Unknown);
    assert_eq!(catalog.tool_or_refresh("whoami").await, Lookup::Unknown);

    let data = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin("mcp-service"));
    cmd.env("MCP_SERVICE_DATA_DIR", data.path()).args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let mut svc = Proc::spawn(cmd).unwrap();
    svc.wait_line("listening on", Duration::from_secs(30))
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            catalog.tool("whoami") == Lookup::ReadOnly
        })
        .await
    );
    assert_eq!(catalog.tool("werkbaum_write"), Lookup::Writes);

    // The upstream restarts (every session gone): the catalog's stream drops, it initialises
    // again and keeps learning.
    let learned = catalog.generation();
    drop(svc);
    let mut cmd = Command::new(bin("mcp-service"));
    cmd.env("MCP_SERVICE_DATA_DIR", data.path()).args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let mut svc = Proc::spawn(cmd).unwrap();
    svc.wait_line("listening on", Duration::from_secs(30))
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            catalog.generation() > learned
        })
        .await
    );
    assert_eq!(catalog.len(), 13);
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_keeps_the_read_tools_of_a_real_sse_answer() {
    let svc = McpService::start(&[]).unwrap();
    let mut client = McpClient::new(reqwest::Client::new(), &svc.url());
    let init = client.initialize().await;
    assert!(init.headers().contains_key("mcp-session-id"));
    init.bytes().await.unwrap();
    client.notify("notifications/initialized").await;
    let list = client
        .post(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}))
        .await;
    let sse = list.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream");
    let body = list.bytes().await.unwrap();
    let out = filter_tools_list(&body, sse, |n, _| READ_TOOLS.contains(&n))
        .unwrap()
        .unwrap();
    let text = std::str::from_utf8(&out).unwrap();
    let message = text
        .lines()
        .find_map(|l| l.strip_prefix("data: {").map(|rest| format!("{{{rest}")))
        .unwrap();
    let v: Value = serde_json::from_str(&message).unwrap();
    let names: BTreeSet<&str> = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, READ_TOOLS.into_iter().collect());
}

// ---------------------------------------------------------------------------------------------
// catalog, against a scripted upstream: JSON answers, pages, list_changed, a lost session

#[derive(Default)]
struct Script {
    tools: Mutex<Vec<(String, Option<bool>)>>,
    sessions: Mutex<BTreeSet<String>>,
    initializes: AtomicU64,
    lists: AtomicU64,
    streams: AtomicU64,
    /// GET answers 405 (no server-initiated stream).
    no_stream: std::sync::atomic::AtomicBool,
    /// `true`: a list_changed; `false`: close the streams.
    events: Mutex<Option<tokio::sync::broadcast::Sender<bool>>>,
}

impl Script {
    fn send(&self, event: bool) {
        let _ = self.events.lock().unwrap().as_ref().unwrap().send(event);
    }
}

async fn scripted(script: Arc<Script>) -> String {
    let (tx, _) = tokio::sync::broadcast::channel(16);
    *script.events.lock().unwrap() = Some(tx);
    let post_script = Arc::clone(&script);
    let get_script = Arc::clone(&script);
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let s = Arc::clone(&post_script);
            async move { scripted_post(&s, &headers, &body) }
        })
        .get(move |headers: HeaderMap| {
            let s = Arc::clone(&get_script);
            async move { scripted_get(&s, &headers) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

fn known_session(s: &Script, headers: &HeaderMap) -> bool {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|id| s.sessions.lock().unwrap().contains(id))
}

fn scripted_post(s: &Script, headers: &HeaderMap, body: &[u8]) -> Response {
    assert_eq!(headers["x-pforte-subject"], "pforte-gateway");
    assert_eq!(headers["x-pforte-auth-kind"], "gateway");
    let msg: Value = serde_json::from_slice(body).unwrap();
    let id = msg["id"].clone();
    match msg["method"].as_str().unwrap() {
        "initialize" => {
            assert_eq!(msg["params"]["protocolVersion"], "2025-06-18");
            assert_eq!(msg["params"]["clientInfo"]["name"], "pforte-gateway");
            let n = s.initializes.fetch_add(1, Ordering::SeqCst);
            let session = format!("s{n}");
            s.sessions.lock().unwrap().insert(session.clone());
            let answer = json!({"jsonrpc":"2.0","id":id,"result":{
                "protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},
                "serverInfo":{"name":"scripted","version":"0"}}});
            ([("mcp-session-id", session)], axum::Json(answer)).into_response()
        }
        _ if !known_session(s, headers) => StatusCode::NOT_FOUND.into_response(),
        "notifications/initialized" => StatusCode::ACCEPTED.into_response(),
        "tools/list" => {
            s.lists.fetch_add(1, Ordering::SeqCst);
            // Two tools per page; the cursor is the index of the next one.
            let start: usize = msg["params"]["cursor"]
                .as_str()
                .map_or(0, |c| c.parse().unwrap());
            let tools = s.tools.lock().unwrap();
            let page: Vec<Value> = tools
                .iter()
                .skip(start)
                .take(2)
                .map(|(name, ro)| match ro {
                    Some(ro) => json!({"name":name,"inputSchema":{"type":"object"},
                        "annotations":{"readOnlyHint":ro}}),
                    None => json!({"name":name,"inputSchema":{"type":"object"}}),
                })
                .collect();
            let mut result = json!({ "tools": page });
            if start + 2 < tools.len() {
                result["nextCursor"] = json!((start + 2).to_string());
            }
            axum::Json(json!({"jsonrpc":"2.0","id":id,"result":result})).into_response()
        }
        other => panic!("unexpected {other}"),
    }
}

fn scripted_get(s: &Script, headers: &HeaderMap) -> Response {
    if s.no_stream.load(Ordering::SeqCst) {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    if !known_session(s, headers) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let rx = s.events.lock().unwrap().as_ref().unwrap().subscribe();
    s.streams.fetch_add(1, Ordering::SeqCst);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(true) => Some((
                Ok::<_, std::io::Error>(axum::body::Bytes::from_static(
                    b"event: message\ndata: {\"jsonrpc\":\"2.0\",\n\
                      data: \"method\":\"notifications/tools/list_changed\"}\n\n",
                )),
                rx,
            )),
            _ => None,
        }
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_follows_pages_list_changed_and_a_lost_session() {
    let script = Arc::new(Script::default());
    *script.tools.lock().unwrap() = vec![
        ("a_read".into(), Some(true)),
        ("b_write".into(), Some(false)),
        ("c_plain".into(), None),
    ];
    let url = scripted(Arc::clone(&script)).await;
    let opts = CatalogOptions {
        ttl: Duration::from_secs(3600),
        ..fast()
    };
    let catalog = Arc::new(Catalog::new(url, opts).unwrap());
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let runner = tokio::spawn(Arc::clone(&catalog).run(Some(shutdown)));

    // Pages joined; hints read; the stream on the catalog's session is open.
    assert!(
        eventually(Duration::from_secs(10), || async {
            catalog.len() == 3 && script.streams.load(Ordering::SeqCst) == 1
        })
        .await
    );
    assert_eq!(catalog.tool("a_read"), Lookup::ReadOnly);
    assert_eq!(catalog.tool("b_write"), Lookup::Writes);
    assert_eq!(catalog.tool("c_plain"), Lookup::Writes);

    // A new tool and a list_changed (multi-line data): learned at once (the ttl is an hour).
    script
        .tools
        .lock()
        .unwrap()
        .push(("d_new".into(), Some(true)));
    script.send(true);
    assert!(
        eventually(Duration::from_secs(10), || async {
            catalog.tool("d_new") == Lookup::ReadOnly
        })
        .await
    );
    assert_eq!(script.initializes.load(Ordering::SeqCst), 1);

    // The upstream forgets the session and closes the stream: the catalog initialises anew.
    script.sessions.lock().unwrap().clear();
    script.tools.lock().unwrap().push(("e_after".into(), None));
    script.send(false);
    assert!(
        eventually(Duration::from_secs(10), || async {
            catalog.tool("e_after") == Lookup::Writes && script.streams.load(Ordering::SeqCst) == 2
        })
        .await
    );
    assert_eq!(script.initializes.load(Ordering::SeqCst), 2);
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_without_a_get_stream_refreshes_every_ttl() {
    let script = Arc::new(Script::default());
    script.no_stream.store(true, Ordering::SeqCst);
    *script.tools.lock().unwrap() = vec![("a".into(), Some(true))];
    let url = scripted(Arc::clone(&script)).await;
    let opts = CatalogOptions {
        ttl: Duration::from_millis(100),
        ..fast()
    };
    let catalog = Arc::new(Catalog::new(url, opts).unwrap());
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let runner = tokio::spawn(Arc::clone(&catalog).run(Some(shutdown)));
    assert!(
        eventually(Duration::from_secs(10), || async {
            catalog.tool("a") == Lookup::ReadOnly
        })
        .await
    );
    script.tools.lock().unwrap().push(("b".into(), None));
    assert!(
        eventually(Duration::from_secs(10), || async {
            catalog.tool("b") == Lookup::Writes
        })
        .await
    );
    // One session throughout.
    assert_eq!(script.initializes.load(Ordering::SeqCst), 1);
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_share_one_refresh() {
    let script = Arc::new(Script::default());
    *script.tools.lock().unwrap() = vec![("a".into(), Some(true))];
    let url = scripted(Arc::clone(&script)).await;
    let catalog = Arc::new(Catalog::new(url, fast()).unwrap());
    let misses: Vec<_> = (0..20)
        .map(|_| {
            let c = Arc::clone(&catalog);
            tokio::spawn(async move { c.tool_or_refresh("zzz").await })
        })
        .collect();
    for miss in misses {
        assert_eq!(miss.await.unwrap(), Lookup::Unknown);
    }
    assert_eq!(script.initializes.load(Ordering::SeqCst), 1);
    assert_eq!(script.lists.load(Ordering::SeqCst), 1);
    assert_eq!(catalog.generation(), 1);
    // The refresh taught the catalog the tools it has.
    assert_eq!(catalog.tool("a"), Lookup::ReadOnly);
}

// ---------------------------------------------------------------------------------------------
// sessions in redis

/// A holder whose person is itself (one client per person).
fn h(owner: &str) -> Holder<'_> {
    Holder::new(owner, owner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_session_bindings_through_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let opts = SessionOptions::default();
    let a = Sessions::redis(&redis.url(), "pforte:", opts.clone()).unwrap();
    let b = Sessions::redis(&redis.url(), "pforte:", opts).unwrap();
    assert_eq!(
        a.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Unknown
    );
    assert_eq!(
        a.bind("s1", h("alice"), None).await.unwrap().ownership,
        Ownership::Owner
    );
    assert_eq!(
        b.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Owner
    );
    assert_eq!(
        b.check("s1", h("bob")).await.unwrap().ownership,
        Ownership::Foreign
    );
    // The first binding wins, on either gateway.
    assert_eq!(
        b.bind("s1", h("bob"), None).await.unwrap().ownership,
        Ownership::Foreign
    );
    assert_eq!(
        a.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Owner
    );
    // Both gateways count alice's sessions alike.
    assert_eq!(a.count("alice").await.unwrap(), 1);
    assert_eq!(b.count("alice").await.unwrap(), 1);
    assert_eq!(b.count("bob").await.unwrap(), 0);
    b.forget("s1", h("alice")).await.unwrap();
    assert_eq!(a.count("alice").await.unwrap(), 0);
    assert_eq!(
        a.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Unknown
    );
    // Another prefix is another table.
    let other = Sessions::redis(&redis.url(), "other:", SessionOptions::default()).unwrap();
    a.bind("s2", h("alice"), None).await.unwrap();
    assert_eq!(
        other.check("s2", h("bob")).await.unwrap().ownership,
        Ownership::Unknown
    );

    // redis gone: an error, never a guess.
    drop(redis);
    assert!(a.check("s2", h("alice")).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_bindings_slide_while_used_and_expire_when_idle() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let opts = SessionOptions {
        ttl: Duration::from_secs(4),
        ..SessionOptions::default()
    };
    let sessions = Sessions::redis(&redis.url(), "pforte:", opts).unwrap();
    sessions.bind("s", h("alice"), None).await.unwrap();
    // Used for longer than the ttl, it stays.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert_eq!(
            sessions.check("s", h("alice")).await.unwrap().ownership,
            Ownership::Owner
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Idle, it expires (redis's TTL). Polled by a foreign caller, which does not slide it.
    assert!(
        eventually(Duration::from_secs(6), || async {
            sessions.check("s", h("bob")).await.unwrap().ownership == Ownership::Unknown
        })
        .await
    );
}

// ---------------------------------------------------------------------------------------------
// audit log

fn audit_record(request_id: &str, decision: AuditDecision) -> AuditRecord<'_> {
    AuditRecord {
        time_ms: 1_764_623_321_123,
        request_id,
        route: "/mcp",
        virtual_server: None,
        member: None,
        principal: Some(AuditPrincipal {
            kind: "static",
            subject: "operator",
            client: "ci",
        }),
        method: "tools/call",
        name: Some("werkbaum_write"),
        decision,
        reason: (decision == AuditDecision::Denied).then_some(reason::INSUFFICIENT_SCOPE),
        rule: None,
        upstream_status: (decision == AuditDecision::Allowed).then_some(200),
        duration_ms: 1,
    }
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn audit_lines_have_exactly_the_documented_keys_in_a_0600_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&AuditSink::File(path.clone())).unwrap();
    log.record(&audit_record("r1", AuditDecision::Allowed));
    let mut anonymous = audit_record("r2", AuditDecision::Denied);
    anonymous.principal = None;
    anonymous.reason = Some(reason::UNAUTHENTICATED);
    log.record(&anonymous);
    log.flush();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let got = lines(&path);
    assert_eq!(got.len(), 2);
    let keys: BTreeSet<&str> = [
        "time",
        "request_id",
        "route",
        "virtual",
        "member",
        "principal",
        "method",
        "name",
        "decision",
        "reason",
        "rule",
        "upstream_status",
        "duration_ms",
    ]
    .into();
    for line in &got {
        let have: BTreeSet<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(have, keys);
    }
    assert_eq!(got[0]["time"], "2025-12-01T21:08:41.123Z");
    assert_eq!(
        got[0]["principal"],
        json!({"kind":"static","subject":"operator","client":"ci"})
    );
    assert_eq!(got[0]["decision"], "allowed");
    assert_eq!(got[0]["upstream_status"], 200);
    assert_eq!(got[1]["principal"], Value::Null);
    assert_eq!(got[1]["decision"], "denied");
    assert_eq!(got[1]["reason"], "unauthenticated");
    assert_eq!(log.dropped(), 0);
    // Appending: a second log on the same path keeps the lines.
    drop(log);
    let log = AuditLog::open(&AuditSink::File(path.clone())).unwrap();
    log.record(&audit_record("r3", AuditDecision::Allowed));
    log.flush();
    assert_eq!(lines(&path).len(), 3);
}

#[test]
fn audit_reopen_after_rotation_writes_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let rotated = dir.path().join("audit.jsonl.1");
    let log = AuditLog::open(&AuditSink::File(path.clone())).unwrap();
    log.record(&audit_record("before", AuditDecision::Allowed));
    log.flush();
    std::fs::rename(&path, &rotated).unwrap();
    // Until the reopen, lines follow the renamed file.
    log.record(&audit_record("late", AuditDecision::Allowed));
    log.reopen();
    log.record(&audit_record("after", AuditDecision::Denied));
    log.flush();
    let old: Vec<Value> = lines(&rotated);
    assert_eq!(old.len(), 2);
    assert_eq!(old[1]["request_id"], "late");
    let new = lines(&path);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0]["request_id"], "after");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reopens_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&AuditSink::File(path.clone())).unwrap();
    log.spawn_sighup_reopen().unwrap();
    log.record(&audit_record("before", AuditDecision::Allowed));
    log.flush();
    std::fs::rename(&path, dir.path().join("audit.jsonl.1")).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGHUP).unwrap();
    // The reopen happens on the signal task: poll for the new file.
    assert!(
        eventually(Duration::from_secs(10), || {
            let log = log.clone();
            let path = path.clone();
            async move {
                log.record(&audit_record("after", AuditDecision::Allowed));
                log.flush();
                path.exists()
            }
        })
        .await
    );
    assert!(lines(&path).iter().all(|l| l["request_id"] == "after"));
}

#[test]
fn audit_open_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let err = AuditLog::open(&AuditSink::File(dir.path().join("file/audit.jsonl"))).unwrap_err();
    assert!(
        err.to_string().contains("cannot open the audit log"),
        "{err}"
    );
    assert_eq!("stdout".parse::<AuditSink>().unwrap(), AuditSink::Stdout);
}
