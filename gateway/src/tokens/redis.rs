//! Static tokens in redis, for several gateways sharing one set: a hash of token records keyed
//! by the token's SHA-256, an index of active names, and a version counter that the gateways'
//! refreshers watch. Only hashes are stored, as in the embedded store.

use std::sync::Mutex;

use redis::{Commands as _, Connection, Script};

use super::{Entry, NewToken, StaticToken, StoreError, TokenSet, TokenSource, hash_token};

const TOKENS: &str = "pforte:static:tokens";
const NAMES: &str = "pforte:static:names";
const VERSION: &str = "pforte:static:version";

/// Adds a token unless an active one has the name: KEYS = names, tokens, version;
/// ARGV = name, hash hex, record JSON. Returns 1, or 0 when the name is taken.
const CREATE: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('INCR', KEYS[3])
return 1
";

/// Marks the active token called ARGV[1] revoked at ARGV[2]. Returns 1, or 0 if none.
const REVOKE: &str = r"
local hash = redis.call('HGET', KEYS[1], ARGV[1])
if not hash then return 0 end
local record = cjson.decode(redis.call('HGET', KEYS[2], hash))
record['revoked_at'] = tonumber(ARGV[2])
redis.call('HSET', KEYS[2], hash, cjson.encode(record))
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[3])
return 1
";

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    name: String,
    #[serde(deserialize_with = "list")]
    scopes: Vec<String>,
    /// Absent when empty (the empty list of every token without `--route`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "list"
    )]
    routes: Vec<String>,
    created_at: u64,
    expires_at: Option<u64>,
    revoked_at: Option<u64>,
}

/// A list of strings as stored: the revoke script's cjson re-encodes an empty list as `{}`.
fn list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Stored {
        List(Vec<String>),
        Empty(std::collections::BTreeMap<String, serde_json::Value>),
    }
    match serde::Deserialize::deserialize(d)? {
        Stored::List(list) => Ok(list),
        Stored::Empty(map) if map.is_empty() => Ok(Vec::new()),
        Stored::Empty(_) => Err(serde::de::Error::custom("expected a list of strings")),
    }
}

/// The redis-backed token store (blocking client: the admin CLI and the refresher thread).
pub(crate) struct RedisTokenStore {
    client: pforte_redis::Blocking,
    conn: Mutex<Option<Connection>>,
}

impl std::fmt::Debug for RedisTokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTokenStore").finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Redis(e.to_string())
}

impl RedisTokenStore {
    /// Connects lazily; operations fail with [`StoreError::Redis`] while redis is down.
    pub(crate) fn open(url: &str) -> Result<Self, StoreError> {
        Ok(Self {
            client: pforte_redis::Blocking::open(url).map_err(err)?,
            conn: Mutex::new(None),
        })
    }

    /// Runs `f` on the connection, reconnecting when it is missing or broke.
    fn with<T>(
        &self,
        f: impl Fn(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let mut guard = self.conn.lock().map_err(|_| StoreError::Poisoned)?;
        if let Some(conn) = guard.as_mut() {
            match f(conn) {
                Ok(v) => return Ok(v),
                Err(e) if !pforte_redis::lost(&e) => {
                    return Err(err(e));
                }
                Err(_) => *guard = None,
            }
        }
        let mut conn = self.client.connect().map_err(err)?;
        let result = f(&mut conn).map_err(err);
        *guard = Some(conn);
        result
    }

    fn records(&self) -> Result<Vec<(String, Record)>, StoreError> {
        let all: Vec<(String, String)> = self.with(|c| c.hgetall(TOKENS))?;
        all.into_iter()
            .map(|(hash, json)| Ok((hash, serde_json::from_str(&json).map_err(err)?)))
            .collect()
    }
}

impl TokenSource for RedisTokenStore {
    fn create(
        &self,
        new: &NewToken<'_>,
        now: u64,
        rng: &mut dyn rand::RngCore,
    ) -> Result<String, StoreError> {
        let token = new.mint(rng)?;
        let record = serde_json::to_string(&Record {
            name: new.name.to_owned(),
            scopes: new.scopes.to_vec(),
            routes: new.routes.to_vec(),
            created_at: now,
            expires_at: new.expires_at,
            revoked_at: None,
        })
        .map_err(err)?;
        let hash = hex::encode(hash_token(&token));
        let script = Script::new(CREATE);
        let created: i64 = self.with(|c| {
            script
                .key(NAMES)
                .key(TOKENS)
                .key(VERSION)
                .arg(new.name)
                .arg(&hash)
                .arg(&record)
                .invoke(c)
        })?;
        if created == 1 {
            Ok(token)
        } else {
            Err(StoreError::NameTaken(new.name.to_owned()))
        }
    }

    fn list(&self) -> Result<Vec<StaticToken>, StoreError> {
        let mut tokens: Vec<StaticToken> = self
            .records()?
            .into_iter()
            .map(|(_, r)| StaticToken {
                name: r.name,
                scopes: r.scopes,
                routes: r.routes,
                created_at: r.created_at,
                expires_at: r.expires_at,
                revoked_at: r.revoked_at,
            })
            .collect();
        tokens.sort_by_key(|t| std::cmp::Reverse(t.created_at));
        Ok(tokens)
    }

    fn revoke(&self, name: &str, now: u64) -> Result<bool, StoreError> {
        let script = Script::new(REVOKE);
        let n: i64 = self.with(|c| {
            script
                .key(NAMES)
                .key(TOKENS)
                .key(VERSION)
                .arg(name)
                .arg(now)
                .invoke(c)
        })?;
        Ok(n == 1)
    }

    fn exists(&self, name: &str) -> Result<bool, StoreError> {
        self.with(|c| c.hexists(NAMES, name))
    }

    fn snapshot(&self) -> Result<TokenSet, StoreError> {
        let mut entries = Vec::new();
        for (hash_hex, r) in self.records()? {
            if r.revoked_at.is_some() {
                continue;
            }
            let mut hash = [0u8; 32];
            if hex::decode_to_slice(&hash_hex, &mut hash).is_err() {
                continue;
            }
            entries.push(Entry {
                hash,
                token: StaticToken {
                    name: r.name,
                    scopes: r.scopes,
                    routes: r.routes,
                    created_at: r.created_at,
                    expires_at: r.expires_at,
                    revoked_at: None,
                },
            });
        }
        Ok(TokenSet { entries })
    }

    fn version(&self) -> Result<i64, StoreError> {
        let v: Option<i64> = self.with(|c| c.get(VERSION))?;
        Ok(v.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn routes_survive_create_list_and_revoke() {
        let Some(redis) = pforte_test_support::RedisServer::start() else {
            return;
        };
        let store = RedisTokenStore::open(&redis.url()).unwrap();
        let mut rng = rand::rng();
        let limited = store
            .create(
                &NewToken {
                    name: "w",
                    scopes: &[],
                    routes: &["werkbaum".to_owned()],
                    expires_at: None,
                },
                1,
                &mut rng,
            )
            .unwrap();
        let open = store
            .create(
                &NewToken {
                    name: "all",
                    scopes: &[],
                    routes: &[],
                    expires_at: None,
                },
                2,
                &mut rng,
            )
            .unwrap();
        let snap = store.snapshot().unwrap();
        assert_eq!(snap.find(&limited).unwrap().routes, ["werkbaum"]);
        assert!(snap.find(&open).unwrap().routes.is_empty());
        // The revoke script re-encodes the record with cjson; both kinds still read back.
        assert!(store.revoke("all", 3).unwrap());
        assert!(store.revoke("w", 4).unwrap());
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 2);
        let w = listed.iter().find(|t| t.name == "w").unwrap();
        assert_eq!(w.routes, ["werkbaum"]);
        assert!(w.revoked_at.is_some());
    }
}
