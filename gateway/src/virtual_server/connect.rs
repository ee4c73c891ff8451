//! A per-user member whose person has not connected it yet, in that person's `tools/list` of a
//! virtual server (issue 42 point 4): as the member route shows it before the connection — its
//! stand-in session lists one tool, `connect` —, the member's tools are left out and its connect
//! tool, `<prefix>connect`, is listed in their place; every other member's tools as they are.
//! Calling it (or any of the member's tools) gets the member route's connect prompt. Pure.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Member, NameMap};

/// The name of the tool every route's stand-in session lists.
const CONNECT: &str = "connect";

/// The shown name of `member`'s connect tool: `<prefix>connect`.
pub(crate) fn connect_name(member: &Member) -> String {
    format!("{}{CONNECT}", member.prefix)
}

/// The member (an index into `members`) whose connect tool `shown` names, if any. A member tool
/// shown under that name is the name map's and wins: the caller asks the map first.
pub(crate) fn connect_member(members: &[Member], shown: &str) -> Option<usize> {
    members.iter().position(|m| connect_name(m) == shown)
}

/// `list`, a caller's `tools/list` result, for a person who has not connected the members
/// `waiting` (indices into the virtual server's members): their tools (by the name map) left
/// out, and `connects` — each one's connect tool, already named — listed instead, unless a
/// listed tool has that name. Without search mode the list stays in shown-name order; in search
/// mode the connect tools follow `find_tools`, `call_tool` and the pinned tools.
pub(crate) fn without_unconnected(
    list: &mut Value,
    map: &NameMap,
    waiting: &BTreeSet<usize>,
    connects: Vec<Value>,
    search: bool,
) {
    if waiting.is_empty() {
        return;
    }
    let Some(tools) = list.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    tools.retain(|t| {
        t["name"]
            .as_str()
            .and_then(|n| map.entries.get(n))
            .is_none_or(|e| !waiting.contains(&e.member))
    });
    for tool in connects {
        if !tools.iter().any(|t| t["name"] == tool["name"]) {
            tools.push(tool);
        }
    }
    if !search {
        tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::virtual_server::{Entry, tools_list};

    fn members() -> Vec<Member> {
        ["mcp", "search"]
            .iter()
            .map(|r| Member {
                route: (*r).to_owned(),
                prefix: format!("{r}_"),
            })
            .collect()
    }

    fn map() -> NameMap {
        let mut map = NameMap::default();
        for (member, name) in [(0, "whoami"), (1, "echo"), (1, "peek")] {
            let shown = format!("{}{name}", members()[member].prefix);
            map.entries.insert(
                shown.clone(),
                Entry {
                    member,
                    original: name.to_owned(),
                    definition: json!({"name": shown}),
                },
            );
        }
        map
    }

    fn names(list: &Value) -> Vec<&str> {
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn an_unconnected_members_tools_give_way_to_its_connect_tool() {
        let server = crate::virtual_server::VirtualServer {
            name: "team".to_owned(),
            title: None,
            members: members(),
            tools: std::collections::BTreeMap::new(),
            search: false,
            pinned: Vec::new(),
        };
        let map = map();
        let mut list = tools_list(&server, &map, |_| true);
        assert_eq!(names(&list), ["mcp_whoami", "search_echo", "search_peek"]);
        // Connected to everything: the list as it was.
        without_unconnected(&mut list, &map, &BTreeSet::new(), Vec::new(), false);
        assert_eq!(names(&list), ["mcp_whoami", "search_echo", "search_peek"]);
        // Not connected to `search`: its connect tool instead of its tools, in name order.
        let connect = json!({"name": connect_name(&server.members[1])});
        let waiting = BTreeSet::from([1]);
        without_unconnected(&mut list, &map, &waiting, vec![connect], false);
        assert_eq!(names(&list), ["mcp_whoami", "search_connect"]);
        assert_eq!(list["cacheScope"], "private");
        assert_eq!(connect_member(&server.members, "search_connect"), Some(1));
        assert_eq!(connect_member(&server.members, "mcp_connect"), Some(0));
        assert_eq!(connect_member(&server.members, "connect"), None);
        // In search mode the pinned tools of that member go too; the connect tool follows.
        let search = crate::virtual_server::VirtualServer {
            search: true,
            pinned: vec!["search_echo".to_owned(), "mcp_whoami".to_owned()],
            ..server
        };
        let mut list = tools_list(&search, &map, |_| true);
        let connect = json!({"name": "search_connect"});
        without_unconnected(&mut list, &map, &waiting, vec![connect], true);
        assert_eq!(
            names(&list),
            ["find_tools", "call_tool", "mcp_whoami", "search_connect"]
        );
    }
}
