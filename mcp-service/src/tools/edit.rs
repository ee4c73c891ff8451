//! The edits the write tools make, each computed by the core: the new text and the line
//! operations from the old one.

use serde_json::{Value, json};

use super::ToolError;
use super::input::{LineOp, NodeRef, Size, Status};
use crate::engine::Engine;

/// A change to a plan, one per write tool.
#[derive(Debug, Clone)]
pub enum Edit {
    SetStatus {
        id: NodeRef,
        status: Status,
    },
    ApplyOps(Vec<LineOp>),
    Write(String),
    AddNode {
        parent: Option<NodeRef>,
        line: String,
        after: Option<NodeRef>,
    },
    MoveNode {
        id: NodeRef,
        parent: Option<NodeRef>,
        after: Option<NodeRef>,
    },
    SetSize {
        id: NodeRef,
        size: Option<Size>,
    },
    RemoveNode {
        id: NodeRef,
        discard: bool,
    },
}

fn opt_ref(r: Option<&NodeRef>) -> Value {
    r.map_or(Value::Null, NodeRef::to_json)
}

impl Edit {
    /// One line saying what the edit does, for the history.
    pub fn subject(&self) -> String {
        match self {
            Edit::SetStatus { id, status } => {
                format!("set_status {} [{}]", id.display(), status.code())
            }
            Edit::ApplyOps(ops) => format!("apply_ops ({} ops)", ops.len()),
            Edit::Write(_) => "write (whole text)".to_owned(),
            Edit::AddNode { parent, line, .. } => format!(
                "add_node under {}: {}",
                parent
                    .as_ref()
                    .map_or("the root".to_owned(), NodeRef::display),
                line.trim()
            ),
            Edit::MoveNode { id, parent, .. } => format!(
                "move_node {} under {}",
                id.display(),
                parent
                    .as_ref()
                    .map_or("the root".to_owned(), NodeRef::display)
            ),
            Edit::SetSize { id, size } => format!(
                "set_size {} {}",
                id.display(),
                size.map_or("none", Size::code)
            ),
            Edit::RemoveNode { id, discard } => format!(
                "remove_node {}{}",
                id.display(),
                if *discard { " (discard)" } else { " (delete)" }
            ),
        }
    }

    /// The text after the edit and the line ops from `before` to it, all computed by the core.
    pub(super) async fn apply(
        &self,
        engine: &Engine,
        before: &str,
    ) -> Result<(String, Value), ToolError> {
        let (method, params) = match self {
            Edit::SetStatus { id, status } => (
                "setStatus",
                json!({"text": before, "id": id.to_json(), "status": status.code()}),
            ),
            Edit::SetSize { id, size } => (
                "setSize",
                json!({"text": before, "id": id.to_json(), "size": size.map(Size::code)}),
            ),
            Edit::AddNode {
                parent,
                line,
                after,
            } => {
                let mut p =
                    json!({"text": before, "parent": opt_ref(parent.as_ref()), "line": line});
                if let Some(after) = after {
                    p["after"] = after.to_json();
                }
                ("addNode", p)
            }
            Edit::MoveNode { id, parent, after } => {
                let mut p =
                    json!({"text": before, "id": id.to_json(), "parent": opt_ref(parent.as_ref())});
                if let Some(after) = after {
                    p["after"] = after.to_json();
                }
                ("moveNode", p)
            }
            Edit::RemoveNode { id, discard } => (
                "removeNode",
                json!({"text": before, "id": id.to_json(), "discard": discard}),
            ),
            Edit::ApplyOps(ops) => {
                let r = engine
                    .call("applyOps", json!({"text": before, "ops": ops}))
                    .await?;
                let after = text_field(&r, "text")?;
                let ops = compute_ops(engine, before, &after).await?;
                return Ok((after, ops));
            }
            Edit::Write(new_text) => {
                let ops = compute_ops(engine, before, new_text).await?;
                return Ok((new_text.clone(), ops));
            }
        };
        let r = engine.call(method, params).await?;
        Ok((
            text_field(&r, "text")?,
            r.get("ops").cloned().unwrap_or(json!([])),
        ))
    }
}

pub(super) fn text_field(v: &Value, key: &str) -> Result<String, ToolError> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            ToolError::Engine(crate::engine::EngineError::Engine(format!(
                "the core's answer lacks {key}"
            )))
        })
}

pub(super) async fn compute_ops(
    engine: &Engine,
    before: &str,
    after: &str,
) -> Result<Value, ToolError> {
    let r = engine
        .call("computeOps", json!({"before": before, "after": after}))
        .await?;
    Ok(r.get("ops").cloned().unwrap_or(json!([])))
}
