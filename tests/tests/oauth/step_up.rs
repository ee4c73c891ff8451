//! Step-up authorization with an official SDK client (issue 10, point 3): the MCP Python SDK
//! authorizes against `pforte up` with `mcp:read` only, calls the read tool `whoami`, then the
//! write tool `werkbaum_create`; the gateway answers 403 `insufficient_scope` naming every scope
//! the call needs, the SDK re-authorizes by itself with the larger scope, the user approves a
//! consent page that shows `mcp:write` being added, and the retried call succeeds.
//!
//! tests/python/step_up_client.py plays the user in the browser and prints a JSON summary; this
//! test asserts on it. The SDK (`mcp`, pinned below) lives in `<target>/mcp-venv` as for
//! tests/tests/oauth/oauth_sdk.rs: created outside CI when missing (or skipped), installed by tests/prepare.sh.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeSet, path::Path, process::Command, time::Duration};

use pforte_tests::{PforteUp, bin, parse_challenge, python_sdk_or_skip, run_python_json};
use serde_json::Value;

/// The SDK version the step-up handling was read in (mcp/client/auth/oauth2.py).
const MCP_SDK_VERSION: &str = pforte_tests::MCP_PYTHON_SDK;

fn scopes(s: &Value) -> BTreeSet<String> {
    s.as_str()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_steps_up_from_read_to_write() {
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let up = PforteUp::start().await.unwrap();
    let (user, password) = up.login().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/step_up_client.py");
    let r = run_python_json(
        &python,
        &script,
        &[&up.mcp_url, &user],
        &format!("{password}\n"),
        Duration::from_secs(120),
    )
    .await
    .unwrap();
    eprintln!("{r:#}");

    assert_eq!(r["sdk"], format!("mcp {MCP_SDK_VERSION}"));
    assert!(r["error"].is_null(), "the client failed: {}", r["error"]);

    // First round: read only, and the read tool works.
    let asked = r["authorize_scopes"].as_array().unwrap();
    assert_eq!(scopes(&asked[0]), set(&["mcp:read"]), "first authorization");
    assert_eq!(scopes(&r["scopes_before_write"]), set(&["mcp:read"]));
    assert_eq!(r["whoami"]["is_error"], false, "{}", r["whoami"]);
    assert_eq!(r["whoami"]["structured"]["subject"], user.as_str());
    let first_consent = r["consent_pages"][0].as_str().unwrap();
    assert!(
        first_consent.contains("mcp:read") && !first_consent.contains("mcp:write"),
        "the first consent page asks for mcp:read only: {first_consent}"
    );

    // The write call: one 403 with the step-up challenge naming every scope the call needs.
    let challenges: Vec<&str> = r["mcp_responses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] == 403)
        .map(|m| m["www_authenticate"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(challenges.len(), 1, "one 403: {}", r["mcp_responses"]);
    let challenge = challenges[0];
    let (scheme, params) = parse_challenge(challenge).expect("one challenge");
    assert!(
        scheme.eq_ignore_ascii_case("bearer")
            && params.get("error").map(String::as_str) == Some("insufficient_scope")
            && params.contains_key("resource_metadata"),
        "{challenge}"
    );
    assert_eq!(
        scopes(&Value::from(params["scope"].as_str())),
        set(&["mcp:read", "mcp:write"]),
        "every scope the call needs: {challenge}"
    );

    // The SDK re-authorized by itself with the larger scope, in a second consent.
    assert_eq!(asked.len(), 2, "two authorizations: {asked:?}");
    assert_eq!(scopes(&asked[1]), set(&["mcp:read", "mcp:write"]));
    let second_consent = r["consent_pages"][1].as_str().unwrap();
    // Some word of the page says what is new: "add", "adds", "added", "additional", "new" …
    let says_added = second_consent
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| w.starts_with("add") || w == "new" || w == "newly");
    assert!(
        second_consent.contains("mcp:write") && says_added,
        "the second consent page shows that mcp:write is being added: {second_consent}"
    );
    assert_eq!(
        r["token_scopes"]
            .as_array()
            .unwrap()
            .iter()
            .map(scopes)
            .collect::<Vec<_>>(),
        vec![set(&["mcp:read"]), set(&["mcp:read", "mcp:write"])],
        "tokens issued"
    );

    // The retried call succeeded, and the session goes on with the new token.
    assert!(
        r["create_error"].is_null(),
        "werkbaum_create: {}",
        r["create_error"]
    );
    let created = &r["create"];
    assert_eq!(created["is_error"], false, "{created}");
    assert_eq!(created["structured"]["version"], 1, "{created}");
    assert_eq!(created["structured"]["written"], true, "{created}");
    let after = &r["whoami_after"];
    assert_eq!(after["is_error"], false, "{after}");
    assert_eq!(
        after["structured"]["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect::<BTreeSet<_>>(),
        set(&["mcp:read", "mcp:write"]),
        "the service sees the stepped-up grant: {after}"
    );

    // The operator sees the grant with both scopes.
    let client_id = r["client_id"].as_str().unwrap();
    let grants = Command::new(bin("pforte"))
        .args(["grant", "list", "--data-dir"])
        .arg(up.data_dir())
        .output()
        .unwrap();
    let grants = String::from_utf8_lossy(&grants.stdout);
    assert!(
        grants.lines().any(|l| l.contains(client_id)
            && l.contains(" active ")
            && l.contains("mcp:read")
            && l.contains("mcp:write")),
        "an active grant with both scopes: {grants}"
    );
    eprintln!(
        "the SDK by itself would first have asked for {} (the 401 names no scope)",
        r["sdk_first_scope"]
    );
}
