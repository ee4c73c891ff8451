//! The operator console's handlers (`/admin`, see `console.rs`): who is asking (the
//! authorization server's session cookie: signed out → its sign-in page, not an admin → 403),
//! then a page gathered from the gateway's state and rendered by `console::pages` /
//! `console::manage`, or an action (CSRF-checked POST, throttled like the authorization
//! server's, audited, answered with a 303). And what every finished request leaves for the
//! console: a count in the last hour's statistics, a route's failure in its recent errors.

use bytes::Bytes;
use pforte_oauth::Viewer;
use pingora::{Error, Result, proxy::Session};

use crate::{
    config::UpstreamKind,
    console::{
        self, MAX_FORM_BYTES, Page,
        audit_view::{self, AuditFilter},
        manage,
        pages::{self, Frame, Health, RouteRow, Section, ToolRow},
        stats::{self, RecentError},
        tool_changes,
    },
    limit::Class,
    logging,
    policy::Annotation,
};

use super::{Gateway, Outcome, RequestCtx};

mod actions;
mod approvals;
mod tools;
mod virtuals;

type Response = http::Response<Bytes>;

/// A POST's form fields.
pub(super) struct Form(Vec<(String, String)>);

impl Form {
    pub(super) fn parse(body: &[u8]) -> Self {
        Self(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    pub(super) fn get(&self, key: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }
    fn all(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// The page's message after an action, named in the redirect (`done=`), so nothing the form
/// sent is echoed.
fn notice(done: &str) -> (Option<String>, Option<String>) {
    let ok = |s: &str| (Some(s.to_owned()), None);
    let bad = |s: &str| (None, Some(s.to_owned()));
    match done {
        "revoked" => ok("Revoked. Its tokens are refused within a second."),
        "tool-approved" => ok("Approved. The gateway serves the tool as it is now defined."),
        "not-found" => bad("Nothing active by that name (already revoked?)."),
        "nothing-pending" => bad("Nothing pending by that name (already approved?)."),
        "store" => bad("The store did not answer; nothing was changed. Try again."),
        "approved" => ok("Approved. The caller's next identical call passes, once."),
        "rejected" => ok("Rejected. The caller's next identical call is refused."),
        "too-late" => bad("This call is no longer waiting (decided already, or expired)."),
        "own-call" => {
            bad("This is your own call: another approver approves it (you may reject it).")
        }
        _ => (None, None),
    }
}

pub(super) fn query_value(query: &str, key: &str) -> String {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// What a route's upstream is, in a few words (a command route: its program only).
fn upstream_text(kind: &UpstreamKind) -> String {
    match kind {
        UpstreamKind::Http(u) => format!("http://{}{}", u.authority, u.path),
        UpstreamKind::Https { upstream: u, .. } => format!("https://{}{}", u.authority, u.path),
        UpstreamKind::Unix(u) => format!(
            "unix:{}",
            u.socket
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ),
        UpstreamKind::Stdio { command, .. } => {
            format!("command {}", command.first().map_or("", String::as_str))
        }
        UpstreamKind::Replicas { instances, .. } => format!("{} instances", instances.len()),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// The request's `Cookie` header lines.
pub(super) fn cookie_lines(session: &Session) -> Vec<String> {
    session
        .req_header()
        .headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect()
}

impl Gateway {
    /// The user signed in to the authorization server in this browser (its login cookie).
    pub(super) async fn signed_in(
        &self,
        session: &Session,
    ) -> Result<Option<pforte_oauth::Viewer>, pforte_oauth::StoreError> {
        let lines = cookie_lines(session);
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        self.oauth.server().viewer(&refs).await
    }

    /// A request for `/admin…`.
    pub(super) async fn console(
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
        let page = Page::of(req.uri.path());
        let query = req.uri.query().unwrap_or_default().to_owned();
        let viewer = match self.signed_in(session).await {
            Ok(Some(v)) => v,
            // Signed out: the authorization server's sign-in, which sets the same cookie.
            Ok(None) if page.for_approvers() => {
                return Ok(Outcome::Passed(console::redirect(
                    "/account?next=%2Fadmin%2Fapprovals",
                )));
            }
            Ok(None) => return Ok(Outcome::Passed(console::redirect("/account?next=%2Fadmin"))),
            Err(e) => {
                tracing::warn!(error = %e, "console: the oauth store did not answer");
                return Ok(Outcome::Passed(store_down()));
            }
        };
        if page.for_approvers() && !viewer.approver {
            ctx.refused = Some("not_approver");
            return Ok(Outcome::Passed(console::refusal(
                403,
                "Approvers only",
                &console::not_approver_hint(&viewer.display_name),
            )));
        }
        if !viewer.admin && !page.for_approvers() {
            ctx.refused = Some("not_admin");
            return Ok(Outcome::Passed(console::refusal(
                403,
                "Admins only",
                &console::not_admin_hint(&viewer.display_name, &viewer.username),
            )));
        }
        if !post {
            return Ok(Outcome::Passed(
                self.console_page(&page, &query, &viewer).await,
            ));
        }
        match self.limit(Class::OAuth, &ctx.ip_key()).await {
            Ok(rate) => ctx.rate = rate,
            Err(rejection) => return Ok(Outcome::Refuse(rejection)),
        }
        let Some(body) = read_form(session).await? else {
            return Ok(Outcome::Passed(console::refusal(
                413,
                "Form too large",
                "The form is larger than the console accepts.",
            )));
        };
        let form = Form::parse(&body);
        if !self.oauth.server().csrf_ok(&viewer, form.get("csrf")) {
            ctx.refused = Some("csrf");
            return Ok(Outcome::Passed(console::refusal(
                403,
                "Invalid form",
                "The form's security token is missing or wrong. Open the console again.",
            )));
        }
        Ok(Outcome::Passed(
            self.console_action(&page, &form, &viewer, ctx.client_ip)
                .await,
        ))
    }

    async fn console_page(&self, page: &Page, query: &str, viewer: &Viewer) -> Response {
        let section = match page {
            Page::Overview | Page::Route(_) => Section::Overview,
            Page::Audit => Section::Audit,
            Page::Tokens => Section::Tokens,
            Page::Grants => Section::Grants,
            Page::Users => Section::Users,
            Page::Clients => Section::Clients,
            Page::Tools => Section::Tools,
            Page::Approvals | Page::Approval(_) => Section::Approvals,
            Page::NotFound => {
                return console::refusal(404, "Not found", "The console has no such page.");
            }
        };
        let (notice, error) = notice(&query_value(query, "done"));
        let (title, body) = match page {
            Page::Overview => {
                let virtuals = console::virtuals::virtuals_section(&self.virtual_rows());
                let overview = pages::overview(&self.overview().await);
                ("Overview", overview + &virtuals)
            }
            Page::Route(name) => match self.settings.routes.iter().position(|r| &r.name == name) {
                Some(i) => ("Route", pages::route_page(&self.route_detail(i).await)),
                None => return console::refusal(404, "No such route", "No route has that name."),
            },
            Page::Audit => (
                "Audit log",
                pages::audit_page(&self.audit_page(query).await),
            ),
            Page::Tokens => match self.tokens_page(viewer, None, notice, error).await {
                Some(p) => ("Tokens", manage::tokens_page(&p)),
                None => return store_down(),
            },
            Page::Grants => match self.grant_rows().await {
                Some(grants) => (
                    "Grants",
                    manage::grants_page(&manage::GrantsPage {
                        grants,
                        csrf: viewer.csrf.clone(),
                        notice,
                        error,
                    }),
                ),
                None => return store_down(),
            },
            Page::Users => match self.oauth.admin().list_users().await {
                Ok(users) => (
                    "Users",
                    manage::users_page(
                        &users
                            .into_iter()
                            .map(|u| manage::UserRow {
                                source: match &u.external {
                                    Some(e) => e.origin(),
                                    None if u.password => "local password".to_owned(),
                                    None => "no password".to_owned(),
                                },
                                name: u.username,
                                admin: u.admin,
                                created: console::when(u.created_at * 1000),
                            })
                            .collect::<Vec<_>>(),
                    ),
                ),
                Err(_) => return store_down(),
            },
            Page::Approvals => match self.approvals_page(notice, error).await {
                Some(p) => ("Approvals", console::approvals::approvals_page(&p)),
                None => return store_down(),
            },
            Page::Approval(id) => match self.approval_detail(id, viewer, notice, error).await {
                Some(Some(p)) => ("Approval", console::approvals::approval_page(&p)),
                Some(None) => {
                    return console::refusal(404, "No such approval", "No held call has that id.");
                }
                None => return store_down(),
            },
            Page::Clients => match self.oauth.admin().list_clients().await {
                Ok(clients) => (
                    "OAuth clients",
                    manage::clients_page(
                        &clients
                            .into_iter()
                            .map(|c| manage::ClientRow {
                                name: c.client_name.unwrap_or_default(),
                                auth: c.auth_method.as_str().to_owned(),
                                redirects: c.redirect_uris,
                                created: console::when(c.created_at * 1000),
                                last_used: console::when(c.last_used_at * 1000),
                                id: c.client_id,
                            })
                            .collect::<Vec<_>>(),
                    ),
                ),
                Err(_) => return store_down(),
            },
            Page::Tools => match self.tool_changes(viewer, notice, error).await {
                Some(p) => ("Tool changes", tool_changes::tool_changes_page(&p)),
                None => return store_down(),
            },
            Page::NotFound => {
                return console::refusal(404, "Not found", "The console has no such page.");
            }
        };
        let frame = Frame {
            user: &viewer.display_name,
            csrf: &viewer.csrf,
            section: Some(section),
        };
        console::html(200, pages::document(title, &frame, &body))
    }

    /// Every route with its health (a balanced route's instances from the prober; another
    /// route: does its upstream accept a connection now).
    async fn route_rows(&self) -> Vec<RouteRow> {
        let mut rows = Vec::with_capacity(self.settings.routes.len());
        for (i, (route, edge)) in self.settings.routes.iter().zip(&self.routes).enumerate() {
            let (health, instances) = match &edge.instances {
                Some(set) => {
                    let list: Vec<(String, bool)> = set
                        .all()
                        .iter()
                        .enumerate()
                        .map(|(n, inst)| (inst.url.clone(), set.is_healthy(n)))
                        .collect();
                    let up = list.iter().filter(|(_, up)| *up).count();
                    let health = match up {
                        0 => Health::Down,
                        n if n == list.len() => Health::Up,
                        n => Health::Partly(n, list.len()),
                    };
                    (health, list)
                }
                None if super::builtin::probe(route.upstream.primary())
                    .await
                    .is_ok() =>
                {
                    (Health::Up, Vec::new())
                }
                None => (Health::Down, Vec::new()),
            };
            rows.push(RouteRow {
                name: route.name.clone(),
                title: route.title.clone(),
                path: route.path.clone(),
                upstream: upstream_text(&route.upstream),
                health,
                instances,
                tools: self.edge.catalogs.get(i).map_or(0, |c| c.len()),
                children: self
                    .edge
                    .console
                    .children
                    .get(i)
                    .and_then(Option::as_ref)
                    .map(crate::stdio::LiveChildren::count),
            });
        }
        rows
    }

    async fn overview(&self) -> pages::Overview {
        let now = self.clock.now_ms();
        let hour = self.edge.console.stats.last_hour(now);
        pages::Overview {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime: console::uptime(now.saturating_sub(self.edge.console.started_ms)),
            routes: self.route_rows().await,
            sessions: self.edge.sessions.live(),
            requests_hour: hour.iter().map(|m| m.requests).sum(),
            errors_hour: hour.iter().map(|m| m.server_errors).sum(),
            refusals_hour: hour.iter().map(|m| m.refusals).sum(),
            charts: console::charts(&hour),
        }
    }

    async fn route_detail(&self, i: usize) -> pages::RouteDetail {
        let route = self.route_rows().await.swap_remove(i);
        let policy = &self.routes[i].policy;
        let rule_text = |name: &str| -> String {
            match self.settings.routes[i].tools.get(name) {
                Some(r) if r.deny => "denied to everyone".into(),
                Some(r) if !r.users.is_empty() => format!("only {}", r.users.join(", ")),
                _ => String::new(),
            }
        };
        let mut tools: Vec<ToolRow> = self
            .edge
            .catalogs
            .get(i)
            .map(|c| c.tools())
            .unwrap_or_default()
            .into_iter()
            .map(|(name, read_only)| {
                let annotation = if read_only {
                    Annotation::ReadOnly
                } else {
                    Annotation::Writes
                };
                let (scopes, _) = policy.needed_for_tool(&name, annotation);
                ToolRow {
                    rule: rule_text(&name),
                    scopes,
                    read_only: Some(read_only),
                    name,
                }
            })
            .collect();
        for name in self.settings.routes[i].tools.keys() {
            if !tools.iter().any(|t| &t.name == name) {
                let (scopes, _) = policy.needed_for_tool(name, Annotation::Unknown);
                tools.push(ToolRow {
                    rule: rule_text(name),
                    scopes,
                    read_only: None,
                    name: name.clone(),
                });
            }
        }
        let errors = self
            .edge
            .console
            .errors
            .of(i)
            .into_iter()
            .map(|e| (console::when(e.time_ms), e))
            .collect();
        pages::RouteDetail {
            route,
            tools,
            errors,
            awaits_person: self.edge.catalogs.get(i).is_some_and(|c| c.awaits_person()),
        }
    }

    async fn audit_page(&self, query: &str) -> pages::AuditPage {
        let filter = AuditFilter::from_query(query);
        let routes = self
            .settings
            .routes
            .iter()
            .map(|r| r.name.clone())
            .collect();
        let Some(path) = self.edge.console.audit_file.clone() else {
            return pages::AuditPage {
                filter,
                rows: Vec::new(),
                more: false,
                routes,
                unavailable: Some("The audit log is not written to a file here (audit_log is \"stdout\" or \"off\").".into()),
            };
        };
        match blocking(move || audit_view::read_newest(&path)).await {
            Some(Ok(lines)) => {
                let (rows, more) = audit_view::page(lines.iter().map(String::as_str), &filter);
                pages::AuditPage {
                    filter,
                    rows,
                    more,
                    routes,
                    unavailable: None,
                }
            }
            Some(Err(e)) => pages::AuditPage {
                filter,
                rows: Vec::new(),
                more: false,
                routes,
                unavailable: Some(format!("The audit log could not be read: {e}")),
            },
            None => pages::AuditPage {
                filter,
                rows: Vec::new(),
                more: false,
                routes,
                unavailable: Some("The audit log could not be read.".into()),
            },
        }
    }

    async fn tokens_page(
        &self,
        viewer: &Viewer,
        created: Option<(String, String)>,
        notice: Option<String>,
        error: Option<String>,
    ) -> Option<manage::TokensPage> {
        let store = self.edge.console.tokens.clone()?;
        let list = blocking(move || store.list()).await?.ok()?;
        let secs = |s: u64| console::when(s * 1000);
        Some(manage::TokensPage {
            tokens: list
                .into_iter()
                .map(|t| manage::TokenRow {
                    created: secs(t.created_at),
                    expires: t.expires_at.map(secs),
                    revoked: t.revoked_at.map(secs),
                    name: t.name,
                    scopes: t.scopes,
                    routes: t.routes,
                })
                .collect(),
            created,
            scopes: self.settings.scopes.clone(),
            routes: self
                .settings
                .routes
                .iter()
                .map(|r| r.name.clone())
                .collect(),
            csrf: viewer.csrf.clone(),
            notice,
            error,
        })
    }

    async fn grant_rows(&self) -> Option<Vec<manage::GrantRow>> {
        let grants = self
            .oauth
            .admin()
            .list_grants(&pforte_oauth::GrantFilter::default())
            .await
            .ok()?;
        let secs = |s: u64| console::when(s * 1000);
        Some(
            grants
                .into_iter()
                .map(|g| manage::GrantRow {
                    how: match &g.granted_by {
                        pforte_oauth::GrantedBy::Consent => "consent".to_owned(),
                        pforte_oauth::GrantedBy::Enterprise { issuer } => {
                            format!("enterprise ({issuer})")
                        }
                    },
                    created: secs(g.created_at),
                    last_used: secs(g.last_used_at),
                    family_id: g.family_id,
                    user: g.username,
                    client: g.client_id,
                    scopes: g.scopes,
                    resource: g.resource,
                })
                .collect(),
        )
    }

    /// What a finished request leaves for the console: its count in the last hour, and a
    /// route's failure or refusal in that route's recent errors.
    pub(super) fn console_note(&self, e: Option<&Error>, ctx: &RequestCtx, status: u16) {
        let failure = e.map(|e| !super::is_client_side(e));
        let outcome = stats::Outcome::of(ctx.refused.is_some(), status, failure);
        let took = ctx.started.elapsed().as_millis() as u64;
        self.edge
            .console
            .stats
            .record(ctx.arrived_ms, took, outcome);
        if outcome == stats::Outcome::Ok {
            return;
        }
        if let Some(i) = ctx.mcp_route {
            let what = match (ctx.refused, e) {
                (Some(reason), _) => format!("refused: {reason}"),
                (None, Some(e)) => logging::untrusted(&e.to_string()).to_string(),
                (None, None) => "server error".to_owned(),
            };
            self.edge.console.errors.push(
                i,
                RecentError {
                    time_ms: ctx.arrived_ms,
                    request_id: ctx.request_id.clone(),
                    status,
                    what,
                },
            );
        }
    }
}

fn store_down() -> Response {
    console::refusal(
        503,
        "Store unavailable",
        "The store did not answer. Try again in a moment.",
    )
}

/// The form, whole; `None` when larger than the console takes.
pub(super) async fn read_form(session: &mut Session) -> Result<Option<Bytes>> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = session.read_request_body().await? {
        if body.len() + chunk.len() > MAX_FORM_BYTES {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_and_notices() {
        let f = Form::parse(b"step=create&scope=mcp%3Aread&scope=mcp:write&name=ci");
        assert_eq!(f.get("step"), "create");
        assert_eq!(f.all("scope"), ["mcp:read", "mcp:write"]);
        assert_eq!(f.get("missing"), "");
        assert!(notice("revoked").0.is_some() && notice("store").1.is_some());
        assert_eq!(
            notice("<script>"),
            (None, None),
            "nothing from the query is echoed"
        );
        assert_eq!(query_value("a=1&done=revoked", "done"), "revoked");
    }
}
