//! The tools' input types: serde for parsing, schemars for the published JSON Schemas (enums
//! for status codes, sizes, include sections and op kinds). No validation logic lives here
//! beyond what the types themselves express; `tools` checks the combinations.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

// `{version, checksum}` of the document as the agent last read it (no doc comments: the
// property's description says it, once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct Base {
    pub version: u64,
    pub checksum: String,
}

/// A node: its id (`#` optional) or its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NodeRef {
    Line(u64),
    Id(String),
}

impl JsonSchema for NodeRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NodeRef".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": ["string", "integer"],
            "description": "Node id (`#` optional) or 1-based line."
        })
    }
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

/// A Werkbaum status. Accepted as the box code (`x`), the notation's scale key (`fertig`) or an
/// English name (`done`); written as the box code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Idea,
    Planned,
    InProgress,
    FirstCut,
    Done,
    Prod,
    Discarded,
    HighRisk,
}

impl Status {
    pub const ALL: [Status; 8] = [
        Status::Idea,
        Status::Planned,
        Status::InProgress,
        Status::FirstCut,
        Status::Done,
        Status::Prod,
        Status::Discarded,
        Status::HighRisk,
    ];

    /// The box character.
    pub fn code(self) -> &'static str {
        self.names().0
    }

    /// (box code, scale key, English name).
    pub fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Status::Idea => ("?", "idee", "idea"),
            Status::Planned => (" ", "geplant", "planned"),
            Status::InProgress => ("~", "arbeit", "in progress"),
            Status::FirstCut => ("/", "durchstich", "first cut"),
            Status::Done => ("x", "fertig", "done"),
            Status::Prod => ("^", "prod", "production"),
            Status::Discarded => ("-", "verworfen", "discarded"),
            Status::HighRisk => ("!", "highrisk", "high risk"),
        }
    }

    /// A box code (either case), a scale key or an English name (case, blanks, `-` and `_`
    /// do not matter).
    pub fn parse(s: &str) -> Option<Status> {
        let squash = |t: &str| -> String {
            t.chars()
                .filter(|c| !matches!(c, ' ' | '-' | '_'))
                .flat_map(char::to_lowercase)
                .collect()
        };
        let wanted = squash(s);
        Status::ALL.into_iter().find(|st| {
            let (code, key, english) = st.names();
            s == code
                || (code == "x" && s == "X")
                || (!wanted.is_empty() && (wanted == key || wanted == squash(english)))
        })
    }
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Status::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown status {s:?}: give a box code ({}), a scale key ({}) or an English name                  ({})",
                Status::ALL.map(|st| format!("{:?}", st.names().0)).join(", "),
                Status::ALL.map(|st| st.names().1).join(", "),
                Status::ALL.map(|st| st.names().2).join(", "),
            ))
        })
    }
}

impl JsonSchema for Status {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Status".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut values: Vec<&str> = Vec::new();
        for st in Status::ALL {
            let (code, key, english) = st.names();
            values.extend([code, key, english]);
        }
        schemars::json_schema!({
            "type": "string",
            "enum": values,
            "description": "Box code, scale key or English name (see werkbaum://guide)."
        })
    }
}

/// A Werkbaum size. The variants' names are the wire values (the notation's size codes).
#[allow(clippy::upper_case_acronyms)]
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

// A section of the `inspect` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Include {
    Tree,
    Warnings,
    Path,
}

// The kind of a line operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Insert,
    Replace,
    Delete,
}

// One line operation on `text.split("\n")`, applied in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LineOp {
    pub op: OpKind,
    /// 0-based line index when this op applies.
    pub index: u64,
    /// Lines replaced (default: as many as `lines`) or deleted (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Lines to insert or replace with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
}

/// Where a tool reads its plan: `text` (a file the agent read itself) or `document` (a uuid of
/// this server) — exactly one.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct Source {
    // the plan text (the forms are explained once, in the server's instructions)
    #[serde(default)]
    pub text: Option<String>,
    /// Document uuid.
    #[serde(default)]
    pub document: Option<String>,
}

/// The switches that lift a guard rail for one call.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Allow {
    /// Allow new structural warnings.
    #[serde(default)]
    pub allow_warnings: bool,
    /// Allow nodes newly set to [^].
    #[serde(default)]
    pub allow_prod: bool,
}

/// The schema of a required node reference that may be `null`.
fn nullable_node(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": ["string", "integer", "null"] })
}

/// The schema of a required size that may be `null`.
fn nullable_size(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["string", "null"],
        "enum": ["XS", "S", "M", "L", "XL", "XXL", null]
    })
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
pub(crate) struct ReadInput {
    #[serde(flatten)]
    pub source: Source,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct InspectInput {
    #[serde(flatten)]
    pub source: Source,
    /// Only this node's subtree.
    #[serde(default)]
    pub id: Option<NodeRef>,
    /// Sections to return (default all).
    #[serde(default)]
    pub include: Option<Vec<Include>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct CheckInput {
    #[serde(flatten)]
    pub source: Source,
    /// An earlier text: report only what the plan newly introduces against it.
    #[serde(default)]
    pub against: Option<String>,
}

/// Fields every write tool shares besides its own.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteCommon {
    #[serde(flatten)]
    pub source: Source,
    /// With `document`: your last read's version and checksum.
    #[serde(default)]
    pub base: Option<Base>,
    #[serde(flatten)]
    pub allow: Allow,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SetStatusInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    // the node
    pub id: NodeRef,
    // the new status (its schema says how to give it)
    pub status: Status,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ApplyOpsInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    // applied in order
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
    /// The parent node; null adds a root.
    #[serde(deserialize_with = "nullable")]
    #[schemars(required, schema_with = "nullable_node")]
    pub parent: Option<NodeRef>,
    /// One node line without indentation, e.g. `- [ ] Write the tests (S) #tests`.
    pub line: String,
    /// Insert after this child of `parent` (default: last).
    #[serde(default)]
    pub after: Option<NodeRef>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct MoveNodeInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    // the node to move
    pub id: NodeRef,
    /// The new parent; null makes it a root.
    #[serde(deserialize_with = "nullable")]
    #[schemars(required, schema_with = "nullable_node")]
    pub parent: Option<NodeRef>,
    /// Place after this child of `parent` (default: last).
    #[serde(default)]
    pub after: Option<NodeRef>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SetSizeInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    // the node
    pub id: NodeRef,
    /// The new size, or null to remove it.
    #[serde(deserialize_with = "nullable")]
    #[schemars(required, schema_with = "nullable_size")]
    pub size: Option<Size>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct RemoveNodeInput {
    #[serde(flatten)]
    pub common: WriteCommon,
    // the node
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
    /// Versions per page (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u64>,
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
        assert_eq!(s["properties"]["size"]["type"], json!(["string", "null"]));
        let s = serde_json::to_value(schemars::schema_for!(AddNodeInput)).unwrap();
        assert_eq!(
            s["properties"]["parent"]["type"],
            json!(["string", "integer", "null"])
        );
        let s = serde_json::to_value(schemars::schema_for!(SetStatusInput)).unwrap();
        assert!(s.to_string().contains("\"^\""));
    }

    #[test]
    fn statuses_by_code_key_or_english_name() {
        for (given, code) in [
            ("x", "x"),
            ("X", "x"),
            ("fertig", "x"),
            ("done", "x"),
            ("Done", "x"),
            (" ", " "),
            ("planned", " "),
            ("geplant", " "),
            ("in progress", "~"),
            ("in-progress", "~"),
            ("in_progress", "~"),
            ("arbeit", "~"),
            ("first cut", "/"),
            ("durchstich", "/"),
            ("^", "^"),
            ("production", "^"),
            ("prod", "^"),
            ("-", "-"),
            ("discarded", "-"),
            ("verworfen", "-"),
            ("high risk", "!"),
            ("highrisk", "!"),
            ("?", "?"),
            ("idea", "?"),
            ("idee", "?"),
        ] {
            let s: Status = serde_json::from_value(json!(given)).unwrap();
            assert_eq!(s.code(), code, "{given:?}");
        }
        for bad in ["", "  ", "finished", "xx", "y"] {
            let e = serde_json::from_value::<Status>(json!(bad)).unwrap_err();
            let m = e.to_string();
            assert!(
                m.contains("fertig") && m.contains("done") && m.contains("\"x\""),
                "{m}"
            );
        }
        // Every accepted spelling of each status is in the schema's enum.
        let schema = serde_json::to_value(schemars::schema_for!(Status)).unwrap();
        let values = schema["enum"].as_array().unwrap();
        assert_eq!(values.len(), 24);
        for st in Status::ALL {
            let (code, key, english) = st.names();
            for v in [code, key, english] {
                assert!(values.contains(&json!(v)), "{v}");
            }
        }
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
        assert!(e.to_string().contains("unknown status \"q\""), "{e}");
    }
}
