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
//! socket (0600 in a 0700 directory). Decisions live in [`decide`], one child's supervision in
//! [`conn`], the no-orphans start in [`exec`].

pub(crate) mod conn;
pub(crate) mod decide;
pub(crate) mod exec;
pub(crate) mod lines;

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard, OnceLock, atomic::AtomicU64},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
    routing::post,
};
use pingora::{server::ShutdownWatch, services::background::BackgroundService};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt as _, wrappers::ReceiverStream};

use self::{
    conn::Conn,
    decide::{CapRefusal, Kind},
    exec::{ChildCommand, Spawner},
};

pub use self::exec::{AS_USER_SUBCOMMAND, EXEC_SUBCOMMAND, exec_as, exec_child};

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
    /// Only these, plus `PATH` and `HOME`, reach the child.
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
    /// The longest stdout line (message) of a child; past it the child is restarted.
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

/// One session: who opened it and its child.
struct Session {
    /// The person who opened it ([`person`]); None for the gateway's own session.
    principal: Option<String>,
    conn: Arc<Conn>,
}

/// Every live child of the route.
#[derive(Default)]
struct Children {
    sessions: HashMap<String, Session>,
    pool: Vec<Arc<Conn>>,
}

impl Children {
    /// The children the caps count: every client session's and the pool's.
    fn live(&self) -> usize {
        self.sessions
            .values()
            .filter(|s| s.principal.is_some())
            .count()
            + self.pool.len()
    }
}

struct Shared {
    spec: StdioSpec,
    launcher: PathBuf,
    ids: Arc<AtomicU64>,
    children: Mutex<Children>,
    spawner: OnceLock<Spawner>,
}

impl StdioBridge {
    /// Binds the Unix socket (parent dir created 0700, socket 0600, a stale socket replaced);
    /// synchronous, so `pforte serve` fails early with one clear line. Children are started
    /// through this executable's hidden `__stdio-exec` subcommand.
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
        if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
            pforte_oauth::private_fs::private_dir(dir).map_err(|source| StdioError::SocketDir {
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
            }),
            listener: Mutex::new(Some(listener)),
            socket: socket.to_owned(),
        })
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

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Children> {
        self.children
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn command(&self) -> ChildCommand {
        ChildCommand {
            launcher: self.launcher.clone(),
            command: self.spec.command.clone(),
            env: ChildCommand::clean_env(
                &self.spec.env,
                std::env::var_os("PATH"),
                match &self.spec.run_as {
                    Some(who) => Some(who.home.clone().into_os_string()),
                    None => std::env::var_os("HOME"),
                },
            ),
            cwd: self.spec.cwd.clone(),
            run_as: self.spec.run_as.clone(),
            max_line_bytes: self.spec.max_line_bytes,
        }
    }

    fn start_conn(
        &self,
        init_params: Option<Value>,
        initialized: bool,
    ) -> Option<(Arc<Conn>, conn::Ready)> {
        let spawner = self.spawner.get()?.clone();
        Some(Conn::start(
            &self.spec.route,
            self.command(),
            spawner,
            self.ids.clone(),
            init_params,
            initialized,
        ))
    }

    fn session(&self, id: &str) -> Option<Arc<Conn>> {
        self.lock().sessions.get(id).map(|s| s.conn.clone())
    }

    /// Stops sessions and pool children that were idle too long (or stopped for good).
    fn reap_idle(&self, now: Instant) {
        let timeout = self.spec.idle_timeout;
        let mut gone = Vec::new();
        {
            let mut children = self.lock();
            children.sessions.retain(|id, s| {
                let keep = !s.conn.is_stopped() && !s.conn.idle_expired(now, timeout);
                if !keep {
                    tracing::info!(route = %self.spec.route, session = %short(id), "stdio session ended (idle or stopped)");
                    gone.push(s.conn.clone());
                }
                keep
            });
            children.pool.retain(|c| {
                let keep = !c.is_stopped() && !c.idle_expired(now, timeout);
                if !keep {
                    gone.push(c.clone());
                }
                keep
            });
        }
        for conn in gone {
            tokio::spawn(async move { conn.stop_and_wait().await });
        }
    }

    /// Stops every child without the runtime (pingora shuts the runtimes down right after the
    /// shutdown signal, cancelling async work, and a dropped bridge must not wait for one):
    /// stdin closed, SIGTERM to each process group, SIGKILL after [`conn::SUPERVISOR_GRACE`]
    /// (each supervisor ends its command's tree itself before that).
    fn stop_all_blocking(&self) {
        let all: Vec<Arc<Conn>> = {
            let mut children = self.lock();
            let sessions = children.sessions.drain().map(|(_, s)| s.conn);
            let mut all: Vec<_> = sessions.collect();
            all.append(&mut children.pool);
            all
        };
        let pids: Vec<u32> = all.iter().filter_map(|c| c.pid()).collect();
        for conn in &all {
            conn.stop();
            conn.close_stdin();
        }
        for pid in &pids {
            conn::signal_group(*pid, nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + conn::SUPERVISOR_GRACE;
        while Instant::now() < deadline && !pids.iter().all(|p| conn::has_exited(*p)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in pids {
            // Also whatever the child started in its group.
            conn::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        }
        if !all.is_empty() {
            tracing::info!(route = %self.spec.route, children = all.len(), "stdio servers stopped");
        }
    }

    /// `initialize` without a session: caps, a new child, its answer with a fresh session id.
    async fn open_session(
        &self,
        msg: &Value,
        id: Value,
        headers: &HeaderMap,
        sse: bool,
    ) -> Response {
        // The gateway's own session (its tool catalog, a client of every route for the
        // policy) is left out of the caps: `max_children` bounds the clients' children.
        let principal = person(headers);
        let session_id = format!("{:032x}", rand::random::<u128>());
        let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
        let (conn, ready) = {
            let mut children = self.lock();
            if principal.is_some() {
                let mine = children
                    .sessions
                    .values()
                    .filter(|s| s.principal == principal)
                    .count();
                if let Err(refusal) = decide::admit(
                    children.live(),
                    self.spec.max_children,
                    mine,
                    self.spec.max_children_per_principal,
                ) {
                    drop(children);
                    return reply::over_cap(&self.spec.route, id, refusal);
                }
            }
            let Some((conn, ready)) = self.start_conn(Some(params), false) else {
                return reply::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    id,
                    "the stdio bridge is not running",
                );
            };
            children.sessions.insert(
                session_id.clone(),
                Session {
                    principal,
                    conn: conn.clone(),
                },
            );
            (conn, ready)
        };
        let failure = match tokio::time::timeout(INIT_TIMEOUT, ready).await {
            Ok(Ok(Ok(answer))) => Ok(answer),
            Ok(Ok(Err(message))) => Err(message),
            Ok(Err(_)) => Err("the stdio server stopped".to_owned()),
            Err(_) => Err("the stdio server did not answer initialize in time".to_owned()),
        };
        let mut answer = match failure {
            Ok(answer) if answer.get("result").is_some() => answer,
            Ok(mut refused) => {
                self.forget(&session_id, &conn);
                decide::restore_id(&mut refused, id);
                return reply::json(StatusCode::OK, &refused);
            }
            Err(message) => {
                self.forget(&session_id, &conn);
                return reply::error(StatusCode::BAD_GATEWAY, id, &message);
            }
        };
        decide::restore_id(&mut answer, id);
        tracing::info!(route = %self.spec.route, session = %short(&session_id), pid = conn.pid(), "stdio session opened");
        let mut response = if sse {
            reply::sse_once(&answer)
        } else {
            reply::json(StatusCode::OK, &answer)
        };
        if let Ok(v) = HeaderValue::from_str(&session_id) {
            response.headers_mut().insert(SESSION_HEADER, v);
        }
        response
    }

    fn forget(&self, session_id: &str, conn: &Arc<Conn>) {
        self.lock().sessions.remove(session_id);
        let conn = conn.clone();
        tokio::spawn(async move { conn.stop_and_wait().await });
    }

    /// A pool child for a stateless request: the least busy one, or a new one while the pool
    /// is not full and every child is busy.
    async fn pool_conn(&self) -> Result<Arc<Conn>, (StatusCode, String)> {
        let route = &self.spec.route;
        if self.spec.pool == 0 {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("the stdio route `{route}` serves sessions only: initialize first"),
            ));
        }
        let (conn, ready) = {
            let mut children = self.lock();
            let least_busy = |up_only: bool| {
                children
                    .pool
                    .iter()
                    .filter(|c| !up_only || c.is_up())
                    .min_by_key(|c| c.in_flight())
                    .cloned()
            };
            let best = least_busy(true);
            let can_grow = children.pool.len() < self.spec.pool
                && decide::admit(children.live(), self.spec.max_children, 0, 1).is_ok();
            let want_grow = best.as_ref().is_none_or(|c| c.in_flight() > 0);
            if let Some(c) = best
                && !(want_grow && can_grow)
            {
                return Ok(c);
            }
            if !can_grow {
                // A child that is (re)starting answers with an error naming the wait.
                if let Some(c) = least_busy(false) {
                    return Ok(c);
                }
                let refusal = decide::admit(children.live(), self.spec.max_children, 0, 1)
                    .err()
                    .unwrap_or(CapRefusal::Route {
                        max: self.spec.max_children,
                    });
                return Err((
                    StatusCode::SERVICE_UNAVAILABLE,
                    reply::cap_message(route, refusal),
                ));
            }
            let Some((conn, ready)) = self.start_conn(None, true) else {
                return Err((
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the stdio bridge is not running".to_owned(),
                ));
            };
            children.pool.push(conn.clone());
            (conn, ready)
        };
        match tokio::time::timeout(INIT_TIMEOUT, ready).await {
            Ok(Ok(Ok(_))) => Ok(conn),
            _ => {
                self.lock().pool.retain(|c| !Arc::ptr_eq(c, &conn));
                conn.stop();
                Err((
                    StatusCode::BAD_GATEWAY,
                    format!("the stdio server `{route}` did not start"),
                ))
            }
        }
    }
}

/// Whom a session counts against: the person. An OAuth user counts whatever the client
/// (`auth::person_key`), so registering more clients buys no more children; any other caller by
/// subject and client (a static token is its own person). `None` for the gateway's own session
/// (its tool catalog), which is outside the caps.
fn person(headers: &HeaderMap) -> Option<String> {
    let kind = header_str(headers, AUTH_KIND_HEADER);
    let subject = header_str(headers, SUBJECT_HEADER).unwrap_or_default();
    match kind {
        Some(GATEWAY_AUTH_KIND) => None,
        Some("oauth") => Some(crate::auth::person_key(
            crate::auth::AuthKind::OAuth,
            subject,
            "",
        )),
        _ => Some(format!(
            "{}\n{subject}\n{}",
            kind.unwrap_or_default(),
            header_str(headers, CLIENT_HEADER).unwrap_or_default()
        )),
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The first characters of a session id, for logs.
fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

async fn post_mcp(State(bridge): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return reply::protocol(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32700,
            "the body is not one JSON-RPC message",
        );
    };
    let sse = decide::wants_event_stream(header_str(&headers, header::ACCEPT.as_str()));
    let kind = decide::classify(&msg);
    let id = match &kind {
        Kind::Request { id, .. } => (*id).clone(),
        _ => Value::Null,
    };
    if let Some(session) = header_str(&headers, SESSION_HEADER) {
        let Some(conn) = bridge.session(session) else {
            return reply::protocol(StatusCode::NOT_FOUND, id, -32001, "session not found");
        };
        conn.touch(Instant::now());
        return match kind {
            Kind::Request { .. } => match conn.request(msg, sse) {
                Ok(rx) => reply::answer(rx, sse).await,
                Err(message) => reply::error(StatusCode::OK, id, &message),
            },
            Kind::Notification { .. } | Kind::Response { .. } => {
                conn.send(msg);
                reply::accepted()
            }
            Kind::Invalid => reply::protocol(
                StatusCode::BAD_REQUEST,
                id,
                -32600,
                "not a JSON-RPC message",
            ),
        };
    }
    match kind {
        Kind::Request {
            method: "initialize",
            ..
        } => bridge.open_session(&msg, id, &headers, sse).await,
        // Stateless (MCP 2026-07-28, `server/discover` among them): the child answers itself.
        Kind::Request { .. } => {
            let conn = match bridge.pool_conn().await {
                Ok(conn) => conn,
                Err((status, message)) => return reply::error(status, id, &message),
            };
            conn.touch(Instant::now());
            match conn.request(msg, sse) {
                Ok(rx) => reply::answer(rx, sse).await,
                Err(message) => reply::error(StatusCode::OK, id, &message),
            }
        }
        // Nothing is waiting for a notification or response outside a session.
        Kind::Notification { .. } | Kind::Response { .. } => reply::accepted(),
        Kind::Invalid => reply::protocol(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            "not a JSON-RPC message",
        ),
    }
}

async fn get_mcp(State(bridge): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return reply::method_not_allowed();
    };
    let Some(conn) = bridge.session(session) else {
        return reply::protocol(
            StatusCode::NOT_FOUND,
            Value::Null,
            -32001,
            "session not found",
        );
    };
    conn.touch(Instant::now());
    reply::standalone(conn.open_standalone())
}

async fn delete_mcp(State(bridge): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return reply::protocol(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32600,
            "Mcp-Session-Id is required",
        );
    };
    let removed = bridge.lock().sessions.remove(session);
    match removed {
        Some(s) => {
            tracing::info!(route = %bridge.spec.route, session = %short(session), "stdio session deleted");
            tokio::spawn(async move { s.conn.stop_and_wait().await });
            reply::empty(StatusCode::OK)
        }
        None => reply::protocol(
            StatusCode::NOT_FOUND,
            Value::Null,
            -32001,
            "session not found",
        ),
    }
}

/// The one place where the bridge's answers and refusals become HTTP responses.
mod reply {
    use super::*;

    pub(crate) fn json(status: StatusCode, body: &Value) -> Response {
        let mut r = Response::new(Body::from(body.to_string()));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }

    pub(crate) fn empty(status: StatusCode) -> Response {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = status;
        r
    }

    pub(crate) fn accepted() -> Response {
        empty(StatusCode::ACCEPTED)
    }

    pub(crate) fn method_not_allowed() -> Response {
        let mut r = empty(StatusCode::METHOD_NOT_ALLOWED);
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
        r
    }

    /// A JSON-RPC error with `code`.
    pub(crate) fn protocol(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
        json(status, &decide::error_response(id, code, message))
    }

    /// A JSON-RPC internal error (the child is down, restarting, …).
    pub(crate) fn error(status: StatusCode, id: Value, message: &str) -> Response {
        protocol(status, id, decide::INTERNAL_ERROR, message)
    }

    pub(crate) fn cap_message(route: &str, refusal: CapRefusal) -> String {
        match refusal {
            CapRefusal::Route { max } => format!(
                "the stdio route `{route}` runs {max} servers already (max_children); retry later"
            ),
            CapRefusal::Principal { max } => format!(
                "you hold {max} sessions on the stdio route `{route}` already \
                 (max_children_per_principal); close one or retry later"
            ),
        }
    }

    /// 503 + `Retry-After` for a client over a cap.
    pub(crate) fn over_cap(route: &str, id: Value, refusal: CapRefusal) -> Response {
        let message = cap_message(route, refusal);
        let mut r = protocol(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            decide::SERVER_BUSY,
            &message,
        );
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(decide::CAP_RETRY_AFTER_SECS),
        );
        r
    }

    fn event(msg: &Value) -> Bytes {
        Bytes::from(format!("event: message\ndata: {msg}\n\n"))
    }

    fn event_stream(body: Body) -> Response {
        let mut r = Response::new(body);
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    }

    /// One message as an event stream.
    pub(crate) fn sse_once(msg: &Value) -> Response {
        event_stream(Body::from(event(msg)))
    }

    /// A request's answer: every message of `rx` as an event stream, or only the response as
    /// JSON when the client does not accept event streams.
    pub(crate) async fn answer(mut rx: mpsc::Receiver<Value>, sse: bool) -> Response {
        if sse {
            let stream = ReceiverStream::new(rx).map(|msg| Ok::<_, Infallible>(event(&msg)));
            return event_stream(Body::from_stream(stream));
        }
        while let Some(msg) = rx.recv().await {
            if let Kind::Response { .. } = decide::classify(&msg) {
                return json(StatusCode::OK, &msg);
            }
        }
        error(
            StatusCode::OK,
            Value::Null,
            "the stdio server did not answer",
        )
    }

    /// The standalone stream of a session, with keep-alive comments.
    pub(crate) fn standalone(mut rx: mpsc::Receiver<Value>) -> Response {
        let (tx, out) = mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(KEEPALIVE);
            tick.tick().await;
            loop {
                let frame = tokio::select! {
                    msg = rx.recv() => match msg {
                        Some(msg) => event(&msg),
                        None => break,
                    },
                    _ = tick.tick() => Bytes::from_static(b": keep-alive\n\n"),
                };
                if tx.send(frame).await.is_err() {
                    break;
                }
            }
        });
        let stream = ReceiverStream::new(out).map(Ok::<_, Infallible>);
        event_stream(Body::from_stream(stream))
    }
}
