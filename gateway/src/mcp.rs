//! What an MCP request asks for: the JSON-RPC message of a `POST /mcp` read once, without
//! copying it, into its kind, method and the tool, prompt or resource it names; and the
//! `Mcp-Method` / `Mcp-Name` headers checked against it. Pure: bytes in, a decision out.

use std::borrow::Cow;

use base64::Engine as _;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// JSON-RPC error code for a request whose `Mcp-Method` / `Mcp-Name` header contradicts its body.
pub(crate) const HEADER_MISMATCH: i64 = -32020;
/// JSON-RPC error code for a protocol version the gateway does not implement (MCP 2026-07-28,
/// `UnsupportedProtocolVersionError`).
pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// The protocol revisions whose duties the gateway knows, newest first: what it names in an
/// `UnsupportedProtocolVersionError`.
pub(crate) const SUPPORTED_VERSIONS: [&str; 5] = [
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];
/// JSON-RPC: the body is not JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: JSON, but not a single valid JSON-RPC message.
pub(crate) const INVALID_REQUEST: i64 = -32600;

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
    pub(crate) kind: Kind,
    /// The JSON-RPC method; empty for responses.
    pub(crate) method: String,
    /// `params.name` of `tools/call` and `prompts/get`, `params.uri` of `resources/read`,
    /// `params.taskId` of `tasks/get`, `tasks/update` and `tasks/cancel` (SEP-2663).
    pub(crate) target: Option<String>,
    /// The request id as JSON text (`1`, `"a"`), to echo in a JSON-RPC error; `null` otherwise.
    pub(crate) id: String,
    /// `params._meta.traceparent` (W3C trace context, MCP 2026-07-28), when it has the
    /// header's length; the trace code parses it.
    pub(crate) traceparent: Option<String>,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]` (MCP 2026-07-28): the string,
    /// or the JSON text of a value that is not one.
    pub(crate) meta_version: Option<String>,
}

impl Message {
    /// The tool a `tools/call` calls.
    pub(crate) fn tool(&self) -> Option<&str> {
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
    pub(crate) fn code(&self) -> i64 {
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
    #[serde(borrow, rename = "taskId")]
    task_id: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow)]
    traceparent: Option<Cow<'a, str>>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<serde_json::Value>,
}

/// A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`) has 55 characters.
const TRACEPARENT_LEN: usize = 55;

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
    let (params, meta) = match env.params {
        Some(Params {
            name,
            uri,
            task_id,
            meta,
        }) => ((name, uri, task_id), meta),
        None => ((None, None, None), None),
    };
    let target = match (method.as_ref(), params) {
        ("tools/call" | "prompts/get", (name, _, _)) => name.map(Cow::into_owned),
        ("resources/read", (_, uri, _)) => uri.map(Cow::into_owned),
        (m, (_, _, task)) if TASK_METHODS.contains(&m) => task.map(Cow::into_owned),
        _ => None,
    };
    let (traceparent, meta_version) = match meta {
        Some(m) => (m.traceparent, m.protocol_version),
        None => (None, None),
    };
    let traceparent = traceparent
        .filter(|t| t.len() == TRACEPARENT_LEN)
        .map(Cow::into_owned);
    let meta_version = meta_version.map(|v| match v {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    });
    Ok(Message {
        kind,
        method: method.into_owned(),
        target,
        id,
        traceparent,
        meta_version,
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

/// An `Mcp-Method` / `Mcp-Name` header that contradicts the body, is missing where the declared
/// revision requires it, or is sent more than once. The client's text in it is cut to
/// [`crate::logging::MAX_NAME_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Mismatch {
    #[error("the {header} header says {header_value:?} but the body says {body_value:?}")]
    Differs {
        header: &'static str,
        header_value: String,
        body_value: String,
    },
    #[error("the {header} header is missing: protocol version {version} requires it for {method}")]
    Missing {
        header: &'static str,
        version: &'static str,
        method: String,
    },
    #[error("the {header} header is sent {lines} times: send it once")]
    Repeated { header: &'static str, lines: usize },
    #[error("the MCP-Protocol-Version header is missing but the body's _meta says {body_value:?}")]
    VersionMissing { body_value: String },
    #[error("the {header} header says {header_value:?} but the argument is {body_value}")]
    ParamDiffers {
        header: String,
        header_value: String,
        body_value: String,
    },
    #[error("the {header} header is missing: the tool mirrors that argument into it")]
    ParamMissing { header: String },
    #[error("the {header} header is sent more than once: send it once")]
    ParamRepeated { header: String },
}

impl Mismatch {
    #[cfg(test)]
    /// The header at fault.
    pub(crate) fn header(&self) -> &'static str {
        match self {
            Self::Differs { header, .. }
            | Self::Missing { header, .. }
            | Self::Repeated { header, .. } => header,
            Self::VersionMissing { .. } => VERSION_HEADER,
            Self::ParamDiffers { .. } | Self::ParamMissing { .. } | Self::ParamRepeated { .. } => {
                "Mcp-Param"
            }
        }
    }
}

/// The first protocol revision that requires `Mcp-Method` and `Mcp-Name` (SEP-2243).
pub(crate) const HEADERS_REQUIRED_FROM: &str = "2026-07-28";

/// The methods whose requests must carry `Mcp-Name` from [`HEADERS_REQUIRED_FROM`] on.
const NAMED_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// The task methods (SEP-2663, an extension of 2026-07-28): their requests must carry
/// `Mcp-Name: <taskId>` whatever revision they declare, so that a load balancer can route them
/// to the instance that holds the task.
pub(crate) const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// Whether a declared `MCP-Protocol-Version` requires the `Mcp-Method` / `Mcp-Name` headers:
/// [`HEADERS_REQUIRED_FROM`] or a later revision (revisions are `YYYY-MM-DD` dates, in order as
/// text). Absent or not a revision: no.
pub(crate) fn requires_headers(version: Option<&[u8]>) -> bool {
    let Some(v) = version
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
    else {
        return false;
    };
    let revision = v.len() == 10
        && v.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    revision && v >= HEADERS_REQUIRED_FROM
}

/// At most one line each of `Mcp-Method`, `Mcp-Name` and `MCP-Protocol-Version`: with two,
/// the gateway would check one and the upstream might read the other.
pub(crate) fn check_header_lines(
    method_lines: usize,
    name_lines: usize,
    version_lines: usize,
) -> Result<(), Mismatch> {
    for (header, lines) in [
        ("Mcp-Method", method_lines),
        ("Mcp-Name", name_lines),
        (VERSION_HEADER, version_lines),
    ] {
        if lines > 1 {
            return Err(Mismatch::Repeated { header, lines });
        }
    }
    Ok(())
}

/// The protocol version header, as the specification spells it.
const VERSION_HEADER: &str = "MCP-Protocol-Version";

/// Why a request's protocol version is refused (400 either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VersionRefusal {
    /// The header names a revision the gateway does not implement (or is no revision at all):
    /// `UnsupportedProtocolVersionError`, listing [`SUPPORTED_VERSIONS`]. Clipped.
    Unsupported { requested: String },
    /// The header and the body's `_meta` disagree, or the body names a version the header
    /// leaves out: `HeaderMismatch`.
    Mismatch(Mismatch),
}

/// The `MCP-Protocol-Version` header against the gateway's revisions and the body's `_meta`
/// (MCP 2026-07-28, "Protocol Version Header"): a header naming a revision not in
/// [`SUPPORTED_VERSIONS`] is unsupported; with `_meta`'s version present, the header must be
/// sent and say the same. Absent both (clients before 2025-06-18 send no header), it passes.
pub(crate) fn check_version(
    header: Option<&[u8]>,
    message: &Message,
) -> Result<(), VersionRefusal> {
    let clip = |s: &str| crate::logging::clip(s, crate::logging::MAX_NAME_BYTES).into_owned();
    let header = header.map(|h| String::from_utf8_lossy(h).trim().to_owned());
    if let Some(h) = &header
        && !SUPPORTED_VERSIONS.contains(&h.as_str())
    {
        return Err(VersionRefusal::Unsupported { requested: clip(h) });
    }
    match (header, &message.meta_version) {
        (_, None) => Ok(()),
        (None, Some(body)) => Err(VersionRefusal::Mismatch(Mismatch::VersionMissing {
            body_value: clip(body),
        })),
        (Some(h), Some(body)) if &h == body => Ok(()),
        (Some(h), Some(body)) => Err(VersionRefusal::Mismatch(Mismatch::Differs {
            header: VERSION_HEADER,
            header_value: h,
            body_value: clip(body),
        })),
    }
}

/// Checks the `Mcp-Method` and `Mcp-Name` headers, when present, against the body: both must
/// equal what the body says, whatever protocol revision the client claims. The body wins; a
/// header never names what is authorized. With `required` (the request declares a revision
/// that requires them, [`requires_headers`]) a `tools/call`, `prompts/get` or `resources/read`
/// without them is refused too.
pub(crate) fn check_headers(
    message: &Message,
    method_header: Option<&[u8]>,
    name_header: Option<&[u8]>,
    required: bool,
) -> Result<(), Mismatch> {
    let clip = |s: &str| crate::logging::clip(s, crate::logging::MAX_NAME_BYTES).into_owned();
    let checks = [
        ("Mcp-Method", method_header, Some(message.method.as_str())),
        ("Mcp-Name", name_header, message.target.as_deref()),
    ];
    let named = NAMED_METHODS.contains(&message.method.as_str());
    let task = TASK_METHODS.contains(&message.method.as_str());
    for (header, sent, body) in checks {
        let Some(sent) = sent else {
            let must = (required && (named || task)) || (task && header == "Mcp-Name");
            if must && body.is_some() {
                return Err(Mismatch::Missing {
                    header,
                    version: HEADERS_REQUIRED_FROM,
                    method: clip(&message.method),
                });
            }
            continue;
        };
        let decoded = decode_header(sent);
        if decoded.as_deref() != body {
            let header_value = match decoded {
                Some(text) => clip(&text),
                None => clip(&String::from_utf8_lossy(sent)),
            };
            return Err(Mismatch::Differs {
                header,
                header_value,
                body_value: clip(body.unwrap_or("")),
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
    fn meta_traceparent_is_read_when_it_has_the_right_length() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","_meta":{{"traceparent":"{tp}"}}}}}}"#
        );
        assert_eq!(
            inspect(body.as_bytes()).unwrap().traceparent.as_deref(),
            Some(tp)
        );
        let long = body.replace(tp, &"0".repeat(4096));
        assert_eq!(inspect(long.as_bytes()).unwrap().traceparent, None);
        let none = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert_eq!(none.traceparent, None);
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
        assert!(check_headers(&m, None, None, false).is_ok());
        assert!(check_headers(&m, Some(b"tools/call"), Some(b"werkbaum_create"), false).is_ok());
        assert!(check_headers(&m, None, Some(b"=?base64?d2Vya2JhdW1fY3JlYXRl?="), false).is_ok());
        let e = check_headers(&m, None, Some(b"whoami"), false).unwrap_err();
        assert_eq!(e.header(), "Mcp-Name");
        assert!(check_headers(&m, None, Some(b"=?base64?d2hvYW1p?="), false).is_err());
        assert!(check_headers(&m, Some(b"tools/list"), None, false).is_err());
        // A name header on a message that names nothing is a mismatch too.
        let list = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert!(check_headers(&list, None, Some(b"whoami"), false).is_err());
    }

    #[test]
    fn a_mismatch_names_at_most_a_bounded_piece_of_the_headers_or_body() {
        let name = "w".repeat(4 << 20);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}"}}}}"#
        );
        let m = inspect(body.as_bytes()).unwrap();
        let e = check_headers(&m, None, Some(&name.as_bytes()[1..]), false).unwrap_err();
        assert!(e.to_string().len() < 1024, "{}", e.to_string().len());
    }

    #[test]
    fn revisions_from_2026_07_28_require_the_headers() {
        assert!(requires_headers(Some(b"2026-07-28")));
        assert!(requires_headers(Some(b" 2027-01-01 ")));
        assert!(!requires_headers(Some(b"2025-11-25")));
        assert!(!requires_headers(Some(b"2025-06-18")));
        assert!(!requires_headers(None));
        assert!(!requires_headers(Some(b"latest")));
        assert!(!requires_headers(Some(b"9999")));
        assert!(!requires_headers(Some(b"2026-07-28x")));
        let call = inspect(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami"}}"#,
        )
        .unwrap();
        let e = check_headers(&call, None, Some(b"whoami"), true).unwrap_err();
        assert!(
            matches!(
                e,
                Mismatch::Missing {
                    header: "Mcp-Method",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = check_headers(&call, Some(b"tools/call"), None, true).unwrap_err();
        assert!(
            matches!(
                e,
                Mismatch::Missing {
                    header: "Mcp-Name",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(check_headers(&call, Some(b"tools/call"), Some(b"whoami"), true).is_ok());
        // Older revisions: absent headers pass.
        assert!(check_headers(&call, None, None, false).is_ok());
        // Only the methods that name something are held to it.
        let list = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert!(check_headers(&list, None, None, true).is_ok());
        let read = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"werkbaum://guide"}}"#).unwrap();
        assert!(check_headers(&read, Some(b"resources/read"), None, true).is_err());
        let prompt =
            inspect(br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"plan"}}"#)
                .unwrap();
        assert!(check_headers(&prompt, None, Some(b"plan"), true).is_err());
    }

    #[test]
    fn task_requests_name_their_task() {
        let get =
            inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t-1"}}"#)
                .unwrap();
        assert_eq!(get.target.as_deref(), Some("t-1"));
        assert_eq!(get.tool(), None);
        // Mcp-Name is required on any revision, and must be the task id.
        assert!(matches!(
            check_headers(&get, None, None, false),
            Err(Mismatch::Missing {
                header: "Mcp-Name",
                ..
            })
        ));
        assert!(check_headers(&get, None, Some(b"t-2"), false).is_err());
        assert!(check_headers(&get, None, Some(b"t-1"), false).is_ok());
        assert!(check_headers(&get, None, Some(b"t-1"), true).is_err());
        assert!(check_headers(&get, Some(b"tasks/get"), Some(b"t-1"), true).is_ok());
    }

    #[test]
    fn each_header_is_sent_at_most_once() {
        assert!(check_header_lines(0, 0, 0).is_ok());
        assert!(check_header_lines(1, 1, 1).is_ok());
        assert_eq!(
            check_header_lines(1, 1, 2).unwrap_err().header(),
            "MCP-Protocol-Version"
        );
        let e = check_header_lines(2, 1, 0).unwrap_err();
        assert_eq!(
            e,
            Mismatch::Repeated {
                header: "Mcp-Method",
                lines: 2
            }
        );
        assert_eq!(
            check_header_lines(1, 3, 1).unwrap_err().header(),
            "Mcp-Name"
        );
    }

    #[test]
    fn the_version_header_is_known_and_says_what_meta_says() {
        let modern = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#).unwrap();
        assert_eq!(modern.meta_version.as_deref(), Some("2026-07-28"));
        assert_eq!(check_version(Some(b"2026-07-28"), &modern), Ok(()));
        assert!(matches!(
            check_version(Some(b"2025-11-25"), &modern),
            Err(VersionRefusal::Mismatch(Mismatch::Differs {
                header: "MCP-Protocol-Version",
                ..
            }))
        ));
        assert!(matches!(
            check_version(None, &modern),
            Err(VersionRefusal::Mismatch(Mismatch::VersionMissing { .. }))
        ));
        for bad in [&b"1900-01-01"[..], b"2027-01-01", b"latest", b""] {
            assert!(
                matches!(
                    check_version(Some(bad), &modern),
                    Err(VersionRefusal::Unsupported { .. })
                ),
                "{bad:?}"
            );
        }
        // Older clients: no `_meta` version; a known header or none passes.
        let old = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert_eq!(check_version(Some(b"2025-06-18"), &old), Ok(()));
        assert_eq!(check_version(None, &old), Ok(()));
        // A version that is not a string is its JSON text: never a supported one.
        let odd = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}}"#).unwrap();
        assert_eq!(odd.meta_version.as_deref(), Some("20260728"));
        assert!(check_version(Some(b"2026-07-28"), &odd).is_err());
    }
}
