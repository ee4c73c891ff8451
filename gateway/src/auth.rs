//! Who is calling: parse the `Authorization` header and decide, from the credential stores and
//! `now`, on a principal or a specific failure. No I/O here.

use crate::tokens::{TOKEN_PREFIX, TokenSet};

/// How the caller authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AuthKind {
    /// An operator-issued static bearer token.
    Static,
    /// An OAuth access token issued by Pforte's authorization server.
    OAuth,
}

impl AuthKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Static => "static",
            Self::OAuth => "oauth",
        }
    }
}

/// The authenticated caller, as forwarded to the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    /// The user (OAuth) or `operator` (static tokens act for the operator).
    pub(crate) subject: String,
    /// The OAuth client id, or the static token's name.
    pub(crate) client: String,
    /// The OAuth client's registered name (`client_name`), when it has one.
    pub(crate) client_name: Option<String>,
    pub(crate) kind: AuthKind,
    pub(crate) scopes: Vec<String>,
    /// Which routes the credential is good for.
    pub(crate) binding: Binding,
}

impl Principal {
    /// Whom this caller's sessions, streams, rates and tool budgets count against: see
    /// [`person_key`].
    pub(crate) fn person_key(&self) -> String {
        person_key(self.kind, &self.subject, &self.client)
    }
}

/// The person behind a credential, as one key: an OAuth user whatever the client
/// (`oauth:SUBJECT`; registering more clients buys nothing), a static token by its name
/// (`static:NAME`; only the operator mints them, and each is handed to someone).
pub(crate) fn person_key(kind: AuthKind, subject: &str, client: &str) -> String {
    match kind {
        AuthKind::OAuth => format!("oauth:{subject}"),
        AuthKind::Static => format!("static:{client}"),
    }
}

/// Which routes a credential is good for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Binding {
    /// Every route (a static token without `--route`).
    #[default]
    Any,
    /// A static token limited to these route names (`token create --route`).
    Routes(Vec<String>),
    /// An OAuth access token issued for this resource URL (canonical).
    Resource(String),
}

/// Why a valid credential does not open a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RouteRefusal {
    /// A static token limited to other routes.
    NotListed,
    /// An OAuth token for another resource.
    OtherResource,
}

/// Whether `principal` may use the route `name` whose resource URL is `resource`.
pub(crate) fn check_route(
    principal: &Principal,
    name: &str,
    resource: &str,
) -> Result<(), RouteRefusal> {
    match &principal.binding {
        Binding::Any => Ok(()),
        Binding::Routes(names) if names.iter().any(|n| n == name) => Ok(()),
        Binding::Routes(_) => Err(RouteRefusal::NotListed),
        Binding::Resource(r) if r == resource => Ok(()),
        Binding::Resource(_) => Err(RouteRefusal::OtherResource),
    }
}

/// The subject of every static token: static tokens are the operator's own credential.
pub(crate) const OPERATOR: &str = "operator";

/// Why a request was not authenticated; each maps to one precise 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    #[error("no bearer token")]
    Missing,
    #[error("malformed Authorization header: {0}")]
    Malformed(&'static str),
    #[error("unknown or revoked token")]
    Invalid,
    #[error("token expired")]
    Expired,
    #[error("the token lacks scope {0}")]
    InsufficientScope(String),
    #[error("the credential store is unavailable")]
    Unavailable,
    #[error("the token is for another resource")]
    OtherResource,
}

/// Checks that `principal` holds every scope in `required`.
pub(crate) fn require_scopes(
    principal: &Principal,
    required: &[String],
) -> Result<(), AuthFailure> {
    let missing: Vec<&str> = required
        .iter()
        .filter(|r| !principal.scopes.contains(r))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(AuthFailure::InsufficientScope(missing.join(" ")))
    }
}

/// Extracts the bearer token from the `Authorization` header values (all of them: more than one
/// is malformed). `Ok(None)` when there is no header.
pub fn bearer_token<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Option<&'a str>, AuthFailure> {
    let mut values = values.into_iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AuthFailure::Malformed("more than one Authorization header"));
    }
    let value = std::str::from_utf8(value)
        .map_err(|_| AuthFailure::Malformed("header is not ASCII"))?
        .trim();
    let (scheme, token) = value.split_once(' ').ok_or(AuthFailure::Malformed(
        "expected the Bearer scheme, one space and a token",
    ))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthFailure::Malformed("only the Bearer scheme is accepted"));
    }
    let token = token.trim_start();
    if !is_token68(token) {
        return Err(AuthFailure::Malformed(
            "the token has characters outside token68",
        ));
    }
    Ok(Some(token))
}

/// RFC 7235 token68: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn is_token68(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    !body.is_empty()
        && body.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        })
}

/// Whether a bearer token has the static-token shape (the OAuth path handles every other).
pub(crate) fn looks_static(token: &str) -> bool {
    token.starts_with(TOKEN_PREFIX)
}

/// Decides on a static token.
pub(crate) fn authenticate_static(
    token: &str,
    tokens: &TokenSet,
    now: u64,
) -> Result<Principal, AuthFailure> {
    let found = tokens.find(token).ok_or(AuthFailure::Invalid)?;
    if found.expires_at.is_some_and(|at| at <= now) {
        return Err(AuthFailure::Expired);
    }
    Ok(Principal {
        subject: OPERATOR.to_owned(),
        client: found.name.clone(),
        client_name: None,
        kind: AuthKind::Static,
        scopes: found.scopes.clone(),
        binding: if found.routes.is_empty() {
            Binding::Any
        } else {
            Binding::Routes(found.routes.clone())
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(v: &[&str]) -> Result<Option<&'static str>, AuthFailure> {
        let owned: Vec<&'static [u8]> = v
            .iter()
            .map(|s| &*Box::leak(s.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        bearer_token(owned)
    }

    #[test]
    fn bindings_open_their_routes_only() {
        let mut p = Principal {
            subject: "operator".into(),
            client: "ci".into(),
            client_name: None,
            kind: AuthKind::Static,
            scopes: vec![],
            binding: Binding::Any,
        };
        assert_eq!(check_route(&p, "a", "https://gw/a/mcp"), Ok(()));
        p.binding = Binding::Routes(vec!["a".into()]);
        assert_eq!(check_route(&p, "a", "https://gw/a/mcp"), Ok(()));
        assert_eq!(
            check_route(&p, "b", "https://gw/b/mcp"),
            Err(RouteRefusal::NotListed)
        );
        p.binding = Binding::Resource("https://gw/a/mcp".into());
        assert_eq!(check_route(&p, "a", "https://gw/a/mcp"), Ok(()));
        assert_eq!(
            check_route(&p, "b", "https://gw/b/mcp"),
            Err(RouteRefusal::OtherResource)
        );
    }

    #[test]
    fn parses_bearer() {
        assert_eq!(parse(&[]), Ok(None));
        assert_eq!(parse(&["Bearer abc"]), Ok(Some("abc")));
        assert_eq!(
            parse(&["bearer  a.b-c_d~e+f/g=="]),
            Ok(Some("a.b-c_d~e+f/g=="))
        );
    }

    #[test]
    fn rejects_malformed() {
        for v in [
            "Basic dXNlcjpwYXNz",
            "Bearer",
            "Bearer ",
            "Bearer a b",
            "Bearer ===",
            "Token abc",
            "Bearer ab\"c",
        ] {
            assert!(
                matches!(parse(&[v]), Err(AuthFailure::Malformed(_))),
                "{v:?}"
            );
        }
        assert!(matches!(
            parse(&["Bearer a", "Bearer b"]),
            Err(AuthFailure::Malformed(_))
        ));
    }
}
