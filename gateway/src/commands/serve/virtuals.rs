//! What `pforte check` says about `[[virtual]]` servers: each one's members, and the problems
//! its configuration has with the members' catalogs — known to `check` from the pins store,
//! which records every route's tool definitions as the running gateway last listed them (a
//! route without records, or `[pinning] mode = "off"`: not known, said so, not checked) —, and
//! with the prompts and resources the members answered `check` itself (`member_lists.rs`): two
//! members' prompts under one shown name refused, naming both; resource URIs pass unchanged (a
//! member's own), a URI two members list said to be served from the first.

use std::collections::BTreeMap;

use serde_json::Value;

use super::member_lists::Listed;
use crate::{
    config::Settings,
    pins::PinStore,
    virtual_server::{
        MemberCatalog, MemberLists, NameMap, Problem, catalog_bytes, merge, name_map, search_list,
    },
};

/// Each route's recorded tool definitions (the last seen), from the pins store.
pub(super) fn recorded(store: &dyn PinStore) -> Result<BTreeMap<String, Vec<Value>>, String> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for pin in store.list().map_err(|e| e.to_string())? {
        if let Ok(definition) = serde_json::from_str::<Value>(&pin.seen) {
            out.entry(pin.route).or_default().push(definition);
        }
    }
    Ok(out)
}

/// `check`'s lines about the virtual servers, and the problems found (each naming the virtual
/// server) — pure: `recorded` is what the pins store knows (`None`: no store to ask), `asked`
/// what each member route answered `check` (or why it was not asked).
pub(super) fn describe(
    s: &Settings,
    recorded: Option<&BTreeMap<String, Vec<Value>>>,
    asked: &BTreeMap<String, Result<Listed, String>>,
) -> (Vec<String>, Vec<String>) {
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    for v in &s.virtuals {
        let server = &v.server;
        let members: Vec<String> = server
            .members
            .iter()
            .map(|m| match m.prefix.as_str() {
                "" => format!("{} (no prefix)", m.route),
                p => format!("{} ({p}…)", m.route),
            })
            .collect();
        let search = if server.search { ", tool search" } else { "" };
        lines.push(format!(
            "{} → virtual server over {}{search}",
            v.resource,
            members.join(", ")
        ));
        let rules: Vec<_> = server
            .members
            .iter()
            .map(|m| {
                s.route_named(&m.route)
                    .map(|i| s.routes[i].tools.clone())
                    .unwrap_or_default()
            })
            .collect();
        let catalogs: Vec<MemberCatalog<'_>> = server
            .members
            .iter()
            .zip(&rules)
            .map(|(m, rules)| MemberCatalog {
                tools: recorded.and_then(|r| r.get(&m.route)).map(Vec::as_slice),
                rules,
            })
            .collect();
        let unknown: Vec<&str> = server
            .members
            .iter()
            .zip(&catalogs)
            .filter(|(_, c)| c.tools.is_none())
            .map(|(m, _)| m.route.as_str())
            .collect();
        let (map, found) = name_map(server, &catalogs);
        if unknown.is_empty() {
            let listed: Vec<Value> = map.entries.values().map(|e| e.definition.clone()).collect();
            let searching = search_list(server, &map, |_| true);
            lines.push(format!(
                "  {} tools shown, checked against the catalogs the store recorded; the \
                 model-facing catalog {} bytes listed, {} bytes in search mode",
                map.entries.len(),
                catalog_bytes(&listed),
                catalog_bytes(&searching)
            ));
        } else {
            lines.push(format!(
                "  not checked against {}: no tool definitions recorded yet (the gateway records \
                 them once it lists the route's tools; [pinning] mode = \"off\" records none)",
                unknown.join(", ")
            ));
        }
        let (said, refused) = prompts_and_resources(server, asked);
        lines.extend(said);
        problems.extend(
            found
                .into_iter()
                .chain(refused)
                .map(|p| format!("[[virtual]] {:?}: {p}", server.name)),
        );
    }
    (lines, problems)
}

/// `check`'s lines on the prompts and resources of `server`'s members as they answered
/// (`asked`), and the prompt collisions found (refused).
fn prompts_and_resources(
    server: &crate::virtual_server::VirtualServer,
    asked: &BTreeMap<String, Result<Listed, String>>,
) -> (Vec<String>, Vec<Problem>) {
    let answered: Vec<Option<&Listed>> = server
        .members
        .iter()
        .map(|m| asked.get(&m.route).and_then(|a| a.as_ref().ok()))
        .collect();
    let lists: Vec<MemberLists<'_>> = answered
        .iter()
        .map(|a| MemberLists {
            resources: a.map(|l| l.resources.as_slice()),
            templates: None,
            prompts: a.map(|l| l.prompts.as_slice()),
        })
        .collect();
    let merged = merge(server, &NameMap::default(), &lists);
    let mut lines = vec![format!(
        "  {} prompts shown as <prefix><name>; {} resources, their URIs unchanged (each \
         member's own, so unique per member): a URI two members list is served from the first",
        merged.prompts.len(),
        merged.resources.len()
    )];
    for (m, a) in server.members.iter().zip(&answered) {
        if a.is_none() {
            let why = match asked.get(&m.route) {
                Some(Err(why)) => why.as_str(),
                _ => "not asked",
            };
            lines.push(format!(
                "  prompts and resources of {} not checked: {why}",
                m.route
            ));
        }
    }
    let mut refused = Vec::new();
    for p in merged.problems {
        match p {
            Problem::DuplicateUri { .. } => lines.push(format!("  note: {p}")),
            other => refused.push(other),
        }
    }
    (lines, refused)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    fn settings() -> Settings {
        let text = r#"
[[routes]]
name = "werkbaum"
url = "http://127.0.0.1:2/mcp"
[[routes]]
name = "notes"
url = "http://127.0.0.1:3/mcp"
[[virtual]]
name = "team"
members = ["werkbaum", "notes"]
[virtual.prefix]
werkbaum = ""
notes = ""
[virtual.tools.serach]
title = "typo"
"#;
        toml::from_str::<crate::config::GatewayConfig>(text)
            .unwrap()
            .validate()
            .unwrap()
    }

    #[test]
    fn check_names_collisions_and_unknown_overrides_from_the_recorded_catalogs() {
        let s = settings();
        let mut recorded = BTreeMap::new();
        recorded.insert(
            "werkbaum".to_owned(),
            vec![json!({"name": "search"}), json!({"name": "whoami"})],
        );
        let (lines, problems) = describe(&s, Some(&recorded), &BTreeMap::new());
        assert_eq!(
            lines[..2],
            [
                "http://127.0.0.1:8787/team/mcp → virtual server over werkbaum (no prefix), notes (no prefix)",
                "  not checked against notes: no tool definitions recorded yet (the gateway records them once it lists the route's tools; [pinning] mode = \"off\" records none)",
            ]
        );
        assert!(problems.is_empty(), "{problems:?}");
        recorded.insert("notes".to_owned(), vec![json!({"name": "search"})]);
        let (lines, problems) = describe(&s, Some(&recorded), &BTreeMap::new());
        assert_eq!(
            lines[1],
            "  1 tools shown, checked against the catalogs the store recorded; the model-facing \
             catalog 29 bytes listed, 874 bytes in search mode"
        );
        assert_eq!(
            problems,
            [
                "[[virtual]] \"team\": tool name \"search\" is shown for werkbaum's \"search\" and notes's \"search\": set a prefix, or rename or hide one ([virtual.tools.search])",
                "[[virtual]] \"team\": [virtual.tools.serach] names no member tool (names are <prefix><tool>)",
            ]
        );
        let (_, problems) = describe(&s, None, &BTreeMap::new());
        assert!(problems.is_empty());
    }

    #[test]
    fn check_refuses_colliding_prompts_and_says_how_resource_uris_stay_unique() {
        let s = settings();
        let listed = |prompts: &[&str], uris: &[&str]| {
            Ok(Listed {
                prompts: prompts.iter().map(|p| json!({"name": p})).collect(),
                resources: uris.iter().map(|u| json!({"uri": u})).collect(),
            })
        };
        let mut asked = BTreeMap::new();
        asked.insert(
            "werkbaum".to_owned(),
            listed(&["plan", "review"], &["werkbaum://guide", "file:///shared"]),
        );
        asked.insert("notes".to_owned(), Err("connection refused".to_owned()));
        let (lines, problems) = describe(&s, None, &asked);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(
            lines.contains(
                &"  2 prompts shown as <prefix><name>; 2 resources, their URIs unchanged (each \
                  member's own, so unique per member): a URI two members list is served from \
                  the first"
                    .to_owned()
            ),
            "{lines:#?}"
        );
        assert!(
            lines.contains(
                &"  prompts and resources of notes not checked: connection refused".to_owned()
            ),
            "{lines:#?}"
        );
        // Both without a prefix: the prompt both list collides (refused, naming both); the URI
        // both list is served from the first (said).
        asked.insert("notes".to_owned(), listed(&["review"], &["file:///shared"]));
        let (lines, problems) = describe(&s, None, &asked);
        assert_eq!(
            problems,
            [
                "[[virtual]] \"team\": prompt name \"review\" is shown for werkbaum's \"review\" and \
                 notes's \"review\": give one of the two members another prefix ([virtual.prefix])"
            ]
        );
        assert!(
            lines.contains(
                &"  note: resource \"file:///shared\" is listed by werkbaum and notes: served \
                  from werkbaum (the first member)"
                    .to_owned()
            ),
            "{lines:#?}"
        );
    }
}
