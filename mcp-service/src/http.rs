//! Streamable HTTP transport: the axum app that serves `/mcp` and `/healthz`.

use std::{future::Future, sync::Arc};

use axum::{Router, routing::get, serve::ListenerExt};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{config::ServiceConfig, server::PlanService, tools::Planner};

/// Builds the router: `/mcp` (MCP streamable HTTP) and `/healthz`. Every session shares the
/// planner (engine and store).
pub fn router(cfg: &ServiceConfig, planner: Arc<Planner>, cancel: CancellationToken) -> Router {
    let read_only = cfg.read_only;
    let mcp = StreamableHttpService::new(
        move || Ok(PlanService::new(Arc::clone(&planner), read_only)),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_allowed_hosts(cfg.allowed_hosts.clone())
            .with_max_request_body_bytes(cfg.max_body_bytes)
            .with_cancellation_token(cancel),
    );
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/healthz", get(|| async { "ok\n" }))
}

/// Serves until `shutdown` resolves, then drains open requests. Every accepted connection gets
/// `TCP_NODELAY`: a JSON-RPC answer is one small write, and without it the kernel holds the
/// tail of each response for the peer's delayed ACK (about 40 ms per call on loopback).
pub async fn serve(
    listener: TcpListener,
    cfg: &ServiceConfig,
    planner: Arc<Planner>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let cancel = CancellationToken::new();
    let app = router(cfg, planner, cancel.child_token());
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(%err, "could not set TCP_NODELAY on an accepted connection");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            cancel.cancel();
        })
        .await
}
