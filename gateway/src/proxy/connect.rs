//! The connect pages' handlers (`/connect/NAME…`, `/connections`): who is connecting (a
//! single-use link from a connect prompt, or a signed-in user of the authorization server), then
//! the upstream's OAuth flow (redirect out, callback in, tokens into the vault) or the form that
//! takes a secret; and a signed-in user's list with disconnect. Pages from `credentials::pages`.

use bytes::Bytes;
use pingora::{Result, proxy::Session};

use crate::{
    config::{Route, UpstreamAuth},
    console,
    credentials::{FLOW_TTL, pages},
    limit::Class,
    vault::{Entry, Flow, LinkGrant, Secret, State},
};

use super::{
    Gateway, Outcome, RequestCtx,
    console::{Form, cookie_lines, query_value, read_form},
};

type Response = http::Response<Bytes>;

/// The cookie that ties an upstream authorization to the browser that started it.
const BROWSER_COOKIE: &str = "pforte_connect";

/// What a connect path asks for.
#[derive(Debug, PartialEq, Eq)]
enum Page<'a> {
    /// `/connections`.
    List,
    /// `/connect/NAME`: start (a link, or a signed-in user) — or the secret form's POST.
    Start(&'a str),
    /// `/connect/NAME/callback`: the upstream's authorization server sends the user back.
    Callback(&'a str),
    /// `/connect/NAME/done`.
    Done(&'a str),
    /// `/connect/NAME/client.json`: the client ID metadata document.
    ClientDocument(&'a str),
    NotFound,
}

impl<'a> Page<'a> {
    fn of(path: &'a str) -> Self {
        if path == "/connections" {
            return Self::List;
        }
        let Some(rest) = path.strip_prefix("/connect/") else {
            return Self::NotFound;
        };
        match rest.split_once('/') {
            None => Self::Start(rest),
            Some((name, "callback")) => Self::Callback(name),
            Some((name, "done")) => Self::Done(name),
            Some((name, "client.json")) => Self::ClientDocument(name),
            Some(_) => Self::NotFound,
        }
    }
}

/// Whether `path` is one of the connect pages.
pub(super) fn is_connect_path(path: &str) -> bool {
    path == "/connections" || path.starts_with("/connect/")
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// The value of cookie `name` among `lines`.
fn cookie<'a>(lines: &'a [String], name: &str) -> Option<&'a str> {
    lines
        .iter()
        .flat_map(|l| l.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether the browser whose cookie lines these are started `pending` (its `browser` hash).
fn same_browser(pending: &Flow, lines: &[String]) -> bool {
    let expected = pending
        .extra
        .get("browser")
        .and_then(serde_json::Value::as_str);
    match (expected, cookie(lines, BROWSER_COOKIE)) {
        (Some(expected), Some(presented)) => {
            subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), sha256_hex(presented).as_bytes())
                .into()
        }
        _ => false,
    }
}

fn page(status: u16, html: String) -> Response {
    console::html(status, html)
}

impl Gateway {
    /// A request for `/connect/…` or `/connections`.
    pub(super) async fn connect(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Outcome> {
        let req = session.req_header();
        let post = req.method == http::Method::POST;
        if !post && req.method != http::Method::GET && req.method != http::Method::HEAD {
            return Ok(Outcome::Refuse(crate::reply::Rejection::MethodNotAllowed {
                allow: "GET, HEAD, POST",
            }));
        }
        let path = req.uri.path().to_owned();
        let query = req.uri.query().unwrap_or_default().to_owned();
        let page_of = Page::of(&path);
        let route = match &page_of {
            Page::Start(n) | Page::Callback(n) | Page::Done(n) | Page::ClientDocument(n) => {
                match self.settings.route_named(n) {
                    Some(i) if self.edge.credentials.per_user(i) => Some(&self.settings.routes[i]),
                    _ => return Ok(Outcome::Passed(not_found())),
                }
            }
            Page::List => None,
            Page::NotFound => return Ok(Outcome::Passed(not_found())),
        };
        if post {
            match self.limit(Class::OAuth, &ctx.ip_key()).await {
                Ok(rate) => ctx.rate = rate,
                Err(rejection) => return Ok(Outcome::Refuse(rejection)),
            }
        }
        let response = match (page_of, route, post) {
            (Page::List, _, false) => self.connections_page(session, &query).await,
            (Page::List, _, true) => self.connections_action(session).await?,
            (Page::ClientDocument(_), Some(r), false) => {
                let mut resp = http::Response::new(Bytes::from(
                    self.edge.credentials.client_document(r).to_string(),
                ));
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                resp.headers_mut().insert(
                    http::header::CACHE_CONTROL,
                    http::HeaderValue::from_static("max-age=3600"),
                );
                resp
            }
            (Page::Done(_), Some(r), false) => page(200, pages::connected(title(r))),
            (Page::Start(_), Some(r), false) => self.start(session, r, &query).await,
            (Page::Start(_), Some(r), true) => self.secret_posted(session, r).await?,
            (Page::Callback(_), Some(r), false) => self.callback(session, r, &query).await,
            _ => {
                return Ok(Outcome::Refuse(crate::reply::Rejection::MethodNotAllowed {
                    allow: "GET, HEAD",
                }));
            }
        };
        Ok(Outcome::Passed(response))
    }

    /// `GET /connect/NAME`: whose connection this is (the link's principal, or the signed-in
    /// user), then the upstream's authorization or the secret form.
    async fn start(&self, session: &Session, route: &Route, query: &str) -> Response {
        let Some(vault) = self.edge.credentials.vault() else {
            return unavailable();
        };
        let link = query_value(query, "link");
        let viewer = self.signed_in(session).await.ok().flatten();
        let person = if link.is_empty() {
            match &viewer {
                Some(v) => crate::auth::person_key(crate::auth::AuthKind::OAuth, &v.username, ""),
                None => return console::redirect("/account?next=%2Fconnections"),
            }
        } else {
            let grant: LinkGrant = match vault.take_link(&link).await {
                Ok(Some(g)) if g.route == route.name => g,
                Ok(_) => {
                    return page(
                        400,
                        pages::failed(
                            title(route),
                            "This connect link was used already, has expired, or is for another service.",
                        ),
                    );
                }
                Err(_) => return unavailable(),
            };
            self.edge.credentials.link_taken(&grant);
            // An OAuth user's link works only in a browser signed in to Pforte as that user; a
            // static token's link is the token holder's alone.
            if grant.principal_kind == crate::auth::AuthKind::OAuth {
                match &viewer {
                    Some(v)
                        if crate::auth::person_key(
                            crate::auth::AuthKind::OAuth,
                            &v.username,
                            "",
                        ) == grant.person => {}
                    _ => {
                        return page(
                            403,
                            pages::failed(
                                title(route),
                                "Sign in to Pforte as the user who asked for this link (at /account), then connect from your connected services.",
                            ),
                        );
                    }
                }
            }
            grant.person
        };
        match &route.upstream_auth {
            Some(UpstreamAuth::OAuth { scopes, .. }) => {
                self.authorize_upstream(route, person, scopes.as_deref())
                    .await
            }
            Some(UpstreamAuth::Header { into, label }) => {
                self.secret_form(route, person, label, &[into.name.as_str().to_owned()])
                    .await
            }
            Some(UpstreamAuth::Env { variables, label }) => {
                self.secret_form(route, person, label, variables).await
            }
            _ => not_found(),
        }
    }

    /// The form for a `header` or `env` route's secret, with a single-use ticket.
    async fn secret_form(
        &self,
        route: &Route,
        person: String,
        label: &str,
        fields: &[String],
    ) -> Response {
        let Some(vault) = self.edge.credentials.vault() else {
            return unavailable();
        };
        let ticket = crate::vault::random_token();
        let browser = crate::vault::random_token();
        // A form's ticket: no PKCE, no client; whose secret it will be, and the browser that
        // opened the link (only it may post the form).
        let pending = Flow {
            route: route.name.clone(),
            person,
            pkce_verifier: String::new(),
            redirect_uri: String::new(),
            client_id: String::new(),
            extra: serde_json::json!({ "browser": sha256_hex(&browser) }),
        };
        if vault.put_flow(&ticket, &pending, FLOW_TTL).await.is_err() {
            return unavailable();
        }
        let mut resp = page(
            200,
            pages::secret_form(
                title(route),
                label,
                fields,
                &format!("/connect/{}", route.name),
                &ticket,
            ),
        );
        self.set_browser_cookie(&mut resp, route, &browser);
        resp
    }

    /// `POST /connect/NAME`: the secret form, under its ticket, into the vault.
    async fn secret_posted(&self, session: &mut Session, route: &Route) -> Result<Response> {
        let Some(vault) = self.edge.credentials.vault() else {
            return Ok(unavailable());
        };
        let Some(body) = read_form(session).await? else {
            return Ok(page(
                413,
                pages::failed(title(route), "The form is too large."),
            ));
        };
        let form = Form::parse(&body);
        let pending: Flow = match vault.take_flow(form.get("ticket")).await {
            Ok(Some(p)) if p.route == route.name && p.pkce_verifier.is_empty() => p,
            Ok(_) => {
                return Ok(page(
                    400,
                    pages::failed(title(route), "This form was used already or has expired."),
                ));
            }
            Err(_) => return Ok(unavailable()),
        };
        if !same_browser(&pending, &cookie_lines(session)) {
            return Ok(page(
                403,
                pages::failed(title(route), "This form was opened in another browser."),
            ));
        }
        let names: Vec<String> = match &route.upstream_auth {
            Some(UpstreamAuth::Header { into, .. }) => vec![into.name.as_str().to_owned()],
            Some(UpstreamAuth::Env { variables, .. }) => variables.clone(),
            _ => return Ok(not_found()),
        };
        let mut values = std::collections::BTreeMap::new();
        for name in names {
            let v = form.get(&format!("v.{name}")).trim().to_owned();
            if v.is_empty() || v.len() > 8192 || v.chars().any(char::is_control) {
                return Ok(page(
                    400,
                    pages::failed(
                        title(route),
                        "Each value must be 1 to 8192 printable characters.",
                    ),
                ));
            }
            values.insert(name, v);
        }
        let now = self.clock.now_ms();
        let entry = Entry {
            route: route.name.clone(),
            person: pending.person,
            secret: Secret::Values(values),
            state: State::Connected,
            connected_ms: now,
            refreshed_ms: None,
            expires_at_ms: None,
            version: 0,
        };
        if vault.put(&entry).await.is_err() {
            return Ok(unavailable());
        }
        tracing::info!(route = %route.name, "upstream secret connected");
        self.connected(route, &entry.person);
        Ok(console::redirect(&format!("/connect/{}/done", route.name)))
    }

    /// The upstream's OAuth flow begins: discovery, registration, PKCE; the browser is sent to
    /// the upstream's authorization server with a cookie that ties the callback to it.
    async fn authorize_upstream(
        &self,
        route: &Route,
        person: String,
        scopes: Option<&[String]>,
    ) -> Response {
        let Some(vault) = self.edge.credentials.vault() else {
            return unavailable();
        };
        let begun = match self.edge.credentials.begin(route, scopes).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(route = %route.name, error = %e, "cannot start the upstream authorization");
                return page(
                    502,
                    pages::failed(
                        title(route),
                        "The service's authorization server cannot be reached or refused to register Pforte. Try again later.",
                    ),
                );
            }
        };
        let browser = crate::vault::random_token();
        let pending = Flow {
            route: route.name.clone(),
            person,
            pkce_verifier: begun.pkce_verifier,
            redirect_uri: self.edge.credentials.redirect_uri(route),
            client_id: begun.client_id,
            extra: serde_json::json!({ "browser": sha256_hex(&browser) }),
        };
        if vault
            .put_flow(&begun.state, &pending, FLOW_TTL)
            .await
            .is_err()
        {
            return unavailable();
        }
        let mut resp = console::redirect(&begun.url);
        self.set_browser_cookie(&mut resp, route, &browser);
        resp
    }

    /// Ties a flow to the browser it started in: the cookie holds `browser`, the flow its hash
    /// (checked by [`same_browser`] when the flow comes back).
    fn set_browser_cookie(&self, resp: &mut Response, route: &Route, browser: &str) {
        let secure = if self.settings.base_url.starts_with("https://") {
            "; Secure"
        } else {
            ""
        };
        let cookie = format!(
            "{BROWSER_COOKIE}={browser}; Path=/connect/{}; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
            route.name,
            FLOW_TTL.as_secs()
        );
        if let Ok(v) = http::HeaderValue::from_str(&cookie) {
            resp.headers_mut().insert(http::header::SET_COOKIE, v);
        }
    }

    /// `GET /connect/NAME/callback`: the code redeemed for tokens, which go into the vault.
    async fn callback(&self, session: &Session, route: &Route, query: &str) -> Response {
        let Some(vault) = self.edge.credentials.vault() else {
            return unavailable();
        };
        let Some(callback) = crate::broker::read_callback(query) else {
            return page(
                400,
                pages::failed(title(route), "The sign-in came back without its state."),
            );
        };
        let pending: Flow = match vault.take_flow(&callback.state).await {
            Ok(Some(p)) if p.route == route.name && !p.pkce_verifier.is_empty() => p,
            Ok(_) => {
                return page(
                    400,
                    pages::failed(
                        title(route),
                        "This sign-in was finished already or has expired.",
                    ),
                );
            }
            Err(_) => return unavailable(),
        };
        if !same_browser(&pending, &cookie_lines(session)) {
            return page(
                403,
                pages::failed(title(route), "This sign-in was started in another browser."),
            );
        }
        let tokens = match self
            .edge
            .credentials
            .finish(route, &pending.client_id, &callback, &pending.pkce_verifier)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(route = %route.name, error = %e, "no tokens from the upstream's callback");
                return page(
                    502,
                    pages::failed(
                        title(route),
                        "The service's authorization server did not grant access (declined, or the exchange failed).",
                    ),
                );
            }
        };
        let now = self.clock.now_ms();
        let entry = Entry {
            route: route.name.clone(),
            person: pending.person,
            expires_at_ms: tokens.expires_at_ms,
            secret: Secret::OAuth(tokens),
            state: State::Connected,
            connected_ms: now,
            refreshed_ms: None,
            version: 0,
        };
        if vault.put(&entry).await.is_err() {
            return unavailable();
        }
        tracing::info!(route = %route.name, "upstream account connected");
        self.connected(route, &entry.person);
        console::redirect(&format!("/connect/{}/done", route.name))
    }

    /// `person` connected to `route`: counted, and the route's tool catalog may borrow their
    /// credential now.
    fn connected(&self, route: &Route, person: &str) {
        self.edge
            .credentials
            .note(&route.name, crate::metrics::CredentialEvent::Connected);
        if let Some(catalog) = self
            .settings
            .routes
            .iter()
            .position(|r| r.name == route.name)
            .and_then(|i| self.edge.catalogs.get(i))
        {
            catalog.connected(person);
        }
    }

    /// `GET /connections`: the signed-in user's credentials per route.
    async fn connections_page(&self, session: &Session, query: &str) -> Response {
        let viewer = match self.signed_in(session).await {
            Ok(Some(v)) => v,
            Ok(None) => return console::redirect("/account?next=%2Fconnections"),
            Err(_) => return unavailable(),
        };
        let person = crate::auth::person_key(crate::auth::AuthKind::OAuth, &viewer.username, "");
        let Ok(rows) = self.edge.credentials.rows(&person).await else {
            return unavailable();
        };
        let (notice, error) = match query_value(query, "done").as_str() {
            "disconnected" => (
                Some("Disconnected. Pforte no longer holds that credential."),
                None,
            ),
            "failed" => (None, Some("The vault did not answer; nothing was changed.")),
            _ => (None, None),
        };
        page(
            200,
            pages::connections(&viewer.display_name, &rows, &viewer.csrf, notice, error),
        )
    }

    /// `POST /connections`: disconnect (CSRF-checked), then back to the list.
    async fn connections_action(&self, session: &mut Session) -> Result<Response> {
        let viewer = match self.signed_in(session).await {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(console::redirect("/account?next=%2Fconnections")),
            Err(_) => return Ok(unavailable()),
        };
        let Some(body) = read_form(session).await? else {
            return Ok(console::refusal(
                413,
                "Form too large",
                "The form is too large.",
            ));
        };
        let form = Form::parse(&body);
        if !self.oauth.server().csrf_ok(&viewer, form.get("csrf")) {
            return Ok(console::refusal(
                403,
                "Invalid form",
                "The form's security token is missing or wrong. Open the page again.",
            ));
        }
        if form.get("action") != "disconnect" {
            return Ok(console::refusal(
                400,
                "Unknown action",
                "The form asked for nothing known.",
            ));
        }
        let person = crate::auth::person_key(crate::auth::AuthKind::OAuth, &viewer.username, "");
        let done = match self
            .edge
            .credentials
            .disconnect(form.get("route"), &person)
            .await
        {
            Ok(_) => "disconnected",
            Err(_) => "failed",
        };
        Ok(console::redirect(&format!("/connections?done={done}")))
    }
}

/// A route's name for people.
fn title(route: &Route) -> &str {
    route.title.as_deref().unwrap_or(&route.name)
}

fn not_found() -> Response {
    console::refusal(
        404,
        "Not found",
        "No service of this gateway connects here.",
    )
}

fn unavailable() -> Response {
    console::refusal(
        503,
        "Unavailable",
        "The credential vault did not answer. Try again in a moment.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_pages() {
        assert_eq!(Page::of("/connections"), Page::List);
        assert_eq!(Page::of("/connect/gh"), Page::Start("gh"));
        assert_eq!(Page::of("/connect/gh/callback"), Page::Callback("gh"));
        assert_eq!(Page::of("/connect/gh/done"), Page::Done("gh"));
        assert_eq!(
            Page::of("/connect/gh/client.json"),
            Page::ClientDocument("gh")
        );
        assert_eq!(Page::of("/connect/gh/x"), Page::NotFound);
        assert!(is_connect_path("/connect/a") && !is_connect_path("/connectx"));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let lines = vec!["a=1; pforte_connect=xyz".to_owned(), "b=2".to_owned()];
        assert_eq!(cookie(&lines, "pforte_connect"), Some("xyz"));
        assert_eq!(cookie(&lines, "c"), None);
    }
}
