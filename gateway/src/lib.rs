//! Pforte, the auth gateway in front of MCP services: configuration, credentials, the request
//! decisions, and the pingora proxy that applies them.

pub mod audit;
pub mod auth;
pub mod balance;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod forward;
pub mod limit;
pub mod logging;
pub mod mcp;
pub mod metadata;
pub mod metrics;
pub mod oauth;
pub mod policy;
pub mod preflight;
pub mod proxy;
pub mod reject;
pub mod request_id;
pub mod server;
pub mod sessions;
pub mod stdio;
pub mod stores;
pub(crate) mod streams;
pub mod tls;
pub mod tokens;
pub mod up;
