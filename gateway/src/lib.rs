//! Pforte, the auth gateway in front of MCP services: configuration, credentials, the request
//! decisions, and the pingora proxy that applies them. Its public API is what the `pforte`
//! binary calls: the commands' entry points. Everything else is private to the crate; the
//! workspace's tests, benchmarks and fuzz targets reach the parts they exercise through
//! `for_tests`, which is not an API.

mod approvals;
mod audit;
mod auth;
mod balance;
mod broker;
mod catalog;
mod cli;
mod commands;
mod config;
mod conns;
mod console;
mod cors;
mod credentials;
mod forward;
mod limit;
mod logging;
mod mcp;
mod metadata;
mod metrics;
mod oauth;
mod param_headers;
mod pins;
mod policy;
mod preflight;
mod proxy;
mod raw_json;
mod reply;
mod request_id;
mod rules;
mod runtime;
mod sessions;
mod stdio;
mod stores;
mod streams;
mod tasks;
mod telemetry;
mod tls;
mod tokens;
mod up;
mod vault;
mod virtual_server;

pub use cli::exit;
pub use commands::{
    Env, Failure,
    admin::{AdminCommand, run as admin},
    backup::{BackupArgs, RestoreArgs, backup, restore},
    client::ClientAction,
    grant::GrantAction,
    run,
    serve::{ServeArgs, check, serve},
    token::{TokenAction, run as token},
    tools::ToolsAction,
    up::{UpArgs, up},
    user::UserAction,
    vault::{VaultAction, run as vault},
};
pub use stdio::{AS_USER_SUBCOMMAND, EXEC_SUBCOMMAND, exec_as, exec_child};

/// What the workspace's end-to-end tests, benchmarks and fuzz targets use directly: the parsers
/// of untrusted input, the limiter, the session records, the catalog, the audit log and the
/// stdio bridge. Not an API; hidden from the docs.
#[doc(hidden)]
pub mod for_tests {
    pub use crate::{
        audit::{AuditDecision, AuditLog, AuditPrincipal, AuditRecord, AuditSink, reason},
        auth::bearer_token,
        broker::{
            Begun, Broker, Callback, CallbackError, DiscoveryError, FlowError, HttpError,
            RefreshError, RegisterError, Registration, Secret, TokenAuth, TokenSet, UpstreamClient,
            UpstreamServer, choose, cimd_document, is_stale, read_callback,
        },
        catalog::{
            Catalog, CatalogOptions, Lookup, MAX_ANSWER_BYTES, filter_tools_list,
            sse::{EventReader, TooLong},
        },
        config::{DEFAULT_MAX_LINE_BYTES, GatewayConfig},
        forward::{TrustedProxy, client_ip},
        limit::{Limiter, LocalLimiter, Policy, redis::RedisLimiter},
        logging::{LogFormat, init},
        mcp::{Kind, decode_header, inspect},
        proxy::decode_answer,
        rules::{Client, Effect, Input, RuleConfig, RuleError, Rules, Tool, User, Verdict},
        runtime::classify_head,
        sessions::{Holder, Ownership, SessionOptions, Sessions},
        stdio::{CREDENTIAL_REQUIRED, EnvRefusal, SessionEnv, StdioBridge, StdioSpec},
    };
}
