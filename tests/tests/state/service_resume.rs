//! A request's event stream lost before its answer is resumed with `Last-Event-ID` and still
//! gets the answer (mcp-service's replay buffer, `mcp-service/src/sessions/replay.rs`): by hand
//! over HTTP, with the exact event ids rmcp's session manager forms, and with rmcp's client and
//! the official TypeScript and Python SDKs' clients behind a relay that cuts the stream right
//! after its priming event (the SDKs as the conformance and OAuth SDK tests install them:
//! outside CI a test skips when they cannot be had); and rmcp's client cut off in front of the
//! gateway, which passes the reconnect's `Last-Event-ID` on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use pforte_tests::{
    Limits, McpClient, McpService, Stack, conformance_script, python_sdk_or_skip, rmcp_client,
    run_python_json,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
};

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .build()
        .unwrap()
}

/// One SSE event: its id and its data (empty for a priming event).
#[derive(Debug, PartialEq)]
struct Event {
    id: Option<String>,
    data: String,
}

/// The events in `text`, without keep-alive comments.
fn events(text: &str) -> Vec<Event> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut id = None;
            let mut data = None::<String>;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim_start().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.get_or_insert_default().push_str(v.trim_start());
                }
            }
            (id.is_some() || data.is_some()).then(|| Event {
                id,
                data: data.unwrap_or_default(),
            })
        })
        .collect()
}

/// The whole body of an event stream that ends by itself (within 30 s).
async fn read_to_end(resp: reqwest::Response) -> Vec<Event> {
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(30), resp.text())
        .await
        .expect("the stream ends")
        .unwrap();
    events(&body)
}

/// A `GET` resuming after `last_event_id`.
async fn resume(client: &McpClient, last_event_id: &str) -> reqwest::Response {
    client
        .stream_request()
        .header("last-event-id", last_event_id)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_answer_lost_with_its_stream_is_replayed_after_the_last_event_id() {
    let svc = McpService::start(&[]).unwrap();
    let mut client = McpClient::new(http(), &svc.url());
    client.open().await.unwrap();

    // tools/list on an SSE stream; read its priming event only, then drop the connection.
    let resp = client
        .post(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}))
        .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the priming event")
            .expect("more of the stream")
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    drop(body);
    let priming = events(&seen).remove(0);
    assert_eq!(priming.data, "", "a priming event first: {seen:?}");
    let priming_id = priming.id.expect("an event id");
    let stream = priming_id
        .strip_prefix("0/")
        .expect("rmcp's form INDEX/STREAM");
    assert!(stream.parse::<u64>().is_ok(), "{priming_id}");

    // Resumed after the priming event: the answer, under the next id, and the stream ends
    // (whether the answer was sent before the drop or after the reconnect).
    let replayed = read_to_end(resume(&client, &priming_id).await).await;
    assert_eq!(replayed.len(), 1, "{replayed:?}");
    assert_eq!(replayed[0].id.as_deref(), Some(&*format!("1/{stream}")));
    let answer: Value = serde_json::from_str(&replayed[0].data).unwrap();
    assert_eq!(answer["id"], 7, "{answer}");
    assert!(
        answer["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );

    // Again: the answered stream's events are kept a while, so it replays the same.
    let again = read_to_end(resume(&client, &priming_id).await).await;
    assert_eq!(again, replayed);
    // After the answer there is nothing more; an id never issued gets an empty stream too.
    assert!(
        read_to_end(resume(&client, &format!("1/{stream}")).await)
            .await
            .is_empty()
    );
    assert!(
        read_to_end(resume(&client, &format!("9/{stream}")).await)
            .await
            .is_empty()
    );

    // When the session ends, so does what it kept: the session is unknown.
    assert!(client.delete().await.status().is_success());
    assert_eq!(resume(&client, &priming_id).await.status(), 404);
}

/// Finds `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Relays the service's side of one connection to the client's, and while `armed`, cuts it
/// right after the first priming event of a request stream (`id: 0/N`): the client has seen
/// the stream begin and loses it before anything else. Disarms itself when it cuts.
async fn relay_down(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, armed: Arc<AtomicBool>) {
    let mut seen = Vec::new();
    let mut forwarded = 0;
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        seen.extend_from_slice(&buf[..n]);
        let mut end = seen.len();
        if armed.load(Ordering::SeqCst)
            && let Some(p) = find(&seen, b"id: 0/")
        {
            match find(&seen[p..], b"\n\n") {
                Some(q) if armed.swap(false, Ordering::SeqCst) => {
                    let _ = to.write_all(&seen[forwarded..p + q + 2]).await;
                    let _ = to.shutdown().await;
                    return;
                }
                Some(_) => {}
                // Not the whole priming event yet: hold the rest back.
                None => end = forwarded.max(p),
            }
        }
        if to.write_all(&seen[forwarded..end]).await.is_err() {
            break;
        }
        forwarded = end;
    }
    let _ = to.shutdown().await;
}

/// A TCP relay to `upstream` on 127.0.0.1 that cuts one request stream (see [`relay_down`]);
/// its address and whether it has yet to cut.
async fn cutting_relay(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let armed = Arc::new(AtomicBool::new(true));
    let armed_for_relay = Arc::clone(&armed);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let armed = Arc::clone(&armed_for_relay);
            tokio::spawn(async move {
                let Ok(service) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut client_read, client_write) = client.into_split();
                let (service_read, mut service_write) = service.into_split();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut service_write).await;
                    let _ = service_write.shutdown().await;
                });
                relay_down(service_read, client_write, armed).await;
                up.abort();
            });
        }
    });
    (addr, armed)
}

/// `tools/list` on `client`, whose first request stream the relay cuts after its priming event:
/// answered within 60 s after the client's reconnect, the cut made, `whoami` listed.
async fn tools_across_the_cut<S: rmcp::service::Service<rmcp::RoleClient>>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, S>,
    armed: &AtomicBool,
) -> Vec<rmcp::model::Tool> {
    let tools = tokio::time::timeout(Duration::from_secs(60), client.list_all_tools())
        .await
        .expect("answered within 60 s")
        .expect("tools/list");
    assert!(!armed.load(Ordering::SeqCst), "the relay cut the stream");
    assert!(tools.iter().any(|t| t.name == "whoami"), "{tools:?}");
    tools
}

#[tokio::test]
async fn rmcps_client_resumes_a_cut_stream_and_gets_its_answer() {
    let svc = McpService::start(&[]).unwrap();
    let (relay, armed) = cutting_relay(svc.addr).await;
    let url = format!("http://{relay}/mcp");
    let client = rmcp_client(&url, http(), "unused", &[]).await.unwrap();
    assert!(
        armed.load(Ordering::SeqCst),
        "initialize is not a request stream"
    );

    // The first request stream is cut after its priming event; the client reconnects with
    // Last-Event-ID (after the priming's retry, 3 s) and gets the answer from the replay.
    let tools = tools_across_the_cut(&client, &armed).await;
    // The session goes on as usual.
    let again = client.list_all_tools().await.unwrap();
    assert_eq!(again.len(), tools.len());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_typescript_sdks_client_resumes_a_cut_stream_and_gets_its_answer() {
    let Some((node, packages)) = pforte_tests::conformance::tools() else {
        return;
    };
    let svc = McpService::start(&[]).unwrap();
    let (relay, armed) = cutting_relay(svc.addr).await;
    let run = tokio::process::Command::new(&node)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NODE_PATH", packages.parent().unwrap())
        .arg(conformance_script("list-tools.cjs"))
        .arg(format!("http://{relay}/mcp"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("done within 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert!(answer["tools"].as_u64().is_some_and(|n| n > 0), "{answer}");
    assert!(!armed.load(Ordering::SeqCst), "the relay cut the stream");
}

#[tokio::test]
async fn the_python_sdks_client_resumes_a_cut_stream_and_gets_its_answer() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let svc = McpService::start(&[]).unwrap();
    let (relay, armed) = cutting_relay(svc.addr).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/list_tools.py");
    let url = format!("http://{relay}/mcp");
    let answer = run_python_json(&python, &script, &[&url], "", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(answer["tools"].as_u64().is_some_and(|n| n > 0), "{answer}");
    assert!(!armed.load(Ordering::SeqCst), "the relay cut the stream");
}

#[tokio::test]
async fn through_the_gateway_a_cut_stream_resumes_and_gets_its_answer() {
    let stack = Stack::builder()
        .plain_http()
        .limits(Limits::off())
        .start()
        .await;
    let token = stack.create_token("resume-tests").await.unwrap();
    let gateway: SocketAddr = stack
        .gw
        .mcp_url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let (relay, armed) = cutting_relay(gateway).await;
    let client = rmcp_client(&format!("http://{relay}/mcp"), http(), &token, &[])
        .await
        .unwrap();
    // The client's connection to the gateway is cut after the priming event; the gateway passes
    // the reconnect's Last-Event-ID on to the session's service.
    tools_across_the_cut(&client, &armed).await;
    client.cancel().await.unwrap();
}
