//! The hook for per-user environment secrets (upstream auth kind `env`): a source, injected
//! into the bridge ([`super::StdioBridge::with_session_env`]), that names the extra variables a
//! person's session child starts with; without one, children get none.
//!
//! Only a session's child, which serves one person, gets them. Pool children serve every
//! caller's stateless requests, so they never do: on a route with a source, a stateless request
//! is refused with the same answer as a session's `initialize` when the source says the person
//! lacks the credential, and sent to open a session when the person has variables (a route that
//! needs per-user environment should have `pool = 0`). The gateway's own session (its tool
//! catalog) has no person and gets none.

use async_trait::async_trait;

/// The `error` of the bridge's answer when a person lacks the credential a route needs (HTTP
/// 403, JSON `{"error": "upstream_credential_required", "error_description", "route"}`): the
/// gateway can turn it into its own answer (the connect URL).
pub const CREDENTIAL_REQUIRED: &str = "upstream_credential_required";

/// Where a session child's per-user environment comes from (the vault, later).
#[async_trait]
pub trait SessionEnv: Send + Sync {
    /// The variables the child of `person` (`auth::person_key`: `oauth:SUBJECT` or
    /// `static:NAME`) on `route` starts with: empty when the route needs none. Names starting
    /// with `PFORTE_` are reserved for the caller's identity and dropped.
    async fn env_for(&self, route: &str, person: &str)
    -> Result<Vec<(String, String)>, EnvRefusal>;
}

/// Why a person's child cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvRefusal {
    /// The person has not stored the credential the route needs: 403
    /// [`CREDENTIAL_REQUIRED`].
    #[error("no credential stored for this person on this route")]
    Missing,
    /// The source could not answer (its store is down, …): 503, the reason only logged.
    #[error("the per-user environment is unavailable: {0}")]
    Unavailable(String),
}
