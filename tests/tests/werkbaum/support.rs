//! Shared support for the werkbaum_* end-to-end tests: a gateway + mcp-service stack with its
//! own data dir, rmcp clients with a chosen host name, tool calls, fixtures and git helpers.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use pforte_tests::{Gateway, GatewayOptions, McpService, mcp_client};
use rmcp::{
    RoleClient, ServiceExt as _,
    model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

pub type Client = RunningService<RoleClient, ClientConfig>;

/// The shared Werkbaum fixtures (`../shared/fixtures/werkbaum` from the workspace root), or
/// None with a skip message; under CI=true their absence fails.
pub fn fixtures() -> Option<PathBuf> {
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

pub fn fixture(name: &str) -> Option<String> {
    fixtures().map(|d| std::fs::read_to_string(d.join(name)).unwrap())
}

/// Gateway options for these tests: the gateway's rate limits are off (they are tested with
/// the gateway; here they would only throttle the load tests and the benchmark).
pub fn gateway_options(upstream: String) -> GatewayOptions {
    let mut opts = GatewayOptions::new(upstream);
    opts.extra_toml = "[limits]\nenabled = false\n".to_owned();
    opts
}

/// mcp-service (own data dir) behind a gateway, with one static token.
pub struct Stack {
    pub svc: McpService,
    pub gw: Gateway,
    pub token: String,
    pub data: tempfile::TempDir,
}

impl Stack {
    pub async fn start(extra: &[&str]) -> Self {
        let data = tempfile::tempdir().unwrap();
        Self::start_in(data, extra).await
    }

    /// Starts on an existing data dir (a restart).
    pub async fn start_in(data: tempfile::TempDir, extra: &[&str]) -> Self {
        let dir = data.path().display().to_string();
        let mut args = vec!["--data-dir", dir.as_str()];
        args.extend_from_slice(extra);
        let svc = McpService::start(&args).unwrap();
        let gw = Gateway::start(gateway_options(svc.url())).await.unwrap();
        let token = gw.create_token("werkbaum-tests").await.unwrap();
        Self {
            svc,
            gw,
            token,
            data,
        }
    }

    /// The harness client (host "pforte-tests").
    pub async fn client(&self) -> Client {
        self.gw.mcp_client(&self.token, &[]).await.unwrap()
    }

    /// A client announcing `host` as its clientInfo name.
    pub async fn client_as(&self, host: &str) -> Client {
        client_as(&self.gw.mcp_url(), self.gw.http(), &self.token, host).await
    }
}

pub async fn client_as(url: &str, http: reqwest::Client, token: &str, host: &str) -> Client {
    if host == "pforte-tests" {
        return mcp_client(url, http, token, &[]).await.unwrap();
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned());
    let transport = StreamableHttpClientTransport::with_client(http, config);
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(host, "1.0"),
    )
    .serve(transport)
    .await
    .unwrap()
}

/// A tool answer: `isError`, `structuredContent`, and the text content.
#[derive(Debug, Clone)]
pub struct Answer {
    pub is_error: bool,
    pub data: Value,
    pub text: String,
}

impl Answer {
    pub fn ok(self) -> Value {
        assert!(!self.is_error, "unexpected tool error: {}", self.text);
        self.data
    }
    pub fn err(self) -> Value {
        assert!(self.is_error, "expected a tool error, got: {}", self.text);
        self.data["error"].clone()
    }
}

pub async fn call(client: &Client, tool: &str, args: Value) -> Answer {
    try_call(client, tool, args).await.unwrap()
}

/// Every version of `doc`'s history, following the pages' `next` cursor; the last page's
/// answer with all entries in `entries`.
pub async fn history_all(client: &Client, doc: &str) -> Value {
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

pub async fn try_call(
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
pub async fn create(client: &Client, title: &str, text: &str, allow: bool) -> (String, Value) {
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
pub async fn base_of(client: &Client, doc: &str) -> Value {
    let r = call(client, "werkbaum_read", json!({"document": doc}))
        .await
        .ok();
    json!({"version": r["revision"]["version"], "checksum": r["revision"]["checksum"]})
}

/// SHA-256 hex via coreutils (the tests crate has no hash dependency).
pub fn sha256(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t");
    std::fs::write(&p, text).unwrap();
    let out = Command::new("sha256sum").arg(&p).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// Runs git in `dir`; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
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
pub fn ids(tree: &Value) -> Vec<String> {
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

/// A real `redis-server` on a free loopback port, stopped on drop; None (with a skip message)
/// when it is not installed, unless CI=true.
pub struct Redis {
    child: std::process::Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Option<Self> {
        let bin = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        let Some(bin) = bin else {
            assert!(!pforte_tests::in_ci(), "redis-server missing under CI=true");
            pforte_tests::skip("redis-server not installed");
            return None;
        };
        let port = pforte_tests::free_port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(bin)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Some(Self {
            child,
            port,
            _dir: dir,
        })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A deterministic xorshift generator (no rand dependency in the tests crate).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn coin(&mut self) -> bool {
        self.next().is_multiple_of(2)
    }
}
