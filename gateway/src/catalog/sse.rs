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

/// Incremental event reader for a chunked stream: feed bytes, get the data of every completed
/// event (events without any `data` line are skipped, as the spec's dispatch does).
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    /// Bytes of the current, not yet terminated line.
    partial: Vec<u8>,
    /// A CR was the last byte seen: a following LF belongs to it.
    after_cr: bool,
    data: Option<Vec<u8>>,
}

impl EventReader {
    /// Feeds a chunk; returns the data of every event it completed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
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
                    if let Some(event) = self.line(&line) {
                        done.push(event);
                    }
                }
                _ => self.partial.push(b),
            }
        }
        done
    }

    /// The stream ended: an event still open is dispatched (the body is complete).
    pub(crate) fn finish(&mut self) -> Option<Vec<u8>> {
        let line = std::mem::take(&mut self.partial);
        if !line.is_empty()
            && let Some(event) = self.line(&line)
        {
            return Some(event);
        }
        self.data.take()
    }

    fn line(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        if line.is_empty() {
            return self.data.take();
        }
        if let Some(value) = field_value(line, b"data") {
            match &mut self.data {
                Some(data) => {
                    data.push(b'\n');
                    data.extend_from_slice(value);
                }
                None => self.data = Some(value.to_vec()),
            }
        }
        None
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
        let mut r = EventReader::default();
        assert!(r.push(b"id: 1\r").is_empty());
        assert!(r.push(b"\ndata: {\"a\":\r\ndata: 1}\r").is_empty());
        let got = r.push(b"\n\r\nevent: x\n\ndata: tail");
        assert_eq!(got, vec![b"{\"a\":\n1}".to_vec()]);
        assert_eq!(r.finish(), Some(b"tail".to_vec()));
    }

    #[test]
    fn reader_dispatches_rmcp_priming_event_with_empty_data() {
        let mut r = EventReader::default();
        let got = r.push(b"data: \nid: 0\nretry: 3000\n\ndata: {}\n\n");
        assert_eq!(got, vec![Vec::new(), b"{}".to_vec()]);
    }
}
