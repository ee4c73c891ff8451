//! The catalog's client as a virtual server's way to one member route (issue 42): a member
//! session opened for a caller (`initialize` + `notifications/initialized`), a request on it
//! (the client's own bytes, the name already rewritten), the session ended (`DELETE`) — each
//! with the caller's identity and upstream credential instead of the catalog's own; and how an
//! answer is read (JSON, or the event stream up to the response with the request's id).

use std::time::Duration;

use serde_json::{Value, json};

use super::{
    Catalog, CatalogError, OutboundError, PROTOCOL_HEADER, PROTOCOL_VERSION, SESSION_HEADER,
    SUBJECT, answer::client_capabilities, sse,
};

/// Headers a member request carries besides the route's shared credential: the caller's
/// identity (as the route discloses it) and their own upstream credential.
pub(crate) type Extra = [(http::HeaderName, http::HeaderValue)];

impl Catalog {
    /// A POST of `body` to the member, with the route's credential and `extra` (no time limit
    /// of its own: the caller sets one).
    pub(super) fn member_post(
        &self,
        session: Option<&str>,
        body: Vec<u8>,
        extra: &Extra,
    ) -> Result<reqwest::RequestBuilder, CatalogError> {
        let mut request = self
            .http
            .request(http::Method::POST, &self.target)?
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some((name, value)) = &self.opts.header {
            request = request.header(name, value);
        }
        for (name, value) in extra {
            request = request.header(name, value);
        }
        if let Some(s) = session {
            request = request
                .header(SESSION_HEADER, s)
                .header(PROTOCOL_HEADER, PROTOCOL_VERSION);
        }
        Ok(request)
    }

    /// Opens a member session for one caller: `initialize` (the catalog's client
    /// capabilities) and `notifications/initialized`; the member's session id (`None`: the
    /// member keeps none).
    pub(crate) async fn open_member_session(
        &self,
        extra: &Extra,
        timeout: Duration,
    ) -> Result<Option<String>, CatalogError> {
        let init = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": client_capabilities(),
                "clientInfo": { "name": SUBJECT, "version": env!("CARGO_PKG_VERSION") },
            }
        });
        let body = serde_json::to_vec(&init).map_err(|e| CatalogError::Protocol(e.to_string()))?;
        let (answer, session) = self
            .member_request(None, body, &json!(1), extra, timeout)
            .await?;
        into_result(answer)?;
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec();
        let response = self
            .member_post(session.as_deref(), note, extra)?
            .timeout(timeout)
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(CatalogError::Status(response.status()));
        }
        Ok(session)
    }

    /// One JSON-RPC request (`body`, whose id is `id`) on a member session: the member's
    /// response message, whole, and the session id its answer carried.
    pub(crate) async fn member_request(
        &self,
        session: Option<&str>,
        body: Vec<u8>,
        id: &Value,
        extra: &Extra,
        timeout: Duration,
    ) -> Result<(Value, Option<String>), CatalogError> {
        let response = self
            .member_post(session, body, extra)?
            .timeout(timeout)
            .send()
            .await?;
        let new_session = answered(&response, session)?;
        let answer = read_answer(response, id, self.opts.max_answer_bytes).await?;
        Ok((answer, new_session))
    }

    /// Ends a member session (`DELETE`); the member's answer does not matter.
    pub(crate) async fn end_member_session(&self, session: &str, extra: &Extra) {
        let mut request = match self.http.request(http::Method::DELETE, &self.target) {
            Ok(r) => r
                .timeout(self.opts.request_timeout)
                .header(SESSION_HEADER, session)
                .header(PROTOCOL_HEADER, PROTOCOL_VERSION),
            Err(_) => return,
        };
        if let Some((name, value)) = &self.opts.header {
            request = request.header(name, value);
        }
        for (name, value) in extra {
            request = request.header(name, value);
        }
        if let Err(e) = request.send().await {
            tracing::debug!(error = %pforte_outbound::chain(&e), upstream = %self.url, "member session not ended");
        }
    }
}

/// Whether an answer is an event stream.
pub(super) fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"))
}

/// Whether the server's answer to a request on `session` is one to read: the session is gone
/// (404 on a session), another status is refused; the session id it opened, if any.
pub(super) fn answered(
    response: &reqwest::Response,
    session: Option<&str>,
) -> Result<Option<String>, CatalogError> {
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND && session.is_some() {
        return Err(CatalogError::SessionGone);
    }
    if !status.is_success() {
        return Err(CatalogError::Status(status));
    }
    Ok(response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned))
}

/// An answer's JSON-RPC response with `id`: the JSON body, or from the event stream.
pub(super) async fn read_answer(
    mut response: reqwest::Response,
    id: &Value,
    max: usize,
) -> Result<Value, CatalogError> {
    if is_event_stream(&response) {
        read_sse_response(response, id, max).await
    } else {
        serde_json::from_slice(&pforte_outbound::read_capped(&mut response, max).await?)
            .map_err(|e| CatalogError::Protocol(e.to_string()))
    }
}

/// Reads SSE events until the JSON-RPC response with `id` arrives, at most `max_bytes` of the
/// stream in all.
pub(super) async fn read_sse_response(
    mut response: reqwest::Response,
    id: &Value,
    max_bytes: usize,
) -> Result<Value, CatalogError> {
    let mut reader = sse::EventReader::new(max_bytes);
    let mut read = 0usize;
    let matches = |data: &[u8]| -> Option<Value> {
        let v: Value = serde_json::from_slice(data).ok()?;
        (v.get("id") == Some(id) && (v.get("result").is_some() || v.get("error").is_some()))
            .then_some(v)
    };
    while let Some(chunk) = response.chunk().await? {
        read += chunk.len();
        if read > max_bytes {
            return Err(OutboundError::TooLarge(max_bytes).into());
        }
        if let Some(v) = reader.push(&chunk)?.iter().find_map(|d| matches(d)) {
            return Ok(v);
        }
    }
    reader
        .finish()?
        .and_then(|d| matches(&d))
        .ok_or_else(|| CatalogError::Protocol(format!("the stream ended without response {id}")))
}

/// The `result` of a JSON-RPC response, or its error.
pub(super) fn into_result(mut message: Value) -> Result<Value, CatalogError> {
    if let Some(error) = message.get("error") {
        return Err(CatalogError::JsonRpc {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        });
    }
    message
        .get_mut("result")
        .map(Value::take)
        .ok_or_else(|| CatalogError::Protocol("response without result".into()))
}
