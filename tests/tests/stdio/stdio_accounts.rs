//! Whom a `command` route's children run as (issue 38, L11): a gateway running as root starts a
//! route without `user` as `stdio_user` (`nobody` by default) in a home of the route's own
//! (`<data_dir>-stdio/<route>`, 0700, the account's: `HOME`, the caches and the working
//! directory), `user = "root"` is the explicit opt-out, and `pforte check` names the account
//! of each command route. The children are tests/fixtures/stdio/plain_server.py on the system's
//! python3, linked into a directory every account can reach. Skipped (said so) when the tests do
//! not run as root, except under CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{os::unix::fs::PermissionsExt as _, path::PathBuf, process::Command};

use pforte_tests::{
    GatewayConfig, Route, bin, reachable_copy, rmcp_client, root_or_skip, write_config,
};
use serde_json::{Value, json};

use crate::stdio_routes::{NOWHERE, call, fixture, gateway};

/// The SDK-free fixture where every account reaches it, whatever the checkout's parents allow;
/// the directory is kept as long as the tempdir.
fn reachable_server() -> (tempfile::TempDir, Vec<String>) {
    let public = tempfile::tempdir().unwrap();
    std::fs::set_permissions(public.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = reachable_copy(&fixture("plain_server.py"), public.path());
    let command = vec!["/usr/bin/python3".to_owned(), script.display().to_string()];
    (public, command)
}

fn uid_of(user: &str) -> u32 {
    nix::unistd::User::from_name(user)
        .unwrap()
        .unwrap_or_else(|| panic!("no user {user} here"))
        .uid
        .as_raw()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_gateway_runs_a_route_without_user_as_nobody_in_a_home_of_its_own() {
    use std::os::unix::fs::MetadataExt as _;
    if !root_or_skip() {
        return;
    }
    let (_public, command) = reachable_server();
    let gw = gateway(Route::command("files", &command)).await;
    let token = gw.create_token("files").await.unwrap();
    let client = rmcp_client(&format!("{}/files/mcp", gw.base), gw.http(), &token, &[])
        .await
        .unwrap();
    let who: Value =
        serde_json::from_str(&call(&client, "whoami", json!({})).await.unwrap()).unwrap();
    let nobody = uid_of("nobody");
    assert_ne!(nobody, 0);
    assert_eq!(who["uid"], nobody, "{who}");
    assert_eq!(who["euid"], nobody, "{who}");
    let home_of: Value =
        serde_json::from_str(&call(&client, "home", json!({})).await.unwrap()).unwrap();
    let mut homes = gw.data_dir().into_os_string();
    homes.push("-stdio");
    let home = PathBuf::from(homes).join("files");
    assert_eq!(
        home_of,
        json!({
            "home": home, "cwd": home, "writable": true,
            "xdg_cache": home.join(".cache"), "npm_cache": home.join(".npm"),
        })
    );
    let m = std::fs::metadata(&home).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (nobody, 0o700));
    assert_eq!(
        std::fs::metadata(home.join("written")).unwrap().uid(),
        nobody
    );
    // The gateway's own files stay out of its reach.
    let opened = call(
        &client,
        "open",
        json!({"path": gw.data_dir().join("pforte.db")}),
    )
    .await
    .unwrap();
    assert!(opened.starts_with("refused"), "{opened}");
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_root_is_the_explicit_opt_out() {
    if !root_or_skip() {
        return;
    }
    let (_public, command) = reachable_server();
    let gw = gateway(Route::command("root", &command).user("root")).await;
    let token = gw.create_token("root").await.unwrap();
    let client = rmcp_client(&format!("{}/root/mcp", gw.base), gw.http(), &token, &[])
        .await
        .unwrap();
    let who: Value =
        serde_json::from_str(&call(&client, "whoami", json!({})).await.unwrap()).unwrap();
    assert_eq!(
        (who["uid"].as_u64(), who["euid"].as_u64()),
        (Some(0), Some(0)),
        "{who}"
    );
    let _ = client.cancel().await;
}

/// `pforte check --config` on `config`: (exit code, stdout, stderr).
fn check(config: &std::path::Path) -> (Option<i32>, String, String) {
    let out = Command::new(bin("pforte"))
        .args(["check", "--config"])
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_names_the_account_of_each_command_route_and_refuses_an_unknown_one() {
    if !root_or_skip() {
        return;
    }
    let (public, command) = reachable_server();
    let mut config = GatewayConfig::new(NOWHERE);
    config.routes = vec![
        Route::command("files", &command),
        Route::command("admin", &command).user("root"),
    ];
    let path = write_config(public.path(), config.clone()).unwrap();
    let (code, stdout, stderr) = check(&path);
    assert_eq!(code, Some(0), "{stderr}");
    let home = public.path().join("data-stdio/files");
    assert!(
        stdout.contains(&format!(
            "/files/mcp → stdio: {}\n    children run as nobody (uid {}, stdio_user), home {}\n",
            command.join(" "),
            uid_of("nobody"),
            home.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "    children run as root (uid 0, the route's user) — root, the explicit opt-out"
        ),
        "{stdout}"
    );
    config.stdio_user = Some("no-such-user-pforte".to_owned());
    let path = write_config(public.path(), config).unwrap();
    let (code, _, stderr) = check(&path);
    assert_eq!(code, Some(64), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "pforte: bad configuration: stdio_user: no user named \"no-such-user-pforte\" on this \
         system (the account of command routes without user, such as \"files\", when the gateway \
         runs as root)"
    );
}
