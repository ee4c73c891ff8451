//! The authorization code flow against an upstream's authorization server, by the `oauth2`
//! crate: the authorization URL (PKCE S256, `state`, RFC 8707 `resource`), the code exchange
//! and the refresh (rotation honoured: a new refresh token replaces the old, none keeps it),
//! each answer turned into a `TokenSet` at `now`. Whether tokens are due for a refresh and
//! whether a refusal means the grant is gone are pure.

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use oauth2::basic::{BasicClient, BasicErrorResponse, BasicTokenResponse, BasicTokenType};
use oauth2::{
    AccessToken, AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken,
    EndpointNotSet, EndpointSet, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RefreshToken,
    RequestTokenError, RevocationUrl, Scope, StandardRevocableToken, TokenResponse as _, TokenUrl,
};
use pforte_oauth::Secret;
use url::Url;

use super::discover::UpstreamServer;
use super::register::{TokenAuth, UpstreamClient};
use super::transport::{self, HttpError};

/// How long before expiry tokens count as stale (at most; see [`is_stale`]).
const STALE_MARGIN_MS: u64 = 60_000;

/// A started authorization: where to send the browser, and what to keep until the callback.
#[derive(Debug)]
pub struct Begun {
    pub url: Url,
    /// The `state` the callback must carry back.
    pub state: String,
    /// The PKCE verifier for the code exchange.
    pub pkce_verifier: Secret,
}

/// What the token endpoint issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenSet {
    pub access_token: Secret,
    pub refresh_token: Option<Secret>,
    /// When the access token expires (ms since the epoch); `None` when the server did not say.
    pub expires_at_ms: Option<u64>,
    /// When the answer arrived (ms since the epoch): the start of the token's lifetime.
    pub obtained_at_ms: u64,
    /// The granted scope, space-separated, when the server said.
    pub scope: Option<String>,
}

/// Why the code exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("{0}")]
    Config(String),
    #[error("the token endpoint refused: {0}")]
    Refused(String),
    #[error("the token endpoint could not be reached: {0}")]
    Unreachable(String),
    #[error("the token endpoint answered unusably: {0}")]
    Invalid(String),
}

/// Why a refresh failed: the grant is gone (the user must connect again), or try later.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RefreshError {
    #[error("the upstream revoked the grant: {0}")]
    Revoked(String),
    #[error("refresh failed: {0}")]
    Transient(String),
}

type OAuthClient =
    BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// The `oauth2` client for `client`, no endpoints set yet: its id, its secret and how it
/// presents it.
fn bare_client(client: &UpstreamClient) -> BasicClient {
    let mut c = BasicClient::new(ClientId::new(client.client_id.clone())).set_auth_type(
        match client.auth {
            TokenAuth::Basic => AuthType::BasicAuth,
            TokenAuth::None | TokenAuth::Post => AuthType::RequestBody,
        },
    );
    if let Some(secret) = &client.client_secret {
        c = c.set_client_secret(ClientSecret::new(secret.expose().to_owned()));
    }
    c
}

/// The `oauth2` client for `client` at `server`.
fn oauth_client(
    server: &UpstreamServer,
    client: &UpstreamClient,
    redirect_uri: Option<&str>,
) -> Result<OAuthClient, FlowError> {
    let mut c = bare_client(client)
        .set_auth_uri(AuthUrl::from_url(server.authorization_endpoint.clone()))
        .set_token_uri(TokenUrl::from_url(server.token_endpoint.clone()));
    if let Some(r) = redirect_uri {
        let r = RedirectUrl::new(r.to_owned())
            .map_err(|e| FlowError::Config(format!("redirect URI {r}: {e}")))?;
        c = c.set_redirect_uri(r);
    }
    Ok(c)
}

/// 32 random bytes, base64url (43 characters): a `state` or a PKCE verifier.
fn random_string(rng: &mut dyn rand::RngCore) -> String {
    let mut bytes = [0u8; 32];
    rng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The authorization URL for `client` at `server`: code flow, PKCE S256, a fresh `state`,
/// `scopes` (none: the server's default), `resource`.
pub(crate) fn begin(
    server: &UpstreamServer,
    client: &UpstreamClient,
    redirect_uri: &str,
    scopes: &[String],
    resource: &str,
    rng: &mut dyn rand::RngCore,
) -> Result<Begun, FlowError> {
    let state = random_string(rng);
    let verifier = random_string(rng);
    let challenge =
        PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.clone()));
    let c = oauth_client(server, client, Some(redirect_uri))?;
    let for_closure = state.clone();
    let (url, _) = c
        .authorize_url(move || CsrfToken::new(for_closure))
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .set_pkce_challenge(challenge)
        .add_extra_param("resource", resource.to_owned())
        .url();
    Ok(Begun {
        url,
        state,
        pkce_verifier: Secret::new(verifier),
    })
}

/// The token answer as a `TokenSet` at `now_ms`; `previous` is the refresh token to keep when
/// the answer carries none (a refresh without rotation).
pub(crate) fn token_set(
    answer: &BasicTokenResponse,
    previous: Option<&Secret>,
    now_ms: u64,
) -> Result<TokenSet, String> {
    if *answer.token_type() != BasicTokenType::Bearer {
        return Err(format!("token_type {:?}, not Bearer", answer.token_type()));
    }
    let access = answer.access_token().secret();
    if access.is_empty() {
        return Err("an empty access_token".into());
    }
    let expires_at_ms = answer.expires_in().map(|d| {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        now_ms.saturating_add(ms)
    });
    Ok(TokenSet {
        access_token: Secret::new(access.clone()),
        refresh_token: answer
            .refresh_token()
            .map(|r| Secret::new(r.secret().clone()))
            .filter(|r| !r.expose().is_empty())
            .or_else(|| previous.cloned()),
        expires_at_ms,
        obtained_at_ms: now_ms,
        scope: answer
            .scopes()
            .map(|s| s.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(" ")),
    })
}

/// Whether `tokens` should be refreshed before use at `now_ms`: they expire within a minute,
/// or within a tenth of their lifetime when that is shorter. Tokens without an expiry are never
/// stale (the upstream's 401 says when).
pub fn is_stale(tokens: &TokenSet, now_ms: u64) -> bool {
    let Some(expires) = tokens.expires_at_ms else {
        return false;
    };
    let lifetime = expires.saturating_sub(tokens.obtained_at_ms);
    let margin = STALE_MARGIN_MS.min(lifetime / 10);
    now_ms.saturating_add(margin) >= expires
}

/// Whether an OAuth error code at the token endpoint means the grant (or the client) is gone
/// for good: retrying cannot help, the user must connect again.
pub(crate) fn ends_the_grant(code: &str) -> bool {
    matches!(
        code,
        "invalid_grant" | "invalid_client" | "unauthorized_client"
    )
}

/// A token-endpoint failure as the text of an error.
fn describe(e: &RequestTokenError<HttpError, BasicErrorResponse>) -> String {
    match e {
        RequestTokenError::ServerResponse(r) => match r.error_description() {
            Some(d) => format!("{}: {d}", r.error().as_ref()),
            None => r.error().as_ref().to_owned(),
        },
        RequestTokenError::Request(e) => transport::chain(e),
        RequestTokenError::Parse(e, _) => format!("unreadable answer: {e}"),
        RequestTokenError::Other(e) => e.clone(),
    }
}

/// A refresh failure classified: an OAuth error that ends the grant is `Revoked`, anything
/// else (network, 5xx, an unreadable answer, another error code) is `Transient`.
pub(crate) fn classify(e: &RequestTokenError<HttpError, BasicErrorResponse>) -> RefreshError {
    match e {
        RequestTokenError::ServerResponse(r) if ends_the_grant(r.error().as_ref()) => {
            RefreshError::Revoked(describe(e))
        }
        _ => RefreshError::Transient(describe(e)),
    }
}

/// Redeems `code` (with the PKCE `verifier`) for tokens.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn finish(
    http: &transport::Client,
    server: &UpstreamServer,
    client: &UpstreamClient,
    code: &str,
    verifier: &Secret,
    redirect_uri: &str,
    resource: &str,
    now_ms: impl FnOnce() -> u64,
) -> Result<TokenSet, FlowError> {
    let c = oauth_client(server, client, Some(redirect_uri))?;
    let answer = c
        .exchange_code(AuthorizationCode::new(code.to_owned()))
        .set_pkce_verifier(PkceCodeVerifier::new(verifier.expose().to_owned()))
        .add_extra_param("resource", resource.to_owned())
        .request_async(&transport::for_oauth2(http))
        .await
        .map_err(|e| match &e {
            RequestTokenError::ServerResponse(_) => FlowError::Refused(describe(&e)),
            RequestTokenError::Request(_) => FlowError::Unreachable(describe(&e)),
            _ => FlowError::Invalid(describe(&e)),
        })?;
    token_set(&answer, None, now_ms()).map_err(FlowError::Invalid)
}

/// Exchanges `refresh_token` for fresh tokens.
pub(crate) async fn refresh(
    http: &transport::Client,
    server: &UpstreamServer,
    client: &UpstreamClient,
    refresh_token: &Secret,
    resource: &str,
    now_ms: impl FnOnce() -> u64,
) -> Result<TokenSet, RefreshError> {
    let c =
        oauth_client(server, client, None).map_err(|e| RefreshError::Transient(e.to_string()))?;
    let token = RefreshToken::new(refresh_token.expose().to_owned());
    let answer = c
        .exchange_refresh_token(&token)
        .add_extra_param("resource", resource.to_owned())
        .request_async(&transport::for_oauth2(http))
        .await
        .map_err(|e| classify(&e))?;
    token_set(&answer, Some(refresh_token), now_ms()).map_err(RefreshError::Transient)
}

/// Revokes `tokens` at the server's revocation endpoint (RFC 7009): the refresh token (which
/// ends the grant), else the access token. `Ok(false)` when the server has no such endpoint.
pub(crate) async fn revoke(
    http: &transport::Client,
    server: &UpstreamServer,
    client: &UpstreamClient,
    tokens: &TokenSet,
) -> Result<bool, String> {
    let Some(endpoint) = &server.revocation_endpoint else {
        return Ok(false);
    };
    let c = bare_client(client).set_revocation_url(RevocationUrl::from_url(endpoint.clone()));
    let token: StandardRevocableToken = match &tokens.refresh_token {
        Some(r) => RefreshToken::new(r.expose().to_owned()).into(),
        None => AccessToken::new(tokens.access_token.expose().to_owned()).into(),
    };
    c.revoke_token(token)
        .map_err(|e| e.to_string())?
        .request_async(&transport::for_oauth2(http))
        .await
        .map_err(|e| match e {
            RequestTokenError::ServerResponse(r) => r.error().as_ref().to_owned(),
            RequestTokenError::Request(e) => transport::chain(&e),
            RequestTokenError::Parse(e, _) => format!("unreadable answer: {e}"),
            RequestTokenError::Other(e) => e,
        })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rand::SeedableRng as _;
    use sha2::{Digest as _, Sha256};

    fn server() -> UpstreamServer {
        UpstreamServer {
            resource: "https://up.example/mcp".into(),
            issuer: "https://as.example".into(),
            authorization_endpoint: Url::parse("https://as.example/authorize?tenant=a").unwrap(),
            token_endpoint: Url::parse("https://as.example/token").unwrap(),
            registration_endpoint: None,
            revocation_endpoint: None,
            cimd_supported: false,
            iss_parameter_supported: false,
            scopes_supported: Vec::new(),
            token_auth_methods: Vec::new(),
            ca_file: None,
            allowed_hosts: Vec::new(),
        }
    }

    fn client() -> UpstreamClient {
        UpstreamClient {
            client_id: "https://gw.example/connect/r/client.json".into(),
            client_secret: None,
            auth: TokenAuth::None,
        }
    }

    #[test]
    fn the_authorization_url() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let cb = "https://gw.example/connect/r/callback";
        let scopes = vec!["read".to_owned(), "write".to_owned()];
        let b = begin(
            &server(),
            &client(),
            cb,
            &scopes,
            "https://up.example/mcp",
            &mut rng,
        )
        .unwrap();
        let q: std::collections::HashMap<String, String> =
            b.url.query_pairs().into_owned().collect();
        assert_eq!(b.url.path(), "/authorize");
        assert_eq!(q["tenant"], "a", "the endpoint's own query is kept");
        assert_eq!(q["response_type"], "code");
        assert_eq!(q["client_id"], client().client_id);
        assert_eq!(q["redirect_uri"], cb);
        assert_eq!(q["scope"], "read write");
        assert_eq!(q["state"], b.state);
        assert_eq!(q["resource"], "https://up.example/mcp");
        assert_eq!(q["code_challenge_method"], "S256");
        let expected = URL_SAFE_NO_PAD.encode(Sha256::digest(b.pkce_verifier.expose().as_bytes()));
        assert_eq!(q["code_challenge"], expected);
        assert_eq!(b.state.len(), 43);
        assert_eq!(b.pkce_verifier.expose().len(), 43);
        assert_ne!(b.state, b.pkce_verifier.expose());

        let again = begin(
            &server(),
            &client(),
            cb,
            &[],
            "https://up.example/mcp",
            &mut rng,
        )
        .unwrap();
        assert_ne!(again.state, b.state, "a fresh state each time");
        assert!(!again.url.query_pairs().any(|(k, _)| k == "scope"));
    }

    fn answer(json: &str) -> BasicTokenResponse {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn token_answers_and_rotation() {
        let a = answer(
            r#"{"access_token":"at1","token_type":"Bearer","expires_in":3600,"refresh_token":"rt1","scope":"read write"}"#,
        );
        let t = token_set(&a, None, 1_000).unwrap();
        assert_eq!(t.access_token.expose(), "at1");
        assert_eq!(t.refresh_token, Some(Secret::new("rt1")));
        assert_eq!(t.expires_at_ms, Some(1_000 + 3_600_000));
        assert_eq!(t.obtained_at_ms, 1_000);
        assert_eq!(t.scope.as_deref(), Some("read write"));

        // Rotation: a new refresh token replaces the old one …
        let rotated =
            answer(r#"{"access_token":"at2","token_type":"bearer","refresh_token":"rt2"}"#);
        let t2 = token_set(&rotated, Some(&Secret::new("rt1")), 5).unwrap();
        assert_eq!(t2.refresh_token, Some(Secret::new("rt2")));
        assert_eq!(t2.expires_at_ms, None);
        // … and without one the old one stays.
        let kept = answer(r#"{"access_token":"at3","token_type":"Bearer","expires_in":60}"#);
        let t3 = token_set(&kept, Some(&Secret::new("rt1")), 5).unwrap();
        assert_eq!(t3.refresh_token, Some(Secret::new("rt1")));

        let mac = answer(r#"{"access_token":"x","token_type":"mac"}"#);
        assert!(token_set(&mac, None, 0).is_err());
        let empty = answer(r#"{"access_token":"","token_type":"Bearer"}"#);
        assert!(token_set(&empty, None, 0).is_err());
    }

    fn tokens(obtained: u64, expires: Option<u64>) -> TokenSet {
        TokenSet {
            access_token: Secret::new("a"),
            refresh_token: None,
            expires_at_ms: expires,
            obtained_at_ms: obtained,
            scope: None,
        }
    }

    #[test]
    fn staleness() {
        // An hour's token: stale from a minute before expiry.
        let hour = tokens(0, Some(3_600_000));
        assert!(!is_stale(&hour, 3_540_000 - 1));
        assert!(is_stale(&hour, 3_540_000));
        assert!(is_stale(&hour, 4_000_000));
        // A 100 s token: a tenth of its lifetime (10 s) is the shorter margin.
        let short = tokens(1_000, Some(101_000));
        assert!(!is_stale(&short, 90_999));
        assert!(is_stale(&short, 91_000));
        // Already expired at issue, or no expiry.
        assert!(is_stale(&tokens(5, Some(5)), 5));
        assert!(!is_stale(&tokens(0, None), u64::MAX));
    }

    fn server_error(code: &str) -> RequestTokenError<HttpError, BasicErrorResponse> {
        let r: BasicErrorResponse =
            serde_json::from_value(serde_json::json!({"error": code, "error_description": "why"}))
                .unwrap();
        RequestTokenError::ServerResponse(r)
    }

    #[test]
    fn refresh_failures_are_classified() {
        for code in ["invalid_grant", "invalid_client", "unauthorized_client"] {
            assert!(
                matches!(classify(&server_error(code)), RefreshError::Revoked(r) if r == format!("{code}: why")),
                "{code}"
            );
        }
        for code in [
            "server_error",
            "temporarily_unavailable",
            "invalid_request",
            "invalid_scope",
        ] {
            assert!(
                matches!(classify(&server_error(code)), RefreshError::Transient(_)),
                "{code}"
            );
        }
        let other = RequestTokenError::Other("server returned empty error response".into());
        assert!(matches!(classify(&other), RefreshError::Transient(_)));
    }
}
