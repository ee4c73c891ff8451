//! Session bindings in redis, shared by every gateway on it: one key per session (its record
//! `owner` or `owner\ninstance`), a sorted set of live sessions per person scored by last use +
//! ttl (so its lowest is the least recently used), Lua scripts that bind, check (sliding the
//! expiry), count, make room at a cap and forget atomically, on redis's clock.

use redis::Script;

use super::{Binding, Holder, Key, SessionError, SessionOptions, key};

/// The redis value of a record: the owner, then `\n` and the instance when there is one.
pub(super) fn encode(owner: &str, instance: Option<&str>) -> String {
    match instance {
        Some(i) => format!("{owner}\n{i}"),
        None => owner.to_owned(),
    }
}

/// A redis value → (owner, instance), split at the last newline (as the Lua scripts do); a
/// value without one is an owner alone (also every record written before instances were
/// kept).
pub(super) fn decode(value: &str) -> (&str, Option<&str>) {
    match value.rsplit_once('\n') {
        Some((owner, instance)) if !instance.is_empty() => (owner, Some(instance)),
        Some((owner, _)) => (owner, None),
        None => (value, None),
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
local now = tonumber(redis.call('TIME')[1])
redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[3]), KEYS[1])
local left = redis.call('TTL', KEYS[1])
if left >= 0 and left <= tonumber(ARGV[2]) then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), KEYS[1])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return v
";

/// Makes room in the person's set `KEYS[1]` for one more session under the cap `ARGV[1]`:
/// while it holds that many, its least recently used member that is not among `ARGV[3..]`
/// (this gateway's sessions with a call in flight or an open stream) is deleted with its
/// record — nothing when too few are idle. Returns `{'1', evicted…}` with room, `{'0'}` when every member is busy. `ARGV[2]` is
/// the ttl, to tell each evicted session's idle seconds (`{'1', key, idle, key, idle, …}`).
const MAKE_ROOM: &str = r"
local now = tonumber(redis.call('TIME')[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local max = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local busy = {}
for i = 3, #ARGV do busy[ARGV[i]] = true end
local out = {'1'}
local n = redis.call('ZCARD', KEYS[1])
if n < max then return out end
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local idle = {}
for i = 1, #members, 2 do
  if not busy[members[i]] then table.insert(idle, i) end
end
local needed = n - max + 1
if #idle < needed then return {'0'} end
for j = 1, needed do
  local i = idle[j]
  local m = members[i]
  redis.call('DEL', m)
  redis.call('ZREM', KEYS[1], m)
  table.insert(out, m)
  table.insert(out, tostring(math.max(0, now - (tonumber(members[i + 1]) - ttl))))
end
return out
";

pub(super) struct RedisSessions {
    conn: pforte_redis::Redis,
    prefix: String,
    ttl_secs: u64,
    bind: Script,
    check: Script,
    count: Script,
    forget: Script,
    make_room: Script,
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
    pub(super) fn connect(
        url: &str,
        prefix: &str,
        opts: &SessionOptions,
    ) -> Result<Self, SessionError> {
        let conn = pforte_redis::Redis::open(url).map_err(unavailable)?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            ttl_secs: opts.ttl.as_secs().max(1),
            bind: Script::new(BIND),
            check: Script::new(CHECK),
            count: Script::new(COUNT),
            forget: Script::new(FORGET),
            make_room: Script::new(MAKE_ROOM),
        })
    }

    pub(super) fn key(&self, session_id: &str) -> String {
        self.record_key(&key(session_id))
    }

    /// The record's redis key of the session hashed to `key`.
    pub(super) fn record_key(&self, key: &Key) -> String {
        format!("{}session:{}", self.prefix, hex::encode(key))
    }

    /// The session hash of a record's redis key.
    fn hash_of(&self, record_key: &str) -> Option<Key> {
        let hex = record_key
            .strip_prefix(&self.prefix)?
            .strip_prefix("session:")?;
        hex::decode(hex).ok()?.try_into().ok()
    }

    /// The set of `person`'s session keys.
    fn person_key(&self, person: &str) -> String {
        format!("{}person:{}", self.prefix, hex::encode(key(person)))
    }

    /// Seconds left at which the owner's use rewrites the expiry (ttl/4 after the last write).
    fn refresh_below(&self) -> u64 {
        self.ttl_secs - self.ttl_secs / 4
    }

    pub(super) async fn bind(
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

    pub(super) async fn check(
        &self,
        session_id: &str,
        holder: Holder<'_>,
    ) -> Result<Binding, SessionError> {
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

    /// Whether the session's record exists (no expiry slid).
    pub(super) async fn is_bound(&self, session_id: &str) -> Result<bool, SessionError> {
        let mut conn = self.conn.clone();
        redis::cmd("EXISTS")
            .arg(self.key(session_id))
            .query_async::<bool>(&mut conn)
            .await
            .map_err(unavailable)
    }

    pub(super) async fn forget(&self, key: &Key, holder: Holder<'_>) -> Result<(), SessionError> {
        let mut conn = self.conn.clone();
        self.forget
            .key(self.record_key(key))
            .key(self.person_key(holder.person))
            .arg(holder.owner)
            .invoke_async::<()>(&mut conn)
            .await
            .map_err(unavailable)
    }

    /// Makes room for one more of `person`'s sessions under `max`, sparing `busy` (hashes);
    /// `None` when every one is busy, else the evicted ones with their idle time in ms.
    pub(super) async fn make_room(
        &self,
        person: &str,
        max: usize,
        busy: &[Key],
    ) -> Result<Option<Vec<(Key, Option<u64>)>>, SessionError> {
        let mut conn = self.conn.clone();
        let mut call = self.make_room.key(self.person_key(person));
        call.arg(max).arg(self.ttl_secs);
        for k in busy {
            call.arg(self.record_key(k));
        }
        let out: Vec<String> = call.invoke_async(&mut conn).await.map_err(unavailable)?;
        if out.first().map(String::as_str) != Some("1") {
            return Ok(None);
        }
        Ok(Some(
            out.get(1..)
                .unwrap_or_default()
                .chunks(2)
                .filter_map(|pair| {
                    let key = self.hash_of(pair.first()?)?;
                    let idle = pair.get(1).and_then(|s| s.parse::<u64>().ok());
                    Some((key, idle.map(|s| s * 1000)))
                })
                .collect(),
        ))
    }

    pub(super) async fn count(&self, person: &str) -> Result<usize, SessionError> {
        let mut conn = self.conn.clone();
        self.count
            .key(self.person_key(person))
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)
    }
}
