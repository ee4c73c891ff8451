//! The connect pages' HTML: the form that takes a user's secret for a `header` or `env` route,
//! the page a finished connection returns to, and `/connections` (a signed-in user's upstream
//! credentials with their state, connect and disconnect). Cards of the one page skeleton
//! (`pforte-page`), under the one CSP (no script); everything someone else wrote is escaped.
//! Pure.

use pforte_page::{Button, actions, alerts as alert, button, card_page, escape, hidden, table};

/// A page outside the console, as the sign-in pages look: one card in the middle.
fn frame(title: &str, body: &str) -> String {
    framed(title, body, false)
}

/// `wide` for the table of `/connections`.
fn framed(title: &str, body: &str, wide: bool) -> String {
    card_page(
        title,
        "Pforte",
        wide,
        &format!("<h1>{}</h1>{body}", escape(title)),
    )
}

/// The form a user enters their secret(s) in: one password field per name, the single-use
/// `ticket` that binds the POST to the link that opened the page. One field is labelled with
/// the route's `label` (what the person knows it as, e.g. "Search API key"), not the header's
/// name; several (an `env` route's variables) each by its variable.
pub(crate) fn secret_form(
    title: &str,
    label: &str,
    fields: &[String],
    action: &str,
    ticket: &str,
) -> String {
    let inputs: String = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let shown = if fields.len() == 1 { label } else { f.as_str() };
            format!(
                "<label for=\"f{i}\">{l}</label><input id=\"f{i}\" type=\"password\" \
                 name=\"v.{n}\" required autocomplete=\"off\" spellcheck=\"false\">",
                l = escape(shown),
                n = escape(f)
            )
        })
        .collect();
    frame(
        &format!("Connect {title}"),
        &format!(
            "<p class=\"muted\">{l} for {t}. Pforte keeps it sealed and sends it only to {t}, \
             only for your calls.</p><form method=\"post\" action=\"{a}\">{k}{inputs}{b}</form>",
            l = escape(label),
            t = escape(title),
            a = escape(action),
            k = hidden("ticket", ticket),
            b = actions(&button(Button::Primary, "Connect", None)),
        ),
    )
}

/// Where a finished connection lands.
pub(crate) fn connected(title: &str) -> String {
    frame(
        &format!("Connected to {title}"),
        &format!(
            "{n}<p><a href=\"/connections\">Your connected services</a></p>",
            n = pforte_page::notice(&format!(
                "Your {title} account is connected. Go back to your MCP client and try again; \
                 you can close this tab."
            ))
        ),
    )
}

/// A connect step that failed, with what to do.
pub(crate) fn failed(title: &str, message: &str) -> String {
    frame(
        "Not connected",
        &format!(
            "{m}<p>Ask your MCP client to call {t} again for a fresh link, or connect from \
             <a href=\"/connections\">your connected services</a>.</p>",
            m = pforte_page::error(message),
            t = escape(title),
        ),
    )
}

/// One row of `/connections`.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) route: String,
    pub(crate) title: String,
    /// `oauth`, `header` or `env`.
    pub(crate) kind: &'static str,
    /// `connected`, `needs reconnect` or `not connected`.
    pub(crate) state: &'static str,
    pub(crate) connected: Option<String>,
    pub(crate) expires: Option<String>,
    pub(crate) refreshed: Option<String>,
}

/// The table of `rows`: state, dates, connect and disconnect (forms carry `csrf`).
pub(crate) fn rows_table(rows: &[Row], csrf: &str) -> String {
    let dash = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_owned(), escape);
    let body: String = rows
        .iter()
        .map(|r| {
            let connect = if r.state == "connected" { "Reconnect" } else { "Connect" };
            let disconnect = if r.state == "not connected" {
                String::new()
            } else {
                format!(
                    "<form method=\"post\" action=\"/connections\" class=\"inline\">{c}{n}{b}</form>",
                    c = pforte_page::csrf_field(csrf),
                    n = hidden("route", &r.route),
                    b = button(Button::Plain, "Disconnect", Some(("action", "disconnect"))),
                )
            };
            format!(
                "<tr><td>{t}</td><td>{k}</td><td>{s}</td><td>{c}</td><td>{e}</td><td>{f}</td>\
                 <td><a href=\"/connect/{n}\">{connect}</a> {disconnect}</td></tr>",
                t = escape(&r.title),
                k = r.kind,
                s = r.state,
                c = dash(&r.connected),
                e = dash(&r.expires),
                f = dash(&r.refreshed),
                n = escape(&r.route),
            )
        })
        .collect();
    table(
        &[
            "Service",
            "Kind",
            "State",
            "Connected",
            "Expires",
            "Last refresh",
            "Action",
        ],
        &body,
        "No route of this gateway keeps a credential per user.",
    )
}

/// `/account`'s section: the same table under a heading.
pub(crate) fn account_section(rows: &[Row], csrf: &str) -> String {
    format!(
        "<h2 class=\"section\">Connected services</h2>{}",
        rows_table(rows, csrf)
    )
}

/// `/connections`: every route that keeps a credential per user, with this user's state.
pub(crate) fn connections(
    user: &str,
    rows: &[Row],
    csrf: &str,
    notice: Option<&str>,
    error: Option<&str>,
) -> String {
    framed(
        "Connected services",
        &format!(
            "<p>Signed in as {u}. <a href=\"/account\">Your account</a></p>{a}{t}",
            u = escape(user),
            a = alert(notice, error),
            t = rows_table(rows, csrf),
        ),
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_users_wrote_is_escaped() {
        let form = secret_form("<b>", "Key", &["API_KEY".into()], "/connect/x", "t\"1");
        assert!(form.contains("&lt;b&gt;"));
        assert!(form.contains("value=\"t&quot;1\""));
        assert!(form.contains("name=\"v.API_KEY\""));
        // One field: labelled as the route's label says, not by its header or variable.
        assert!(form.contains(">Key</label>"), "{form}");
        assert!(!form.contains(">API_KEY</label>"), "{form}");
        let two = secret_form("T", "Keys", &["A".into(), "B".into()], "/c", "t");
        assert!(
            two.contains(">A</label>") && two.contains(">B</label>"),
            "{two}"
        );
        let rows = [Row {
            route: "gh".into(),
            title: "Git<Hub>".into(),
            kind: "oauth",
            state: "needs reconnect",
            connected: Some("2026-12-04 05:00:00".into()),
            expires: None,
            refreshed: None,
        }];
        let page = connections("alice<", &rows, "c", None, None);
        assert!(page.contains("Git&lt;Hub&gt;") && page.contains("alice&lt;"));
        assert!(page.contains("needs reconnect") && page.contains("Disconnect"));
        assert!(page.contains("href=\"/connect/gh\""));
        // On a phone each cell names its column; the action cell is the last.
        assert!(page.contains("<table class=\"stack\">"), "{page}");
        assert!(
            page.contains("<td data-label=\"Action\"><a href=\"/connect/gh\""),
            "{page}"
        );
    }
}
