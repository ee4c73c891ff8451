//! Issue 42, what `pforte check` knows of a virtual server's members: a real gateway in front of
//! mcp-service (the route `mcp`) and a stdio route (tests/fixtures/stdio/plain_server.py) records
//! both routes' tool definitions in its store (the pins); `pforte check` with a `[[virtual]]`
//! over them refuses, naming each, the `whoami` both members list under one bare name, an
//! override of no tool and an override that widens access, and passes the fixed entry with the
//! count of tools it shows; served, the virtual server has its own RFC 9728 document. Also that the Werkbaum catalog the virtual server's unit tests use
//! (gateway/src/virtual_server/testdata/werkbaum_tools.json) is what mcp-service lists through
//! the gateway: `PFORTE_CAPTURE_FIXTURES=1` writes it anew.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, time::Duration};

use pforte_tests::{Route, Stack, bin, eventually};
use serde_json::Value;

use super::stdio_routes::fixture;

/// Waits until the store has pinned every tool of both routes.
async fn recorded(gw: &Stack) -> bool {
    eventually(Duration::from_secs(20), || async {
        let out = gw.admin_cmd(&["tools", "pending"], "").unwrap();
        if out.contains("mcp 13") && out.contains("plain 6") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        false
    })
    .await
}

/// `pforte check` of the gateway's own configuration with `virtual` after it: (success,
/// stdout, stderr).
pub(super) fn check_with(gw: &Stack, dir: &Path, virtual_toml: &str) -> (bool, String, String) {
    let base = std::fs::read_to_string(gw.config_path()).unwrap();
    let config = dir.join("pforte.toml");
    std::fs::write(&config, format!("{base}\n{virtual_toml}")).unwrap();
    let out = Command::new(bin("pforte"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_what_does_not_fit_the_members_recorded_tools() {
    let gw = Stack::builder()
        .route(Route::command(
            "plain",
            &[
                "/usr/bin/python3".to_owned(),
                fixture("plain_server.py").display().to_string(),
            ],
        ))
        .start()
        .await;
    let token = gw.create_token("alice").await.unwrap();

    // The unit tests' Werkbaum catalog is mcp-service's, as it lists today.
    let mut client = gw.mcp(&token);
    client.open().await.unwrap();
    let listed = Value::Array(client.list_tools().await);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gateway/src/virtual_server/testdata/werkbaum_tools.json");
    if std::env::var_os("PFORTE_CAPTURE_FIXTURES").is_some() {
        let text = serde_json::to_string_pretty(&listed).unwrap();
        std::fs::write(&fixture, format!("{text}\n")).unwrap();
    }
    let captured: Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    assert_eq!(
        listed,
        captured,
        "{} is mcp-service's tools/list (PFORTE_CAPTURE_FIXTURES=1 writes it anew)",
        fixture.display()
    );

    assert!(recorded(&gw).await, "both routes' tools recorded");
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = check_with(
        &gw,
        dir.path(),
        r#"
[[virtual]]
name = "team"
members = ["mcp", "plain"]
[virtual.prefix]
mcp = ""
plain = ""
[virtual.tools.nope]
title = "No such tool"
[virtual.tools.echo]
annotations = { readOnlyHint = true }
"#,
    );
    assert!(!ok, "{stderr}");
    for says in [
        "tool name \"whoami\" is shown for mcp's \"whoami\" and plain's \"whoami\"",
        "[virtual.tools.nope] names no member tool",
        "[virtual.tools.echo] annotations.readOnlyHint = true widens access to plain's \"echo\"",
    ] {
        assert!(stderr.contains(says), "{says}: {stderr}");
    }

    let (ok, stdout, stderr) = check_with(
        &gw,
        dir.path(),
        r#"
[[virtual]]
name = "team"
title = "Team tools"
members = ["mcp", "plain"]
[virtual.prefix]
mcp = ""
[virtual.tools.plain_echo]
rename = "echo"
description = "Echoes the text back."
"#,
    );
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("/team/mcp → virtual server over mcp (no prefix), plain (plain_…)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("19 tools shown, checked against the catalogs the store recorded"),
        "{stdout}"
    );

    // Served with it: the virtual server's own RFC 9728 document.
    let checked = std::fs::read_to_string(dir.path().join("pforte.toml")).unwrap();
    std::fs::write(gw.config_path(), checked).unwrap();
    let mut gw = gw;
    gw.restart().await.unwrap();
    let doc: Value = gw
        .http()
        .get(format!(
            "{}/.well-known/oauth-protected-resource/team/mcp",
            gw.mcp_url().trim_end_matches("/mcp")
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["resource"], gw.route_url("team"));
    assert_eq!(doc["resource_name"], "Team tools (Pforte MCP gateway)");
}
