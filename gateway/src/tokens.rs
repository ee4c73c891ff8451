//! Static bearer tokens: created by the operator, stored only as SHA-256 hashes in the embedded
//! store (SQLite in WAL mode, so the admin CLI works beside a running gateway), and verified in
//! constant time against an in-memory snapshot that follows the store within a second.

use rand::RngCore;
use std::{
    path::Path,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use base64::Engine as _;
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token carries once verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StaticToken {
    pub(crate) name: String,
    pub(crate) scopes: Vec<String>,
    /// The routes it opens; empty means every route.
    pub(crate) routes: Vec<String>,
    pub(crate) created_at: u64,
    pub(crate) expires_at: Option<u64>,
    pub(crate) revoked_at: Option<u64>,
}

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("token store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot create data dir {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("a token named {0:?} exists already; revoke it first")]
    NameTaken(String),
    #[error("token names are 1-64 characters of letters, digits, '.', '_' and '-'")]
    BadName,
    #[error("token store lock poisoned")]
    Poisoned,
    #[error("token store (redis): {0}")]
    Redis(String),
}

/// The prefix that makes a Pforte static token recognisable (e.g. to secret scanners).
pub(crate) const TOKEN_PREFIX: &str = "pft_";

/// SHA-256 of a presented token.
pub(crate) fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A fresh token: the prefix and 256 random bits, base64url.
pub(crate) fn generate_token(rng: &mut dyn rand::RngCore) -> String {
    let mut bytes = [0u8; 32];
    rng.fill_bytes(&mut bytes);
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

pub(crate) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

pub(crate) mod redis;

/// A static token to create: its name, scopes, routes (empty: every route) and expiry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewToken<'a> {
    pub(crate) name: &'a str,
    pub(crate) scopes: &'a [String],
    pub(crate) routes: &'a [String],
    pub(crate) expires_at: Option<u64>,
}

impl<'a> NewToken<'a> {
    /// A fresh plaintext for this token, once its name is known to be valid.
    pub(super) fn mint(&self, rng: &mut dyn RngCore) -> Result<String, StoreError> {
        if !valid_name(self.name) {
            return Err(StoreError::BadName);
        }
        Ok(generate_token(rng))
    }
}

/// Where static tokens are kept: the embedded SQLite store, or redis when several gateways
/// share one set. The admin CLI writes through it; the gateway's refresher reads through it.
pub(crate) trait TokenSource: Send + Sync + std::fmt::Debug {
    /// Creates `token` at `now` and returns its plaintext — the only time it exists outside the
    /// client.
    fn create(
        &self,
        token: &NewToken<'_>,
        now: u64,
        rng: &mut dyn RngCore,
    ) -> Result<String, StoreError>;
    /// Every token, newest first, revoked ones included.
    fn list(&self) -> Result<Vec<StaticToken>, StoreError>;
    /// Revokes the active token called `name`; `false` if there is none.
    fn revoke(&self, name: &str, now: u64) -> Result<bool, StoreError>;
    /// Whether an active token called `name` exists.
    fn exists(&self, name: &str) -> Result<bool, StoreError>;
    /// Every unrevoked token.
    fn snapshot(&self) -> Result<TokenSet, StoreError>;
    /// Changes whenever the set changes (cheap to ask).
    fn version(&self) -> Result<i64, StoreError>;
}

/// The durable token table.
#[derive(Debug)]
pub(crate) struct TokenStore {
    conn: Mutex<Connection>,
    /// Commits through this connection (which `data_version` does not count): the console
    /// writes through the same store the refresher reads.
    own_writes: std::sync::atomic::AtomicI64,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS static_tokens (
    name        TEXT    NOT NULL,
    hash        BLOB    NOT NULL UNIQUE,
    scopes      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    revoked_at  INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS static_tokens_active_name
    ON static_tokens(name) WHERE revoked_at IS NULL;
";

/// Adds what later versions store to a table an older version created: the route names a
/// token is limited to (space-separated; empty for every route).
fn migrate(conn: &Connection) -> Result<(), rusqlite::Error> {
    let has_routes = conn
        .prepare("SELECT 1 FROM pragma_table_info('static_tokens') WHERE name = 'routes'")?
        .exists([])?;
    if !has_routes {
        conn.execute_batch("ALTER TABLE static_tokens ADD COLUMN routes TEXT NOT NULL DEFAULT ''")?;
    }
    Ok(())
}

impl TokenStore {
    /// Opens (and creates) the store at `path`.
    pub(crate) fn open(path: &Path) -> Result<Self, StoreError> {
        // The data dir 0700, the database and its -wal/-shm 0600 (also when they existed).
        let private = |source| StoreError::DataDir {
            path: path.display().to_string(),
            source,
        };
        pforte_oauth::private_sqlite(path).map_err(private)?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        migrate(&conn)?;
        pforte_oauth::sqlite_companions(path).map_err(private)?;
        Ok(Self {
            conn: Mutex::new(conn),
            own_writes: std::sync::atomic::AtomicI64::new(0),
        })
    }

    fn conn(&self) -> Result<std::sync::MutexGuard<'_, Connection>, StoreError> {
        self.conn.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Creates `new` at `now` and returns its plaintext — the only time it exists outside the
    /// client.
    pub(crate) fn create(
        &self,
        new: &NewToken<'_>,
        now: u64,
        rng: &mut dyn RngCore,
    ) -> Result<String, StoreError> {
        let token = new.mint(rng)?;
        let conn = self.conn()?;
        let inserted = conn.execute(
            "INSERT INTO static_tokens (name, hash, scopes, created_at, expires_at, routes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                new.name,
                hash_token(&token).as_slice(),
                new.scopes.join(" "),
                now as i64,
                new.expires_at.map(|t| t as i64),
                new.routes.join(" "),
            ],
        );
        match inserted {
            Ok(_) => {
                self.wrote();
                Ok(token)
            }
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(StoreError::NameTaken(new.name.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Every token, newest first, revoked ones included.
    pub(crate) fn list(&self) -> Result<Vec<StaticToken>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT name, scopes, created_at, expires_at, revoked_at, routes FROM static_tokens
             ORDER BY created_at DESC, rowid DESC",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(StaticToken {
                name: r.get(0)?,
                scopes: split_scopes(&r.get::<_, String>(1)?),
                routes: split_scopes(&r.get::<_, String>(5)?),
                created_at: r.get::<_, i64>(2)? as u64,
                expires_at: r.get::<_, Option<i64>>(3)?.map(|t| t as u64),
                revoked_at: r.get::<_, Option<i64>>(4)?.map(|t| t as u64),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Revokes the active token called `name`; `false` if there is none.
    pub(crate) fn revoke(&self, name: &str, now: u64) -> Result<bool, StoreError> {
        let n = self.conn()?.execute(
            "UPDATE static_tokens SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL",
            params![name, now as i64],
        )?;
        if n > 0 {
            self.wrote();
        }
        Ok(n > 0)
    }

    /// Whether the token called `name` is active (not revoked).
    pub(crate) fn exists(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT 1 FROM static_tokens WHERE name = ?1 AND revoked_at IS NULL",
                [name],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// The snapshot the request path verifies against: every unrevoked token.
    pub(crate) fn snapshot(&self) -> Result<TokenSet, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT hash, name, scopes, created_at, expires_at, routes FROM static_tokens
             WHERE revoked_at IS NULL",
        )?;
        let rows = stmt.query_map([], |r| {
            let hash: Vec<u8> = r.get(0)?;
            let mut h = [0u8; 32];
            if hash.len() == 32 {
                h.copy_from_slice(&hash);
            }
            Ok(Entry {
                hash: h,
                token: StaticToken {
                    name: r.get(1)?,
                    scopes: split_scopes(&r.get::<_, String>(2)?),
                    routes: split_scopes(&r.get::<_, String>(5)?),
                    created_at: r.get::<_, i64>(3)? as u64,
                    expires_at: r.get::<_, Option<i64>>(4)?.map(|t| t as u64),
                    revoked_at: None,
                },
            })
        })?;
        Ok(TokenSet {
            entries: rows.collect::<Result<_, _>>()?,
        })
    }

    fn wrote(&self) {
        self.own_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Changes whenever any connection commits: SQLite's `data_version` (another connection's
    /// commits) with this connection's own commits counted beside it.
    fn data_version(&self) -> Result<i64, StoreError> {
        let others: i64 = self
            .conn()?
            .query_row("PRAGMA data_version", [], |r| r.get(0))?;
        let own = self.own_writes.load(std::sync::atomic::Ordering::Relaxed);
        Ok(others.wrapping_mul(1 << 32).wrapping_add(own))
    }
}

impl TokenSource for TokenStore {
    fn create(
        &self,
        new: &NewToken<'_>,
        now: u64,
        rng: &mut dyn RngCore,
    ) -> Result<String, StoreError> {
        TokenStore::create(self, new, now, rng)
    }
    fn list(&self) -> Result<Vec<StaticToken>, StoreError> {
        TokenStore::list(self)
    }
    fn revoke(&self, name: &str, now: u64) -> Result<bool, StoreError> {
        TokenStore::revoke(self, name, now)
    }
    fn exists(&self, name: &str) -> Result<bool, StoreError> {
        TokenStore::exists(self, name)
    }
    fn snapshot(&self) -> Result<TokenSet, StoreError> {
        TokenStore::snapshot(self)
    }
    fn version(&self) -> Result<i64, StoreError> {
        self.data_version()
    }
}

pub(crate) fn split_scopes(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) hash: [u8; 32],
    pub(crate) token: StaticToken,
}

/// An immutable snapshot of the active tokens.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenSet {
    pub(crate) entries: Vec<Entry>,
}

impl TokenSet {
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Finds the token whose hash equals the presented token's. Every entry is compared, in
    /// constant time each, so the time taken does not depend on which entry (if any) matched.
    pub(crate) fn find(&self, presented: &str) -> Option<&StaticToken> {
        let digest = hash_token(presented);
        let mut found = None;
        for entry in &self.entries {
            if bool::from(entry.hash.ct_eq(&digest)) {
                found = Some(&entry.token);
            }
        }
        found
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The request path's view of the store: a snapshot refreshed by a background thread whenever
/// the store changes, polled every `interval` (revocation reaches the gateway within it).
#[derive(Debug, Clone)]
pub(crate) struct TokenCache {
    current: Arc<RwLock<Arc<TokenSet>>>,
}

impl TokenCache {
    /// Loads the snapshot now and starts the refresher thread; it stops when every clone of the
    /// cache is dropped.
    /// A store that cannot be read at start (redis down) starts the cache empty; it fills as
    /// soon as the store answers.
    pub(crate) fn start(
        store: Arc<dyn TokenSource>,
        interval: Duration,
    ) -> Result<Self, StoreError> {
        let (initial, mut seen) = match (store.snapshot(), store.version()) {
            (Ok(set), Ok(version)) => (set, version),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "static tokens unreadable at start; retrying in the background");
                (TokenSet::default(), i64::MIN)
            }
        };
        let current = Arc::new(RwLock::new(Arc::new(initial)));
        let weak = Arc::downgrade(&current);
        std::thread::Builder::new()
            .name("pforte-token-refresh".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(interval);
                    let Some(current) = weak.upgrade() else { return };
                    let version = match store.version() {
                        Ok(v) => v,
                        Err(e) => {
                            tracing::warn!(error = %e, "token store unreadable; keeping the last snapshot");
                            continue;
                        }
                    };
                    if version == seen {
                        continue;
                    }
                    match store.snapshot() {
                        Ok(set) => {
                            seen = version;
                            if let Ok(mut guard) = current.write() {
                                tracing::info!(active = set.len(), "static tokens reloaded");
                                *guard = Arc::new(set);
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "token reload failed"),
                    }
                }
            })
            .map_err(|source| StoreError::DataDir {
                path: "token refresh thread".into(),
                source,
            })?;
        Ok(Self { current })
    }

    /// The current snapshot.
    pub(crate) fn get(&self) -> Arc<TokenSet> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn store() -> (tempdir::Dir, TokenStore) {
        let dir = tempdir::Dir::new();
        let store = TokenStore::open(&dir.path().join("t.db")).unwrap();
        (dir, store)
    }

    /// A tiny temp dir helper, so the crate needs no extra dependency for tests.
    mod tempdir {
        pub(crate) struct Dir(std::path::PathBuf);
        impl Dir {
            pub(crate) fn new() -> Self {
                let p = std::env::temp_dir().join(format!(
                    "pforte-test-{}-{}",
                    std::process::id(),
                    rand::random::<u64>()
                ));
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
            pub(crate) fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn create_find_revoke() {
        let (_d, s) = store();
        let mut rng = rand::rng();
        let t = s
            .create(
                &NewToken {
                    name: "ci",
                    scopes: &["mcp:read".into()],
                    routes: &[],
                    expires_at: None,
                },
                100,
                &mut rng,
            )
            .unwrap();
        assert!(t.starts_with(TOKEN_PREFIX) && t.len() > 40);
        let snap = s.snapshot().unwrap();
        assert_eq!(snap.find(&t).unwrap().name, "ci");
        assert!(snap.find("pft_wrong").is_none());
        assert!(matches!(
            s.create(
                &NewToken {
                    name: "ci",
                    scopes: &[],
                    routes: &[],
                    expires_at: None
                },
                101,
                &mut rng
            ),
            Err(StoreError::NameTaken(_))
        ));
        assert!(s.revoke("ci", 102).unwrap());
        assert!(!s.revoke("ci", 103).unwrap());
        assert!(s.snapshot().unwrap().find(&t).is_none());
        // the name is free again, and the old token stays dead
        let t2 = s
            .create(
                &NewToken {
                    name: "ci",
                    scopes: &[],
                    routes: &[],
                    expires_at: None,
                },
                104,
                &mut rng,
            )
            .unwrap();
        let snap = s.snapshot().unwrap();
        assert!(snap.find(&t).is_none() && snap.find(&t2).is_some());
        assert_eq!(s.list().unwrap().len(), 2);
    }

    #[test]
    fn routes_are_kept_and_old_stores_migrate() {
        let (d, s) = store();
        let t = s
            .create(
                &NewToken {
                    name: "w",
                    scopes: &[],
                    routes: &["werkbaum".into(), "plans".into()],
                    expires_at: None,
                },
                1,
                &mut rand::rng(),
            )
            .unwrap();
        assert_eq!(
            s.snapshot().unwrap().find(&t).unwrap().routes,
            ["werkbaum", "plans"]
        );
        assert_eq!(s.list().unwrap()[0].routes, ["werkbaum", "plans"]);
        drop(s);
        // A store written before routes existed: the column is added, its tokens open all.
        let old = d.path().join("old.db");
        let conn = Connection::open(&old).unwrap();
        conn.execute_batch(
            "CREATE TABLE static_tokens (name TEXT NOT NULL, hash BLOB NOT NULL UNIQUE,
             scopes TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER,
             revoked_at INTEGER);
             INSERT INTO static_tokens VALUES ('legacy', x'00', 'mcp:read', 1, NULL, NULL);",
        )
        .unwrap();
        drop(conn);
        let s = TokenStore::open(&old).unwrap();
        let listed = s.list().unwrap();
        assert_eq!(
            (listed[0].name.as_str(), listed[0].routes.len()),
            ("legacy", 0)
        );
        drop(s);
        TokenStore::open(&old).unwrap();
    }

    #[test]
    fn plaintext_is_never_stored() {
        let (d, s) = store();
        let t = s
            .create(
                &NewToken {
                    name: "x",
                    scopes: &[],
                    routes: &[],
                    expires_at: None,
                },
                1,
                &mut rand::rng(),
            )
            .unwrap();
        drop(s);
        let bytes = std::fs::read(d.path().join("t.db")).unwrap();
        let needle = t.as_bytes();
        assert!(!bytes.windows(needle.len()).any(|w| w == needle));
    }

    #[test]
    fn names_are_checked() {
        let (_d, s) = store();
        assert!(matches!(
            s.create(
                &NewToken {
                    name: "a b",
                    scopes: &[],
                    routes: &[],
                    expires_at: None
                },
                1,
                &mut rand::rng()
            ),
            Err(StoreError::BadName)
        ));
    }

    #[test]
    fn data_dir_and_database_files_are_owner_only() {
        use pforte_oauth::mode_of;
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = TokenStore::open(&data.join("pforte.db")).unwrap();
        s.create(
            &NewToken {
                name: "ci",
                scopes: &["mcp:read".to_owned()],
                routes: &[],
                expires_at: None,
            },
            100,
            &mut rand::rng(),
        )
        .unwrap();
        assert_eq!(
            mode_of(&data).unwrap(),
            0o700,
            "an existing data dir is tightened"
        );
        for f in ["pforte.db", "pforte.db-wal", "pforte.db-shm"] {
            assert_eq!(mode_of(&data.join(f)).unwrap(), 0o600, "{f}");
        }
    }

    #[test]
    fn cache_follows_another_connection() {
        let (d, s) = store();
        let cache = TokenCache::start(Arc::new(s), Duration::from_millis(20)).unwrap();
        assert!(cache.get().is_empty());
        let admin = TokenStore::open(&d.path().join("t.db")).unwrap();
        let t = admin
            .create(
                &NewToken {
                    name: "late",
                    scopes: &[],
                    routes: &[],
                    expires_at: None,
                },
                1,
                &mut rand::rng(),
            )
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while cache.get().find(&t).is_none() {
            assert!(std::time::Instant::now() < deadline, "cache never reloaded");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn cache_follows_writes_through_its_own_store() {
        let (_d, s) = store();
        let s = Arc::new(s);
        let cache = TokenCache::start(s.clone(), Duration::from_millis(20)).unwrap();
        let new = NewToken {
            name: "console",
            scopes: &[],
            routes: &[],
            expires_at: None,
        };
        let t = s.create(&new, 1, &mut rand::rng()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while cache.get().find(&t).is_none() {
            assert!(std::time::Instant::now() < deadline, "cache never reloaded");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(s.revoke("console", 2).unwrap());
        while cache.get().find(&t).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "revocation never seen"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
