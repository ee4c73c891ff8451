//! Admin operations for the `pforte` CLI: users, clients, grants. Works on the store directly,
//! so it runs beside a live gateway (SQLite in WAL mode, or the shared redis).

use std::sync::Arc;

use pforte_clock::{Clock, SystemClock};

use crate::config::PasswordHashing;
use crate::crypto::{self, PasswordError, Secret};
use crate::entropy::{Entropy, OsEntropy};
use crate::error::StoreError;
use crate::model::{AuthMethod, GrantRecord, NO_PASSWORD, UserRecord};
use crate::store::Store;

/// Shortest accepted password.
pub(crate) const MIN_PASSWORD_CHARS: usize = 8;

/// Why an admin operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("user {0} already exists")]
    UserExists(String),
    #[error("no such user: {0}")]
    NoSuchUser(String),
    #[error("{0} comes from {1} and has no password here: they sign in there")]
    ExternalUser(String, String),
    #[error("invalid username {0:?}: use 1-64 characters of letters, digits, '.', '_', '-', '@'")]
    InvalidUsername(String),
    #[error("the password must have at least {MIN_PASSWORD_CHARS} characters")]
    WeakPassword,
    #[error("no such client: {0}")]
    NoSuchClient(String),
    #[error("no such grant: {0}")]
    NoSuchGrant(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Password(#[from] PasswordError),
}

/// A user as listed (no hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub created_at: u64,
    pub updated_at: u64,
    /// Where the user comes from: `None` for a local (password) user, else the OpenID
    /// provider's identity (provider name, issuer, subject, verified email, groups).
    pub external: Option<crate::model::ExternalIdentity>,
    /// Sees and revokes every user's grants at `/account`.
    pub admin: bool,
    /// Has a local password (users from an identity provider have none).
    pub password: bool,
}

/// A registered client as listed (no secret hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_name: Option<String>,
    pub auth_method: AuthMethod,
    pub redirect_uris: Vec<String>,
    pub created_at: u64,
    pub last_used_at: u64,
}

/// Which grants an operation concerns; `None` fields match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrantFilter {
    pub username: Option<String>,
    pub client_id: Option<String>,
    /// Include revoked and expired grants when listing.
    pub include_inactive: bool,
}

/// The admin API.
pub struct Admin {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    hashing: PasswordHashing,
}

pub(crate) fn valid_username(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

impl Admin {
    /// Admin over `store` with the system clock, OS randomness and OWASP argon2id parameters.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            clock: Arc::new(SystemClock),
            entropy: Arc::new(OsEntropy),
            hashing: PasswordHashing::default(),
        }
    }
    pub fn with_hashing(mut self, hashing: PasswordHashing) -> Self {
        self.hashing = hashing;
        self
    }
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    async fn hash(&self, password: &Secret) -> Result<String, AdminError> {
        if password.expose().chars().count() < MIN_PASSWORD_CHARS {
            return Err(AdminError::WeakPassword);
        }
        let (pw, params, entropy) = (password.clone(), self.hashing, self.entropy.clone());
        tokio::task::spawn_blocking(move || {
            crypto::hash_password(pw.expose(), params, entropy.as_ref())
        })
        .await
        .map_err(|e| PasswordError::Hash(e.to_string()))?
        .map_err(AdminError::from)
    }

    /// A random password for a first user (24 characters, ~143 bits), for `pforte up`.
    pub fn generate_password(&self) -> Secret {
        let token = crypto::random_token(self.entropy.as_ref(), "");
        Secret::new(token.expose().chars().take(24).collect::<String>())
    }

    /// Whether any user exists (first-run check).
    pub async fn has_users(&self) -> Result<bool, AdminError> {
        Ok(!self.store.list_users().await?.is_empty())
    }

    /// `pforte user add`.
    pub async fn add_user(&self, username: &str, password: &Secret) -> Result<(), AdminError> {
        if !valid_username(username) {
            return Err(AdminError::InvalidUsername(username.to_owned()));
        }
        let hash = self.hash(password).await?;
        let now = self.clock.now_secs();
        let user = UserRecord {
            username: username.to_owned(),
            password_hash: hash,
            created_at: now,
            updated_at: now,
            external: None,
            admin: false,
        };
        if !self.store.create_user(&user).await? {
            return Err(AdminError::UserExists(username.to_owned()));
        }
        Ok(())
    }

    /// `pforte user passwd`.
    /// Refused for a user from an identity provider (they have no password here).
    pub async fn set_password(&self, username: &str, password: &Secret) -> Result<(), AdminError> {
        if let Some(ext) = self
            .store
            .get_user(username)
            .await?
            .and_then(|u| u.external)
        {
            return Err(AdminError::ExternalUser(username.to_owned(), ext.origin()));
        }
        let hash = self.hash(password).await?;
        if !self
            .store
            .set_password(username, &hash, self.clock.now_secs())
            .await?
        {
            return Err(AdminError::NoSuchUser(username.to_owned()));
        }
        Ok(())
    }

    /// `pforte user role NAME admin|user` (and `pforte user add --role`): whether the user
    /// administers every user's grants at `/account`.
    pub async fn set_admin(&self, username: &str, admin: bool) -> Result<(), AdminError> {
        if !self
            .store
            .set_admin(username, admin, self.clock.now_secs())
            .await?
        {
            return Err(AdminError::NoSuchUser(username.to_owned()));
        }
        Ok(())
    }

    /// `pforte user list`.
    pub async fn list_users(&self) -> Result<Vec<UserInfo>, AdminError> {
        Ok(self
            .store
            .list_users()
            .await?
            .into_iter()
            .map(|u| UserInfo {
                password: !u.password_hash.is_empty() && u.password_hash != NO_PASSWORD,
                username: u.username,
                created_at: u.created_at,
                updated_at: u.updated_at,
                external: u.external,
                admin: u.admin,
            })
            .collect())
    }

    /// `pforte user remove`: also revokes every grant of the user.
    pub async fn remove_user(&self, username: &str) -> Result<(), AdminError> {
        if !self
            .store
            .delete_user(username, self.clock.now_secs())
            .await?
        {
            return Err(AdminError::NoSuchUser(username.to_owned()));
        }
        Ok(())
    }

    /// `pforte client list` (dynamically registered clients).
    pub async fn list_clients(&self) -> Result<Vec<ClientInfo>, AdminError> {
        Ok(self
            .store
            .list_clients()
            .await?
            .into_iter()
            .map(|c| ClientInfo {
                client_id: c.client_id,
                client_name: c.client_name,
                auth_method: c.auth_method,
                redirect_uris: c.redirect_uris,
                created_at: c.created_at,
                last_used_at: c.last_used_at,
            })
            .collect())
    }

    /// `pforte client remove`: also revokes the client's grants.
    pub async fn remove_client(&self, client_id: &str) -> Result<(), AdminError> {
        if !self
            .store
            .delete_client(client_id, self.clock.now_secs())
            .await?
        {
            return Err(AdminError::NoSuchClient(client_id.to_owned()));
        }
        Ok(())
    }

    /// `pforte grant list`.
    pub async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<GrantRecord>, AdminError> {
        let now = self.clock.now_secs();
        Ok(self
            .store
            .list_grants()
            .await?
            .into_iter()
            .filter(|g| filter.username.as_ref().is_none_or(|u| &g.username == u))
            .filter(|g| filter.client_id.as_ref().is_none_or(|c| &g.client_id == c))
            .filter(|g| filter.include_inactive || (g.revoked_at.is_none() && g.expires_at > now))
            .collect())
    }

    /// `pforte grant revoke --user/--client`: revokes every active matching grant; returns how many.
    pub async fn revoke_grants(&self, filter: &GrantFilter) -> Result<usize, AdminError> {
        let active = GrantFilter {
            include_inactive: false,
            ..filter.clone()
        };
        let now = self.clock.now_secs();
        let mut n = 0;
        for g in self.list_grants(&active).await? {
            if self.store.revoke_grant(&g.family_id, now).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// `pforte grant revoke ID`.
    pub async fn revoke_grant(&self, family_id: &str) -> Result<(), AdminError> {
        if !self
            .store
            .revoke_grant(family_id, self.clock.now_secs())
            .await?
        {
            return Err(AdminError::NoSuchGrant(family_id.to_owned()));
        }
        Ok(())
    }
}
