//! What `pforte check` says about `[[virtual]]` servers: each one's members, and the problems
//! its configuration has with the members' catalogs — known to `check` from the pins store,
//! which records every route's tool definitions as the running gateway last listed them (a
//! route without records, or `[pinning] mode = "off"`: not known, said so, not checked).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{
    config::Settings,
    pins::PinStore,
    virtual_server::{MemberCatalog, catalog_bytes, name_map, search_list},
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
/// server) — pure: `recorded` is what the pins store knows (`None`: no store to ask).
pub(super) fn describe(
    s: &Settings,
    recorded: Option<&BTreeMap<String, Vec<Value>>>,
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
        problems.extend(
            found
                .into_iter()
                .map(|p| format!("[[virtual]] {:?}: {p}", server.name)),
        );
    }
    (lines, problems)
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
        let (lines, problems) = describe(&s, Some(&recorded));
        assert_eq!(
            lines,
            [
                "http://127.0.0.1:8787/team/mcp → virtual server over werkbaum (no prefix), notes (no prefix)",
                "  not checked against notes: no tool definitions recorded yet (the gateway records them once it lists the route's tools; [pinning] mode = \"off\" records none)",
            ]
        );
        assert!(problems.is_empty(), "{problems:?}");
        recorded.insert("notes".to_owned(), vec![json!({"name": "search"})]);
        let (lines, problems) = describe(&s, Some(&recorded));
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
        let (_, problems) = describe(&s, None);
        assert!(problems.is_empty());
    }
}
