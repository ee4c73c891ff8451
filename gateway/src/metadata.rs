//! RFC 9728 protected-resource metadata for the MCP endpoint.

use serde_json::{Value, json};

use crate::config::Settings;

/// The metadata document: this gateway's MCP URL as the resource, its own origin as the
/// authorization server.
pub fn protected_resource(settings: &Settings) -> Value {
    json!({
        "resource": settings.resource(),
        "authorization_servers": [settings.issuer()],
        "bearer_methods_supported": ["header"],
        "scopes_supported": settings.file.scopes,
        "resource_name": "Pforte MCP gateway",
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::GatewayConfig;

    #[test]
    fn names_resource_and_issuer() {
        let s = GatewayConfig {
            public_url: Some("https://gw.example".into()),
            behind_tls_proxy: true,
            ..GatewayConfig::default()
        }
        .validate()
        .unwrap();
        let doc = protected_resource(&s);
        assert_eq!(doc["resource"], "https://gw.example/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://gw.example");
        assert_eq!(doc["bearer_methods_supported"][0], "header");
    }
}
