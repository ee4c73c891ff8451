//! Scope negotiation: requested scopes must all be known; none requested means all supported;
//! a refresh may narrow, never widen.

use crate::error::OAuthError;

fn split(scope: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in scope.split(' ').filter(|s| !s.is_empty()) {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    }
    out
}

/// The scopes granted for an authorization request.
pub(crate) fn negotiate(
    requested: Option<&str>,
    supported: &[String],
) -> Result<Vec<String>, OAuthError> {
    let wanted = requested.map(split).unwrap_or_default();
    if wanted.is_empty() {
        return Ok(supported.to_vec());
    }
    let unknown: Vec<&str> = wanted
        .iter()
        .filter(|w| !supported.contains(w))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(OAuthError::InvalidScope(format!(
            "unknown scope: {}",
            unknown.join(" ")
        )));
    }
    Ok(wanted)
}

/// The scopes of a refreshed access token: a subset of the grant's.
pub(crate) fn narrow(
    requested: Option<&str>,
    granted: &[String],
) -> Result<Vec<String>, OAuthError> {
    let wanted = requested.map(split).unwrap_or_default();
    if wanted.is_empty() {
        return Ok(granted.to_vec());
    }
    if let Some(extra) = wanted.iter().find(|w| !granted.contains(w)) {
        return Err(OAuthError::InvalidScope(format!(
            "scope {extra} was not granted"
        )));
    }
    Ok(wanted)
}

/// The space-separated form.
pub(crate) fn join(scopes: &[String]) -> String {
    scopes.join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn sup() -> Vec<String> {
        vec!["mcp:read".into(), "mcp:write".into()]
    }

    #[test]
    fn default_is_all_supported() {
        assert_eq!(negotiate(None, &sup()).unwrap(), sup());
        assert_eq!(negotiate(Some("  "), &sup()).unwrap(), sup());
    }

    #[test]
    fn known_subset_kept_unknown_refused() {
        assert_eq!(
            negotiate(Some("mcp:read mcp:read"), &sup()).unwrap(),
            ["mcp:read"]
        );
        assert!(matches!(
            negotiate(Some("mcp:read admin"), &sup()),
            Err(OAuthError::InvalidScope(_))
        ));
    }

    #[test]
    fn refresh_never_widens() {
        let granted = vec!["mcp:read".to_owned()];
        assert_eq!(narrow(None, &granted).unwrap(), granted);
        assert!(narrow(Some("mcp:write"), &granted).is_err());
    }
}
