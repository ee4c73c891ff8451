//! RFC 7591 dynamic client registration: validating the request, shaping the response.

use serde_json::{Map, Value, json};

use super::redirect;
use crate::error::OAuthError;
use crate::model::AuthMethod;

/// A validated registration request.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    pub auth_method: AuthMethod,
    pub redirect_uris: Vec<String>,
    pub client_name: Option<String>,
    /// The metadata to store and echo (without id and secret).
    pub metadata: Value,
}

const ECHOED_STRINGS: &[&str] = &[
    "client_name",
    "client_uri",
    "logo_uri",
    "scope",
    "tos_uri",
    "policy_uri",
    "software_id",
    "software_version",
];

fn meta_err(msg: impl Into<String>) -> OAuthError {
    OAuthError::InvalidClientMetadata(msg.into())
}

fn string_list(v: &Value, field: &str) -> Result<Vec<String>, OAuthError> {
    v.as_array()
        .ok_or_else(|| meta_err(format!("{field} must be an array of strings")))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| meta_err(format!("{field} must be an array of strings")))
        })
        .collect()
}

/// Checks a client's `grant_types` against `supported` (the metadata's
/// `grant_types_supported`, `metadata::grant_types_supported`): each must be supported, and
/// `authorization_code` must be there (every client here signs people in through a redirect).
pub(crate) fn check_grant_types(grant_types: &[String], supported: &[&str]) -> Result<(), String> {
    if let Some(g) = grant_types
        .iter()
        .find(|g| !supported.contains(&g.as_str()))
    {
        return Err(if g == super::metadata::JWT_BEARER {
            format!(
                "grant type {g} is not supported here: this server trusts no enterprise identity provider ([[oauth.enterprise]] is not configured)"
            )
        } else {
            format!(
                "grant type {g} is not supported (supported: {})",
                supported.join(", ")
            )
        });
    }
    if !grant_types.iter().any(|g| g == "authorization_code") {
        return Err("grant_types must include authorization_code".into());
    }
    Ok(())
}

/// Validates an RFC 7591 registration request body; `grant_types_supported` is what the
/// metadata advertises.
pub fn validate(body: &Value, grant_types_supported: &[&str]) -> Result<Registration, OAuthError> {
    let obj = body
        .as_object()
        .ok_or_else(|| meta_err("the request body must be a JSON object"))?;

    let uris_v = obj
        .get("redirect_uris")
        .ok_or_else(|| OAuthError::InvalidRedirectUri("redirect_uris is required".into()))?;
    let redirect_uris = string_list(uris_v, "redirect_uris").map_err(|_| {
        OAuthError::InvalidRedirectUri("redirect_uris must be an array of strings".into())
    })?;
    if redirect_uris.is_empty() {
        return Err(OAuthError::InvalidRedirectUri(
            "redirect_uris must not be empty".into(),
        ));
    }
    for uri in &redirect_uris {
        redirect::check_registrable(uri).map_err(OAuthError::InvalidRedirectUri)?;
    }

    let auth_method = match obj.get("token_endpoint_auth_method") {
        None | Some(Value::Null) => AuthMethod::ClientSecretBasic, // RFC 7591 §2 default
        Some(Value::String(s)) => AuthMethod::parse(s)
            .ok_or_else(|| meta_err(format!("token_endpoint_auth_method {s} is not supported")))?,
        Some(_) => return Err(meta_err("token_endpoint_auth_method must be a string")),
    };

    let grant_types = match obj.get("grant_types") {
        None | Some(Value::Null) => {
            vec!["authorization_code".to_owned(), "refresh_token".to_owned()]
        }
        Some(v) => string_list(v, "grant_types")?,
    };
    check_grant_types(&grant_types, grant_types_supported).map_err(meta_err)?;
    let response_types = match obj.get("response_types") {
        None | Some(Value::Null) => vec!["code".to_owned()],
        Some(v) => string_list(v, "response_types")?,
    };
    if response_types.iter().any(|r| r != "code") {
        return Err(meta_err("only response type code is supported"));
    }

    let mut metadata = Map::new();
    metadata.insert("redirect_uris".into(), json!(redirect_uris));
    metadata.insert(
        "token_endpoint_auth_method".into(),
        json!(auth_method.as_str()),
    );
    metadata.insert("grant_types".into(), json!(grant_types));
    metadata.insert("response_types".into(), json!(response_types));
    for field in ECHOED_STRINGS {
        match obj.get(*field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.chars().count() <= 1000 && is_display_safe(s) => {
                metadata.insert((*field).into(), json!(s));
            }
            Some(Value::String(s)) if !is_display_safe(s) => {
                return Err(meta_err(format!(
                    "{field} must not contain control or bidirectional-override characters"
                )));
            }
            Some(_) => {
                return Err(meta_err(format!(
                    "{field} must be a string of at most 1000 characters"
                )));
            }
        }
    }
    if let Some(c) = obj.get("contacts").filter(|v| !v.is_null()) {
        metadata.insert("contacts".into(), json!(string_list(c, "contacts")?));
    }
    let client_name = metadata
        .get("client_name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Registration {
        auth_method,
        redirect_uris,
        client_name,
        metadata: Value::Object(metadata),
    })
}

/// Whether a client-supplied string may be shown to people (consent page, admin lists, logs):
/// no control characters (C0, DEL, C1, NUL among them) and no bidirectional overrides or
/// isolates, which can make a name read as another one.
pub(crate) fn is_display_safe(s: &str) -> bool {
    !s.chars().any(|c| {
        c.is_control()
            || matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    })
}

/// The registration response: the metadata plus id, issue time and (confidential) secret.
pub fn response(client_id: &str, issued_at: u64, secret: Option<&str>, metadata: &Value) -> Value {
    let mut out = metadata.as_object().cloned().unwrap_or_default();
    out.insert("client_id".into(), json!(client_id));
    out.insert("client_id_issued_at".into(), json!(issued_at));
    if let Some(s) = secret {
        out.insert("client_secret".into(), json!(s));
        out.insert("client_secret_expires_at".into(), json!(0));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::protocol::metadata::JWT_BEARER;

    const PLAIN: &[&str] = &["authorization_code", "refresh_token"];
    const ENTERPRISE: &[&str] = &["authorization_code", "refresh_token", JWT_BEARER];

    fn validate(body: &Value) -> Result<Registration, OAuthError> {
        super::validate(body, PLAIN)
    }

    #[test]
    fn jwt_bearer_registers_only_where_the_metadata_advertises_it() {
        let body = json!({
            "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
            "grant_types": ["authorization_code", "refresh_token", JWT_BEARER],
        });
        let r = super::validate(&body, ENTERPRISE).unwrap();
        assert_eq!(r.metadata["grant_types"][2], JWT_BEARER);
        let e = super::validate(&body, PLAIN).unwrap_err();
        assert_eq!(e.code(), "invalid_client_metadata");
        assert!(
            e.to_string()
                .contains("[[oauth.enterprise]] is not configured"),
            "{e}"
        );
        let only = json!({"redirect_uris": ["https://a.example/cb"], "grant_types": [JWT_BEARER]});
        let e = super::validate(&only, ENTERPRISE).unwrap_err();
        assert!(
            e.to_string().contains("must include authorization_code"),
            "{e}"
        );
    }

    #[test]
    fn claude_ai_style_registration() {
        let r = validate(&json!({
            "client_name": "Claude",
            "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
            "token_endpoint_auth_method": "client_secret_post",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "scope": "claudeai"
        }))
        .unwrap();
        assert_eq!(r.auth_method, AuthMethod::ClientSecretPost);
        assert_eq!(r.metadata["client_name"], "Claude");
        let resp = response("cid", 7, Some("sec"), &r.metadata);
        assert_eq!(resp["client_id"], "cid");
        assert_eq!(resp["client_secret"], "sec");
        assert_eq!(
            resp["redirect_uris"][0],
            "https://claude.ai/api/mcp/auth_callback"
        );
    }

    #[test]
    fn public_loopback_client() {
        let r = validate(&json!({
            "redirect_uris": ["http://localhost:33418/callback"],
            "token_endpoint_auth_method": "none"
        }))
        .unwrap();
        assert_eq!(r.auth_method, AuthMethod::None);
        assert!(
            response("cid", 7, None, &r.metadata)
                .get("client_secret")
                .is_none()
        );
    }

    #[test]
    fn non_loopback_http_redirect_is_refused() {
        let e = validate(&json!({"redirect_uris": ["http://evil.example/cb"]})).unwrap_err();
        assert_eq!(e.code(), "invalid_redirect_uri");
        let e = validate(&json!({"client_name": "x"})).unwrap_err();
        assert_eq!(e.code(), "invalid_redirect_uri");
    }

    #[test]
    fn unsupported_metadata_is_refused() {
        let base = |extra: Value| {
            let mut v = json!({"redirect_uris": ["https://a.example/cb"]});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            validate(&v)
        };
        assert_eq!(
            base(json!({"token_endpoint_auth_method": "private_key_jwt"}))
                .unwrap_err()
                .code(),
            "invalid_client_metadata"
        );
        assert_eq!(
            base(json!({"grant_types": ["client_credentials"]}))
                .unwrap_err()
                .code(),
            "invalid_client_metadata"
        );
        assert_eq!(
            base(json!({"response_types": ["token"]}))
                .unwrap_err()
                .code(),
            "invalid_client_metadata"
        );
        assert_eq!(
            base(json!({"client_name": 5})).unwrap_err().code(),
            "invalid_client_metadata"
        );
        for name in [
            "Claude\u{0}",
            "Cla\u{202E}edu",
            "a\u{2066}b",
            "x\u{1b}[31m",
            "tab\tname",
        ] {
            assert_eq!(
                base(json!({ "client_name": name })).unwrap_err().code(),
                "invalid_client_metadata",
                "{name:?}"
            );
        }
        assert!(base(json!({"client_name": "Claude Code (Zürich) 日本"})).is_ok());
    }
}
