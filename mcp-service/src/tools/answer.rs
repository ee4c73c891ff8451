//! The tools' answers as typed structs: what `structuredContent` holds and, through schemars,
//! each tool's `outputSchema`. Parts the core computes (the tree, line ops) are passed through
//! as JSON and described here by their shape.

use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::input::LineOp;
use crate::identity::Identity;

/// The revision an answer was computed from: `{document, version, checksum}` for a server
/// document, `{checksum}` for a text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Revision {
    /// The document uuid (document form only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    /// The document version (document form only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// SHA-256 hex of the text.
    pub checksum: String,
}

/// The core's summary figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Summary {
    pub nodes: u64,
    pub warnings: u64,
    /// Nodes on the cheapest path.
    pub needed: u64,
    /// Stations: the next concrete things to work on.
    pub stations: u64,
    /// False when the cheapest path is approximate.
    pub exact: bool,
}

/// A warning of the notation (the set is upstream Werkbaum's; see werkbaum://guide).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Warning {
    /// The warning type, e.g. `mixedGate`, `sizeConflict`.
    #[serde(rename = "type")]
    pub kind: String,
    /// 1-based line, absent for whole-plan warnings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// English explanation.
    pub text: String,
    /// Type-specific fields (`id`, `label`, `firstLine`, `tag`, …).
    #[serde(flatten)]
    pub detail: Map<String, Value>,
}

/// A warning of the checked text that is new against the earlier one, with its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Finding {
    /// A warning type, or `prodStatus` (a node newly set to `[^]`).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    pub text: String,
    /// True: a write with this finding is refused.
    pub blocking: bool,
    /// Why it blocks (or why it was allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub detail: Map<String, Value>,
}

/// A hint that is not a warning, e.g. `notAPlan` (the text is mostly prose).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Notice {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
    #[serde(flatten)]
    pub detail: Map<String, Value>,
}

/// A node of the tree, as the core computes it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // describes the core's JSON; never built in Rust
pub(crate) struct Node {
    pub id: Option<String>,
    pub label: String,
    pub line: u64,
    /// `and`, `or` or `xor`: the kind of the children group (null without children).
    pub gate: Option<String>,
    /// `and` (`-`, `+`, no sigil), `or` (`|`), `xor` (`=`).
    #[serde(rename = "type")]
    pub kind: String,
    /// `+`: an optional extra.
    pub optional: bool,
    /// Status key (see werkbaum://guide), null without a box.
    pub status: Option<String>,
    /// Box code (`?`, ` `, `~`, `/`, `x`, `^`, `-`, `!`).
    pub status_code: Option<String>,
    /// No further along than the least-advanced dependency (a status key).
    pub effective_status: Option<String>,
    pub size: Option<String>,
    /// The size the path computation assumes.
    pub assumed_size: String,
    /// `@` people.
    pub tags: Vec<String>,
    /// `&` marks.
    pub marks: Vec<String>,
    pub taiga_slug: Option<String>,
    /// Ids this node depends on.
    pub deps: Vec<String>,
    pub desc: Option<String>,
    pub url: Option<String>,
    pub focus: bool,
    pub fold: Option<String>,
    pub collapsed: bool,
    /// A leaf of size M or larger: break it down.
    pub needs_breakdown: bool,
    pub size_conflict: bool,
    /// On the cheapest path.
    pub needed: bool,
    pub station: bool,
    pub children: Vec<Node>,
}

/// One assignee's share of the cheapest path.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Load {
    pub tag: String,
    pub load: f64,
    pub stations: u64,
}

/// The cheapest path.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PathInfo {
    /// Lines of the needed nodes.
    pub needed: Vec<u64>,
    /// Lines of the stations.
    pub stations: Vec<u64>,
    pub cost: f64,
    pub loads: Vec<Load>,
    /// `{tag, share, stations, totalStations}` or null.
    pub overloaded_assignee: Option<Map<String, Value>>,
    pub exact: bool,
}

/// `werkbaum_read`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ReadAnswer {
    pub revision: Revision,
    pub summary: Summary,
    /// The plan text.
    pub text: String,
    /// The document title (document form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `werkbaum://doc/{uuid}` (document form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// `werkbaum_inspect`: the sections asked for, the summary and the notices.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct InspectAnswer {
    pub revision: Revision,
    pub summary: Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<Node>>")]
    pub tree: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<Warning>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathInfo>,
    pub notices: Vec<Notice>,
}

/// `werkbaum_check`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct CheckAnswer {
    pub revision: Revision,
    /// Without `against`: every warning; with it: the new ones and nodes newly set to `[^]`.
    pub findings: Vec<Finding>,
    /// Any finding blocking.
    pub blocking: bool,
    /// Every warning of the text.
    pub warnings: Vec<Warning>,
    pub notices: Vec<Notice>,
}

/// Every edit tool (`set_status`, `apply_ops`, `write`, `add_node`, `move_node`, `set_size`,
/// `remove_node`). Text form: `text` and `checksum` of the edited plan, nothing stored. Document
/// form: `written`, `document`, `version`, `checksum` (and `author` when written).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct EditAnswer {
    /// What the edit was computed from.
    pub revision: Revision,
    /// Document form: whether a new version was stored (false: the edit changed nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<bool>,
    /// Text form: the edited plan (save it yourself unless `blocking`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// Checksum of the edited text (document form: of the stored version).
    pub checksum: String,
    /// `host · user` of the stored version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// The line operations from the old text to the new one.
    #[schemars(with = "Vec<LineOp>")]
    pub ops: Value,
    pub findings: Vec<Finding>,
    pub blocking: bool,
}

/// `werkbaum_create`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct CreateAnswer {
    pub revision: Revision,
    pub written: bool,
    pub document: String,
    pub title: String,
    pub uri: String,
    pub version: u64,
    pub checksum: String,
    pub author: String,
    pub findings: Vec<Finding>,
    pub blocking: bool,
}

/// One version in a document's history.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HistoryItem {
    pub version: u64,
    /// RFC 3339.
    pub time: String,
    /// `host · user`.
    pub author: String,
    pub host: String,
    pub user: Option<String>,
    pub client_id: Option<String>,
    /// What changed, in one line.
    pub subject: String,
    pub checksum: String,
    #[schemars(with = "Vec<LineOp>")]
    pub ops: Value,
}

/// `werkbaum_history`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct HistoryAnswer {
    pub revision: Revision,
    pub title: String,
    /// Oldest first, at most the page's `limit`.
    pub entries: Vec<HistoryItem>,
    /// Present when later versions exist: call again with `since` set to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// `whoami`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhoamiAnswer {
    /// The caller, its fields inline.
    #[serde(flatten)]
    pub identity: Identity,
    /// The MCP host from the handshake.
    pub host: Option<String>,
    pub host_version: Option<String>,
    pub protocol_version: Option<String>,
}

/// A tool's `outputSchema`: its answer, or (on `isError` results) `{error: {code, message}}`.
pub(crate) fn output_schema<T: JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    let mut answer = rmcp::handler::server::common::schema_for_output::<T>()
        .as_ref()
        .clone();
    let defs = answer.remove("$defs");
    answer.remove("$schema");
    let error = json!({
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}}
        }}
    });
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("anyOf".into(), json!([Value::Object(answer), error]));
    if let Some(defs) = defs {
        schema.insert("$defs".into(), defs);
    }
    Arc::new(super::schema::compact_output(&schema))
}

/// Serializes an answer struct (plain data: this cannot fail in practice).
pub fn to_value<T: Serialize>(answer: &T) -> Value {
    serde_json::to_value(answer).unwrap_or_else(|e| json!({ "error": e.to_string() }))
}
