//! The stdio bridge's decisions as plain functions (inputs and `now` in, result out): the child
//! caps, the restart backoff, JSON-RPC messages read and their ids remapped where they lie (the
//! rest of a message keeps its bytes), where a server message goes, idle expiry and the answer's
//! framing.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::raw_json;

/// Seconds a client over a cap is told to wait (`Retry-After`).
pub(crate) const CAP_RETRY_AFTER_SECS: u64 = 10;
/// First restart delay after a crash.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// Longest restart delay.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A child that stayed up this long starts the schedule again at [`BACKOFF_FIRST`].
pub(crate) const BACKOFF_RESET: Duration = Duration::from_secs(60);

/// Why a new child is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CapRefusal {
    /// The route runs `max` children (sessions and pool) already.
    Route { max: usize },
    /// This principal holds `max` sessions on the route already.
    Principal { max: usize },
}

/// Whether one more child may start: `live` children on the route (every session's and the
/// pool's), `principal_live` of them opened by the asking principal.
pub(crate) fn admit(
    live: usize,
    max_children: usize,
    principal_live: usize,
    max_per_principal: usize,
) -> Result<(), CapRefusal> {
    if live >= max_children {
        return Err(CapRefusal::Route { max: max_children });
    }
    if principal_live >= max_per_principal {
        return Err(CapRefusal::Principal {
            max: max_per_principal,
        });
    }
    Ok(())
}

/// The session to close to make room at a person's cap: the least recently used of the idle
/// ones (`(id, idle, last used)`: idle is no request in flight and no open stream); `None`
/// when every one is busy.
pub(crate) fn least_recently_used_idle<'a>(
    sessions: impl IntoIterator<Item = (&'a str, bool, Instant)>,
) -> Option<&'a str> {
    sessions
        .into_iter()
        .filter(|(_, idle, _)| *idle)
        .min_by_key(|(_, _, last_used)| *last_used)
        .map(|(id, _, _)| id)
}

/// The delay before restart number `failures + 1` after consecutive crashes: 0.5 s, 1 s, 2 s, …
/// capped at 30 s.
pub(crate) fn backoff_delay(failures: u32) -> Duration {
    let factor = 1u64 << failures.min(10);
    let ms = u64::try_from(BACKOFF_FIRST.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(ms.saturating_mul(factor)).min(BACKOFF_MAX)
}

/// The consecutive-crash count after a child that ran for `up_for` exited: a child that stayed
/// up [`BACKOFF_RESET`] or longer starts the schedule again.
pub(crate) fn failures_after_exit(previous: u32, up_for: Duration) -> u32 {
    if up_for >= BACKOFF_RESET {
        0
    } else {
        previous.saturating_add(1)
    }
}

/// One JSON-RPC message by shape; ids as the sender wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Request { id: Vec<u8>, method: String },
    Notification { method: String },
    Response { id: Vec<u8> },
    Invalid,
}

/// The id JSON-RPC's `null` (a message whose id is unknown).
pub(crate) const NULL_ID: &[u8] = b"null";

/// What a JSON-RPC message (valid JSON text) is: a request has `method` and `id` (a string or a
/// number), a notification only `method`, a response `id` and `result` or `error`.
pub(crate) fn classify(text: &[u8]) -> Kind {
    let Some(members) = raw_json::members(text, raw_json::trimmed(text)) else {
        return Kind::Invalid;
    };
    let last = |key: &str| members.iter().rev().find(|m| m.key == key);
    let id_member = last("id");
    let id = id_member
        .and_then(|m| text.get(m.value.clone()))
        .filter(|raw| raw_json::is_string_or_number(raw));
    let method = last("method")
        .and_then(|m| text.get(m.value.clone()))
        .and_then(raw_json::string);
    match (method, id) {
        (Some(method), Some(id)) => Kind::Request {
            id: id.to_vec(),
            method: method.into_owned(),
        },
        (Some(method), None) if id_member.is_none() => Kind::Notification {
            method: method.into_owned(),
        },
        (None, Some(id)) if last("result").is_some() || last("error").is_some() => {
            Kind::Response { id: id.to_vec() }
        }
        _ => Kind::Invalid,
    }
}

/// The span of the value at `path` (object keys from the top) in a message.
pub(crate) fn value_at(text: &[u8], path: &[&str]) -> Option<raw_json::Span> {
    let mut span = raw_json::trimmed(text);
    for key in path {
        span = raw_json::get(text, span, key)?;
    }
    Some(span)
}

/// The value at `path`, parsed (for comparing small values such as progress tokens).
fn parsed_at(text: &[u8], path: &[&str]) -> Option<Value> {
    let span = value_at(text, path)?;
    serde_json::from_slice(text.get(span)?).ok()
}

/// Replaces the value at `path` of a message with `with` (JSON text) in place; the text that
/// was there, or None when the path is not there.
pub(crate) fn replace_at(text: &mut Vec<u8>, path: &[&str], with: &[u8]) -> Option<Vec<u8>> {
    let span = value_at(text, path)?;
    let old = text.get(span.clone())?.to_vec();
    let mut edits = raw_json::Edits::default();
    edits.replace(span, with.to_vec());
    edits.apply(text);
    Some(old)
}

/// Replaces a message's `id` with the bridge's `bridge_id`; returns the client's id as written.
pub(crate) fn remap_id(text: &mut Vec<u8>, bridge_id: u64) -> Option<Vec<u8>> {
    replace_at(text, &["id"], bridge_id.to_string().as_bytes())
}

/// A bridge id from an id's text (of a message coming back from a child): one the bridge
/// handed out, or None.
pub(crate) fn parse_bridge_id(raw: &[u8]) -> Option<u64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// Puts the client's id (its text as the client wrote it) back on a response.
pub(crate) fn restore_id(text: &mut Vec<u8>, client_id: &[u8]) {
    let _ = replace_at(text, &["id"], client_id);
}

/// A request's progress token (`params._meta.progressToken`), if any.
pub(crate) fn progress_token(text: &[u8]) -> Option<Value> {
    parsed_at(text, &["params", "_meta", "progressToken"])
}

/// Where a server→client message that is not a response goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dest {
    /// The stream answering the client request with this bridge id.
    Request(u64),
    /// The session's standalone stream (`GET /mcp`).
    Standalone,
}

/// Where a server message goes, given the requests in flight (bridge id, progress token):
/// progress to the request that owns its token; server requests and logging to the only
/// request in flight (the one it is most likely tied to); everything else (and anything
/// when several requests are in flight) to the standalone stream.
pub(crate) fn route_server_message(
    text: &[u8],
    kind: &Kind,
    in_flight: &[(u64, Option<&Value>)],
) -> Dest {
    let only = || match in_flight {
        [(id, _)] => Dest::Request(*id),
        _ => Dest::Standalone,
    };
    match kind {
        Kind::Notification { method } if method == "notifications/progress" => {
            let token = parsed_at(text, &["params", "progressToken"]);
            in_flight
                .iter()
                .find(|(_, t)| t.is_some() && *t == token.as_ref())
                .map_or(Dest::Standalone, |(id, _)| Dest::Request(*id))
        }
        Kind::Notification { method } if method == "notifications/message" => only(),
        Kind::Request { .. } => only(),
        _ => Dest::Standalone,
    }
}

/// Whether a child is idle long enough to stop: nothing in flight, no open stream, and the
/// last client message `timeout` or longer ago.
pub(crate) fn idle_expired(
    last_activity: Instant,
    now: Instant,
    busy: bool,
    timeout: Duration,
) -> bool {
    !busy && now.saturating_duration_since(last_activity) >= timeout
}

/// How a request's answer may be framed, from the client's `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Framing {
    /// One JSON body (`application/json`; also `*/*`, `application/*` or no `Accept`).
    pub(crate) json: bool,
    /// An event stream (`text/event-stream`).
    pub(crate) stream: bool,
}

/// The framings `accept` allows. A single answer goes out as JSON when allowed, an event
/// stream when the server sends more than the answer (progress, requests) and that is
/// allowed; with neither the answer is JSON.
pub(crate) fn framing(accept: Option<&str>) -> Framing {
    let json = accept.is_none_or(|a| {
        a.split(',').any(|part| {
            let media = part.split(';').next().unwrap_or_default().trim();
            ["application/json", "application/*", "*/*"]
                .iter()
                .any(|m| media.eq_ignore_ascii_case(m))
        })
    });
    let stream = wants_event_stream(accept);
    Framing {
        json: json || !stream,
        stream,
    }
}

/// Whether the client accepts `text/event-stream`.
pub(crate) fn wants_event_stream(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let media = part.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("text/event-stream")
        })
    })
}

/// The JSON-RPC error a client gets for a request the bridge cannot deliver (`id` as the
/// client wrote it).
pub(crate) fn error_response(id: &[u8], code: i64, message: &str) -> Vec<u8> {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".to_owned());
    let mut out = br#"{"jsonrpc":"2.0","id":"#.to_vec();
    out.extend_from_slice(id);
    out.extend_from_slice(
        format!(r#","error":{{"code":{code},"message":{message}}}}}"#).as_bytes(),
    );
    out
}

/// JSON-RPC "internal error".
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// Used for "over the cap": a server error in the implementation-defined range.
pub(crate) const SERVER_BUSY: i64 = -32000;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn caps_count_route_then_principal() {
        assert_eq!(admit(0, 16, 0, 4), Ok(()));
        assert_eq!(admit(15, 16, 3, 4), Ok(()));
        assert_eq!(admit(16, 16, 0, 4), Err(CapRefusal::Route { max: 16 }));
        assert_eq!(admit(5, 16, 4, 4), Err(CapRefusal::Principal { max: 4 }));
        assert_eq!(admit(0, 0, 0, 4), Err(CapRefusal::Route { max: 0 }));
    }

    #[test]
    fn the_least_recently_used_idle_session_makes_room() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // "a" is older but busy (a call in flight or an open stream): "b" goes.
        let sessions = [
            ("a", false, at(0)),
            ("b", true, at(10)),
            ("c", true, at(20)),
        ];
        assert_eq!(least_recently_used_idle(sessions), Some("b"));
        assert_eq!(
            least_recently_used_idle([("a", false, at(0)), ("b", false, at(1))]),
            None
        );
        assert_eq!(least_recently_used_idle([]), None);
    }

    #[test]
    fn backoff_doubles_to_thirty_seconds_and_resets() {
        let ms = |f| backoff_delay(f).as_millis();
        assert_eq!(
            [ms(0), ms(1), ms(2), ms(3), ms(5)],
            [500, 1000, 2000, 4000, 16000]
        );
        assert_eq!(ms(6), 30_000);
        assert_eq!(ms(u32::MAX), 30_000);
        assert_eq!(failures_after_exit(3, Duration::from_secs(59)), 4);
        assert_eq!(failures_after_exit(3, Duration::from_secs(60)), 0);
        assert_eq!(failures_after_exit(u32::MAX, Duration::ZERO), u32::MAX);
    }

    fn kind(text: &str) -> Kind {
        classify(text.as_bytes())
    }

    #[test]
    fn messages_classify_by_shape() {
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Kind::Request {
                id: b"1".to_vec(),
                method: "tools/list".to_owned()
            }
        );
        assert_eq!(
            kind(r#" {"method":"notifications/initialized","jsonrpc":"2.0"} "#),
            Kind::Notification {
                method: "notifications/initialized".to_owned()
            }
        );
        assert_eq!(
            kind(r#"{"result":{},"jsonrpc":"2.0","id":"a"}"#),
            Kind::Response {
                id: br#""a""#.to_vec()
            }
        );
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#),
            Kind::Invalid
        );
        assert_eq!(kind("[1]"), Kind::Invalid);
        assert_eq!(kind(r#"{"id":1}"#), Kind::Invalid);
        assert_eq!(kind(r#"{"id":1,"method":2}"#), Kind::Invalid);
    }

    #[test]
    fn ids_remap_and_restore_where_they_lie() {
        let sent = r#"{"params":{"b":1.0,"a":9007199254740993,"s":"\u00e9"},"id":"client-7","method":"tools/call"}"#;
        let mut msg = sent.as_bytes().to_vec();
        assert_eq!(remap_id(&mut msg, 42), Some(br#""client-7""#.to_vec()));
        assert_eq!(
            String::from_utf8(msg.clone()).unwrap(),
            sent.replace(r#""client-7""#, "42")
        );
        let id = value_at(&msg, &["id"]).unwrap();
        assert_eq!(parse_bridge_id(&msg[id]), Some(42));
        let answer = r#"{"result":{"z":1.0,"a":[9007199254740993]},"jsonrpc":"2.0","id":42}"#;
        let mut resp = answer.as_bytes().to_vec();
        restore_id(&mut resp, br#""client-7""#);
        assert_eq!(
            String::from_utf8(resp).unwrap(),
            answer.replace("42", r#""client-7""#)
        );
        assert_eq!(parse_bridge_id(br#""x""#), None);
        let err = error_response(br#""c""#, INTERNAL_ERROR, "gone \"now\"");
        assert_eq!(
            String::from_utf8(err).unwrap(),
            r#"{"jsonrpc":"2.0","id":"c","error":{"code":-32603,"message":"gone \"now\""}}"#
        );
    }

    #[test]
    fn server_messages_go_where_they_belong() {
        let t1 = json!("tok-1");
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok-1","progress":1}}"#;
        let sampling = br#"{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage"}"#;
        let log = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
        let changed = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        let two = [(1, Some(&t1)), (2, None)];
        let one = [(2, None)];
        let route = |text: &[u8], in_flight: &[(u64, Option<&Value>)]| {
            route_server_message(text, &classify(text), in_flight)
        };
        assert_eq!(route(progress, &two), Dest::Request(1));
        assert_eq!(route(progress, &one), Dest::Standalone);
        assert_eq!(route(sampling, &one), Dest::Request(2));
        assert_eq!(route(sampling, &two), Dest::Standalone);
        assert_eq!(route(log, &one), Dest::Request(2));
        assert_eq!(route(log, &[]), Dest::Standalone);
        assert_eq!(route(changed, &one), Dest::Standalone);
        assert_eq!(
            progress_token(br#"{"params":{"_meta":{"progressToken":5}}}"#),
            Some(json!(5))
        );
    }

    #[test]
    fn idle_expiry_uses_the_given_now() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(600);
        assert!(!idle_expired(
            t0,
            t0 + Duration::from_secs(599),
            false,
            timeout
        ));
        assert!(idle_expired(t0, t0 + timeout, false, timeout));
        assert!(!idle_expired(t0, t0 + timeout * 2, true, timeout));
        assert!(!idle_expired(t0 + timeout, t0, false, timeout));
    }

    #[test]
    fn event_stream_only_when_accepted() {
        assert!(wants_event_stream(Some(
            "application/json, text/event-stream"
        )));
        assert!(wants_event_stream(Some("Text/Event-Stream;q=0.5")));
        assert!(!wants_event_stream(Some("application/json")));
        assert!(!wants_event_stream(None));
    }

    #[test]
    fn a_single_answer_is_json_when_the_client_accepts_it() {
        let f = |accept| framing(accept);
        let both = Framing {
            json: true,
            stream: true,
        };
        assert_eq!(f(Some("application/json, text/event-stream")), both);
        assert_eq!(f(Some("text/event-stream, */*;q=0.1")), both);
        assert_eq!(
            f(Some("text/event-stream")),
            Framing {
                json: false,
                stream: true
            }
        );
        let json_only = Framing {
            json: true,
            stream: false,
        };
        assert_eq!(f(Some("application/json")), json_only);
        assert_eq!(f(None), json_only);
        assert_eq!(f(Some("text/html")), json_only);
    }
}
