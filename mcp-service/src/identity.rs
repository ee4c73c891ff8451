//! The caller identity the gateway forwards: read from its trusted headers in exactly one place,
//! used only for attribution (who wrote what), never for access decisions.

use http::HeaderMap;
use rmcp::{RoleServer, service::RequestContext};
use serde::Serialize;

/// Header names of the gateway → service contract. The gateway strips any client-sent copies
/// before it sets them, so their presence here means the gateway vouches for them.
pub mod header {
    pub const SUBJECT: &str = "x-pforte-subject";
    pub const CLIENT: &str = "x-pforte-client";
    pub const AUTH_KIND: &str = "x-pforte-auth-kind";
    pub const SCOPES: &str = "x-pforte-scopes";
    pub const REQUEST_ID: &str = "x-request-id";
}

/// Who is calling, as far as this service knows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The principal: a user name, or `operator` for a static token.
    pub subject: Option<String>,
    /// The OAuth client id or the static token's name.
    pub client: Option<String>,
    /// `static`, `oauth`, or `local` (stdio: no gateway in front).
    pub auth_kind: Option<String>,
    pub scopes: Vec<String>,
    pub request_id: Option<String>,
}

impl Identity {
    /// The identity of a stdio session: the local user who started the process.
    pub fn local() -> Self {
        Self {
            subject: None,
            client: None,
            auth_kind: Some("local".to_owned()),
            scopes: Vec::new(),
            request_id: None,
        }
    }

    /// The identity of an operator command run from a shell (`mcp-service doc import`):
    /// the login name from `$USER`, when set.
    pub fn operator_shell(env: impl Fn(&str) -> Option<String>) -> Self {
        Self {
            subject: env("USER").filter(|u| !u.trim().is_empty()),
            client: None,
            auth_kind: Some("local".to_owned()),
            scopes: Vec::new(),
            request_id: None,
        }
    }

    /// Reads the gateway's headers. Missing or non-UTF-8 values read as absent.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let get = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        Self {
            subject: get(header::SUBJECT),
            client: get(header::CLIENT),
            auth_kind: get(header::AUTH_KIND),
            scopes: get(header::SCOPES)
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            request_id: get(header::REQUEST_ID),
        }
    }

    /// The identity of the request behind an MCP call: from the HTTP request's headers when the
    /// call came over HTTP, else the local identity (stdio).
    pub fn of_request(ctx: &RequestContext<RoleServer>) -> Self {
        ctx.extensions
            .get::<http::request::Parts>()
            .map(|parts| Self::from_headers(&parts.headers))
            .unwrap_or_else(Self::local)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_every_header() {
        let mut h = HeaderMap::new();
        h.insert(header::SUBJECT, "alice".parse().unwrap());
        h.insert(header::CLIENT, "claude".parse().unwrap());
        h.insert(header::AUTH_KIND, "oauth".parse().unwrap());
        h.insert(header::SCOPES, "mcp:read  mcp:write".parse().unwrap());
        h.insert(header::REQUEST_ID, "r-1".parse().unwrap());
        let id = Identity::from_headers(&h);
        assert_eq!(id.subject.as_deref(), Some("alice"));
        assert_eq!(id.client.as_deref(), Some("claude"));
        assert_eq!(id.auth_kind.as_deref(), Some("oauth"));
        assert_eq!(id.scopes, ["mcp:read", "mcp:write"]);
        assert_eq!(id.request_id.as_deref(), Some("r-1"));
    }

    #[test]
    fn absent_and_blank_headers_read_as_none() {
        let mut h = HeaderMap::new();
        h.insert(header::SUBJECT, "  ".parse().unwrap());
        let id = Identity::from_headers(&h);
        assert_eq!(id, Identity::default());
    }
}
