//! `[[virtual]]`: virtual servers, each one MCP endpoint at `/NAME/mcp` over several routes
//! (issue 42), as written and checked into [`Virtual`]s. What needs the members' catalogs
//! (collisions, overrides of unknown tools, widening overrides, `pinned`) is not known here:
//! `virtual_server::name_map` finds it, `pforte check` over the catalogs the pins store
//! recorded. Pure.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{ConfigError, MCP_PATH, Route, routes::checked_title, valid_route_name};
use crate::virtual_server::{Member, ToolOverride, VirtualServer, valid_tool_name};

/// One `[[virtual]]` entry as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct VirtualConfig {
    /// `[a-z0-9-]+`, 1 to 63, unique among routes and virtual servers: the path `/NAME/mcp`.
    pub(crate) name: String,
    /// Its human title on the consent page and in `serverInfo` (default: the name).
    pub(crate) title: Option<String>,
    /// The member routes' names (at least one; each once).
    pub(crate) members: Vec<String>,
    /// `[virtual.prefix]`: a member's prefix (default `<member>_`; `""`: none).
    pub(crate) prefix: BTreeMap<String, String>,
    /// `[virtual.tools.NAME]`: how one tool is shown, by the name shown before `rename`.
    pub(crate) tools: BTreeMap<String, ToolOverride>,
    /// Search mode: `tools/list` shows `find_tools`, `call_tool` and `pinned`.
    pub(crate) search: bool,
    /// Tools (shown names) listed beside the search tools (with `search = true`).
    pub(crate) pinned: Vec<String>,
}

/// A validated virtual server and its public addresses, as a route has them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Virtual {
    pub(crate) server: VirtualServer,
    /// `/NAME/mcp`.
    pub(crate) path: String,
    /// `<base_url>` + `path`: its own OAuth protected resource.
    pub(crate) resource: String,
    /// `/.well-known/oauth-protected-resource` + `path`.
    pub(crate) metadata_path: String,
    /// `<base_url>` + `metadata_path`.
    pub(crate) metadata_url: String,
    /// Who may use it: its members' `roles` and `users` (the same on every member).
    pub(crate) roles: Vec<String>,
    pub(crate) users: Vec<String>,
}

/// The error of `field` in the `[[virtual]]` entry `name`.
fn err(name: &str, field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Virtual {
        name: name.to_owned(),
        field,
        reason: reason.into(),
    }
}

/// Every `[[virtual]]` entry checked against the route table.
pub(super) fn table(
    entries: &[VirtualConfig],
    routes: &[Route],
    base_url: &str,
) -> Result<Vec<Virtual>, ConfigError> {
    let mut out: Vec<Virtual> = Vec::with_capacity(entries.len());
    for v in entries {
        let checked = entry(v, routes, base_url)?;
        if out.iter().any(|o| o.server.name == v.name) {
            return Err(err(
                &v.name,
                "name",
                "a virtual server of this name exists already; names are unique",
            ));
        }
        out.push(checked);
    }
    Ok(out)
}

/// One entry: its name free, its members routes, its prefixes and overrides well formed.
fn entry(v: &VirtualConfig, routes: &[Route], base_url: &str) -> Result<Virtual, ConfigError> {
    let name = v.name.as_str();
    if !valid_route_name(name) {
        return Err(err(
            name,
            "name",
            "a virtual server's name is 1 to 63 characters of a-z, 0-9 and '-'",
        ));
    }
    let path = format!("/{name}{MCP_PATH}");
    if let Some(r) = routes.iter().find(|r| r.name == name || r.path == path) {
        return Err(err(
            name,
            "name",
            format!(
                "the route {} is served at {}; a virtual server needs a name of its own",
                r.name, r.path
            ),
        ));
    }
    if v.members.is_empty() {
        return Err(err(name, "members", "name at least one route"));
    }
    let mut seen = BTreeSet::new();
    for m in &v.members {
        if !routes.iter().any(|r| &r.name == m) {
            let known: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
            return Err(err(
                name,
                "members",
                format!("{m:?} is no route (routes: {})", known.join(", ")),
            ));
        }
        if !seen.insert(m.as_str()) {
            return Err(err(name, "members", format!("{m:?} is listed twice")));
        }
    }
    let member_routes: Vec<&Route> = v
        .members
        .iter()
        .filter_map(|m| routes.iter().find(|r| &r.name == m))
        .collect();
    let first = member_routes[0];
    if let Some(other) = member_routes
        .iter()
        .find(|r| r.roles != first.roles || r.users != first.users)
    {
        return Err(err(
            name,
            "members",
            format!(
                "routes {} and {} differ in roles or users: whoever may use a virtual server \
                 may use every member, so give its members the same roles and users",
                first.name, other.name
            ),
        ));
    }
    if let Some(m) = v.prefix.keys().find(|m| !seen.contains(m.as_str())) {
        return Err(err(name, "prefix", format!("{m:?} is not a member")));
    }
    if let Some((m, p)) = v
        .prefix
        .iter()
        .find(|(_, p)| !p.is_empty() && !valid_tool_name(p))
    {
        return Err(err(
            name,
            "prefix",
            format!("{m} = {p:?}: a prefix is \"\" or characters of A-Z, a-z, 0-9, '_', '-', '.'"),
        ));
    }
    for (shown, o) in &v.tools {
        check_override(name, shown, o)?;
    }
    if !v.pinned.is_empty() && !v.search {
        return Err(err(
            name,
            "pinned",
            "pinned tools are listed beside the search tools: set search = true",
        ));
    }
    let mut pins = BTreeSet::new();
    for p in &v.pinned {
        if !valid_tool_name(p) || !pins.insert(p.as_str()) {
            return Err(err(
                name,
                "pinned",
                format!("{p:?}: a tool name, each once"),
            ));
        }
    }
    let title = checked_title(&v.title).map_err(|reason| err(name, "title", reason))?;
    let members = v
        .members
        .iter()
        .map(|m| Member {
            route: m.clone(),
            prefix: v.prefix.get(m).cloned().unwrap_or_else(|| format!("{m}_")),
        })
        .collect();
    Ok(Virtual {
        server: VirtualServer {
            name: name.to_owned(),
            title,
            members,
            tools: v.tools.clone(),
            search: v.search,
            pinned: v.pinned.clone(),
        },
        resource: format!("{base_url}{path}"),
        metadata_path: format!("/.well-known/oauth-protected-resource{path}"),
        metadata_url: format!("{base_url}/.well-known/oauth-protected-resource{path}"),
        path,
        roles: first.roles.clone(),
        users: first.users.clone(),
    })
}

/// `[virtual.tools.NAME]`: a tool name, a tool-name `rename`, texts without control characters
/// (a description may have line breaks), and `hide` alone.
fn check_override(name: &str, shown: &str, o: &ToolOverride) -> Result<(), ConfigError> {
    let bad = |reason: String| err(name, "tools", format!("[virtual.tools.{shown}] {reason}"));
    if !valid_tool_name(shown) {
        return Err(bad(
            "is no tool name (1 to 128 of A-Z, a-z, 0-9, '_', '-', '.')".to_owned(),
        ));
    }
    if let Some(r) = o.rename.as_deref().filter(|r| !valid_tool_name(r)) {
        return Err(bad(format!(
            "rename {r:?} is no tool name (1 to 128 of A-Z, a-z, 0-9, '_', '-', '.')"
        )));
    }
    let text_ok = |t: &str, lines: bool| {
        !t.trim().is_empty()
            && !t
                .chars()
                .any(|c| c.is_control() && !(lines && matches!(c, '\n' | '\t')))
    };
    if o.description.as_deref().is_some_and(|d| !text_ok(d, true)) {
        return Err(bad(
            "description must not be blank or hold control characters".to_owned(),
        ));
    }
    if o.title.as_deref().is_some_and(|t| !text_ok(t, false)) {
        return Err(bad(
            "title must not be blank or hold control characters".to_owned()
        ));
    }
    if o.hide
        && (o.rename.is_some()
            || o.description.is_some()
            || o.title.is_some()
            || o.annotations.is_some())
    {
        return Err(bad(
            "hide = true shows nothing: give rename, description, title or annotations without it"
                .to_owned(),
        ));
    }
    Ok(())
}
