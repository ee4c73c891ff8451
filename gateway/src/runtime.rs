//! Running the gateway, start-up's three steps: the stores opened once (`Stores::open`), the
//! services assembled from them ([`assemble`]: one pingora server with the proxy service on
//! the public listener, plus whatever background services the caller adds, e.g. `pforte up`'s
//! supervised child), then [`run`] until a signal stops it.

use std::{net::SocketAddr, sync::Arc};

use pingora::{
    server::{RunArgs, Server, configuration::ServerConf},
    services::ServiceWithDependents,
};

mod assemble;
mod bridges;
mod credentials;
pub(crate) mod descriptors;
mod http1;
mod listener;
mod services;

pub(crate) use assemble::{Parts, assemble};
pub(crate) use services::Signals;

pub use http1::classify_head;

use crate::{
    catalog::{Catalog, CatalogOptions},
    config::RuntimeModel,
    config::Settings,
    conns,
    oauth::OAuthSetupError,
    proxy::Gateway,
    stores::{Stores, StoresError},
    tokens::StoreError,
};

/// What can fail at start, each named in the gateway's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error(transparent)]
    Stores(#[from] StoresError),
    #[error(transparent)]
    Tokens(#[from] StoreError),
    #[error(transparent)]
    OAuth(#[from] OAuthSetupError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    #[error("metrics_listen {0}: {1}")]
    MetricsListen(SocketAddr, std::io::Error),
    #[error("no free port on {0}: {1}")]
    Port(SocketAddr, std::io::Error),
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("route {route:?}: the tool catalog client: {reason}")]
    Catalog { route: String, reason: String },
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

/// Resolves port 0 to a concrete free port. Pingora binds its listeners itself and cannot report
/// an ephemeral port, so the gateway asks the kernel for one first and then binds that.
pub(crate) fn resolve_port(addr: SocketAddr) -> Result<SocketAddr, ServeError> {
    if addr.port() != 0 {
        return Ok(addr);
    }
    let probe = std::net::TcpListener::bind(addr).map_err(|e| ServeError::Port(addr, e))?;
    probe.local_addr().map_err(|e| ServeError::Port(addr, e))
}

/// Start-up's last two steps on the opened `stores`: [`assemble`] the gateway, then [`run`] it
/// until a signal stops it; `ready` is called once everything is bound and opened (the success
/// line: nothing said before a listener or the vault fails).
pub(crate) fn serve(
    settings: Settings,
    stores: Stores,
    extra: Vec<Box<dyn ServiceWithDependents>>,
    ready: impl FnOnce(),
) -> Result<(), ServeError> {
    let parts = assemble(settings, stores, extra)?;
    run(parts, Signals::default(), ready);
    Ok(())
}

/// Runs the assembled gateway until `shutdown` fires, then stops the stores' runtime (after
/// pingora's) and releases the data dir.
pub(crate) fn run(parts: Parts, shutdown: Signals, ready: impl FnOnce()) {
    let Parts {
        server,
        listen,
        public,
        budget,
        warning,
        runtime,
        lock,
    } = parts;
    if let Some(warning) = warning {
        tracing::warn!("{warning}");
    }
    ready();
    tracing::info!(
        listen = %listen,
        public = %public,
        version = env!("CARGO_PKG_VERSION"),
        budget = %budget,
        "pforte started"
    );
    let signal = shutdown.0.clone();
    shutdown.listen(&runtime.handle());
    server.run(RunArgs {
        shutdown_signal: Box::new(shutdown),
    });
    match signal.get() {
        Some(name) => tracing::info!("stopped after {name}"),
        None => tracing::info!("stopped"),
    }
    drop((runtime, lock));
}

/// One public listener service: the gateway's phases, each connection holding a slot of its
/// client IP, then the gateway's own TLS handshake (HTTP/2 offered; see `tls::accept`) or
/// plain TCP.
type PublicService = listener::Listener<conns::Capped<crate::tls::TlsEdge<http1::Http1>>>;

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
        let gateway = gateway.for_core();
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
        let proxy = listener::Listener::bind(
            format!("pforte {i}"),
            settings.listen.addr,
            per_core.is_some(),
            per_core.map(|_| 1),
            conns::Capped::new(edge, connections.clone()),
        )?;
        proxies.push(proxy);
    }
    Ok((proxies, services))
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
                crate::stdio::account::decide(euid, run_as.as_ref(), &settings.stdio_account.user)
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
    pins: &Arc<crate::pins::Pins>,
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
        .map_err(|e| ServeError::Catalog {
            route: route.name.clone(),
            reason: e.to_string(),
        })?
        .with_pins(pins.clone(), route.name.clone());
        catalogs.push(Arc::new(catalog));
    }
    Ok(catalogs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
