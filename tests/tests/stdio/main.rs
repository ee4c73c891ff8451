//! End to end, MCP servers other than mcp-service (one test binary, one module per theme): the
//! stdio bridge on its own, stdio routes through the gateway, the bytes of messages kept, big
//! answers to the SDK clients, pinned tool definitions, and the MCP conformance suite through the gateway against
//! reference servers.

mod big_messages;
mod catalog_capabilities;
mod conformance;
mod pinning;
mod pinning_console;
mod stdio_accounts;
mod stdio_bridge;
mod stdio_bytes;
mod stdio_routes;
mod virtual_check;
mod virtual_check_lists;
mod virtual_clients;
mod virtual_console;
mod virtual_governance;
mod virtual_members;
mod virtual_serve;
mod virtual_streams;
