//! `[oauth.login]` (how people sign in: local passwords, OpenID providers) and `[oauth.roles]`
//! (what signed-in people may grant and use), with their validation.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use url::Url;

use super::ConfigError;

/// `[oauth.login]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoginConfig {
    /// Whether the login page offers the username and password form (default true). With
    /// `false` only the OpenID providers' buttons are shown and password logins are refused.
    pub local_passwords: bool,
    /// `[[oauth.login.oidc]]`: OpenID providers offered as "Sign in with NAME".
    pub oidc: Vec<OidcProviderConfig>,
}

impl Default for LoginConfig {
    fn default() -> Self {
        Self {
            local_passwords: true,
            oidc: Vec::new(),
        }
    }
}

/// One OpenID provider (`[[oauth.login.oidc]]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcProviderConfig {
    /// Shown on the button ("Sign in with NAME"), in the audit log and in `pforte user list`.
    pub name: String,
    /// The issuer URL; its `/.well-known/openid-configuration` is fetched. `https`, or `http`
    /// on a loopback address (tests).
    pub issuer: String,
    pub client_id: String,
    /// A file holding the client secret (read at start; surrounding whitespace ignored).
    /// Absent: a public client (PKCE only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_file: Option<PathBuf>,
    /// Scopes asked for (default `openid email profile`; `openid` is always sent).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// Who may sign in: a verified email in one of these domains, …
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// … or one of these verified emails, …
    #[serde(default)]
    pub allowed_emails: Vec<String>,
    /// … or a member of one of these groups (read from `groups_claim`).
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    /// The claim that lists the user's groups (default `groups`), read from the ID token or,
    /// when the ID token leaves it out, from UserInfo.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// The claim that holds the person's email address (default `email`; Entra ID:
    /// `preferred_username` or `upn`, with `trust_email`), from the ID token or UserInfo.
    #[serde(default = "default_email_claim")]
    pub email_claim: String,
    /// Every address the provider sends counts as verified (for providers that never send
    /// `email_verified`, such as Entra ID, whose tenant owns its addresses). Default false: an
    /// address counts only with `email_verified: true`.
    #[serde(default)]
    pub trust_email: bool,
}

fn default_scopes() -> Vec<String> {
    ["openid", "email", "profile"].map(String::from).to_vec()
}

fn default_groups_claim() -> String {
    "groups".into()
}

fn default_email_claim() -> String {
    "email".into()
}

/// A role (`[oauth.roles.NAME]`): who holds it and which scopes they may grant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Role {
    /// IdP groups whose members hold the role.
    pub groups: Vec<String>,
    /// Users who hold it: local usernames, external users' verified emails, or `*` (everyone
    /// who signs in).
    pub users: Vec<String>,
    /// Scopes its holders may grant; absent: every scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// Its holders are admins at `/account` (see and revoke every user's grants), like users
    /// with the local admin flag (`pforte user role NAME admin`). Grants no scope by itself:
    /// `scopes` counts as for any role (`scopes = []` for an admin-only role).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
    /// Its holders decide calls held for approval (`effect = "approve"` rules) at the
    /// gateway's `/admin/approvals`, without being admins. Grants no scope by itself.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub approver: bool,
}

/// The roles by name.
pub type Roles = BTreeMap<String, Role>;

fn err(msg: String) -> ConfigError {
    ConfigError::Login(msg)
}

/// Whether `url` is `https`, or `http` on a loopback address.
pub(crate) fn secure_or_loopback(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            None => false,
        },
        _ => false,
    }
}

fn printable_name(s: &str) -> bool {
    !s.trim().is_empty() && s.chars().count() <= 64 && !s.chars().any(char::is_control)
}

impl LoginConfig {
    /// Every provider: a printable unique name, an https issuer (http only on loopback), a
    /// client id, scopes including none with spaces, and at least one allow-list.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.local_passwords && self.oidc.is_empty() {
            return Err(err(
                "local_passwords = false needs at least one [[oauth.login.oidc]] provider".into(),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for p in &self.oidc {
            let bad = |why: &str| err(format!("oidc provider {:?}: {why}", p.name));
            if !printable_name(&p.name) {
                return Err(bad("name must be 1 to 64 printable characters"));
            }
            if !names.insert(p.name.to_lowercase()) {
                return Err(bad("name is used twice"));
            }
            let issuer = Url::parse(&p.issuer).map_err(|_| bad("issuer is not a URL"))?;
            if !secure_or_loopback(&issuer)
                || issuer.query().is_some()
                || issuer.fragment().is_some()
            {
                return Err(bad(
                    "issuer must be an https URL (http only on a loopback address), without query or fragment",
                ));
            }
            if p.client_id.is_empty() || p.client_id.chars().any(char::is_control) {
                return Err(bad("client_id is empty"));
            }
            if p.scopes
                .iter()
                .any(|s| s.is_empty() || s.contains(char::is_whitespace))
            {
                return Err(bad("scopes must be single words"));
            }
            if p.allowed_domains.is_empty()
                && p.allowed_emails.is_empty()
                && p.allowed_groups.is_empty()
            {
                return Err(bad(
                    "say who may sign in: allowed_domains, allowed_emails or allowed_groups",
                ));
            }
            if p.allowed_domains
                .iter()
                .any(|d| d.is_empty() || d.contains('@'))
            {
                return Err(bad("allowed_domains are domains like example.com"));
            }
            if p.allowed_emails.iter().any(|e| !e.contains('@')) {
                return Err(bad("allowed_emails are email addresses"));
            }
            if p.groups_claim.is_empty() || p.email_claim.is_empty() {
                return Err(bad("groups_claim and email_claim must name a claim"));
            }
            if p.email_claim != "email" && !p.trust_email {
                return Err(bad(
                    "email_claim other than \"email\" needs trust_email = true (email_verified speaks only of the email claim)",
                ));
            }
        }
        Ok(())
    }
}

/// Roles: names printable, every scope they name supported.
pub(crate) fn validate_roles(
    roles: &Roles,
    scopes_supported: &[String],
) -> Result<(), ConfigError> {
    for (name, role) in roles {
        if !printable_name(name) {
            return Err(err(format!(
                "role {name:?}: name must be 1 to 64 printable characters"
            )));
        }
        if let Some(unknown) = role
            .scopes
            .iter()
            .flatten()
            .find(|s| !scopes_supported.contains(s))
        {
            return Err(err(format!("role {name:?}: unknown scope {unknown:?}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn provider(issuer: &str) -> OidcProviderConfig {
        OidcProviderConfig {
            name: "Corp".into(),
            issuer: issuer.into(),
            client_id: "pforte".into(),
            client_secret_file: None,
            scopes: default_scopes(),
            allowed_domains: vec!["example.com".into()],
            allowed_emails: vec![],
            allowed_groups: vec![],
            groups_claim: default_groups_claim(),
            email_claim: default_email_claim(),
            trust_email: false,
        }
    }

    fn login(p: OidcProviderConfig) -> LoginConfig {
        LoginConfig {
            local_passwords: true,
            oidc: vec![p],
        }
    }

    #[test]
    fn http_issuers_only_on_loopback() {
        for ok in [
            "https://idp.example",
            "http://127.0.0.1:4000",
            "http://[::1]:4000/realms/x",
            "http://localhost:8080",
        ] {
            assert_eq!(login(provider(ok)).validate(), Ok(()), "{ok}");
        }
        for bad in [
            "http://idp.example",
            "http://10.0.0.1",
            "ftp://idp.example",
            "nope",
        ] {
            assert!(login(provider(bad)).validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn someone_must_be_allowed() {
        let mut p = provider("https://idp.example");
        p.allowed_domains.clear();
        assert!(login(p.clone()).validate().is_err());
        p.allowed_groups = vec!["eng".into()];
        assert_eq!(login(p).validate(), Ok(()));
    }

    #[test]
    fn another_email_claim_needs_trust_email() {
        let mut p = provider("https://idp.example");
        p.email_claim = "upn".into();
        let e = login(p.clone()).validate().unwrap_err();
        assert!(e.to_string().contains("trust_email"), "{e}");
        p.trust_email = true;
        assert_eq!(login(p).validate(), Ok(()));
    }

    #[test]
    fn passwords_off_needs_a_provider() {
        let c = LoginConfig {
            local_passwords: false,
            oidc: vec![],
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn roles_name_known_scopes() {
        let supported = vec!["mcp:read".to_owned()];
        let mut roles = Roles::new();
        roles.insert(
            "readers".into(),
            Role {
                scopes: Some(vec!["mcp:read".into()]),
                ..Role::default()
            },
        );
        assert_eq!(validate_roles(&roles, &supported), Ok(()));
        roles.insert(
            "writers".into(),
            Role {
                scopes: Some(vec!["mcp:write".into()]),
                ..Role::default()
            },
        );
        assert!(validate_roles(&roles, &supported).is_err());
    }
}
