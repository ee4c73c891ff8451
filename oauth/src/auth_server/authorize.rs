//! `/authorize` orchestration: the request check, the login session, login and consent.

use std::net::IpAddr;
use url::Url;

use super::{AuthServer, ClientLookup};
use crate::crypto::{self, Secret};
use crate::error::{OAuthError, StoreError};
use crate::model::{CodeRecord, SessionRecord};
use crate::observe::{AuditEntry, Event};
use crate::pages::{ConsentView, ErrorView, LoginView};
use crate::protocol::authorize::{self, AuthorizeFailure, AuthorizeRequest};
use crate::protocol::{Client, Params};
use crate::roles::{self, Member};
use crate::throttle::LimitClass;

/// A logged-in session: its hash is a row in the store.
pub(super) const SESSION_PREFIX: &str = "pfs_";
/// An anonymous session (before login): a random cookie value the store never sees; the
/// login form's CSRF token is its MAC, so a cookie-less `GET /authorize` stores nothing.
pub(super) const ANON_PREFIX: &str = "pfa_";

/// A page to render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Page {
    Login(LoginView),
    Consent(Box<ConsentView>),
    Error(ErrorView),
    Account(Box<crate::pages::account::AccountView>),
    AccountLogin(crate::pages::account::AccountLoginView),
}

/// The result of an `/authorize` request.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum AuthorizeOutcome {
    /// Render `page` with HTTP `status`.
    Page { page: Page, status: u16 },
    /// 303 See Other to `location`.
    Redirect { location: String },
}

impl std::fmt::Debug for AuthorizeOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthorizeOutcome::Page { page, status } => f
                .debug_struct("Page")
                .field("page", page)
                .field("status", status)
                .finish(),
            // The query may carry an authorization code: never print it.
            AuthorizeOutcome::Redirect { location } => {
                let without_query = location.split('?').next().unwrap_or_default();
                f.debug_struct("Redirect")
                    .field("location", &format!("{without_query}?<redacted>"))
                    .finish()
            }
        }
    }
}

/// A new login-session cookie value to set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionCookie(pub Secret);

/// An outcome plus, possibly, a new session cookie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AuthorizeResponse {
    pub outcome: AuthorizeOutcome,
    pub set_session: Option<SessionCookie>,
    /// Seconds for `Retry-After` (throttled answers, status 429).
    pub retry_after: Option<u64>,
}

impl From<AuthorizeOutcome> for AuthorizeResponse {
    fn from(outcome: AuthorizeOutcome) -> Self {
        AuthorizeResponse {
            outcome,
            set_session: None,
            retry_after: None,
        }
    }
}

impl AuthorizeResponse {
    fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
}

fn too_many(retry_after_secs: u64) -> AuthorizeResponse {
    AuthorizeResponse::from(error_page(
        429,
        "Too many requests",
        format!("Too many requests from your network. Try again in {retry_after_secs} s."),
    ))
    .retry_after(retry_after_secs)
}

pub(super) fn error_page(status: u16, title: &str, message: impl Into<String>) -> AuthorizeOutcome {
    AuthorizeOutcome::Page {
        page: Page::Error(ErrorView {
            title: title.into(),
            message: message.into(),
        }),
        status,
    }
}

pub(super) fn unavailable(e: &StoreError) -> AuthorizeOutcome {
    tracing::warn!(error = %e, "authorize: store unavailable");
    error_page(
        503,
        "Temporarily unavailable",
        "The sign-in service is temporarily unavailable. Please try again shortly.",
    )
}

/// Why a sign-in was refused: a message for the form, or the store is down.
pub(super) enum LoginRefusal {
    Page {
        text: String,
        status: u16,
        retry_after: Option<u64>,
    },
    Unavailable(StoreError),
}

impl LoginRefusal {
    fn page(text: &str, status: u16) -> Self {
        LoginRefusal::Page {
            text: text.to_owned(),
            status,
            retry_after: None,
        }
    }
}

/// What a password check found.
enum Verified {
    Yes(String),
    No,
    /// No verification slot became free in time.
    Busy,
    Unavailable(StoreError),
}

/// Human descriptions of the scopes on the consent page.
pub(super) fn describe(scope: &str) -> String {
    match scope {
        "mcp:read" => "read resources and use tools that only read".into(),
        "mcp:write" => "use tools that make changes".into(),
        other => format!("access granted as {other}"),
    }
}

impl AuthServer {
    async fn check_request(
        &self,
        params: &Params,
        client_ip: Option<IpAddr>,
    ) -> Result<(Client, AuthorizeRequest), AuthorizeResponse> {
        let client_id = authorize::client_id(params).map_err(|f| self.failure(f))?;
        let client = match self.client(client_id, client_ip).await {
            Ok(c) => c,
            Err(ClientLookup::Unknown) => {
                return Err(error_page(
                    400,
                    "Unknown application",
                    "This application is not registered here.",
                )
                .into());
            }
            Err(ClientLookup::Document(e)) => {
                return Err(error_page(
                    400,
                    "Unknown application",
                    format!(
                        "The application's metadata could not be fetched ({}).",
                        e.public_reason()
                    ),
                )
                .into());
            }
            Err(ClientLookup::Throttled { retry_after_secs }) => {
                return Err(too_many(retry_after_secs));
            }
            Err(ClientLookup::Store(e)) => return Err(unavailable(&e).into()),
        };
        let req = authorize::validate(params, &client, &self.cfg).map_err(|f| self.failure(f))?;
        Ok((client, req))
    }

    fn failure(&self, f: AuthorizeFailure) -> AuthorizeResponse {
        match f {
            AuthorizeFailure::ErrorPage(msg) => error_page(400, "Invalid request", msg).into(),
            AuthorizeFailure::Redirect { location, .. } => {
                AuthorizeOutcome::Redirect { location }.into()
            }
        }
    }

    /// The session a cookie names: an anonymous one (never stored, not logged in) or a stored
    /// logged-in one that has not expired.
    pub(super) async fn session(
        &self,
        cookie: Option<&str>,
    ) -> Result<Option<(String, SessionRecord)>, StoreError> {
        let well_formed = |c: &&str| {
            c.len() < 100
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if let Some(id) = cookie
            .filter(|c| c.starts_with(ANON_PREFIX))
            .filter(well_formed)
        {
            let now = self.now();
            return Ok(Some((
                id.to_owned(),
                SessionRecord {
                    session_hash: String::new(),
                    username: None,
                    created_at: now,
                    expires_at: now + self.cfg.session_ttl_secs,
                    oidc: None,
                },
            )));
        }
        let Some(id) = cookie
            .filter(|c| c.starts_with(SESSION_PREFIX))
            .filter(well_formed)
        else {
            return Ok(None);
        };
        let rec = self.store.get_session(&crypto::hash_secret(id)).await?;
        Ok(rec
            .filter(|r| r.expires_at > self.now())
            .map(|r| (id.to_owned(), r)))
    }

    /// A new logged-in session, stored.
    pub(super) async fn new_session(&self, username: String) -> Result<Secret, StoreError> {
        let id = crypto::random_token(self.entropy.as_ref(), SESSION_PREFIX);
        let now = self.now();
        self.store
            .put_session(&SessionRecord {
                session_hash: crypto::hash_secret(id.expose()),
                username: Some(username),
                created_at: now,
                expires_at: now + self.cfg.session_ttl_secs,
                oidc: None,
            })
            .await?;
        Ok(id)
    }

    /// The OpenID providers' origins: the login forms' buttons redirect there (CSP
    /// `form-action`).
    pub(super) fn provider_origins(&self) -> Vec<String> {
        self.cfg
            .login
            .oidc
            .iter()
            .filter_map(|p| Url::parse(&p.issuer).ok())
            .map(|u| u.origin().ascii_serialization())
            .collect()
    }

    fn login_page(
        &self,
        client: &Client,
        request: &str,
        session_id: &str,
        username: Option<&str>,
        error: Option<&str>,
        status: u16,
    ) -> AuthorizeOutcome {
        AuthorizeOutcome::Page {
            page: Page::Login(LoginView {
                deployment: self.cfg.deployment_name().to_owned(),
                client_name: client.display_name().to_owned(),
                request: request.to_owned(),
                csrf: self.key.csrf_token(session_id),
                username: username.map(str::to_owned),
                error: error.map(str::to_owned),
                providers: self.oidc.names(),
                provider_origins: self.provider_origins(),
                local_passwords: self.cfg.login.local_passwords,
            }),
            status,
        }
    }

    fn consent_page(
        &self,
        client: &Client,
        req: &AuthorizeRequest,
        request: &str,
        session_id: &str,
        username: &str,
        already_granted: Vec<String>,
    ) -> AuthorizeOutcome {
        let url = Url::parse(&req.redirect_uri).ok();
        let redirect_host = url
            .as_ref()
            .and_then(|u| {
                u.host_str().map(|h| match u.port() {
                    Some(p) => format!("{h}:{p}"),
                    None => h.to_owned(),
                })
            })
            .unwrap_or_default();
        let redirect_origin = url
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default();
        AuthorizeOutcome::Page {
            page: Page::Consent(Box::new(ConsentView {
                deployment: self.cfg.deployment_name().to_owned(),
                client_name: client.display_name().to_owned(),
                client_id: client.client_id.clone(),
                redirect_host,
                redirect_origin,
                scopes: req
                    .scopes
                    .iter()
                    .map(|s| (s.clone(), describe(s)))
                    .collect(),
                already_granted,
                resource_name: crate::protocol::resource::find(
                    &self.cfg.resource_entries(),
                    &req.resource,
                )
                .and_then(|e| e.title.clone())
                .unwrap_or_else(|| req.resource_name.clone()),
                resource_url: req.resource.clone(),
                username: username.to_owned(),
                request: request.to_owned(),
                csrf: self.key.csrf_token(session_id),
            })),
            status: 200,
        }
    }

    /// Scopes `username` already granted `client_id` for `resource` (active, unexpired grants).
    async fn granted_scopes(
        &self,
        username: &str,
        client_id: &str,
        resource: &str,
    ) -> Result<Vec<String>, StoreError> {
        let resource = crate::protocol::resource::canonical(resource);
        let now = self.now();
        let mut held: Vec<String> = self
            .store
            .list_grants()
            .await?
            .into_iter()
            .filter(|g| {
                g.username == username
                    && g.client_id == client_id
                    && crate::protocol::resource::canonical(&g.resource) == resource
                    && g.revoked_at.is_none()
                    && g.expires_at > now
            })
            .flat_map(|g| g.scopes)
            .collect();
        held.sort();
        held.dedup();
        Ok(held)
    }

    /// The logged-in user of a session, if the user still exists.
    pub(super) async fn session_user(
        &self,
        session: &SessionRecord,
    ) -> Result<Option<String>, StoreError> {
        let Some(name) = &session.username else {
            return Ok(None);
        };
        Ok(self.store.get_user(name).await?.map(|u| u.username))
    }

    /// GET `/authorize?<query>`: an error page, an error redirect, the login page or the
    /// consent page (when the session is logged in).
    ///
    /// Throttled per client IP (`throttle.authorize_per_ip`); stores nothing: before login the
    /// session is an anonymous cookie the store never sees.
    pub(crate) async fn authorize_get(
        &self,
        query: &str,
        session_cookie: Option<&str>,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        let budget = self.budget(LimitClass::Authorize, client_ip, None);
        if let Err(retry) = self.take(&budget).await {
            return too_many(retry);
        }
        let params = Params::parse(query);
        let (client, req) = match self.check_request(&params, client_ip).await {
            Ok(ok) => ok,
            Err(response) => return response,
        };
        let request = params.encode();
        let session = match self.session(session_cookie).await {
            Ok(s) => s,
            Err(e) => return unavailable(&e).into(),
        };
        if let Some((id, rec)) = &session {
            match self.session_user(rec).await {
                Ok(Some(user)) => {
                    let (req, shown) = match self.permitted(&user, req, &client, client_ip).await {
                        Ok(ok) => ok,
                        Err(page) => return page.into(),
                    };
                    let held = match self
                        .granted_scopes(&user, &client.client_id, &req.resource)
                        .await
                    {
                        Ok(held) => held,
                        Err(e) => return unavailable(&e).into(),
                    };
                    return self
                        .consent_page(&client, &req, &request, id, &shown, held)
                        .into();
                }
                Ok(None) => {
                    return self
                        .login_page(&client, &request, id, None, None, 200)
                        .into();
                }
                Err(e) => return unavailable(&e).into(),
            }
        }
        let id = crypto::random_token(self.entropy.as_ref(), ANON_PREFIX);
        AuthorizeResponse {
            outcome: self.login_page(&client, &request, id.expose(), None, None, 200),
            set_session: Some(SessionCookie(id)),
            retry_after: None,
        }
    }

    /// POST `/authorize` (form body): the login or the consent form.
    pub(crate) async fn authorize_post(
        &self,
        body: &str,
        session_cookie: Option<&str>,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        let form = Params::parse(body);
        let field = |n: &str| form.single(n).ok().flatten();
        let (id, session) = match self.session(session_cookie).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return error_page(403, "Session expired", "Your sign-in session has expired or cookies are blocked. Start again from the application.").into();
            }
            Err(e) => return unavailable(&e).into(),
        };
        if !field("csrf").is_some_and(|t| self.key.check_csrf(&id, t)) {
            return error_page(
                403,
                "Invalid form",
                "The form's security token is missing or wrong. Start again from the application.",
            )
            .into();
        }
        let request = field("request").unwrap_or_default().to_owned();
        let params = Params::parse(&request);
        let (client, req) = match self.check_request(&params, client_ip).await {
            Ok(ok) => ok,
            Err(response) => return response,
        };
        match field("step") {
            Some("login") => self.login(&client, &request, &id, &form, client_ip).await,
            Some("oidc") => {
                self.oidc_start(&client.client_id, &request, &id, field("provider"))
                    .await
            }
            Some("consent") => match self.session_user(&session).await {
                Ok(Some(user)) => self
                    .consent(&client, req, &user, field("decision"), client_ip)
                    .await
                    .into(),
                Ok(None) => self
                    .login_page(&client, &request, &id, None, Some("Please sign in."), 401)
                    .into(),
                Err(e) => unavailable(&e).into(),
            },
            _ => error_page(400, "Invalid form", "The form is incomplete.").into(),
        }
    }

    async fn login(
        &self,
        client: &Client,
        request: &str,
        session_id: &str,
        form: &Params,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        let (username, password) = authorize::login_fields(form);
        let username = username.to_owned();
        let password = Secret::new(password);
        let page = |error: &str, status: u16| -> AuthorizeResponse {
            self.login_page(
                client,
                request,
                session_id,
                Some(&username),
                Some(error),
                status,
            )
            .into()
        };
        if !self.cfg.login.local_passwords {
            return page(
                "Password sign-in is turned off here: use one of the buttons above.",
                403,
            );
        }
        let user = match self
            .check_login(&username, &password, client_ip, &client.client_id)
            .await
        {
            Ok(user) => user,
            Err(LoginRefusal::Page {
                text,
                status,
                retry_after,
            }) => {
                let p = page(&text, status);
                return match retry_after {
                    Some(r) => p.retry_after(r),
                    None => p,
                };
            }
            Err(LoginRefusal::Unavailable(e)) => return unavailable(&e).into(),
        };
        // New session id on login (no fixation); a stored old one is dropped.
        if session_id.starts_with(SESSION_PREFIX)
            && let Err(e) = self
                .store
                .delete_session(&crypto::hash_secret(session_id))
                .await
        {
            return unavailable(&e).into();
        }
        match self.new_session(user.clone()).await {
            Ok(id) => {
                tracing::info!(user = %user, client_id = %client.client_id, "login");
                self.observer.event(Event::LoginSucceeded);
                self.observer.audit(&AuditEntry {
                    action: "sign_in",
                    via: Some("password"),
                    user: Some(&user),
                    client_id: Some(&client.client_id),
                    outcome: "success",
                    reason: None,
                    scopes: None,
                    resource: None,
                    client_ip,
                });
                AuthorizeResponse {
                    outcome: AuthorizeOutcome::Redirect {
                        location: format!("/authorize?{request}"),
                    },
                    set_session: Some(SessionCookie(id)),
                    retry_after: None,
                }
            }
            Err(e) => unavailable(&e).into(),
        }
    }

    /// Checks a username and password within the login throttles (failures count per IP and
    /// per user + IP; a success gives its units back); `client_id` names the app (or
    /// `/account`) in the log.
    pub(super) async fn check_login(
        &self,
        username: &str,
        password: &Secret,
        client_ip: Option<IpAddr>,
        client_id: &str,
    ) -> Result<String, LoginRefusal> {
        if username.is_empty() || password.expose().is_empty() {
            return Err(LoginRefusal::page("Enter your username and password.", 400));
        }
        // Before any hashing, one unit of the IP's and of the (user, IP) budget; a right
        // password gives both back, so only failures count and nobody can lock a user out
        // from elsewhere.
        let user_key: String = username.to_lowercase().chars().take(64).collect();
        let ip = self.budget(LimitClass::LoginIp, client_ip, None);
        let user_ip = self.budget(LimitClass::LoginUserIp, client_ip, Some(&user_key));
        let throttled = |retry: u64| {
            self.observer.event(Event::LoginThrottled);
            LoginRefusal::Page {
                text: format!("Too many failed sign-in attempts. Try again in {retry} s."),
                status: 429,
                retry_after: Some(retry),
            }
        };
        if let Err(retry) = self.take(&ip).await {
            return Err(throttled(retry));
        }
        if let Err(retry) = self.take(&user_ip).await {
            self.limiter.refund(&ip).await;
            return Err(throttled(retry));
        }
        let verified = self.verify_login(username, password).await;
        let give_back = |reset_user: bool| async move {
            self.limiter.refund(&ip).await;
            if reset_user {
                self.limiter.reset(&user_ip).await;
            } else {
                self.limiter.refund(&user_ip).await;
            }
        };
        match verified {
            Verified::Yes(user) => {
                give_back(true).await;
                Ok(user)
            }
            Verified::No => {
                tracing::info!(client_id = %client_id, "login failed");
                self.observer.event(Event::LoginFailed);
                self.observer.audit(&AuditEntry {
                    action: "sign_in",
                    via: Some("password"),
                    user: Some(&user_key),
                    client_id: Some(client_id),
                    outcome: "refused",
                    reason: Some("wrong_password: wrong username or password"),
                    scopes: None,
                    resource: None,
                    client_ip,
                });
                Err(LoginRefusal::page("Wrong username or password.", 401))
            }
            Verified::Busy => {
                give_back(false).await;
                Err(throttled(1))
            }
            Verified::Unavailable(e) => {
                give_back(false).await;
                Err(LoginRefusal::Unavailable(e))
            }
        }
    }

    /// Verifies a password (argon2id, at most `max_concurrent_logins` at once); an unknown
    /// user is verified against a dummy hash, so both take the same time.
    async fn verify_login(&self, username: &str, password: &Secret) -> Verified {
        let wait = std::time::Duration::from_secs(10);
        let Ok(Ok(_permit)) = tokio::time::timeout(wait, self.logins.acquire()).await else {
            return Verified::Busy;
        };
        let user = match self.store.get_user(username).await {
            Ok(u) => u,
            Err(e) => return Verified::Unavailable(e),
        };
        let phc = match &user {
            Some(u) => u.password_hash.clone(),
            None => self.dummy_hash().await.to_owned(),
        };
        let pw = password.clone();
        let ok = tokio::task::spawn_blocking(move || crypto::verify_password(pw.expose(), &phc))
            .await
            .unwrap_or(false);
        match user.filter(|_| ok) {
            Some(u) => Verified::Yes(u.username),
            None => Verified::No,
        }
    }

    /// The grants `username` holds that are neither revoked nor expired at `now`.
    async fn active_grants(&self, username: &str, now: u64) -> Result<u64, StoreError> {
        let grants = self.store.list_grants().await?;
        Ok(grants
            .iter()
            .filter(|g| g.username == username && g.revoked_at.is_none() && g.expires_at > now)
            .count() as u64)
    }

    /// `req` narrowed to the scopes `user` may grant, with the name to show for them; or the
    /// page that says why they may not use the resource or grant anything (roles).
    async fn permitted(
        &self,
        user: &str,
        mut req: AuthorizeRequest,
        client: &Client,
        client_ip: Option<IpAddr>,
    ) -> Result<(AuthorizeRequest, String), AuthorizeOutcome> {
        let record = match self.store.get_user(user).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Err(error_page(
                    401,
                    "Signed out",
                    "Your account no longer exists. Start again from the application.",
                ));
            }
            Err(e) => return Err(unavailable(&e)),
        };
        let shown = record.display_name().to_owned();
        let entries = self.cfg.resource_entries();
        if !roles::in_force(&self.cfg.roles, &entries) {
            return Ok((req, shown));
        }
        let member = Member::from(&record);
        let refuse = |reason: &str| {
            self.observer.audit(&AuditEntry {
                action: "consent",
                via: None,
                user: Some(&shown),
                client_id: Some(&client.client_id),
                outcome: "refused",
                reason: Some(reason),
                scopes: None,
                resource: Some(&req.resource_name),
                client_ip,
            });
        };
        let wanted = crate::protocol::resource::canonical(&req.resource);
        if let Some(entry) = entries
            .iter()
            .find(|e| crate::protocol::resource::canonical(&e.url) == wanted)
            && !roles::may_use(entry, &self.cfg.roles, &member)
        {
            refuse("route_not_allowed");
            return Err(error_page(
                403,
                "Not allowed",
                format!(
                    "Your account {shown} may not use {}. If you need it, ask the operator of                      this gateway for access.",
                    entry.name
                ),
            ));
        }
        let narrowed = roles::grantable(&self.cfg.roles, &member).narrow(&req.scopes);
        if narrowed.is_empty() {
            refuse("no_grantable_scope");
            return Err(error_page(
                403,
                "Nothing you may grant",
                format!(
                    "Your account {shown} may not grant any of the access {} asks for ({}).                      Ask the operator of this gateway for a role that allows it.",
                    client.display_name(),
                    req.scopes.join(" ")
                ),
            ));
        }
        req.scopes = narrowed;
        Ok((req, shown))
    }

    async fn consent(
        &self,
        client: &Client,
        req: AuthorizeRequest,
        username: &str,
        decision: Option<&str>,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeOutcome {
        let iss = &self.cfg.issuer;
        let (req, shown) = match self.permitted(username, req, client, client_ip).await {
            Ok(ok) => ok,
            Err(page) => return page,
        };
        let audit = |outcome: &str, reason: Option<&str>, scopes: Option<&[String]>| {
            self.observer.audit(&AuditEntry {
                action: "consent",
                via: None,
                user: Some(&shown),
                client_id: Some(&client.client_id),
                outcome,
                reason,
                scopes,
                resource: Some(&req.resource_name),
                client_ip,
            });
        };
        match decision {
            Some("approve") => {}
            Some("deny") => {
                audit("denied", None, None);
                tracing::info!(user = %username, client_id = %client.client_id, "consent denied");
                let err = OAuthError::AccessDenied("the user denied the request".into());
                return AuthorizeOutcome::Redirect {
                    location: authorize::error_location(
                        &req.redirect_uri,
                        &err,
                        req.state.as_deref(),
                        iss,
                    ),
                };
            }
            _ => return error_page(400, "Invalid form", "Choose Approve or Deny."),
        }
        let now = self.now();
        match self.active_grants(username, now).await {
            Ok(held) if held >= self.cfg.max_grants_per_user => {
                audit("refused", Some("too_many_connected_apps"), None);
                tracing::info!(user = %username, client_id = %client.client_id, held, "consent refused: too many connected apps");
                return error_page(
                    403,
                    "Too many connected apps",
                    format!(
                        "Your account already has {held} connected {}, the most this server \
                         allows. Ask the operator to revoke one you no longer use, then try again.",
                        if held == 1 { "app" } else { "apps" }
                    ),
                );
            }
            Ok(_) => {}
            Err(e) => return unavailable(&e),
        }
        let code = self.new_code();
        let record = CodeRecord {
            code_hash: crypto::hash_secret(code.expose()),
            client_id: client.client_id.clone(),
            username: username.to_owned(),
            redirect_uri: req.redirect_uri.clone(),
            redirect_uri_explicit: req.redirect_uri_explicit,
            code_challenge: req.code_challenge.clone(),
            scopes: req.scopes.clone(),
            resource: req.resource.clone(),
            family_id: crypto::random_id(self.entropy.as_ref()),
            issued_at: now,
            expires_at: now + self.cfg.code_ttl_secs,
            used: false,
        };
        if let Err(e) = self.store.put_code(&record).await {
            return unavailable(&e);
        }
        if let Err(e) = self.store.touch_client(&client.client_id, now).await {
            tracing::warn!(error = %e, "could not record client use");
        }
        audit("approved", None, Some(&record.scopes));
        tracing::info!(user = %username, client_id = %client.client_id, grant = %record.family_id, "consent approved");
        self.observer.event(Event::CodeIssued);
        AuthorizeOutcome::Redirect {
            location: authorize::code_location(
                &req.redirect_uri,
                code.expose(),
                req.state.as_deref(),
                iss,
            ),
        }
    }
}
