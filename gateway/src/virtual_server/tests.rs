//! The virtual server's name map, merged lists and search over Werkbaum's real catalog
//! (mcp-service's `tools/list` in `testdata/werkbaum_tools.json`, captured and kept current by
//! tests/tests/stdio/virtual_check.rs) and two made-up members, `notes` and `tickets`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{names::widening, search::SearchError, *};
use crate::policy::{Annotation, ToolRule};

impl NameMap {
    /// Where a call of the shown name `shown` goes: the member's index and its own name.
    fn route(&self, shown: &str) -> Option<(usize, &str)> {
        self.entries
            .get(shown)
            .map(|e| (e.member, e.original.as_str()))
    }
}

const WERKBAUM: &[u8] = include_bytes!("testdata/werkbaum_tools.json");

fn werkbaum() -> Vec<Value> {
    serde_json::from_slice(WERKBAUM).unwrap()
}

fn tool(name: &str, description: &str, read_only: bool, props: Value) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": props},
        "annotations": {"readOnlyHint": read_only},
    })
}

fn notes() -> Vec<Value> {
    vec![
        tool(
            "search",
            "Search notes by words.",
            true,
            json!({"q": {"type": "string"}}),
        ),
        tool(
            "read",
            "Read one note.",
            true,
            json!({"id": {"type": "string"}}),
        ),
        tool(
            "write",
            "Write a note.",
            false,
            json!({"id": {"type": "string"}, "text": {"type": "string"}}),
        ),
        tool(
            "tag",
            "Tag a note.",
            false,
            json!({"id": {"type": "string"}, "tags": {"type": "array"}}),
        ),
    ]
}

fn tickets() -> Vec<Value> {
    vec![
        tool(
            "search",
            "Search tickets by words, state or assignee.",
            true,
            json!({"q": {"type": "string"}}),
        ),
        tool(
            "create",
            "Open a ticket with a title and a body.",
            false,
            json!({"title": {"type": "string"}, "body": {"type": "string"}}),
        ),
        tool(
            "close",
            "Close a ticket.",
            false,
            json!({"id": {"type": "integer"}}),
        ),
        tool(
            "delete",
            "Delete a ticket for good.",
            false,
            json!({"id": {"type": "integer"}}),
        ),
        tool(
            "comment",
            "Comment on a ticket.",
            false,
            json!({"id": {"type": "integer"}, "text": {"type": "string"}}),
        ),
    ]
}

fn member(route: &str, prefix: &str) -> Member {
    Member {
        route: route.to_owned(),
        prefix: prefix.to_owned(),
    }
}

/// The issue's example: Werkbaum without a prefix, notes and tickets with the default one.
fn team() -> VirtualServer {
    let mut tools = BTreeMap::new();
    tools.insert(
        "notes_search".to_owned(),
        ToolOverride {
            rename: Some("find_notes".to_owned()),
            description: Some("Search the team's notes by words or tags.".to_owned()),
            ..ToolOverride::default()
        },
    );
    VirtualServer {
        name: "team".to_owned(),
        title: Some("Team tools".to_owned()),
        members: vec![
            member("werkbaum", ""),
            member("notes", "notes_"),
            member("tickets", "tickets_"),
        ],
        tools,
        search: false,
        pinned: Vec::new(),
    }
}

struct Catalogs {
    tools: Vec<Vec<Value>>,
    rules: Vec<BTreeMap<String, ToolRule>>,
}

impl Catalogs {
    fn new() -> Self {
        Self {
            tools: vec![werkbaum(), notes(), tickets()],
            rules: vec![BTreeMap::new(); 3],
        }
    }
    fn members(&self) -> Vec<MemberCatalog<'_>> {
        self.tools
            .iter()
            .zip(&self.rules)
            .map(|(t, r)| MemberCatalog {
                tools: Some(t),
                rules: r,
            })
            .collect()
    }
}

fn shown(map: &NameMap) -> Vec<&str> {
    map.entries.keys().map(String::as_str).collect()
}

#[test]
fn names_are_prefixed_renamed_and_routed_to_their_member() {
    let c = Catalogs::new();
    let (map, problems) = name_map(&team(), &c.members());
    assert_eq!(problems, vec![]);
    let names = shown(&map);
    assert!(names.contains(&"werkbaum_add_node") && names.contains(&"whoami"));
    assert!(names.contains(&"find_notes") && !names.contains(&"notes_search"));
    assert!(names.contains(&"notes_read") && names.contains(&"tickets_search"));
    assert_eq!(map.entries.len(), 13 + 4 + 5);
    assert_eq!(map.route("find_notes"), Some((1, "search")));
    assert_eq!(map.route("tickets_search"), Some((2, "search")));
    assert_eq!(map.route("whoami"), Some((0, "whoami")));
    assert_eq!(map.route("search"), None);
    let found = &map.entries["find_notes"].definition;
    assert_eq!(found["name"], "find_notes");
    assert_eq!(
        found["description"],
        "Search the team's notes by words or tags."
    );
    // Everything else is the member's definition as it was.
    let mut expected = notes()[0].clone();
    expected["name"] = found["name"].clone();
    expected["description"] = found["description"].clone();
    assert_eq!(found, &expected);
    // Listed in shown-name order, whatever order the members listed in.
    let mut reversed = Catalogs::new();
    for t in &mut reversed.tools {
        t.reverse();
    }
    assert_eq!(name_map(&team(), &reversed.members()).0, map);
}

#[test]
fn collisions_are_named_and_neither_tool_is_served() {
    let mut server = team();
    server.members[2].prefix = "notes_".to_owned();
    let c = Catalogs::new();
    let (map, problems) = name_map(&server, &c.members());
    assert!(
        problems.contains(&Problem::Collision {
            kind: "tool",
            // The override of `notes_search` renames both to `find_notes`.
            shown: "find_notes".to_owned(),
            first_route: "notes".to_owned(),
            first: "search".to_owned(),
            second_route: "tickets".to_owned(),
            second: "search".to_owned(),
        }),
        "{problems:?}"
    );
    assert!(map.route("find_notes").is_none() && map.route("notes_search").is_none());
    let message = problems[0].to_string();
    assert!(message.contains("notes's \"search\"") && message.contains("tickets's \"search\""));
    // No prefix on two members: their `search` tools collide under one bare name.
    let mut bare = team();
    bare.tools.clear();
    bare.members[1].prefix.clear();
    bare.members[2].prefix.clear();
    let (map, problems) = name_map(&bare, &c.members());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(map.route("search").is_none() && map.route("read").is_some());
    // A rename onto another tool's shown name collides as well.
    let mut onto = team();
    onto.tools.insert(
        "tickets_close".to_owned(),
        ToolOverride {
            rename: Some("whoami".to_owned()),
            ..ToolOverride::default()
        },
    );
    let (map, problems) = name_map(&onto, &c.members());
    assert!(matches!(&problems[..], [Problem::Collision { shown, .. }] if shown == "whoami"));
    assert!(map.route("whoami").is_none());
}

#[test]
fn hidden_tools_are_neither_listed_nor_routed() {
    let mut server = team();
    server.tools.insert(
        "tickets_delete".to_owned(),
        ToolOverride {
            hide: true,
            ..ToolOverride::default()
        },
    );
    let c = Catalogs::new();
    let (map, problems) = name_map(&server, &c.members());
    assert_eq!(problems, vec![]);
    assert_eq!(map.route("tickets_delete"), None);
    let merged = merge(&server, &map, &[MemberLists::default(); 3]);
    assert!(merged.tools.iter().all(|t| t["name"] != "tickets_delete"));
    assert_eq!(merged.tools.len(), 21);
}

#[test]
fn overrides_and_pins_of_unknown_tools_are_named_once_every_catalog_is_known() {
    let mut server = team();
    server.tools.insert(
        "notes_serach".to_owned(),
        ToolOverride {
            title: Some("typo".to_owned()),
            ..ToolOverride::default()
        },
    );
    server.pinned = vec!["whoami".to_owned(), "notes_search".to_owned()];
    let c = Catalogs::new();
    let (_, problems) = name_map(&server, &c.members());
    assert_eq!(
        problems,
        vec![
            Problem::UnknownOverride {
                shown: "notes_serach".to_owned()
            },
            // Renamed: pinned names the shown name, `find_notes`.
            Problem::UnknownPinned {
                name: "notes_search".to_owned()
            },
        ]
    );
    // A member not known yet (down, or no record): nothing can be said of unmatched names.
    let mut members = c.members();
    members[2].tools = None;
    let (map, problems) = name_map(&server, &members);
    assert_eq!(problems, vec![]);
    assert!(map.route("tickets_search").is_none() && map.route("whoami").is_some());
}

#[test]
fn an_override_may_narrow_but_widens_only_where_the_route_decides_the_scopes() {
    assert!(widening("readOnlyHint", Some(false), true));
    assert!(widening("readOnlyHint", None, true));
    assert!(!widening("readOnlyHint", Some(true), true));
    assert!(!widening("readOnlyHint", Some(true), false));
    assert!(widening("destructiveHint", None, false));
    assert!(widening("destructiveHint", Some(true), false));
    assert!(!widening("destructiveHint", Some(false), true));
    assert!(widening("openWorldHint", None, false));
    assert!(widening("idempotentHint", None, true));
    assert!(!widening("idempotentHint", Some(true), false));

    let mut server = team();
    let read_only = |v: bool| ToolOverride {
        annotations: Some(Annotations {
            read_only_hint: Some(v),
            ..Annotations::default()
        }),
        ..ToolOverride::default()
    };
    server
        .tools
        .insert("notes_write".to_owned(), read_only(true));
    server
        .tools
        .insert("werkbaum_read".to_owned(), read_only(false));
    let mut c = Catalogs::new();
    let (map, problems) = name_map(&server, &c.members());
    assert_eq!(
        problems,
        vec![Problem::Widens {
            shown: "notes_write".to_owned(),
            hint: "readOnlyHint",
            value: true,
            route: "notes".to_owned(),
            tool: "write".to_owned(),
        }]
    );
    // The refused hint is not applied: the tool keeps needing `mcp:write`.
    assert_eq!(map.entries["notes_write"].annotation(), Annotation::Writes);
    // Narrowed: Werkbaum's read now needs `mcp:write` through the virtual server.
    assert_eq!(
        map.entries["werkbaum_read"].annotation(),
        Annotation::Writes
    );
    assert_eq!(
        map.entries["werkbaum_read"].definition["annotations"]["openWorldHint"],
        false
    );
    // The notes route decides `write`'s scopes itself: the override is the operator's call.
    c.rules[1].insert(
        "write".to_owned(),
        ToolRule {
            scopes: Some(vec!["notes:write".to_owned()]),
            ..ToolRule::default()
        },
    );
    let (map, problems) = name_map(&server, &c.members());
    assert_eq!(problems, vec![]);
    assert_eq!(
        map.entries["notes_write"].annotation(),
        Annotation::ReadOnly
    );
}

#[test]
fn search_mode_names_its_own_tools_reserved() {
    let mut server = team();
    server.search = true;
    server.tools.insert(
        "tickets_search".to_owned(),
        ToolOverride {
            rename: Some(FIND_TOOLS.to_owned()),
            ..ToolOverride::default()
        },
    );
    let c = Catalogs::new();
    let (map, problems) = name_map(&server, &c.members());
    assert!(
        matches!(&problems[..], [Problem::Reserved { route, tool, .. }]
        if route == "tickets" && tool == "search")
    );
    assert!(map.route(FIND_TOOLS).is_none());
}

fn resources(uris: &[&str]) -> Vec<Value> {
    uris.iter()
        .map(|u| json!({"uri": u, "name": u.rsplit('/').next().unwrap()}))
        .collect()
}

#[test]
fn lists_merge_in_a_stable_order_and_resources_route_by_uri() {
    let server = team();
    let c = Catalogs::new();
    let (map, _) = name_map(&server, &c.members());
    let werkbaum_resources = resources(&["werkbaum://guide", "werkbaum://doc/open"]);
    let notes_resources = resources(&["notes://all", "werkbaum://guide"]);
    let ticket_templates = vec![json!({"uriTemplate": "tickets://{id}", "name": "ticket"})];
    let werkbaum_templates = vec![json!({"uriTemplate": "werkbaum://doc/{uuid}", "name": "doc"})];
    let werkbaum_prompts = vec![json!({"name": "review"}), json!({"name": "decompose"})];
    let notes_prompts = vec![json!({"name": "summarise"})];
    let lists = [
        MemberLists {
            resources: Some(&werkbaum_resources),
            templates: Some(&werkbaum_templates),
            prompts: Some(&werkbaum_prompts),
        },
        MemberLists {
            resources: Some(&notes_resources),
            templates: None,
            prompts: Some(&notes_prompts),
        },
        MemberLists {
            resources: None,
            templates: Some(&ticket_templates),
            prompts: None,
        },
    ];
    let merged = merge(&server, &map, &lists);
    let uris: Vec<&str> = merged
        .resources
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        uris,
        ["werkbaum://doc/open", "werkbaum://guide", "notes://all"]
    );
    assert_eq!(
        merged.problems,
        vec![Problem::DuplicateUri {
            uri: "werkbaum://guide".to_owned(),
            first_route: "werkbaum".to_owned(),
            second_route: "notes".to_owned(),
        }]
    );
    assert_eq!(merged.resource_member("werkbaum://guide"), Some(0));
    assert_eq!(merged.resource_member("notes://all"), Some(1));
    assert_eq!(merged.resource_member("tickets://42"), Some(2));
    assert_eq!(merged.resource_member("werkbaum://doc/abc"), Some(0));
    assert_eq!(merged.resource_member("other://x"), None);
    assert_eq!(merged.templates.len(), 2);
    let prompts: Vec<&str> = merged
        .prompts
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["decompose", "notes_summarise", "review"]);
    assert_eq!(merged.prompt("notes_summarise"), Some((1, "summarise")));
    let tools: Vec<&str> = merged
        .tools
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut sorted = tools.clone();
    sorted.sort_unstable();
    assert_eq!(tools, sorted);
}

#[test]
fn a_routed_call_changes_only_the_name_bytes() {
    let body = br#"{"jsonrpc":"2.0", "id":7,"method":"tools/call","params":{"_meta":{"n":1.0},"name":"find_notes","arguments":{"q":"caf\u00e9","big":12345678901234567890}}}"#;
    let out = rewrite_call_name(body, "search").unwrap();
    let expected = String::from_utf8(body.to_vec())
        .unwrap()
        .replace("\"find_notes\"", "\"search\"");
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    assert_eq!(
        rewrite_call_name(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, "x"),
        None
    );
    assert_eq!(
        rewrite_call_name(br#"{"params":{"name":3}}"#, "x"),
        None,
        "a name that is no string is not rewritten"
    );
}

#[test]
fn find_tools_matches_words_among_what_the_caller_may_call() {
    let c = Catalogs::new();
    let (map, _) = name_map(&team(), &c.members());
    let names = |found: Vec<Value>| -> Vec<String> {
        found
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let everyone = |_: &Entry| true;
    let found = find_tools(&map, "add a node", None, everyone);
    assert_eq!(names(found.clone())[0], "werkbaum_add_node");
    assert!(found[0]["inputSchema"]["properties"]["parent"].is_object());
    assert!(found[0]["description"].as_str().unwrap().contains("node"));
    let found = names(find_tools(&map, "tickets search", None, everyone));
    assert_eq!(found[0], "tickets_search");
    // Only what the caller may call: a reader finds no writing tool.
    let reader = |e: &Entry| e.annotation() == Annotation::ReadOnly;
    let found = names(find_tools(&map, "ticket", Some(20), reader));
    assert_eq!(found, ["tickets_search"]);
    assert!(names(find_tools(&map, "notes", Some(1), everyone)).len() == 1);
    assert!(find_tools(&map, "zebra", None, everyone).is_empty());
    assert!(find_tools(&map, "", None, everyone).is_empty());
    // call_tool's arguments name the inner call.
    assert_eq!(
        inner_call(&json!({"name": "notes_read", "arguments": {"id": "a"}})),
        Ok(("notes_read", json!({"id": "a"})))
    );
    assert_eq!(
        inner_call(&json!({"name": "whoami"})),
        Ok(("whoami", json!({})))
    );
    assert_eq!(inner_call(&json!({})), Err(SearchError::NoName));
    assert_eq!(
        inner_call(&json!({"name": "x", "arguments": [1]})),
        Err(SearchError::Arguments)
    );
}

/// The catalog sizes the issue asks for: Werkbaum plus two servers, every tool listed, and in
/// search mode with two pinned tools (printed for the note: `cargo test -p pforte
/// catalog_sizes -- --nocapture`).
#[test]
fn catalog_sizes_with_and_without_search() {
    let c = Catalogs::new();
    let mut server = team();
    let (map, _) = name_map(&server, &c.members());
    let full = catalog_bytes(&merge(&server, &map, &[MemberLists::default(); 3]).tools);
    server.search = true;
    server.pinned = vec!["whoami".to_owned(), "find_notes".to_owned()];
    let (map, problems) = name_map(&server, &c.members());
    assert_eq!(problems, vec![]);
    let list = search_list(&server, &map, |_| true);
    let names: Vec<&str> = list.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, [FIND_TOOLS, CALL_TOOL, "whoami", "find_notes"]);
    let search = catalog_bytes(&list);
    eprintln!("catalog bytes: every tool {full}, search mode {search}");
    assert!(full > 20_000, "{full}");
    assert!(search <= 6 * 1024, "{search}");
    // A pinned tool the caller may not call is not listed.
    let reader = search_list(&server, &map, |e| e.original != "whoami");
    assert_eq!(reader.len(), 3);
}

#[test]
fn a_callers_list_holds_what_it_may_call_and_is_private() {
    let c = Catalogs::new();
    let mut server = team();
    let (map, _) = name_map(&server, &c.members());
    let reader = |e: &Entry| e.annotation() == Annotation::ReadOnly;
    let list = tools_list(&server, &map, reader);
    assert_eq!(list["cacheScope"], "private");
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"find_notes") && names.contains(&"whoami"));
    assert!(!names.contains(&"notes_write") && !names.contains(&"tickets_create"));
    // Search mode: nobody who may call nothing is offered call_tool.
    server.search = true;
    server.pinned = vec!["whoami".to_owned()];
    let (map, _) = name_map(&server, &c.members());
    let list = tools_list(&server, &map, reader);
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [FIND_TOOLS, CALL_TOOL, "whoami"]);
    let list = tools_list(&server, &map, |_| false);
    assert_eq!(list["tools"].as_array().unwrap().len(), 1);
    // find_tools answers in structured and in text form.
    let found = find_tools(&map, "whoami", None, reader);
    let result = find_tools_result(found);
    assert_eq!(result["structuredContent"]["tools"][0]["name"], "whoami");
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);
}
