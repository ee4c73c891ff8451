//! `/account` orchestration: sign-in with the login session of `/authorize`, the list of the
//! user's grants (an admin's: everyone's, filtered), revoking one (its tokens are refused
//! within the validator's 1 s cache), the local password, sign-out. Every POST carries the
//! session's CSRF token; answers to POSTs are 303 redirects back to the page.

use std::net::IpAddr;

use pforte_clock::UtcDateTime;
use url::Url;

use super::AuthServer;
use super::authorize::{
    ANON_PREFIX, AuthorizeOutcome, AuthorizeResponse, LoginRefusal, Page, SESSION_PREFIX,
    SessionCookie, error_page, unavailable,
};
use crate::admin::MIN_PASSWORD_CHARS;
use crate::crypto::{self, Secret};
use crate::error::StoreError;
use crate::model::{GrantRecord, GrantedBy, NO_PASSWORD, UserRecord};
use crate::observe::{AuditEntry, Event};
use crate::pages::account::{AccountLoginView, AccountView, GrantRow};
use crate::protocol::cimd::is_document_client_id;
use crate::protocol::{Params, resource};

/// The page's messages after a POST, named in the redirect's query (`done=`), so nothing the
/// request sent is echoed.
fn notice(done: Option<&str>) -> (Option<String>, Option<String>) {
    let ok = |s: &str| (Some(s.to_owned()), None);
    let bad = |s: &str| (None, Some(s.to_owned()));
    match done {
        Some("revoked") => ok("Access revoked. The app's tokens stop working within a second."),
        Some("password") => ok("Password changed."),
        Some("wrong-password") => bad("The current password is wrong."),
        Some("throttled") => bad("Too many wrong passwords. Try again in a minute."),
        Some("mismatch") => bad("The two new passwords differ."),
        Some("weak") => bad("The new password must have at least 8 characters."),
        Some("not-yours") => bad("That grant is not yours (or no longer exists)."),
        Some("external") => {
            bad("Your account signs in with an identity provider: change its password there.")
        }
        _ => (None, None),
    }
}

/// Where a sign-in at `/account` may continue besides `/account` itself: only the gateway's
/// operator console and its list of connected upstream services (a fixed list, so the
/// parameter can never redirect anywhere else).
fn next_page(asked: &str) -> Option<&'static str> {
    match asked {
        "/admin" => Some("/admin"),
        "/connections" => Some("/connections"),
        "/admin/approvals" => Some("/admin/approvals"),
        _ => None,
    }
}

fn redirect(location: &str) -> AuthorizeResponse {
    AuthorizeOutcome::Redirect {
        location: location.to_owned(),
    }
    .into()
}

fn when(secs: u64) -> String {
    let rfc = UtcDateTime::from_unix_secs(secs).rfc3339();
    // 2026-12-03T10:00:00Z → 2026-12-03 10:00 UTC
    format!(
        "{} {} UTC",
        &rfc[..10.min(rfc.len())],
        rfc.get(11..16).unwrap_or_default()
    )
}

fn host_of(uri: &str) -> String {
    Url::parse(uri)
        .ok()
        .and_then(|u| {
            u.host_str().map(|h| match u.port() {
                Some(p) => format!("{h}:{p}"),
                None => h.to_owned(),
            })
        })
        .unwrap_or_default()
}

/// Which grants the page lists: the viewer's own, or (admins, `all=1`) everyone's matching the
/// filter; only active ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Listing {
    all_users: bool,
    user: String,
    client: String,
}

impl Listing {
    fn from_query(params: &Params, admin: bool) -> Self {
        let field = |n: &str| {
            params
                .single(n)
                .ok()
                .flatten()
                .unwrap_or_default()
                .trim()
                .to_owned()
        };
        Listing {
            all_users: admin && field("all") == "1",
            user: field("user"),
            client: field("client"),
        }
    }

    fn shows(&self, viewer: &str, g: &GrantRecord, now: u64) -> bool {
        let active = g.revoked_at.is_none() && g.expires_at > now;
        let whose = if self.all_users {
            (self.user.is_empty() || g.username == self.user)
                && (self.client.is_empty() || g.client_id == self.client)
        } else {
            g.username == viewer
        };
        active && whose
    }
}

impl AuthServer {
    /// Whether `user` is an admin at `/account`: the local admin flag, or a role with
    /// `admin = true` (`[oauth.roles]`).
    pub(super) fn is_admin(&self, user: &UserRecord) -> bool {
        user.admin || crate::roles::admin(&self.cfg.roles, &crate::roles::Member::from(user))
    }

    /// The signed-in user of a session cookie, with the session id; `Ok(None)` when the cookie
    /// is missing, anonymous, expired or its user is gone.
    async fn account_user(
        &self,
        cookie: Option<&str>,
    ) -> Result<(Option<String>, Option<UserRecord>), StoreError> {
        let Some((id, rec)) = self.session(cookie).await? else {
            return Ok((None, None));
        };
        let user = match self.session_user(&rec).await? {
            Some(name) => self.store.get_user(&name).await?,
            None => None,
        };
        Ok((Some(id), user))
    }

    fn account_login(
        &self,
        session_id: &str,
        username: Option<&str>,
        error: Option<&str>,
        status: u16,
        next: Option<&'static str>,
    ) -> AuthorizeOutcome {
        AuthorizeOutcome::Page {
            page: Page::AccountLogin(AccountLoginView {
                deployment: self.cfg.deployment_name().to_owned(),
                csrf: self.key.csrf_token(session_id),
                username: username.map(str::to_owned),
                error: error.map(str::to_owned),
                providers: self.oidc.names(),
                provider_origins: self.provider_origins(),
                local_passwords: self.cfg.login.local_passwords,
                next,
            }),
            status,
        }
    }

    /// GET `/account?<query>`.
    pub(crate) async fn account_get(&self, query: &str, cookie: Option<&str>) -> AuthorizeResponse {
        let (id, user) = match self.account_user(cookie).await {
            Ok(found) => found,
            Err(e) => return unavailable(&e).into(),
        };
        let (Some(id), Some(user)) = (id.clone(), user) else {
            let next = Params::parse(query)
                .single("next")
                .ok()
                .flatten()
                .and_then(next_page);
            return match id.filter(|i| i.starts_with(ANON_PREFIX)) {
                Some(anon) => self.account_login(&anon, None, None, 200, next).into(),
                None => {
                    let anon = crypto::random_token(self.entropy.as_ref(), ANON_PREFIX);
                    AuthorizeResponse {
                        outcome: self.account_login(anon.expose(), None, None, 200, next),
                        set_session: Some(SessionCookie(anon)),
                        retry_after: None,
                    }
                }
            };
        };
        let params = Params::parse(query);
        let admin = self.is_admin(&user);
        let listing = Listing::from_query(&params, admin);
        let (notice, error) = notice(params.single("done").ok().flatten());
        let section = match self.account_section.get() {
            Some(s) => s.html(&user.username, &self.key.csrf_token(&id)).await,
            None => None,
        };
        match self.grant_rows(&user.username, &listing).await {
            Ok(grants) => AuthorizeOutcome::Page {
                page: Page::Account(Box::new(AccountView {
                    deployment: self.cfg.deployment_name().to_owned(),
                    username: user.display_name().to_owned(),
                    admin,
                    all_users: listing.all_users,
                    filter_user: listing.user,
                    filter_client: listing.client,
                    grants,
                    has_password: user.external.is_none() && user.password_hash != NO_PASSWORD,
                    provider: user.external.as_ref().map(|e| e.provider.clone()),
                    csrf: self.key.csrf_token(&id),
                    notice,
                    error,
                    section,
                })),
                status: 200,
            }
            .into(),
            Err(e) => unavailable(&e).into(),
        }
    }

    async fn grant_rows(
        &self,
        viewer: &str,
        listing: &Listing,
    ) -> Result<Vec<GrantRow>, StoreError> {
        let now = self.now();
        let entries = self.cfg.resource_entries();
        let mut rows = Vec::new();
        for g in self.store.list_grants().await? {
            if !listing.shows(viewer, &g, now) {
                continue;
            }
            let (client_name, redirect_host) = self.client_label(&g.client_id).await?;
            let route = resource::find(&entries, &g.resource)
                .map(|e| e.title.clone().unwrap_or_else(|| e.name.clone()))
                .unwrap_or_default();
            let how = match &g.granted_by {
                GrantedBy::Consent => "consent".to_owned(),
                GrantedBy::Enterprise { issuer } => format!("enterprise ({issuer})"),
            };
            rows.push(GrantRow {
                family_id: g.family_id.clone(),
                username: g.username.clone(),
                client_name,
                client_id: g.client_id.clone(),
                redirect_host,
                scopes: g.scopes.clone(),
                route,
                resource: g.resource.clone(),
                first_use: when(g.created_at),
                last_use: when(g.last_used_at),
                how,
            });
        }
        rows.sort_by(|a, b| b.last_use.cmp(&a.last_use));
        Ok(rows)
    }

    /// A client's name and redirect host for the page, without fetching anything: a metadata
    /// document client is named from the cache, or by its URL's host.
    async fn client_label(&self, client_id: &str) -> Result<(String, String), StoreError> {
        if is_document_client_id(client_id) {
            return Ok(match self.cimd.cached(client_id, self.clock.now_ms()) {
                Some(Ok(c)) => (
                    c.display_name().to_owned(),
                    c.redirect_uris
                        .first()
                        .map(|u| host_of(u))
                        .unwrap_or_default(),
                ),
                _ => (host_of(client_id), String::new()),
            });
        }
        Ok(match self.store.get_client(client_id).await? {
            Some(c) => (
                c.client_name
                    .clone()
                    .filter(|n| !n.trim().is_empty())
                    .unwrap_or_else(|| client_id.to_owned()),
                c.redirect_uris
                    .first()
                    .map(|u| host_of(u))
                    .unwrap_or_default(),
            ),
            None => (client_id.to_owned(), String::new()),
        })
    }

    /// POST `/account` (form body): `step` = login, revoke, password or logout.
    pub(crate) async fn account_post(
        &self,
        body: &str,
        cookie: Option<&str>,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        let form = Params::parse(body);
        let field = |n: &str| form.single(n).ok().flatten().unwrap_or_default();
        let (id, user) = match self.account_user(cookie).await {
            Ok(found) => found,
            Err(e) => return unavailable(&e).into(),
        };
        let Some(id) = id else {
            return error_page(
                403,
                "Session expired",
                "Your session has expired or cookies are blocked. Open /account again.",
            )
            .into();
        };
        if !self.key.check_csrf(&id, field("csrf")) {
            return error_page(
                403,
                "Invalid form",
                "The form's security token is missing or wrong. Open /account again.",
            )
            .into();
        }
        match (field("step"), user) {
            ("login", _) => self.account_sign_in(&id, &form, client_ip).await,
            ("oidc", _) => {
                let provider = form.single("provider").ok().flatten();
                self.oidc_start("/account", "", &id, provider).await
            }
            ("revoke", Some(user)) => self.account_revoke(&user, field("grant"), client_ip).await,
            ("password", Some(user)) => self.account_password(&user, &form, client_ip).await,
            ("logout", Some(_)) => self.account_sign_out(&id).await,
            (_, None) => redirect("/account"),
            _ => error_page(400, "Invalid form", "The form is incomplete.").into(),
        }
    }

    async fn account_sign_in(
        &self,
        session_id: &str,
        form: &Params,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        let (username, password) = crate::protocol::authorize::login_fields(form);
        let next = form.single("next").ok().flatten().and_then(next_page);
        if !self.cfg.login.local_passwords {
            let text = "Password sign-in is turned off here: use one of the buttons above.";
            return self
                .account_login(session_id, Some(username), Some(text), 403, next)
                .into();
        }
        let password = Secret::new(password);
        let user = match self
            .check_login(username, &password, client_ip, "/account")
            .await
        {
            Ok(user) => user,
            Err(LoginRefusal::Page {
                text,
                status,
                retry_after,
            }) => {
                return AuthorizeResponse {
                    outcome: self.account_login(
                        session_id,
                        Some(username),
                        Some(&text),
                        status,
                        next,
                    ),
                    set_session: None,
                    retry_after,
                };
            }
            Err(LoginRefusal::Unavailable(e)) => return unavailable(&e).into(),
        };
        if session_id.starts_with(SESSION_PREFIX)
            && let Err(e) = self
                .store
                .delete_session(&crypto::hash_secret(session_id))
                .await
        {
            return unavailable(&e).into();
        }
        match self.new_session(user.clone()).await {
            Ok(new) => {
                tracing::info!(user = %user, "account: signed in");
                self.observer.event(Event::LoginSucceeded);
                AuthorizeResponse {
                    outcome: AuthorizeOutcome::Redirect {
                        location: next.unwrap_or("/account").into(),
                    },
                    set_session: Some(SessionCookie(new)),
                    retry_after: None,
                }
            }
            Err(e) => unavailable(&e).into(),
        }
    }

    async fn account_revoke(
        &self,
        user: &UserRecord,
        family_id: &str,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        let grant = match self.store.get_grant(family_id).await {
            Ok(g) => g,
            Err(e) => return unavailable(&e).into(),
        };
        let admin = self.is_admin(user);
        let Some(grant) = grant.filter(|g| admin || g.username == user.username) else {
            return redirect("/account?done=not-yours");
        };
        match self.store.revoke_grant(&grant.family_id, self.now()).await {
            Ok(_) => {
                self.validator.clear_cache();
                self.observer.event(Event::Revoked);
                tracing::info!(by = %user.username, user = %grant.username, client_id = %grant.client_id, grant = %grant.family_id, "account: grant revoked");
                let own = grant.username == user.username;
                let by = format!(
                    "by_{}: {}",
                    if own { "user" } else { "admin" },
                    user.display_name()
                );
                self.observer.audit(&AuditEntry {
                    action: "revoke",
                    via: Some("account"),
                    user: Some(&grant.username),
                    client_id: Some(&grant.client_id),
                    outcome: "revoked",
                    reason: Some(&by),
                    scopes: Some(&grant.scopes),
                    resource: Some(&grant.resource),
                    client_ip,
                });
                let back = if grant.username == user.username {
                    "/account?done=revoked"
                } else {
                    "/account?all=1&done=revoked"
                };
                redirect(back)
            }
            Err(e) => unavailable(&e).into(),
        }
    }

    async fn account_password(
        &self,
        user: &UserRecord,
        form: &Params,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        if user.external.is_some() {
            return redirect("/account?done=external");
        }
        let field = |n: &str| form.single(n).ok().flatten().unwrap_or_default();
        let (new, confirm) = (Secret::new(field("new")), Secret::new(field("confirm")));
        if new.expose() != confirm.expose() {
            return redirect("/account?done=mismatch");
        }
        if new.expose().chars().count() < MIN_PASSWORD_CHARS {
            return redirect("/account?done=weak");
        }
        // The current password is checked like a sign-in: failures count against the login
        // throttles, so a borrowed session cannot be used to guess it.
        if user.password_hash != NO_PASSWORD {
            let current = Secret::new(field("current"));
            match self
                .check_login(&user.username, &current, client_ip, "/account")
                .await
            {
                Ok(_) => {}
                Err(LoginRefusal::Page { status: 429, .. }) => {
                    return redirect("/account?done=throttled");
                }
                Err(LoginRefusal::Page { .. }) => return redirect("/account?done=wrong-password"),
                Err(LoginRefusal::Unavailable(e)) => return unavailable(&e).into(),
            }
        }
        let (params, entropy) = (self.cfg.password_hashing, self.entropy.clone());
        let hashed = tokio::task::spawn_blocking(move || {
            crypto::hash_password(new.expose(), params, entropy.as_ref())
        })
        .await;
        let Ok(Ok(hash)) = hashed else {
            return error_page(
                500,
                "Password not changed",
                "The password could not be hashed.",
            )
            .into();
        };
        match self
            .store
            .set_password(&user.username, &hash, self.now())
            .await
        {
            Ok(_) => {
                tracing::info!(user = %user.username, "account: password changed");
                redirect("/account?done=password")
            }
            Err(e) => unavailable(&e).into(),
        }
    }

    async fn account_sign_out(&self, session_id: &str) -> AuthorizeResponse {
        if session_id.starts_with(SESSION_PREFIX)
            && let Err(e) = self
                .store
                .delete_session(&crypto::hash_secret(session_id))
                .await
        {
            return unavailable(&e).into();
        }
        // A fresh anonymous cookie replaces the signed-in one.
        let anon = crypto::random_token(self.entropy.as_ref(), ANON_PREFIX);
        AuthorizeResponse {
            outcome: AuthorizeOutcome::Redirect {
                location: "/account".into(),
            },
            set_session: Some(SessionCookie(anon)),
            retry_after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_continues_only_to_the_console_or_the_connections() {
        assert_eq!(next_page("/admin"), Some("/admin"));
        assert_eq!(next_page("/connections"), Some("/connections"));
        for other in [
            "",
            "/admin/tokens",
            "https://evil.example/admin",
            "//evil.example",
            "/account",
        ] {
            assert_eq!(next_page(other), None, "{other}");
        }
    }

    #[test]
    fn dates_read_as_utc_minutes() {
        assert_eq!(when(1_800_000_000), "2027-01-15 08:00 UTC");
    }

    #[test]
    fn only_admins_list_other_users_grants() {
        let q = Params::parse("all=1&user=bob");
        assert!(!Listing::from_query(&q, false).all_users);
        let l = Listing::from_query(&q, true);
        assert!(l.all_users);
        let g = |user: &str| GrantRecord {
            family_id: "f".into(),
            client_id: "c".into(),
            username: user.into(),
            scopes: vec![],
            resource: String::new(),
            created_at: 0,
            last_used_at: 0,
            expires_at: 10,
            revoked_at: None,
            granted_by: GrantedBy::Consent,
        };
        assert!(l.shows("alice", &g("bob"), 5));
        assert!(!l.shows("alice", &g("carol"), 5));
        assert!(!l.shows("alice", &g("bob"), 11), "expired");
        let own = Listing::default();
        assert!(own.shows("alice", &g("alice"), 5) && !own.shows("alice", &g("bob"), 5));
    }
}
