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

/// Issue 27, point 4's measurement: what one proxied request holds inline before any phase runs
/// — pingora's boxed request future (its proxy state machine, with the gateway's `RequestCtx`
/// inside) and the context alone. Prints; run with `--ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement: prints sizes"]
#[allow(clippy::unwrap_used)]
async fn request_future_size() {
    use pingora::{apps::HttpServerApp as _, proxy::ProxyHttp, upstreams::peer::HttpPeer};
    struct Probe;
    #[async_trait::async_trait]
    impl ProxyHttp for Probe {
        type CTX = super::RequestCtx;
        fn new_ctx(&self) -> Self::CTX {
            super::RequestCtx::new(String::new(), 0)
        }
        async fn upstream_peer(
            &self,
            _session: &mut pingora::proxy::Session,
            _ctx: &mut Self::CTX,
        ) -> pingora::Result<Box<HttpPeer>> {
            Error::e_explain(ErrorType::InternalError, "probe")
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, server) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    let _client = client.unwrap();
    let stream: pingora::protocols::l4::stream::Stream = server.unwrap().0.into();
    let session = pingora::protocols::http::ServerSession::new_http1(Box::new(stream));
    let conf = std::sync::Arc::new(pingora::server::configuration::ServerConf::default());
    let app = std::sync::Arc::new(pingora::proxy::http_proxy(&conf, Probe));
    let (_tx, shutdown) = tokio::sync::watch::channel(false);
    let future = app.process_new_http(session, &shutdown);
    println!(
        "process_new_http future: {} bytes; RequestCtx: {} bytes; pingora ServerSession (h1): {} bytes",
        std::mem::size_of_val(&*future),
        std::mem::size_of::<super::RequestCtx>(),
        std::mem::size_of::<pingora::protocols::http::v1::server::HttpSession>(),
    );
}

#[test]
fn any_upgrade_is_asked_by_its_upgrade_header_or_connection_option() {
    let with = |lines: &[(&str, &str)]| {
        let mut req = pingora::http::RequestHeader::build("GET", b"/mcp", None)
            .unwrap_or_else(|e| panic!("{e}"));
        for (k, v) in lines {
            req.append_header(k.to_string(), *v)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        super::admission::asks_upgrade(&req)
    };
    assert!(with(&[("upgrade", "websocket"), ("connection", "Upgrade")]));
    assert!(with(&[("Upgrade", "h2c")]));
    assert!(with(&[
        ("connection", "keep-alive"),
        ("connection", "close, UPGRADE ")
    ]));
    assert!(!with(&[("connection", "keep-alive")]));
    assert!(!with(&[
        ("x-upgrade", "websocket"),
        ("connection", "upgraded")
    ]));
}
