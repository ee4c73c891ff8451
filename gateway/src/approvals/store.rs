//! Where approvals live: an `approvals` table in the data dir's `pforte.db` (embedded; its own
//! connection, beside the tokens' and the pins'), or in redis — the hash `pforte:approvals`
//! (field the id, value the approval as JSON) and the hash `pforte:approvals:digest` (a digest's
//! newest approval id) — opened by `Stores::open`, so a restart keeps them and every gateway on
//! one redis agrees. Every change of state is one compare-and-set (one `UPDATE … WHERE state`,
//! one Lua script), so an approval is used at most once however many gateways race for it.
//! Finished ones are swept a day after they expire. Blocking.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::Commands as _;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::{Approval, KEEP_MS, State};

/// The redis hash of every approval, by id.
const REDIS_KEY: &str = "pforte:approvals";
/// The redis hash of each digest's newest approval id.
const REDIS_DIGESTS: &str = "pforte:approvals:digest";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    state TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_digest ON approvals (digest, created_ms);
";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApprovalStoreError {
    #[error("approvals: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("approvals: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("approvals: a stored approval is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    #[error("approvals: {0}")]
    DataDir(std::io::Error),
}

/// The approvals of every route.
pub(crate) trait ApprovalStore: Send + Sync {
    /// Stores a new approval (and sweeps those expired more than a day before `now`).
    fn insert(&self, approval: &Approval, now: u64) -> Result<(), ApprovalStoreError>;
    /// The approval `id`.
    fn get(&self, id: &str) -> Result<Option<Approval>, ApprovalStoreError>;
    /// The newest approval of `digest`.
    fn latest(&self, digest: &str) -> Result<Option<Approval>, ApprovalStoreError>;
    /// Every stored approval, newest first.
    fn list(&self) -> Result<Vec<Approval>, ApprovalStoreError>;
    /// Replaces the stored approval `next.id` with `next` if it is still in state `from` and,
    /// with `live_at`, has not expired then. Whether it did (one caller wins a race).
    fn transition(
        &self,
        next: &Approval,
        from: State,
        live_at: Option<u64>,
    ) -> Result<bool, ApprovalStoreError>;
}

impl std::fmt::Debug for dyn ApprovalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalStore")
    }
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The `approvals` table of `pforte.db`.
pub(crate) struct SqliteApprovals {
    conn: Mutex<Connection>,
}

impl SqliteApprovals {
    /// Opens (creating, owner-only) the database at `path` and its `approvals` table.
    pub(crate) fn open(path: &Path) -> Result<Self, ApprovalStoreError> {
        pforte_oauth::private_sqlite(path).map_err(ApprovalStoreError::DataDir)?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        pforte_oauth::sqlite_companions(path).map_err(ApprovalStoreError::DataDir)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ApprovalStore for SqliteApprovals {
    fn insert(&self, a: &Approval, now: u64) -> Result<(), ApprovalStoreError> {
        let record = serde_json::to_string(a)?;
        let conn = self.lock();
        conn.execute(
            "DELETE FROM approvals WHERE expires_ms < ?1",
            [i(now.saturating_sub(KEEP_MS))],
        )?;
        conn.execute(
            "INSERT INTO approvals (id, digest, state, created_ms, expires_ms, record)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                a.id,
                a.digest,
                a.state.as_str(),
                i(a.created_ms),
                i(a.expires_ms),
                record
            ],
        )?;
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<Approval>, ApprovalStoreError> {
        let text: Option<String> = self
            .lock()
            .query_row("SELECT record FROM approvals WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(text.map(|t| serde_json::from_str(&t)).transpose()?)
    }

    fn latest(&self, digest: &str) -> Result<Option<Approval>, ApprovalStoreError> {
        let text: Option<String> = self
            .lock()
            .query_row(
                "SELECT record FROM approvals WHERE digest = ?1
                 ORDER BY created_ms DESC, rowid DESC LIMIT 1",
                [digest],
                |r| r.get(0),
            )
            .optional()?;
        Ok(text.map(|t| serde_json::from_str(&t)).transpose()?)
    }

    fn list(&self) -> Result<Vec<Approval>, ApprovalStoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT record FROM approvals ORDER BY created_ms DESC, rowid DESC")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for text in rows {
            out.push(serde_json::from_str(&text?)?);
        }
        Ok(out)
    }

    fn transition(
        &self,
        next: &Approval,
        from: State,
        live_at: Option<u64>,
    ) -> Result<bool, ApprovalStoreError> {
        let record = serde_json::to_string(next)?;
        let changed = self.lock().execute(
            "UPDATE approvals SET state = ?2, expires_ms = ?3, record = ?4
             WHERE id = ?1 AND state = ?5 AND (?6 IS NULL OR expires_ms > ?6)",
            params![
                next.id,
                next.state.as_str(),
                i(next.expires_ms),
                record,
                from.as_str(),
                live_at.map(i),
            ],
        )?;
        Ok(changed == 1)
    }
}

/// The redis hashes `pforte:approvals` and `pforte:approvals:digest`.
pub(crate) struct RedisApprovals {
    client: pforte_redis::Blocking,
    conn: Mutex<Option<redis::Connection>>,
}

impl RedisApprovals {
    pub(crate) fn open(url: &str) -> Result<Self, ApprovalStoreError> {
        Ok(Self {
            client: pforte_redis::Blocking::open(url)?,
            conn: Mutex::new(None),
        })
    }

    /// Runs `f` on the connection, reconnecting when it is missing or broke.
    fn with<T>(
        &self,
        f: impl Fn(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, ApprovalStoreError> {
        let mut guard = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(conn) = guard.as_mut() {
            match f(conn) {
                Ok(v) => return Ok(v),
                Err(e) if !pforte_redis::lost(&e) => return Err(e.into()),
                Err(_) => *guard = None,
            }
        }
        let mut conn = self.client.connect()?;
        let result = f(&mut conn)?;
        *guard = Some(conn);
        Ok(result)
    }
}

/// Stores ARGV[2] (JSON) as approval ARGV[1] in KEYS[1], makes it digest ARGV[3]'s newest in
/// KEYS[2], and sweeps the approvals that expired before ARGV[4] (ms).
const INSERT: &str = r"
local all = redis.call('HGETALL', KEYS[1])
for n = 1, #all, 2 do
  local a = cjson.decode(all[n + 1])
  if tonumber(a['expires_ms']) < tonumber(ARGV[4]) then
    redis.call('HDEL', KEYS[1], all[n])
    if redis.call('HGET', KEYS[2], a['digest']) == all[n] then
      redis.call('HDEL', KEYS[2], a['digest'])
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[1])
return 1
";

/// Replaces approval ARGV[1] of KEYS[1] with ARGV[2] if its state is ARGV[3] and (ARGV[4] not
/// empty) it expires after ARGV[4] (ms): 1 if it did, 0 if not.
const TRANSITION: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return 0 end
local a = cjson.decode(stored)
if a['state'] ~= ARGV[3] then return 0 end
if ARGV[4] ~= '' and tonumber(a['expires_ms']) <= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
";

impl ApprovalStore for RedisApprovals {
    fn insert(&self, a: &Approval, now: u64) -> Result<(), ApprovalStoreError> {
        let script = redis::Script::new(INSERT);
        let json = serde_json::to_string(a)?;
        let before = now.saturating_sub(KEEP_MS);
        self.with(|c| {
            script
                .key(REDIS_KEY)
                .key(REDIS_DIGESTS)
                .arg(a.id.as_str())
                .arg(json.as_str())
                .arg(a.digest.as_str())
                .arg(before)
                .invoke::<i64>(c)
        })?;
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<Approval>, ApprovalStoreError> {
        let json: Option<String> = self.with(|c| c.hget(REDIS_KEY, id))?;
        Ok(json.map(|j| serde_json::from_str(&j)).transpose()?)
    }

    fn latest(&self, digest: &str) -> Result<Option<Approval>, ApprovalStoreError> {
        let id: Option<String> = self.with(|c| c.hget(REDIS_DIGESTS, digest))?;
        match id {
            Some(id) => self.get(&id),
            None => Ok(None),
        }
    }

    fn list(&self) -> Result<Vec<Approval>, ApprovalStoreError> {
        let all: std::collections::HashMap<String, String> = self.with(|c| c.hgetall(REDIS_KEY))?;
        let mut out = all
            .into_values()
            .map(|v| serde_json::from_str::<Approval>(&v))
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        Ok(out)
    }

    fn transition(
        &self,
        next: &Approval,
        from: State,
        live_at: Option<u64>,
    ) -> Result<bool, ApprovalStoreError> {
        let script = redis::Script::new(TRANSITION);
        let json = serde_json::to_string(next)?;
        let live = live_at.map(|t| t.to_string()).unwrap_or_default();
        let won: i64 = self.with(|c| {
            script
                .key(REDIS_KEY)
                .arg(next.id.as_str())
                .arg(json.as_str())
                .arg(from.as_str())
                .arg(live.as_str())
                .invoke(c)
        })?;
        Ok(won == 1)
    }
}

/// Opens the approvals of the embedded store at `path` (`pforte.db`).
pub(crate) fn embedded(path: &Path) -> Result<Arc<dyn ApprovalStore>, ApprovalStoreError> {
    Ok(Arc::new(SqliteApprovals::open(path)?))
}

/// Opens the approvals in the redis at `url`.
pub(crate) fn redis(url: &str) -> Result<Arc<dyn ApprovalStore>, ApprovalStoreError> {
    Ok(Arc::new(RedisApprovals::open(url)?))
}
