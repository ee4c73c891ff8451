//! The process's own background services beside the proxy: the signal watch that stops the
//! server (and remembers which signal), the authorization server's periodic maintenance, and the
//! `metrics_listen` listener with its one answer.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::{
    server::{ShutdownSignal, ShutdownSignalWatch, ShutdownWatch},
    services::background::BackgroundService,
};

use crate::{
    metrics::{self, Metrics},
    oauth::AuthService,
};

/// Ctrl-C and SIGTERM both stop the gateway gracefully (for `drain_secs`): background services
/// see the shutdown signal and can stop their children. The signal's name is kept for the
/// "stopped after …" line. The listeners are registered by [`Signals::listen`] before the
/// server starts (the public listener answers as soon as its service runs, and a signal that
/// came before pingora's main loop asked for it would otherwise end the process unhandled).
#[derive(Default)]
pub(crate) struct Signals(
    pub(super) Arc<std::sync::OnceLock<&'static str>>,
    std::sync::Mutex<Option<Listeners>>,
);

/// The registered SIGINT and SIGTERM listeners.
type Listeners = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

/// SIGINT and SIGTERM listeners on the current runtime, or `None` when they cannot be had.
fn register() -> Option<Listeners> {
    use tokio::signal::unix::{SignalKind, signal};
    Some((
        signal(SignalKind::interrupt()).ok()?,
        signal(SignalKind::terminate()).ok()?,
    ))
}

impl Signals {
    /// Registers the listeners on `runtime` (any runtime's driver delivers them); a failure is
    /// left to `recv`, which registers them itself.
    pub(super) fn listen(&self, runtime: &tokio::runtime::Handle) {
        let _entered = runtime.enter();
        if let (Some(both), Ok(mut slot)) = (register(), self.1.lock()) {
            *slot = Some(both);
        }
    }
}

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let registered = self.1.lock().ok().and_then(|mut slot| slot.take());
        let Some((mut int, mut term)) = registered.or_else(register) else {
            return std::future::pending().await;
        };
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        let _ = self.0.set(name);
        tracing::info!(signal = name, "stopping");
        ShutdownSignal::GracefulTerminate
    }
}

/// Reaps unused clients and expired records every ten minutes.
pub(super) struct Maintenance(pub(super) Arc<AuthService>);

#[async_trait]
impl BackgroundService for Maintenance {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        loop {
            match self.0.server().maintenance().await {
                Ok(report) => tracing::debug!(?report, "oauth maintenance"),
                Err(e) => tracing::warn!(error = %e, "oauth maintenance failed"),
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                () = tokio::time::sleep(std::time::Duration::from_secs(600)) => {}
            }
        }
    }
}

/// `metrics_listen`: a listener of its own that serves only `GET /metrics` (bound before the
/// server starts, so a bad address fails `serve` at once).
pub(super) struct MetricsListener {
    pub(super) listener: std::sync::Mutex<Option<std::net::TcpListener>>,
    pub(super) metrics: Arc<Metrics>,
}

#[async_trait]
impl BackgroundService for MetricsListener {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(listener) = self.listener.lock().ok().and_then(|mut l| l.take()) else {
            return;
        };
        let listener = match listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
        {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "metrics listener unusable");
                return;
            }
        };
        let addr = listener.local_addr().ok();
        let shared = self.metrics.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let metrics = shared.clone();
                async move { metrics_answer(&metrics) }
            }),
        );
        tracing::info!(listen = ?addr, "metrics listener started");
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "metrics listener failed");
        }
    }
}

/// The exposition as the metrics listener answers it.
fn metrics_answer(metrics: &Metrics) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match metrics.encode() {
        Ok(text) => ([(http::header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(_) => http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
