//! mcp-service: a plain MCP service for Werkbaum plans. It has no auth code; it trusts the gateway.
//! Its public API is what the `mcp-service` binary calls (the configuration, the service and its
//! HTTP listener, the commands' entry points) and the Werkbaum core's engine, which the core
//! benchmark, the fuzz target and the tests drive directly. Everything else is private to the
//! crate; the tests reach the tool layer through `for_tests`, which is not an API.

mod app;
mod config;
mod doc_cli;
mod engine;
mod guide;
mod http;
mod identity;
mod ids;
mod plan_cli;
mod prompts;
mod pull_doc;
mod sessions;
mod store;
mod surface;
mod tools;

pub use app::{StartError, planner};
pub use config::{ConfigError, ServiceConfig, StoreKind};
pub use doc_cli::{DocCommand, run as doc};
pub use engine::{CoreSource, Engine, EngineConfig, EngineError};
pub use http::{Listen, bind_unix, nodelay, serve};
pub use plan_cli::{CheckArgs, EXIT_USAGE, InspectArgs, check, inspect};
pub use pull_doc::{PullDocArgs, run as pull_doc};
pub use surface::PlanService;
pub use tools::Planner;

/// What the service's integration tests use directly: the tool layer under the MCP surface (the
/// planner's inputs and answers, its caller and bounds) and the tool catalog. Not an API; hidden
/// from the docs.
#[doc(hidden)]
pub mod for_tests {
    pub use crate::{
        identity::Identity,
        ids::SequentialIds,
        store::SqliteStore,
        surface::catalog,
        tools::{
            Answer, Bounds, Caller, Edit, ToolError,
            answer::{WhoamiAnswer, to_value},
            input::{
                AddNodeInput, ApplyOpsInput, CheckInput, CreateInput, HistoryInput, InspectInput,
                MoveNodeInput, RemoveNodeInput, SetSizeInput, SetStatusInput, Source, WriteInput,
            },
        },
    };
}
