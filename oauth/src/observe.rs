//! What the authorization server reports to whoever counts its events (the gateway's metrics):
//! an injected observer, so this crate needs nothing of the gateway. No event carries a user,
//! a client or a token.

/// One thing that happened in the authorization server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// A client registered itself (RFC 7591).
    ClientRegistered,
    /// A user signed in on the login form.
    LoginSucceeded,
    /// A wrong user name or password on the login form.
    LoginFailed,
    /// A login refused by the failed-login throttles (or the password-hashing queue).
    LoginThrottled,
    /// An authorization code handed to a client after consent.
    CodeIssued,
    /// An access and refresh token pair issued for an authorization code.
    TokensIssued,
    /// A refresh token rotated into a new pair.
    TokensRefreshed,
    /// A used authorization code or a rotated refresh token presented again: its grant is revoked.
    ReuseDetected,
    /// A token or grant revoked through `/revoke`.
    Revoked,
    /// An access-token validation answered from the ≤ 1 s cache.
    ValidationCacheHit,
    /// An access-token validation that had to ask the store.
    ValidationCacheMiss,
}

/// What a person did at the authorization server, for the audit log: a sign-in (password or
/// OpenID provider) or a consent decision. Never a password, token, code or ID token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditEntry<'a> {
    /// `sign_in`, `consent`, `enterprise_grant` or `revoke`.
    pub action: &'a str,
    /// `password`, or the OpenID provider's name (sign-ins); the ID-JAG's issuer (enterprise
    /// grants issued); `account` (revocations at `/account`).
    pub via: Option<&'a str>,
    /// The user (username; for an external user the verified email when known).
    pub user: Option<&'a str>,
    /// The OAuth client asking.
    pub client_id: Option<&'a str>,
    /// `success`, `refused` (sign-ins); `approved`, `denied`, `refused` (consents); `issued`,
    /// `refused` (enterprise grants); `revoked` (revocations).
    pub outcome: &'a str,
    /// Why, for refusals: a short code and the words shown to the person (or the OAuth error
    /// code and description); for revocations, who revoked (`by_user: NAME`, `by_admin: NAME`).
    pub reason: Option<&'a str>,
    /// The scopes granted (consents).
    pub scopes: Option<&'a [String]>,
    /// The resource (route) asked for (consents).
    pub resource: Option<&'a str>,
    pub client_ip: Option<std::net::IpAddr>,
}

/// Receives the server's events. Called on request paths: keep it to a counter increment.
pub trait Observer: Send + Sync {
    fn event(&self, event: Event);
    /// An audit-log entry (sign-ins, consents, enterprise grants, revocations); ignored unless the observer writes one.
    fn audit(&self, _entry: &AuditEntry<'_>) {}
}

/// The observer of a server nobody watches.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unobserved;

impl Observer for Unobserved {
    fn event(&self, _event: Event) {}
}
