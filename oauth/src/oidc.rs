//! Sign-in through OpenID providers, with the `openidconnect` crate doing every protocol and
//! JWT step: discovery (cached for an hour), the authorization URL with PKCE (S256), `state`
//! and `nonce`, the code exchange, and ID token validation — signature against the provider's
//! JWKS (fetched again once when a token names a key it does not hold: rotation), `iss`,
//! `aud`, `exp` at the injected clock's time, `nonce` — then UserInfo for the claims the ID
//! token left out. What the claims say is `claims.rs`, who may sign in `allow.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use openidconnect::core::{
    CoreClient, CoreGenderClaim, CoreJsonWebKey, CoreJsonWebKeySet,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata,
};
use openidconnect::{
    AdditionalClaims, AuthenticationFlow, AuthorizationCode, ClaimsVerificationError, ClientId,
    ClientSecret, CsrfToken, IdToken, IdTokenVerifier, IssuerUrl, Nonce, OAuth2TokenResponse as _,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope,
    SignatureVerificationError, TokenResponse as _, UserInfoClaims, UserInfoError,
};
use pforte_clock::Clock;
use serde::{Deserialize, Serialize};

use crate::config::OidcProviderConfig;

mod allow;
mod claims;

pub(crate) use allow::{admitted, domain_listed};
use claims::Claims;

/// How long discovery results are used before they are fetched again.
const DISCOVERY_TTL_MS: u64 = 3600 * 1000;
/// Largest answer read from a provider.
const MAX_ANSWER_BYTES: usize = 512 * 1024;

/// What a validated ID token says about the person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub issuer: String,
    pub subject: String,
    /// The email, only when the token says it is verified (lower-case).
    pub email: Option<String>,
    /// An email the token carried without `email_verified: true` (for the refusal page).
    pub unverified_email: Option<String>,
    pub groups: Vec<String>,
}

/// Why a sign-in at a provider failed; each becomes a page that names the provider.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum OidcError {
    /// The provider could not be reached or did not answer usably.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The provider answered with an OAuth error.
    #[error("provider error: {0}")]
    Provider(String),
    /// Its ID token failed validation.
    #[error("ID token refused: {0}")]
    Token(String),
}

impl OidcError {
    /// A short code for the audit log and metrics.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            OidcError::Unreachable(_) => "idp_unreachable",
            OidcError::Provider(_) => "idp_error",
            OidcError::Token(_) => "id_token_invalid",
        }
    }
}

/// Every claim beyond the standard ones (kept so that all claims can be read as JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Extra(HashMap<String, serde_json::Value>);

impl AdditionalClaims for Extra {}

type PforteIdToken =
    IdToken<Extra, CoreGenderClaim, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm>;

/// The `openidconnect` client of a discovered provider.
type PforteClient = CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// A provider's discovery document (with its JWKS) and when it was fetched.
#[derive(Clone)]
struct Discovered {
    metadata: CoreProviderMetadata,
    at_ms: u64,
}

struct Provider {
    cfg: OidcProviderConfig,
    /// Its HTTP client: public addresses over https, and the issuer's host as configured.
    http: pforte_outbound::Client,
    secret: Option<ClientSecret>,
    discovered: tokio::sync::Mutex<Option<Discovered>>,
}

/// The configured providers, their cached discovery and the HTTP clients used to reach them.
pub(crate) struct Providers {
    list: Vec<Provider>,
    clock: Arc<dyn Clock>,
    redirect: RedirectUrl,
}

/// The errors of the HTTP client handed to `openidconnect`.
pub(crate) type HttpError = pforte_outbound::OutboundError;

/// One request for `openidconnect`, on the one outbound client (no redirects followed, the
/// provider's address policy, the answer capped).
async fn send(
    http: pforte_outbound::Client,
    req: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, HttpError> {
    http.send(req, MAX_ANSWER_BYTES).await
}

/// The signature algorithms accepted on ID tokens: asymmetric ones only.
fn allowed_algs() -> Vec<CoreJwsSigningAlgorithm> {
    use CoreJwsSigningAlgorithm as A;
    vec![
        A::RsaSsaPkcs1V15Sha256,
        A::RsaSsaPkcs1V15Sha384,
        A::RsaSsaPkcs1V15Sha512,
        A::RsaSsaPssSha256,
        A::RsaSsaPssSha384,
        A::RsaSsaPssSha512,
        A::EcdsaP256Sha256,
        A::EcdsaP384Sha384,
        A::EdDsa,
    ]
}

impl Providers {
    /// The providers of `configs` with their secrets (read by the caller), answering at
    /// `redirect` (Pforte's `/oidc/callback`).
    pub(crate) fn new(
        configs: Vec<(OidcProviderConfig, Option<String>)>,
        redirect: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let redirect =
            RedirectUrl::new(redirect.to_owned()).map_err(|e| format!("redirect URL: {e}"))?;
        let mut list = Vec::with_capacity(configs.len());
        for (cfg, secret) in configs {
            let issuer_host = url::Url::parse(&cfg.issuer)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned));
            let http = pforte_outbound::Client::new(pforte_outbound::Options {
                policy: pforte_outbound::AddressPolicy::allowing(issuer_host),
                connect_timeout: Duration::from_secs(5),
                timeout: Some(Duration::from_secs(10)),
                ..pforte_outbound::Options::default()
            })
            .map_err(|e| format!("http client: {e}"))?;
            list.push(Provider {
                cfg,
                http,
                secret: secret.map(ClientSecret::new),
                discovered: tokio::sync::Mutex::new(None),
            });
        }
        Ok(Self {
            list,
            clock,
            redirect,
        })
    }

    fn provider(&self, name: &str) -> Option<&Provider> {
        self.list.iter().find(|p| p.cfg.name == name)
    }

    /// The configuration of provider `name`.
    pub(crate) fn config(&self, name: &str) -> Option<&OidcProviderConfig> {
        self.provider(name).map(|p| &p.cfg)
    }

    /// The configured providers' names, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.list.iter().map(|p| p.cfg.name.clone()).collect()
    }

    fn http_client(
        p: &Provider,
    ) -> impl Fn(
        openidconnect::HttpRequest,
    ) -> std::pin::Pin<
        Box<dyn Future<Output = Result<openidconnect::HttpResponse, HttpError>> + Send>,
    > + use<> {
        let http = p.http.clone();
        move |req| Box::pin(send(http.clone(), req))
    }

    /// The provider's discovery document: cached, fetched when absent or older than an hour.
    async fn discovered(&self, p: &Provider, refresh: bool) -> Result<Discovered, OidcError> {
        let now = self.clock.now_ms();
        let mut slot = p.discovered.lock().await;
        if let Some(d) = slot.as_ref()
            && !refresh
            && now.saturating_sub(d.at_ms) < DISCOVERY_TTL_MS
        {
            return Ok(d.clone());
        }
        let issuer = IssuerUrl::new(p.cfg.issuer.clone())
            .map_err(|e| OidcError::Unreachable(format!("issuer URL: {e}")))?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &Self::http_client(p))
            .await
            .map_err(|e| OidcError::Unreachable(format!("discovery failed: {}", chain(&e))))?;
        // The client secret and the code travel to these: https (http only on loopback).
        let endpoints = [
            Some(metadata.authorization_endpoint().url()),
            metadata.token_endpoint().map(|t| t.url()),
            Some(metadata.jwks_uri().url()),
            metadata.userinfo_endpoint().map(|u| u.url()),
        ];
        if let Some(bad) = endpoints
            .into_iter()
            .flatten()
            .find(|u| !crate::config::login::secure_or_loopback(u))
        {
            return Err(OidcError::Unreachable(format!(
                "its discovery document names a plain-http endpoint off loopback: {bad}"
            )));
        }
        let d = Discovered {
            metadata,
            at_ms: now,
        };
        *slot = Some(d.clone());
        Ok(d)
    }

    /// The provider's keys fetched again (an ID token named a key the cache does not hold).
    async fn refresh_keys(&self, p: &Provider) -> Result<CoreJsonWebKeySet, OidcError> {
        let d = self.discovered(p, false).await?;
        let jwks = CoreJsonWebKeySet::fetch_async(d.metadata.jwks_uri(), &Self::http_client(p))
            .await
            .map_err(|e| {
                OidcError::Unreachable(format!("keys could not be fetched: {}", chain(&e)))
            })?;
        let mut slot = p.discovered.lock().await;
        if let Some(cached) = slot.as_mut() {
            cached.metadata = cached.metadata.clone().set_jwks(jwks.clone());
        }
        Ok(jwks)
    }

    fn client(&self, p: &Provider, d: &Discovered) -> PforteClient {
        CoreClient::from_provider_metadata(
            d.metadata.clone(),
            ClientId::new(p.cfg.client_id.clone()),
            p.secret.clone(),
        )
        .set_redirect_uri(self.redirect.clone())
    }

    /// The URL that sends the browser to provider `name` for sign-in with these `state`,
    /// `nonce` and PKCE `verifier`.
    pub(crate) async fn authorize_url(
        &self,
        name: &str,
        state: &str,
        nonce: &str,
        verifier: &str,
    ) -> Result<url::Url, OidcError> {
        let p = self
            .provider(name)
            .ok_or_else(|| OidcError::Unreachable("not configured".into()))?;
        let d = self.discovered(p, false).await?;
        let challenge =
            PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.into()));
        let (state, nonce) = (state.to_owned(), nonce.to_owned());
        let client = self.client(p, &d);
        let mut req = client
            .authorize_url(
                AuthenticationFlow::<openidconnect::core::CoreResponseType>::AuthorizationCode,
                move || CsrfToken::new(state.clone()),
                move || Nonce::new(nonce.clone()),
            )
            .set_pkce_challenge(challenge);
        for scope in p.cfg.scopes.iter().filter(|s| *s != "openid") {
            req = req.add_scope(Scope::new(scope.clone()));
        }
        Ok(req.url().0)
    }

    /// Redeems `code` at provider `name`, validates the ID token it answers with and, when the
    /// ID token leaves out a claim Pforte reads, asks UserInfo for it (its `sub` must be the ID
    /// token's).
    pub(crate) async fn finish(
        &self,
        name: &str,
        code: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<Identity, OidcError> {
        let p = self
            .provider(name)
            .ok_or_else(|| OidcError::Unreachable("not configured".into()))?;
        let d = self.discovered(p, false).await?;
        let client = self.client(p, &d);
        let answer = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| OidcError::Provider(format!("no token endpoint: {e}")))?
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()))
            .request_async(&Self::http_client(p))
            .await
            .map_err(token_error)?;
        let raw = answer
            .id_token()
            .ok_or_else(|| OidcError::Provider("the token answer has no id_token".into()))?
            .to_string();
        let token: PforteIdToken = raw
            .parse()
            .map_err(|e| OidcError::Token(format!("not a JWT: {e}")))?;
        let validated = match self.validate(p, &token, d.metadata.jwks().clone(), nonce) {
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => {
                tracing::info!(idp = %p.cfg.name, "ID token signed by a key not cached: fetching the provider's keys again");
                let jwks = self.refresh_keys(p).await?;
                self.validate(p, &token, jwks, nonce)
            }
            other => other,
        }
        .map_err(|e| OidcError::Token(chain(&e)))?;
        let userinfo = if claims::needs_userinfo(&p.cfg, &validated.claims) {
            self.userinfo(p, &client, answer.access_token(), &validated.subject)
                .await?
        } else {
            None
        };
        Ok(claims::identity(
            &p.cfg,
            &validated.issuer,
            &validated.subject,
            &validated.claims,
            userinfo.as_ref(),
        ))
    }

    /// UserInfo's claims for the person of `subject`; `None` when the provider has no UserInfo
    /// endpoint or it could not be read (the ID token's claims are then all there is). An answer
    /// about another subject refuses the sign-in.
    async fn userinfo(
        &self,
        p: &Provider,
        client: &PforteClient,
        access: &openidconnect::AccessToken,
        subject: &str,
    ) -> Result<Option<Claims>, OidcError> {
        let expected = openidconnect::SubjectIdentifier::new(subject.to_owned());
        let Ok(request) = client.user_info(access.clone(), Some(expected)) else {
            return Ok(None);
        };
        let answer: Result<UserInfoClaims<Extra, CoreGenderClaim>, _> =
            request.request_async(&Self::http_client(p)).await;
        match answer {
            Ok(claims) => Ok(serde_json::to_value(&claims)
                .ok()
                .and_then(|v| v.as_object().cloned())),
            Err(UserInfoError::ClaimsVerification(e)) => Err(OidcError::Token(format!(
                "UserInfo answered for another person or unverifiably: {}",
                chain(&e)
            ))),
            Err(e) => {
                tracing::warn!(idp = %p.cfg.name, error = %chain(&e), "UserInfo could not be read: using the ID token's claims only");
                Ok(None)
            }
        }
    }

    /// Validates `token` against `jwks` at the clock's time: signature, `iss`, `aud`, `exp`,
    /// `nonce`; then reads its issuer, subject and claims.
    fn validate(
        &self,
        p: &Provider,
        token: &PforteIdToken,
        jwks: CoreJsonWebKeySet,
        nonce: &str,
    ) -> Result<Validated, ClaimsVerificationError> {
        let issuer = IssuerUrl::new(p.cfg.issuer.clone())
            .map_err(|e| ClaimsVerificationError::Other(e.to_string()))?;
        let client_id = ClientId::new(p.cfg.client_id.clone());
        let verifier: IdTokenVerifier<'_, CoreJsonWebKey> = match &p.secret {
            Some(s) => IdTokenVerifier::new_confidential_client(client_id, s.clone(), issuer, jwks),
            None => IdTokenVerifier::new_public_client(client_id, issuer, jwks),
        };
        let now = i64::try_from(self.clock.now_secs()).unwrap_or(i64::MAX);
        let verifier = verifier
            .set_allowed_algs(allowed_algs())
            .set_time_fn(move || chrono::DateTime::from_timestamp(now, 0).unwrap_or_default());
        let claims = token.claims(&verifier, &Nonce::new(nonce.to_owned()))?;
        let json = serde_json::to_value(claims)
            .map_err(|e| ClaimsVerificationError::Other(e.to_string()))?;
        Ok(Validated {
            issuer: claims.issuer().as_str().to_owned(),
            subject: claims.subject().as_str().to_owned(),
            claims: json.as_object().cloned().unwrap_or_default(),
        })
    }
}

/// A validated ID token: who issued it, about whom, and all its claims.
struct Validated {
    issuer: String,
    subject: String,
    claims: Claims,
}

/// A token-endpoint failure as one of ours.
fn token_error<RE: std::error::Error + 'static, T: openidconnect::ErrorResponse + 'static>(
    e: RequestTokenError<RE, T>,
) -> OidcError {
    match e {
        RequestTokenError::ServerResponse(r) => OidcError::Provider(format!("token endpoint: {r}")),
        RequestTokenError::Request(e) => {
            OidcError::Unreachable(format!("token endpoint: {}", chain(&e)))
        }
        RequestTokenError::Parse(e, _) => {
            OidcError::Provider(format!("token endpoint answered unreadably: {e}"))
        }
        RequestTokenError::Other(e) => OidcError::Provider(format!("token endpoint: {e}")),
    }
}

/// An error with its sources, `: `-joined (reqwest hides the useful part in a source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests;
