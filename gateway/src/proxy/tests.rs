//! The phases' plain decisions: targets, balanced instances, keep-alive, what is logged.

use pingora::{Error, ErrorType};

use super::{
    builtin::{RouteHealth, Target, readiness},
    is_client_side, keepalive,
    upstream::{instances_of, upstream_of},
};
use crate::{config::Settings, metrics::RouteLabel};

fn settings() -> Settings {
    let text = "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[[routes]]\nname = \"plans\"\nurl = \"http://127.0.0.1:2/mcp\"";
    match toml::from_str::<crate::config::GatewayConfig>(text).map(|c| c.validate()) {
        Ok(Ok(s)) => s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_route_with_several_urls_is_balanced_over_its_instances() {
    let text = "[[routes]]\nname = \"plans\"\nurls = [\"http://127.0.0.1:2/mcp\", \"http://127.0.0.1:3/base/mcp\"]\n[[routes]]\nname = \"one\"\nurls = [\"http://127.0.0.1:4/mcp\"]\n[[routes]]\nname = \"plain\"\nurl = \"http://127.0.0.1:5/mcp\"";
    let s = match toml::from_str::<crate::config::GatewayConfig>(text).map(|c| c.validate()) {
        Ok(Ok(s)) => s,
        other => panic!("{other:?}"),
    };
    let Ok(Some(plans)) = instances_of(&s.routes[0]) else {
        panic!("plans is balanced");
    };
    let urls: Vec<&str> = plans.all().iter().map(|i| i.url.as_str()).collect();
    assert_eq!(
        urls,
        ["http://127.0.0.1:2/mcp", "http://127.0.0.1:3/base/mcp"]
    );
    // One instance, or one url: nothing to balance.
    assert!(matches!(instances_of(&s.routes[1]), Ok(None)));
    assert!(matches!(instances_of(&s.routes[2]), Ok(None)));
    // Each instance brings its own authority and path; no instance means the first.
    assert_eq!(upstream_of(&s.routes[0], Some(1)).authority, "127.0.0.1:3");
    assert_eq!(upstream_of(&s.routes[0], Some(1)).path, "/base/mcp");
    assert_eq!(upstream_of(&s.routes[0], None).authority, "127.0.0.1:2");
    assert_eq!(upstream_of(&s.routes[0], Some(9)).authority, "127.0.0.1:2");
    assert_eq!(upstream_of(&s.routes[2], Some(1)).authority, "127.0.0.1:5");
}

#[test]
fn routes() {
    let s = settings();
    assert_eq!(Target::of(&s, "/mcp"), Target::Mcp(0));
    assert_eq!(Target::of(&s, "/plans/mcp"), Target::Mcp(1));
    assert_eq!(Target::of(&s, "/mcp/"), Target::Unknown);
    assert_eq!(Target::of(&s, "/other/mcp"), Target::Unknown);
    assert_eq!(
        Target::of(&s, "/.well-known/oauth-protected-resource/mcp"),
        Target::ResourceMetadata(0)
    );
    assert_eq!(
        Target::of(&s, "/.well-known/oauth-protected-resource/plans/mcp"),
        Target::ResourceMetadata(1)
    );
    assert_eq!(
        Target::of(&s, "/.well-known/oauth-protected-resource"),
        Target::ResourceMetadata(0)
    );
    assert_eq!(
        Target::of(&s, "/.well-known/oauth-protected-resource/nope/mcp"),
        Target::Unknown
    );
    assert_eq!(Target::of(&s, "/healthz"), Target::Health);
}

#[test]
fn routes_have_bounded_metric_labels() {
    let s = settings();
    for (path, label) in [
        ("/mcp", RouteLabel::Mcp),
        ("/plans/mcp", RouteLabel::Mcp),
        ("/token", RouteLabel::OAuth),
        ("/authorize", RouteLabel::OAuth),
        ("/.well-known/oauth-authorization-server", RouteLabel::OAuth),
        (
            "/.well-known/oauth-protected-resource/mcp",
            RouteLabel::WellKnown,
        ),
        ("/healthz", RouteLabel::Health),
        ("/readyz", RouteLabel::Health),
        ("/metrics", RouteLabel::Metrics),
        ("/favicon.ico", RouteLabel::Other),
        ("/anything/else", RouteLabel::Other),
    ] {
        assert_eq!(Target::of(&s, path).metric(), label, "{path}");
    }
}

#[test]
fn only_failures_on_the_client_side_lose_pingoras_error_line() {
    assert!(is_client_side(
        &Error::new(ErrorType::ConnectionClosed).into_down()
    ));
    assert!(is_client_side(
        &Error::new(ErrorType::ReadError).into_down()
    ));
    assert!(is_client_side(&Error::new(ErrorType::HTTPStatus(413))));
    assert!(!is_client_side(
        &Error::new(ErrorType::ConnectRefused).into_up()
    ));
    assert!(!is_client_side(
        &Error::new(ErrorType::ReadTimedout).into_up()
    ));
    assert!(!is_client_side(&Error::new(ErrorType::InternalError)));
}

#[test]
fn idle_connections_are_bounded_by_keepalive_timeout_secs() {
    assert_eq!(
        keepalive(Some(0), 60),
        Some(60),
        "pingora's default: forever"
    );
    assert_eq!(keepalive(Some(5), 60), Some(5), "a client may ask for less");
    assert_eq!(keepalive(Some(86_400), 60), Some(60), "not for more");
    assert_eq!(keepalive(None, 60), None, "Connection: close stays closed");
}

#[test]
fn readiness_names_every_failing_route_and_only_a_required_one_makes_it_503() {
    let up = |route| RouteHealth {
        route,
        required: true,
        failure: None,
    };
    let down = |route, required| RouteHealth {
        route,
        required,
        failure: Some("connection refused".to_owned()),
    };
    let body = |r: &crate::reply::Reply| -> serde_json::Value {
        serde_json::from_slice(&r.body).unwrap_or_default()
    };

    let all_up = readiness(&[up("mcp"), up("notes")]);
    assert_eq!(all_up.status, 200);
    assert_eq!(
        body(&all_up),
        serde_json::json!({"status": "ready", "ready": true, "failing": []})
    );

    let optional_down = readiness(&[up("mcp"), down("notes", false)]);
    assert_eq!(optional_down.status, 200);
    assert_eq!(
        body(&optional_down)["failing"],
        serde_json::json!([{"route": "notes", "required": false, "reason": "connection refused"}])
    );

    let required_down = readiness(&[down("mcp", true), down("notes", false)]);
    assert_eq!(required_down.status, 503);
    let b = body(&required_down);
    assert_eq!(b["status"], "not_ready");
    assert_eq!(b["ready"], false);
    let named: Vec<&str> = b["failing"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["route"].as_str())
        .collect();
    assert_eq!(named, ["mcp", "notes"]);
    assert!(
        required_down
            .headers
            .iter()
            .any(|(k, _)| *k == "retry-after")
    );
}
