//! An independent MCP client completes OAuth against `pforte up`: the official MCP Python SDK
//! (`mcp`, pinned below) with its own discovery, registration, PKCE, `iss` check and refresh;
//! tests/python/oauth_client.py only plays the user in the browser (parses the login form, posts
//! the credentials, approves on the consent page) and then calls `whoami` twice, the second time
//! after making the SDK refresh.
//!
//! The SDK lives in a venv at `<target dir>/mcp-venv`. Outside CI the test creates it when
//! missing (`python3 -m venv` + `pip install mcp==VERSION`) and skips with a message when that
//! fails; under `CI=true` tests/prepare.sh (run by ./test.sh) installs it and a missing SDK fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use pforte_tests::{Proc, bin, eventually, http_client, in_ci};
use serde_json::Value;

/// The SDK version this check was written against (`pip index versions mcp`).
const MCP_SDK_VERSION: &str = pforte_tests::MCP_PYTHON_SDK;

/// A Python with the pinned SDK, or why there is none (the shared venv under `target/`).
fn python_with_sdk() -> Result<PathBuf, String> {
    pforte_tests::python_with_mcp_sdk(MCP_SDK_VERSION)
}

fn banner_field<'a>(banner: &'a [String], label: &str) -> &'a str {
    banner
        .iter()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label:?} in {banner:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_completes_oauth_against_pforte_up() {
    let python = match python_with_sdk() {
        Ok(p) => p,
        Err(why) if !in_ci() => {
            pforte_tests::skip(&why);
            return;
        }
        Err(why) => panic!("{why}"),
    };

    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin("pforte"));
    cmd.args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("PFORTE_MCP_SERVICE_BIN", bin("mcp-service"));
    let mut up = Proc::spawn(cmd).unwrap();
    let banner = up
        .lines_until("Press Ctrl-C", Duration::from_secs(60))
        .unwrap();
    let url = banner_field(&banner, "MCP URL:").to_owned();
    // "Login:     user admin, password XXXX (for Claude.ai …"
    let login = banner_field(&banner, "Login:");
    let (user, password) = login
        .strip_prefix("user ")
        .and_then(|l| l.split_once(", password "))
        .map(|(u, rest)| (u.to_owned(), rest.split(' ').next().unwrap().to_owned()))
        .unwrap_or_else(|| panic!("no generated login in {login:?}"));
    let ready_url = url.replace("/mcp", "/readyz");
    let ready = eventually(Duration::from_secs(30), || {
        let req = http_client(None).get(&ready_url).send();
        async move { req.await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    assert!(ready, "pforte up never became ready");

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/oauth_client.py");
    let stderr_path = dir.path().join("python-stderr.log");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(&url)
        .arg(&user)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the Python client did not finish within 120 s:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let out = child.wait_with_output().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(status.success(), "python client failed: {status}\n{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    eprintln!("{result:#}");

    assert_eq!(result["sdk"], format!("mcp {MCP_SDK_VERSION}"));
    let client_id = result["client_id"].as_str().expect("registered client");
    for key in ["whoami", "whoami_after_refresh"] {
        let me = &result[key];
        assert_eq!(me["subject"], user.as_str(), "{key}: {me}");
        assert_eq!(me["client"], client_id, "{key}: {me}");
        assert_eq!(me["authKind"], "oauth", "{key}: {me}");
    }
    assert_eq!(result["refreshed"], true, "the SDK refreshed its token");
    assert_eq!(
        result["authorizations"], 1,
        "one browser round, then refresh"
    );
    for p in [
        "client_id",
        "code_challenge",
        "code_challenge_method",
        "redirect_uri",
        "resource",
        "response_type",
        "state",
    ] {
        assert!(
            result["authorize_url_params"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == p),
            "{p} in the SDK's authorization request"
        );
    }

    // The grant is visible to the operator.
    let grants = Command::new(bin("pforte"))
        .args(["grant", "list", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let grants = String::from_utf8_lossy(&grants.stdout);
    assert!(
        grants.contains(client_id) && grants.contains("active"),
        "{grants}"
    );
}
