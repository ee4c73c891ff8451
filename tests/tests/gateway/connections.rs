//! Client connections end to end, on plain sockets: an idle keep-alive connection is closed
//! after `keepalive_timeout_secs`, and one IP holds at most `max_connections_per_ip` open
//! connections (the next is closed without an answer; a slot frees when one closes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pforte_tests::{Gateway, Stack};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

fn addr(gw: &Gateway) -> String {
    gw.base.trim_start_matches("http://").to_owned()
}

/// What a read on `conn` gives within `limit`: bytes, the end of the stream, or nothing yet.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    Bytes(Vec<u8>),
    Closed,
    Pending,
}

async fn read_some(conn: &mut TcpStream, limit: Duration) -> Read {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(limit, conn.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Read::Closed,
        Ok(Ok(n)) => Read::Bytes(buf[..n].to_vec()),
        Err(_) => Read::Pending,
    }
}

/// One `GET /healthz` on `conn`, keep-alive; true when a whole 200 came back.
async fn healthz(conn: &mut TcpStream) -> bool {
    let req = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n";
    if conn.write_all(req).await.is_err() {
        return false;
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match read_some(conn, Duration::from_secs(5)).await {
            Read::Bytes(b) => got.extend_from_slice(&b),
            Read::Closed | Read::Pending => return false,
        }
        let text = String::from_utf8_lossy(&got);
        if text.starts_with("HTTP/1.1 200") && text.ends_with("{\"status\":\"ok\"}") {
            return true;
        }
    }
    false
}

/// After one request the connection idles: the gateway closes it after about a second
/// (before: pingora kept it open for as long as the client liked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keepalive_connection_is_closed_after_the_timeout() {
    let gw = Stack::builder()
        .plain_http()
        .keepalive_timeout_secs(1)
        .start()
        .await;
    let mut conn = TcpStream::connect(addr(&gw)).await.unwrap();
    assert!(healthz(&mut conn).await);
    // Kept alive: a second request on the same connection is answered.
    assert!(healthz(&mut conn).await);
    let idle = Instant::now();
    let end = read_some(&mut conn, Duration::from_secs(10)).await;
    assert_eq!(end, Read::Closed, "after {:?}", idle.elapsed());
    let after = idle.elapsed();
    assert!(
        after >= Duration::from_millis(800) && after < Duration::from_secs(5),
        "closed after {after:?}"
    );
}

/// Eight connections from 127.0.0.1 are served; the ninth is closed without an answer while
/// they stay open; once two close, a new one is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ip_holds_at_most_max_connections_per_ip() {
    const CAP: usize = 8;
    let gw = Stack::builder()
        .plain_http()
        .max_connections_per_ip(8)
        .keepalive_timeout_secs(60)
        .start()
        .await;
    // The start-up health checks' connections may still be closing: take each slot as it frees.
    let mut held = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while held.len() < CAP && Instant::now() < deadline {
        let mut conn = TcpStream::connect(addr(&gw)).await.unwrap();
        if healthz(&mut conn).await {
            held.push(conn);
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert_eq!(held.len(), CAP, "{CAP} connections served");

    let mut ninth = TcpStream::connect(addr(&gw)).await.unwrap();
    assert!(!healthz(&mut ninth).await, "the ninth is closed unanswered");
    // The eight are still open and served.
    for conn in &mut held {
        assert!(healthz(conn).await);
    }
    drop(held.drain(..2));
    let served = pforte_tests::eventually(Duration::from_secs(5), || {
        let addr = addr(&gw);
        async move {
            let Ok(mut conn) = TcpStream::connect(addr).await else {
                return false;
            };
            healthz(&mut conn).await
        }
    })
    .await;
    assert!(served, "a slot frees when a connection closes");
}
