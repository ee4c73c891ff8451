//! Tool search mode (`search = true`): instead of every member tool, `tools/list` shows
//! `find_tools` (a query → the matching tools the caller may call, with their schemas),
//! `call_tool` (a found tool called by name) and the `pinned` tools. The match is a simple
//! score over the words of a tool's shown name and description; the caller's policy decides
//! what is found (`may_call`), and a call through `call_tool` is decided as a call of the inner
//! tool. Also the size of a model-facing catalog: the bytes of its `tools/list` result.

use serde_json::{Value, json};

use super::{Entry, NameMap, VirtualServer};

/// The search tool's name.
pub(crate) const FIND_TOOLS: &str = "find_tools";
/// The tool that calls a found tool.
pub(crate) const CALL_TOOL: &str = "call_tool";
/// Matches `find_tools` answers unless the query asks for fewer.
const DEFAULT_LIMIT: usize = 5;
/// The most matches one answer carries.
const MAX_LIMIT: usize = 20;

/// Why a `call_tool` call's arguments are unusable (a tool error for the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SearchError {
    #[error("call_tool needs \"name\": the name of a tool find_tools found")]
    NoName,
    #[error("call_tool's \"arguments\" must be an object (the tool's own arguments)")]
    Arguments,
}

fn find_tools_definition() -> Value {
    json!({
        "name": FIND_TOOLS,
        "description": "Search this server's tools by words (what you want to do, or part of a \
            tool's name). Returns matching tools with their descriptions and input schemas; \
            call one with call_tool.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words describing the task or tool."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                          "description": "Most tools returned (default 5)."}
            },
            "required": ["query"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    })
}

fn call_tool_definition() -> Value {
    json!({
        "name": CALL_TOOL,
        "description": "Call a tool that find_tools returned, by its name, with arguments \
            matching its input schema.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name as find_tools gave it."},
                "arguments": {"type": "object", "description": "The tool's arguments."}
            },
            "required": ["name"]
        }
    })
}

/// The `tools/list` result a caller gets from the virtual server: in search mode
/// [`search_list`] (`call_tool` only when `may_call` allows some tool), else every tool
/// `may_call` allows, in shown-name order; `cacheScope: "private"` (MCP 2026-07-28: the list
/// is filtered per caller).
pub(crate) fn tools_list(
    server: &VirtualServer,
    map: &NameMap,
    may_call: impl Fn(&Entry) -> bool,
) -> Value {
    let tools: Vec<Value> = if server.search {
        let any = map.entries.values().any(&may_call);
        search_list(server, map, &may_call)
            .into_iter()
            .filter(|t| any || t["name"] != CALL_TOOL)
            .collect()
    } else {
        map.entries
            .values()
            .filter(|e| may_call(e))
            .map(|e| e.definition.clone())
            .collect()
    };
    json!({ "tools": tools, "cacheScope": "private" })
}

/// The `tools/call` result of `find_tools`: the matches as `structuredContent` and, for
/// clients that read only text, as one JSON text block.
pub(crate) fn find_tools_result(found: Vec<Value>) -> Value {
    let structured = json!({ "tools": found });
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
    })
}

/// What `tools/list` shows in search mode: `find_tools`, `call_tool`, then each `pinned` tool
/// the map has (in `pinned` order) that `may_call` allows.
pub(crate) fn search_list(
    server: &VirtualServer,
    map: &NameMap,
    may_call: impl Fn(&Entry) -> bool,
) -> Vec<Value> {
    let mut tools = vec![find_tools_definition(), call_tool_definition()];
    tools.extend(
        server
            .pinned
            .iter()
            .filter_map(|name| map.entries.get(name))
            .filter(|e| may_call(e))
            .map(|e| e.definition.clone()),
    );
    tools
}

/// Lower-case words of letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// How well a tool matches the query's words: per word, 3 for a word of its name (2 for part
/// of one), plus 1 for a description word it starts.
fn score(query: &[String], entry: &Entry) -> u32 {
    let name = entry.definition["name"].as_str().unwrap_or_default();
    let name_words = words(name);
    let description = words(entry.definition["description"].as_str().unwrap_or_default());
    query
        .iter()
        .map(|q| {
            let in_name = if name_words.iter().any(|w| w == q) {
                3
            } else if name_words.iter().any(|w| w.contains(q.as_str())) {
                2
            } else {
                0
            };
            let in_description = u32::from(description.iter().any(|w| w.starts_with(q.as_str())));
            in_name + in_description
        })
        .sum()
}

/// `find_tools`: the tools matching `query` that `may_call` allows, best first (ties by name),
/// at most `limit` (default 5, at most 20): each its shown name, description and input schema.
pub(crate) fn find_tools(
    map: &NameMap,
    query: &str,
    limit: Option<u64>,
    may_call: impl Fn(&Entry) -> bool,
) -> Vec<Value> {
    let query = words(query);
    let limit = limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_LIMIT)
        .clamp(1, MAX_LIMIT);
    let mut found: Vec<(u32, &String, &Entry)> = map
        .entries
        .iter()
        .filter(|(_, e)| may_call(e))
        .map(|(name, e)| (score(&query, e), name, e))
        .filter(|(s, _, _)| *s > 0)
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    found
        .into_iter()
        .take(limit)
        .map(|(_, name, e)| {
            let d = &e.definition;
            let mut tool = json!({"name": name, "inputSchema": d["inputSchema"]});
            if let Some(text) = d["description"].as_str() {
                tool["description"] = Value::String(text.to_owned());
            }
            tool
        })
        .collect()
}

/// The inner call of a `call_tool` call's `arguments`: the shown name and the tool's own
/// arguments (`{}` when absent). The caller routes and decides it as a call of that tool.
pub(crate) fn inner_call(arguments: &Value) -> Result<(&str, Value), SearchError> {
    let name = arguments["name"].as_str().ok_or(SearchError::NoName)?;
    match &arguments["arguments"] {
        Value::Null => Ok((name, json!({}))),
        inner @ Value::Object(_) => Ok((name, inner.clone())),
        _ => Err(SearchError::Arguments),
    }
}

/// The bytes of the model-facing catalog: `tools/list`'s result `{"tools":[…]}` as compact
/// JSON.
pub(crate) fn catalog_bytes(tools: &[Value]) -> usize {
    serde_json::to_vec(&json!({ "tools": tools })).map_or(0, |v| v.len())
}
