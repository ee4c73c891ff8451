//! The vault: per-user upstream credentials (API keys, OAuth tokens) sealed at rest, in SQLite in
//! the data dir or in redis when `redis_url` is set, plus the short-lived records of the connect
//! flow (single-use links, pending authorizations) and the lock that makes a refresh
//! single-flight across gateways.
//!
//! What is sealed (AES-256-GCM, `keys.rs`): every secret value, every token, and the pending
//! records (a PKCE verifier, whose link it is). What is not: the route, the person key, the
//! state and the times that `/account` lists. Secrets leave this module only as [`Entry`] values
//! whose `Debug` is redacted; nothing here logs them.

mod backend;
mod keys;
mod redis;
mod scan;
mod sqlite;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    future::Future,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use pforte_clock::Clock;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::auth::AuthKind;
use backend::{Backend, Row};
pub(crate) use keys::{KeyError, KeyRing, generate_line};

/// File name of the vault in the data dir.
pub(crate) const VAULT_DB: &str = "vault.db";
/// Prefix of the vault's redis keys.
pub(crate) const DEFAULT_PREFIX: &str = "pforte:vault:";

/// Why the vault did not answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VaultError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("vault record of {route:?}: {source}")]
    Seal {
        route: String,
        source: keys::SealError,
    },
    #[error(
        "the vault key ring opens {opened} of the {total} stored credentials (route {route:?}: \
         {reason}): give the gateway the key ring they were sealed with (after `pforte vault \
         keygen`, keep the old key as a later line until `pforte vault rekey` has run)"
    )]
    Ring {
        opened: usize,
        total: usize,
        route: String,
        reason: keys::SealError,
    },
    #[error("vault storage: {0}")]
    Storage(String),
    #[error("vault record is corrupt: {0}")]
    Corrupt(String),
}

impl From<rusqlite::Error> for VaultError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Storage(e.to_string())
    }
}

impl From<::redis::RedisError> for VaultError {
    fn from(e: ::redis::RedisError) -> Self {
        Self::Storage(e.to_string())
    }
}

/// Whether a credential works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    Connected,
    /// The upstream refused it (a refresh was denied, or it answered 401 after one).
    NeedsReconnect,
}

/// An upstream OAuth grant of one user.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OAuthTokens {
    pub(crate) access_token: String,
    pub(crate) refresh_token: Option<String>,
    pub(crate) expires_at_ms: Option<u64>,
    pub(crate) scope: Option<String>,
    /// The client the tokens were issued to (a registration, or a metadata document's URL).
    pub(crate) client_id: String,
}

impl fmt::Debug for OAuthTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthTokens")
            .field("expires_at_ms", &self.expires_at_ms)
            .field("scope", &self.scope)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// What a record keeps sealed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Secret {
    /// Named values a user entered (a header's, or a stdio route's variables).
    Values(BTreeMap<String, String>),
    OAuth(OAuthTokens),
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Values(v) => f
                .debug_tuple("Values")
                .field(&v.keys().collect::<Vec<_>>())
                .finish(),
            Self::OAuth(t) => f.debug_tuple("OAuth").field(t).finish(),
        }
    }
}

/// One user's credential for one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) route: String,
    /// `auth::person_key` of the user.
    pub(crate) person: String,
    pub(crate) secret: Secret,
    pub(crate) state: State,
    pub(crate) connected_ms: u64,
    pub(crate) refreshed_ms: Option<u64>,
    pub(crate) expires_at_ms: Option<u64>,
    /// Bumped by every write; set by the vault.
    pub(crate) version: u64,
}

/// A record as `/account` lists it: no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) route: String,
    pub(crate) state: State,
    pub(crate) connected_ms: u64,
    pub(crate) refreshed_ms: Option<u64>,
    pub(crate) expires_at_ms: Option<u64>,
}

/// Whose connect link a token is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LinkGrant {
    pub(crate) route: String,
    pub(crate) person: String,
    pub(crate) principal_kind: AuthKind,
    pub(crate) subject: String,
}

/// A started connect: an upstream authorization waiting for its callback (by `state`), or a
/// secret form waiting for its post (by ticket; `pkce_verifier` empty).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Flow {
    pub(crate) route: String,
    pub(crate) person: String,
    pub(crate) pkce_verifier: String,
    pub(crate) redirect_uri: String,
    pub(crate) client_id: String,
    /// Whatever else the callback checks (the browser binding).
    pub(crate) extra: serde_json::Value,
}

impl fmt::Debug for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flow")
            .field("route", &self.route)
            .field("person", &self.person)
            .finish_non_exhaustive()
    }
}

/// Tuning; the defaults suit production.
#[derive(Debug, Clone)]
pub(crate) struct VaultOptions {
    /// How long a refresh may hold the lock before another gateway may take over.
    pub(crate) lock_ttl: Duration,
    /// How often a caller waiting for another's refresh looks again.
    pub(crate) lock_poll: Duration,
}

impl Default for VaultOptions {
    fn default() -> Self {
        Self {
            lock_ttl: Duration::from_secs(30),
            lock_poll: Duration::from_millis(50),
        }
    }
}

/// What `refresh_with` did.
#[derive(Debug)]
pub(crate) struct Refreshed {
    pub(crate) entry: Entry,
    /// `false`: the stored credential was fresh already (another caller refreshed it).
    pub(crate) refreshed: bool,
}

/// Why `refresh_with` gave no credential.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RefreshError<E> {
    #[error(transparent)]
    Vault(#[from] VaultError),
    #[error("no credential stored")]
    Missing,
    #[error("another refresh of this credential did not finish in time")]
    Busy,
    #[error("refresh: {0}")]
    Refresh(E),
}

/// Refresh counts since start: what the logs and tests read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefreshStats {
    /// Refreshes this process made.
    pub(crate) refreshed: u64,
    /// Callers that found a stale credential and then took another caller's (this process's
    /// or another gateway's) refresh instead of making their own.
    pub(crate) joined: u64,
}

/// One credential's in-process refresh queue.
type Flight = Arc<tokio::sync::Mutex<()>>;

/// The vault of one gateway process.
pub(crate) struct Vault {
    backend: Arc<dyn Backend>,
    ring: KeyRing,
    clock: Arc<dyn Clock>,
    options: VaultOptions,
    /// Per (route, person): the in-process half of the single flight.
    flights: Mutex<HashMap<(String, String), Flight>>,
    stats: Mutex<RefreshStats>,
    /// Names this process's lock holds (unique per process).
    owner: String,
}

impl fmt::Debug for Vault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vault")
            .field("ring", &self.ring)
            .finish_non_exhaustive()
    }
}

/// The associated data binding a record's seal to its row.
fn record_context(route: &str, person: &str) -> String {
    format!("pforte-vault/record\0{route}\0{person}")
}

/// The associated data binding a pending record's seal to its id.
fn pending_context(id: &str) -> String {
    format!("pforte-vault/pending\0{id}")
}

/// The stored id of a pending record: a hash, so the store never holds a usable link.
fn pending_id(kind: &str, token: &str) -> String {
    format!("{kind}:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

impl Vault {
    /// The vault on `records` (as [`crate::stores::Stores::open`] opened them), sealing and
    /// opening with `ring`.
    pub(crate) fn open(
        records: Records,
        ring: KeyRing,
        clock: Arc<dyn Clock>,
        options: VaultOptions,
    ) -> Self {
        Self::new(records.0, ring, clock, options)
    }

    fn new(
        backend: Arc<dyn Backend>,
        ring: KeyRing,
        clock: Arc<dyn Clock>,
        options: VaultOptions,
    ) -> Self {
        Self {
            backend,
            ring,
            clock,
            options,
            flights: Mutex::new(HashMap::new()),
            stats: Mutex::new(RefreshStats::default()),
            owner: uuid::Uuid::new_v4().to_string(),
        }
    }

    fn seal(&self, route: &str, person: &str, secret: &Secret) -> Result<String, VaultError> {
        let plain = serde_json::to_vec(secret).map_err(|e| VaultError::Corrupt(e.to_string()))?;
        self.ring
            .seal(&record_context(route, person), &plain)
            .map_err(|source| VaultError::Seal {
                route: route.to_owned(),
                source,
            })
    }

    fn entry(&self, row: Row) -> Result<Entry, VaultError> {
        let plain = self
            .ring
            .open(&record_context(&row.route, &row.person), &row.sealed)
            .map_err(|source| VaultError::Seal {
                route: row.route.clone(),
                source,
            })?;
        let secret: Secret =
            serde_json::from_slice(&plain).map_err(|e| VaultError::Corrupt(e.to_string()))?;
        Ok(Entry {
            route: row.route,
            person: row.person,
            secret,
            state: row.state,
            connected_ms: row.connected_ms,
            refreshed_ms: row.refreshed_ms,
            expires_at_ms: row.expires_at_ms,
            version: row.version,
        })
    }

    /// `person`'s credential for `route`.
    pub(crate) async fn get(&self, route: &str, person: &str) -> Result<Option<Entry>, VaultError> {
        match self.backend.get(route, person).await? {
            Some(row) => self.entry(row).map(Some),
            None => Ok(None),
        }
    }

    /// Stores `entry` (replacing the user's record for the route), one version past the last.
    pub(crate) async fn put(&self, entry: &Entry) -> Result<u64, VaultError> {
        let sealed = self.seal(&entry.route, &entry.person, &entry.secret)?;
        let row = Row {
            route: entry.route.clone(),
            person: entry.person.clone(),
            state: entry.state,
            connected_ms: entry.connected_ms,
            refreshed_ms: entry.refreshed_ms,
            expires_at_ms: entry.expires_at_ms,
            version: 0,
            sealed,
        };
        self.backend.put(row).await
    }

    /// Marks `person`'s credential for `route`; `false`: there is none.
    pub(crate) async fn set_state(
        &self,
        route: &str,
        person: &str,
        state: State,
    ) -> Result<bool, VaultError> {
        let Some(mut row) = self.backend.get(route, person).await? else {
            return Ok(false);
        };
        row.state = state;
        self.backend.put(row).await.map(|_| true)
    }

    /// Forgets `person`'s credential for `route` (disconnect); `false`: there was none.
    pub(crate) async fn remove(&self, route: &str, person: &str) -> Result<bool, VaultError> {
        self.backend.remove(route, person).await
    }

    /// Forgets every credential of a route not in `routes` (the route was deleted).
    pub(crate) async fn retain_routes(&self, routes: &[&str]) -> Result<usize, VaultError> {
        let mut removed = 0;
        for row in self.backend.all().await? {
            if !routes.contains(&row.route.as_str())
                && self.backend.remove(&row.route, &row.person).await?
            {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// `person`'s credentials, without their secrets.
    pub(crate) async fn list(&self, person: &str) -> Result<Vec<Summary>, VaultError> {
        let mut rows = self.backend.list(person).await?;
        rows.sort_by(|a, b| a.route.cmp(&b.route));
        Ok(rows
            .into_iter()
            .map(|r| Summary {
                route: r.route,
                state: r.state,
                connected_ms: r.connected_ms,
                refreshed_ms: r.refreshed_ms,
                expires_at_ms: r.expires_at_ms,
            })
            .collect())
    }

    /// Re-seals every record not under the ring's current key; how many were. A record no key
    /// of the ring opens is an error (nothing is dropped).
    pub(crate) async fn rekey(&self) -> Result<usize, VaultError> {
        let mut done = 0;
        for row in self.backend.all().await? {
            if self.ring.is_current(&row.sealed) {
                continue;
            }
            let entry = self.entry(row.clone())?;
            let sealed = self.seal(&entry.route, &entry.person, &entry.secret)?;
            if self.backend.reseal(&row, sealed).await? {
                done += 1;
            }
        }
        Ok(done)
    }

    /// A single-use connect link token for `grant`, good for `ttl`.
    pub(crate) async fn issue_link(
        &self,
        grant: &LinkGrant,
        ttl: Duration,
    ) -> Result<String, VaultError> {
        let token = random_token();
        self.put_pending("link", &token, grant, ttl).await?;
        Ok(token)
    }

    /// The grant of link `token`, once; `None` when unknown, used or expired.
    pub(crate) async fn take_link(&self, token: &str) -> Result<Option<LinkGrant>, VaultError> {
        self.take_pending("link", token).await
    }

    /// Keeps `flow` under `state` for `ttl`.
    pub(crate) async fn put_flow(
        &self,
        state: &str,
        flow: &Flow,
        ttl: Duration,
    ) -> Result<(), VaultError> {
        self.put_pending("flow", state, flow, ttl).await
    }

    /// The flow under `state`, once.
    pub(crate) async fn take_flow(&self, state: &str) -> Result<Option<Flow>, VaultError> {
        self.take_pending("flow", state).await
    }

    async fn put_pending<T: Serialize>(
        &self,
        kind: &str,
        token: &str,
        value: &T,
        ttl: Duration,
    ) -> Result<(), VaultError> {
        let id = pending_id(kind, token);
        let plain = serde_json::to_vec(value).map_err(|e| VaultError::Corrupt(e.to_string()))?;
        let sealed = self
            .ring
            .seal(&pending_context(&id), &plain)
            .map_err(|source| VaultError::Seal {
                route: String::new(),
                source,
            })?;
        let until = self.clock.now_ms().saturating_add(millis(ttl));
        self.backend.put_pending(&id, &sealed, until, ttl).await
    }

    async fn take_pending<T: for<'de> Deserialize<'de>>(
        &self,
        kind: &str,
        token: &str,
    ) -> Result<Option<T>, VaultError> {
        if token.is_empty() || token.len() > 200 {
            return Ok(None);
        }
        let id = pending_id(kind, token);
        let Some(sealed) = self.backend.take_pending(&id, self.clock.now_ms()).await? else {
            return Ok(None);
        };
        let plain = self
            .ring
            .open(&pending_context(&id), &sealed)
            .map_err(|source| VaultError::Seal {
                route: String::new(),
                source,
            })?;
        serde_json::from_slice(&plain)
            .map(Some)
            .map_err(|e| VaultError::Corrupt(e.to_string()))
    }

    /// The refresh counts since start.
    pub(crate) fn stats(&self) -> RefreshStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    fn count(&self, f: impl FnOnce(&mut RefreshStats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }

    fn flight(&self, route: &str, person: &str) -> Flight {
        let mut map = match self.flights.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Forget flights nobody waits on, so the map holds only live ones.
        if map.len() > 1024 {
            map.retain(|_, m| Arc::strong_count(m) > 1);
        }
        map.entry((route.to_owned(), person.to_owned()))
            .or_default()
            .clone()
    }

    /// The stored credential, and whether another caller's refresh already made it fresh
    /// (then it is counted as joined).
    async fn read_for_refresh<E>(
        &self,
        route: &str,
        person: &str,
        is_stale: &impl Fn(&Entry) -> bool,
    ) -> Result<Result<Refreshed, Entry>, RefreshError<E>> {
        let entry = self
            .get(route, person)
            .await?
            .ok_or(RefreshError::Missing)?;
        if is_stale(&entry) {
            return Ok(Err(entry));
        }
        self.count(|s| s.joined += 1);
        Ok(Ok(Refreshed {
            entry,
            refreshed: false,
        }))
    }

    /// `person`'s credential for `route`, refreshed by `refresh` if `is_stale` says so — by one
    /// caller at a time: callers in this process queue on a mutex, gateways sharing the store
    /// on a lock in it; whoever comes second re-reads the record and takes the first's result.
    pub(crate) async fn refresh_with<S, F, Fut, E>(
        &self,
        route: &str,
        person: &str,
        is_stale: S,
        refresh: F,
    ) -> Result<Refreshed, RefreshError<E>>
    where
        S: Fn(&Entry) -> bool,
        F: FnOnce(Entry) -> Fut,
        Fut: Future<Output = Result<Entry, E>>,
    {
        let flight = self.flight(route, person);
        let _local = flight.lock().await;
        if let Ok(fresh) = self.read_for_refresh(route, person, &is_stale).await? {
            return Ok(fresh);
        }
        let lock = format!("refresh/{route}/{person}");
        let deadline = tokio::time::Instant::now() + self.options.lock_ttl;
        loop {
            let now = self.clock.now_ms();
            let until = now.saturating_add(millis(self.options.lock_ttl));
            if self
                .backend
                .try_lock(&lock, &self.owner, until, now, self.options.lock_ttl)
                .await?
            {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RefreshError::Busy);
            }
            tokio::time::sleep(self.options.lock_poll).await;
            if let Ok(fresh) = self.read_for_refresh(route, person, &is_stale).await? {
                return Ok(fresh);
            }
        }
        let outcome = self.refresh_locked(route, person, is_stale, refresh).await;
        if let Err(e) = self.backend.unlock(&lock, &self.owner).await {
            tracing::warn!(route, error = %e, "vault: could not release a refresh lock (it expires)");
        }
        outcome
    }

    async fn refresh_locked<S, F, Fut, E>(
        &self,
        route: &str,
        person: &str,
        is_stale: S,
        refresh: F,
    ) -> Result<Refreshed, RefreshError<E>>
    where
        S: Fn(&Entry) -> bool,
        F: FnOnce(Entry) -> Fut,
        Fut: Future<Output = Result<Entry, E>>,
    {
        // Another gateway may have refreshed between our last read and the lock.
        let current = match self.read_for_refresh(route, person, &is_stale).await? {
            Ok(fresh) => return Ok(fresh),
            Err(stale) => stale,
        };
        let mut fresh = refresh(current).await.map_err(RefreshError::Refresh)?;
        fresh.version = self.put(&fresh).await?;
        self.count(|s| s.refreshed += 1);
        Ok(Refreshed {
            entry: fresh,
            refreshed: true,
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// 32 random bytes, base64url: a link, a ticket, a browser binding.
pub(crate) fn random_token() -> String {
    use base64::Engine as _;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The vault's stored records (sealed: no key is needed to open them or to remove a person's),
/// opened by [`crate::stores::Stores::open`].
#[derive(Clone)]
pub(crate) struct Records(Arc<dyn Backend>);

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Records").finish_non_exhaustive()
    }
}

impl Records {
    /// `vault.db` in `data_dir` (created owner-only). Blocking.
    pub(crate) fn sqlite(data_dir: &Path) -> Result<Self, VaultError> {
        Ok(Self(Arc::new(sqlite::SqliteBackend::open(
            &data_dir.join(VAULT_DB),
        )?)))
    }

    /// In redis at `url` under [`DEFAULT_PREFIX`]. Call inside a tokio runtime.
    pub(crate) fn redis(url: &str) -> Result<Self, VaultError> {
        Ok(Self(Arc::new(redis::RedisBackend::open(
            url,
            DEFAULT_PREFIX,
        )?)))
    }

    /// Removes every credential of `person` (a removed user or revoked token).
    pub(crate) async fn forget_person(&self, person: &str) -> Result<usize, VaultError> {
        self.0.remove_person(person).await
    }
}
