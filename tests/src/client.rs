//! MCP clients for the tests. [`McpClient`] speaks streamable HTTP by hand, so a test sees every
//! status and header: it sends `initialize` (remembering the session id), then every request
//! with `Mcp-Session-Id` and `MCP-Protocol-Version`, and reads answers whether JSON or an event
//! stream. [`rmcp_client`] is a real client (rmcp), for what a real client does.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use rmcp::{
    RoleClient, ServiceExt as _,
    model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

/// The protocol revision the hand-made client speaks unless told otherwise.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// The `Accept` of a POST: a JSON answer or an event stream.
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";
/// The client name both clients announce unless told otherwise.
pub const CLIENT_NAME: &str = "pforte-tests";

/// The `initialize` request (JSON-RPC id 0) a client called `name` sends for `protocol`.
pub fn initialize_request(protocol: &str, name: &str, capabilities: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": protocol,
        "capabilities": capabilities,
        "clientInfo": {"name": name, "version": "1"}}})
}

/// An MCP client by hand over HTTP, holding at most one session (see the module docs).
#[derive(Debug, Clone)]
pub struct McpClient {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    headers: Vec<(String, String)>,
    protocol: String,
    name: String,
    capabilities: Value,
    session: Option<String>,
    next_id: Arc<AtomicU64>,
}

impl McpClient {
    /// A client of the MCP endpoint `url`, without a credential or a session yet.
    pub fn new(http: reqwest::Client, url: &str) -> Self {
        Self {
            http,
            url: url.to_owned(),
            token: None,
            headers: Vec::new(),
            protocol: PROTOCOL_VERSION.to_owned(),
            name: CLIENT_NAME.to_owned(),
            capabilities: json!({}),
            session: None,
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn bearer(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    /// Sends this header with every request.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Speaks `version` (in `initialize` and `MCP-Protocol-Version`).
    pub fn protocol(mut self, version: &str) -> Self {
        self.protocol = version.to_owned();
        self
    }

    /// Announces `name` as its `clientInfo.name`.
    pub fn client_name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Announces these client capabilities in `initialize`.
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// This client in `session` (one another client opened, or none).
    pub fn in_session(mut self, session: Option<&str>) -> Self {
        self.session = session.map(str::to_owned);
        self
    }

    /// The session `initialize` opened, if any.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The `initialize` request this client sends.
    pub fn initialize_request(&self) -> Value {
        initialize_request(&self.protocol, &self.name, &self.capabilities)
    }

    /// POSTs `initialize` (no session, no protocol header); a 200 answer's `Mcp-Session-Id` is
    /// this client's session from then on.
    pub async fn try_initialize(&mut self) -> reqwest::Result<reqwest::Response> {
        let resp = self
            .with_headers(self.http.post(&self.url))
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
            .body(self.initialize_request().to_string())
            .send()
            .await?;
        if resp.status() == 200 {
            self.session = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
        }
        Ok(resp)
    }

    /// [`McpClient::try_initialize`], panicking when the request cannot be sent.
    pub async fn initialize(&mut self) -> reqwest::Response {
        self.try_initialize().await.expect("initialize sent")
    }

    /// Opens a session: `initialize`, its answer read, `notifications/initialized` (202).
    /// The initialize result, or the refusal when `initialize` was not answered 200.
    pub async fn open(&mut self) -> Result<Value, reqwest::Response> {
        let resp = self.initialize().await;
        if resp.status() != 200 {
            return Err(resp);
        }
        let answer = rpc_answer(resp).await;
        assert_eq!(answer["id"], 0, "{answer}");
        let note = self.notify("notifications/initialized").await;
        assert_eq!(note.status(), 202, "notifications/initialized");
        Ok(answer["result"].clone())
    }

    /// A POST with every header: `Accept`, `Content-Type`, the credential, the session and the
    /// protocol version (when in a session), and the extra headers. The body is the caller's.
    pub fn post_request(&self) -> reqwest::RequestBuilder {
        self.with_session(self.with_headers(self.http.post(&self.url)))
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
    }

    /// POSTs the JSON-RPC message `body`.
    pub async fn post(&self, body: &Value) -> reqwest::Response {
        self.post_raw(body.to_string()).await
    }

    /// POSTs `body` as it is (bytes that need not be JSON at all).
    pub async fn post_raw(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.post_request()
            .body(body)
            .send()
            .await
            .expect("POST sent")
    }

    /// POSTs the request `method` with `params` under the next id.
    pub async fn request(&self, method: &str, params: Value) -> reqwest::Response {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    /// POSTs the notification `method`.
    pub async fn notify(&self, method: &str) -> reqwest::Response {
        self.post(&json!({"jsonrpc": "2.0", "method": method}))
            .await
    }

    /// `tools/call NAME ARGS`: the response (its status first of all).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> reqwest::Response {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// `tools/list`: the tools listed (panics unless answered 200 with a list).
    pub async fn list_tools(&self) -> Vec<Value> {
        let resp = self.request("tools/list", json!({})).await;
        assert_eq!(resp.status(), 200, "tools/list");
        let answer = rpc_answer(resp).await;
        answer["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {answer}"))
            .clone()
    }

    /// The names [`McpClient::list_tools`] lists.
    pub async fn tool_names(&self) -> BTreeSet<String> {
        self.list_tools()
            .await
            .iter()
            .map(|t| t["name"].as_str().expect("a tool name").to_owned())
            .collect()
    }

    /// A GET for the session's server-to-client event stream.
    pub fn stream_request(&self) -> reqwest::RequestBuilder {
        self.with_session(self.with_headers(self.http.get(&self.url)))
            .header("accept", "text/event-stream")
    }

    /// Opens the session's server-to-client event stream (GET).
    pub async fn stream(&self) -> reqwest::Response {
        self.stream_request().send().await.expect("GET sent")
    }

    /// Ends the session (DELETE).
    pub async fn delete(&self) -> reqwest::Response {
        self.with_session(self.with_headers(self.http.delete(&self.url)))
            .send()
            .await
            .expect("DELETE sent")
    }

    fn with_headers(&self, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        req
    }

    fn with_session(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.session {
            Some(s) => req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.protocol),
            None => req,
        }
    }
}

/// The JSON-RPC messages of an answer, a JSON body or an event stream, read as they come.
pub struct Events {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    json: bool,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").field("buf", &self.buf).finish()
    }
}

impl Events {
    pub fn new(resp: reqwest::Response) -> Self {
        let json = resp
            .headers()
            .get("content-type")
            .is_some_and(|c| c.to_str().is_ok_and(|c| c.starts_with("application/json")));
        Self {
            body: resp.bytes_stream().boxed(),
            buf: String::new(),
            json,
        }
    }

    /// The next message; `None` at the end of the answer. Panics on a body that is not JSON-RPC
    /// or an event stream that stays silent for 30 s.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if self.json {
                while let Some(chunk) = self.body.next().await {
                    self.push(&chunk.expect("body"));
                }
                if self.buf.is_empty() {
                    return None;
                }
                let text = std::mem::take(&mut self.buf);
                return Some(
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}")),
                );
            }
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue; // a comment (keep-alive) or an event without data
                }
                return Some(
                    serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data:?}")),
                );
            }
            match tokio::time::timeout(Duration::from_secs(30), self.body.next()).await {
                Ok(Some(chunk)) => self.push(&chunk.expect("event stream")),
                Ok(None) => return None,
                Err(_) => panic!("no event within 30 s; have {:?}", self.buf),
            }
        }
    }

    /// Every message until the answer ends.
    pub async fn all(mut self) -> Vec<Value> {
        let mut all = Vec::new();
        while let Some(msg) = self.next().await {
            all.push(msg);
        }
        all
    }

    fn push(&mut self, chunk: &[u8]) {
        self.buf
            .push_str(std::str::from_utf8(chunk).expect("UTF-8 body"));
    }
}

/// The JSON-RPC response in an answer (the first message with a `result` or an `error`).
pub async fn rpc_answer(resp: reqwest::Response) -> Value {
    let mut events = Events::new(resp);
    while let Some(msg) = events.next().await {
        if msg.get("result").is_some() || msg.get("error").is_some() {
            return msg;
        }
    }
    panic!("an answer without a JSON-RPC response")
}

/// A connected rmcp client.
pub type RmcpClient = RunningService<RoleClient, ClientConfig>;

/// Connects an rmcp client (client name "pforte-tests") to `url` with a bearer `token`.
pub async fn rmcp_client(
    url: &str,
    http: reqwest::Client,
    token: &str,
    extra_headers: &[(&str, &str)],
) -> anyhow::Result<RmcpClient> {
    rmcp_client_as(url, http, token, CLIENT_NAME, extra_headers).await
}

/// [`rmcp_client`] announcing `name` as its client name.
pub async fn rmcp_client_as(
    url: &str,
    http: reqwest::Client,
    token: &str,
    name: &str,
    extra_headers: &[(&str, &str)],
) -> anyhow::Result<RmcpClient> {
    let mut headers = HashMap::new();
    for (k, v) in extra_headers {
        headers.insert(
            http::HeaderName::from_bytes(k.as_bytes())?,
            http::HeaderValue::from_str(v)?,
        );
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .auth_header(token.to_owned())
        .custom_headers(headers);
    let transport = StreamableHttpClientTransport::with_client(http, config);
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(name, "1.0"),
    );
    Ok(info.serve(transport).await?)
}

/// `whoami`'s structured answer through an rmcp client.
pub async fn whoami(client: &RmcpClient) -> Value {
    let result = client
        .call_tool(CallToolRequestParams::new("whoami"))
        .await
        .expect("whoami");
    result.structured_content.expect("structured whoami")
}
