//! End to end, the broker's address policy (issue 38 M4): a front gateway whose `oauth` route's
//! upstream (on 127.0.0.1) names metadata, authorization servers and endpoints elsewhere on
//! loopback or the private network — `localhost`, `2130706433` (127.0.0.1 in decimal), `10.x`.
//! Opening the connect link answers 502 and nothing reaches the trap listening on the named
//! port; the log names the refusal. A route that lists `localhost` in `allow_hosts` reaches it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::{
    Json, Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::{any, get, post},
};
use pforte_tests::{
    Limits, Prompt, Route, Stack, UpstreamAuth,
    connect::{log_lines, log_wrapper},
    oauth::Browser,
    rpc_answer, write_vault_key,
};
use serde_json::json;

const NOWHERE: &str = "http://127.0.0.1:9/mcp";

/// What the fake upstream names: its 401's `resource_metadata`, its metadata's authorization
/// server, its authorization server's `registration_endpoint`.
#[derive(Default)]
struct Names {
    resource_metadata: String,
    authorization_server: String,
    registration_endpoint: String,
}

type Shared = Arc<Mutex<Names>>;

/// A listener on 127.0.0.1 that records every request's path and answers `{}`.
async fn trap() -> (u16, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let app = Router::new().fallback(any(move |uri: axum::http::Uri| {
        let kept = Arc::clone(&kept);
        async move {
            kept.lock().unwrap().push(uri.path().to_owned());
            Json(json!({}))
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (port, seen)
}

/// The upstream on 127.0.0.1: `POST /mcp` → 401 naming `resource_metadata`; its own
/// protected-resource metadata at `/prm` and authorization server metadata under `/as`.
async fn upstream(names: Shared) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new()
        .route(
            "/mcp",
            post(|State(n): State<Shared>| async move {
                let named = n.lock().unwrap().resource_metadata.clone();
                (
                    StatusCode::UNAUTHORIZED,
                    [(
                        header::WWW_AUTHENTICATE,
                        format!("Bearer resource_metadata=\"{named}\""),
                    )],
                )
                    .into_response()
            }),
        )
        .route(
            "/prm",
            get({
                let base = base.clone();
                move |State(n): State<Shared>| async move {
                    let issuer = n.lock().unwrap().authorization_server.clone();
                    Json(json!({"resource": format!("{base}/mcp"), "authorization_servers": [issuer]}))
                }
            }),
        )
        .route(
            "/.well-known/oauth-authorization-server/as",
            get({
                let base = base.clone();
                move |State(n): State<Shared>| async move {
                    let register = n.lock().unwrap().registration_endpoint.clone();
                    Json(json!({
                        "issuer": format!("{base}/as"),
                        "authorization_endpoint": format!("{base}/as/authorize"),
                        "token_endpoint": format!("{base}/as/token"),
                        "registration_endpoint": register,
                        "response_types_supported": ["code"],
                        "code_challenge_methods_supported": ["S256"],
                    }))
                }
            }),
        )
        .with_state(names);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

/// The connect link the front gives `token` on `route`.
async fn link(front: &Stack, route: &str, token: &str) -> url::Url {
    let mut client = front.mcp_at(&front.route_url(route), token);
    client.open().await.unwrap();
    let answer = rpc_answer(client.call_tool("anything", json!({})).await).await;
    Prompt::of(&answer)
        .unwrap_or_else(|| panic!("not a connect prompt: {answer}"))
        .link()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_reaches_no_loopback_or_private_address_its_upstream_names() {
    let (trap_port, trapped) = trap().await;
    let names: Shared = Arc::default();
    let up = upstream(Arc::clone(&names)).await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let log = dir.path().join("gateway.log");
    let front = Stack::builder()
        .upstream(NOWHERE)
        .plain_http()
        .limits(Limits::off())
        .vault_key(&key)
        .wrapper(
            &log_wrapper(&log)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        )
        .route(Route::url("brk", &format!("{up}/mcp")).upstream_auth(UpstreamAuth::oauth()))
        .route(
            Route::url("open", &format!("{up}/mcp"))
                .upstream_auth(UpstreamAuth::oauth().allow_hosts(&["localhost"])),
        )
        .start()
        .await;
    let token = front.create_token("alice").await.unwrap();
    let browser = Browser::new(None);

    let same_host = format!("{up}/prm");
    let as_same_host = format!("{up}/as");
    let trap_at = |host: &str, path: &str| format!("http://{host}:{trap_port}{path}");
    let cases = [
        // The 401's resource_metadata.
        (
            trap_at("localhost", "/prm-localhost"),
            as_same_host.clone(),
            String::new(),
        ),
        (
            trap_at("2130706433", "/prm-decimal"),
            as_same_host.clone(),
            String::new(),
        ),
        (
            trap_at("0x7f.1", "/prm-hex"),
            as_same_host.clone(),
            String::new(),
        ),
        (
            "https://10.255.255.1/prm".to_owned(),
            as_same_host.clone(),
            String::new(),
        ),
        (
            trap_at("[::ffff:127.0.0.1]", "/prm-mapped"),
            as_same_host.clone(),
            String::new(),
        ),
        // The metadata's authorization server.
        (
            same_host.clone(),
            trap_at("localhost", "/as-localhost"),
            String::new(),
        ),
        (
            same_host.clone(),
            "http://10.1.2.3/as".to_owned(),
            String::new(),
        ),
        // The authorization server's registration endpoint.
        (
            same_host.clone(),
            as_same_host.clone(),
            trap_at("2130706433", "/register-decimal"),
        ),
    ];
    for (i, (prm, issuer, register)) in cases.iter().enumerate() {
        {
            let mut n = names.lock().unwrap();
            n.resource_metadata = prm.clone();
            n.authorization_server = issuer.clone();
            n.registration_endpoint = if register.is_empty() {
                format!("{up}/as/register")
            } else {
                register.clone()
            };
        }
        // A link is used once: a fresh one per case.
        let page = browser
            .get(&link(&front, "brk", &token).await)
            .await
            .unwrap();
        assert_eq!(
            page.status, 502,
            "case {i} ({prm} {issuer} {register}): {}",
            page.body
        );
        assert!(page.body.contains("cannot be reached"), "{}", page.body);
        assert!(
            pforte_tests::eventually(std::time::Duration::from_secs(5), || async {
                log_lines(&log, "refused by the address policy") > i
            })
            .await,
            "case {i}: the log names no refusal"
        );
    }
    assert_eq!(
        *trapped.lock().unwrap(),
        Vec::<String>::new(),
        "nothing reached the trap"
    );
    // The refusals are specific in the log.
    for needle in [
        "localhost is not an allowed host",
        "dotted-decimal",
        "10.255.255.1",
        "10.1.2.3",
    ] {
        assert!(log_lines(&log, needle) > 0, "no log line names {needle:?}");
    }

    // The same upstream on a route that allows localhost: the trap is reached.
    names.lock().unwrap().resource_metadata = trap_at("localhost", "/prm-allowed");
    let open_link = link(&front, "open", &token).await;
    let page = browser.get(&open_link).await.unwrap();
    assert_eq!(page.status, 502, "{}", page.body);
    assert_eq!(*trapped.lock().unwrap(), vec!["/prm-allowed".to_owned()]);
}
