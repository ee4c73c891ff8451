//! The README's "Call a tool with curl" and "Call a tool with the Python SDK" examples, run as
//! written against a real gateway (only the URL and the token are replaced), so they stay true.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use pforte_tests::Stack;

/// The first fenced block of `lang` after the heading `heading` in the README.
fn readme_block(heading: &str, lang: &str) -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let (_, section) = readme
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let (_, block) = section
        .split_once(&format!("```{lang}\n"))
        .unwrap_or_else(|| panic!("no ```{lang} block under {heading:?}"));
    block.split_once("```").unwrap().0.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_curl_example_calls_whoami() {
    let gw = Stack::builder().plain_http().start().await;
    let token = gw.create_token("curl-example").await.unwrap();
    let script = readme_block("## Call a tool with curl", "sh");
    assert!(
        script.contains("URL=http://127.0.0.1:8787/mcp TOKEN=pft_…"),
        "{script}"
    );
    let script = script.replace(
        "URL=http://127.0.0.1:8787/mcp TOKEN=pft_…",
        &format!("URL={} TOKEN={token}", gw.mcp_url()),
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(r#""id":2,"result""#), "{stdout}");
    assert!(stdout.contains(r#""subject":"operator""#), "{stdout}");
    assert!(stdout.contains(r#""client":"curl-example""#), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_example_calls_whoami() {
    let Some(python) = pforte_tests::python_sdk_or_skip() else {
        return;
    };
    let gw = Stack::builder().plain_http().start().await;
    let token = gw.create_token("sdk-example").await.unwrap();
    let code = readme_block("## Call a tool with the Python SDK", "python")
        .replace("http://127.0.0.1:8787/mcp", &gw.mcp_url())
        .replace("pft_…", &token);
    let out =
        tokio::task::spawn_blocking(move || Command::new(python).args(["-c", &code]).output())
            .await
            .unwrap()
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("'subject': 'operator'"), "{stdout}");
    assert!(stdout.contains("'client': 'sdk-example'"), "{stdout}");
}
