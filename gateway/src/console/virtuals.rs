//! The overview's "Virtual servers" section (issue 42 point 6): each `[[virtual]]` with its
//! public path, title, search mode and the tools it shows, and its members — route (linked to
//! its page), prefix, tools from that member, whether it takes each person's own credential.
//! Nothing when none is configured. Pure; every name and title escaped.

use super::pages::{escape, table};

/// One member of a virtual server as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberRow {
    pub(crate) route: String,
    /// The prefix of its shown names (`""`: none).
    pub(crate) prefix: String,
    /// Its tools the virtual server shows (`None`: its catalog is not known yet).
    pub(crate) tools: Option<usize>,
    /// The route takes each person's own upstream credential (a connect prompt until then).
    pub(crate) per_user: bool,
}

/// One virtual server as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VirtualRow {
    pub(crate) name: String,
    pub(crate) title: Option<String>,
    /// Its public path, `/NAME/mcp`.
    pub(crate) path: String,
    pub(crate) members: Vec<MemberRow>,
    /// Tools reachable through it, under its names (the name map's entries; in search mode
    /// through `find_tools` and `call_tool`).
    pub(crate) tools: usize,
    /// Search mode, with the number of pinned tools.
    pub(crate) search: Option<usize>,
}

fn member_html(m: &MemberRow) -> String {
    let prefix = match m.prefix.as_str() {
        "" => "<span class=\"muted\">no prefix</span>".to_owned(),
        p => format!("<code>{}…</code>", escape(p)),
    };
    let tools = m.tools.map_or_else(
        || "tools not known yet".to_owned(),
        |n| format!("{n} tools"),
    );
    let per_user = if m.per_user {
        " · <span class=\"warn\">own credential per person</span>"
    } else {
        ""
    };
    format!(
        "<div><a href=\"/admin/routes/{route}\">{route}</a> {prefix} · {tools}{per_user}</div>",
        route = escape(&m.route),
    )
}

/// The section, or nothing without virtual servers.
pub(crate) fn virtuals_section(rows: &[VirtualRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    // The members in one block: on a phone a cell's children sit beside its label.
    let body: String = rows
        .iter()
        .map(|v| {
            let mode = match v.search {
                Some(pinned) => format!("tool search, {pinned} pinned"),
                None => "all tools listed".to_owned(),
            };
            format!(
                "<tr><td><div>{name}{title}</div></td><td><code>{path}</code></td>\
                 <td><div>{members}</div></td><td>{tools}</td><td>{mode}</td></tr>",
                name = escape(&v.name),
                title = v
                    .title
                    .as_deref()
                    .map(|t| format!("<div class=\"muted\">{}</div>", escape(t)))
                    .unwrap_or_default(),
                path = escape(&v.path),
                members = v.members.iter().map(member_html).collect::<String>(),
                tools = v.tools,
            )
        })
        .collect();
    format!(
        "<h2 id=\"virtual\">Virtual servers</h2><p class=\"muted\">One MCP endpoint over several \
         routes (<code>[[virtual]]</code>), each its own OAuth resource; a member's tools are \
         shown as <code>&lt;prefix&gt;&lt;tool&gt;</code> and decided by the member route's \
         rules.</p>{}",
        table(
            &[
                "Virtual server",
                "Path",
                "Members",
                "Tools (under its names)",
                "Mode"
            ],
            &body,
            "No virtual servers."
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_lists_each_virtual_server_with_its_members_escaped() {
        assert_eq!(virtuals_section(&[]), "");
        let row = VirtualRow {
            name: "team".into(),
            title: Some("Team <tools>".into()),
            path: "/team/mcp".into(),
            members: vec![
                MemberRow {
                    route: "mcp".into(),
                    prefix: String::new(),
                    tools: Some(13),
                    per_user: false,
                },
                MemberRow {
                    route: "search".into(),
                    prefix: "search_".into(),
                    tools: None,
                    per_user: true,
                },
            ],
            tools: 13,
            search: Some(1),
        };
        let html = virtuals_section(&[row]);
        for needle in [
            "<h2 id=\"virtual\">Virtual servers</h2>",
            "Team &lt;tools&gt;",
            "<code>/team/mcp</code>",
            "<a href=\"/admin/routes/mcp\">mcp</a> <span class=\"muted\">no prefix</span> · 13 tools",
            "<code>search_…</code> · tools not known yet · <span class=\"warn\">own credential per person</span>",
            "tool search, 1 pinned",
            "data-label=\"Members\"",
        ] {
            assert!(html.contains(needle), "{needle}: {html}");
        }
        assert!(!html.contains("<tools>"));
    }
}
