//! Running the gateway: one pingora server with the proxy service on the public listener,
//! plus whatever background services the caller adds (e.g. `pforte up`'s supervised child).

use std::{net::SocketAddr, sync::Arc};

use pforte_clock::{Clock, SystemClock};
use pingora::{
    listeners::{L4BufferSettings, ListenerConfig},
    server::{RunArgs, Server, configuration::ServerConf},
    services::{ServiceWithDependents, background::background_service},
};

mod bridges;
mod credentials;
pub(crate) mod descriptors;
mod http1;
mod services;

use bridges::{log_account, stdio_spec};
use services::{Maintenance, MetricsListener, Signals};

pub use http1::classify_head;

use crate::{
    audit::{AuditLog, AuditSink, SighupReopen},
    catalog::{Catalog, CatalogOptions, CatalogService},
    config::RuntimeModel,
    config::Settings,
    conns,
    limit::SharedLimiter,
    metrics::{self, Metrics},
    oauth::{AuthService, OAuthSetupError},
    proxy::{Gateway, McpEdge},
    stdio::{StdioBridge, account},
    stores::{Site, Stores},
    tokens::{StoreError, TokenCache},
};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    OAuth(#[from] OAuthSetupError),
    #[error("pingora: {0}")]
    Pingora(String),
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    #[error("metrics_listen {0}: {1}")]
    MetricsListen(SocketAddr, std::io::Error),
    #[error("no free port on {0}: {1}")]
    Port(SocketAddr, std::io::Error),
    #[error(transparent)]
    Gateway(#[from] crate::proxy::GatewayError),
    #[error(transparent)]
    Stdio(#[from] crate::stdio::StdioError),
    #[error("[[routes]] {route:?}: user: {reason}")]
    RunAs { route: String, reason: String },
    #[error("stdio_user (the account of command route {route:?}, which has no user): {reason}")]
    StdioUser { route: String, reason: String },
    #[error(transparent)]
    Credentials(#[from] crate::credentials::CredentialsError),
    #[error(transparent)]
    Vault(#[from] crate::vault::VaultError),
}

/// How often the token snapshot checks the store: revocations take effect within this.
const TOKEN_REFRESH: std::time::Duration = std::time::Duration::from_millis(100);

/// The read buffer in front of each TLS client connection. pingora's default is 64 KiB,
/// allocated zeroed per connection and held while an SSE stream idles. One whole TLS record
/// (16 KiB + header and expansion) fits in this, so a record is still one read.
const TLS_READ_BUFFER: usize = 17 * 1024;

/// L4 buffers per client connection: plain HTTP reads straight into the HTTP parser's own
/// buffer (a request head is one read either way); TLS keeps a record-sized read buffer.
fn downstream_buffers(tls: bool) -> L4BufferSettings {
    L4BufferSettings::default().read(if tls { TLS_READ_BUFFER } else { 0 })
}

/// Resolves port 0 to a concrete free port. Pingora binds its listeners itself and cannot report
/// an ephemeral port, so the gateway asks the kernel for one first and then binds that.
pub(crate) fn resolve_port(addr: SocketAddr) -> Result<SocketAddr, ServeError> {
    if addr.port() != 0 {
        return Ok(addr);
    }
    let probe = std::net::TcpListener::bind(addr).map_err(|e| ServeError::Port(addr, e))?;
    probe.local_addr().map_err(|e| ServeError::Port(addr, e))
}

/// Builds the server, calls `ready` once everything is bound and opened (the success line:
/// nothing said before a listener or the vault fails), and blocks until it is told to stop.
pub(crate) fn run(
    settings: Settings,
    stores: Stores,
    extra: Vec<Box<dyn ServiceWithDependents>>,
    ready: impl FnOnce(),
) -> Result<(), ServeError> {
    pingora::tls::install_default_crypto_provider();
    let descriptors = descriptors::raise();
    let settings = Arc::new(settings);
    // The data dir's lock is held until the server stops.
    let Stores {
        tokens,
        oauth,
        runtime,
        lock: _lock,
    } = stores;
    let tokens = TokenCache::start(tokens, TOKEN_REFRESH)?;
    let route_names: Vec<&str> = settings.routes.iter().map(|r| r.name.as_str()).collect();
    let metrics = Arc::new(Metrics::new(&route_names));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let limiter = Arc::new(
        SharedLimiter::open(
            match &settings.store {
                Site::Redis(url) => Some(url.as_str()),
                Site::Embedded(_) => None,
            },
            runtime.handle(),
            clock.clone(),
            metrics.ratelimit(),
        )
        .map_err(|e| ServeError::Pingora(e.to_string()))?,
    );
    let audit = open_audit(&settings)?;
    let observer = Arc::new(crate::oauth::OAuthObserver {
        metrics: metrics.clone(),
        audit: audit.clone(),
        clock: clock.clone(),
    });
    let oauth = Arc::new(AuthService::open(
        &settings,
        oauth,
        runtime,
        limiter.clone(),
        observer,
        clock.clone(),
    )?);
    let credentials = credentials::open(
        &settings,
        oauth.runtime(),
        clock.clone(),
        metrics.credentials(),
    )?;
    oauth
        .server()
        .set_account_section(Arc::new(crate::credentials::AccountConnections(
            credentials.clone(),
        )));
    let metrics_listener = match settings.listen.metrics_listen {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr).map_err(|e| ServeError::MetricsListen(addr, e))?,
        ),
        None => None,
    };

    let conf = server_conf(&settings);
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let maintenance = background_service("oauth maintenance", Maintenance(oauth.clone()));
    // Each command route's bridge binds its socket now, so that a failure is one line.
    let mut bridges = Vec::new();
    // Per route, a command route's live children: for the console by route index, for the
    // metrics by name.
    let mut route_children = Vec::new();
    let mut children = Vec::new();
    let euid = nix::unistd::geteuid().as_raw();
    for (i, route) in settings.routes.iter().enumerate() {
        if let Some((spec, socket)) = stdio_spec(route, euid, &settings.stdio_account)? {
            log_account(&spec, euid);
            let mut bridge = StdioBridge::bind(spec, &socket)?.with_audit(audit.clone());
            if credentials.per_user(i) {
                bridge = bridge
                    .with_session_env(Arc::new(crate::credentials::VaultEnv(credentials.clone())));
            }
            route_children.push(Some(bridge.live_children()));
            children.push((route.name.clone(), bridge.live_children()));
            bridges.push(background_service(&format!("stdio {}", route.name), bridge));
        } else {
            route_children.push(None);
        }
    }
    let catalogs = route_catalogs(&settings, &credentials)?;
    let sessions =
        crate::stores::sessions(&settings.store, oauth.runtime().as_ref(), clock.clone())
            .map_err(|e| ServeError::Pingora(e.to_string()))?
            .with_audit(audit.clone());
    let mut background: Vec<_> = catalogs
        .iter()
        .zip(&settings.routes)
        .map(|(catalog, route)| {
            background_service(
                &format!("tool catalog {}", route.name),
                CatalogService(catalog.clone()),
            )
        })
        .collect();
    let audit_reopen = audit
        .clone()
        .map(|log| background_service("audit log reopen", SighupReopen(log)));
    let sessions = Arc::new(sessions);
    let tasks = crate::stores::tasks(&settings.store, oauth.runtime().as_ref(), clock.clone())
        .map_err(|e| ServeError::Pingora(e.to_string()))?;
    let telemetry = match &settings.telemetry {
        Some(t) => {
            let started = crate::telemetry::Telemetry::start(t)?;
            tracing::info!(endpoint = %t.traces_url, "traces exported over OTLP/HTTP");
            Some(started)
        }
        None => None,
    };
    let console = crate::console::Console::new(
        route_children,
        Some(
            crate::stores::token_writer(&settings.store)
                .map_err(|e| ServeError::Pingora(e.to_string()))?,
        ),
        clock.now_ms(),
        match &settings.audit.sink {
            AuditSink::File(path) => Some(path.clone()),
            _ => None,
        },
    );
    let edge = McpEdge {
        catalogs,
        sessions: sessions.clone(),
        tasks: Arc::new(tasks),
        streams: Arc::default(),
        audit,
        console,
        telemetry,
        credentials,
    };
    let metrics_service = metrics_listener.map(|listener| {
        background_service(
            "metrics listener",
            MetricsListener {
                listener: std::sync::Mutex::new(Some(listener)),
                metrics: metrics.clone(),
            },
        )
    });
    let tls_metrics = metrics.tls();
    let live = metrics.clone();
    let gateway = Gateway::new(
        settings.clone(),
        tokens,
        oauth,
        limiter,
        clock.clone(),
        edge,
        metrics,
    )?;
    live.live().attach(metrics::live::Sources {
        routes: gateway.live_routes(),
        sessions: Some(sessions),
        children,
    });
    // Routes with several `urls`: instances found down are probed back in (and up ones watched).
    let prober = crate::balance::probe::Prober::new(gateway.balanced(), clock.clone());
    let prober = prober
        .has_work()
        .then(|| background_service("instance prober", prober));
    let tls = settings
        .listen
        .tls
        .as_ref()
        .map(|t| crate::tls::listener_tls(&settings, t, tls_metrics, clock.clone()))
        .transpose()
        .map_err(|e| ServeError::Pingora(e.to_string()))?;
    let budget = descriptors::connection_budget(descriptors.limit);
    let connections = conns::Connections::new(
        settings.listen.max_connections_per_ip,
        budget,
        settings.admission.trusted_proxies.clone(),
        clock.clone(),
    );
    let (proxies, tls_services) = public_service(gateway, &server, &settings, tls, connections)?;
    let listen = settings.listen.addr.to_string();
    for proxy in proxies {
        server.add_service(proxy);
    }
    server.add_service(maintenance);
    for service in tls_services {
        server.add_boxed_service(service);
    }
    if let Some(service) = prober {
        server.add_service(service);
    }
    for service in background.drain(..) {
        server.add_service(service);
    }
    for service in bridges {
        server.add_service(service);
    }
    if let Some(service) = audit_reopen {
        server.add_service(service);
    }
    if let Some(service) = metrics_service {
        server.add_service(service);
    }
    for service in extra {
        server.add_boxed_service(service);
    }
    if let Some(warning) = shared_port_warning(&settings, euid) {
        tracing::warn!("{warning}");
    }
    ready();
    tracing::info!(
        listen = %listen,
        public = %settings.base_url,
        version = env!("CARGO_PKG_VERSION"),
        budget = %descriptors.describe(),
        "pforte started"
    );
    let signal = Arc::new(std::sync::OnceLock::new());
    server.run(RunArgs {
        shutdown_signal: Box::new(Signals(signal.clone())),
    });
    match signal.get() {
        Some(name) => tracing::info!("stopped after {name}"),
        None => tracing::info!("stopped"),
    }
    Ok(())
}

/// One public listener service: the gateway's phases, each connection holding a slot of its
/// client IP, then the gateway's own TLS handshake (HTTP/2 offered; see `tls::accept`) or
/// plain TCP.
type PublicService =
    pingora::services::listening::Service<conns::Capped<crate::tls::TlsEdge<http1::Http1>>>;

/// The services that keep the listener's certificates current (reload, ACME).
type CertServices = Vec<Box<dyn ServiceWithDependents>>;

fn public_service(
    gateway: Gateway,
    server: &Server,
    settings: &Settings,
    tls: Option<crate::tls::ListenerTls>,
    connections: Arc<conns::Connections>,
) -> Result<(Vec<PublicService>, CertServices), ServeError> {
    let (tls_parts, services) = match tls {
        Some(tls) => (
            Some((tls.store, tls.acme_alpn, tls.waiting_text)),
            tls.services,
        ),
        None => (None, Vec::new()),
    };
    let per_core = match settings.runtime {
        RuntimeModel::WorkStealing => None,
        RuntimeModel::PerCore => Some(server.configuration.threads.max(1)),
    };
    let mut proxies = Vec::new();
    for i in 0..per_core.unwrap_or(1) {
        let mut app = pingora::proxy::HttpProxy::new(gateway.clone(), server.configuration.clone());
        app.handle_init_modules();
        // An HTTP/2 connection without open streams closes like an idle HTTP/1.1 one (whose
        // keep-alive the proxy phase sets per request).
        let mut options = pingora::apps::HttpServerOptions::default();
        options.h2_idle_timeout = Some(std::time::Duration::from_secs(
            settings.listen.keepalive_timeout_secs,
        ));
        app.server_options = Some(options);
        let app = http1::Http1::new(app, gateway.clone(), settings);
        let edge = match &tls_parts {
            Some((store, alpn, waiting)) => {
                crate::tls::TlsEdge::new(app, store.clone(), *alpn, waiting.clone())
            }
            None => crate::tls::TlsEdge::plain(app),
        };
        let mut proxy = pingora::services::listening::Service::new(
            format!("pforte {i}"),
            conns::Capped::new(edge, connections.clone()),
        );
        // The handshake is the gateway's own (after the listener hands over the TCP stream), so
        // the endpoint is plain TCP either way; TLS keeps a record-sized read buffer.
        let endpoint = match per_core {
            None => ListenerConfig::tcp(settings.listen.addr.to_string()),
            Some(_) => {
                proxy.threads = Some(1);
                let mut options = pingora::listeners::TcpSocketOptions::default();
                options.so_reuseport = Some(true);
                ListenerConfig::tcp(reuseport_address(settings.listen.addr, i))
                    .tcp_socket_options(options)
            }
        };
        proxy.add_listener(endpoint.l4_buffer(downstream_buffers(settings.listen.tls.is_some())));
        proxies.push(proxy);
    }
    Ok((proxies, services))
}

/// The `i`-th per-core service's listen address: the same socket address, spelled with `i`
/// extra leading zeros in the port. pingora keeps one listening socket per address *string*
/// (its table for graceful upgrades) and would hand every service the first one's socket;
/// distinct spellings make each service bind its own `SO_REUSEPORT` socket, so the kernel
/// spreads new connections over them.
fn reuseport_address(addr: SocketAddr, i: usize) -> String {
    let width = addr.port().to_string().len() + i;
    match addr {
        SocketAddr::V4(a) => format!("{}:{:0width$}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{:0width$}", a.ip(), a.port()),
    }
}

/// The start-up warning when per-core listeners (`SO_REUSEPORT`, which lets any process of
/// the gateway's user join the port and take a share of its connections) meet `command` routes
/// whose children run as the gateway's user (`stdio::account`: a gateway that is not root and
/// a route without `user`, or root's opt-out): SECURITY's trust boundary says that user is
/// trusted. `None` when no such route runs.
fn shared_port_warning(settings: &Settings, euid: u32) -> Option<String> {
    if !matches!(settings.runtime, RuntimeModel::PerCore) {
        return None;
    }
    let same_user: Vec<&str> = settings
        .routes
        .iter()
        .filter(|r| match &r.upstream {
            crate::config::UpstreamKind::Stdio { run_as, .. } => {
                account::decide(euid, run_as.as_ref(), &settings.stdio_account.user)
                    .shares_the_gateways_user(euid)
            }
            _ => false,
        })
        .map(|r| r.name.as_str())
        .collect();
    (!same_user.is_empty()).then(|| {
        format!(
            "command routes {} run as the gateway's own user: a process of that user can bind \
             the listen port beside the per-core listeners (SO_REUSEPORT) and receive a share \
             of its connections; give those routes `user = \"...\"` (another account), or set \
             runtime = \"work-stealing\" (one socket, no SO_REUSEPORT)",
            same_user.join(", ")
        )
    })
}

/// pingora's settings: threads, shutdown timing, the pid file and upgrade socket in the data dir.
fn server_conf(settings: &Settings) -> ServerConf {
    ServerConf {
        threads: match settings.threads {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        },
        // Per core (the default `runtime`), each proxy service runs one thread of its own;
        // `work-stealing` shares one runtime of `threads` threads (docs/performance.md).
        // SIGTERM: the listener closes at once and the connections it had are served for
        // `drain_secs` more; then the runtimes stop (3 s more for blocking work).
        grace_period_seconds: Some(settings.listen.drain_secs),
        graceful_shutdown_timeout_seconds: Some(3),
        pid_file: settings.data_dir.join("pforte.pid").display().to_string(),
        upgrade_sock: settings
            .data_dir
            .join("pforte-upgrade.sock")
            .display()
            .to_string(),
        ..ServerConf::default()
    }
}

/// One tool catalog per route, each an MCP client of the route's (first) upstream; a route
/// whose upstream takes only each person's own credential borrows a connected person's.
fn route_catalogs(
    settings: &Settings,
    credentials: &Arc<crate::credentials::Credentials>,
) -> Result<Vec<Arc<Catalog>>, ServeError> {
    let mut catalogs = Vec::with_capacity(settings.routes.len());
    for (i, route) in settings.routes.iter().enumerate() {
        let upstream = route.upstream.primary();
        let catalog = Catalog::new(
            upstream.http_url(),
            CatalogOptions {
                unix_socket: upstream.socket.clone(),
                ca_file: route.upstream.ca_file().map(std::path::Path::to_path_buf),
                header: crate::credentials::shared_header(route)?.map(|h| (h.name, h.value)),
                lender: credentials
                    .per_user(i)
                    .then(|| crate::credentials::RouteLender::shared(credentials, i)),
                identity: route.identity_headers,
                ..CatalogOptions::default()
            },
        )
        .map_err(|e| {
            ServeError::Pingora(format!(
                "route {:?}: the tool catalog client: {e}",
                route.name
            ))
        })?;
        catalogs.push(Arc::new(catalog));
    }
    Ok(catalogs)
}

/// The audit log, when one is configured.
fn open_audit(settings: &Settings) -> Result<Option<AuditLog>, ServeError> {
    Ok(match &settings.audit.sink {
        AuditSink::Off => None,
        sink => Some(
            AuditLog::open_with(
                sink,
                crate::audit::DEFAULT_CAPACITY,
                settings.audit.rotation,
            )
            .map_err(|e| ServeError::Pingora(e.to_string()))?,
        ),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn per_core_addresses_are_one_socket_address_spelled_apart() {
        let v4: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        let v6: SocketAddr = "[::1]:443".parse().unwrap();
        let spelled: Vec<String> = (0..3).map(|i| reuseport_address(v4, i)).collect();
        assert_eq!(
            spelled,
            ["127.0.0.1:8443", "127.0.0.1:08443", "127.0.0.1:008443"]
        );
        assert_eq!(reuseport_address(v6, 1), "[::1]:0443");
        for s in spelled {
            let parsed: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s.as_str())
                .unwrap()
                .collect();
            assert_eq!(parsed, [v4]);
        }
    }

    #[test]
    fn per_core_listeners_beside_same_user_command_routes_are_warned_about() {
        let settings = |text: &str| {
            toml::from_str::<crate::config::GatewayConfig>(text)
                .unwrap()
                .validate()
                .unwrap()
        };
        let own = "[[routes]]\nname = \"npx\"\ncommand = [\"sh\"]\n";
        let warning = shared_port_warning(&settings(own), 1000).unwrap();
        assert!(
            warning.starts_with("command routes npx run as"),
            "{warning}"
        );
        assert!(warning.contains("SO_REUSEPORT"), "{warning}");
        // A root gateway runs them as `stdio_user`, unless a route opts out with root.
        assert_eq!(shared_port_warning(&settings(own), 0), None);
        let root = "[[routes]]\nname = \"npx\"\ncommand = [\"sh\"]\nuser = \"root\"\n";
        assert!(shared_port_warning(&settings(root), 0).is_some());
        let other_user = "[[routes]]\nname = \"npx\"\ncommand = [\"sh\"]\nuser = \"nobody\"\n";
        assert_eq!(shared_port_warning(&settings(other_user), 0), None);
        let one_socket = format!("runtime = \"work-stealing\"\n{own}");
        assert_eq!(shared_port_warning(&settings(&one_socket), 1000), None);
    }
}
