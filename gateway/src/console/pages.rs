//! The console's HTML: the page frame (navigation, who is signed in, sign-out), the overview,
//! a route's page and the audit log. Pure functions from the data shown to a string; every
//! piece of text from elsewhere is escaped. The skeleton, stylesheet, CSP, tables and form
//! pieces are `pforte-page`'s, shared with the sign-in pages; no scripts.

use super::audit_view::{AuditFilter, AuditRow};
use super::stats::RecentError;

use pforte_page::{Button, button, card_page, console_page, hidden};
pub(crate) use pforte_page::{alerts as alert, csrf_field, escape, table};

/// The console's sections, for the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Audit,
    Tokens,
    Grants,
    Users,
    Clients,
    Tools,
    Approvals,
}

const SECTIONS: [(Section, &str, &str); 8] = [
    (Section::Overview, "/admin", "Overview"),
    (Section::Audit, "/admin/audit", "Audit log"),
    (Section::Tokens, "/admin/tokens", "Tokens"),
    (Section::Grants, "/admin/grants", "Grants"),
    (Section::Users, "/admin/users", "Users"),
    (Section::Clients, "/admin/clients", "OAuth clients"),
    (Section::Tools, "/admin/tools", "Tool changes"),
    (Section::Approvals, "/admin/approvals", "Approvals"),
];

/// Who is looking, for the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    pub(crate) user: &'a str,
    pub(crate) csrf: &'a str,
    pub(crate) section: Option<Section>,
}

/// A whole page: head, header with navigation and sign-out, `body` in `main`.
pub(crate) fn document(title: &str, frame: &Frame<'_>, body: &str) -> String {
    let nav: String = SECTIONS
        .iter()
        .map(|(s, href, name)| {
            let on = if frame.section == Some(*s) {
                " class=\"on\" aria-current=\"page\""
            } else {
                ""
            };
            format!("<a href=\"{href}\"{on}>{name}</a>")
        })
        .collect();
    let header = format!(
        "<header><span class=\"brand\">Pforte console</span><nav>{nav}</nav>\
         <span class=\"who\">{u} <a href=\"/account\">Account</a>\
         <form method=\"post\" action=\"/account\">{csrf}{step}{out}</form></span></header>",
        u = escape(frame.user),
        csrf = csrf_field(frame.csrf),
        step = hidden("step", "logout"),
        out = button(Button::Plain, "Sign out", None),
    );
    console_page(title, &header, body)
}

/// A message page without the frame (refusals: not an admin, a bad form, the store down): a
/// card like the sign-in pages.
pub(crate) fn message_page(title: &str, message: &str) -> String {
    card_page(
        title,
        "Pforte",
        false,
        &format!(
            "<h1>{t}</h1><p>{m}</p><p class=\"muted\"><a href=\"/account\">Your account</a> · \
             <a href=\"/admin\">Console</a></p>",
            t = escape(title),
            m = escape(message),
        ),
    )
}

/// A route's health as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Health {
    Up,
    Down,
    /// Some instances of a balanced route are down: (up, all).
    Partly(usize, usize),
}

impl Health {
    fn html(&self) -> String {
        match self {
            Self::Up => "<span class=\"ok\">up</span>".into(),
            Self::Down => "<span class=\"bad\">down</span>".into(),
            Self::Partly(up, all) => format!("<span class=\"warn\">{up} of {all} up</span>"),
        }
    }
}

/// One route as the overview lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RouteRow {
    pub(crate) name: String,
    pub(crate) title: Option<String>,
    /// The public path, `/mcp` or `/NAME/mcp`.
    pub(crate) path: String,
    /// What is behind it: `http 127.0.0.1:8080`, `unix /run/x.sock`, `command: cmd …`.
    pub(crate) upstream: String,
    pub(crate) health: Health,
    /// A balanced route's instances: (URL, up).
    pub(crate) instances: Vec<(String, bool)>,
    /// Tools in the catalog.
    pub(crate) tools: usize,
    /// A command route's live children (sessions and pool), when known.
    pub(crate) children: Option<usize>,
}

/// What the overview shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Overview {
    pub(crate) version: String,
    pub(crate) uptime: String,
    pub(crate) routes: Vec<RouteRow>,
    /// Live MCP sessions (`None`: kept in redis, shared by every gateway).
    pub(crate) sessions: Option<usize>,
    pub(crate) requests_hour: u64,
    pub(crate) errors_hour: u64,
    pub(crate) refusals_hour: u64,
    /// The charts, SVG each.
    pub(crate) charts: Vec<String>,
}

fn card(value: &str, key: &str) -> String {
    format!(
        "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
        escape(value),
        escape(key)
    )
}

fn route_href(name: &str) -> String {
    format!("/admin/routes/{}", escape(name))
}

pub(crate) fn overview(o: &Overview) -> String {
    let cards = [
        card(&o.version, "version"),
        card(&o.uptime, "uptime"),
        card(
            &o.sessions
                .map_or_else(|| "in redis".to_owned(), |n| n.to_string()),
            "live MCP sessions",
        ),
        card(&o.requests_hour.to_string(), "requests, last hour"),
        card(&o.errors_hour.to_string(), "5xx, last hour"),
        card(&o.refusals_hour.to_string(), "refused, last hour"),
    ]
    .concat();
    let rows: String = o
        .routes
        .iter()
        .map(|r| {
            let instances: String = r
                .instances
                .iter()
                .map(|(url, up)| {
                    format!(
                        "<div><code>{}</code> {}</div>",
                        escape(url),
                        if *up { Health::Up.html() } else { Health::Down.html() }
                    )
                })
                .collect();
            format!(
                "<tr><td><a href=\"{href}\">{name}</a>{title}</td><td><code>{path}</code></td>\
                 <td>{health}</td><td><code>{up}</code>{instances}</td><td>{tools}</td><td>{children}</td></tr>",
                href = route_href(&r.name),
                name = escape(&r.name),
                title = r
                    .title
                    .as_deref()
                    .map(|t| format!("<div class=\"muted\">{}</div>", escape(t)))
                    .unwrap_or_default(),
                path = escape(&r.path),
                health = r.health.html(),
                up = escape(&r.upstream),
                tools = r.tools,
                children = r.children.map_or_else(|| "–".to_owned(), |n| n.to_string()),
            )
        })
        .collect();
    let charts: String = o
        .charts
        .iter()
        .map(|svg| format!("<div class=\"card\">{svg}</div>"))
        .collect();
    format!(
        "<h1>Overview</h1><div class=\"cards\">{cards}</div>\
         <h2>Last hour, per minute</h2><div class=\"charts\">{charts}</div>\
         <h2>Routes</h2>{}",
        table(
            &[
                "Route",
                "Path",
                "Health",
                "Upstream",
                "Tools",
                "stdio children"
            ],
            &rows,
            "No routes."
        )
    )
}

/// A tool of a route's catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolRow {
    pub(crate) name: String,
    /// `readOnlyHint` (`None`: only in the config, not in the catalog).
    pub(crate) read_only: Option<bool>,
    /// Every scope a call needs (the baseline included).
    pub(crate) scopes: Vec<String>,
    /// The operator's rule in words: denied, or who may call it.
    pub(crate) rule: String,
}

/// What a route's page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RouteDetail {
    pub(crate) route: RouteRow,
    pub(crate) tools: Vec<ToolRow>,
    pub(crate) errors: Vec<(String, RecentError)>,
    /// The catalog learns through a connected person's credential and has nobody's yet.
    pub(crate) awaits_person: bool,
}

/// What a route's page says when its catalog waits for someone to connect.
pub(crate) const AWAITS_PERSON: &str = "Nobody has connected to this route's service yet, or \
     the service refused the connected people's credentials: the gateway learns its tools \
     through a connected person's credential. Until then a tool needs the write scope unless a \
     [tools] rule says otherwise.";

pub(crate) fn route_page(d: &RouteDetail) -> String {
    let r = &d.route;
    let tools: String = d
        .tools
        .iter()
        .map(|t| {
            let pills: String = t
                .scopes
                .iter()
                .map(|s| format!("<span class=\"pill\">{}</span>", escape(s)))
                .collect();
            format!(
                "<tr><td><code>{}</code></td><td>{}</td><td>{pills}</td><td>{}</td></tr>",
                escape(&t.name),
                match t.read_only {
                    Some(true) => "reads",
                    Some(false) => "writes",
                    None => "not in the catalog",
                },
                escape(&t.rule)
            )
        })
        .collect();
    let errors: String = d
        .errors
        .iter()
        .map(|(when, e)| {
            format!(
                "<tr><td class=\"nowrap\">{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                escape(when),
                e.status,
                escape(&e.what),
                escape(&e.request_id)
            )
        })
        .collect();
    let instances: String = r
        .instances
        .iter()
        .map(|(url, up)| {
            format!(
                "<tr><td><code>{}</code></td><td>{}</td></tr>",
                escape(url),
                if *up {
                    Health::Up.html()
                } else {
                    Health::Down.html()
                }
            )
        })
        .collect();
    let instances = if instances.is_empty() {
        String::new()
    } else {
        format!(
            "<h2>Instances</h2>{}",
            table(&["URL", "Health"], &instances, "")
        )
    };
    let health = format!(
        "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">health</div></div>",
        r.health.html()
    );
    format!(
        "<h1>Route {name}</h1><p class=\"muted\">{title}<code>{path}</code> → <code>{up}</code></p>\
         <div class=\"cards\">{health}{tools_n}{children}</div>{instances}\
         <h2>Tools in the catalog</h2>{awaits}{tools}\
         <h2>Recent errors</h2>{errors}\
         <p><a href=\"/admin/audit?route={name}\">Audit log of this route</a></p>",
        name = escape(&r.name),
        title = r
            .title
            .as_deref()
            .map(|t| format!("{} · ", escape(t)))
            .unwrap_or_default(),
        path = escape(&r.path),
        up = escape(&r.upstream),
        tools_n = card(&r.tools.to_string(), "tools"),
        awaits = if d.awaits_person {
            format!("<p class=\"warn\">{}</p>", escape(AWAITS_PERSON))
        } else {
            String::new()
        },
        children = r
            .children
            .map(|n| card(&n.to_string(), "stdio children"))
            .unwrap_or_default(),
        tools = table(
            &["Tool", "Kind", "Scopes a call needs", "Rule"],
            &tools,
            "The catalog is empty (the upstream listed no tools, or has not answered yet)."
        ),
        errors = table(
            &["Time (UTC)", "Status", "What", "Request id"],
            &errors,
            "No errors since the gateway started."
        ),
    )
}

/// What the audit page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditPage {
    pub(crate) filter: AuditFilter,
    pub(crate) rows: Vec<AuditRow>,
    pub(crate) more: bool,
    /// Route names for the filter's list.
    pub(crate) routes: Vec<String>,
    /// Why there is nothing to read (the log goes to stdout, is off, or unreadable).
    pub(crate) unavailable: Option<String>,
}

fn text_input(id: &str, label: &str, value: &str, placeholder: &str) -> String {
    format!(
        "<div><label for=\"{id}\">{label}</label><input id=\"{id}\" name=\"{id}\" type=\"text\" \
         value=\"{}\" placeholder=\"{}\"></div>",
        escape(value),
        escape(placeholder)
    )
}

fn select(id: &str, label: &str, value: &str, options: &[(&str, &str)]) -> String {
    let opts: String = options
        .iter()
        .map(|(v, text)| {
            format!(
                "<option value=\"{}\"{}>{}</option>",
                escape(v),
                if *v == value { " selected" } else { "" },
                escape(text)
            )
        })
        .collect();
    format!(
        "<div><label for=\"{id}\">{label}</label><select id=\"{id}\" name=\"{id}\">{opts}</select></div>"
    )
}

pub(crate) fn audit_page(p: &AuditPage) -> String {
    let f = &p.filter;
    let mut routes: Vec<(&str, &str)> = vec![("", "any")];
    routes.extend(p.routes.iter().map(|r| (r.as_str(), r.as_str())));
    let form = format!(
        "<form class=\"filters\" method=\"get\" action=\"/admin/audit\">{}{}{}{}{}{}\
         <div><button class=\"primary\" type=\"submit\">Filter</button> <a href=\"/admin/audit\">Clear</a></div></form>",
        text_input(
            "principal",
            "Principal",
            &f.principal,
            "user, client or token"
        ),
        select("route", "Route", &f.route, &routes),
        text_input("tool", "Tool / name", &f.tool, "e.g. werkbaum_read"),
        select(
            "decision",
            "Decision",
            &f.decision,
            &[
                ("", "any"),
                ("allowed", "allowed"),
                ("denied", "denied"),
                ("other", "other (sign-ins, console)")
            ]
        ),
        text_input("from", "From (UTC)", &f.from, "2026-12-03T18:00"),
        text_input("to", "To (UTC)", &f.to, "2026-12-03T19:00"),
    );
    if let Some(why) = &p.unavailable {
        return format!(
            "<h1>Audit log</h1>{form}<p class=\"muted\">{}</p>",
            escape(why)
        );
    }
    let rows: String = p
        .rows
        .iter()
        .map(|r| {
            let decision = match r.decision.as_str() {
                "allowed" | "success" | "done" | "revoked" | "issued" | "approved" => {
                    format!("<span class=\"ok\">{}</span>", escape(&r.decision))
                }
                "" => String::new(),
                d => format!("<span class=\"bad\">{}</span>", escape(d)),
            };
            format!(
                "<tr><td class=\"nowrap\">{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td>\
                 <td>{decision}</td><td>{}</td><td>{}</td></tr>",
                escape(&r.time.get(..19).unwrap_or(&r.time).replace('T', " ")),
                escape(&r.who),
                escape(&r.route),
                escape(&r.what),
                escape(&r.name),
                escape(&r.reason),
                escape(&r.status),
            )
        })
        .collect();
    let mut pager = String::new();
    if f.page > 1 {
        pager.push_str(&format!(
            "<a href=\"/admin/audit?{}\">← Newer</a>",
            escape(&f.query(f.page - 1))
        ));
    }
    pager.push_str(&format!("<span class=\"muted\">Page {}</span>", f.page));
    if p.more {
        pager.push_str(&format!(
            "<a href=\"/admin/audit?{}\">Older →</a>",
            escape(&f.query(f.page + 1))
        ));
    }
    format!(
        "<h1>Audit log</h1>{form}{}<div class=\"pager\">{pager}</div>",
        table(
            &[
                "Time (UTC)",
                "Who",
                "Route",
                "What",
                "Name",
                "Decision",
                "Reason",
                "Status / detail"
            ],
            &rows,
            "No audit line matches."
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Frame<'static> {
        Frame {
            user: "root<x>",
            csrf: "tok",
            section: Some(Section::Audit),
        }
    }

    #[test]
    fn frame_escapes_and_marks_the_section_and_carries_csrf() {
        let html = document("T", &frame(), "<p>b</p>");
        assert!(html.contains("root&lt;x&gt;"));
        assert!(html.contains("<a href=\"/admin/audit\" class=\"on\""));
        assert!(html.contains("name=\"csrf\" value=\"tok\""));
        assert!(!html.contains("<script"));
        assert!(html.contains("<title>T · Pforte console</title>"), "{html}");
        assert!(html.contains(pforte_page::STYLESHEET));
    }

    #[test]
    fn overview_lists_routes_with_health_and_instances() {
        let o = Overview {
            version: "0.1.0".into(),
            uptime: "5 min".into(),
            routes: vec![RouteRow {
                name: "notes".into(),
                title: Some("Team <notes>".into()),
                path: "/notes/mcp".into(),
                upstream: "2 instances".into(),
                health: Health::Partly(1, 2),
                instances: vec![("http://a".into(), true), ("http://b".into(), false)],
                tools: 3,
                children: None,
            }],
            sessions: Some(2),
            requests_hour: 10,
            errors_hour: 1,
            refusals_hour: 2,
            charts: vec!["<svg></svg>".into()],
        };
        let html = overview(&o);
        assert!(html.contains("href=\"/admin/routes/notes\""));
        assert!(html.contains("Team &lt;notes&gt;"));
        assert!(html.contains("1 of 2 up"));
        assert!(html.contains("<svg></svg>"));
        assert!(html.contains("<span class=\"bad\">down</span>"));
    }

    #[test]
    fn audit_page_keeps_the_filter_in_the_form_and_pager() {
        let filter = AuditFilter {
            route: "notes".into(),
            decision: "denied".into(),
            page: 2,
            ..AuditFilter::default()
        };
        let html = audit_page(&AuditPage {
            filter,
            rows: vec![],
            more: true,
            routes: vec!["mcp".into(), "notes".into()],
            unavailable: None,
        });
        assert!(html.contains("<option value=\"notes\" selected>"));
        assert!(html.contains("<option value=\"denied\" selected>"));
        assert!(html.contains("page=1") && html.contains("page=3"));
        assert!(html.contains("No audit line matches."));
    }
}
