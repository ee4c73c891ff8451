//! End to end, the tool catalog of a per-user credential route (issue 36, point 7): in front of
//! an echo upstream that takes only each user's `X-Api-Key`, the catalog is empty before anyone
//! connects — the console's route page says why, and nothing reached the upstream —; once a
//! person connects it is learned through their key (tool definitions only, no identity headers
//! on the way), the route page lists the tools, and an `mcp:read` token calls the
//! `readOnlyHint` tool and gets 403 on the writing one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{
    EchoUpstream, Limits, Prompt, Route, Stack, UpstreamAuth, connect::enter_secret, eventually,
    oauth::Browser, rpc_answer, write_vault_key,
};
use serde_json::json;
use url::Url;

const NOWHERE: &str = "http://127.0.0.1:9/mcp";
const SEARCH: &str = "search";
const ROOT: &str = "root";
const ROOT_PW: &str = "admin horse battery staple";
/// What the route page says while the catalog waits for someone to connect.
const WAITING: &str = "Nobody has connected to this route";

/// The console's page of the route `search`, as the admin's browser sees it.
async fn route_page(gw: &Stack, admin: &Browser) -> String {
    let page = Url::parse(&format!("{}/admin/routes/{SEARCH}", gw.base)).unwrap();
    let page = admin.get(&page).await.unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    page.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_user_routes_catalog_is_learned_through_a_connected_persons_key() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let gw = Stack::builder()
        .upstream(NOWHERE)
        .limits(Limits::off())
        .vault_key(&key)
        .route(
            Route::url(SEARCH, &echo.mcp_url())
                .title("Search")
                .upstream_auth(UpstreamAuth::header("X-Api-Key").label("Search API key")),
        )
        .start()
        .await;
    gw.admin_cmd(
        &["user", "add", ROOT, "--role", "admin"],
        &format!("{ROOT_PW}\n"),
    )
    .unwrap();
    let admin = Browser::for_gateway(&gw);
    admin.sign_in(&gw.base, ROOT, ROOT_PW).await.unwrap();

    // Nobody connected: the catalog is empty and the route page says why; the catalog asked
    // the upstream nothing (it has no key to ask with).
    let before = route_page(&gw, &admin).await;
    assert!(before.contains(WAITING), "{before}");
    assert!(!before.contains("<code>peek</code>"), "{before}");
    assert!(echo.seen().is_empty(), "{:?}", echo.seen());

    // A reader connects their key through the link the stand-in session names.
    let reader = gw
        .create_scoped_token("reader", &["mcp:read"])
        .await
        .unwrap();
    let url = gw.route_url(SEARCH);
    let mut standin = gw.mcp_at(&url, &reader);
    standin.open().await.unwrap();
    let read = standin
        .request("resources/read", json!({"uri": "file:///x"}))
        .await;
    assert_eq!(read.status(), 200, "resources/read");
    let answer = rpc_answer(read).await;
    let asked = Prompt::of(&answer).unwrap_or_else(|| panic!("no connect prompt: {answer}"));
    enter_secret(
        &Browser::for_gateway(&gw),
        asked.link(),
        &[("x-api-key", "key-of-reader")],
    )
    .await
    .unwrap();

    // The catalog learns the tools through the reader's key: the route page lists them.
    let listed = eventually(Duration::from_secs(10), || {
        let (gw, admin) = (&gw, &admin);
        async move {
            let page = route_page(gw, admin).await;
            page.contains("<code>peek</code>") && !page.contains(WAITING)
        }
    })
    .await;
    let after = route_page(&gw, &admin).await;
    assert!(listed, "{after}");
    assert!(
        after.contains(
            r#"<tr><td data-label="Tool"><code>peek</code></td><td data-label="Kind">reads</td>"#
        ),
        "{after}"
    );
    assert!(
        after.contains(
            r#"<tr><td data-label="Tool"><code>echo</code></td><td data-label="Kind">writes</td>"#
        ),
        "{after}"
    );
    // Tool definitions only, with the reader's key and nothing of who anyone is.
    let seen = echo.seen();
    let lists: Vec<_> = seen
        .iter()
        .filter(|s| s.rpc_method.as_deref() == Some("tools/list"))
        .collect();
    assert!(!lists.is_empty(), "{seen:?}");
    assert!(
        lists
            .iter()
            .all(|s| s.header("x-api-key") == Some("key-of-reader")),
        "{lists:?}"
    );
    for s in &seen {
        assert!(
            matches!(
                s.rpc_method.as_deref(),
                Some("initialize" | "notifications/initialized" | "tools/list")
            ),
            "the catalog asked more than the tools: {s:?}"
        );
        assert!(
            s.headers.iter().all(|(k, _)| !k.starts_with("x-pforte-")),
            "identity headers to a third party: {s:?}"
        );
    }

    // The per-tool scopes hold: mcp:read calls the readOnlyHint tool, not the writing one.
    let mut client = gw.mcp_at(&url, &reader);
    client.open().await.unwrap();
    let peek = client.call_tool("peek", json!({})).await;
    assert_eq!(peek.status(), 200, "tools/call peek");
    let peek = rpc_answer(peek).await;
    assert_eq!(peek["result"]["isError"], false, "{peek}");
    let echo_call = client.call_tool("echo", json!({})).await;
    assert_eq!(echo_call.status(), 403, "tools/call echo with mcp:read");
    println!(
        "upstream catalog: learned after one connect, {} upstream requests",
        echo.seen().len()
    );
}
