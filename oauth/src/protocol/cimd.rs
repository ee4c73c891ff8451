//! Client ID Metadata Documents (pure part): which client ids are document URLs, which
//! addresses may be fetched, whether a fetched document is acceptable, how long to cache it.

use serde_json::Value;
use url::Url;

use super::{Client, ClientKind, redirect};
use crate::config::CimdConfig;
use crate::model::AuthMethod;

/// Why a metadata-document client could not be used.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum CimdError {
    #[error("client_id is not a valid metadata document URL")]
    InvalidUrl,
    #[error("metadata document host resolves to a refused address ({0})")]
    RefusedAddress(String),
    #[error("metadata document could not be fetched: {0}")]
    Fetch(String),
    #[error("metadata document is larger than {0} bytes")]
    TooLarge(usize),
    #[error("metadata document is invalid: {0}")]
    Invalid(String),
}

impl CimdError {
    /// What a page or an error response may say: the class of the failure only. Never the
    /// address a name resolved to or the resolver's words (that would make the server a DNS
    /// oracle for internal names); a refused address reads like any other failed fetch.
    pub(crate) fn public_reason(&self) -> &'static str {
        match self {
            CimdError::InvalidUrl => "invalid URL",
            CimdError::RefusedAddress(_) | CimdError::Fetch(_) => "fetch failed",
            CimdError::TooLarge(_) => "document too large",
            CimdError::Invalid(_) => "invalid document",
        }
    }
}

/// Whether `client_id` is meant as a metadata document URL (starts with `https://`).
pub fn is_document_client_id(client_id: &str) -> bool {
    client_id.starts_with("https://")
}

/// Parses a client id URL: https, a host, a path, no fragment or credentials, and already in
/// normal form (so the document's `client_id` can be compared byte for byte).
pub fn parse_client_id_url(client_id: &str) -> Result<Url, CimdError> {
    let url = Url::parse(client_id).map_err(|_| CimdError::InvalidUrl)?;
    let ok = url.scheme() == "https"
        && url.host().is_some()
        && url.path().len() > 1
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none()
        && url.as_str() == client_id;
    if ok {
        Ok(url)
    } else {
        Err(CimdError::InvalidUrl)
    }
}

/// Validates a fetched document for `client_id`; its `grant_types` (if any) must be among
/// `grant_types_supported`, as at dynamic registration.
pub fn validate_document(
    client_id: &str,
    body: &[u8],
    grant_types_supported: &[&str],
) -> Result<Client, CimdError> {
    let doc: Value =
        serde_json::from_slice(body).map_err(|_| CimdError::Invalid("not JSON".into()))?;
    let obj = doc
        .as_object()
        .ok_or_else(|| CimdError::Invalid("not a JSON object".into()))?;
    if obj.get("client_id").and_then(Value::as_str) != Some(client_id) {
        return Err(CimdError::Invalid(
            "its client_id is not the URL it was fetched from".into(),
        ));
    }
    let uris: Vec<String> = obj
        .get("redirect_uris")
        .and_then(Value::as_array)
        .ok_or_else(|| CimdError::Invalid("redirect_uris missing".into()))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| CimdError::Invalid("redirect_uris must be strings".into()))
        })
        .collect::<Result<_, _>>()?;
    if uris.is_empty() {
        return Err(CimdError::Invalid("redirect_uris is empty".into()));
    }
    for u in &uris {
        redirect::check_registrable(u).map_err(CimdError::Invalid)?;
    }
    match obj
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
    {
        None | Some("none") => {}
        Some(other) => {
            return Err(CimdError::Invalid(format!(
                "token_endpoint_auth_method {other} is not supported"
            )));
        }
    }
    if obj
        .get("client_name")
        .and_then(Value::as_str)
        .is_some_and(|n| !super::registration::is_display_safe(n))
    {
        return Err(CimdError::Invalid(
            "client_name must not contain control or bidirectional-override characters".into(),
        ));
    }
    match obj.get("grant_types") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            let grant_types = items
                .iter()
                .map(|g| g.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| CimdError::Invalid("grant_types must be strings".into()))?;
            super::registration::check_grant_types(&grant_types, grant_types_supported)
                .map_err(CimdError::Invalid)?;
        }
        Some(_) => return Err(CimdError::Invalid("grant_types must be an array".into())),
    }
    if obj.contains_key("client_secret") {
        return Err(CimdError::Invalid(
            "a metadata document must not carry a secret".into(),
        ));
    }
    Ok(Client {
        client_id: client_id.to_owned(),
        name: obj
            .get("client_name")
            .and_then(Value::as_str)
            .map(str::to_owned),
        redirect_uris: uris,
        auth_method: AuthMethod::None,
        secret_hash: None,
        kind: ClientKind::MetadataDocument,
    })
}

/// Seconds to cache a document served with this `Cache-Control` header.
pub fn cache_lifetime(cache_control: Option<&str>, cfg: &CimdConfig) -> u64 {
    let Some(cc) = cache_control else {
        return cfg.default_cache_secs.min(cfg.max_cache_secs);
    };
    let mut max_age = None;
    for directive in cc.split(',').map(|d| d.trim().to_ascii_lowercase()) {
        if directive == "no-store" || directive == "no-cache" {
            return 0;
        }
        if let Some(v) = directive.strip_prefix("max-age=") {
            max_age = v.trim_matches('"').parse::<u64>().ok();
        }
    }
    max_age
        .unwrap_or(cfg.default_cache_secs)
        .min(cfg.max_cache_secs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const ID: &str = "https://app.example/oauth/client.json";
    const PLAIN: &[&str] = &["authorization_code", "refresh_token"];

    #[test]
    fn a_documents_grant_types_are_those_of_the_metadata() {
        let doc = |grants: serde_json::Value| {
            serde_json::json!({
                "client_id": ID,
                "redirect_uris": ["https://app.example/cb"],
                "grant_types": grants,
            })
            .to_string()
        };
        let jwt = super::super::metadata::JWT_BEARER;
        let with_jwt = doc(serde_json::json!(["authorization_code", jwt]));
        let enterprise = ["authorization_code", "refresh_token", jwt];
        assert!(validate_document(ID, with_jwt.as_bytes(), &enterprise).is_ok());
        let e = validate_document(ID, with_jwt.as_bytes(), PLAIN).unwrap_err();
        assert!(e.to_string().contains("[[oauth.enterprise]]"), "{e}");
        let plain = doc(serde_json::json!(["authorization_code", "refresh_token"]));
        assert!(validate_document(ID, plain.as_bytes(), PLAIN).is_ok());
    }

    #[test]
    fn client_id_urls() {
        assert!(parse_client_id_url(ID).is_ok());
        assert!(parse_client_id_url("http://app.example/c.json").is_err());
        assert!(
            parse_client_id_url("https://app.example").is_err(),
            "needs a path"
        );
        assert!(parse_client_id_url("https://app.example/c#x").is_err());
        assert!(
            parse_client_id_url("https://APP.example/c").is_err(),
            "not normalised"
        );
    }

    #[test]
    fn document_accepted_when_it_names_itself() {
        let body = serde_json::json!({
            "client_id": ID, "client_name": "App",
            "redirect_uris": ["http://localhost/callback", "http://127.0.0.1/callback"]
        });
        let c = validate_document(ID, body.to_string().as_bytes(), PLAIN).unwrap();
        assert_eq!(c.kind, ClientKind::MetadataDocument);
        assert_eq!(c.auth_method, AuthMethod::None);
        assert_eq!(c.redirect_uris.len(), 2);
    }

    #[test]
    fn document_lying_about_client_id_is_refused() {
        let body = serde_json::json!({
            "client_id": "https://other.example/client.json",
            "redirect_uris": ["https://app.example/cb"]
        });
        let e = validate_document(ID, body.to_string().as_bytes(), PLAIN).unwrap_err();
        assert!(matches!(e, CimdError::Invalid(_)));
    }

    #[test]
    fn document_with_bad_redirects_or_secret_refused() {
        for body in [
            serde_json::json!({"client_id": ID, "redirect_uris": ["http://evil.example/cb"]}),
            serde_json::json!({"client_id": ID, "redirect_uris": []}),
            serde_json::json!({"client_id": ID, "redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "client_secret_post"}),
        ] {
            assert!(
                validate_document(ID, body.to_string().as_bytes(), PLAIN).is_err(),
                "{body}"
            );
        }
        assert!(validate_document(ID, b"not json", PLAIN).is_err());
    }

    #[test]
    fn private_addresses_refused_unless_allowed() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "0.0.0.0",
            "100.64.0.1",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            assert!(!pforte_outbound::is_public(ip), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111"] {
            assert!(pforte_outbound::is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn cache_headers() {
        let cfg = CimdConfig::default();
        assert_eq!(cache_lifetime(Some("public, max-age=600"), &cfg), 600);
        assert_eq!(cache_lifetime(Some("no-store"), &cfg), 0);
        assert_eq!(
            cache_lifetime(Some("max-age=999999999"), &cfg),
            cfg.max_cache_secs
        );
        assert_eq!(cache_lifetime(None, &cfg), cfg.default_cache_secs);
    }
}
