//! Error types of the authorization server (their HTTP form lives in `http/response.rs` only).

/// The store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend is unreachable or failed (the gateway answers 503).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A record could not be decoded.
    #[error("store record corrupt: {0}")]
    Corrupt(String),
}

/// An OAuth protocol error, carrying the exact RFC 6749 / 7591 / 8707 error code.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("invalid_request: {0}")]
    InvalidRequest(String),
    /// Client authentication failed (401 with `WWW-Authenticate`).
    #[error("invalid_client: {0}")]
    InvalidClient(String),
    #[error("invalid_grant: {0}")]
    InvalidGrant(String),
    #[error("unauthorized_client: {0}")]
    UnauthorizedClient(String),
    #[error("unsupported_grant_type: {0}")]
    UnsupportedGrantType(String),
    #[error("unsupported_response_type: {0}")]
    UnsupportedResponseType(String),
    #[error("invalid_scope: {0}")]
    InvalidScope(String),
    #[error("invalid_target: {0}")]
    InvalidTarget(String),
    #[error("access_denied: {0}")]
    AccessDenied(String),
    #[error("invalid_redirect_uri: {0}")]
    InvalidRedirectUri(String),
    #[error("invalid_client_metadata: {0}")]
    InvalidClientMetadata(String),
    /// Throttled (429).
    #[error("slow_down: retry after {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// The store is down (503 `temporarily_unavailable`).
    #[error("temporarily_unavailable: {0}")]
    Unavailable(#[from] StoreError),
    /// A bug or an impossible state (500 `server_error`); the detail is logged, not sent.
    #[error("server_error: {0}")]
    Internal(String),
}

impl OAuthError {
    /// The `error` value sent on the wire.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            OAuthError::InvalidRequest(_) => "invalid_request",
            OAuthError::InvalidClient(_) => "invalid_client",
            OAuthError::InvalidGrant(_) => "invalid_grant",
            OAuthError::UnauthorizedClient(_) => "unauthorized_client",
            OAuthError::UnsupportedGrantType(_) => "unsupported_grant_type",
            OAuthError::UnsupportedResponseType(_) => "unsupported_response_type",
            OAuthError::InvalidScope(_) => "invalid_scope",
            OAuthError::InvalidTarget(_) => "invalid_target",
            OAuthError::AccessDenied(_) => "access_denied",
            OAuthError::InvalidRedirectUri(_) => "invalid_redirect_uri",
            OAuthError::InvalidClientMetadata(_) => "invalid_client_metadata",
            OAuthError::RateLimited { .. } => "slow_down",
            OAuthError::Unavailable(_) => "temporarily_unavailable",
            OAuthError::Internal(_) => "server_error",
        }
    }

    /// The `error_description` sent on the wire (internal details are not).
    pub(crate) fn description(&self) -> String {
        match self {
            OAuthError::InvalidRequest(d)
            | OAuthError::InvalidClient(d)
            | OAuthError::InvalidGrant(d)
            | OAuthError::UnauthorizedClient(d)
            | OAuthError::UnsupportedGrantType(d)
            | OAuthError::UnsupportedResponseType(d)
            | OAuthError::InvalidScope(d)
            | OAuthError::InvalidTarget(d)
            | OAuthError::AccessDenied(d)
            | OAuthError::InvalidRedirectUri(d)
            | OAuthError::InvalidClientMetadata(d) => d.clone(),
            OAuthError::RateLimited { .. } => "too many requests; retry later".into(),
            OAuthError::Unavailable(_) => {
                "the authorization server is temporarily unavailable".into()
            }
            OAuthError::Internal(_) => "internal error".into(),
        }
    }
}

/// Why a bearer token was not accepted by [`crate::validator::Validator`].
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// Unknown, revoked, or for another audience (401 `invalid_token`).
    #[error("invalid token")]
    Invalid,
    /// Past its expiry (401 `invalid_token`).
    #[error("token expired")]
    Expired,
    /// The store could not be asked (503).
    #[error("token store unavailable: {0}")]
    Unavailable(#[from] StoreError),
}
