//! The refusals as a client reads them: statuses, challenges, bounded bodies.

use super::*;

const RM: &str = "https://gw.example/.well-known/oauth-protected-resource/mcp";

fn header<'a>(r: &'a Reply, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn missing_token_has_no_error_code() {
    let r = Rejection::Unauthenticated(AuthFailure::Missing).reply(RM, "r");
    assert_eq!(r.status, 401);
    assert_eq!(
        header(&r, "www-authenticate"),
        Some(format!("Bearer resource_metadata=\"{RM}\"").as_str())
    );
}

#[test]
fn bad_tokens_say_invalid_token_or_invalid_request() {
    let r = Rejection::Unauthenticated(AuthFailure::Invalid).reply(RM, "r");
    assert!(header(&r, "www-authenticate").is_some_and(|h| h.contains("error=\"invalid_token\"")));
    let r = Rejection::Unauthenticated(AuthFailure::Malformed("x")).reply(RM, "r");
    assert_eq!(r.status, 401);
    assert!(
        header(&r, "www-authenticate").is_some_and(|h| h.contains("error=\"invalid_request\""))
    );
}

#[test]
fn statuses() {
    for (rej, status) in [
        (Rejection::OriginForbidden, 403),
        (Rejection::PayloadTooLarge { limit: 1 }, 413),
        (Rejection::UpstreamUnavailable, 502),
        (Rejection::UpstreamTimeout, 504),
        (Rejection::NotFound, 404),
    ] {
        let r = rej.reply(RM, "rid");
        assert_eq!(r.status, status);
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        assert_eq!(body["request_id"], "rid");
    }
}

/// `Bearer` 1*SP auth-param *( "," *SP auth-param ), each `token "=" quoted-string` whose
/// content is RFC 6750's `%x20-21 / %x23-5B / %x5D-7E` (so no escapes at all).
fn strict_challenge(h: &str) -> bool {
    let Some(rest) = h.strip_prefix("Bearer ") else {
        return false;
    };
    rest.split(", ").all(|param| {
        let Some((name, value)) = param.split_once('=') else {
            return false;
        };
        let token =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let quoted = value.len() >= 2
            && value.starts_with('"')
            && value.ends_with('"')
            && value[1..value.len() - 1]
                .bytes()
                .all(|b| matches!(b, 0x20 | 0x21 | 0x23..=0x5B | 0x5D..=0x7E));
        token && quoted
    })
}

#[test]
fn refusals_name_a_bounded_piece_of_a_huge_tool_name() {
    let huge = "t".repeat(4 << 20);
    for denial in [
        Denial::InsufficientScope {
            needed: vec!["mcp:read".to_owned(), "mcp:write".to_owned()],
            missing: vec!["mcp:write".to_owned()],
            tool: Some(huge.clone()),
        },
        Denial::ToolDenied(huge.clone()),
        Denial::UserNotAllowed(huge.clone()),
    ] {
        let r = Rejection::Forbidden(denial).reply(RM, "r");
        assert_eq!(r.status, 403);
        assert!(r.body.len() < 2048, "{}", r.body.len());
    }
    let mismatch = Rejection::HeaderMismatch {
        mismatch: mcp::Mismatch::Repeated {
            header: "Mcp-Name",
            lines: 2,
        },
        id: "null".to_owned(),
    };
    let r = mismatch.reply(RM, "r");
    assert_eq!(r.status, 400);
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    assert_eq!(body["error"]["code"], mcp::HEADER_MISMATCH);
}

#[test]
fn challenges_parse_with_a_strict_grammar() {
    let failures = [
        AuthFailure::Missing,
        AuthFailure::Malformed("expected \"Bearer <token>\" \\ here"),
        AuthFailure::Invalid,
        AuthFailure::Expired,
        AuthFailure::InsufficientScope("mcp:read".to_owned()),
    ];
    let mut rejections: Vec<Rejection> = failures.into_iter().map(Rejection::from).collect();
    rejections.push(Rejection::Forbidden(Denial::InsufficientScope {
        needed: vec!["mcp:read".to_owned(), "mcp:write".to_owned()],
        missing: vec!["mcp:write".to_owned()],
        tool: Some("werkbaum_create".to_owned()),
    }));
    for rejection in rejections {
        let r = rejection.reply(
            "https://gw.example/.well-known/oauth-protected-resource/mcp\"x",
            "r",
        );
        let h = header(&r, "www-authenticate").unwrap_or_default();
        assert!(strict_challenge(h), "{rejection:?}: {h}");
    }
}

#[test]
fn upstream_failures_map_to_502_and_504() {
    use pingora::{Error, ErrorType};
    let from = |e: &Error| Rejection::from_proxy_error(e, 7);
    let refused = Error::new(ErrorType::ConnectRefused).into_up();
    assert_eq!(from(&refused), Some(Rejection::UpstreamUnavailable));
    let timeout = Error::new(ErrorType::ConnectTimedout).into_up();
    assert_eq!(from(&timeout), Some(Rejection::UpstreamTimeout));
    let read = Error::new(ErrorType::ReadTimedout).into_up();
    assert_eq!(from(&read), Some(Rejection::UpstreamTimeout));
    let gone = Error::new(ErrorType::ConnectionClosed).into_down();
    assert_eq!(from(&gone), None);
    let large = Error::new(ErrorType::HTTPStatus(413));
    assert_eq!(from(&large), Some(Rejection::PayloadTooLarge { limit: 7 }));
}

#[test]
fn every_rejection_has_one_status() {
    let cases = [
        (Rejection::from(AuthFailure::Missing), 401),
        (Rejection::from(AuthFailure::Expired), 401),
        (Rejection::from(AuthFailure::OtherResource), 401),
        (
            Rejection::from(AuthFailure::InsufficientScope("mcp".to_owned())),
            403,
        ),
        (Rejection::from(AuthFailure::Unavailable), 503),
        (Rejection::OriginForbidden, 403),
        (Rejection::RouteForbidden, 403),
        (Rejection::UpgradeRefused, 400),
        (Rejection::BadRequest, 400),
        (Rejection::UpstreamCredentialUnavailable, 503),
        (Rejection::SessionNotFound, 404),
        (Rejection::TaskNotFound { id: "7".into() }, 404),
        (Rejection::TaskUnreachable { id: "7".into() }, 404),
        (Rejection::MethodNotAllowed { allow: "GET" }, 405),
        (
            Rejection::PolicyRule(RuleRefusal {
                rule: "r".into(),
                message: String::new(),
                reason: "policy_denied",
                structured: Some("7".into()),
            }),
            403,
        ),
        (Rejection::Internal, 500),
    ];
    for (rejection, status) in cases {
        assert_eq!(rejection.reply(RM, "r").status, status, "{rejection:?}");
    }
    assert_eq!(
        Rejection::from(AuthFailure::Unavailable).reason(),
        "unavailable"
    );
    assert_eq!(
        Rejection::from(AuthFailure::InsufficientScope("mcp".to_owned())).reason(),
        "insufficient_scope"
    );
}

#[test]
fn a_rule_refusal_names_the_rule_in_either_shape() {
    let refusal = RuleRefusal {
        rule: "no-secret-docs".into(),
        message: String::new(),
        reason: "approval_required",
        structured: None,
    };
    let plain = Rejection::PolicyRule(refusal.clone());
    assert_eq!(plain.reason(), "approval_required");
    let body: serde_json::Value =
        serde_json::from_slice(&plain.reply(RM, "rid").body).unwrap_or_default();
    assert_eq!(body["rule"], "no-secret-docs");
    assert_eq!(
        body["message"],
        "this call needs a person's approval (policy rule no-secret-docs)"
    );
    let modern = Rejection::PolicyRule(RuleRefusal {
        structured: Some("\"a\"".into()),
        ..refusal
    });
    let r = modern.reply(RM, "rid");
    assert_eq!(r.status, 403);
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    assert_eq!(body["id"], "a");
    assert_eq!(body["error"]["code"], -32003);
    assert_eq!(
        body["error"]["data"]["authorization"]["reason"],
        "insufficient_authorization"
    );
    assert_eq!(body["error"]["data"]["rule"], "no-secret-docs");
}
