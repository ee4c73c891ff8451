//! What a path is (an MCP route, its RFC 9728 document, the authorization server, or one of
//! the gateway's own endpoints), and the answers of the gateway's own endpoints: `/healthz`,
//! `/readyz` (each route's health), the protected-resource documents, `/favicon.ico` and `/metrics`.

use std::{net::IpAddr, sync::atomic::Ordering, time::Duration};

use crate::{
    config::{Settings, Upstream},
    forward, metrics, oauth,
    reply::{Rejection, Reply},
};

use super::{Gateway, Outcome};

/// What a request's path addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    AuthServer,
    /// The operator console (`/admin…`).
    Console,
    /// The connect pages of upstream credentials (`/connect/…`, `/connections`).
    Connect,
    Favicon,
    Metrics,
    Health,
    Ready,
    /// The RFC 9728 document of route `usize`.
    ResourceMetadata(usize),
    /// The RFC 9728 document of virtual server `usize` (`[[virtual]]`).
    VirtualMetadata(usize),
    /// The MCP endpoint of route `usize` (`/mcp` or `/NAME/mcp`).
    Mcp(usize),
    /// The MCP endpoint of virtual server `usize` (`/NAME/mcp` of a `[[virtual]]`).
    Virtual(usize),
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
        if super::connect::is_connect_path(path) {
            return Self::Connect;
        }
        match path {
            "/healthz" => Self::Health,
            // Browsers ask for it on the login page; answer without an error in their console.
            "/favicon.ico" => Self::Favicon,
            "/metrics" => Self::Metrics,
            "/readyz" => Self::Ready,
            p if p.starts_with("/.well-known/oauth-protected-resource") => settings
                .route_for_metadata(p)
                .map(Self::ResourceMetadata)
                .or_else(|| settings.virtual_for_metadata(p).map(Self::VirtualMetadata))
                .unwrap_or(Self::Unknown),
            p => settings
                .route_for_path(p)
                .map(Self::Mcp)
                .or_else(|| settings.virtual_for_path(p).map(Self::Virtual))
                .unwrap_or(Self::Unknown),
        }
    }

    /// The target as a metrics label (every MCP route is `mcp`: the label stays bounded).
    pub(super) fn metric(self) -> metrics::RouteLabel {
        use metrics::RouteLabel;
        match self {
            Self::Mcp(_) | Self::Virtual(_) => RouteLabel::Mcp,
            Self::AuthServer => RouteLabel::OAuth,
            Self::ResourceMetadata(_) | Self::VirtualMetadata(_) => RouteLabel::WellKnown,
            Self::Health | Self::Ready => RouteLabel::Health,
            Self::Metrics => RouteLabel::Metrics,
            Self::Favicon | Self::Console | Self::Connect | Self::Unknown => RouteLabel::Other,
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
    pub(super) async fn builtin(&self, target: Target, caller: Caller) -> Outcome {
        match target {
            Target::Health => {
                Outcome::Answer(Reply::json(200, &serde_json::json!({"status": "ok"})))
            }
            Target::Ready => Outcome::Answer(readiness(&self.route_health().await)),
            Target::ResourceMetadata(i) if caller.get => match self.routes.get(i) {
                Some(edge) => Outcome::Answer(
                    Reply::bytes(200, "application/json", edge.metadata.clone())
                        .header("cache-control", "public, max-age=3600")
                        .header("access-control-allow-origin", "*"),
                ),
                None => Outcome::Refuse(Rejection::NotFound),
            },
            Target::VirtualMetadata(i) if caller.get => match self.settings.virtuals.get(i) {
                Some(v) => Outcome::Answer(
                    Reply::json(200, &crate::metadata::virtual_resource(&self.settings, v))
                        .header("cache-control", "public, max-age=3600")
                        .header("access-control-allow-origin", "*"),
                ),
                None => Outcome::Refuse(Rejection::NotFound),
            },
            Target::ResourceMetadata(_) | Target::VirtualMetadata(_) => {
                Outcome::Refuse(Rejection::MethodNotAllowed { allow: "GET, HEAD" })
            }
            Target::Favicon => {
                Outcome::Answer(Reply::empty(204).header("cache-control", "public, max-age=86400"))
            }
            // Operators scrape from the machine itself; the public never sees it.
            Target::Metrics if self.metrics_allowed(caller) => match self.metrics.encode() {
                Ok(text) => Outcome::Answer(Reply::bytes(200, metrics::CONTENT_TYPE, text.into())),
                Err(_) => Outcome::Refuse(Rejection::Internal),
            },
            Target::Metrics
            | Target::Unknown
            | Target::Mcp(_)
            | Target::Virtual(_)
            | Target::AuthServer
            | Target::Console
            | Target::Connect => Outcome::Refuse(Rejection::NotFound),
        }
    }

    fn metrics_allowed(&self, caller: Caller) -> bool {
        let trusted = &self.settings.admission.trusted_proxies;
        forward::metrics_allowed(caller.peer, caller.client, caller.forwarded, trusted)
    }

    /// Every route's health: an upstream that accepts a connection, or for a balanced route
    /// one of its instances up (the prober knows). The probes run at once, so the answer comes
    /// within half a second however many routes are down.
    async fn route_health(&self) -> Vec<RouteHealth<'_>> {
        let probes =
            self.settings
                .routes
                .iter()
                .zip(&self.routes)
                .map(|(route, edge)| async move {
                    let failure = match &edge.instances {
                        Some(instances) => {
                            let up = instances.healthy_count();
                            (up == 0).then(|| format!("no instance up (0 of {})", instances.len()))
                        }
                        None => {
                            let failure = probe(route.upstream.primary()).await.err();
                            // The probe is news for `pforte_upstream_up` too.
                            edge.reached.store(failure.is_none(), Ordering::Relaxed);
                            failure
                        }
                    };
                    RouteHealth {
                        route: &route.name,
                        required: route.required,
                        failure,
                    }
                });
        futures::future::join_all(probes).await
    }
}

/// One route's health, as `/readyz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RouteHealth<'a> {
    pub(super) route: &'a str,
    pub(super) required: bool,
    /// Why the route is down (`None`: up). A fixed phrase: never an upstream address, as
    /// `/readyz` is public.
    pub(super) failure: Option<String>,
}

/// The `/readyz` answer: 200 unless a required route is down, the body naming every route that
/// is down (`{"status":"ready"|"not_ready","ready":bool,"failing":[{"route","required","reason"}]}`).
pub(super) fn readiness(health: &[RouteHealth<'_>]) -> Reply {
    let failing: Vec<serde_json::Value> = health
        .iter()
        .filter_map(|h| {
            h.failure.as_ref().map(|reason| {
                serde_json::json!({"route": h.route, "required": h.required, "reason": reason})
            })
        })
        .collect();
    let ready = !health.iter().any(|h| h.required && h.failure.is_some());
    let (status, word) = if ready {
        (200, "ready")
    } else {
        (503, "not_ready")
    };
    let body = serde_json::json!({"status": word, "ready": ready, "failing": failing});
    let reply = Reply::json(status, &body).header("cache-control", "no-store");
    if ready {
        reply
    } else {
        reply.header("retry-after", "5")
    }
}

/// Whether `upstream` accepts a connection within half a second, or why not.
pub(super) async fn probe(upstream: &Upstream) -> Result<(), String> {
    let wait = Duration::from_millis(500);
    let connected = match &upstream.socket {
        Some(path) => tokio::time::timeout(wait, tokio::net::UnixStream::connect(path))
            .await
            .map(|r| r.map(drop)),
        None => tokio::time::timeout(
            wait,
            tokio::net::TcpStream::connect(upstream.authority.as_str()),
        )
        .await
        .map(|r| r.map(drop)),
    };
    match connected {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            std::io::ErrorKind::NotFound => "no socket at the configured path".to_owned(),
            _ => "connect failed".to_owned(),
        }),
        Err(_) => Err("no connection within 500 ms".to_owned()),
    }
}
