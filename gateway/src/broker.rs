//! The upstream OAuth broker (`[routes.upstream_auth] kind = "oauth"`): Pforte as an OAuth 2.1
//! client of a third-party MCP server. `discover.rs` finds the upstream's authorization server
//! (its 401, RFC 9728, RFC 8414 / OpenID configuration) and caches it per route for an hour;
//! `register.rs` chooses how Pforte is known there (a configured client, a client ID metadata
//! document Pforte serves, or dynamic registration, cached per route and issuer); `flow.rs`
//! runs the code flow with PKCE S256 and `resource`, the exchange and the refresh through the
//! `oauth2` crate; `transport.rs` is the HTTP under all of it (the one outbound client: no
//! redirects, timeouts, bounded answers, a route's own CA, the route's address policy — plain
//! http and private addresses only on the upstream's own host or the route's `allow_hosts`); `challenge.rs` reads `WWW-Authenticate`; `callback.rs` the authorization response (RFC 9207
//! `iss` checked). `Broker` holds the
//! clients, the clock and the caches, once per gateway; where the tokens are kept is not its
//! business (the vault's).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pforte_clock::Clock;
use pforte_outbound::AddressPolicy;
use url::Url;

mod callback;
mod challenge;
mod discover;
mod flow;
mod register;
mod transport;

pub use callback::{Callback, CallbackError, read_callback};
pub use discover::{DiscoveryError, UpstreamServer};
pub use flow::{Begun, FlowError, RefreshError, TokenSet, is_stale};
pub use pforte_oauth::Secret;
pub use register::{RegisterError, Registration, TokenAuth, UpstreamClient, choose, cimd_document};
pub use transport::HttpError;

/// A client's key: the CA file it trusts and the hosts its address policy exempts.
type ClientKey = (Option<PathBuf>, Vec<String>);

/// The upstream OAuth client side of one gateway: HTTP clients per CA file and address policy,
/// the clock, the discovery cache and the dynamic registrations made.
pub struct Broker {
    clock: Arc<dyn Clock>,
    clients: Mutex<HashMap<ClientKey, transport::Client>>,
    discovery: discover::Cache,
    registered: Mutex<HashMap<(String, String), UpstreamClient>>,
    /// One dynamic registration at a time (two users connecting at once register once).
    registering: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").finish_non_exhaustive()
    }
}

impl Broker {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            clients: Mutex::new(HashMap::new()),
            discovery: discover::Cache::default(),
            registered: Mutex::new(HashMap::new()),
            registering: tokio::sync::Mutex::new(()),
        }
    }

    /// The HTTP client trusting the platform's roots and `ca_file` (read on first use), held
    /// to public addresses over https except for `allowed_hosts`.
    async fn http(
        &self,
        ca_file: Option<&Path>,
        allowed_hosts: &[String],
    ) -> Result<transport::Client, HttpError> {
        let key = (ca_file.map(Path::to_path_buf), allowed_hosts.to_vec());
        if let Some(c) = self
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(c.clone());
        }
        let policy = AddressPolicy::allowing(allowed_hosts);
        let client = match ca_file {
            None => transport::client(None, policy)?,
            Some(path) => {
                let shown = path.display().to_string();
                let pem = tokio::fs::read(path).await.map_err(|e| HttpError::Ca {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?;
                transport::client(Some((&shown, &pem)), policy)?
            }
        };
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, client.clone());
        Ok(client)
    }

    /// What the upstream MCP server of `route` at `mcp_url` (from the configuration) names as
    /// its authorization server: cached for an hour. Plain http and private addresses are
    /// reached only on `mcp_url`'s own host (as written) and the route's `allow_hosts`.
    pub async fn discover(
        &self,
        route: &str,
        mcp_url: &Url,
        ca_file: Option<&Path>,
        allow_hosts: &[String],
    ) -> Result<Arc<UpstreamServer>, DiscoveryError> {
        if let Some(s) = self.discovery.get(route, self.clock.now_ms()) {
            return Ok(s);
        }
        let mut allowed: Vec<String> = mcp_url.host_str().map(str::to_owned).into_iter().collect();
        allowed.extend(allow_hosts.iter().cloned());
        let http = self
            .http(ca_file, &allowed)
            .await
            .map_err(|e| DiscoveryError::Unreachable {
                what: "the upstream",
                reason: e.to_string(),
            })?;
        let server =
            Arc::new(discover::discover(&http, mcp_url, ca_file.map(Path::to_path_buf)).await?);
        self.discovery
            .put(route, Arc::clone(&server), self.clock.now_ms());
        Ok(server)
    }

    /// Forgets what was learnt about `route`: its discovery and its registrations (the route
    /// changed or is gone; an upstream refused the client).
    pub fn forget(&self, route: &str) {
        self.discovery.forget(route);
        self.registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(r, _), _| r != route);
    }

    /// A dynamic registration made (or persisted) for `route` at `issuer`.
    pub fn registered(&self, route: &str, issuer: &str) -> Option<UpstreamClient> {
        self.registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(route.to_owned(), issuer.to_owned()))
            .cloned()
    }

    /// Remembers a dynamic registration for `route` at `issuer` (one read back from storage).
    pub fn remember_registration(&self, route: &str, issuer: &str, client: UpstreamClient) {
        self.registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((route.to_owned(), issuer.to_owned()), client);
    }

    /// The client for `registration` at `server`: the configured one, the metadata document's
    /// URL, or a dynamic registration (made once per route and issuer, then remembered; the
    /// caller persists a new one). Also whether it was registered just now.
    pub async fn client(
        &self,
        route: &str,
        server: &UpstreamServer,
        registration: &Registration,
        redirect_uri: &str,
        client_name: &str,
    ) -> Result<(UpstreamClient, bool), RegisterError> {
        match registration {
            Registration::Static {
                client_id,
                client_secret,
            } => Ok((
                UpstreamClient {
                    client_id: client_id.clone(),
                    client_secret: client_secret.clone(),
                    auth: match client_secret {
                        None => TokenAuth::None,
                        Some(_) => register::secret_auth(None, &server.token_auth_methods),
                    },
                },
                false,
            )),
            Registration::Cimd { client_id_url } => Ok((
                UpstreamClient {
                    client_id: client_id_url.clone(),
                    client_secret: None,
                    auth: TokenAuth::None,
                },
                false,
            )),
            Registration::Dcr => {
                let _one = self.registering.lock().await;
                if let Some(c) = self.registered(route, &server.issuer) {
                    return Ok((c, false));
                }
                let http = self
                    .http(server.ca_file.as_deref(), &server.allowed_hosts)
                    .await?;
                let c = register::register(&http, server, redirect_uri, client_name).await?;
                self.remember_registration(route, &server.issuer, c.clone());
                Ok((c, true))
            }
        }
    }

    /// Starts an authorization: the URL for the user's browser, `state` and the PKCE verifier.
    pub fn begin(
        &self,
        server: &UpstreamServer,
        client: &UpstreamClient,
        redirect_uri: &str,
        scopes: &[String],
        resource: &str,
    ) -> Result<Begun, FlowError> {
        flow::begin(
            server,
            client,
            redirect_uri,
            scopes,
            resource,
            &mut rand::rng(),
        )
    }

    /// Redeems the callback's `code` for tokens.
    pub async fn finish(
        &self,
        server: &UpstreamServer,
        client: &UpstreamClient,
        code: &str,
        verifier: &pforte_oauth::Secret,
        redirect_uri: &str,
        resource: &str,
    ) -> Result<TokenSet, FlowError> {
        let http = self
            .http(server.ca_file.as_deref(), &server.allowed_hosts)
            .await
            .map_err(|e| FlowError::Unreachable(e.to_string()))?;
        flow::finish(
            &http,
            server,
            client,
            code,
            verifier,
            redirect_uri,
            resource,
            || self.clock.now_ms(),
        )
        .await
    }

    /// Fresh tokens for `refresh_token`; a rotated refresh token replaces it in the answer.
    pub async fn refresh(
        &self,
        server: &UpstreamServer,
        client: &UpstreamClient,
        refresh_token: &pforte_oauth::Secret,
        resource: &str,
    ) -> Result<TokenSet, RefreshError> {
        let http = self
            .http(server.ca_file.as_deref(), &server.allowed_hosts)
            .await
            .map_err(|e| RefreshError::Transient(e.to_string()))?;
        flow::refresh(&http, server, client, refresh_token, resource, || {
            self.clock.now_ms()
        })
        .await
    }

    /// Revokes `tokens` upstream (the user disconnected): best effort, `Ok(false)` when the
    /// server offers no revocation endpoint.
    pub async fn revoke(
        &self,
        server: &UpstreamServer,
        client: &UpstreamClient,
        tokens: &TokenSet,
    ) -> Result<bool, String> {
        let http = self
            .http(server.ca_file.as_deref(), &server.allowed_hosts)
            .await
            .map_err(|e| e.to_string())?;
        flow::revoke(&http, server, client, tokens).await
    }

    /// Whether `tokens` should be refreshed before use now.
    pub fn is_stale(&self, tokens: &TokenSet) -> bool {
        is_stale(tokens, self.clock.now_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send<T: Send>(_: &T) {}

    /// The gateway runs these on a multi-threaded runtime: their futures must be `Send`, and
    /// the broker shared between threads.
    #[test]
    fn the_broker_is_shared_and_its_futures_are_send() {
        fn sync<T: Send + Sync>() {}
        sync::<Broker>();
        let b = Broker::new(Arc::new(pforte_clock::ManualClock::default()));
        let Ok(url) = Url::parse("https://up.example/mcp") else {
            return;
        };
        send(&b.discover("r", &url, None, &[]));
        let server = UpstreamServer {
            resource: url.to_string(),
            issuer: "https://as.example".into(),
            authorization_endpoint: url.clone(),
            token_endpoint: url.clone(),
            registration_endpoint: None,
            revocation_endpoint: None,
            cimd_supported: false,
            iss_parameter_supported: false,
            scopes_supported: Vec::new(),
            token_auth_methods: Vec::new(),
            ca_file: None,
            allowed_hosts: Vec::new(),
        };
        let client = UpstreamClient {
            client_id: "c".into(),
            client_secret: None,
            auth: TokenAuth::None,
        };
        let secret = pforte_oauth::Secret::new("x");
        send(&b.client("r", &server, &Registration::Dcr, "https://gw/cb", "Pforte"));
        send(&b.finish(&server, &client, "code", &secret, "https://gw/cb", "r"));
        send(&b.refresh(&server, &client, &secret, "r"));
        let tokens = TokenSet {
            access_token: secret.clone(),
            refresh_token: None,
            expires_at_ms: None,
            obtained_at_ms: 0,
            scope: None,
        };
        send(&b.revoke(&server, &client, &tokens));
    }
}
