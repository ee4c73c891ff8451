//! What the tests of per-user upstream credentials (`[routes.upstream_auth]`) need around a
//! gateway: a vault key file, the connect prompt read out of an answer (a tool error with the
//! link, a `-32042` URL elicitation, or a JSON-RPC error naming it), the secret form filled in
//! the way a browser does, an upstream that echoes and records every request it receives, a
//! gateway's log kept in a file, and counters read from a gateway's `/metrics`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::{Context as _, ensure};
use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use url::Url;

use crate::oauth::{Browser, Page};

/// The URL-mode elicitation error of MCP 2025-11-25 (`URLElicitationRequiredError`).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// Writes a vault key ring with one fresh key to `dir/vault.key` (mode 0600, as Pforte
/// requires): `k1:` and 32 random bytes in unpadded base64url.
pub fn write_vault_key(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::{io::Read as _, os::unix::fs::PermissionsExt as _};
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    let path = dir.join("vault.key");
    std::fs::write(&path, format!("k1:{}\n", URL_SAFE_NO_PAD.encode(key)))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(path)
}

/// Writes `text` (and a newline) to the secret file `path`, owner-only (0600): the gateway
/// refuses a secret file that group or others may read.
pub fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, format!("{text}\n"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// A wrapper (see `StackBuilder::wrapper`) that appends the gateway's log to `log`, with the
/// credential service's debug lines (a refresh joined rather than made) among them.
pub fn log_wrapper(log: &Path) -> Vec<String> {
    let script = format!(
        "RUST_LOG=info,pingora=warn,pforte::credentials=debug exec \"$@\" 2>>'{}'",
        log.display()
    );
    vec!["sh".into(), "-c".into(), script, "sh".into()]
}

/// A wrapper for `pforte serve …` that lets that gateway's authorization server fetch client
/// ID metadata documents from loopback (`[oauth.cimd] allow_private_addresses`, appended to its
/// config, the last argument) and trust `ca` for them (`SSL_CERT_FILE`, read by the platform
/// verifier when a fetch builds its client, so the file may be written after the start).
pub fn cimd_wrapper(ca: &Path) -> Vec<String> {
    let script = format!(
        "for last; do :; done; printf '\\n[oauth.cimd]\\nallow_private_addresses = true\\n' >> \"$last\"; SSL_CERT_FILE='{}' exec \"$@\"",
        ca.display()
    );
    vec!["sh".into(), "-c".into(), script, "sh".into()]
}

/// The lines of the log `log` that contain `needle`.
pub fn log_lines(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// How the gateway asked its caller to connect an upstream account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// A `tools/call` result with `isError` whose text carries the link.
    ToolError { text: String, link: Url },
    /// JSON-RPC error `-32042`: a URL elicitation.
    Elicitation {
        message: String,
        elicitation_id: String,
        link: Url,
    },
    /// Another JSON-RPC error naming the link in `data.connect_url`.
    Error {
        code: i64,
        message: String,
        link: Url,
    },
}

impl Prompt {
    /// The prompt in a JSON-RPC answer; `None` when the answer is something else.
    pub fn of(answer: &Value) -> Option<Self> {
        if answer["result"]["isError"] == true {
            let text = answer["result"]["content"][0]["text"].as_str()?.to_owned();
            let link = link_in(&text)?;
            return Some(Self::ToolError { text, link });
        }
        let error = answer.get("error")?;
        let code = error["code"].as_i64()?;
        let message = error["message"].as_str().unwrap_or_default().to_owned();
        if code == URL_ELICITATION_REQUIRED {
            let e = &error["data"]["elicitations"][0];
            if e["mode"] != "url" {
                return None;
            }
            return Some(Self::Elicitation {
                message,
                elicitation_id: e["elicitationId"].as_str()?.to_owned(),
                link: Url::parse(e["url"].as_str()?).ok()?,
            });
        }
        let link = Url::parse(error["data"]["connect_url"].as_str()?).ok()?;
        Some(Self::Error {
            code,
            message,
            link,
        })
    }

    /// The connect link.
    pub fn link(&self) -> &Url {
        match self {
            Self::ToolError { link, .. }
            | Self::Elicitation { link, .. }
            | Self::Error { link, .. } => link,
        }
    }

    /// What the caller is told.
    pub fn text(&self) -> &str {
        match self {
            Self::ToolError { text, .. } => text,
            Self::Elicitation { message, .. } | Self::Error { message, .. } => message,
        }
    }

    /// Whether it asks to connect *again* (the stored credential stopped working).
    pub fn is_reconnect(&self) -> bool {
        self.text().contains("stopped working")
    }
}

/// The first connect link (`…/connect/NAME?link=…`) in `text`.
pub fn link_in(text: &str) -> Option<Url> {
    text.split_whitespace()
        .find(|w| w.contains("/connect/") && w.contains("link="))
        .map(|w| w.trim_end_matches(['.', ',', ')']))
        .and_then(|w| Url::parse(w).ok())
}

/// The secret form of a `header` or `env` route: follows `link`, fills in every `v.NAME`
/// from `values` (`NAME`, value), submits it and opens the page it leads to. Returns the
/// form's page and the final ("connected") page.
pub async fn enter_secret(
    browser: &Browser,
    link: &Url,
    values: &[(&str, &str)],
) -> anyhow::Result<(Page, Page)> {
    let page = browser.get(link).await?;
    ensure!(
        page.status == 200,
        "the connect link: {} {}",
        page.status,
        page.body
    );
    let mut form = page.form()?;
    ensure!(form.field("ticket").is_some(), "no ticket in {}", page.body);
    for (name, value) in values {
        form.set(&format!("v.{name}"), value)?;
    }
    let posted = browser.submit(&form, None).await?;
    let done_url = posted.see_other()?;
    let done = browser.get(&done_url).await?;
    ensure!(
        done.status == 200 && done.body.contains("connected"),
        "after the form: {} {}",
        done.status,
        done.body
    );
    Ok((page, done))
}

/// The sum of every sample of the metric `name` (e.g. `pforte_auth_total`) in the exposition
/// `text` whose labels contain each of `labels` (e.g. `kind="static"`).
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A gateway's `/metrics` text (answered to loopback peers on the public listener).
pub async fn metrics_text(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let resp = http.get(format!("{base}/metrics")).send().await?;
    ensure!(resp.status() == 200, "/metrics: {}", resp.status());
    Ok(resp.text().await?)
}

/// One request the echo upstream received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// Every header, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The JSON-RPC method of a POST body, when it had one.
    pub rpc_method: Option<String>,
}

impl Seen {
    /// The value of header `name` (lower case), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct EchoState {
    seen: Vec<Seen>,
    /// `X-Api-Key` values answered 401 (a key its user revoked at the service), with whether
    /// the 401 has a body.
    refused: HashMap<String, bool>,
    /// It keeps sessions (`require_sessions`).
    sessions: bool,
}

/// A tiny stateless MCP server on 127.0.0.1 that records every request (its headers above all)
/// and answers `initialize`, `tools/list` (`echo`, and `peek` annotated `readOnlyHint`) and
/// `tools/call` (the request's headers as the tool's text); a request whose `X-Api-Key` is refused gets 401 (with a JSON
/// body, or none at all). Stopped when dropped.
#[derive(Debug)]
pub struct EchoUpstream {
    pub addr: std::net::SocketAddr,
    state: Arc<Mutex<EchoState>>,
    task: tokio::task::JoinHandle<()>,
}

impl EchoUpstream {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(EchoState::default()));
        let shared = Arc::clone(&state);
        let app = axum::Router::new().fallback(
            move |method: http::Method,
                  uri: http::Uri,
                  headers: http::HeaderMap,
                  body: bytes::Bytes| {
                let shared = Arc::clone(&shared);
                async move { echo(&shared, method, uri, headers, body) }
            },
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, state, task })
    }

    /// Its MCP URL.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state
            .lock()
            .map(|s| s.seen.clone())
            .unwrap_or_default()
    }

    /// From now on it keeps sessions as a server of MCP 2025-11-25 does: `initialize` is
    /// answered with an `Mcp-Session-Id`, and any other request without one gets 400.
    pub fn require_sessions(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.sessions = true;
        }
    }

    /// From now on, requests with `X-Api-Key: key` get 401: with an OAuth-style JSON error
    /// body when `with_body`, else with none (`Content-Length: 0`).
    pub fn refuse_key(&self, key: &str, with_body: bool) {
        if let Ok(mut s) = self.state.lock() {
            s.refused.insert(key.to_owned(), with_body);
        }
    }
}

impl Drop for EchoUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn echo(
    state: &Mutex<EchoState>,
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    body: bytes::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let request: Option<Value> = serde_json::from_slice(&body).ok();
    let rpc_method = request
        .as_ref()
        .and_then(|r| r["method"].as_str())
        .map(str::to_owned);
    let pairs: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let refused = {
        let Ok(mut s) = state.lock() else {
            return http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        s.seen.push(Seen {
            method: method.to_string(),
            path: uri.path().to_owned(),
            headers: pairs.clone(),
            rpc_method: rpc_method.clone(),
        });
        key.and_then(|k| s.refused.get(&k).copied())
    };
    let sessions = state.lock().map(|s| s.sessions).unwrap_or(false);
    if let Some(with_body) = refused {
        let status = http::StatusCode::UNAUTHORIZED;
        if with_body {
            let error = json!({"error": "invalid_token", "error_description": "key revoked"});
            return (status, axum::Json(error)).into_response();
        }
        return (
            status,
            [(
                http::header::WWW_AUTHENTICATE,
                "Bearer error=\"invalid_token\"",
            )],
        )
            .into_response();
    }
    if method != http::Method::POST {
        return http::StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let Some(request) = request else {
        return http::StatusCode::BAD_REQUEST.into_response();
    };
    let id = request["id"].clone();
    let initialize = rpc_method.as_deref() == Some("initialize");
    if sessions && !initialize && !headers.contains_key("mcp-session-id") {
        return (
            http::StatusCode::BAD_REQUEST,
            "Bad Request: Missing session ID",
        )
            .into_response();
    }
    let result = match rpc_method.as_deref() {
        _ if id.is_null() => return http::StatusCode::ACCEPTED.into_response(),
        Some("initialize") => json!({
            "protocolVersion": request["params"]["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo", "version": "1"},
        }),
        Some("tools/list") => json!({"tools": [{
            "name": "echo",
            "description": "The request's headers.",
            "inputSchema": {"type": "object", "properties": {}},
        }, {
            "name": "peek",
            "description": "The request's headers, read only.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true},
        }]}),
        Some("tools/call") => {
            let text = serde_json::to_string(&pairs).unwrap_or_default();
            json!({"content": [{"type": "text", "text": text}], "isError": false})
        }
        Some("ping") => json!({}),
        _ => {
            let answer = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "method not found"}});
            return axum::Json(answer).into_response();
        }
    };
    let answer = axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    if sessions && initialize {
        return ([("mcp-session-id", "echo-session")], answer).into_response();
    }
    answer.into_response()
}

impl Browser {
    /// Signs in to the gateway at `base` as `user` on `/account` (its sign-in form); the
    /// browser keeps the session cookie.
    pub async fn sign_in(&self, base: &str, user: &str, password: &str) -> anyhow::Result<()> {
        let account = Url::parse(&format!("{base}/account"))?;
        let page = self.get(&account).await?;
        ensure!(
            page.status == 200,
            "/account: {} {}",
            page.status,
            page.body
        );
        let mut form = page.form().context("the sign-in form")?;
        form.set("username", user)?;
        form.set("password", password)?;
        let done = self.submit(&form, None).await?;
        let next = done.see_other()?;
        let after = self.get(&next).await?;
        ensure!(
            after.status == 200 && after.body.contains("Signed in as"),
            "after signing in: {} {}",
            after.status,
            after.body
        );
        Ok(())
    }
}
