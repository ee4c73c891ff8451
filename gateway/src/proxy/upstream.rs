//! The way upstream: what the gateway keeps per route (its RFC 9728 document, policy, CA and
//! instances), which instance and peer a request goes to, what a failed connect means for a
//! balanced route, and the request as the upstream sees it (credential stripped, trusted
//! identity headers, its own host and path).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use bytes::Bytes;
use pingora::{Error, ErrorType, Result, http::RequestHeader, upstreams::peer::HttpPeer};

use crate::{
    balance::{self, Instances},
    config::{self, Settings, Upstream, UpstreamKind},
    forward, metadata, metrics, policy,
    reply::Rejection,
};

use super::{
    Gateway, GatewayError, RequestCtx,
    peers::{PeerOptions, PeerSlot},
};

/// What the request path keeps per route besides its settings.
pub(super) struct RouteEdge {
    /// The RFC 9728 document, serialised once.
    pub(super) metadata: Bytes,
    pub(super) policy: policy::Policy,
    /// An https upstream's own CA (`ca_file`), parsed once; `None`: the system roots.
    ca: Option<Arc<pingora::protocols::tls::CaType>>,
    /// A route with several `urls`: its instances and their health.
    pub(super) instances: Option<Arc<Instances>>,
    /// One prebuilt peer per instance (one for a route with one upstream).
    peers: Vec<Arc<PeerSlot>>,
    /// A route with one upstream: whether the last connect to it succeeded (its
    /// `pforte_upstream_up`).
    pub(super) reached: Arc<AtomicBool>,
}

impl std::fmt::Debug for RouteEdge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteEdge")
            .field("policy", &self.policy)
            .field("ca", &self.ca.is_some())
            .finish_non_exhaustive()
    }
}

impl RouteEdge {
    /// Route `i` of `settings`, prepared for the request path.
    pub(super) fn new(settings: &Settings, i: usize, now_ms: u64) -> Result<Self, GatewayError> {
        let route = &settings.routes[i];
        let ca = match route.upstream.ca_file() {
            Some(path) => Some(load_ca(path).map_err(|reason| GatewayError::CaFile {
                route: route.name.clone(),
                path: path.display().to_string(),
                reason,
            })?),
            None => None,
        };
        let options = PeerOptions::of(route, i as u64, ca.clone());
        let upstreams = match &route.upstream {
            UpstreamKind::Replicas { instances, .. } => instances.iter().collect(),
            kind => vec![kind.primary()],
        };
        let peers = upstreams
            .into_iter()
            .map(|u| PeerSlot::new(u, &route.path, options.clone(), now_ms).map(Arc::new))
            .collect::<Result<_>>()
            .map_err(|e| GatewayError::Peer {
                route: route.name.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            metadata: Bytes::from(metadata::protected_resource(settings, route).to_string()),
            policy: settings.route_policy(i),
            ca,
            instances: instances_of(route)?,
            peers,
            reached: Arc::new(AtomicBool::new(true)),
        })
    }
}

/// The instances of a route with several `urls`, named by their URLs (`scheme://host:port/path`,
/// derived from the configuration alike on every gateway); `None` for any other route.
pub(super) fn instances_of(route: &config::Route) -> Result<Option<Arc<Instances>>, GatewayError> {
    let UpstreamKind::Replicas { instances, .. } = &route.upstream else {
        return Ok(None);
    };
    if instances.len() < 2 {
        return Ok(None);
    }
    let urls: Vec<String> = instances.iter().map(Upstream::http_url).collect();
    Instances::new(&route.name, &urls)
        .map(|i| Some(Arc::new(i)))
        .map_err(|source| GatewayError::Instances {
            route: route.name.clone(),
            source,
        })
}

/// The upstream a request of `route` goes to: instance `instance` of a balanced route, else
/// the route's one upstream.
pub(super) fn upstream_of(route: &config::Route, instance: Option<usize>) -> &Upstream {
    match (&route.upstream, instance) {
        (UpstreamKind::Replicas { instances, .. }, Some(i)) => {
            instances.get(i).unwrap_or_else(|| route.upstream.primary())
        }
        _ => route.upstream.primary(),
    }
}

/// The certificates of a PEM CA file, as pingora's per-peer CA list.
fn load_ca(path: &std::path::Path) -> Result<Arc<pingora::protocols::tls::CaType>, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".to_owned());
    }
    Ok(certs
        .into_iter()
        .map(|der| {
            pingora::utils::tls::WrappedX509::new(der.to_vec(), pingora::utils::tls::parse_x509)
        })
        .collect::<Vec<_>>()
        .into())
}

impl Gateway {
    /// The request's route's instances, when it is balanced.
    pub(super) fn instances(&self, ctx: &RequestCtx) -> Option<&Arc<Instances>> {
        ctx.mcp_route
            .and_then(|i| self.routes.get(i))
            .and_then(|r| r.instances.as_ref())
    }

    /// The instance a balanced route's request went to, and the URL naming it.
    pub(super) fn instance_url(&self, ctx: &RequestCtx) -> Option<&str> {
        let i = ctx.instance?;
        Some(self.instances(ctx)?.get(i)?.url.as_str())
    }

    /// The peer the request goes to: a session's instance, a balanced pick (another one after a
    /// failed connect), or the route's one upstream.
    pub(super) async fn peer(&self, ctx: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        let Some(i) = ctx.mcp_route else {
            return Error::e_explain(ErrorType::InternalError, "no route for the upstream");
        };
        let route = &self.settings.routes[i];
        if let Some(instances) = self.instances(ctx) {
            // A session's instance was decided by the admission; anything else is balanced,
            // and a retry after a failed connect avoids the instance that failed.
            let chosen = match ctx.instance {
                Some(i) if ctx.in_session || ctx.task_pinned || ctx.connect_failures == 0 => {
                    Some(i)
                }
                Some(failed) => instances.pick_other(failed),
                None => instances.pick(),
            };
            ctx.instance = Some(chosen.ok_or_else(|| {
                Error::explain(
                    ErrorType::ConnectNoRoute,
                    format!("route {:?}: no instance is up", route.name),
                )
                .into_up()
            })?);
        }
        self.slot(i, ctx.instance)?.get(self.clock.now_ms()).await
    }

    /// The prebuilt peer of route `route`'s instance (its one upstream when not balanced).
    fn slot(&self, route: usize, instance: Option<usize>) -> Result<&Arc<PeerSlot>> {
        let peers = self.routes.get(route).map_or(&[][..], |r| &r.peers[..]);
        instance
            .and_then(|k| peers.get(k))
            .or_else(|| peers.first())
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "a route without a peer"))
    }

    /// A failed connect to an instance of a balanced route marks it down and, outside a
    /// session, lets pingora retry on another one.
    pub(super) fn connect_failed(&self, ctx: &mut RequestCtx, e: &mut Error) {
        self.reached(ctx, false);
        if let (Some(instances), Some(i)) = (self.instances(ctx), ctx.instance) {
            if balance::marks_down(e) {
                instances.mark_down(i, self.clock.now_ms(), e.etype().as_str());
            }
            ctx.connect_failures += 1;
            let pinned = ctx.in_session || ctx.task_pinned;
            if balance::retries_elsewhere(pinned, instances.len(), ctx.connect_failures) {
                e.set_retry(true);
            }
        }
    }

    /// Records whether the request's single-upstream route was reached (for the metrics).
    pub(super) fn reached(&self, ctx: &RequestCtx, reached: bool) {
        if let Some(edge) = ctx.mcp_route.and_then(|i| self.routes.get(i))
            && edge.instances.is_none()
        {
            edge.reached.store(reached, Ordering::Relaxed);
        }
    }

    /// The scrape-time series' route sources: each route's instances and their health.
    pub(crate) fn live_routes(&self) -> Vec<metrics::live::RouteSource> {
        self.settings
            .routes
            .iter()
            .zip(&self.routes)
            .map(|(route, edge)| {
                let upstreams = match &route.upstream {
                    UpstreamKind::Replicas { instances, .. } => instances.iter().collect(),
                    kind => vec![kind.primary()],
                };
                metrics::live::RouteSource {
                    route: metrics::RouteName::from(route.name.as_str()),
                    instances: instance_names(&upstreams),
                    health: match &edge.instances {
                        Some(instances) => {
                            metrics::live::InstanceHealth::Balanced(instances.clone())
                        }
                        None => metrics::live::InstanceHealth::Single(edge.reached.clone()),
                    },
                }
            })
            .collect()
    }

    /// A failed proxy attempt to an instance marks it down; when the request's session or task
    /// lived there, the answer: the session is gone (the client re-initializes), or the task
    /// is not found (it is never asked of another instance).
    pub(super) fn proxy_failed(&self, ctx: &RequestCtx, e: &Error) -> Option<Rejection> {
        let (Some(instances), Some(i)) = (self.instances(ctx), ctx.instance) else {
            return None;
        };
        if !balance::marks_down(e) {
            return None;
        }
        instances.mark_down(i, self.clock.now_ms(), e.etype().as_str());
        if ctx.connect_failures == 0 {
            None
        } else if ctx.task_pinned {
            let id = ctx.mcp.message.as_ref().map(|m| m.id.clone());
            Some(Rejection::TaskUnreachable {
                id: id.unwrap_or_default(),
            })
        } else if ctx.in_session {
            Some(Rejection::SessionNotFound)
        } else {
            None
        }
    }

    /// The request as the upstream sees it: no credential or look-alike identity header, the
    /// trusted identity headers, the upstream's host and path.
    pub(super) fn rewrite_request(
        &self,
        req: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some(principal) = &ctx.principal else {
            // request_filter lets only authenticated requests through; refuse loudly otherwise.
            return Error::e_explain(
                ErrorType::InternalError,
                "unauthenticated request reached the upstream phase",
            );
        };
        let credential = ctx
            .mcp_route
            .and_then(|i| self.settings.routes.get(i))
            .and_then(|r| credential_header(r.upstream_auth.as_ref()));
        let stripped: Vec<http::HeaderName> = req
            .headers
            .keys()
            .filter(|name| {
                forward::is_stripped(name.as_str())
                    || credential
                        .is_some_and(|c| forward::is_credential_twin(name.as_str(), c.as_str()))
            })
            .cloned()
            .collect();
        for name in &stripped {
            req.remove_header(name);
        }
        let client_ip = ctx.client_ip.map(|ip| ip.to_string());
        let proto = if self.settings.listen.serves_https() {
            "https"
        } else {
            "http"
        };
        let Some(route) = ctx.mcp_route.and_then(|i| self.settings.routes.get(i)) else {
            return Error::e_explain(ErrorType::InternalError, "no route for the upstream");
        };
        let upstream = upstream_of(route, ctx.instance);
        for (name, value) in forward::trusted_headers(
            principal,
            &route.name,
            &ctx.request_id,
            client_ip.as_deref(),
            proto,
            forward::Disclose {
                identity: route.identity_headers,
                client_ip: route.forward_client_ip,
            },
        ) {
            req.insert_header(name, value)?;
        }
        req.insert_header(http::header::HOST, upstream.authority.as_str())?;
        // The upstream's own credential for this person (after the client's was stripped).
        if let Some(c) = &ctx.upstream_auth {
            req.insert_header(c.name.clone(), c.value.clone())?;
        }
        let route_index = ctx.mcp_route.unwrap_or_default();
        let slot = self.slot(route_index, ctx.instance)?;
        let uri = match req.uri.path_and_query() {
            Some(pq) => slot.uri(pq.as_str())?,
            None => slot.uri(&route.path)?,
        };
        req.set_uri(uri);
        ctx.upstream_sent = Some(Instant::now());
        Ok(())
    }
}

/// The header a route writes the upstream's credential into, if it writes one into a header
/// (`Authorization`, OAuth's, is stripped anyway).
fn credential_header(auth: Option<&crate::config::UpstreamAuth>) -> Option<&http::HeaderName> {
    use crate::config::{Injection, UpstreamAuth};
    match auth? {
        UpstreamAuth::Header { into, .. }
        | UpstreamAuth::Shared {
            into: Injection::Header(into),
            ..
        } => Some(&into.name),
        UpstreamAuth::OAuth { .. } | UpstreamAuth::Env { .. } | UpstreamAuth::Shared { .. } => None,
    }
}

/// The instance label of each upstream of a route: the URL as configured (bounded by the
/// config), `unix:PATH` for a socket.
fn instance_names(upstreams: &[&Upstream]) -> Vec<String> {
    upstreams
        .iter()
        .map(|u| match &u.socket {
            Some(path) => format!("unix:{}", path.display()),
            None => u.http_url(),
        })
        .collect()
}
