//! The HTML of the login, consent and error pages: cards of the one page skeleton, stylesheet
//! and Content-Security-Policy (`pforte-page`), no scripts, no external assets.

use pforte_page::{
    Button, actions, button, card_page, error as error_line, escape, hidden as field,
};

pub(crate) mod account;

/// What the login page shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoginView {
    /// The deployment's name (`[oauth] display_name`).
    pub deployment: String,
    pub client_name: String,
    /// The encoded authorization request, carried in a hidden field.
    pub request: String,
    pub csrf: String,
    pub username: Option<String>,
    pub error: Option<String>,
    /// The OpenID providers offered ("Sign in with NAME"), by name.
    pub providers: Vec<String>,
    /// Their origins (allowed as CSP form-action targets: the button's POST ends in a redirect
    /// there).
    pub provider_origins: Vec<String>,
    /// Whether the username and password form is shown.
    pub local_passwords: bool,
}

/// What the consent page shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConsentView {
    /// The deployment's name (`[oauth] display_name`).
    pub deployment: String,
    pub client_name: String,
    pub client_id: String,
    pub redirect_host: String,
    /// The redirect URI's origin (allowed as a CSP form-action target).
    pub redirect_origin: String,
    /// (scope, description) of every scope requested.
    pub scopes: Vec<(String, String)>,
    /// The requested scopes this client already holds for this user (an active grant); the
    /// page then lists the others separately as what is being added (step-up).
    pub already_granted: Vec<String>,
    /// The name of the service (protected resource) being granted, e.g. the route name.
    pub resource_name: String,
    /// Its URL (the token audience).
    pub resource_url: String,
    pub username: String,
    pub request: String,
    pub csrf: String,
}

/// An error page (the request is not sent back to any client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ErrorView {
    pub title: String,
    pub message: String,
}

fn document(title: &str, body: &str) -> String {
    card_page(title, "Pforte", false, body)
}

/// The hidden fields of every `/authorize` form: the CSRF token, the step, the request.
fn hidden(request: &str, csrf: &str, step: &str) -> String {
    [
        pforte_page::csrf_field(csrf),
        field("step", step),
        field("request", request),
    ]
    .concat()
}

/// The login page: a "Sign in with NAME" button per OpenID provider and, unless local
/// passwords are off, the username and password form.
pub(crate) fn login(v: &LoginView) -> String {
    let error = v.error.as_deref().map(error_line).unwrap_or_default();
    let buttons: String = v
        .providers
        .iter()
        .map(|name| {
            format!(
                "<form method=\"post\" action=\"/authorize\">{}{}</form>",
                hidden(&v.request, &v.csrf, "oidc"),
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
            "<p class=\"muted\">or with your Pforte account:</p>"
        };
        format!("{or}{}", password_form(v))
    } else {
        String::new()
    };
    let body = format!(
        "<h1>Sign in</h1><p class=\"muted\">to continue to <strong>{}</strong></p>{error}\
         {buttons}{passwords}",
        escape(&v.client_name),
    );
    card_page("Sign in", &v.deployment, false, &body)
}

fn password_form(v: &LoginView) -> String {
    format!(
        "<form method=\"post\" action=\"/authorize\">{}\
         <label for=\"username\">Username</label>\
         <input id=\"username\" name=\"username\" type=\"text\" autocomplete=\"username\" \
         autocapitalize=\"none\" spellcheck=\"false\" required autofocus value=\"{}\">\
         <label for=\"password\">Password</label>\
         <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required>\
         {}</form>",
        hidden(&v.request, &v.csrf, "login"),
        escape(v.username.as_deref().unwrap_or_default()),
        actions(&button(Button::Primary, "Sign in", None)),
    )
}

/// The consent form.
pub(crate) fn consent(v: &ConsentView) -> String {
    let item =
        |(s, d): &(String, String)| format!("<li><code>{}</code> — {}</li>", escape(s), escape(d));
    let (kept, added): (Vec<_>, Vec<_>) = v
        .scopes
        .iter()
        .partition(|(s, _)| v.already_granted.contains(s));
    let scopes: String = if kept.is_empty() {
        added.into_iter().map(item).collect()
    } else {
        let added: String = added
            .into_iter()
            .map(|(s, d)| format!("<li>adds: <code>{}</code> — {}</li>", escape(s), escape(d)))
            .collect();
        let kept: String = kept.into_iter().map(item).collect();
        format!("{added}</ul><p class=\"muted\">Already allowed:</p><ul>{kept}")
    };
    let body = format!(
        "<h1>Allow access?</h1>\
         <p><strong>{}</strong> wants access to <strong>{}</strong> (<code>{}</code>) \
         with your Pforte account <strong>{}</strong>.</p>\
         <p class=\"muted\">It will be sent back to <strong>{}</strong>. Client ID: <code>{}</code></p>\
         <p>It asks for:</p><ul>{scopes}</ul>\
         <form method=\"post\" action=\"/authorize\">{}{}</form>",
        escape(&v.client_name),
        escape(&v.resource_name),
        escape(&v.resource_url),
        escape(&v.username),
        escape(&v.redirect_host),
        escape(&v.client_id),
        hidden(&v.request, &v.csrf, "consent"),
        actions(&format!(
            "{}{}",
            button(Button::Plain, "Deny", Some(("decision", "deny"))),
            button(Button::Primary, "Approve", Some(("decision", "approve")))
        )),
    );
    card_page("Allow access", &v.deployment, false, &body)
}

/// An error page.
pub(crate) fn error(v: &ErrorView) -> String {
    let body = format!(
        "<h1>{}</h1><p>{}</p><p class=\"muted\">Close this window and start again from the application.</p>",
        escape(&v.title),
        escape(&v.message)
    );
    document(&v.title, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_is_escaped() {
        let html = login(&LoginView {
            deployment: "Pforte".into(),
            client_name: "<script>alert(1)</script>".into(),
            request: "a=\"b\"&c".into(),
            csrf: "x".into(),
            username: None,
            error: Some("<b>".into()),
            providers: vec!["<Corp>".into()],
            provider_origins: vec![],
            local_passwords: true,
        });
        assert!(html.contains("Sign in with &lt;Corp&gt;"));
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("a=&quot;b&quot;&amp;c"));
        assert!(!html.contains("<b>"));
    }

    #[test]
    fn consent_names_the_service_being_granted() {
        let html = consent(&ConsentView {
            deployment: "Pforte".into(),
            client_name: "Claude".into(),
            client_id: "c1".into(),
            redirect_host: "claude.ai".into(),
            redirect_origin: "https://claude.ai".into(),
            scopes: vec![("mcp:read".into(), "read".into())],
            already_granted: vec![],
            resource_name: "<notes>".into(),
            resource_url: "https://gw.example/notes/mcp".into(),
            username: "alice".into(),
            request: "r".into(),
            csrf: "x".into(),
        });
        assert!(html.contains(
            "wants access to <strong>&lt;notes&gt;</strong> (<code>https://gw.example/notes/mcp</code>)"
        ));
    }

    #[test]
    fn pages_name_the_deployment_when_configured() {
        let view = |deployment: &str| LoginView {
            deployment: deployment.into(),
            client_name: "Claude".into(),
            request: "r".into(),
            csrf: "x".into(),
            username: None,
            error: None,
            providers: Vec::new(),
            provider_origins: Vec::new(),
            local_passwords: true,
        };
        let named = login(&view("Acme <MCP>"));
        assert!(named.contains("<p class=\"deployment\">Acme &lt;MCP&gt;</p>"));
        assert!(named.contains("<title>Sign in · Acme &lt;MCP&gt;</title>"));
        assert!(!login(&view("Pforte")).contains("class=\"deployment\""));
    }

    #[test]
    fn pages_carry_the_one_skeleton() {
        let html = error(&ErrorView {
            title: "Unknown client".into(),
            message: "<x>".into(),
        });
        assert!(html.contains(pforte_page::STYLESHEET));
        assert!(html.contains("<main class=\"page\"><h1>Unknown client</h1>"));
        assert!(html.contains("<p>&lt;x&gt;</p>"));
    }

    #[test]
    fn passwords_off_shows_only_the_providers() {
        let html = login(&LoginView {
            deployment: "Pforte".into(),
            client_name: "Claude".into(),
            request: "r".into(),
            csrf: "x".into(),
            username: None,
            error: None,
            providers: vec!["Corp".into(), "Google".into()],
            provider_origins: vec![],
            local_passwords: false,
        });
        assert!(html.contains("Sign in with Corp") && html.contains("Sign in with Google"));
        assert!(!html.contains("type=\"password\""));
    }
}
