//! The server's and the client's bytes, kept: a message with unsorted keys, `1.0`, an integer
//! past 2^53 and `\u00e9` escapes sent straight to a stdio server (tests/fixtures/stdio/
//! raw_server.py, which logs every line it reads) and through a stdio route, both ways, diffed
//! byte for byte; and a `tools/list` the gateway filters for a read-only token on an HTTP route
//! (JSON and event stream), diffed against the upstream's own answer with the refused tool cut.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use pforte_tests::{Limits, Route, Stack};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/stdio")
        .join(name)
}

/// The client's request: the id first (the bridge puts its own there), unsorted keys, number
/// text and escapes a re-serialiser would change, and a `_meta` the bridge adds the caller to.
const CALL: &str = r#"{"id":7,"params":{"name":"plain","arguments":{"zeta":1.0,"big":9007199254740993,"alpha":"caf\u00e9 \"q\" \/"},"_meta":{"progressToken":"p-1"}},"method":"tools/call","jsonrpc":"2.0"}"#;
/// The same call of the tool that logs first (the answer is then an event stream).
const NOISY: &str = r#"{"id":8,"params":{"name":"noisy","arguments":{"b":1.0,"a":9007199254740993}},"method":"tools/call","jsonrpc":"2.0"}"#;
/// A client notification: passed as it is.
const NOTE: &str = r#"{"params":{"zeta":1.0,"big":9007199254740993,"alpha":"\u00e9"},"method":"notifications/roots/list_changed","jsonrpc":"2.0"}"#;
const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"direct","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// What the server writes for `messages` sent straight to it (one stdout line per message it
/// writes, read until `expect` lines came), and what it logged reading them.
fn direct(messages: &[&str], expect: usize) -> (Vec<String>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("read.log");
    let mut child = Command::new("/usr/bin/python3")
        .arg(fixture("raw_server.py"))
        .arg(&log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for m in messages {
        stdin.write_all(m.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
    }
    drop(stdin);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..expect {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        lines.push(line.trim_end_matches('\n').to_owned());
    }
    child.wait().unwrap();
    let read = std::fs::read_to_string(&log).unwrap();
    (lines, read.lines().map(str::to_owned).collect())
}

/// `line` as the client wrote it: the bridge's id put back to `id`, and the
/// `"dev.pforte/identity"` member the bridge added to `_meta` taken out.
fn as_the_client_wrote_it(line: &str, id: &str) -> String {
    let rest = line.strip_prefix(r#"{"id":"#).expect("the id first");
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap();
    let line = format!(r#"{{"id":{id}{}"#, &rest[digits..]);
    let at = line
        .find(r#","dev.pforte/identity":{"#)
        .expect("the identity");
    let end = at + line[at..].find('}').unwrap() + 1;
    format!("{}{}", &line[..at], &line[end..])
}

/// The data of each event of an event-stream body.
fn event_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_crosses_a_stdio_route_byte_for_byte_both_ways() {
    // Straight to the server: what it writes and what it reads.
    let (written, read) = direct(&[INIT, INITIALIZED, CALL, NOISY, NOTE], 4);
    assert!(written[0].contains(r#""name":"raw""#), "{written:?}");
    let (plain_answer, log_line, noisy_answer) = (&written[1], &written[2], &written[3]);
    assert!(plain_answer.ends_with(r#""id":7}"#), "{plain_answer}");
    assert_eq!(read[2], CALL, "the server logs what it reads as it is");
    assert_eq!(read[4], NOTE);

    // Through the gateway.
    let logs = tempfile::tempdir().unwrap();
    pforte_tests::open_to_children(logs.path());
    let log = logs.path().join("read.log");
    let command = [
        "/usr/bin/python3".to_owned(),
        fixture("raw_server.py").display().to_string(),
        log.display().to_string(),
    ];
    let gw = Stack::builder()
        .upstream("http://127.0.0.1:9/mcp")
        .plain_http()
        .limits(Limits::off().sessions_per_principal(1000))
        .route(Route::command("raw", &command))
        .start()
        .await;
    let token = gw.create_token("bytes").await.unwrap();
    let url = format!("{}/raw/mcp", gw.base);
    let mut client = gw.mcp_at(&url, &token).protocol("2025-11-25");
    client.open().await.unwrap();

    // child → client: one answer is a JSON body, the server's bytes with the client's id.
    let resp = client.post_raw(CALL).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/json",
        "a single answer is JSON when the client accepts it"
    );
    assert_eq!(resp.text().await.unwrap(), *plain_answer);
    // A notification first: an event stream, each event's data the server's bytes.
    let resp = client.post_raw(NOISY).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = event_data(&resp.text().await.unwrap());
    assert_eq!(events, [log_line.clone(), noisy_answer.clone()]);
    // A client that reads only event streams gets the single answer as one.
    let mut only_sse = client.post_request().body(CALL).build().unwrap();
    only_sse
        .headers_mut()
        .insert("accept", "text/event-stream".parse().unwrap());
    let resp = gw.http().execute(only_sse).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(
        event_data(&resp.text().await.unwrap()),
        std::slice::from_ref(plain_answer)
    );
    // client → child: a notification as it is.
    assert_eq!(client.post_raw(NOTE).await.status(), 202);

    // What the server read through the gateway: the calls as the client wrote them (but for
    // the bridge's id and the caller in `_meta`), the notification byte for byte.
    let mut seen = Vec::new();
    let found = pforte_tests::eventually(Duration::from_secs(10), || {
        seen = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let done = seen.iter().any(|l| l == NOTE);
        async move { done }
    })
    .await;
    assert!(
        found,
        "the notification reached the server as it was: {seen:#?}"
    );
    let calls: Vec<&String> = seen.iter().filter(|l| l.contains(r#""p-1""#)).collect();
    assert_eq!(calls.len(), 2, "{seen:#?}");
    for call in calls {
        assert_eq!(as_the_client_wrote_it(call, "7"), CALL);
    }
    let noisy = seen.iter().find(|l| l.contains(r#""noisy""#)).unwrap();
    assert!(
        noisy.contains(r#""arguments":{"b":1.0,"a":9007199254740993}"#),
        "{noisy}"
    );
}

/// The upstream of the HTTP route: answers `initialize` and `tools/list` with fixed bytes (an
/// event stream when the client accepts only that), everything else 202.
async fn fixed_upstream() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(|headers: http::HeaderMap, body: bytes::Bytes| async move {
        let msg: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let id = msg["id"].to_string();
        let text = match msg["method"].as_str() {
            Some("initialize") => format!(
                r#"{{"result":{{"serverInfo":{{"version":"1","name":"fixed"}},"capabilities":{{"tools":{{}}}},"protocolVersion":"2025-11-25"}},"jsonrpc":"2.0","id":{id}}}"#
            ),
            Some("tools/list") => tools_list(&id),
            _ => return http::Response::builder().status(202).body(axum::body::Body::empty()).unwrap(),
        };
        let sse_only = headers
            .get("accept")
            .is_some_and(|a| a.to_str().is_ok_and(|a| !a.contains("json")));
        let (kind, body) = if sse_only {
            ("text/event-stream", format!("id: 1\ndata: {}\n\n", text.replace('\n', "\ndata: ")))
        } else {
            ("application/json", text)
        };
        http::Response::builder()
            .header("content-type", kind)
            .body(axum::body::Body::from(body))
            .unwrap()
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/mcp"), task)
}

/// Three tools, pretty-printed: a read-only one, one that writes, a read-only one.
const READ_A: &str = r#"{"name":"read_a","inputSchema":{"type":"object","properties":{"z":{"default":1.0},"a":{"maximum":9007199254740993}}},"annotations":{"readOnlyHint":true},"description":"caf\u00e9 \"a\""}"#;
const WRITE: &str =
    r#"{"name":"write","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":false}}"#;
const READ_B: &str = r#"{"title":"B \u00e9","name":"read_b","annotations":{"title":"b","readOnlyHint":true},"inputSchema":{"type":"object"}}"#;

fn tools_list(id: &str) -> String {
    format!(
        "{{\"result\":{{\"tools\":[\n    {READ_A},\n    {WRITE},\n    {READ_B}\n  ],\"nextCursor\":null}},\"jsonrpc\":\"2.0\",\"id\":{id}}}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_tools_list_keeps_the_servers_bytes_on_an_http_route() {
    let (upstream, task) = fixed_upstream().await;
    let gw = Stack::builder()
        .upstream(&upstream)
        .plain_http()
        .limits(Limits::off().sessions_per_principal(1000))
        .start()
        .await;
    let read_only = gw.create_scoped_token("ro", &["mcp:read"]).await.unwrap();
    let url = format!("{}/mcp", gw.base);
    let mut client = gw.mcp_at(&url, &read_only);
    client.open().await.unwrap();
    let list = r#"{"params":{},"method":"tools/list","id":9007199254740993,"jsonrpc":"2.0"}"#;

    // Straight from the upstream, and what the gateway must make of it: the writing tool cut.
    let http = reqwest::Client::new();
    let direct = |accept: &'static str| {
        let req = http
            .post(&upstream)
            .header("accept", accept)
            .header("content-type", "application/json")
            .body(list);
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    // And, being filtered per token, `cacheScope: "private"` added at the result's end.
    let cut = |text: String| {
        text.replace(&format!(",\n    {WRITE}"), "").replace(
            r#""nextCursor":null}"#,
            r#""nextCursor":null,"cacheScope":"private"}"#,
        )
    };

    let json = direct("application/json, text/event-stream").await;
    assert_eq!(json, tools_list("9007199254740993"));
    let through = client.post_raw(list).await;
    assert_eq!(through.status(), 200);
    let through = through.text().await.unwrap();
    assert_ne!(through, json, "the writing tool is filtered out");
    assert_eq!(through, cut(json));

    let sse = direct("text/event-stream").await;
    let mut only_sse = client.post_request().body(list).build().unwrap();
    only_sse
        .headers_mut()
        .insert("accept", "text/event-stream".parse().unwrap());
    let through = gw.http().execute(only_sse).await.unwrap();
    assert_eq!(through.headers()["content-type"], "text/event-stream");
    let through = through.text().await.unwrap();
    assert_eq!(
        through,
        cut(sse.replace(&format!(",\ndata:     {WRITE}"), ""))
    );
    task.abort();
}
