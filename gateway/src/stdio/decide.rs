//! The stdio bridge's decisions as plain functions (inputs and `now` in, result out): the child
//! caps, the restart backoff, JSON-RPC id remapping, where a server message goes, idle expiry
//! and the answer format.

use std::time::{Duration, Instant};

use serde_json::Value;

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

/// One JSON-RPC message by shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind<'a> {
    Request { id: &'a Value, method: &'a str },
    Notification { method: &'a str },
    Response { id: &'a Value },
    Invalid,
}

/// What a JSON-RPC message is (a request has `method` and `id`, a notification only `method`,
/// a response `id` and `result` or `error`).
pub(crate) fn classify(msg: &Value) -> Kind<'_> {
    let Some(obj) = msg.as_object() else {
        return Kind::Invalid;
    };
    let id = obj.get("id").filter(|id| id.is_string() || id.is_number());
    match (obj.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) => Kind::Request { id, method },
        (Some(method), None) if !obj.contains_key("id") => Kind::Notification { method },
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            Kind::Response { id }
        }
        _ => Kind::Invalid,
    }
}

/// Replaces a message's `id` with the bridge's `bridge_id`; returns the client's id.
pub(crate) fn remap_id(msg: &mut Value, bridge_id: u64) -> Option<Value> {
    let obj = msg.as_object_mut()?;
    obj.insert("id".to_owned(), Value::from(bridge_id))
}

/// The bridge id of a message coming back from a child, if it is one the bridge handed out.
pub(crate) fn bridge_id(msg: &Value) -> Option<u64> {
    msg.get("id").and_then(Value::as_u64)
}

/// Puts the client's id back on a response.
pub(crate) fn restore_id(msg: &mut Value, client_id: Value) {
    if let Some(obj) = msg.as_object_mut() {
        obj.insert("id".to_owned(), client_id);
    }
}

/// A request's progress token (`params._meta.progressToken`), if any.
pub(crate) fn progress_token(msg: &Value) -> Option<&Value> {
    msg.pointer("/params/_meta/progressToken")
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
pub(crate) fn route_server_message(msg: &Value, in_flight: &[(u64, Option<&Value>)]) -> Dest {
    let only = || match in_flight {
        [(id, _)] => Dest::Request(*id),
        _ => Dest::Standalone,
    };
    match classify(msg) {
        Kind::Notification {
            method: "notifications/progress",
        } => {
            let token = msg.pointer("/params/progressToken");
            in_flight
                .iter()
                .find(|(_, t)| t.is_some() && *t == token)
                .map_or(Dest::Standalone, |(id, _)| Dest::Request(*id))
        }
        Kind::Notification {
            method: "notifications/message",
        }
        | Kind::Request { .. } => only(),
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

/// Whether the answer is an event stream (the client accepts `text/event-stream`) or one JSON
/// body.
pub(crate) fn wants_event_stream(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let media = part.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("text/event-stream")
        })
    })
}

/// The JSON-RPC error a client gets for a request the bridge cannot deliver.
pub(crate) fn error_response(id: Value, code: i64, message: &str) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
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

    #[test]
    fn messages_classify_by_shape() {
        let req = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
        assert!(matches!(
            classify(&req),
            Kind::Request {
                method: "tools/list",
                ..
            }
        ));
        let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        assert!(matches!(classify(&note), Kind::Notification { .. }));
        let resp = json!({"jsonrpc":"2.0","id":"a","result":{}});
        assert!(matches!(classify(&resp), Kind::Response { .. }));
        assert_eq!(
            classify(&json!({"jsonrpc":"2.0","id":null,"method":"x"})),
            Kind::Invalid
        );
        assert_eq!(classify(&json!([1])), Kind::Invalid);
        assert_eq!(classify(&json!({"id":1})), Kind::Invalid);
    }

    #[test]
    fn ids_remap_and_restore() {
        let mut msg = json!({"jsonrpc":"2.0","id":"client-7","method":"tools/call"});
        assert_eq!(remap_id(&mut msg, 42), Some(json!("client-7")));
        assert_eq!(bridge_id(&msg), Some(42));
        let mut resp = json!({"jsonrpc":"2.0","id":42,"result":{}});
        restore_id(&mut resp, json!("client-7"));
        assert_eq!(resp["id"], "client-7");
        assert_eq!(bridge_id(&json!({"id":"x"})), None);
    }

    #[test]
    fn server_messages_go_where_they_belong() {
        let t1 = json!("tok-1");
        let progress = json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok-1","progress":1}});
        let sampling = json!({"jsonrpc":"2.0","id":0,"method":"sampling/createMessage"});
        let log = json!({"jsonrpc":"2.0","method":"notifications/message","params":{}});
        let changed = json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"});
        let two = [(1, Some(&t1)), (2, None)];
        let one = [(2, None)];
        assert_eq!(route_server_message(&progress, &two), Dest::Request(1));
        assert_eq!(route_server_message(&progress, &one), Dest::Standalone);
        assert_eq!(route_server_message(&sampling, &one), Dest::Request(2));
        assert_eq!(route_server_message(&sampling, &two), Dest::Standalone);
        assert_eq!(route_server_message(&log, &one), Dest::Request(2));
        assert_eq!(route_server_message(&log, &[]), Dest::Standalone);
        assert_eq!(route_server_message(&changed, &one), Dest::Standalone);
        assert_eq!(
            progress_token(&json!({"params":{"_meta":{"progressToken":5}}})),
            Some(&json!(5))
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
}
