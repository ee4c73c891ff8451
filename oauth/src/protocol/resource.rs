//! RFC 8707 resource indicators: the configured resources (one per MCP route of the gateway),
//! compared in canonical form (scheme/host case, default port, one trailing slash tolerated).
//! A grant and every code and token it issues are bound to exactly one of them.

use crate::config::ResourceEntry;
use crate::error::OAuthError;

/// The canonical form of a resource URI (RFC 8707's comparison), kept beside the configuration
/// that validates with it.
pub(crate) use crate::config::canonical_resource as canonical;

/// Checks the `resource` values of a request against `ours`; none given means `ours`.
pub(crate) fn check(requested: &[&str], ours: &str) -> Result<String, OAuthError> {
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

/// The configured entry `uri` names (canonical compare).
pub(crate) fn find<'a>(entries: &'a [ResourceEntry], uri: &str) -> Option<&'a ResourceEntry> {
    let wanted = canonical(uri)?;
    entries
        .iter()
        .find(|e| canonical(&e.url).as_deref() == Some(wanted.as_str()))
}

/// The resource an authorization request is for. Every `resource` value must name the same
/// configured entry; without one, `default` when it is configured, else the only entry.
pub(crate) fn select<'a>(
    requested: &[&str],
    entries: &'a [ResourceEntry],
    default: &str,
) -> Result<&'a ResourceEntry, OAuthError> {
    let mut chosen: Option<&ResourceEntry> = None;
    for r in requested {
        let Some(entry) = find(entries, r) else {
            return Err(OAuthError::InvalidTarget(format!(
                "resource {r} is not served here"
            )));
        };
        if chosen.is_some_and(|c| c != entry) {
            return Err(OAuthError::InvalidTarget(
                "one resource per request: a grant is bound to a single resource".into(),
            ));
        }
        chosen = Some(entry);
    }
    if let Some(entry) = chosen {
        return Ok(entry);
    }
    if let Some(entry) = find(entries, default) {
        return Ok(entry);
    }
    match entries {
        [only] => Ok(only),
        _ => Err(OAuthError::InvalidTarget(
            "resource is required: this server protects several".into(),
        )),
    }
}

/// Checks the `resource` values of a token request for a grant bound to `bound`: each must be
/// configured (else `invalid_target`) and be `bound` (else `invalid_target`: a grant only yields
/// tokens for its own resource); `bound` itself must still be configured (else `invalid_grant`).
pub(crate) fn check_bound(
    requested: &[&str],
    bound: &str,
    entries: &[ResourceEntry],
) -> Result<(), OAuthError> {
    let bound_c = canonical(bound).unwrap_or_else(|| bound.to_owned());
    for r in requested {
        if find(entries, r).is_none() {
            return Err(OAuthError::InvalidTarget(format!(
                "resource {r} is not served here"
            )));
        }
        if canonical(r).as_deref() != Some(bound_c.as_str()) {
            return Err(OAuthError::InvalidTarget(format!(
                "this grant is for resource {bound}, not {r}"
            )));
        }
    }
    if find(entries, bound).is_none() {
        return Err(OAuthError::InvalidGrant(format!(
            "the grant's resource {bound} is no longer served here"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const A: &str = "https://gw.example/a/mcp";
    const B: &str = "https://gw.example/b/mcp";

    fn entries(urls: &[&str]) -> Vec<ResourceEntry> {
        urls.iter()
            .map(|u| ResourceEntry {
                url: (*u).into(),
                name: u.split('/').nth(3).unwrap_or_default().into(),
                roles: Vec::new(),
                users: Vec::new(),
                title: None,
            })
            .collect()
    }

    fn code(r: Result<impl Sized, OAuthError>) -> Option<&'static str> {
        r.err().map(|e| e.code())
    }

    #[test]
    fn select_picks_the_requested_entry() {
        let two = entries(&[A, B]);
        let ok = |req: &[&str]| select(req, &two, OURS).map(|e| e.url.clone()).ok();
        assert_eq!(ok(&[A]).as_deref(), Some(A));
        assert_eq!(ok(&["HTTPS://gw.example:443/b/mcp/"]).as_deref(), Some(B));
        assert_eq!(ok(&[A, "https://gw.example/a/mcp/"]).as_deref(), Some(A));
        assert_eq!(code(select(&[A, B], &two, OURS)), Some("invalid_target"));
        assert_eq!(
            code(select(&["https://gw.example/c/mcp"], &two, OURS)),
            Some("invalid_target")
        );
        assert_eq!(code(select(&["mcp"], &two, OURS)), Some("invalid_target"));
    }

    #[test]
    fn omitted_resource_rules() {
        // the default when it is configured
        let with_default = entries(&[OURS, A]);
        assert_eq!(select(&[], &with_default, OURS).unwrap().url, OURS);
        // else the only entry
        let only = entries(&[A]);
        assert_eq!(select(&[], &only, OURS).unwrap().url, A);
        // else required
        let err = select(&[], &entries(&[A, B]), OURS).unwrap_err();
        assert_eq!(err.code(), "invalid_target");
        assert!(err.description().contains("resource is required"));
    }

    #[test]
    fn bound_resource_is_kept() {
        let two = entries(&[A, B]);
        assert!(check_bound(&[], A, &two).is_ok());
        assert!(check_bound(&["https://gw.example/a/mcp/"], A, &two).is_ok());
        assert_eq!(code(check_bound(&[B], A, &two)), Some("invalid_target"));
        assert_eq!(
            code(check_bound(&["https://gw.example/c/mcp"], A, &two)),
            Some("invalid_target")
        );
        // a grant whose resource was removed from the config yields nothing more
        assert_eq!(
            code(check_bound(&[], A, &entries(&[B]))),
            Some("invalid_grant")
        );
    }

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
