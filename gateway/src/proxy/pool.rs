//! The kept-alive upstream connections of one per-core service, per peer (its `reuse_hash`):
//! a connection goes back after an answer that ended cleanly and is taken by the next request
//! to that peer, the most recently used first. Nothing runs while a connection idles — no
//! task, no timer, no notification: one whose idle time is over is closed when its peer's list
//! is next touched, and one the upstream closed (or wrote to) while it idled is found out when
//! it is taken, without a system call when the socket has had no event since its last read.
//! (pingora's pool spawns a watching task per release and hands the connection over through a
//! lock on each reuse, and asks the kernel for the peer's address each time.)

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

use futures::FutureExt as _;
use pingora::protocols::Stream;
use tokio::io::AsyncReadExt as _;

/// The most idle connections kept per peer (the oldest is closed to make room).
const MAX_IDLE_PER_PEER: usize = 128;

/// One idle connection and when its idle time is over (the gateway clock's milliseconds).
struct Idle {
    stream: Stream,
    until_ms: u64,
}

/// Idle connections per peer.
#[derive(Default)]
pub(super) struct Pool {
    idle: Mutex<HashMap<u64, VecDeque<Idle>>>,
}

impl Pool {
    /// An idle connection to peer `key` that is still usable, the most recently used first;
    /// the expired ones and those the upstream closed are closed on the way.
    pub(super) fn take(&self, key: u64, now_ms: u64) -> Option<Stream> {
        let mut closed = Vec::new();
        let found = {
            let mut idle = self.idle.lock().ok()?;
            let list = idle.get_mut(&key)?;
            expire(list, now_ms, &mut closed);
            let mut found = None;
            while let Some(mut c) = list.pop_back() {
                if still_idle(&mut c.stream) {
                    found = Some(c.stream);
                    break;
                }
                closed.push(c.stream);
            }
            found
        };
        drop(closed);
        found
    }

    /// Keeps `stream` for the next request to peer `key`, for `idle_ms`.
    pub(super) fn put(&self, key: u64, stream: Stream, idle_ms: u64, now_ms: u64) {
        let mut closed = Vec::new();
        if let Ok(mut idle) = self.idle.lock() {
            let list = idle.entry(key).or_default();
            expire(list, now_ms, &mut closed);
            if list.len() >= MAX_IDLE_PER_PEER {
                closed.extend(list.pop_front().map(|c| c.stream));
            }
            list.push_back(Idle {
                stream,
                until_ms: now_ms.saturating_add(idle_ms),
            });
        }
        drop(closed);
    }

    /// Idle connections kept, all peers together.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.idle
            .lock()
            .map_or(0, |idle| idle.values().map(VecDeque::len).sum())
    }
}

/// Moves the connections of `list` whose idle time is over to `closed` (oldest first: they
/// were put back in order).
fn expire(list: &mut VecDeque<Idle>, now_ms: u64, closed: &mut Vec<Stream>) {
    while list.front().is_some_and(|c| c.until_ms <= now_ms) {
        closed.extend(list.pop_front().map(|c| c.stream));
    }
}

/// Whether an idle connection has nothing to read: neither the upstream's close nor bytes it
/// should not have sent. The read is polled once: a socket without an event since its last
/// read answers without a system call.
fn still_idle(stream: &mut Stream) -> bool {
    let mut byte = [0u8; 1];
    tokio::task::unconstrained(stream.read(&mut byte))
        .now_or_never()
        .is_none()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use tokio::{io::AsyncWriteExt as _, net::UnixStream};

    use super::*;

    fn pair() -> (Stream, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        (
            Box::new(pingora::protocols::l4::stream::Stream::from(ours)),
            theirs,
        )
    }

    #[tokio::test]
    async fn a_connection_is_taken_back_by_its_peer_only_and_once() {
        let pool = Pool::default();
        let (ours, _theirs) = pair();
        pool.put(7, ours, 1_000, 0);
        assert!(pool.take(8, 10).is_none(), "another peer's");
        assert!(pool.take(7, 10).is_some());
        assert!(pool.take(7, 10).is_none(), "taken once");
    }

    #[tokio::test]
    async fn the_most_recently_used_goes_first_and_expired_ones_are_closed() {
        let pool = Pool::default();
        let (old, mut old_peer) = pair();
        let (new, _new_peer) = pair();
        pool.put(1, old, 100, 0);
        pool.put(1, new, 100, 50);
        // At 120 the first one's time is over: closed when the list is touched.
        let taken = pool.take(1, 120);
        assert!(taken.is_some());
        assert_eq!(pool.len(), 0);
        let mut buf = [0u8; 1];
        assert_eq!(old_peer.read(&mut buf).await.unwrap(), 0, "closed");
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_or_wrote_to_is_not_reused() {
        let pool = Pool::default();
        let (closed, closed_peer) = pair();
        let (chatty, mut chatty_peer) = pair();
        pool.put(1, closed, 10_000, 0);
        pool.put(2, chatty, 10_000, 0);
        drop(closed_peer);
        chatty_peer.write_all(b"x").await.unwrap();
        // Let the runtime see the events.
        tokio::task::yield_now().await;
        assert!(pool.take(1, 1).is_none(), "closed by the upstream");
        assert!(pool.take(2, 1).is_none(), "unexpected bytes");
        assert_eq!(pool.len(), 0);
    }

    #[tokio::test]
    async fn at_most_max_idle_per_peer_are_kept() {
        let pool = Pool::default();
        let mut peers = Vec::new();
        for _ in 0..MAX_IDLE_PER_PEER + 3 {
            let (ours, theirs) = pair();
            pool.put(1, ours, 10_000, 0);
            peers.push(theirs);
        }
        assert_eq!(pool.len(), MAX_IDLE_PER_PEER);
        let mut buf = [0u8; 1];
        assert_eq!(
            peers[0].read(&mut buf).await.unwrap(),
            0,
            "the oldest closed"
        );
    }
}
