//! Where pins live: a `pins` table in the data dir's `pforte.db` (embedded; its own connection
//! beside the token store's), or the redis hash `pforte:pins` (field `ROUTE:TOOL`, value the
//! pin as JSON) — opened by `Stores::open`, so every gateway and admin command agree. Each pin
//! keeps both definitions as canonical JSON text and their SHA-256. Blocking.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::Commands as _;
use rusqlite::{Connection, params};

use super::{Pin, digest};

/// The redis hash of every pin.
const REDIS_KEY: &str = "pforte:pins";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pins (
    route TEXT NOT NULL,
    tool TEXT NOT NULL,
    approved TEXT,
    approved_sha256 TEXT,
    approved_ms INTEGER,
    seen TEXT NOT NULL,
    seen_sha256 TEXT NOT NULL,
    seen_ms INTEGER NOT NULL,
    PRIMARY KEY (route, tool)
);
";

#[derive(Debug, thiserror::Error)]
pub(crate) enum PinStoreError {
    #[error("pins: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("pins: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("pins: a stored pin is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    #[error("pins: {0}")]
    DataDir(std::io::Error),
}

/// The pins of every route.
pub(crate) trait PinStore: Send + Sync {
    /// Every pin.
    fn list(&self) -> Result<Vec<Pin>, PinStoreError>;
    /// Writes `pin` (by route and tool).
    fn put(&self, pin: &Pin) -> Result<(), PinStoreError>;

    /// Makes the last seen definition of `route`'s `tool` the approved one at `now`; the pin
    /// as approved, or `None` when there is no such pin or nothing pending.
    fn approve(&self, route: &str, tool: &str, now: u64) -> Result<Option<Pin>, PinStoreError> {
        let Some(pin) = self
            .list()?
            .into_iter()
            .find(|p| p.route == route && p.tool == tool && p.pending())
        else {
            return Ok(None);
        };
        let approved = Pin {
            approved: Some(pin.seen.clone()),
            approved_ms: Some(now),
            ..pin
        };
        self.put(&approved)?;
        Ok(Some(approved))
    }
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The `pins` table of `pforte.db`.
pub(crate) struct SqlitePins {
    conn: Mutex<Connection>,
}

impl SqlitePins {
    /// Opens (creating, owner-only) the database at `path` and its `pins` table.
    pub(crate) fn open(path: &Path) -> Result<Self, PinStoreError> {
        pforte_oauth::private_sqlite(path).map_err(PinStoreError::DataDir)?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        pforte_oauth::sqlite_companions(path).map_err(PinStoreError::DataDir)?;
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

impl PinStore for SqlitePins {
    /// In one statement: a definition the gateway records meanwhile is never approved unseen.
    fn approve(&self, route: &str, tool: &str, now: u64) -> Result<Option<Pin>, PinStoreError> {
        let changed = self.lock().execute(
            "UPDATE pins SET approved = seen, approved_sha256 = seen_sha256, approved_ms = ?3
             WHERE route = ?1 AND tool = ?2 AND (approved IS NULL OR approved <> seen)",
            params![route, tool, i(now)],
        )?;
        if changed == 0 {
            return Ok(None);
        }
        Ok(self
            .list()?
            .into_iter()
            .find(|p| p.route == route && p.tool == tool))
    }

    fn list(&self) -> Result<Vec<Pin>, PinStoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT route, tool, approved, approved_ms, seen, seen_ms FROM pins ORDER BY route, tool",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Pin {
                route: r.get(0)?,
                tool: r.get(1)?,
                approved: r.get(2)?,
                approved_ms: r.get::<_, Option<i64>>(3)?.map(|v| v.max(0) as u64),
                seen: r.get(4)?,
                seen_ms: r.get::<_, i64>(5)?.max(0) as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn put(&self, pin: &Pin) -> Result<(), PinStoreError> {
        self.lock().execute(
            "INSERT INTO pins (route, tool, approved, approved_sha256, approved_ms, seen, seen_sha256, seen_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (route, tool) DO UPDATE SET approved = ?3, approved_sha256 = ?4,
                 approved_ms = ?5, seen = ?6, seen_sha256 = ?7, seen_ms = ?8",
            params![
                pin.route,
                pin.tool,
                pin.approved,
                pin.approved.as_deref().map(digest),
                pin.approved_ms.map(i),
                pin.seen,
                digest(&pin.seen),
                i(pin.seen_ms),
            ],
        )?;
        Ok(())
    }
}

/// The redis hash `pforte:pins`.
pub(crate) struct RedisPins {
    client: pforte_redis::Blocking,
    conn: Mutex<Option<redis::Connection>>,
}

impl RedisPins {
    pub(crate) fn open(url: &str) -> Result<Self, PinStoreError> {
        Ok(Self {
            client: pforte_redis::Blocking::open(url)?,
            conn: Mutex::new(None),
        })
    }

    /// Runs `f` on the connection, reconnecting when it is missing or broke.
    fn with<T>(
        &self,
        f: impl Fn(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, PinStoreError> {
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

/// What a redis pin's JSON holds beside the pin: the digests, for readers of the store.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    #[serde(flatten)]
    pin: Pin,
    #[serde(default)]
    approved_sha256: Option<String>,
    #[serde(default)]
    seen_sha256: String,
}

/// Approves the pin in field ARGV[1] of KEYS[1] at ARGV[2] (ms) if its seen definition is not
/// the approved one: returns the pin's new JSON, or nil.
const APPROVE: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return false end
local pin = cjson.decode(stored)
if pin['approved'] == pin['seen'] then return false end
pin['approved'] = pin['seen']
pin['approved_sha256'] = pin['seen_sha256']
pin['approved_ms'] = tonumber(ARGV[2])
local out = cjson.encode(pin)
redis.call('HSET', KEYS[1], ARGV[1], out)
return out
";

impl PinStore for RedisPins {
    /// In one script: a definition a gateway records meanwhile is never approved unseen.
    fn approve(&self, route: &str, tool: &str, now: u64) -> Result<Option<Pin>, PinStoreError> {
        let script = redis::Script::new(APPROVE);
        let field = format!("{route}:{tool}");
        let out: Option<String> =
            self.with(|c| script.key(REDIS_KEY).arg(field.as_str()).arg(now).invoke(c))?;
        out.map(|json| serde_json::from_str::<Stored>(&json).map(|s| s.pin))
            .transpose()
            .map_err(PinStoreError::from)
    }

    fn list(&self) -> Result<Vec<Pin>, PinStoreError> {
        let all: std::collections::HashMap<String, String> = self.with(|c| c.hgetall(REDIS_KEY))?;
        let mut pins = all
            .into_values()
            .map(|v| serde_json::from_str::<Stored>(&v).map(|s| s.pin))
            .collect::<Result<Vec<_>, _>>()?;
        pins.sort_by(|a, b| (&a.route, &a.tool).cmp(&(&b.route, &b.tool)));
        Ok(pins)
    }

    fn put(&self, pin: &Pin) -> Result<(), PinStoreError> {
        let stored = Stored {
            pin: pin.clone(),
            approved_sha256: pin.approved.as_deref().map(digest),
            seen_sha256: digest(&pin.seen),
        };
        let value = serde_json::to_string(&stored)?;
        let field = format!("{}:{}", pin.route, pin.tool);
        self.with(|c| c.hset::<_, _, _, ()>(REDIS_KEY, field.as_str(), value.as_str()))
    }
}

/// Opens the pins of the embedded store in `dir`.
pub(crate) fn embedded(path: &Path) -> Result<Arc<dyn PinStore>, PinStoreError> {
    Ok(Arc::new(SqlitePins::open(path)?))
}

/// Opens the pins in the redis at `url`.
pub(crate) fn redis(url: &str) -> Result<Arc<dyn PinStore>, PinStoreError> {
    Ok(Arc::new(RedisPins::open(url)?))
}
