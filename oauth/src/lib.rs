//! Pforte's OAuth 2.1 authorization server: a sans-I/O protocol core, its store, the token
//! validator the gateway calls on every request, admin functions and thin axum adapters.
//!
//! Every module is private; what other crates use is re-exported here, and nothing else.

mod admin;
mod auth_server;
mod cimd;
mod config;
mod crypto;
mod entropy;
mod error;
mod http;
mod jwks;
mod model;
mod observe;
mod oidc;
mod owner_only;
mod pages;
mod protocol;
mod roles;
mod store;
mod throttle;
mod validator;

pub use admin::{Admin, AdminError, ClientInfo, GrantFilter, UserInfo};
pub use auth_server::{AccountSection, AuthServer, BuildError, OIDC_CALLBACK_PATH, Viewer};
pub use config::{
    ConfigError, EnterpriseIdp, LoginConfig, OAuthConfig, OidcProviderConfig, PasswordHashing,
    Quota, ResourceEntry, Role, Roles,
};
pub use crypto::Secret;
pub use error::{StoreError, ValidationError};
pub use http::{ClientIp, router};
pub use model::{ExternalIdentity, GrantRecord, GrantedBy, Via};
pub use observe::{AuditEntry, Event, Observer};
pub use owner_only::{
    SecretFileError, mode_of, private_dir, private_file, private_sqlite, read_secret_file,
    sqlite_companions,
};
pub use store::redis::DEFAULT_PREFIX as REDIS_KEY_PREFIX;
pub use store::{RedisStore, SqliteStore, Store};
pub use throttle::{Budget, LimitClass, RateLimiter};
pub use validator::{Person, ValidToken, Validator};

/// What the fuzz targets in `fuzz/` reach: the parsers of untrusted input and the records they
/// check against. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::model::{AuthMethod, CodeRecord, RefreshRecord, TokenRecord};
    pub use crate::protocol::{Client, ClientKind, Params};

    pub mod authorize {
        pub use crate::protocol::authorize::{
            AuthorizeFailure, client_id, code_location, login_fields, validate,
        };
    }
    pub mod id_jag {
        pub use crate::protocol::id_jag::{Expected, check, typ_ok};
    }
    pub mod cimd {
        pub use crate::protocol::cimd::{
            cache_lifetime, is_document_client_id, parse_client_id_url, validate_document,
        };
    }
    pub mod redirect {
        pub use crate::protocol::redirect::check_registrable;
    }
    pub mod registration {
        pub use crate::protocol::registration::{response, validate};
    }
    pub mod token {
        pub use crate::protocol::token::{
            check_code, check_refresh, grant_type, presented_credentials,
        };
    }
}
