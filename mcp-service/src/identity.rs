//! The caller identity the gateway forwards: read from its trusted headers in exactly one place,
//! used only for attribution (who wrote what), never for access decisions.

use http::HeaderMap;
use rmcp::{RoleServer, service::RequestContext};
use schemars::JsonSchema;
use serde::Serialize;

/// Header names of the gateway → service contract. The gateway strips any client-sent copies
/// before it sets them, so their presence here means the gateway vouches for them.
pub(crate) mod header {
    pub(crate) const SUBJECT: &str = "x-pforte-subject";
    pub(crate) const CLIENT: &str = "x-pforte-client";
    /// The OAuth client's registered name, percent-encoded UTF-8 (absent without a name).
    pub(crate) const CLIENT_NAME: &str = "x-pforte-client-name";
    pub(crate) const AUTH_KIND: &str = "x-pforte-auth-kind";
    pub(crate) const SCOPES: &str = "x-pforte-scopes";
    pub(crate) const REQUEST_ID: &str = "x-request-id";
}

/// Who is calling, as far as this service knows. `whoami` answers with it, so the field docs
/// are also that tool's outputSchema descriptions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    // The principal.
    /// A user name, or `operator` for a static token.
    pub subject: Option<String>,
    /// The OAuth client id or the static token's name.
    pub client: Option<String>,
    // `client_name` at registration.
    /// The OAuth client's registered name.
    pub client_name: Option<String>,
    // `local` is stdio: no gateway in front.
    /// `static`, `oauth` or `local`.
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
            client_name: None,
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
            client_name: None,
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
            client_name: get(header::CLIENT_NAME)
                .and_then(|v| percent_decode(&v))
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty()),
            auth_kind: get(header::AUTH_KIND),
            scopes: get(header::SCOPES)
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            request_id: get(header::REQUEST_ID),
        }
    }

    /// The identity of the request behind an MCP call: from the HTTP request's headers when the
    /// call came over HTTP; over stdio behind Pforte's bridge, from the request's
    /// `_meta["dev.pforte/identity"]` (every child) or the `PFORTE_*` environment (a session's
    /// own child); else the local identity.
    pub fn of_request(ctx: &RequestContext<RoleServer>) -> Self {
        if let Some(parts) = ctx.extensions.get::<http::request::Parts>() {
            return Self::from_headers(&parts.headers);
        }
        ctx.meta
            .0
            .0
            .get(META_KEY)
            .and_then(Self::from_meta)
            .or_else(|| Self::from_env(|name| std::env::var(name).ok()))
            .unwrap_or_else(Self::local)
    }

    /// The identity Pforte's stdio bridge put in a request's `_meta` (`None` without a subject
    /// or kind).
    pub fn from_meta(value: &serde_json::Value) -> Option<Self> {
        let get = |k: &str| {
            value
                .get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let id = Self {
            subject: get("subject"),
            client: get("client"),
            client_name: get("clientName"),
            auth_kind: get("authKind"),
            scopes: value
                .get("scopes")
                .and_then(serde_json::Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(serde_json::Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            request_id: None,
        };
        (id.subject.is_some() || id.auth_kind.is_some()).then_some(id)
    }

    /// The identity Pforte's stdio bridge gave a session's child in its environment (`None`
    /// without `PFORTE_SUBJECT` or `PFORTE_AUTH_KIND`).
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let get = |k: &str| {
            env(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let id = Self {
            subject: get(env::SUBJECT),
            client: get(env::CLIENT),
            client_name: get(env::CLIENT_NAME),
            auth_kind: get(env::AUTH_KIND),
            scopes: get(env::SCOPES)
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            request_id: None,
        };
        (id.subject.is_some() || id.auth_kind.is_some()).then_some(id)
    }
}

/// The `_meta` key under which Pforte's stdio bridge names the caller.
pub(crate) const META_KEY: &str = "dev.pforte/identity";

/// The environment a session's child gets from Pforte's stdio bridge.
pub(crate) mod env {
    pub(crate) const SUBJECT: &str = "PFORTE_SUBJECT";
    pub(crate) const CLIENT: &str = "PFORTE_CLIENT";
    pub(crate) const CLIENT_NAME: &str = "PFORTE_CLIENT_NAME";
    pub(crate) const AUTH_KIND: &str = "PFORTE_AUTH_KIND";
    pub(crate) const SCOPES: &str = "PFORTE_SCOPES";
}

/// Decodes `%XX` escapes into UTF-8; `None` for a malformed escape or invalid UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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
        assert_eq!(id.client_name, None);
    }

    #[test]
    fn client_name_is_percent_decoded() {
        let mut h = HeaderMap::new();
        h.insert(header::CLIENT, "c-1".parse().unwrap());
        h.insert(
            header::CLIENT_NAME,
            "Claude%20Desktop%20%E2%80%94%20M%C3%BCller%25"
                .parse()
                .unwrap(),
        );
        let id = Identity::from_headers(&h);
        assert_eq!(id.client_name.as_deref(), Some("Claude Desktop — Müller%"));
        assert_eq!(percent_decode("a%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%FF"), None); // not UTF-8
        assert_eq!(
            percent_decode("plain-name_1.0~"),
            Some("plain-name_1.0~".into())
        );
        h.insert(header::CLIENT_NAME, "%ZZ".parse().unwrap());
        assert_eq!(Identity::from_headers(&h).client_name, None);
    }

    #[test]
    fn the_stdio_bridge_identity_reads_from_meta_or_env() {
        let meta = serde_json::json!({"subject": "alice", "client": "c-1", "clientName": "Claude",
            "authKind": "oauth", "scopes": ["mcp:read", "mcp:write"]});
        let id = Identity::from_meta(&meta).unwrap();
        assert_eq!(id.subject.as_deref(), Some("alice"));
        assert_eq!(id.client_name.as_deref(), Some("Claude"));
        assert_eq!(id.scopes, ["mcp:read", "mcp:write"]);
        assert_eq!(
            Identity::from_meta(&serde_json::json!({"scopes": []})),
            None
        );
        let vars = [
            ("PFORTE_SUBJECT", "bob"),
            ("PFORTE_AUTH_KIND", "static"),
            ("PFORTE_SCOPES", "a b"),
        ];
        let id = Identity::from_env(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .unwrap();
        assert_eq!(id.subject.as_deref(), Some("bob"));
        assert_eq!(id.scopes, ["a", "b"]);
        assert_eq!(Identity::from_env(|_| None), None);
    }

    #[test]
    fn absent_and_blank_headers_read_as_none() {
        let mut h = HeaderMap::new();
        h.insert(header::SUBJECT, "  ".parse().unwrap());
        let id = Identity::from_headers(&h);
        assert_eq!(id, Identity::default());
    }
}
