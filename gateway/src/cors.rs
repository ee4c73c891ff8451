//! The CORS door of `/mcp`: which browser origins may call it and the headers that say so. Only
//! where configured: with no allowed origins, no CORS header is ever sent (the gateway's own
//! origin is same-origin and needs none).

/// Request headers a browser MCP client may send.
pub(crate) const ALLOW_HEADERS: &str = "Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID";
/// Response headers a browser MCP client must be able to read.
pub(crate) const EXPOSE_HEADERS: &str = "Mcp-Session-Id, WWW-Authenticate";
pub(crate) const ALLOW_METHODS: &str = "GET, POST, DELETE, OPTIONS";

/// Whether a request is a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`).
pub(crate) fn is_preflight(method: &http::Method, headers: &http::HeaderMap) -> bool {
    method == http::Method::OPTIONS && headers.contains_key("access-control-request-method")
}

/// The `Mcp-Param-{Name}` headers (MCP 2026-07-28: a tool's parameters mirrored into headers)
/// among a preflight's `Access-Control-Request-Headers`: they cannot be listed in advance, so
/// the ones asked for are allowed (names that are HTTP tokens only).
fn requested_param_headers(requested: Option<&[u8]>) -> Vec<String> {
    let Some(list) = requested.and_then(|r| std::str::from_utf8(r).ok()) else {
        return Vec::new();
    };
    list.split(',')
        .map(str::trim)
        .filter(|name| {
            name.len() > crate::param_headers::PREFIX.len()
                && name
                    .get(..crate::param_headers::PREFIX.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(crate::param_headers::PREFIX))
                && crate::param_headers::is_token(name)
        })
        .map(str::to_owned)
        .collect()
}

/// The headers of a preflight answer for `origin` (already known to be allowed);
/// `requested` is its `Access-Control-Request-Headers`.
pub(crate) fn preflight_headers(
    origin: &str,
    requested: Option<&[u8]>,
) -> Vec<(&'static str, String)> {
    let mut allow = ALLOW_HEADERS.to_owned();
    for name in requested_param_headers(requested) {
        allow.push_str(", ");
        allow.push_str(&name);
    }
    vec![
        ("access-control-allow-origin", origin.to_owned()),
        ("access-control-allow-methods", ALLOW_METHODS.to_owned()),
        ("access-control-allow-headers", allow),
        ("access-control-expose-headers", EXPOSE_HEADERS.to_owned()),
        ("access-control-max-age", "600".to_owned()),
        ("vary", "Origin".to_owned()),
    ]
}

/// The headers every other answer to `origin` carries.
pub(crate) fn response_headers(origin: &str) -> [(&'static str, String); 3] {
    [
        ("access-control-allow-origin", origin.to_owned()),
        ("access-control-expose-headers", EXPOSE_HEADERS.to_owned()),
        ("vary", "Origin".to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preflight_names_exactly_the_origin_and_the_mcp_headers() {
        let h = preflight_headers(
            "https://app.example",
            Some(b"content-type, mcp-param-region, Mcp-Param-Shard, x-other, mcp-param-"),
        );
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(
            get("access-control-allow-origin"),
            Some("https://app.example")
        );
        for name in [
            "Authorization",
            "Mcp-Session-Id",
            "MCP-Protocol-Version",
            "Mcp-Method",
            "Mcp-Name",
            "Last-Event-ID",
        ] {
            assert!(get("access-control-allow-headers").is_some_and(|v| v.contains(name)));
        }
        let allowed = get("access-control-allow-headers").unwrap_or_default();
        assert!(
            allowed.ends_with(", mcp-param-region, Mcp-Param-Shard"),
            "{allowed}"
        );
        assert!(!allowed.contains("x-other"), "{allowed}");
        assert_eq!(get("vary"), Some("Origin"));
        assert!(
            get("access-control-expose-headers").is_some_and(|v| v.contains("WWW-Authenticate"))
        );
    }

    #[test]
    fn preflight_is_options_with_a_requested_method() {
        let mut headers = http::HeaderMap::new();
        assert!(!is_preflight(&http::Method::OPTIONS, &headers));
        headers.insert(
            "access-control-request-method",
            http::HeaderValue::from_static("POST"),
        );
        assert!(is_preflight(&http::Method::OPTIONS, &headers));
        assert!(!is_preflight(&http::Method::POST, &headers));
    }
}
