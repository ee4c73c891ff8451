//! RFC 8414 authorization-server metadata.

use serde_json::{Value, json};

use crate::config::OAuthConfig;

/// The RFC 8414 document (also served as `/.well-known/openid-configuration`).
pub(crate) fn authorization_server(cfg: &OAuthConfig) -> Value {
    let iss = &cfg.issuer;
    let mut doc = json!({
        "issuer": iss,
        "authorization_endpoint": format!("{iss}/authorize"),
        "token_endpoint": format!("{iss}/token"),
        "registration_endpoint": format!("{iss}/register"),
        "revocation_endpoint": format!("{iss}/revoke"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": grant_types_supported(cfg),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "scopes_supported": cfg.scopes_supported,
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
    });
    // Enterprise-Managed Authorization: the `jwt-bearer` grant with an ID-JAG, only when an
    // identity provider is trusted.
    if !cfg.enterprise.is_empty() {
        doc["authorization_grant_profiles_supported"] = json!([ID_JAG_PROFILE]);
    }
    doc
}

/// The grant types of `cfg`: advertised in the metadata and the only ones registration
/// (dynamic or by metadata document) accepts — `jwt-bearer` only with a trusted identity
/// provider.
pub(crate) fn grant_types_supported(cfg: &OAuthConfig) -> Vec<&'static str> {
    let mut out = vec!["authorization_code", "refresh_token"];
    if !cfg.enterprise.is_empty() {
        out.push(JWT_BEARER);
    }
    out
}

/// RFC 7523's grant type.
pub(crate) const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The ID-JAG profile identifier (draft-ietf-oauth-identity-assertion-authz-grant).
pub(crate) const ID_JAG_PROFILE: &str = "urn:ietf:params:oauth:grant-profile:id-jag";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn metadata_has_every_required_field_and_one_issuer() {
        let cfg = OAuthConfig::new("https://gw.example").unwrap();
        let m = authorization_server(&cfg);
        assert_eq!(m["issuer"], "https://gw.example");
        assert_eq!(m["authorization_endpoint"], "https://gw.example/authorize");
        assert_eq!(m["response_types_supported"], json!(["code"]));
        assert_eq!(
            m["grant_types_supported"],
            json!(["authorization_code", "refresh_token"])
        );
        assert_eq!(m["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(
            m["token_endpoint_auth_methods_supported"],
            json!(["none", "client_secret_post", "client_secret_basic"])
        );
        assert_eq!(m["client_id_metadata_document_supported"], true);
        assert_eq!(m["authorization_response_iss_parameter_supported"], true);
        assert!(m.get("authorization_grant_profiles_supported").is_none());
    }

    #[test]
    fn jwt_bearer_is_advertised_with_a_trusted_idp() {
        let mut cfg = OAuthConfig::new("https://gw.example").unwrap();
        cfg.enterprise = vec![crate::config::EnterpriseIdp {
            issuer: "https://idp.example".into(),
            ..Default::default()
        }];
        let m = authorization_server(&cfg);
        assert_eq!(m["grant_types_supported"][2], JWT_BEARER);
        assert_eq!(
            m["authorization_grant_profiles_supported"][0],
            ID_JAG_PROFILE
        );
    }
}
