//! Tests of the metrics: the label mappings, bounded tool names, stream guards and the
//! exposition text.
#![allow(clippy::unwrap_used)]

use super::tool_names::{MAX_TOOL_LABEL_BYTES, MAX_TOOL_SERIES};
use super::*;
use crate::auth::{self, AuthFailure, Principal};

fn series(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn methods_and_statuses_fold_into_classes() {
    assert_eq!(method_class(&http::Method::GET), MethodClass::Get);
    assert_eq!(method_class(&http::Method::POST), MethodClass::Post);
    assert_eq!(method_class(&http::Method::DELETE), MethodClass::Delete);
    assert_eq!(method_class(&http::Method::OPTIONS), MethodClass::Options);
    assert_eq!(method_class(&http::Method::HEAD), MethodClass::Other);
    assert_eq!(method_class(&http::Method::PUT), MethodClass::Other);
    assert_eq!(status_class(101), StatusClass::Informational);
    assert_eq!(status_class(200), StatusClass::Success);
    assert_eq!(status_class(302), StatusClass::Redirection);
    assert_eq!(status_class(401), StatusClass::ClientError);
    assert_eq!(status_class(429), StatusClass::ClientError);
    assert_eq!(status_class(504), StatusClass::ServerError);
    assert_eq!(status_class(0), StatusClass::None);
    assert_eq!(status_class(999), StatusClass::None);
}

#[test]
fn auth_outcomes_map_from_the_failure() {
    assert_eq!(credential_kind(None), CredentialKind::None);
    assert_eq!(credential_kind(Some("pft_abc")), CredentialKind::Static);
    assert_eq!(credential_kind(Some("pfa_abc")), CredentialKind::OAuth);
    let principal = Principal {
        subject: "alice".into(),
        client: "c".into(),
        client_name: None,
        kind: auth::AuthKind::OAuth,
        scopes: vec![],
        binding: auth::Binding::Any,
    };
    assert_eq!(auth_reason(&Ok(principal)), AuthReason::Ok);
    for (failure, reason) in [
        (AuthFailure::Missing, AuthReason::Missing),
        (AuthFailure::Malformed("x"), AuthReason::Malformed),
        (AuthFailure::Invalid, AuthReason::Invalid),
        (AuthFailure::Expired, AuthReason::Expired),
        (
            AuthFailure::InsufficientScope("mcp:write".into()),
            AuthReason::InsufficientScope,
        ),
        (AuthFailure::Unavailable, AuthReason::Unavailable),
    ] {
        assert_eq!(auth_reason(&Err(failure)), reason);
    }
}

#[test]
fn upstream_failures_are_classified_and_others_ignored() {
    use pingora::{Error, ErrorType};
    let up = |t| Error::new(t).into_up();
    assert_eq!(
        upstream_failure(&up(ErrorType::ConnectRefused)),
        Some(UpstreamFailure::Connect)
    );
    assert_eq!(
        upstream_failure(&up(ErrorType::ConnectTimedout)),
        Some(UpstreamFailure::Timeout)
    );
    assert_eq!(
        upstream_failure(&up(ErrorType::ReadTimedout)),
        Some(UpstreamFailure::Timeout)
    );
    assert_eq!(
        upstream_failure(&up(ErrorType::ConnectionClosed)),
        Some(UpstreamFailure::Other)
    );
    assert_eq!(
        upstream_failure(&Error::new(ErrorType::ConnectionClosed).into_down()),
        None
    );
    assert_eq!(
        upstream_failure(&Error::new(ErrorType::HTTPStatus(413))),
        None
    );
}

#[test]
fn tool_decisions_come_from_the_refusal() {
    assert_eq!(tool_decision(None), ToolDecision::Allowed);
    assert_eq!(
        tool_decision(Some("upstream_timeout")),
        ToolDecision::Allowed
    );
    assert_eq!(tool_decision(Some("rate_limited")), ToolDecision::Budget);
    assert_eq!(
        tool_decision(Some("insufficient_scope")),
        ToolDecision::Denied
    );
    assert_eq!(tool_decision(Some("header_mismatch")), ToolDecision::Denied);
}

#[test]
fn every_oauth_event_has_one_label() {
    assert_eq!(oauth_event(Event::LoginFailed), Ok(OAuthEvent::LoginFailed));
    assert_eq!(
        oauth_event(Event::ValidationCacheHit),
        Err(CacheResult::Hit)
    );
    assert_eq!(
        oauth_event(Event::ValidationCacheMiss),
        Err(CacheResult::Miss)
    );
    let m = Metrics::new(&["mcp"]);
    m.event(Event::LoginFailed);
    m.event(Event::ValidationCacheMiss);
    let text = m.encode().unwrap();
    assert_eq!(
        series(&text, "pforte_oauth_events_total{event=\"login_failed\"}"),
        Some(1.0)
    );
    assert_eq!(
        series(&text, "pforte_oauth_events_total{event=\"refresh\"}"),
        Some(0.0)
    );
    assert_eq!(
        series(
            &text,
            "pforte_token_validation_cache_total{result=\"miss\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn tool_names_are_bounded() {
    let m = Metrics::new(&["mcp"]);
    m.tool_call(0, "werkbaum_read", true, ToolDecision::Allowed);
    m.tool_call(0, "werkbaum_read", true, ToolDecision::Allowed);
    m.tool_call(0, "made_up_by_a_client", false, ToolDecision::Denied);
    for i in 0..MAX_TOOL_SERIES + 10 {
        m.tool_call(0, &format!("t{i}"), true, ToolDecision::Budget);
    }
    let text = m.encode().unwrap();
    assert_eq!(
        series(
            &text,
            "pforte_tool_calls_total{route=\"mcp\",tool=\"werkbaum_read\",decision=\"allowed\"}"
        ),
        Some(2.0)
    );
    assert!(!text.contains("made_up_by_a_client"));
    assert_eq!(
        series(
            &text,
            "pforte_tool_calls_total{route=\"mcp\",tool=\"other\",decision=\"denied\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        series(
            &text,
            "pforte_tool_calls_total{route=\"mcp\",tool=\"other\",decision=\"budget\"}"
        ),
        Some(11.0)
    );
    let names = text
        .lines()
        .filter(|l| l.starts_with("pforte_tool_calls_total{") && l.contains("\"allowed\""))
        .count();
    assert_eq!(names, MAX_TOOL_SERIES + 1);
}

#[test]
fn one_routes_catalog_cannot_take_another_routes_series_and_names_are_clipped() {
    let m = Metrics::new(&["mcp", "evil"]);
    for i in 0..300 {
        let long = format!("{i}-{}", "x".repeat(2000));
        m.tool_call(1, &long, true, ToolDecision::Denied);
    }
    m.tool_call(0, "werkbaum_inspect", true, ToolDecision::Allowed);
    let text = m.encode().unwrap();
    assert_eq!(
        series(
            &text,
            "pforte_tool_calls_total{route=\"mcp\",tool=\"werkbaum_inspect\",decision=\"allowed\"}"
        ),
        Some(1.0)
    );
    let evil = text
        .lines()
        .filter(|l| {
            l.starts_with("pforte_tool_calls_total{route=\"evil\"") && l.contains("\"denied\"")
        })
        .count();
    assert_eq!(evil, tool_budget(2) + 1, "the budget and `other`");
    assert!(
        text.lines()
            .all(|l| l.len() < 2 * MAX_TOOL_LABEL_BYTES + 100)
    );
    assert!(text.len() < 200_000, "{} bytes", text.len());
    assert_eq!(tool_label(&"ü".repeat(200)).len(), MAX_TOOL_LABEL_BYTES - 1);
}

#[test]
fn open_streams_return_to_zero_when_their_guards_drop() {
    let m = Metrics::new(&["mcp"]);
    let a = m.stream_opened();
    let b = m.stream_opened();
    assert_eq!(
        series(&m.encode().unwrap(), "pforte_sse_streams_open "),
        Some(2.0)
    );
    drop(a);
    drop(b);
    assert_eq!(
        series(&m.encode().unwrap(), "pforte_sse_streams_open "),
        Some(0.0)
    );
}

#[test]
fn the_text_is_prometheus_exposition() {
    let m = Metrics::new(&["mcp"]);
    m.request(
        RouteLabel::Mcp,
        Some(0),
        MethodClass::Post,
        200,
        Duration::from_millis(3),
    );
    m.auth(CredentialKind::None, AuthReason::Missing);
    m.upstream_first_byte(Some(0), Duration::from_millis(1));
    m.ratelimit().refusals.inc();
    let text = m.encode().unwrap();
    assert_eq!(
        series(
            &text,
            "pforte_http_requests_total{endpoint=\"mcp\",route=\"mcp\",method=\"POST\",status=\"2xx\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        series(&text, "pforte_auth_total{kind=\"none\",reason=\"missing\"}"),
        Some(1.0)
    );
    assert_eq!(series(&text, "pforte_ratelimit_degraded "), Some(0.0));
    assert_eq!(
        series(
            &text,
            &format!(
                "pforte_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        ),
        Some(1.0)
    );
    assert!(series(&text, "process_resident_memory_bytes ").is_some_and(|v| v > 0.0));
    assert!(series(&text, "process_cpu_seconds_total ").is_some());
    assert!(series(&text, "process_open_fds ").is_some_and(|v| v > 0.0));
    assert!(
        series(
            &text,
            "pforte_upstream_errors_total{route=\"mcp\",kind=\"connect\"}"
        )
        .is_some()
    );
    assert_eq!(series(&text, "pforte_ratelimit_refusals_total "), Some(1.0));
    assert!(
        text.contains(
            "pforte_http_request_duration_seconds_bucket{endpoint=\"mcp\",route=\"mcp\",le=\"0.005\"} 1"
        ),
        "{text}"
    );
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
        let bare = name.split('{').next().unwrap();
        assert!(
            bare.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "{line}"
        );
    }
}
