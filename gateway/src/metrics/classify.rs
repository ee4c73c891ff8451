//! How the gateway's events map to label values: a request's method and status, a credential,
//! an authentication's end, an upstream failure, a `tools/call` decision, an OAuth event — pure.

use pforte_oauth::Event;

use super::{
    AuthReason, CacheResult, CredentialKind, MethodClass, OAuthEvent, StatusClass, ToolDecision,
    UpstreamFailure,
};
use crate::auth::{self, AuthFailure, Principal};

/// The authorization server's event as an `oauth_events` label, or a validation-cache result.
pub(crate) fn oauth_event(event: Event) -> Result<OAuthEvent, CacheResult> {
    Ok(match event {
        Event::ClientRegistered => OAuthEvent::Registration,
        Event::LoginSucceeded => OAuthEvent::LoginOk,
        Event::LoginFailed => OAuthEvent::LoginFailed,
        Event::LoginThrottled => OAuthEvent::LoginThrottled,
        Event::CodeIssued => OAuthEvent::CodeIssued,
        Event::TokensIssued => OAuthEvent::TokensIssued,
        Event::TokensRefreshed => OAuthEvent::Refresh,
        Event::ReuseDetected => OAuthEvent::ReuseDetected,
        Event::Revoked => OAuthEvent::Revocation,
        Event::ValidationCacheHit => return Err(CacheResult::Hit),
        Event::ValidationCacheMiss => return Err(CacheResult::Miss),
    })
}

pub(crate) fn method_class(method: &http::Method) -> MethodClass {
    match *method {
        http::Method::GET => MethodClass::Get,
        http::Method::POST => MethodClass::Post,
        http::Method::DELETE => MethodClass::Delete,
        http::Method::OPTIONS => MethodClass::Options,
        _ => MethodClass::Other,
    }
}

/// `0` (nothing written) is `none`.
pub(crate) fn status_class(status: u16) -> StatusClass {
    match status {
        100..=199 => StatusClass::Informational,
        200..=299 => StatusClass::Success,
        300..=399 => StatusClass::Redirection,
        400..=499 => StatusClass::ClientError,
        500..=599 => StatusClass::ServerError,
        _ => StatusClass::None,
    }
}

/// The kind of credential a bearer token is (by its shape; `none` without one).
pub(crate) fn credential_kind(token: Option<&str>) -> CredentialKind {
    match token {
        Some(t) if auth::looks_static(t) => CredentialKind::Static,
        Some(_) => CredentialKind::OAuth,
        None => CredentialKind::None,
    }
}

/// How an authentication ended.
pub(crate) fn auth_reason(result: &Result<Principal, AuthFailure>) -> AuthReason {
    match result {
        Ok(_) => AuthReason::Ok,
        Err(AuthFailure::Missing) => AuthReason::Missing,
        Err(AuthFailure::Malformed(_)) => AuthReason::Malformed,
        // A token for another route's resource is not valid here.
        Err(AuthFailure::Invalid | AuthFailure::OtherResource) => AuthReason::Invalid,
        Err(AuthFailure::Expired) => AuthReason::Expired,
        Err(AuthFailure::InsufficientScope(_)) => AuthReason::InsufficientScope,
        Err(AuthFailure::Unavailable) => AuthReason::Unavailable,
    }
}

/// Which upstream failure a request's error was, if it was the upstream's.
pub(crate) fn upstream_failure(e: &pingora::Error) -> Option<UpstreamFailure> {
    use pingora::{ErrorSource, ErrorType};
    if e.esource() != &ErrorSource::Upstream {
        return None;
    }
    Some(match e.etype() {
        ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout => {
            UpstreamFailure::Timeout
        }
        ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::ConnectError
        | ErrorType::BindError
        | ErrorType::SocketError
        | ErrorType::ConnectProxyFailure => UpstreamFailure::Connect,
        _ => UpstreamFailure::Other,
    })
}

/// What became of a `tools/call`, from the reason the gateway refused it (`None`: it went on to
/// the upstream). A failing upstream does not make a call denied.
pub(crate) fn tool_decision(refused: Option<&str>) -> ToolDecision {
    match refused {
        None | Some("upstream_unavailable" | "upstream_timeout") => ToolDecision::Allowed,
        Some("rate_limited") => ToolDecision::Budget,
        Some(_) => ToolDecision::Denied,
    }
}
