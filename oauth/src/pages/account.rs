//! The HTML of `/account`: a person's connected apps (grants) with a revoke button each, the
//! local password form and sign-out; an admin sees every user's grants with a filter. Plain
//! forms (POST with a CSRF token), no scripts; one column that fits a phone.

use pforte_page::{Button, actions, button, card_page, escape, hidden};

/// One grant as the account page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GrantRow {
    pub family_id: String,
    pub username: String,
    pub client_name: String,
    pub client_id: String,
    pub redirect_host: String,
    pub scopes: Vec<String>,
    /// The route's title (or name) and its URL.
    pub route: String,
    pub resource: String,
    /// Dates as `YYYY-MM-DD HH:MM UTC`.
    pub first_use: String,
    pub last_use: String,
    /// "consent" or "enterprise (ISSUER)".
    pub how: String,
}

/// What the account page shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccountView {
    pub deployment: String,
    pub username: String,
    pub admin: bool,
    /// Showing every user's grants (admins), filtered by `filter_user` / `filter_client`.
    pub all_users: bool,
    pub filter_user: String,
    pub filter_client: String,
    pub grants: Vec<GrantRow>,
    /// Whether the user has a local password (enterprise-created users may not yet).
    pub has_password: bool,
    /// The OpenID provider the user signs in with (then no local password can be set).
    pub provider: Option<String>,
    pub csrf: String,
    pub notice: Option<String>,
    pub error: Option<String>,
    /// A section the embedding program adds (the gateway: connected upstream services), HTML
    /// it escaped itself.
    pub section: Option<String>,
}

/// The sign-in form of `/account`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccountLoginView {
    pub deployment: String,
    pub csrf: String,
    pub username: Option<String>,
    pub error: Option<String>,
    /// The OpenID providers' names (a "Sign in with NAME" button each).
    pub providers: Vec<String>,
    /// Their origins (allowed as CSP form-action targets: the buttons redirect there).
    pub provider_origins: Vec<String>,
    /// Whether the username and password form is shown (`[oauth.login] local_passwords`).
    pub local_passwords: bool,
    /// Where a password sign-in continues (`/admin` for the operator console), else `/account`.
    pub next: Option<&'static str>,
}

/// The hidden fields of every `/account` form: the CSRF token and the step.
fn csrf_field(csrf: &str, step: &str) -> String {
    format!("{}{}", pforte_page::csrf_field(csrf), hidden("step", step))
}

/// The sign-in form that leads to the account page.
pub(crate) fn login(v: &AccountLoginView) -> String {
    let buttons: String = v
        .providers
        .iter()
        .map(|name| {
            format!(
                "<form method=\"post\" action=\"/account\">{}{}</form>",
                csrf_field(&v.csrf, "oidc"),
                actions(&button(
                    Button::Plain,
                    &format!("Sign in with {name}"),
                    Some(("provider", name))
                )),
            )
        })
        .collect();
    let passwords = if v.local_passwords {
        let or = if v.providers.is_empty() {
            ""
        } else {
            "<p class=\"muted\">or with your password:</p>"
        };
        format!("{or}{}", password_form(v))
    } else {
        String::new()
    };
    let body = format!(
        "<h1>Sign in</h1><p class=\"muted\">to your account at <strong>{}</strong></p>{}\
         {buttons}{passwords}",
        escape(&v.deployment),
        pforte_page::alerts(None, v.error.as_deref()),
    );
    card_page("Sign in", &v.deployment, false, &body)
}

fn password_form(v: &AccountLoginView) -> String {
    format!(
        "<form method=\"post\" action=\"/account\">{}\
         <label for=\"username\">Username</label>\
         <input id=\"username\" name=\"username\" type=\"text\" autocomplete=\"username\" \
         autocapitalize=\"none\" spellcheck=\"false\" required autofocus value=\"{}\">\
         <label for=\"password\">Password</label>\
         <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required>\
         {}</form>",
        match v.next {
            Some(next) => format!("{}{}", csrf_field(&v.csrf, "login"), hidden("next", next)),
            None => csrf_field(&v.csrf, "login"),
        },
        escape(v.username.as_deref().unwrap_or_default()),
        actions(&button(Button::Primary, "Sign in", None)),
    )
}

fn grant_card(g: &GrantRow, csrf: &str, show_user: bool) -> String {
    let scopes: String = g
        .scopes
        .iter()
        .map(|s| format!("<code>{}</code> ", escape(s)))
        .collect();
    let user = if show_user {
        format!("<dt>User</dt><dd>{}</dd>", escape(&g.username))
    } else {
        String::new()
    };
    format!(
        "<li class=\"item\"><h2>{}</h2><p class=\"muted\">returns to {} · <code>{}</code></p>\
         <dl>{user}<dt>Route</dt><dd>{} <span class=\"muted\">{}</span></dd>\
         <dt>Scopes</dt><dd>{scopes}</dd><dt>Granted by</dt><dd>{}</dd>\
         <dt>First use</dt><dd>{}</dd><dt>Last use</dt><dd>{}</dd></dl>\
         <form method=\"post\" action=\"/account\">{}\
         {}{}</form></li>",
        escape(&g.client_name),
        escape(&g.redirect_host),
        escape(&g.client_id),
        escape(&g.route),
        escape(&g.resource),
        escape(&g.how),
        escape(&g.first_use),
        escape(&g.last_use),
        csrf_field(csrf, "revoke"),
        hidden("grant", &g.family_id),
        button(Button::Danger, "Revoke access", None),
    )
}

/// The account page.
pub(crate) fn account(v: &AccountView) -> String {
    let cards: String = v
        .grants
        .iter()
        .map(|g| grant_card(g, &v.csrf, v.all_users))
        .collect();
    let list = if v.grants.is_empty() {
        "<p class=\"muted\">No app holds access.</p>".to_owned()
    } else {
        format!("<ul class=\"items\">{cards}</ul>")
    };
    let admin = if v.admin {
        format!(
            "<form class=\"filter\" method=\"get\" action=\"/account\">\
             {}\
             <label for=\"fu\">User</label><input id=\"fu\" name=\"user\" type=\"text\" value=\"{}\">\
             <label for=\"fc\">Client ID</label><input id=\"fc\" name=\"client\" type=\"text\" value=\"{}\">\
             {}</form>{}",
            hidden("all", "1"),
            escape(&v.filter_user),
            escape(&v.filter_client),
            actions(&button(Button::Plain, "Show all users' apps", None)),
            if v.all_users {
                "<p><a href=\"/account\">Back to my apps</a></p>"
            } else {
                // The gateway's operator console, for admins only.
                "<p><a href=\"/admin\">Operator console</a></p>"
            }
        )
    } else {
        String::new()
    };
    let heading = if v.all_users {
        "Connected apps of every user"
    } else {
        "Connected apps"
    };
    let current = if v.has_password {
        "<label for=\"current\">Current password</label>\
         <input id=\"current\" name=\"current\" type=\"password\" autocomplete=\"current-password\" required>"
    } else {
        ""
    };
    // A user of an OpenID provider has no password here: the provider manages it.
    let password = match &v.provider {
        Some(name) => format!(
            "<p class=\"muted\">You sign in with <strong>{}</strong>; change your password \
             there. This gateway keeps no password for your account.</p>",
            escape(name)
        ),
        None => format!(
            "<form method=\"post\" action=\"/account\">{}{current}\
             <label for=\"new\">New password</label>\
             <input id=\"new\" name=\"new\" type=\"password\" autocomplete=\"new-password\" minlength=\"8\" required>\
             <label for=\"confirm\">New password again</label>\
             <input id=\"confirm\" name=\"confirm\" type=\"password\" autocomplete=\"new-password\" minlength=\"8\" required>\
             {}</form>",
            csrf_field(&v.csrf, "password"),
            actions(&button(Button::Plain, "Change password", None)),
        ),
    };
    let body = format!(
        "<h1>Your account</h1><p class=\"muted\">Signed in as <strong>{}</strong>{}</p>{}\
         {admin}<h2 class=\"section\">{heading}</h2>{list}{section}\
         <h2 class=\"section\">Password</h2>{password}\
         <form method=\"post\" action=\"/account\">{}{}</form>",
        escape(&v.username),
        if v.admin { " (admin)" } else { "" },
        pforte_page::alerts(v.notice.as_deref(), v.error.as_deref()),
        csrf_field(&v.csrf, "logout"),
        actions(&button(Button::Plain, "Sign out", None)),
        section = v.section.as_deref().unwrap_or_default(),
    );
    card_page("Your account", &v.deployment, true, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> GrantRow {
        GrantRow {
            family_id: "f1".into(),
            username: "alice".into(),
            client_name: "<Claude>".into(),
            client_id: "c1".into(),
            redirect_host: "claude.ai".into(),
            scopes: vec!["mcp:read".into()],
            route: "Notes".into(),
            resource: "https://gw.example/notes/mcp".into(),
            first_use: "2026-12-03 10:00 UTC".into(),
            last_use: "2026-12-03 11:00 UTC".into(),
            how: "consent".into(),
        }
    }

    #[test]
    fn each_grant_has_its_own_csrf_protected_revoke_form() {
        let html = account(&AccountView {
            deployment: "Acme".into(),
            username: "alice".into(),
            admin: false,
            all_users: false,
            filter_user: String::new(),
            filter_client: String::new(),
            grants: vec![row()],
            has_password: true,
            provider: None,
            csrf: "tok".into(),
            notice: None,
            error: None,
            section: None,
        });
        assert!(html.contains("&lt;Claude&gt;"));
        assert!(html.contains("name=\"step\" value=\"revoke\""));
        assert!(html.contains("name=\"grant\" value=\"f1\""));
        assert!(html.contains("name=\"csrf\" value=\"tok\""));
        assert!(!html.contains("<script"));
        assert!(!html.contains("Show all users"), "not an admin");
    }

    #[test]
    fn a_provider_user_gets_no_password_form_and_the_login_offers_the_providers() {
        let html = account(&AccountView {
            deployment: "Pforte".into(),
            username: "kim@acme.example".into(),
            admin: false,
            all_users: false,
            filter_user: String::new(),
            filter_client: String::new(),
            grants: vec![],
            has_password: false,
            provider: Some("Acme <SSO>".into()),
            csrf: "tok".into(),
            notice: None,
            error: None,
            section: None,
        });
        assert!(html.contains("You sign in with <strong>Acme &lt;SSO&gt;</strong>"));
        assert!(!html.contains("name=\"step\" value=\"password\""));
        let view = |local_passwords: bool| AccountLoginView {
            deployment: "Pforte".into(),
            csrf: "tok".into(),
            username: None,
            error: None,
            providers: vec!["Acme SSO".into()],
            provider_origins: vec!["https://login.acme.example".into()],
            local_passwords,
            next: None,
        };
        let both = login(&view(true));
        assert!(both.contains("name=\"step\" value=\"oidc\""));
        assert!(both.contains("Sign in with Acme SSO"));
        assert!(both.contains("name=\"password\""));
        assert!(!login(&view(false)).contains("name=\"password\""));
    }
}
