//! Pforte's OAuth 2.1 authorization server: a sans-I/O protocol core, its store, the token
//! validator the gateway calls on every request, admin functions and thin axum adapters.

pub mod admin;
pub mod auth_server;
pub mod cimd;
pub mod config;
pub mod crypto;
pub mod entropy;
pub mod error;
pub mod http;
pub mod model;
pub mod observe;
pub mod pages;
pub mod private_fs;
pub mod protocol;
pub mod store;
pub mod throttle;
pub mod validator;

pub use auth_server::AuthServer;
pub use config::{OAuthConfig, Quota, ResourceEntry};
pub use error::{OAuthError, StoreError, ValidationError};
pub use http::router;
pub use observe::{Event, Observer};
pub use throttle::{Budget, LimitClass, RateLimiter};
pub use validator::{ValidToken, Validator};
