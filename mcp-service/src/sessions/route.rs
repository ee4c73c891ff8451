//! Where a message of the service goes: the SSE stream of the `POST` it answers or relates to,
//! else the session's standalone `GET` stream. Plain decisions over a small table, no I/O.

use rmcp::model::{
    CancelledNotificationParam, GetExtensions as _, JsonRpcNotification, Notification,
    ProgressNotificationParam, ProgressToken, RequestId, ServerJsonRpcMessage, ServerNotification,
};
use rmcp::service::OriginatingRequestId;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::sync::{mpsc, oneshot};

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

/// One client request in flight and where its messages go.
#[derive(Debug)]
struct InFlight {
    /// The stream's number in its session (the `N` of the event ids `0/N`).
    stream: u64,
    request: RequestId,
    progress: Option<ProgressToken>,
    sink: Sink,
}

/// At most this many extra `GET` streams per session, which only carry keep-alives.
pub(crate) const MAX_IDLE_STREAMS: usize = 32;

/// The streams of one session.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    next_stream: u64,
    /// Client requests whose answer is not sent yet; few at a time, so a list.
    in_flight: Vec<InFlight>,
    standalone: Option<SseSender>,
    /// Further `GET` streams while the standalone one is open: kept open (keep-alives), sent
    /// nothing, like rmcp's local session manager does.
    idle: Vec<SseSender>,
    closed: bool,
}

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// Onto the stream of a client request; `last` when it was the answer, which ends it.
    Request {
        stream: u64,
        last: bool,
    },
    Standalone,
    /// No open stream takes it (its client went away, or nothing is listening).
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

impl Routes {
    /// Number for the next request stream.
    pub(crate) fn next_stream(&mut self) -> u64 {
        let n = self.next_stream;
        self.next_stream = self.next_stream.wrapping_add(1);
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
        });
        true
    }

    /// The client cancelled `request`: its stream ends.
    pub(crate) fn cancel(&mut self, request: &RequestId) {
        self.in_flight.retain(|f| &f.request != request);
    }

    /// A reconnect for request stream `stream` (`Last-Event-ID: M/stream`): later messages go
    /// to `tx`. False when that request was answered already (or never was).
    pub(crate) fn reattach(&mut self, stream: u64, tx: SseSender) -> bool {
        match self.in_flight.iter_mut().find(|f| f.stream == stream) {
            Some(f) => {
                f.sink = Sink::Sse(tx);
                true
            }
            None => false,
        }
    }

    /// A `GET` stream: the standalone one unless that is open already, then an idle one.
    pub(crate) fn open_get(&mut self, tx: SseSender) -> Opened {
        if self.closed {
            return Opened::Refused;
        }
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
                self.standalone = Some(tx);
                Opened::Standalone
            }
        }
    }

    /// Sends `message` where it belongs.
    pub(crate) fn deliver(&mut self, message: ServerJsonRpcMessage) -> Delivered {
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
        match found {
            Some((i, true)) => {
                let flight = self.in_flight.swap_remove(i);
                let sent = match flight.sink {
                    Sink::Sse(tx) => tx
                        .send(Box::new(ServerSseMessage::from_message(message)))
                        .is_ok(),
                    Sink::Once(tx) => tx.send(message).is_ok(),
                };
                deliver_result(sent, flight.stream, true)
            }
            Some((i, false)) => {
                let flight = &self.in_flight[i];
                let sent = match &flight.sink {
                    Sink::Sse(tx) => tx
                        .send(Box::new(ServerSseMessage::from_message(message)))
                        .is_ok(),
                    // The answer to `initialize` is the only message it takes.
                    Sink::Once(_) => false,
                };
                deliver_result(sent, flight.stream, false)
            }
            None => match &self.standalone {
                Some(tx)
                    if tx
                        .send(Box::new(ServerSseMessage::from_message(message)))
                        .is_ok() =>
                {
                    Delivered::Standalone
                }
                _ => Delivered::Dropped,
            },
        }
    }

    /// How many streams of client requests are still listened to.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
            .iter()
            .filter(|f| !f.sink.is_closed())
            .count()
    }

    /// The session ended: every stream ends, none opens again.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.in_flight.clear();
        self.standalone = None;
        self.idle.clear();
    }
}

fn deliver_result(sent: bool, stream: u64, last: bool) -> Delivered {
    if sent {
        Delivered::Request { stream, last }
    } else {
        Delivered::Dropped
    }
}

/// Reads a `Last-Event-ID` this module handed out: `M/N` names request stream `N`, a bare `M`
/// the standalone stream (its priming event is `0`). `None` when it is neither.
pub(crate) fn resumed_stream(last_event_id: &str) -> Option<Option<u64>> {
    match last_event_id.split_once('/') {
        Some((index, stream)) => {
            index.parse::<u64>().ok()?;
            Some(Some(stream.parse().ok()?))
        }
        None => {
            last_event_id.parse::<u64>().ok()?;
            Some(None)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rmcp::model::{ErrorData, NumberOrString, ServerRequest, ServerResult};

    use super::*;

    fn id(n: i64) -> RequestId {
        NumberOrString::Number(n)
    }

    fn answer(n: i64) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::response(ServerResult::empty(()), id(n))
    }

    fn progress(token: &str) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::notification(ServerNotification::ProgressNotification(
            Notification::new(ProgressNotificationParam::new(
                ProgressToken(NumberOrString::String(token.into())),
                0.5,
            )),
        ))
    }

    fn list_changed() -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::notification(ServerNotification::ToolListChangedNotification(
            Default::default(),
        ))
    }

    fn ping(originating: Option<i64>) -> ServerJsonRpcMessage {
        let mut request = rmcp::model::PingRequest::default();
        if let Some(n) = originating {
            request.extensions.insert(OriginatingRequestId(id(n)));
        }
        ServerJsonRpcMessage::request(ServerRequest::PingRequest(request), id(1000))
    }

    fn sse() -> (SseSender, mpsc::UnboundedReceiver<Box<ServerSseMessage>>) {
        mpsc::unbounded_channel()
    }

    #[test]
    fn addresses() {
        assert_eq!(address(&answer(3)), Address::Answer(id(3)));
        let error = ServerJsonRpcMessage::error(ErrorData::internal_error("x", None), Some(id(4)));
        assert_eq!(address(&error), Address::Answer(id(4)));
        assert_eq!(
            address(&progress("p")),
            Address::Progress(ProgressToken(NumberOrString::String("p".into())))
        );
        assert_eq!(address(&ping(Some(7))), Address::Beside(id(7)));
        assert_eq!(address(&ping(None)), Address::Standalone);
        assert_eq!(address(&list_changed()), Address::Standalone);
        let cancelled =
            ServerJsonRpcMessage::notification(ServerNotification::CancelledNotification(
                Notification::new(CancelledNotificationParam::new(Some(id(9)), None)),
            ));
        assert_eq!(address(&cancelled), Address::Beside(id(9)));
    }

    #[test]
    fn an_answer_goes_to_its_request_and_ends_the_stream() {
        let mut routes = Routes::default();
        let (tx, mut rx) = sse();
        let n = routes.next_stream();
        assert!(routes.expect(n, id(1), None, Sink::Sse(tx)));
        let (standalone, mut get) = sse();
        assert_eq!(routes.open_get(standalone), Opened::Standalone);

        assert_eq!(
            routes.deliver(answer(1)),
            Delivered::Request {
                stream: n,
                last: true
            }
        );
        assert!(rx.try_recv().unwrap().message.is_some());
        // The sender went with the answer: the stream ends.
        assert!(rx.try_recv().is_err() && rx.is_closed());
        // A second answer to the same id has no request stream any more: standalone.
        assert_eq!(routes.deliver(answer(1)), Delivered::Standalone);
        assert!(get.try_recv().is_ok());
    }

    #[test]
    fn progress_and_related_requests_ride_the_request_stream() {
        let mut routes = Routes::default();
        let (tx, mut rx) = sse();
        let token = ProgressToken(NumberOrString::String("p".into()));
        let n = routes.next_stream();
        routes.expect(n, id(5), Some(token), Sink::Sse(tx));
        let last = Delivered::Request {
            stream: n,
            last: false,
        };
        assert_eq!(routes.deliver(progress("p")), last);
        assert_eq!(routes.deliver(ping(Some(5))), last);
        // Other progress and unrelated messages: no standalone stream open, dropped.
        assert_eq!(routes.deliver(progress("q")), Delivered::Dropped);
        assert_eq!(routes.deliver(list_changed()), Delivered::Dropped);
        assert_eq!(routes.deliver(ping(Some(6))), Delivered::Dropped);
        assert!(rx.try_recv().is_ok() && rx.try_recv().is_ok() && rx.try_recv().is_err());
        assert_eq!(routes.in_flight(), 1);
    }

    #[test]
    fn initialize_is_answered_once() {
        let mut routes = Routes::default();
        let (tx, mut rx) = oneshot::channel();
        let n = routes.next_stream();
        routes.expect(n, id(0), None, Sink::Once(tx));
        assert_eq!(routes.deliver(ping(Some(0))), Delivered::Dropped);
        assert_eq!(
            routes.deliver(answer(0)),
            Delivered::Request {
                stream: n,
                last: true
            }
        );
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_cancelled_request_loses_its_stream() {
        let mut routes = Routes::default();
        let (tx, rx) = sse();
        let n = routes.next_stream();
        routes.expect(n, id(2), None, Sink::Sse(tx));
        routes.cancel(&id(2));
        assert!(rx.is_closed());
        assert_eq!(routes.deliver(answer(2)), Delivered::Dropped);
    }

    #[test]
    fn a_second_get_is_idle_until_the_first_is_gone() {
        let mut routes = Routes::default();
        let (first, first_rx) = sse();
        let (second, mut second_rx) = sse();
        assert_eq!(routes.open_get(first), Opened::Standalone);
        assert_eq!(routes.open_get(second), Opened::Idle);
        assert_eq!(routes.deliver(list_changed()), Delivered::Standalone);
        assert!(second_rx.try_recv().is_err());
        // The first one's client went away: the next GET is the standalone stream.
        drop(first_rx);
        let (third, mut third_rx) = sse();
        assert_eq!(routes.open_get(third), Opened::Standalone);
        assert_eq!(routes.deliver(list_changed()), Delivered::Standalone);
        assert!(third_rx.try_recv().is_ok());
        // Idle streams are bounded.
        let receivers: Vec<_> = (0..MAX_IDLE_STREAMS + 3)
            .map(|_| {
                let (tx, rx) = sse();
                assert_eq!(routes.open_get(tx), Opened::Idle);
                rx
            })
            .collect();
        assert_eq!(routes.idle.len(), MAX_IDLE_STREAMS);
        drop(receivers);
    }

    #[test]
    fn a_reconnect_takes_over_the_request_stream() {
        let mut routes = Routes::default();
        let (tx, old) = sse();
        let n = routes.next_stream();
        routes.expect(n, id(8), None, Sink::Sse(tx));
        let (again, mut new) = sse();
        assert!(routes.reattach(n, again));
        assert!(old.is_closed());
        routes.deliver(answer(8));
        assert!(new.try_recv().is_ok());
        let (late, _rx) = sse();
        assert!(!routes.reattach(n, late), "answered already");
    }

    #[test]
    fn a_closed_session_ends_every_stream_and_opens_none() {
        let mut routes = Routes::default();
        let (tx, rx) = sse();
        let (get, get_rx) = sse();
        let n = routes.next_stream();
        routes.expect(n, id(1), None, Sink::Sse(tx));
        routes.open_get(get);
        routes.close();
        assert!(rx.is_closed() && get_rx.is_closed());
        let (tx, _rx) = sse();
        assert_eq!(routes.open_get(tx), Opened::Refused);
        let (tx, _rx) = sse();
        assert!(!routes.expect(2, id(2), None, Sink::Sse(tx)));
    }

    #[test]
    fn last_event_ids() {
        assert_eq!(resumed_stream("0"), Some(None));
        assert_eq!(resumed_stream("3/12"), Some(Some(12)));
        assert_eq!(resumed_stream("x/1"), None);
        assert_eq!(resumed_stream("1/x"), None);
        assert_eq!(resumed_stream(""), None);
        assert_eq!(resumed_stream("abc"), None);
    }
}
