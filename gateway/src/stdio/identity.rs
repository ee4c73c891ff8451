//! Who calls a stdio server, as the bridge tells it: read from the gateway's trusted identity
//! headers, handed to a session's child as `PFORTE_*` environment variables at its start and to
//! every child as `params._meta["dev.pforte/identity"]` on each request (the only way a pool
//! child, shared by everyone, learns the caller). Pure.
//!
//! The headers are trusted because only the gateway reaches the bridge's socket (0600 in a 0700
//! directory, see [`super::StdioBridge::bind`]), and the gateway strips every client-sent
//! `x-pforte-*` header before it sets its own. A client-sent `_meta` entry of the same key is
//! overwritten (requests) or removed (notifications), never passed on.

use std::ffi::OsString;

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use crate::forward::header;

/// The `_meta` key of the caller's identity (MCP `_meta` naming: a prefix of dot-separated
/// labels and a slash; `modelcontextprotocol`/`mcp` as second label are MCP's own).
pub(crate) const META_KEY: &str = "dev.pforte/identity";

/// The environment variables of the caller's identity. Reserved: a route's `env` must not name
/// any `PFORTE_*` variable (they are set last and would override it), nor may a per-user
/// environment source ([`super::SessionEnv`]).
pub(crate) mod env {
    pub(crate) const SUBJECT: &str = "PFORTE_SUBJECT";
    pub(crate) const CLIENT: &str = "PFORTE_CLIENT";
    /// Only when the OAuth client has a registered name.
    pub(crate) const CLIENT_NAME: &str = "PFORTE_CLIENT_NAME";
    pub(crate) const AUTH_KIND: &str = "PFORTE_AUTH_KIND";
    /// Space-separated.
    pub(crate) const SCOPES: &str = "PFORTE_SCOPES";
    /// The prefix every name the bridge sets starts with.
    pub(crate) const RESERVED_PREFIX: &str = "PFORTE_";
}

/// Whether `name` is one the bridge sets itself (`PFORTE_*`).
pub(crate) fn is_reserved(name: &str) -> bool {
    name.starts_with(env::RESERVED_PREFIX)
}

/// The caller as the gateway's headers name it; a field is `None` when its header is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) subject: Option<String>,
    pub(crate) client: Option<String>,
    /// The OAuth client's registered name, decoded (the header is percent-encoded UTF-8),
    /// control characters dropped.
    pub(crate) client_name: Option<String>,
    pub(crate) auth_kind: Option<String>,
    pub(crate) scopes: Vec<String>,
}

impl Caller {
    /// Reads the gateway's identity headers (non-UTF-8 values read as absent).
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        let get = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Self {
            subject: get(header::SUBJECT),
            client: get(header::CLIENT),
            client_name: get(header::CLIENT_NAME)
                .and_then(|v| percent_decode(&v))
                .map(|v| v.chars().filter(|c| !c.is_control()).collect::<String>())
                .filter(|v| !v.is_empty()),
            auth_kind: get(header::AUTH_KIND),
            scopes: get(header::SCOPES)
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
        }
    }

    /// The `PFORTE_*` variables of a session's child: each one whose header was there
    /// (`PFORTE_SCOPES` with the auth kind, even when empty).
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut put = |name: &str, value: &Option<String>| {
            if let Some(v) = value {
                out.push((name.to_owned(), v.clone()));
            }
        };
        put(env::SUBJECT, &self.subject);
        put(env::CLIENT, &self.client);
        put(env::CLIENT_NAME, &self.client_name);
        put(env::AUTH_KIND, &self.auth_kind);
        if self.auth_kind.is_some() || !self.scopes.is_empty() {
            out.push((env::SCOPES.to_owned(), self.scopes.join(" ")));
        }
        out
    }

    /// The `_meta` value: `{subject, client, clientName, authKind, scopes}` (absent fields left
    /// out, `scopes` always a list).
    pub(crate) fn meta(&self) -> Value {
        let mut m = Map::new();
        let mut put = |name: &str, value: &Option<String>| {
            if let Some(v) = value {
                m.insert(name.to_owned(), Value::from(v.as_str()));
            }
        };
        put("subject", &self.subject);
        put("client", &self.client);
        put("clientName", &self.client_name);
        put("authKind", &self.auth_kind);
        m.insert("scopes".to_owned(), Value::from(self.scopes.clone()));
        Value::Object(m)
    }
}

/// A client request on its way to a child: `params._meta[META_KEY]` set to `identity` (a
/// client-sent one overwritten), every other `_meta` key kept; `params` and `_meta` made objects
/// when absent. A message whose `params` is not an object (no MCP request) is left alone.
pub(crate) fn stamp(msg: &mut Value, identity: &Value) {
    let Some(obj) = msg.as_object_mut() else {
        return;
    };
    let params = obj
        .entry("params")
        .or_insert_with(|| Value::Object(Map::new()));
    if params.is_null() {
        *params = Value::Object(Map::new());
    }
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_KEY.to_owned(), identity.clone());
    }
}

/// A client notification on its way to a child: a client-sent `_meta[META_KEY]` removed.
pub(crate) fn unstamp(msg: &mut Value) {
    if let Some(meta) = msg
        .pointer_mut("/params/_meta")
        .and_then(Value::as_object_mut)
    {
        meta.remove(META_KEY);
    }
}

/// The environment of a session's child: `base` (`PATH`, `HOME`, the route's `env`), then the
/// person's own variables (`per_user`, from [`super::SessionEnv`]; a reserved `PFORTE_*` name
/// among them dropped, and one no environment can hold: empty, with `=` or NUL), then the caller's identity (`identity`, from [`Caller::env`]) — a
/// later name replaces an earlier one.
pub(crate) fn session_env(
    mut base: Vec<(String, OsString)>,
    per_user: Vec<(String, String)>,
    identity: Vec<(String, String)>,
) -> Vec<(String, OsString)> {
    let extra = per_user
        .into_iter()
        .filter(|(name, value)| !is_reserved(name) && fits_env(name, value))
        .chain(identity);
    for (name, value) in extra {
        base.retain(|(n, _)| *n != name);
        base.push((name, OsString::from(value)));
    }
    base
}

/// Whether `name=value` can be an environment entry.
fn fits_env(name: &str, value: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0']) && !value.contains('\0')
}

/// Decodes `%XX` escapes into UTF-8; `None` for a malformed escape or invalid UTF-8.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn alice() -> Caller {
        Caller::from_headers(&headers(&[
            (header::SUBJECT, "alice"),
            (header::CLIENT, "pfc_1"),
            (header::CLIENT_NAME, "Claude%20%E2%80%94%0Adesk"),
            (header::AUTH_KIND, "oauth"),
            (header::SCOPES, "mcp:read  mcp:write"),
        ]))
    }

    #[test]
    fn the_headers_become_the_caller() {
        let c = alice();
        assert_eq!(c.subject.as_deref(), Some("alice"));
        assert_eq!(c.client.as_deref(), Some("pfc_1"));
        assert_eq!(
            c.client_name.as_deref(),
            Some("Claude —desk"),
            "newline dropped"
        );
        assert_eq!(c.auth_kind.as_deref(), Some("oauth"));
        assert_eq!(c.scopes, ["mcp:read", "mcp:write"]);
        let bad = Caller::from_headers(&headers(&[(header::CLIENT_NAME, "%zz")]));
        assert_eq!(bad, Caller::default());
    }

    #[test]
    fn the_environment_names_each_present_field() {
        let env = alice().env();
        assert_eq!(
            env,
            [
                ("PFORTE_SUBJECT", "alice"),
                ("PFORTE_CLIENT", "pfc_1"),
                ("PFORTE_CLIENT_NAME", "Claude —desk"),
                ("PFORTE_AUTH_KIND", "oauth"),
                ("PFORTE_SCOPES", "mcp:read mcp:write"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        let token = Caller::from_headers(&headers(&[
            (header::SUBJECT, "operator"),
            (header::CLIENT, "ci"),
            (header::AUTH_KIND, "static"),
            (header::SCOPES, ""),
        ]));
        let names: Vec<_> = token.env().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            [
                "PFORTE_SUBJECT",
                "PFORTE_CLIENT",
                "PFORTE_AUTH_KIND",
                "PFORTE_SCOPES"
            ]
        );
        assert!(Caller::default().env().is_empty());
        assert!(token.env().iter().all(|(k, _)| is_reserved(k)));
    }

    #[test]
    fn the_meta_value_has_every_field() {
        assert_eq!(
            alice().meta(),
            json!({"subject": "alice", "client": "pfc_1", "clientName": "Claude —desk",
                   "authKind": "oauth", "scopes": ["mcp:read", "mcp:write"]})
        );
        assert_eq!(Caller::default().meta(), json!({"scopes": []}));
    }

    #[test]
    fn stamping_merges_into_meta_and_overwrites_a_sent_identity() {
        let who = json!({"subject": "alice"});
        let mut msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "whoami", "_meta": {
                "progressToken": 7,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "dev.pforte/identity": {"subject": "mallory"}}}});
        stamp(&mut msg, &who);
        assert_eq!(
            msg["params"],
            json!({"name": "whoami", "_meta": {
                "progressToken": 7,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "dev.pforte/identity": {"subject": "alice"}}})
        );
    }

    #[test]
    fn stamping_creates_params_and_meta_when_absent_or_not_objects() {
        let who = json!({"subject": "alice"});
        for params in [None, Some(Value::Null), Some(json!({"name": "x"}))] {
            let mut msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
            if let Some(p) = params {
                msg["params"] = p;
            }
            stamp(&mut msg, &who);
            assert_eq!(msg["params"]["_meta"], json!({"dev.pforte/identity": who}));
        }
        let mut msg = json!({"id": 1, "method": "m", "params": {"_meta": "junk"}});
        stamp(&mut msg, &who);
        assert_eq!(msg["params"]["_meta"], json!({"dev.pforte/identity": who}));
        // Not an MCP request: left as it is.
        let mut odd = json!({"id": 1, "method": "m", "params": [1, 2]});
        stamp(&mut odd, &who);
        assert_eq!(odd["params"], json!([1, 2]));
        let mut not_object = json!([1]);
        stamp(&mut not_object, &who);
        assert_eq!(not_object, json!([1]));
    }

    #[test]
    fn unstamping_removes_only_the_identity() {
        let mut msg = json!({"method": "notifications/progress", "params": {"_meta": {
            "dev.pforte/identity": {"subject": "mallory"}, "other": 1}}});
        unstamp(&mut msg);
        assert_eq!(msg["params"]["_meta"], json!({"other": 1}));
        let mut bare = json!({"method": "notifications/initialized"});
        unstamp(&mut bare);
        assert_eq!(bare, json!({"method": "notifications/initialized"}));
    }

    #[test]
    fn the_session_env_puts_identity_last_and_drops_reserved_per_user_names() {
        let base = vec![
            ("PATH".to_owned(), OsString::from("/bin")),
            ("API_KEY".to_owned(), OsString::from("route-default")),
            ("PFORTE_SUBJECT".to_owned(), OsString::from("route-env")),
        ];
        let per_user = vec![
            ("API_KEY".to_owned(), "alices-key".to_owned()),
            ("PFORTE_SUBJECT".to_owned(), "forged".to_owned()),
            ("A=B".to_owned(), "x".to_owned()),
            ("NUL".to_owned(), "a\0b".to_owned()),
            (String::new(), "x".to_owned()),
        ];
        let identity = vec![("PFORTE_SUBJECT".to_owned(), "alice".to_owned())];
        let env = session_env(base, per_user, identity);
        let shown: Vec<_> = env
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("PATH", "/bin"),
                ("API_KEY", "alices-key"),
                ("PFORTE_SUBJECT", "alice"),
            ]
        );
        assert!(is_reserved("PFORTE_SCOPES") && !is_reserved("API_KEY"));
    }
}
