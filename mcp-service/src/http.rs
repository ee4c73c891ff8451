//! Streamable HTTP transport: the axum app that serves `/mcp` and `/healthz`.

use std::{future::Future, sync::Arc};

use axum::serve::{Listener, ListenerExt};
use axum::{Router, routing::get};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::{config::ServiceConfig, sessions::Sessions, surface::PlanService, tools::Planner};

/// Builds the router: `/mcp` (MCP streamable HTTP), `/healthz` and `/readyz`. Every session shares the
/// planner (engine and store) and the tool catalog; sessions are held by [`Sessions`].
pub(crate) fn router(
    cfg: &ServiceConfig,
    planner: Arc<Planner>,
    cancel: CancellationToken,
) -> Router {
    let tools = PlanService::tools(cfg.read_only);
    let mcp = StreamableHttpService::new(
        move || {
            Ok(PlanService::with_tools(
                Arc::clone(&planner),
                Arc::clone(&tools),
            ))
        },
        Arc::new(Sessions::default()),
        StreamableHttpServerConfig::default()
            .with_allowed_hosts(cfg.allowed_hosts.clone())
            .with_max_request_body_bytes(cfg.max_body_bytes)
            .with_cancellation_token(cancel),
    );
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/healthz", get(|| async { "ok\n" }))
        // A Kubernetes readiness probe's path: serving is being ready (no upstream of its own).
        .route("/readyz", get(|| async { "ok\n" }))
}

/// Where `serve` listens: a TCP address or a Unix domain socket (`unix:PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(std::net::SocketAddr),
    Unix(std::path::PathBuf),
}

impl std::str::FromStr for Listen {
    type Err = String;

    /// `unix:PATH` (an absolute or relative path) or `host:port`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("unix:") {
            Some("") => Err("unix: needs a socket path".into()),
            Some(path) => Ok(Self::Unix(path.into())),
            None => s
                .parse()
                .map(Self::Tcp)
                .map_err(|e| format!("{s:?}: {e} (expected HOST:PORT or unix:PATH)")),
        }
    }
}

/// Binds a Unix domain socket at `path`, owner-only (0600) before anything is accepted. A
/// stale socket left by a previous run is removed first; any other kind of file at `path` is
/// an error, never deleted.
pub fn bind_unix(path: &std::path::Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves on `listener` (TCP through [`nodelay`], or a Unix domain socket, which is what
/// `pforte up` uses: no TCP port at all) until `shutdown` resolves, then drains open requests.
pub async fn serve<L>(
    listener: L,
    cfg: &ServiceConfig,
    planner: Arc<Planner>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener,
    L::Addr: std::fmt::Debug,
{
    let cancel = CancellationToken::new();
    let app = router(cfg, planner, cancel.child_token());
    // `into_make_service`: each connection gets a clone of the finished router. Served as a
    // `Router`, axum rebuilds its route table for every connection (`with_state`), about
    // 1.2 KiB that a long-lived `GET /mcp` stream's connection holds for its whole life.
    axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(async move {
            shutdown.await;
            cancel.cancel();
        })
        .await
}

/// A TCP listener whose every accepted connection gets `TCP_NODELAY`: a JSON-RPC answer is one
/// small write, and without it the kernel holds the tail of each response for the peer's
/// delayed ACK (about 40 ms per call on loopback).
pub fn nodelay(listener: TcpListener) -> impl Listener<Addr = std::net::SocketAddr> {
    listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(%err, "could not set TCP_NODELAY on an accepted connection");
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn listen_parses_tcp_and_unix() {
        assert_eq!(
            "127.0.0.1:0".parse::<Listen>().unwrap(),
            Listen::Tcp(([127, 0, 0, 1], 0).into())
        );
        assert_eq!(
            "unix:/run/x.sock".parse::<Listen>().unwrap(),
            Listen::Unix("/run/x.sock".into())
        );
        assert!("unix:".parse::<Listen>().is_err());
        assert!("nowhere".parse::<Listen>().is_err());
    }

    #[tokio::test]
    async fn unix_socket_is_owner_only_and_a_stale_one_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp.sock");
        let first = bind_unix(&path).unwrap();
        drop(first);
        // The file is left behind (stale): a second bind replaces it.
        let _second = bind_unix(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A regular file is never deleted.
        let file = dir.path().join("plain");
        std::fs::write(&file, b"keep").unwrap();
        assert!(bind_unix(&file).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    }
}
