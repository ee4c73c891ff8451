//! `AuthServer`: runs the protocol core against the store, clock, randomness, rate limiter and
//! metadata-document resolver. Returns typed outcomes; knows nothing about HTTP.

use std::net::IpAddr;
use std::sync::Arc;

use pforte_clock::{Clock, SystemClock};

use crate::cimd::{CimdResolver, DocumentFetcher, HttpFetcher};
use crate::config::{ConfigError, OAuthConfig};
use crate::crypto::{self, CODE_PREFIX, REFRESH_PREFIX, SECRET_PREFIX, ServerKey};
use crate::entropy::{Entropy, OsEntropy};
use crate::error::{OAuthError, StoreError};
use crate::model::{AuthMethod, ClientRecord};
use crate::observe::{Event, Observer, Unobserved};
use crate::oidc::Providers;
use crate::protocol::cimd::{CimdError, is_document_client_id};
use crate::protocol::{Client, Params, metadata, registration};
use crate::store::Store;
use crate::throttle::{Budget, LimitClass, RateLimiter};
use crate::validator::Validator;

mod account;
mod authorize;
mod console;
mod enterprise;
mod oidc;
mod person;
mod token;

pub(crate) use authorize::{AuthorizeOutcome, AuthorizeResponse, Page};
pub use console::Viewer;

/// Why the server could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("oidc provider {provider:?}: {message}")]
    Oidc { provider: String, message: String },
}

/// What a maintenance pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub clients_reaped: usize,
}

/// The authorization server. Share it as `Arc<AuthServer>`.
pub struct AuthServer {
    pub(crate) cfg: Arc<OAuthConfig>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Arc<dyn Entropy>,
    pub(crate) limiter: Arc<dyn RateLimiter>,
    pub(crate) cimd: CimdResolver,
    pub(crate) key: ServerKey,
    pub(crate) validator: Arc<Validator>,
    /// Permits for password verifications running at once (`throttle.max_concurrent_logins`).
    pub(crate) logins: tokio::sync::Semaphore,
    pub(crate) observer: Arc<dyn Observer>,
    /// The OpenID providers of `[[oauth.login.oidc]]`.
    pub(crate) oidc: Providers,
    /// The trusted enterprise identity providers' signing keys.
    pub(crate) idp_keys: crate::jwks::IdpKeys,
    dummy_hash: tokio::sync::OnceCell<String>,
    /// More of `/account`, from the program that embeds the server (set once).
    pub(crate) account_section: std::sync::OnceLock<Arc<dyn AccountSection>>,
}

/// A section of `/account` that the embedding program renders for the signed-in user (the
/// gateway lists the user's connected upstream services there).
#[async_trait::async_trait]
pub trait AccountSection: Send + Sync {
    /// HTML for `username` (everything from elsewhere escaped by the implementation); forms in
    /// it carry `csrf`, the page's token, which [`AuthServer::csrf_ok`] accepts. `None`: nothing.
    async fn html(&self, username: &str, csrf: &str) -> Option<String>;
}

/// Builder for [`AuthServer`]; every dependency but the store and the rate limiter has a
/// production default.
pub struct AuthServerBuilder {
    cfg: OAuthConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    limiter: Arc<dyn RateLimiter>,
    fetcher: Option<Arc<dyn DocumentFetcher>>,
    observer: Arc<dyn Observer>,
}

impl AuthServerBuilder {
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Replaces the https metadata-document fetcher (tests).
    #[cfg(test)]
    pub(crate) fn document_fetcher(mut self, fetcher: Arc<dyn DocumentFetcher>) -> Self {
        self.fetcher = Some(fetcher);
        self
    }

    /// Reports the server's events (logins, tokens, revocations, validation cache) to `observer`.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Validates the config and loads (or creates) the server key from the store.
    pub async fn build(self) -> Result<Arc<AuthServer>, BuildError> {
        self.cfg.validate()?;
        let entropy: Arc<dyn Entropy> = Arc::new(OsEntropy);
        let mut candidate = [0u8; 32];
        entropy.fill(&mut candidate);
        let key = ServerKey::from_bytes(self.store.server_key(candidate).await?);
        person::migrate_names(self.store.as_ref(), self.clock.now_secs()).await?;
        let fetcher = self
            .fetcher
            .unwrap_or_else(|| Arc::new(HttpFetcher::new(self.cfg.cimd.clone())));
        let validator = Arc::new(
            Validator::new(self.store.clone(), &self.cfg, self.clock.clone())
                .with_observer(self.observer.clone()),
        );
        let logins = tokio::sync::Semaphore::new(self.cfg.throttle.max_concurrent_logins as usize);
        let oidc = providers(&self.cfg, self.clock.clone())?;
        Ok(Arc::new(AuthServer {
            oidc,
            logins,
            cimd: CimdResolver::new(
                fetcher,
                self.cfg.cimd.clone(),
                metadata::grant_types_supported(&self.cfg),
            ),
            cfg: Arc::new(self.cfg),
            store: self.store,
            clock: self.clock,
            entropy,
            limiter: self.limiter,
            key,
            validator,
            observer: self.observer,
            idp_keys: crate::jwks::IdpKeys::default(),
            dummy_hash: tokio::sync::OnceCell::new(),
            account_section: std::sync::OnceLock::new(),
        }))
    }
}

/// The OpenID providers of `cfg`, each with its client secret read from `client_secret_file`.
fn providers(cfg: &OAuthConfig, clock: Arc<dyn Clock>) -> Result<Providers, BuildError> {
    let mut list = Vec::new();
    for p in &cfg.login.oidc {
        let secret =
            match &p.client_secret_file {
                None => None,
                // Owner-only and not empty, as every secret file (`owner_only::read_secret_file`).
                Some(path) => Some(crate::owner_only::read_secret_file(path).map_err(|e| {
                    BuildError::Oidc {
                        provider: p.name.clone(),
                        message: format!("client_secret_file {} {e}", path.display()),
                    }
                })?),
            };
        list.push((p.clone(), secret));
    }
    let redirect = format!("{}{}", cfg.issuer, OIDC_CALLBACK_PATH);
    Providers::new(list, &redirect, clock).map_err(|message| BuildError::Oidc {
        provider: String::new(),
        message,
    })
}

/// Where OpenID providers send the browser back to.
pub const OIDC_CALLBACK_PATH: &str = "/oidc/callback";

/// How looking up a client failed.
pub(crate) enum ClientLookup {
    Unknown,
    Document(CimdError),
    /// This client IP fetched too many metadata documents lately.
    Throttled {
        retry_after_secs: u64,
    },
    Store(StoreError),
}

impl AuthServer {
    /// A server on `store` whose throttles (`cfg.throttle`) are counted by `limiter`.
    pub fn builder(
        cfg: OAuthConfig,
        store: Arc<dyn Store>,
        limiter: Arc<dyn RateLimiter>,
    ) -> AuthServerBuilder {
        AuthServerBuilder {
            cfg,
            store,
            clock: Arc::new(SystemClock),
            limiter,
            fetcher: None,
            observer: Arc::new(Unobserved),
        }
    }

    pub(crate) fn config(&self) -> &OAuthConfig {
        &self.cfg
    }

    /// The token validator the gateway calls per request (shares this server's store and is
    /// cleared on revocations made through this server).
    pub fn validator(&self) -> Arc<Validator> {
        self.validator.clone()
    }

    /// The RFC 8414 document.
    pub(crate) fn metadata(&self) -> serde_json::Value {
        metadata::authorization_server(&self.cfg)
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_secs()
    }

    /// The client `client_id`; a metadata-document client is fetched (on a cache miss) within
    /// the fetch budget of `client_ip`.
    pub(crate) async fn client(
        &self,
        client_id: &str,
        client_ip: Option<IpAddr>,
    ) -> Result<Client, ClientLookup> {
        if is_document_client_id(client_id) {
            let now_ms = self.clock.now_ms();
            if let Some(cached) = self.cimd.cached(client_id, now_ms) {
                return cached.map_err(ClientLookup::Document);
            }
            let budget = self.budget(LimitClass::CimdFetch, client_ip, None);
            if let Err(retry_after_secs) = self.take(&budget).await {
                return Err(ClientLookup::Throttled { retry_after_secs });
            }
            return self
                .cimd
                .resolve(client_id, now_ms)
                .await
                .map_err(ClientLookup::Document);
        }
        match self.store.get_client(client_id).await {
            Ok(Some(rec)) => Ok(Client::from(&rec)),
            Ok(None) => Err(ClientLookup::Unknown),
            Err(e) => Err(ClientLookup::Store(e)),
        }
    }

    /// The budget of `class` for `client_ip` (and, for logins per user, `username`), sized by
    /// `[oauth.throttle]`.
    pub(crate) fn budget<'a>(
        &self,
        class: LimitClass,
        client_ip: Option<IpAddr>,
        username: Option<&'a str>,
    ) -> Budget<'a> {
        Budget {
            class,
            ip: client_ip,
            username,
            quota: class.quota(&self.cfg.throttle),
        }
    }

    /// Takes one unit of `budget`; `Err(retry_after_secs)` when there is none. A zero quota
    /// refuses every attempt without asking the limiter.
    pub(crate) async fn take(&self, budget: &Budget<'_>) -> Result<(), u64> {
        if budget.quota.burst == 0 || budget.quota.per_minute == 0 {
            return Err(60);
        }
        self.limiter
            .check(budget)
            .await
            .map_err(|retry_after_ms| retry_after_ms.div_ceil(1000).max(1))
    }

    /// An argon2id hash to verify against when the user does not exist (equal timing).
    pub(crate) async fn dummy_hash(&self) -> &str {
        let params = self.cfg.password_hashing;
        let entropy = self.entropy.clone();
        self.dummy_hash
            .get_or_init(|| async move {
                tokio::task::spawn_blocking(move || {
                    crypto::hash_password("pforte-dummy-password", params, entropy.as_ref())
                        .unwrap_or_default()
                })
                .await
                .unwrap_or_default()
            })
            .await
    }

    /// RFC 7591 registration. `body` is the JSON request; `client_ip` keys the rate limit.
    pub(crate) async fn register(
        &self,
        body: &[u8],
        client_ip: Option<IpAddr>,
    ) -> Result<serde_json::Value, OAuthError> {
        self.take(&self.budget(LimitClass::Register, client_ip, None))
            .await
            .map_err(|retry_after_secs| OAuthError::RateLimited { retry_after_secs })?;
        let json: serde_json::Value = serde_json::from_slice(body).map_err(|_| {
            OAuthError::InvalidClientMetadata("the request body is not JSON".into())
        })?;
        let reg = registration::validate(&json, &metadata::grant_types_supported(&self.cfg))?;
        let now = self.now();
        let client_id = format!("pfc_{}", crypto::random_id(self.entropy.as_ref()));
        let secret = (reg.auth_method != AuthMethod::None)
            .then(|| crypto::random_token(self.entropy.as_ref(), SECRET_PREFIX));
        let record = ClientRecord {
            client_id: client_id.clone(),
            secret_hash: secret.as_ref().map(|s| crypto::hash_secret(s.expose())),
            auth_method: reg.auth_method,
            redirect_uris: reg.redirect_uris,
            client_name: reg.client_name,
            metadata: reg.metadata.clone(),
            created_at: now,
            last_used_at: now,
        };
        self.store.create_client(&record).await?;
        self.observer.event(Event::ClientRegistered);
        tracing::info!(client_id = %client_id, method = reg.auth_method.as_str(), "oauth client registered");
        Ok(registration::response(
            &client_id,
            now,
            secret.as_ref().map(|s| s.expose()),
            &reg.metadata,
        ))
    }

    /// RFC 7009 revocation: access or refresh token; unknown tokens and tokens of other
    /// clients are ignored (200); a refresh token revokes its whole grant.
    /// `client_ip` is the request's (its metadata-fetch budget).
    pub(crate) async fn revoke(
        &self,
        body: &str,
        authorization: Option<&str>,
        client_ip: Option<IpAddr>,
    ) -> Result<(), OAuthError> {
        let params = Params::parse(body);
        let client = self.authenticate(&params, authorization, client_ip).await?;
        let Some(token) = params.single("token").map_err(OAuthError::InvalidRequest)? else {
            return Err(OAuthError::InvalidRequest("token is required".into()));
        };
        let hash = crypto::hash_secret(token);
        let now = self.now();
        if let Some((access, _)) = self.store.get_access(&hash).await? {
            if access.client_id == client.client_id {
                self.store.revoke_access(&hash).await?;
                self.validator.clear_cache();
                self.observer.event(Event::Revoked);
            }
            return Ok(());
        }
        if let Some(refresh) = self.store.get_refresh(&hash).await?
            && refresh.client_id == client.client_id
        {
            self.store.revoke_grant(&refresh.family_id, now).await?;
            self.validator.clear_cache();
            self.observer.event(Event::Revoked);
        }
        Ok(())
    }

    /// Authenticates the client of a token or revocation request.
    pub(crate) async fn authenticate(
        &self,
        params: &Params,
        authorization: Option<&str>,
        client_ip: Option<IpAddr>,
    ) -> Result<Client, OAuthError> {
        let presented = crate::protocol::token::presented_credentials(params, authorization)?;
        let client = match self.client(&presented.client_id, client_ip).await {
            Ok(c) => c,
            Err(ClientLookup::Store(e)) => return Err(e.into()),
            Err(ClientLookup::Unknown) => {
                return Err(OAuthError::InvalidClient("unknown client".into()));
            }
            Err(ClientLookup::Throttled { retry_after_secs }) => {
                return Err(OAuthError::RateLimited { retry_after_secs });
            }
            Err(ClientLookup::Document(e)) => {
                return Err(OAuthError::InvalidClient(format!(
                    "the client's metadata document could not be used ({})",
                    e.public_reason()
                )));
            }
        };
        crate::protocol::token::authenticate(&presented, &client)?;
        Ok(client)
    }

    /// Reaps clients unused for `client_reap_after_secs` and purges expired records.
    /// Call it periodically (e.g. every 10 minutes) from one place.
    pub async fn maintenance(&self) -> Result<MaintenanceReport, StoreError> {
        let now = self.now();
        let cutoff = now.saturating_sub(self.cfg.client_reap_after_secs);
        let mut report = MaintenanceReport::default();
        for id in self.store.clients_unused_since(cutoff).await? {
            if self.store.delete_client(&id, now).await? {
                report.clients_reaped += 1;
            }
        }
        self.validator.flush_uses().await?;
        self.store.purge_expired(now).await?;
        if report.clients_reaped > 0 {
            tracing::info!(count = report.clients_reaped, "reaped unused oauth clients");
        }
        Ok(report)
    }

    pub(crate) fn new_code(&self) -> crypto::Secret {
        crypto::random_token(self.entropy.as_ref(), CODE_PREFIX)
    }

    pub(crate) fn new_refresh(&self) -> crypto::Secret {
        crypto::random_token(self.entropy.as_ref(), REFRESH_PREFIX)
    }
}

#[cfg(test)]
mod tests;
