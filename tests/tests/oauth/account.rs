//! `/account` in headless Chromium at phone width: a user with a consent grant and an
//! enterprise grant signs in, sees both (client, redirect host, route title, scopes, first and
//! last use, how granted), revokes the enterprise one from the page — and the next MCP call
//! with that grant's token gets 401 within a second while the other token still works; then an
//! admin (`pforte user add --role admin`) sees every user's grants. Screenshots are written to
//! `<target dir>/screenshots/` (`account.png`, `account-after-revoke.png`, `account-admin.png`).
//!
//! tests/browser/account.py drives Chromium over the DevTools protocol on a pipe. Without
//! Chromium the test is skipped with a message, except under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pforte_clock::{Clock, SystemClock};
use pforte_tests::{
    Enterprise, JagIdp, McpService, OAuth, Route, Stack, eventually, in_ci,
    oauth::{Browser, access_token, discover, mcp_status, post_form, register_like_claude},
    target_dir, which,
};
use serde_json::Value;

const ALICE: &str = "alice@example.com";
const ALICE_PW: &str = "correct horse battery staple";
const ROOT: &str = "root";
const ROOT_PW: &str = "admin horse battery staple";

fn chromium() -> Option<PathBuf> {
    std::env::var_os("PFORTE_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| which("chromium"))
        .or_else(|| which("chromium-browser"))
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() > 2_000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_page_lists_and_revokes_grants_and_admins_see_everyone() {
    let Some(chromium) = chromium() else {
        assert!(!in_ci(), "chromium is missing under CI=true");
        pforte_tests::skip("chromium is not installed (apt-get install -y chromium)");
        return;
    };
    let idp = JagIdp::start().await.unwrap();
    let svc = McpService::start(&[]).unwrap();
    let gw = Stack::builder()
        .upstream(&svc.url())
        .route(Route::url("notes", &svc.url()).title("Team notes"))
        .oauth(
            OAuth::default()
                .display_name("Acme MCP")
                // It speaks for example.com: its ID-JAG for alice@example.com joins the
                // local user of that name (the linking rule: docs/sign-in.md, one person one name).
                .enterprise(Enterprise {
                    issuer: idp.issuer.clone(),
                    allowed_domains: vec!["example.com".into()],
                    ..Enterprise::default()
                }),
        )
        .start()
        .await;
    gw.add_user(ALICE, ALICE_PW).unwrap();
    gw.add_user("bob", "bob horse battery staple").unwrap();
    gw.admin_cmd(
        &["user", "add", ROOT, "--role", "admin"],
        &format!("{ROOT_PW}\n"),
    )
    .unwrap();
    let listed = gw.admin_cmd(&["user", "list"], "").unwrap();
    assert!(listed.contains("admin"), "{listed}");
    // `pforte user role` sets and clears the flag.
    let role_of = |name: &str| -> String {
        let users: Value =
            serde_json::from_str(&gw.admin_cmd(&["user", "list", "--json"], "").unwrap()).unwrap();
        let user = users
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["username"] == name);
        user.unwrap()["role"].as_str().unwrap().to_owned()
    };
    assert_eq!(role_of(ROOT), "admin");
    gw.admin_cmd(&["user", "role", "bob", "admin"], "").unwrap();
    assert_eq!(role_of("bob"), "admin");
    gw.admin_cmd(&["user", "role", "bob", "user"], "").unwrap();
    assert_eq!(role_of("bob"), "user");

    // Alice's consent grant (Claude, the default route) and bob's.
    let consent_token = access_token(&gw, ALICE, ALICE_PW, "mcp:read mcp:write")
        .await
        .unwrap();
    access_token(&gw, "bob", "bob horse battery staple", "mcp:read")
        .await
        .unwrap();
    // Alice's enterprise grant for the notes route, linked to her by email.
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let notes = gw.route_url("notes");
    let claims = idp.claims(
        &gw.base,
        &client.client_id,
        &notes,
        "u-alice",
        ALICE,
        SystemClock.now_secs(),
    );
    let answer = post_form(
        &browser.http,
        &d.endpoint("token_endpoint").unwrap(),
        &[
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", &idp.id_jag(&claims).unwrap()),
            ("client_id", &client.client_id),
            ("client_secret", client.client_secret.as_deref().unwrap()),
        ],
    )
    .await
    .unwrap();
    let enterprise_token = answer.access().unwrap();
    assert_eq!(
        mcp_status(&browser.http, &notes, &enterprise_token).await,
        200
    );

    let shots = target_dir().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/account.py");
    let stderr_path = shots.join("account-stderr.log");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg("--chromium")
        .arg(&chromium)
        .args(["--base", &gw.base, "--user", ALICE, "--admin", ROOT])
        .args(["--revoke-client", "enterprise ("])
        .arg("--out-dir")
        .arg(&shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{ALICE_PW}\n{ROOT_PW}\n").as_bytes())
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "account.py did not finish within 90 s:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let revoked_at = Instant::now();
    let out = child.wait_with_output().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(out.status.success(), "account.py failed:\n{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));

    // The enterprise grant's token is refused (the gateway's cache holds results ≤ 1 s), the
    // consent grant's still works.
    assert!(
        eventually(Duration::from_secs(1), || {
            let (http, url, token) = (
                browser.http.clone(),
                notes.clone(),
                enterprise_token.clone(),
            );
            async move { mcp_status(&http, &url, &token).await == 401 }
        })
        .await,
        "the revoked grant's token still works {:?} after the page answered",
        revoked_at.elapsed()
    );
    assert_eq!(
        mcp_status(&browser.http, &gw.mcp_url(), &consent_token).await,
        200
    );

    assert_eq!(r["console"], serde_json::json!([]), "console messages");
    assert_eq!(r["exceptions"], serde_json::json!([]), "exceptions");
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
        .collect();
    assert!(problems.is_empty(), "log errors/warnings: {problems:#?}");

    let sign_in = r["sign_in"]["text"].as_str().unwrap();
    assert!(
        sign_in.contains("Acme MCP") && sign_in.contains("Sign in"),
        "{sign_in}"
    );
    let account = &r["account"];
    let text = account["text"].as_str().unwrap();
    for needle in [
        "Acme MCP",
        ALICE,
        "Claude",
        "claude.ai",
        "Team notes",
        "mcp:write",
        "consent",
        "enterprise (",
        "First use",
        "Last use",
        "Revoke access",
        "Change password",
        "Sign out",
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} missing from the account page:\n{text}"
        );
    }
    assert!(
        !text.contains("bob"),
        "a user sees only their own grants:\n{text}"
    );
    for page in ["sign_in", "account", "after_revoke", "admin"] {
        assert!(
            r[page]["width"].as_u64().unwrap() <= 390,
            "{page} overflows a phone's width"
        );
        assert_eq!(r[page]["scripts"], 0, "{page} has no scripts");
    }
    let after = r["after_revoke"]["text"].as_str().unwrap();
    assert!(after.contains("Access revoked"), "{after}");
    assert!(
        !after.contains("enterprise ("),
        "the revoked grant is gone:\n{after}"
    );
    let admin = r["admin"]["text"].as_str().unwrap();
    for needle in ["(admin)", "every user", "bob", ALICE, "Show all users"] {
        assert!(
            admin.contains(needle),
            "{needle:?} missing from the admin view:\n{admin}"
        );
    }
    for name in [
        "account.png",
        "account-after-revoke.png",
        "account-admin.png",
    ] {
        let p = shots.join(name);
        assert!(is_png(&p), "{} is not a screenshot", p.display());
        eprintln!("screenshot: {}", p.display());
    }

    // Revocations go to the audit log: the page's (with the browser's IP and who revoked),
    // and `pforte grant revoke`'s; the enterprise grant's issue too. No token or assertion.
    gw.admin_cmd(&["grant", "revoke", "--user", "bob"], "")
        .unwrap();
    let audit_log = gw.data_dir().join("audit.jsonl");
    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&audit_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            lines().iter().filter(|e| e["event"] == "revoke").count() >= 2
        })
        .await,
        "{:#?}",
        lines()
    );
    let all = lines();
    let revokes: Vec<&Value> = all.iter().filter(|e| e["event"] == "revoke").collect();
    let page = revokes.iter().find(|e| e["via"] == "account").unwrap();
    assert_eq!(page["user"], ALICE, "{page}");
    assert_eq!(page["client_ip"], "127.0.0.1", "{page}");
    assert_eq!(page["outcome"], "revoked", "{page}");
    assert!(
        page["reason"].as_str().unwrap().starts_with("by_user: "),
        "{page}"
    );
    let cli = revokes.iter().find(|e| e["via"] == "cli").unwrap();
    assert_eq!(cli["user"], "bob", "{cli}");
    assert!(
        all.iter()
            .any(|e| e["event"] == "enterprise_grant" && e["outcome"] == "issued"),
        "{all:#?}"
    );
    let text = std::fs::read_to_string(&audit_log).unwrap();
    for secret in [enterprise_token.as_str(), consent_token.as_str()] {
        assert!(!text.contains(secret), "a token in the audit log");
    }
}
