//! Open client connections per IP (`max_connections_per_ip`) and in all (the descriptor budget,
//! `runtime/descriptors.rs`): the listener's application is wrapped so that each accepted
//! connection holds a slot of its client IP (IPv6: its /64) and of the total for as long as
//! pingora serves it, keep-alive and HTTP/2 included. A connection over either cap is closed at
//! once, without an answer (the caps are on sockets, before any HTTP is read); a full budget is
//! logged at most once a second. Trusted proxies are exempt from the per-IP cap (they carry many
//! clients, whose requests the rate limits see by the forwarded IP), not from the budget. Below
//! `runtime` and `tls` (the public listener and ACME's http-01 listener both take slots).

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use async_trait::async_trait;
use pforte_clock::Clock;
use pingora::{apps::ServerApp, protocols::Stream, server::ShutdownWatch};

use crate::forward::TrustedProxy;

/// Open connections per client IP and in all, and the caps.
#[derive(Debug)]
pub(crate) struct Connections {
    max_per_ip: u32,
    /// The descriptor budget: connections open at once, every IP together.
    max_total: u64,
    trusted: Vec<TrustedProxy>,
    open: Mutex<HashMap<String, u32>>,
    total: AtomicU64,
    clock: Arc<dyn Clock>,
    /// The second (since the epoch) a full budget was last logged, plus one; 0: never.
    warned: AtomicU64,
}

/// A connection's slot; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    conns: Arc<Connections>,
    /// The IP key the slot counts against, when the per-IP cap applies.
    key: Option<String>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conns.total.fetch_sub(1, Ordering::Relaxed);
        if let Some(key) = self.key.take() {
            let mut open = self.conns.lock();
            if let Some(n) = open.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.remove(&key);
                }
            }
        }
    }
}

/// Whether one more connection fits beside `open` under `max` (0: no cap).
pub(crate) fn has_room(open: u32, max: u32) -> bool {
    max == 0 || open < max
}

/// Whether a full budget at `now_secs` is to be logged, given the second it last was (plus
/// one; 0: never): at most once a second.
fn log_full_budget(now_secs: u64, warned: u64) -> bool {
    warned == 0 || now_secs + 1 > warned
}

impl Connections {
    pub(crate) fn new(
        max_per_ip: u32,
        max_total: u64,
        trusted: Vec<TrustedProxy>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            max_per_ip,
            max_total,
            trusted,
            open: Mutex::new(HashMap::new()),
            total: AtomicU64::new(0),
            clock,
            warned: AtomicU64::new(0),
        })
    }

    /// One more connection in all, or `false` (logged at most once a second) at the budget.
    fn take_total(&self) -> bool {
        let taken = self
            .total
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_total).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            let now = self.clock.now_secs();
            let warned = self.warned.load(Ordering::Relaxed);
            if log_full_budget(now, warned)
                && self
                    .warned
                    .compare_exchange(warned, now + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    open = self.max_total,
                    "new connections are closed: the descriptor budget is full (raise the hard \
                     RLIMIT_NOFILE to allow more)"
                );
            }
        }
        taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection from `peer`, or `None` when that IP holds as many as it may.
    /// No IP (a Unix socket), a trusted proxy, or no cap: a slot that counts nothing.
    pub(crate) fn open(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Slot> {
        if !self.take_total() {
            return None;
        }
        // From here the slot gives the total back when dropped, also on refusal.
        let mut slot = Slot {
            conns: self.clone(),
            key: None,
        };
        let Some(ip) = peer else {
            return Some(slot);
        };
        if self.max_per_ip == 0 || self.trusted.iter().any(|t| t.contains(ip)) {
            return Some(slot);
        }
        let key = crate::limit::ip_key(Some(ip));
        let mut open = self.lock();
        let n = open.entry(key.clone()).or_insert(0);
        if !has_room(*n, self.max_per_ip) {
            if *n == 0 {
                open.remove(&key);
            }
            return None;
        }
        *n += 1;
        drop(open);
        slot.key = Some(key);
        Some(slot)
    }

    /// Connections open from `ip`'s key.
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> u32 {
        self.lock()
            .get(&crate::limit::ip_key(Some(ip)))
            .copied()
            .unwrap_or(0)
    }
}

/// The listener's application (pingora's HTTP proxy), each connection counted against its IP.
pub(crate) struct Capped<A> {
    inner: Arc<A>,
    conns: Arc<Connections>,
}

impl<A> Capped<A> {
    pub(crate) fn new(inner: A, conns: Arc<Connections>) -> Self {
        Self {
            inner: Arc::new(inner),
            conns,
        }
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Capped<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let peer = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let Some(_slot) = self.conns.open(peer) else {
            tracing::debug!(
                peer = ?peer,
                "connection closed: max_connections_per_ip reached"
            );
            return None;
        };
        // The slot is held while pingora serves the connection (every keep-alive request; the
        // HTTP/1 and HTTP/2 loops return only when the connection is done).
        let mut next = self.inner.process_new(stream, shutdown).await;
        while let Some(stream) = next {
            next = self.inner.process_new(stream, shutdown).await;
        }
        None
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn clock() -> Arc<dyn Clock> {
        Arc::new(pforte_clock::ManualClock::at(
            std::time::Duration::from_secs(1_000),
        ))
    }

    #[test]
    fn the_budget_counts_every_connection_and_comes_back() {
        let conns = Connections::new(0, 2, Vec::new(), clock());
        let a: IpAddr = [203, 0, 113, 7].into();
        let one = conns.open(Some(a)).unwrap();
        let two = conns.open(None).unwrap();
        assert!(conns.open(Some(a)).is_none(), "the third in all");
        drop(one);
        let three = conns.open(Some(a)).unwrap();
        drop((two, three));
        assert_eq!(conns.total.load(Ordering::Relaxed), 0);
        // A refusal by the per-IP cap gives its share of the budget back.
        let per_ip = Connections::new(1, 2, Vec::new(), clock());
        let _held = per_ip.open(Some(a)).unwrap();
        assert!(per_ip.open(Some(a)).is_none());
        assert_eq!(per_ip.total.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_full_budget_is_logged_at_most_once_a_second() {
        assert!(log_full_budget(1_000, 0), "never logged");
        assert!(!log_full_budget(1_000, 1_001), "logged this second");
        assert!(log_full_budget(1_001, 1_001), "the next second");
    }

    #[test]
    fn room_under_the_cap() {
        assert!(has_room(0, 1));
        assert!(has_room(7, 8));
        assert!(!has_room(8, 8));
        assert!(has_room(1_000_000, 0), "0: no cap");
    }

    #[test]
    fn slots_count_per_ip_and_come_back_when_dropped() {
        let conns = Connections::new(2, u64::MAX, Vec::new(), clock());
        let a: IpAddr = [203, 0, 113, 7].into();
        let b: IpAddr = [203, 0, 113, 8].into();
        let one = conns.open(Some(a)).unwrap();
        let two = conns.open(Some(a)).unwrap();
        assert!(conns.open(Some(a)).is_none(), "the third from one IP");
        assert!(conns.open(Some(b)).is_some(), "another IP has its own");
        assert_eq!(conns.count(a), 2);
        drop(one);
        assert_eq!(conns.count(a), 1);
        let three = conns.open(Some(a));
        assert!(three.is_some());
        drop((two, three));
        assert_eq!(conns.count(a), 0);
        assert!(
            conns.lock().is_empty(),
            "no entry kept for an IP with none open"
        );
    }

    #[test]
    fn ipv6_counts_by_its_64_and_trusted_proxies_are_exempt() {
        let proxy = TrustedProxy::try_from("10.0.0.0/8".to_owned()).unwrap();
        let conns = Connections::new(1, u64::MAX, vec![proxy], clock());
        let x: IpAddr = "2001:db8::1".parse().unwrap();
        let y: IpAddr = "2001:db8::2".parse().unwrap();
        let _x = conns.open(Some(x)).unwrap();
        assert!(conns.open(Some(y)).is_none(), "same /64");
        let p: IpAddr = [10, 1, 2, 3].into();
        let held: Vec<_> = (0..10).map(|_| conns.open(Some(p)).unwrap()).collect();
        assert_eq!(held.len(), 10);
        assert_eq!(conns.count(p), 0);
        assert!(conns.open(None).is_some(), "a Unix socket peer");
        let off = Connections::new(0, u64::MAX, Vec::new(), clock());
        let many: Vec<_> = (0..100).map(|_| off.open(Some(x)).unwrap()).collect();
        assert_eq!(many.len(), 100);
    }
}
