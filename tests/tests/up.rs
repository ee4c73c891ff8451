//! End to end, `pforte up`: one command starts gateway + mcp-service, prints a working token and
//! the Claude Code line, stops cleanly on Ctrl-C, and a second run keeps the token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, time::Duration};

use nix::sys::signal::Signal;
use pforte_tests::{Proc, bin, http_client, mcp_client};
use rmcp::model::CallToolRequestParams;

fn start_up(data_dir: &Path) -> (Proc, Vec<String>) {
    let mut cmd = Command::new(bin("pforte"));
    cmd.args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("PFORTE_MCP_SERVICE_BIN", bin("mcp-service"));
    let mut proc = Proc::spawn(cmd).unwrap();
    let banner = proc
        .lines_until("Press Ctrl-C", Duration::from_secs(30))
        .unwrap();
    (proc, banner)
}

fn field<'a>(banner: &'a [String], label: &str) -> &'a str {
    banner
        .iter()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label:?} in {banner:#?}"))
}

/// Children of `pid` (any thread).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

async fn whoami_client(url: &str, token: &str) -> serde_json::Value {
    let health = url.replace("/mcp", "/readyz");
    let ready = pforte_tests::eventually(Duration::from_secs(20), || {
        let req = http_client(None).get(&health).send();
        async move { req.await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    assert!(ready, "pforte up never became ready");
    let client = mcp_client(url, http_client(None), token, &[])
        .await
        .unwrap();
    let result = client
        .call_tool(CallToolRequestParams::new("whoami"))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    result.structured_content.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_prints_a_working_token_and_a_restart_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pforte-data");

    let (mut first, banner) = start_up(&data);
    let url = field(&banner, "MCP URL:").to_owned();
    let token = field(&banner, "Token:").to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    assert!(token.starts_with("pft_"), "{token}");
    let claude = format!(
        "claude mcp add --transport http pforte {url} --header \"Authorization: Bearer {token}\""
    );
    assert!(banner.iter().any(|l| l.trim() == claude), "{banner:#?}");

    let me = whoami_client(&url, &token).await;
    assert_eq!(me["subject"], "operator");
    assert_eq!(me["client"], "pforte-up");

    // Ctrl-C stops both processes.
    let kids = children(first.child.id());
    assert!(
        !kids.is_empty(),
        "mcp-service should be a child of pforte up"
    );
    let status = first
        .signal_and_wait(Signal::SIGINT, Duration::from_secs(15))
        .unwrap();
    assert!(status.success(), "{status}");
    for kid in kids {
        assert!(
            !Path::new(&format!("/proc/{kid}")).exists()
                || std::fs::read_to_string(format!("/proc/{kid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "mcp-service {kid} outlived pforte up"
        );
    }

    // A second run reuses the data dir: the first token still works.
    let (_second, banner) = start_up(&data);
    assert!(
        banner.iter().any(|l| l.contains("still works")),
        "{banner:#?}"
    );
    let url = field(&banner, "MCP URL:").to_owned();
    let me = whoami_client(&url, &token).await;
    assert_eq!(me["client"], "pforte-up");
}
