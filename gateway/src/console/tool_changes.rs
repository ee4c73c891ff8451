//! The console's "Tool changes" page (`/admin/tools`, issue 43 point 1): the tools each route
//! holds because their definition changed since it was approved (or is new and not approved
//! yet), each with the diff `pforte tools pending` prints (old → new per field, JSON Pointer
//! paths inside the schemas), an Approve button per tool and an Approve all per route; with
//! nothing held, what pinning is and how `[pinning]` is set. Every definition is the upstream's
//! text — the attacker's, when pinning matters — and is shown escaped, as text. Pure rendering.

use super::pages::{alert, csrf_field, escape};
use crate::pins::{Mode, NewTools, Pinning, diff::FieldDiff};
use pforte_page::{Button, button, hidden};

/// One held (or logged) tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldTool {
    pub(crate) route: String,
    pub(crate) tool: String,
    /// Never approved (a new tool under `new_tools = "hold"`).
    pub(crate) new: bool,
    /// When its current definition was first seen (UTC, as the console writes times).
    pub(crate) seen: String,
    pub(crate) changes: Vec<FieldDiff>,
}

/// What the page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolChangesPage {
    pub(crate) pinning: Pinning,
    /// Whether pins are recorded at all (not with `mode = "off"`).
    pub(crate) enabled: bool,
    /// Pending tools, by route then tool.
    pub(crate) held: Vec<HeldTool>,
    /// Per route, how many tools are pinned.
    pub(crate) pinned: Vec<(String, usize)>,
    pub(crate) csrf: String,
    pub(crate) notice: Option<String>,
    pub(crate) error: Option<String>,
}

/// What pinning is, in two sentences, and the settings in force.
fn explanation(p: &ToolChangesPage) -> String {
    let mode = match p.pinning.mode {
        Mode::Hold => "hold",
        Mode::Log => "log",
        Mode::Off => "off",
    };
    let new_tools = match p.pinning.new_tools {
        NewTools::Allow => "allow",
        NewTools::Hold => "hold",
    };
    let effect = match p.pinning.mode {
        Mode::Hold => {
            "a changed tool is absent from tools/list and its calls are refused until it is approved here"
        }
        Mode::Log => "a changed tool is still served; each change is an audit line and a metric",
        Mode::Off => "nothing is recorded or held",
    };
    format!(
        "<p>The gateway pins each tool's definition (name, title, description, input and output \
         schema, annotations) the first time a route lists it. A server that later changes a \
         definition could steer the model that reads it (\"tool poisoning\"); with \
         <code>[pinning] mode = \"{mode}\"</code>, {effect}. New tools: \
         <code>new_tools = \"{new_tools}\"</code>.</p>\
         <p class=\"muted\">Set in the configuration file: <code>[pinning]</code> with \
         <code>mode = \"hold\" | \"log\" | \"off\"</code> and \
         <code>new_tools = \"allow\" | \"hold\"</code>. The same list is \
         <code>pforte tools pending</code>; an approval is <code>pforte tools approve ROUTE TOOL</code> \
         (or <code>--all ROUTE</code>).</p>"
    )
}

/// A value of the diff as the CLI prints it: its JSON text, or `(absent)`.
fn side(value: Option<&str>) -> String {
    match value {
        Some(v) => format!("<code>{}</code>", escape(v)),
        None => "<span class=\"muted\">(absent)</span>".to_owned(),
    }
}

/// One tool's diff: per changed path its field, old and new value.
fn diff_html(changes: &[FieldDiff]) -> String {
    let mut out = String::new();
    for d in changes {
        for p in &d.paths {
            let at = if p.path.is_empty() {
                d.field.to_owned()
            } else {
                format!("{} {}", d.field, p.path)
            };
            out.push_str(&format!(
                "<div class=\"diff\"><p><strong>{}</strong></p><p><span class=\"bad\">old</span> {}</p>\
                 <p><span class=\"ok\">new</span> {}</p></div>",
                escape(&at),
                side(p.old.as_deref()),
                side(p.new.as_deref()),
            ));
        }
    }
    out
}

fn approve_form(csrf: &str, route: &str, tool: Option<&str>, label: &str) -> String {
    let (step, tool) = match tool {
        Some(t) => ("approve", hidden("tool", t)),
        None => ("approve-all", String::new()),
    };
    format!(
        "<form method=\"post\" action=\"/admin/tools\">{}{}{}{tool}{}</form>",
        csrf_field(csrf),
        hidden("step", step),
        hidden("route", route),
        button(Button::Primary, label, None),
    )
}

pub(crate) fn tool_changes_page(p: &ToolChangesPage) -> String {
    let mut body = format!(
        "<h1>Tool changes</h1>{}{}",
        alert(p.notice.as_deref(), p.error.as_deref()),
        explanation(p)
    );
    if !p.enabled {
        body.push_str(
            "<p class=\"notice\">Pinning is off: no definition is recorded, nothing is held.</p>",
        );
        return body;
    }
    if p.held.is_empty() {
        let pinned = if p.pinned.is_empty() {
            "No route has listed a tool yet.".to_owned()
        } else {
            let per: Vec<String> = p
                .pinned
                .iter()
                .map(|(r, n)| format!("{} {n}", escape(r)))
                .collect();
            format!("Tools pinned per route: {}.", per.join(", "))
        };
        body.push_str(&format!(
            "<p class=\"notice\" role=\"status\">No tool changes are waiting. {pinned}</p>"
        ));
        return body;
    }
    let mut routes: Vec<&str> = p.held.iter().map(|h| h.route.as_str()).collect();
    routes.dedup();
    for route in routes {
        let tools: Vec<&HeldTool> = p.held.iter().filter(|h| h.route == route).collect();
        body.push_str(&format!("<h2>Route {}</h2>", escape(route)));
        if tools.len() > 1 {
            body.push_str(&approve_form(
                &p.csrf,
                route,
                None,
                &format!("Approve all {} tools of {route}", tools.len()),
            ));
        }
        for h in tools {
            let what = if h.new {
                "new, not approved yet".to_owned()
            } else {
                let fields: Vec<&str> = h.changes.iter().map(|c| c.field).collect();
                format!("changed: {}", fields.join(", "))
            };
            body.push_str(&format!(
                "<div class=\"item\"><p><strong>{tool}</strong> \
                 <span class=\"warn\">{what}</span> <span class=\"muted\">seen {seen} UTC</span></p>\
                 {diff}{form}</div>",
                tool = escape(&h.tool),
                what = escape(&what),
                seen = escape(&h.seen),
                diff = diff_html(&h.changes),
                form = approve_form(&p.csrf, route, Some(&h.tool), "Approve"),
            ));
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pins::diff::diff;

    fn page(held: Vec<HeldTool>) -> ToolChangesPage {
        ToolChangesPage {
            pinning: Pinning::default(),
            enabled: true,
            held,
            pinned: vec![("plain".into(), 6)],
            csrf: "tok".into(),
            notice: None,
            error: None,
        }
    }

    #[test]
    fn a_held_tool_shows_its_diff_as_text_with_its_forms() {
        let old = r#"{"description":"Echoes.","name":"echo"}"#;
        let new = r#"{"description":"Echoes. <script>alert(1)</script>","name":"echo"}"#;
        let html = tool_changes_page(&page(vec![HeldTool {
            route: "plain".into(),
            tool: "echo\"><b>".into(),
            new: false,
            seen: "2026-12-05 10:00:00".into(),
            changes: diff(Some(old), new),
        }]));
        assert!(!html.contains("<script>"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("changed: description"), "{html}");
        assert!(html.contains("<code>&quot;Echoes.&quot;</code>"), "{html}");
        assert!(!html.contains("<b>"), "the tool's name is text: {html}");
        assert!(
            html.contains("name=\"tool\" value=\"echo&quot;&gt;&lt;b&gt;\""),
            "{html}"
        );
        assert!(html.contains("name=\"csrf\" value=\"tok\""), "{html}");
        assert!(!html.contains("approve-all"), "one tool: no approve all");
    }

    #[test]
    fn schema_paths_new_tools_and_approve_all() {
        let old = r#"{"inputSchema":{"properties":{"a":{"type":"string"}}},"name":"x"}"#;
        let new = r#"{"inputSchema":{"properties":{"a":{"type":"number"},"b":{}}},"name":"x"}"#;
        let tool = |name: &str, new_tool: bool| HeldTool {
            route: "plain".into(),
            tool: name.into(),
            new: new_tool,
            seen: "now".into(),
            changes: diff((!new_tool).then_some(old), new),
        };
        let html = tool_changes_page(&page(vec![tool("x", false), tool("y", true)]));
        assert!(html.contains("inputSchema /properties/a/type"), "{html}");
        assert!(html.contains("inputSchema /properties/b"), "{html}");
        assert!(html.contains("new, not approved yet"), "{html}");
        assert!(html.contains("Approve all 2 tools of plain"), "{html}");
        assert!(html.contains("(absent)"), "{html}");
    }

    #[test]
    fn the_empty_page_says_what_pinning_is_and_how_it_is_set() {
        let html = tool_changes_page(&page(Vec::new()));
        assert!(html.contains("No tool changes are waiting"), "{html}");
        assert!(html.contains("plain 6"), "{html}");
        assert!(html.contains("[pinning] mode = \"hold\""), "{html}");
        let off = tool_changes_page(&ToolChangesPage {
            enabled: false,
            pinning: Pinning {
                mode: Mode::Off,
                new_tools: NewTools::Allow,
            },
            ..page(Vec::new())
        });
        assert!(off.contains("Pinning is off"), "{off}");
    }
}
