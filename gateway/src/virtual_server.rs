//! Virtual servers (issue 42, `[[virtual]]`): one MCP endpoint over several routes ("members"),
//! their tools shown under one name map (`<prefix><tool>`, renamed, hidden, described for
//! agents), their lists merged in a stable order, a call routed by its shown name to its member
//! and original name, and tool search for large catalogs (`find_tools` / `call_tool`). Pure: the
//! members' lists (as the catalogs or the pins store know them) and the member routes' rules in,
//! decisions out; nothing here talks to a member.
//!
//! - `names.rs`: the name map, and the problems a configuration has with the members' catalogs
//!   (collisions, overrides of unknown tools, widening annotation overrides, unknown `pinned`);
//! - `lists.rs`: merged `tools/list`, `resources/list`, `resources/templates/list`,
//!   `prompts/list`, the member of a resource URI, and a `tools/call` body with its name
//!   rewritten (the only bytes changed);
//! - `search.rs`: search mode's `find_tools` and `call_tool`, and the catalog's size;
//! - `connect.rs`: a per-user member whose person has not connected, in that person's list.

mod connect;
mod lists;
mod names;
mod relayed;
mod search;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::Deserialize;

pub(crate) use connect::{connect_member, connect_name, without_unconnected};
pub(crate) use lists::{MemberLists, Merged, merge, rewrite_call_name};
pub(crate) use names::{Entry, MemberCatalog, NameMap, Problem, name_map};
pub(crate) use relayed::{Event, classify, with_id};
pub(crate) use search::{
    CALL_TOOL, FIND_TOOLS, catalog_bytes, find_tools, find_tools_result, inner_call, search_list,
    tools_list,
};

/// One validated `[[virtual]]` entry as the name map needs it (the config adds its public path
/// and resource URLs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VirtualServer {
    pub(crate) name: String,
    /// Its human title (`title`), for the consent page and `initialize`'s `serverInfo`.
    pub(crate) title: Option<String>,
    /// The member routes, in the configured order, each with its prefix resolved.
    pub(crate) members: Vec<Member>,
    /// `[virtual.tools.NAME]`, by the name the virtual server shows before any `rename`.
    pub(crate) tools: BTreeMap<String, ToolOverride>,
    /// Search mode: `tools/list` shows `find_tools`, `call_tool` and `pinned`.
    pub(crate) search: bool,
    /// Shown names listed beside the search tools in search mode.
    pub(crate) pinned: Vec<String>,
}

/// A member route and the prefix of its tools' and prompts' shown names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) route: String,
    /// `<route>_` unless `[virtual.prefix]` says (`""`: none).
    pub(crate) prefix: String,
}

/// `[virtual.tools.NAME]`: how the virtual server shows one member tool.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ToolOverride {
    /// The name shown instead.
    pub(crate) rename: Option<String>,
    /// The description shown instead (what an agent reads to pick the tool).
    pub(crate) description: Option<String>,
    /// The title shown instead.
    pub(crate) title: Option<String>,
    /// Annotation hints over the member's; one that widens access is refused unless the member
    /// route decides the tool's scopes itself ([`names::widening`]).
    pub(crate) annotations: Option<Annotations>,
    /// Neither listed nor callable through the virtual server.
    pub(crate) hide: bool,
}

/// The MCP tool annotation hints an override may set.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub(crate) struct Annotations {
    pub(crate) read_only_hint: Option<bool>,
    pub(crate) destructive_hint: Option<bool>,
    pub(crate) idempotent_hint: Option<bool>,
    pub(crate) open_world_hint: Option<bool>,
}

impl Annotations {
    /// The hints set, as `(JSON key, value)`.
    pub(crate) fn set(&self) -> Vec<(&'static str, bool)> {
        [
            ("readOnlyHint", self.read_only_hint),
            ("destructiveHint", self.destructive_hint),
            ("idempotentHint", self.idempotent_hint),
            ("openWorldHint", self.open_world_hint),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
    }
}

/// A tool name as MCP spells them (2025-11-25): 1 to 128 characters of A-Z, a-z, 0-9, `_`,
/// `-`, `.`.
pub(crate) fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
