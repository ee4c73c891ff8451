//! Long-lived MCP sessions for the memory measurements (`pforte-soak` and the service's
//! session-memory test): a session opened by hand with its `GET /mcp` event stream, and a
//! process's resident memory read from `/proc`.

use anyhow::{Context as _, bail};

use crate::{ACCEPT_BOTH, PROTOCOL_VERSION, initialize_request};

/// Resident set size of `pid` in KiB (`VmRSS` in `/proc/PID/status`).
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

/// Opens a session at `url` (`initialize`, then `notifications/initialized`) and its
/// standalone `GET` event stream; returns the session id and the open stream, which the caller
/// reads or drops. `bearer` is the token when `url` is the gateway's.
pub async fn open_session_stream(
    http: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
) -> anyhow::Result<(String, reqwest::Response)> {
    let auth = |req: reqwest::RequestBuilder| match bearer {
        Some(token) => req.bearer_auth(token),
        None => req,
    };
    let init = auth(http.post(url))
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH)
        .body(
            initialize_request(PROTOCOL_VERSION, "pforte-soak", &serde_json::json!({})).to_string(),
        )
        .send()
        .await?;
    if init.status() != 200 {
        bail!("initialize: {}", init.status());
    }
    let session = init
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .context("no mcp-session-id")?
        .to_owned();
    init.bytes().await?;
    let done = auth(http.post(url))
        .header("content-type", "application/json")
        .header("accept", ACCEPT_BOTH)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await?;
    if done.status() != 202 {
        bail!("initialized: {}", done.status());
    }
    let stream = auth(http.get(url))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .send()
        .await?;
    let sse = stream
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if stream.status() != 200 || !sse {
        bail!("GET stream: {} (SSE: {sse})", stream.status());
    }
    Ok((session, stream))
}

/// Ends session `session` at `url` with `DELETE`.
pub async fn delete_session(
    http: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
    session: &str,
) -> anyhow::Result<()> {
    let mut req = http
        .delete(url)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", PROTOCOL_VERSION);
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let r = req.send().await?;
    anyhow::ensure!(r.status().is_success(), "DELETE: {}", r.status());
    Ok(())
}
