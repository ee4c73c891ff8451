//! Throttling of registration, login, `/authorize` and metadata-document fetches: the
//! `RateLimiter` trait the gateway may implement (e.g. on redis) and a simple in-process GCRA
//! default whose memory is bounded without ever forgetting every counter at once.
//!
//! Logins count failures only: the server takes one unit before it verifies a password and
//! gives it back ([`RateLimiter::refund`], [`RateLimiter::reset`]) when the password was right.

use async_trait::async_trait;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::config::{Quota, ThrottleConfig};

/// What is being limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitClass {
    /// `/register`, per client IP.
    Register,
    /// Failed logins, per client IP (across usernames).
    LoginIp,
    /// Failed logins, per (username, client IP): guessing one user's password from one place.
    LoginUserIp,
    /// `GET /authorize`, per client IP.
    Authorize,
    /// Client ID Metadata Document fetches (cache misses), per client IP.
    CimdFetch,
}

/// A limiter's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateDecision {
    Allow,
    Deny { retry_after_ms: u64 },
}

/// A rate limiter. `now_ms` is the caller's clock; a shared implementation may use its own.
#[async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Takes one unit of `key`'s budget if there is one.
    async fn check(&self, class: LimitClass, key: &str, now_ms: u64) -> RateDecision;
    /// Gives back one unit taken by an allowed [`RateLimiter::check`] (the attempt succeeded).
    async fn refund(&self, class: LimitClass, key: &str, now_ms: u64);
    /// Forgets `key`: its whole budget is available again.
    async fn reset(&self, class: LimitClass, key: &str);
}

/// The bucket key of a client IP: IPv4 addresses as they are, IPv6 by their /64 (one host
/// usually owns a whole /64, so a bucket per /128 would be no limit at all). IPv4-mapped IPv6
/// addresses count as their IPv4 address.
pub fn ip_bucket(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

/// The bucket key of an optional client IP (`unknown` when the caller could not tell).
pub fn ip_key(ip: Option<IpAddr>) -> String {
    ip.map_or_else(|| "unknown".to_owned(), ip_bucket)
}

/// Theoretical arrival times per key, at most `max` of them. When full, expired entries are
/// dropped and, if that is not enough, the entries closest to a full budget (smallest TAT,
/// the least state lost) until a tenth is free again; so a sweep costs O(n) at most once per
/// `max / 10` inserts (amortised O(1) per decision), and the table is never cleared wholesale.
#[derive(Debug)]
pub struct TatTable<K> {
    tats: HashMap<K, u64>,
    max: usize,
}

impl<K: Hash + Eq + Clone> TatTable<K> {
    pub fn new(max: usize) -> Self {
        Self {
            tats: HashMap::new(),
            max: max.max(10),
        }
    }

    pub fn len(&self) -> usize {
        self.tats.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tats.is_empty()
    }

    pub fn get(&self, key: &K) -> Option<u64> {
        self.tats.get(key).copied()
    }

    pub fn remove(&mut self, key: &K) {
        self.tats.remove(key);
    }

    /// Stores `tat` for `key`, making room first when the table is full.
    pub fn insert(&mut self, key: K, tat: u64, now_ms: u64) {
        if self.tats.len() >= self.max && !self.tats.contains_key(&key) {
            self.make_room(now_ms);
        }
        self.tats.insert(key, tat);
    }

    fn make_room(&mut self, now_ms: u64) {
        self.tats.retain(|_, tat| *tat > now_ms);
        let target = self.max - self.max / 10;
        if self.tats.len() <= target {
            return;
        }
        let mut tats: Vec<u64> = self.tats.values().copied().collect();
        let cut = tats.len() - target;
        let (_, threshold, _) = tats.select_nth_unstable(cut - 1);
        let threshold = *threshold;
        let mut to_drop = cut;
        self.tats.retain(|_, tat| {
            if to_drop > 0 && *tat <= threshold {
                to_drop -= 1;
                false
            } else {
                true
            }
        });
    }
}

/// One GCRA step: the decision and, when allowed, the new TAT.
fn gcra(q: Quota, tat: Option<u64>, now_ms: u64) -> (RateDecision, Option<u64>) {
    if q.per_minute == 0 || q.burst == 0 {
        return (
            RateDecision::Deny {
                retry_after_ms: 60_000,
            },
            None,
        );
    }
    let interval = interval_ms(q);
    let tolerance = interval * u64::from(q.burst - 1);
    let tat = tat.unwrap_or(now_ms).max(now_ms);
    if tat - now_ms > tolerance {
        return (
            RateDecision::Deny {
                retry_after_ms: tat - now_ms - tolerance,
            },
            None,
        );
    }
    (RateDecision::Allow, Some(tat + interval))
}

fn interval_ms(q: Quota) -> u64 {
    (60_000 / u64::from(q.per_minute.max(1))).max(1)
}

/// In-process GCRA (generic cell rate algorithm): `burst` at once, refilling at `per_minute`.
pub struct GcraLimiter {
    quotas: ThrottleConfig,
    tats: Mutex<TatTable<(LimitClass, String)>>,
}

impl GcraLimiter {
    pub fn new(quotas: ThrottleConfig) -> Self {
        Self::with_capacity(quotas, 100_000)
    }

    /// A limiter holding at most `max_keys` keys (tests use small tables).
    pub fn with_capacity(quotas: ThrottleConfig, max_keys: usize) -> Self {
        Self {
            quotas,
            tats: Mutex::new(TatTable::new(max_keys)),
        }
    }

    fn quota(&self, class: LimitClass) -> Quota {
        match class {
            LimitClass::Register => self.quotas.register_per_ip,
            LimitClass::LoginIp => self.quotas.login_per_ip,
            LimitClass::LoginUserIp => self.quotas.login_per_user_and_ip,
            LimitClass::Authorize => self.quotas.authorize_per_ip,
            LimitClass::CimdFetch => self.quotas.cimd_fetch_per_ip,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, TatTable<(LimitClass, String)>> {
        match self.tats.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The synchronous decision (the trait method wraps it).
    pub fn decide(&self, class: LimitClass, key: &str, now_ms: u64) -> RateDecision {
        let q = self.quota(class);
        let k = (class, key.to_owned());
        let mut tats = self.table();
        let (decision, new_tat) = gcra(q, tats.get(&k), now_ms);
        if let Some(tat) = new_tat {
            tats.insert(k, tat, now_ms);
        }
        decision
    }

    /// Gives one unit back (never more than a full budget).
    pub fn give_back(&self, class: LimitClass, key: &str, now_ms: u64) {
        let interval = interval_ms(self.quota(class));
        let k = (class, key.to_owned());
        let mut tats = self.table();
        if let Some(tat) = tats.get(&k) {
            let back = tat.saturating_sub(interval);
            if back <= now_ms {
                tats.remove(&k);
            } else {
                tats.insert(k, back, now_ms);
            }
        }
    }

    pub fn forget(&self, class: LimitClass, key: &str) {
        self.table().remove(&(class, key.to_owned()));
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl RateLimiter for GcraLimiter {
    async fn check(&self, class: LimitClass, key: &str, now_ms: u64) -> RateDecision {
        self.decide(class, key, now_ms)
    }
    async fn refund(&self, class: LimitClass, key: &str, now_ms: u64) {
        self.give_back(class, key, now_ms);
    }
    async fn reset(&self, class: LimitClass, key: &str) {
        self.forget(class, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(burst: u32, per_minute: u32) -> Quota {
        Quota { burst, per_minute }
    }

    #[test]
    fn burst_then_refill() {
        let cfg = ThrottleConfig {
            login_per_user_and_ip: q(3, 6),
            ..ThrottleConfig::default()
        };
        let l = GcraLimiter::new(cfg);
        let t0 = 1_000_000;
        for _ in 0..3 {
            assert_eq!(
                l.decide(LimitClass::LoginUserIp, "bob", t0),
                RateDecision::Allow
            );
        }
        assert_eq!(
            l.decide(LimitClass::LoginUserIp, "bob", t0),
            RateDecision::Deny {
                retry_after_ms: 10_000
            }
        );
        assert_eq!(
            l.decide(LimitClass::LoginUserIp, "alice", t0),
            RateDecision::Allow,
            "per key"
        );
        assert_eq!(
            l.decide(LimitClass::LoginIp, "bob", t0),
            RateDecision::Allow,
            "per class"
        );
        assert_eq!(
            l.decide(LimitClass::LoginUserIp, "bob", t0 + 10_000),
            RateDecision::Allow
        );
        assert!(matches!(
            l.decide(LimitClass::LoginUserIp, "bob", t0 + 10_000),
            RateDecision::Deny { .. }
        ));
    }

    #[test]
    fn refund_and_reset_give_the_budget_back() {
        let cfg = ThrottleConfig {
            login_per_ip: q(2, 1),
            ..ThrottleConfig::default()
        };
        let l = GcraLimiter::new(cfg);
        let t = 5_000_000;
        for _ in 0..10 {
            assert_eq!(l.decide(LimitClass::LoginIp, "ip", t), RateDecision::Allow);
            l.give_back(LimitClass::LoginIp, "ip", t);
        }
        assert!(l.is_empty(), "a refunded budget leaves no state");
        l.decide(LimitClass::LoginIp, "ip", t);
        l.decide(LimitClass::LoginIp, "ip", t);
        assert!(matches!(
            l.decide(LimitClass::LoginIp, "ip", t),
            RateDecision::Deny { .. }
        ));
        l.forget(LimitClass::LoginIp, "ip");
        assert_eq!(l.decide(LimitClass::LoginIp, "ip", t), RateDecision::Allow);
    }

    /// A full table never forgets every counter: an exhausted bucket stays exhausted while
    /// ten times the capacity of other keys passes through, and the table stays bounded.
    #[test]
    fn a_full_table_keeps_the_busiest_counters() {
        let cfg = ThrottleConfig {
            login_per_ip: q(3, 1),
            register_per_ip: q(1, 1),
            ..ThrottleConfig::default()
        };
        let l = GcraLimiter::with_capacity(cfg, 1000);
        let t = 9_000_000;
        for _ in 0..3 {
            l.decide(LimitClass::LoginIp, "victim-of-guessing", t);
        }
        for i in 0..10_000 {
            l.decide(LimitClass::Register, &format!("k{i}"), t + i);
            assert!(l.len() <= 1000);
        }
        assert!(matches!(
            l.decide(LimitClass::LoginIp, "victim-of-guessing", t + 10_000),
            RateDecision::Deny { .. }
        ));
    }

    #[test]
    fn table_sweeps_are_amortised() {
        let mut t: TatTable<u32> = TatTable::new(100);
        for i in 0..100 {
            t.insert(i, 1_000 + u64::from(i), 0);
        }
        assert_eq!(t.len(), 100);
        t.insert(1000, 5_000, 0);
        assert_eq!(t.len(), 91, "a sweep frees a tenth");
        assert!(t.get(&0).is_none(), "smallest TATs go first");
        assert!(t.get(&99).is_some());
        for i in 0..9 {
            t.insert(2000 + i, 5_000, 0);
        }
        assert_eq!(t.len(), 100, "no sweep until full again");
        t.insert(3000, 5_000, 2_000);
        assert_eq!(t.len(), 11, "expired entries go first");
    }

    #[test]
    fn ipv6_clients_share_their_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let b: IpAddr = "2001:db8:1:2:ffff:1:2:3"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(ip_bucket(a), ip_bucket(b));
        assert_ne!(ip_bucket(a), ip_bucket(c));
        assert_eq!(ip_bucket(a), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(ip_bucket(mapped), "192.0.2.1");
        assert_eq!(ip_key(None), "unknown");
        assert_eq!(ip_key(Some(IpAddr::from([192, 0, 2, 7]))), "192.0.2.7");
    }
}
