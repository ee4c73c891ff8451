//! Support for the end-to-end tests: the real binaries started on 127.0.0.1 and waited for
//! ([`Stack`]: mcp-service and the gateway from typed options; [`PforteUp`]), MCP clients
//! ([`McpClient`] by hand, [`rmcp_client`] for real), what an OAuth client and a browser do
//! ([`oauth`]), what connecting a user's upstream credential takes ([`connect`]), TLS material,
//! and the outside tools some tests drive (Node, the conformance runner, the Python SDK). The
//! leaf utilities shared with the other crates' tests (redis, skips, the form scraper) come from
//! `pforte-test-support` and are re-exported here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod challenge;
mod client;
mod config;
mod gateway;
mod idp;
mod jag_idp;
mod proc;
mod raw_upstream;
mod service;
mod stack;
mod streams;
mod tap;
mod tls;
mod tools;
mod up;

pub mod conformance;
pub mod connect;
pub mod console;
pub mod oauth;

pub use challenge::parse_challenge;
pub use client::{
    ACCEPT_BOTH, CLIENT_NAME, Events, McpClient, PROTOCOL_VERSION, RmcpClient, initialize_request,
    rmcp_client, rmcp_client_as, rpc_answer, whoami,
};
pub use config::{
    Budget, Enterprise, GatewayConfig, Limits, Login, OAuth, OidcEntry, PolicyRule, Role, Route,
    StdioLimits, Throttle, Throttles, TlsFiles, ToolRule, Upstream, UpstreamAuth, Vault,
};
pub use connect::{EchoUpstream, Prompt, write_secret, write_vault_key};
pub use gateway::{Gateway, write_config};
pub use idp::{
    IDP_CLIENT_ID, IDP_CLIENT_SECRET, IdpProfile, IdpUser, OIDC_PROVIDER_PACKAGE, Tamper, TestIdp,
};
pub use jag_idp::JagIdp;
pub use pforte_test_support::{
    Form, RedisOptions, RedisServer, SKIP_LOG_ENV, Sentinels, free_port, in_ci, skip, which,
};
pub use proc::{Proc, bin, bin_dir, built_bin, eventually, pforte_cmd, target_dir};
pub use raw_upstream::RawUpstream;
pub use service::McpService;
pub use stack::{Stack, StackBuilder};
pub use streams::{delete_session, open_session_stream, rss_kib};
pub use tap::WireTap;
pub use tls::{TestCert, TlsFront, http_client};
pub use tools::{
    BearerProxy, CLAUDE_CODE_PACKAGE, CONFORMANCE_2026_PACKAGE, CONFORMANCE_PACKAGE,
    EVERYTHING_PACKAGE, EverythingServer, FILESYSTEM_SERVER_PACKAGE, MCP_PYTHON_SDK,
    MCP_TS_SDK_PACKAGE, NODE_PACKAGE, claude_code, conformance_2026_packages, conformance_packages,
    conformance_script, filesystem_server, header_server, node22, npm_packages, open_to_children,
    python_sdk_or_skip, python_with_mcp_sdk, reachable_copy, root_or_skip, run_claude,
    run_claude_with_ca, run_node_json, run_python_json,
};
pub use up::{PforteUp, UpOptions};
