//! The tools' input types: serde for parsing, schemars for the published JSON Schemas (enums
//! for status codes, sizes, include sections and op kinds). No validation logic lives here
//! beyond what the types themselves express; `tools` checks the combinations.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// `{version, checksum}` of the document as the agent last read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Base {
    /// The document version of the agent's last read.
    pub version: u64,
    /// The SHA-256 hex checksum of the agent's last read.
    pub checksum: String,
}

/// A node reference: its id (with or without `#`) or its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum NodeRef {
    Line(u64),
    Id(String),
}

impl NodeRef {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            NodeRef::Line(n) => serde_json::Value::from(*n),
            NodeRef::Id(s) => serde_json::Value::from(s.as_str()),
        }
    }

    pub fn display(&self) -> String {
        match self {
            NodeRef::Line(n) => format!("line {n}"),
            NodeRef::Id(s) if s.starts_with('#') => s.clone(),
            NodeRef::Id(s) => format!("#{s}"),
        }
    }
}

/// A Werkbaum status box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Status {
    /// `[?]` idea
    #[serde(rename = "?")]
    Idea,
    /// `[ ]` planned
    #[serde(rename = " ")]
    Planned,
    /// `[~]` in progress
    #[serde(rename = "~")]
    InProgress,
    /// `[/]` first cut through
    #[serde(rename = "/")]
    FirstCut,
    /// `[x]` done
    #[serde(rename = "x")]
    Done,
    /// `[^]` in production (blocked unless allowProd)
    #[serde(rename = "^")]
    Prod,
    /// `[-]` discarded
    #[serde(rename = "-")]
    Discarded,
    /// `[!]` high risk
    #[serde(rename = "!")]
    HighRisk,
}

impl Status {
    pub fn code(self) -> &'static str {
        match self {
            Status::Idea => "?",
            Status::Planned => " ",
            Status::InProgress => "~",
            Status::FirstCut => "/",
            Status::Done => "x",
            Status::Prod => "^",
            Status::Discarded => "-",
            Status::HighRisk => "!",
        }
    }
}

/// A Werkbaum size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Size {
    XS,
    S,
    M,
    L,
    XL,
    XXL,
}

impl Size {
    pub fn code(self) -> &'static str {
        match self {
            Size::XS => "XS",
            Size::S => "S",
            Size::M => "M",
            Size::L => "L",
            Size::XL => "XL",
            Size::XXL => "XXL",
        }
    }
}

/// A section of the `inspect` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Include {
    Tree,
    Warnings,
    Path,
}

/// The kind of a line operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Insert,
    Replace,
    Delete,
}

/// One line operation on `text.split("\n")`, applied in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LineOp {
    pub op: OpKind,
    /// 0-based line index at the moment this op applies.
    pub index: u64,
    /// Lines to replace or delete (replace: default lines.length; delete: default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Lines to insert or to replace with (no `\n` inside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
}

/// Where a tool reads its plan: `text` (a file the agent read itself) or `document` (a uuid of
/// this server) — exactly one.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct Source {
    /// The plan text, when the agent works on a local file. Give `text` or `document`, not both.
    #[serde(default)]
    pub text: Option<String>,
    /// The uuid of a document on this server. Give `text` or `document`, not both.
    #[serde(default)]
    pub document: Option<String>,
}

/// The switches that lift a guard rail for one call.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Allow {
    /// Write even if the change introduces structural warnings (mixedGate, unknownStatus,
    /// descStray, duplicateId).
    #[serde(default)]
    pub allow_warnings: bool,
    /// Write even if the change sets a node to `[^]` (production).
    #[serde(default)]
    pub allow_prod: bool,
}

/// A required field that may be `null`: serde reports an absent key as a missing field
/// (because of `deserialize_with`), while `null` reads as `None`.
fn nullable<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ReadInput {
    #[serde(flatten)]
    pub source: Source,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct InspectInput {
    #[serde(flatten)]
    pub source: Source,
    /// Restrict the tree to this node's subtree (id or line number).
    #[serde(default)]
    pub id: Option<NodeRef>,
    /// Sections to return (default all three).
    #[serde(default)]
    pub include: Option<Vec<Include>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckInput {
    #[serde(flatten)]
    pub source: Source,
    /// The previous text: report only what the plan newly introduces against it.
    #[serde(default)]
    pub against: Option<String>,
    #[serde(flatten)]
    pub allow: Allow,
}

/// Fields every write tool shares besides its own.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteCommon {
    #[serde(flatten)]
    pub source: Source,
    /// Required with `document`: the version and checksum of your last read.
    #[serde(default)]
    pub base: Option<Base>,
    #[serde(flatten)]
    pub allow: Allow,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SetStatusInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    /// The node (id or line number).
    pub id: NodeRef,
    /// The new status box character.
    pub status: Status,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ApplyOpsInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    /// Line operations, applied in order.
    pub ops: Vec<LineOp>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    /// The complete new plan text.
    pub new_text: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct AddNodeInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    /// The parent node (id or line number); null adds a root.
    #[serde(deserialize_with = "nullable")]
    #[schemars(required)]
    pub parent: Option<NodeRef>,
    /// One node line without indentation, e.g. `- [ ] Write the tests (S) #tests`.
    pub line: String,
    /// Insert after this child of `parent` (default: after the last child).
    #[serde(default)]
    pub after: Option<NodeRef>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct MoveNodeInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    /// The node to move (its subtree moves with it).
    pub id: NodeRef,
    /// The new parent (id or line number); null makes it a root.
    #[serde(deserialize_with = "nullable")]
    #[schemars(required)]
    pub parent: Option<NodeRef>,
    /// Place after this child of `parent` (default: last).
    #[serde(default)]
    pub after: Option<NodeRef>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SetSizeInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    /// The node (id or line number).
    pub id: NodeRef,
    /// The new size, or null to remove it.
    #[serde(deserialize_with = "nullable")]
    #[schemars(required)]
    pub size: Option<Size>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct RemoveNodeInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    /// The node (id or line number).
    pub id: NodeRef,
    /// true: mark it `[-]` (discarded); false: delete its subtree and description blocks.
    pub discard: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct CreateInput {
    /// A human title for the new document.
    pub title: String,
    /// The plan text of version 1.
    pub text: String,
    #[serde(flatten)]
    pub allow: Allow,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct HistoryInput {
    /// The document uuid.
    pub document: String,
    /// Only versions after this one.
    #[serde(default)]
    pub since: Option<u64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_carry_enums_and_required_nullables() {
        let s = serde_json::to_value(schemars::schema_for!(SetSizeInput)).unwrap();
        let text = s.to_string();
        assert!(text.contains("\"XXL\"") && text.contains("null"), "{text}");
        let required = s["required"].as_array().unwrap();
        assert!(required.contains(&json!("size")) && required.contains(&json!("id")));
        let s = serde_json::to_value(schemars::schema_for!(SetStatusInput)).unwrap();
        assert!(s.to_string().contains("\"^\""));
    }

    #[test]
    fn null_and_absent_differ() {
        let v: SetSizeInput = serde_json::from_value(json!({"id": 3, "size": null})).unwrap();
        assert_eq!(v.size, None);
        assert_eq!(v.id, NodeRef::Line(3));
        let v: SetSizeInput = serde_json::from_value(json!({"id": "a", "size": "XL"})).unwrap();
        assert_eq!(v.size, Some(Size::XL));
        let e = serde_json::from_value::<SetSizeInput>(json!({"id": 3})).unwrap_err();
        assert!(e.to_string().contains("missing field `size`"), "{e}");
        let e = serde_json::from_value::<SetStatusInput>(json!({"id": "a", "status": "q"}))
            .unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }
}
