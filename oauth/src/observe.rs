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

/// Receives the server's events. Called on request paths: keep it to a counter increment.
pub trait Observer: Send + Sync {
    fn event(&self, event: Event);
}

/// The observer of a server nobody watches.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unobserved;

impl Observer for Unobserved {
    fn event(&self, _event: Event) {}
}
