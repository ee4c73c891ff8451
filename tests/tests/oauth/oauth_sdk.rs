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

use std::{path::Path, process::Command, time::Duration};

use pforte_tests::{PforteUp, bin, python_sdk_or_skip, run_python_json};

/// The SDK version this check was written against (`pip index versions mcp`).
const MCP_SDK_VERSION: &str = pforte_tests::MCP_PYTHON_SDK;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_completes_oauth_against_pforte_up() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let up = PforteUp::start().await.unwrap();
    let (user, password) = up.login().unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/oauth_client.py");
    let result = run_python_json(
        &python,
        &script,
        &[&up.mcp_url, &user],
        &format!("{password}\n"),
        Duration::from_secs(120),
    )
    .await
    .unwrap();
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
        .arg(up.data_dir())
        .output()
        .unwrap();
    let grants = String::from_utf8_lossy(&grants.stdout);
    assert!(
        grants.contains(client_id) && grants.contains("active"),
        "{grants}"
    );
}
