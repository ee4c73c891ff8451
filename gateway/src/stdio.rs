//! STUB of the stdio bridge (the "stdio" helper writes the real one): the interface of
//! design.md, so that `command` routes can be wired; `bind` refuses until the bridge lands.

use async_trait::async_trait;
use pingora::{server::ShutdownWatch, services::background::BackgroundService};

/// What the bridge of one `command` route runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioSpec {
    /// The route name, tags logs.
    pub route: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Only these (plus PATH and HOME) reach the child.
    pub env: std::collections::BTreeMap<String, String>,
    pub cwd: Option<std::path::PathBuf>,
    /// Children of this route at most (over it: 503 with `Retry-After`).
    pub max_children: usize,
    /// Keyed by the `x-pforte-subject` and `x-pforte-client` headers.
    pub max_children_per_principal: usize,
    pub idle_timeout: std::time::Duration,
    /// Initialized children for stateless requests.
    pub pool: usize,
}

/// Why the bridge cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("route {0:?}: stdio routes are not built yet")]
    NotBuilt(String),
}

/// The bridge of one `command` route (stub: never constructed).
#[derive(Debug)]
pub struct StdioBridge {
    _spec: StdioSpec,
}

impl StdioBridge {
    /// Binds the Unix socket (stub: refuses).
    pub fn bind(spec: StdioSpec, _socket: &std::path::Path) -> Result<Self, StdioError> {
        Err(StdioError::NotBuilt(spec.route))
    }
}

#[async_trait]
impl BackgroundService for StdioBridge {
    async fn start(&self, _shutdown: ShutdownWatch) {}
}
