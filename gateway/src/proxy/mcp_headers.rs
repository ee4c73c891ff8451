//! The MCP headers of a `/mcp` request checked in the admission: `Mcp-Method`, `Mcp-Name` and
//! `MCP-Protocol-Version` at most once each, and against the body, and a tool's
//! `Mcp-Param-*` headers against its arguments (the decisions are
//! `crate::mcp`'s; here they are read from the request and mapped to a `Rejection`).

use pingora::http::RequestHeader;

use crate::{
    mcp::{self, Message},
    param_headers::{self, ParamHeader},
    reply::Rejection,
};

/// `MCP-Protocol-Version`, when sent, must name a revision the gateway knows and say what the
/// body's `_meta` says; `Mcp-Method` / `Mcp-Name`, when sent, must say what the body says; a
/// request that declares a protocol revision requiring them (2026-07-28 on) must send them
/// where it names something.
pub(super) fn check_mcp_headers(req: &RequestHeader, message: &Message) -> Result<(), Rejection> {
    let method = req.headers.get(MCP_METHOD).map(|v| v.as_bytes());
    let name = req.headers.get(MCP_NAME).map(|v| v.as_bytes());
    let version = req.headers.get(PROTOCOL_VERSION).map(|v| v.as_bytes());
    let required = mcp::requires_headers(version);
    mcp::check_version(version, message).map_err(|refusal| match refusal {
        mcp::VersionRefusal::Unsupported { requested } => Rejection::UnsupportedVersion {
            requested,
            id: message.id.clone(),
        },
        mcp::VersionRefusal::Mismatch(mismatch) => Rejection::HeaderMismatch {
            mismatch,
            id: message.id.clone(),
        },
    })?;
    mcp::check_headers(message, method, name, required).map_err(|mismatch| {
        Rejection::HeaderMismatch {
            mismatch,
            id: message.id.clone(),
        }
    })
}

const MCP_METHOD: &str = "mcp-method";
const MCP_NAME: &str = "mcp-name";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// One line each of `Mcp-Method` and `Mcp-Name` at most: all lines are forwarded, so the
/// upstream could read another than the one checked.
pub(super) fn check_mcp_header_lines(req: &RequestHeader) -> Result<(), Rejection> {
    let lines = |name| req.headers.get_all(name).iter().count();
    mcp::check_header_lines(lines(MCP_METHOD), lines(MCP_NAME), lines(PROTOCOL_VERSION)).map_err(
        |mismatch| Rejection::HeaderMismatch {
            mismatch,
            id: "null".to_owned(),
        },
    )
}

/// The `Mcp-Param-*` headers of a `tools/call` whose tool mirrors parameters into them
/// (`declared`, from the catalog): each must say what the arguments say (400 `HeaderMismatch`
/// otherwise). Forwarded unchanged either way.
pub(super) fn check_param_headers(
    req: &RequestHeader,
    body: &[u8],
    message: &Message,
    declared: &[ParamHeader],
) -> Result<(), Rejection> {
    let parsed: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Rejection::Malformed(mcp::Malformed::NotJson(e.to_string())))?;
    let arguments = parsed.pointer("/params/arguments");
    let header = |name: &str| -> Vec<&[u8]> {
        let key = format!("{}{}", param_headers::PREFIX, name.to_ascii_lowercase());
        req.headers
            .get_all(key.as_str())
            .iter()
            .map(|v| v.as_bytes())
            .collect()
    };
    param_headers::check(declared, arguments, header).map_err(|mismatch| {
        Rejection::HeaderMismatch {
            mismatch,
            id: message.id.clone(),
        }
    })
}
