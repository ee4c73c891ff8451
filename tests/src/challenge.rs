//! `WWW-Authenticate` challenges read the way a client reads them.

use std::collections::HashMap;

/// A `WWW-Authenticate` challenge's scheme and auth-params (`key=value` or `key="value"`, in
/// any order), or None when it is not one challenge of that shape.
pub fn parse_challenge(header: &str) -> Option<(String, HashMap<String, String>)> {
    let (scheme, mut rest) = header.trim().split_once(' ')?;
    let mut params = HashMap::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if rest.is_empty() {
            return Some((scheme.to_owned(), params));
        }
        let (key, after) = rest.split_once('=')?;
        let (value, tail) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            after.split_at(after.find(',').unwrap_or(after.len()))
        };
        params.insert(key.trim().to_ascii_lowercase(), value.to_owned());
        rest = tail;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_challenge;

    #[test]
    fn challenges_parse_in_any_order() {
        let (scheme, p) = parse_challenge(
            r#"Bearer resource_metadata="https://h/.well-known/x", error="insufficient_scope", scope="mcp:read mcp:write""#,
        )
        .unwrap();
        assert_eq!(scheme, "Bearer");
        assert_eq!(p["error"], "insufficient_scope");
        assert_eq!(p["scope"], "mcp:read mcp:write");
        assert_eq!(p["resource_metadata"], "https://h/.well-known/x");
        let (_, p) = parse_challenge("Bearer error=invalid_token,realm=\"a, b\"").unwrap();
        assert_eq!(p["error"], "invalid_token");
        assert_eq!(p["realm"], "a, b");
        assert!(parse_challenge("Bearer").is_none());
        assert!(parse_challenge(r#"Bearer scope="unterminated"#).is_none());
    }
}
