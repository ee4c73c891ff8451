//! The name map of a virtual server: each member tool's shown name (`<prefix><tool>`, or its
//! override's `rename`), its definition as shown (name, description, title and annotation hints
//! overridden), hidden tools left out — and the problems the configuration has with the members'
//! catalogs, each named: two tools under one shown name (neither is served), an override or a
//! `pinned` name that matches no tool, an annotation override that widens access.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::VirtualServer;
use crate::policy::{Annotation, ToolRule};

/// What is known of one member's tools: its `tools/list` entries (`None`: not known yet — a
/// member down, or a route the pins store has no record of) and its route's tool rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemberCatalog<'a> {
    pub(crate) tools: Option<&'a [Value]>,
    pub(crate) rules: &'a BTreeMap<String, ToolRule>,
}

/// One tool the virtual server shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// Index into [`VirtualServer::members`].
    pub(crate) member: usize,
    /// The member's own name of the tool.
    pub(crate) original: String,
    /// The definition as the virtual server lists it.
    pub(crate) definition: Value,
}

impl Entry {
    /// What the policy needs of the tool: its (possibly overridden) `readOnlyHint`.
    pub(crate) fn annotation(&self) -> Annotation {
        if self.definition["annotations"]["readOnlyHint"] == Value::Bool(true) {
            Annotation::ReadOnly
        } else {
            Annotation::Writes
        }
    }
}

/// Shown name → tool, in shown-name order (the merged list's order).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NameMap {
    pub(crate) entries: BTreeMap<String, Entry>,
}

/// Something the configuration gets wrong against the members' catalogs (`pforte check`
/// refuses it; a running gateway logs it and serves the rest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Problem {
    #[error(
        "{kind} name {shown:?} is shown for {first_route}'s {first:?} and {second_route}'s \
         {second:?}: {}",
        fix(kind, shown)
    )]
    Collision {
        kind: &'static str,
        shown: String,
        first_route: String,
        first: String,
        second_route: String,
        second: String,
    },
    #[error("[virtual.tools.{shown}] names no member tool (names are <prefix><tool>)")]
    UnknownOverride { shown: String },
    #[error(
        "[virtual.tools.{shown}] annotations.{hint} = {value} widens access to {route}'s \
         {tool:?}: allowed only when [routes.tools.{tool}] of route {route} sets its scopes"
    )]
    Widens {
        shown: String,
        hint: &'static str,
        value: bool,
        route: String,
        tool: String,
    },
    #[error("tool name {shown:?} ({route}'s {tool:?}) is search mode's own: rename or hide it")]
    Reserved {
        shown: String,
        route: String,
        tool: String,
    },
    #[error("pinned {name:?} is no tool the virtual server shows")]
    UnknownPinned { name: String },
    #[error(
        "resource {uri:?} is listed by {first_route} and {second_route}: served from \
         {first_route} (the first member)"
    )]
    DuplicateUri {
        uri: String,
        first_route: String,
        second_route: String,
    },
}

/// How to end a collision of two `kind`s (`tool` or `prompt`) under the shown name `shown`: a
/// tool can be renamed or hidden, a prompt only shown under another prefix.
fn fix(kind: &str, shown: &str) -> String {
    match kind {
        "tool" => format!("set a prefix, or rename or hide one ([virtual.tools.{shown}])"),
        _ => "give one of the two members another prefix ([virtual.prefix])".to_owned(),
    }
}

/// The cautious value of an annotation hint: the spec's default, the one that asks more of a
/// client (`readOnlyHint: false`, `destructiveHint: true`, `idempotentHint: false`,
/// `openWorldHint: true`).
fn cautious(hint: &str) -> bool {
    matches!(hint, "destructiveHint" | "openWorldHint")
}

/// Whether setting `hint` to `value` over the member's `member` value (absent: the default)
/// widens access: it moves a hint from its cautious value to the other. `readOnlyHint` decides
/// the scope a call needs (`mcp:write` → `mcp:read`); the others decide whether clients ask
/// before a call. Narrowing (towards the cautious value) is always allowed.
pub(crate) fn widening(hint: &str, member: Option<bool>, value: bool) -> bool {
    let safe = cautious(hint);
    value != safe && member.unwrap_or(safe) == safe
}

/// The name map of `server` over its members' catalogs (`members[i]` is `server.members[i]`'s),
/// and the problems found. The map leaves out what a problem concerns (both tools of a
/// collision; a widening override's hints), so a running gateway can serve the rest.
pub(crate) fn name_map(
    server: &VirtualServer,
    members: &[MemberCatalog<'_>],
) -> (NameMap, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut candidates: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for (i, (member, catalog)) in server.members.iter().zip(members).enumerate() {
        for tool in catalog.tools.unwrap_or_default() {
            let Some(name) = tool["name"].as_str() else {
                continue;
            };
            let prefixed = format!("{}{name}", member.prefix);
            let over = server.tools.get_key_value(&prefixed);
            if let Some((key, _)) = over {
                used.insert(key.as_str());
            }
            let over = over.map(|(_, o)| o);
            if over.is_some_and(|o| o.hide) {
                continue;
            }
            let shown = over
                .and_then(|o| o.rename.clone())
                .unwrap_or_else(|| prefixed.clone());
            let mut definition = tool.clone();
            definition["name"] = Value::String(shown.clone());
            if let Some(o) = over {
                if let Some(d) = &o.description {
                    definition["description"] = Value::String(d.clone());
                }
                if let Some(t) = &o.title {
                    definition["title"] = Value::String(t.clone());
                }
                for (hint, value) in o.annotations.iter().flat_map(|a| a.set()) {
                    let current = tool["annotations"][hint].as_bool();
                    let decided = catalog.rules.get(name).is_some_and(|r| r.scopes.is_some());
                    if widening(hint, current, value) && !decided {
                        problems.push(Problem::Widens {
                            shown: prefixed.clone(),
                            hint,
                            value,
                            route: member.route.clone(),
                            tool: name.to_owned(),
                        });
                        continue;
                    }
                    if !definition["annotations"].is_object() {
                        definition["annotations"] = Value::Object(serde_json::Map::new());
                    }
                    definition["annotations"][hint] = Value::Bool(value);
                }
            }
            candidates.entry(shown).or_default().push(Entry {
                member: i,
                original: name.to_owned(),
                definition,
            });
        }
    }
    let mut map = NameMap::default();
    for (shown, mut found) in candidates {
        if found.len() > 1 {
            let (a, b) = (&found[0], &found[1]);
            problems.push(Problem::Collision {
                kind: "tool",
                first_route: server.members[a.member].route.clone(),
                first: a.original.clone(),
                second_route: server.members[b.member].route.clone(),
                second: b.original.clone(),
                shown,
            });
        } else if let Some(entry) = found.pop() {
            map.entries.insert(shown, entry);
        }
    }
    if server.search {
        for reserved in [super::FIND_TOOLS, super::CALL_TOOL] {
            if let Some(e) = map.entries.remove(reserved) {
                problems.push(Problem::Reserved {
                    shown: reserved.to_owned(),
                    route: server.members[e.member].route.clone(),
                    tool: e.original,
                });
            }
        }
    }
    let all_known = members.iter().all(|m| m.tools.is_some());
    if all_known {
        for shown in server.tools.keys() {
            if !used.contains(shown.as_str()) {
                problems.push(Problem::UnknownOverride {
                    shown: shown.clone(),
                });
            }
        }
        for name in &server.pinned {
            if !map.entries.contains_key(name) {
                problems.push(Problem::UnknownPinned { name: name.clone() });
            }
        }
    }
    (map, problems)
}
