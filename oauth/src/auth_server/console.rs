//! What the gateway's operator console (`/admin`) asks of the sign-in session: who a browser's
//! session cookie belongs to (and whether that user is an admin), the session's CSRF token and
//! its check, and an admin's grant revocation. The console has no login of its own: it sends a
//! signed-out browser to `/account`, whose sign-in sets the same cookie.

use super::AuthServer;
use super::authorize::SESSION_PREFIX;
use crate::error::StoreError;
use crate::model::GrantRecord;
use crate::observe::Event;

/// The signed-in person behind a browser's session cookie.
#[derive(Clone, PartialEq, Eq)]
pub struct Viewer {
    /// The stored user name.
    pub username: String,
    /// The name shown (an OpenID provider's user: the email or name it gave).
    pub display_name: String,
    /// Whether the user is an admin: the local flag (`pforte user role NAME admin`) or a role
    /// with `admin = true`.
    pub admin: bool,
    /// Whether the user decides calls held for approval: an admin, or the holder of a role
    /// with `approver = true`.
    pub approver: bool,
    /// The CSRF token every form of this session carries (the same one `/account` uses).
    pub csrf: String,
    session_id: String,
}

impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer")
            .field("username", &self.username)
            .field("admin", &self.admin)
            .field("approver", &self.approver)
            .finish_non_exhaustive()
    }
}

/// The value of the cookie called `name` in `Cookie` header lines.
fn cookie_value<'a>(lines: &[&'a str], name: &str) -> Option<&'a str> {
    lines
        .iter()
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl AuthServer {
    /// Adds `section` to every signed-in user's `/account` page. Only the first call counts.
    pub fn set_account_section(&self, section: std::sync::Arc<dyn super::AccountSection>) {
        let _first = self.account_section.set(section);
    }

    /// The signed-in user of the session cookie among `cookie_lines` (the request's `Cookie`
    /// header lines); `Ok(None)` when there is no signed-in session (no cookie, an anonymous
    /// one, expired, or its user is gone).
    pub async fn viewer(&self, cookie_lines: &[&str]) -> Result<Option<Viewer>, StoreError> {
        let cookie = cookie_value(cookie_lines, self.cfg.cookie_name());
        let Some((id, rec)) = self.session(cookie).await? else {
            return Ok(None);
        };
        if !id.starts_with(SESSION_PREFIX) {
            return Ok(None);
        }
        let Some(name) = rec.username.as_deref() else {
            return Ok(None);
        };
        let Some(user) = self.store.get_user(name).await? else {
            return Ok(None);
        };
        let admin = self.is_admin(&user);
        Ok(Some(Viewer {
            approver: admin
                || crate::roles::approver(&self.cfg.roles, &crate::roles::Member::from(&user)),
            admin,
            display_name: user.display_name().to_owned(),
            csrf: self.key.csrf_token(&id),
            username: user.username,
            session_id: id,
        }))
    }

    /// Whether `presented` is the CSRF token of `viewer`'s session (constant time).
    pub fn csrf_ok(&self, viewer: &Viewer, presented: &str) -> bool {
        self.key.check_csrf(&viewer.session_id, presented)
    }

    /// Revokes the grant `family_id` for an admin of the console: its tokens are refused by
    /// this process at once (the validation cache is cleared) and by every other gateway
    /// within its ≤ 1 s cache. The grant as it was, or `None` when there is no active one.
    pub async fn revoke_grant_now(
        &self,
        family_id: &str,
    ) -> Result<Option<GrantRecord>, StoreError> {
        let Some(grant) = self.store.get_grant(family_id).await? else {
            return Ok(None);
        };
        if grant.revoked_at.is_some() {
            return Ok(None);
        }
        self.store
            .revoke_grant(&grant.family_id, self.now())
            .await?;
        self.validator.clear_cache();
        self.observer.event(Event::Revoked);
        Ok(Some(grant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_named_cookie_among_lines() {
        let lines = ["a=1; pforte_session=pfs_x", "b=2"];
        assert_eq!(cookie_value(&lines, "pforte_session"), Some("pfs_x"));
        assert_eq!(cookie_value(&lines, "b"), Some("2"));
        assert_eq!(cookie_value(&lines, "pforte"), None);
    }
}
