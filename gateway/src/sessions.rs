//! Which principal opened each MCP session (`Mcp-Session-Id`), so that a session id presented
//! with another principal's credential can be refused. In-process (bounded, expiring) for one
//! gateway, or in redis for several. Session ids are stored as their SHA-256 only.
//!
//! Bindings slide: every use by the owner keeps the session alive for another `ttl`, but the
//! expiry is rewritten at most every `ttl / 4` per session (no write per request).
//!
//! Both backends count the live sessions of each principal ([`Sessions::count`]), so that a
//! new session is refused once a principal holds `limits.sessions_per_principal`; a binding
//! is released by `DELETE`, expiry or eviction. [`Streams`] counts open SSE streams per
//! principal in this process and releases a slot when its guard drops (the request ended).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::{Script, aio::ConnectionManager};
use sha2::{Digest as _, Sha256};

use crate::clock::Clock;

/// Who a session belongs to, as seen by a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Bound to this caller.
    Owner,
    /// Bound to another principal.
    Foreign,
    /// Never seen (or expired): the caller may bind it.
    Unknown,
}

/// The shared store could not answer; the proxy fails closed (503).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session store unavailable: {0}")]
    Unavailable(String),
}

/// Limits of the session table.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Idle lifetime of a binding (default 24 h).
    pub ttl: Duration,
    /// In-process backend: at most this many bindings; the one expiring first is evicted to
    /// make room (default 100 000).
    pub max_entries: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(24 * 3600),
            max_entries: 100_000,
        }
    }
}

type Key = [u8; 32];

fn key(session_id: &str) -> Key {
    Sha256::digest(session_id.as_bytes()).into()
}

/// The session bindings. Share it as `Arc<Sessions>`.
#[derive(Debug)]
pub struct Sessions {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Local {
        table: Mutex<Table>,
        clock: Arc<dyn Clock>,
    },
    Redis(RedisSessions),
}

impl Sessions {
    /// In-process bindings on `clock`.
    pub fn local(clock: Arc<dyn Clock>, opts: SessionOptions) -> Self {
        Self {
            backend: Backend::Local {
                table: Mutex::new(Table::new(opts)),
                clock,
            },
        }
    }

    /// Bindings in redis under `<prefix>session:<sha256 hex>`, on redis's clock (`EX`). Connects
    /// lazily and must be called inside the tokio runtime that will drive the connection.
    pub fn redis(url: &str, prefix: &str, opts: SessionOptions) -> Result<Self, SessionError> {
        Ok(Self {
            backend: Backend::Redis(RedisSessions::connect(url, prefix, &opts)?),
        })
    }

    /// Binds `session_id` to `owner` unless it is bound already: the first binding wins.
    /// Returns the caller's standing afterwards (`Owner`, or `Foreign` when another principal
    /// holds it).
    pub async fn bind(&self, session_id: &str, owner: &str) -> Result<Ownership, SessionError> {
        match &self.backend {
            Backend::Local { table, clock } => {
                Ok(lock(table).bind(key(session_id), owner, clock.now_ms()))
            }
            Backend::Redis(r) => r.bind(session_id, owner).await,
        }
    }

    /// `owner`'s standing on `session_id`; an owner's use slides the expiry.
    pub async fn check(&self, session_id: &str, owner: &str) -> Result<Ownership, SessionError> {
        match &self.backend {
            Backend::Local { table, clock } => {
                Ok(lock(table).check(&key(session_id), owner, clock.now_ms()))
            }
            Backend::Redis(r) => r.check(session_id, owner).await,
        }
    }

    /// Drops the binding of `owner`'s session (the session ended).
    pub async fn forget(&self, session_id: &str, owner: &str) -> Result<(), SessionError> {
        match &self.backend {
            Backend::Local { table, .. } => {
                lock(table).remove(&key(session_id));
                Ok(())
            }
            Backend::Redis(r) => r.forget(session_id, owner).await,
        }
    }

    /// How many live sessions `owner` holds.
    pub async fn count(&self, owner: &str) -> Result<usize, SessionError> {
        match &self.backend {
            Backend::Local { table, clock } => Ok(lock(table).count(owner, clock.now_ms())),
            Backend::Redis(r) => r.count(owner).await,
        }
    }
}

/// Whether `owner` may open one more session (or stream) holding `open` of at most `max`.
pub fn has_room(open: usize, max: u32) -> bool {
    open < max as usize
}

/// Open SSE streams per principal, in this process. Share it as `Arc<Streams>`.
#[derive(Debug, Default)]
pub struct Streams {
    open: Mutex<HashMap<Box<str>, u32>>,
}

/// One open stream's slot; dropping it (the request ended, however) releases the slot.
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<Streams>,
    owner: Box<str>,
}

impl Streams {
    /// A slot for one more stream of `owner`, unless it holds `max` already.
    pub fn open(self: &Arc<Self>, owner: &str, max: u32) -> Option<StreamSlot> {
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

    /// Streams `owner` holds open now.
    pub fn count(&self, owner: &str) -> u32 {
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

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    // A panic while holding the lock leaves the table consistent (no multi-step invariants
    // span a panic point), so poisoning is ignored.
    table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug)]
struct Entry {
    owner: Box<str>,
    expires_ms: u64,
    /// When the expiry was last written.
    touched_ms: u64,
    seq: u64,
}

/// The in-process table: bindings by hashed id, and an index by expiry for eviction and
/// purging (both O(log n)). Pure: every operation takes `now`.
#[derive(Debug)]
struct Table {
    entries: HashMap<Key, Entry>,
    by_expiry: BTreeMap<(u64, u64), Key>,
    /// Live bindings per owner (entries with a count of 0 are removed).
    per_owner: HashMap<Box<str>, usize>,
    ttl_ms: u64,
    max_entries: usize,
    next_seq: u64,
}

impl Table {
    fn new(opts: SessionOptions) -> Self {
        Self {
            entries: HashMap::new(),
            by_expiry: BTreeMap::new(),
            per_owner: HashMap::new(),
            ttl_ms: (opts.ttl.as_millis() as u64).max(1),
            max_entries: opts.max_entries.max(1),
            next_seq: 0,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn bind(&mut self, key: Key, owner: &str, now: u64) -> Ownership {
        self.purge(now);
        if let Some(entry) = self.entries.get(&key) {
            return if &*entry.owner == owner {
                Ownership::Owner
            } else {
                Ownership::Foreign
            };
        }
        while self.entries.len() >= self.max_entries {
            let Some((_, oldest)) = self.by_expiry.pop_first() else {
                break;
            };
            self.drop_entry(&oldest);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let expires_ms = now.saturating_add(self.ttl_ms);
        self.by_expiry.insert((expires_ms, seq), key);
        *self.per_owner.entry(owner.into()).or_insert(0) += 1;
        self.entries.insert(
            key,
            Entry {
                owner: owner.into(),
                expires_ms,
                touched_ms: now,
                seq,
            },
        );
        Ownership::Owner
    }

    fn check(&mut self, key: &Key, owner: &str, now: u64) -> Ownership {
        let Some(entry) = self.entries.get_mut(key) else {
            return Ownership::Unknown;
        };
        if entry.expires_ms <= now {
            self.remove(key);
            return Ownership::Unknown;
        }
        if &*entry.owner != owner {
            return Ownership::Foreign;
        }
        if now.saturating_sub(entry.touched_ms) >= self.ttl_ms / 4 {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
            entry.expires_ms = now.saturating_add(self.ttl_ms);
            entry.touched_ms = now;
            self.by_expiry.insert((entry.expires_ms, entry.seq), *key);
        }
        Ownership::Owner
    }

    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.drop_entry(key) {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
        }
    }

    /// Removes the entry (not its expiry index) and releases its owner's count.
    fn drop_entry(&mut self, key: &Key) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        if let Some(n) = self.per_owner.get_mut(&entry.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_owner.remove(&entry.owner);
            }
        }
        Some(entry)
    }

    /// Live bindings of `owner` at `now`.
    fn count(&mut self, owner: &str, now: u64) -> usize {
        self.purge(now);
        self.per_owner.get(owner).copied().unwrap_or(0)
    }

    /// Drops every binding expired at `now` (each is dropped once: amortised O(log n)).
    fn purge(&mut self, now: u64) {
        while let Some(entry) = self.by_expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.drop_entry(&key);
        }
    }
}

/// Binds unless bound (`SET NX EX`); 1 when `ARGV[1]` owns the key afterwards, else 0. A new
/// binding joins the owner's set `KEYS[2]` (scored by its expiry, redis clock, seconds).
const BIND: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  local now = tonumber(redis.call('TIME')[1])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), KEYS[1])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
";

/// Live sessions in the owner's set `KEYS[1]` (expired members dropped first).
const COUNT: &str = r"
local now = tonumber(redis.call('TIME')[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
";

/// Drops the binding `KEYS[1]` if `ARGV[1]` owns it, and its member of the owner's set.
const FORGET: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
";

/// nil when unbound; 1 when `ARGV[1]` owns it (then the expiry is rewritten to `ARGV[3]`
/// seconds once at most `ARGV[2]` remain, i.e. at most every ttl/4); 0 for another owner.
const CHECK: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
if v ~= ARGV[1] then return 0 end
local left = redis.call('TTL', KEYS[1])
if left >= 0 and left <= tonumber(ARGV[2]) then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  local now = tonumber(redis.call('TIME')[1])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), KEYS[1])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
";

struct RedisSessions {
    conn: ConnectionManager,
    prefix: String,
    ttl_secs: u64,
    bind: Script,
    check: Script,
    count: Script,
    forget: Script,
}

impl std::fmt::Debug for RedisSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSessions")
            .field("prefix", &self.prefix)
            .field("ttl_secs", &self.ttl_secs)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: impl std::fmt::Display) -> SessionError {
    SessionError::Unavailable(e.to_string())
}

impl RedisSessions {
    fn connect(url: &str, prefix: &str, opts: &SessionOptions) -> Result<Self, SessionError> {
        let client = redis::Client::open(url).map_err(unavailable)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_millis(500)))
            .set_number_of_retries(0)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(unavailable)?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            ttl_secs: opts.ttl.as_secs().max(1),
            bind: Script::new(BIND),
            check: Script::new(CHECK),
            count: Script::new(COUNT),
            forget: Script::new(FORGET),
        })
    }

    fn key(&self, session_id: &str) -> String {
        format!("{}session:{}", self.prefix, hex::encode(key(session_id)))
    }

    /// The set of `owner`'s session keys.
    fn owner_key(&self, owner: &str) -> String {
        format!("{}owner:{}", self.prefix, hex::encode(key(owner)))
    }

    /// Seconds left at which the owner's use rewrites the expiry (ttl/4 after the last write).
    fn refresh_below(&self) -> u64 {
        self.ttl_secs - self.ttl_secs / 4
    }

    async fn bind(&self, session_id: &str, owner: &str) -> Result<Ownership, SessionError> {
        let mut conn = self.conn.clone();
        let owned: i64 = self
            .bind
            .key(self.key(session_id))
            .key(self.owner_key(owner))
            .arg(owner)
            .arg(self.ttl_secs)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(if owned == 1 {
            Ownership::Owner
        } else {
            Ownership::Foreign
        })
    }

    async fn check(&self, session_id: &str, owner: &str) -> Result<Ownership, SessionError> {
        let mut conn = self.conn.clone();
        let owned: Option<i64> = self
            .check
            .key(self.key(session_id))
            .key(self.owner_key(owner))
            .arg(owner)
            .arg(self.refresh_below())
            .arg(self.ttl_secs)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(match owned {
            None => Ownership::Unknown,
            Some(1) => Ownership::Owner,
            Some(_) => Ownership::Foreign,
        })
    }

    async fn forget(&self, session_id: &str, owner: &str) -> Result<(), SessionError> {
        let mut conn = self.conn.clone();
        self.forget
            .key(self.key(session_id))
            .key(self.owner_key(owner))
            .arg(owner)
            .invoke_async::<()>(&mut conn)
            .await
            .map_err(unavailable)
    }

    async fn count(&self, owner: &str) -> Result<usize, SessionError> {
        let mut conn = self.conn.clone();
        self.count
            .key(self.owner_key(owner))
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const HOUR: u64 = 3_600_000;

    fn table(max: usize) -> Table {
        Table::new(SessionOptions {
            ttl: Duration::from_secs(3600),
            max_entries: max,
        })
    }

    #[test]
    fn first_binding_wins_and_others_are_foreign() {
        let mut t = table(10);
        let k = key("s1");
        assert_eq!(t.check(&k, "alice", 0), Ownership::Unknown);
        assert_eq!(t.bind(k, "alice", 0), Ownership::Owner);
        assert_eq!(t.bind(k, "bob", 1), Ownership::Foreign);
        assert_eq!(t.check(&k, "alice", 2), Ownership::Owner);
        assert_eq!(t.check(&k, "bob", 2), Ownership::Foreign);
        t.remove(&k);
        assert_eq!(t.check(&k, "bob", 3), Ownership::Unknown);
        assert!(t.by_expiry.is_empty());
    }

    #[test]
    fn idle_bindings_expire_and_use_slides_at_most_every_quarter_ttl() {
        let mut t = table(10);
        let k = key("s");
        t.bind(k, "alice", 0);
        // Within ttl/4 the expiry is not rewritten.
        assert_eq!(t.check(&k, "alice", HOUR / 4 - 1), Ownership::Owner);
        assert_eq!(t.entries[&k].expires_ms, HOUR);
        // After ttl/4 it is.
        assert_eq!(t.check(&k, "alice", HOUR / 2), Ownership::Owner);
        assert_eq!(t.entries[&k].expires_ms, HOUR / 2 + HOUR);
        // A foreign check does not slide.
        assert_eq!(t.check(&k, "bob", HOUR), Ownership::Foreign);
        assert_eq!(t.entries[&k].expires_ms, HOUR / 2 + HOUR);
        // Idle for a whole ttl: gone, and free to bind anew.
        assert_eq!(t.check(&k, "alice", HOUR / 2 + HOUR), Ownership::Unknown);
        assert_eq!(t.len(), 0);
        assert_eq!(t.bind(k, "bob", 2 * HOUR), Ownership::Owner);
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_one_expiring_first() {
        let mut t = table(3);
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            t.bind(key(id), "o", i as u64);
        }
        // "a" is used after ttl/4 and slides past the others.
        t.check(&key("a"), "o", HOUR / 2);
        t.bind(key("d"), "o", HOUR / 2);
        assert_eq!(t.len(), 3);
        assert_eq!(t.check(&key("b"), "o", HOUR / 2), Ownership::Unknown);
        assert_eq!(t.check(&key("a"), "o", HOUR / 2), Ownership::Owner);
        assert_eq!(t.entries.len(), t.by_expiry.len());
    }

    #[test]
    fn expired_bindings_are_purged_on_bind() {
        let mut t = table(100);
        for i in 0..50 {
            t.bind(key(&i.to_string()), "o", 0);
        }
        t.bind(key("late"), "o", HOUR);
        assert_eq!(t.len(), 1);
        assert_eq!(t.by_expiry.len(), 1);
    }

    #[tokio::test]
    async fn local_backend_with_a_fake_clock() {
        let clock = ManualClock::at(1_000);
        let sessions = Sessions::local(
            Arc::new(clock.clone()),
            SessionOptions {
                ttl: Duration::from_secs(60),
                max_entries: 2,
            },
        );
        assert_eq!(
            sessions.bind("s1", "alice").await.unwrap(),
            Ownership::Owner
        );
        assert_eq!(
            sessions.check("s1", "bob").await.unwrap(),
            Ownership::Foreign
        );
        clock.advance(59);
        assert_eq!(
            sessions.check("s1", "alice").await.unwrap(),
            Ownership::Owner
        );
        clock.advance(60);
        assert_eq!(
            sessions.check("s1", "alice").await.unwrap(),
            Ownership::Unknown
        );
        sessions.bind("s2", "a").await.unwrap();
        sessions.bind("s3", "a").await.unwrap();
        sessions.bind("s4", "a").await.unwrap();
        assert_eq!(sessions.check("s2", "a").await.unwrap(), Ownership::Unknown);
        assert_eq!(sessions.check("s4", "a").await.unwrap(), Ownership::Owner);
        sessions.forget("s4", "a").await.unwrap();
        assert_eq!(sessions.check("s4", "a").await.unwrap(), Ownership::Unknown);
    }

    #[test]
    fn sessions_are_counted_per_owner_and_released_by_delete_expiry_and_eviction() {
        let mut t = table(3);
        t.bind(key("a1"), "alice", 0);
        t.bind(key("a2"), "alice", 0);
        t.bind(key("b1"), "bob", 1);
        assert_eq!(t.count("alice", 1), 2);
        assert_eq!(t.count("bob", 1), 1);
        // A second bind of the same id does not count twice.
        t.bind(key("a1"), "alice", 2);
        assert_eq!(t.count("alice", 2), 2);
        t.remove(&key("a1"));
        assert_eq!(t.count("alice", 2), 1);
        // Eviction (table full) releases the evicted owner's count.
        t.bind(key("c1"), "carol", 3);
        t.bind(key("c2"), "carol", 3);
        assert_eq!(t.count("alice", 3), 0, "a2 expired first and was evicted");
        // Expiry releases it too.
        assert_eq!(t.count("carol", HOUR + 3), 0);
        assert!(t.per_owner.is_empty());
        assert!(has_room(63, 64));
        assert!(!has_room(64, 64));
    }

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

    #[tokio::test]
    async fn redis_counts_sessions_per_owner() {
        let Some(redis) = pforte_test_redis::RedisServer::start() else {
            return;
        };
        let sessions = Sessions::redis(&redis.url(), "t:", SessionOptions::default()).unwrap();
        assert_eq!(sessions.count("alice").await.unwrap(), 0);
        for id in ["s1", "s2", "s3"] {
            assert_eq!(sessions.bind(id, "alice").await.unwrap(), Ownership::Owner);
        }
        assert_eq!(
            sessions.bind("s1", "alice").await.unwrap(),
            Ownership::Owner
        );
        assert_eq!(
            sessions.bind("s1", "bob").await.unwrap(),
            Ownership::Foreign
        );
        assert_eq!(sessions.count("alice").await.unwrap(), 3);
        assert_eq!(sessions.count("bob").await.unwrap(), 0);
        // Bob cannot release Alice's session.
        sessions.forget("s2", "bob").await.unwrap();
        assert_eq!(
            sessions.check("s2", "alice").await.unwrap(),
            Ownership::Owner
        );
        sessions.forget("s2", "alice").await.unwrap();
        assert_eq!(sessions.count("alice").await.unwrap(), 2);
        assert_eq!(
            sessions.check("s2", "alice").await.unwrap(),
            Ownership::Unknown
        );
    }

    #[tokio::test]
    async fn redis_down_is_an_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let sessions = Sessions::redis(
            &format!("redis://127.0.0.1:{port}/0"),
            "t:",
            SessionOptions::default(),
        )
        .unwrap();
        assert!(sessions.check("s", "a").await.is_err());
        assert!(sessions.bind("s", "a").await.is_err());
    }
}
