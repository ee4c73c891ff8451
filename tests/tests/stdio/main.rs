//! End to end, MCP servers other than mcp-service (one test binary, one module per theme): the
//! stdio bridge on its own, stdio routes through the gateway, and the MCP conformance suite
//! through the gateway against reference servers.

mod catalog_capabilities;
mod conformance;
mod stdio_bridge;
mod stdio_routes;
