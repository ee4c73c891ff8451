//! The stdio bridge: an in-process MCP streamable-HTTP server on a Unix socket in front of the
//! stdio MCP servers of one `command` route. Every MCP session gets its own child (stdio
//! servers keep per-connection state); stateless requests (no `Mcp-Session-Id`, not
//! `initialize`: MCP 2026-07-28) are served by a small pool of children that get them as they
//! are. Pool children are not sent an `initialize`: SDKs that speak both eras (the Python SDK
//! 2.x, rmcp 3.x) refuse the 2026-07-28 envelope on a connection opened with the handshake, and
//! a handshake-only server answers `server/discover` with "method not found", so that a client
//! falls back to `initialize` — a session.
//!
//! The gateway reaches the socket like a `unix:` upstream (path `/mcp`, identity headers set
//! by the gateway); the bridge trusts those headers because only the gateway can reach the
//! socket (0600 in a 0700 directory). It passes the caller on to the server ([`identity`]): a
//! session's child gets `PFORTE_*` environment variables at its start, every request
//! `params._meta["dev.pforte/identity"]` (the pool's children learn the caller only so); a
//! session's child may also get per-user variables from an injected source
//! ([`session_env`]). The HTTP endpoints live in [`handlers`] (answers made
//! in [`reply`]), the route's live children (sessions and pool) in [`children`], decisions
//! in [`decide`], one child's supervision in [`conn`], the no-orphans start in [`exec`], the
//! account the children run as in [`account`].

pub(crate) mod account;
mod children;
pub(crate) mod conn;
pub(crate) mod decide;
pub(crate) mod exec;
mod handlers;
mod identity;
pub(crate) mod lines;
mod reply;
mod session_env;

use std::{
    collections::BTreeMap,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, atomic::AtomicU64},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use axum::{Router, routing::post};
use pingora::{server::ShutdownWatch, services::background::BackgroundService};

use self::{
    children::{Children, Shared},
    exec::Spawner,
    handlers::{delete_mcp, get_mcp, post_mcp},
};

pub use self::{
    exec::{AS_USER_SUBCOMMAND, EXEC_SUBCOMMAND, exec_as, exec_child},
    session_env::{CREDENTIAL_REQUIRED, EnvRefusal, SessionEnv},
};

/// The session header of streamable HTTP.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
/// The gateway's identity headers the per-person cap is keyed by (with the auth kind).
pub(crate) const SUBJECT_HEADER: &str = crate::forward::header::SUBJECT;
pub(crate) const CLIENT_HEADER: &str = crate::forward::header::CLIENT;
/// `x-pforte-auth-kind` of the gateway's own calls (its tool catalog); the gateway strips
/// every `x-pforte-*` header a client sends, so no client request carries it.
const AUTH_KIND_HEADER: &str = crate::forward::header::AUTH_KIND;
const GATEWAY_AUTH_KIND: &str = "gateway";
/// How long a child has to answer `initialize`.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// A comment line on quiet standalone streams, so no idle timeout in between cuts them.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often idle children are looked for.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// One `command` route's stdio server and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioSpec {
    /// Route name; tags the log lines.
    pub route: String,
    /// Program and arguments.
    pub command: Vec<String>,
    /// Only these, plus `PATH` and `HOME` (and for a session's child the caller's `PFORTE_*`
    /// identity and per-user variables), reach the child. `PFORTE_*` names are reserved.
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// Children per route (sessions and pool); over it 503 + `Retry-After`.
    pub max_children: usize,
    /// Sessions per person (from `x-pforte-auth-kind`, `-subject` and `-client`: an OAuth user
    /// whatever the client, a static token by its name).
    pub max_children_per_principal: usize,
    pub idle_timeout: Duration,
    /// Children for stateless requests (started on demand).
    pub pool: usize,
    /// The longest stdout line (message) of a child; a longer one fails the call it answers.
    pub max_line_bytes: usize,
    /// Run the children as this user.
    pub run_as: Option<exec::RunAs>,
}

#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("route `{route}`: the command is empty")]
    EmptyCommand { route: String },
    #[error("route `{route}`: preparing the socket directory {dir}: {source}")]
    SocketDir {
        route: String,
        dir: String,
        source: std::io::Error,
    },
    #[error("route `{route}`: binding the stdio bridge socket {socket}: {source}")]
    Bind {
        route: String,
        socket: String,
        source: std::io::Error,
    },
    #[error("route `{route}`: preparing the children's home {home} for {user}: {source}")]
    Home {
        route: String,
        home: String,
        user: String,
        source: std::io::Error,
    },
    #[error("route `{route}`: finding the gateway's own executable: {source}")]
    Launcher {
        route: String,
        source: std::io::Error,
    },
}

/// The bridge of one route: bound by [`StdioBridge::bind`], served by its
/// [`BackgroundService::start`].
pub struct StdioBridge {
    shared: Arc<Shared>,
    listener: Mutex<Option<std::os::unix::net::UnixListener>>,
    socket: PathBuf,
}

impl Drop for StdioBridge {
    /// Children never outlive their bridge, however its runtime ended.
    fn drop(&mut self) {
        self.shared.stop_all_blocking();
    }
}

impl std::fmt::Debug for StdioBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioBridge")
            .field("route", &self.shared.spec.route)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// A handle on a bridge's live children, for the metrics.
#[derive(Clone)]
pub(crate) struct LiveChildren(Arc<Shared>);

impl std::fmt::Debug for LiveChildren {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveChildren")
            .field(&self.0.spec.route)
            .finish()
    }
}

impl LiveChildren {
    /// Children running now (sessions and pool).
    pub(crate) fn count(&self) -> usize {
        self.0.lock().live()
    }
}

impl StdioBridge {
    /// Its live children, for the metrics.
    pub(crate) fn live_children(&self) -> LiveChildren {
        LiveChildren(self.shared.clone())
    }

    /// Makes the children's own home (see [`exec::RunAs::own_home`]) and binds the Unix socket
    /// (parent dir created 0700, socket 0600, a stale socket replaced); synchronous, so
    /// `pforte serve` fails early with one clear line. Children are started through this
    /// executable's hidden `__stdio-exec` subcommand.
    pub(crate) fn bind(spec: StdioSpec, socket: &Path) -> Result<Self, StdioError> {
        let launcher = std::env::current_exe().map_err(|source| StdioError::Launcher {
            route: spec.route.clone(),
            source,
        })?;
        Self::bind_with_launcher(spec, socket, launcher)
    }

    /// [`StdioBridge::bind`] with children started through `launcher` (a `pforte` binary):
    /// for processes that are not `pforte` themselves, such as tests.
    pub fn bind_with_launcher(
        spec: StdioSpec,
        socket: &Path,
        launcher: PathBuf,
    ) -> Result<Self, StdioError> {
        let route = spec.route.clone();
        if spec.command.is_empty() {
            return Err(StdioError::EmptyCommand { route });
        }
        if let Some(who) = spec.run_as.as_ref().filter(|w| w.own_home) {
            account::prepare_home(&who.home, who.uid, who.gid).map_err(|source| {
                StdioError::Home {
                    route: route.clone(),
                    home: who.home.display().to_string(),
                    user: who.user.clone(),
                    source,
                }
            })?;
        }
        if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
            pforte_oauth::private_dir(dir).map_err(|source| StdioError::SocketDir {
                route: route.clone(),
                dir: dir.display().to_string(),
                source,
            })?;
        }
        let bind_err = |source| StdioError::Bind {
            route: route.clone(),
            socket: socket.display().to_string(),
            source,
        };
        match std::fs::remove_file(socket) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(bind_err(e)),
        }
        let listener = std::os::unix::net::UnixListener::bind(socket).map_err(bind_err)?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
            .map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        Ok(Self {
            shared: Arc::new(Shared {
                spec,
                launcher,
                ids: Arc::new(AtomicU64::new(1)),
                children: Mutex::new(Children::default()),
                spawner: OnceLock::new(),
                session_env: OnceLock::new(),
                audit: OnceLock::new(),
            }),
            listener: Mutex::new(Some(listener)),
            socket: socket.to_owned(),
        })
    }

    /// Session children get per-user environment variables from `source` (see
    /// [`SessionEnv`]); without it, none.
    pub fn with_session_env(self, source: Arc<dyn SessionEnv>) -> Self {
        // A bridge gets its source once, before it serves.
        let _ = self.shared.session_env.set(source);
        self
    }

    /// Sessions closed to make room at a person's cap are written to `audit`.
    pub(crate) fn with_audit(self, audit: Option<crate::audit::AuditLog>) -> Self {
        if let Some(audit) = audit {
            // A bridge gets its log once, before it serves.
            let _ = self.shared.audit.set(audit);
        }
        self
    }

    /// The pids of the running children (sessions and pool).
    pub fn child_pids(&self) -> Vec<u32> {
        let children = self.shared.lock();
        children
            .sessions
            .values()
            .map(|s| &s.conn)
            .chain(children.pool.iter())
            .filter_map(|c| c.pid())
            .collect()
    }
}

#[async_trait]
impl BackgroundService for StdioBridge {
    /// Serves streamable HTTP (MCP) at `/mcp` on the socket until shutdown, then stops every
    /// child.
    async fn start(&self, shutdown: ShutdownWatch) {
        self.run(shutdown).await;
    }
}

impl StdioBridge {
    /// What [`BackgroundService::start`] runs: serves until `shutdown` changes, then stops
    /// every child (SIGTERM, SIGKILL after 2 s) and removes the socket.
    pub async fn run(&self, mut shutdown: ShutdownWatch) {
        let route = self.shared.spec.route.clone();
        let Some(listener) = self.listener.lock().ok().and_then(|mut l| l.take()) else {
            tracing::error!(route = %route, "the stdio bridge was started twice");
            return;
        };
        let listener = match tokio::net::UnixListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(route = %route, error = %e, "stdio bridge socket");
                return;
            }
        };
        match Spawner::start(tokio::runtime::Handle::current(), &route) {
            Ok(spawner) => {
                let _ = self.shared.spawner.set(spawner);
            }
            Err(e) => {
                tracing::error!(route = %route, error = %e, "starting the stdio spawner thread");
                return;
            }
        }
        let app = Router::new()
            .route("/mcp", post(post_mcp).get(get_mcp).delete(delete_mcp))
            // The gateway bounds bodies (`max_body_bytes`) before they get here.
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(self.shared.clone());
        tracing::info!(route = %route, socket = %self.socket.display(), "stdio bridge listening");
        let serve = axum::serve(listener, app);
        let reap = async {
            let mut tick = tokio::time::interval(REAP_EVERY);
            loop {
                tick.tick().await;
                self.shared.reap_idle(Instant::now());
            }
        };
        tokio::select! {
            result = serve.into_future() => {
                if let Err(e) = result {
                    tracing::error!(route = %route, error = %e, "stdio bridge stopped serving");
                }
            }
            () = reap => {}
            _ = shutdown.changed() => {}
        }
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || shared.stop_all_blocking()).await;
        let _ = std::fs::remove_file(&self.socket);
        tracing::info!(route = %route, "stdio bridge stopped");
    }
}
