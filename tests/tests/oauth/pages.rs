//! The pages people see, in headless Chromium at 1280 px and at 390 px (issue 37): every table
//! keeps its action column inside the window — `/account`'s "Connect", `/connections`, the
//! console's tokens, grants ("Revoke"), users and clients — with rows that stack on a phone
//! instead of a sideways scroll; the connect form looks like the sign-in pages (a white card)
//! and labels its field with the route's `label`; a non-admin's 403 page is a card whose hint
//! fits people who sign in with an identity provider. Screenshots: `<target>/screenshots/`
//! (`page-*.png`, `page-*-phone.png`), written by tests/browser/pages.py. And every page kind,
//! fetched from a real gateway, comes from the one skeleton with the one stylesheet and carries
//! the one CSP (issue 41).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pforte_tests::oauth::{
    Browser, CLAUDE_CALLBACK, Page, Pkce, access_token_at, authorize_url, discover,
    register_like_claude,
};
use pforte_tests::{
    EchoUpstream, Limits, OAuth, Prompt, Route, Stack, UpstreamAuth, in_ci, rpc_answer, target_dir,
    which, write_vault_key,
};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};

const ANN: &str = "ann";
const ANN_PW: &str = "ann horse battery staple";
const BOB: &str = "bob";
const BOB_PW: &str = "bob horse battery staple";
const SEARCH: &str = "search";

fn chromium() -> Option<PathBuf> {
    std::env::var_os("PFORTE_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| which("chromium"))
        .or_else(|| which("chromium-browser"))
}

/// Runs tests/browser/pages.py signed in as `user`, over `pages` (name, path, phone path);
/// its JSON report.
async fn pages(
    chromium: &Path,
    base: &str,
    user: &str,
    pw: &str,
    pages: &[(&str, String, String)],
) -> Value {
    let shots = target_dir().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/pages.py");
    let stderr_path = shots.join(format!("pages-{user}-stderr.log"));
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg("--chromium")
        .arg(chromium)
        .args(["--base", base, "--user", user, "--out-dir"])
        .arg(&shots);
    for (name, path, phone) in pages {
        cmd.args(["--page", &format!("page-{name}"), path, phone]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{pw}\n").as_bytes())
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "pages.py did not finish within 120 s:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = child.wait_with_output().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(out.status.success(), "pages.py failed:\n{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert_eq!(r["console"], json!([]), "console messages");
    assert_eq!(r["exceptions"], json!([]), "exceptions");
    let problems: Vec<&Value> = r["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| matches!(e["level"].as_str(), Some("error" | "warning")))
        .filter(|e| {
            !e["url"]
                .as_str()
                .is_some_and(|u| u.ends_with("/favicon.ico"))
        })
        // The 403 page is meant to answer 403.
        .filter(|e| {
            !e["text"]
                .as_str()
                .is_some_and(|t| t.contains("status of 403"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "log errors/warnings (a CSP violation would be one): {problems:#?}"
    );
    r
}

/// Every table's action column is inside the window at both widths, its rows stack on a phone
/// and not on a desktop, nothing scrolls sideways; the page's screenshot is a PNG.
fn actions_visible(r: &Value, name: &str) {
    for size in ["desktop", "phone"] {
        let page = &r["pages"][format!("page-{name}_{size}")];
        let limit = if size == "phone" { 390 } else { 1280 };
        assert!(
            page["width"].as_u64().unwrap() <= limit,
            "{name} scrolls sideways at {size}: {}",
            page["width"]
        );
        for table in page["tables"].as_array().unwrap() {
            assert_eq!(
                table["visible"], true,
                "{name} at {size}: the action column is cut off: {table}"
            );
            assert_eq!(
                table["stacked"],
                size == "phone",
                "{name} at {size}: {table}"
            );
        }
        let shot = PathBuf::from(page["screenshot"].as_str().unwrap());
        let png = std::fs::read(&shot).unwrap();
        assert!(
            png.len() > 2_000 && png.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{}",
            shot.display()
        );
    }
}

/// The actions of every row of every table of `name` at `size`.
fn actions(r: &Value, name: &str, size: &str) -> Vec<String> {
    r["pages"][format!("page-{name}_{size}")]["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["actions"].as_array().unwrap().iter())
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// A connect link for the signed-in person's call on the route.
async fn connect_link(gw: &Stack, token: &str) -> String {
    let mut client = gw.mcp_at(&gw.route_url(SEARCH), token);
    client.open().await.unwrap();
    let resp = client.call_tool("echo", json!({})).await;
    assert_eq!(resp.status(), 200);
    let answer = rpc_answer(resp).await;
    let prompt = Prompt::of(&answer).unwrap_or_else(|| panic!("not a connect prompt: {answer}"));
    let link = prompt.link();
    format!("{}?{}", link.path(), link.query().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_keep_their_actions_at_1280_and_390_and_look_like_the_sign_in() {
    let Some(chromium) = chromium() else {
        assert!(!in_ci(), "chromium is missing under CI=true");
        pforte_tests::skip("chromium is not installed (apt-get install -y chromium)");
        return;
    };
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let gw = Stack::builder()
        .upstream(&echo.mcp_url())
        .plain_http()
        .limits(Limits::off())
        .oauth(OAuth::default().display_name("Acme MCP"))
        .vault_key(&key)
        .route(
            Route::url(SEARCH, &echo.mcp_url())
                .title("Search")
                .upstream_auth(UpstreamAuth::header("X-Api-Key").label("Search API key")),
        )
        .start()
        .await;
    gw.admin_cmd(
        &["user", "add", ANN, "--role", "admin"],
        &format!("{ANN_PW}\n"),
    )
    .unwrap();
    gw.add_user(BOB, BOB_PW).unwrap();
    gw.create_token("deploy-bot-with-a-long-name")
        .await
        .unwrap();
    let url = gw.route_url(SEARCH);
    let ann = access_token_at(&url, gw.ca_pem(), ANN, ANN_PW, "mcp:read mcp:write")
        .await
        .unwrap();
    access_token_at(&url, gw.ca_pem(), BOB, BOB_PW, "mcp:read")
        .await
        .unwrap();
    access_token_at(
        &gw.mcp_url(),
        gw.ca_pem(),
        BOB,
        BOB_PW,
        "mcp:read mcp:write",
    )
    .await
    .unwrap();
    // One link per person and route while it is fresh (issue 38, L12), and opening it takes
    // it: the phone opens the form as the signed-in person, without a link.
    let (link, phone_link) = (connect_link(&gw, &ann).await, format!("/connect/{SEARCH}"));

    let same = |p: &str| (p.to_owned(), p.to_owned());
    let list: Vec<(&str, String, String)> = [
        ("account", same("/account")),
        ("connections", same("/connections")),
        ("admin-tokens", same("/admin/tokens")),
        ("admin-grants", same("/admin/grants")),
        ("admin-users", same("/admin/users")),
        ("admin-clients", same("/admin/clients")),
        ("connect", (link, phone_link)),
    ]
    .into_iter()
    .map(|(n, (d, p))| (n, d, p))
    .collect();
    let r = pages(&chromium, &gw.base, ANN, ANN_PW, &list).await;
    for (name, _, _) in &list {
        actions_visible(&r, name);
    }
    for size in ["desktop", "phone"] {
        // The action each table exists for is there, in its column.
        assert!(
            actions(&r, "account", size).iter().any(|a| a == "Connect"),
            "{size}: {:?}",
            actions(&r, "account", size)
        );
        assert!(
            actions(&r, "connections", size)
                .iter()
                .any(|a| a == "Connect")
        );
        assert!(
            actions(&r, "admin-grants", size)
                .iter()
                .all(|a| a.contains("Revoke")),
            "{size}: {:?}",
            actions(&r, "admin-grants", size)
        );
        assert!(actions(&r, "admin-grants", size).len() >= 3);
        assert!(
            actions(&r, "admin-tokens", size)
                .iter()
                .any(|a| a.contains("Revoke"))
        );
        // The connect form: a white card as the sign-in pages, the field named by `label`.
        let form = &r["pages"][format!("page-connect_{size}")];
        assert_eq!(form["labels"], json!(["Search API key"]), "{form}");
        assert_eq!(form["card"], "rgb(255, 255, 255)", "{form}");
        assert!(
            form["title"]
                .as_str()
                .unwrap()
                .starts_with("Connect Search"),
            "{form}"
        );
    }

    // Someone who is not an admin: a styled 403 whose hint fits SSO people too.
    let r = pages(
        &chromium,
        &gw.base,
        BOB,
        BOB_PW,
        &[("forbidden", same("/admin").0, same("/admin").1)],
    )
    .await;
    for size in ["desktop", "phone"] {
        let page = &r["pages"][format!("page-forbidden_{size}")];
        assert_eq!(page["title"], "Admins only · Pforte", "{page}");
        assert_eq!(page["card"], "rgb(255, 255, 255)", "{page}");
        let text = page["text"].as_str().unwrap();
        assert!(text.contains("You are signed in as bob"), "{text}");
        assert!(text.contains("pforte user role bob admin"), "{text}");
        assert!(
            text.contains("identity provider") && text.contains("[oauth.roles]"),
            "{text}"
        );
        assert!(page["width"].as_u64().unwrap() <= if size == "phone" { 390 } else { 1280 });
    }
}

/// A page is the one skeleton's: HTML with the security headers every page has, the doctype and
/// head, the one stylesheet once, no script, and the one CSP (`form_targets`: the origins a form
/// of this page may end at besides the gateway).
fn looks_alike(name: &str, page: &Page, form_targets: &[&str]) {
    let header = |h: &str| page.header(h).unwrap_or_default();
    assert_eq!(header("content-type"), "text/html; charset=utf-8", "{name}");
    assert_eq!(
        header("content-security-policy"),
        pforte_page::content_security_policy(form_targets),
        "{name}: the one CSP"
    );
    for (h, v) in [
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
    ] {
        assert_eq!(header(h), v, "{name}: {h}");
    }
    let body = &page.body;
    assert!(
        body.starts_with("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"),
        "{name}: {body}"
    );
    assert!(
        body.contains(&format!(
            "<style>{}</style></head>",
            pforte_page::STYLESHEET
        )),
        "{name}: not the one stylesheet"
    );
    assert_eq!(body.matches("<style").count(), 1, "{name}");
    assert!(!body.contains("<script"), "{name}");
    assert!(body.ends_with("</main></body></html>\n"), "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_kind_has_the_one_skeleton_stylesheet_and_csp() {
    let echo = EchoUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let gw = Stack::builder()
        .upstream(&echo.mcp_url())
        .plain_http()
        .limits(Limits::off())
        .oauth(OAuth::default())
        .vault_key(&key)
        .route(
            Route::url(SEARCH, &echo.mcp_url())
                .title("Search")
                .upstream_auth(UpstreamAuth::header("X-Api-Key").label("Search API key")),
        )
        .start()
        .await;
    gw.admin_cmd(
        &["user", "add", ANN, "--role", "admin"],
        &format!("{ANN_PW}\n"),
    )
    .unwrap();
    gw.add_user(BOB, BOB_PW).unwrap();
    let at = |p: &str| Url::parse(&format!("{}{p}", gw.base)).unwrap();
    let claude = "https://claude.ai";

    // The authorization server's pages: sign-in, consent, an error.
    let b = Browser::for_gateway(&gw);
    let d = discover(&b.http, &gw.route_url(SEARCH)).await.unwrap();
    let client = register_like_claude(&b.http, &d).await.unwrap();
    let pkce = Pkce::new(ANN);
    let scope = [("resource", d.resource.as_str()), ("scope", "mcp:read")];
    let auth = authorize_url(&d, &client.client_id, CLAUDE_CALLBACK, &pkce, "s", &scope).unwrap();
    let login = b.get(&auth).await.unwrap();
    assert_eq!(login.status, StatusCode::OK, "{}", login.body);
    looks_alike("sign-in", &login, &[]);
    let mut form = login.form().unwrap();
    form.set("username", ANN).unwrap();
    form.set("password", ANN_PW).unwrap();
    let next = b.submit(&form, None).await.unwrap().see_other().unwrap();
    let consent = b.get(&next).await.unwrap();
    assert!(consent.body.contains("Allow access?"), "{}", consent.body);
    looks_alike("consent", &consent, &[claude]);
    let unknown = authorize_url(&d, "no-such-client", CLAUDE_CALLBACK, &pkce, "s", &scope).unwrap();
    let error = b.get(&unknown).await.unwrap();
    assert!(error.status.is_client_error(), "{}", error.body);
    looks_alike("authorization error", &error, &[]);

    // /account: its sign-in, the page; the console; the connect pages.
    let ann = Browser::for_gateway(&gw);
    let account_login = ann.get(&at("/account")).await.unwrap();
    looks_alike("account sign-in", &account_login, &[]);
    let mut form = account_login.form().unwrap();
    form.set("username", ANN).unwrap();
    form.set("password", ANN_PW).unwrap();
    ann.submit(&form, None).await.unwrap().see_other().unwrap();
    for (name, path) in [
        ("account", "/account"),
        ("console overview", "/admin"),
        ("console audit", "/admin/audit"),
        ("console tokens", "/admin/tokens"),
        ("console route", "/admin/routes/search"),
        ("connections", "/connections"),
        ("connect form", "/connect/search"),
    ] {
        let page = ann.get(&at(path)).await.unwrap();
        assert_eq!(page.status, StatusCode::OK, "{name}: {}", page.body);
        looks_alike(name, &page, &[]);
    }
    let missing = ann.get(&at("/admin/routes/nope")).await.unwrap();
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    looks_alike("console 404", &missing, &[]);

    // A refusal: someone who is not an admin.
    let bob = Browser::for_gateway(&gw);
    let mut form = bob.get(&at("/account")).await.unwrap().form().unwrap();
    form.set("username", BOB).unwrap();
    form.set("password", BOB_PW).unwrap();
    bob.submit(&form, None).await.unwrap().see_other().unwrap();
    let forbidden = bob.get(&at("/admin")).await.unwrap();
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    looks_alike("403", &forbidden, &[]);
}
