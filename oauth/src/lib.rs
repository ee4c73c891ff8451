//! Pforte's OAuth 2.1 authorization server: a sans-I/O protocol core, its store, the token
//! validator the gateway calls on every request, admin functions and thin axum adapters.

pub mod clock;
pub mod config;
pub mod crypto;
pub mod error;
pub mod model;
pub mod protocol;
pub mod store;
