//! The vault in redis, shared by every gateway on it: one hash per person (`p:PERSON`, a field
//! per route holding the row as JSON), pending records as keys with a TTL taken by `GETDEL`,
//! and refresh locks as `SET NX PX` leases released only by their owner (a Lua check-and-del).

use std::time::Duration;

use redis::{AsyncCommands as _, Script};

use super::{
    VaultError,
    backend::{Backend, Row},
};

/// Writes the row with the stored version + 1 and returns it.
const PUT: &str = r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
local version = 1
if old then version = cjson.decode(old)['version'] + 1 end
local row = cjson.decode(ARGV[2])
row['version'] = version
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(row))
return version
";

/// Replaces the seal if the stored row still carries the old one.
const RESEAL: &str = r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return 0 end
local row = cjson.decode(old)
if row['sealed'] ~= ARGV[2] then return 0 end
row['sealed'] = ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(row))
return 1
";

const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

pub(super) struct RedisBackend {
    conn: pforte_redis::Redis,
    prefix: String,
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, VaultError> {
    serde_json::to_string(v).map_err(|e| VaultError::Corrupt(e.to_string()))
}

fn row(text: &str) -> Result<Row, VaultError> {
    serde_json::from_str(text).map_err(|e| VaultError::Corrupt(e.to_string()))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisBackend {
    /// Connects lazily (the gateway starts while redis is down; calls then fail fast).
    pub(super) fn open(url: &str, prefix: &str) -> Result<Self, VaultError> {
        let conn = pforte_redis::Redis::open(url)?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
        })
    }

    fn person_key(&self, person: &str) -> String {
        format!("{}p:{person}", self.prefix)
    }

    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}:{id}", self.prefix)
    }

    /// Every person hash.
    async fn person_keys(&self) -> Result<Vec<String>, VaultError> {
        let mut c = self.conn.clone();
        let pattern = format!("{}p:*", self.prefix);
        let mut keys = Vec::new();
        let mut iter: redis::AsyncIter<'_, String> = c.scan_match(&pattern).await?;
        while let Some(k) = futures::StreamExt::next(&mut iter).await {
            keys.push(k?);
        }
        Ok(keys)
    }
}

#[async_trait::async_trait]
impl Backend for RedisBackend {
    async fn get(&self, route: &str, person: &str) -> Result<Option<Row>, VaultError> {
        let mut c = self.conn.clone();
        let text: Option<String> = c.hget(self.person_key(person), route).await?;
        text.as_deref().map(row).transpose()
    }

    async fn put(&self, r: Row) -> Result<u64, VaultError> {
        let mut c = self.conn.clone();
        let version: u64 = Script::new(PUT)
            .key(self.person_key(&r.person))
            .arg(&r.route)
            .arg(json(&r)?)
            .invoke_async(&mut c)
            .await?;
        Ok(version)
    }

    async fn reseal(&self, r: &Row, sealed: String) -> Result<bool, VaultError> {
        let mut c = self.conn.clone();
        let done: u8 = Script::new(RESEAL)
            .key(self.person_key(&r.person))
            .arg(&r.route)
            .arg(&r.sealed)
            .arg(sealed)
            .invoke_async(&mut c)
            .await?;
        Ok(done == 1)
    }

    async fn remove(&self, route: &str, person: &str) -> Result<bool, VaultError> {
        let mut c = self.conn.clone();
        let n: u64 = c.hdel(self.person_key(person), route).await?;
        Ok(n == 1)
    }

    async fn remove_person(&self, person: &str) -> Result<usize, VaultError> {
        let mut c = self.conn.clone();
        let key = self.person_key(person);
        let n: usize = c.hlen(&key).await?;
        let _: u64 = c.del(&key).await?;
        Ok(n)
    }

    async fn list(&self, person: &str) -> Result<Vec<Row>, VaultError> {
        let mut c = self.conn.clone();
        let all: Vec<(String, String)> = c.hgetall(self.person_key(person)).await?;
        all.iter().map(|(_, v)| row(v)).collect()
    }

    async fn all(&self) -> Result<Vec<Row>, VaultError> {
        let mut out = Vec::new();
        for key in self.person_keys().await? {
            let mut c = self.conn.clone();
            let all: Vec<(String, String)> = c.hgetall(&key).await?;
            for (_, v) in all {
                out.push(row(&v)?);
            }
        }
        Ok(out)
    }

    async fn put_pending(
        &self,
        id: &str,
        sealed: &str,
        _until_ms: u64,
        ttl: Duration,
    ) -> Result<(), VaultError> {
        let mut c = self.conn.clone();
        let _: () = c.pset_ex(self.key("pending", id), sealed, ms(ttl)).await?;
        Ok(())
    }

    async fn take_pending(&self, id: &str, _now_ms: u64) -> Result<Option<String>, VaultError> {
        let mut c = self.conn.clone();
        Ok(c.get_del(self.key("pending", id)).await?)
    }

    async fn try_lock(
        &self,
        name: &str,
        owner: &str,
        _until_ms: u64,
        _now_ms: u64,
        ttl: Duration,
    ) -> Result<bool, VaultError> {
        let mut c = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(self.key("lock", name))
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(ms(ttl))
            .query_async(&mut c)
            .await?;
        Ok(set.is_some())
    }

    async fn unlock(&self, name: &str, owner: &str) -> Result<(), VaultError> {
        let mut c = self.conn.clone();
        let _: u8 = Script::new(UNLOCK)
            .key(self.key("lock", name))
            .arg(owner)
            .invoke_async(&mut c)
            .await?;
        Ok(())
    }
}
