//! Authorization-server configuration: issuer, resources, scopes, lifetimes, CIMD, cookies, throttles.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use url::Url;

pub(crate) mod login;

pub use login::{LoginConfig, OidcProviderConfig, Role, Roles};

/// Everything the authorization server needs to know about its deployment.
///
/// Build it with [`OAuthConfig::new`] (issuer = the gateway's public base URL) and override
/// fields as needed; call [`OAuthConfig::validate`] before use (the server does).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// The gateway's public base URL, no path (e.g. `https://mcp.example.com`). Normalised by
    /// [`OAuthConfig::new`] to its ASCII origin; the same bytes appear in the RFC 8414 metadata,
    /// the RFC 9728 document and the `iss` response parameter.
    pub issuer: String,
    /// The default MCP resource URL (`<issuer>/mcp`). With `resources` empty it is the only
    /// resource (named `mcp`); otherwise it is the one a request without `resource` gets when
    /// it is in `resources` (see [`OAuthConfig::resource_entries`]).
    pub resource: String,
    /// Every protected resource (RFC 8707) this server issues tokens for, each named for the
    /// consent page. Empty (the default) means the single `resource`, named `mcp`. Each URL is
    /// absolute, canonical (see [`canonical_resource`]) and on the issuer's origin.
    pub resources: Vec<ResourceEntry>,
    /// Scopes the server knows. A request without `scope` gets all of them.
    pub scopes_supported: Vec<String>,
    /// Authorization-code lifetime in seconds (at most 60).
    pub code_ttl_secs: u64,
    /// Access-token lifetime in seconds (default 1 h).
    pub access_ttl_secs: u64,
    /// Refresh-token lifetime in seconds, renewed on each rotation (default 30 d).
    pub refresh_ttl_secs: u64,
    /// A rotated refresh token presented again within this many seconds returns the same
    /// successor pair; later, the whole family is revoked (default 30 s).
    pub refresh_grace_secs: u64,
    /// Login-session lifetime in seconds (default 1 h).
    pub session_ttl_secs: u64,
    /// Dynamically registered clients unused for this many seconds are deleted (default 30 d).
    pub client_reap_after_secs: u64,
    /// Active grants (connected apps) one user may hold; consent past it is refused with a
    /// page that says so. Registration itself is open (RFC 7591) and throttled per client IP
    /// (`throttle.register_per_ip`); this bounds what one person can hold.
    pub max_grants_per_user: u64,
    /// Client ID Metadata Document fetching.
    pub cimd: CimdConfig,
    /// Mark the session cookie `Secure` and name it `__Host-pforte_session` (default true).
    /// Set to false ONLY when the gateway serves plain HTTP on a loopback address (local use,
    /// tests): browsers refuse `Secure`/`__Host-` cookies over plain HTTP; the cookie is then
    /// called `pforte_session`.
    pub cookie_secure: bool,
    /// Quotas of the throttles (counted by the rate limiter the server is built with).
    pub throttle: ThrottleConfig,
    /// argon2id parameters for new password hashes (OWASP defaults).
    pub password_hashing: PasswordHashing,
    /// How people sign in: local passwords and OpenID providers (`[oauth.login]`).
    pub login: LoginConfig,
    /// `[oauth.roles.NAME]`: which scopes the holders of each role may grant. Empty: everyone
    /// may grant every scope.
    pub roles: Roles,
    /// How often, at most, a token's user is looked up again for their roles (1 to 60 s,
    /// default 60): the longest an issued token keeps what a role change took away.
    pub roles_recheck_secs: u64,
    /// The deployment's name on the login, consent and account pages (e.g. "Acme MCP");
    /// default: none (the pages say "Pforte").
    pub display_name: Option<String>,
    /// `[[oauth.enterprise]]`: identity providers whose ID-JAGs (Enterprise-Managed
    /// Authorization) the token endpoint accepts with the `jwt-bearer` grant.
    pub enterprise: Vec<EnterpriseIdp>,
}

/// One trusted enterprise identity provider (`[[oauth.enterprise]]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnterpriseIdp {
    /// Its issuer identifier, exactly as in the ID-JAG's `iss`. `https`, or `http` on a
    /// loopback address (tests).
    pub issuer: String,
    /// Where its signing keys are (JWKS); default: the `jwks_uri` of its metadata
    /// (`/.well-known/oauth-authorization-server`, then `/.well-known/openid-configuration`).
    pub jwks_uri: Option<String>,
    /// The client ids it may grant access to; empty: any client registered here.
    pub allowed_clients: Vec<String>,
    /// The email domains it speaks for: an ID-JAG with a verified email of these domains joins
    /// the existing user of that name, or creates one; empty: only users already linked by
    /// issuer + subject (e.g. by signing in through the same provider).
    pub allowed_domains: Vec<String>,
}

/// One protected resource: its canonical URL (the token audience) and the name of the service
/// behind it, shown on the consent page ("… wants access to NAME (URL)").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceEntry {
    pub url: String,
    pub name: String,
    /// Roles of which a user must hold one to use the resource (with `users`: either passes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Users allowed to use it (local usernames, external users' verified emails). With both
    /// lists empty, everyone who signs in may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// A human title for the pages (the route's `title`); default: the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// The name of the single resource of a config without `resources`.
pub(crate) const DEFAULT_RESOURCE_NAME: &str = "mcp";

/// Client ID Metadata Document settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CimdConfig {
    /// Fetch documents whose host resolves to private, loopback or link-local addresses.
    /// False by default; tests only.
    pub allow_private_addresses: bool,
    /// Whole-fetch timeout in milliseconds.
    pub fetch_timeout_ms: u64,
    /// Largest accepted document in bytes.
    pub max_document_bytes: usize,
    /// Upper bound on the Cache-Control max-age honoured, in seconds.
    pub max_cache_secs: u64,
    /// Cache lifetime when the response carries no max-age, in seconds.
    pub default_cache_secs: u64,
    /// How long a failed fetch is remembered per URL (no new attempt meanwhile), in seconds.
    pub failure_cache_secs: u64,
}

/// A GCRA quota: `burst` requests at once, refilling at `per_minute`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    pub burst: u32,
    pub per_minute: u32,
}

/// Throttles for the unauthenticated endpoints. Logins count failures only, so a user who
/// signs in from several devices is never throttled by their own successes, and nobody can
/// lock a user out from elsewhere (there is no per-username bucket).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThrottleConfig {
    /// Failed logins per client IP, across usernames.
    pub login_per_ip: Quota,
    /// Failed logins per (username, client IP); a successful login resets it.
    #[serde(alias = "login_per_username")]
    pub login_per_user_and_ip: Quota,
    /// Password verifications (argon2id, 19 MiB each) running at once, across all clients.
    pub max_concurrent_logins: u32,
    pub register_per_ip: Quota,
    /// `GET /authorize` per client IP.
    pub authorize_per_ip: Quota,
    /// Client ID Metadata Document fetches (cache misses) per client IP.
    pub cimd_fetch_per_ip: Quota,
}

/// argon2id cost parameters.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PasswordHashing {
    pub memory_kib: u32,
    pub iterations: u32,
    pub parallelism: u32,
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("issuer must be an absolute http(s) URL without path, query or fragment: {0}")]
    Issuer(String),
    #[error("resource must be an absolute http(s) URL on the issuer's origin: {0}")]
    Resource(String),
    #[error("resources: {0}")]
    Resources(String),
    #[error("code_ttl_secs must be between 1 and 60")]
    CodeTtl,
    #[error("{0} must be positive")]
    Zero(&'static str),
    #[error("scopes_supported must be non-empty, each scope a space-free printable token")]
    Scopes,
    #[error("login: {0}")]
    Login(String),
    #[error("enterprise: {0}")]
    Enterprise(String),
    #[error("display_name must be 1 to 100 characters without control characters")]
    DisplayName,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            resource: String::new(),
            resources: Vec::new(),
            scopes_supported: vec!["mcp:read".into(), "mcp:write".into()],
            code_ttl_secs: 60,
            access_ttl_secs: 3600,
            refresh_ttl_secs: 30 * 86_400,
            refresh_grace_secs: 30,
            session_ttl_secs: 3600,
            client_reap_after_secs: 30 * 86_400,
            max_grants_per_user: 100,
            cimd: CimdConfig::default(),
            cookie_secure: true,
            throttle: ThrottleConfig::default(),
            password_hashing: PasswordHashing::default(),
            login: LoginConfig::default(),
            roles: Roles::new(),
            roles_recheck_secs: 60,
            display_name: None,
            enterprise: Vec::new(),
        }
    }
}

impl Default for CimdConfig {
    fn default() -> Self {
        Self {
            allow_private_addresses: false,
            fetch_timeout_ms: 5_000,
            max_document_bytes: 5 * 1024,
            max_cache_secs: 86_400,
            default_cache_secs: 300,
            failure_cache_secs: 60,
        }
    }
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self {
            login_per_ip: Quota {
                burst: 10,
                per_minute: 10,
            },
            login_per_user_and_ip: Quota {
                burst: 5,
                per_minute: 5,
            },
            max_concurrent_logins: 4,
            register_per_ip: Quota {
                burst: 10,
                per_minute: 10,
            },
            authorize_per_ip: Quota {
                burst: 60,
                per_minute: 60,
            },
            cimd_fetch_per_ip: Quota {
                burst: 10,
                per_minute: 10,
            },
        }
    }
}

impl Default for PasswordHashing {
    fn default() -> Self {
        // OWASP Password Storage Cheat Sheet: argon2id, m=19 MiB, t=2, p=1.
        Self {
            memory_kib: 19 * 1024,
            iterations: 2,
            parallelism: 1,
        }
    }
}

impl OAuthConfig {
    /// Defaults for the gateway whose public base URL is `issuer`; `resource` becomes
    /// `<issuer>/mcp`.
    pub fn new(issuer: &str) -> Result<Self, ConfigError> {
        let issuer = normalize_issuer(issuer)?;
        let resource = format!("{issuer}/mcp");
        let config = Self {
            issuer,
            resource,
            ..Self::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks every field; the server refuses to start on an error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if normalize_issuer(&self.issuer)? != self.issuer {
            return Err(ConfigError::Issuer(format!(
                "{} (use its normalised form {})",
                self.issuer,
                normalize_issuer(&self.issuer)?
            )));
        }
        let resource =
            Url::parse(&self.resource).map_err(|_| ConfigError::Resource(self.resource.clone()))?;
        if resource.origin().ascii_serialization() != self.issuer || resource.fragment().is_some() {
            return Err(ConfigError::Resource(self.resource.clone()));
        }
        self.validate_resources()?;
        if !(1..=60).contains(&self.code_ttl_secs) {
            return Err(ConfigError::CodeTtl);
        }
        if !(1..=60).contains(&self.roles_recheck_secs) {
            return Err(ConfigError::Login(
                "roles_recheck_secs must be between 1 and 60".into(),
            ));
        }
        for (name, value) in [
            ("access_ttl_secs", self.access_ttl_secs),
            ("refresh_ttl_secs", self.refresh_ttl_secs),
            ("session_ttl_secs", self.session_ttl_secs),
            ("client_reap_after_secs", self.client_reap_after_secs),
            ("max_grants_per_user", self.max_grants_per_user),
            ("cimd.fetch_timeout_ms", self.cimd.fetch_timeout_ms),
            (
                "throttle.max_concurrent_logins",
                u64::from(self.throttle.max_concurrent_logins),
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        let scope_ok = |s: &String| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
        };
        if self.scopes_supported.is_empty() || !self.scopes_supported.iter().all(scope_ok) {
            return Err(ConfigError::Scopes);
        }
        self.login.validate()?;
        login::validate_roles(&self.roles, &self.scopes_supported)?;
        for entry in &self.resources {
            if let Some(unknown) = entry.roles.iter().find(|r| !self.roles.contains_key(*r)) {
                return Err(ConfigError::Resources(format!(
                    "{}: unknown role {unknown:?} (define it in [oauth.roles])",
                    entry.url
                )));
            }
        }
        if let Some(name) = &self.display_name
            && !human_text_ok(name)
        {
            return Err(ConfigError::DisplayName);
        }
        self.validate_enterprise()
    }

    /// Each `[[oauth.enterprise]]` entry: an issuer once, https (http only on loopback), a
    /// `jwks_uri` likewise, domains lower-case without `@`.
    fn validate_enterprise(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for idp in &self.enterprise {
            let bad = |why: &str| ConfigError::Enterprise(format!("{}: {why}", idp.issuer));
            if !secure_or_loopback(&idp.issuer) {
                return Err(bad(
                    "issuer must be an https URL (http only on a loopback address)",
                ));
            }
            if !seen.insert(idp.issuer.as_str()) {
                return Err(bad("listed twice"));
            }
            if let Some(uri) = &idp.jwks_uri
                && !secure_or_loopback(uri)
            {
                return Err(bad(
                    "jwks_uri must be an https URL (http only on a loopback address)",
                ));
            }
            for d in &idp.allowed_domains {
                let ok = !d.is_empty()
                    && d.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b)
                    });
                if !ok {
                    return Err(bad(&format!(
                        "allowed_domains entry {d:?} is not a lower-case domain"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The name the pages give the deployment.
    pub(crate) fn deployment_name(&self) -> &str {
        self.display_name.as_deref().unwrap_or("Pforte")
    }

    /// Each entry of `resources`: an absolute http(s) URL on the issuer's origin, without
    /// fragment, in canonical form; URLs and names unique, names printable.
    fn validate_resources(&self) -> Result<(), ConfigError> {
        let mut urls = std::collections::BTreeSet::new();
        let mut names = std::collections::BTreeSet::new();
        for entry in &self.resources {
            let bad = |why: &str| ConfigError::Resources(format!("{}: {why}", entry.url));
            let url = Url::parse(&entry.url).map_err(|_| bad("not an absolute URL"))?;
            if url.origin().ascii_serialization() != self.issuer {
                return Err(bad(&format!("not on the issuer's origin {}", self.issuer)));
            }
            if url.fragment().is_some() {
                return Err(bad("has a fragment"));
            }
            match canonical_resource(&entry.url) {
                Some(c) if c == entry.url => {}
                Some(c) => return Err(bad(&format!("not canonical (write {c})"))),
                None => return Err(bad("not an absolute URL")),
            }
            if !urls.insert(entry.url.as_str()) {
                return Err(bad("listed twice"));
            }
            let name_ok = !entry.name.trim().is_empty()
                && entry.name.chars().count() <= 100
                && !entry.name.chars().any(char::is_control);
            if !name_ok {
                return Err(bad(
                    "name must be 1 to 100 characters, not blank, without control characters",
                ));
            }
            if !names.insert(entry.name.as_str()) {
                return Err(bad(&format!("name {} is used twice", entry.name)));
            }
        }
        Ok(())
    }

    /// The resources tokens are issued for: `resources`, or when it is empty the single
    /// `resource` named [`DEFAULT_RESOURCE_NAME`].
    pub(crate) fn resource_entries(&self) -> Cow<'_, [ResourceEntry]> {
        if self.resources.is_empty() {
            Cow::Owned(vec![ResourceEntry {
                url: self.resource.clone(),
                name: DEFAULT_RESOURCE_NAME.to_owned(),
                roles: Vec::new(),
                users: Vec::new(),
                title: None,
            }])
        } else {
            Cow::Borrowed(&self.resources)
        }
    }

    /// The name of the login-session cookie (see [`OAuthConfig::cookie_secure`]).
    pub(crate) fn cookie_name(&self) -> &'static str {
        if self.cookie_secure {
            "__Host-pforte_session"
        } else {
            "pforte_session"
        }
    }
}

/// 1 to 100 characters, not blank, no control characters.
fn human_text_ok(s: &str) -> bool {
    !s.trim().is_empty() && s.chars().count() <= 100 && !s.chars().any(char::is_control)
}

/// An absolute `https` URL, or `http` on a loopback address (tests).
pub(crate) fn secure_or_loopback(raw: &str) -> bool {
    let Ok(url) = Url::parse(raw) else {
        return false;
    };
    match (url.scheme(), url.host()) {
        ("https", Some(_)) => true,
        ("http", Some(url::Host::Ipv4(ip))) => ip.is_loopback(),
        ("http", Some(url::Host::Ipv6(ip))) => ip.is_loopback(),
        ("http", Some(url::Host::Domain(d))) => d == "localhost",
        _ => false,
    }
}

/// `scheme://host[:port]` of an absolute http(s) URL that has no path, query or fragment.
pub(crate) fn normalize_issuer(raw: &str) -> Result<String, ConfigError> {
    let err = || ConfigError::Issuer(raw.to_owned());
    let url = Url::parse(raw).map_err(|_| err())?;
    let path_ok = url.path() == "/" || url.path().is_empty();
    if !matches!(url.scheme(), "https" | "http")
        || !path_ok
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
        || url.host().is_none()
    {
        return Err(err());
    }
    Ok(url.origin().ascii_serialization())
}

/// The canonical form of a resource URI (RFC 8707: scheme and host case, default port, one
/// trailing slash tolerated), or None if it is not an absolute URL without fragment.
pub(crate) fn canonical_resource(resource: &str) -> Option<String> {
    let url = Url::parse(resource).ok()?;
    if url.fragment().is_some() || url.cannot_be_a_base() {
        return None;
    }
    let mut s = url.to_string();
    if url.query().is_none() && s.ends_with('/') {
        s.pop();
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn issuer_is_normalised_and_resource_derived() {
        let c = OAuthConfig::new("https://GW.example.com:443/").unwrap();
        assert_eq!(c.issuer, "https://gw.example.com");
        assert_eq!(c.resource, "https://gw.example.com/mcp");
        assert_eq!(c.code_ttl_secs, 60);
        assert_eq!(c.cookie_name(), "__Host-pforte_session");
    }

    #[test]
    fn bad_issuers_are_refused() {
        for bad in [
            "https://a.example/path",
            "ftp://a.example",
            "https://a.example/?q",
            "nope",
        ] {
            assert!(OAuthConfig::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resources_default_to_the_single_resource() {
        let c = OAuthConfig::new("https://gw.example").unwrap();
        assert_eq!(
            c.resource_entries().as_ref(),
            [ResourceEntry {
                url: "https://gw.example/mcp".into(),
                name: "mcp".into(),
                roles: vec![],
                users: vec![],
                title: None,
            }]
        );
        let old: OAuthConfig = serde_json::from_str(r#"{"code_ttl_secs": 30}"#).unwrap();
        assert!(old.resources.is_empty(), "existing files keep working");
    }

    #[test]
    fn resources_are_validated() {
        let entry = |url: &str, name: &str| ResourceEntry {
            url: url.into(),
            name: name.into(),
            roles: vec![],
            users: vec![],
            title: None,
        };
        let mut c = OAuthConfig::new("https://gw.example").unwrap();
        c.resources = vec![
            entry("https://gw.example/mcp", "mcp"),
            entry("https://gw.example/notes/mcp", "notes"),
        ];
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.resource_entries().len(), 2);
        for bad in [
            vec![entry("https://other.example/a/mcp", "a")],
            vec![entry("/a/mcp", "a")],
            vec![entry("https://gw.example/a/mcp#x", "a")],
            vec![entry("https://GW.example/a/mcp", "a")],
            vec![entry("https://gw.example/a/mcp/", "a")],
            vec![entry("https://gw.example/a/mcp", " ")],
            vec![entry("https://gw.example/a/mcp", "a\nb")],
            vec![
                entry("https://gw.example/a/mcp", "a"),
                entry("https://gw.example/a/mcp", "b"),
            ],
            vec![
                entry("https://gw.example/a/mcp", "a"),
                entry("https://gw.example/b/mcp", "a"),
            ],
        ] {
            c.resources = bad.clone();
            assert!(
                matches!(c.validate(), Err(ConfigError::Resources(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn enterprise_issuers_are_https_or_loopback() {
        let mut c = OAuthConfig::new("https://gw.example").unwrap();
        let idp = |issuer: &str| EnterpriseIdp {
            issuer: issuer.into(),
            ..EnterpriseIdp::default()
        };
        for ok in [
            "https://idp.example",
            "http://127.0.0.1:9000",
            "http://[::1]:1/x",
        ] {
            c.enterprise = vec![idp(ok)];
            assert_eq!(c.validate(), Ok(()), "{ok}");
        }
        for bad in ["http://idp.example", "ftp://idp.example", "idp.example"] {
            c.enterprise = vec![idp(bad)];
            assert!(
                matches!(c.validate(), Err(ConfigError::Enterprise(_))),
                "{bad}"
            );
        }
        c.enterprise = vec![EnterpriseIdp {
            allowed_domains: vec!["Example.COM".into()],
            ..idp("https://idp.example")
        }];
        assert!(matches!(c.validate(), Err(ConfigError::Enterprise(_))));
        c.enterprise = vec![idp("https://idp.example"), idp("https://idp.example")];
        assert!(matches!(c.validate(), Err(ConfigError::Enterprise(_))));
    }

    #[test]
    fn code_ttl_capped_at_60() {
        let mut c = OAuthConfig::new("http://127.0.0.1:8080").unwrap();
        c.code_ttl_secs = 61;
        assert_eq!(c.validate(), Err(ConfigError::CodeTtl));
    }
}
