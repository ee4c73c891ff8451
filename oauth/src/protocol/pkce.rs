//! PKCE (RFC 7636), S256 only.

use crate::crypto::{ct_eq, pkce_s256};

fn well_formed(s: &str) -> bool {
    (43..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Checks the challenge of an authorization request: present, method S256, well formed.
pub(crate) fn check_challenge(
    challenge: Option<&str>,
    method: Option<&str>,
) -> Result<String, String> {
    let Some(challenge) = challenge else {
        return Err("code_challenge is required (PKCE S256)".into());
    };
    match method {
        Some("S256") => {}
        None | Some("plain") => {
            return Err("code_challenge_method must be S256".into());
        }
        Some(other) => return Err(format!("unsupported code_challenge_method {other}")),
    }
    if challenge.len() != 43 || !well_formed(challenge) {
        return Err("code_challenge is not a base64url SHA-256 value".into());
    }
    Ok(challenge.to_owned())
}

/// Whether `verifier` matches the stored S256 `challenge`.
pub(crate) fn verify(verifier: &str, challenge: &str) -> bool {
    well_formed(verifier) && ct_eq(pkce_s256(verifier).as_bytes(), challenge.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    const C: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    #[test]
    fn s256_required() {
        assert!(check_challenge(Some(C), Some("S256")).is_ok());
        assert!(check_challenge(None, Some("S256")).is_err(), "missing");
        assert!(check_challenge(Some(C), Some("plain")).is_err(), "plain");
        assert!(check_challenge(Some(C), None).is_err(), "defaults to plain");
        assert!(check_challenge(Some("short"), Some("S256")).is_err());
    }

    #[test]
    fn verifier_checked() {
        assert!(verify(V, C));
        assert!(
            !verify("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXx", C),
            "wrong verifier"
        );
        assert!(!verify("short", C));
    }
}
