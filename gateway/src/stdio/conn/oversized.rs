//! A line of the child over `max_line_bytes`: read past, never held; the one call it answers
//! fails, the child and its other calls go on.

use std::time::Instant;

use super::{Conn, ServerMessage};
use crate::{raw_json::IdFinder, stdio::decide};

impl Conn {
    /// The child wrote a line over `max_line_bytes` (read past, not held): the call it answers
    /// (its top-level `id`, a response's) fails with a JSON-RPC error naming the bound; any
    /// other message is dropped. The child and its other calls go on.
    pub(super) fn oversized(&self, pid: Option<u32>, finder: IdFinder) {
        let max = self.cmd.max_line_bytes;
        let (id, has_method) = finder.finish();
        let bridge = id
            .filter(|_| !has_method)
            .and_then(|raw| decide::parse_bridge_id(&raw));
        let mut st = self.lock();
        st.last_activity = Instant::now();
        let pending = bridge.and_then(|id| st.pending.remove(&id));
        tracing::warn!(
            route = %self.route,
            pid,
            max_line_bytes = max,
            call = pending.is_some(),
            "stdio server wrote a message over max_line_bytes; dropped it"
        );
        if let Some(p) = pending.filter(|p| !p.internal) {
            let message = format!(
                "the stdio server `{}` answered with a message larger than max_line_bytes \
                 ({max} bytes); this call failed, the server goes on",
                self.route
            );
            let error = decide::error_response(&p.client_id, decide::INTERNAL_ERROR, &message);
            let _ = p.tx.try_send(ServerMessage::response(error));
        }
    }
}
