//! mcp-service: a plain MCP service for Werkbaum plans. It has no auth code; it trusts the gateway.

pub mod config;
pub mod engine;
pub mod guide;
pub mod http;
pub mod identity;
pub mod plan_cli;
pub mod server;
