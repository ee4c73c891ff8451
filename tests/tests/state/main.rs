//! End to end, state that outlives a request (one test binary, one module per theme): several
//! gateways and replicas sharing redis, and Werkbaum documents through the gateway (tools, a
//! planning dialogue, writers under load and `kill -9`, the git mirror), and what idle MCP
//! sessions cost the service and what a reconnecting client gets back; redis with Sentinel
//! failing over under traffic, and a rolling restart of three gateways under load.

mod replicas;
mod rolling_restart;
mod sentinel_failover;
mod service_resume;
mod service_sessions;
mod shared_state;
mod werkbaum_dialogue;
mod werkbaum_input_required;
mod werkbaum_load;
mod werkbaum_pull_doc;
mod werkbaum_support;
mod werkbaum_tools;
