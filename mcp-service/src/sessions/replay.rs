//! The replay buffer of one SSE stream: its last events, kept so that a client reconnecting
//! with `Last-Event-ID` gets what it missed. It allocates nothing until the stream's first
//! event and holds at most [`MAX_EVENTS`] events and about [`MAX_BYTES`] of JSON.
//!
//! Event ids are the ones rmcp's `LocalSessionManager` forms: `INDEX/STREAM` on the stream of a
//! client request (its priming event is `0/STREAM`, its messages `1/STREAM`, `2/STREAM`, …) and
//! a bare `INDEX` on the standalone `GET` stream (rmcp primes it with `0`; its messages are
//! `1`, `2`, …). A client treats them as opaque and sends back the last one it saw; the events
//! after it are replayed.

use std::{collections::VecDeque, fmt, sync::Arc};

use rmcp::{
    model::ServerJsonRpcMessage, transport::streamable_http_server::session::ServerSseMessage,
};

/// At most this many events are kept per stream (rmcp keeps as many: its channel capacity).
pub(crate) const MAX_EVENTS: usize = 16;
/// At most this many bytes of JSON are kept per stream, except that the newest event is kept
/// whatever its size (it is usually the answer a reconnecting client waits for).
pub(crate) const MAX_BYTES: usize = 256 * 1024;

/// The id of an event this module formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventId {
    /// The request stream's number; `None` for the standalone stream.
    pub(crate) stream: Option<u64>,
    /// The event's place in its stream: 0 for the priming event, then 1, 2, …
    pub(crate) index: u64,
}

impl EventId {
    /// Reads a `Last-Event-ID`; `None` when this module cannot have formed it.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let number = |s: &str| {
            // `u64::from_str` takes a leading `+`; ids never have one.
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse::<u64>().ok()
        };
        match text.split_once('/') {
            Some((index, stream)) => Some(Self {
                stream: Some(number(stream)?),
                index: number(index)?,
            }),
            None => Some(Self {
                stream: None,
                index: number(text)?,
            }),
        }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stream {
            Some(stream) => write!(f, "{}/{stream}", self.index),
            None => write!(f, "{}", self.index),
        }
    }
}

/// An SSE event carrying `message` under `id`.
pub(crate) fn event(id: EventId, message: Arc<ServerJsonRpcMessage>) -> ServerSseMessage {
    let mut event = ServerSseMessage::default();
    event.event_id = Some(id.to_string());
    event.message = Some(message);
    event
}

/// How many bytes `message` takes as JSON (without building the text).
pub(crate) fn json_len(message: &ServerJsonRpcMessage) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a message of the service into a counter does not fail; if it did, the
    // event counts as empty and only the count bound applies to it.
    let _ = serde_json::to_writer(&mut count, message);
    count.0
}

#[derive(Debug)]
struct Kept {
    index: u64,
    bytes: usize,
    message: Arc<ServerJsonRpcMessage>,
}

/// Why a `Last-Event-ID` cannot be resumed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotIssued;

/// The last events of one stream.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// The index of the last event sent (0: none yet, only the priming event).
    last: u64,
    events: VecDeque<Kept>,
    bytes: usize,
}

impl Replay {
    /// Keeps `message` (`bytes` of JSON) as the stream's next event and returns its index.
    /// The oldest events go when there are more than [`MAX_EVENTS`] or more than
    /// [`MAX_BYTES`] in all.
    pub(crate) fn push(&mut self, message: Arc<ServerJsonRpcMessage>, bytes: usize) -> u64 {
        self.last += 1;
        self.events.push_back(Kept {
            index: self.last,
            bytes,
            message,
        });
        self.bytes += bytes;
        while self.events.len() > MAX_EVENTS || (self.bytes > MAX_BYTES && self.events.len() > 1) {
            if let Some(old) = self.events.pop_front() {
                self.bytes -= old.bytes;
            }
        }
        self.last
    }

    /// The index of the last event sent; 0 before the first.
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// The kept events after event `index` (which the client saw last), oldest first. Events
    /// that were dropped for the bounds are missing from it. [`NotIssued`] when the stream has
    /// not sent event `index` yet.
    pub(crate) fn after(
        &self,
        index: u64,
    ) -> Result<impl Iterator<Item = (u64, &Arc<ServerJsonRpcMessage>)>, NotIssued> {
        if index > self.last {
            return Err(NotIssued);
        }
        let skip = self.events.partition_point(|k| k.index <= index);
        Ok(self.events.iter().skip(skip).map(|k| (k.index, &k.message)))
    }

    /// Bytes of JSON kept.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Events kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the buffer holds memory of its own.
    #[cfg(test)]
    pub(crate) fn is_allocated(&self) -> bool {
        self.events.capacity() > 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rmcp::model::{NumberOrString, ServerResult};

    use super::*;

    fn message(n: i64) -> Arc<ServerJsonRpcMessage> {
        Arc::new(ServerJsonRpcMessage::response(
            ServerResult::empty(()),
            NumberOrString::Number(n),
        ))
    }

    fn indices(replay: &Replay, after: u64) -> Vec<u64> {
        replay.after(after).unwrap().map(|(i, _)| i).collect()
    }

    #[test]
    fn nothing_is_allocated_before_the_first_event() {
        let mut replay = Replay::default();
        assert!(!replay.is_allocated());
        assert_eq!(replay.last(), 0);
        assert_eq!(indices(&replay, 0), Vec::<u64>::new());
        assert_eq!(replay.push(message(1), 10), 1);
        assert!(replay.is_allocated());
    }

    #[test]
    fn resumes_after_the_last_event_seen() {
        let mut replay = Replay::default();
        for n in 1..=3 {
            replay.push(message(n), 10);
        }
        assert_eq!(indices(&replay, 0), [1, 2, 3], "after the priming event");
        assert_eq!(indices(&replay, 1), [2, 3]);
        assert_eq!(indices(&replay, 3), Vec::<u64>::new());
        let (_, first) = replay.after(2).unwrap().next().unwrap();
        assert!(
            Arc::ptr_eq(first, &replay.events[2].message),
            "shared, not copied"
        );
    }

    #[test]
    fn an_id_not_issued_yet_is_refused() {
        let mut replay = Replay::default();
        assert!(replay.after(1).is_err());
        replay.push(message(1), 10);
        assert!(replay.after(1).is_ok());
        assert_eq!(replay.after(2).err(), Some(NotIssued));
    }

    #[test]
    fn bounded_by_count() {
        let mut replay = Replay::default();
        for n in 1..=40 {
            replay.push(message(n), 10);
        }
        assert_eq!(replay.len(), MAX_EVENTS);
        assert_eq!(replay.bytes(), 10 * MAX_EVENTS);
        assert_eq!(replay.last(), 40);
        // What is gone is gone: a client behind the buffer gets what is kept.
        assert_eq!(indices(&replay, 3), (25..=40).collect::<Vec<_>>());
    }

    #[test]
    fn bounded_by_bytes_but_the_newest_is_kept() {
        let mut replay = Replay::default();
        let third = MAX_BYTES / 3 + 1;
        for n in 1..=3 {
            replay.push(message(n), third);
        }
        assert_eq!(indices(&replay, 0), [2, 3]);
        assert!(replay.bytes() <= MAX_BYTES);
        replay.push(message(4), MAX_BYTES * 2);
        assert_eq!(indices(&replay, 0), [4], "an event over the bound alone");
        assert_eq!(replay.bytes(), MAX_BYTES * 2);
        replay.push(message(5), 1);
        assert_eq!(indices(&replay, 0), [5]);
        assert_eq!(replay.bytes(), 1);
    }

    #[test]
    fn event_ids_are_rmcps() {
        let request = EventId {
            stream: Some(7),
            index: 2,
        };
        assert_eq!(request.to_string(), "2/7");
        assert_eq!(EventId::parse("2/7"), Some(request));
        let standalone = EventId {
            stream: None,
            index: 0,
        };
        assert_eq!(standalone.to_string(), "0");
        assert_eq!(EventId::parse("0"), Some(standalone));
        for bad in [
            "",
            "x",
            "1/",
            "/1",
            "1/x",
            "+1",
            "1/+2",
            "-1",
            "1/2/3",
            "99999999999999999999",
        ] {
            assert_eq!(EventId::parse(bad), None, "{bad:?}");
        }
        let sse = event(request, message(1));
        assert_eq!(sse.event_id.as_deref(), Some("2/7"));
        assert!(sse.message.is_some() && sse.retry.is_none());
    }

    #[test]
    fn json_len_is_the_length_of_the_text() {
        let m = message(12);
        assert_eq!(json_len(&m), serde_json::to_string(&*m).unwrap().len());
    }
}
