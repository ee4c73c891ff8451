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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
}
