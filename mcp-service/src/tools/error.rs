//! Why a tool call failed, and the one place where failures become MCP answers: every variant
//! is a tool error (`isError: true`) with a stable `code`, an English message and, where it
//! helps the agent recover, the data it needs (a conflict carries the current text).

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::engine::EngineError;
use crate::store::{Document, StoreError};

/// A refused or failed tool call. Nothing was written when any of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments are well-typed but do not fit together (text and document, missing base).
    #[error("{0}")]
    InvalidInput(String),
    /// Arguments the tool's input schema does not name.
    #[error(
        "unknown argument{} {}; this tool accepts {}",
        if unknown.len() == 1 { "" } else { "s" },
        quoted(unknown),
        quoted(accepted)
    )]
    UnknownArguments {
        unknown: Vec<String>,
        accepted: Vec<String>,
    },
    #[error("no document {0} on this server (see resources/list)")]
    UnknownDocument(String),
    #[error("{what} is {bytes} bytes; the limit is {limit} bytes")]
    TooLarge {
        what: &'static str,
        bytes: usize,
        limit: usize,
    },
    /// The base is stale: someone wrote since the agent's last read.
    #[error(
        "your base is version {base_version} but document {} is at version {} \
         (written by someone else since your read); nothing was written. Re-read the current \
         text below, redo your change on it and retry with the new base.",
        current.uuid, current.version
    )]
    Conflict {
        base_version: u64,
        current: Box<Document>,
    },
    /// The change would introduce blocking findings (guard rails); nothing was written.
    #[error(
        "blocked by guard rails: {}; nothing was written (pass allowWarnings / allowProd to \
         write anyway, if that is really intended)",
        summary
    )]
    Blocked {
        summary: String,
        findings: Value,
        revision: Value,
    },
    /// The core rejected the call (unknown node, invalid move, op out of range, …).
    #[error("{message}")]
    Core { code: String, message: String },
    /// The engine's queue is full: nothing ran; the same call may be retried.
    #[error("{0}")]
    Busy(EngineError),
    /// The store holds its configured maximum of documents: nothing was created.
    #[error("{0}")]
    TooManyDocuments(StoreError),
    #[error("the plan engine failed: {0}")]
    Engine(EngineError),
    #[error("{0}")]
    Store(StoreError),
}

/// `` `a`, `b` `` (or "nothing" for none).
fn quoted(names: &[String]) -> String {
    if names.is_empty() {
        return "no arguments".to_owned();
    }
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl From<EngineError> for ToolError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Core { code, message } => ToolError::Core { code, message },
            busy @ EngineError::Busy(_) => ToolError::Busy(busy),
            other => ToolError::Engine(other),
        }
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        match e {
            full @ StoreError::Full(_) => ToolError::TooManyDocuments(full),
            other => ToolError::Store(other),
        }
    }
}

impl ToolError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &str {
        match self {
            ToolError::InvalidInput(_) => "invalidInput",
            ToolError::UnknownArguments { .. } => "unknownArguments",
            ToolError::UnknownDocument(_) => "unknownDocument",
            ToolError::TooLarge { .. } => "textTooLarge",
            ToolError::Conflict { .. } => "conflict",
            ToolError::Blocked { .. } => "blocked",
            ToolError::Core { code, .. } => code,
            ToolError::Busy(_) => "busy",
            ToolError::TooManyDocuments(_) => "tooManyDocuments",
            ToolError::Engine(_) => "engineFailure",
            ToolError::Store(_) => "storeUnavailable",
        }
    }

    /// The structured error payload (`structuredContent.error`).
    pub fn payload(&self) -> Value {
        let mut error = json!({ "code": self.code(), "message": self.to_string() });
        match self {
            ToolError::Conflict {
                base_version,
                current,
            } => {
                error["baseVersion"] = json!(base_version);
                error["current"] = json!({
                    "document": current.uuid,
                    "title": current.title,
                    "version": current.version,
                    "checksum": current.checksum,
                    "text": current.text,
                });
            }
            ToolError::Blocked {
                findings, revision, ..
            } => {
                error["findings"] = findings.clone();
                error["revision"] = revision.clone();
            }
            ToolError::UnknownArguments { unknown, accepted } => {
                error["unknown"] = json!(unknown);
                error["accepted"] = json!(accepted);
            }
            ToolError::TooLarge { bytes, limit, .. } => {
                error["bytes"] = json!(bytes);
                error["limit"] = json!(limit);
            }
            ToolError::TooManyDocuments(StoreError::Full(limit)) => {
                error["limit"] = json!(limit);
            }
            ToolError::Busy(_) => {
                error["retry"] = json!(true);
            }
            _ => {}
        }
        json!({ "error": error })
    }

    /// The MCP answer: a tool error with the payload as `structuredContent` and a text that
    /// an agent can act on (a conflict's text includes the current plan).
    pub fn into_result(self) -> CallToolResult {
        let payload = self.payload();
        let mut text = format!("error {}: {self}", self.code());
        if let ToolError::Conflict { current, .. } = &self {
            text.push_str(&format!(
                "\n\ncurrent: document {} version {} checksum {}\n-----\n{}",
                current.uuid, current.version, current.checksum, current.text
            ));
        }
        let mut result = CallToolResult::structured_error(payload);
        result.content = vec![ContentBlock::text(text)];
        result
    }
}
