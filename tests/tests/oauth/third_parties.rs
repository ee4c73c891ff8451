//! End to end, what an upstream learns of the caller (issue 36, point 8): echo upstreams that
//! record every request head they get show the `x-pforte-*` identity headers and
//! `X-Forwarded-For` on a plain route by default, neither on a route with `upstream_auth` (a
//! third party's server) by default, and each way round when `identity_headers` /
//! `forward_client_ip` say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_tests::{
    EchoUpstream, Limits, McpClient, Prompt, Route, Stack, UpstreamAuth, connect::enter_secret,
    oauth::Browser, rpc_answer, write_vault_key,
};
use serde_json::json;

const NOWHERE: &str = "http://127.0.0.1:9/mcp";

/// Whether `seen` carries any `x-pforte-*` header, and whether it carries `X-Forwarded-For`.
fn learns(seen: &pforte_tests::connect::Seen) -> (bool, bool) {
    (
        seen.headers.iter().any(|(k, _)| k.starts_with("x-pforte-")),
        seen.header("x-forwarded-for").is_some(),
    )
}

/// One `tools/call echo` on route `name` as `token`, after connecting `token`'s key when the
/// route asks for one; the call the upstream got.
async fn call_through(gw: &Stack, name: &str, token: &str, echo: &EchoUpstream) {
    let url = gw.route_url(name);
    let mut client: McpClient = gw.mcp_at(&url, token);
    client.open().await.unwrap();
    let answer = rpc_answer(client.call_tool("echo", json!({})).await).await;
    if let Some(asked) = Prompt::of(&answer) {
        enter_secret(
            &Browser::new(None),
            asked.link(),
            &[("x-api-key", &format!("key-for-{name}"))],
        )
        .await
        .unwrap();
        client = gw.mcp_at(&url, token);
        client.open().await.unwrap();
        let answer = rpc_answer(client.call_tool("echo", json!({})).await).await;
        assert_eq!(answer["result"]["isError"], false, "{name}: {answer}");
    } else {
        assert_eq!(answer["result"]["isError"], false, "{name}: {answer}");
    }
    assert!(
        echo.seen()
            .iter()
            .any(|s| s.rpc_method.as_deref() == Some("tools/call")),
        "{name}: no call upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third_party_servers_learn_neither_identity_nor_client_ip_unless_told() {
    let (plain, third, told, quiet) = (
        EchoUpstream::start().await.unwrap(),
        EchoUpstream::start().await.unwrap(),
        EchoUpstream::start().await.unwrap(),
        EchoUpstream::start().await.unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let gw = Stack::builder()
        .upstream(NOWHERE)
        .plain_http()
        .limits(Limits::off())
        .vault_key(&key)
        .route(Route::url("plain", &plain.mcp_url()))
        .route(
            Route::url("third", &third.mcp_url()).upstream_auth(UpstreamAuth::header("X-Api-Key")),
        )
        .route(
            Route::url("told", &told.mcp_url())
                .upstream_auth(UpstreamAuth::header("X-Api-Key"))
                .discloses(true, true),
        )
        .route(Route::url("quiet", &quiet.mcp_url()).discloses(false, false))
        .start()
        .await;
    let token = gw.create_token("ada").await.unwrap();
    for (name, echo) in [
        ("plain", &plain),
        ("third", &third),
        ("told", &told),
        ("quiet", &quiet),
    ] {
        call_through(&gw, name, &token, echo).await;
    }
    let calls = |echo: &EchoUpstream| -> Vec<pforte_tests::connect::Seen> {
        echo.seen()
            .into_iter()
            .filter(|s| s.rpc_method.as_deref() == Some("tools/call"))
            .collect()
    };
    // A plain route by default: who calls, and from where.
    for s in calls(&plain) {
        assert_eq!(learns(&s), (true, true), "{s:?}");
        assert_eq!(s.header("x-pforte-client"), Some("ada"), "{s:?}");
        assert_eq!(s.header("x-forwarded-for"), Some("127.0.0.1"), "{s:?}");
    }
    assert_eq!(learns(&calls(&told)[0]), (true, true));
    // A third party's server by default, and a plain route told so: neither — on every
    // request, the gateway's own catalog's too. The request id stays (it names no one).
    for echo in [&third, &quiet] {
        let seen = echo.seen();
        assert!(!seen.is_empty());
        for s in &seen {
            assert_eq!(learns(s), (false, false), "{s:?}");
        }
        assert!(calls(echo)[0].header("x-request-id").is_some());
    }
    println!(
        "third parties: plain {} requests, third {}, told {}, quiet {}",
        plain.seen().len(),
        third.seen().len(),
        told.seen().len(),
        quiet.seen().len()
    );
}
