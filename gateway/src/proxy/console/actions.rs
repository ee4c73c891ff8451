//! The console's actions: create or revoke a static token, revoke an OAuth grant. The form's
//! CSRF token is checked before; each action is audited (`audit.rs::ConsoleRecord`) and answered
//! with a 303 back to its page, or (a new token, shown once) with the page itself.

use std::net::IpAddr;

use pforte_oauth::Viewer;

use crate::{
    audit::ConsoleRecord,
    console::{
        self, Page, manage,
        pages::{self, Frame, Section},
    },
    logging,
    proxy::Gateway,
    tokens::{self, NewToken},
};

use super::{Form, Response, blocking, store_down};

/// The audit line's outcome for a redirect's `done=`.
fn outcome(done: &str) -> &'static str {
    match done {
        "revoked" => "done",
        "not-found" => "not_found",
        _ => "store_error",
    }
}

impl Gateway {
    /// A console action (CSRF already checked), audited.
    pub(super) async fn console_action(
        &self,
        page: &Page,
        form: &Form,
        viewer: &Viewer,
        ip: Option<IpAddr>,
    ) -> Response {
        let audit = |action: &str, target: &str, outcome: &str| {
            if let Some(log) = &self.edge.audit {
                log.record(&ConsoleRecord {
                    time_ms: self.clock.now_ms(),
                    event: "console",
                    action,
                    admin: &viewer.username,
                    target,
                    outcome,
                    client_ip: ip,
                });
            }
            tracing::info!(admin = %viewer.username, action, target = %logging::untrusted(target), outcome, "console action");
        };
        match (page, form.get("step")) {
            (Page::Tokens, "revoke") => {
                let name = form.get("name").to_owned();
                let Some(store) = self.edge.console.tokens.clone() else {
                    return store_down();
                };
                let now = self.clock.now_secs();
                let target = name.clone();
                let done = match blocking(move || store.revoke(&target, now)).await {
                    Some(Ok(true)) => "revoked",
                    Some(Ok(false)) => "not-found",
                    _ => "store",
                };
                audit("token_revoke", &name, outcome(done));
                console::redirect(&format!("/admin/tokens?done={done}"))
            }
            (Page::Tokens, "create") => self.create_token(form, viewer, &audit).await,
            (Page::Approval(id), _) => self.decide_approval(id, form, viewer, ip).await,
            (Page::Grants, "revoke") => {
                let id = form.get("grant");
                let done = match self.oauth.server().revoke_grant_now(id).await {
                    Ok(Some(_)) => "revoked",
                    Ok(None) => "not-found",
                    Err(_) => "store",
                };
                audit("grant_revoke", id, outcome(done));
                console::redirect(&format!("/admin/grants?done={done}"))
            }
            (Page::Tools, "approve" | "approve-all") => self.approve_tools(form, &audit).await,
            _ => console::refusal(
                400,
                "Invalid form",
                "The console does not know that action.",
            ),
        }
    }

    /// Why a new token's form cannot be taken, in words for the page.
    fn token_form_problem(
        &self,
        name: &str,
        scopes: &[String],
        route: &str,
        days: &str,
    ) -> Option<String> {
        if !tokens::valid_name(name) {
            Some("A token name is 1 to 64 letters, digits, '.', '_' or '-'.".to_owned())
        } else if scopes.is_empty() {
            Some("Choose at least one scope.".to_owned())
        } else if let Some(bad) = scopes.iter().find(|s| !self.settings.scopes.contains(s)) {
            Some(format!("{bad:?} is not a configured scope."))
        } else if !route.is_empty() && !self.settings.routes.iter().any(|r| r.name == route) {
            Some("No route has that name.".to_owned())
        } else if !days.is_empty() && !days.parse::<u64>().is_ok_and(|d| (1..=3650).contains(&d)) {
            Some("Expiry: a whole number of days from 1 to 3650, or empty for none.".to_owned())
        } else {
            None
        }
    }

    async fn create_token(
        &self,
        form: &Form,
        viewer: &Viewer,
        audit: &(dyn Fn(&str, &str, &str) + Sync),
    ) -> Response {
        let name = form.get("name").trim().to_owned();
        let scopes: Vec<String> = form.all("scope");
        let route = form.get("route").to_owned();
        let days = form.get("days").trim();
        let now = self.clock.now_secs();
        let created = match self.token_form_problem(&name, &scopes, &route, days) {
            Some(p) => Err(p),
            None => {
                let Some(store) = self.edge.console.tokens.clone() else {
                    return store_down();
                };
                let expires_at = days.parse::<u64>().ok().map(|d| now + d * 86_400);
                let routes: Vec<String> = if route.is_empty() {
                    Vec::new()
                } else {
                    vec![route]
                };
                let (n, s) = (name.clone(), scopes.clone());
                match blocking(move || {
                    let new = NewToken {
                        name: &n,
                        scopes: &s,
                        routes: &routes,
                        expires_at,
                    };
                    store.create(&new, now, &mut rand::rng())
                })
                .await
                {
                    Some(Ok(value)) => {
                        audit("token_create", &name, "done");
                        Ok(value)
                    }
                    Some(Err(tokens::StoreError::NameTaken(_))) => {
                        audit("token_create", &name, "name_taken");
                        Err(format!(
                            "A token named {name:?} exists already; revoke it first."
                        ))
                    }
                    _ => {
                        audit("token_create", &name, "store_error");
                        Err("The store did not answer; no token was created.".to_owned())
                    }
                }
            }
        };
        let (shown, error) = match created {
            Ok(value) => (Some((name, value)), None),
            Err(e) => (None, Some(e)),
        };
        let status = if error.is_some() { 400 } else { 200 };
        match self.tokens_page(viewer, shown, None, error).await {
            Some(p) => {
                let frame = Frame {
                    user: &viewer.display_name,
                    csrf: &viewer.csrf,
                    section: Some(Section::Tokens),
                };
                console::html(
                    status,
                    pages::document("Tokens", &frame, &manage::tokens_page(&p)),
                )
            }
            None => store_down(),
        }
    }
}
