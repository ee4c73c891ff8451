//! Sign-in through an OpenID provider, around `/authorize`: the login page's "Sign in with
//! NAME" button (`POST /authorize`, `step=oidc`) stores the pending sign-in and redirects to
//! the provider; `GET /oidc/callback` redeems the provider's code, validates the ID token,
//! decides who may sign in, finds or creates the user (`person.rs`) and resumes the
//! authorization request.
//!
//! The pending sign-in is a [`SessionRecord`] in the store (SQLite or redis, like the login
//! sessions), keyed by the hash of `state`, expiring after ten minutes and deleted when used;
//! it holds the provider, the Pforte request and the hash of the browser's session cookie. The
//! nonce and PKCE verifier are derived from `state` under the server key, so nothing secret is
//! stored, and a gateway restart (or another gateway on the same redis) can finish the sign-in.

use std::net::IpAddr;

use super::AuthServer;
use super::authorize::{
    AuthorizeOutcome, AuthorizeResponse, SESSION_PREFIX, SessionCookie, error_page, unavailable,
};
use super::person::{Arrival, legacy_username};
use crate::crypto;
use crate::model::{ExternalIdentity, OidcPending, SessionRecord, Via};
use crate::observe::{AuditEntry, Event};
use crate::oidc::{OidcError, admitted};
use crate::protocol::Params;

/// Prefix of the `state` sent to a provider.
const STATE_PREFIX: &str = "pfo_";
/// How long a sign-in at a provider may take.
const PENDING_TTL_SECS: u64 = 600;

/// The page for a provider that failed: which one, what happened, what to do.
/// RFC 9207 §2.4: an `iss` in the authorization response, when present, is the issuer the
/// request went to, compared as a simple string (RFC 3986 §6.2.1). Absent is accepted (not every
/// provider sends it).
fn issuer_matches(iss: Option<&str>, issuer: &str) -> bool {
    iss.is_none_or(|iss| iss == issuer)
}

fn provider_failed(name: &str, e: &OidcError) -> AuthorizeOutcome {
    let (status, message) = match e {
        OidcError::Unreachable(_) => (
            502,
            format!(
                "{name} could not be reached, so signing in with it is not possible right now. \
                 Try again in a few minutes, or sign in another way; if it keeps failing, tell \
                 the operator of this gateway that {name} is unreachable."
            ),
        ),
        OidcError::Provider(_) => (
            502,
            format!(
                "{name} answered the sign-in with an error. Start again from the application; \
                 if it keeps failing, tell the operator of this gateway."
            ),
        ),
        OidcError::Token(_) => (
            502,
            format!(
                "{name}'s answer could not be verified, so it was not accepted. Start again \
                 from the application; if it keeps failing, tell the operator of this gateway."
            ),
        ),
    };
    tracing::warn!(idp = %name, error = %e, "oidc sign-in failed");
    error_page(status, &format!("Sign-in with {name} failed"), message)
}

impl AuthServer {
    fn audit_sign_in(
        &self,
        via: &str,
        user: Option<&str>,
        outcome: &str,
        reason: Option<&str>,
        client_ip: Option<IpAddr>,
    ) {
        self.observer.audit(&AuditEntry {
            action: "sign_in",
            via: Some(via),
            user,
            client_id: None,
            outcome,
            reason,
            scopes: None,
            resource: None,
            client_ip,
        });
    }

    /// The "Sign in with NAME" button: store the pending sign-in and send the browser to the
    /// provider.
    /// `request` is the encoded authorization request to resume, or empty for a sign-in at
    /// `/account` (the callback then returns there); `client_id` only names the app in the log.
    pub(super) async fn oidc_start(
        &self,
        client_id: &str,
        request: &str,
        session_id: &str,
        provider: Option<&str>,
    ) -> AuthorizeResponse {
        let Some(name) = provider.filter(|n| self.oidc.config(n).is_some()) else {
            return error_page(
                400,
                "Unknown identity provider",
                "This gateway offers no such way to sign in. Start again from the application.",
            )
            .into();
        };
        let state = crypto::random_token(self.entropy.as_ref(), STATE_PREFIX);
        let (nonce, verifier) = self.key.oidc_secrets(state.expose());
        let url = match self
            .oidc
            .authorize_url(name, state.expose(), nonce.expose(), verifier.expose())
            .await
        {
            Ok(url) => url,
            Err(e) => return provider_failed(name, &e).into(),
        };
        let now = self.now();
        let pending = SessionRecord {
            session_hash: crypto::hash_secret(state.expose()),
            username: None,
            created_at: now,
            expires_at: now + PENDING_TTL_SECS,
            oidc: Some(OidcPending {
                provider: name.to_owned(),
                request: request.to_owned(),
                browser: crypto::hash_secret(session_id),
            }),
        };
        if let Err(e) = self.store.put_session(&pending).await {
            return unavailable(&e).into();
        }
        tracing::info!(idp = %name, client_id = %client_id, "oidc sign-in started");
        AuthorizeOutcome::Redirect {
            location: url.to_string(),
        }
        .into()
    }

    /// `GET /oidc/callback?<query>` from a provider.
    pub(crate) async fn oidc_callback(
        &self,
        query: &str,
        session_cookie: Option<&str>,
        client_ip: Option<IpAddr>,
    ) -> AuthorizeResponse {
        let params = Params::parse(query);
        let field = |n: &str| params.single(n).ok().flatten();
        let expired = || -> AuthorizeResponse {
            error_page(
                400,
                "Sign-in expired",
                "This sign-in has expired or was already used. Start again from the application.",
            )
            .into()
        };
        let Some(state) = field("state").filter(|s| s.starts_with(STATE_PREFIX)) else {
            return expired();
        };
        let hash = crypto::hash_secret(state);
        let now = self.now();
        let pending = match self.store.get_session(&hash).await {
            Ok(Some(SessionRecord {
                oidc: Some(p),
                expires_at,
                ..
            })) if expires_at > now => p,
            Ok(_) => return expired(),
            Err(e) => return unavailable(&e).into(),
        };
        let same_browser = session_cookie.is_some_and(|c| {
            crypto::ct_eq(
                crypto::hash_secret(c).as_bytes(),
                pending.browser.as_bytes(),
            )
        });
        if !same_browser {
            return error_page(
                403,
                "Sign-in started elsewhere",
                "This sign-in was started in another browser or its cookie is gone. Start again \
                 from the application in this browser.",
            )
            .into();
        }
        if let Err(e) = self.store.delete_session(&hash).await {
            return unavailable(&e).into();
        }
        let name = pending.provider.as_str();
        // RFC 9207: a response that names its issuer must name the provider this sign-in went
        // to, errors included (a mix-up with another configured provider otherwise).
        if let Some(cfg) = self.oidc.config(name)
            && !issuer_matches(field("iss"), &cfg.issuer)
        {
            self.observer.event(Event::LoginFailed);
            self.audit_sign_in(name, None, "refused", Some("iss_mismatch"), client_ip);
            tracing::warn!(idp = %name, "oidc callback refused: its iss names another issuer");
            return error_page(
                400,
                "Invalid sign-in response",
                format!(
                    "This sign-in response says it comes from another provider than {name}, \
                     where the sign-in started. Start again from the application; if it keeps \
                     happening, tell the operator of this gateway."
                ),
            )
            .into();
        }
        if let Some(error) = field("error") {
            let error: String = error
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(64)
                .collect();
            self.observer.event(Event::LoginFailed);
            self.audit_sign_in(
                name,
                None,
                "refused",
                Some(&format!("idp_error: {error}")),
                client_ip,
            );
            let message = if error == "access_denied" {
                format!(
                    "{name} did not allow the sign-in (access_denied). Start again from the application if that was a mistake."
                )
            } else {
                format!(
                    "{name} answered the sign-in with the error {error}. Start again from the application; if it keeps failing, tell the operator of this gateway."
                )
            };
            return error_page(403, &format!("Sign-in with {name} failed"), message).into();
        }
        let Some(code) = field("code") else {
            return error_page(
                400,
                "Invalid sign-in response",
                format!("{name} sent no authorization code. Start again from the application."),
            )
            .into();
        };
        let (nonce, verifier) = self.key.oidc_secrets(state);
        let identity = match self
            .oidc
            .finish(name, code, verifier.expose(), nonce.expose())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                self.observer.event(Event::LoginFailed);
                self.audit_sign_in(
                    name,
                    None,
                    "refused",
                    Some(&format!("{}: {e}", e.code())),
                    client_ip,
                );
                return provider_failed(name, &e).into();
            }
        };
        let Some(cfg) = self.oidc.config(name) else {
            return expired();
        };
        // The provider's text, shown in logs and pages: no control characters, bounded.
        let shown: String = identity
            .email
            .clone()
            .unwrap_or_else(|| legacy_username(&identity.issuer, &identity.subject))
            .chars()
            .filter(|c| !c.is_control())
            .take(256)
            .collect();
        if let Err(refusal) = admitted(cfg, &identity) {
            self.observer.event(Event::LoginFailed);
            self.audit_sign_in(
                name,
                Some(&shown),
                "refused",
                Some(&format!("not_allowed: {}", refusal.audit())),
                client_ip,
            );
            tracing::info!(idp = %name, user = %shown, "oidc sign-in refused: not allowed");
            return error_page(403, "Not allowed to sign in", refusal.page(name, cfg)).into();
        }
        let arrival = Arrival {
            issuer: &identity.issuer,
            subject: &identity.subject,
            email: identity.email.as_deref(),
            domains: &cfg.allowed_domains,
            may_create: true,
        };
        let external = ExternalIdentity {
            provider: name.to_owned(),
            issuer: identity.issuer.clone(),
            subject: identity.subject.clone(),
            email: identity.email.clone(),
            groups: identity.groups.clone(),
            via: Via::Sso,
        };
        let user = match self.person(&arrival, external).await {
            Ok(Ok(user)) => user,
            Ok(Err(why)) => {
                self.audit_sign_in(
                    name,
                    Some(&shown),
                    "refused",
                    Some(&format!("name_taken: {why}")),
                    client_ip,
                );
                return error_page(
                    409,
                    "Account conflict",
                    format!(
                        "Your {name} account cannot be matched to a user here: {why}. Tell the \
                         operator of this gateway, who can remove or rename that user (pforte \
                         user list)."
                    ),
                )
                .into();
            }
            Err(e) => return unavailable(&e).into(),
        };
        if session_cookie.is_some_and(|c| c.starts_with(SESSION_PREFIX))
            && let Some(old) = session_cookie
            && let Err(e) = self.store.delete_session(&crypto::hash_secret(old)).await
        {
            return unavailable(&e).into();
        }
        match self.new_session(user.clone()).await {
            Ok(id) => {
                tracing::info!(idp = %name, user = %shown, "oidc sign-in");
                self.observer.event(Event::LoginSucceeded);
                self.audit_sign_in(name, Some(&shown), "success", None, client_ip);
                AuthorizeResponse {
                    outcome: AuthorizeOutcome::Redirect {
                        location: if pending.request.is_empty() {
                            "/account".to_owned()
                        } else {
                            format!("/authorize?{}", pending.request)
                        },
                    },
                    set_session: Some(SessionCookie(id)),
                    retry_after: None,
                }
            }
            Err(e) => unavailable(&e).into(),
        }
    }
}

#[cfg(test)]
mod iss_tests {
    use super::issuer_matches;

    #[test]
    fn a_present_iss_must_be_the_pending_providers_exactly() {
        let corp = "https://idp.corp.example";
        assert!(issuer_matches(None, corp));
        assert!(issuer_matches(Some(corp), corp));
        assert!(!issuer_matches(Some("https://evil.example"), corp));
        assert!(!issuer_matches(Some("https://idp.corp.example/"), corp));
        assert!(!issuer_matches(Some(""), corp));
    }
}
