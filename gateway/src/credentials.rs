//! Per-user credentials for routes whose upstream needs its own (`[routes.upstream_auth]`):
//! what a request carries upstream (a header from the vault, an OAuth access token refreshed
//! when stale, or the shared credential), what the caller is told when there is none yet (the
//! connect prompt, `answer.rs`), and the connect flow's steps (a single-use link bound to the
//! caller → the upstream's OAuth flow or a form for the secret → the vault). The pages are
//! `pages.rs`; the handlers `proxy/connect.rs`. The client's own token never goes upstream:
//! `forward.rs` strips it before anything here adds the upstream's.

pub(crate) mod answer;
mod lender;
mod links;
mod oauth_client;
pub(crate) mod pages;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use pforte_clock::Clock;

use pforte_oauth::Secret as Plain;

use crate::{
    auth::Principal,
    broker::{self, Broker, RefreshError, TokenSet},
    config::{HeaderInto, Injection, Registration, Route, Settings, UpstreamAuth},
    metrics::{CredentialEvent, CredentialMetrics},
    vault::{Entry, LinkGrant, OAuthTokens, Secret, State, Vault},
};

pub(crate) use answer::Ask;
pub(crate) use lender::RouteLender;

/// Session ids of Pforte's stand-in session (a caller not yet connected): once connected, such
/// an id is answered 404, and the client starts a session with the upstream.
pub(crate) const STANDIN_SESSION_PREFIX: &str = "pforte-connect-";

/// Whether `session_id` names a stand-in session.
pub(crate) fn is_standin(session_id: &str) -> bool {
    session_id.starts_with(STANDIN_SESSION_PREFIX)
}

/// How long a connect link works.
pub(crate) const LINK_TTL: Duration = Duration::from_secs(10 * 60);
/// How long a started upstream authorization (or an open secret form) may take.
pub(crate) const FLOW_TTL: Duration = Duration::from_secs(10 * 60);
/// Sessions whose client declared URL-mode elicitation, remembered at most (oldest forgotten).
const MAX_ELICITING_SESSIONS: usize = 100_000;

/// Why a request cannot carry an upstream credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Missing {
    /// The user must visit the connect page.
    #[error("the user has no working credential for this route's upstream")]
    Connect(Ask),
    /// The vault or the upstream's authorization server did not answer.
    #[error("upstream credentials unavailable: {0}")]
    Unavailable(String),
}

/// What the upstream gets besides the request: a header to set (never a client's).
#[derive(Clone)]
pub(crate) struct Injected {
    pub(crate) name: http::HeaderName,
    pub(crate) value: http::HeaderValue,
}

impl std::fmt::Debug for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injected")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The per-user credential service of one gateway process.
pub(crate) struct Credentials {
    settings: Arc<Settings>,
    /// `None`: no route keeps a credential per user.
    vault: Option<Vault>,
    broker: Broker,
    clock: Arc<dyn Clock>,
    /// Per route: the shared credential's header, read at start.
    shared: Vec<Option<Injected>>,
    /// Per route with `kind = "oauth"` and a configured client: its id and secret.
    statics: HashMap<String, (String, Option<Plain>)>,
    /// Sessions whose client declared URL-mode elicitation at `initialize`.
    eliciting: Mutex<Eliciting>,
    /// Connect links handed out, handed out again while fresh.
    links: links::Links,
    metrics: CredentialMetrics,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

/// Why the credential service cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CredentialsError {
    #[error("[[routes]] {route:?}: upstream_auth secret_file {path}: {reason}")]
    SharedFile {
        route: String,
        path: String,
        reason: String,
    },
    #[error("[[routes]] {route:?}: upstream_auth client_secret_file {path}: {reason}")]
    ClientSecret {
        route: String,
        path: String,
        reason: String,
    },
}

/// Reads a secret file: its first line, trimmed; empty is an error.
pub(crate) fn read_secret(path: &std::path::Path) -> Result<String, String> {
    // Owner-only and not empty, as every secret file.
    let text = pforte_oauth::read_secret_file(path).map_err(|e| e.to_string())?;
    Ok(text.lines().next().unwrap_or_default().trim().to_owned())
}

/// The header of `route`'s shared credential (`kind = "shared"` into a header), read now.
pub(crate) fn shared_header(route: &Route) -> Result<Option<Injected>, CredentialsError> {
    let Some(UpstreamAuth::Shared { file, into }) = &route.upstream_auth else {
        return Ok(None);
    };
    let secret = read_secret(file).map_err(|reason| CredentialsError::SharedFile {
        route: route.name.clone(),
        path: file.display().to_string(),
        reason,
    })?;
    Ok(match into {
        Injection::Header(into) => header(into, &secret),
        Injection::Env(_) => None,
    })
}

/// The header that carries `secret` as `into` says.
fn header(into: &HeaderInto, secret: &str) -> Option<Injected> {
    let value = http::HeaderValue::from_str(&format!("{}{secret}", into.prefix)).ok()?;
    let mut value = value;
    value.set_sensitive(true);
    Some(Injected {
        name: into.name.clone(),
        value,
    })
}

impl Credentials {
    /// The service for `settings`: shared credentials read now, the vault opened by the caller
    /// (`None` when no route keeps a credential per user).
    pub(crate) fn new(
        settings: Arc<Settings>,
        vault: Option<Vault>,
        broker: Broker,
        clock: Arc<dyn Clock>,
        metrics: CredentialMetrics,
    ) -> Result<Self, CredentialsError> {
        let mut shared = Vec::with_capacity(settings.routes.len());
        let mut statics = HashMap::new();
        for route in &settings.routes {
            let mut injected = None;
            match &route.upstream_auth {
                Some(UpstreamAuth::Shared { .. }) => injected = shared_header(route)?,
                Some(UpstreamAuth::OAuth {
                    registration:
                        Registration::Static {
                            client_id,
                            secret_file,
                        },
                    ..
                }) => {
                    let secret = secret_file
                        .as_deref()
                        .map(read_secret)
                        .transpose()
                        .map_err(|reason| CredentialsError::ClientSecret {
                            route: route.name.clone(),
                            path: secret_file
                                .as_deref()
                                .map(|p| p.display().to_string())
                                .unwrap_or_default(),
                            reason,
                        })?;
                    statics.insert(
                        route.name.clone(),
                        (client_id.clone(), secret.map(Plain::new)),
                    );
                }
                _ => {}
            }
            shared.push(injected);
        }
        Ok(Self {
            settings,
            vault,
            broker,
            clock,
            shared,
            statics,
            eliciting: Mutex::new(Eliciting::default()),
            links: links::Links::default(),
            metrics,
        })
    }

    /// The vault, for the stdio bridge's per-user environment and the account pages.
    pub(crate) fn vault(&self) -> Option<&Vault> {
        self.vault.as_ref()
    }

    fn route(&self, i: usize) -> Option<&Route> {
        self.settings.routes.get(i)
    }

    /// Whether route `i` needs a per-user credential (so `/mcp` bodies are read to answer a
    /// missing one).
    pub(crate) fn per_user(&self, i: usize) -> bool {
        self.route(i)
            .and_then(|r| r.upstream_auth.as_ref())
            .is_some_and(UpstreamAuth::per_user)
    }

    /// What a request of `person` on route `i` carries upstream. `Ok(None)`: nothing (no
    /// upstream auth, a stdio route's environment, or a shared variable).
    pub(crate) async fn for_request(
        &self,
        i: usize,
        person: &str,
    ) -> Result<Option<Injected>, Missing> {
        let Some(route) = self.route(i) else {
            return Ok(None);
        };
        let Some(auth) = &route.upstream_auth else {
            return Ok(None);
        };
        let vault = match auth {
            UpstreamAuth::Shared { .. } => return Ok(self.shared.get(i).cloned().flatten()),
            _ => self
                .vault
                .as_ref()
                .ok_or_else(|| Missing::Unavailable("no vault".into()))?,
        };
        let entry = vault
            .get(&route.name, person)
            .await
            .map_err(|e| Missing::Unavailable(e.to_string()))?
            .ok_or(Missing::Connect(Ask::Connect))?;
        if entry.state == State::NeedsReconnect {
            return Err(Missing::Connect(Ask::Reconnect));
        }
        match (auth, &entry.secret) {
            (UpstreamAuth::Header { into, .. }, Secret::Values(values)) => {
                let secret = values
                    .get(into.name.as_str())
                    .ok_or(Missing::Connect(Ask::Reconnect))?;
                Ok(header(into, secret))
            }
            (UpstreamAuth::Env { variables, .. }, Secret::Values(values)) => {
                if variables.iter().all(|v| values.contains_key(v)) {
                    Ok(None)
                } else {
                    Err(Missing::Connect(Ask::Reconnect))
                }
            }
            (UpstreamAuth::OAuth { .. }, Secret::OAuth(_)) => {
                let tokens = self.fresh_tokens(route, person, entry).await?;
                let bearer = HeaderInto {
                    name: http::header::AUTHORIZATION,
                    prefix: "Bearer ".into(),
                };
                Ok(header(&bearer, &tokens.access_token))
            }
            // A record of another kind (the route's kind changed): connect again.
            _ => Err(Missing::Connect(Ask::Reconnect)),
        }
    }

    /// The entry's tokens, refreshed first when they are stale at `now` (single-flight per
    /// user and route, across gateways on one redis). A refresh the upstream refuses marks the
    /// record for reconnecting.
    async fn fresh_tokens(
        &self,
        route: &Route,
        person: &str,
        entry: Entry,
    ) -> Result<OAuthTokens, Missing> {
        let now = self.clock.now_ms();
        let Secret::OAuth(tokens) = &entry.secret else {
            return Err(Missing::Connect(Ask::Reconnect));
        };
        if !stale(&entry, tokens, now) {
            return Ok(tokens.clone());
        }
        self.refresh(route, person, Some(tokens.access_token.clone()))
            .await
    }

    /// Refreshes `person`'s tokens for `route` unless another caller already did (the stored
    /// access token is no longer `seen`, or, with `seen` `None`, no longer stale).
    async fn refresh(
        &self,
        route: &Route,
        person: &str,
        seen: Option<String>,
    ) -> Result<OAuthTokens, Missing> {
        let vault = self
            .vault
            .as_ref()
            .ok_or_else(|| Missing::Unavailable("no vault".into()))?;
        let clock = self.clock.clone();
        let is_stale = move |e: &Entry| match &e.secret {
            Secret::OAuth(t) => match &seen {
                Some(access) => &t.access_token == access,
                None => stale(e, t, clock.now_ms()),
            },
            Secret::Values(_) => false,
        };
        let server = self.server(route).await?;
        let outcome = vault
            .refresh_with(&route.name, person, is_stale, |entry: Entry| async move {
                let Secret::OAuth(old) = &entry.secret else {
                    return Err(RefreshError::Revoked("not an OAuth record".into()));
                };
                let Some(refresh_token) = old.refresh_token.clone() else {
                    return Err(RefreshError::Revoked("no refresh token".into()));
                };
                let client = self.known_client(route, &server, &old.client_id).await;
                let set = self
                    .broker
                    .refresh(
                        &server,
                        &client,
                        &Plain::new(refresh_token.clone()),
                        &server.resource,
                    )
                    .await?;
                let now = self.clock.now_ms();
                let tokens = OAuthTokens {
                    access_token: set.access_token.expose().to_owned(),
                    // Rotation: a new refresh token replaces the old; none keeps it.
                    refresh_token: Some(
                        set.refresh_token
                            .map_or(refresh_token, |t| t.expose().to_owned()),
                    ),
                    expires_at_ms: set.expires_at_ms,
                    scope: set.scope.or_else(|| old.scope.clone()),
                    client_id: old.client_id.clone(),
                };
                Ok(Entry {
                    expires_at_ms: tokens.expires_at_ms,
                    secret: Secret::OAuth(tokens),
                    refreshed_ms: Some(now),
                    state: State::Connected,
                    ..entry
                })
            })
            .await;
        if let Ok(done) = &outcome {
            let stats = vault.stats();
            self.note(
                &route.name,
                if done.refreshed {
                    CredentialEvent::Refreshed
                } else {
                    CredentialEvent::RefreshJoined
                },
            );
            if done.refreshed {
                tracing::info!(route = %route.name, refreshes = stats.refreshed, joined = stats.joined, "upstream token refreshed");
            } else {
                tracing::debug!(route = %route.name, refreshes = stats.refreshed, joined = stats.joined, "upstream token refreshed by another caller");
            }
        }
        match outcome {
            Ok(done) => match done.entry.secret {
                Secret::OAuth(t) => Ok(t),
                Secret::Values(_) => Err(Missing::Connect(Ask::Reconnect)),
            },
            Err(crate::vault::RefreshError::Missing) => Err(Missing::Connect(Ask::Connect)),
            Err(crate::vault::RefreshError::Refresh(RefreshError::Revoked(reason))) => {
                tracing::info!(route = %route.name, %reason, "upstream refused the refresh; the user must reconnect");
                self.note(&route.name, CredentialEvent::ReconnectNeeded);
                if let Err(e) = vault
                    .set_state(&route.name, person, State::NeedsReconnect)
                    .await
                {
                    tracing::warn!(route = %route.name, error = %e, "could not mark the credential for reconnecting");
                }
                Err(Missing::Connect(Ask::Reconnect))
            }
            Err(e) => Err(Missing::Unavailable(e.to_string())),
        }
    }

    /// The upstream answered 401 to a request that carried `sent` (the access token): one
    /// refresh (unless another caller made one since), else the reconnect state. `Ok`: the
    /// next call will carry a fresh token.
    pub(crate) async fn unauthorized(
        &self,
        i: usize,
        person: &str,
        sent: &str,
    ) -> Result<(), Missing> {
        let Some(route) = self.route(i) else {
            return Ok(());
        };
        match &route.upstream_auth {
            Some(UpstreamAuth::OAuth { .. }) => self
                .refresh(route, person, Some(sent.to_owned()))
                .await
                .map(drop),
            // A user's own key the upstream no longer takes: they enter it again.
            Some(UpstreamAuth::Header { .. }) => {
                self.note(&route.name, CredentialEvent::ReconnectNeeded);
                if let Some(vault) = &self.vault
                    && let Err(e) = vault
                        .set_state(&route.name, person, State::NeedsReconnect)
                        .await
                {
                    tracing::warn!(route = %route.name, error = %e, "could not mark the credential for reconnecting");
                }
                Err(Missing::Connect(Ask::Reconnect))
            }
            _ => Err(Missing::Unavailable(
                "the upstream refused the route's credential".into(),
            )),
        }
    }

    /// A connect link for `principal` on route `i`: single use, for [`LINK_TTL`]; the same link
    /// again while it is fresh (`links.rs`), so a caller's every request does not mint one.
    pub(crate) async fn link(&self, i: usize, principal: &Principal) -> Result<String, Missing> {
        let route = self
            .route(i)
            .ok_or_else(|| Missing::Unavailable("no such route".into()))?;
        let vault = self
            .vault
            .as_ref()
            .ok_or_else(|| Missing::Unavailable("no vault".into()))?;
        let grant = LinkGrant {
            route: route.name.clone(),
            person: principal.person_key(),
            principal_kind: principal.kind,
            subject: principal.subject.clone(),
        };
        let now = self.clock.now_ms();
        let window = links::reuse_window(LINK_TTL);
        if let Some(url) = self.links.fresh(&grant, now, window) {
            return Ok(url);
        }
        let token = vault
            .issue_link(&grant, LINK_TTL)
            .await
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        let url = format!(
            "{}/connect/{}?link={token}",
            self.settings.base_url, route.name
        );
        self.links.keep(&grant, url.clone(), now, window);
        Ok(url)
    }

    /// `grant`'s link was used: the next prompt carries a new one.
    pub(crate) fn link_taken(&self, grant: &LinkGrant) {
        self.links.taken(grant);
    }

    /// Forgets `person`'s credential for the route named `route`, revoking an OAuth grant at
    /// the upstream first (RFC 7009, best effort: the record goes either way). `false`: there
    /// was none.
    pub(crate) async fn disconnect(&self, route: &str, person: &str) -> Result<bool, Missing> {
        let vault = self
            .vault
            .as_ref()
            .ok_or_else(|| Missing::Unavailable("no vault".into()))?;
        let entry = vault
            .get(route, person)
            .await
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        if let (Some(entry), Some(r)) = (
            &entry,
            self.settings.routes.iter().find(|r| r.name == route),
        ) && let Secret::OAuth(t) = &entry.secret
        {
            match self.revoke_upstream(r, t).await {
                Ok(true) => tracing::info!(route, "upstream grant revoked at disconnect"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(route, error = %e, "upstream grant not revoked at disconnect")
                }
            }
        }
        let removed = vault
            .remove(route, person)
            .await
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        if removed {
            self.note(route, CredentialEvent::Disconnected);
        }
        Ok(removed)
    }

    /// Counts `event` on `route` (`/metrics`: counts only, nothing of the credential).
    pub(crate) fn note(&self, route: &str, event: CredentialEvent) {
        self.metrics.count(route, event);
    }

    /// Remembers that session `id`'s client declared URL-mode elicitation.
    pub(crate) fn note_eliciting(&self, id: &str) {
        if let Ok(mut e) = self.eliciting.lock() {
            e.insert(id);
        }
    }

    /// Whether session `id`'s client declared URL-mode elicitation (known to this process).
    pub(crate) fn eliciting(&self, id: &str) -> bool {
        self.eliciting
            .lock()
            .map(|e| e.set.contains(id))
            .unwrap_or(false)
    }
}

/// The sessions whose client declared URL-mode elicitation: a set to look up, the order to
/// forget the oldest past [`MAX_ELICITING_SESSIONS`].
#[derive(Debug, Default)]
struct Eliciting {
    set: std::collections::HashSet<String>,
    order: std::collections::VecDeque<String>,
}

impl Eliciting {
    fn insert(&mut self, id: &str) {
        if !self.set.insert(id.to_owned()) {
            return;
        }
        self.order.push_back(id.to_owned());
        if self.order.len() > MAX_ELICITING_SESSIONS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
    }
}

impl Credentials {
    /// Every route that keeps a credential per user, with `person`'s state there.
    pub(crate) async fn rows(&self, person: &str) -> Result<Vec<pages::Row>, Missing> {
        let stored = match &self.vault {
            Some(v) => v
                .list(person)
                .await
                .map_err(|e| Missing::Unavailable(e.to_string()))?,
            None => Vec::new(),
        };
        Ok(self
            .settings
            .routes
            .iter()
            .filter(|r| r.upstream_auth.as_ref().is_some_and(UpstreamAuth::per_user))
            .map(|r| {
                let s = stored.iter().find(|s| s.route == r.name);
                pages::Row {
                    route: r.name.clone(),
                    title: r.title.clone().unwrap_or_else(|| r.name.clone()),
                    kind: r.upstream_auth.as_ref().map_or("", UpstreamAuth::kind),
                    state: match s.map(|s| s.state) {
                        Some(State::Connected) => "connected",
                        Some(State::NeedsReconnect) => "needs reconnect",
                        None => "not connected",
                    },
                    connected: s.map(|s| crate::console::when(s.connected_ms)),
                    expires: s.and_then(|s| s.expires_at_ms).map(crate::console::when),
                    refreshed: s.and_then(|s| s.refreshed_ms).map(crate::console::when),
                }
            })
            .collect())
    }
}

/// `/account`'s "Connected services": the signed-in user's rows, when a route keeps a
/// credential per user.
pub(crate) struct AccountConnections(pub(crate) Arc<Credentials>);

#[async_trait::async_trait]
impl pforte_oauth::AccountSection for AccountConnections {
    async fn html(&self, username: &str, csrf: &str) -> Option<String> {
        let any = (0..self.0.settings.routes.len()).any(|i| self.0.per_user(i));
        if !any {
            return None;
        }
        match self.0.rows(&crate::auth::person_key(crate::auth::AuthKind::OAuth, username, "")).await {
            Ok(rows) => Some(pages::account_section(&rows, csrf)),
            Err(_) => Some(
                "<h2 class=\"section\">Connected services</h2><p class=\"muted\">The credential vault did not answer.</p>"
                    .to_owned(),
            ),
        }
    }
}

/// A `kind = "env"` route's per-user variables for the stdio bridge: the person's stored
/// values, or `Missing` (the bridge refuses the session; the gateway prompted already).
pub(crate) struct VaultEnv(pub(crate) Arc<Credentials>);

#[async_trait::async_trait]
impl crate::stdio::SessionEnv for VaultEnv {
    async fn env_for(
        &self,
        route: &str,
        person: &str,
    ) -> Result<Vec<(String, String)>, crate::stdio::EnvRefusal> {
        use crate::stdio::EnvRefusal;
        let Some(r) = self.0.settings.routes.iter().find(|r| r.name == route) else {
            return Ok(Vec::new());
        };
        let Some(UpstreamAuth::Env { variables, .. }) = &r.upstream_auth else {
            return Ok(Vec::new());
        };
        let vault = self
            .0
            .vault
            .as_ref()
            .ok_or_else(|| EnvRefusal::Unavailable("no vault".into()))?;
        let entry = vault
            .get(route, person)
            .await
            .map_err(|e| EnvRefusal::Unavailable(e.to_string()))?
            .ok_or(EnvRefusal::Missing)?;
        let Secret::Values(values) = entry.secret else {
            return Err(EnvRefusal::Missing);
        };
        variables
            .iter()
            .map(|v| {
                values
                    .get(v)
                    .map(|x| (v.clone(), x.clone()))
                    .ok_or(EnvRefusal::Missing)
            })
            .collect()
    }
}

/// Whether `tokens` (of `entry`) should be refreshed before use at `now_ms`: within a minute of
/// expiry, or a tenth of a shorter lifetime (`broker::is_stale`).
fn stale(entry: &Entry, tokens: &OAuthTokens, now_ms: u64) -> bool {
    let set = TokenSet {
        access_token: Plain::new(""),
        refresh_token: None,
        expires_at_ms: tokens.expires_at_ms,
        obtained_at_ms: entry.refreshed_ms.unwrap_or(entry.connected_ms),
        scope: None,
    };
    broker::is_stale(&set, now_ms)
}

/// The MCP URL of a route's upstream (the first instance of several).
pub(crate) fn upstream_url(route: &Route) -> String {
    route.upstream.primary().http_url()
}
