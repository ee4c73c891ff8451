//! The vault in SQLite (`vault.db` in the data dir, owner-only): one table of sealed
//! credentials, one of pending connect records, one of refresh locks. Calls run on the
//! blocking pool.

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use rusqlite::{Connection, OptionalExtension as _, params};

use super::{
    State, VaultError,
    backend::{Backend, Row},
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS vault_credentials (
    route TEXT NOT NULL,
    person TEXT NOT NULL,
    state TEXT NOT NULL,
    connected_ms INTEGER NOT NULL,
    refreshed_ms INTEGER,
    expires_at_ms INTEGER,
    version INTEGER NOT NULL,
    sealed TEXT NOT NULL,
    PRIMARY KEY (route, person)
);
CREATE INDEX IF NOT EXISTS vault_credentials_person ON vault_credentials (person);
CREATE TABLE IF NOT EXISTS vault_pending (
    id TEXT PRIMARY KEY,
    sealed TEXT NOT NULL,
    until_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS vault_locks (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    until_ms INTEGER NOT NULL
);
";

const COLUMNS: &str =
    "route, person, state, connected_ms, refreshed_ms, expires_at_ms, version, sealed";

pub(super) struct SqliteBackend {
    conn: Arc<Mutex<Connection>>,
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn state_text(s: State) -> &'static str {
    match s {
        State::Connected => "connected",
        State::NeedsReconnect => "needs_reconnect",
    }
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let state: String = r.get(2)?;
    Ok(Row {
        route: r.get(0)?,
        person: r.get(1)?,
        state: if state == "needs_reconnect" {
            State::NeedsReconnect
        } else {
            State::Connected
        },
        connected_ms: u(r.get(3)?),
        refreshed_ms: r.get::<_, Option<i64>>(4)?.map(u),
        expires_at_ms: r.get::<_, Option<i64>>(5)?.map(u),
        version: u(r.get(6)?),
        sealed: r.get(7)?,
    })
}

impl SqliteBackend {
    /// Opens (creating, owner-only) the database at `path`. Blocking.
    pub(super) fn open(path: &Path) -> Result<Self, VaultError> {
        if let Some(dir) = path.parent() {
            pforte_oauth::private_dir(dir).map_err(|e| VaultError::Storage(e.to_string()))?;
        }
        pforte_oauth::private_sqlite(path).map_err(|e| VaultError::Storage(e.to_string()))?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        pforte_oauth::sqlite_companions(path).map_err(|e| VaultError::Storage(e.to_string()))?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn run<T, F>(&self, f: F) -> Result<T, VaultError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, VaultError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| VaultError::Storage("sqlite connection poisoned".into()))?;
            f(&mut guard)
        })
        .await
        .map_err(|e| VaultError::Storage(format!("sqlite task: {e}")))?
    }
}

#[async_trait::async_trait]
impl Backend for SqliteBackend {
    async fn get(&self, route: &str, person: &str) -> Result<Option<Row>, VaultError> {
        let (route, person) = (route.to_owned(), person.to_owned());
        self.run(move |c| {
            Ok(c.query_row(
                &format!(
                    "SELECT {COLUMNS} FROM vault_credentials WHERE route = ?1 AND person = ?2"
                ),
                params![route, person],
                read_row,
            )
            .optional()?)
        })
        .await
    }

    async fn put(&self, row: Row) -> Result<u64, VaultError> {
        self.run(move |c| {
            let version: i64 = c.query_row(
                "INSERT INTO vault_credentials (route, person, state, connected_ms, refreshed_ms, expires_at_ms, version, sealed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7)
                 ON CONFLICT (route, person) DO UPDATE SET
                   state = excluded.state, connected_ms = excluded.connected_ms,
                   refreshed_ms = excluded.refreshed_ms, expires_at_ms = excluded.expires_at_ms,
                   sealed = excluded.sealed, version = vault_credentials.version + 1
                 RETURNING version",
                params![
                    row.route,
                    row.person,
                    state_text(row.state),
                    i(row.connected_ms),
                    row.refreshed_ms.map(i),
                    row.expires_at_ms.map(i),
                    row.sealed
                ],
                |r| r.get(0),
            )?;
            Ok(u(version))
        })
        .await
    }

    async fn reseal(&self, row: &Row, sealed: String) -> Result<bool, VaultError> {
        let row = row.clone();
        self.run(move |c| {
            let n = c.execute(
                "UPDATE vault_credentials SET sealed = ?1
                 WHERE route = ?2 AND person = ?3 AND sealed = ?4",
                params![sealed, row.route, row.person, row.sealed],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn remove(&self, route: &str, person: &str) -> Result<bool, VaultError> {
        let (route, person) = (route.to_owned(), person.to_owned());
        self.run(move |c| {
            Ok(c.execute(
                "DELETE FROM vault_credentials WHERE route = ?1 AND person = ?2",
                params![route, person],
            )? == 1)
        })
        .await
    }

    async fn remove_person(&self, person: &str) -> Result<usize, VaultError> {
        let person = person.to_owned();
        self.run(move |c| {
            Ok(c.execute(
                "DELETE FROM vault_credentials WHERE person = ?1",
                params![person],
            )?)
        })
        .await
    }

    async fn list(&self, person: &str) -> Result<Vec<Row>, VaultError> {
        let person = person.to_owned();
        self.run(move |c| {
            let mut q = c.prepare(&format!(
                "SELECT {COLUMNS} FROM vault_credentials WHERE person = ?1"
            ))?;
            let rows = q.query_map(params![person], read_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn all(&self) -> Result<Vec<Row>, VaultError> {
        self.run(|c| {
            let mut q = c.prepare(&format!("SELECT {COLUMNS} FROM vault_credentials"))?;
            let rows = q.query_map([], read_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn put_pending(
        &self,
        id: &str,
        sealed: &str,
        until_ms: u64,
        _ttl: Duration,
    ) -> Result<(), VaultError> {
        let (id, sealed) = (id.to_owned(), sealed.to_owned());
        self.run(move |c| {
            let tx = c.transaction()?;
            // Expired records go as new ones come: the table holds only live ones.
            tx.execute(
                "DELETE FROM vault_pending WHERE until_ms < ?1",
                params![i(until_ms.saturating_sub(24 * 3600 * 1000))],
            )?;
            tx.execute(
                "INSERT OR REPLACE INTO vault_pending (id, sealed, until_ms) VALUES (?1, ?2, ?3)",
                params![id, sealed, i(until_ms)],
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn take_pending(&self, id: &str, now_ms: u64) -> Result<Option<String>, VaultError> {
        let id = id.to_owned();
        self.run(move |c| {
            let taken: Option<(String, i64)> = c
                .query_row(
                    "DELETE FROM vault_pending WHERE id = ?1 RETURNING sealed, until_ms",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            Ok(taken.and_then(|(sealed, until)| (u(until) > now_ms).then_some(sealed)))
        })
        .await
    }

    async fn try_lock(
        &self,
        name: &str,
        owner: &str,
        until_ms: u64,
        now_ms: u64,
        _ttl: Duration,
    ) -> Result<bool, VaultError> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.run(move |c| {
            let n = c.execute(
                "INSERT INTO vault_locks (name, owner, until_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until_ms = excluded.until_ms
                 WHERE vault_locks.until_ms <= ?4",
                params![name, owner, i(until_ms), i(now_ms)],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn unlock(&self, name: &str, owner: &str) -> Result<(), VaultError> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.run(move |c| {
            c.execute(
                "DELETE FROM vault_locks WHERE name = ?1 AND owner = ?2",
                params![name, owner],
            )?;
            Ok(())
        })
        .await
    }
}
