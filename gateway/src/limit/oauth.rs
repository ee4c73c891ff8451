//! The authorization server's throttles (`[oauth.throttle]`: registration, failed logins,
//! `/authorize`, metadata-document fetches) counted by the gateway's one limiter, so that with
//! `redis_url` every gateway draws on the same budgets.

use async_trait::async_trait;
use pforte_oauth::{Budget, RateLimiter};

use super::{Policy, SharedLimiter, ip_key};

/// A budget's key: apart from the route classes' (`mcp:`, `unauthenticated:`, `oauth:`,
/// `tool:`), by class and client IP (IPv6 by its /64), and the username for logins per user.
fn key(budget: &Budget<'_>) -> String {
    let ip = ip_key(budget.ip);
    match budget.username {
        Some(user) => format!("throttle:{}:{ip}:{user}", budget.class.name()),
        None => format!("throttle:{}:{ip}", budget.class.name()),
    }
}

/// A quota per minute as a policy.
fn policy(budget: &Budget<'_>) -> Policy {
    Policy {
        rate: budget.quota.per_minute,
        period_secs: 60,
        burst: budget.quota.burst,
    }
}

/// Throttle refusals are the authorization server's answers: they are not counted as the
/// gateway's 429s and not remembered for its pre-check.
#[async_trait]
impl RateLimiter for SharedLimiter {
    async fn check(&self, budget: &Budget<'_>) -> Result<(), u64> {
        let decision = self.decide(&key(budget), policy(budget)).await;
        if decision.allowed {
            Ok(())
        } else {
            Err(decision.retry_after_ms)
        }
    }

    async fn refund(&self, budget: &Budget<'_>) {
        SharedLimiter::refund(self, &key(budget), policy(budget)).await;
    }

    async fn reset(&self, budget: &Budget<'_>) {
        SharedLimiter::reset(self, &key(budget)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::{net::IpAddr, sync::Arc, time::Duration};

    use pforte_clock::ManualClock;
    use pforte_oauth::{LimitClass, Quota};

    use crate::{limit::LocalLimiter, metrics::RateLimitMetrics};

    fn limiter() -> (ManualClock, SharedLimiter) {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        let local = LocalLimiter::new(Arc::new(clock.clone()));
        (
            clock,
            SharedLimiter::new(None, local, RateLimitMetrics::default()),
        )
    }

    fn budget<'a>(class: LimitClass, ip: &str, user: Option<&'a str>, q: (u32, u32)) -> Budget<'a> {
        Budget {
            class,
            ip: Some(ip.parse::<IpAddr>().unwrap()),
            username: user,
            quota: Quota {
                burst: q.0,
                per_minute: q.1,
            },
        }
    }

    #[tokio::test]
    async fn burst_then_refill_per_class_ip_and_user() {
        let (clock, l) = limiter();
        let bob = budget(LimitClass::LoginUserIp, "192.0.2.1", Some("bob"), (3, 6));
        for _ in 0..3 {
            assert_eq!(RateLimiter::check(&l, &bob).await, Ok(()));
        }
        assert_eq!(RateLimiter::check(&l, &bob).await, Err(10_000));
        let alice = Budget {
            username: Some("alice"),
            ..bob
        };
        assert_eq!(RateLimiter::check(&l, &alice).await, Ok(()), "per user");
        let elsewhere = budget(LimitClass::LoginUserIp, "192.0.2.2", Some("bob"), (3, 6));
        assert_eq!(RateLimiter::check(&l, &elsewhere).await, Ok(()), "per IP");
        let per_ip = Budget {
            class: LimitClass::LoginIp,
            username: None,
            ..bob
        };
        assert_eq!(RateLimiter::check(&l, &per_ip).await, Ok(()), "per class");
        clock.advance(Duration::from_secs(10));
        assert_eq!(RateLimiter::check(&l, &bob).await, Ok(()));
        assert!(RateLimiter::check(&l, &bob).await.is_err());
    }

    #[tokio::test]
    async fn refund_and_reset_give_the_budget_back() {
        let (_clock, l) = limiter();
        let b = budget(LimitClass::LoginIp, "192.0.2.1", None, (2, 1));
        for _ in 0..10 {
            assert_eq!(RateLimiter::check(&l, &b).await, Ok(()));
            RateLimiter::refund(&l, &b).await;
        }
        assert_eq!(l.fallback.len(), 0, "a refunded budget leaves no state");
        assert_eq!(RateLimiter::check(&l, &b).await, Ok(()));
        assert_eq!(RateLimiter::check(&l, &b).await, Ok(()));
        assert!(RateLimiter::check(&l, &b).await.is_err());
        RateLimiter::reset(&l, &b).await;
        assert_eq!(RateLimiter::check(&l, &b).await, Ok(()));
    }

    /// The authorization server answers its own throttles: the gateway neither counts them
    /// among its 429s nor pre-refuses the IP's other requests because of them.
    #[tokio::test]
    async fn throttle_refusals_are_not_the_gateways() {
        let (_clock, l) = limiter();
        let b = budget(LimitClass::Register, "192.0.2.1", None, (1, 1));
        assert_eq!(RateLimiter::check(&l, &b).await, Ok(()));
        assert!(RateLimiter::check(&l, &b).await.is_err());
        assert_eq!(l.metrics.refusals.get(), 0);
        let unauthenticated = format!("unauthenticated:{}", ip_key(b.ip));
        assert_eq!(l.peek(&unauthenticated, policy(&b)), None);
        assert_eq!(l.peek(&key(&b), policy(&b)), None);
        assert_eq!(key(&b), "throttle:register:192.0.2.1");
    }
}
