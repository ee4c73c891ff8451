//! RFC 8707 resource indicators: the only resource is the gateway's MCP URL, compared in
//! canonical form (scheme/host case, default port, one trailing slash tolerated).

use url::Url;

use crate::error::OAuthError;

/// The canonical form of a resource URI, or None if it is not an absolute URL without fragment.
pub fn canonical(resource: &str) -> Option<String> {
    let url = Url::parse(resource).ok()?;
    if url.fragment().is_some() || url.cannot_be_a_base() {
        return None;
    }
    let mut s = url.to_string();
    if url.query().is_none() && s.ends_with('/') {
        s.pop();
    }
    Some(s)
}

/// Checks the `resource` values of a request against `ours`; none given means `ours`.
pub fn check(requested: &[&str], ours: &str) -> Result<String, OAuthError> {
    let ours_c = canonical(ours).unwrap_or_else(|| ours.to_owned());
    for r in requested {
        if canonical(r).as_deref() != Some(ours_c.as_str()) {
            return Err(OAuthError::InvalidTarget(format!(
                "resource {r} is not served here; use {ours}"
            )));
        }
    }
    Ok(ours.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "https://gw.example/mcp";

    #[test]
    fn trailing_slash_and_case_tolerated() {
        assert_eq!(
            check(&[], OURS).ok().as_deref(),
            Some(OURS),
            "defaults to ours"
        );
        assert!(check(&["https://gw.example/mcp/"], OURS).is_ok());
        assert!(check(&["HTTPS://GW.example:443/mcp"], OURS).is_ok());
    }

    #[test]
    fn other_resources_are_invalid_target() {
        for bad in [
            "https://other.example/mcp",
            "https://gw.example/api",
            "https://gw.example/mcp#x",
            "mcp",
        ] {
            let err = check(&[bad], OURS).err();
            assert!(matches!(err, Some(OAuthError::InvalidTarget(_))), "{bad}");
        }
    }
}
