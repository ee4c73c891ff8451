//! The calls through a virtual server whose member's stream is being relayed (issue 42 point
//! 3), per downstream session and the client's request id: where a client's
//! `notifications/cancelled` for one of them goes — the member session the call went on (the
//! member knows the call by the client's own id) — and the relay it ends.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;

/// The most calls held at once (over all sessions); past it a call is relayed but cannot be
/// cancelled through the gateway.
const MAX_CALLS: usize = 10_000;

/// Where a relayed call went: its member route, member session and headers, and how its relay
/// learns that the client cancelled it.
#[derive(Debug, Clone)]
pub(super) struct Going {
    pub(super) route: usize,
    pub(super) member: Option<String>,
    pub(super) extra: Vec<(http::HeaderName, http::HeaderValue)>,
    pub(super) cancelled: Arc<Notify>,
}

/// Downstream session and the client's id (JSON text) → where the call went.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    held: Mutex<HashMap<(String, String), Going>>,
}

impl Calls {
    /// Holds the call `id` of `downstream` while its stream is relayed; `false`: not held.
    pub(super) fn hold(&self, downstream: &str, id: String, going: Going) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        if held.len() >= MAX_CALLS {
            return false;
        }
        held.insert((downstream.to_owned(), id), going);
        true
    }

    /// Where the call `id` of `downstream` went, while it is relayed.
    pub(super) fn get(&self, downstream: &str, id: &str) -> Option<Going> {
        let held = self.held.lock().ok()?;
        held.get(&(downstream.to_owned(), id.to_owned())).cloned()
    }

    /// The call's stream ended.
    pub(super) fn end(&self, downstream: &str, id: &str) {
        if let Ok(mut held) = self.held.lock() {
            held.remove(&(downstream.to_owned(), id.to_owned()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_found_only_on_its_session_and_while_relayed() {
        let calls = Calls::default();
        let going = Going {
            route: 2,
            member: Some("m".to_owned()),
            extra: Vec::new(),
            cancelled: Arc::default(),
        };
        assert!(calls.hold("a", "7".to_owned(), going));
        assert!(calls.get("b", "7").is_none());
        assert!(calls.get("a", "\"7\"").is_none());
        assert_eq!(calls.get("a", "7").unwrap().route, 2);
        calls.end("a", "7");
        assert!(calls.get("a", "7").is_none());
    }
}
