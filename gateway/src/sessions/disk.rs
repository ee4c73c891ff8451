//! The session records in SQLite (`sessions.db` in the data dir, owner-only), behind the
//! in-process table: read whole at start, written as the table journals its changes — a new
//! binding before the `initialize` answer leaves, the rest (slid expiries, deletions) off the
//! request's path. One table keyed by the session id's SHA-256.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use rusqlite::{Connection, params};

use super::{
    Key, SessionError,
    local::{Record, Write},
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    key BLOB PRIMARY KEY,
    owner TEXT NOT NULL,
    person TEXT NOT NULL,
    instance TEXT,
    expires_ms INTEGER NOT NULL,
    last_used_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions (expires_ms);
";

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn failed(e: impl std::fmt::Display) -> SessionError {
    SessionError::Unavailable(e.to_string())
}

/// The sessions database. Cheap to clone.
#[derive(Clone)]
pub(super) struct Disk {
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk").finish_non_exhaustive()
    }
}

impl Disk {
    /// Opens (creating, owner-only) the database at `path`. Blocking.
    pub(super) fn open(path: &Path) -> Result<Self, SessionError> {
        pforte_oauth::private_sqlite(path).map_err(failed)?;
        let conn = Connection::open(path).map_err(failed)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(failed)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(failed)?;
        // A committed write survives the process (a clean restart or a crash); a power loss
        // may take the last ones, which costs those clients a new `initialize`.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(failed)?;
        conn.execute_batch(SCHEMA).map_err(failed)?;
        pforte_oauth::sqlite_companions(path).map_err(failed)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Every record alive at `now`, most recently used first (expired ones are deleted).
    /// Blocking.
    pub(super) fn load(&self, now: u64) -> Result<Vec<(Key, Record)>, SessionError> {
        let conn = self.lock();
        conn.execute("DELETE FROM sessions WHERE expires_ms <= ?1", [i(now)])
            .map_err(failed)?;
        let mut stmt = conn
            .prepare(
                "SELECT key, owner, person, instance, expires_ms, last_used_ms FROM sessions
                 ORDER BY last_used_ms DESC",
            )
            .map_err(failed)?;
        let rows = stmt
            .query_map([], |r| {
                let key: Vec<u8> = r.get(0)?;
                Ok((
                    key,
                    Record {
                        owner: r.get(1)?,
                        person: r.get(2)?,
                        instance: r.get(3)?,
                        expires_ms: u(r.get(4)?),
                        last_used_ms: u(r.get(5)?),
                    },
                ))
            })
            .map_err(failed)?;
        let mut out = Vec::new();
        for row in rows {
            let (key, record) = row.map_err(failed)?;
            if let Ok(key) = Key::try_from(key.as_slice()) {
                out.push((key, record));
            }
        }
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic inside a transaction rolls it back: the connection stays usable.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `writes` in one transaction. Blocking.
    pub(super) fn apply_blocking(&self, writes: &[Write]) -> Result<(), SessionError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(failed)?;
        for w in writes {
            match w {
                Write::Put(key, r) => tx.execute(
                    "INSERT OR REPLACE INTO sessions
                     (key, owner, person, instance, expires_ms, last_used_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        key.as_slice(),
                        r.owner,
                        r.person,
                        r.instance,
                        i(r.expires_ms),
                        i(r.last_used_ms)
                    ],
                ),
                Write::Touch {
                    key,
                    expires_ms,
                    last_used_ms,
                } => tx.execute(
                    "UPDATE sessions SET expires_ms = ?2, last_used_ms = ?3 WHERE key = ?1",
                    params![key.as_slice(), i(*expires_ms), i(*last_used_ms)],
                ),
                Write::Delete(key) => {
                    tx.execute("DELETE FROM sessions WHERE key = ?1", [key.as_slice()])
                }
            }
            .map_err(failed)?;
        }
        tx.commit().map_err(failed)
    }

    /// Writes `writes` on the blocking pool and waits for them.
    pub(super) async fn apply(&self, writes: Vec<Write>) -> Result<(), SessionError> {
        if writes.is_empty() {
            return Ok(());
        }
        let disk = self.clone();
        tokio::task::spawn_blocking(move || disk.apply_blocking(&writes))
            .await
            .map_err(failed)?
    }

    /// Writes `writes` on the blocking pool without waiting (a failure is logged).
    pub(super) fn apply_later(&self, writes: Vec<Write>) {
        if writes.is_empty() {
            return;
        }
        let disk = self.clone();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            if let Err(e) = disk.apply_blocking(&writes) {
                tracing::warn!(error = %e, "could not write session records");
            }
            return;
        };
        rt.spawn_blocking(move || {
            if let Err(e) = disk.apply_blocking(&writes) {
                tracing::warn!(error = %e, "could not write session records");
            }
        });
    }
}
