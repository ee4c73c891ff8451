//! End to end, the gateway in front of mcp-service (one test binary, one module per theme):
//! the walking skeleton over TLS with static tokens, rate limits, client connections,
//! `/metrics`, traces, routes, MCP-aware authorization, a trusted proxy, the operator's view of the
//! binaries, the runtime arrangements (per core, work stealing), the store's life (`serve
//! --init`, backup and restore, sessions across a restart), and the gateway's building blocks used directly against real
//! peers.

mod catalog_bounds;
mod checks;
mod connections;
mod decide_first;
mod docs_examples;
mod duties;
mod gateway_modules;
mod limits;
mod metrics;
mod operator;
mod policy;
mod request_path;
mod routes;
mod runtime;
mod session_restart;
mod skeleton;
mod store_ops;
mod tasks;
mod tool_policy;
mod traces;
mod trusted_proxy;
