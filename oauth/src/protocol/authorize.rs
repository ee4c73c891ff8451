//! The authorization request (RFC 6749 §4.1.1 + PKCE + RFC 8707 + RFC 9207): validation and
//! the redirect URLs it ends in.

use url::Url;

use super::{Client, Params, pkce, redirect, resource, scope};
use crate::config::OAuthConfig;
use crate::error::OAuthError;

/// A validated authorization request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizeRequest {
    pub client_id: String,
    /// The redirect URI to use (as presented, e.g. with the loopback port).
    pub redirect_uri: String,
    /// Whether the request named it (then /token must repeat it).
    pub redirect_uri_explicit: bool,
    pub state: Option<String>,
    pub scopes: Vec<String>,
    /// The configured resource the grant is for (its URL as configured).
    pub resource: String,
    /// That resource's name, for the consent page.
    pub resource_name: String,
    pub code_challenge: String,
}

/// How an authorization request fails.
#[derive(Debug)]
pub enum AuthorizeFailure {
    /// The client or redirect URI cannot be trusted: show an error page, never redirect.
    ErrorPage(String),
    /// Send the user agent back to the client with `error`, `state` and `iss`.
    Redirect { location: String, error: OAuthError },
}

/// The `client_id` of a request, if present exactly once.
pub fn client_id(params: &Params) -> Result<&str, AuthorizeFailure> {
    params
        .single("client_id")
        .map_err(AuthorizeFailure::ErrorPage)?
        .ok_or_else(|| {
            AuthorizeFailure::ErrorPage(
                "The request names no client (client_id is missing).".into(),
            )
        })
}

/// The sign-in form's username (trimmed) and password; empty when absent or repeated.
pub fn login_fields(form: &Params) -> (&str, &str) {
    let field = |n: &str| form.single(n).ok().flatten().unwrap_or_default();
    (field("username").trim(), field("password"))
}

/// Validates a request for a known `client`.
pub fn validate(
    params: &Params,
    client: &Client,
    cfg: &OAuthConfig,
) -> Result<AuthorizeRequest, AuthorizeFailure> {
    let presented = params
        .single("redirect_uri")
        .map_err(AuthorizeFailure::ErrorPage)?;
    let (redirect_uri, explicit) = match presented {
        Some(p) => {
            if redirect::find_match(&client.redirect_uris, p).is_none() {
                return Err(AuthorizeFailure::ErrorPage(
                    "The redirect URI in this request is not registered for this application."
                        .into(),
                ));
            }
            (p.to_owned(), true)
        }
        None => match client.redirect_uris.as_slice() {
            [only] => (only.clone(), false),
            _ => {
                return Err(AuthorizeFailure::ErrorPage(
                    "The request names no redirect URI and the application has several.".into(),
                ));
            }
        },
    };
    let state = params
        .all("state")
        .first()
        .map(|s| (*s).to_owned())
        .filter(|s| !s.is_empty());
    let fail = |error: OAuthError| AuthorizeFailure::Redirect {
        location: error_location(&redirect_uri, &error, state.as_deref(), &cfg.issuer),
        error,
    };
    let single = |name: &str| {
        params
            .single(name)
            .map_err(|e| fail(OAuthError::InvalidRequest(e)))
    };

    if params.all("state").len() > 1 {
        return Err(fail(OAuthError::InvalidRequest(
            "parameter state is repeated".into(),
        )));
    }
    match single("response_type")? {
        Some("code") => {}
        None => {
            return Err(fail(OAuthError::InvalidRequest(
                "response_type is required".into(),
            )));
        }
        Some(other) => {
            return Err(fail(OAuthError::UnsupportedResponseType(format!(
                "response_type {other} is not supported; use code"
            ))));
        }
    }
    let code_challenge =
        pkce::check_challenge(single("code_challenge")?, single("code_challenge_method")?)
            .map_err(|e| fail(OAuthError::InvalidRequest(e)))?;
    let entries = cfg.resource_entries();
    let target =
        resource::select(&params.all("resource"), &entries, &cfg.resource).map_err(fail)?;
    let scopes = scope::negotiate(single("scope")?, &cfg.scopes_supported).map_err(fail)?;
    Ok(AuthorizeRequest {
        client_id: client.client_id.clone(),
        redirect_uri,
        redirect_uri_explicit: explicit,
        state,
        scopes,
        resource: target.url.clone(),
        resource_name: target.name.clone(),
        code_challenge,
    })
}

fn with_params(redirect_uri: &str, pairs: &[(&str, Option<&str>)]) -> String {
    match Url::parse(redirect_uri) {
        Ok(mut url) => {
            {
                let mut q = url.query_pairs_mut();
                for (k, v) in pairs {
                    if let Some(v) = v {
                        q.append_pair(k, v);
                    }
                }
            }
            url.to_string()
        }
        // Registered URIs are validated absolute URLs; this branch is unreachable in practice.
        Err(_) => redirect_uri.to_owned(),
    }
}

/// The error redirect: `error`, `error_description`, `state`, `iss`.
pub(crate) fn error_location(
    redirect_uri: &str,
    error: &OAuthError,
    state: Option<&str>,
    issuer: &str,
) -> String {
    let desc = error.description();
    with_params(
        redirect_uri,
        &[
            ("error", Some(error.code())),
            ("error_description", Some(&desc)),
            ("state", state),
            ("iss", Some(issuer)),
        ],
    )
}

/// The success redirect: `code`, `state`, `iss`.
pub fn code_location(redirect_uri: &str, code: &str, state: Option<&str>, issuer: &str) -> String {
    with_params(
        redirect_uri,
        &[
            ("code", Some(code)),
            ("state", state),
            ("iss", Some(issuer)),
        ],
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::AuthMethod;
    use crate::protocol::ClientKind;

    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    fn cfg() -> OAuthConfig {
        OAuthConfig::new("https://gw.example").unwrap()
    }

    fn client() -> Client {
        Client {
            client_id: "c1".into(),
            name: Some("Claude".into()),
            redirect_uris: vec![
                "https://claude.ai/api/mcp/auth_callback".into(),
                "http://localhost/callback".into(),
            ],
            auth_method: AuthMethod::None,
            secret_hash: None,
            kind: ClientKind::Registered,
        }
    }

    fn params(extra: &[(&str, &str)], without: &[&str]) -> Params {
        let mut p: Vec<(String, String)> = [
            ("response_type", "code"),
            ("client_id", "c1"),
            ("redirect_uri", "https://claude.ai/api/mcp/auth_callback"),
            ("state", "st8"),
            ("code_challenge", CHALLENGE),
            ("code_challenge_method", "S256"),
        ]
        .iter()
        .filter(|(k, _)| !without.contains(k))
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        p.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        Params(p)
    }

    fn redirect_error(r: Result<AuthorizeRequest, AuthorizeFailure>) -> (String, Url) {
        match r {
            Err(AuthorizeFailure::Redirect { location, error }) => {
                (error.code().to_owned(), Url::parse(&location).unwrap())
            }
            other => panic!("expected redirect, got {other:?}"),
        }
    }

    #[test]
    fn valid_request_defaults_resource_and_scopes() {
        let r = validate(&params(&[], &[]), &client(), &cfg()).unwrap();
        assert_eq!(r.resource, "https://gw.example/mcp");
        assert_eq!(r.resource_name, "mcp");
        assert_eq!(r.scopes, ["mcp:read", "mcp:write"]);
        assert_eq!(r.state.as_deref(), Some("st8"));
        assert!(r.redirect_uri_explicit);
    }

    #[test]
    fn loopback_redirect_any_port() {
        let p = params(
            &[("redirect_uri", "http://localhost:4711/callback")],
            &["redirect_uri"],
        );
        assert_eq!(
            validate(&p, &client(), &cfg()).unwrap().redirect_uri,
            "http://localhost:4711/callback"
        );
    }

    #[test]
    fn unregistered_redirect_shows_error_page() {
        let p = params(
            &[("redirect_uri", "https://evil.example/cb")],
            &["redirect_uri"],
        );
        assert!(matches!(
            validate(&p, &client(), &cfg()),
            Err(AuthorizeFailure::ErrorPage(_))
        ));
        assert!(matches!(
            client_id(&params(&[], &["client_id"])),
            Err(AuthorizeFailure::ErrorPage(_))
        ));
        let several = params(&[], &["redirect_uri"]);
        assert!(matches!(
            validate(&several, &client(), &cfg()),
            Err(AuthorizeFailure::ErrorPage(_))
        ));
    }

    #[test]
    fn pkce_missing_or_plain_is_invalid_request_with_state_and_iss() {
        for p in [
            params(&[], &["code_challenge", "code_challenge_method"]),
            params(&[], &["code_challenge"]),
            params(
                &[("code_challenge_method", "plain")],
                &["code_challenge_method"],
            ),
            params(&[], &["code_challenge_method"]),
        ] {
            let (code, url) = redirect_error(validate(&p, &client(), &cfg()));
            assert_eq!(code, "invalid_request");
            let q: Vec<(String, String)> = url.query_pairs().into_owned().collect();
            assert!(q.contains(&("error".into(), "invalid_request".into())));
            assert!(q.contains(&("state".into(), "st8".into())));
            assert!(q.contains(&("iss".into(), "https://gw.example".into())));
        }
    }

    #[test]
    fn wrong_resource_is_invalid_target() {
        let p = params(&[("resource", "https://other.example/mcp")], &[]);
        assert_eq!(
            redirect_error(validate(&p, &client(), &cfg())).0,
            "invalid_target"
        );
        let ok = params(&[("resource", "https://gw.example/mcp/")], &[]);
        assert!(
            validate(&ok, &client(), &cfg()).is_ok(),
            "trailing slash tolerated"
        );
    }

    fn two_resources() -> OAuthConfig {
        let mut c = cfg();
        c.resources = ["notes", "plans"]
            .iter()
            .map(|n| crate::config::ResourceEntry {
                url: format!("https://gw.example/{n}/mcp"),
                name: (*n).into(),
                roles: Vec::new(),
                users: Vec::new(),
                title: None,
            })
            .collect();
        c.validate().unwrap();
        c
    }

    #[test]
    fn several_resources_bind_the_requested_one() {
        let c = two_resources();
        let p = params(&[("resource", "https://gw.example/plans/mcp")], &[]);
        let r = validate(&p, &client(), &c).unwrap();
        assert_eq!(r.resource, "https://gw.example/plans/mcp");
        assert_eq!(r.resource_name, "plans");
        for bad in [
            "https://gw.example/mcp",
            "https://gw.example/other/mcp",
            "https://other.example/plans/mcp",
        ] {
            let p = params(&[("resource", bad)], &[]);
            let (code, url) = redirect_error(validate(&p, &client(), &c));
            assert_eq!(code, "invalid_target", "{bad}");
            let q: Vec<(String, String)> = url.query_pairs().into_owned().collect();
            assert!(q.contains(&("state".into(), "st8".into())));
        }
        // omitted, the default resource not configured, two entries: required
        let (code, url) = redirect_error(validate(&params(&[], &[]), &client(), &c));
        assert_eq!(code, "invalid_target");
        assert!(url.query().unwrap().contains("resource+is+required"));
    }

    #[test]
    fn invalid_target_with_an_untrusted_redirect_is_an_error_page() {
        let p = params(
            &[
                ("resource", "https://gw.example/other/mcp"),
                ("redirect_uri", "https://evil.example/cb"),
            ],
            &["redirect_uri"],
        );
        assert!(matches!(
            validate(&p, &client(), &two_resources()),
            Err(AuthorizeFailure::ErrorPage(_))
        ));
    }

    #[test]
    fn unknown_scope_is_invalid_scope() {
        let p = params(&[("scope", "mcp:read admin")], &[]);
        assert_eq!(
            redirect_error(validate(&p, &client(), &cfg())).0,
            "invalid_scope"
        );
    }

    #[test]
    fn response_type_other_than_code() {
        let p = params(&[("response_type", "token")], &["response_type"]);
        assert_eq!(
            redirect_error(validate(&p, &client(), &cfg())).0,
            "unsupported_response_type"
        );
    }

    #[test]
    fn login_fields_trim_the_username_and_refuse_repeats() {
        let form = Params::parse("username=+alice%20&password=+pw+&step=login");
        assert_eq!(login_fields(&form), ("alice", " pw "));
        let form = Params::parse("username=a&username=b&password=x&password=y");
        assert_eq!(login_fields(&form), ("", ""));
        assert_eq!(login_fields(&Params::parse("")), ("", ""));
    }

    #[test]
    fn code_location_carries_code_state_iss() {
        let l = code_location(
            "https://claude.ai/cb?x=1",
            "pfac_abc",
            Some("s"),
            "https://gw.example",
        );
        assert_eq!(
            l,
            "https://claude.ai/cb?x=1&code=pfac_abc&state=s&iss=https%3A%2F%2Fgw.example"
        );
    }
}
