//! Tests of the routing table: where each message goes, and what a reconnect gets back.

use rmcp::model::{ErrorData, NumberOrString, ServerRequest, ServerResult};

use super::*;

const TTL: Duration = Duration::from_secs(60);

fn id(n: i64) -> RequestId {
    NumberOrString::Number(n)
}

fn answer(n: i64) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::response(ServerResult::empty(()), id(n))
}

fn progress(token: &str) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::notification(ServerNotification::ProgressNotification(Notification::new(
        ProgressNotificationParam::new(ProgressToken(NumberOrString::String(token.into())), 0.5),
    )))
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

type Rx = mpsc::UnboundedReceiver<Box<ServerSseMessage>>;

fn sse() -> (SseSender, Rx) {
    mpsc::unbounded_channel()
}

/// The ids of the events waiting in `rx`.
fn ids(rx: &mut Rx) -> Vec<String> {
    std::iter::from_fn(|| rx.try_recv().ok())
        .map(|e| e.event_id.clone().unwrap_or_default())
        .collect()
}

fn event_id(text: &str) -> EventId {
    EventId::parse(text).unwrap()
}

/// A table with request stream 0 in flight for request 1, its receiver.
fn one_request() -> (Routes, Rx) {
    let mut routes = Routes::new(TTL);
    let (tx, rx) = sse();
    let n = routes.next_stream();
    assert_eq!(n, 0);
    assert!(routes.expect(n, id(1), None, Sink::Sse(tx)));
    (routes, rx)
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
    let cancelled = ServerJsonRpcMessage::notification(ServerNotification::CancelledNotification(
        Notification::new(CancelledNotificationParam::new(Some(id(9)), None)),
    ));
    assert_eq!(address(&cancelled), Address::Beside(id(9)));
}

#[test]
fn an_answer_goes_to_its_request_and_ends_the_stream() {
    let now = Instant::now();
    let (mut routes, mut rx) = one_request();
    let (standalone, mut get) = sse();
    assert_eq!(routes.open_get(standalone), Opened::Standalone);

    assert_eq!(
        routes.deliver(answer(1), 10, now),
        Delivered::Request {
            stream: 0,
            last: true,
            sent: true
        }
    );
    assert_eq!(ids(&mut rx), ["1/0"]);
    // The sender went with the answer: the stream ends.
    assert!(rx.is_closed());
    assert_eq!(routes.answered(), 1, "kept for a reconnect");
    assert_eq!(routes.in_flight.capacity(), 0, "no list of requests kept");
    // A second answer to the same id has no request stream any more: standalone.
    assert_eq!(
        routes.deliver(answer(1), 10, now),
        Delivered::Standalone { sent: true }
    );
    assert_eq!(ids(&mut get), ["1"]);
}

#[test]
fn progress_and_related_requests_ride_the_request_stream() {
    let now = Instant::now();
    let mut routes = Routes::new(TTL);
    let (tx, mut rx) = sse();
    let token = ProgressToken(NumberOrString::String("p".into()));
    let n = routes.next_stream();
    routes.expect(n, id(5), Some(token), Sink::Sse(tx));
    let on_stream = Delivered::Request {
        stream: n,
        last: false,
        sent: true,
    };
    assert_eq!(routes.deliver(progress("p"), 10, now), on_stream);
    assert_eq!(routes.deliver(ping(Some(5)), 10, now), on_stream);
    // Other progress and unrelated messages: no standalone stream open, kept for one.
    let kept = Delivered::Standalone { sent: false };
    assert_eq!(routes.deliver(progress("q"), 10, now), kept);
    assert_eq!(routes.deliver(list_changed(), 10, now), kept);
    assert_eq!(routes.deliver(ping(Some(6)), 10, now), kept);
    assert_eq!(ids(&mut rx), ["1/0", "2/0"]);
    assert_eq!(routes.in_flight(), 1);
    let (get, mut get_rx) = sse();
    assert_eq!(routes.open_get(get), Opened::Standalone);
    assert_eq!(ids(&mut get_rx), ["1", "2", "3"]);
}

#[test]
fn initialize_is_answered_once() {
    let now = Instant::now();
    let mut routes = Routes::new(TTL);
    let (tx, mut rx) = oneshot::channel();
    routes.expect(INITIALIZE, id(0), None, Sink::Once(tx));
    assert_eq!(routes.deliver(ping(Some(0)), 10, now), Delivered::Dropped);
    assert_eq!(
        routes.deliver(answer(0), 10, now),
        Delivered::Request {
            stream: INITIALIZE,
            last: true,
            sent: true
        }
    );
    assert!(rx.try_recv().is_ok());
    assert_eq!(routes.answered(), 0, "not a stream: nothing to replay");
    assert_eq!(
        routes.next_stream(),
        0,
        "rmcp numbers request streams from 0"
    );
}

#[test]
fn a_cancelled_request_loses_its_stream() {
    let now = Instant::now();
    let (mut routes, rx) = one_request();
    routes.cancel(&id(1), now);
    assert!(rx.is_closed());
    assert_eq!(routes.answered(), 0, "it had sent nothing");
    assert_eq!(
        routes.deliver(answer(1), 10, now),
        Delivered::Standalone { sent: false }
    );
}

#[test]
fn a_second_get_is_idle_until_the_first_is_gone() {
    let now = Instant::now();
    let mut routes = Routes::new(TTL);
    let (first, first_rx) = sse();
    let (second, mut second_rx) = sse();
    assert_eq!(routes.open_get(first), Opened::Standalone);
    assert_eq!(routes.open_get(second), Opened::Idle);
    assert_eq!(
        routes.deliver(list_changed(), 10, now),
        Delivered::Standalone { sent: true }
    );
    assert!(second_rx.try_recv().is_err());
    // The first one's client went away: the next GET is the standalone stream. It does
    // not get again what the first one took.
    drop(first_rx);
    let (third, mut third_rx) = sse();
    assert_eq!(routes.open_get(third), Opened::Standalone);
    assert_eq!(
        routes.deliver(list_changed(), 10, now),
        Delivered::Standalone { sent: true }
    );
    assert_eq!(ids(&mut third_rx), ["2"]);
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
fn a_reconnect_takes_over_the_request_stream_after_the_last_event_seen() {
    let now = Instant::now();
    let token = ProgressToken(NumberOrString::String("p".into()));
    let mut routes = Routes::new(TTL);
    let (tx, mut old) = sse();
    let n = routes.next_stream();
    routes.expect(n, id(8), Some(token), Sink::Sse(tx));
    routes.deliver(progress("p"), 10, now);
    routes.deliver(progress("p"), 10, now);
    assert_eq!(ids(&mut old), ["1/0", "2/0"]);
    // The client saw the first progress only, then lost the connection.
    drop(old);
    routes.deliver(progress("p"), 10, now);
    let (again, mut new) = sse();
    assert_eq!(
        routes.resume(event_id("1/0"), again, now),
        Ok(Resumed::Request)
    );
    routes.deliver(answer(8), 10, now);
    assert_eq!(ids(&mut new), ["2/0", "3/0", "4/0"]);
    assert!(new.is_closed(), "the answer ends it");
}

#[test]
fn an_answered_stream_replays_until_its_time_is_up() {
    let now = Instant::now();
    let (mut routes, rx) = one_request();
    drop(rx);
    assert_eq!(
        routes.deliver(answer(1), 10, now),
        Delivered::Request {
            stream: 0,
            last: true,
            sent: false
        }
    );
    for _ in 0..2 {
        let (tx, mut rx) = sse();
        assert_eq!(
            routes.resume(event_id("0/0"), tx, now),
            Ok(Resumed::Answered)
        );
        assert_eq!(ids(&mut rx), ["1/0"]);
        assert!(rx.is_closed(), "the replay ends the stream");
    }
    let (tx, _rx) = sse();
    assert_eq!(
        routes.resume(event_id("2/0"), tx, now),
        Err(NotResumed::NotIssued)
    );
    assert_eq!(routes.evict(now), Some(now + TTL));
    assert_eq!(routes.evict(now + TTL), None);
    let (tx, _rx) = sse();
    assert_eq!(
        routes.resume(event_id("0/0"), tx, now + TTL),
        Err(NotResumed::Gone)
    );
    let (tx, _rx) = sse();
    assert_eq!(
        routes.resume(event_id("0/1"), tx, now),
        Err(NotResumed::NotIssued),
        "stream 1 never was"
    );
}

#[test]
fn answered_streams_are_bounded_per_session() {
    let now = Instant::now();
    let mut routes = Routes::new(TTL);
    for n in 0..MAX_ANSWERED as i64 + 4 {
        let (tx, _rx) = sse();
        let stream = routes.next_stream();
        routes.expect(stream, id(n), None, Sink::Sse(tx));
        routes.deliver(answer(n), 10, now);
    }
    assert_eq!(routes.answered(), MAX_ANSWERED);
    let (tx, _rx) = sse();
    assert_eq!(
        routes.resume(event_id("0/0"), tx, now),
        Err(NotResumed::Gone),
        "the oldest went first"
    );
    // By bytes: a large answer pushes the others out, but is kept itself.
    let (tx, _rx) = sse();
    let stream = routes.next_stream();
    routes.expect(stream, id(99), None, Sink::Sse(tx));
    routes.deliver(answer(99), ANSWERED_BYTES, now);
    assert_eq!(routes.answered(), 1);
}

#[test]
fn the_standalone_stream_resumes_or_stays_idle() {
    let now = Instant::now();
    let mut routes = Routes::new(TTL);
    let (tx, mut rx) = sse();
    assert_eq!(routes.open_get(tx), Opened::Standalone);
    for _ in 0..3 {
        routes.deliver(list_changed(), 10, now);
    }
    assert_eq!(ids(&mut rx), ["1", "2", "3"]);
    // A reconnect while it is open: idle, nothing replayed.
    let (tx, mut idle) = sse();
    assert_eq!(routes.resume(event_id("1"), tx, now), Ok(Resumed::Idle));
    assert!(ids(&mut idle).is_empty());
    drop(rx);
    let (tx, mut back) = sse();
    assert_eq!(
        routes.resume(event_id("1"), tx, now),
        Ok(Resumed::Standalone)
    );
    assert_eq!(ids(&mut back), ["2", "3"]);
    let (tx, _rx) = sse();
    assert_eq!(
        routes.resume(event_id("4"), tx, now),
        Err(NotResumed::NotIssued)
    );
}

#[test]
fn a_closed_session_ends_every_stream_and_keeps_nothing() {
    let now = Instant::now();
    let (mut routes, rx) = one_request();
    let (get, get_rx) = sse();
    routes.open_get(get);
    routes.deliver(list_changed(), 10, now);
    let (tx, _answered) = sse();
    routes.expect(routes.next_stream, id(2), None, Sink::Sse(tx));
    routes.next_stream();
    routes.deliver(answer(2), 10, now);
    assert_eq!(routes.answered(), 1);
    routes.close();
    assert!(rx.is_closed() && get_rx.is_closed());
    assert_eq!(routes.answered(), 0);
    assert_eq!(routes.standalone_replay.last(), 0);
    let (tx, _rx) = sse();
    assert_eq!(routes.open_get(tx), Opened::Refused);
    let (tx, _rx) = sse();
    assert!(!routes.expect(2, id(2), None, Sink::Sse(tx)));
    let (tx, _rx) = sse();
    assert_eq!(
        routes.resume(event_id("0/1"), tx, now),
        Err(NotResumed::Ended)
    );
}
