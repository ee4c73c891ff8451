//! Throttling of registration and login: the `RateLimiter` trait the gateway may implement
//! (e.g. on redis, issue 6) and a simple in-process GCRA default.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::config::{Quota, ThrottleConfig};

/// What is being limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitClass {
    /// `/register`, per client IP.
    Register,
    /// Login attempts, per client IP.
    LoginIp,
    /// Login attempts, per username (checked before any password hashing).
    LoginUsername,
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
    async fn check(&self, class: LimitClass, key: &str, now_ms: u64) -> RateDecision;
}

/// In-process GCRA (generic cell rate algorithm): `burst` at once, refilling at `per_minute`.
pub struct GcraLimiter {
    quotas: ThrottleConfig,
    tats: Mutex<HashMap<(LimitClass, String), u64>>,
    max_keys: usize,
}

impl GcraLimiter {
    pub fn new(quotas: ThrottleConfig) -> Self {
        Self {
            quotas,
            tats: Mutex::new(HashMap::new()),
            max_keys: 100_000,
        }
    }

    fn quota(&self, class: LimitClass) -> Quota {
        match class {
            LimitClass::Register => self.quotas.register_per_ip,
            LimitClass::LoginIp => self.quotas.login_per_ip,
            LimitClass::LoginUsername => self.quotas.login_per_username,
        }
    }

    /// The synchronous decision (the trait method wraps it).
    pub fn decide(&self, class: LimitClass, key: &str, now_ms: u64) -> RateDecision {
        let q = self.quota(class);
        if q.per_minute == 0 || q.burst == 0 {
            return RateDecision::Deny {
                retry_after_ms: 60_000,
            };
        }
        let interval = 60_000 / u64::from(q.per_minute).max(1);
        let tolerance = interval * u64::from(q.burst - 1);
        let Ok(mut tats) = self.tats.lock() else {
            return RateDecision::Allow;
        };
        if tats.len() >= self.max_keys {
            tats.retain(|_, tat| *tat > now_ms);
            if tats.len() >= self.max_keys {
                tats.clear();
            }
        }
        let tat = tats
            .get(&(class, key.to_owned()))
            .copied()
            .unwrap_or(now_ms)
            .max(now_ms);
        if tat - now_ms > tolerance {
            return RateDecision::Deny {
                retry_after_ms: tat - now_ms - tolerance,
            };
        }
        tats.insert((class, key.to_owned()), tat + interval);
        RateDecision::Allow
    }
}

#[async_trait]
impl RateLimiter for GcraLimiter {
    async fn check(&self, class: LimitClass, key: &str, now_ms: u64) -> RateDecision {
        self.decide(class, key, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let cfg = ThrottleConfig {
            login_per_username: Quota {
                burst: 3,
                per_minute: 6,
            },
            ..ThrottleConfig::default()
        };
        let l = GcraLimiter::new(cfg);
        let t0 = 1_000_000;
        for _ in 0..3 {
            assert_eq!(
                l.decide(LimitClass::LoginUsername, "bob", t0),
                RateDecision::Allow
            );
        }
        assert_eq!(
            l.decide(LimitClass::LoginUsername, "bob", t0),
            RateDecision::Deny {
                retry_after_ms: 10_000
            }
        );
        assert_eq!(
            l.decide(LimitClass::LoginUsername, "alice", t0),
            RateDecision::Allow,
            "per key"
        );
        assert_eq!(
            l.decide(LimitClass::LoginIp, "bob", t0),
            RateDecision::Allow,
            "per class"
        );
        assert_eq!(
            l.decide(LimitClass::LoginUsername, "bob", t0 + 10_000),
            RateDecision::Allow
        );
        assert!(matches!(
            l.decide(LimitClass::LoginUsername, "bob", t0 + 10_000),
            RateDecision::Deny { .. }
        ));
    }
}
