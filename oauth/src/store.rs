//! The `Store` trait: durable state of the authorization server, with SQLite and redis backends.
//!
//! Operations that must be atomic (code consumption, refresh rotation, family revocation) are
//! single trait methods, so each backend can make them atomic (a SQLite transaction, a redis
//! Lua script). Timestamps are Unix seconds supplied by the caller; no backend reads a clock.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::model::{
    AccessRecord, ClientRecord, CodeRecord, GrantRecord, RefreshRecord, RotateOutcome,
    SessionRecord, UserRecord,
};

pub(crate) mod redis;
pub(crate) mod sqlite;
#[cfg(test)]
pub(crate) mod suite;

pub use self::redis::RedisStore;
pub use self::sqlite::SqliteStore;

/// Used codes are kept this long after expiry, so a late replay still revokes its tokens.
pub(crate) const CODE_RETENTION_SECS: u64 = 86_400;

pub(crate) type StoreResult<T> = Result<T, StoreError>;

/// A grant with its first token pair: what redeeming a code (or creating a grant) stores in one
/// atomic step.
#[derive(Clone, Copy, Debug)]
pub struct NewGrant<'a> {
    pub grant: &'a GrantRecord,
    pub access: &'a AccessRecord,
    pub refresh: &'a RefreshRecord,
}

/// A refresh token rotation: the token being spent, when, and the successor pair.
#[derive(Clone, Copy, Debug)]
pub struct Rotation<'a> {
    pub old_hash: &'a str,
    pub now: u64,
    pub access: &'a AccessRecord,
    pub refresh: &'a RefreshRecord,
}

/// Durable state. Implementations must be safe to share between gateways (redis) or
/// processes (SQLite file in WAL mode).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Returns the server key, storing `candidate` if none exists yet (first writer wins).
    async fn server_key(&self, candidate: [u8; 32]) -> StoreResult<[u8; 32]>;

    /// Inserts a user; false if the name is taken.
    async fn create_user(&self, user: &UserRecord) -> StoreResult<bool>;
    /// Replaces a user's password hash; false if no such user.
    async fn set_password(&self, name: &str, hash: &str, now: u64) -> StoreResult<bool>;
    /// Replaces an existing user's record (an external user's identity details after a
    /// sign-in); false if no such user.
    async fn update_user(&self, user: &UserRecord) -> StoreResult<bool>;
    async fn get_user(&self, username: &str) -> StoreResult<Option<UserRecord>>;
    async fn list_users(&self) -> StoreResult<Vec<UserRecord>>;
    /// Deletes a user and revokes every grant of theirs; false if no such user.
    async fn delete_user(&self, username: &str, now: u64) -> StoreResult<bool>;

    async fn create_client(&self, client: &ClientRecord) -> StoreResult<()>;
    async fn get_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>>;
    async fn list_clients(&self) -> StoreResult<Vec<ClientRecord>>;
    /// Deletes a client and revokes its grants; false if no such client.
    async fn delete_client(&self, client_id: &str, now: u64) -> StoreResult<bool>;
    /// Records that the client was used (for reaping).
    async fn touch_client(&self, client_id: &str, now: u64) -> StoreResult<()>;
    /// Ids of clients whose last use is before `cutoff`.
    async fn clients_unused_since(&self, cutoff: u64) -> StoreResult<Vec<String>>;

    async fn put_code(&self, code: &CodeRecord) -> StoreResult<()>;
    async fn get_code(&self, code_hash: &str) -> StoreResult<Option<CodeRecord>>;
    /// Atomically: if the code is unused, marks it used and creates its grant with the first
    /// token pair; true only for the one call that did. After any call returned, the code is
    /// used and (if some call returned true) its grant exists, so a replay that lost the race
    /// can revoke it: there is no moment where the code is spent but its grant not yet there.
    async fn redeem_code(&self, code_hash: &str, new: NewGrant<'_>) -> StoreResult<bool>;

    /// Creates a grant with its first token pair (authorization-code grant), atomically.
    async fn create_grant(&self, new: NewGrant<'_>) -> StoreResult<()>;
    async fn get_grant(&self, family_id: &str) -> StoreResult<Option<GrantRecord>>;
    async fn list_grants(&self) -> StoreResult<Vec<GrantRecord>>;
    /// Revokes a grant (all its tokens); false if unknown or already revoked.
    async fn revoke_grant(&self, family_id: &str, now: u64) -> StoreResult<bool>;

    /// An access token and whether its grant is revoked (a missing grant counts as revoked).
    async fn get_access(&self, token_hash: &str) -> StoreResult<Option<(AccessRecord, bool)>>;
    /// Revokes one access token; false if unknown.
    async fn revoke_access(&self, token_hash: &str) -> StoreResult<bool>;
    async fn get_refresh(&self, token_hash: &str) -> StoreResult<Option<RefreshRecord>>;
    /// Atomically: if `old_hash` is active and its grant is not revoked, mark it rotated at
    /// `now` and store the successor pair (extending the grant's expiry and last use).
    async fn rotate_refresh(&self, rotation: Rotation<'_>) -> StoreResult<RotateOutcome>;

    /// Creates a grant with its only token, an access token: the `jwt-bearer` grant issues no
    /// refresh token (the client presents a fresh ID-JAG instead).
    async fn create_access_grant(
        &self,
        grant: &GrantRecord,
        access: &AccessRecord,
    ) -> StoreResult<()>;
    /// Records when grants were last used, in one batch (the validator collects uses in memory
    /// and writes them at most once a minute); a grant's `last_used_at` only moves forward.
    async fn touch_grants(&self, uses: &[(String, u64)]) -> StoreResult<()>;

    /// Spends a one-time assertion id (a hash of issuer and `jti`), remembered until
    /// `expires_at`; true only for the first call, in every gateway sharing the store.
    async fn spend_assertion(&self, id_hash: &str, expires_at: u64, now: u64) -> StoreResult<bool>;
    /// The user an external identity (a hash of issuer and subject) is linked to.
    async fn linked_user(&self, identity: &str) -> StoreResult<Option<String>>;
    /// Links an external identity to a user (replacing an earlier link).
    async fn link_identity(&self, identity: &str, username: &str) -> StoreResult<()>;
    /// Renames user `old` to `new` with every record that names it (grants, access and refresh
    /// tokens, codes, sessions, identity links); false if there is no `old` or `new` is taken
    /// (by another person: a rename interrupted half-way is finished by calling again).
    async fn rename_user(&self, old: &str, new: &str, now: u64) -> StoreResult<bool>;
    /// Sets or clears a user's admin flag; false if no such user.
    async fn set_admin(&self, name: &str, admin: bool, now: u64) -> StoreResult<bool>;

    async fn put_session(&self, session: &SessionRecord) -> StoreResult<()>;
    async fn get_session(&self, session_hash: &str) -> StoreResult<Option<SessionRecord>>;
    async fn delete_session(&self, session_hash: &str) -> StoreResult<()>;

    /// Deletes expired codes (after [`CODE_RETENTION_SECS`]), tokens, grants and sessions.
    async fn purge_expired(&self, now: u64) -> StoreResult<()>;
}
