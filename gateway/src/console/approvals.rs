//! The console's approval pages (`/admin/approvals`, `/admin/approvals/ID`): the calls held for
//! a person's approval, newest first, and one call whole — who, which client, route and tool,
//! the arguments as indented JSON, the rule and its message, when it expires — with Approve and
//! Reject (CSRF-checked forms). Pure; every text from elsewhere escaped.

use pforte_page::{Button, actions, button, hidden};

use super::pages::{alert, csrf_field, escape, table};

/// One approval as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalRow {
    pub(crate) id: String,
    pub(crate) who: String,
    pub(crate) client: String,
    pub(crate) route: String,
    pub(crate) tool: String,
    pub(crate) rule: String,
    /// `pending`, `approved`, `rejected`, `used`, `closed` or `expired`.
    pub(crate) state: &'static str,
    pub(crate) created: String,
    pub(crate) expires: String,
}

/// The list page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalsPage {
    pub(crate) rows: Vec<ApprovalRow>,
    pub(crate) notice: Option<String>,
    pub(crate) error: Option<String>,
}

/// One approval's page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalDetail {
    pub(crate) row: ApprovalRow,
    /// The person key (`oauth:NAME`, `static:TOKEN`).
    pub(crate) person: String,
    /// The arguments, indented JSON.
    pub(crate) arguments: String,
    pub(crate) message: String,
    pub(crate) digest: String,
    /// Who decided, and when (UTC).
    pub(crate) decided: Option<(String, String)>,
    pub(crate) csrf: String,
    pub(crate) notice: Option<String>,
    pub(crate) error: Option<String>,
}

fn state_pill(state: &str) -> String {
    let class = match state {
        "pending" => "warn",
        "approved" | "used" => "ok",
        _ => "muted",
    };
    format!("<span class=\"{class}\">{}</span>", escape(state))
}

pub(crate) fn approvals_page(p: &ApprovalsPage) -> String {
    let rows: String = p
        .rows
        .iter()
        .map(|r| {
            format!(
                "<tr><td>{}</td><td><a href=\"/admin/approvals/{id}\"><code>{}</code></a></td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"nowrap\">{}</td>\
                 <td class=\"nowrap\">{}</td><td><a href=\"/admin/approvals/{id}\">Open</a></td></tr>",
                state_pill(r.state),
                escape(&r.tool),
                escape(&r.who),
                escape(&r.client),
                escape(&r.route),
                escape(&r.rule),
                escape(&r.created),
                escape(&r.expires),
                id = escape(&r.id),
            )
        })
        .collect();
    format!(
        "<h1>Approvals</h1>{}<p class=\"muted\">Calls a rule with <code>effect = \"approve\"</code> \
         held for a person. Open one to see its arguments and approve or reject it; an approved \
         call passes once, when its caller calls again with the same arguments.</p>{}",
        alert(p.notice.as_deref(), p.error.as_deref()),
        table(
            &[
                "State",
                "Tool",
                "Who",
                "Client",
                "Route",
                "Rule",
                "Asked (UTC)",
                "Expires (UTC)",
                ""
            ],
            &rows,
            "No calls wait for approval."
        )
    )
}

pub(crate) fn approval_page(p: &ApprovalDetail) -> String {
    let r = &p.row;
    let decided = p
        .decided
        .as_ref()
        .map(|(by, when)| {
            format!(
                "<dt>Decided by</dt><dd>{} at {} UTC</dd>",
                escape(by),
                escape(when)
            )
        })
        .unwrap_or_default();
    let form = if r.state == "pending" {
        format!(
            "<form method=\"post\" action=\"/admin/approvals/{id}\">{csrf}{id_field}{buttons}</form>",
            id = escape(&r.id),
            csrf = csrf_field(&p.csrf),
            id_field = hidden("approval", &r.id),
            buttons = actions(&format!(
                "{}{}",
                button(Button::Primary, "Approve", Some(("step", "approve"))),
                button(Button::Danger, "Reject", Some(("step", "reject"))),
            )),
        )
    } else {
        "<p class=\"muted\">This call is no longer waiting for a decision.</p>".to_owned()
    };
    format!(
        "<h1>Approve a call?</h1>{alert}<p>{message}</p><dl>\
         <dt>State</dt><dd>{state}</dd>\
         <dt>Who</dt><dd>{who} <span class=\"muted\">({person})</span></dd>\
         <dt>Client</dt><dd>{client}</dd>\
         <dt>Route</dt><dd><code>{route}</code></dd>\
         <dt>Tool</dt><dd><code>{tool}</code></dd>\
         <dt>Rule</dt><dd><code>{rule}</code></dd>\
         <dt>Asked</dt><dd>{created} UTC</dd>\
         <dt>Expires</dt><dd>{expires} UTC</dd>{decided}\
         <dt>SHA-256</dt><dd><code>{digest}</code></dd></dl>\
         <h2>Arguments</h2><pre><code>{arguments}</code></pre>{form}\
         <p class=\"muted\"><a href=\"/admin/approvals\">All approvals</a></p>",
        alert = alert(p.notice.as_deref(), p.error.as_deref()),
        message = escape(&p.message),
        state = state_pill(r.state),
        who = escape(&r.who),
        person = escape(&p.person),
        client = escape(&r.client),
        route = escape(&r.route),
        tool = escape(&r.tool),
        rule = escape(&r.rule),
        created = escape(&r.created),
        expires = escape(&r.expires),
        digest = escape(&p.digest),
        arguments = escape(&p.arguments),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &'static str) -> ApprovalRow {
        ApprovalRow {
            id: "apr_1".into(),
            who: "ann".into(),
            client: "<Claude>".into(),
            route: "files".into(),
            tool: "delete".into(),
            rule: "approve-deletes".into(),
            state,
            created: "2026-12-05 11:00:00".into(),
            expires: "2026-12-05 11:15:00".into(),
        }
    }

    #[test]
    fn a_pending_call_shows_its_arguments_escaped_and_both_buttons() {
        let p = ApprovalDetail {
            row: row("pending"),
            person: "oauth:ann".into(),
            arguments: "{\n  \"path\": \"<script>\"\n}".into(),
            message: "Deletes need a second person.".into(),
            digest: "ab".into(),
            decided: None,
            csrf: "tok".into(),
            notice: None,
            error: None,
        };
        let html = approval_page(&p);
        assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"));
        assert!(html.contains("&lt;Claude&gt;"));
        assert!(html.contains("value=\"approve\"") && html.contains("value=\"reject\""));
        assert!(html.contains("name=\"csrf\""));
        let done = approval_page(&ApprovalDetail {
            row: row("used"),
            decided: Some(("root".into(), "2026-12-05 11:01:00".into())),
            ..p
        });
        assert!(!done.contains("value=\"approve\"") && done.contains("root"));
    }

    #[test]
    fn the_list_links_each_approval() {
        let html = approvals_page(&ApprovalsPage {
            rows: vec![row("pending")],
            notice: None,
            error: None,
        });
        assert!(html.contains("href=\"/admin/approvals/apr_1\""));
        let empty = approvals_page(&ApprovalsPage {
            rows: vec![],
            notice: None,
            error: None,
        });
        assert!(empty.contains("No calls wait for approval."));
    }
}
