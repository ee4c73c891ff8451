//! Server-sent events as the MCP streamable-HTTP transport frames them: lines that keep their
//! terminators (for byte-exact rewriting), events split at blank lines, and an incremental
//! reader for streams that arrive in chunks. Per the SSE spec: a line ends at CRLF, LF or CR;
//! `data:` values lose one leading space and several `data:` lines join with `\n`.

/// One line of an SSE body: its content and its terminator (empty for an unterminated last line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    pub(crate) content: &'a [u8],
    pub(crate) end: &'a [u8],
}

impl Line<'_> {
    /// The value of a `data` field on this line, if it is one.
    pub(crate) fn data(&self) -> Option<&[u8]> {
        field_value(self.content, b"data")
    }
}

/// The value of field `name` when `line` is that field (`name` alone, or `name:` with an
/// optional single space after the colon).
fn field_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?;
    if rest.is_empty() {
        return Some(rest);
    }
    let value = rest.strip_prefix(b":")?;
    Some(value.strip_prefix(b" ").unwrap_or(value))
}

/// Splits `body` into lines, each with its terminator (CRLF, LF or CR).
pub(crate) fn lines(body: &[u8]) -> impl Iterator<Item = Line<'_>> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (content, end, next) = match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            None => (rest, &rest[rest.len()..], &rest[rest.len()..]),
            Some(i) => {
                let width = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                (&rest[..i], &rest[i..i + width], &rest[i + width..])
            }
        };
        rest = next;
        Some(Line { content, end })
    })
}

/// A line or an event's data grew past the reader's cap: the stream is to be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event-stream line or event longer than {0} bytes")]
pub struct TooLong(pub usize);

/// Incremental event reader for a chunked stream: feed bytes, get the data of every completed
/// event (events without any `data` line are skipped, as the spec's dispatch does). A line, and
/// an event's joined data, may hold at most `max_bytes`: past it [`EventReader::push`] fails
/// and the reader holds nothing more (the stdio bridge's `max_line_bytes` rule).
#[derive(Debug)]
pub struct EventReader {
    max_bytes: usize,
    /// Bytes of the current, not yet terminated line.
    partial: Vec<u8>,
    /// A CR was the last byte seen: a following LF belongs to it.
    after_cr: bool,
    data: Option<Vec<u8>>,
}

impl EventReader {
    /// A reader holding at most `max_bytes` of a line or an event.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            partial: Vec::new(),
            after_cr: false,
            data: None,
        }
    }

    /// Feeds a chunk; returns the data of every event it completed, or [`TooLong`] (then the
    /// stream is unusable: what was held is dropped).
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, TooLong> {
        let mut done = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.partial);
                    if let Some(event) = self.line(&line)? {
                        done.push(event);
                    }
                }
                _ => {
                    if self.partial.len() >= self.max_bytes {
                        return Err(self.overflow());
                    }
                    self.partial.push(b);
                }
            }
        }
        Ok(done)
    }

    /// Drops what is held; the error to return.
    fn overflow(&mut self) -> TooLong {
        self.partial = Vec::new();
        self.data = None;
        TooLong(self.max_bytes)
    }

    /// The stream ended: an event still open is dispatched (the body is complete).
    pub fn finish(&mut self) -> Result<Option<Vec<u8>>, TooLong> {
        let line = std::mem::take(&mut self.partial);
        if !line.is_empty()
            && let Some(event) = self.line(&line)?
        {
            return Ok(Some(event));
        }
        Ok(self.data.take())
    }

    fn line(&mut self, line: &[u8]) -> Result<Option<Vec<u8>>, TooLong> {
        if line.is_empty() {
            return Ok(self.data.take());
        }
        if let Some(value) = field_value(line, b"data") {
            let held = self.data.as_ref().map_or(0, |d| d.len() + 1);
            if held + value.len() > self.max_bytes {
                return Err(self.overflow());
            }
            match &mut self.data {
                Some(data) => {
                    data.push(b'\n');
                    data.extend_from_slice(value);
                }
                None => self.data = Some(value.to_vec()),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_every_terminator() {
        let got: Vec<_> = lines(b"a\r\nb\nc\rd").map(|l| (l.content, l.end)).collect();
        assert_eq!(
            got,
            vec![
                (&b"a"[..], &b"\r\n"[..]),
                (b"b", b"\n"),
                (b"c", b"\r"),
                (b"d", b""),
            ]
        );
    }

    #[test]
    fn data_field_values() {
        let data = |s: &'static [u8]| lines(s).next().and_then(|l| l.data().map(<[u8]>::to_vec));
        assert_eq!(data(b"data: x"), Some(b"x".to_vec()));
        assert_eq!(data(b"data:x"), Some(b"x".to_vec()));
        assert_eq!(data(b"data:  x"), Some(b" x".to_vec()));
        assert_eq!(data(b"data"), Some(Vec::new()));
        assert_eq!(data(b"data: "), Some(Vec::new()));
        assert_eq!(data(b"datax: 1"), None);
        assert_eq!(data(b": data: 1"), None);
        assert_eq!(data(b"id: 1"), None);
    }

    #[test]
    fn reader_joins_multi_line_data_across_chunks_and_terminators() {
        let mut r = EventReader::new(1024);
        assert!(r.push(b"id: 1\r").unwrap().is_empty());
        assert!(r.push(b"\ndata: {\"a\":\r\ndata: 1}\r").unwrap().is_empty());
        let got = r.push(b"\n\r\nevent: x\n\ndata: tail").unwrap();
        assert_eq!(got, vec![b"{\"a\":\n1}".to_vec()]);
        assert_eq!(r.finish(), Ok(Some(b"tail".to_vec())));
    }

    #[test]
    fn reader_dispatches_rmcp_priming_event_with_empty_data() {
        let mut r = EventReader::new(1024);
        let got = r
            .push(b"data: \nid: 0\nretry: 3000\n\ndata: {}\n\n")
            .unwrap();
        assert_eq!(got, vec![Vec::new(), b"{}".to_vec()]);
    }

    #[test]
    fn lines_and_events_past_the_cap_fail_and_hold_nothing() {
        // One line: 16 bytes of content are held, the 17th fails, across chunks.
        let mut r = EventReader::new(16);
        assert!(r.push(b"data: 0123456789").unwrap().is_empty());
        assert_eq!(r.push(b"a"), Err(TooLong(16)));
        assert!(r.partial.capacity() == 0 && r.data.is_none());
        // An event of short lines: its joined data counts.
        let mut r = EventReader::new(16);
        assert!(r.push(b"data: 01234567\n").unwrap().is_empty());
        assert_eq!(r.push(b"data: 01234567\n"), Err(TooLong(16)));
        // Exactly at the cap is fine.
        let mut r = EventReader::new(16);
        assert_eq!(
            r.push(b"data:0123456789abcdef\n\n").map_err(|_| ()),
            Err(()),
            "the line itself is 21 bytes"
        );
        let mut r = EventReader::new(21);
        assert_eq!(
            r.push(b"data:0123456789abcdef\n\n").unwrap(),
            vec![b"0123456789abcdef".to_vec()]
        );
    }

    /// The fuzz target's invariant (`fuzz/fuzz_targets/catalog_sse.rs`) on hand-picked
    /// streams: however the bytes are cut, the same events and the same overflow.
    #[test]
    fn the_cut_changes_nothing() {
        fn read(stream: &[u8], step: usize, max: usize) -> (Vec<Vec<u8>>, Option<TooLong>) {
            let mut r = EventReader::new(max);
            let mut events = Vec::new();
            for piece in stream.chunks(step) {
                match r.push(piece) {
                    Ok(done) => events.extend(done),
                    Err(e) => return (events, Some(e)),
                }
            }
            match r.finish() {
                Ok(last) => events.extend(last),
                Err(e) => return (events, Some(e)),
            }
            (events, None)
        }
        let streams: [&[u8]; 6] = [
            b"data: a\r\n\r\ndata: b\rdata: c\r\r",
            b"data:0123456789abcdef\n\ndata: x\ndata: y\n\n",
            b"\r\n\r\n\n\r: comment\ndata\n\n",
            b"data: 0123456789\ndata: 0123456789\n\n",
            b"id: 1\nevent: e\ndata: {\"a\":1}\n\ndata: tail",
            b"dataxyz: 1\ndata:  two spaces\n\n",
        ];
        for stream in streams {
            for max in [1, 8, 16, 21, 64] {
                let (whole, whole_err) = read(stream, stream.len(), max);
                for step in 1..=16 {
                    let (cut, cut_err) = read(stream, step, max);
                    assert_eq!(cut_err, whole_err, "{stream:?} step {step} max {max}");
                    if whole_err.is_none() {
                        assert_eq!(cut, whole, "{stream:?} step {step} max {max}");
                    }
                    assert!(cut.iter().all(|e| e.len() <= max));
                }
            }
        }
    }
}
