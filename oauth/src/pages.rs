//! The HTML of the login, consent and error pages: self-contained markup, one inline stylesheet
//! allowed by its hash in the Content-Security-Policy, no scripts, no external assets.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

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

const CSS: &str = "\
*{box-sizing:border-box}\
body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;\
font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;background:#f3f4f6;color:#111827}\
main{width:100%;max-width:26rem;margin:1rem;padding:2rem;background:#fff;border-radius:12px;\
box-shadow:0 1px 3px rgba(0,0,0,.1),0 8px 24px rgba(0,0,0,.06)}\
h1{font-size:1.35rem;margin:0 0 .25rem}\
p{margin:.5rem 0}\
.muted{color:#6b7280;font-size:.9rem}\
label{display:block;margin:1rem 0 .25rem;font-weight:600}\
input[type=text],input[type=password]{width:100%;padding:.6rem .75rem;border:1px solid #d1d5db;\
border-radius:8px;font:inherit}\
input:focus{outline:2px solid #2563eb;outline-offset:1px}\
.error{margin:1rem 0;padding:.6rem .75rem;border-radius:8px;background:#fef2f2;color:#991b1b;\
border:1px solid #fecaca}\
ul{padding-left:1.25rem}li{margin:.25rem 0}code{font-size:.9em}\
.actions{display:flex;gap:.75rem;margin-top:1.5rem}\
button{flex:1;padding:.65rem 1rem;border-radius:8px;border:1px solid #d1d5db;font:inherit;\
font-weight:600;cursor:pointer;background:#fff;color:#111827}\
button.primary{background:#2563eb;border-color:#2563eb;color:#fff}\
button:focus{outline:2px solid #1d4ed8;outline-offset:2px}\
main.wide{max-width:40rem}\
h2{font-size:1.1rem;margin:0}h2.section{margin:1.75rem 0 .5rem}\
.deployment{margin:0 0 1rem;color:#374151;font-weight:600;letter-spacing:.02em}\
ul.cards{list-style:none;padding:0;margin:0}\
.card{border:1px solid #e5e7eb;border-radius:10px;padding:1rem;margin:.75rem 0}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .75rem;margin:.5rem 0}\
dt{color:#6b7280}dd{margin:0;overflow-wrap:anywhere}\
button.danger{background:#fff;border-color:#dc2626;color:#b91c1c}\
.notice{margin:1rem 0;padding:.6rem .75rem;border-radius:8px;background:#ecfdf5;color:#065f46;\
border:1px solid #a7f3d0}\
.filter{display:grid;gap:0 .75rem}\
.scroll{overflow-x:auto;margin:.5rem 0}\
table{border-collapse:collapse;font-size:.9rem;width:100%}\
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #e5e7eb;vertical-align:top}\
th{white-space:nowrap}td{overflow-wrap:anywhere}td:last-child{white-space:nowrap}\
td form.inline{display:inline}td button{flex:none;padding:.3rem .6rem}\
main.wide:has(table){max-width:56rem}\
@media (max-width:40rem){main.wide{padding:1.25rem}\
.scroll{overflow-x:visible}\
table.stack thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}\
table.stack tr{display:block;border:1px solid #e5e7eb;border-radius:10px;margin:0 0 .6rem;padding:.35rem 0}\
table.stack td{display:grid;grid-template-columns:7.5rem 1fr;gap:.5rem;border:none;padding:.25rem .75rem;white-space:normal}\
table.stack td::before{content:attr(data-label);color:#6b7280;font-size:.85rem;font-weight:600}\
table.stack td:last-child{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center}\
table.stack td:last-child::before{content:none}}\
";

static STYLE_HASH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "'sha256-{}'",
        STANDARD.encode(Sha256::digest(CSS.as_bytes()))
    )
});

/// The Content-Security-Policy for a page whose forms may end in a redirect to one of
/// `form_action_origins` (the client's origin on the consent page, the OpenID providers' on
/// the login page).
/// An origin that is not plainly `scheme://host[:port]` in CSP-safe characters is left out
/// (registration refuses such hosts; this keeps a `;` from ever starting a new directive).
pub(crate) fn content_security_policy(form_action_origins: &[&str]) -> String {
    let safe = |o: &&&str| {
        !o.is_empty()
            && o.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:/[]".contains(&b))
    };
    let mut form_action = "'self'".to_owned();
    for o in form_action_origins.iter().filter(safe) {
        form_action.push(' ');
        form_action.push_str(o);
    }
    format!(
        "default-src 'none'; style-src {}; img-src 'self'; form-action {form_action}; \
         frame-ancestors 'none'; base-uri 'none'",
        *STYLE_HASH
    )
}

/// HTML-escapes text for element content and quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn document(title: &str, body: &str) -> String {
    document_in(title, "Pforte", "", body)
}

/// A page of the deployment called `deployment` (`[oauth] display_name`, default "Pforte"),
/// its `<main>` of class `class`.
pub(crate) fn document_in(title: &str, deployment: &str, class: &str, body: &str) -> String {
    let banner = if deployment == "Pforte" {
        String::new()
    } else {
        format!("<p class=\"deployment\">{}</p>", escape(deployment))
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <title>{} · {}</title><style>{CSS}</style></head>\
         <body><main class=\"{class}\">{banner}{body}</main></body></html>\n",
        escape(title),
        escape(deployment),
    )
}

fn hidden(request: &str, csrf: &str, step: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"step\" value=\"{step}\">\
         <input type=\"hidden\" name=\"request\" value=\"{}\">",
        escape(csrf),
        escape(request)
    )
}

/// The login page: a "Sign in with NAME" button per OpenID provider and, unless local
/// passwords are off, the username and password form.
pub(crate) fn login(v: &LoginView) -> String {
    let error = v
        .error
        .as_deref()
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e)))
        .unwrap_or_default();
    let buttons: String = v
        .providers
        .iter()
        .map(|name| {
            format!(
                "<form method=\"post\" action=\"/authorize\">{}\
                 <div class=\"actions\"><button type=\"submit\" name=\"provider\" value=\"{}\">\
                 Sign in with {}</button></div></form>",
                hidden(&v.request, &v.csrf, "oidc"),
                escape(name),
                escape(name)
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
    document_in("Sign in", &v.deployment, "", &body)
}

fn password_form(v: &LoginView) -> String {
    format!(
        "<form method=\"post\" action=\"/authorize\">{}\
         <label for=\"username\">Username</label>\
         <input id=\"username\" name=\"username\" type=\"text\" autocomplete=\"username\" \
         autocapitalize=\"none\" spellcheck=\"false\" required autofocus value=\"{}\">\
         <label for=\"password\">Password</label>\
         <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required>\
         <div class=\"actions\"><button class=\"primary\" type=\"submit\">Sign in</button></div>\
         </form>",
        hidden(&v.request, &v.csrf, "login"),
        escape(v.username.as_deref().unwrap_or_default()),
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
         <form method=\"post\" action=\"/authorize\">{}\
         <div class=\"actions\">\
         <button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button>\
         <button class=\"primary\" type=\"submit\" name=\"decision\" value=\"approve\">Approve</button>\
         </div></form>",
        escape(&v.client_name),
        escape(&v.resource_name),
        escape(&v.resource_url),
        escape(&v.username),
        escape(&v.redirect_host),
        escape(&v.client_id),
        hidden(&v.request, &v.csrf, "consent"),
    );
    document_in("Allow access", &v.deployment, "", &body)
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
    fn tables_in_these_pages_stack_on_a_phone() {
        // `/account` shows the gateway's table of connected services (cells labelled by
        // column): the same narrow-screen rule as the console's.
        for rule in [
            "@media (max-width:40rem)",
            "table.stack td::before{content:attr(data-label)",
            "td:last-child{white-space:nowrap}",
        ] {
            assert!(CSS.contains(rule), "{rule}");
        }
    }

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
    fn csp_forbids_framing_and_pins_the_stylesheet() {
        let csp = content_security_policy(&["https://claude.ai"]);
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(csp.contains("default-src 'none'"));
        assert!(csp.contains("form-action 'self' https://claude.ai"));
        let injected = content_security_policy(&["https://x;script-src *"]);
        assert!(injected.contains("form-action 'self';"), "{injected}");
        assert!(!injected.contains("script-src"), "{injected}");
        assert!(csp.contains("'sha256-"));
        let two = content_security_policy(&["https://a.example", "http://127.0.0.1:4000"]);
        assert!(two.contains("form-action 'self' https://a.example http://127.0.0.1:4000;"));
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
