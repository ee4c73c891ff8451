//! Start-up's second step: the gateway's services built from its settings and the stores
//! `Stores::open` opened — the authorization server, limiter, stdio bridges, sessions,
//! telemetry, console, prober, TLS and the pingora services — with every socket bound (so a
//! failure is one line before the success line) and nothing started: [`super::run`] starts them.

use std::sync::Arc;

use pforte_clock::{Clock, SystemClock};
use pingora::{
    server::Server,
    services::{ServiceWithDependents, background::background_service},
};

use super::{
    ServeError, TOKEN_REFRESH,
    bridges::{log_account, stdio_spec},
    credentials, descriptors, public_service, route_catalogs, server_conf,
    services::Maintenance,
    services::MetricsListener,
    shared_port_warning,
};
use crate::conns;
use crate::{
    audit::{AuditLog, AuditSink, SighupReopen},
    catalog::CatalogService,
    config::Settings,
    credentials::Credentials,
    limit::SharedLimiter,
    metrics::{self, Metrics},
    oauth::AuthService,
    pins::Pins,
    proxy::{Gateway, McpEdge},
    stdio::StdioBridge,
    stores::{DirLock, StoreRuntime, Stores, StoresError},
    tokens::{TokenCache, TokenSource},
};

/// Services, in the order the server gets them.
type Services = Vec<Box<dyn ServiceWithDependents>>;

/// The assembled gateway, ready to run.
pub(crate) struct Parts {
    pub(super) server: Server,
    /// What the "pforte started" line says.
    pub(super) listen: String,
    pub(super) public: String,
    pub(super) budget: String,
    /// The start-up warning about per-core listeners beside same-user children, if any.
    pub(super) warning: Option<String>,
    /// Held until the server has stopped: the stores' runtime (stopped after pingora's) and
    /// the data dir's lock.
    pub(super) runtime: StoreRuntime,
    pub(super) lock: Option<DirLock>,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

/// What every service is built from.
struct Core {
    settings: Arc<Settings>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    audit: Option<AuditLog>,
    limiter: Arc<SharedLimiter>,
    oauth: Arc<AuthService>,
    credentials: Arc<Credentials>,
}

/// The stdio bridges' handles: per route (by index, `None` for other kinds) for the console,
/// by name for the metrics.
struct Bridges {
    by_route: Vec<Option<crate::stdio::LiveChildren>>,
    by_name: Vec<(String, crate::stdio::LiveChildren)>,
}

/// Builds the gateway from `settings` and `stores`; `extra` are the caller's own services
/// (`pforte up`'s supervised child).
pub(crate) fn assemble(
    settings: Settings,
    stores: Stores,
    extra: Services,
) -> Result<Parts, ServeError> {
    pingora::tls::install_default_crypto_provider();
    let descriptors = descriptors::raise();
    let settings = Arc::new(settings);
    let Stores {
        tokens,
        pins,
        approvals,
        oauth,
        vault,
        sessions,
        tasks,
        limits,
        acme,
        runtime,
        lock,
    } = stores;
    let tokens = tokens.ok_or(StoresError::NotOpened("token"))?;
    let token_cache = TokenCache::start(tokens.clone(), TOKEN_REFRESH)?;
    let oauth = oauth.ok_or(StoresError::NotOpened("oauth"))?;
    let core = core(&settings, oauth, vault, limits, &runtime)?;
    let mut services: Services = vec![Box::new(background_service(
        "oauth maintenance",
        Maintenance(core.oauth.clone()),
    ))];
    let bridges = bridges(&core, &mut services)?;
    let sessions = Arc::new(
        sessions
            .ok_or(StoresError::NotOpened("session"))?
            .with_audit(core.audit.clone()),
    );
    let tasks = tasks.ok_or(StoresError::NotOpened("task"))?;
    let pins = pinned(&core, pins);
    let edge = edge(
        &core,
        bridges.by_route,
        sessions.clone(),
        tasks,
        tokens,
        pins,
        approvals,
    )?;
    services.extend(observers(&core, &edge)?);
    let gateway = gateway(&core, token_cache, edge, sessions, bridges.by_name)?;
    // Routes with several `urls`: instances found down are probed back in (and up ones watched).
    let prober = crate::balance::probe::Prober::new(gateway.balanced(), core.clock.clone());
    if prober.has_work() {
        services.push(Box::new(background_service("instance prober", prober)));
    }
    let mut server = Server::new_with_opt_and_conf(None, server_conf(&settings));
    server.bootstrap();
    // The budget counts what is open by now (stores, audit log, pingora's bootstrap).
    let descriptors = descriptors.recounted();
    listeners(&core, gateway, &mut server, acme, descriptors.budget())?;
    server.add_services(services);
    server.add_services(extra);
    Ok(Parts {
        server,
        listen: settings.listen.addr.to_string(),
        public: settings.base_url.clone(),
        budget: descriptors.describe(),
        warning: shared_port_warning(&settings, nix::unistd::geteuid().as_raw()),
        runtime,
        lock,
    })
}

/// The clock, metrics, audit log, limiter, authorization server and per-user credentials.
fn core(
    settings: &Arc<Settings>,
    oauth: Arc<dyn pforte_oauth::Store>,
    vault: Option<crate::vault::Records>,
    limits: Option<Arc<dyn crate::limit::Limiter>>,
    runtime: &StoreRuntime,
) -> Result<Core, ServeError> {
    let route_names: Vec<&str> = settings.routes.iter().map(|r| r.name.as_str()).collect();
    let metrics = Arc::new(Metrics::new(&route_names));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let limiter = Arc::new(SharedLimiter::open(
        limits,
        clock.clone(),
        metrics.ratelimit(),
    ));
    let audit = open_audit(settings)?;
    let observer = Arc::new(crate::oauth::OAuthObserver {
        metrics: metrics.clone(),
        audit: audit.clone(),
        clock: clock.clone(),
    });
    let handle = runtime.handle();
    let oauth = Arc::new(AuthService::open(
        settings,
        oauth,
        &handle,
        limiter.clone(),
        observer,
        clock.clone(),
    )?);
    let credentials = credentials::open(
        settings,
        vault,
        &handle,
        clock.clone(),
        metrics.credentials(),
    )?;
    oauth
        .server()
        .set_account_section(Arc::new(crate::credentials::AccountConnections(
            credentials.clone(),
        )));
    Ok(Core {
        settings: settings.clone(),
        clock,
        metrics,
        audit,
        limiter,
        oauth,
        credentials,
    })
}

/// The gateway's phases on `edge`, with the metrics' live sources attached.
fn gateway(
    core: &Core,
    tokens: TokenCache,
    edge: McpEdge,
    sessions: Arc<crate::sessions::Sessions>,
    children: Vec<(String, crate::stdio::LiveChildren)>,
) -> Result<Gateway, ServeError> {
    let gateway = Gateway::new(
        core.settings.clone(),
        tokens,
        core.oauth.clone(),
        core.limiter.clone(),
        core.clock.clone(),
        edge,
        core.metrics.clone(),
    )?;
    core.metrics.live().attach(metrics::live::Sources {
        routes: gateway.live_routes(),
        sessions: Some(sessions),
        children,
    });
    Ok(gateway)
}

/// Each command route's bridge, its socket bound now (so that a failure is one line), added to
/// `services`.
fn bridges(core: &Core, services: &mut Services) -> Result<Bridges, ServeError> {
    let mut found = Bridges {
        by_route: Vec::new(),
        by_name: Vec::new(),
    };
    let euid = nix::unistd::geteuid().as_raw();
    for (i, route) in core.settings.routes.iter().enumerate() {
        let Some((spec, socket)) = stdio_spec(route, euid, &core.settings.stdio_account)? else {
            found.by_route.push(None);
            continue;
        };
        log_account(&spec, euid);
        let mut bridge = StdioBridge::bind(spec, &socket)?.with_audit(core.audit.clone());
        if core.credentials.per_user(i) {
            bridge = bridge.with_session_env(Arc::new(crate::credentials::VaultEnv(
                core.credentials.clone(),
            )));
        }
        found.by_route.push(Some(bridge.live_children()));
        found
            .by_name
            .push((route.name.clone(), bridge.live_children()));
        services.push(Box::new(background_service(
            &format!("stdio {}", route.name),
            bridge,
        )));
    }
    Ok(found)
}

/// The MCP edge: tool catalogs, session and task records, the console (writing tokens through
/// the one token store), telemetry.
fn edge(
    core: &Core,
    route_children: Vec<Option<crate::stdio::LiveChildren>>,
    sessions: Arc<crate::sessions::Sessions>,
    tasks: crate::tasks::Tasks,
    tokens: Arc<dyn TokenSource>,
    pins: Arc<Pins>,
    approvals: Option<Arc<dyn crate::approvals::ApprovalStore>>,
) -> Result<McpEdge, ServeError> {
    let settings = &core.settings;
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
        Some(tokens),
        core.clock.now_ms(),
        match &settings.audit.sink {
            AuditSink::File(path) => Some(path.clone()),
            _ => None,
        },
    );
    Ok(McpEdge {
        catalogs: route_catalogs(settings, &core.credentials, &pins)?,
        sessions,
        tasks: Arc::new(tasks),
        streams: Arc::default(),
        audit: core.audit.clone(),
        console,
        telemetry,
        credentials: core.credentials.clone(),
        pins,
        approvals,
    })
}

/// The pinned tool definitions on their store, each change they see reported as an audit
/// line (`tool_changed`) and counted.
fn pinned(core: &Core, store: Option<Arc<dyn crate::pins::PinStore>>) -> Arc<Pins> {
    let audit = core.audit.clone();
    let metrics = core.metrics.pins();
    let clock = core.clock.clone();
    let report: crate::pins::Report = Arc::new(move |e: &crate::pins::PinEvent| {
        metrics.changed(&e.route, e.held);
        tracing::warn!(route = %e.route, held = e.held, "{}", e.message());
        if let Some(log) = &audit {
            log.record(&crate::audit::PinRecord {
                time_ms: clock.now_ms(),
                event: "tool_changed",
                route: &e.route,
                tool: &e.tool,
                fields: e.change.fields.clone(),
                held: Some(e.held),
                sha256: None,
                by: None,
            });
        }
    });
    let pins = Arc::new(Pins::new(
        store,
        core.settings.pinning,
        core.clock.clone(),
        report,
    ));
    // Read before the first request: a list answered before the route's catalog has loaded
    // is compared with the approved definitions too (`pins::listing`).
    if let Err(e) = pins.reload() {
        tracing::warn!(error = %e, "tool pins: reading the store at start failed (read again every 2 s)");
    }
    pins
}

/// The tool catalogs' refreshers, the audit log's SIGHUP reopen and the `metrics_listen`
/// listener (bound now).
fn observers(core: &Core, edge: &McpEdge) -> Result<Services, ServeError> {
    let mut services: Services = Vec::new();
    for (catalog, route) in edge.catalogs.iter().zip(&core.settings.routes) {
        services.push(Box::new(background_service(
            &format!("tool catalog {}", route.name),
            CatalogService(catalog.clone()),
        )));
    }
    services.push(Box::new(background_service(
        "tool pins",
        crate::pins::PinsService(edge.pins.clone()),
    )));
    if let Some(log) = core.audit.clone() {
        services.push(Box::new(background_service(
            "audit log reopen",
            SighupReopen(log),
        )));
    }
    if let Some(addr) = core.settings.listen.metrics_listen {
        let listener =
            std::net::TcpListener::bind(addr).map_err(|e| ServeError::MetricsListen(addr, e))?;
        services.push(Box::new(background_service(
            "metrics listener",
            MetricsListener {
                listener: std::sync::Mutex::new(Some(listener)),
                metrics: core.metrics.clone(),
            },
        )));
    }
    Ok(services)
}

/// The public listeners (one per core, or one) with their TLS and the services that keep its
/// certificates current, added to `server`.
fn listeners(
    core: &Core,
    gateway: Gateway,
    server: &mut Server,
    acme: Option<crate::tls::AcmeState>,
    connection_budget: u64,
) -> Result<(), ServeError> {
    let settings = &core.settings;
    let tls = settings
        .listen
        .tls
        .as_ref()
        .map(|t| {
            crate::tls::listener_tls(settings, t, core.metrics.tls(), acme, core.clock.clone())
        })
        .transpose()?;
    let connections = conns::Connections::new(
        settings.listen.max_connections_per_ip,
        connection_budget,
        settings.admission.trusted_proxies.clone(),
        core.clock.clone(),
    );
    let (proxies, tls_services) = public_service(gateway, server, settings, tls, connections)?;
    for proxy in proxies {
        server.add_service(proxy);
    }
    server.add_services(tls_services);
    Ok(())
}

/// The audit log, when one is configured.
fn open_audit(settings: &Settings) -> Result<Option<AuditLog>, ServeError> {
    Ok(match &settings.audit.sink {
        AuditSink::Off => None,
        sink => Some(AuditLog::open_with(
            sink,
            crate::audit::DEFAULT_CAPACITY,
            settings.audit.rotation,
        )?),
    })
}
