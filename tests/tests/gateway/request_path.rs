//! The request path against a hostile upstream and slow or odd clients, over raw sockets
//! (issue 38, red team 2026-12-04): no `Upgrade` makes a tunnel past the admission, an
//! upstream's `101` is answered 502, the answer's head states the framing the gateway writes,
//! a request head has one deadline however its bytes trickle in, a head pingora refuses
//! after the relay took it is answered 400, and a kept-alive upstream connection the upstream
//! closed is replaced.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pforte_tests::{Limits, RawUpstream, Stack};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

/// The raw upstream's answers, by the request's `?mode=`; the gateway's own catalog requests
/// (no mode) get a plain JSON-RPC error.
fn answer(head: &str) -> Vec<u8> {
    let mode = head
        .lines()
        .next()
        .and_then(|l| l.split_once("mode="))
        .map(|(_, m)| m.split([' ', '&']).next().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let text = match mode.as_str() {
        "up101" => "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".to_owned(),
        // An empty last list element (RFC 9110 §5.6.1: ignored), a forged answer behind it.
        "tecomma" => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked,\r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n{INJECTED}"
        ),
        "te2" => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\ntransfer-encoding: \r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n{INJECTED}"
        ),
        "gzip" => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: gzip\r\n\r\nhello".to_owned(),
        "cl2" => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello".to_owned(),
        _ => {
            let body = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#;
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        }
    };
    text.into_bytes()
}

/// What a hostile upstream puts after a complete answer, for the client's next request.
const INJECTED: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\ninjected";

/// A plain-HTTP gateway in front of the raw upstream, and a static token.
async fn hostile() -> (Stack, RawUpstream, String) {
    let upstream = RawUpstream::start(answer).await;
    let stack = Stack::builder()
        .upstream(&upstream.mcp_url())
        .plain_http()
        .limits(Limits::off())
        .keepalive_timeout_secs(3)
        .start()
        .await;
    let token = stack.gw.create_token("probe").await.unwrap();
    (stack, upstream, token)
}

/// The gateway's `host:port`.
fn addr(stack: &Stack) -> String {
    stack.gw.base.trim_start_matches("http://").to_owned()
}

/// Writes `request` on a new connection and reads until the gateway closes it (at most 5 s).
async fn exchange(stack: &Stack, request: &[u8]) -> String {
    let mut conn = TcpStream::connect(addr(stack)).await.unwrap();
    conn.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// A `POST` of a `ping` to `path`, asking the gateway to close after it.
fn ping(path: &str, token: &str, extra: &str) -> Vec<u8> {
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    format!(
        "POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The chunked body `wire` decoded, and whatever follows its last chunk.
fn dechunk(mut wire: &str) -> (String, String) {
    let mut body = String::new();
    loop {
        let Some((size, rest)) = wire.split_once("\r\n") else {
            return (body, wire.to_owned());
        };
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16)
            .unwrap_or_else(|_| panic!("not a chunk size: {size:?}"));
        if size == 0 {
            let rest = rest
                .strip_prefix("\r\n")
                .expect("the last chunk's empty line");
            return (body, rest.to_owned());
        }
        body.push_str(&rest[..size]);
        wire = rest[size..].strip_prefix("\r\n").expect("chunk end");
    }
}

#[tokio::test]
async fn an_upgrade_on_an_mcp_route_is_refused_and_nothing_tunnels() {
    let (stack, upstream, token) = hostile().await;
    let forged = "POST /mcp HTTP/1.1\r\nHost: x\r\nx-pforte-subject: admin\r\nx-pforte-scopes: mcp:read mcp:write\r\ncontent-length: 16\r\n\r\n{\"forged\":\"yes\"}";
    let websocket = format!(
        "GET /mcp?mode=up101 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n{forged}"
    );
    let h2c = ping(
        "/mcp?mode=up101",
        &token,
        "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n",
    );
    let only_connection = ping(
        "/mcp?mode=up101",
        &token,
        "Connection: keep-alive, upgrade\r\n",
    );
    let mut answers = Vec::new();
    for (name, request) in [
        ("websocket", websocket.into_bytes()),
        ("h2c", h2c),
        ("connection: upgrade", only_connection),
    ] {
        answers.push((name, exchange(&stack, &request).await));
    }
    // Not a byte of the forged request, nor the upgrade itself, reached the upstream.
    let seen = upstream.received().concat().to_ascii_lowercase();
    assert!(!seen.contains("forged"), "{seen}");
    assert!(!seen.contains("upgrade"), "{seen}");
    assert!(!seen.contains("x-pforte-subject: admin"), "{seen}");
    for (name, got) in answers {
        assert!(got.starts_with("HTTP/1.1 400 "), "{name}: {got}");
        assert!(got.contains("upgrade_refused"), "{name}: {got}");
        assert!(!got.contains(" 101 "), "{name}: {got}");
    }
}

#[tokio::test]
async fn an_upstreams_101_to_a_request_that_did_not_ask_is_answered_502() {
    let (stack, _upstream, token) = hostile().await;
    // A long event stream (the relay's path) and a POST (the pooled exchange).
    let stream = format!(
        "GET /mcp?mode=up101 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n"
    );
    for (name, request) in [
        ("event stream", stream.into_bytes()),
        ("post", ping("/mcp?mode=up101", &token, "")),
    ] {
        let got = exchange(&stack, &request).await;
        assert!(got.starts_with("HTTP/1.1 502 "), "{name}: {got}");
        assert!(!got.contains("Switching"), "{name}: {got}");
    }
}

#[tokio::test]
async fn the_answer_head_states_the_framing_the_gateway_writes() {
    let (stack, _upstream, token) = hostile().await;
    for mode in ["tecomma", "te2"] {
        let got = exchange(&stack, &ping(&format!("/mcp?mode={mode}"), &token, "")).await;
        let (head, body) = got.split_once("\r\n\r\n").expect("a whole head");
        assert!(head.starts_with("HTTP/1.1 200 "), "{mode}: {got}");
        let framing: Vec<String> = head
            .lines()
            .map(str::to_ascii_lowercase)
            .filter(|l| l.starts_with("transfer-encoding") || l.starts_with("content-length"))
            .collect();
        assert_eq!(framing, ["transfer-encoding: chunked"], "{mode}: {head}");
        let (decoded, after) = dechunk(body);
        assert_eq!(decoded, "hello", "{mode}");
        assert_eq!(after, "", "{mode}: bytes after the answer");
        assert!(!got.contains("injected"), "{mode}: {got}");
    }
    // Duplicate lengths go on as one; a transfer coding the gateway does not decode is refused.
    let got = exchange(&stack, &ping("/mcp?mode=cl2", &token, "")).await;
    let lengths = got
        .to_ascii_lowercase()
        .matches("content-length: 5\r\n")
        .count();
    assert_eq!(lengths, 1, "{got}");
    assert!(got.ends_with("\r\n\r\nhello"), "{got}");
    let got = exchange(&stack, &ping("/mcp?mode=gzip", &token, "")).await;
    assert!(got.starts_with("HTTP/1.1 502 "), "{got}");
}

#[tokio::test]
async fn a_head_the_relay_took_and_pingora_refuses_is_answered_400() {
    let (stack, _upstream, token) = hostile().await;
    let two_hosts = format!(
        "GET /mcp HTTP/1.1\r\nHost: a\r\nHost: b\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    let got = exchange(&stack, two_hosts.as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 400 "), "{got:?}");
}

#[tokio::test]
async fn a_kept_alive_connection_trickling_its_next_head_is_closed() {
    let (stack, _upstream, _token) = hostile().await;
    let mut conn = TcpStream::connect(addr(&stack)).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await
        .unwrap();
    // Its whole answer first (no pipelining), then the next head on the kept-alive connection.
    let mut first = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&first).contains("{\"status\":\"ok\"}") {
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("the first answer")
            .unwrap();
        assert!(n > 0, "closed after the first answer");
        first.extend_from_slice(&buf[..n]);
    }
    let (mut read, mut write) = conn.into_split();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return (Instant::now(), got),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    });
    // The next head, a byte a second (the idle timeout is 3 s, so each read is in time).
    let next = b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let started = Instant::now();
    for byte in next.iter().take(30) {
        if write.write_all(&[*byte]).await.is_err() || reader.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (closed, got) = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the gateway closes the connection")
        .unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(
        !got.contains("HTTP/1.1 200"),
        "the trickled head was answered: {got}"
    );
    // The head's own bound (10 s from its first byte), not the 30 s the bytes took.
    let took = closed - started;
    assert!(
        took > Duration::from_secs(8) && took < Duration::from_secs(15),
        "closed after {took:?}: {got}"
    );
}

#[tokio::test]
async fn a_head_over_64_kib_is_answered_431() {
    let (stack, _upstream, _token) = hostile().await;
    let padding = "a".repeat(8 * 1024);
    let mut head = String::from("GET /healthz HTTP/1.1\r\nHost: gw\r\n");
    for i in 0..9 {
        head.push_str(&format!("x-pad-{i}: {padding}\r\n"));
    }
    head.push_str("\r\n");
    let got = exchange(&stack, head.as_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 431 "), "{got}");
}

#[tokio::test]
async fn a_kept_alive_upstream_connection_the_upstream_closed_is_replaced() {
    let (stack, upstream, token) = hostile().await;
    let http = reqwest::Client::new();
    let ping = || {
        http.post(format!("{}/mcp", stack.gw.base))
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)
            .send()
    };
    assert_eq!(ping().await.unwrap().status(), 200);
    let before = upstream.received().len();
    // The gateway keeps that connection for the next request; the upstream closes it.
    upstream.close_connections();
    for i in 0..3 {
        assert_eq!(ping().await.unwrap().status(), 200, "call {i}");
    }
    // Served on one new connection, which the later calls reused.
    let pings = |c: &String| c.matches(r#""method":"ping""#).count();
    let after: Vec<String> = upstream.received().into_iter().skip(before).collect();
    assert_eq!(after.iter().map(pings).sum::<usize>(), 3, "{after:?}");
    assert_eq!(
        after.iter().filter(|c| pings(c) > 0).count(),
        1,
        "{after:?}"
    );
}
