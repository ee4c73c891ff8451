//! The token endpoint's decisions: client authentication, code redemption checks, refresh
//! rotation rules, and the response shape.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{Client, Params, pkce, redirect, resource};
use crate::crypto::{Secret, ct_eq, hash_secret};
use crate::error::OAuthError;
use crate::model::{AuthMethod, CodeRecord, RefreshRecord};

/// The grant a token request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantType {
    AuthorizationCode,
    RefreshToken,
    /// RFC 7523 with an ID-JAG (Enterprise-Managed Authorization).
    JwtBearer,
}

/// The `grant_type` of a request.
pub fn grant_type(params: &Params) -> Result<GrantType, OAuthError> {
    match params
        .single("grant_type")
        .map_err(OAuthError::InvalidRequest)?
    {
        Some("authorization_code") => Ok(GrantType::AuthorizationCode),
        Some("refresh_token") => Ok(GrantType::RefreshToken),
        Some(super::metadata::JWT_BEARER) => Ok(GrantType::JwtBearer),
        Some(other) => Err(OAuthError::UnsupportedGrantType(format!(
            "grant_type {other} is not supported"
        ))),
        None => Err(OAuthError::InvalidRequest("grant_type is required".into())),
    }
}

/// Client credentials as presented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presented {
    pub client_id: String,
    pub secret: Option<Secret>,
    pub method: AuthMethod,
}

fn form_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Reads client credentials from the `Authorization` header (Basic) and the form body.
pub fn presented_credentials(
    params: &Params,
    authorization: Option<&str>,
) -> Result<Presented, OAuthError> {
    let body_id = params
        .single("client_id")
        .map_err(OAuthError::InvalidRequest)?;
    let body_secret = params
        .single("client_secret")
        .map_err(OAuthError::InvalidRequest)?;
    let basic = authorization.and_then(|h| {
        let (scheme, rest) = h.trim().split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("basic")
            .then(|| rest.trim().to_owned())
    });
    if let Some(b64) = basic {
        let bad = || OAuthError::InvalidClient("malformed HTTP Basic credentials".into());
        let raw = STANDARD.decode(b64).map_err(|_| bad())?;
        let raw = String::from_utf8(raw).map_err(|_| bad())?;
        let (id, secret) = raw.split_once(':').ok_or_else(bad)?;
        let (id, secret) = (form_decode(id), form_decode(secret));
        if body_secret.is_some() {
            return Err(OAuthError::InvalidRequest(
                "use one client authentication method, not two".into(),
            ));
        }
        if body_id.is_some_and(|b| b != id) {
            return Err(OAuthError::InvalidRequest(
                "client_id differs from the Basic credentials".into(),
            ));
        }
        return Ok(Presented {
            client_id: id,
            secret: Some(Secret::new(secret)),
            method: AuthMethod::ClientSecretBasic,
        });
    }
    let Some(id) = body_id else {
        return Err(OAuthError::InvalidClient(
            "client authentication is required".into(),
        ));
    };
    Ok(match body_secret {
        Some(s) => Presented {
            client_id: id.to_owned(),
            secret: Some(Secret::new(s)),
            method: AuthMethod::ClientSecretPost,
        },
        None => Presented {
            client_id: id.to_owned(),
            secret: None,
            method: AuthMethod::None,
        },
    })
}

/// Authenticates `presented` against `client` by the client's registered method.
pub(crate) fn authenticate(presented: &Presented, client: &Client) -> Result<(), OAuthError> {
    if presented.method != client.auth_method {
        return Err(OAuthError::InvalidClient(format!(
            "this client authenticates with {}",
            client.auth_method.as_str()
        )));
    }
    match (&presented.secret, &client.secret_hash) {
        (None, None) if client.auth_method == AuthMethod::None => Ok(()),
        (Some(secret), Some(hash))
            if ct_eq(hash_secret(secret.expose()).as_bytes(), hash.as_bytes()) =>
        {
            Ok(())
        }
        _ => Err(OAuthError::InvalidClient(
            "client authentication failed".into(),
        )),
    }
}

/// Checks an authorization-code token request against the stored (unused) code.
pub fn check_code(
    code: &CodeRecord,
    client_id: &str,
    params: &Params,
    now: u64,
) -> Result<(), OAuthError> {
    let p = |n: &str| params.single(n).map_err(OAuthError::InvalidRequest);
    if now >= code.expires_at {
        return Err(OAuthError::InvalidGrant(
            "the authorization code has expired".into(),
        ));
    }
    if code.client_id != client_id {
        return Err(OAuthError::InvalidGrant(
            "the authorization code was issued to another client".into(),
        ));
    }
    match p("redirect_uri")? {
        Some(uri)
            if uri == code.redirect_uri
                || redirect::matches(&code.redirect_uri, uri) && !code.redirect_uri_explicit => {}
        None if !code.redirect_uri_explicit => {}
        _ => {
            return Err(OAuthError::InvalidGrant(
                "redirect_uri does not match the authorization request".into(),
            ));
        }
    }
    let Some(verifier) = p("code_verifier")? else {
        return Err(OAuthError::InvalidRequest(
            "code_verifier is required".into(),
        ));
    };
    if !pkce::verify(verifier, &code.code_challenge) {
        return Err(OAuthError::InvalidGrant(
            "code_verifier does not match the code_challenge".into(),
        ));
    }
    let requested = params.all("resource");
    if !requested.is_empty() {
        resource::check(&requested, &code.resource)?;
    }
    Ok(())
}

/// Checks a refresh token request against the stored token (before rotation).
pub fn check_refresh(
    token: &RefreshRecord,
    client_id: &str,
    params: &Params,
    now: u64,
) -> Result<(), OAuthError> {
    if token.client_id != client_id {
        return Err(OAuthError::InvalidGrant(
            "the refresh token was issued to another client".into(),
        ));
    }
    if now >= token.expires_at {
        return Err(OAuthError::InvalidGrant(
            "the refresh token has expired".into(),
        ));
    }
    let requested = params.all("resource");
    if !requested.is_empty() {
        resource::check(&requested, &token.resource)?;
    }
    Ok(())
}

/// What to do when an already-rotated refresh token is presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Within the grace window: answer with the same successor pair.
    ReturnSuccessor,
    /// After it: revoke the whole family and refuse.
    RevokeFamily,
}

/// Decides a reuse of a token rotated at `rotated_at`.
pub(crate) fn on_reuse(rotated_at: u64, now: u64, grace_secs: u64) -> Reuse {
    if now <= rotated_at.saturating_add(grace_secs) {
        Reuse::ReturnSuccessor
    } else {
        Reuse::RevokeFamily
    }
}

/// A successful token response (RFC 6749 §5.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TokenResponse {
    pub access_token: Secret,
    pub refresh_token: Secret,
    pub expires_in: u64,
    pub scope: String,
}

impl TokenResponse {
    /// The JSON body (`token_type` Bearer, `expires_in` always present).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "access_token": self.access_token.expose(),
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "refresh_token": self.refresh_token.expose(),
            "scope": self.scope,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::protocol::ClientKind;

    const V: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    const C: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    fn confidential(method: AuthMethod) -> Client {
        Client {
            client_id: "c1".into(),
            name: None,
            redirect_uris: vec![],
            auth_method: method,
            secret_hash: Some(hash_secret("s3cret")),
            kind: ClientKind::Registered,
        }
    }

    fn p(pairs: &[(&str, &str)]) -> Params {
        Params(
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        )
    }

    fn code() -> CodeRecord {
        CodeRecord {
            code_hash: "h".into(),
            client_id: "c1".into(),
            username: "u".into(),
            redirect_uri: "http://localhost:5000/cb".into(),
            redirect_uri_explicit: true,
            code_challenge: C.into(),
            scopes: vec!["mcp:read".into()],
            resource: "https://gw.example/mcp".into(),
            family_id: "f".into(),
            issued_at: 100,
            expires_at: 160,
            used: false,
        }
    }

    #[test]
    fn grant_types() {
        assert_eq!(
            grant_type(&p(&[("grant_type", "refresh_token")])).unwrap(),
            GrantType::RefreshToken
        );
        assert_eq!(
            grant_type(&p(&[("grant_type", "password")]))
                .unwrap_err()
                .code(),
            "unsupported_grant_type"
        );
        assert_eq!(grant_type(&p(&[])).unwrap_err().code(), "invalid_request");
    }

    #[test]
    fn client_secret_post_and_basic() {
        let post = presented_credentials(
            &p(&[("client_id", "c1"), ("client_secret", "s3cret")]),
            None,
        )
        .unwrap();
        assert!(authenticate(&post, &confidential(AuthMethod::ClientSecretPost)).is_ok());
        let basic_hdr = format!("Basic {}", STANDARD.encode("c1:s3cret"));
        let basic = presented_credentials(&p(&[]), Some(&basic_hdr)).unwrap();
        assert_eq!(basic.client_id, "c1");
        assert!(authenticate(&basic, &confidential(AuthMethod::ClientSecretBasic)).is_ok());
        // the registered method is enforced
        assert_eq!(
            authenticate(&basic, &confidential(AuthMethod::ClientSecretPost))
                .unwrap_err()
                .code(),
            "invalid_client"
        );
    }

    #[test]
    fn wrong_client_secret_is_invalid_client() {
        let post =
            presented_credentials(&p(&[("client_id", "c1"), ("client_secret", "nope")]), None)
                .unwrap();
        assert_eq!(
            authenticate(&post, &confidential(AuthMethod::ClientSecretPost))
                .unwrap_err()
                .code(),
            "invalid_client"
        );
        let none = presented_credentials(&p(&[("client_id", "c1")]), None).unwrap();
        assert_eq!(
            authenticate(&none, &confidential(AuthMethod::ClientSecretPost))
                .unwrap_err()
                .code(),
            "invalid_client"
        );
        assert_eq!(
            presented_credentials(&p(&[]), None).unwrap_err().code(),
            "invalid_client"
        );
    }

    #[test]
    fn code_bindings() {
        let ok = p(&[
            ("redirect_uri", "http://localhost:5000/cb"),
            ("code_verifier", V),
        ]);
        assert!(check_code(&code(), "c1", &ok, 150).is_ok());
        assert_eq!(
            check_code(&code(), "c1", &ok, 160).unwrap_err().code(),
            "invalid_grant",
            "expired"
        );
        assert_eq!(
            check_code(&code(), "c2", &ok, 150).unwrap_err().code(),
            "invalid_grant",
            "other client"
        );
        let wrong_uri = p(&[
            ("redirect_uri", "http://localhost:5001/cb"),
            ("code_verifier", V),
        ]);
        assert_eq!(
            check_code(&code(), "c1", &wrong_uri, 150)
                .unwrap_err()
                .code(),
            "invalid_grant"
        );
        let no_verifier = p(&[("redirect_uri", "http://localhost:5000/cb")]);
        assert_eq!(
            check_code(&code(), "c1", &no_verifier, 150)
                .unwrap_err()
                .code(),
            "invalid_request"
        );
        let wrong_verifier = p(&[
            ("redirect_uri", "http://localhost:5000/cb"),
            ("code_verifier", &"a".repeat(43)),
        ]);
        assert_eq!(
            check_code(&code(), "c1", &wrong_verifier, 150)
                .unwrap_err()
                .code(),
            "invalid_grant"
        );
        let wrong_resource = p(&[
            ("redirect_uri", "http://localhost:5000/cb"),
            ("code_verifier", V),
            ("resource", "https://x.example/mcp"),
        ]);
        assert_eq!(
            check_code(&code(), "c1", &wrong_resource, 150)
                .unwrap_err()
                .code(),
            "invalid_target"
        );
    }

    #[test]
    fn grace_window() {
        assert_eq!(on_reuse(100, 130, 30), Reuse::ReturnSuccessor);
        assert_eq!(on_reuse(100, 131, 30), Reuse::RevokeFamily);
    }
}
