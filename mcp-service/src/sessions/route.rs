//! Where a message of the service goes: the SSE stream of the `POST` it answers or relates to,
//! else the session's standalone `GET` stream; each stream's events are kept for a reconnect
//! with `Last-Event-ID` ([`Replay`]). Plain decisions over a small table, no I/O.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use rmcp::model::{
    CancelledNotificationParam, GetExtensions as _, JsonRpcNotification, Notification,
    ProgressNotificationParam, ProgressToken, RequestId, ServerJsonRpcMessage, ServerNotification,
};
use rmcp::service::OriginatingRequestId;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::replay::{EventId, Replay, event};

/// What a message of the service is addressed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Address {
    /// The answer (result or error) to this client request: its stream ends after it.
    Answer(RequestId),
    /// Belongs beside this client request (a server request made while handling it, a
    /// cancellation of it).
    Beside(RequestId),
    /// Progress under this token, which a client request named in its `_meta`.
    Progress(ProgressToken),
    /// Nothing in particular: the standalone stream.
    Standalone,
}

/// Reads the address of `message`.
pub(crate) fn address(message: &ServerJsonRpcMessage) -> Address {
    match message {
        ServerJsonRpcMessage::Response(response) => Address::Answer(response.id.clone()),
        ServerJsonRpcMessage::Error(error) => match &error.id {
            Some(id) => Address::Answer(id.clone()),
            None => Address::Standalone,
        },
        ServerJsonRpcMessage::Request(request) => {
            match request.request.extensions().get::<OriginatingRequestId>() {
                Some(OriginatingRequestId(id)) => Address::Beside(id.clone()),
                None => Address::Standalone,
            }
        }
        ServerJsonRpcMessage::Notification(JsonRpcNotification {
            notification:
                ServerNotification::ProgressNotification(Notification {
                    params: ProgressNotificationParam { progress_token, .. },
                    ..
                }),
            ..
        }) => Address::Progress(progress_token.clone()),
        ServerJsonRpcMessage::Notification(JsonRpcNotification {
            notification:
                ServerNotification::CancelledNotification(Notification {
                    params:
                        CancelledNotificationParam {
                            request_id: Some(id),
                            ..
                        },
                    ..
                }),
            ..
        }) => Address::Beside(id.clone()),
        ServerJsonRpcMessage::Notification(_) => Address::Standalone,
    }
}

/// The sending end of one SSE stream: boxed messages keep the channel's first block at 32
/// pointers.
pub(crate) type SseSender = mpsc::UnboundedSender<Box<ServerSseMessage>>;

/// Where the messages for one client request go.
#[derive(Debug)]
pub(crate) enum Sink {
    /// The `POST`'s SSE stream.
    Sse(SseSender),
    /// The `initialize` request, answered once and not as a stream.
    Once(oneshot::Sender<ServerJsonRpcMessage>),
}

impl Sink {
    #[cfg(test)]
    fn is_closed(&self) -> bool {
        match self {
            Self::Sse(tx) => tx.is_closed(),
            Self::Once(tx) => tx.is_closed(),
        }
    }
}

/// The stream number of `initialize`, which is answered once, not on a stream of its own (rmcp
/// numbers request streams from 0 without it).
pub(crate) const INITIALIZE: u64 = u64::MAX;

/// One client request in flight: where its messages go, and its stream's events so far.
#[derive(Debug)]
struct InFlight {
    /// The stream's number in its session (the `N` of the event ids `M/N`).
    stream: u64,
    request: RequestId,
    progress: Option<ProgressToken>,
    sink: Sink,
    replay: Replay,
}

/// The events of an answered (or cancelled) request's stream, kept for a client that
/// reconnects until `until`.
#[derive(Debug)]
struct Answered {
    stream: u64,
    replay: Replay,
    until: Instant,
}

/// At most this many extra `GET` streams per session, which only carry keep-alives.
pub(crate) const MAX_IDLE_STREAMS: usize = 32;
/// At most this many answered streams' events are kept per session…
pub(crate) const MAX_ANSWERED: usize = 16;
/// …and about this many bytes of them (the newest is kept whatever its size).
pub(crate) const ANSWERED_BYTES: usize = 1024 * 1024;

/// The streams of one session.
#[derive(Debug)]
pub(crate) struct Routes {
    next_stream: u64,
    /// Client requests whose answer is not sent yet; few at a time, so a list.
    in_flight: Vec<InFlight>,
    /// Answered streams, oldest first (so also by `until`).
    answered: VecDeque<Answered>,
    answered_ttl: Duration,
    standalone: Option<SseSender>,
    standalone_replay: Replay,
    /// The last standalone event handed to an open stream; a new `GET` without
    /// `Last-Event-ID` gets the kept ones after it.
    delivered: u64,
    /// Further `GET` streams while the standalone one is open: kept open (keep-alives), sent
    /// nothing, like rmcp's local session manager does.
    idle: Vec<SseSender>,
    closed: bool,
}

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// Onto the stream of a client request; `last` when it was the answer, which ends it;
    /// `sent` false when its client is away (the event is kept for its reconnect).
    Request { stream: u64, last: bool, sent: bool },
    /// Onto the standalone stream; `sent` false when none is open (kept for the next).
    Standalone { sent: bool },
    /// Not kept: a message beside `initialize`, which is answered once.
    Dropped,
}

/// What a new `GET` stream became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opened {
    Standalone,
    Idle,
    /// The session has ended.
    Refused,
}

/// What a reconnect with `Last-Event-ID` became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resumed {
    /// The stream of a request in flight, from the event after the one named.
    Request,
    /// An answered request's kept events after the one named; then the stream ends.
    Answered,
    /// The standalone stream, from the event after the one named.
    Standalone,
    /// An idle stream: the standalone one is open already.
    Idle,
}

/// Why a reconnect with `Last-Event-ID` was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotResumed {
    /// The session never sent that event.
    NotIssued,
    /// That request stream was answered and its events are no longer kept.
    Gone,
    /// The session has ended.
    Ended,
}

impl Routes {
    /// An empty table whose answered streams are kept for `answered_ttl`.
    pub(crate) fn new(answered_ttl: Duration) -> Self {
        Self {
            next_stream: 0,
            in_flight: Vec::new(),
            answered: VecDeque::new(),
            answered_ttl,
            standalone: None,
            standalone_replay: Replay::default(),
            delivered: 0,
            idle: Vec::new(),
            closed: false,
        }
    }

    /// Number for the next request stream.
    pub(crate) fn next_stream(&mut self) -> u64 {
        let n = self.next_stream;
        self.next_stream = self.next_stream.wrapping_add(1) % INITIALIZE;
        n
    }

    /// Routes the messages for client request `request` (with its progress token, if any) to
    /// `sink` until it is answered. False once the session has ended.
    pub(crate) fn expect(
        &mut self,
        stream: u64,
        request: RequestId,
        progress: Option<ProgressToken>,
        sink: Sink,
    ) -> bool {
        if self.closed {
            return false;
        }
        // A request id reused while its first use is in flight: the newer stream takes over.
        self.in_flight.retain(|f| f.request != request);
        self.in_flight.push(InFlight {
            stream,
            request,
            progress,
            sink,
            replay: Replay::default(),
        });
        true
    }

    /// Takes request `i` out of the table; an empty table gives its memory back (an idle
    /// session holds no list of requests).
    fn take(&mut self, i: usize) -> InFlight {
        let flight = self.in_flight.swap_remove(i);
        if self.in_flight.is_empty() {
            self.in_flight = Vec::new();
        }
        flight
    }

    /// The client cancelled `request`: its stream ends; what it sent is kept a while.
    pub(crate) fn cancel(&mut self, request: &RequestId, now: Instant) {
        if let Some(i) = self.in_flight.iter().position(|f| &f.request == request) {
            let flight = self.take(i);
            self.keep_answered(flight.stream, flight.replay, now);
        }
    }

    /// A reconnect with `Last-Event-ID: id`: the kept events after it go to `tx`, then what
    /// follows. An answered request's stream ends after its replay; the standalone stream is
    /// taken over only when its last stream is gone (else `tx` is an idle stream, like a
    /// second `GET`).
    pub(crate) fn resume(
        &mut self,
        id: EventId,
        tx: SseSender,
        now: Instant,
    ) -> Result<Resumed, NotResumed> {
        if self.closed {
            return Err(NotResumed::Ended);
        }
        self.evict(now);
        let Some(n) = id.stream else {
            if self.standalone_replay.after(id.index).is_err() {
                return Err(NotResumed::NotIssued);
            }
            return Ok(match self.open_standalone(tx, id.index) {
                Opened::Idle => Resumed::Idle,
                Opened::Standalone | Opened::Refused => Resumed::Standalone,
            });
        };
        let open = self
            .in_flight
            .iter_mut()
            .find(|f| f.stream == n && matches!(f.sink, Sink::Sse(_)));
        if let Some(flight) = open {
            replay(&flight.replay, id, &tx)?;
            flight.sink = Sink::Sse(tx);
            return Ok(Resumed::Request);
        }
        if let Some(done) = self.answered.iter().find(|a| a.stream == n) {
            // The stream ends with the replay: `tx` goes with this call.
            replay(&done.replay, id, &tx)?;
            return Ok(Resumed::Answered);
        }
        if n >= self.next_stream {
            Err(NotResumed::NotIssued)
        } else {
            Err(NotResumed::Gone)
        }
    }

    /// A `GET` stream: the standalone one unless that is open already, then an idle one. It
    /// starts with the standalone events kept since the last one an open stream took.
    pub(crate) fn open_get(&mut self, tx: SseSender) -> Opened {
        if self.closed {
            return Opened::Refused;
        }
        self.open_standalone(tx, self.delivered)
    }

    fn open_standalone(&mut self, tx: SseSender, after: u64) -> Opened {
        match &self.standalone {
            Some(open) if !open.is_closed() => {
                self.idle.retain(|t| !t.is_closed());
                if self.idle.len() >= MAX_IDLE_STREAMS {
                    self.idle.remove(0);
                }
                self.idle.push(tx);
                Opened::Idle
            }
            _ => {
                let id = EventId {
                    stream: None,
                    index: after,
                };
                // `after` is issued: `open_get`'s is, `resume` checked its own.
                let _ = replay(&self.standalone_replay, id, &tx);
                self.delivered = self.standalone_replay.last();
                self.standalone = Some(tx);
                Opened::Standalone
            }
        }
    }

    /// Sends `message` (`bytes` of JSON) where it belongs, and keeps it for a reconnect.
    pub(crate) fn deliver(
        &mut self,
        message: ServerJsonRpcMessage,
        bytes: usize,
        now: Instant,
    ) -> Delivered {
        let found = match address(&message) {
            Address::Answer(id) => self
                .in_flight
                .iter()
                .position(|f| f.request == id)
                .map(|i| (i, true)),
            Address::Beside(id) => self
                .in_flight
                .iter()
                .position(|f| f.request == id)
                .map(|i| (i, false)),
            Address::Progress(token) => self
                .in_flight
                .iter()
                .position(|f| f.progress.as_ref() == Some(&token))
                .map(|i| (i, false)),
            Address::Standalone => None,
        };
        let Some((i, last)) = found else {
            let message = Arc::new(message);
            let index = self.standalone_replay.push(Arc::clone(&message), bytes);
            let id = EventId {
                stream: None,
                index,
            };
            let sent = self
                .standalone
                .as_ref()
                .is_some_and(|tx| tx.send(Box::new(event(id, message))).is_ok());
            if sent {
                self.delivered = index;
            } else {
                self.standalone = None;
            }
            return Delivered::Standalone { sent };
        };
        if matches!(self.in_flight[i].sink, Sink::Once(_)) {
            // `initialize`: only its answer, as the answer of the POST.
            if !last {
                return Delivered::Dropped;
            }
            let flight = self.take(i);
            let sent = match flight.sink {
                Sink::Once(tx) => tx.send(message).is_ok(),
                Sink::Sse(_) => false,
            };
            return Delivered::Request {
                stream: flight.stream,
                last,
                sent,
            };
        }
        let message = Arc::new(message);
        let flight = &mut self.in_flight[i];
        let id = EventId {
            stream: Some(flight.stream),
            index: flight.replay.push(Arc::clone(&message), bytes),
        };
        let sent = match &flight.sink {
            Sink::Sse(tx) => tx.send(Box::new(event(id, message))).is_ok(),
            Sink::Once(_) => false,
        };
        let stream = flight.stream;
        if last {
            let flight = self.take(i);
            self.keep_answered(flight.stream, flight.replay, now);
        }
        Delivered::Request { stream, last, sent }
    }

    /// Keeps an answered stream's events until `now` plus the time answered streams are kept,
    /// within the session's bounds.
    fn keep_answered(&mut self, stream: u64, replay: Replay, now: Instant) {
        if replay.last() == 0 || self.closed {
            return; // nothing to replay
        }
        self.answered.push_back(Answered {
            stream,
            replay,
            until: now + self.answered_ttl,
        });
        let mut bytes: usize = self.answered.iter().map(|a| a.replay.bytes()).sum();
        while self.answered.len() > MAX_ANSWERED
            || (bytes > ANSWERED_BYTES && self.answered.len() > 1)
        {
            if let Some(old) = self.answered.pop_front() {
                bytes -= old.replay.bytes();
            }
        }
        self.evict(now);
    }

    /// Drops the answered streams kept past their time; when the next one is due.
    pub(crate) fn evict(&mut self, now: Instant) -> Option<Instant> {
        while self.answered.front().is_some_and(|a| a.until <= now) {
            self.answered.pop_front();
        }
        if self.answered.is_empty() && self.answered.capacity() > 0 {
            self.answered = VecDeque::new();
        }
        self.answered.front().map(|a| a.until)
    }

    /// How many streams of client requests are still listened to.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
            .iter()
            .filter(|f| !f.sink.is_closed())
            .count()
    }

    /// How many answered streams' events are kept.
    #[cfg(test)]
    pub(crate) fn answered(&self) -> usize {
        self.answered.len()
    }

    /// The session ended: every stream ends, none opens again, nothing is kept.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.in_flight = Vec::new();
        self.answered = VecDeque::new();
        self.standalone = None;
        self.standalone_replay = Replay::default();
        self.idle = Vec::new();
    }
}

/// Sends the events of `replay` after `id` to `tx`.
fn replay(replay: &Replay, id: EventId, tx: &SseSender) -> Result<(), NotResumed> {
    let events = replay.after(id.index).map_err(|_| NotResumed::NotIssued)?;
    for (index, message) in events {
        let id = EventId { index, ..id };
        if tx.send(Box::new(event(id, Arc::clone(message)))).is_err() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
