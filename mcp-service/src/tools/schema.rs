//! The published input schemas, made compact and closed: what a host hands to the model on
//! every connection, so every byte counts. Plain functions of a schemars schema.

use serde_json::{Map, Value};

/// Closes and compacts a tool's input schema: `additionalProperties: false` at the root,
/// no `$schema` (MCP's default dialect), no `format`, `minimum: 0` or `default: false`, and
/// optional properties without their `null` alternative and `default: null` (leaving one out is the way to say
/// "none"; required nullable properties such as `parent` keep `null`).
pub(crate) fn compact_input(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut schema = schema.clone();
    schema.remove("$schema");
    schema.insert("additionalProperties".into(), Value::Bool(false));
    let mut root = Value::Object(schema);
    strip_formats(&mut root);
    compact_object(&mut root);
    if let Some(defs) = root.get_mut("$defs").and_then(Value::as_object_mut) {
        for def in defs.values_mut() {
            compact_object(def);
        }
    }
    match root {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Compacts a tool's output schema: no `$schema`, `format`, `minimum: 0` or `default: false`
/// (output schemas are sent on every `tools/list` too, though hosts do not hand them to the
/// model).
pub(crate) fn compact_output(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut schema = schema.clone();
    schema.remove("$schema");
    let mut root = Value::Object(schema);
    strip_formats(&mut root);
    match root {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Drops `format`, `minimum: 0` and `default: false` everywhere: the type and the description
/// say it (iteratively; schemas are shallow but this is cheap).
fn strip_formats(v: &mut Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if map.get("format").is_some_and(Value::is_string) {
                    map.remove("format");
                }
                if map.get("minimum").is_some_and(|m| m == 0) {
                    map.remove("minimum");
                }
                if map.get("default").is_some_and(|d| d == false) {
                    map.remove("default");
                }
                stack.extend(map.values_mut());
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
}

/// Optional properties of one object schema: without `null` and `default: null`.
fn compact_object(schema: &mut Value) {
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, prop) in props.iter_mut() {
        if required.contains(name) {
            continue;
        }
        let Some(p) = prop.as_object_mut() else {
            continue;
        };
        if p.get("default").is_some_and(Value::is_null) {
            p.remove("default");
        }
        if let Some(Value::Array(types)) = p.get("type") {
            let rest: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
            match rest.len() {
                0 => {}
                1 => {
                    p.insert("type".into(), rest[0].clone());
                }
                _ => {
                    p.insert("type".into(), Value::Array(rest));
                }
            }
        }
        let single = match p.get("anyOf") {
            Some(Value::Array(alts)) => {
                let rest: Vec<&Value> = alts
                    .iter()
                    .filter(|a| a.get("type").is_none_or(|t| t != "null"))
                    .collect();
                (rest.len() == 1 && rest.len() < alts.len())
                    .then(|| rest[0].as_object().cloned())
                    .flatten()
            }
            _ => None,
        };
        if let Some(alt) = single {
            p.remove("anyOf");
            for (k, v) in alt {
                p.entry(k).or_insert(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn optional_loses_null_required_keeps_it() {
        let s = json!({
            "$schema": "x",
            "type": "object",
            "properties": {
                "text": {"type": ["string", "null"], "default": null, "description": "d"},
                "id": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}], "default": null},
                "parent": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]},
                "n": {"type": "integer", "format": "uint64", "minimum": 0},
                "b": {"type": "boolean", "default": false},
                "r": {"type": ["string", "integer", "null"]}
            },
            "required": ["parent"],
            "$defs": {"N": {"anyOf": [{"type": "integer", "format": "uint64"}, {"type": "string"}]}}
        });
        let c = Value::Object(compact_input(s.as_object().unwrap()));
        assert_eq!(
            c,
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "text": {"type": "string", "description": "d"},
                    "id": {"$ref": "#/$defs/N"},
                    "parent": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]},
                    "n": {"type": "integer"},
                    "b": {"type": "boolean"},
                    "r": {"type": ["string", "integer"]}
                },
                "required": ["parent"],
                "$defs": {"N": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}
            })
        );
    }
}
