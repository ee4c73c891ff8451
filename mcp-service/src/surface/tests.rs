//! Tests of the MCP surface: the tool catalog's size, titles, schemas and pinned annotations,
//! which tools write, unknown arguments and the shared instructions.
#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;
use crate::guide;

/// What hosts hand to the model: name, title, description and inputSchema of every tool.
fn model_bytes() -> usize {
    let tools: Vec<_> = catalog()
        .list_all()
        .into_iter()
        .map(|t| {
            json!({
                "name": t.name, "title": t.title,
                "description": t.description, "inputSchema": t.input_schema,
            })
        })
        .collect();
    assert_eq!(tools.len(), 13);
    serde_json::to_string(&tools).unwrap().len()
}

#[test]
fn what_the_model_reads_stays_under_10_000_bytes() {
    let bytes = model_bytes();
    println!("tools/list as the model reads it: {bytes} bytes");
    assert!(bytes <= 10_000, "{bytes} bytes");
}

/// (name, readOnly, destructive, idempotent) of every tool; the gateway derives `mcp:read`
/// / `mcp:write` from `readOnlyHint`, so this table is part of the authorization contract.
const ANNOTATIONS: [(&str, bool, Option<bool>, Option<bool>); 13] = [
    ("werkbaum_add_node", false, Some(false), Some(false)),
    ("werkbaum_apply_ops", false, Some(true), Some(false)),
    ("werkbaum_check", true, None, None),
    ("werkbaum_create", false, Some(false), Some(false)),
    ("werkbaum_history", true, None, None),
    ("werkbaum_inspect", true, None, None),
    ("werkbaum_move_node", false, Some(false), Some(true)),
    ("werkbaum_read", true, None, None),
    ("werkbaum_remove_node", false, Some(true), Some(false)),
    ("werkbaum_set_size", false, Some(false), Some(true)),
    ("werkbaum_set_status", false, Some(false), Some(true)),
    ("werkbaum_write", false, Some(true), Some(true)),
    ("whoami", true, None, None),
];

#[test]
fn every_tool_has_a_title_an_output_schema_and_pinned_annotations() {
    let tools = catalog().list_all();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let pinned: Vec<&str> = ANNOTATIONS.iter().map(|a| a.0).collect();
    assert_eq!(names, pinned);
    for (tool, (name, read_only, destructive, idempotent)) in tools.iter().zip(ANNOTATIONS) {
        let title = tool.title.as_deref().unwrap_or_default();
        assert!(
            !title.is_empty() && title != name,
            "{name}: title {title:?}"
        );
        let out = tool.output_schema.as_ref().unwrap();
        assert_eq!(out["type"], "object", "{name}");
        let a = tool.annotations.as_ref().unwrap();
        assert_eq!(a.read_only_hint, Some(read_only), "{name}");
        assert_eq!(a.destructive_hint, destructive, "{name}");
        assert_eq!(a.idempotent_hint, idempotent, "{name}");
        assert_eq!(a.open_world_hint, Some(false), "{name}");
        assert_eq!(
            tool.input_schema.get("additionalProperties"),
            Some(&serde_json::Value::Bool(false)),
            "{name}"
        );
        let d = tool.description.as_deref().unwrap_or_default();
        assert!(
            !d.contains("Give `text`") && d.len() <= 300,
            "{name}: the shared explanation lives in the instructions: {d}"
        );
    }
}

#[test]
fn read_and_write_tools_follow_the_annotations() {
    let router = catalog();
    let mut write = write_tools(&router);
    write.sort();
    assert_eq!(
        write,
        [
            "werkbaum_add_node",
            "werkbaum_apply_ops",
            "werkbaum_create",
            "werkbaum_move_node",
            "werkbaum_remove_node",
            "werkbaum_set_size",
            "werkbaum_set_status",
            "werkbaum_write",
        ]
    );
    let read: Vec<String> = router
        .list_all()
        .into_iter()
        .map(|t| t.name.into_owned())
        .filter(|n| !write.contains(n))
        .collect();
    assert_eq!(
        read,
        [
            "werkbaum_check",
            "werkbaum_history",
            "werkbaum_inspect",
            "werkbaum_read",
            "whoami"
        ]
    );
}

#[test]
fn unknown_arguments_are_named_with_the_accepted_ones() {
    let router = catalog();
    let schema = &router.get("werkbaum_inspect").unwrap().input_schema;
    let args = json!({"txt": "x", "text": "y", "depth": 2});
    let (unknown, accepted) = unknown_arguments(schema, args.as_object()).unwrap();
    assert_eq!(unknown, ["depth", "txt"]);
    assert_eq!(accepted, ["document", "id", "include", "text"]);
    assert!(unknown_arguments(schema, json!({"text": "y"}).as_object()).is_none());
    assert!(unknown_arguments(schema, None).is_none());
    let e = ToolError::UnknownArguments { unknown, accepted };
    assert_eq!(e.code(), "unknownArguments");
    assert_eq!(
        e.to_string(),
        "unknown arguments `depth`, `txt`; this tool accepts `document`, `id`, `include`, \
         `text`"
    );
    let whoami = &router.get("whoami").unwrap().input_schema;
    let (unknown, _) = unknown_arguments(whoami, json!({"x": 1}).as_object()).unwrap();
    assert_eq!(unknown, ["x"]);
    // The check tool offers only what it uses.
    let check = &router.get("werkbaum_check").unwrap().input_schema;
    let (unknown, _) = unknown_arguments(check, json!({"allowProd": true}).as_object()).unwrap();
    assert_eq!(unknown, ["allowProd"]);
}

#[test]
fn the_shared_explanation_lives_in_instructions_and_the_guide() {
    for needle in [
        "`text`",
        "`document`",
        "`base",
        "allowWarnings",
        "allowProd",
        "[^]",
    ] {
        assert!(INSTRUCTIONS.contains(needle), "instructions lack {needle}");
        assert!(guide::TEXT.contains(needle), "guide lacks {needle}");
    }
}
