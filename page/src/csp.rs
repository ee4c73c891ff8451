//! The one Content-Security-Policy of every page: nothing but the one stylesheet (allowed by
//! its SHA-256, computed from [`crate::STYLESHEET`] when first asked), images from the page's
//! own origin, forms to the page's own origin (plus the origins a form's answer redirects to:
//! an OpenID provider from the sign-in page, the client from the consent page), never framed,
//! no `<base>`.

use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest as _, Sha256};

use crate::STYLESHEET;

static STYLE_HASH: LazyLock<String> =
    LazyLock::new(|| format!("'sha256-{}'", STANDARD.encode(Sha256::digest(STYLESHEET))));

/// The stylesheet's CSP source: `'sha256-BASE64'`.
pub fn style_hash() -> &'static str {
    &STYLE_HASH
}

/// The policy; `form_action_origins` are added to `form-action 'self'`. An origin that is not
/// plainly `scheme://host[:port]` in CSP-safe characters is left out (registration refuses such
/// hosts; this keeps a `;` from ever starting a new directive). With no origins, every page's
/// policy is the same string.
pub fn content_security_policy(form_action_origins: &[&str]) -> String {
    let safe = |o: &&&str| {
        !o.is_empty()
            && o.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:/[]".contains(&b))
    };
    let mut form_action = "'self'".to_owned();
    for o in form_action_origins.iter().filter(safe) {
        form_action.push(' ');
        form_action.push_str(o);
    }
    format!(
        "default-src 'none'; style-src {}; img-src 'self'; form-action {form_action}; \
         frame-ancestors 'none'; base-uri 'none'",
        style_hash()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csp_forbids_framing_and_pins_the_stylesheet() {
        let csp = content_security_policy(&["https://claude.ai"]);
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(csp.starts_with("default-src 'none'"));
        assert!(csp.contains("form-action 'self' https://claude.ai;"));
        let injected = content_security_policy(&["https://x;script-src *"]);
        assert!(injected.contains("form-action 'self';"), "{injected}");
        assert!(!injected.contains("script-src"), "{injected}");
        let two = content_security_policy(&["https://a.example", "http://127.0.0.1:4000"]);
        assert!(two.contains("form-action 'self' https://a.example http://127.0.0.1:4000;"));
    }

    #[test]
    fn the_style_hash_is_the_stylesheets() {
        // Recomputed here the way a browser does: SHA-256 of the `<style>` element's text.
        let expected = format!(
            "'sha256-{}'",
            STANDARD.encode(Sha256::digest(STYLESHEET.as_bytes()))
        );
        assert_eq!(style_hash(), expected);
        assert!(content_security_policy(&[]).contains(&format!("style-src {expected};")));
    }
}
