//! The gateway's two stores — static tokens and the authorization server's — opened once per
//! process, from one place, for `serve`, `up` and every admin command alike: SQLite files in the
//! data dir, or redis when `redis_url` is set.
//!
//! Opening a store twice in one process is what this module exists to prevent: a second open of
//! a live SQLite file outside SQLite (even a bare open/close) drops the process's POSIX locks,
//! and another process closing its connection then checkpoints and deletes the WAL that this
//! one still writes to.
//!
//! Every process with the embedded store open holds the data dir's lock file (`pforte.lock`,
//! `flock`) shared; `pforte restore` takes it exclusively, so it never writes under a running
//! gateway, and nothing opens the store in the middle of a restore.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use pforte_oauth::{REDIS_KEY_PREFIX, RedisStore, SqliteStore, Store};

use crate::tokens::{self, TokenSource};

/// File name of the static-token store in the data dir.
pub(crate) const TOKENS_DB: &str = "pforte.db";
/// File name of the authorization server's store in the data dir.
pub(crate) const OAUTH_DB: &str = "oauth.db";

/// File name of the session records in the data dir (`sessions::Sessions::embedded`).
pub(crate) const SESSIONS_DB: &str = "sessions.db";

/// The data dir's lock file.
pub(crate) const LOCK_FILE: &str = "pforte.lock";

#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    #[error("{0}: {1}")]
    Open(PathBuf, std::io::Error),
    #[error("{} is locked (a restore into the data dir, or a gateway beside it)", .0.display())]
    Held(PathBuf),
}

/// A held lock on a data dir (released when dropped, or when the process ends however it ends).
#[derive(Debug)]
pub(crate) struct DirLock(#[allow(dead_code, reason = "held, not read")] std::fs::File);

impl DirLock {
    /// Shared: the store is open in this process. Refused while a restore holds it.
    pub(crate) fn shared(dir: &Path) -> Result<Self, LockError> {
        Self::take(dir, std::fs::File::try_lock_shared)
    }

    /// Exclusive: nothing else has the store open. Refused while anything does.
    pub(crate) fn exclusive(dir: &Path) -> Result<Self, LockError> {
        Self::take(dir, std::fs::File::try_lock)
    }

    fn take(
        dir: &Path,
        lock: fn(&std::fs::File) -> Result<(), std::fs::TryLockError>,
    ) -> Result<Self, LockError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| LockError::Open(path.clone(), e))?;
        match lock(&file) {
            Ok(()) => Ok(Self(file)),
            Err(std::fs::TryLockError::WouldBlock) => Err(LockError::Held(path)),
            Err(std::fs::TryLockError::Error(e)) => Err(LockError::Open(path, e)),
        }
    }
}

/// Where the stores live.
#[derive(Debug, Clone)]
pub(crate) enum Site {
    /// SQLite files in this data dir.
    Embedded(PathBuf),
    /// One redis for every gateway.
    Redis(String),
}

impl Site {
    /// The site a configuration names: redis when `redis_url` is set, else the data dir.
    pub(crate) fn new(redis_url: Option<&str>, data_dir: &Path) -> Self {
        match redis_url {
            Some(url) => Self::Redis(url.to_owned()),
            None => Self::Embedded(data_dir.to_path_buf()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoresError {
    #[error("starting the store runtime: {0}")]
    Runtime(std::io::Error),
    #[error("token store: {0}")]
    Tokens(#[from] tokens::StoreError),
    #[error("oauth store: {0}")]
    OAuth(#[from] pforte_oauth::StoreError),
    #[error("data dir {0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    #[error("the store is being restored: {0}")]
    Lock(#[from] LockError),
}

/// A second handle on the static-token store of `site`, for the operator console: its writes
/// come from another connection than the snapshot refresher's, so the refresher sees them
/// (SQLite's `data_version` changes only for other connections' writes).
pub(crate) fn token_writer(site: &Site) -> Result<Arc<dyn TokenSource>, StoresError> {
    Ok(match site {
        Site::Embedded(dir) => Arc::new(tokens::TokenStore::open(&dir.join(TOKENS_DB))?),
        Site::Redis(url) => Arc::new(tokens::redis::RedisTokenStore::open(url)?),
    })
}

/// The MCP session records of `site` for `serve`: in redis (entered into `runtime`, which
/// drives its connection), else in the data dir's `sessions.db` behind an in-process table —
/// either way they outlive a restart.
pub(crate) fn sessions(
    site: &Site,
    runtime: Option<&tokio::runtime::Handle>,
    clock: Arc<dyn pforte_clock::Clock>,
) -> Result<crate::sessions::Sessions, crate::sessions::SessionError> {
    use crate::sessions::{SessionOptions, Sessions};
    match (site, runtime) {
        (Site::Redis(url), Some(rt)) => {
            let _in_runtime = rt.enter();
            Sessions::redis(url, "pforte:", SessionOptions::default())
        }
        (Site::Embedded(dir), _) => {
            Sessions::embedded(&dir.join(SESSIONS_DB), clock, SessionOptions::default())
        }
        (Site::Redis(_), None) => Ok(Sessions::local(clock, SessionOptions::default())),
    }
}

/// The task records (`tasks::Tasks`) of `site` for `serve`, where the sessions are: in redis
/// (entered into `runtime`), else in the data dir's `sessions.db` — either way they outlive a
/// restart.
pub(crate) fn tasks(
    site: &Site,
    runtime: Option<&tokio::runtime::Handle>,
    clock: Arc<dyn pforte_clock::Clock>,
) -> Result<crate::tasks::Tasks, crate::tasks::TaskError> {
    use crate::{sessions::SessionOptions, tasks::Tasks};
    let opts = SessionOptions::default();
    match (site, runtime) {
        (Site::Redis(url), Some(rt)) => {
            let _in_runtime = rt.enter();
            Tasks::redis(url, "pforte:", opts.ttl)
        }
        (Site::Embedded(dir), _) => {
            Tasks::embedded(&dir.join(SESSIONS_DB), clock, opts.ttl, opts.max_entries)
        }
        (Site::Redis(_), None) => Ok(Tasks::local(clock, opts.ttl, opts.max_entries)),
    }
}

/// Both stores, and the runtime their background work (redis connection drivers) lives on.
pub(crate) struct Stores {
    pub(crate) tokens: Box<dyn TokenSource>,
    pub(crate) oauth: Arc<dyn Store>,
    /// Runs the OAuth store's work for this process; it outlives pingora's runtimes.
    pub(crate) runtime: tokio::runtime::Runtime,
    /// The data dir's lock, held shared while the embedded store is open.
    pub(crate) lock: Option<DirLock>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

impl Stores {
    /// Opens both stores of `site`. Call once per process and pass the result on.
    pub(crate) fn open(site: &Site) -> Result<Self, StoresError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pforte-store")
            .enable_all()
            .build()
            .map_err(StoresError::Runtime)?;
        // A redis connection manager spawns its driver on the current runtime: this one.
        let _in_runtime = runtime.enter();
        let (tokens, oauth, lock): (Box<dyn TokenSource>, Arc<dyn Store>, _) = match site {
            Site::Embedded(dir) => {
                pforte_oauth::private_dir(dir).map_err(|e| StoresError::DataDir(dir.clone(), e))?;
                // Before the databases: a restore in progress is waited for by nobody.
                let lock = DirLock::shared(dir)?;
                (
                    Box::new(tokens::TokenStore::open(&dir.join(TOKENS_DB))?),
                    Arc::new(SqliteStore::open(&dir.join(OAUTH_DB))?),
                    Some(lock),
                )
            }
            Site::Redis(url) => (
                Box::new(tokens::redis::RedisTokenStore::open(url)?),
                Arc::new(RedisStore::connect(url, REDIS_KEY_PREFIX)?),
                None,
            ),
        };
        drop(_in_runtime);
        Ok(Self {
            tokens,
            oauth,
            runtime,
            lock,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_restore_and_an_open_store_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let gateway = DirLock::shared(dir.path()).unwrap();
        let admin = DirLock::shared(dir.path()).unwrap();
        assert!(matches!(
            DirLock::exclusive(dir.path()),
            Err(LockError::Held(p)) if p == dir.path().join(LOCK_FILE)
        ));
        drop((gateway, admin));
        let restore = DirLock::exclusive(dir.path()).unwrap();
        assert!(matches!(
            DirLock::shared(dir.path()),
            Err(LockError::Held(_))
        ));
        drop(restore);
        assert_eq!(
            pforte_oauth::mode_of(&dir.path().join(LOCK_FILE)).unwrap(),
            0o600
        );
    }
}
