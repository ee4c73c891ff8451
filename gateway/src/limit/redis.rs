//! The shared rate-limit backend: GCRA in one redis Lua script — one round trip per decision,
//! atomic, on the server's clock, so every gateway sees one budget. A refund is a script of its
//! own on the same clock; a reset deletes the key.

use async_trait::async_trait;
use redis::Script;

use super::{Decision, LimitError, Limiter, Policy};

/// GCRA on the redis clock: `KEYS[1]` holds the theoretical arrival time in milliseconds.
/// Returns `{allowed, ahead_ms, tat_ms - now_ms}` (`ahead_ms` = new TAT − now).
const GCRA: &str = r"
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local ahead = new_tat - now
if ahead <= window then
  redis.call('SET', KEYS[1], new_tat, 'PX', ahead + 1000)
  return {1, ahead, tat - now}
end
return {0, ahead, tat - now}
";

/// One unit back: `KEYS[1]`'s TAT moves back by one interval (`ARGV[1]`); a TAT that is no
/// longer ahead of now means a whole budget, and the key goes.
const REFUND: &str = r"
local interval = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then return 0 end
local back = tat - interval
if back <= now then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], back, 'PX', back - now + 1000)
end
return 1
";

/// Rate-limit state in redis, keys under `prefix`.
#[derive(Clone)]
pub struct RedisLimiter {
    conn: pforte_redis::Redis,
    prefix: String,
    script: Script,
    refund: Script,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Connects lazily: while redis is down every decision fails fast (and the caller falls
    /// back to in-process limits).
    pub fn connect(url: &str, prefix: &str) -> Result<Self, LimitError> {
        let conn =
            pforte_redis::Redis::open(url).map_err(|e| LimitError::Unavailable(e.to_string()))?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            script: Script::new(GCRA),
            refund: Script::new(REFUND),
        })
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    async fn check(&self, key: &str, policy: Policy) -> Result<Decision, LimitError> {
        let interval = policy.interval_ms();
        let window = policy.window_ms();
        let mut conn = self.conn.clone();
        let (allowed, ahead, current): (i64, i64, i64) = self
            .script
            .key(format!("{}{key}", self.prefix))
            .arg(interval)
            .arg(window)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| LimitError::Unavailable(e.to_string()))?;
        let ahead = ahead.max(0) as u64;
        let current = current.max(0) as u64;
        Ok(if allowed == 1 {
            Decision {
                allowed: true,
                remaining: (window.saturating_sub(ahead) / interval) as u32,
                reset_ms: ahead,
                retry_after_ms: 0,
            }
        } else {
            Decision {
                allowed: false,
                remaining: 0,
                reset_ms: current,
                retry_after_ms: ahead.saturating_sub(window),
            }
        })
    }

    async fn refund(&self, key: &str, policy: Policy) -> Result<(), LimitError> {
        let mut conn = self.conn.clone();
        let _: i64 = self
            .refund
            .key(format!("{}{key}", self.prefix))
            .arg(policy.interval_ms())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| LimitError::Unavailable(e.to_string()))?;
        Ok(())
    }

    async fn reset(&self, key: &str) -> Result<(), LimitError> {
        let mut conn = self.conn.clone();
        let _: i64 = redis::cmd("DEL")
            .arg(format!("{}{key}", self.prefix))
            .query_async(&mut conn)
            .await
            .map_err(|e| LimitError::Unavailable(e.to_string()))?;
        Ok(())
    }
}
