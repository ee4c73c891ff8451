//! Every answer the gateway makes itself, and the one place that writes answers to the client:
//! refusals and failures (`Rejection`, each variant one status), the built-in endpoints'
//! `Reply`s, and the authorization server's responses passed through.

use bytes::Bytes;
use pingora::{Error, ErrorSource, ErrorType, http::ResponseHeader, proxy::Session};
use serde_json::json;

use crate::{
    auth::AuthFailure,
    cors, forward,
    limit::{self, Class, Decision, Policy},
    logging,
    mcp::{self, Malformed, Mismatch},
    policy::Denial,
};

/// Every way the gateway answers instead of the upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// No usable credential (401): missing, malformed, unknown, expired, another resource's.
    Unauthenticated(AuthFailure),
    /// A valid credential without a scope every request needs (403, a step-up challenge).
    InsufficientScope(String),
    /// Credentials or session records cannot be checked right now (503).
    CredentialsUnavailable,
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
    /// The body is not one JSON-RPC message; `id` is the request's id as JSON text, if known.
    Malformed(Malformed),
    /// `Mcp-Method` / `Mcp-Name` contradict the body.
    HeaderMismatch {
        mismatch: Mismatch,
        id: String,
    },
    /// `MCP-Protocol-Version` names a revision the gateway does not implement.
    UnsupportedVersion {
        requested: String,
        id: String,
    },
    /// The policy refuses the message.
    Forbidden(Denial),
    /// A call held for a person's approval by the `[[policy]]` rule `rule`: the JSON-RPC
    /// answer with the approval link (`approvals/answer.rs`; 200), or `Null` for a
    /// notification (202).
    Held {
        answer: Box<serde_json::Value>,
        rule: String,
    },
    /// A `[[policy]]` rule refuses the message or holds it for approval (403).
    PolicyRule(RuleRefusal),
    /// An `Mcp-Session-Id` this principal did not open (answered as if unknown).
    SessionNotFound,
    /// A task id (`tasks/get|update|cancel`) this principal did not create on this route, or
    /// one the gateway never saw created: answered like a foreign session (404), with the
    /// JSON-RPC error SEP-2663 gives for a task not found.
    TaskNotFound {
        id: String,
    },
    /// The creator's task request on a route with several instances whose instance holding the
    /// task is gone (down, no longer configured, not the session's): answered as not found, like
    /// [`Rejection::TaskNotFound`], never asked of another instance.
    TaskUnreachable {
        id: String,
    },
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
    /// The vault or the upstream's authorization server did not answer (503).
    UpstreamCredentialUnavailable,
    /// `Upgrade` / `Connection: upgrade` on an MCP route: no tunnel past the admission (400).
    UpgradeRefused,
    /// A request head the gateway cannot read as HTTP/1.1 (400).
    BadRequest,
    Internal,
}

/// What a principal holds too many of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    Sessions,
    Streams,
}

impl Open {
    /// The config key of the bound.
    pub(crate) fn limit(self) -> &'static str {
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
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Bytes,
}

impl Reply {
    /// A JSON reply with no extra headers.
    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".to_owned())],
            body: Bytes::from(value.to_string()),
        }
    }

    /// A reply with no body.
    pub(crate) fn empty(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// `body` as it is, of type `content_type`.
    pub(crate) fn bytes(status: u16, content_type: &str, body: Bytes) -> Self {
        Self {
            status,
            headers: vec![("content-type", content_type.to_owned())],
            body,
        }
    }

    /// The reply with one more header.
    pub(crate) fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// What frames every answer the gateway writes itself: the request id, and the CORS headers of
/// an allowed foreign origin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Framing<'a> {
    pub(crate) request_id: &'a str,
    pub(crate) cors_origin: Option<&'a str>,
}

/// Writes `reply` to the client, framed: its length, the request id, CORS headers.
pub(crate) async fn write(
    session: &mut Session,
    reply: Reply,
    framing: Framing<'_>,
) -> pingora::Result<()> {
    let mut resp = ResponseHeader::build(reply.status, Some(reply.headers.len() + 6))?;
    for (name, value) in &reply.headers {
        resp.insert_header(*name, value.as_str())?;
    }
    if let Some(origin) = framing.cors_origin {
        for (name, value) in cors::response_headers(origin) {
            resp.insert_header(name, value)?;
        }
    }
    resp.insert_header("content-length", reply.body.len().to_string())?;
    resp.insert_header(forward::header::REQUEST_ID, framing.request_id)?;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(reply.body), true).await?;
    Ok(())
}

/// Writes the authorization server's `response` to the client as it is (every header line,
/// `Set-Cookie` included), with its length and the request id.
pub(crate) async fn write_passed(
    session: &mut Session,
    response: http::Response<Bytes>,
    request_id: &str,
) -> pingora::Result<()> {
    let (parts, body) = response.into_parts();
    let mut resp = ResponseHeader::build(parts.status, Some(parts.headers.len() + 2))?;
    for (name, value) in &parts.headers {
        if name != http::header::CONTENT_LENGTH {
            resp.append_header(name.clone(), value.clone())?;
        }
    }
    resp.insert_header("content-length", body.len().to_string())?;
    resp.insert_header(forward::header::REQUEST_ID, request_id)?;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await?;
    Ok(())
}

impl From<AuthFailure> for Rejection {
    fn from(failure: AuthFailure) -> Self {
        match failure {
            AuthFailure::InsufficientScope(scope) => Self::InsufficientScope(scope),
            AuthFailure::Unavailable => Self::CredentialsUnavailable,
            other => Self::Unauthenticated(other),
        }
    }
}

impl Rejection {
    /// What the client is told when proxying fails with `e` (`None`: the client went away or
    /// sent garbage; nobody is listening). `max_body_bytes` names the limit a 413 reports.
    pub(crate) fn from_proxy_error(e: &Error, max_body_bytes: u64) -> Option<Self> {
        match e.etype() {
            ErrorType::HTTPStatus(413) => Some(Self::PayloadTooLarge {
                limit: max_body_bytes,
            }),
            ErrorType::ConnectTimedout => Some(Self::UpstreamTimeout),
            ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                Some(Self::UpstreamTimeout)
            }
            _ => match e.esource() {
                ErrorSource::Upstream => Some(Self::UpstreamUnavailable),
                ErrorSource::Downstream => None,
                ErrorSource::Internal | ErrorSource::Unset => Some(Self::Internal),
            },
        }
    }

    /// A short, stable code for the audit log.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::InsufficientScope(_) => "insufficient_scope",
            Self::CredentialsUnavailable => "unavailable",
            Self::Unauthenticated(_) => "unauthenticated",
            Self::OriginForbidden => "origin_forbidden",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::UpstreamUnavailable => "upstream_unavailable",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::Malformed(_) => "malformed",
            Self::HeaderMismatch { .. } => "header_mismatch",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::Forbidden(denial) => denial.reason(),
            Self::Held { .. } => "approval_required",
            Self::PolicyRule(refusal) => refusal.reason,
            Self::SessionNotFound => "session_foreign",
            Self::TaskNotFound { .. } => "task_foreign",
            Self::TaskUnreachable { .. } => "task_unreachable",
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
            Self::UpstreamCredentialUnavailable => "upstream_credential_unavailable",
            Self::UpgradeRefused => "upgrade_refused",
            Self::BadRequest => "bad_request",
            Self::Internal => "internal",
        }
    }

    /// Renders the rejection. `resource_metadata` is the RFC 9728 URL for `WWW-Authenticate`.
    pub(crate) fn reply(&self, resource_metadata: &str, request_id: &str) -> Reply {
        let (status, error, message) = match self {
            Self::Unauthenticated(failure) => {
                return unauthenticated(failure, resource_metadata, request_id);
            }
            Self::InsufficientScope(scope) => {
                let mut reply = Reply::json(
                    403,
                    &json!({"error": "insufficient_scope", "scope": scope, "request_id": request_id}),
                );
                let challenge = step_up_challenge(resource_metadata, scope);
                reply.headers.push(("www-authenticate", challenge));
                return reply;
            }
            Self::CredentialsUnavailable => {
                let mut reply = Reply::json(
                    503,
                    &json!({"error": "temporarily_unavailable", "message": "credentials cannot be checked right now", "request_id": request_id}),
                );
                reply.headers.push(("retry-after", "5".to_owned()));
                return reply;
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
            Self::UpgradeRefused => (
                400,
                "upgrade_refused",
                "protocol upgrades (Upgrade, Connection: upgrade) are not relayed on MCP routes"
                    .to_owned(),
            ),
            Self::BadRequest => (
                400,
                "bad_request",
                "the request head is not valid HTTP/1.1".to_owned(),
            ),
            Self::Malformed(why) => {
                return jsonrpc_error(400, "null", why.code(), &why.to_string());
            }
            Self::HeaderMismatch { mismatch, id } => {
                let message = format!("header mismatch: {mismatch}");
                return jsonrpc_error(400, id, mcp::HEADER_MISMATCH, &message);
            }
            Self::UnsupportedVersion { requested, id } => {
                let id: serde_json::Value =
                    serde_json::from_str(id).unwrap_or(serde_json::Value::Null);
                return Reply::json(
                    400,
                    &json!({"jsonrpc": "2.0", "id": id, "error": {
                        "code": mcp::UNSUPPORTED_PROTOCOL_VERSION,
                        "message": "Unsupported protocol version",
                        "data": {"supported": mcp::SUPPORTED_VERSIONS, "requested": requested},
                    }}),
                );
            }
            Self::SessionNotFound => {
                return jsonrpc_error(404, "null", -32001, "Session not found");
            }
            Self::TaskNotFound { id } | Self::TaskUnreachable { id } => {
                return jsonrpc_error(404, id, -32602, "Task not found");
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
            Self::Held { answer, .. } if answer.is_null() => return Reply::empty(202),
            Self::Held { answer, .. } => return Reply::json(200, answer),
            Self::PolicyRule(refusal) => return refusal.reply(request_id),
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
            Self::RouteForbidden => (
                403,
                "route_forbidden",
                "this token is limited to other routes (pforte token create --route)".to_owned(),
            ),
            Self::UpstreamCredentialUnavailable => (
                503,
                "upstream_credential_unavailable",
                "the upstream credential cannot be read or refreshed right now; try again"
                    .to_owned(),
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
                &json!({"error": "forbidden", "reason": denial.reason(), "tool": tool, "message": format!("{tool} is not available to this principal"), "request_id": request_id}),
            )
        }
        Denial::ToolHeld { tool, message } => Reply::json(
            403,
            &json!({"error": "forbidden", "reason": denial.reason(), "tool": logging::clip(tool, logging::MAX_NAME_BYTES), "message": message, "request_id": request_id}),
        ),
    }
}

fn unauthenticated(failure: &AuthFailure, resource_metadata: &str, request_id: &str) -> Reply {
    let mut challenge = format!("Bearer resource_metadata={}", quoted(resource_metadata));
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
        // `Rejection::from` gives these their own variants; named here for completeness.
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

pub(crate) mod events;
mod rule;
#[cfg(test)]
mod tests;

pub(crate) use rule::RuleRefusal;
