//! Which principal opened each MCP session (`Mcp-Session-Id`), so that a session id presented
//! with another principal's credential can be refused, and which upstream instance serves it
//! (a route with several `urls`), so that every request of the session reaches that instance.
//! In-process (bounded, expiring) for one gateway, or in redis for several. Session ids are
//! stored as their SHA-256 only; the instance as its URL, as configured, so every gateway with
//! the same configuration on the same redis routes a session alike.
//!
//! Bindings slide: every use by the owner keeps the session alive for another `ttl`, but the
//! expiry is rewritten at most every `ttl / 4` per session (no write per request).
//!
//! A session is owned by the principal that opened it (`kind:subject:client`) but counted
//! against the person (`auth::person_key`: an OAuth user whatever the client): both backends count the live
//! sessions of each person ([`Sessions::count`]), so that a new session is refused once a person
//! holds `limits.sessions_per_principal`, however many clients they registered; a binding is
//! released by `DELETE`, expiry or eviction. [`Streams`] counts open SSE streams per person in
//! this process and releases a slot when its guard drops (the request ended).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::{Script, aio::ConnectionManager};
use sha2::{Digest as _, Sha256};

use pforte_clock::Clock;

/// Who binds or uses a session: the principal that owns it, and the person it counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    /// `kind:subject:client`: only this principal may use the session.
    pub owner: &'a str,
    /// `auth::person_key`: the sessions of all of a person's clients count together.
    pub person: &'a str,
}

impl<'a> Holder<'a> {
    pub fn new(owner: &'a str, person: &'a str) -> Self {
        Self { owner, person }
    }
}

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

/// A caller's standing on a session, and the instance recorded with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub ownership: Ownership,
    /// The upstream instance (its URL) that serves the session. Only told to the owner; `None`
    /// when the record has none (a route with one instance, a session bound on its first use,
    /// or a record written before instances were kept).
    pub instance: Option<String>,
}

impl Binding {
    /// The owner's standing, with the record's instance.
    pub fn owner(instance: Option<String>) -> Self {
        Self {
            ownership: Ownership::Owner,
            instance,
        }
    }

    pub const FOREIGN: Self = Self {
        ownership: Ownership::Foreign,
        instance: None,
    };

    pub const UNKNOWN: Self = Self {
        ownership: Ownership::Unknown,
        instance: None,
    };

    /// The standing of `caller` on a record of `owner` served by `instance`.
    fn of(caller: &str, owner: &str, instance: Option<&str>) -> Self {
        if caller == owner {
            Self::owner(instance.map(str::to_owned))
        } else {
            Self::FOREIGN
        }
    }
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

/// Whether `instance` can be kept with a record (redis separates it from the owner by the
/// last newline; a URL has none).
fn is_storable(instance: &str) -> bool {
    !instance.is_empty() && !instance.contains('\n')
}

/// The redis value of a record: the owner, then `\n` and the instance when there is one.
fn encode(owner: &str, instance: Option<&str>) -> String {
    match instance {
        Some(i) => format!("{owner}\n{i}"),
        None => owner.to_owned(),
    }
}

/// A redis value → (owner, instance), split at the last newline (as the Lua scripts do); a
/// value without one is an owner alone (also every record written before instances were
/// kept).
fn decode(value: &str) -> (&str, Option<&str>) {
    match value.rsplit_once('\n') {
        Some((owner, instance)) if !instance.is_empty() => (owner, Some(instance)),
        Some((owner, _)) => (owner, None),
        None => (value, None),
    }
}

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

    /// Binds `session_id` to `owner`, served by `instance`, unless it is bound already: the
    /// first binding wins, instance included. Returns the caller's standing afterwards
    /// (`Owner` with the recorded instance, or `Foreign` when another principal holds it).
    pub async fn bind(
        &self,
        session_id: &str,
        holder: Holder<'_>,
        instance: Option<&str>,
    ) -> Result<Binding, SessionError> {
        let instance = instance.filter(|i| is_storable(i));
        match &self.backend {
            Backend::Local { table, clock } => {
                Ok(lock(table).bind(key(session_id), holder, instance, clock.now_ms()))
            }
            Backend::Redis(r) => r.bind(session_id, holder, instance).await,
        }
    }

    /// The holder's standing on `session_id` and the session's instance; an owner's use slides
    /// the expiry.
    pub async fn check(
        &self,
        session_id: &str,
        holder: Holder<'_>,
    ) -> Result<Binding, SessionError> {
        match &self.backend {
            Backend::Local { table, clock } => {
                Ok(lock(table).check(&key(session_id), holder.owner, clock.now_ms()))
            }
            Backend::Redis(r) => r.check(session_id, holder).await,
        }
    }

    /// Drops the binding of the holder's session (the session ended).
    pub async fn forget(&self, session_id: &str, holder: Holder<'_>) -> Result<(), SessionError> {
        match &self.backend {
            Backend::Local { table, .. } => {
                lock(table).remove(&key(session_id));
                Ok(())
            }
            Backend::Redis(r) => r.forget(session_id, holder).await,
        }
    }

    /// How many live sessions `person` holds, through all their clients.
    pub async fn count(&self, person: &str) -> Result<usize, SessionError> {
        match &self.backend {
            Backend::Local { table, clock } => Ok(lock(table).count(person, clock.now_ms())),
            Backend::Redis(r) => r.count(person).await,
        }
    }
}

/// Whether `owner` may open one more session (or stream) holding `open` of at most `max`.
pub fn has_room(open: usize, max: u32) -> bool {
    open < max as usize
}

/// Open SSE streams per person, in this process. Share it as `Arc<Streams>`.
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
    person: Box<str>,
    instance: Option<Box<str>>,
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
    /// Live bindings per person (entries with a count of 0 are removed).
    per_person: HashMap<Box<str>, usize>,
    ttl_ms: u64,
    max_entries: usize,
    next_seq: u64,
}

impl Table {
    fn new(opts: SessionOptions) -> Self {
        Self {
            entries: HashMap::new(),
            by_expiry: BTreeMap::new(),
            per_person: HashMap::new(),
            ttl_ms: (opts.ttl.as_millis() as u64).max(1),
            max_entries: opts.max_entries.max(1),
            next_seq: 0,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn bind(&mut self, key: Key, holder: Holder<'_>, instance: Option<&str>, now: u64) -> Binding {
        self.purge(now);
        if let Some(entry) = self.entries.get(&key) {
            return Binding::of(holder.owner, &entry.owner, entry.instance.as_deref());
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
        *self.per_person.entry(holder.person.into()).or_insert(0) += 1;
        self.entries.insert(
            key,
            Entry {
                owner: holder.owner.into(),
                person: holder.person.into(),
                instance: instance.map(Into::into),
                expires_ms,
                touched_ms: now,
                seq,
            },
        );
        Binding::owner(instance.map(str::to_owned))
    }

    fn check(&mut self, key: &Key, owner: &str, now: u64) -> Binding {
        let Some(entry) = self.entries.get_mut(key) else {
            return Binding::UNKNOWN;
        };
        if entry.expires_ms <= now {
            self.remove(key);
            return Binding::UNKNOWN;
        }
        if &*entry.owner != owner {
            return Binding::FOREIGN;
        }
        if now.saturating_sub(entry.touched_ms) >= self.ttl_ms / 4 {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
            entry.expires_ms = now.saturating_add(self.ttl_ms);
            entry.touched_ms = now;
            self.by_expiry.insert((entry.expires_ms, entry.seq), *key);
        }
        Binding::owner(entry.instance.as_deref().map(str::to_owned))
    }

    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.drop_entry(key) {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
        }
    }

    /// Removes the entry (not its expiry index) and releases its person's count.
    fn drop_entry(&mut self, key: &Key) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        if let Some(n) = self.per_person.get_mut(&entry.person) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_person.remove(&entry.person);
            }
        }
        Some(entry)
    }

    /// Live bindings of `person` at `now`.
    fn count(&mut self, person: &str, now: u64) -> usize {
        self.purge(now);
        self.per_person.get(person).copied().unwrap_or(0)
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

/// Binds unless bound (`SET NX EX` of the record `ARGV[1]`, see [`encode`]) and returns the
/// record held afterwards (nil only if it vanished). A new binding joins the person's set
/// `KEYS[2]` (scored by its expiry, redis clock, seconds).
const BIND: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  local now = tonumber(redis.call('TIME')[1])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), KEYS[1])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
  return ARGV[1]
end
return redis.call('GET', KEYS[1])
";

/// Live sessions in the person's set `KEYS[1]` (expired members dropped first).
const COUNT: &str = r"
local now = tonumber(redis.call('TIME')[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
";

/// Drops the binding `KEYS[1]` if `ARGV[1]` owns it, and its member of the person's set. The
/// owner is the record up to its last newline (all of it without one), as in [`decode`].
const FORGET: &str = r"
local v = redis.call('GET', KEYS[1])
if v and (string.match(v, '^(.*)\n') or v) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
";

/// The record (nil when unbound). When `ARGV[1]` owns it the expiry is rewritten to `ARGV[3]`
/// seconds once at most `ARGV[2]` remain, i.e. at most every ttl/4.
const CHECK: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
if (string.match(v, '^(.*)\n') or v) ~= ARGV[1] then return v end
local left = redis.call('TTL', KEYS[1])
if left >= 0 and left <= tonumber(ARGV[2]) then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  local now = tonumber(redis.call('TIME')[1])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), KEYS[1])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return v
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

/// `caller`'s standing on a redis record (`None`: unbound).
fn standing(caller: &str, record: Option<&str>) -> Binding {
    match record.map(decode) {
        None => Binding::UNKNOWN,
        Some((owner, instance)) => Binding::of(caller, owner, instance),
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

    /// The set of `person`'s session keys.
    fn person_key(&self, person: &str) -> String {
        format!("{}person:{}", self.prefix, hex::encode(key(person)))
    }

    /// Seconds left at which the owner's use rewrites the expiry (ttl/4 after the last write).
    fn refresh_below(&self) -> u64 {
        self.ttl_secs - self.ttl_secs / 4
    }

    async fn bind(
        &self,
        session_id: &str,
        holder: Holder<'_>,
        instance: Option<&str>,
    ) -> Result<Binding, SessionError> {
        let mut conn = self.conn.clone();
        let record: Option<String> = self
            .bind
            .key(self.key(session_id))
            .key(self.person_key(holder.person))
            .arg(encode(holder.owner, instance))
            .arg(self.ttl_secs)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(standing(holder.owner, record.as_deref()))
    }

    async fn check(&self, session_id: &str, holder: Holder<'_>) -> Result<Binding, SessionError> {
        let owner = holder.owner;
        let mut conn = self.conn.clone();
        let record: Option<String> = self
            .check
            .key(self.key(session_id))
            .key(self.person_key(holder.person))
            .arg(owner)
            .arg(self.refresh_below())
            .arg(self.ttl_secs)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(standing(owner, record.as_deref()))
    }

    async fn forget(&self, session_id: &str, holder: Holder<'_>) -> Result<(), SessionError> {
        let mut conn = self.conn.clone();
        self.forget
            .key(self.key(session_id))
            .key(self.person_key(holder.person))
            .arg(holder.owner)
            .invoke_async::<()>(&mut conn)
            .await
            .map_err(unavailable)
    }

    async fn count(&self, person: &str) -> Result<usize, SessionError> {
        let mut conn = self.conn.clone();
        self.count
            .key(self.person_key(person))
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pforte_clock::ManualClock;

    const HOUR: u64 = 3_600_000;

    /// A holder whose person is itself (one client per person).
    fn h(owner: &str) -> Holder<'_> {
        Holder::new(owner, owner)
    }

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
        assert_eq!(t.check(&k, "alice", 0).ownership, Ownership::Unknown);
        assert_eq!(t.bind(k, h("alice"), None, 0).ownership, Ownership::Owner);
        assert_eq!(t.bind(k, h("bob"), None, 1).ownership, Ownership::Foreign);
        assert_eq!(t.check(&k, "alice", 2).ownership, Ownership::Owner);
        assert_eq!(t.check(&k, "bob", 2).ownership, Ownership::Foreign);
        t.remove(&k);
        assert_eq!(t.check(&k, "bob", 3).ownership, Ownership::Unknown);
        assert!(t.by_expiry.is_empty());
    }

    #[test]
    fn idle_bindings_expire_and_use_slides_at_most_every_quarter_ttl() {
        let mut t = table(10);
        let k = key("s");
        t.bind(k, h("alice"), None, 0);
        // Within ttl/4 the expiry is not rewritten.
        assert_eq!(
            t.check(&k, "alice", HOUR / 4 - 1).ownership,
            Ownership::Owner
        );
        assert_eq!(t.entries[&k].expires_ms, HOUR);
        // After ttl/4 it is.
        assert_eq!(t.check(&k, "alice", HOUR / 2).ownership, Ownership::Owner);
        assert_eq!(t.entries[&k].expires_ms, HOUR / 2 + HOUR);
        // A foreign check does not slide.
        assert_eq!(t.check(&k, "bob", HOUR).ownership, Ownership::Foreign);
        assert_eq!(t.entries[&k].expires_ms, HOUR / 2 + HOUR);
        // Idle for a whole ttl: gone, and free to bind anew.
        assert_eq!(
            t.check(&k, "alice", HOUR / 2 + HOUR).ownership,
            Ownership::Unknown
        );
        assert_eq!(t.len(), 0);
        assert_eq!(
            t.bind(k, h("bob"), None, 2 * HOUR).ownership,
            Ownership::Owner
        );
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_one_expiring_first() {
        let mut t = table(3);
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            t.bind(key(id), h("o"), None, i as u64);
        }
        // "a" is used after ttl/4 and slides past the others.
        t.check(&key("a"), "o", HOUR / 2);
        t.bind(key("d"), h("o"), None, HOUR / 2);
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.check(&key("b"), "o", HOUR / 2).ownership,
            Ownership::Unknown
        );
        assert_eq!(
            t.check(&key("a"), "o", HOUR / 2).ownership,
            Ownership::Owner
        );
        assert_eq!(t.entries.len(), t.by_expiry.len());
    }

    #[test]
    fn expired_bindings_are_purged_on_bind() {
        let mut t = table(100);
        for i in 0..50 {
            t.bind(key(&i.to_string()), h("o"), None, 0);
        }
        t.bind(key("late"), h("o"), None, HOUR);
        assert_eq!(t.len(), 1);
        assert_eq!(t.by_expiry.len(), 1);
    }

    #[tokio::test]
    async fn local_backend_with_a_fake_clock() {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        let sessions = Sessions::local(
            Arc::new(clock.clone()),
            SessionOptions {
                ttl: Duration::from_secs(60),
                max_entries: 2,
            },
        );
        assert_eq!(
            sessions
                .bind("s1", h("alice"), None)
                .await
                .unwrap()
                .ownership,
            Ownership::Owner
        );
        assert_eq!(
            sessions.check("s1", h("bob")).await.unwrap().ownership,
            Ownership::Foreign
        );
        clock.advance(Duration::from_secs(59));
        assert_eq!(
            sessions.check("s1", h("alice")).await.unwrap().ownership,
            Ownership::Owner
        );
        clock.advance(Duration::from_secs(60));
        assert_eq!(
            sessions.check("s1", h("alice")).await.unwrap().ownership,
            Ownership::Unknown
        );
        sessions.bind("s2", h("a"), None).await.unwrap();
        sessions.bind("s3", h("a"), None).await.unwrap();
        sessions.bind("s4", h("a"), None).await.unwrap();
        assert_eq!(
            sessions.check("s2", h("a")).await.unwrap().ownership,
            Ownership::Unknown
        );
        assert_eq!(
            sessions.check("s4", h("a")).await.unwrap().ownership,
            Ownership::Owner
        );
        sessions.forget("s4", h("a")).await.unwrap();
        assert_eq!(
            sessions.check("s4", h("a")).await.unwrap().ownership,
            Ownership::Unknown
        );
    }

    #[test]
    fn a_persons_clients_share_one_count_but_not_their_sessions() {
        let mut t = table(10);
        let (one, two) = (
            Holder::new("oauth:alice:client-1", "oauth:alice"),
            Holder::new("oauth:alice:client-2", "oauth:alice"),
        );
        t.bind(key("s1"), one, None, 0);
        t.bind(key("s2"), two, None, 0);
        assert_eq!(t.count("oauth:alice", 1), 2);
        assert_eq!(t.count("oauth:alice:client-1", 1), 0);
        // The session stays the client's own: the person's other client is a stranger to it.
        assert_eq!(t.check(&key("s1"), two.owner, 1), Binding::FOREIGN);
        t.remove(&key("s1"));
        assert_eq!(t.count("oauth:alice", 1), 1);
    }

    #[test]
    fn sessions_are_counted_per_owner_and_released_by_delete_expiry_and_eviction() {
        let mut t = table(3);
        t.bind(key("a1"), h("alice"), None, 0);
        t.bind(key("a2"), h("alice"), None, 0);
        t.bind(key("b1"), h("bob"), None, 1);
        assert_eq!(t.count("alice", 1), 2);
        assert_eq!(t.count("bob", 1), 1);
        // A second bind of the same id does not count twice.
        t.bind(key("a1"), h("alice"), None, 2);
        assert_eq!(t.count("alice", 2), 2);
        t.remove(&key("a1"));
        assert_eq!(t.count("alice", 2), 1);
        // Eviction (table full) releases the evicted owner's count.
        t.bind(key("c1"), h("carol"), None, 3);
        t.bind(key("c2"), h("carol"), None, 3);
        assert_eq!(t.count("alice", 3), 0, "a2 expired first and was evicted");
        // Expiry releases it too.
        assert_eq!(t.count("carol", HOUR + 3), 0);
        assert!(t.per_person.is_empty());
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
        let Some(redis) = pforte_test_support::RedisServer::start() else {
            return;
        };
        let sessions = Sessions::redis(&redis.url(), "t:", SessionOptions::default()).unwrap();
        assert_eq!(sessions.count("alice").await.unwrap(), 0);
        for id in ["s1", "s2", "s3"] {
            assert_eq!(
                sessions.bind(id, h("alice"), None).await.unwrap().ownership,
                Ownership::Owner
            );
        }
        assert_eq!(
            sessions
                .bind("s1", h("alice"), None)
                .await
                .unwrap()
                .ownership,
            Ownership::Owner
        );
        assert_eq!(
            sessions.bind("s1", h("bob"), None).await.unwrap().ownership,
            Ownership::Foreign
        );
        assert_eq!(sessions.count("alice").await.unwrap(), 3);
        assert_eq!(sessions.count("bob").await.unwrap(), 0);
        // Bob cannot release Alice's session.
        sessions.forget("s2", h("bob")).await.unwrap();
        assert_eq!(
            sessions.check("s2", h("alice")).await.unwrap().ownership,
            Ownership::Owner
        );
        sessions.forget("s2", h("alice")).await.unwrap();
        assert_eq!(sessions.count("alice").await.unwrap(), 2);
        assert_eq!(
            sessions.check("s2", h("alice")).await.unwrap().ownership,
            Ownership::Unknown
        );
    }

    #[test]
    fn the_instance_is_kept_with_the_binding_and_told_only_to_the_owner() {
        let mut t = table(10);
        let k = key("s");
        let url = "http://127.0.0.1:9001/mcp";
        assert_eq!(
            t.bind(k, h("alice"), Some(url), 0),
            Binding::owner(Some(url.into()))
        );
        // The first binding wins, instance included.
        assert_eq!(
            t.bind(k, h("alice"), Some("http://other/mcp"), 1),
            Binding::owner(Some(url.into()))
        );
        assert_eq!(t.bind(k, h("bob"), Some(url), 1), Binding::FOREIGN);
        assert_eq!(t.check(&k, "alice", 2), Binding::owner(Some(url.into())));
        assert_eq!(t.check(&k, "bob", 2), Binding::FOREIGN);
        // Sliding keeps it.
        assert_eq!(
            t.check(&k, "alice", HOUR / 2).instance.as_deref(),
            Some(url)
        );
        assert_eq!(t.bind(key("n"), h("alice"), None, 3), Binding::owner(None));
        assert_eq!(t.check(&key("n"), "alice", 3), Binding::owner(None));
        assert_eq!(t.count("alice", 3), 2);
    }

    #[test]
    fn records_encode_owner_and_instance_and_old_records_decode_as_owner_alone() {
        let owner = "oauth:alice:client-1";
        let url = "http://10.0.0.2:8080/mcp";
        assert_eq!(decode(&encode(owner, Some(url))), (owner, Some(url)));
        assert_eq!(decode(&encode(owner, None)), (owner, None));
        // A record written before instances were kept is the owner alone.
        assert_eq!(decode("static:ci:ci"), ("static:ci:ci", None));
        assert_eq!(decode("o\n"), ("o", None));
        // Split at the last newline: an owner with one still reads back.
        assert_eq!(decode(&encode("a\nb", Some(url))), ("a\nb", Some(url)));
        assert!(is_storable(url));
        assert!(!is_storable(""));
        assert!(!is_storable("http://x/\n"));
    }

    #[tokio::test]
    async fn an_unstorable_instance_is_not_recorded() {
        let sessions = Sessions::local(
            Arc::new(ManualClock::at(Duration::from_secs(1))),
            SessionOptions::default(),
        );
        assert_eq!(
            sessions.bind("s", h("a"), Some("bad\nurl")).await.unwrap(),
            Binding::owner(None)
        );
    }

    #[tokio::test]
    async fn redis_keeps_the_instance_for_every_gateway_and_reads_old_records() {
        let Some(redis) = pforte_test_support::RedisServer::start() else {
            return;
        };
        let opts = SessionOptions {
            ttl: Duration::from_secs(100),
            ..SessionOptions::default()
        };
        // Two gateways on one redis.
        let one = Sessions::redis(&redis.url(), "t:", opts.clone()).unwrap();
        let two = Sessions::redis(&redis.url(), "t:", opts).unwrap();
        let url = "http://127.0.0.1:9001/mcp";
        assert_eq!(
            one.bind("s1", h("alice"), Some(url)).await.unwrap(),
            Binding::owner(Some(url.into()))
        );
        assert_eq!(
            two.check("s1", h("alice")).await.unwrap(),
            Binding::owner(Some(url.into()))
        );
        assert_eq!(two.check("s1", h("bob")).await.unwrap(), Binding::FOREIGN);
        // The first binding wins on the other gateway too.
        assert_eq!(
            two.bind("s1", h("alice"), Some("http://127.0.0.1:9002/mcp"))
                .await
                .unwrap(),
            Binding::owner(Some(url.into()))
        );
        assert_eq!(
            two.bind("s1", h("bob"), Some(url)).await.unwrap(),
            Binding::FOREIGN
        );
        assert_eq!(one.count("alice").await.unwrap(), 1);

        let Backend::Redis(r) = &one.backend else {
            unreachable!()
        };
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        // The record is one key with the session's TTL; an owner's use slides it (ttl/4).
        let ttl: i64 = redis::cmd("TTL")
            .arg(r.key("s1"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!((90..=100).contains(&ttl), "{ttl}");
        let _: () = redis::cmd("EXPIRE")
            .arg(r.key("s1"))
            .arg(50)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            one.check("s1", h("bob")).await.unwrap(),
            Binding::FOREIGN,
            "a foreign check does not slide"
        );
        let ttl: i64 = redis::cmd("TTL")
            .arg(r.key("s1"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl <= 50, "{ttl}");
        assert_eq!(
            one.check("s1", h("alice")).await.unwrap(),
            Binding::owner(Some(url.into()))
        );
        let ttl: i64 = redis::cmd("TTL")
            .arg(r.key("s1"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 90, "slid: {ttl}");

        // A record from before instances were kept: the owner alone.
        let _: () = redis::cmd("SET")
            .arg(r.key("old"))
            .arg("alice")
            .arg("EX")
            .arg(100)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            two.check("old", h("alice")).await.unwrap(),
            Binding::owner(None)
        );
        assert_eq!(two.check("old", h("bob")).await.unwrap(), Binding::FOREIGN);
        assert_eq!(
            two.bind("old", h("alice"), Some(url)).await.unwrap(),
            Binding::owner(None)
        );

        // Forget compares the owner part: only the owner removes a record with an instance.
        one.forget("s1", h("bob")).await.unwrap();
        assert_eq!(
            two.check("s1", h("alice")).await.unwrap().ownership,
            Ownership::Owner
        );
        two.forget("s1", h("alice")).await.unwrap();
        assert_eq!(one.check("s1", h("alice")).await.unwrap(), Binding::UNKNOWN);
        assert_eq!(one.count("alice").await.unwrap(), 0);
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
        assert!(sessions.check("s", h("a")).await.is_err());
        assert!(sessions.bind("s", h("a"), None).await.is_err());
    }
}
