//! The embedded document store: one SQLite file in WAL mode with `synchronous=FULL`, so an
//! acknowledged write survives `kill -9` and power loss. A write is one `BEGIN IMMEDIATE`
//! transaction: `UPDATE … WHERE uuid=? AND version=?` plus the history row.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{
    Change, Document, DocumentSummary, HistoryEntry, HistoryPage, Store, StoreError, StoreResult,
    WriteOutcome,
};

const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS werkbaum_documents (
    uuid TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL,
    version INTEGER NOT NULL, checksum TEXT NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS werkbaum_history (
    uuid TEXT NOT NULL, version INTEGER NOT NULL, entry TEXT NOT NULL,
    PRIMARY KEY (uuid, version));
";

/// SQLite-backed [`Store`].
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

/// Creates `dir` as 0700 or tightens it; a directory this process may not chmod (a volume it
/// does not own) is left as it is with a warning.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    if let Err(e) = tighten(dir, 0o700) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not make the data directory owner-only (0700)");
    }
    Ok(())
}

/// Creates `path` as 0600 if missing, else tightens it to 0600.
fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    tighten(path, 0o600)
}

fn tighten(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

fn unavailable(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("sqlite: {e}"))
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn read_doc(row: &rusqlite::Row<'_>) -> rusqlite::Result<Document> {
    Ok(Document {
        uuid: row.get(0)?,
        title: row.get(1)?,
        text: row.get(2)?,
        version: u(row.get(3)?),
        checksum: row.get(4)?,
        updated_at: u(row.get(5)?),
    })
}

fn get_doc(conn: &Connection, uuid: &str) -> StoreResult<Option<Document>> {
    conn.query_row(
        "SELECT uuid, title, text, version, checksum, updated_at FROM werkbaum_documents WHERE uuid = ?1",
        params![uuid],
        read_doc,
    )
    .optional()
    .map_err(unavailable)
}

fn entry_json(entry: &HistoryEntry) -> StoreResult<String> {
    serde_json::to_string(entry).map_err(|e| StoreError::Corrupt(e.to_string()))
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and its tables. Blocking: call before
    /// serving or from `spawn_blocking`.
    ///
    /// The directory is made 0700 and the file 0600 (also when they existed), so SQLite's
    /// `-wal`/`-shm` (created with the main file's mode) are owner-only too.
    pub fn open(path: &Path) -> StoreResult<Self> {
        let private =
            |e: std::io::Error| StoreError::Unavailable(format!("{}: {e}", path.display()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_dir(dir).map_err(private)?;
        }
        private_file(path).map_err(private)?;
        let store = Self::init(Connection::open(path).map_err(unavailable)?)?;
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            let companion = Path::new(&name);
            if companion.exists() {
                tighten(companion, 0o600).map_err(private)?;
            }
        }
        Ok(store)
    }

    /// A private in-memory database (tests).
    pub fn in_memory() -> StoreResult<Self> {
        Self::init(Connection::open_in_memory().map_err(unavailable)?)
    }

    fn init(conn: Connection) -> StoreResult<Self> {
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(unavailable)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(unavailable)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(unavailable)?;
        conn.execute_batch(SCHEMA).map_err(unavailable)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn run<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| StoreError::Unavailable("sqlite connection poisoned".into()))?;
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("sqlite task: {e}")))?
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, change: Change<'_>, max_documents: u64) -> StoreResult<()> {
        let (doc, entry) = (change.doc, change.entry);
        let doc = doc.clone();
        let entry_text = entry_json(entry)?;
        self.run(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(unavailable)?;
            let held: i64 = tx
                .query_row("SELECT COUNT(*) FROM werkbaum_documents", [], |row| {
                    row.get(0)
                })
                .map_err(unavailable)?;
            if u(held) >= max_documents {
                return Err(StoreError::Full(max_documents));
            }
            let inserted = tx
                .execute(
                    "INSERT OR IGNORE INTO werkbaum_documents (uuid, title, text, version, checksum, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![doc.uuid, doc.title, doc.text, i(doc.version), doc.checksum, i(doc.updated_at)],
                )
                .map_err(unavailable)?;
            if inserted == 0 {
                return Err(StoreError::Exists(doc.uuid));
            }
            tx.execute(
                "INSERT INTO werkbaum_history (uuid, version, entry) VALUES (?1, ?2, ?3)",
                params![doc.uuid, i(doc.version), entry_text],
            )
            .map_err(unavailable)?;
            tx.commit().map_err(unavailable)
        })
        .await
    }

    async fn get(&self, uuid: &str) -> StoreResult<Option<Document>> {
        let uuid = uuid.to_owned();
        self.run(move |conn| get_doc(conn, &uuid)).await
    }

    async fn list(&self) -> StoreResult<Vec<DocumentSummary>> {
        self.run(|conn| {
            let mut stmt = conn
                .prepare(
                    "SELECT uuid, title, version, checksum, updated_at FROM werkbaum_documents \
                     ORDER BY title, uuid",
                )
                .map_err(unavailable)?;
            let rows = stmt
                .query_map([], |row| {
                    Ok(DocumentSummary {
                        uuid: row.get(0)?,
                        title: row.get(1)?,
                        version: u(row.get(2)?),
                        checksum: row.get(3)?,
                        updated_at: u(row.get(4)?),
                    })
                })
                .map_err(unavailable)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(unavailable)
        })
        .await
    }

    async fn write(&self, base_version: u64, change: Change<'_>) -> StoreResult<WriteOutcome> {
        let (next, entry) = (change.doc, change.entry);
        let next = next.clone();
        let entry_text = entry_json(entry)?;
        self.run(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(unavailable)?;
            let changed = tx
                .execute(
                    "UPDATE werkbaum_documents SET title = ?3, text = ?4, version = ?5, checksum = ?6, \
                     updated_at = ?7 WHERE uuid = ?1 AND version = ?2",
                    params![
                        next.uuid,
                        i(base_version),
                        next.title,
                        next.text,
                        i(next.version),
                        next.checksum,
                        i(next.updated_at)
                    ],
                )
                .map_err(unavailable)?;
            if changed == 0 {
                let current = get_doc(&tx, &next.uuid)?;
                return Ok(current.map_or(WriteOutcome::NotFound, WriteOutcome::Conflict));
            }
            tx.execute(
                "INSERT INTO werkbaum_history (uuid, version, entry) VALUES (?1, ?2, ?3)",
                params![next.uuid, i(next.version), entry_text],
            )
            .map_err(unavailable)?;
            tx.commit().map_err(unavailable)?;
            Ok(WriteOutcome::Written(next))
        })
        .await
    }

    async fn history(&self, page: HistoryPage<'_>) -> StoreResult<Option<Vec<HistoryEntry>>> {
        let HistoryPage { uuid, since, limit } = page;
        let uuid = uuid.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(move |conn| {
            if get_doc(conn, &uuid)?.is_none() {
                return Ok(None);
            }
            let mut stmt = conn
                .prepare(
                    "SELECT entry FROM werkbaum_history WHERE uuid = ?1 AND version > ?2 \
                     ORDER BY version LIMIT ?3",
                )
                .map_err(unavailable)?;
            let rows = stmt
                .query_map(params![uuid, i(since.unwrap_or(0)), limit], |row| {
                    row.get::<_, String>(0)
                })
                .map_err(unavailable)?;
            let mut out = Vec::new();
            for row in rows {
                let text = row.map_err(unavailable)?;
                out.push(
                    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                );
            }
            Ok(Some(out))
        })
        .await
    }
}
