//! The gateway's HTTP/1 exchange with the upstream, holding no more than an open stream needs:
//! the request head and its whole body written in one go (the head by pingora's own
//! serializer), the answer's head parsed by `httparse`
//! into a pingora `ResponseHeader`, and the body decoded as it arrives through a buffer of a
//! few KiB — its length decided as RFC 9112 §6.3 says: none (204, 304), chunked
//! (`httparse::parse_chunk_size` reads the size lines), `Content-Length`, or until the upstream
//! closes. pingora's client session would keep a 4 KiB head buffer, a 64 KiB body buffer and
//! both header maps for the stream's life.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::{
    Error, ErrorType, Result,
    http::{RequestHeader, ResponseHeader},
    protocols::{Stream, http::v1::client::http_req_header_to_wire},
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How much is asked of the socket per read; an event larger than this arrives in pieces.
const READ_SIZE: usize = 2048;

/// What a long event stream's wire reads into while nothing is buffered: an idle stream holds
/// this rather than [`READ_SIZE`] for as long as it stays open (a larger event's rest is read
/// at the full size).
const IDLE_READ: usize = 512;

/// The largest answer head (and chunk-size or trailer line) accepted.
const MAX_HEAD: usize = 64 * 1024;

/// Header lines an answer head may have.
const MAX_HEADERS: usize = 128;

/// What is left of the answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Fully read.
    Done,
    /// This many bytes.
    Length(u64),
    /// Whatever comes until the upstream closes.
    UntilClose,
    /// Chunked, at this point of a chunk.
    Chunked(Chunk),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// A chunk-size line is next.
    Size,
    /// This many bytes of the chunk's data are next.
    Data(u64),
    /// The CRLF after a chunk's data is next.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
}

/// One step of decoding what is buffered.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Piece(Bytes),
    NeedMore,
    End,
}

/// An upstream connection carrying one request and its answer.
pub(super) struct Wire {
    stream: Stream,
    buf: BytesMut,
    body: Body,
    read_timeout: Option<Duration>,
    /// The upstream may carry another request on this connection once the answer has ended
    /// (HTTP/1.1, no `Connection: close`, a body with a known end).
    keep_alive: bool,
    /// Whether any byte of an answer arrived.
    answered: bool,
    /// A long event stream: its body is read into [`IDLE_READ`] bytes whenever it idles.
    lean: bool,
}

impl Wire {
    pub(super) fn new(stream: Stream, read_timeout: Option<Duration>) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
            body: Body::Done,
            read_timeout,
            keep_alive: false,
            answered: false,
            lean: false,
        }
    }

    /// A wire for a long event stream (`true`): between its events it holds a small buffer.
    pub(super) fn lean(mut self, lean: bool) -> Self {
        self.lean = lean;
        self
    }

    /// Whether the answer's body ends when the upstream closes (neither chunked nor with a
    /// length): the client's connection must close after it too.
    pub(super) fn until_close(&self) -> bool {
        self.body == Body::UntilClose
    }

    /// Whether the answer's body has been read to its end (or has none).
    pub(super) fn is_done(&self) -> bool {
        self.body == Body::Done
    }

    /// Whether nothing of an answer has arrived (a kept-alive connection that fails before
    /// answering was closed by the upstream while idle: the request may go on a new one).
    pub(super) fn unanswered(&self) -> bool {
        !self.answered
    }

    /// The connection, when the answer has ended and the upstream keeps it open for another
    /// request (nothing of it left unread).
    pub(super) fn into_reusable(self) -> Option<Stream> {
        (self.keep_alive && self.body == Body::Done && self.buf.is_empty()).then_some(self.stream)
    }

    /// Writes the request head and its whole body together: one write where both fit in a
    /// socket buffer.
    pub(super) async fn send(&mut self, req: &RequestHeader, body: &[u8]) -> Result<()> {
        let Some(head) = http_req_header_to_wire(req) else {
            return Error::e_explain(ErrorType::InvalidHTTPHeader, "request not writable");
        };
        let write = if body.is_empty() {
            self.stream.write_all(&head).await
        } else {
            let mut whole = BytesMut::with_capacity(head.len() + body.len());
            whole.extend_from_slice(&head);
            whole.extend_from_slice(body);
            self.stream.write_all(&whole).await
        };
        write.map_err(|e| Error::because(ErrorType::WriteError, "writing the request", e))?;
        self.stream
            .flush()
            .await
            .map_err(|e| Error::because(ErrorType::WriteError, "writing the request", e))
    }

    /// The answer's final head (informational ones skipped); the body is read after it.
    pub(super) async fn answer(&mut self) -> Result<Box<ResponseHeader>> {
        loop {
            if let Some((head, body)) = parse_head(&mut self.buf)? {
                self.keep_alive = keeps_alive(&head) && body != Body::UntilClose;
                self.body = body;
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD {
                return Error::e_explain(ErrorType::InvalidHTTPHeader, "answer head too large");
            }
            if self.read().await? == 0 {
                return Error::e_explain(ErrorType::ConnectionClosed, "closed before answering");
            }
        }
    }

    /// The next piece of the body; `None` once it has ended. Cancel safe: what was read stays
    /// buffered.
    pub(super) async fn body(&mut self) -> Result<Option<Bytes>> {
        loop {
            match decode(&mut self.buf, &mut self.body, false)? {
                Step::Piece(piece) => return Ok(Some(piece)),
                Step::End => return Ok(None),
                Step::NeedMore => {}
            }
            if self.buf.len() > MAX_HEAD {
                return Error::e_explain(ErrorType::InvalidHTTPHeader, "chunk line too long");
            }
            if self.read().await? == 0 {
                return match decode(&mut self.buf, &mut self.body, true)? {
                    Step::Piece(piece) => Ok(Some(piece)),
                    _ => Ok(None),
                };
            }
        }
    }

    /// The next piece of the body when what was already read holds it (`Some(None)`: the body
    /// has ended), without reading; `None` when the upstream must be waited for.
    pub(super) fn buffered(&mut self) -> Result<Option<Option<Bytes>>> {
        Ok(match decode(&mut self.buf, &mut self.body, false)? {
            Step::Piece(piece) => Some(Some(piece)),
            Step::End => Some(None),
            Step::NeedMore => None,
        })
    }

    async fn read(&mut self) -> Result<usize> {
        let idle = self.lean && self.body != Body::Done && self.buf.is_empty();
        if idle && self.buf.capacity() != IDLE_READ {
            // The last event's buffer goes with its bytes once they are written.
            self.buf = BytesMut::with_capacity(IDLE_READ);
        } else if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            self.buf.reserve(READ_SIZE);
        }
        let read = self.stream.read_buf(&mut self.buf);
        let read = match self.read_timeout {
            Some(limit) => match tokio::time::timeout(limit, read).await {
                Ok(read) => read,
                Err(_) => {
                    return Error::e_explain(ErrorType::ReadTimedout, "waiting for the upstream");
                }
            },
            None => read.await,
        };
        let n = read.map_err(|e| Error::because(ErrorType::ReadError, "reading the answer", e))?;
        self.answered |= n > 0;
        Ok(n)
    }
}

/// Whether an answer lets its connection carry another request (RFC 9112 §9.3): HTTP/1.1
/// without `Connection: close`.
fn keeps_alive(head: &ResponseHeader) -> bool {
    head.version != http::Version::HTTP_10
        && !head
            .headers
            .get_all(http::header::CONNECTION)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
}

/// The answer head at the start of `buf` (taken from it) and how its body is framed, once it
/// is whole; informational heads are dropped.
fn parse_head(buf: &mut BytesMut) -> Result<Option<(Box<ResponseHeader>, Body)>> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut headers);
        let len = match parsed.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => {
                return Error::e_explain(ErrorType::InvalidHTTPHeader, format!("answer head: {e}"));
            }
        };
        let code = parsed.code.unwrap_or(0);
        if code == 101 {
            // No request the gateway sends asks to switch protocols; a switch would make the
            // connection a tunnel past every admission step.
            return Error::e_explain(
                ErrorType::InvalidHTTPHeader,
                "the upstream switched protocols",
            );
        }
        if (100..200).contains(&code) {
            let _ = buf.split_to(len);
            continue;
        }
        let mut head = ResponseHeader::build(code, Some(parsed.headers.len()))?;
        if parsed.version == Some(0) {
            head.set_version(http::Version::HTTP_10);
        }
        for h in parsed.headers.iter() {
            head.append_header(h.name.to_owned(), h.value)?;
        }
        let body = framing(&mut head)?;
        let _ = buf.split_to(len);
        return Ok(Some((Box::new(head), body)));
    }
}

/// How the body of `head` ends (RFC 9112 §6.3), with the head's framing rewritten to say
/// exactly that, since the body goes on decoded: `Transfer-Encoding: chunked` alone (the
/// gateway's writer chunks it again), one `Content-Length`, or neither (until the upstream
/// closes). A transfer coding other than one `chunked` (empty list elements ignored, RFC 9110
/// §5.6.1) is not relayed: an error, answered 502.
fn framing(head: &mut ResponseHeader) -> Result<Body> {
    let status = head.status.as_u16();
    if status == 204 || status == 304 || head.status.is_informational() {
        head.remove_header(&http::header::TRANSFER_ENCODING);
        return Ok(Body::Done);
    }
    let mut codings = head
        .headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty());
    let first = codings.next();
    let had_te = head.headers.contains_key(http::header::TRANSFER_ENCODING);
    match (first, codings.next()) {
        (Some(c), None) if c.eq_ignore_ascii_case(b"chunked") => {
            head.remove_header(&http::header::CONTENT_LENGTH);
            head.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
            return Ok(Body::Chunked(Chunk::Size));
        }
        (None, None) if !had_te => {}
        _ => {
            return Error::e_explain(
                ErrorType::InvalidHTTPHeader,
                "a transfer coding the gateway does not relay",
            );
        }
    }
    let mut length = None;
    for value in head.headers.get_all(http::header::CONTENT_LENGTH) {
        let n = std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        match (n, length) {
            (Some(n), None) => length = Some(n),
            (Some(n), Some(seen)) if n == seen => {}
            _ => return Error::e_explain(ErrorType::InvalidHTTPHeader, "bad Content-Length"),
        }
    }
    Ok(match length {
        Some(n) => {
            // One line, whatever duplicates the upstream sent.
            head.insert_header(http::header::CONTENT_LENGTH, n.to_string())?;
            if n == 0 { Body::Done } else { Body::Length(n) }
        }
        None => Body::UntilClose,
    })
}

/// Decodes what `buf` holds of the body; `eof`: the upstream has closed.
fn decode(buf: &mut BytesMut, body: &mut Body, eof: bool) -> Result<Step> {
    loop {
        match *body {
            Body::Done => return Ok(Step::End),
            Body::UntilClose if buf.is_empty() => {
                return Ok(if eof { Step::End } else { Step::NeedMore });
            }
            Body::UntilClose => return Ok(Step::Piece(buf.split().freeze())),
            Body::Length(_) | Body::Chunked(Chunk::Data(_)) if buf.is_empty() => {
                if eof {
                    return Error::e_explain(ErrorType::ConnectionClosed, "answer cut short");
                }
                return Ok(Step::NeedMore);
            }
            Body::Length(left) => {
                let take = take_len(left, buf.len());
                *body = if take as u64 == left {
                    Body::Done
                } else {
                    Body::Length(left - take as u64)
                };
                return Ok(Step::Piece(buf.split_to(take).freeze()));
            }
            Body::Chunked(Chunk::Data(left)) => {
                let take = take_len(left, buf.len());
                *body = Body::Chunked(if take as u64 == left {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left - take as u64)
                });
                return Ok(Step::Piece(buf.split_to(take).freeze()));
            }
            Body::Chunked(Chunk::Size) => match httparse::parse_chunk_size(buf) {
                Ok(httparse::Status::Complete((used, size))) => {
                    let _ = buf.split_to(used);
                    *body = Body::Chunked(if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    });
                }
                Ok(httparse::Status::Partial) => return more(eof),
                Err(_) => return Error::e_explain(ErrorType::InvalidHTTPHeader, "chunk size"),
            },
            Body::Chunked(Chunk::DataEnd) => {
                if buf.len() < 2 {
                    return more(eof);
                }
                if &buf[..2] != b"\r\n" {
                    return Error::e_explain(ErrorType::InvalidHTTPHeader, "chunk not ended");
                }
                let _ = buf.split_to(2);
                *body = Body::Chunked(Chunk::Size);
            }
            Body::Chunked(Chunk::Trailers) => {
                let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
                    return more(eof);
                };
                let _ = buf.split_to(end + 2);
                if end == 0 {
                    *body = Body::Done;
                }
            }
        }
    }
}

/// `NeedMore`, unless the upstream has closed mid-frame.
fn more(eof: bool) -> Result<Step> {
    if eof {
        return Error::e_explain(ErrorType::ConnectionClosed, "answer cut short");
    }
    Ok(Step::NeedMore)
}

/// How much of `buffered` bytes belong to a frame with `left` bytes to go.
fn take_len(left: u64, buffered: usize) -> usize {
    usize::try_from(left).map_or(buffered, |left| left.min(buffered))
}

/// An answer decoded from `wire` fed in pieces of `step` bytes, as the exchange reads it: the
/// head as the client gets it and the decoded body, or the error's text (for the fuzz target
/// and tests).
pub fn decode_answer(wire: &[u8], step: usize) -> Result<(ResponseHeader, Vec<u8>), String> {
    let step = step.max(1);
    let mut buf = BytesMut::new();
    let mut rest = wire;
    let mut feed = |buf: &mut BytesMut| {
        let (now, later) = rest.split_at(step.min(rest.len()));
        buf.extend_from_slice(now);
        rest = later;
        rest.is_empty()
    };
    let mut eof;
    let (head, mut body) = loop {
        eof = feed(&mut buf);
        match parse_head(&mut buf) {
            Ok(Some(found)) => break found,
            Ok(None) if eof => return Err("head never whole".to_owned()),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
    };
    let mut out = Vec::new();
    loop {
        match decode(&mut buf, &mut body, eof) {
            Ok(Step::Piece(p)) => out.extend_from_slice(&p),
            Ok(Step::End) => return Ok((*head, out)),
            Ok(Step::NeedMore) if eof => return Err("needs more at the end".to_owned()),
            Ok(Step::NeedMore) => eof = feed(&mut buf),
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes; the decoded body, or the error's text.
    fn run(wire: &[u8], step: usize) -> (u16, Result<Vec<u8>, String>) {
        let mut buf = BytesMut::new();
        let mut rest = wire;
        let (head, mut body) = loop {
            let (now, later) = rest.split_at(step.min(rest.len()));
            buf.extend_from_slice(now);
            rest = later;
            if let Some(found) = parse_head(&mut buf).unwrap() {
                break found;
            }
            assert!(!now.is_empty(), "head never whole");
        };
        let mut out = Vec::new();
        loop {
            let eof = rest.is_empty();
            match decode(&mut buf, &mut body, eof) {
                Ok(Step::Piece(p)) => out.extend_from_slice(&p),
                Ok(Step::End) => return (head.status.as_u16(), Ok(out)),
                Ok(Step::NeedMore) => {
                    let (now, later) = rest.split_at(step.min(rest.len()));
                    buf.extend_from_slice(now);
                    rest = later;
                }
                Err(e) => return (head.status.as_u16(), Err(e.to_string())),
            }
        }
    }

    const SSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
        transfer-encoding: chunked\r\n\r\n7\r\ndata: 1\r\n10;ext=1\r\ndata: two\n\nxyz!!\r\n0\r\nx-t: 1\r\n\r\n";

    #[test]
    fn chunked_bodies_decode_whatever_the_pieces() {
        for step in [1, 2, 3, 7, 64, 4096] {
            let (status, body) = run(SSE, step);
            assert_eq!(status, 200);
            assert_eq!(body.unwrap(), b"data: 1data: two\n\nxyz!!", "step {step}");
        }
    }

    #[tokio::test]
    async fn an_idle_event_stream_holds_a_small_buffer_and_large_events_still_arrive_whole() {
        use tokio::io::AsyncWriteExt as _;
        let (near, mut far) = tokio::io::duplex(64 * 1024);
        let mut up = Wire::new(Box::new(near), None).lean(true);
        far.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(up.answer().await.unwrap().status, 200);
        let event = format!("data: {}\n\n", "x".repeat(3 * READ_SIZE));
        far.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
            .await
            .unwrap();
        let mut got = Vec::new();
        while got.len() < event.len() {
            got.extend_from_slice(&up.body().await.unwrap().unwrap());
        }
        assert_eq!(got, event.as_bytes());
        // Idle again: the next read waits in a small buffer.
        let next = tokio::spawn(async move {
            let piece = up.body().await.unwrap().unwrap();
            (piece, up.buf.capacity())
        });
        tokio::task::yield_now().await;
        far.write_all(b"7\r\ndata: 1\r\n").await.unwrap();
        let (piece, capacity) = next.await.unwrap();
        assert_eq!(&piece[..], b"data: 1");
        assert!(capacity <= IDLE_READ, "{capacity}");
    }

    #[tokio::test]
    async fn what_was_read_is_handed_on_without_reading_again() {
        use tokio::io::AsyncWriteExt as _;
        let (near, mut far) = tokio::io::duplex(4096);
        let mut up = Wire::new(Box::new(near), None);
        far.write_all(SSE).await.unwrap();
        assert_eq!(up.answer().await.unwrap().status, 200);
        let piece = |b: &'static [u8]| Some(Some(Bytes::from_static(b)));
        assert_eq!(up.buffered().unwrap(), piece(b"data: 1"));
        assert_eq!(up.buffered().unwrap(), piece(b"data: two\n\nxyz!!"));
        assert_eq!(up.buffered().unwrap(), Some(None));
        assert!(up.is_done());
        // A body still to come: nothing at hand, the upstream is waited for.
        let (near, mut far) = tokio::io::duplex(4096);
        let mut up = Wire::new(Box::new(near), None);
        far.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
            .await
            .unwrap();
        up.answer().await.unwrap();
        assert_eq!(up.buffered().unwrap(), None);
        far.write_all(b"done").await.unwrap();
        assert_eq!(up.body().await.unwrap(), Some(Bytes::from_static(b"done")));
    }

    #[test]
    fn informational_heads_are_skipped_and_lengths_respected() {
        let wire =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-length: 4\r\n\r\nnope";
        assert_eq!(run(wire, 5), (404, Ok(b"nope".to_vec())));
        let empty = b"HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n";
        assert_eq!(run(empty, 100), (204, Ok(Vec::new())));
        let close = b"HTTP/1.1 200 OK\r\n\r\nuntil the end";
        assert_eq!(run(close, 4), (200, Ok(b"until the end".to_vec())));
    }

    #[test]
    fn transfer_encoding_wins_over_content_length() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"[..],
        );
        let (head, body) = parse_head(&mut buf).unwrap().unwrap();
        assert_eq!(body, Body::Chunked(Chunk::Size));
        assert!(head.headers.get("content-length").is_none());
    }

    #[test]
    fn broken_answers_are_errors_not_hangs() {
        let cut = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort";
        assert!(run(cut, 100).1.is_err());
        let cut_chunk = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab";
        assert!(run(cut_chunk, 100).1.is_err());
        let bad_size = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n";
        assert!(run(bad_size, 100).1.is_err());
        let unended = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\naXY";
        assert!(run(unended, 100).1.is_err());
        let mut two = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"[..],
        );
        assert!(parse_head(&mut two).is_err());
        let mut junk = BytesMut::from(&b"SSH-2.0-x\r\n\r\n"[..]);
        assert!(parse_head(&mut junk).is_err());
    }

    /// The head's framing lines as the client gets them, lower case.
    fn framing_lines(head: &ResponseHeader) -> Vec<String> {
        let mut lines: Vec<String> = head
            .headers
            .iter()
            .filter(|(k, _)| *k == "transfer-encoding" || *k == "content-length")
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or("?")))
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn the_head_states_the_framing_the_body_goes_on_with() {
        let tail = "5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\ninjected";
        for te in [
            "transfer-encoding: chunked,\r\n",
            "transfer-encoding: chunked\r\ntransfer-encoding: \r\n",
            "Transfer-Encoding: , CHUNKED\r\ncontent-length: 99\r\n",
        ] {
            let wire = format!("HTTP/1.1 200 OK\r\n{te}connection: keep-alive\r\n\r\n{tail}");
            let (head, body) = decode_answer(wire.as_bytes(), 3).unwrap();
            assert_eq!(
                framing_lines(&head),
                ["transfer-encoding: chunked"],
                "{te:?}"
            );
            assert_eq!(body, b"hello", "{te:?}");
        }
        let two = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello";
        let (head, body) = decode_answer(two, 64).unwrap();
        assert_eq!(framing_lines(&head), ["content-length: 5"]);
        assert_eq!(body, b"hello");
        for refused in [
            "transfer-encoding: gzip\r\n",
            "transfer-encoding: gzip, chunked\r\n",
            "transfer-encoding: chunked, chunked\r\n",
            "transfer-encoding: ,\r\n",
        ] {
            let wire = format!("HTTP/1.1 200 OK\r\n{refused}\r\n0\r\n\r\n");
            assert!(decode_answer(wire.as_bytes(), 64).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn an_upstreams_101_is_an_error() {
        let wire = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\nraw";
        let err = decode_answer(wire, 64).unwrap_err();
        assert!(err.contains("switched protocols"), "{err}");
    }
}
