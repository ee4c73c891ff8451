//! The redis store, shared by several gateways: `ConnectionManager`, Lua scripts for every
//! read-modify-write that must be atomic.
//!
//! Layout under a key prefix (default `pforte:oauth:`):
//! - `key`: the server key;
//! - `user:<name>` (JSON) and the set `users`;
//! - `client:<id>` (JSON) and the sorted set `clients`, scored by last use;
//! - `code:<hash>`, `grant:<family>`, `access:<hash>`, `refresh:<hash>`: hashes with the
//!   immutable JSON in `data` and mutable state in their own fields; the set `grants`;
//! - `session:<hash>` (JSON);
//! - `assertion:<hash>`: a spent ID-JAG (`SET NX` with the assertion's expiry);
//! - `identity:<hash>`: the user an external identity (issuer + subject) is linked to.
//!
//! Keys expire by `EXPIRE` relative to the caller's clock, with slack so that an expired token
//! is still reported as expired for a while. The scripts touch keys derived from their
//! arguments, so this store targets a single redis (or a primary with replicas), not a cluster.

use async_trait::async_trait;
use redis::{AsyncCommands, Script};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

use super::{CODE_RETENTION_SECS, NewGrant, Rotation, Store, StoreResult};
use crate::error::StoreError;
use crate::model::{
    AccessRecord, ClientRecord, CodeRecord, GrantRecord, RefreshRecord, RotateOutcome,
    SessionRecord, UserRecord,
};

/// The key prefix the gateway uses unless configured otherwise.
pub const DEFAULT_PREFIX: &str = "pforte:oauth:";

/// Keys outlive the expiry they carry by this much.
const TTL_SLACK_SECS: u64 = 3600;

// KEYS: code, grant, access, refresh, the grants set. ARGV: grant data, last_used_at,
// expires_at, grant ttl, family id, access data, access revoked, access ttl, refresh data,
// refresh ttl, revoked_at ('' for none). Marking the code used and creating its grant is one
// step: a replay never finds the code spent while the grant is missing.
const REDEEM_CODE: &str = r"
if redis.call('HGET', KEYS[1], 'used') ~= '0' then return 0 end
redis.call('HSET', KEYS[1], 'used', '1')
redis.call('HSET', KEYS[2], 'data', ARGV[1], 'last_used_at', ARGV[2], 'expires_at', ARGV[3])
if ARGV[11] ~= '' then redis.call('HSET', KEYS[2], 'revoked_at', ARGV[11]) end
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('SADD', KEYS[5], ARGV[5])
redis.call('HSET', KEYS[3], 'data', ARGV[6], 'family_id', ARGV[5], 'revoked', ARGV[7])
redis.call('EXPIRE', KEYS[3], ARGV[8])
redis.call('HSET', KEYS[4], 'data', ARGV[9], 'family_id', ARGV[5])
redis.call('EXPIRE', KEYS[4], ARGV[10])
return 1";

const REVOKE_GRANT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HEXISTS', KEYS[1], 'revoked_at') == 0 then
  redis.call('HSET', KEYS[1], 'revoked_at', ARGV[1])
  return 1
end
return 0";

const GET_ACCESS: &str = r"
local a = redis.call('HMGET', KEYS[1], 'data', 'revoked', 'family_id')
if not a[1] then return false end
local g = ARGV[1] .. 'grant:' .. a[3]
local revoked = 1
if redis.call('EXISTS', g) == 1 and redis.call('HEXISTS', g, 'revoked_at') == 0 then revoked = 0 end
return {a[1], a[2], revoked}";

// KEYS[1] old refresh. ARGV: prefix, now, access hash, access data, access ttl,
// refresh hash, refresh data, refresh ttl, refresh expires_at
const ROTATE: &str = r"
local fam = redis.call('HGET', KEYS[1], 'family_id')
if not fam then return {'not_found'} end
local g = ARGV[1] .. 'grant:' .. fam
if redis.call('EXISTS', g) == 0 or redis.call('HEXISTS', g, 'revoked_at') == 1 then
  return {'revoked'}
end
local rot = redis.call('HGET', KEYS[1], 'rotated_at')
if rot then return {'rotated', rot} end
redis.call('HSET', KEYS[1], 'rotated_at', ARGV[2])
local a = ARGV[1] .. 'access:' .. ARGV[3]
redis.call('HSET', a, 'data', ARGV[4], 'family_id', fam, 'revoked', '0')
redis.call('EXPIRE', a, ARGV[5])
local r = ARGV[1] .. 'refresh:' .. ARGV[6]
redis.call('HSET', r, 'data', ARGV[7], 'family_id', fam)
redis.call('EXPIRE', r, ARGV[8])
redis.call('HSET', g, 'last_used_at', ARGV[2])
if tonumber(ARGV[9]) > tonumber(redis.call('HGET', g, 'expires_at') or '0') then
  redis.call('HSET', g, 'expires_at', ARGV[9])
  redis.call('EXPIRE', g, ARGV[8])
end
return {'ok'}";

// KEYS[1] grant. ARGV[1] when used. Only moves last use forward, only on an existing grant.
const TOUCH_GRANT: &str = r"
local last = redis.call('HGET', KEYS[1], 'last_used_at')
if last and tonumber(last) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'last_used_at', ARGV[1])
end
return 0";

struct Scripts {
    touch_grant: Script,
    redeem_code: Script,
    revoke_grant: Script,
    get_access: Script,
    rotate: Script,
}

/// redis-backed [`Store`].
#[derive(Clone)]
pub struct RedisStore {
    conn: pforte_redis::Redis,
    prefix: String,
    scripts: Arc<Scripts>,
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        StoreError::Unavailable(format!("redis: {e}"))
    }
}

fn enc<T: Serialize>(v: &T) -> StoreResult<String> {
    Ok(serde_json::to_string(v)?)
}

fn dec<T: DeserializeOwned>(s: &str) -> StoreResult<T> {
    Ok(serde_json::from_str(s)?)
}

fn ttl(expires_at: u64, now: u64) -> u64 {
    expires_at.saturating_sub(now) + TTL_SLACK_SECS
}

fn num(s: Option<String>) -> Option<u64> {
    s.and_then(|v| v.parse().ok())
}

impl RedisStore {
    /// Reads user `name`, applies `change` and writes it back only if it still exists; `false`
    /// when there is no such user.
    async fn change_user(
        &self,
        name: &str,
        change: impl FnOnce(&mut UserRecord) + Send,
    ) -> StoreResult<bool> {
        let Some(mut user) = self.get_user(name).await? else {
            return Ok(false);
        };
        change(&mut user);
        self.update_user(&user).await
    }

    /// A store on the redis at `url` (e.g. `redis://127.0.0.1:6379/0`), keys under `prefix`.
    /// Connects lazily: the gateway starts even while redis is down, and every operation then
    /// fails fast with [`StoreError::Unavailable`] until redis is back.
    pub fn connect(url: &str, prefix: &str) -> StoreResult<Self> {
        let conn = pforte_redis::Redis::open(url)?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            scripts: Arc::new(Scripts {
                touch_grant: Script::new(TOUCH_GRANT),
                redeem_code: Script::new(REDEEM_CODE),
                revoke_grant: Script::new(REVOKE_GRANT),
                get_access: Script::new(GET_ACCESS),
                rotate: Script::new(ROTATE),
            }),
        })
    }

    fn k(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}:{id}", self.prefix)
    }

    fn set_key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn c(&self) -> pforte_redis::Redis {
        self.conn.clone()
    }

    /// Every key matching `pattern` under the prefix (SCAN: for the rare whole-store passes).
    async fn scan(&self, pattern: &str) -> StoreResult<Vec<String>> {
        let mut c = self.c();
        let mut cursor: u64 = 0;
        let mut out = Vec::new();
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}{pattern}", self.prefix))
                .arg("COUNT")
                .arg(500)
                .query_async(&mut c)
                .await?;
            out.extend(keys);
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }

    /// Rewrites the `username` inside the JSON at `key` (in the hash field `data`, or the whole
    /// string value with its expiry kept) from `old` to `new`.
    async fn rename_in(&self, key: &str, hash: bool, old: &str, new: &str) -> StoreResult<()> {
        let mut c = self.c();
        let data: Option<String> = if hash {
            c.hget(key, "data").await?
        } else {
            c.get(key).await?
        };
        let Some(data) = data else { return Ok(()) };
        let mut v: serde_json::Value = dec(&data)?;
        if v.get("username").and_then(serde_json::Value::as_str) != Some(old) {
            return Ok(());
        }
        v["username"] = new.into();
        let data = enc(&v)?;
        if hash {
            let _: i64 = c.hset(key, "data", data).await?;
        } else {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(data)
                .arg("KEEPTTL")
                .query_async(&mut c)
                .await?;
        }
        Ok(())
    }

    async fn revoke_grants_matching(
        &self,
        now: u64,
        pred: impl Fn(&GrantRecord) -> bool + Send,
    ) -> StoreResult<()> {
        for g in self.list_grants().await? {
            if g.revoked_at.is_none() && pred(&g) {
                self.revoke_grant(&g.family_id, now).await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn server_key(&self, candidate: [u8; 32]) -> StoreResult<[u8; 32]> {
        let key = self.set_key("key");
        let mut c = self.c();
        let _: bool = c.set_nx(&key, hex::encode(candidate)).await?;
        let stored: String = c.get(&key).await?;
        let bytes = hex::decode(stored).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        bytes
            .try_into()
            .map_err(|_| StoreError::Corrupt("server key length".into()))
    }

    async fn create_user(&self, user: &UserRecord) -> StoreResult<bool> {
        let mut c = self.c();
        let created: bool = c.set_nx(self.k("user", &user.username), enc(user)?).await?;
        if created {
            let _: i64 = c.sadd(self.set_key("users"), &user.username).await?;
        }
        Ok(created)
    }

    async fn set_password(&self, name: &str, hash: &str, now: u64) -> StoreResult<bool> {
        self.change_user(name, |user| {
            user.password_hash = hash.to_owned();
            user.updated_at = now;
        })
        .await
    }

    async fn update_user(&self, user: &UserRecord) -> StoreResult<bool> {
        let opts = redis::SetOptions::default().conditional_set(redis::ExistenceCheck::XX);
        let done: Option<String> = self
            .c()
            .set_options(self.k("user", &user.username), enc(user)?, opts)
            .await?;
        Ok(done.is_some())
    }

    async fn get_user(&self, username: &str) -> StoreResult<Option<UserRecord>> {
        let data: Option<String> = self.c().get(self.k("user", username)).await?;
        data.map(|d| dec(&d)).transpose()
    }

    async fn list_users(&self) -> StoreResult<Vec<UserRecord>> {
        let mut names: Vec<String> = self.c().smembers(self.set_key("users")).await?;
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            if let Some(u) = self.get_user(&n).await? {
                out.push(u);
            }
        }
        Ok(out)
    }

    async fn delete_user(&self, username: &str, now: u64) -> StoreResult<bool> {
        let mut c = self.c();
        let n: i64 = c.del(self.k("user", username)).await?;
        let _: i64 = c.srem(self.set_key("users"), username).await?;
        self.revoke_grants_matching(now, |g| g.username == username)
            .await?;
        Ok(n == 1)
    }

    async fn create_client(&self, client: &ClientRecord) -> StoreResult<()> {
        let mut c = self.c();
        let _: () = redis::pipe()
            .atomic()
            .set(self.k("client", &client.client_id), enc(client)?)
            .zadd(
                self.set_key("clients"),
                &client.client_id,
                client.last_used_at,
            )
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    async fn get_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>> {
        let mut c = self.c();
        let (data, used): (Option<String>, Option<u64>) = redis::pipe()
            .get(self.k("client", client_id))
            .zscore(self.set_key("clients"), client_id)
            .query_async(&mut c)
            .await?;
        data.map(|d| {
            let mut rec: ClientRecord = dec(&d)?;
            if let Some(u) = used {
                rec.last_used_at = u;
            }
            Ok(rec)
        })
        .transpose()
    }

    async fn list_clients(&self) -> StoreResult<Vec<ClientRecord>> {
        let mut ids: Vec<String> = self.c().zrange(self.set_key("clients"), 0, -1).await?;
        ids.sort();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(c) = self.get_client(&id).await? {
                out.push(c);
            }
        }
        Ok(out)
    }

    async fn delete_client(&self, client_id: &str, now: u64) -> StoreResult<bool> {
        let mut c = self.c();
        let n: i64 = c.del(self.k("client", client_id)).await?;
        let _: i64 = c.zrem(self.set_key("clients"), client_id).await?;
        self.revoke_grants_matching(now, |g| g.client_id == client_id)
            .await?;
        Ok(n == 1)
    }

    async fn touch_client(&self, client_id: &str, now: u64) -> StoreResult<()> {
        let mut c = self.c();
        let _: redis::Value = redis::cmd("ZADD")
            .arg(self.set_key("clients"))
            .arg("XX")
            .arg("GT")
            .arg(now)
            .arg(client_id)
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    async fn clients_unused_since(&self, cutoff: u64) -> StoreResult<Vec<String>> {
        let ids: Vec<String> = self
            .c()
            .zrangebyscore(self.set_key("clients"), "-inf", format!("({cutoff}"))
            .await?;
        Ok(ids)
    }

    async fn put_code(&self, code: &CodeRecord) -> StoreResult<()> {
        let key = self.k("code", &code.code_hash);
        let secs = ttl(code.expires_at, code.issued_at) + CODE_RETENTION_SECS;
        let mut c = self.c();
        let _: () = redis::pipe()
            .atomic()
            .hset_multiple(
                &key,
                &[
                    ("data", enc(code)?),
                    ("used", if code.used { "1" } else { "0" }.to_owned()),
                ],
            )
            .expire(&key, i64::try_from(secs).unwrap_or(i64::MAX))
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    async fn get_code(&self, code_hash: &str) -> StoreResult<Option<CodeRecord>> {
        let (data, used): (Option<String>, Option<String>) = self
            .c()
            .hmget(self.k("code", code_hash), &["data", "used"])
            .await?;
        data.map(|d| {
            let mut code: CodeRecord = dec(&d)?;
            code.used = used.as_deref() == Some("1");
            Ok(code)
        })
        .transpose()
    }

    async fn redeem_code(&self, code_hash: &str, new: NewGrant<'_>) -> StoreResult<bool> {
        let (grant, access, refresh) = (new.grant, new.access, new.refresh);
        let mut c = self.c();
        let n: i64 = self
            .scripts
            .redeem_code
            .key(self.k("code", code_hash))
            .key(self.k("grant", &grant.family_id))
            .key(self.k("access", &access.token_hash))
            .key(self.k("refresh", &refresh.token_hash))
            .key(self.set_key("grants"))
            .arg(enc(grant)?)
            .arg(grant.last_used_at)
            .arg(grant.expires_at)
            .arg(ttl(grant.expires_at, grant.created_at))
            .arg(&grant.family_id)
            .arg(enc(access)?)
            .arg(if access.revoked { "1" } else { "0" })
            .arg(ttl(access.expires_at, access.issued_at))
            .arg(enc(refresh)?)
            .arg(ttl(refresh.expires_at, refresh.issued_at))
            .arg(grant.revoked_at.map(|r| r.to_string()).unwrap_or_default())
            .invoke_async(&mut c)
            .await?;
        Ok(n == 1)
    }

    async fn create_grant(&self, new: NewGrant<'_>) -> StoreResult<()> {
        let (grant, access, refresh) = (new.grant, new.access, new.refresh);
        let gk = self.k("grant", &grant.family_id);
        let ak = self.k("access", &access.token_hash);
        let rk = self.k("refresh", &refresh.token_hash);
        let secs = |exp: u64, now: u64| i64::try_from(ttl(exp, now)).unwrap_or(i64::MAX);
        let mut fields = vec![
            ("data", enc(grant)?),
            ("last_used_at", grant.last_used_at.to_string()),
            ("expires_at", grant.expires_at.to_string()),
        ];
        if let Some(r) = grant.revoked_at {
            fields.push(("revoked_at", r.to_string()));
        }
        let mut c = self.c();
        let _: () = redis::pipe()
            .atomic()
            .hset_multiple(&gk, &fields)
            .expire(&gk, secs(grant.expires_at, grant.created_at))
            .sadd(self.set_key("grants"), &grant.family_id)
            .hset_multiple(
                &ak,
                &[
                    ("data", enc(access)?),
                    ("family_id", access.family_id.clone()),
                    ("revoked", if access.revoked { "1" } else { "0" }.to_owned()),
                ],
            )
            .expire(&ak, secs(access.expires_at, access.issued_at))
            .hset_multiple(
                &rk,
                &[
                    ("data", enc(refresh)?),
                    ("family_id", refresh.family_id.clone()),
                ],
            )
            .expire(&rk, secs(refresh.expires_at, refresh.issued_at))
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    async fn get_grant(&self, family_id: &str) -> StoreResult<Option<GrantRecord>> {
        let (data, last, exp, rev): (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        ) = self
            .c()
            .hmget(
                self.k("grant", family_id),
                &["data", "last_used_at", "expires_at", "revoked_at"],
            )
            .await?;
        data.map(|d| {
            let mut g: GrantRecord = dec(&d)?;
            g.last_used_at = num(last).unwrap_or(g.last_used_at);
            g.expires_at = num(exp).unwrap_or(g.expires_at);
            g.revoked_at = num(rev);
            Ok(g)
        })
        .transpose()
    }

    async fn list_grants(&self) -> StoreResult<Vec<GrantRecord>> {
        let ids: Vec<String> = self.c().smembers(self.set_key("grants")).await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(g) = self.get_grant(&id).await? {
                out.push(g);
            }
        }
        out.sort_by(|a, b| (a.created_at, &a.family_id).cmp(&(b.created_at, &b.family_id)));
        Ok(out)
    }

    async fn revoke_grant(&self, family_id: &str, now: u64) -> StoreResult<bool> {
        let mut c = self.c();
        let n: i64 = self
            .scripts
            .revoke_grant
            .key(self.k("grant", family_id))
            .arg(now)
            .invoke_async(&mut c)
            .await?;
        Ok(n == 1)
    }

    async fn get_access(&self, token_hash: &str) -> StoreResult<Option<(AccessRecord, bool)>> {
        let mut c = self.c();
        let row: Option<(String, String, i64)> = self
            .scripts
            .get_access
            .key(self.k("access", token_hash))
            .arg(&self.prefix)
            .invoke_async(&mut c)
            .await?;
        row.map(|(d, revoked, grant_revoked)| {
            let mut a: AccessRecord = dec(&d)?;
            a.revoked = revoked == "1";
            Ok((a, grant_revoked == 1))
        })
        .transpose()
    }

    async fn revoke_access(&self, token_hash: &str) -> StoreResult<bool> {
        let key = self.k("access", token_hash);
        let mut c = self.c();
        // HSET XX semantics: only when the token exists.
        let exists: bool = c.exists(&key).await?;
        if exists {
            let _: i64 = c.hset(&key, "revoked", "1").await?;
        }
        Ok(exists)
    }

    async fn get_refresh(&self, token_hash: &str) -> StoreResult<Option<RefreshRecord>> {
        let (data, rot): (Option<String>, Option<String>) = self
            .c()
            .hmget(self.k("refresh", token_hash), &["data", "rotated_at"])
            .await?;
        data.map(|d| {
            let mut r: RefreshRecord = dec(&d)?;
            r.rotated_at = num(rot);
            Ok(r)
        })
        .transpose()
    }

    async fn rotate_refresh(&self, rotation: Rotation<'_>) -> StoreResult<RotateOutcome> {
        let Rotation {
            old_hash,
            now,
            access,
            refresh,
        } = rotation;
        let mut c = self.c();
        let reply: Vec<String> = self
            .scripts
            .rotate
            .key(self.k("refresh", old_hash))
            .arg(&self.prefix)
            .arg(now)
            .arg(&access.token_hash)
            .arg(enc(access)?)
            .arg(ttl(access.expires_at, now))
            .arg(&refresh.token_hash)
            .arg(enc(refresh)?)
            .arg(ttl(refresh.expires_at, now))
            .arg(refresh.expires_at)
            .invoke_async(&mut c)
            .await?;
        Ok(match reply.first().map(String::as_str) {
            Some("ok") => RotateOutcome::Rotated,
            Some("revoked") => RotateOutcome::FamilyRevoked,
            Some("rotated") => RotateOutcome::AlreadyRotated {
                rotated_at: num(reply.get(1).cloned()).unwrap_or(0),
            },
            _ => RotateOutcome::NotFound,
        })
    }

    async fn create_access_grant(
        &self,
        grant: &GrantRecord,
        access: &AccessRecord,
    ) -> StoreResult<()> {
        let gk = self.k("grant", &grant.family_id);
        let ak = self.k("access", &access.token_hash);
        let secs = |exp: u64, now: u64| i64::try_from(ttl(exp, now)).unwrap_or(i64::MAX);
        let mut fields = vec![
            ("data", enc(grant)?),
            ("last_used_at", grant.last_used_at.to_string()),
            ("expires_at", grant.expires_at.to_string()),
        ];
        if let Some(r) = grant.revoked_at {
            fields.push(("revoked_at", r.to_string()));
        }
        let mut c = self.c();
        let _: () = redis::pipe()
            .atomic()
            .hset_multiple(&gk, &fields)
            .expire(&gk, secs(grant.expires_at, grant.created_at))
            .sadd(self.set_key("grants"), &grant.family_id)
            .hset_multiple(
                &ak,
                &[
                    ("data", enc(access)?),
                    ("family_id", access.family_id.clone()),
                    ("revoked", if access.revoked { "1" } else { "0" }.to_owned()),
                ],
            )
            .expire(&ak, secs(access.expires_at, access.issued_at))
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    async fn touch_grants(&self, uses: &[(String, u64)]) -> StoreResult<()> {
        let mut c = self.c();
        for (family, at) in uses {
            let _: i64 = self
                .scripts
                .touch_grant
                .key(self.k("grant", family))
                .arg(*at)
                .invoke_async(&mut c)
                .await?;
        }
        Ok(())
    }

    async fn spend_assertion(&self, id_hash: &str, expires_at: u64, now: u64) -> StoreResult<bool> {
        let secs = expires_at.saturating_sub(now).max(1) + 60;
        let opts = redis::SetOptions::default()
            .conditional_set(redis::ExistenceCheck::NX)
            .with_expiration(redis::SetExpiry::EX(secs));
        let done: Option<String> = self
            .c()
            .set_options(self.k("assertion", id_hash), "1", opts)
            .await?;
        Ok(done.is_some())
    }

    async fn linked_user(&self, identity: &str) -> StoreResult<Option<String>> {
        Ok(self.c().get(self.k("identity", identity)).await?)
    }

    async fn link_identity(&self, identity: &str, username: &str) -> StoreResult<()> {
        let _: () = self.c().set(self.k("identity", identity), username).await?;
        Ok(())
    }

    // Not one atomic step (it walks every token): the new user is written first and the old
    // one deleted last, so a rename cut short is finished by the next call.
    async fn rename_user(&self, old: &str, new: &str, now: u64) -> StoreResult<bool> {
        let Some(mut user) = self.get_user(old).await? else {
            return Ok(false);
        };
        let same_person = |u: &UserRecord| match (&u.external, &user.external) {
            (Some(a), Some(b)) => a.issuer == b.issuer && a.subject == b.subject,
            _ => false,
        };
        if let Some(taken) = self.get_user(new).await? {
            if !same_person(&taken) {
                return Ok(false);
            }
        } else {
            user.username = new.to_owned();
            user.updated_at = now;
            if !self.create_user(&user).await? {
                return Ok(false);
            }
        }
        let grants: Vec<String> = self.c().smembers(self.set_key("grants")).await?;
        for family in grants {
            let key = self.k("grant", &family);
            self.rename_in(&key, true, old, new).await?;
        }
        for kind in ["access", "refresh", "code"] {
            for key in self.scan(&format!("{kind}:*")).await? {
                self.rename_in(&key, true, old, new).await?;
            }
        }
        for key in self.scan("session:*").await? {
            self.rename_in(&key, false, old, new).await?;
        }
        for key in self.scan("identity:*").await? {
            let mut c = self.c();
            let linked: Option<String> = c.get(&key).await?;
            if linked.as_deref() == Some(old) {
                let _: () = c.set(&key, new).await?;
            }
        }
        let mut c = self.c();
        let _: i64 = c.del(self.k("user", old)).await?;
        let _: i64 = c.srem(self.set_key("users"), old).await?;
        Ok(true)
    }

    async fn set_admin(&self, name: &str, admin: bool, now: u64) -> StoreResult<bool> {
        self.change_user(name, |user| {
            user.admin = admin;
            user.updated_at = now;
        })
        .await
    }

    async fn put_session(&self, session: &SessionRecord) -> StoreResult<()> {
        let secs = session.expires_at.saturating_sub(session.created_at).max(1);
        let _: () = self
            .c()
            .set_ex(
                self.k("session", &session.session_hash),
                enc(session)?,
                secs,
            )
            .await?;
        Ok(())
    }

    async fn get_session(&self, session_hash: &str) -> StoreResult<Option<SessionRecord>> {
        let data: Option<String> = self.c().get(self.k("session", session_hash)).await?;
        data.map(|d| dec(&d)).transpose()
    }

    async fn delete_session(&self, session_hash: &str) -> StoreResult<()> {
        let _: i64 = self.c().del(self.k("session", session_hash)).await?;
        Ok(())
    }

    async fn purge_expired(&self, now: u64) -> StoreResult<()> {
        // Keys expire by themselves; drop index entries whose key is gone or past expiry.
        let ids: Vec<String> = self.c().smembers(self.set_key("grants")).await?;
        for id in ids {
            let expired = match self.get_grant(&id).await? {
                None => true,
                Some(g) => g.expires_at < now,
            };
            if expired {
                let mut c = self.c();
                let _: i64 = c.srem(self.set_key("grants"), &id).await?;
                let _: i64 = c.del(self.k("grant", &id)).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pforte_test_support::RedisServer;

    #[tokio::test]
    async fn redis_passes_the_store_suite() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let store = RedisStore::connect(&server.url(), "test:").unwrap();
        crate::store::suite::run(&store).await;
    }

    #[tokio::test]
    async fn redis_down_is_unavailable_not_a_panic() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let url = server.url();
        drop(server);
        let store = RedisStore::connect(&url, "test:").unwrap();
        let err = store.get_access("x").await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    }
}
