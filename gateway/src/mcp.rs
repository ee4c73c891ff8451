//! What an MCP request asks for: the JSON-RPC message of a `POST /mcp` read once, without
//! copying it, into its kind, method and the tool, prompt or resource it names; and the
//! `Mcp-Method` / `Mcp-Name` headers checked against it. Pure: bytes in, a decision out.

use std::borrow::Cow;

use base64::Engine as _;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// JSON-RPC error code for a request whose `Mcp-Method` / `Mcp-Name` header contradicts its body.
pub const HEADER_MISMATCH: i64 = -32020;
/// JSON-RPC: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: JSON, but not a single valid JSON-RPC message.
pub const INVALID_REQUEST: i64 = -32600;

/// What kind of JSON-RPC message a POST carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request (has an `id`): the server answers it.
    Request,
    /// A notification (no `id`).
    Notification,
    /// The client's answer to a server-to-client request (`result` or `error`, no `method`).
    Response,
}

/// One inspected MCP message: what the gateway needs to decide on it, nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: Kind,
    /// The JSON-RPC method; empty for responses.
    pub method: String,
    /// `params.name` of `tools/call` and `prompts/get`, `params.uri` of `resources/read`.
    pub target: Option<String>,
    /// The request id as JSON text (`1`, `"a"`), to echo in a JSON-RPC error; `null` otherwise.
    pub id: String,
}

impl Message {
    /// The tool a `tools/call` calls.
    pub fn tool(&self) -> Option<&str> {
        (self.method == "tools/call")
            .then_some(self.target.as_deref())
            .flatten()
    }
}

/// Why a body is not one inspectable MCP message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error(
        "JSON-RPC batches are not supported (removed in MCP 2025-06-18); send one message per request"
    )]
    Batch,
    #[error("not a JSON-RPC 2.0 message: {0}")]
    NotJsonRpc(&'static str),
}

impl Malformed {
    /// The JSON-RPC error code for this refusal.
    pub fn code(&self) -> i64 {
        match self {
            Self::NotJson(_) => PARSE_ERROR,
            Self::Batch | Self::NotJsonRpc(_) => INVALID_REQUEST,
        }
    }
}

/// The message's fields the gateway reads; every other field is skipped without being kept.
/// Duplicate keys are refused by serde, so the gateway and the service cannot read two
/// different `method`s out of one body.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    id: Option<IdValue>,
    #[serde(borrow)]
    params: Option<Params<'a>>,
    result: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    uri: Option<Cow<'a, str>>,
}

/// A JSON-RPC id: a string or a number (kept as JSON text).
#[derive(Deserialize)]
#[serde(untagged)]
enum IdValue {
    Num(serde_json::Number),
    Str(String),
}

impl IdValue {
    fn to_json(&self) -> String {
        match self {
            Self::Num(n) => n.to_string(),
            Self::Str(s) => serde_json::Value::String(s.clone()).to_string(),
        }
    }
}

/// Reads one JSON-RPC message from a `POST /mcp` body.
pub fn inspect(body: &[u8]) -> Result<Message, Malformed> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'[') => return Err(Malformed::Batch),
        Some(b'{') => {}
        Some(_) | None => return Err(Malformed::NotJsonRpc("the body must be one JSON object")),
    }
    let env: Envelope<'_> =
        serde_json::from_slice(body).map_err(|e| Malformed::NotJson(e.to_string()))?;
    if env.jsonrpc.as_deref() != Some("2.0") {
        return Err(Malformed::NotJsonRpc("\"jsonrpc\" must be \"2.0\""));
    }
    let id = env
        .id
        .as_ref()
        .map_or_else(|| "null".to_owned(), IdValue::to_json);
    let (kind, method) = match (env.method, env.id.is_some()) {
        (Some(m), true) => (Kind::Request, m),
        (Some(m), false) => (Kind::Notification, m),
        (None, true) if env.result.is_some() || env.error.is_some() => {
            (Kind::Response, Cow::Borrowed(""))
        }
        (None, _) => return Err(Malformed::NotJsonRpc("a message needs a \"method\"")),
    };
    let target = match (method.as_ref(), env.params) {
        ("tools/call" | "prompts/get", Some(p)) => p.name.map(Cow::into_owned),
        ("resources/read", Some(p)) => p.uri.map(Cow::into_owned),
        _ => None,
    };
    Ok(Message {
        kind,
        method: method.into_owned(),
        target,
        id,
    })
}

/// Decodes an `Mcp-Method` / `Mcp-Name` header value: plain visible ASCII, or the
/// `=?base64?…?=` form for values that are not (MCP 2026-07-28). `None` when undecodable.
pub fn decode_header(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?.trim();
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(encoded))
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_owned()),
    }
}

/// A header that contradicts the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {header} header says {header_value:?} but the body says {body_value:?}")]
pub struct Mismatch {
    pub header: &'static str,
    pub header_value: String,
    pub body_value: String,
}

/// Checks the `Mcp-Method` and `Mcp-Name` headers, when present, against the body: both must
/// equal what the body says, whatever protocol revision the client claims. The body wins; a
/// header never names what is authorized.
pub fn check_headers(
    message: &Message,
    method_header: Option<&[u8]>,
    name_header: Option<&[u8]>,
) -> Result<(), Mismatch> {
    let checks = [
        ("Mcp-Method", method_header, Some(message.method.as_str())),
        ("Mcp-Name", name_header, message.target.as_deref()),
    ];
    for (header, sent, body) in checks {
        let Some(sent) = sent else { continue };
        let decoded = decode_header(sent);
        if decoded.as_deref() != body {
            return Err(Mismatch {
                header,
                header_value: decoded.unwrap_or_else(|| String::from_utf8_lossy(sent).into_owned()),
                body_value: body.unwrap_or("").to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_calls_reads_and_prompts() {
        let m = inspect(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"werkbaum_write","arguments":{"name":"x"}}}"#).unwrap();
        assert_eq!(m.kind, Kind::Request);
        assert_eq!(m.tool(), Some("werkbaum_write"));
        assert_eq!(m.id, "7");
        let m = inspect(br#"{"jsonrpc":"2.0","id":"a","method":"resources/read","params":{"uri":"werkbaum://guide"}}"#).unwrap();
        assert_eq!(m.target.as_deref(), Some("werkbaum://guide"));
        assert_eq!(m.tool(), None);
        assert_eq!(m.id, "\"a\"");
        let m =
            inspect(br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"plan"}}"#)
                .unwrap();
        assert_eq!(m.target.as_deref(), Some("plan"));
    }

    #[test]
    fn kinds() {
        let n = inspect(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert_eq!(n.kind, Kind::Notification);
        let r = inspect(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#).unwrap();
        assert_eq!(r.kind, Kind::Response);
        let e = inspect(br#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#).unwrap();
        assert_eq!(e.kind, Kind::Response);
        // Found by fuzzing: an empty method is a request (the kind says so, not the method),
        // and it names no target even with params.
        let q = inspect(br#"{"jsonrpc":"2.0","id":2,"method":"","params":{"uri":"km5"}}"#).unwrap();
        assert_eq!(
            (q.kind, q.method.as_str(), q.target),
            (Kind::Request, "", None)
        );
    }

    #[test]
    fn escaped_names_are_decoded() {
        let m = inspect(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"who\u0061mi"}}"#,
        )
        .unwrap();
        assert_eq!(m.tool(), Some("whoami"));
    }

    #[test]
    fn refuses_batches_garbage_and_ambiguity() {
        assert_eq!(inspect(b" [{}]"), Err(Malformed::Batch));
        assert_eq!(inspect(b"[]").unwrap_err().code(), INVALID_REQUEST);
        assert_eq!(inspect(b"{nope").unwrap_err().code(), PARSE_ERROR);
        assert!(inspect(b"").is_err());
        assert!(inspect(b"\"tools/call\"").is_err());
        assert!(inspect(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).is_err());
        assert!(inspect(br#"{"jsonrpc":"2.0","id":1}"#).is_err());
        // A second "method" or "name" would let the service read another call than the gateway.
        assert!(
            inspect(br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#).is_err()
        );
        assert!(inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","name":"werkbaum_create"}}"#).is_err());
        assert!(inspect(br#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#).is_err());
    }

    #[test]
    fn large_padding_is_skipped_not_kept() {
        let pad = "x".repeat(1 << 20);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"arguments":{{"pad":"{pad}"}},"name":"werkbaum_create"}}}}"#
        );
        assert_eq!(
            inspect(body.as_bytes()).unwrap().tool(),
            Some("werkbaum_create")
        );
    }

    #[test]
    fn header_forms() {
        assert_eq!(decode_header(b"whoami").as_deref(), Some("whoami"));
        assert_eq!(
            decode_header(b"=?base64?d2hvYW1p?=").as_deref(),
            Some("whoami")
        );
        assert_eq!(
            decode_header(b"=?base64?d2hvYW1p?=").as_deref(),
            Some("whoami")
        );
        assert_eq!(decode_header(b"=?base64?***?="), None);
    }

    #[test]
    fn headers_must_match_the_body() {
        let m = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"werkbaum_create"}}"#).unwrap();
        assert!(check_headers(&m, None, None).is_ok());
        assert!(check_headers(&m, Some(b"tools/call"), Some(b"werkbaum_create")).is_ok());
        assert!(check_headers(&m, None, Some(b"=?base64?d2Vya2JhdW1fY3JlYXRl?=")).is_ok());
        let e = check_headers(&m, None, Some(b"whoami")).unwrap_err();
        assert_eq!(e.header, "Mcp-Name");
        assert!(check_headers(&m, None, Some(b"=?base64?d2hvYW1p?=")).is_err());
        assert!(check_headers(&m, Some(b"tools/list"), None).is_err());
        // A name header on a message that names nothing is a mismatch too.
        let list = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert!(check_headers(&list, None, Some(b"whoami")).is_err());
    }
}
