//! Access-token validation for the gateway's hot path: one store lookup per token per second
//! at most (a bounded in-process cache of positive results, ≤ 1 s), so revocation anywhere is
//! honoured within 1 s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pforte_clock::Clock;

use crate::config::{OAuthConfig, ResourceEntry, Roles};
use crate::crypto::{ACCESS_PREFIX, hash_secret};
use crate::error::ValidationError;
use crate::observe::{Event, Observer, Unobserved};
use crate::protocol::resource;
use crate::roles::{self, Member};
use crate::store::Store;

/// What a valid access token says: who it speaks for (the gateway makes its caller identity,
/// `auth::ValidToken`, from it), through which client, with which scopes, for which resource
/// and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidToken {
    /// The user (username) who approved the grant.
    pub subject: String,
    pub client_id: String,
    pub scopes: Vec<String>,
    /// Unix seconds.
    pub expires_at: u64,
    /// The grant (token family) id, for logs and admin.
    pub grant_id: String,
    /// The protected resource (canonical URL) the token is bound to: one of the configured
    /// resources. The caller compares it with the resource it serves.
    pub resource: String,
}

/// What the policy's rules may read of a user (`Validator::person`): from the same member
/// record the roles are decided on, re-read at least every `roles_recheck_secs`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Person {
    /// The verified email (external users only), ASCII lower-case.
    pub email: Option<String>,
    /// The groups the identity provider sent.
    pub groups: Vec<String>,
    /// The `[oauth.roles]` the user holds.
    pub roles: Vec<String>,
}

/// Cache lifetime of a positive validation, in milliseconds (the revocation delay bound).
pub(crate) const CACHE_TTL_MS: u64 = 1000;
const MAX_ENTRIES: usize = 10_000;
/// How often the grants' last use is written: the uses seen meanwhile go to the store in one
/// batch, so validation adds no store write per request.
pub(crate) const LAST_USE_FLUSH_MS: u64 = 60_000;

/// Grants used since the last flush (family id → last use, Unix seconds) and when that was.
#[derive(Default)]
struct Uses {
    seen: HashMap<String, u64>,
    flushed_ms: u64,
}

/// Validates bearer tokens issued by this authorization server. Cheap to share (`Arc`).
pub struct Validator {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// The canonical URLs of the configured resources.
    resources: Vec<String>,
    cache: Mutex<HashMap<String, (ValidToken, u64)>>,
    uses: Mutex<Uses>,
    observer: Arc<dyn Observer>,
    /// The roles and resources when roles decide anything (see [`roles::in_force`]).
    roles: Option<(Roles, Vec<ResourceEntry>)>,
    /// Role members by username, with when they were read (ms); `None`: no such user.
    members: Mutex<HashMap<String, (Option<Member>, u64)>>,
    /// How long a member is reused (`roles_recheck_secs`), in ms.
    roles_ttl_ms: u64,
    /// Every configured role, for [`Validator::person`].
    all_roles: Roles,
}

impl Validator {
    pub(crate) fn new(store: Arc<dyn Store>, cfg: &OAuthConfig, clock: Arc<dyn Clock>) -> Self {
        let resources = cfg
            .resource_entries()
            .iter()
            .map(|e| resource::canonical(&e.url).unwrap_or_else(|| e.url.clone()))
            .collect();
        let entries = cfg.resource_entries().into_owned();
        let roles = roles::in_force(&cfg.roles, &entries).then(|| (cfg.roles.clone(), entries));
        Self {
            store,
            clock,
            resources,
            cache: Mutex::new(HashMap::new()),
            uses: Mutex::new(Uses::default()),
            observer: Arc::new(Unobserved),
            roles,
            members: Mutex::new(HashMap::new()),
            roles_ttl_ms: cfg.roles_recheck_secs.saturating_mul(1000),
            all_roles: cfg.roles.clone(),
        }
    }

    /// Reports cache hits and misses to `observer`.
    pub(crate) fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Whether `bearer` has the shape of this server's access tokens (no lookup).
    pub(crate) fn is_oauth_token(bearer: &str) -> bool {
        bearer.starts_with(ACCESS_PREFIX)
    }

    /// Validates at the injected clock's time.
    pub async fn validate(&self, bearer: &str) -> Result<ValidToken, ValidationError> {
        self.validate_at(bearer, self.clock.now_ms()).await
    }

    /// Validates `bearer` at `now_ms`: known, unrevoked (token and grant), unexpired, and
    /// audience-bound to one of the configured resources ([`ValidToken::resource`] says which);
    /// then, with roles in force, its user must still exist and may use the resource, and its
    /// scopes are narrowed to what the user's roles allow now (membership re-read at least
    /// every `roles_recheck_secs`).
    pub(crate) async fn validate_at(
        &self,
        bearer: &str,
        now_ms: u64,
    ) -> Result<ValidToken, ValidationError> {
        let token = self.validate_token(bearer, now_ms).await?;
        self.apply_roles(token, now_ms).await
    }

    /// `token` as the user's roles allow it now.
    async fn apply_roles(
        &self,
        mut token: ValidToken,
        now_ms: u64,
    ) -> Result<ValidToken, ValidationError> {
        let Some((roles, entries)) = &self.roles else {
            return Ok(token);
        };
        let Some(member) = self.member(&token.subject, now_ms).await? else {
            return Err(ValidationError::Invalid);
        };
        let entry = entries
            .iter()
            .find(|e| resource::canonical(&e.url).as_deref() == Some(token.resource.as_str()));
        if entry.is_some_and(|e| !roles::may_use(e, roles, &member)) {
            return Err(ValidationError::Invalid);
        }
        token.scopes = roles::grantable(roles, &member).narrow(&token.scopes);
        Ok(token)
    }

    /// The user `subject` as the roles see it: from the in-process cache while younger than
    /// `roles_recheck_secs`, else read from the store (`None`: no such user).
    async fn member(&self, subject: &str, now_ms: u64) -> Result<Option<Member>, ValidationError> {
        let cached = self.members.lock().ok().and_then(|m| {
            m.get(subject)
                .filter(|(_, at)| now_ms.saturating_sub(*at) < self.roles_ttl_ms)
                .map(|(member, _)| member.clone())
        });
        if let Some(member) = cached {
            return Ok(member);
        }
        let member = self
            .store
            .get_user(subject)
            .await?
            .map(|u| Member::from(&u));
        if let Ok(mut m) = self.members.lock() {
            if m.len() >= MAX_ENTRIES {
                m.clear();
            }
            m.insert(subject.to_owned(), (member.clone(), now_ms));
        }
        Ok(member)
    }

    /// What the gateway's policy rules read of the user `subject` (a validated token's): email,
    /// groups and held roles, from the same cached member lookup the roles use (no store read
    /// while the cache is younger than `roles_recheck_secs`). `None`: no such user.
    pub async fn person(&self, subject: &str) -> Result<Option<Person>, ValidationError> {
        let Some(member) = self.member(subject, self.clock.now_ms()).await? else {
            return Ok(None);
        };
        let roles = roles::held(&self.all_roles, &member)
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok(Some(Person {
            email: member.email,
            groups: member.groups,
            roles,
        }))
    }

    /// The token itself: known, unrevoked, unexpired, for a configured resource.
    async fn validate_token(
        &self,
        bearer: &str,
        now_ms: u64,
    ) -> Result<ValidToken, ValidationError> {
        if !Self::is_oauth_token(bearer) || bearer.len() > 200 {
            return Err(ValidationError::Invalid);
        }
        let hash = hash_secret(bearer);
        let cached = self.cache.lock().ok().and_then(|c| {
            c.get(&hash)
                .filter(|(_, at)| now_ms.saturating_sub(*at) < CACHE_TTL_MS)
                .map(|(p, _)| p.clone())
        });
        if let Some(p) = cached {
            self.observer.event(Event::ValidationCacheHit);
            let p = expiry(p, now_ms)?;
            self.used(&p.grant_id, now_ms);
            return Ok(p);
        }
        self.observer.event(Event::ValidationCacheMiss);
        let Some((rec, grant_revoked)) = self.store.get_access(&hash).await? else {
            return Err(ValidationError::Invalid);
        };
        if rec.revoked || grant_revoked {
            return Err(ValidationError::Invalid);
        }
        let Some(audience) =
            resource::canonical(&rec.resource).filter(|r| self.resources.contains(r))
        else {
            return Err(ValidationError::Invalid);
        };
        let p = ValidToken {
            subject: rec.token.username,
            client_id: rec.token.client_id,
            scopes: rec.token.scopes,
            expires_at: rec.token.expires_at,
            grant_id: rec.token.family_id,
            resource: audience,
        };
        let p = expiry(p, now_ms)?;
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= MAX_ENTRIES {
                cache.retain(|_, (_, at)| now_ms.saturating_sub(*at) < CACHE_TTL_MS);
                if cache.len() >= MAX_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(hash, (p.clone(), now_ms));
        }
        self.used(&p.grant_id, now_ms);
        Ok(p)
    }

    /// Notes a use of grant `family`; once [`LAST_USE_FLUSH_MS`] have passed since the last
    /// write, the collected uses are written in one batch off the request path.
    fn used(&self, family: &str, now_ms: u64) {
        let batch = {
            let Ok(mut uses) = self.uses.lock() else {
                return;
            };
            if uses.seen.len() < MAX_ENTRIES {
                uses.seen.insert(family.to_owned(), now_ms / 1000);
            }
            if now_ms.saturating_sub(uses.flushed_ms) < LAST_USE_FLUSH_MS {
                return;
            }
            uses.flushed_ms = now_ms;
            std::mem::take(&mut uses.seen)
        };
        let store = self.store.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let batch: Vec<(String, u64)> = batch.into_iter().collect();
                if let Err(e) = store.touch_grants(&batch).await {
                    tracing::warn!(error = %e, grants = batch.len(), "could not record the grants' last use");
                }
            });
        }
    }

    /// Writes the collected uses now (shutdown, maintenance, tests).
    pub(crate) async fn flush_uses(&self) -> Result<(), crate::error::StoreError> {
        let batch: Vec<(String, u64)> = match self.uses.lock() {
            Ok(mut uses) => std::mem::take(&mut uses.seen).into_iter().collect(),
            Err(_) => return Ok(()),
        };
        self.store.touch_grants(&batch).await
    }

    /// Drops every cached result (called on revocation in this process).
    pub(crate) fn clear_cache(&self) {
        if let Ok(mut c) = self.cache.lock() {
            c.clear();
        }
        if let Ok(mut m) = self.members.lock() {
            m.clear();
        }
    }
}

fn expiry(p: ValidToken, now_ms: u64) -> Result<ValidToken, ValidationError> {
    if now_ms >= p.expires_at.saturating_mul(1000) {
        Err(ValidationError::Expired)
    } else {
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pforte_clock::ManualClock;
    use std::time::Duration;

    use crate::model::{AccessRecord, GrantRecord, GrantedBy, RefreshRecord, TokenRecord};
    use crate::store::SqliteStore;

    const T: u64 = 1_800_000_000;

    async fn setup(resource: &str) -> (Arc<dyn Store>, Validator, String) {
        setup_with(resource, OAuthConfig::new("https://gw.example").unwrap()).await
    }

    async fn setup_with(resource: &str, cfg: OAuthConfig) -> (Arc<dyn Store>, Validator, String) {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::in_memory().unwrap());
        let v = Validator::new(
            store.clone(),
            &cfg,
            Arc::new(ManualClock::at(Duration::from_secs(T))),
        );
        let token = format!("{ACCESS_PREFIX}abc");
        let g = GrantRecord {
            family_id: "f".into(),
            client_id: "c".into(),
            username: "bob".into(),
            scopes: vec!["mcp:read".into()],
            resource: resource.into(),
            created_at: T,
            last_used_at: T,
            expires_at: T + 10_000,
            revoked_at: None,
            granted_by: GrantedBy::Consent,
        };
        let a = AccessRecord {
            token: TokenRecord {
                token_hash: hash_secret(&token),
                family_id: "f".into(),
                client_id: "c".into(),
                username: "bob".into(),
                scopes: vec!["mcp:read".into()],
                resource: resource.into(),
                issued_at: T,
                expires_at: T + 3600,
            },
            revoked: false,
        };
        let r = RefreshRecord {
            token: TokenRecord {
                token_hash: "r".into(),
                family_id: "f".into(),
                client_id: "c".into(),
                username: "bob".into(),
                scopes: vec![],
                resource: resource.into(),
                issued_at: T,
                expires_at: T + 10_000,
            },
            rotated_at: None,
        };
        let new = crate::store::NewGrant {
            grant: &g,
            access: &a,
            refresh: &r,
        };
        store.create_grant(new).await.unwrap();
        (store, v, token)
    }

    /// The grant's last use as stored, once it equals `want` (polled, 5 s deadline).
    async fn last_use_becomes(store: &Arc<dyn Store>, want: u64) -> u64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let at = store.get_grant("f").await.unwrap().unwrap().last_used_at;
            if at == want || std::time::Instant::now() > deadline {
                return at;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn last_use_is_written_once_a_minute_not_per_request() {
        let (store, v, token) = setup("https://gw.example/mcp").await;
        v.validate_at(&token, (T + 10) * 1000).await.unwrap();
        assert_eq!(last_use_becomes(&store, T + 10).await, T + 10, "first use");
        for i in 0..100 {
            v.validate_at(&token, (T + 11) * 1000 + i * 500)
                .await
                .unwrap();
        }
        tokio::task::yield_now().await;
        let stored = store.get_grant("f").await.unwrap().unwrap().last_used_at;
        assert_eq!(stored, T + 10, "100 uses within the minute wrote nothing");
        v.validate_at(&token, (T + 75) * 1000).await.unwrap();
        assert_eq!(
            last_use_becomes(&store, T + 75).await,
            T + 75,
            "one batch a minute later"
        );
        v.validate_at(&token, (T + 80) * 1000).await.unwrap();
        v.flush_uses().await.unwrap();
        assert_eq!(
            last_use_becomes(&store, T + 80).await,
            T + 80,
            "maintenance flushes"
        );
    }

    #[tokio::test]
    async fn valid_token_says_who_and_for_what() {
        let (_, v, token) = setup("https://gw.example/mcp").await;
        let p = v.validate(&token).await.unwrap();
        assert_eq!((p.subject.as_str(), p.client_id.as_str()), ("bob", "c"));
        assert_eq!(p.resource, "https://gw.example/mcp");
        assert_eq!(p.scopes, ["mcp:read"]);
        assert!(matches!(
            v.validate("pfat_unknown").await,
            Err(ValidationError::Invalid)
        ));
        assert!(matches!(
            v.validate("static-token").await,
            Err(ValidationError::Invalid)
        ));
    }

    #[tokio::test]
    async fn expired_access_token() {
        let (_, v, token) = setup("https://gw.example/mcp").await;
        assert!(v.validate_at(&token, (T + 3599) * 1000).await.is_ok());
        assert!(matches!(
            v.validate_at(&token, (T + 3600) * 1000).await,
            Err(ValidationError::Expired)
        ));
    }

    #[tokio::test]
    async fn revoked_token_refused_within_one_second() {
        let (store, v, token) = setup("https://gw.example/mcp").await;
        let t0 = T * 1000;
        assert!(v.validate_at(&token, t0).await.is_ok());
        store.revoke_access(&hash_secret(&token)).await.unwrap();
        // still cached for < 1 s, refused from 1 s on
        assert!(v.validate_at(&token, t0 + 999).await.is_ok());
        assert!(matches!(
            v.validate_at(&token, t0 + 1000).await,
            Err(ValidationError::Invalid)
        ));
    }

    #[tokio::test]
    async fn grant_revocation_refuses_token() {
        let (store, v, token) = setup("https://gw.example/mcp").await;
        store.revoke_grant("f", T).await.unwrap();
        assert!(matches!(
            v.validate(&token).await,
            Err(ValidationError::Invalid)
        ));
    }

    #[tokio::test]
    async fn other_audience_refused() {
        let (_, v, token) = setup("https://other.example/mcp").await;
        assert!(matches!(
            v.validate(&token).await,
            Err(ValidationError::Invalid)
        ));
    }

    /// `roles_recheck_secs`' default, in ms.
    const ROLES_TTL_MS: u64 = 60_000;

    #[tokio::test]
    async fn tokens_follow_a_role_change_within_a_minute() {
        let mut cfg = OAuthConfig::new("https://gw.example").unwrap();
        cfg.roles.insert(
            "readers".into(),
            crate::config::Role {
                groups: vec!["eng".into()],
                scopes: Some(vec!["mcp:read".into()]),
                ..Default::default()
            },
        );
        let (store, v, token) = setup_with("https://gw.example/mcp", cfg).await;
        let mut bob = crate::model::UserRecord {
            username: "bob".into(),
            password_hash: String::new(),
            created_at: T,
            updated_at: T,
            external: Some(crate::model::ExternalIdentity {
                groups: vec!["eng".into()],
                ..Default::default()
            }),
            admin: false,
        };
        store.create_user(&bob).await.unwrap();
        let t0 = T * 1000;
        assert_eq!(
            v.validate_at(&token, t0).await.unwrap().scopes,
            ["mcp:read"]
        );
        // The IdP drops bob from eng (his next sign-in records it): within a minute his
        // token carries no scope, though it is still valid.
        bob.external.as_mut().unwrap().groups.clear();
        store.update_user(&bob).await.unwrap();
        let cached = v.validate_at(&token, t0 + ROLES_TTL_MS - 1).await.unwrap();
        assert_eq!(
            cached.scopes,
            ["mcp:read"],
            "membership is cached below a minute"
        );
        let after = v.validate_at(&token, t0 + ROLES_TTL_MS).await.unwrap();
        assert!(after.scopes.is_empty(), "{after:?}");
        // A deleted user's tokens are refused.
        store.delete_user("bob", T).await.unwrap();
        assert!(v.validate_at(&token, t0 + 2 * ROLES_TTL_MS).await.is_err());
    }

    /// What the gateway's policy rules read of a user: email, groups and held roles, from the
    /// cached member (no store read while it is fresh); an unknown user is `None`.
    #[tokio::test]
    async fn a_person_is_read_from_the_cached_member() {
        let mut cfg = OAuthConfig::new("https://gw.example").unwrap();
        cfg.roles.insert(
            "finance".into(),
            crate::config::Role {
                groups: vec!["fin".into()],
                ..Default::default()
            },
        );
        let (store, v, _token) = setup_with("https://gw.example/mcp", cfg).await;
        assert_eq!(v.person("bob").await.unwrap(), None);
        let mut bob = crate::model::UserRecord {
            username: "bob".into(),
            password_hash: String::new(),
            created_at: T,
            updated_at: T,
            external: Some(crate::model::ExternalIdentity {
                email: Some("Bob@Example.com".into()),
                groups: vec!["fin".into(), "eng".into()],
                ..Default::default()
            }),
            admin: false,
        };
        // `None` was cached for bob: the store is read again only after `roles_recheck_secs`.
        store.create_user(&bob).await.unwrap();
        assert_eq!(v.person("bob").await.unwrap(), None);
        v.clear_cache();
        let person = v.person("bob").await.unwrap().unwrap();
        assert_eq!(person.email.as_deref(), Some("bob@example.com"));
        assert_eq!(person.groups, ["fin", "eng"]);
        assert_eq!(person.roles, ["finance"]);
        bob.external.as_mut().unwrap().groups.clear();
        store.update_user(&bob).await.unwrap();
        assert_eq!(v.person("bob").await.unwrap().unwrap().roles, ["finance"]);
    }

    #[tokio::test]
    async fn a_route_allow_list_refuses_other_users_tokens() {
        let mut cfg = OAuthConfig::new("https://gw.example").unwrap();
        cfg.resources = vec![crate::config::ResourceEntry {
            url: "https://gw.example/mcp".into(),
            name: "mcp".into(),
            roles: Vec::new(),
            users: vec!["alice".into()],
            title: None,
        }];
        let (store, v, token) = setup_with("https://gw.example/mcp", cfg).await;
        let bob = crate::model::UserRecord {
            username: "bob".into(),
            password_hash: String::new(),
            created_at: T,
            updated_at: T,
            external: None,
            admin: false,
        };
        store.create_user(&bob).await.unwrap();
        assert!(matches!(
            v.validate(&token).await,
            Err(ValidationError::Invalid)
        ));
    }

    fn two_resources() -> OAuthConfig {
        let mut cfg = OAuthConfig::new("https://gw.example").unwrap();
        cfg.resources = ["a", "b"]
            .iter()
            .map(|n| crate::config::ResourceEntry {
                url: format!("https://gw.example/{n}/mcp"),
                name: (*n).into(),
                roles: Vec::new(),
                users: Vec::new(),
                title: None,
            })
            .collect();
        cfg
    }

    #[tokio::test]
    async fn any_configured_resource_is_accepted_and_named() {
        for r in ["https://gw.example/a/mcp", "https://gw.example/b/mcp/"] {
            let (_, v, token) = setup_with(r, two_resources()).await;
            let p = v.validate(&token).await.unwrap();
            assert_eq!(p.resource, r.trim_end_matches('/'), "canonical");
        }
        // the default resource is not among the configured ones here
        let (_, v, token) = setup_with("https://gw.example/mcp", two_resources()).await;
        assert!(matches!(
            v.validate(&token).await,
            Err(ValidationError::Invalid)
        ));
    }
}
