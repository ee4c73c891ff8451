//! Issue 42 point 6, the console: the overview of a gateway with a virtual server (`team`, over
//! mcp-service and the per-user route `search` of `virtual_members.rs`) has a "Virtual servers"
//! section — its path, title, each member with its prefix, the tools it contributes (`search`'s
//! not known before anyone connected) and whether it takes each person's own credential, the
//! tools shown and the mode — for admins only; in Chromium at 1280 and 390 px without sideways
//! scrolling or a script (screenshots `admin-virtual.png`, `admin-virtual-phone.png`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{
    EchoUpstream,
    console::{chromium, console_browser, console_in_chromium, is_png},
    eventually, in_ci,
};
use reqwest::{StatusCode, Url};
use serde_json::json;

use super::virtual_members::start;

const ROOT: &str = "root";
const ROOT_PW: &str = "admin horse battery staple";
const BOB: &str = "bob";
const BOB_PW: &str = "bob horse battery staple";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_each_virtual_server_and_its_members_to_admins() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&echo, dir.path()).await;
    gw.admin_cmd(
        &["user", "add", ROOT, "--role", "admin"],
        &format!("{ROOT_PW}\n"),
    )
    .unwrap();
    gw.add_user(BOB, BOB_PW).unwrap();
    let admin = Url::parse(&format!("{}/admin", gw.base)).unwrap();

    // Once mcp-service's catalog is loaded: its 13 tools under `mcp_`, search's not known.
    let root = console_browser(&gw, ROOT, ROOT_PW).await.unwrap();
    let shown = eventually(Duration::from_secs(20), || async {
        let page = root.get(&admin).await.unwrap();
        if page.body.contains("13 tools") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        false
    })
    .await;
    assert!(shown, "mcp-service's catalog listed");
    let page = root.get(&admin).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for needle in [
        "<h2 id=\"virtual\">Virtual servers</h2>",
        "Team tools",
        "<code>/team/mcp</code>",
        "<a href=\"/admin/routes/mcp\">mcp</a> <code>mcp_…</code> · 13 tools",
        "<a href=\"/admin/routes/search\">search</a> <code>search_…</code> · tools not known yet · \
         <span class=\"warn\">own credential per person</span>",
        "all tools listed",
    ] {
        assert!(page.body.contains(needle), "{needle}: {}", page.body);
    }

    // Not for a signed-in non-admin.
    let bob = pforte_tests::oauth::Browser::for_gateway(&gw);
    let login = bob.get(&admin).await.unwrap().see_other().unwrap();
    let mut form = bob.get(&login).await.unwrap().form().unwrap();
    form.set("username", BOB).unwrap();
    form.set("password", BOB_PW).unwrap();
    bob.submit(&form, None).await.unwrap();
    let refused = bob.get(&admin).await.unwrap();
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(!refused.body.contains("Virtual servers"));

    match chromium() {
        Some(chromium) => {
            let r = console_in_chromium(
                &chromium,
                &gw,
                ROOT,
                ROOT_PW,
                &["--page", "virtual", "/admin", "admin-virtual"],
            )
            .await
            .unwrap();
            assert_eq!(r["console"], json!([]), "console messages");
            assert_eq!(r["exceptions"], json!([]), "exceptions");
            for (size, limit) in [("desktop", 1280), ("phone", 390)] {
                let page = &r[format!("virtual_{size}")];
                assert_eq!(page["scripts"], 0, "{size}: a script on the page");
                assert!(
                    page["width"].as_u64().unwrap() <= limit,
                    "sideways scroll at {size}: {}",
                    page["width"]
                );
                assert!(is_png(std::path::Path::new(
                    page["screenshot"].as_str().unwrap()
                )));
                let text = page["text"].as_str().unwrap();
                assert!(
                    text.contains("Virtual servers") && text.contains("own credential per person"),
                    "{text}"
                );
            }
        }
        None => {
            assert!(!in_ci(), "chromium is missing under CI=true");
            pforte_tests::skip("chromium is not installed (apt-get install -y chromium)");
        }
    }
}
