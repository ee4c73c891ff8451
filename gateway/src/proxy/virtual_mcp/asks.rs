//! A member's requests to the client during a call through a virtual server (issue 42 point 3:
//! sampling, elicitation, roots, ping): each relayed under an id of the gateway's, held per
//! downstream session until the client's answer on that session takes it back to the member
//! that asked — its member session, its own id — or the call's stream ends. An answer to an id
//! not held for that downstream session reaches no member.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use serde_json::Value;

use crate::raw_json;

/// The most member requests awaiting a client's answer at once (over all sessions).
pub(super) const MAX_ASKS: usize = 1_000;

/// A member's request relayed to the client, awaiting its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ask {
    /// The member route's index.
    pub(super) route: usize,
    /// The member session the request came on (`None`: the member keeps none).
    pub(super) member: Option<String>,
    /// The member's id, as the member wrote it (JSON text).
    pub(super) id: Vec<u8>,
    /// The headers the call went with (the caller's identity, their upstream credential).
    pub(super) extra: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The call's stream: its asks end with it.
    pub(super) stream: u64,
}

/// Downstream session and the gateway's id → the member's request it stands for.
#[derive(Debug, Default)]
pub(crate) struct Asks {
    next: AtomicU64,
    held: Mutex<HashMap<(String, u64), Ask>>,
}

impl Asks {
    /// A number for a new stream or ask (never 0).
    pub(super) fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Holds `ask` for `downstream`: the id the client is sent; `None` when the table is full.
    pub(super) fn hold(&self, downstream: &str, ask: Ask) -> Option<u64> {
        let mut held = self.held.lock().ok()?;
        if held.len() >= MAX_ASKS {
            return None;
        }
        let id = self.number();
        held.insert((downstream.to_owned(), id), ask);
        Some(id)
    }

    /// The ask the client's answer with id `id` on `downstream` answers, no longer held;
    /// `None`: nothing of that id is held for that session.
    pub(super) fn take(&self, downstream: &str, id: &Value) -> Option<Ask> {
        let id = id.as_u64()?;
        self.held.lock().ok()?.remove(&(downstream.to_owned(), id))
    }

    /// Forgets every ask of `stream` (its call ended: no answer can reach the member now).
    pub(super) fn end_stream(&self, stream: u64) {
        if let Ok(mut held) = self.held.lock() {
            held.retain(|_, ask| ask.stream != stream);
        }
    }
}

/// What one event of a member's stream is, for the call with the client's id `call` — pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    /// The call's response: the stream's last event.
    Response,
    /// A request of the member's, with its id as written.
    Request(Vec<u8>),
    /// A notification, or anything else: relayed as it is.
    Other,
}

/// Classifies `data` (one event's JSON text) for the call with id `call` — pure.
pub(super) fn classify(data: &[u8], call: &Value) -> Event {
    let Ok(message) = serde_json::from_slice::<Value>(data) else {
        return Event::Other;
    };
    let answers = message.get("result").is_some() || message.get("error").is_some();
    match (message.get("id"), message.get("method")) {
        (Some(id), None) if answers && id == call => Event::Response,
        (Some(id), Some(_)) if !id.is_null() => raw_json::get(data, raw_json::trimmed(data), "id")
            .and_then(|at| data.get(at))
            .map_or(Event::Other, |id| Event::Request(id.to_vec())),
        _ => Event::Other,
    }
}

/// `data` (a JSON-RPC message) with its top-level `id` replaced by the JSON text `id`, every
/// other byte as it was — pure; `None` when it has no `id`.
pub(super) fn with_id(data: &[u8], id: &[u8]) -> Option<Vec<u8>> {
    if !raw_json::is_valid(data) {
        return None;
    }
    let at = raw_json::get(data, raw_json::trimmed(data), "id")?;
    let mut edits = raw_json::Edits::default();
    edits.replace(at, id.to_vec());
    let mut out = data.to_vec();
    edits.apply(&mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ask(stream: u64) -> Ask {
        Ask {
            route: 1,
            member: Some("m".to_owned()),
            id: b"\"s-1\"".to_vec(),
            extra: Vec::new(),
            stream,
        }
    }

    #[test]
    fn an_answer_is_taken_once_and_only_on_the_session_it_was_asked_on() {
        let asks = Asks::default();
        let id = asks.hold("a", ask(7)).unwrap();
        assert_eq!(asks.take("b", &json!(id)), None, "another session's answer");
        assert_eq!(asks.take("a", &json!(id + 1000)), None, "an unknown id");
        assert_eq!(asks.take("a", &json!(id.to_string())), None, "a string id");
        assert_eq!(asks.take("a", &json!(id)), Some(ask(7)));
        assert_eq!(asks.take("a", &json!(id)), None, "answered once");
    }

    #[test]
    fn a_streams_asks_end_with_it_and_the_table_is_bounded() {
        let asks = Asks::default();
        let mine = asks.hold("a", ask(1)).unwrap();
        let other = asks.hold("a", ask(2)).unwrap();
        asks.end_stream(1);
        assert_eq!(asks.take("a", &json!(mine)), None);
        assert!(asks.take("a", &json!(other)).is_some());
        for _ in 0..MAX_ASKS {
            assert!(asks.hold("a", ask(3)).is_some());
        }
        assert_eq!(asks.hold("a", ask(3)), None);
    }

    #[test]
    fn events_are_the_response_a_request_or_anything_else() {
        let call = json!(5);
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":5,"result":{}}"#, &call),
            Event::Response
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":5,"error":{"code":1}}"#, &call),
            Event::Response
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":6,"result":{}}"#, &call),
            Event::Other,
            "another call's response is not this one's end"
        );
        assert_eq!(
            classify(
                br#"{"jsonrpc":"2.0","id": "s-1" ,"method":"sampling/createMessage"}"#,
                &call
            ),
            Event::Request(b"\"s-1\"".to_vec())
        );
        assert_eq!(
            classify(
                br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
                &call
            ),
            Event::Other
        );
        assert_eq!(classify(b"not json", &call), Event::Other);
    }

    #[test]
    fn only_the_id_changes() {
        let data = br#"{"jsonrpc":"2.0", "id" : 17 ,"method":"elicitation/create","params":{"n":1.0,"id":17}}"#;
        assert_eq!(
            with_id(data, b"42").unwrap(),
            br#"{"jsonrpc":"2.0", "id" : 42 ,"method":"elicitation/create","params":{"n":1.0,"id":17}}"#
        );
        assert_eq!(with_id(br#"{"method":"x"}"#, b"1"), None);
    }
}
