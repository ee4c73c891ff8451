//! Shared support for the werkbaum_* end-to-end tests: a stack whose mcp-service keeps its
//! documents in a data dir the test holds, rmcp clients with a chosen host name, tool calls,
//! fixtures and git helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use pforte_tests::{Limits, Stack, rmcp_client_as};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

pub(crate) type Client = pforte_tests::RmcpClient;

/// The shared Werkbaum fixtures (`../shared/fixtures/werkbaum` from the workspace root), or
/// None with a skip message; under CI=true their absence fails.
pub(crate) fn fixtures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/werkbaum");
    if dir.join("werkbaum.werkbaum").exists() {
        return Some(dir);
    }
    assert!(
        !pforte_tests::in_ci(),
        "fixtures missing at {} but CI=true",
        dir.display()
    );
    pforte_tests::skip(&format!("Werkbaum fixtures not found at {}", dir.display()));
    None
}

pub(crate) fn fixture(name: &str) -> Option<String> {
    fixtures().map(|d| std::fs::read_to_string(d.join(name)).unwrap())
}

/// mcp-service (its data dir held here) behind a gateway, with one static token. The gateway's
/// rate limits are off (they are tested with the gateway; here they would only throttle the
/// load tests and the benchmark).
pub(crate) struct Werkbaum {
    pub gw: Stack,
    pub token: String,
    pub data: tempfile::TempDir,
}

impl Werkbaum {
    pub(crate) async fn start(extra: &[&str]) -> Self {
        let data = tempfile::tempdir().unwrap();
        Self::start_in(data, extra).await
    }

    /// Starts on an existing data dir (a restart).
    pub(crate) async fn start_in(data: tempfile::TempDir, extra: &[&str]) -> Self {
        let dir = data.path().display().to_string();
        let mut args = vec!["--data-dir", dir.as_str()];
        args.extend_from_slice(extra);
        let gw = Stack::builder()
            .service_args(&args)
            .limits(Limits::off())
            .start()
            .await;
        let token = gw.create_token("werkbaum-tests").await.unwrap();
        Self { gw, token, data }
    }

    /// The harness client (host "pforte-tests").
    pub(crate) async fn client(&self) -> Client {
        self.gw.rmcp_client(&self.token, &[]).await.unwrap()
    }

    /// A client announcing `host` as its clientInfo name.
    pub(crate) async fn client_as(&self, host: &str) -> Client {
        rmcp_client_as(&self.gw.mcp_url(), self.gw.http(), &self.token, host, &[])
            .await
            .unwrap()
    }
}

/// A tool answer: `isError`, `structuredContent`, and the text content.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub is_error: bool,
    pub data: Value,
    pub text: String,
}

impl Answer {
    pub(crate) fn ok(self) -> Value {
        assert!(!self.is_error, "unexpected tool error: {}", self.text);
        self.data
    }
    pub(crate) fn err(self) -> Value {
        assert!(self.is_error, "expected a tool error, got: {}", self.text);
        self.data["error"].clone()
    }
}

pub(crate) async fn call(client: &Client, tool: &str, args: Value) -> Answer {
    try_call(client, tool, args).await.unwrap()
}

/// Every version of `doc`'s history, following the pages' `next` cursor; the last page's
/// answer with all entries in `entries`.
pub(crate) async fn history_all(client: &Client, doc: &str) -> Value {
    let mut entries = Vec::new();
    let mut args = json!({"document": doc, "limit": 100});
    loop {
        let mut page = call(client, "werkbaum_history", args.clone()).await.ok();
        entries.extend(page["entries"].as_array().cloned().unwrap_or_default());
        match page.get("next").cloned() {
            Some(next) => args["since"] = next,
            None => {
                page["entries"] = Value::Array(entries);
                return page;
            }
        }
    }
}

pub(crate) async fn try_call(
    client: &Client,
    tool: &str,
    args: Value,
) -> Result<Answer, rmcp::ServiceError> {
    let arguments = args.as_object().cloned().unwrap_or_default();
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await?;
    let text = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Answer {
        is_error: r.is_error == Some(true),
        data: r.structured_content.unwrap_or(Value::Null),
        text,
    })
}

/// Creates a document and returns (uuid, base).
pub(crate) async fn create(
    client: &Client,
    title: &str,
    text: &str,
    allow: bool,
) -> (String, Value) {
    let r = call(
        client,
        "werkbaum_create",
        json!({"title": title, "text": text, "allowWarnings": allow, "allowProd": allow}),
    )
    .await
    .ok();
    let uuid = r["document"].as_str().unwrap().to_owned();
    (
        uuid,
        json!({"version": r["version"], "checksum": r["checksum"]}),
    )
}

/// `{version, checksum}` of the document's current state.
pub(crate) async fn base_of(client: &Client, doc: &str) -> Value {
    let r = call(client, "werkbaum_read", json!({"document": doc}))
        .await
        .ok();
    json!({"version": r["revision"]["version"], "checksum": r["revision"]["checksum"]})
}

/// SHA-256 hex via coreutils (the tests crate has no hash dependency).
pub(crate) fn sha256(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t");
    std::fs::write(&p, text).unwrap();
    let out = Command::new("sha256sum").arg(&p).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// Runs git in `dir`; returns stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// All node ids of an inspect tree, pre-order.
pub(crate) fn ids(tree: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = tree.as_array().unwrap().iter().rev().collect();
    while let Some(n) = stack.pop() {
        if let Some(id) = n["id"].as_str() {
            out.push(id.to_owned());
        }
        stack.extend(n["children"].as_array().unwrap().iter().rev());
    }
    out
}

/// A deterministic xorshift generator (no rand dependency in the tests crate).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn coin(&mut self) -> bool {
        self.next().is_multiple_of(2)
    }
}
