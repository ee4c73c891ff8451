//! The OAuth side of upstream credentials: the upstream's authorization server (discovered and
//! cached by the broker), how Pforte is registered there, and the steps of a user's
//! authorization (begin, finish, revoke) with Pforte's own redirect URI and client ID metadata
//! document.

use std::sync::Arc;

use pforte_oauth::Secret as Plain;
use url::Url;

use super::{Credentials, Missing, upstream_url};
use crate::{
    broker::{self, Callback, TokenSet, UpstreamClient, UpstreamServer},
    config::{Registration, Route, UpstreamAuth},
    vault::{Entry, OAuthTokens, Secret, State},
};

/// The vault's key for a route's dynamic registration at `issuer` (never a person's key, which
/// starts `oauth:` or `static:`).
fn registration_key(issuer: &str) -> String {
    format!("registration:{issuer}")
}

impl Credentials {
    /// The upstream's authorization server, discovered once per route (cached by the broker).
    pub(super) async fn server(&self, route: &Route) -> Result<Arc<UpstreamServer>, Missing> {
        let url =
            Url::parse(&upstream_url(route)).map_err(|e| Missing::Unavailable(e.to_string()))?;
        let allow_hosts: &[String] = match &route.upstream_auth {
            Some(UpstreamAuth::OAuth { allow_hosts, .. }) => allow_hosts,
            _ => &[],
        };
        self.broker
            .discover(&route.name, &url, route.upstream.ca_file(), allow_hosts)
            .await
            .map_err(|e| Missing::Unavailable(e.to_string()))
    }

    /// How Pforte is known at `route`'s upstream: configured, its client ID metadata document,
    /// or dynamic registration (`auto` picks as `broker::choose` says).
    fn registration(
        &self,
        route: &Route,
        server: &UpstreamServer,
    ) -> Result<broker::Registration, Missing> {
        let Some(UpstreamAuth::OAuth { registration, .. }) = &route.upstream_auth else {
            return Err(Missing::Unavailable("not an oauth route".into()));
        };
        let cimd = Url::parse(&self.client_document_url(route))
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        let configured = self.statics.get(&route.name).cloned();
        match registration {
            Registration::Static { .. } | Registration::Auto => {
                broker::choose(configured, server, &cimd)
                    .map_err(|e| Missing::Unavailable(e.to_string()))
            }
            Registration::Cimd => Ok(broker::Registration::Cimd {
                client_id_url: cimd.to_string(),
            }),
            Registration::Dcr => Ok(broker::Registration::Dcr),
        }
    }

    /// The client at `route`'s upstream, registering it now if it must.
    async fn client(
        &self,
        route: &Route,
        server: &UpstreamServer,
    ) -> Result<UpstreamClient, Missing> {
        let how = self.registration(route, server)?;
        if matches!(how, broker::Registration::Dcr) {
            self.registered(route, server).await;
        }
        let (client, new) = self
            .broker
            .client(
                &route.name,
                server,
                &how,
                &self.redirect_uri(route),
                &client_name(route),
            )
            .await
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        if new {
            self.keep_registration(route, &server.issuer, &client).await;
        }
        Ok(client)
    }

    /// The dynamic registration at `server` for `route`: the broker's, else the one the vault
    /// keeps (made before a restart, or by another gateway), which the broker then remembers.
    async fn registered(&self, route: &Route, server: &UpstreamServer) -> Option<UpstreamClient> {
        if let Some(c) = self.broker.registered(&route.name, &server.issuer) {
            return Some(c);
        }
        let vault = self.vault.as_ref()?;
        let entry = vault
            .get(&route.name, &registration_key(&server.issuer))
            .await
            .ok()??;
        let Secret::Values(v) = entry.secret else {
            return None;
        };
        let client = UpstreamClient {
            client_id: v.get("client_id")?.clone(),
            client_secret: v.get("client_secret").map(|s| Plain::new(s.clone())),
            auth: v
                .get("auth")
                .and_then(|a| broker::TokenAuth::parse(a))
                .unwrap_or(broker::TokenAuth::None),
        };
        self.broker
            .remember_registration(&route.name, &server.issuer, client.clone());
        Some(client)
    }

    /// Keeps a new dynamic registration in the vault (sealed: it may carry a client secret), so
    /// tokens issued to it can be refreshed after a restart and by every gateway.
    async fn keep_registration(&self, route: &Route, issuer: &str, client: &UpstreamClient) {
        let Some(vault) = &self.vault else {
            return;
        };
        let mut values = std::collections::BTreeMap::new();
        values.insert("client_id".to_owned(), client.client_id.clone());
        values.insert("auth".to_owned(), client.auth.as_str().to_owned());
        if let Some(secret) = &client.client_secret {
            values.insert("client_secret".to_owned(), secret.expose().to_owned());
        }
        let entry = Entry {
            route: route.name.clone(),
            person: registration_key(issuer),
            secret: Secret::Values(values),
            state: State::Connected,
            connected_ms: self.clock.now_ms(),
            refreshed_ms: None,
            expires_at_ms: None,
            version: 0,
        };
        if let Err(e) = vault.put(&entry).await {
            tracing::warn!(route = %route.name, error = %e, "the upstream registration was not kept in the vault");
        }
    }

    /// The client that obtained tokens under `client_id`: the configured or registered one
    /// (with its secret), else a public client of that id (a metadata document's URL, or a
    /// registration this process no longer remembers).
    pub(super) async fn known_client(
        &self,
        route: &Route,
        server: &UpstreamServer,
        client_id: &str,
    ) -> UpstreamClient {
        if let Some((id, _)) = self.statics.get(&route.name)
            && id == client_id
            && let Ok(c) = self.client(route, server).await
        {
            return c;
        }
        if let Some(c) = self.registered(route, server).await
            && c.client_id == client_id
        {
            return c;
        }
        UpstreamClient {
            client_id: client_id.to_owned(),
            client_secret: None,
            auth: broker::TokenAuth::None,
        }
    }

    /// Starts `route`'s upstream authorization for one user: the authorization URL (PKCE S256,
    /// `state`, the upstream's `resource`) and what the callback needs.
    pub(crate) async fn begin(
        &self,
        route: &Route,
        scopes: Option<&[String]>,
    ) -> Result<Begun, Missing> {
        let server = self.server(route).await?;
        let client = self.client(route, &server).await?;
        let scopes: Vec<String> = scopes
            .map(<[String]>::to_vec)
            .unwrap_or_else(|| server.scopes_supported.clone());
        let begun = self
            .broker
            .begin(
                &server,
                &client,
                &self.redirect_uri(route),
                &scopes,
                &server.resource,
            )
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        Ok(Begun {
            url: begun.url.to_string(),
            state: begun.state,
            pkce_verifier: begun.pkce_verifier.expose().to_owned(),
            client_id: client.client_id,
        })
    }

    /// Redeems the callback's code (its `iss` checked against the server, RFC 9207) for tokens.
    pub(crate) async fn finish(
        &self,
        route: &Route,
        client_id: &str,
        callback: &Callback,
        verifier: &str,
    ) -> Result<OAuthTokens, Missing> {
        let server = self.server(route).await?;
        let code = callback
            .code_for(&server)
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        let client = self.known_client(route, &server, client_id).await;
        let set = self
            .broker
            .finish(
                &server,
                &client,
                code,
                &Plain::new(verifier),
                &self.redirect_uri(route),
                &server.resource,
            )
            .await
            .map_err(|e| Missing::Unavailable(e.to_string()))?;
        Ok(OAuthTokens {
            access_token: set.access_token.expose().to_owned(),
            refresh_token: set.refresh_token.map(|t| t.expose().to_owned()),
            expires_at_ms: set.expires_at_ms,
            scope: set.scope,
            client_id: client_id.to_owned(),
        })
    }

    /// Where the upstream's authorization server sends the user back.
    pub(crate) fn redirect_uri(&self, route: &Route) -> String {
        format!("{}/connect/{}/callback", self.settings.base_url, route.name)
    }

    /// The URL of the client ID metadata document Pforte serves for `route` (its client id).
    pub(crate) fn client_document_url(&self, route: &Route) -> String {
        format!(
            "{}/connect/{}/client.json",
            self.settings.base_url, route.name
        )
    }

    /// The client ID metadata document of `route`.
    pub(crate) fn client_document(&self, route: &Route) -> serde_json::Value {
        broker::cimd_document(
            &self.client_document_url(route),
            &self.redirect_uri(route),
            &client_name(route),
        )
    }
    pub(super) async fn revoke_upstream(
        &self,
        route: &Route,
        t: &OAuthTokens,
    ) -> Result<bool, String> {
        let server = self.server(route).await.map_err(|e| e.to_string())?;
        let client = self.known_client(route, &server, &t.client_id).await;
        let set = TokenSet {
            access_token: Plain::new(t.access_token.clone()),
            refresh_token: t.refresh_token.clone().map(Plain::new),
            expires_at_ms: t.expires_at_ms,
            obtained_at_ms: 0,
            scope: t.scope.clone(),
        };
        self.broker.revoke(&server, &client, &set).await
    }
}

/// A started upstream authorization: where the browser goes, and what the callback checks.
#[derive(Debug)]
pub(crate) struct Begun {
    pub(crate) url: String,
    pub(crate) state: String,
    pub(crate) pkce_verifier: String,
    pub(crate) client_id: String,
}

/// What Pforte calls itself at an upstream's authorization server.
fn client_name(route: &Route) -> String {
    format!("Pforte ({})", route.title.as_deref().unwrap_or(&route.name))
}
