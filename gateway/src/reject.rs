//! The one place where a refused or failed request becomes an HTTP response: status, headers and
//! a short JSON body a client can read.

use bytes::Bytes;
use serde_json::json;

use crate::{
    auth::AuthFailure,
    limit::{self, Class, Decision, Policy},
    logging,
    mcp::{self, Malformed, Mismatch},
    policy::Denial,
};

/// Every way the gateway answers instead of the upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    Unauthorized(AuthFailure),
    OriginForbidden,
    PayloadTooLarge {
        limit: u64,
    },
    NotFound,
    MethodNotAllowed {
        allow: &'static str,
    },
    UpstreamUnavailable,
    UpstreamTimeout,
    NotReady,
    /// The body is not one JSON-RPC message; `id` is the request's id as JSON text, if known.
    Malformed(Malformed),
    /// `Mcp-Method` / `Mcp-Name` contradict the body.
    HeaderMismatch {
        mismatch: Mismatch,
        id: String,
    },
    /// The policy refuses the message.
    Forbidden(Denial),
    /// An `Mcp-Session-Id` this principal did not open (answered as if unknown).
    SessionNotFound,
    /// Over a rate limit; `oauth` selects the OAuth error format.
    RateLimited {
        class: Class,
        policy: Policy,
        decision: Decision,
        oauth: bool,
    },
    /// A principal holds as many sessions or SSE streams as it may (`limits.<limit>`).
    TooManyOpen {
        what: Open,
        max: u32,
    },
    /// A static token limited to other routes (`token create --route`).
    RouteForbidden,
    Internal,
}

/// What a principal holds too many of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    Sessions,
    Streams,
}

impl Open {
    /// The config key of the bound.
    pub fn limit(self) -> &'static str {
        match self {
            Self::Sessions => "limits.sessions_per_principal",
            Self::Streams => "limits.streams_per_principal",
        }
    }
}

/// Seconds a client is told to wait when it holds too many sessions or streams.
const TOO_MANY_OPEN_RETRY_SECS: u32 = 10;

/// A response ready to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

impl Reply {
    /// A JSON reply with no extra headers.
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".to_owned())],
            body: Bytes::from(value.to_string()),
        }
    }
}

impl Rejection {
    /// A short, stable code for the audit log.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unauthorized(AuthFailure::InsufficientScope(_)) => "insufficient_scope",
            Self::Unauthorized(AuthFailure::Unavailable) => "unavailable",
            Self::Unauthorized(_) => "unauthenticated",
            Self::OriginForbidden => "origin_forbidden",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::UpstreamUnavailable => "upstream_unavailable",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::NotReady => "not_ready",
            Self::Malformed(_) => "malformed",
            Self::HeaderMismatch { .. } => "header_mismatch",
            Self::Forbidden(denial) => denial.reason(),
            Self::SessionNotFound => "session_foreign",
            Self::RateLimited { .. } => "rate_limited",
            Self::TooManyOpen {
                what: Open::Sessions,
                ..
            } => "too_many_sessions",
            Self::TooManyOpen {
                what: Open::Streams,
                ..
            } => "too_many_streams",
            Self::RouteForbidden => "route_forbidden",
            Self::Internal => "internal",
        }
    }

    /// Renders the rejection. `resource_metadata` is the RFC 9728 URL for `WWW-Authenticate`.
    pub fn reply(&self, resource_metadata: &str, request_id: &str) -> Reply {
        let (status, error, message) = match self {
            Self::Unauthorized(failure) => {
                return unauthorized(failure, resource_metadata, request_id);
            }
            Self::RateLimited {
                class,
                policy,
                decision,
                oauth,
            } => {
                let retry = decision.retry_after_ms.div_ceil(1000).max(1);
                let body = if *oauth {
                    json!({"error": "temporarily_unavailable", "error_description": format!("too many requests; retry in {retry} s")})
                } else {
                    json!({"error": "rate_limited", "message": format!("too many requests for {}; retry in {retry} s", class.name()), "retry_after": retry, "request_id": request_id})
                };
                let mut reply = Reply::json(429, &body);
                reply.headers.push(("retry-after", retry.to_string()));
                reply
                    .headers
                    .extend(limit::headers(*class, *policy, decision));
                return reply;
            }
            Self::OriginForbidden => (
                403,
                "forbidden_origin",
                "this Origin may not call the MCP endpoint".to_owned(),
            ),
            Self::PayloadTooLarge { limit } => (
                413,
                "payload_too_large",
                format!("request bodies are limited to {limit} bytes"),
            ),
            Self::NotFound => (404, "not_found", "no such endpoint".to_owned()),
            Self::Malformed(why) => {
                return jsonrpc_error(400, "null", why.code(), &why.to_string());
            }
            Self::HeaderMismatch { mismatch, id } => {
                let message = format!("header mismatch: {mismatch}");
                return jsonrpc_error(400, id, mcp::HEADER_MISMATCH, &message);
            }
            Self::SessionNotFound => {
                return jsonrpc_error(404, "null", -32001, "Session not found");
            }
            Self::TooManyOpen { what, max } => {
                let (thing, how) = match what {
                    Open::Sessions => ("MCP sessions", "end one (DELETE /mcp)"),
                    Open::Streams => ("SSE streams", "close one"),
                };
                let body = json!({"jsonrpc": "2.0", "id": null, "error": {
                    "code": -32000,
                    "message": format!("too many open {thing} for this principal (at most {max}, {}); {how} or retry later", what.limit()),
                    "data": {"limit": what.limit(), "max": max, "request_id": request_id},
                }});
                let mut reply = Reply::json(429, &body);
                reply
                    .headers
                    .push(("retry-after", TOO_MANY_OPEN_RETRY_SECS.to_string()));
                return reply;
            }
            Self::Forbidden(denial) => return forbidden(denial, resource_metadata, request_id),
            Self::MethodNotAllowed { allow } => {
                let mut reply = Reply::json(
                    405,
                    &json!({"error": "method_not_allowed", "message": format!("allowed: {allow}"), "request_id": request_id}),
                );
                reply.headers.push(("allow", (*allow).to_owned()));
                return reply;
            }
            Self::UpstreamUnavailable => (
                502,
                "upstream_unavailable",
                "the MCP service is not reachable".to_owned(),
            ),
            Self::UpstreamTimeout => (
                504,
                "upstream_timeout",
                "the MCP service did not answer in time".to_owned(),
            ),
            Self::NotReady => (
                503,
                "not_ready",
                "the MCP service is not reachable".to_owned(),
            ),
            Self::RouteForbidden => (
                403,
                "route_forbidden",
                "this token is limited to other routes (pforte token create --route)".to_owned(),
            ),
            Self::Internal => (
                500,
                "internal_error",
                "the gateway failed; see its log for the request id".to_owned(),
            ),
        };
        Reply::json(
            status,
            &json!({"error": error, "message": message, "request_id": request_id}),
        )
    }
}

/// A JSON-RPC error answer: `id` is JSON text (`null` when the request's id is unknown).
fn jsonrpc_error(status: u16, id: &str, code: i64, message: &str) -> Reply {
    let id: serde_json::Value = serde_json::from_str(id).unwrap_or(serde_json::Value::Null);
    Reply::json(
        status,
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    )
}

/// A value for a quoted-string parameter of `WWW-Authenticate`: only RFC 6750's characters for
/// `error_description` and `scope` (`%x20-21 / %x23-5B / %x5D-7E`), so no quote or backslash
/// ever needs escaping; anything else becomes `?`.
fn quoted(value: &str) -> String {
    let safe: String = value
        .chars()
        .map(|c| match c {
            ' ' | '!' | '#'..='[' | ']'..='~' => c,
            _ => '?',
        })
        .collect();
    format!("\"{safe}\"")
}

/// The challenge for a call beyond the principal's scopes: every scope the call needs, so a
/// client can step up in one re-authorization (RFC 6750 §3.1, MCP 2025-11-25).
fn step_up_challenge(resource_metadata: &str, needed: &str) -> String {
    format!(
        "Bearer error=\"insufficient_scope\", scope={}, resource_metadata={}",
        quoted(needed),
        quoted(resource_metadata)
    )
}

fn forbidden(denial: &Denial, resource_metadata: &str, request_id: &str) -> Reply {
    match denial {
        Denial::InsufficientScope {
            needed,
            missing,
            tool,
        } => {
            let needed = needed.join(" ");
            let missing = missing.join(" ");
            // The client's name for the tool, cut: a refusal is never larger than a few lines.
            let tool = tool
                .as_deref()
                .map(|t| logging::clip(t, logging::MAX_NAME_BYTES));
            let message = match &tool {
                Some(tool) => format!("calling {tool} needs scope {missing}"),
                None => format!("this request needs scope {missing}"),
            };
            let mut reply = Reply::json(
                403,
                &json!({"error": "insufficient_scope", "scope": needed, "missing_scope": missing, "tool": tool, "message": message, "request_id": request_id}),
            );
            reply.headers.push((
                "www-authenticate",
                step_up_challenge(resource_metadata, &needed),
            ));
            reply
        }
        Denial::ToolDenied(tool) | Denial::UserNotAllowed(tool) => {
            let tool = logging::clip(tool, logging::MAX_NAME_BYTES);
            Reply::json(
                403,
                &json!({"error": "forbidden", "reason": denial.reason(), "tool": tool, "message": format!("the tool {tool} is not available to this principal"), "request_id": request_id}),
            )
        }
    }
}

fn unauthorized(failure: &AuthFailure, resource_metadata: &str, request_id: &str) -> Reply {
    let mut challenge = format!("Bearer resource_metadata={}", quoted(resource_metadata));
    match failure {
        AuthFailure::InsufficientScope(scope) => {
            let challenge = step_up_challenge(resource_metadata, scope);
            let mut reply = Reply::json(
                403,
                &json!({"error": "insufficient_scope", "scope": scope, "request_id": request_id}),
            );
            reply.headers.push(("www-authenticate", challenge));
            return reply;
        }
        AuthFailure::Unavailable => {
            let mut reply = Reply::json(
                503,
                &json!({"error": "temporarily_unavailable", "message": "credentials cannot be checked right now", "request_id": request_id}),
            );
            reply.headers.push(("retry-after", "5".to_owned()));
            return reply;
        }
        _ => {}
    }
    // RFC 6750 §3: no error code when the request carried no credentials at all.
    let (code, description) = match failure {
        AuthFailure::Missing => (None, "a bearer token is required".to_owned()),
        AuthFailure::Malformed(why) => (Some("invalid_request"), (*why).to_owned()),
        AuthFailure::Invalid => (
            Some("invalid_token"),
            "the token is unknown or revoked".to_owned(),
        ),
        AuthFailure::Expired => (Some("invalid_token"), "the token expired".to_owned()),
        AuthFailure::OtherResource => (
            Some("invalid_token"),
            "token is for another resource".to_owned(),
        ),
        AuthFailure::InsufficientScope(_) | AuthFailure::Unavailable => {
            (Some("invalid_token"), failure.to_string())
        }
    };
    if let Some(code) = code {
        challenge.push_str(&format!(
            ", error=\"{code}\", error_description={}",
            quoted(&description)
        ));
    }
    let mut reply = Reply::json(
        401,
        &json!({
            "error": code.unwrap_or("unauthorized"),
            "error_description": description,
            "request_id": request_id,
        }),
    );
    reply.headers.push(("www-authenticate", challenge));
    reply.headers.push(("cache-control", "no-store".to_owned()));
    reply
}

#[cfg(test)]
mod tests {
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
        let r = Rejection::Unauthorized(AuthFailure::Missing).reply(RM, "r");
        assert_eq!(r.status, 401);
        assert_eq!(
            header(&r, "www-authenticate"),
            Some(format!("Bearer resource_metadata=\"{RM}\"").as_str())
        );
    }

    #[test]
    fn bad_tokens_say_invalid_token_or_invalid_request() {
        let r = Rejection::Unauthorized(AuthFailure::Invalid).reply(RM, "r");
        assert!(
            header(&r, "www-authenticate").is_some_and(|h| h.contains("error=\"invalid_token\""))
        );
        let r = Rejection::Unauthorized(AuthFailure::Malformed("x")).reply(RM, "r");
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
        let mut rejections: Vec<Rejection> =
            failures.into_iter().map(Rejection::Unauthorized).collect();
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
}
