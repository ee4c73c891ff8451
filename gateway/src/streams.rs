//! Open SSE streams (`GET /mcp`) per person, in this process: [`Streams`] hands out a
//! [`StreamSlot`] while the person holds fewer than `limits.streams_per_principal`, and the slot
//! is released when its guard drops (the request ended).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use crate::sessions::has_room;

/// Open SSE streams per person, in this process. Share it as `Arc<Streams>`.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    open: Mutex<HashMap<Box<str>, u32>>,
}

/// One open stream's slot; dropping it (the request ended, however) releases the slot.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    streams: Arc<Streams>,
    owner: Box<str>,
}

impl Streams {
    /// A slot for one more stream of `owner`, unless it holds `max` already.
    pub(crate) fn open(self: &Arc<Self>, owner: &str, max: u32) -> Option<StreamSlot> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.get(owner).copied().unwrap_or(0);
        if !has_room(n as usize, max) {
            return None;
        }
        open.insert(owner.into(), n + 1);
        Some(StreamSlot {
            streams: Arc::clone(self),
            owner: owner.into(),
        })
    }

    #[cfg(test)]
    /// Streams `owner` holds open now.
    pub(crate) fn count(&self, owner: &str) -> u32 {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(owner)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self
            .streams
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.owner);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stream_slots_are_bounded_per_owner_and_released_on_drop() {
        let streams = Arc::new(Streams::default());
        let a1 = streams.open("alice", 2).unwrap();
        let _a2 = streams.open("alice", 2).unwrap();
        assert!(streams.open("alice", 2).is_none());
        let _b = streams.open("bob", 2).unwrap();
        assert_eq!(streams.count("alice"), 2);
        drop(a1);
        assert_eq!(streams.count("alice"), 1);
        assert!(streams.open("alice", 2).is_some());
        assert_eq!(
            streams.count("alice"),
            1,
            "the temporary slot was dropped again"
        );
    }
}
