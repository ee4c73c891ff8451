//! Streamable HTTP transport: the axum app that serves `/mcp` and `/healthz`.

use std::{future::Future, sync::Arc};

use axum::serve::{Listener, ListenerExt};
use axum::{Router, routing::get};
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower::Service as _;

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
/// `pforte up` uses: no TCP port at all) until `shutdown` resolves, then drains: no new
/// connections, open requests answered, event streams ended (their sessions' token is
/// cancelled), idle connections closed; returns when every connection is gone.
///
/// An accept loop of its own with hyper's HTTP/1 connection (HTTP/1.1 only: what the gateway
/// speaks to the service) instead of `axum::serve`, whose auto builder (HTTP/1 or, with
/// hyper-util's `http2`, HTTP/2, told apart per connection) cost an open event stream about
/// 11 KiB more: it reads the first 24 bytes itself and hands them to hyper ahead of the rest,
/// so hyper's first head parse takes two reads and its read buffer doubles to 16 KiB for the
/// connection's life (docs/performance.md, "8,000 streams").
pub async fn serve<L>(
    mut listener: L,
    cfg: &ServiceConfig,
    planner: Arc<Planner>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener,
    L::Addr: std::fmt::Debug,
{
    let cancel = CancellationToken::new();
    // Each connection serves a clone of the finished `Router`. (Served through
    // `Router::with_state` per connection, axum rebuilt its route table for each one, about
    // 1.2 KiB that a long-lived `GET /mcp` stream's connection held for its whole life.)
    let app = router(cfg, planner, cancel.child_token());
    let draining = CancellationToken::new();
    // Every connection task holds a receiver: `closed()` resolves when the last one is gone.
    let (open_tx, open_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, _addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        tokio::spawn(connection(
            io,
            app.clone(),
            draining.clone(),
            open_rx.clone(),
        ));
    }
    drop(listener);
    draining.cancel();
    cancel.cancel();
    drop(open_rx);
    open_tx.closed().await;
    Ok(())
}

/// Serves one connection until it closes, or until `draining`: then hyper finishes the request in
/// flight (an event stream ends with its session's token) and closes the connection.
async fn connection<I>(io: I, app: Router, draining: CancellationToken, _open: watch::Receiver<()>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| app.clone().call(req));
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = draining.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(err) = result {
        tracing::trace!(%err, "connection ended with an error");
    }
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
