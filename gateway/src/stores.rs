//! Everything the process keeps — static tokens, the pinned tool definitions, the
//! authorization server's store, the vault's records, the MCP session and task records, the limiter's shared state, the ACME state —
//! opened once per process by [`Stores::open`], the one place that chooses SQLite files in the
//! data dir or redis (`redis_url`), for `serve`, `up` and every admin command alike (each asks
//! for what it [`Needs`]).
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

pub(crate) use crate::config::Site;

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoresError {
    #[error("starting the store runtime: {0}")]
    Runtime(std::io::Error),
    #[error("token store: {0}")]
    Tokens(#[from] tokens::StoreError),
    #[error("{0}")]
    Pins(#[from] crate::pins::PinStoreError),
    #[error("{0}")]
    Approvals(#[from] crate::approvals::ApprovalStoreError),
    #[error("oauth store: {0}")]
    OAuth(#[from] pforte_oauth::StoreError),
    #[error("vault: {0}")]
    Vault(#[from] crate::vault::VaultError),
    #[error("session records: {0}")]
    Sessions(#[from] crate::sessions::SessionError),
    #[error("task records: {0}")]
    Tasks(#[from] crate::tasks::TaskError),
    #[error("rate-limit state: {0}")]
    Limits(#[from] crate::limit::LimitError),
    #[error("ACME state: {0}")]
    Acme(#[from] crate::tls::AcmeStateError),
    #[error("data dir {0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    #[error("the store is being restored: {0}")]
    Lock(#[from] LockError),
    #[error("the {0} store was not opened by this command")]
    NotOpened(&'static str),
}

/// What a command opens: `serve` everything its configuration uses, an admin command the
/// accounts (and the vault's records, to forget a person's), `check` and `vault rekey` the
/// vault alone.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Needs {
    /// Static tokens, the pinned tool definitions and the authorization server's store
    /// (created when absent).
    pub(crate) accounts: bool,
    /// The vault's records.
    pub(crate) vault: VaultNeed,
    /// The MCP session and task records.
    pub(crate) sessions: bool,
    /// The limiter's shared state (with redis; in this process otherwise).
    pub(crate) limits: bool,
    /// The ACME client's account and certificate.
    pub(crate) acme: bool,
}

/// Whether a command opens the vault's records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum VaultNeed {
    #[default]
    No,
    /// Only when there are records (an embedded vault is not created).
    Existing,
    /// Opened, and created when absent.
    Open,
}

impl Needs {
    /// An admin command: the accounts, and the vault's records when they exist.
    pub(crate) const ADMIN: Self = Self {
        accounts: true,
        vault: VaultNeed::Existing,
        sessions: false,
        limits: false,
        acme: false,
    };

    /// The accounts alone (with the pins: `check`'s view of the routes' tools).
    pub(crate) const ACCOUNTS: Self = Self {
        accounts: true,
        vault: VaultNeed::No,
        sessions: false,
        limits: false,
        acme: false,
    };

    /// The vault's existing records alone (`check`, `vault rekey`).
    pub(crate) const VAULT: Self = Self {
        accounts: false,
        vault: VaultNeed::Existing,
        sessions: false,
        limits: false,
        acme: false,
    };

    /// What the gateway `settings` describe keeps: the accounts, sessions and limits; the
    /// vault when a route keeps a credential per user and a key is set; the ACME state with
    /// `[tls.acme]`.
    pub(crate) fn serve(settings: &crate::config::Settings) -> Self {
        let per_user = settings.routes.iter().any(|r| {
            r.upstream_auth
                .as_ref()
                .is_some_and(crate::config::UpstreamAuth::per_user)
        });
        Self {
            accounts: true,
            vault: if per_user && settings.vault_key.is_some() {
                VaultNeed::Open
            } else {
                VaultNeed::No
            },
            sessions: true,
            limits: true,
            acme: settings
                .listen
                .tls
                .as_ref()
                .is_some_and(|t| t.acme.is_some()),
        }
    }
}

/// The runtime the stores' background work (redis connection drivers) lives on: owned here,
/// borrowed by every service that uses a store, stopped last (it outlives pingora's runtimes).
pub(crate) struct StoreRuntime {
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl StoreRuntime {
    fn start() -> Result<Self, StoresError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pforte-store")
            .enable_all()
            .build()
            .map_err(StoresError::Runtime)?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// A handle for those that borrow the runtime.
    pub(crate) fn handle(&self) -> tokio::runtime::Handle {
        self.handle.clone()
    }

    /// Runs `work` to its end on this runtime (from outside any runtime).
    pub(crate) fn block_on<F: std::future::Future>(&self, work: F) -> F::Output {
        self.handle().block_on(work)
    }
}

impl Drop for StoreRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Everything the process keeps, opened once: each part `None` unless [`Needs`] asked for it.
pub(crate) struct Stores {
    pub(crate) tokens: Option<Arc<dyn TokenSource>>,
    /// The pinned tool definitions (`pforte.db`'s `pins` table, or redis), with the accounts.
    pub(crate) pins: Option<Arc<dyn crate::pins::PinStore>>,
    /// Calls held for a person's approval (`pforte.db`'s `approvals` table, or redis), with
    /// the accounts.
    pub(crate) approvals: Option<Arc<dyn crate::approvals::ApprovalStore>>,
    pub(crate) oauth: Option<Arc<dyn Store>>,
    pub(crate) vault: Option<crate::vault::Records>,
    pub(crate) sessions: Option<crate::sessions::Sessions>,
    pub(crate) tasks: Option<crate::tasks::Tasks>,
    /// The limiter's shared state; `None` with the embedded store (the limiter is local).
    pub(crate) limits: Option<Arc<dyn crate::limit::Limiter>>,
    pub(crate) acme: Option<crate::tls::AcmeState>,
    /// Runs the stores' work for this process.
    pub(crate) runtime: StoreRuntime,
    /// The data dir's lock, held shared while the embedded store is open.
    pub(crate) lock: Option<DirLock>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

/// The MCP records' options (the sessions' idle lifetime is the tasks' too).
fn record_options() -> crate::sessions::SessionOptions {
    crate::sessions::SessionOptions::default()
}

impl Stores {
    /// Opens what `needs` asks for of `site` — the one place that chooses SQLite files in the
    /// data dir or redis. Call once per process and pass the result on; `clock` is the
    /// in-process records' time.
    pub(crate) fn open(
        site: &Site,
        needs: Needs,
        clock: Arc<dyn pforte_clock::Clock>,
    ) -> Result<Self, StoresError> {
        let runtime = StoreRuntime::start()?;
        // A redis connection manager spawns its driver on the current runtime: this one.
        let handle = runtime.handle();
        let _in_runtime = handle.enter();
        match site {
            Site::Embedded(dir) => Self::embedded(dir, needs, clock, runtime),
            Site::Redis(url) => Self::redis(url, needs, runtime),
        }
    }

    /// SQLite files in `dir`, under its lock; sessions and tasks in `sessions.db`, limits in
    /// this process, the ACME state in `acme/`.
    fn embedded(
        dir: &Path,
        needs: Needs,
        clock: Arc<dyn pforte_clock::Clock>,
        runtime: StoreRuntime,
    ) -> Result<Self, StoresError> {
        use crate::vault::{Records, VAULT_DB};
        if needs.accounts {
            pforte_oauth::private_dir(dir).map_err(|e| StoresError::DataDir(dir.into(), e))?;
        }
        let vault = match needs.vault {
            VaultNeed::Existing if !dir.join(VAULT_DB).is_file() => false,
            VaultNeed::No => false,
            _ => true,
        };
        // Before the databases: a restore in progress is waited for by nobody.
        let lock = (needs.accounts || vault || needs.sessions)
            .then(|| DirLock::shared(dir))
            .transpose()?;
        let opts = record_options();
        Ok(Self {
            tokens: needs
                .accounts
                .then(|| tokens::TokenStore::open(&dir.join(TOKENS_DB)))
                .transpose()?
                .map(|t| Arc::new(t) as Arc<dyn TokenSource>),
            pins: needs
                .accounts
                .then(|| crate::pins::store::embedded(&dir.join(TOKENS_DB)))
                .transpose()?,
            approvals: needs
                .accounts
                .then(|| crate::approvals::embedded(&dir.join(TOKENS_DB)))
                .transpose()?,
            oauth: needs
                .accounts
                .then(|| SqliteStore::open(&dir.join(OAUTH_DB)))
                .transpose()?
                .map(|s| Arc::new(s) as Arc<dyn Store>),
            vault: vault.then(|| Records::sqlite(dir)).transpose()?,
            sessions: needs
                .sessions
                .then(|| {
                    crate::sessions::Sessions::embedded(
                        &dir.join(SESSIONS_DB),
                        clock.clone(),
                        opts.clone(),
                    )
                })
                .transpose()?,
            tasks: needs
                .sessions
                .then(|| {
                    crate::tasks::Tasks::embedded(
                        &dir.join(SESSIONS_DB),
                        clock,
                        opts.ttl,
                        opts.max_entries,
                    )
                })
                .transpose()?,
            limits: None,
            acme: needs
                .acme
                .then(|| crate::tls::AcmeState::files(dir.join("acme"))),
            runtime,
            lock,
        })
    }

    /// Everything in the redis at `url` (no lock: redis is its own).
    fn redis(url: &str, needs: Needs, runtime: StoreRuntime) -> Result<Self, StoresError> {
        let prefix = "pforte:";
        let opts = record_options();
        Ok(Self {
            tokens: needs
                .accounts
                .then(|| tokens::redis::RedisTokenStore::open(url))
                .transpose()?
                .map(|t| Arc::new(t) as Arc<dyn TokenSource>),
            pins: needs
                .accounts
                .then(|| crate::pins::store::redis(url))
                .transpose()?,
            approvals: needs
                .accounts
                .then(|| crate::approvals::redis(url))
                .transpose()?,
            oauth: needs
                .accounts
                .then(|| RedisStore::connect(url, REDIS_KEY_PREFIX))
                .transpose()?
                .map(|s| Arc::new(s) as Arc<dyn Store>),
            vault: (needs.vault != VaultNeed::No)
                .then(|| crate::vault::Records::redis(url))
                .transpose()?,
            sessions: needs
                .sessions
                .then(|| crate::sessions::Sessions::redis(url, prefix, opts.clone()))
                .transpose()?,
            tasks: needs
                .sessions
                .then(|| crate::tasks::Tasks::redis(url, prefix, opts.ttl))
                .transpose()?,
            limits: needs
                .limits
                .then(|| crate::limit::redis::RedisLimiter::connect(url, "pforte:limit:"))
                .transpose()?
                .map(|l| Arc::new(l) as Arc<dyn crate::limit::Limiter>),
            acme: needs
                .acme
                .then(|| crate::tls::AcmeState::redis(url))
                .transpose()?,
            runtime,
            lock: None,
        })
    }

    /// The static-token store, when this command opened the accounts.
    pub(crate) fn tokens(&self) -> Result<&Arc<dyn TokenSource>, StoresError> {
        self.tokens.as_ref().ok_or(StoresError::NotOpened("token"))
    }

    /// The pinned tool definitions, when this command opened the accounts.
    pub(crate) fn pins(&self) -> Result<&Arc<dyn crate::pins::PinStore>, StoresError> {
        self.pins.as_ref().ok_or(StoresError::NotOpened("pin"))
    }

    /// The authorization server's store, when this command opened the accounts.
    pub(crate) fn oauth(&self) -> Result<&Arc<dyn Store>, StoresError> {
        self.oauth.as_ref().ok_or(StoresError::NotOpened("oauth"))
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

    #[test]
    fn each_command_opens_only_what_it_needs() {
        let dir = tempfile::tempdir().unwrap();
        let site = Site::Embedded(dir.path().to_path_buf());
        let clock: Arc<dyn pforte_clock::Clock> = Arc::new(pforte_clock::SystemClock);
        // `check` on a data dir without a vault: nothing opened, nothing created, no lock.
        let vault = Stores::open(&site, Needs::VAULT, clock.clone()).unwrap();
        assert!(vault.vault.is_none() && vault.tokens.is_none() && vault.lock.is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        drop(vault);
        let admin = Stores::open(&site, Needs::ADMIN, clock.clone()).unwrap();
        assert!(admin.tokens().is_ok() && admin.oauth().is_ok() && admin.lock.is_some());
        assert!(admin.pins().is_ok());
        assert!(admin.vault.is_none() && admin.sessions.is_none() && admin.acme.is_none());
        drop(admin);
        let all = Needs {
            vault: VaultNeed::Open,
            sessions: true,
            limits: true,
            acme: true,
            ..Needs::ACCOUNTS
        };
        let serve = Stores::open(&site, all, clock).unwrap();
        assert!(serve.vault.is_some() && serve.sessions.is_some() && serve.tasks.is_some());
        // The embedded store's limiter is this process's own.
        assert!(serve.limits.is_none() && serve.acme.is_some());
        assert!(dir.path().join(crate::vault::VAULT_DB).is_file());
        assert!(dir.path().join(SESSIONS_DB).is_file());
    }
}
