//! Big answers: 6 MiB and 20 MiB file reads (the filesystem server sends a file's text twice:
//! as text and as `structuredContent`) reach the official TypeScript SDK client
//! (tests/conformance/read-file.cjs) and the Python SDK client
//! (tests/fixtures/stdio/read_file_client.py) through a stdio route running the npm filesystem
//! server with the default `max_line_bytes`, and through an HTTP route in front of an MCP server
//! on the Python SDK that answers with JSON bodies (tests/fixtures/http/file_server.py).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use pforte_tests::{
    Limits, Route, Stack, conformance_packages, eventually, filesystem_server, free_port, in_ci,
    node22, python_sdk_or_skip, run_node_json, run_python_json, skip,
};
use serde_json::{Value, json};
use sha2::Digest as _;

/// How long one client may take for both reads (debug builds, a shared machine).
const CLIENT_LIMIT: Duration = Duration::from_secs(300);

/// Node 22, the TS SDK's node_modules and the filesystem server's program; `None` (skipped)
/// outside CI when they cannot be had.
fn node_tools() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let found = node22().and_then(|node| {
        let sdk = conformance_packages()?;
        let node_modules = sdk.parent().map(Path::to_path_buf).unwrap_or(sdk);
        Ok((node, node_modules, filesystem_server()?))
    });
    match found {
        Ok(tools) => Some(tools),
        Err(e) if in_ci() => panic!("{e}"),
        Err(e) => {
            skip(&e);
            None
        }
    }
}

/// Text files whose reads make answers of about 6 and 20 MiB (each sent twice, with quotes,
/// tabs and line breaks escaped): their paths and what a client must report for them.
fn write_files(dir: &Path) -> (Vec<String>, Vec<Value>) {
    let mut paths = Vec::new();
    let mut want = Vec::new();
    for (name, mib) in [("six.txt", 3), ("twenty.txt", 9)] {
        let mut text = String::with_capacity(mib << 20);
        let mut i = 0u64;
        while text.len() < mib << 20 {
            text.push_str(&format!("line {i:08}: \"quoted\"\tand a tab\n"));
            i += 1;
        }
        let path = dir.join(name);
        std::fs::write(&path, &text).unwrap();
        let sha: String = sha2::Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        paths.push(path.display().to_string());
        want.push(json!({"len": text.len(), "sha256": sha}));
    }
    (paths, want)
}

/// Both SDK clients read `paths` at `url` with `token`; each must get exactly the files.
async fn both_clients_read(
    url: &str,
    token: &str,
    paths: &[String],
    want: &[Value],
    node: &Path,
    node_modules: &Path,
    python: &Path,
) {
    let mut args = vec![url, token];
    args.extend(paths.iter().map(String::as_str));
    let script = pforte_tests::conformance_script("read-file.cjs");
    let ts = run_node_json(node, node_modules, &script, &args, CLIENT_LIMIT)
        .await
        .unwrap();
    assert_eq!(
        ts["files"],
        json!(want),
        "the TypeScript SDK client at {url}"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/stdio/read_file_client.py");
    let py = run_python_json(python, &script, &args, "", CLIENT_LIMIT)
        .await
        .unwrap();
    assert_eq!(py["files"], json!(want), "the Python SDK client at {url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_and_twenty_mib_file_reads_reach_both_sdks_through_a_stdio_route() {
    let Some((node, node_modules, fs_server)) = node_tools() else {
        return;
    };
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let (paths, want) = write_files(&dir_path);
    let command = [
        node.display().to_string(),
        fs_server.display().to_string(),
        dir_path.display().to_string(),
    ];
    // The default max_line_bytes.
    let gw = Stack::builder()
        .upstream("http://127.0.0.1:9/mcp")
        .plain_http()
        .limits(Limits::off().sessions_per_principal(1000))
        .route(Route::command("files", &command))
        .start()
        .await;
    let token = gw.create_token("big").await.unwrap();
    let url = format!("{}/files/mcp", gw.base);
    both_clients_read(&url, &token, &paths, &want, &node, &node_modules, &python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_and_twenty_mib_file_reads_reach_both_sdks_through_an_http_route() {
    let Some((node, node_modules, _)) = node_tools() else {
        return;
    };
    let Some(python) = python_sdk_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (paths, want) = write_files(dir.path());
    let port = free_port();
    let mut server = pforte_tests::Proc::spawn({
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/http/file_server.py"))
            .arg(port.to_string());
        cmd
    })
    .unwrap();
    let up = eventually(Duration::from_secs(30), || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    assert!(up, "the file server never listened on {port}");
    let upstream = format!("http://127.0.0.1:{port}/mcp");
    let gw = Stack::builder()
        .upstream(&upstream)
        .plain_http()
        .limits(Limits::off().sessions_per_principal(1000))
        .start()
        .await;
    let token = gw.create_token("big").await.unwrap();
    let url = format!("{}/mcp", gw.base);
    both_clients_read(&url, &token, &paths, &want, &node, &node_modules, &python).await;
    let _ = server.child.kill();
}
