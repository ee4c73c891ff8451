//! The OAuth 2.1 authorization server inside the gateway process: which paths are its, the
//! in-process bridge from a pingora request to its axum router, and access-token validation
//! for the `/mcp` path (no network round trip: a store lookup, cached ≤ 1 s).

use std::{net::IpAddr, sync::Arc};

use bytes::Bytes;
use pforte_clock::Clock;
use pforte_oauth::{
    AuthServer, ClientIp, OAuthConfig, ResourceEntry, Store, ValidToken, ValidationError, Validator,
};
use tower::ServiceExt as _;

use crate::{
    auth::{AuthFailure, AuthKind, Binding, Principal},
    config::Settings,
    limit::SharedLimiter,
};

/// Largest request body the authorization server accepts (forms and registration JSON).
pub(crate) const MAX_AS_BODY: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum OAuthSetupError {
    #[error("oauth config: {0}")]
    Config(#[from] pforte_oauth::ConfigError),
    #[error("oauth store: {0}")]
    Store(#[from] pforte_oauth::StoreError),
    #[error("oauth server: {0}")]
    Build(#[from] pforte_oauth::BuildError),
    #[error("the oauth issuer {oauth:?} differs from the gateway's public URL {gateway:?}")]
    IssuerMismatch { oauth: String, gateway: String },
}

/// Whether a path is served by the authorization server.
pub(crate) fn is_as_path(path: &str) -> bool {
    matches!(
        path,
        "/.well-known/oauth-authorization-server"
            | "/.well-known/openid-configuration"
            | "/authorize"
            | "/token"
            | "/register"
            | "/revoke"
            | pforte_oauth::OIDC_CALLBACK_PATH
            | "/account"
    )
}

/// The authorization server's configuration for this gateway: the `[oauth]` table with the
/// issuer, resource and scopes taken from the gateway's own settings, so they are identical.
pub(crate) fn oauth_config(settings: &Settings) -> Result<OAuthConfig, OAuthSetupError> {
    let mut cfg = settings.oauth.clone();
    let base = OAuthConfig::new(settings.issuer())?;
    cfg.issuer = base.issuer;
    cfg.resource = base.resource;
    cfg.scopes_supported = settings.scopes.clone();
    set_resources(&mut cfg, settings);
    // Browsers drop `Secure` cookies over plain http: only a loopback listener serves it.
    if !settings.listen.serves_https() {
        cfg.cookie_secure = false;
    }
    cfg.validate()?;
    if cfg.issuer != settings.issuer() {
        return Err(OAuthSetupError::IssuerMismatch {
            oauth: cfg.issuer,
            gateway: settings.issuer().to_owned(),
        });
    }
    Ok(cfg)
}

/// Every route as a resource of the authorization server: its URL (the token audience) and
/// its name (shown on the consent page).
fn set_resources(cfg: &mut OAuthConfig, settings: &Settings) {
    cfg.resources = settings
        .routes
        .iter()
        .map(|r| ResourceEntry {
            url: r.resource.clone(),
            name: r.name.clone(),
            roles: r.roles.clone(),
            users: r.users.clone(),
            title: r.title.clone(),
        })
        .chain(settings.virtuals.iter().map(|v| ResourceEntry {
            url: v.resource.clone(),
            name: v.server.name.clone(),
            roles: v.roles.clone(),
            users: v.users.clone(),
            title: v.server.title.clone(),
        }))
        .collect();
}

/// The caller a valid OAuth access token speaks for: the one place an OAuth token becomes a
/// [`Principal`]. It opens the route whose resource it was issued for (canonical URL).
fn principal(token: ValidToken, client_name: Option<String>) -> Principal {
    Principal {
        subject: token.subject,
        client: token.client_id,
        client_name,
        kind: AuthKind::OAuth,
        scopes: token.scopes,
        binding: Binding::Resource(token.resource),
    }
}

/// What the authorization server reports, delivered: events to the metrics, sign-ins and
/// consents to the audit log (when one is configured).
pub(crate) struct OAuthObserver {
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    pub(crate) audit: Option<crate::audit::AuditLog>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl pforte_oauth::Observer for OAuthObserver {
    fn event(&self, event: pforte_oauth::Event) {
        pforte_oauth::Observer::event(self.metrics.as_ref(), event);
    }

    fn audit(&self, e: &pforte_oauth::AuditEntry<'_>) {
        if let Some(log) = &self.audit {
            log.record(&crate::audit::AccountRecord {
                time_ms: self.clock.now_ms(),
                event: e.action,
                via: e.via,
                user: e.user,
                client_id: e.client_id,
                outcome: e.outcome,
                reason: e.reason,
                scopes: e.scopes,
                resource: e.resource,
                client_ip: e.client_ip,
            });
        }
    }
}

/// The authorization server as the gateway uses it.
pub(crate) struct AuthService {
    server: Arc<AuthServer>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// Registered client names by client id, with when they were read (ms).
    client_names: std::sync::Mutex<std::collections::HashMap<String, (Option<String>, u64)>>,
    router: axum::Router,
    validator: Arc<Validator>,
}

impl std::fmt::Debug for AuthService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthService").finish_non_exhaustive()
    }
}

impl AuthService {
    /// Builds the server on `store` (loading or creating its key there), on the stores' runtime
    /// `rt` (borrowed: the stores own it); called before pingora starts its runtimes.
    /// Its throttles are counted by the gateway's `limiter`; its events (logins, tokens,
    /// revocations, validation cache) go to `observer`; it reads the time from `clock`.
    pub(crate) fn open(
        settings: &Settings,
        store: Arc<dyn Store>,
        rt: &tokio::runtime::Handle,
        limiter: Arc<SharedLimiter>,
        observer: Arc<dyn pforte_oauth::Observer>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, OAuthSetupError> {
        let cfg = oauth_config(settings)?;
        let server = rt.block_on(
            AuthServer::builder(cfg, store.clone(), limiter)
                .observer(observer)
                .clock(clock.clone())
                .build(),
        )?;
        Ok(Self {
            store,
            clock,
            client_names: std::sync::Mutex::new(std::collections::HashMap::new()),
            router: pforte_oauth::router(server.clone()),
            validator: server.validator(),
            server,
        })
    }

    pub(crate) fn server(&self) -> &Arc<AuthServer> {
        &self.server
    }

    /// The admin API on this server's store (the console's lists).
    pub(crate) fn admin(&self) -> pforte_oauth::Admin {
        pforte_oauth::Admin::new(self.store.clone())
    }

    /// What the policy's rules read of an OAuth user (email, groups, roles), from the
    /// validator's cached member lookup; a store that does not answer is
    /// `AuthFailure::Unavailable`, an unknown user an empty person.
    pub(crate) async fn person(&self, subject: &str) -> Result<pforte_oauth::Person, AuthFailure> {
        match self.validator.person(subject).await {
            Ok(person) => Ok(person.unwrap_or_default()),
            Err(ValidationError::Unavailable(e)) => {
                tracing::warn!(error = %e, "oauth store unavailable reading a user for the policy");
                Err(AuthFailure::Unavailable)
            }
            Err(_) => Ok(pforte_oauth::Person::default()),
        }
    }

    /// Validates an OAuth access token for this resource.
    pub(crate) async fn authenticate(&self, token: &str) -> Result<Principal, AuthFailure> {
        match self.validator.validate(token).await {
            Ok(token) => {
                let client_name = self.client_name(&token.client_id).await;
                Ok(principal(token, client_name))
            }
            Err(ValidationError::Invalid) => Err(AuthFailure::Invalid),
            Err(ValidationError::Expired) => Err(AuthFailure::Expired),
            Err(ValidationError::Unavailable(e)) => {
                tracing::warn!(error = %e, "oauth store unavailable during token validation");
                Err(AuthFailure::Unavailable)
            }
        }
    }

    /// The client's registered name, read from the store at most once a minute per client.
    async fn client_name(&self, client_id: &str) -> Option<String> {
        const TTL_MS: u64 = 60_000;
        const MAX: usize = 10_000;
        let now = self.clock.now_ms();
        if let Ok(names) = self.client_names.lock()
            && let Some((name, at)) = names.get(client_id)
            && now.saturating_sub(*at) < TTL_MS
        {
            return name.clone();
        }
        let name = match self.store.get_client(client_id).await {
            Ok(record) => record.and_then(|r| r.client_name),
            Err(e) => {
                tracing::debug!(error = %e, "client name unavailable");
                return None;
            }
        };
        if let Ok(mut names) = self.client_names.lock() {
            if names.len() >= MAX {
                names.clear();
            }
            names.insert(client_id.to_owned(), (name.clone(), now));
        }
        name
    }

    /// Runs one request through the router in-process. The client IP is handed over as a
    /// request extension, so no header can spoof it.
    pub(crate) async fn call(
        &self,
        request: http::Request<Bytes>,
        client_ip: Option<IpAddr>,
    ) -> http::Response<Bytes> {
        let (mut parts, body) = request.into_parts();
        if let Some(ip) = client_ip {
            parts.extensions.insert(ClientIp(ip));
        }
        let request = http::Request::from_parts(parts, axum::body::Body::from(body));
        let response = match self.router.clone().oneshot(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        match axum::body::to_bytes(body, 4 * 1024 * 1024).await {
            Ok(bytes) => http::Response::from_parts(parts, bytes),
            Err(e) => {
                tracing::error!(error = %e, "authorization server response unreadable");
                let mut resp =
                    http::Response::new(Bytes::from_static(b"{\"error\":\"server_error\"}"));
                *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                resp
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_paths() {
        for p in [
            "/authorize",
            "/token",
            "/register",
            "/revoke",
            "/account",
            "/.well-known/oauth-authorization-server",
        ] {
            assert!(is_as_path(p), "{p}");
        }
        for p in [
            "/mcp",
            "/authorize/x",
            "/.well-known/oauth-protected-resource",
        ] {
            assert!(!is_as_path(p), "{p}");
        }
    }
}
