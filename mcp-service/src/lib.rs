//! mcp-service: a plain MCP service for Werkbaum plans. It has no auth code; it trusts the gateway.

pub mod app;
pub mod config;
pub mod doc_cli;
pub mod engine;
pub mod guide;
pub mod http;
pub mod identity;
pub mod ids;
pub mod plan_cli;
pub mod prompts;
pub mod pull_doc;
pub mod sessions;
pub mod store;
pub mod surface;
pub mod tools;
