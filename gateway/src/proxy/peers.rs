//! Prebuilt upstream peers: one per route and instance, built at start with the route's TLS,
//! CA and timeout options, and cloned per request. An IP address or a Unix socket is fixed; a
//! host name is resolved at start and re-resolved in the background once its address is older
//! than [`RESOLVE_TTL_MS`], so no request waits on DNS except the first after a start whose
//! lookup failed.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use arc_swap::ArcSwapOption;
use pingora::{Error, ErrorType, Result, protocols::tls::CaType, upstreams::peer::HttpPeer};

use crate::{
    config::{self, Upstream},
    forward,
};

/// How long a resolved host name's address is used before it is looked up again.
pub(super) const RESOLVE_TTL_MS: u64 = 30_000;

/// The options every peer of a route shares.
#[derive(Clone)]
pub(super) struct PeerOptions {
    /// The route's index: each route keeps its own upstream connections. pingora's reuse key
    /// does not include the per-peer CA, so without it a connection verified for one route's
    /// `ca_file` would be reused by another route to the same address with another CA.
    pub(super) group_key: u64,
    pub(super) ca: Option<Arc<CaType>>,
    pub(super) connect_timeout: Duration,
    pub(super) read_timeout: Duration,
}

impl PeerOptions {
    pub(super) fn of(route: &config::Route, group_key: u64, ca: Option<Arc<CaType>>) -> Self {
        Self {
            group_key,
            ca,
            connect_timeout: Duration::from_millis(route.connect_timeout_ms),
            read_timeout: Duration::from_millis(route.read_timeout_ms),
        }
    }
}

/// One upstream's peer, ready to clone.
pub(super) struct PeerSlot {
    upstream: Upstream,
    options: PeerOptions,
    /// The route's public path (`/mcp`, `/NAME/mcp`) and the upstream URI a request for
    /// exactly that path (no query: every MCP call) goes to.
    public_path: String,
    plain_uri: http::Uri,
    /// `None` until a host name was resolved.
    peer: ArcSwapOption<HttpPeer>,
    /// When `peer`'s address was resolved (ms, the gateway's clock); 0 for a fixed address.
    resolved_ms: AtomicU64,
    refreshing: Arc<AtomicBool>,
}

impl std::fmt::Debug for PeerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerSlot")
            .field("authority", &self.upstream.authority)
            .finish_non_exhaustive()
    }
}

/// What a slot's address is.
enum Address {
    Socket,
    Fixed(SocketAddr),
    Named,
}

impl PeerSlot {
    /// The slot of `upstream`: built now for a socket or an IP address, and for a host name
    /// whose lookup succeeds now (a blocking lookup: this runs at start, not on a request).
    pub(super) fn new(
        upstream: &Upstream,
        public_path: &str,
        options: PeerOptions,
        now_ms: u64,
    ) -> Result<Self> {
        let slot = Self {
            upstream: upstream.clone(),
            options,
            public_path: public_path.to_owned(),
            plain_uri: uri(&forward::upstream_path(
                public_path,
                public_path,
                &upstream.path,
            ))?,
            peer: ArcSwapOption::empty(),
            resolved_ms: AtomicU64::new(0),
            refreshing: Arc::new(AtomicBool::new(false)),
        };
        match slot.address() {
            Address::Socket => slot.store(slot.build(None)?, 0),
            Address::Fixed(addr) => slot.store(slot.build(Some(addr))?, 0),
            Address::Named => {
                use std::net::ToSocketAddrs as _;
                let first = upstream
                    .authority
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next());
                if let Some(addr) = first {
                    slot.store(slot.build(Some(addr))?, now_ms);
                }
            }
        }
        Ok(slot)
    }

    /// The upstream's URI for a request to `public` (path and query).
    pub(super) fn uri(&self, public: &str) -> Result<http::Uri> {
        if public == self.public_path {
            return Ok(self.plain_uri.clone());
        }
        uri(&forward::upstream_path(
            public,
            &self.public_path,
            &self.upstream.path,
        ))
    }

    fn address(&self) -> Address {
        if self.upstream.socket.is_some() {
            return Address::Socket;
        }
        match self.upstream.authority.parse::<SocketAddr>() {
            Ok(addr) => Address::Fixed(addr),
            Err(_) => Address::Named,
        }
    }

    fn store(&self, peer: HttpPeer, resolved_ms: u64) {
        self.peer.store(Some(Arc::new(peer)));
        self.resolved_ms.store(resolved_ms, Ordering::Release);
    }

    /// A peer for one request: the prebuilt one; a stale host name is looked up again in the
    /// background meanwhile.
    pub(super) async fn get(self: &Arc<Self>, now_ms: u64) -> Result<Box<HttpPeer>> {
        if let Some(peer) = self.peer.load().as_deref() {
            let resolved = self.resolved_ms.load(Ordering::Acquire);
            if resolved != 0 && now_ms.saturating_sub(resolved) > RESOLVE_TTL_MS {
                self.refresh_in_background(now_ms);
            }
            return Ok(Box::new(peer.clone()));
        }
        // A host name that could not be resolved at start: this request waits for it.
        let addr = self.resolve().await?;
        let peer = self.build(Some(addr))?;
        self.store(peer.clone(), now_ms.max(1));
        Ok(Box::new(peer))
    }

    fn refresh_in_background(self: &Arc<Self>, now_ms: u64) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let slot = Arc::clone(self);
        tokio::spawn(async move {
            // A failed lookup keeps the old address (and is retried after the next TTL).
            match slot.resolve().await.and_then(|a| slot.build(Some(a))) {
                Ok(peer) => slot.store(peer, now_ms.max(1)),
                Err(_) => slot.resolved_ms.store(now_ms.max(1), Ordering::Release),
            }
            slot.refreshing.store(false, Ordering::Release);
        });
    }

    async fn resolve(&self) -> Result<SocketAddr> {
        tokio::net::lookup_host(self.upstream.authority.as_str())
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| {
                Error::explain(
                    ErrorType::ConnectNoRoute,
                    format!("cannot resolve {}", self.upstream.authority),
                )
                .into_up()
            })
    }

    /// The peer for `addr` (`None`: the Unix socket), with the route's options.
    fn build(&self, addr: Option<SocketAddr>) -> Result<HttpPeer> {
        let upstream = &self.upstream;
        let mut peer = match (&upstream.socket, addr) {
            (Some(path), _) => HttpPeer::new_uds(&path.to_string_lossy(), false, String::new())
                .map_err(|e| e.into_up())?,
            (None, Some(addr)) => {
                // https: the host is the SNI and the name verified (system roots or ca_file).
                let sni = if upstream.tls {
                    upstream.host.clone()
                } else {
                    String::new()
                };
                HttpPeer::new(addr, upstream.tls, sni)
            }
            (None, None) => {
                return Error::e_explain(ErrorType::InternalError, "a TCP peer without address");
            }
        };
        let o = &self.options;
        peer.group_key = o.group_key;
        if upstream.tls {
            peer.options.ca = o.ca.clone();
            peer.options.verify_cert = true;
            peer.options.verify_hostname = true;
        }
        peer.options.connection_timeout = Some(o.connect_timeout);
        peer.options.read_timeout = Some(o.read_timeout);
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        Ok(peer)
    }
}

fn uri(path: &str) -> Result<http::Uri> {
    path.parse::<http::Uri>()
        .map_err(|e| Error::explain(ErrorType::InvalidHTTPHeader, e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn upstream(authority: &str) -> Upstream {
        let (host, port) = authority.rsplit_once(':').unwrap();
        Upstream {
            authority: authority.to_owned(),
            host: host.to_owned(),
            port: port.parse().unwrap(),
            path: "/mcp".to_owned(),
            tls: false,
            socket: None,
        }
    }

    fn options() -> PeerOptions {
        PeerOptions {
            group_key: 3,
            ca: None,
            connect_timeout: Duration::from_millis(500),
            read_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn an_ip_upstream_is_built_once_with_the_route_options() {
        let slot =
            Arc::new(PeerSlot::new(&upstream("127.0.0.1:9"), "/mcp", options(), 1_000).unwrap());
        let peer = slot.get(1_000_000).await.unwrap();
        assert_eq!(peer._address.to_string(), "127.0.0.1:9");
        assert_eq!(peer.group_key, 3);
        assert_eq!(
            peer.options.connection_timeout,
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            slot.resolved_ms.load(Ordering::Acquire),
            0,
            "never re-resolved"
        );
    }

    #[test]
    fn the_plain_path_is_prebuilt_and_a_query_is_carried() {
        let mut up = upstream("127.0.0.1:9");
        up.path = "/svc/mcp".to_owned();
        let slot = PeerSlot::new(&up, "/plans/mcp", options(), 0).unwrap();
        assert_eq!(slot.uri("/plans/mcp").unwrap(), "/svc/mcp");
        assert_eq!(slot.uri("/plans/mcp?x=1").unwrap(), "/svc/mcp?x=1");
    }

    #[tokio::test]
    async fn a_host_name_is_resolved_at_start_and_again_after_the_ttl() {
        let slot =
            Arc::new(PeerSlot::new(&upstream("localhost:9"), "/mcp", options(), 1_000).unwrap());
        assert_eq!(slot.resolved_ms.load(Ordering::Acquire), 1_000);
        let peer = slot.get(1_000 + RESOLVE_TTL_MS).await.unwrap();
        assert!(peer._address.to_string().ends_with(":9"));
        assert!(!slot.refreshing.load(Ordering::Acquire), "fresh: no lookup");
        // Stale: the old peer answers at once, a lookup runs beside it.
        let later = 2_000 + RESOLVE_TTL_MS;
        slot.get(later).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while slot.resolved_ms.load(Ordering::Acquire) != later {
            assert!(std::time::Instant::now() < deadline, "no background lookup");
            tokio::task::yield_now().await;
        }
    }
}
