//! Which principal opened each MCP session (`Mcp-Session-Id`), so that a session id presented
//! with another principal's credential can be refused, and which upstream instance serves it
//! (a route with several `urls`), so that every request of the session reaches that instance.
//! In-process (bounded, expiring) for one gateway, or in redis for several. Session ids are
//! stored as their SHA-256 only; the instance as its URL, as configured, so every gateway with
//! the same configuration on the same redis routes a session alike.
//!
//! Bindings slide: every use by the owner keeps the session alive for another `ttl`, but the
//! expiry is rewritten at most every `ttl / 4` per session (no write per request).
//!
//! A session is owned by the principal that opened it (`kind:subject:client`) but counted
//! against the person (`auth::person_key`: an OAuth user whatever the client): both backends count the live
//! sessions of each person ([`Sessions::count`]), so that a new session is refused once a person
//! holds `limits.sessions_per_principal`, however many clients they registered; a binding is
//! released by `DELETE`, expiry or eviction. Open SSE streams are counted apart, in
//! `crate::streams`.
//!
//! At the cap nobody is locked out: [`Sessions::make_room`] closes the person's least recently
//! used *idle* session — never one with a request in flight or an open stream on this gateway
//! ([`InUse`], held for the duration of each request in a session) — writes an audit line
//! naming it, and its next use gets 404, so its client initializes again.
//!
//! The bindings live in `local` (this process), backed by `disk` (SQLite in the data dir, so
//! that sessions outlive a restart; read whole at start, new bindings written before their
//! `initialize` is answered, the rest off the request's path) or in `redis` (shared by several
//! gateways, outliving each of them).

mod disk;
mod local;
mod redis;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use sha2::{Digest as _, Sha256};

use pforte_clock::Clock;

use crate::audit::{AuditLog, SessionRecord, session_tag};

use self::{
    disk::Disk,
    local::{Table, lock},
    redis::RedisSessions,
};

/// Who binds or uses a session: the principal that owns it, and the person it counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    /// `kind:subject:client`: only this principal may use the session.
    pub(crate) owner: &'a str,
    /// `auth::person_key`: the sessions of all of a person's clients count together.
    pub(crate) person: &'a str,
}

impl<'a> Holder<'a> {
    pub fn new(owner: &'a str, person: &'a str) -> Self {
        Self { owner, person }
    }
}

/// Who a session belongs to, as seen by a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Bound to this caller.
    Owner,
    /// Bound to another principal.
    Foreign,
    /// Never seen (or expired): the caller may bind it.
    Unknown,
}

/// A caller's standing on a session, and the instance recorded with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub ownership: Ownership,
    /// The upstream instance (its URL) that serves the session. Only told to the owner; `None`
    /// when the record has none (a route with one instance, a session bound on its first use,
    /// or a record written before instances were kept).
    pub(crate) instance: Option<String>,
}

impl Binding {
    /// The owner's standing, with the record's instance.
    pub(crate) fn owner(instance: Option<String>) -> Self {
        Self {
            ownership: Ownership::Owner,
            instance,
        }
    }

    pub(crate) const FOREIGN: Self = Self {
        ownership: Ownership::Foreign,
        instance: None,
    };

    pub(crate) const UNKNOWN: Self = Self {
        ownership: Ownership::Unknown,
        instance: None,
    };

    /// The standing of `caller` on a record of `owner` served by `instance`.
    fn of(caller: &str, owner: &str, instance: Option<&str>) -> Self {
        if caller == owner {
            Self::owner(instance.map(str::to_owned))
        } else {
            Self::FOREIGN
        }
    }
}

/// The shared store could not answer; the proxy fails closed (503).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session store unavailable: {0}")]
    Unavailable(String),
}

/// Limits of the session table.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Idle lifetime of a binding (default 24 h).
    pub ttl: Duration,
    /// In-process backend: at most this many bindings; the one expiring first is evicted to
    /// make room (default 100 000).
    pub max_entries: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(24 * 3600),
            max_entries: 100_000,
        }
    }
}

type Key = [u8; 32];

/// Whether `instance` can be kept with a record (redis separates it from the owner by the
/// last newline; a URL has none).
fn is_storable(instance: &str) -> bool {
    !instance.is_empty() && !instance.contains('\n')
}

fn key(session_id: &str) -> Key {
    Sha256::digest(session_id.as_bytes()).into()
}

/// The session bindings. Share it as `Arc<Sessions>`.
#[derive(Debug)]
pub struct Sessions {
    backend: Backend,
    /// Sessions with requests in flight on this gateway (a count per hashed id, and the person
    /// it counts against), spared by [`Sessions::make_room`].
    busy: Mutex<HashMap<Key, (usize, Box<str>)>>,
    /// Where evictions are written; `None`: nowhere.
    audit: Option<AuditLog>,
    /// Wall-clock time of the audit lines.
    clock: Arc<dyn Clock>,
}

#[derive(Debug)]
enum Backend {
    Local {
        table: Mutex<Table>,
        clock: Arc<dyn Clock>,
        /// The store behind the table (`None`: this process only).
        disk: Option<Disk>,
    },
    Redis(RedisSessions),
}

/// A request in flight in a session (or its open stream): while held, the session is not
/// evicted to make room at its person's cap. Taken by [`Sessions::in_use`], released on drop.
#[derive(Debug)]
pub(crate) struct InUse {
    sessions: Arc<Sessions>,
    key: Key,
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut busy = self.sessions.busy();
        if let Some((n, _)) = busy.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                busy.remove(&self.key);
            }
        }
    }
}

impl Sessions {
    fn with_backend(backend: Backend, clock: Arc<dyn Clock>) -> Self {
        Self {
            backend,
            busy: Mutex::default(),
            audit: None,
            clock,
        }
    }

    /// In-process bindings on `clock` (the tests'; the gateway's are `embedded` or `redis`).
    #[cfg(test)]
    pub(crate) fn local(clock: Arc<dyn Clock>, opts: SessionOptions) -> Self {
        Self::with_backend(
            Backend::Local {
                table: Mutex::new(Table::new(opts)),
                clock: clock.clone(),
                disk: None,
            },
            clock,
        )
    }

    /// In-process bindings on `clock` kept in the SQLite database at `path` (created
    /// owner-only), so they outlive a restart: the live records are read now. Blocking.
    pub fn embedded(
        path: &Path,
        clock: Arc<dyn Clock>,
        opts: SessionOptions,
    ) -> Result<Self, SessionError> {
        let disk = Disk::open(path)?;
        let now = clock.now_ms();
        let table = Table::journaled(opts, disk.load(now)?, now);
        Ok(Self::with_backend(
            Backend::Local {
                table: Mutex::new(table),
                clock: clock.clone(),
                disk: Some(disk),
            },
            clock,
        ))
    }

    /// Bindings in redis under `<prefix>session:<sha256 hex>`, on redis's clock (`EX`). Connects
    /// lazily and must be called inside the tokio runtime that will drive the connection.
    pub fn redis(url: &str, prefix: &str, opts: SessionOptions) -> Result<Self, SessionError> {
        Ok(Self::with_backend(
            Backend::Redis(RedisSessions::connect(url, prefix, &opts)?),
            Arc::new(pforte_clock::SystemClock),
        ))
    }

    /// Evictions are written to `audit`.
    pub(crate) fn with_audit(mut self, audit: Option<AuditLog>) -> Self {
        self.audit = audit;
        self
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (usize, Box<str>)>> {
        self.busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `session_id` in use by a request of `holder` until the guard drops.
    pub(crate) fn in_use(self: &Arc<Self>, session_id: &str, holder: Holder<'_>) -> InUse {
        let key = key(session_id);
        self.busy()
            .entry(key)
            .or_insert_with(|| (0, holder.person.into()))
            .0 += 1;
        InUse {
            sessions: self.clone(),
            key,
        }
    }

    /// This gateway's sessions of `person` with a request in flight.
    fn busy_of(&self, person: &str) -> Vec<Key> {
        self.busy()
            .iter()
            .filter(|(_, (_, p))| &**p == person)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Room for one more session of `holder`'s person under `max`: `true` when there is (after
    /// closing their least recently used idle sessions, each audited), `false` when every
    /// session they hold is busy.
    pub(crate) async fn make_room(
        &self,
        holder: Holder<'_>,
        max: u32,
    ) -> Result<bool, SessionError> {
        let max = max as usize;
        let busy = self.busy_of(holder.person);
        let evicted: Vec<(Key, Option<u64>)> = match &self.backend {
            Backend::Local { table, clock, disk } => {
                let (room, writes) = {
                    let mut t = lock(table);
                    let room =
                        t.make_room(holder.person, max, &|k| busy.contains(k), clock.now_ms());
                    (room, t.take_journal())
                };
                if let Some(disk) = disk {
                    disk.apply_later(writes);
                }
                match room {
                    Ok(evicted) => evicted
                        .into_iter()
                        .map(|e| (e.key, Some(e.idle_ms)))
                        .collect(),
                    Err(()) => return Ok(false),
                }
            }
            Backend::Redis(r) => match r.make_room(holder.person, max, &busy).await? {
                Some(evicted) => evicted,
                None => return Ok(false),
            },
        };
        for (key, idle_ms) in evicted {
            self.note_eviction(holder.person, &key, idle_ms, max);
        }
        Ok(true)
    }

    fn note_eviction(&self, person: &str, key: &Key, idle_ms: Option<u64>, max: usize) {
        let session = session_tag(key);
        tracing::info!(
            person = %crate::logging::untrusted_name(person),
            session = %session,
            idle_ms,
            "session closed to make room at limits.sessions_per_principal: its next use gets 404"
        );
        if let Some(audit) = &self.audit {
            audit.record(&SessionRecord {
                time_ms: self.clock.now_ms(),
                event: "session_evicted",
                route: None,
                person,
                session: &session,
                idle_ms,
                limit: "limits.sessions_per_principal",
                max,
            });
        }
    }

    /// Binds `session_id` to `owner`, served by `instance`, unless it is bound already: the
    /// first binding wins, instance included. Returns the caller's standing afterwards
    /// (`Owner` with the recorded instance, or `Foreign` when another principal holds it).
    pub async fn bind(
        &self,
        session_id: &str,
        holder: Holder<'_>,
        instance: Option<&str>,
    ) -> Result<Binding, SessionError> {
        let instance = instance.filter(|i| is_storable(i));
        match &self.backend {
            Backend::Local { table, clock, disk } => {
                let (binding, writes) = {
                    let mut t = lock(table);
                    let binding = t.bind(key(session_id), holder, instance, clock.now_ms());
                    (binding, t.take_journal())
                };
                // Written before the `initialize` answer leaves: a clean restart keeps it. The
                // table is this process's truth: a failed write costs only the restart.
                if let Some(disk) = disk
                    && let Err(e) = disk.apply(writes).await
                {
                    tracing::warn!(error = %e, "could not write a session record to sessions.db");
                }
                Ok(binding)
            }
            Backend::Redis(r) => r.bind(session_id, holder, instance).await,
        }
    }

    /// The holder's standing on `session_id` and the session's instance; an owner's use slides
    /// the expiry.
    pub async fn check(
        &self,
        session_id: &str,
        holder: Holder<'_>,
    ) -> Result<Binding, SessionError> {
        match &self.backend {
            Backend::Local { table, clock, disk } => {
                let (binding, writes) = {
                    let mut t = lock(table);
                    let binding = t.check(&key(session_id), holder.owner, clock.now_ms());
                    (binding, t.take_journal())
                };
                if let Some(disk) = disk {
                    disk.apply_later(writes);
                }
                Ok(binding)
            }
            Backend::Redis(r) => r.check(session_id, holder).await,
        }
    }

    /// Whether `session_id` is bound now (not ended, expired or evicted): a look that slides
    /// no expiry (a virtual server asks it of the downstream sessions it holds member sessions
    /// for).
    pub(crate) async fn is_bound(&self, session_id: &str) -> Result<bool, SessionError> {
        match &self.backend {
            Backend::Local { table, clock, .. } => {
                Ok(lock(table).is_live(&key(session_id), clock.now_ms()))
            }
            Backend::Redis(r) => r.is_bound(session_id).await,
        }
    }

    /// Drops the binding of the holder's session (the session ended).
    pub async fn forget(&self, session_id: &str, holder: Holder<'_>) -> Result<(), SessionError> {
        self.forget_key(&key(session_id), holder).await
    }

    /// Drops the binding of the session a request held in use: its upstream answered 404 (it
    /// ended there: a restarted stdio bridge, a session a bridge evicted).
    pub(crate) async fn forget_in_use(
        &self,
        in_use: &InUse,
        holder: Holder<'_>,
    ) -> Result<(), SessionError> {
        self.forget_key(&in_use.key, holder).await
    }

    async fn forget_key(&self, key: &Key, holder: Holder<'_>) -> Result<(), SessionError> {
        match &self.backend {
            Backend::Local { table, disk, .. } => {
                let writes = {
                    let mut t = lock(table);
                    if t.owner_of(key) == Some(holder.owner) {
                        t.remove(key);
                    }
                    t.take_journal()
                };
                if let Some(disk) = disk
                    && let Err(e) = disk.apply(writes).await
                {
                    tracing::warn!(error = %e, "could not delete a session record from sessions.db");
                }
                Ok(())
            }
            Backend::Redis(r) => r.forget(key, holder).await,
        }
    }

    /// How many sessions the in-process table holds now (expired ones purged); `None` with
    /// redis, whose table all gateways share.
    pub(crate) fn live_local(&self) -> Option<usize> {
        match &self.backend {
            Backend::Local { table, clock, .. } => Some(lock(table).live(clock.now_ms())),
            Backend::Redis(_) => None,
        }
    }

    /// How many live sessions `person` holds, through all their clients.
    /// How many sessions this process holds (`None` with redis: every gateway's, not counted).
    pub(crate) fn live(&self) -> Option<usize> {
        match &self.backend {
            Backend::Local { table, .. } => table.lock().ok().map(|t| t.len()),
            Backend::Redis(_) => None,
        }
    }

    pub async fn count(&self, person: &str) -> Result<usize, SessionError> {
        match &self.backend {
            Backend::Local { table, clock, .. } => Ok(lock(table).count(person, clock.now_ms())),
            Backend::Redis(r) => r.count(person).await,
        }
    }
}

/// Whether `owner` may open one more session (or stream) holding `open` of at most `max`.
pub(crate) fn has_room(open: usize, max: u32) -> bool {
    open < max as usize
}
