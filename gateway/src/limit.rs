//! Rate limits: the GCRA decision as a pure function of the stored state and `now`, policies
//! per route class, and the in-process backend. (The redis backend lives in `limit/redis.rs`,
//! the bounded in-process table in `limit/table.rs`, and the authorization server's throttles
//! on this limiter in `limit/oauth.rs`.)

use std::{
    net::IpAddr,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use serde::Deserialize;

use pforte_clock::Clock;

mod oauth;
pub(crate) mod redis;
mod table;

use table::TatTable;

/// A limit: `rate` requests per `period_secs`, with bursts of up to `burst` at once.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub rate: u32,
    pub period_secs: u32,
    pub burst: u32,
}

impl Policy {
    /// Milliseconds between two requests at the sustained rate (the GCRA emission interval).
    pub(crate) fn interval_ms(&self) -> u64 {
        (u64::from(self.period_secs) * 1000 / u64::from(self.rate.max(1))).max(1)
    }
    /// How far ahead of `now` the theoretical arrival time may run: `burst` intervals.
    pub(crate) fn window_ms(&self) -> u64 {
        self.interval_ms() * u64::from(self.burst.max(1))
    }
    pub(crate) fn is_valid(&self) -> bool {
        self.rate > 0 && self.period_secs > 0 && self.burst > 0
    }
}

/// The route classes that carry their own budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Class {
    /// `/mcp`, per principal (static token, or user + client).
    Mcp,
    /// Requests that failed authentication, per client IP.
    Unauthenticated,
    /// The authorization server's endpoints, per client IP.
    OAuth,
    /// One tool's own budget, per principal (`limits.tools`).
    Tool,
}

impl Class {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Mcp => "mcp",
            Self::Unauthenticated => "unauthenticated",
            Self::OAuth => "oauth",
            Self::Tool => "tool",
        }
    }
}

/// The configured policies.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Limits {
    pub(crate) enabled: bool,
    pub(crate) mcp: Policy,
    pub(crate) unauthenticated: Policy,
    pub(crate) oauth: Policy,
    /// Budgets of their own for named tools (by the name in the JSON-RPC body).
    pub(crate) tools: std::collections::BTreeMap<String, Policy>,
    /// Live MCP sessions one principal may hold (a new one past it: 429). Applies also with
    /// `enabled = false` (a bound, not a rate).
    pub(crate) sessions_per_principal: u32,
    /// Open SSE streams (`GET /mcp`) one principal may hold on this gateway (past it: 429).
    pub(crate) streams_per_principal: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            enabled: true,
            mcp: Policy {
                rate: 600,
                period_secs: 60,
                burst: 60,
            },
            unauthenticated: Policy {
                rate: 60,
                period_secs: 60,
                burst: 20,
            },
            // Claude.ai registers and refreshes from a few server addresses for all its users.
            oauth: Policy {
                rate: 600,
                period_secs: 60,
                burst: 100,
            },
            tools: std::collections::BTreeMap::new(),
            sessions_per_principal: 64,
            streams_per_principal: 64,
        }
    }
}

impl Limits {
    /// The policy of a route class (`Tool` budgets are looked up by name, see `tool`).
    pub(crate) fn policy(&self, class: Class) -> Policy {
        match class {
            Class::Mcp | Class::Tool => self.mcp,
            Class::Unauthenticated => self.unauthenticated,
            Class::OAuth => self.oauth,
        }
    }

    /// The budget of the tool called `name`, if it has one.
    pub(crate) fn tool(&self, name: &str) -> Option<Policy> {
        self.tools.get(name).copied()
    }
}

/// What the limiter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Requests still allowed right now.
    pub remaining: u32,
    /// Milliseconds until the budget is whole again.
    pub reset_ms: u64,
    /// When refused: milliseconds until one request will be allowed.
    pub retry_after_ms: u64,
}

/// GCRA: given the stored theoretical arrival time (`tat_ms`, if any) and `now_ms`, decide and
/// return the new TAT to store when allowed.
pub(crate) fn gcra(policy: Policy, tat_ms: Option<u64>, now_ms: u64) -> (Decision, Option<u64>) {
    let interval = policy.interval_ms();
    let window = policy.window_ms();
    let tat = tat_ms.unwrap_or(now_ms).max(now_ms);
    let new_tat = tat + interval;
    let ahead = new_tat - now_ms;
    if ahead <= window {
        let remaining = ((window - ahead) / interval) as u32;
        (
            Decision {
                allowed: true,
                remaining,
                reset_ms: ahead,
                retry_after_ms: 0,
            },
            Some(new_tat),
        )
    } else {
        let current = tat - now_ms;
        (
            Decision {
                allowed: false,
                remaining: 0,
                reset_ms: current,
                retry_after_ms: ahead - window,
            },
            None,
        )
    }
}

/// Why a backend could not decide.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("rate-limit backend unavailable: {0}")]
    Unavailable(String),
}

/// A place that holds limiter state: one process or shared.
#[async_trait]
pub trait Limiter: Send + Sync + std::fmt::Debug {
    /// Decides on one request for `key` under `policy` (one round trip for shared backends).
    async fn check(&self, key: &str, policy: Policy) -> Result<Decision, LimitError>;
    /// Gives back one unit an allowed [`Limiter::check`] of `key` took (a budget never grows
    /// past whole).
    async fn refund(&self, key: &str, policy: Policy) -> Result<(), LimitError>;
    /// Forgets `key`: its whole budget is available again.
    async fn reset(&self, key: &str) -> Result<(), LimitError>;
}

/// The rate-limit key of a client IP: IPv4 as is, IPv6 by its /64 (a host usually owns a
/// whole /64; a bucket per /128 would be no limit), an IPv4-mapped IPv6 address as its IPv4
/// address, `unknown` when there is none.
pub(crate) fn ip_key(ip: Option<IpAddr>) -> String {
    match ip {
        None => "unknown".to_owned(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

/// In-process limiter state: at most `max_keys` TATs. When full, expired ones and then those
/// closest to a whole budget are dropped until a tenth is free, so the sweep runs at most once
/// per `max_keys / 10` new keys (amortised O(1) per decision) and memory stays bounded.
#[derive(Debug)]
pub struct LocalLimiter {
    clock: Arc<dyn Clock>,
    state: Mutex<TatTable<String>>,
}

/// Keys held at most.
const MAX_KEYS: usize = 100_000;

impl LocalLimiter {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_capacity(clock, MAX_KEYS)
    }

    /// A limiter holding at most `max_keys` keys.
    pub(crate) fn with_capacity(clock: Arc<dyn Clock>, max_keys: usize) -> Self {
        Self {
            clock,
            state: Mutex::new(TatTable::new(max_keys)),
        }
    }

    /// The limiter's clock, in milliseconds.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TatTable<String>> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub(crate) fn decide(&self, key: &str, policy: Policy) -> Decision {
        let now = self.clock.now_ms();
        let mut state = self.state();
        let key = key.to_owned();
        let (decision, new_tat) = gcra(policy, state.get(&key), now);
        if let Some(tat) = new_tat {
            state.insert(key, tat, now);
        }
        decision
    }

    /// Gives back one unit of `key`'s budget (a whole budget leaves no state).
    pub(crate) fn give_back(&self, key: &str, policy: Policy) {
        let now = self.clock.now_ms();
        let mut state = self.state();
        let key = key.to_owned();
        if let Some(tat) = state.get(&key) {
            let back = tat.saturating_sub(policy.interval_ms());
            if back <= now {
                state.remove(&key);
            } else {
                state.insert(key, back, now);
            }
        }
    }

    /// Forgets `key`.
    pub(crate) fn forget(&self, key: &str) {
        self.state().remove(&key.to_owned());
    }

    /// Keys currently held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state().len()
    }
}

#[async_trait]
impl Limiter for LocalLimiter {
    async fn check(&self, key: &str, policy: Policy) -> Result<Decision, LimitError> {
        Ok(self.decide(key, policy))
    }
    async fn refund(&self, key: &str, policy: Policy) -> Result<(), LimitError> {
        self.give_back(key, policy);
        Ok(())
    }
    async fn reset(&self, key: &str) -> Result<(), LimitError> {
        self.forget(key);
        Ok(())
    }
}

/// The shared limiter with the in-process one as its fallback: when the shared backend is
/// unavailable, decisions are made locally (and said so in the log) until it answers again.
/// Its state is counted into the gateway's metrics (`RateLimitMetrics`).
#[derive(Debug)]
pub(crate) struct SharedLimiter {
    primary: Option<Arc<dyn Limiter>>,
    fallback: LocalLimiter,
    /// Keys refused recently → until when (ms on the fallback's clock) they stay refused:
    /// what [`SharedLimiter::peek`] answers from, without a round trip or a charge.
    refused: Mutex<TatTable<String>>,
    /// The latest "refused until" of any key: while `now` is past it, `peek` takes no lock.
    refused_latest: std::sync::atomic::AtomicU64,
    degraded: std::sync::atomic::AtomicBool,
    metrics: crate::metrics::RateLimitMetrics,
}

impl SharedLimiter {
    pub(crate) fn new(
        primary: Option<Arc<dyn Limiter>>,
        fallback: LocalLimiter,
        metrics: crate::metrics::RateLimitMetrics,
    ) -> Self {
        Self {
            primary,
            fallback,
            refused: Mutex::new(TatTable::new(MAX_KEYS / 10)),
            refused_latest: std::sync::atomic::AtomicU64::new(0),
            degraded: std::sync::atomic::AtomicBool::new(false),
            metrics,
        }
    }

    /// The gateway's limiter: on the shared state the stores opened (`shared`, redis), else
    /// in this process alone (on `clock`).
    pub(crate) fn open(
        shared: Option<Arc<dyn Limiter>>,
        clock: Arc<dyn Clock>,
        metrics: crate::metrics::RateLimitMetrics,
    ) -> Self {
        Self::new(shared, LocalLimiter::new(clock), metrics)
    }

    pub(crate) async fn check(&self, key: &str, policy: Policy) -> Decision {
        let decision = self.decide(key, policy).await;
        if !decision.allowed {
            self.metrics.refusals.inc();
            let now = self.fallback.now_ms();
            let until = now + decision.retry_after_ms;
            let mut refused = match self.refused.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            refused.insert(key.to_owned(), until, now);
            self.refused_latest
                .fetch_max(until, std::sync::atomic::Ordering::Relaxed);
        }
        decision
    }

    /// Whether `key` is still over its budget after a recent refusal, answered from memory in
    /// this process: no backend round trip, nothing charged. `Some` is the refusal to give;
    /// `None` means "ask [`SharedLimiter::check`]" (this is a pre-check, never an allowance).
    pub(crate) fn peek(&self, key: &str, policy: Policy) -> Option<Decision> {
        let now = self.fallback.now_ms();
        if self
            .refused_latest
            .load(std::sync::atomic::Ordering::Relaxed)
            <= now
        {
            return None;
        }
        let until = match self.refused.lock() {
            Ok(g) => g.get(&key.to_owned()),
            Err(poisoned) => poisoned.into_inner().get(&key.to_owned()),
        };
        let refusal = still_refused(policy, until, now);
        if refusal.is_some() {
            self.metrics.refusals.inc();
        }
        refusal
    }

    /// One decision, from the shared backend or, when it fails, from this process; recorded
    /// nowhere else (no refusal counted, nothing remembered for `peek`).
    async fn decide(&self, key: &str, policy: Policy) -> Decision {
        let Some(primary) = &self.primary else {
            return self.fallback.decide(key, policy);
        };
        match primary.check(key, policy).await {
            Ok(d) => {
                self.answered();
                d
            }
            Err(e) => {
                self.failed(&e);
                self.metrics.fallback_decisions.inc();
                self.fallback.decide(key, policy)
            }
        }
    }

    /// Gives back one unit an allowed decision on `key` took, where that decision was made.
    async fn refund(&self, key: &str, policy: Policy) {
        if let Some(primary) = &self.primary {
            match primary.refund(key, policy).await {
                Ok(()) => return self.answered(),
                Err(e) => self.failed(&e),
            }
        }
        self.fallback.give_back(key, policy);
    }

    /// Forgets `key` wherever it is counted.
    async fn reset(&self, key: &str) {
        if let Some(primary) = &self.primary {
            match primary.reset(key).await {
                Ok(()) => self.answered(),
                Err(e) => self.failed(&e),
            }
        }
        self.fallback.forget(key);
    }

    /// The shared backend answered: shared again if it had failed.
    fn answered(&self) {
        if self
            .degraded
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            self.metrics.degraded.set(0);
            tracing::warn!("rate limits shared again: the redis backend answers");
        }
    }

    /// The shared backend failed: decisions fall back to this process until it answers.
    fn failed(&self, e: &LimitError) {
        if !self
            .degraded
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            self.metrics.degraded.set(1);
            tracing::warn!(error = %e, "rate limits fall back to this process until redis answers");
        }
    }
}

/// The pre-check's decision: a key refused until `refused_until_ms` is still refused at
/// `now_ms` (with the exact `Retry-After` and reset of that refusal), or the caller must ask
/// the limiter.
pub(crate) fn still_refused(
    policy: Policy,
    refused_until_ms: Option<u64>,
    now_ms: u64,
) -> Option<Decision> {
    let until = refused_until_ms.filter(|&u| u > now_ms)?;
    let retry_after_ms = until - now_ms;
    Some(Decision {
        allowed: false,
        remaining: 0,
        // At a refusal, retry = TAT + interval − window − now, so TAT − now is this.
        reset_ms: (retry_after_ms + policy.window_ms()).saturating_sub(policy.interval_ms()),
        retry_after_ms,
    })
}

/// The IETF `RateLimit` and `RateLimit-Policy` header values for a decision.
pub(crate) fn headers(class: Class, policy: Policy, d: &Decision) -> [(&'static str, String); 2] {
    let name = class.name();
    [
        (
            "ratelimit-policy",
            format!(
                "\"{name}\";q={};w={};burst={}",
                policy.rate, policy.period_secs, policy.burst
            ),
        ),
        (
            "ratelimit",
            format!(
                "\"{name}\";r={};t={}",
                d.remaining,
                d.reset_ms.div_ceil(1000)
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    use pforte_clock::ManualClock;

    const P: Policy = Policy {
        rate: 60,
        period_secs: 60,
        burst: 5,
    };

    fn limiter() -> (ManualClock, LocalLimiter) {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        (clock.clone(), LocalLimiter::new(Arc::new(clock)))
    }

    #[test]
    fn still_refused_holds_until_the_retry_after_only() {
        assert_eq!(still_refused(P, None, 5_000), None);
        assert_eq!(still_refused(P, Some(5_000), 5_000), None);
        assert_eq!(still_refused(P, Some(4_000), 5_000), None);
        let d = still_refused(P, Some(5_250), 5_000).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, 250);
        // 1 s interval, 5 s window: the budget is whole 4.25 s later.
        assert_eq!(d.reset_ms, 4_250);
    }

    #[tokio::test]
    async fn peek_answers_a_recent_refusal_without_charging() {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        let shared = SharedLimiter::new(
            None,
            LocalLimiter::new(Arc::new(clock.clone())),
            crate::metrics::RateLimitMetrics::default(),
        );
        assert_eq!(shared.peek("ip", P), None, "nothing refused yet");
        for _ in 0..5 {
            assert!(shared.check("ip", P).await.allowed);
            assert_eq!(
                shared.peek("ip", P),
                None,
                "allowed keys are never pre-refused"
            );
        }
        let refused = shared.check("ip", P).await;
        assert!(!refused.allowed);
        let peeked = shared.peek("ip", P).unwrap();
        assert_eq!(peeked, refused, "the pre-check gives the same refusal");
        assert_eq!(shared.peek("other", P), None);
        // Peeking charges nothing: once the retry-after has passed, one request passes.
        for _ in 0..100 {
            assert!(shared.peek("ip", P).is_some());
        }
        clock.advance(Duration::from_millis(refused.retry_after_ms));
        assert_eq!(shared.peek("ip", P), None);
        assert!(shared.check("ip", P).await.allowed);
    }

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let (now, l) = limiter();
        for i in 0..5 {
            let d = l.decide("k", P);
            assert!(d.allowed, "request {i} of the burst");
            assert_eq!(d.remaining, 4 - i);
        }
        let refused = l.decide("k", P);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_ms, 1000);
        now.advance(Duration::from_millis(999));
        assert!(!l.decide("k", P).allowed);
        now.advance(Duration::from_millis(1));
        assert!(l.decide("k", P).allowed);
        assert!(!l.decide("k", P).allowed);
    }

    #[test]
    fn idle_time_refills_up_to_the_burst_only() {
        let (now, l) = limiter();
        for _ in 0..5 {
            assert!(l.decide("k", P).allowed);
        }
        now.advance(Duration::from_millis(3_600_000));
        let allowed = (0..10).filter(|_| l.decide("k", P).allowed).count();
        assert_eq!(allowed, 5);
    }

    #[test]
    fn keys_are_independent() {
        let (_now, l) = limiter();
        for _ in 0..5 {
            assert!(l.decide("a", P).allowed);
        }
        assert!(!l.decide("a", P).allowed);
        assert!(l.decide("b", P).allowed);
    }

    /// A flood of distinct keys keeps memory bounded and never resets a busy key's budget (the
    /// amortised sweep itself: `limit/table.rs` `table_sweeps_are_amortised`).
    #[test]
    fn memory_is_bounded_and_busy_keys_survive_a_flood() {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        let l = LocalLimiter::with_capacity(Arc::new(clock.clone()), 1_000);
        for _ in 0..5 {
            assert!(l.decide("busy", P).allowed);
        }
        assert!(!l.decide("busy", P).allowed);
        for i in 0..20_000 {
            l.decide(&format!("flood-{i}"), P);
            assert!(l.len() <= 1_000, "bounded");
        }
        assert!(
            !l.decide("busy", P).allowed,
            "the busy key's budget was kept"
        );
        // After a sweep a tenth is free: new keys fill it up to the bound again.
        let start = l.len();
        for i in 0..(1_000 - start) {
            l.decide(&format!("more-{i}"), P);
        }
        assert_eq!(l.len(), 1_000);
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_slash_64() {
        let a: IpAddr = "2001:db8:aa:bb::1".parse().unwrap();
        let b: IpAddr = "2001:db8:aa:bb:1234:5678:9abc:def0".parse().unwrap();
        let c: IpAddr = "2001:db8:aa:bc::1".parse().unwrap();
        assert_eq!(ip_key(Some(a)), ip_key(Some(b)));
        assert_ne!(ip_key(Some(a)), ip_key(Some(c)));
        assert_eq!(ip_key(Some("192.0.2.1".parse().unwrap())), "192.0.2.1");
        assert_eq!(ip_key(Some(a)), "2001:db8:aa:bb::/64");
        assert_eq!(
            ip_key(Some("::ffff:192.0.2.1".parse().unwrap())),
            "192.0.2.1",
            "an IPv4-mapped address is its IPv4 address"
        );
        assert_eq!(ip_key(None), "unknown");
        let (_now, l) = limiter();
        for i in 0..5 {
            assert!(
                l.decide(&ip_key(Some(format!("2001:db8::{i}").parse().unwrap())), P)
                    .allowed
            );
        }
        assert!(
            !l.decide(&ip_key(Some("2001:db8::ffff".parse().unwrap())), P)
                .allowed,
            "one /64, one budget"
        );
    }

    #[test]
    fn header_values() {
        let d = Decision {
            allowed: true,
            remaining: 3,
            reset_ms: 2500,
            retry_after_ms: 0,
        };
        let [policy, limit] = headers(Class::Mcp, P, &d);
        assert_eq!(policy.1, "\"mcp\";q=60;w=60;burst=5");
        assert_eq!(limit.1, "\"mcp\";r=3;t=3");
    }
}
