//! RFC 9728 protected-resource metadata for the MCP endpoint.

use serde_json::{Value, json};

use crate::config::{Route, Settings, Virtual};

/// The metadata document of one route: its MCP URL as the resource, the gateway's own origin
/// as the authorization server.
pub(crate) fn protected_resource(settings: &Settings, route: &Route) -> Value {
    let name = if route.name == crate::config::DEFAULT_ROUTE {
        "Pforte MCP gateway".to_owned()
    } else {
        format!("{} (Pforte MCP gateway)", route.name)
    };
    document(settings, &route.resource, &name)
}

/// The metadata document of a virtual server (`[[virtual]]`): its own resource, named by its
/// title.
pub(crate) fn virtual_resource(settings: &Settings, v: &Virtual) -> Value {
    let title = v.server.title.as_deref().unwrap_or(&v.server.name);
    document(
        settings,
        &v.resource,
        &format!("{title} (Pforte MCP gateway)"),
    )
}

fn document(settings: &Settings, resource: &str, name: &str) -> Value {
    json!({
        "resource": resource,
        "authorization_servers": [settings.issuer()],
        "bearer_methods_supported": ["header"],
        "scopes_supported": settings.scopes,
        "resource_name": name,
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
        let doc = protected_resource(&s, &s.routes[0]);
        assert_eq!(doc["resource"], "https://gw.example/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://gw.example");
        assert_eq!(doc["bearer_methods_supported"][0], "header");
    }
}
