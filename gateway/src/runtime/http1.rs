//! The public listener's HTTP/1 connections: each request's head is read here first. A long
//! event stream (a bodiless `GET` of an MCP route that accepts `text/event-stream`) goes to the
//! gateway's lean relay (`proxy/relay.rs`), which holds a fraction of what pingora's proxy state
//! machine holds for as long as the stream stays open; every other request goes to pingora's
//! proxy with its head handed over as the session's first bytes, and HTTP/2 connections go to
//! pingora whole. The keep-alive loop, which pingora's HTTP application would run, runs here.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::{
    apps::{HttpPersistentSettings, HttpServerApp, ServerApp},
    protocols::{ALPN, Stream, http::ServerSession},
    proxy::HttpProxy,
    server::ShutdownWatch,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::{
    config::Settings,
    proxy::{Batched, Gateway},
    stdio::decide::wants_event_stream,
};

/// How long a new connection may take to send its whole first request head, counted from its
/// start (the keep-alive it has before its first request's arrival phase bounds it).
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(crate::proxy::FIRST_KEEPALIVE_SECS);

/// How long a later request's head may take once its first byte arrived (before it, the
/// connection's idle timeout applies); a client sends a head at once.
const HEAD_WAIT: Duration = Duration::from_secs(10);

/// The largest request head: a head still not whole past this is answered 431 here and the
/// connection closed (so that no head is read by pingora's per-read timeouts alone).
const HEAD_LIMIT: usize = 64 * 1024;

/// The answer to a head over [`HEAD_LIMIT`], written before the connection closes.
const HEAD_TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\n\
    content-length: 0\r\nconnection: close\r\n\r\n";

/// The size the head buffer starts at (pingora's own first read size).
const HEAD_BUFFER: usize = 4096;

/// Headers a head may have for the classification to see it whole.
const MAX_HEADERS: usize = 64;

/// The listener's application: pingora's proxy, with long event streams taken aside.
pub(crate) struct Http1 {
    proxy: Arc<HttpProxy<Gateway>>,
    gateway: Gateway,
    /// How long a kept-alive connection may idle before its next request.
    idle: Duration,
}

impl Http1 {
    pub(crate) fn new(proxy: HttpProxy<Gateway>, gateway: Gateway, settings: &Settings) -> Self {
        Self {
            proxy: Arc::new(proxy),
            gateway,
            idle: Duration::from_secs(settings.listen.keepalive_timeout_secs),
        }
    }
}

#[async_trait]
impl ServerApp for Http1 {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
            return self.proxy.process_new(stream, shutdown).await;
        }
        // What an answer has at hand leaves in one write (`proxy/batched.rs`).
        let mut stream = Batched::wrap(stream);
        let mut wait = Wait::First;
        let mut carried = BytesMut::new();
        let mut settings: Option<HttpPersistentSettings> = None;
        loop {
            let is_mcp_path = |path: &str| self.gateway.is_mcp_path(path);
            let (head, to) = read_head(&mut stream, carried, wait, is_mcp_path).await?;
            wait = Wait::Idle(self.idle);
            if to == Head::TooLarge {
                // Boxed: its read buffer would otherwise size every connection's future.
                Box::pin(refuse_head(&mut stream)).await;
                return None;
            }
            if to == Head::Relay {
                let reusable = self.gateway.relay(stream, head).await?;
                let (next, rest) = reusable.into_parts();
                stream = next;
                carried = rest.unwrap_or_default();
                continue;
            }
            let mut session = ServerSession::new_http1(stream);
            match settings.take() {
                Some(kept) => kept.apply_to_session(&mut session),
                None => session.set_keepalive(Some(crate::proxy::FIRST_KEEPALIVE_SECS)),
            }
            if *shutdown.borrow() {
                session.set_keepalive(None);
            }
            session.set_pipelined_prefix(head);
            let reused = self.proxy.process_new_http(session, shutdown).await?;
            let (next, kept) = reused.consume();
            stream = next;
            settings = kept;
            carried = BytesMut::new();
        }
    }

    async fn cleanup(&self) {
        self.proxy.http_cleanup().await;
    }
}

/// Answers a head over [`HEAD_LIMIT`] with 431 and closes, reading (and dropping) what the
/// client still sends for a moment first, so that it reads the answer rather than a reset.
async fn refuse_head(stream: &mut Stream) {
    if stream.write_all(HEAD_TOO_LARGE).await.is_err() || stream.flush().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut left = HEAD_LIMIT * 4;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    let _ = stream.shutdown().await;
}

/// How long a request head may take.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// A new connection's first request: the whole head within [`FIRST_REQUEST_WAIT`] of the
    /// start.
    First,
    /// A kept-alive connection's next request: its first byte within this idle time, then the
    /// whole head within [`HEAD_WAIT`] of that byte.
    Idle(Duration),
}

/// When the head being read must be whole: `started` is when the wait for it began,
/// `first_byte` when its first byte arrived (if yet) — pure.
fn head_deadline(wait: Wait, started: Instant, first_byte: Option<Instant>) -> Instant {
    match (wait, first_byte) {
        (Wait::First, _) => started + FIRST_REQUEST_WAIT,
        (Wait::Idle(idle), None) => started + idle,
        (Wait::Idle(_), Some(at)) => at + HEAD_WAIT,
    }
}

/// Reads until `buf` holds a whole request head and says where it goes (one `httparse`
/// refuses goes to pingora, which answers it; one past [`HEAD_LIMIT`] is `TooLarge`). The
/// whole head is due by [`head_deadline`], however its bytes trickle in. `None`: the
/// connection closed or missed the deadline before a request came (a stopping gateway keeps
/// waiting: its runtime ends the connection when the drain is over).
async fn read_head(
    stream: &mut Stream,
    mut buf: BytesMut,
    wait: Wait,
    is_mcp_path: impl Fn(&str) -> bool,
) -> Option<(BytesMut, Head)> {
    let started = Instant::now();
    let mut first_byte = (!buf.is_empty()).then_some(started);
    loop {
        if !buf.is_empty() {
            first_byte.get_or_insert_with(Instant::now);
            match classify(&buf, &is_mcp_path) {
                Head::Partial if buf.len() <= HEAD_LIMIT => {}
                Head::Partial => return Some((buf, Head::TooLarge)),
                // Whole, but larger than a head may be (it came in one read).
                _ if head_end(&buf).is_some_and(|end| end > HEAD_LIMIT) => {
                    return Some((buf, Head::TooLarge));
                }
                to => return Some((buf, to)),
            }
        }
        // Stopping: an idle kept-alive connection stays open through the drain, so a request
        // its client is already sending is served (with `Connection: close`), not cut.
        let deadline = tokio::time::Instant::from_std(head_deadline(wait, started, first_byte));
        buf.reserve(HEAD_BUFFER);
        let read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(_)) => {}
        }
    }
}

/// Where a request head goes.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// Not whole yet.
    Partial,
    /// Not whole within [`HEAD_LIMIT`]: answered 431.
    TooLarge,
    /// pingora's proxy (anything but a long event stream, or a head `httparse` refuses).
    Proxy,
    /// The relay: a bodiless HTTP/1.1 `GET` of an MCP route that accepts `text/event-stream`,
    /// with nothing that changes the framing.
    Relay,
}

/// Parses `head` once and says where it goes.
fn classify(head: &[u8], is_mcp_path: impl Fn(&str) -> bool) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Partial) => return Head::Partial,
        Ok(httparse::Status::Complete(_)) => {}
        // More header lines than looked at here: pingora reads the head once it is whole.
        Err(httparse::Error::TooManyHeaders) if !has_head_end(head) => return Head::Partial,
        Err(_) => return Head::Proxy,
    }
    if req.method != Some("GET") || req.version != Some(1) {
        return Head::Proxy;
    }
    let Some(path) = req.path else {
        return Head::Proxy;
    };
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let mut accepts = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("accept") {
            accepts |= wants_event_stream(std::str::from_utf8(h.value).ok());
        } else if (name.eq_ignore_ascii_case("content-length") && h.value != b"0")
            || name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("upgrade")
            || name.eq_ignore_ascii_case("expect")
        {
            return Head::Proxy;
        }
    }
    if accepts && is_mcp_path(path) {
        Head::Relay
    } else {
        Head::Proxy
    }
}

/// What the head reader decides for the bytes read so far, as text (`partial`, `too_large`,
/// `proxy`, `relay`), with `/mcp` and `/NAME/mcp` as MCP paths: for the fuzz target.
pub fn classify_head(head: &[u8]) -> &'static str {
    let mcp =
        |path: &str| path == "/mcp" || (path.ends_with("/mcp") && path.matches('/').count() == 2);
    match classify(head, mcp) {
        Head::Partial if head.len() > HEAD_LIMIT => "too_large",
        _ if head_end(head).is_some_and(|end| end > HEAD_LIMIT) => "too_large",
        Head::Partial => "partial",
        Head::TooLarge => "too_large",
        Head::Proxy => "proxy",
        Head::Relay => "relay",
    }
}

/// Whether `head` holds the empty line that ends a request head.
fn has_head_end(head: &[u8]) -> bool {
    head_end(head).is_some()
}

/// Where the request head in `head` ends (after its empty line), if it does.
fn head_end(head: &[u8]) -> Option<usize> {
    let lf = head.windows(2).position(|w| w == b"\n\n").map(|p| p + 2);
    let crlf = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_heads_end_the_read_and_invalid_ones_go_to_pingora() {
        let any = |_: &str| true;
        assert_eq!(
            classify(b"GET /mcp HTTP/1.1\r\nHost: a\r\n", any),
            Head::Partial
        );
        assert_eq!(
            classify(b"GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n", any),
            Head::Proxy
        );
        assert_eq!(
            classify(b"GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n{", any),
            Head::Proxy
        );
        assert_eq!(classify(b"\x16\x03\x01 binary", any), Head::Proxy);
    }

    fn stream_get(head: &str) -> bool {
        classify(head.as_bytes(), |path| {
            path == "/mcp" || path == "/notes/mcp"
        }) == Head::Relay
    }

    #[test]
    fn only_bodiless_event_stream_gets_of_mcp_routes_are_relayed() {
        let sse = "Accept: text/event-stream\r\n";
        assert!(stream_get(&format!("GET /mcp HTTP/1.1\r\n{sse}\r\n")));
        assert!(stream_get(
            "GET /mcp HTTP/1.1\r\naccept: application/json, text/event-stream\r\n\r\n"
        ));
        assert!(stream_get(&format!(
            "GET /notes/mcp?x=1 HTTP/1.1\r\n{sse}\r\n"
        )));
        assert!(stream_get(&format!(
            "GET /mcp HTTP/1.1\r\n{sse}Content-Length: 0\r\n\r\n"
        )));
        for head in [
            "GET /mcp HTTP/1.1\r\nAccept: application/json\r\n\r\n".to_owned(),
            format!("GET /mcp HTTP/1.1\r\n{sse}"),
            format!("GET /mcp HTTP/1.0\r\n{sse}\r\n"),
            format!("POST /mcp HTTP/1.1\r\n{sse}\r\n"),
            format!("GET /other HTTP/1.1\r\n{sse}\r\n"),
            format!("GET /mcp HTTP/1.1\r\n{sse}Content-Length: 2\r\n\r\n{{}}"),
            format!("GET /mcp HTTP/1.1\r\n{sse}Transfer-Encoding: chunked\r\n\r\n"),
            format!("GET /mcp HTTP/1.1\r\n{sse}Upgrade: websocket\r\n\r\n"),
            format!("GET /mcp HTTP/1.1\r\n{sse}Expect: 100-continue\r\n\r\n"),
        ] {
            assert!(!stream_get(&head), "{head:?}");
        }
    }

    #[test]
    fn a_head_has_one_deadline_however_its_bytes_trickle_in() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(45);
        // A first request: the whole head within 60 s of the start, bytes or not.
        for first_byte in [None, Some(t0), Some(later)] {
            assert_eq!(
                head_deadline(Wait::First, t0, first_byte),
                t0 + FIRST_REQUEST_WAIT
            );
        }
        // A kept-alive one: its idle time for the first byte, then the head's own bound.
        let idle = Wait::Idle(Duration::from_secs(3));
        assert_eq!(head_deadline(idle, t0, None), t0 + Duration::from_secs(3));
        assert_eq!(head_deadline(idle, t0, Some(later)), later + HEAD_WAIT);
    }

    #[test]
    fn many_header_lines_wait_for_the_head_end() {
        let mut head = String::from("GET /mcp HTTP/1.1\r\n");
        for i in 0..MAX_HEADERS + 5 {
            head.push_str(&format!("x-{i}: y\r\n"));
        }
        let any = |_: &str| true;
        assert_eq!(classify(head.as_bytes(), any), Head::Partial);
        head.push_str("\r\n");
        assert_eq!(classify(head.as_bytes(), any), Head::Proxy);
    }
}
