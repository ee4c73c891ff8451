//! What the vault needs of a store: rows keyed by (route, person) whose secret is already
//! sealed, single-use pending records with an expiry, and a named lock with a lease. SQLite and
//! redis implement it; nothing here sees a plaintext secret.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{State, VaultError};

/// One stored credential: metadata in clear, the secret sealed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) route: String,
    pub(crate) person: String,
    pub(crate) state: State,
    pub(crate) connected_ms: u64,
    pub(crate) refreshed_ms: Option<u64>,
    pub(crate) expires_at_ms: Option<u64>,
    pub(crate) version: u64,
    pub(crate) sealed: String,
}

#[async_trait::async_trait]
pub(crate) trait Backend: Send + Sync {
    async fn get(&self, route: &str, person: &str) -> Result<Option<Row>, VaultError>;
    /// Stores `row` with the next version (its own `version` is ignored); returns that version.
    async fn put(&self, row: Row) -> Result<u64, VaultError>;
    /// Replaces the seal of `row` if the stored row still has `row`'s seal; `false` otherwise.
    async fn reseal(&self, row: &Row, sealed: String) -> Result<bool, VaultError>;
    async fn remove(&self, route: &str, person: &str) -> Result<bool, VaultError>;
    async fn remove_person(&self, person: &str) -> Result<usize, VaultError>;
    async fn list(&self, person: &str) -> Result<Vec<Row>, VaultError>;
    async fn all(&self) -> Result<Vec<Row>, VaultError>;
    /// Keeps `sealed` under `id` until `until_ms` (`ttl` from now).
    async fn put_pending(
        &self,
        id: &str,
        sealed: &str,
        until_ms: u64,
        ttl: Duration,
    ) -> Result<(), VaultError>;
    /// Removes and returns the record under `id` unless it expired by `now_ms`.
    async fn take_pending(&self, id: &str, now_ms: u64) -> Result<Option<String>, VaultError>;
    /// Takes lock `name` for `owner` until `until_ms` (`ttl` from `now_ms`) if nobody holds it
    /// or its lease ran out.
    async fn try_lock(
        &self,
        name: &str,
        owner: &str,
        until_ms: u64,
        now_ms: u64,
        ttl: Duration,
    ) -> Result<bool, VaultError>;
    /// Releases lock `name` if `owner` still holds it.
    async fn unlock(&self, name: &str, owner: &str) -> Result<(), VaultError>;
}
