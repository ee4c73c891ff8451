//! The virtual server's merged lists, in a stable order whatever order the members answered in:
//! tools and prompts by shown name; resources and resource templates by member (in `members`
//! order), then URI. Resource URIs pass unchanged (they are the member's own identifiers); a URI
//! two members list is served from the first and named as a problem. And the one edit a routed
//! request gets: its `params.name` replaced by the member's own name.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{NameMap, Problem, VirtualServer};
use crate::raw_json;

/// One member's lists other than tools (`None`: not known, e.g. the member is down).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MemberLists<'a> {
    pub(crate) resources: Option<&'a [Value]>,
    pub(crate) templates: Option<&'a [Value]>,
    pub(crate) prompts: Option<&'a [Value]>,
}

/// The merged lists and what routes a request naming one of their items.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Merged {
    pub(crate) tools: Vec<Value>,
    pub(crate) resources: Vec<Value>,
    pub(crate) templates: Vec<Value>,
    pub(crate) prompts: Vec<Value>,
    /// Resource URI → member index.
    uris: BTreeMap<String, usize>,
    /// `(uriTemplate, member index)`, in list order.
    template_members: Vec<(String, usize)>,
    /// Shown prompt name → (member index, the member's own name).
    prompt_names: BTreeMap<String, (usize, String)>,
    pub(crate) problems: Vec<Problem>,
}

impl Merged {
    /// The member a `resources/read` of `uri` goes to: the member listing it, else the first
    /// whose template matches it.
    pub(crate) fn resource_member(&self, uri: &str) -> Option<usize> {
        self.uris.get(uri).copied().or_else(|| {
            self.template_members
                .iter()
                .find(|(t, _)| crate::policy::matches_template(t, uri))
                .map(|(_, m)| *m)
        })
    }

    /// Where a `prompts/get` of the shown name goes.
    pub(crate) fn prompt(&self, shown: &str) -> Option<(usize, &str)> {
        self.prompt_names
            .get(shown)
            .map(|(m, name)| (*m, name.as_str()))
    }
}

/// Items of one kind from every member, each with its key (`key` of the item), by member.
fn by_member<'a>(
    lists: &'a [MemberLists<'a>],
    pick: impl Fn(&MemberLists<'a>) -> Option<&'a [Value]>,
    key: &str,
) -> Vec<(usize, String, &'a Value)> {
    let mut out = Vec::new();
    for (i, l) in lists.iter().enumerate() {
        let mut items: Vec<(usize, String, &Value)> = pick(l)
            .unwrap_or_default()
            .iter()
            .filter_map(|v| Some((i, v[key].as_str()?.to_owned(), v)))
            .collect();
        items.sort_by(|a, b| a.1.cmp(&b.1));
        out.extend(items);
    }
    out
}

/// Merges the members' lists (`lists[i]` is `server.members[i]`'s) under the name map.
pub(crate) fn merge(server: &VirtualServer, map: &NameMap, lists: &[MemberLists<'_>]) -> Merged {
    let mut merged = Merged {
        tools: map.entries.values().map(|e| e.definition.clone()).collect(),
        ..Merged::default()
    };
    let route = |i: usize| server.members[i].route.clone();
    for (i, uri, item) in by_member(lists, |l| l.resources, "uri") {
        match merged.uris.get(&uri) {
            Some(&first) if first != i => merged.problems.push(Problem::DuplicateUri {
                uri,
                first_route: route(first),
                second_route: route(i),
            }),
            Some(_) => {}
            None => {
                merged.uris.insert(uri, i);
                merged.resources.push(item.clone());
            }
        }
    }
    for (i, template, item) in by_member(lists, |l| l.templates, "uriTemplate") {
        merged.template_members.push((template, i));
        merged.templates.push(item.clone());
    }
    let mut prompts: BTreeMap<String, Vec<(usize, String, Value)>> = BTreeMap::new();
    for (i, name, item) in by_member(lists, |l| l.prompts, "name") {
        let shown = format!("{}{name}", server.members[i].prefix);
        let mut item = item.clone();
        item["name"] = Value::String(shown.clone());
        prompts.entry(shown).or_default().push((i, name, item));
    }
    for (shown, mut found) in prompts {
        if found.len() > 1 {
            merged.problems.push(Problem::Collision {
                kind: "prompt",
                first_route: route(found[0].0),
                first: found[0].1.clone(),
                second_route: route(found[1].0),
                second: found[1].1.clone(),
                shown,
            });
        } else if let Some((i, name, item)) = found.pop() {
            merged.prompts.push(item);
            merged.prompt_names.insert(shown, (i, name));
        }
    }
    merged
}

/// The request `body` (one JSON-RPC message: `tools/call`, `prompts/get`) with its
/// `params.name` replaced by `name`: the only bytes changed (key order, number text, escapes
/// and `_meta` stay as the client wrote them). `None` when the body has no string there.
pub(crate) fn rewrite_call_name(body: &[u8], name: &str) -> Option<Vec<u8>> {
    if !raw_json::is_valid(body) {
        return None;
    }
    let top = raw_json::trimmed(body);
    let params = raw_json::get(body, top, "params")?;
    let at = raw_json::get(body, params, "name")?;
    raw_json::string(body.get(at.clone())?)?;
    let mut edits = raw_json::Edits::default();
    edits.replace(at, serde_json::to_vec(name).ok()?);
    let mut out = body.to_vec();
    edits.apply(&mut out);
    Some(out)
}
