//! The console's management pages: static tokens (create — the value shown once — and
//! revoke), OAuth grants (revoke), users and OAuth clients (listed). Every form POSTs with the
//! session's CSRF token. Pure rendering.

use super::pages::{alert, csrf_field, escape, table};
use pforte_page::{Button, button, hidden};

/// A static token as listed (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenRow {
    pub(crate) name: String,
    pub(crate) scopes: Vec<String>,
    /// Empty: every route.
    pub(crate) routes: Vec<String>,
    pub(crate) created: String,
    pub(crate) expires: Option<String>,
    /// When revoked, or `None` while active.
    pub(crate) revoked: Option<String>,
}

/// What the tokens page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokensPage {
    pub(crate) tokens: Vec<TokenRow>,
    /// A token just created: (name, value), shown this once.
    pub(crate) created: Option<(String, String)>,
    /// The configured scopes and routes, for the form.
    pub(crate) scopes: Vec<String>,
    pub(crate) routes: Vec<String>,
    pub(crate) csrf: String,
    pub(crate) notice: Option<String>,
    pub(crate) error: Option<String>,
}

fn pills(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        return format!("<span class=\"muted\">{}</span>", escape(empty));
    }
    items
        .iter()
        .map(|s| format!("<span class=\"pill\">{}</span>", escape(s)))
        .collect()
}

fn action_form(
    action: &str,
    csrf: &str,
    step: &str,
    key: &str,
    value: &str,
    label: &str,
) -> String {
    format!(
        "<form method=\"post\" action=\"{action}\">{}{}{}{}</form>",
        csrf_field(csrf),
        hidden("step", step),
        hidden(key, value),
        button(Button::Danger, label, None),
    )
}

pub(crate) fn tokens_page(p: &TokensPage) -> String {
    let created = match &p.created {
        Some((name, value)) => format!(
            "<div class=\"notice\"><strong>Token {} created.</strong> Copy it now: it is shown \
             this once and never again.<code class=\"secret\">{}</code></div>",
            escape(name),
            escape(value)
        ),
        None => String::new(),
    };
    let scopes: String = p
        .scopes
        .iter()
        .map(|s| {
            format!(
                "<label class=\"check\"><input type=\"checkbox\" name=\"scope\" value=\"{0}\" checked>{0}</label>",
                escape(s)
            )
        })
        .collect();
    let mut routes = "<option value=\"\">every route</option>".to_owned();
    for r in &p.routes {
        routes.push_str(&format!("<option value=\"{0}\">{0}</option>", escape(r)));
    }
    let form = format!(
        "<form class=\"filters\" method=\"post\" action=\"/admin/tokens\">{}{}\
         <div><label for=\"name\">Name</label><input id=\"name\" name=\"name\" type=\"text\" required maxlength=\"64\" \
         pattern=\"[A-Za-z0-9._-]+\" placeholder=\"e.g. ci\"></div>\
         <div><label for=\"route\">Route</label><select id=\"route\" name=\"route\">{routes}</select></div>\
         <div><label for=\"days\">Expires after (days)</label><input id=\"days\" name=\"days\" type=\"text\" inputmode=\"numeric\" placeholder=\"never\"></div>\
         <div><span class=\"muted\">Scopes</span>{scopes}</div>\
         <div>{}</div></form>",
        csrf_field(&p.csrf),
        hidden("step", "create"),
        button(Button::Primary, "Create token", None),
    );
    let rows: String = p
        .tokens
        .iter()
        .map(|t| {
            let state = match &t.revoked {
                Some(at) => format!("<span class=\"bad\">revoked</span> {}", escape(at)),
                None => action_form("/admin/tokens", &p.csrf, "revoke", "name", &t.name, "Revoke"),
            };
            format!(
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"nowrap\">{}</td><td class=\"nowrap\">{}</td><td>{state}</td></tr>",
                escape(&t.name),
                pills(&t.scopes, "none"),
                pills(&t.routes, "every route"),
                escape(&t.created),
                escape(t.expires.as_deref().unwrap_or("never")),
            )
        })
        .collect();
    format!(
        "<h1>Static tokens</h1>{}{created}<h2>New token</h2>{form}<h2>Tokens</h2>{}",
        alert(p.notice.as_deref(), p.error.as_deref()),
        table(
            &[
                "Name",
                "Scopes",
                "Routes",
                "Created (UTC)",
                "Expires (UTC)",
                ""
            ],
            &rows,
            "No static tokens."
        )
    )
}

/// An OAuth grant as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantRow {
    pub(crate) family_id: String,
    pub(crate) user: String,
    pub(crate) client: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) resource: String,
    pub(crate) created: String,
    pub(crate) last_used: String,
    pub(crate) how: String,
}

/// What the grants page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantsPage {
    pub(crate) grants: Vec<GrantRow>,
    pub(crate) csrf: String,
    pub(crate) notice: Option<String>,
    pub(crate) error: Option<String>,
}

pub(crate) fn grants_page(p: &GrantsPage) -> String {
    let rows: String = p
        .grants
        .iter()
        .map(|g| {
            format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td class=\"nowrap\">{}</td>\
                 <td class=\"nowrap\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&g.user),
                escape(&g.client),
                pills(&g.scopes, "none"),
                escape(&g.resource),
                escape(&g.created),
                escape(&g.last_used),
                escape(&g.how),
                action_form("/admin/grants", &p.csrf, "revoke", "grant", &g.family_id, "Revoke"),
            )
        })
        .collect();
    format!(
        "<h1>OAuth grants</h1>{}<p class=\"muted\">Active grants of every user. A revoked grant's \
         tokens are refused within a second.</p>{}",
        alert(p.notice.as_deref(), p.error.as_deref()),
        table(
            &[
                "User",
                "Client",
                "Scopes",
                "Resource",
                "Granted (UTC)",
                "Last use (UTC)",
                "How",
                ""
            ],
            &rows,
            "No active grants."
        )
    )
}

/// A user as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserRow {
    pub(crate) name: String,
    pub(crate) admin: bool,
    /// `local`, or the OpenID provider's name.
    pub(crate) source: String,
    pub(crate) created: String,
}

pub(crate) fn users_page(users: &[UserRow]) -> String {
    let rows: String = users
        .iter()
        .map(|u| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"nowrap\">{}</td></tr>",
                escape(&u.name),
                if u.admin {
                    "<span class=\"warn\">admin</span>"
                } else {
                    "user"
                },
                escape(&u.source),
                escape(&u.created)
            )
        })
        .collect();
    format!(
        "<h1>Users</h1><p class=\"muted\">Add users and change roles with <code>pforte user</code>; \
         an admin role from <code>[oauth.roles]</code> applies at sign-in.</p>{}",
        table(
            &[
                "User",
                "Role (local flag)",
                "Signs in with",
                "Created (UTC)"
            ],
            &rows,
            "No users."
        )
    )
}

/// A registered OAuth client as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) auth: String,
    pub(crate) redirects: Vec<String>,
    pub(crate) created: String,
    pub(crate) last_used: String,
}

pub(crate) fn clients_page(clients: &[ClientRow]) -> String {
    let rows: String = clients
        .iter()
        .map(|c| {
            let redirects: String = c
                .redirects
                .iter()
                .map(|r| format!("<div><code>{}</code></div>", escape(r)))
                .collect();
            format!(
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{redirects}</td><td class=\"nowrap\">{}</td><td class=\"nowrap\">{}</td></tr>",
                escape(&c.id),
                escape(&c.name),
                escape(&c.auth),
                escape(&c.created),
                escape(&c.last_used)
            )
        })
        .collect();
    format!(
        "<h1>OAuth clients</h1><p class=\"muted\">Registered clients (dynamic registration). \
         Clients identified by a metadata document URL are not stored and not listed.</p>{}",
        table(
            &[
                "Client id",
                "Name",
                "Authentication",
                "Redirect URIs",
                "Registered (UTC)",
                "Last use (UTC)"
            ],
            &rows,
            "No registered clients."
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_token_is_shown_once_and_active_ones_have_a_revoke_form() {
        let page = TokensPage {
            tokens: vec![
                TokenRow {
                    name: "ci".into(),
                    scopes: vec!["mcp:read".into()],
                    routes: vec![],
                    created: "t".into(),
                    expires: None,
                    revoked: None,
                },
                TokenRow {
                    name: "old".into(),
                    scopes: vec![],
                    routes: vec!["notes".into()],
                    created: "t".into(),
                    expires: None,
                    revoked: Some("t2".into()),
                },
            ],
            created: Some(("ci".into(), "pft_secret".into())),
            scopes: vec!["mcp:read".into(), "mcp:write".into()],
            routes: vec!["mcp".into()],
            csrf: "c<".into(),
            notice: None,
            error: None,
        };
        let html = tokens_page(&page);
        assert!(html.contains("pft_secret") && html.contains("shown this once"));
        assert_eq!(
            html.matches("value=\"revoke\"").count(),
            1,
            "only the active token"
        );
        assert!(
            html.contains("value=\"c&lt;\""),
            "CSRF escaped in every form"
        );
        assert!(!html.contains("value=\"c<\""));
        assert!(html.contains("every route") && html.contains("revoked"));
        let again = tokens_page(&TokensPage {
            created: None,
            ..page
        });
        assert!(!again.contains("pft_secret"));
    }

    #[test]
    fn grants_have_revoke_forms_and_lists_escape() {
        let html = grants_page(&GrantsPage {
            grants: vec![GrantRow {
                family_id: "f1".into(),
                user: "<b>".into(),
                client: "c".into(),
                scopes: vec![],
                resource: "r".into(),
                created: "t".into(),
                last_used: "t".into(),
                how: "consent".into(),
            }],
            csrf: "x".into(),
            notice: Some("Revoked.".into()),
            error: None,
        });
        assert!(html.contains("name=\"grant\" value=\"f1\"") && html.contains("&lt;b&gt;"));
        assert!(html.contains("class=\"notice\""));
        let users = users_page(&[UserRow {
            name: "root".into(),
            admin: true,
            source: "local".into(),
            created: "t".into(),
        }]);
        assert!(users.contains(">admin<"));
        assert!(clients_page(&[]).contains("No registered clients."));
    }
}
