//! The headers every page is served with: its type, the one CSP, never cached, never framed,
//! never sniffed, no referrer. The authorization server and the gateway both send these.

use crate::content_security_policy;

/// `(name, value)` of each header (lower-case names); `form_action_origins` as in
/// [`content_security_policy`].
pub fn headers(form_action_origins: &[&str]) -> [(&'static str, String); 6] {
    [
        ("content-type", "text/html; charset=utf-8".to_owned()),
        (
            "content-security-policy",
            content_security_policy(form_action_origins),
        ),
        ("cache-control", "no-store".to_owned()),
        ("x-frame-options", "DENY".to_owned()),
        ("x-content-type-options", "nosniff".to_owned()),
        ("referrer-policy", "no-referrer".to_owned()),
    ]
}
