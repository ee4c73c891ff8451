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

/// The README's "Front a third-party MCP server" configuration passes `pforte check` as written
/// (only its paths replaced), and its vault key commands work: `keygen --file` makes an
/// owner-only ring, a second `keygen` puts a new key first, `rekey` re-seals under it, and a key
/// file others can read is refused with what to do.
#[test]
fn the_upstream_auth_example_checks_and_its_vault_key_rotates() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("vault.key");
    let secret = dir.path().join("wiki.token");
    // Owner-only, as the gateway requires of every secret file.
    pforte_tests::write_secret(&secret, "wiki-secret").unwrap();
    let pforte = |args: &[&str]| {
        let out = Command::new(pforte_tests::bin("pforte"))
            .args(args)
            .env_remove("PFORTE_VAULT_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let path = |p: &Path| p.display().to_string();
    let (code, out, err) = pforte(&["vault", "keygen", "--file", &path(&key), "--id", "k1"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let service = pforte_tests::bin("mcp-service");
    let block = readme_block("## Front a third-party MCP server", "toml")
        .replace("/etc/pforte/vault.key", &path(&key))
        .replace("/etc/pforte/wiki.token", &path(&secret))
        .replace(
            r#"command = ["github-mcp-server", "stdio"]"#,
            &format!("command = [{:?}, \"stdio\"]", path(&service)),
        );
    assert!(block.contains("kind = \"oauth\"") && block.contains("kind = \"env\""));
    let config = dir.path().join("pforte.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n{block}",
            path(&dir.path().join("data"))
        ),
    )
    .unwrap();
    let (code, out, err) = pforte(&["check", "--config", &path(&config)]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = pforte(&["vault", "keygen", "--file", &path(&key), "--id", "k2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let ring = std::fs::read_to_string(&key).unwrap();
    let ids: Vec<&str> = ring.lines().filter_map(|l| l.split(':').next()).collect();
    assert_eq!(ids, ["k2", "k1"]);
    let (code, out, err) = pforte(&["vault", "rekey", "--config", &path(&config)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("under key \"k2\""), "{out}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = pforte(&["check", "--config", &path(&config)]);
    assert_ne!(code, Some(0));
    assert!(err.contains("chmod 600"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one clear line: {err}");
}
