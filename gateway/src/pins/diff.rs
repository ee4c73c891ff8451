//! A readable diff of two tool definitions, field by field: a text field (name, title,
//! description) as old → new text, a JSON field (inputSchema, outputSchema, annotations) as the
//! JSON Pointer paths whose values differ — pure.

use serde_json::Value;

use super::FIELDS;

/// One field that differs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct FieldDiff {
    pub(crate) field: &'static str,
    /// Each path that differs (`""` for the field as a whole) with its old and new value as
    /// JSON text (`None`: absent).
    pub(crate) paths: Vec<PathDiff>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct PathDiff {
    pub(crate) path: String,
    pub(crate) old: Option<String>,
    pub(crate) new: Option<String>,
}

/// The fields of the definitions `old` and `new` (canonical texts; `old` `None`: a new tool,
/// every field of `new` added) that differ.
pub(crate) fn diff(old: Option<&str>, new: &str) -> Vec<FieldDiff> {
    let old: Value = old
        .and_then(|o| serde_json::from_str(o).ok())
        .unwrap_or(Value::Object(serde_json::Map::new()));
    let new: Value = serde_json::from_str(new).unwrap_or(Value::Null);
    let mut out = Vec::new();
    for field in FIELDS {
        let (a, b) = (old.get(field), new.get(field));
        if a == b {
            continue;
        }
        let mut paths = Vec::new();
        match (a, b) {
            (Some(a), Some(b)) if a.is_object() && b.is_object() => {
                walk(String::new(), a, b, &mut paths)
            }
            _ => paths.push(PathDiff {
                path: String::new(),
                old: a.map(Value::to_string),
                new: b.map(Value::to_string),
            }),
        }
        out.push(FieldDiff { field, paths });
    }
    out
}

/// The paths under `at` where `a` and `b` differ.
fn walk(at: String, a: &Value, b: &Value, out: &mut Vec<PathDiff>) {
    if a == b {
        return;
    }
    if let (Value::Object(a), Value::Object(b)) = (a, b) {
        let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let path = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
            match (a.get(key), b.get(key)) {
                (Some(x), Some(y)) => walk(path, x, y, out),
                (x, y) => out.push(PathDiff {
                    path,
                    old: x.map(Value::to_string),
                    new: y.map(Value::to_string),
                }),
            }
        }
        return;
    }
    out.push(PathDiff {
        path: at,
        old: Some(a.to_string()),
        new: Some(b.to_string()),
    });
}

/// The diff as indented lines: `  description: "old" → "new"`, `  inputSchema /properties/x:
/// (absent) → {…}`.
pub(crate) fn render(diffs: &[FieldDiff]) -> String {
    let mut out = String::new();
    for d in diffs {
        for p in &d.paths {
            let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".to_owned());
            let at = if p.path.is_empty() {
                String::new()
            } else {
                format!(" {}", p.path)
            };
            out.push_str(&format!(
                "  {}{at}: {} → {}\n",
                d.field,
                side(&p.old),
                side(&p.new)
            ));
        }
    }
    out
}
