//! The tests' stand-in for the gateway's rate limiter: GCRA on the harness's clock, one
//! theoretical arrival time per budget, IPv6 clients by their /64 — the same answers the
//! gateway's in-process limiter gives, without its bounded table.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pforte_clock::Clock;

use crate::config::Quota;
use crate::throttle::{Budget, LimitClass, RateLimiter};

type Key = (LimitClass, Option<[u16; 8]>, Option<String>);

pub(super) struct TestLimiter {
    clock: Arc<dyn Clock>,
    tats: Mutex<HashMap<Key, u64>>,
}

impl TestLimiter {
    pub(super) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            tats: Mutex::new(HashMap::new()),
        }
    }

    fn key(b: &Budget<'_>) -> Key {
        let net = b.ip.map(|ip| match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().segments(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4.to_ipv6_mapped().segments(),
                None => {
                    let s = v6.segments();
                    [s[0], s[1], s[2], s[3], 0, 0, 0, 0]
                }
            },
        });
        (b.class, net, b.username.map(str::to_owned))
    }
}

fn interval_ms(q: Quota) -> u64 {
    (60_000 / u64::from(q.per_minute.max(1))).max(1)
}

#[async_trait]
impl RateLimiter for TestLimiter {
    async fn check(&self, b: &Budget<'_>) -> Result<(), u64> {
        let now = self.clock.now_ms();
        let interval = interval_ms(b.quota);
        let tolerance = interval * u64::from(b.quota.burst.saturating_sub(1));
        let mut tats = self.tats.lock().unwrap();
        let tat = tats.get(&Self::key(b)).copied().unwrap_or(now).max(now);
        if tat - now > tolerance {
            return Err(tat - now - tolerance);
        }
        tats.insert(Self::key(b), tat + interval);
        Ok(())
    }

    async fn refund(&self, b: &Budget<'_>) {
        let now = self.clock.now_ms();
        let mut tats = self.tats.lock().unwrap();
        if let Some(tat) = tats.get(&Self::key(b)).copied() {
            let back = tat.saturating_sub(interval_ms(b.quota));
            if back <= now {
                tats.remove(&Self::key(b));
            } else {
                tats.insert(Self::key(b), back);
            }
        }
    }

    async fn reset(&self, b: &Budget<'_>) {
        self.tats.lock().unwrap().remove(&Self::key(b));
    }
}
