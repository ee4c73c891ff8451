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
//! The bindings live in `local` (this process) or `redis` (shared by several gateways).

mod local;
mod redis;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use sha2::{Digest as _, Sha256};

use pforte_clock::Clock;

use self::{
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
}

#[derive(Debug)]
enum Backend {
    Local {
        table: Mutex<Table>,
        clock: Arc<dyn Clock>,
    },
    Redis(RedisSessions),
}

impl Sessions {
    /// In-process bindings on `clock`.
    pub(crate) fn local(clock: Arc<dyn Clock>, opts: SessionOptions) -> Self {
        Self {
            backend: Backend::Local {
                table: Mutex::new(Table::new(opts)),
                clock,
            },
        }
    }

    /// Bindings in redis under `<prefix>session:<sha256 hex>`, on redis's clock (`EX`). Connects
    /// lazily and must be called inside the tokio runtime that will drive the connection.
    pub fn redis(url: &str, prefix: &str, opts: SessionOptions) -> Result<Self, SessionError> {
        Ok(Self {
            backend: Backend::Redis(RedisSessions::connect(url, prefix, &opts)?),
        })
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
            Backend::Local { table, clock } => {
                Ok(lock(table).bind(key(session_id), holder, instance, clock.now_ms()))
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
            Backend::Local { table, clock } => {
                Ok(lock(table).check(&key(session_id), holder.owner, clock.now_ms()))
            }
            Backend::Redis(r) => r.check(session_id, holder).await,
        }
    }

    /// Drops the binding of the holder's session (the session ended).
    pub async fn forget(&self, session_id: &str, holder: Holder<'_>) -> Result<(), SessionError> {
        match &self.backend {
            Backend::Local { table, .. } => {
                lock(table).remove(&key(session_id));
                Ok(())
            }
            Backend::Redis(r) => r.forget(session_id, holder).await,
        }
    }

    /// How many sessions the in-process table holds now (expired ones purged); `None` with
    /// redis, whose table all gateways share.
    pub(crate) fn live_local(&self) -> Option<usize> {
        match &self.backend {
            Backend::Local { table, clock } => Some(lock(table).live(clock.now_ms())),
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
            Backend::Local { table, clock } => Ok(lock(table).count(person, clock.now_ms())),
            Backend::Redis(r) => r.count(person).await,
        }
    }
}

/// Whether `owner` may open one more session (or stream) holding `open` of at most `max`.
pub(crate) fn has_room(open: usize, max: u32) -> bool {
    open < max as usize
}
