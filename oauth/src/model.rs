//! The records the store keeps: users, clients, codes, grants (token families), tokens, sessions.
//!
//! Every token, code, client secret and session id appears here only as a hex SHA-256 hash.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a client authenticates at the token and revocation endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    /// Public client: `client_id` only.
    None,
    /// `client_id` + `client_secret` in the form body.
    ClientSecretPost,
    /// HTTP Basic with `client_id:client_secret`.
    ClientSecretBasic,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::ClientSecretPost => "client_secret_post",
            AuthMethod::ClientSecretBasic => "client_secret_basic",
        }
    }
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(AuthMethod::None),
            "client_secret_post" => Some(AuthMethod::ClientSecretPost),
            "client_secret_basic" => Some(AuthMethod::ClientSecretBasic),
            _ => None,
        }
    }
}

/// A local user who can log in at `/authorize`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub username: String,
    /// argon2id PHC string.
    pub password_hash: String,
    pub created_at: u64,
    pub updated_at: u64,
    /// Set for a user who signs in through an OpenID provider (no password: `password_hash` is
    /// empty and never verifies); absent for a local user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalIdentity>,
    /// May see and revoke every user's grants at `/account` (`pforte user role NAME admin`).
    /// Roles from an identity provider (issue 23 point 2) come on top of this flag.
    #[serde(default)]
    pub admin: bool,
}

/// Where a user from an identity provider comes from: the issuer and subject that link the
/// person (the readable username is their verified email), and what the last sign-in said
/// (shown and used by roles).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalIdentity {
    /// The `[[oauth.login.oidc]]` entry's name the user signed in with; the issuer for a user
    /// created by an enterprise grant.
    pub provider: String,
    pub issuer: String,
    pub subject: String,
    /// The verified email, if the ID token carried one with `email_verified`.
    #[serde(default)]
    pub email: Option<String>,
    /// The groups claim of the last sign-in.
    #[serde(default)]
    pub groups: Vec<String>,
    /// How the user came: signing in through an OpenID provider, or an enterprise grant.
    #[serde(default)]
    pub via: Via,
}

/// How a user from an identity provider came (records from before this field read as `Sso`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// Signed in through an `[[oauth.login.oidc]]` provider.
    #[default]
    Sso,
    /// Created by an ID-JAG of an `[[oauth.enterprise]]` identity provider.
    Enterprise,
}

impl ExternalIdentity {
    /// Where the user comes from, for tables and pages: `oidc NAME` or `enterprise ISSUER`.
    pub fn origin(&self) -> String {
        match self.via {
            Via::Sso => format!("oidc {}", self.provider),
            Via::Enterprise => format!("enterprise {}", self.provider),
        }
    }
}

impl UserRecord {
    /// The name shown to people: the verified email of an external user, else the username.
    pub(crate) fn display_name(&self) -> &str {
        self.external
            .as_ref()
            .and_then(|e| e.email.as_deref())
            .unwrap_or(&self.username)
    }
}

/// A password hash that matches no password: the value of users created by an enterprise
/// identity provider, who have no local password until they set one.
pub(crate) const NO_PASSWORD: &str = "!";

impl fmt::Debug for UserRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserRecord")
            .field("username", &self.username)
            .field("password_hash", &"<redacted>")
            .field("created_at", &self.created_at)
            .field("updated_at", &self.updated_at)
            .field("external", &self.external)
            .field("admin", &self.admin)
            .finish()
    }
}

/// A dynamically registered client (RFC 7591).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRecord {
    pub client_id: String,
    /// SHA-256 of the client secret (confidential clients only).
    pub secret_hash: Option<String>,
    pub auth_method: AuthMethod,
    pub redirect_uris: Vec<String>,
    pub client_name: Option<String>,
    /// The registered metadata as echoed in the registration response (never the secret).
    pub metadata: serde_json::Value,
    pub created_at: u64,
    pub last_used_at: u64,
}

/// An issued authorization code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeRecord {
    pub code_hash: String,
    pub client_id: String,
    pub username: String,
    pub redirect_uri: String,
    /// Whether the authorization request named `redirect_uri` (then /token must repeat it).
    pub redirect_uri_explicit: bool,
    pub code_challenge: String,
    pub scopes: Vec<String>,
    pub resource: String,
    /// The token family the code's tokens will belong to (revoked on replay).
    pub family_id: String,
    pub issued_at: u64,
    pub expires_at: u64,
    pub used: bool,
}

/// A grant: the family of access and refresh tokens issued from one authorization code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    pub family_id: String,
    pub client_id: String,
    pub username: String,
    pub scopes: Vec<String>,
    pub resource: String,
    pub created_at: u64,
    pub last_used_at: u64,
    /// When the newest refresh token of the family expires.
    pub expires_at: u64,
    pub revoked_at: Option<u64>,
    /// How the grant came about (records from before this field read as consent).
    #[serde(default)]
    pub granted_by: GrantedBy,
}

/// How a grant came about: the user approved it on the consent page, or an enterprise
/// identity provider granted it with an ID-JAG (the `jwt-bearer` grant).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum GrantedBy {
    #[default]
    Consent,
    Enterprise {
        /// The identity provider's issuer.
        issuer: String,
    },
}

impl GrantedBy {
    /// A short label for pages and tables.
    pub fn label(&self) -> &'static str {
        match self {
            GrantedBy::Consent => "consent",
            GrantedBy::Enterprise { .. } => "enterprise",
        }
    }
}

/// What an access token and a refresh token both record: whose, for which client, grant family
/// and resource, with which scopes (a refresh's are the grant's: it may narrow, never widen
/// them), and when. Stored flattened into each record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub token_hash: String,
    pub family_id: String,
    pub client_id: String,
    pub username: String,
    pub scopes: Vec<String>,
    pub resource: String,
    pub issued_at: u64,
    pub expires_at: u64,
}

/// An access token (by hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRecord {
    #[serde(flatten)]
    pub token: TokenRecord,
    pub revoked: bool,
}

/// A refresh token (by hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshRecord {
    #[serde(flatten)]
    pub token: TokenRecord,
    /// Set when the token was used to obtain its successor.
    pub rotated_at: Option<u64>,
}

impl std::ops::Deref for AccessRecord {
    type Target = TokenRecord;
    fn deref(&self) -> &TokenRecord {
        &self.token
    }
}

impl std::ops::DerefMut for AccessRecord {
    fn deref_mut(&mut self) -> &mut TokenRecord {
        &mut self.token
    }
}

impl std::ops::Deref for RefreshRecord {
    type Target = TokenRecord;
    fn deref(&self) -> &TokenRecord {
        &self.token
    }
}

impl std::ops::DerefMut for RefreshRecord {
    fn deref_mut(&mut self) -> &mut TokenRecord {
        &mut self.token
    }
}

/// A browser login session at `/authorize` (by hash of the cookie value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_hash: String,
    /// Set once the user has logged in.
    pub username: Option<String>,
    pub created_at: u64,
    pub expires_at: u64,
    /// Set on the record of a sign-in at an OpenID provider in progress (keyed by the hash of
    /// its `state`), never on a browser's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<OidcPending>,
}

/// A sign-in at an OpenID provider between the redirect to it and its callback. The PKCE
/// verifier and the nonce are not stored: both are derived from `state` under the server key,
/// and `state` itself is stored only as the record's hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OidcPending {
    /// The `[[oauth.login.oidc]]` entry's name.
    pub provider: String,
    /// The Pforte authorization request (encoded query) to resume after sign-in.
    pub request: String,
    /// SHA-256 of the browser's session cookie: the callback must come from the same browser.
    pub browser: String,
}

/// What happened when a refresh token was presented for rotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RotateOutcome {
    /// The token was active; it is now rotated and the successor pair is stored.
    Rotated,
    /// The token had been rotated before, at this time.
    AlreadyRotated { rotated_at: u64 },
    /// Its family is revoked.
    FamilyRevoked,
    /// No such token.
    NotFound,
}
