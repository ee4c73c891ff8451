//! What a path is (an MCP route, its RFC 9728 document, the authorization server, or one of
//! the gateway's own endpoints), and the answers of the gateway's own endpoints: `/healthz`,
//! `/readyz`, the protected-resource documents, `/favicon.ico` and `/metrics`.

use std::{net::IpAddr, time::Duration};

use crate::{
    config::{Settings, Upstream},
    forward, metrics, oauth,
    reply::{Rejection, Reply},
};

use super::{Gateway, Step};

/// What a request's path addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    AuthServer,
    /// The operator console (`/admin…`).
    Console,
    Favicon,
    Metrics,
    Health,
    Ready,
    /// The RFC 9728 document of route `usize`.
    ResourceMetadata(usize),
    /// The MCP endpoint of route `usize` (`/mcp` or `/NAME/mcp`).
    Mcp(usize),
    Unknown,
}

impl Target {
    /// What `path` addresses under `settings`.
    pub(super) fn of(settings: &Settings, path: &str) -> Self {
        if oauth::is_as_path(path) {
            return Self::AuthServer;
        }
        if crate::console::is_console_path(path) {
            return Self::Console;
        }
        match path {
            "/healthz" => Self::Health,
            // Browsers ask for it on the login page; answer without an error in their console.
            "/favicon.ico" => Self::Favicon,
            "/metrics" => Self::Metrics,
            "/readyz" => Self::Ready,
            p if p.starts_with("/.well-known/oauth-protected-resource") => settings
                .route_for_metadata(p)
                .map_or(Self::Unknown, Self::ResourceMetadata),
            p => settings.route_for_path(p).map_or(Self::Unknown, Self::Mcp),
        }
    }

    /// The target as a metrics label (every MCP route is `mcp`: the label stays bounded).
    pub(super) fn metric(self) -> metrics::RouteLabel {
        use metrics::RouteLabel;
        match self {
            Self::Mcp(_) => RouteLabel::Mcp,
            Self::AuthServer => RouteLabel::OAuth,
            Self::ResourceMetadata(_) => RouteLabel::WellKnown,
            Self::Health | Self::Ready => RouteLabel::Health,
            Self::Metrics => RouteLabel::Metrics,
            Self::Favicon | Self::Console | Self::Unknown => RouteLabel::Other,
        }
    }

    /// The MCP route the target belongs to, if any.
    pub(super) fn route(self) -> Option<usize> {
        match self {
            Self::Mcp(i) | Self::ResourceMetadata(i) => Some(i),
            _ => None,
        }
    }
}

/// Who is asking for a built-in endpoint: what `/metrics` is judged on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller {
    /// The method is `GET` or `HEAD`.
    pub(super) get: bool,
    /// The socket's peer.
    pub(super) peer: Option<IpAddr>,
    /// The resolved client (the peer, or `X-Forwarded-For` from a trusted proxy).
    pub(super) client: Option<IpAddr>,
    /// The request carried `X-Forwarded-For` or `Forwarded`.
    pub(super) forwarded: bool,
}

impl Gateway {
    /// The answer of a built-in endpoint (any target but `Mcp` and `AuthServer`).
    pub(super) async fn builtin(&self, target: Target, caller: Caller) -> Step {
        match target {
            Target::Health => Step::Answer(Reply::json(200, &serde_json::json!({"status": "ok"}))),
            Target::Ready if self.upstream_ready().await => {
                Step::Answer(Reply::json(200, &serde_json::json!({"status": "ready"})))
            }
            Target::Ready => Step::Refuse(Rejection::NotReady),
            Target::ResourceMetadata(i) if caller.get => match self.routes.get(i) {
                Some(edge) => Step::Answer(
                    Reply::bytes(200, "application/json", edge.metadata.clone())
                        .header("cache-control", "public, max-age=3600")
                        .header("access-control-allow-origin", "*"),
                ),
                None => Step::Refuse(Rejection::NotFound),
            },
            Target::ResourceMetadata(_) => {
                Step::Refuse(Rejection::MethodNotAllowed { allow: "GET, HEAD" })
            }
            Target::Favicon => {
                Step::Answer(Reply::empty(204).header("cache-control", "public, max-age=86400"))
            }
            // Operators scrape from the machine itself; the public never sees it.
            Target::Metrics if self.metrics_allowed(caller) => match self.metrics.encode() {
                Ok(text) => Step::Answer(Reply::bytes(200, metrics::CONTENT_TYPE, text.into())),
                Err(_) => Step::Refuse(Rejection::Internal),
            },
            Target::Metrics
            | Target::Unknown
            | Target::Mcp(_)
            | Target::AuthServer
            | Target::Console => Step::Refuse(Rejection::NotFound),
        }
    }

    fn metrics_allowed(&self, caller: Caller) -> bool {
        let trusted = &self.settings.admission.trusted_proxies;
        forward::metrics_allowed(caller.peer, caller.client, caller.forwarded, trusted)
    }

    /// Ready when every route's upstream accepts a connection; a balanced route while one of
    /// its instances is up (the prober knows).
    async fn upstream_ready(&self) -> bool {
        for (route, edge) in self.settings.routes.iter().zip(&self.routes) {
            let up = match &edge.instances {
                Some(instances) => instances.any_healthy(),
                None => accepts(route.upstream.primary()).await,
            };
            if !up {
                return false;
            }
        }
        true
    }
}

/// Whether `upstream` accepts a connection within half a second.
pub(super) async fn accepts(upstream: &Upstream) -> bool {
    let wait = Duration::from_millis(500);
    match &upstream.socket {
        Some(path) => matches!(
            tokio::time::timeout(wait, tokio::net::UnixStream::connect(path)).await,
            Ok(Ok(_))
        ),
        None => matches!(
            tokio::time::timeout(
                wait,
                tokio::net::TcpStream::connect(upstream.authority.as_str())
            )
            .await,
            Ok(Ok(_))
        ),
    }
}
