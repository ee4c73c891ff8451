//! An event stream the gateway writes itself (a call through a virtual server whose member
//! answers with one, and a virtual server's `GET` stream, issue 42 points 2–3): its head (200,
//! `text/event-stream`, the request id and CORS headers), each event as the member's data under
//! `data:` lines, keep-alive comments, and its end.

use bytes::{BufMut, Bytes, BytesMut};
use pingora::{http::ResponseHeader, proxy::Session};

use super::Framing;
use crate::{cors, forward};

/// One SSE event of type `message` carrying `data` as it is: a `data:` line per line of it
/// (a reader joins them with the same line feeds) — pure.
pub(crate) fn event(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 32);
    out.put_slice(b"event: message\n");
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        out.put_slice(b"data: ");
        out.put_slice(line);
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// Writes the event stream's head.
pub(crate) async fn write_head(session: &mut Session, framing: Framing<'_>) -> pingora::Result<()> {
    let mut resp = ResponseHeader::build(200, Some(8))?;
    resp.insert_header("content-type", "text/event-stream")?;
    resp.insert_header("cache-control", "no-cache")?;
    if !session.downstream_session.is_http2() {
        // Each event leaves as a chunk as soon as it is written.
        resp.insert_header("transfer-encoding", "chunked")?;
    }
    if let Some(origin) = framing.cors_origin {
        for (name, value) in cors::response_headers(origin) {
            resp.insert_header(name, value)?;
        }
    }
    resp.insert_header(forward::header::REQUEST_ID, framing.request_id)?;
    session.write_response_header(Box::new(resp), false).await
}

/// Writes one event carrying `data`.
pub(crate) async fn write_event(session: &mut Session, data: &[u8]) -> pingora::Result<()> {
    session.write_response_body(Some(event(data)), false).await
}

/// Writes a comment line (a keep-alive: a reader skips it).
pub(crate) async fn write_comment(session: &mut Session) -> pingora::Result<()> {
    let comment = Bytes::from_static(b": keep-alive\n\n");
    session.write_response_body(Some(comment), false).await
}

/// Ends the event stream.
pub(crate) async fn write_end(session: &mut Session) -> pingora::Result<()> {
    session.write_response_body(None, true).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_carries_the_data_line_by_line() {
        assert_eq!(
            &event(br#"{"a":1}"#)[..],
            b"event: message\ndata: {\"a\":1}\n\n"
        );
        // Pretty-printed JSON: one data line per line, read back joined by line feeds.
        assert_eq!(
            &event(b"{\n \"a\": 1\r\n}")[..],
            b"event: message\ndata: {\ndata:  \"a\": 1\ndata: }\n\n"
        );
    }
}
