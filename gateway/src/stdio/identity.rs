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

use crate::{forward::header, raw_json};

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

/// A client request on its way to a child (valid JSON text): `params._meta[META_KEY]` set to
/// `identity` (JSON text; a client-sent one removed, from every `_meta` of `params`), every
/// other byte kept; `params` and `_meta` made objects when absent or null (`_meta` also when not
/// an object). A message whose `params` is not an object (no MCP request) is left alone.
pub(crate) fn stamp(text: &mut Vec<u8>, identity: &[u8]) {
    let top = raw_json::trimmed(text);
    let entry = |inner: &[u8]| {
        let mut m = format!("\"{META_KEY}\":").into_bytes();
        m.extend_from_slice(inner);
        m
    };
    let meta_object = || {
        let mut o = b"{".to_vec();
        o.extend_from_slice(&entry(identity));
        o.push(b'}');
        o
    };
    let Some(top_members) = raw_json::members(text, top.clone()) else {
        return;
    };
    let mut edits = raw_json::Edits::default();
    let Some(params) = top_members.iter().rev().find(|m| m.key == "params") else {
        let mut member = br#""params":{"_meta":"#.to_vec();
        member.extend_from_slice(&meta_object());
        member.push(b'}');
        raw_json::append_member(text, &top, &member, &mut edits);
        edits.apply(text);
        return;
    };
    let params = params.value.clone();
    match text.get(params.start) {
        Some(b'{') => {}
        Some(b'n') => {
            let mut with = br#"{"_meta":"#.to_vec();
            with.extend_from_slice(&meta_object());
            with.push(b'}');
            edits.replace(params, with);
            edits.apply(text);
            return;
        }
        _ => return,
    }
    let metas: Vec<raw_json::Span> = raw_json::members(text, params.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.key == "_meta")
        .map(|m| m.value)
        .collect();
    let Some((last, earlier)) = metas.split_last() else {
        let mut member = br#""_meta":"#.to_vec();
        member.extend_from_slice(&meta_object());
        raw_json::append_member(text, &params, &member, &mut edits);
        edits.apply(text);
        return;
    };
    for meta in earlier {
        if let Some(without) = raw_json::without_members(text, meta, META_KEY) {
            edits.replace(meta.clone(), without);
        }
    }
    if text.get(last.start) == Some(&b'{') {
        let mut object = raw_json::without_members(text, last, META_KEY)
            .unwrap_or_else(|| text.get(last.clone()).unwrap_or_default().to_vec());
        let whole = 0..object.len();
        let mut add = raw_json::Edits::default();
        raw_json::append_member(&object, &whole, &entry(identity), &mut add);
        add.apply(&mut object);
        edits.replace(last.clone(), object);
    } else {
        edits.replace(last.clone(), meta_object());
    }
    edits.apply(text);
}

/// A client notification on its way to a child: a client-sent `_meta[META_KEY]` removed (from
/// every `_meta` of `params`), every other byte kept.
pub(crate) fn unstamp(text: &mut Vec<u8>) {
    let top = raw_json::trimmed(text);
    let Some(params) = raw_json::get(text, top, "params") else {
        return;
    };
    let mut edits = raw_json::Edits::default();
    for m in raw_json::members(text, params).unwrap_or_default() {
        if m.key == "_meta"
            && let Some(without) = raw_json::without_members(text, &m.value, META_KEY)
        {
            edits.replace(m.value, without);
        }
    }
    edits.apply(text);
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

    fn stamped(msg: &Value, who: &Value) -> Value {
        let mut text = msg.to_string().into_bytes();
        stamp(&mut text, who.to_string().as_bytes());
        serde_json::from_slice(&text).unwrap()
    }

    #[test]
    fn stamping_merges_into_meta_and_overwrites_a_sent_identity() {
        let who = json!({"subject": "alice"});
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "whoami", "_meta": {
                "progressToken": 7,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "dev.pforte/identity": {"subject": "mallory"}}}});
        assert_eq!(
            stamped(&msg, &who)["params"],
            json!({"name": "whoami", "_meta": {
                "progressToken": 7,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "dev.pforte/identity": {"subject": "alice"}}})
        );
        // A second `_meta` (the last one counts for parsers) loses a forged identity as well.
        let mut twice = br#"{"id":1,"method":"m","params":{"_meta":{"dev.pforte/identity":"x","a":1},"_meta":{"b":2}}}"#.to_vec();
        stamp(&mut twice, br#"{"subject":"alice"}"#);
        assert_eq!(
            String::from_utf8(twice).unwrap(),
            r#"{"id":1,"method":"m","params":{"_meta":{"a":1},"_meta":{"b":2,"dev.pforte/identity":{"subject":"alice"}}}}"#
        );
    }

    #[test]
    fn stamping_keeps_every_other_byte() {
        let sent = r#"{ "method":"tools/call", "params":{"z":1.0,"a":9007199254740993,"s":"\u00e9","_meta":{"progressToken":"p"}},"id":3}"#;
        let mut text = sent.as_bytes().to_vec();
        stamp(&mut text, br#"{"subject":"alice"}"#);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            sent.replace(
                r#""p"}"#,
                r#""p","dev.pforte/identity":{"subject":"alice"}}"#
            )
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
            let out = stamped(&msg, &who);
            assert_eq!(out["params"]["_meta"], json!({"dev.pforte/identity": who}));
        }
        let msg = json!({"id": 1, "method": "m", "params": {"_meta": "junk"}});
        assert_eq!(
            stamped(&msg, &who)["params"]["_meta"],
            json!({"dev.pforte/identity": who})
        );
        // Not an MCP request: left as it is.
        let odd = json!({"id": 1, "method": "m", "params": [1, 2]});
        assert_eq!(stamped(&odd, &who)["params"], json!([1, 2]));
        let not_object = json!([1]);
        assert_eq!(stamped(&not_object, &who), json!([1]));
    }

    #[test]
    fn unstamping_removes_only_the_identity() {
        let mut msg = br#"{"method":"notifications/progress","params":{"_meta":{"dev.pforte/identity":{"subject":"mallory"},"other":1.0}}}"#.to_vec();
        unstamp(&mut msg);
        assert_eq!(
            String::from_utf8(msg).unwrap(),
            r#"{"method":"notifications/progress","params":{"_meta":{"other":1.0}}}"#
        );
        let bare = br#"{"method":"notifications/initialized"}"#;
        let mut same = bare.to_vec();
        unstamp(&mut same);
        assert_eq!(same, bare);
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
