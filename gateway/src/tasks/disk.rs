//! The task records in SQLite: a `tasks` table in the data dir's `sessions.db`, beside the
//! session records, so that a restart keeps them. Keyed by the task id's SHA-256; every write
//! sweeps the expired rows (and, past the cap, the ones expiring first). Blocking: the
//! `Tasks` handle calls it on the blocking pool.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use rusqlite::{Connection, OptionalExtension as _, params};

use super::{Key, TaskError, TaskRecord, unavailable};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    key BLOB PRIMARY KEY,
    owner TEXT NOT NULL,
    route TEXT NOT NULL,
    tool TEXT NOT NULL,
    instance TEXT,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_expiry ON tasks (expires_ms);
";

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The task table. Cheap to clone.
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
    /// Opens (creating, owner-only) the database at `path` and its `tasks` table; the rows
    /// expired at `now` are deleted. Blocking.
    pub(super) fn open(path: &Path, now: u64) -> Result<Self, TaskError> {
        pforte_oauth::private_sqlite(path).map_err(unavailable)?;
        let conn = Connection::open(path).map_err(unavailable)?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(unavailable)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(unavailable)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(unavailable)?;
        conn.execute_batch(SCHEMA).map_err(unavailable)?;
        conn.execute("DELETE FROM tasks WHERE expires_ms <= ?1", [i(now)])
            .map_err(unavailable)?;
        pforte_oauth::sqlite_companions(path).map_err(unavailable)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic inside a transaction rolls it back: the connection stays usable.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Inserts `record` under `key` until `expires_ms` unless a live row holds the key (the
    /// first record wins), after sweeping the rows expired at `now`; then keeps at most
    /// `max_entries` rows (the ones expiring first go). Blocking.
    pub(super) fn insert(
        &self,
        key: &Key,
        record: &TaskRecord,
        expires_ms: u64,
        now: u64,
        max_entries: usize,
    ) -> Result<(), TaskError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(unavailable)?;
        tx.execute("DELETE FROM tasks WHERE expires_ms <= ?1", [i(now)])
            .map_err(unavailable)?;
        tx.execute(
            "INSERT OR IGNORE INTO tasks (key, owner, route, tool, instance, expires_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                key.as_slice(),
                record.owner,
                record.route,
                record.tool,
                record.instance,
                i(expires_ms)
            ],
        )
        .map_err(unavailable)?;
        let max = i64::try_from(max_entries).unwrap_or(i64::MAX);
        tx.execute(
            "DELETE FROM tasks WHERE key IN (SELECT key FROM tasks ORDER BY expires_ms
             LIMIT max(0, (SELECT count(*) FROM tasks) - ?1))",
            [max],
        )
        .map_err(unavailable)?;
        tx.commit().map_err(unavailable)
    }

    /// The record under `key` if it is alive at `now`. Blocking.
    pub(super) fn get(&self, key: &Key, now: u64) -> Result<Option<TaskRecord>, TaskError> {
        self.lock()
            .query_row(
                "SELECT owner, route, tool, instance FROM tasks
                 WHERE key = ?1 AND expires_ms > ?2",
                params![key.as_slice(), i(now)],
                |r| {
                    Ok(TaskRecord {
                        owner: r.get(0)?,
                        route: r.get(1)?,
                        tool: r.get(2)?,
                        instance: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(unavailable)
    }
}
