//! The embedded store: one SQLite file in WAL mode, safe to open from several processes.
//!
//! Records are JSON in a `data` column; the fields that change or are queried (use, rotation,
//! revocation, expiry, last use) are real columns, overlaid on the JSON when read. Every
//! read-modify-write runs in a `BEGIN IMMEDIATE` transaction; all calls run on the blocking pool.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{CODE_RETENTION_SECS, NewGrant, Rotation, Store, StoreResult};
use crate::error::StoreError;
use crate::model::{
    AccessRecord, ClientRecord, CodeRecord, GrantRecord, RefreshRecord, RotateOutcome,
    SessionRecord, UserRecord,
};

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS oauth_meta (k TEXT PRIMARY KEY, v BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS oauth_users (username TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS oauth_clients (
    client_id TEXT PRIMARY KEY, data TEXT NOT NULL, last_used_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS oauth_codes (
    hash TEXT PRIMARY KEY, data TEXT NOT NULL, used INTEGER NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS oauth_grants (
    family_id TEXT PRIMARY KEY, data TEXT NOT NULL, client_id TEXT NOT NULL,
    username TEXT NOT NULL, last_used_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
    revoked_at INTEGER);
CREATE INDEX IF NOT EXISTS oauth_grants_client ON oauth_grants(client_id);
CREATE INDEX IF NOT EXISTS oauth_grants_user ON oauth_grants(username);
CREATE TABLE IF NOT EXISTS oauth_access (
    hash TEXT PRIMARY KEY, data TEXT NOT NULL, family_id TEXT NOT NULL,
    revoked INTEGER NOT NULL, expires_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS oauth_access_family ON oauth_access(family_id);
CREATE TABLE IF NOT EXISTS oauth_refresh (
    hash TEXT PRIMARY KEY, data TEXT NOT NULL, family_id TEXT NOT NULL,
    rotated_at INTEGER, expires_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS oauth_refresh_family ON oauth_refresh(family_id);
CREATE TABLE IF NOT EXISTS oauth_sessions (
    hash TEXT PRIMARY KEY, data TEXT NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS oauth_assertions (hash TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS oauth_identities (identity TEXT PRIMARY KEY, username TEXT NOT NULL);
"#;

/// SQLite-backed [`Store`].
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Unavailable(format!("sqlite: {e}"))
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

fn enc<T: Serialize>(v: &T) -> StoreResult<String> {
    Ok(serde_json::to_string(v)?)
}

fn dec<T: DeserializeOwned>(s: &str) -> StoreResult<T> {
    Ok(serde_json::from_str(s)?)
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl SqliteStore {
    /// Opens (creating if needed) the database file, in WAL mode with a busy timeout, and
    /// creates the tables. Blocking: call before serving or from `spawn_blocking`.
    ///
    /// It holds the server key and password hashes: its directory is made 0700 and the file
    /// 0600 (also when they already existed), so SQLite's `-wal`/`-shm` are 0600 as well.
    pub fn open(path: &Path) -> StoreResult<Self> {
        let private = |e: std::io::Error| {
            StoreError::Unavailable(format!("making {} owner-only: {e}", path.display()))
        };
        crate::owner_only::private_sqlite(path).map_err(private)?;
        let conn = Connection::open(path)?;
        let store = Self::init(conn)?;
        crate::owner_only::sqlite_companions(path).map_err(private)?;
        Ok(store)
    }

    /// A private in-memory database (tests).
    pub fn in_memory() -> StoreResult<Self> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> StoreResult<Self> {
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Reads user `name`, applies `change` and writes it back in one transaction; `false` when
    /// there is no such user.
    async fn change_user(
        &self,
        name: &str,
        change: impl FnOnce(&mut UserRecord) + Send + 'static,
    ) -> StoreResult<bool> {
        let name = name.to_owned();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let data: Option<String> = tx
                .query_row(
                    "SELECT data FROM oauth_users WHERE username = ?1",
                    [&name],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(data) = data else { return Ok(false) };
            let mut user: UserRecord = dec(&data)?;
            change(&mut user);
            tx.execute(
                "UPDATE oauth_users SET data = ?2 WHERE username = ?1",
                params![name, enc(&user)?],
            )?;
            tx.commit()?;
            Ok(true)
        })
        .await
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

fn read_client(data: String, last_used: i64) -> StoreResult<ClientRecord> {
    let mut c: ClientRecord = dec(&data)?;
    c.last_used_at = u(last_used);
    Ok(c)
}

fn read_grant(
    data: String,
    last_used: i64,
    expires: i64,
    revoked: Option<i64>,
) -> StoreResult<GrantRecord> {
    let mut g: GrantRecord = dec(&data)?;
    g.last_used_at = u(last_used);
    g.expires_at = u(expires);
    g.revoked_at = revoked.map(u);
    Ok(g)
}

fn revoke_grants_where(
    tx: &rusqlite::Transaction<'_>,
    column: &str,
    value: &str,
    now: u64,
) -> StoreResult<()> {
    let sql = format!(
        "UPDATE oauth_grants SET revoked_at = ?1 WHERE {column} = ?2 AND revoked_at IS NULL"
    );
    tx.execute(&sql, params![i(now), value])?;
    Ok(())
}

fn insert_grant(tx: &rusqlite::Transaction<'_>, g: &GrantRecord, gdata: &str) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO oauth_grants (family_id, data, client_id, username, last_used_at, expires_at, revoked_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![g.family_id, gdata, g.client_id, g.username, i(g.last_used_at), i(g.expires_at), g.revoked_at.map(i)],
    )?;
    Ok(())
}

fn insert_access(tx: &rusqlite::Transaction<'_>, access: &AccessRecord) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO oauth_access (hash, data, family_id, revoked, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![access.token_hash, enc(access)?, access.family_id, access.revoked, i(access.expires_at)],
    )?;
    Ok(())
}

fn insert_tokens(
    tx: &rusqlite::Transaction<'_>,
    access: &AccessRecord,
    refresh: &RefreshRecord,
) -> StoreResult<()> {
    insert_access(tx, access)?;
    tx.execute(
        "INSERT INTO oauth_refresh (hash, data, family_id, rotated_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![refresh.token_hash, enc(refresh)?, refresh.family_id, refresh.rotated_at.map(i), i(refresh.expires_at)],
    )?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn server_key(&self, candidate: [u8; 32]) -> StoreResult<[u8; 32]> {
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT OR IGNORE INTO oauth_meta (k, v) VALUES ('server_key', ?1)",
                params![candidate.to_vec()],
            )?;
            let v: Vec<u8> =
                tx.query_row("SELECT v FROM oauth_meta WHERE k = 'server_key'", [], |r| {
                    r.get(0)
                })?;
            tx.commit()?;
            v.try_into()
                .map_err(|_| StoreError::Corrupt("server key length".into()))
        })
        .await
    }

    async fn create_user(&self, user: &UserRecord) -> StoreResult<bool> {
        let (name, data) = (user.username.clone(), enc(user)?);
        self.run(move |c| {
            let n = c.execute(
                "INSERT OR IGNORE INTO oauth_users (username, data) VALUES (?1, ?2)",
                params![name, data],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn set_password(&self, name: &str, hash: &str, now: u64) -> StoreResult<bool> {
        let hash = hash.to_owned();
        self.change_user(name, move |user| {
            user.password_hash = hash;
            user.updated_at = now;
        })
        .await
    }

    async fn update_user(&self, user: &UserRecord) -> StoreResult<bool> {
        let (name, data) = (user.username.clone(), enc(user)?);
        self.run(move |c| {
            let n = c.execute(
                "UPDATE oauth_users SET data = ?2 WHERE username = ?1",
                params![name, data],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn get_user(&self, username: &str) -> StoreResult<Option<UserRecord>> {
        let name = username.to_owned();
        self.run(move |c| {
            let data: Option<String> = c
                .query_row(
                    "SELECT data FROM oauth_users WHERE username = ?1",
                    [&name],
                    |r| r.get(0),
                )
                .optional()?;
            data.map(|d| dec(&d)).transpose()
        })
        .await
    }

    async fn list_users(&self) -> StoreResult<Vec<UserRecord>> {
        self.run(|c| {
            let mut st = c.prepare("SELECT data FROM oauth_users ORDER BY username")?;
            let rows = st.query_map([], |r| r.get::<_, String>(0))?;
            rows.map(|d| dec(&d?)).collect()
        })
        .await
    }

    async fn delete_user(&self, username: &str, now: u64) -> StoreResult<bool> {
        let name = username.to_owned();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute("DELETE FROM oauth_users WHERE username = ?1", [&name])?;
            tx.execute("DELETE FROM oauth_identities WHERE username = ?1", [&name])?;
            revoke_grants_where(&tx, "username", &name, now)?;
            tx.commit()?;
            Ok(n == 1)
        })
        .await
    }

    async fn create_client(&self, client: &ClientRecord) -> StoreResult<()> {
        let (id, data, used) = (
            client.client_id.clone(),
            enc(client)?,
            i(client.last_used_at),
        );
        self.run(move |c| {
            c.execute(
                "INSERT INTO oauth_clients (client_id, data, last_used_at) VALUES (?1, ?2, ?3)",
                params![id, data, used],
            )?;
            Ok(())
        })
        .await
    }

    async fn get_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>> {
        let id = client_id.to_owned();
        self.run(move |c| {
            let row: Option<(String, i64)> = c
                .query_row(
                    "SELECT data, last_used_at FROM oauth_clients WHERE client_id = ?1",
                    [&id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            row.map(|(d, l)| read_client(d, l)).transpose()
        })
        .await
    }

    async fn list_clients(&self) -> StoreResult<Vec<ClientRecord>> {
        self.run(|c| {
            let mut st =
                c.prepare("SELECT data, last_used_at FROM oauth_clients ORDER BY client_id")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            rows.map(|row| {
                let (d, l) = row?;
                read_client(d, l)
            })
            .collect()
        })
        .await
    }

    async fn delete_client(&self, client_id: &str, now: u64) -> StoreResult<bool> {
        let id = client_id.to_owned();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute("DELETE FROM oauth_clients WHERE client_id = ?1", [&id])?;
            revoke_grants_where(&tx, "client_id", &id, now)?;
            tx.commit()?;
            Ok(n == 1)
        })
        .await
    }

    async fn touch_client(&self, client_id: &str, now: u64) -> StoreResult<()> {
        let id = client_id.to_owned();
        self.run(move |c| {
            c.execute(
                "UPDATE oauth_clients SET last_used_at = MAX(last_used_at, ?2) WHERE client_id = ?1",
                params![id, i(now)],
            )?;
            Ok(())
        })
        .await
    }

    async fn clients_unused_since(&self, cutoff: u64) -> StoreResult<Vec<String>> {
        self.run(move |c| {
            let mut st =
                c.prepare("SELECT client_id FROM oauth_clients WHERE last_used_at < ?1")?;
            let rows = st.query_map([i(cutoff)], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn put_code(&self, code: &CodeRecord) -> StoreResult<()> {
        let (h, data, used, exp) = (
            code.code_hash.clone(),
            enc(code)?,
            code.used,
            i(code.expires_at),
        );
        self.run(move |c| {
            c.execute(
                "INSERT INTO oauth_codes (hash, data, used, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![h, data, used, exp],
            )?;
            Ok(())
        })
        .await
    }

    async fn get_code(&self, code_hash: &str) -> StoreResult<Option<CodeRecord>> {
        let h = code_hash.to_owned();
        self.run(move |c| {
            let row: Option<(String, bool)> = c
                .query_row(
                    "SELECT data, used FROM oauth_codes WHERE hash = ?1",
                    [&h],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            row.map(|(d, used)| {
                let mut code: CodeRecord = dec(&d)?;
                code.used = used;
                Ok(code)
            })
            .transpose()
        })
        .await
    }

    async fn redeem_code(&self, code_hash: &str, new: NewGrant<'_>) -> StoreResult<bool> {
        let h = code_hash.to_owned();
        let gdata = enc(new.grant)?;
        let (g, a, r) = (new.grant.clone(), new.access.clone(), new.refresh.clone());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute(
                "UPDATE oauth_codes SET used = 1 WHERE hash = ?1 AND used = 0",
                [&h],
            )?;
            if n != 1 {
                return Ok(false);
            }
            insert_grant(&tx, &g, &gdata)?;
            insert_tokens(&tx, &a, &r)?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn create_grant(&self, new: NewGrant<'_>) -> StoreResult<()> {
        let gdata = enc(new.grant)?;
        let (g, a, r) = (new.grant.clone(), new.access.clone(), new.refresh.clone());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            insert_grant(&tx, &g, &gdata)?;
            insert_tokens(&tx, &a, &r)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn get_grant(&self, family_id: &str) -> StoreResult<Option<GrantRecord>> {
        let id = family_id.to_owned();
        self.run(move |c| {
            let row: Option<(String, i64, i64, Option<i64>)> = c
                .query_row(
                    "SELECT data, last_used_at, expires_at, revoked_at FROM oauth_grants WHERE family_id = ?1",
                    [&id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?;
            row.map(|(d, l, e, rv)| read_grant(d, l, e, rv)).transpose()
        })
        .await
    }

    async fn list_grants(&self) -> StoreResult<Vec<GrantRecord>> {
        self.run(|c| {
            let mut st = c.prepare(
                "SELECT data, last_used_at, expires_at, revoked_at FROM oauth_grants ORDER BY rowid",
            )?;
            let rows = st.query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
            rows.map(|row| {
                let (d, l, e, rv) = row?;
                read_grant(d, l, e, rv)
            })
            .collect()
        })
        .await
    }

    async fn revoke_grant(&self, family_id: &str, now: u64) -> StoreResult<bool> {
        let id = family_id.to_owned();
        self.run(move |c| {
            let n = c.execute(
                "UPDATE oauth_grants SET revoked_at = ?2 WHERE family_id = ?1 AND revoked_at IS NULL",
                params![id, i(now)],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn get_access(&self, token_hash: &str) -> StoreResult<Option<(AccessRecord, bool)>> {
        let h = token_hash.to_owned();
        self.run(move |c| {
            let row: Option<(String, bool, Option<i64>, Option<String>)> = c
                .query_row(
                    "SELECT a.data, a.revoked, g.revoked_at, g.family_id FROM oauth_access a
                     LEFT JOIN oauth_grants g ON g.family_id = a.family_id WHERE a.hash = ?1",
                    [&h],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?;
            row.map(|(d, revoked, grant_revoked, grant)| {
                let mut a: AccessRecord = dec(&d)?;
                a.revoked = revoked;
                Ok((a, grant.is_none() || grant_revoked.is_some()))
            })
            .transpose()
        })
        .await
    }

    async fn revoke_access(&self, token_hash: &str) -> StoreResult<bool> {
        let h = token_hash.to_owned();
        self.run(move |c| {
            let n = c.execute("UPDATE oauth_access SET revoked = 1 WHERE hash = ?1", [&h])?;
            Ok(n == 1)
        })
        .await
    }

    async fn get_refresh(&self, token_hash: &str) -> StoreResult<Option<RefreshRecord>> {
        let h = token_hash.to_owned();
        self.run(move |c| {
            let row: Option<(String, Option<i64>)> = c
                .query_row(
                    "SELECT data, rotated_at FROM oauth_refresh WHERE hash = ?1",
                    [&h],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            row.map(|(d, rot)| {
                let mut r: RefreshRecord = dec(&d)?;
                r.rotated_at = rot.map(u);
                Ok(r)
            })
            .transpose()
        })
        .await
    }

    async fn rotate_refresh(&self, rotation: Rotation<'_>) -> StoreResult<RotateOutcome> {
        let Rotation { old_hash, now, .. } = rotation;
        let (h, a, r) = (
            old_hash.to_owned(),
            rotation.access.clone(),
            rotation.refresh.clone(),
        );
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let row: Option<(Option<i64>, Option<i64>, Option<String>)> = tx
                .query_row(
                    "SELECT r.rotated_at, g.revoked_at, g.family_id FROM oauth_refresh r
                     LEFT JOIN oauth_grants g ON g.family_id = r.family_id WHERE r.hash = ?1",
                    [&h],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()?;
            let outcome = match row {
                None => RotateOutcome::NotFound,
                Some((_, revoked, grant)) if revoked.is_some() || grant.is_none() => {
                    RotateOutcome::FamilyRevoked
                }
                Some((Some(at), _, _)) => RotateOutcome::AlreadyRotated { rotated_at: u(at) },
                Some((None, _, _)) => {
                    tx.execute("UPDATE oauth_refresh SET rotated_at = ?2 WHERE hash = ?1", params![h, i(now)])?;
                    insert_tokens(&tx, &a, &r)?;
                    tx.execute(
                        "UPDATE oauth_grants SET last_used_at = ?2, expires_at = MAX(expires_at, ?3) WHERE family_id = ?1",
                        params![r.family_id, i(now), i(r.expires_at)],
                    )?;
                    RotateOutcome::Rotated
                }
            };
            tx.commit()?;
            Ok(outcome)
        })
        .await
    }

    async fn create_access_grant(
        &self,
        grant: &GrantRecord,
        access: &AccessRecord,
    ) -> StoreResult<()> {
        let gdata = enc(grant)?;
        let (g, a) = (grant.clone(), access.clone());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            insert_grant(&tx, &g, &gdata)?;
            insert_access(&tx, &a)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn touch_grants(&self, uses: &[(String, u64)]) -> StoreResult<()> {
        let uses = uses.to_vec();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (family, at) in &uses {
                tx.execute(
                    "UPDATE oauth_grants SET last_used_at = MAX(last_used_at, ?2) WHERE family_id = ?1",
                    params![family, i(*at)],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn spend_assertion(&self, id_hash: &str, expires_at: u64, now: u64) -> StoreResult<bool> {
        let h = id_hash.to_owned();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "DELETE FROM oauth_assertions WHERE hash = ?1 AND expires_at < ?2",
                params![h, i(now)],
            )?;
            let n = tx.execute(
                "INSERT OR IGNORE INTO oauth_assertions (hash, expires_at) VALUES (?1, ?2)",
                params![h, i(expires_at)],
            )?;
            tx.commit()?;
            Ok(n == 1)
        })
        .await
    }

    async fn linked_user(&self, identity: &str) -> StoreResult<Option<String>> {
        let id = identity.to_owned();
        self.run(move |c| {
            Ok(c.query_row(
                "SELECT username FROM oauth_identities WHERE identity = ?1",
                [&id],
                |r| r.get(0),
            )
            .optional()?)
        })
        .await
    }

    async fn link_identity(&self, identity: &str, username: &str) -> StoreResult<()> {
        let (id, name) = (identity.to_owned(), username.to_owned());
        self.run(move |c| {
            c.execute(
                "INSERT OR REPLACE INTO oauth_identities (identity, username) VALUES (?1, ?2)",
                params![id, name],
            )?;
            Ok(())
        })
        .await
    }

    async fn rename_user(&self, old: &str, new: &str, now: u64) -> StoreResult<bool> {
        let (old, new) = (old.to_owned(), new.to_owned());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let data: Option<String> = tx
                .query_row(
                    "SELECT data FROM oauth_users WHERE username = ?1",
                    [&old],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(data) = data else { return Ok(false) };
            let mut user: UserRecord = dec(&data)?;
            user.username.clone_from(&new);
            user.updated_at = now;
            let inserted = tx.execute(
                "INSERT OR IGNORE INTO oauth_users (username, data) VALUES (?1, ?2)",
                params![new, enc(&user)?],
            )?;
            if inserted != 1 {
                return Ok(false);
            }
            tx.execute("DELETE FROM oauth_users WHERE username = ?1", [&old])?;
            tx.execute(
                "UPDATE oauth_grants SET username = ?2, data = json_set(data, '$.username', ?2)
                 WHERE username = ?1",
                params![old, new],
            )?;
            for table in [
                "oauth_access",
                "oauth_refresh",
                "oauth_codes",
                "oauth_sessions",
            ] {
                tx.execute(
                    &format!(
                        "UPDATE {table} SET data = json_set(data, '$.username', ?2)
                         WHERE json_extract(data, '$.username') = ?1"
                    ),
                    params![old, new],
                )?;
            }
            tx.execute(
                "UPDATE oauth_identities SET username = ?2 WHERE username = ?1",
                params![old, new],
            )?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn set_admin(&self, name: &str, admin: bool, now: u64) -> StoreResult<bool> {
        self.change_user(name, move |user| {
            user.admin = admin;
            user.updated_at = now;
        })
        .await
    }

    async fn put_session(&self, session: &SessionRecord) -> StoreResult<()> {
        let (h, data, exp) = (
            session.session_hash.clone(),
            enc(session)?,
            i(session.expires_at),
        );
        self.run(move |c| {
            c.execute(
                "INSERT OR REPLACE INTO oauth_sessions (hash, data, expires_at) VALUES (?1, ?2, ?3)",
                params![h, data, exp],
            )?;
            Ok(())
        })
        .await
    }

    async fn get_session(&self, session_hash: &str) -> StoreResult<Option<SessionRecord>> {
        let h = session_hash.to_owned();
        self.run(move |c| {
            let d: Option<String> = c
                .query_row(
                    "SELECT data FROM oauth_sessions WHERE hash = ?1",
                    [&h],
                    |r| r.get(0),
                )
                .optional()?;
            d.map(|d| dec(&d)).transpose()
        })
        .await
    }

    async fn delete_session(&self, session_hash: &str) -> StoreResult<()> {
        let h = session_hash.to_owned();
        self.run(move |c| {
            c.execute("DELETE FROM oauth_sessions WHERE hash = ?1", [&h])?;
            Ok(())
        })
        .await
    }

    async fn purge_expired(&self, now: u64) -> StoreResult<()> {
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = i(now);
            tx.execute(
                "DELETE FROM oauth_codes WHERE expires_at < ?1",
                [i(now.saturating_sub(CODE_RETENTION_SECS))],
            )?;
            tx.execute("DELETE FROM oauth_access WHERE expires_at < ?1", [n])?;
            tx.execute("DELETE FROM oauth_refresh WHERE expires_at < ?1", [n])?;
            tx.execute("DELETE FROM oauth_grants WHERE expires_at < ?1", [n])?;
            tx.execute("DELETE FROM oauth_sessions WHERE expires_at < ?1", [n])?;
            tx.execute("DELETE FROM oauth_assertions WHERE expires_at < ?1", [n])?;
            tx.commit()?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn sqlite_passes_the_store_suite() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("oauth.db")).unwrap();
        crate::store::suite::run(&store).await;
    }

    #[tokio::test]
    async fn database_and_its_companions_are_owner_only() {
        use crate::owner_only::mode_of;
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.join("oauth.db");
        let store = SqliteStore::open(&path).unwrap();
        crate::store::suite::run(&store).await;
        assert_eq!(mode_of(&dir).unwrap(), 0o700, "data dir tightened");
        for f in ["oauth.db", "oauth.db-wal", "oauth.db-shm"] {
            assert_eq!(mode_of(&dir.join(f)).unwrap(), 0o600, "{f}");
        }
    }

    #[tokio::test]
    async fn restart_and_second_process_see_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oauth.db");
        let first = SqliteStore::open(&path).unwrap();
        let second = SqliteStore::open(&path).unwrap(); // e.g. the admin CLI beside the gateway
        let g = crate::store::suite::grant("fam", "c", "u");
        first
            .create_grant(crate::store::suite::issue(
                &g,
                &crate::store::suite::access("a", &g),
                &crate::store::suite::refresh("r", &g, g.expires_at),
            ))
            .await
            .unwrap();
        first
            .create_client(&crate::store::suite::client("c", 1))
            .await
            .unwrap();
        assert!(second.revoke_grant("fam", 5).await.unwrap());
        drop(first);
        let reopened = SqliteStore::open(&path).unwrap();
        assert!(reopened.get_access("a").await.unwrap().unwrap().1);
        assert!(reopened.get_client("c").await.unwrap().is_some());
    }
}
