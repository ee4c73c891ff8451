//! The gateway's one typed configuration: a TOML file plus `PFORTE_*` env overrides, validated
//! before anything listens (`pforte check` runs the same validation).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use http::Uri;
use serde::Deserialize;

/// The public path of the MCP endpoint on the gateway.
pub const MCP_PATH: &str = "/mcp";

/// Why a configuration was refused. Every variant names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("env {name}={value:?}: {reason}")]
    Env {
        name: &'static str,
        value: String,
        reason: String,
    },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("[[routes]] {route:?}: {field}: {reason}")]
    Route {
        route: String,
        field: &'static str,
        reason: String,
    },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// TLS certificate and key, PEM files.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What an upstream URL may be, for the error that refuses another.
pub const ACCEPTED_UPSTREAMS: &str = "http://HOST:PORT/PATH, https://HOST:PORT/PATH or unix:PATH";

/// The environment variable a route's program is looked up in when it has no `/`.
pub const PATH_ENV: &str = "PATH";

/// `[upstream]`'s URL when it names none.
pub const DEFAULT_UPSTREAM_URL: &str = "http://127.0.0.1:8080/mcp";

/// Where requests go after the gateway (`[upstream]`: the route `mcp`, served at `/mcp`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// The MCP service's streamable-HTTP URL: `http://`, `https://` or `unix:PATH`
    /// (default [`DEFAULT_UPSTREAM_URL`]).
    pub url: Option<String>,
    /// Replicas of the MCP service (http or https), instead of `url`.
    pub urls: Option<Vec<String>>,
    /// PEM file of the CA that signs an https upstream's certificate (default: system roots).
    pub ca_file: Option<PathBuf>,
    /// Connecting to the upstream longer than this answers 504.
    pub connect_timeout_ms: u64,
    /// The longest silence tolerated while reading an upstream response. MCP SSE streams carry
    /// keep-alive comments every 15 s, so this never cuts a healthy long stream.
    pub read_timeout_ms: u64,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            url: None,
            urls: None,
            ca_file: None,
            connect_timeout_ms: 2_000,
            read_timeout_ms: 300_000,
        }
    }
}

/// `[routes.stdio] max_line_bytes` by default: 4 MiB, as `max_body_bytes` (a message each way
/// of the same size), held at most once per child while it is read.
pub const DEFAULT_MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// The smallest `max_line_bytes` accepted.
const MIN_MAX_LINE_BYTES: usize = 4096;

/// The stdio bridge's bounds for a `command` route (`[routes.stdio]`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct StdioConfig {
    /// Children of this route at most (over it: 503 with `Retry-After`).
    pub max_children: usize,
    /// Children one principal may hold at most.
    pub max_children_per_principal: usize,
    /// A child without requests for this long is stopped.
    pub idle_timeout_secs: u64,
    /// Initialized children kept for stateless requests.
    pub pool: usize,
    /// The longest line (one JSON-RPC message) a child may write on stdout, in bytes; a child
    /// that writes a longer one is stopped and restarted, its requests fail.
    pub max_line_bytes: usize,
}

impl Default for StdioConfig {
    fn default() -> Self {
        Self {
            max_children: 16,
            max_children_per_principal: 4,
            idle_timeout_secs: 600,
            pool: 2,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// One `[[routes]]` entry as written: an MCP server served at `/NAME/mcp`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    /// `[a-z0-9-]+`, 1 to 63 characters, unique.
    pub name: String,
    /// Streamable HTTP: `http://…`, `https://…` or `unix:PATH`.
    pub url: Option<String>,
    /// Replicas of one server (http or https).
    pub urls: Option<Vec<String>>,
    /// A stdio MCP server the gateway runs: program and arguments.
    pub command: Option<Vec<String>>,
    /// The only variables the command sees besides PATH and HOME.
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// Run the command as this user (the gateway must run as root); default: the gateway's.
    pub user: Option<String>,
    /// With `user`: this group instead of the user's primary group.
    pub group: Option<String>,
    /// PEM file of the CA of an https upstream (default: system roots).
    pub ca_file: Option<PathBuf>,
    /// Default: `[upstream]`'s.
    pub connect_timeout_ms: Option<u64>,
    /// Default: `[upstream]`'s.
    pub read_timeout_ms: Option<u64>,
    /// Browser origins for this route; default: the top-level `allowed_origins`.
    pub allowed_origins: Option<Vec<String>>,
    /// `[routes.tools.NAME]`: rules for this route's tools, over the top-level `[tools.NAME]`.
    pub tools: BTreeMap<String, crate::policy::ToolRule>,
    /// `[routes.stdio]`: bounds of a `command` route's children.
    pub stdio: StdioConfig,
}

/// The gateway's settings as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// The public listener.
    pub listen: SocketAddr,
    /// The base URL clients use (scheme, host, port; no path). It is the OAuth issuer and the
    /// prefix of the MCP resource URL. Defaults to the listen address.
    pub public_url: Option<String>,
    /// Where the embedded store and generated files live.
    pub data_dir: PathBuf,
    /// TLS on the public listener. Required unless the listener is loopback or
    /// `behind_tls_proxy` says a TLS-terminating proxy sits in front.
    pub tls: Option<TlsFiles>,
    pub behind_tls_proxy: bool,
    /// The route `mcp` at `/mcp`. Absent with `[[routes]]`: no `/mcp` route; absent without
    /// them: the default upstream.
    pub upstream: Option<UpstreamConfig>,
    /// `[[routes]]`: more MCP servers, each at `/NAME/mcp`.
    pub routes: Vec<RouteConfig>,
    /// Browser origins allowed to call `/mcp`. A request with any other `Origin` gets 403;
    /// requests without `Origin` (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// Largest request body accepted on `/mcp`, in bytes; larger gets 413.
    pub max_body_bytes: u64,
    /// OAuth scopes this resource understands.
    pub scopes: Vec<String>,
    /// Scopes every `/mcp` request must carry (403 `insufficient_scope` otherwise).
    pub required_scopes: Vec<String>,
    /// Worker threads for the proxy; 0 means one per core.
    pub threads: usize,
    /// The authorization server's settings (issuer, resource and scopes come from above).
    pub oauth: pforte_oauth::OAuthConfig,
    /// Shared state for several gateways. Without it, the embedded store under `data_dir`.
    pub redis_url: Option<String>,
    /// Rate limits per route class.
    pub limits: crate::limit::Limits,
    /// Proxies whose `X-Forwarded-For` is believed; the client IP is otherwise the socket's.
    pub trusted_proxies: Vec<crate::forward::TrustedProxy>,
    /// Per-tool authorization: every `POST /mcp` is read, tools need the scopes their
    /// annotations imply (or `[tools.NAME]` says), `tools/list` shows what may be called.
    /// Off only for measuring what it costs.
    pub tool_policy: bool,
    /// Operator rules per tool: `[tools.NAME] scopes = [...]`, `users = [...]`, `deny = true`.
    pub tools: std::collections::BTreeMap<String, crate::policy::ToolRule>,
    /// Where the audit log goes: a path, `"stdout"` or `"off"`; `<data_dir>/audit.jsonl` by
    /// default.
    pub audit_log: Option<String>,
    /// An audit file past this many bytes is rotated (`audit.jsonl.1`, …); 0: never (rotate
    /// it with another program and SIGHUP).
    pub audit_max_bytes: u64,
    /// Rotated audit files kept (`audit.jsonl.1` … `audit.jsonl.N`).
    pub audit_keep: u32,
    /// Seconds an idle client connection is kept open between requests (HTTP/1.1 keep-alive,
    /// HTTP/2 without open streams).
    pub keepalive_timeout_secs: u64,
    /// Open connections one client IP (IPv6: its /64) may hold; more are closed at once.
    /// Trusted proxies are exempt. 0: no cap.
    pub max_connections_per_ip: u32,
    /// `text` (default) or `json`: one JSON object per log line.
    pub log_format: crate::logging::LogFormat,
    /// A second listener that serves only `GET /metrics`, for scraping from another host. Off by
    /// default: the public listener answers `/metrics` to loopback peers only.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            public_url: None,
            data_dir: PathBuf::from(".pforte"),
            tls: None,
            behind_tls_proxy: false,
            upstream: None,
            routes: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            scopes: vec!["mcp:read".to_owned(), "mcp:write".to_owned()],
            required_scopes: vec!["mcp:read".to_owned()],
            threads: 0,
            oauth: pforte_oauth::OAuthConfig::default(),
            redis_url: None,
            limits: crate::limit::Limits::default(),
            trusted_proxies: Vec::new(),
            tool_policy: true,
            tools: std::collections::BTreeMap::new(),
            audit_log: None,
            audit_max_bytes: crate::audit::DEFAULT_MAX_BYTES,
            audit_keep: crate::audit::DEFAULT_KEEP,
            keepalive_timeout_secs: 60,
            max_connections_per_ip: 256,
            log_format: crate::logging::LogFormat::Text,
            metrics_listen: None,
        }
    }
}

/// Where an upstream is, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `host:port`, used for connecting and as the `Host` header.
    pub authority: String,
    pub host: String,
    pub port: u16,
    /// Path prefix that replaces the public `/mcp` (or `/NAME/mcp`).
    pub path: String,
    /// `https://`: TLS to the upstream, the host as SNI and the name verified.
    pub tls: bool,
    /// `unix:PATH`: connect to this Unix domain socket instead (`authority` is then
    /// `localhost`, sent as `Host`; the path is `/mcp`).
    pub socket: Option<std::path::PathBuf>,
}

impl Upstream {
    /// The URL of the MCP endpoint, for HTTP clients that connect over `socket` themselves
    /// (the tool catalog).
    pub fn http_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority, self.path)
    }

    fn unix(path: PathBuf) -> Self {
        Self {
            authority: "localhost".to_owned(),
            host: "localhost".to_owned(),
            port: 80,
            path: MCP_PATH.to_owned(),
            tls: false,
            socket: Some(path),
        }
    }
}

/// How a route reaches its MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamKind {
    Http(Upstream),
    /// `https://`, verified against the system roots or `ca` (a PEM file).
    Https {
        upstream: Upstream,
        ca: Option<PathBuf>,
    },
    Unix(Upstream),
    /// A stdio server run by the gateway's bridge, reached on `upstream.socket`.
    Stdio {
        upstream: Upstream,
        command: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        limits: StdioConfig,
        /// `user` / `group`, resolved.
        run_as: Option<crate::stdio::exec::RunAs>,
    },
    /// Instances of one server (http or https), sharing `ca`.
    Replicas {
        instances: Vec<Upstream>,
        ca: Option<PathBuf>,
    },
}

impl UpstreamKind {
    /// The instance that requests go to (the first of several replicas until balancing
    /// picks one), and the tool catalog's.
    pub fn primary(&self) -> &Upstream {
        match self {
            Self::Http(u) | Self::Unix(u) => u,
            Self::Https { upstream, .. } | Self::Stdio { upstream, .. } => upstream,
            Self::Replicas { instances, .. } => &instances[0],
        }
    }

    /// The CA file the upstream's certificate is verified against, if any.
    pub fn ca_file(&self) -> Option<&Path> {
        match self {
            Self::Https { ca, .. } | Self::Replicas { ca, .. } => ca.as_deref(),
            _ => None,
        }
    }
}

/// The name of the `[upstream]` route.
pub const DEFAULT_ROUTE: &str = "mcp";

/// One validated route with everything the request path needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub name: String,
    /// Public path: `/NAME/mcp`, or `/mcp` for `[upstream]`.
    pub path: String,
    /// The canonical resource URL: `<base_url>` + `path`.
    pub resource: String,
    /// `/.well-known/oauth-protected-resource` + `path`.
    pub metadata_path: String,
    /// `<base_url>` + `metadata_path`: named in `WWW-Authenticate`.
    pub metadata_url: String,
    pub upstream: UpstreamKind,
    pub connect_timeout_ms: u64,
    pub read_timeout_ms: u64,
    /// Normalised allowed origins of this route.
    pub allowed_origins: Vec<String>,
    /// Top-level `[tools.NAME]` with this route's `[routes.tools.NAME]` over them.
    pub tools: BTreeMap<String, crate::policy::ToolRule>,
}

/// A validated configuration with everything derived that the request path needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub file: GatewayConfig,
    /// Public base URL without a trailing slash: the issuer.
    pub base_url: String,
    /// Every route, `[upstream]` (`mcp`) first when there is one. Never empty.
    pub routes: Vec<Route>,
    /// Normalised allowed origins (`scheme://host[:port]`, lower-case, default ports removed).
    pub allowed_origins: Vec<String>,
    /// The gateway's own origins: the public URL's, and for a loopback public URL the same port
    /// under every loopback name (a page can only send those from this machine).
    pub own_origins: Vec<String>,
}

impl Settings {
    /// The OAuth issuer identifier: byte-identical wherever it appears.
    pub fn issuer(&self) -> &str {
        &self.base_url
    }
    /// The canonical URL of the default protected resource (`<base_url>/mcp`): the OAuth
    /// server's default `resource`.
    pub fn resource(&self) -> String {
        format!("{}{MCP_PATH}", self.base_url)
    }
    /// The RFC 9728 metadata URL named in `WWW-Authenticate` outside any route: the default
    /// route's (`mcp`, else the first).
    pub fn resource_metadata_url(&self) -> String {
        match self.default_route() {
            Some(i) => self.routes[i].metadata_url.clone(),
            None => format!(
                "{}/.well-known/oauth-protected-resource{MCP_PATH}",
                self.base_url
            ),
        }
    }
    /// The route serving `path` exactly (`/mcp` or `/NAME/mcp`).
    pub fn route_for_path(&self, path: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.path == path)
    }
    /// The route whose RFC 9728 document is at `path`; the bare well-known path names the
    /// default route.
    pub fn route_for_metadata(&self, path: &str) -> Option<usize> {
        if path == "/.well-known/oauth-protected-resource" {
            return self.default_route();
        }
        self.routes.iter().position(|r| r.metadata_path == path)
    }
    /// The route named `name`.
    pub fn route_named(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
    /// The `mcp` route when there is one, else the only route.
    pub fn default_route(&self) -> Option<usize> {
        self.route_named(DEFAULT_ROUTE)
            .or_else(|| (self.routes.len() == 1).then_some(0))
    }
    pub fn tls_enabled(&self) -> bool {
        self.file.tls.is_some()
    }
    /// Where this gateway's stores live.
    pub fn store_site(&self) -> crate::stores::Site {
        crate::stores::Site::new(self.file.redis_url.as_deref(), &self.file.data_dir)
    }
    /// Whether a browser `Origin` (normalised) may call `/mcp`.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        self.own_origins.iter().any(|o| o == origin)
            || self.allowed_origins.iter().any(|o| o == origin)
    }
    /// The policy the `/mcp` admission applies (the top-level `[tools.NAME]` rules).
    pub fn policy(&self) -> crate::policy::Policy {
        crate::policy::Policy {
            rules: self.file.tools.clone(),
            baseline: self.file.required_scopes.clone(),
        }
    }
    /// The policy of route `i`: its merged tool rules.
    pub fn route_policy(&self, i: usize) -> crate::policy::Policy {
        crate::policy::Policy {
            rules: self.routes[i].tools.clone(),
            baseline: self.file.required_scopes.clone(),
        }
    }
    /// Where the audit log goes.
    pub fn audit_sink(&self) -> crate::audit::AuditSink {
        match self.file.audit_log.as_deref() {
            None => crate::audit::AuditSink::File(self.file.data_dir.join("audit.jsonl")),
            Some(text) => text
                .parse()
                .unwrap_or_else(|_| crate::audit::AuditSink::File(PathBuf::from(text))),
        }
    }
}

/// `metrics_listen`: a fixed port, and not the public listener's.
fn check_metrics_listen(addr: SocketAddr, listen: SocketAddr) -> Result<(), ConfigError> {
    if addr.port() == 0 {
        return Err(invalid(
            "metrics_listen",
            "give a fixed port (a scraper has to know it)",
        ));
    }
    let overlaps =
        addr.ip() == listen.ip() || addr.ip().is_unspecified() || listen.ip().is_unspecified();
    if addr.port() == listen.port() && overlaps {
        return Err(invalid(
            "metrics_listen",
            format!("{addr} is the public listener {listen}; give another port"),
        ));
    }
    Ok(())
}

/// The public origin and, when its host is a loopback name, its twins under the other names.
fn own_origins(base_url: &str) -> Vec<String> {
    let mut origins = vec![base_url.to_owned()];
    let Ok(uri) = base_url.parse::<Uri>() else {
        return origins;
    };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return origins;
    };
    if is_loopback_host(authority.host()) {
        let port = authority
            .port()
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            let origin = format!("{scheme}://{host}{port}");
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
    }
    origins
}

impl GatewayConfig {
    /// Reads `file` (if any), applies env overrides from `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut cfg: Self = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Self::parse(&text, &path.display().to_string())?
            }
            None => Self::default(),
        };
        cfg.apply_env(env)?;
        Ok(cfg)
    }

    /// Parses the TOML text of a config file (`path` names it in errors); no env overrides.
    pub fn parse(text: &str, path: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }

    fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn parse<T: std::str::FromStr>(name: &'static str, value: String) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            value.parse().map_err(|e: T::Err| ConfigError::Env {
                name,
                reason: e.to_string(),
                value,
            })
        }
        let list = |v: String| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        if let Some(v) = env("PFORTE_LISTEN") {
            self.listen = parse("PFORTE_LISTEN", v)?;
        }
        if let Some(v) = env("PFORTE_PUBLIC_URL") {
            self.public_url = Some(v);
        }
        if let Some(v) = env("PFORTE_DATA_DIR") {
            self.data_dir = PathBuf::from(v);
        }
        match (env("PFORTE_TLS_CERT"), env("PFORTE_TLS_KEY")) {
            (Some(cert), Some(key)) => {
                self.tls = Some(TlsFiles {
                    cert: cert.into(),
                    key: key.into(),
                });
            }
            (None, None) => {}
            (Some(v), None) | (None, Some(v)) => {
                return Err(ConfigError::Env {
                    name: "PFORTE_TLS_CERT/PFORTE_TLS_KEY",
                    value: v,
                    reason: "set both or neither".into(),
                });
            }
        }
        if let Some(v) = env("PFORTE_BEHIND_TLS_PROXY") {
            self.behind_tls_proxy = parse("PFORTE_BEHIND_TLS_PROXY", v)?;
        }
        match (env("PFORTE_UPSTREAM_URL"), env("PFORTE_UPSTREAM_URLS")) {
            (Some(url), None) => {
                let upstream = self.upstream.get_or_insert_with(UpstreamConfig::default);
                upstream.url = Some(url);
                upstream.urls = None;
            }
            (None, Some(urls)) => {
                let upstream = self.upstream.get_or_insert_with(UpstreamConfig::default);
                upstream.url = None;
                upstream.urls = Some(list(urls));
            }
            (None, None) => {}
            (Some(v), Some(_)) => {
                return Err(ConfigError::Env {
                    name: "PFORTE_UPSTREAM_URL/PFORTE_UPSTREAM_URLS",
                    value: v,
                    reason: "set one: a URL, or a comma-separated list of replicas".into(),
                });
            }
        }
        if let Some(v) = env("PFORTE_ALLOWED_ORIGINS") {
            self.allowed_origins = list(v);
        }
        if let Some(v) = env("PFORTE_REDIS_URL") {
            self.redis_url = Some(v);
        }
        if let Some(v) = env("PFORTE_MAX_BODY_BYTES") {
            self.max_body_bytes = parse("PFORTE_MAX_BODY_BYTES", v)?;
        }
        if let Some(v) = env("PFORTE_METRICS_LISTEN") {
            self.metrics_listen = Some(parse("PFORTE_METRICS_LISTEN", v)?);
        }
        if let Some(v) = env("PFORTE_LOG_FORMAT") {
            self.log_format = parse("PFORTE_LOG_FORMAT", v)?;
        }
        Ok(())
    }

    /// Checks every rule and derives the request-path settings.
    pub fn validate(self) -> Result<Settings, ConfigError> {
        let loopback = self.listen.ip().is_loopback();
        if self.tls.is_none() && !loopback && !self.behind_tls_proxy {
            return Err(invalid(
                "tls",
                format!(
                    "listener {} is not loopback: configure [tls] cert and key, or set \
                     behind_tls_proxy = true when a TLS-terminating proxy sits in front",
                    self.listen
                ),
            ));
        }
        if let Some(tls) = &self.tls {
            for (field, path) in [("tls.cert", &tls.cert), ("tls.key", &tls.key)] {
                std::fs::metadata(path)
                    .map_err(|e| invalid(field, format!("{}: {e}", path.display())))?;
            }
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let base_url = match &self.public_url {
            Some(url) => normalise_base_url(url, self.behind_tls_proxy)?,
            None => format!("{scheme}://{}", self.listen),
        };
        if let Some(url) = &self.redis_url
            && !(url.starts_with("redis://") || url.starts_with("rediss://"))
        {
            return Err(invalid(
                "redis_url",
                "expected redis://host:port[/db] or rediss://…",
            ));
        }
        if let Some(addr) = self.metrics_listen {
            check_metrics_listen(addr, self.listen)?;
        }
        if self
            .upstream
            .as_ref()
            .is_some_and(|u| u.connect_timeout_ms == 0)
        {
            return Err(invalid("upstream.connect_timeout_ms", "must be above 0"));
        }
        for (name, policy) in [
            ("limits.mcp", self.limits.mcp),
            ("limits.unauthenticated", self.limits.unauthenticated),
            ("limits.oauth", self.limits.oauth),
        ] {
            if !policy.is_valid() {
                return Err(invalid(
                    name,
                    "rate, period_secs and burst must all be above 0",
                ));
            }
        }
        for (name, max) in [
            (
                "limits.sessions_per_principal",
                self.limits.sessions_per_principal,
            ),
            (
                "limits.streams_per_principal",
                self.limits.streams_per_principal,
            ),
        ] {
            if max == 0 {
                return Err(invalid(name, "must be above 0"));
            }
        }
        if self.max_body_bytes < 1024 {
            return Err(invalid(
                "max_body_bytes",
                "below 1024 bytes no MCP request fits",
            ));
        }
        let allowed_origins = self
            .allowed_origins
            .iter()
            .map(|o| {
                normalise_origin(o).ok_or_else(|| {
                    invalid(
                        "allowed_origins",
                        format!("{o:?} is not an origin (scheme://host[:port])"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(s) = self
            .required_scopes
            .iter()
            .find(|s| !self.scopes.contains(s))
        {
            return Err(invalid(
                "required_scopes",
                format!("{s:?} is not one of the configured scopes"),
            ));
        }
        for (tool, rule) in &self.tools {
            if let Some(s) = rule
                .scopes
                .iter()
                .flatten()
                .find(|s| !self.scopes.contains(s))
            {
                return Err(invalid(
                    "tools",
                    format!("[tools.{tool}] scope {s:?} is not one of the configured scopes"),
                ));
            }
        }
        if let Some(text) = &self.audit_log
            && text.parse::<crate::audit::AuditSink>().is_err()
        {
            return Err(invalid(
                "audit_log",
                "give a file path, \"stdout\" or \"off\"",
            ));
        }
        if self.audit_max_bytes > 0 && !(1..=1000).contains(&self.audit_keep) {
            return Err(invalid("audit_keep", "keep 1 to 1000 rotated files"));
        }
        if self.audit_max_bytes > 0 && self.audit_max_bytes < 4096 {
            return Err(invalid(
                "audit_max_bytes",
                "at least 4096 bytes (a few lines), or 0 for no rotation",
            ));
        }
        if !(1..=3600).contains(&self.keepalive_timeout_secs) {
            return Err(invalid("keepalive_timeout_secs", "1 to 3600 seconds"));
        }
        if self.scopes.is_empty() || self.scopes.iter().any(|s| !is_scope_token(s)) {
            return Err(invalid(
                "scopes",
                "list at least one scope; scopes are printable ASCII without blanks or quotes",
            ));
        }
        let routes = self.routes(&base_url, &allowed_origins)?;
        Ok(Settings {
            own_origins: own_origins(&base_url),
            base_url,
            routes,
            allowed_origins,
            file: self,
        })
    }

    /// The route table: `[upstream]` as `mcp` at `/mcp` (or the default upstream when there
    /// are no `[[routes]]`), then every `[[routes]]` entry at `/NAME/mcp`.
    fn routes(
        &self,
        base_url: &str,
        allowed_origins: &[String],
    ) -> Result<Vec<Route>, ConfigError> {
        let defaults = UpstreamConfig::default();
        let upstream = match (&self.upstream, self.routes.is_empty()) {
            (Some(u), _) => Some(u),
            (None, true) => Some(&defaults),
            (None, false) => None,
        };
        let mut routes = Vec::with_capacity(self.routes.len() + 1);
        if let Some(u) = upstream {
            let kind = match (&u.url, &u.urls) {
                (url, None) => endpoint_kind(
                    url.as_deref().unwrap_or(DEFAULT_UPSTREAM_URL),
                    u.ca_file.clone(),
                )
                .map_err(|reason| invalid("upstream.url", reason))?,
                (None, Some(urls)) => replicas(urls, u.ca_file.clone())
                    .map_err(|reason| invalid("upstream.urls", reason))?,
                (Some(_), Some(_)) => {
                    return Err(invalid("upstream.url", "give url or urls, not both"));
                }
            };
            if let Some(ca) = &u.ca_file {
                check_ca_file(ca, &kind).map_err(|reason| invalid("upstream.ca_file", reason))?;
            }
            routes.push(Route {
                name: DEFAULT_ROUTE.to_owned(),
                path: MCP_PATH.to_owned(),
                resource: format!("{base_url}{MCP_PATH}"),
                metadata_path: format!("/.well-known/oauth-protected-resource{MCP_PATH}"),
                metadata_url: format!("{base_url}/.well-known/oauth-protected-resource{MCP_PATH}"),
                upstream: kind,
                connect_timeout_ms: u.connect_timeout_ms,
                read_timeout_ms: u.read_timeout_ms,
                allowed_origins: allowed_origins.to_vec(),
                tools: self.tools.clone(),
            });
        }
        let timeouts = upstream.unwrap_or(&defaults);
        let path_var = std::env::var_os(PATH_ENV);
        for r in &self.routes {
            let route = self.route(r, base_url, allowed_origins, timeouts, path_var.as_deref())?;
            if routes.iter().any(|known| known.name == route.name) {
                let reason = if route.name == DEFAULT_ROUTE {
                    "the name mcp is the [upstream] route's; choose another".to_owned()
                } else {
                    "a route of this name exists already; names are unique".to_owned()
                };
                return Err(route_err(&route.name, "name", reason));
            }
            routes.push(route);
        }
        Ok(routes)
    }

    /// One `[[routes]]` entry, checked.
    fn route(
        &self,
        r: &RouteConfig,
        base_url: &str,
        allowed_origins: &[String],
        timeouts: &UpstreamConfig,
        path_var: Option<&std::ffi::OsStr>,
    ) -> Result<Route, ConfigError> {
        let err = |field: &'static str, reason: String| route_err(&r.name, field, reason);
        if !valid_route_name(&r.name) {
            return Err(err(
                "name",
                "a route name is 1 to 63 characters of a-z, 0-9 and '-'".to_owned(),
            ));
        }
        let upstream = match (&r.url, &r.urls, &r.command) {
            (Some(url), None, None) => {
                endpoint_kind(url, r.ca_file.clone()).map_err(|e| err("url", e))?
            }
            (None, Some(urls), None) => {
                replicas(urls, r.ca_file.clone()).map_err(|e| err("urls", e))?
            }
            (None, None, Some(command)) => {
                let program = command.first().ok_or_else(|| {
                    err("command", "give the program and its arguments".to_owned())
                })?;
                find_program(program, r.cwd.as_deref(), path_var).map_err(|e| err("command", e))?;
                if let Some(cwd) = &r.cwd
                    && !cwd.is_dir()
                {
                    return Err(err("cwd", format!("{} is not a directory", cwd.display())));
                }
                if r.stdio.max_children == 0
                    || r.stdio.max_children_per_principal == 0
                    || r.stdio.idle_timeout_secs == 0
                {
                    return Err(err(
                        "stdio",
                        "max_children, max_children_per_principal and idle_timeout_secs must be above 0"
                            .to_owned(),
                    ));
                }
                if r.stdio.max_line_bytes < MIN_MAX_LINE_BYTES {
                    return Err(err(
                        "stdio",
                        format!("max_line_bytes must be at least {MIN_MAX_LINE_BYTES}"),
                    ));
                }
                let run_as = match (&r.user, &r.group) {
                    (Some(user), group) => Some(
                        crate::stdio::exec::RunAs::resolve(user, group.as_deref())
                            .map_err(|e| err("user", e))?,
                    ),
                    (None, Some(_)) => {
                        return Err(err("group", "group is for a route with user".to_owned()));
                    }
                    (None, None) => None,
                };
                UpstreamKind::Stdio {
                    upstream: Upstream::unix(stdio_socket(&self.data_dir, &r.name)),
                    command: command.clone(),
                    env: r.env.clone(),
                    cwd: r.cwd.clone(),
                    limits: r.stdio,
                    run_as,
                }
            }
            (None, None, None) => {
                return Err(err(
                    "url",
                    format!("give exactly one of url ({ACCEPTED_UPSTREAMS}), urls or command"),
                ));
            }
            _ => {
                return Err(err(
                    "url",
                    "give exactly one of url, urls or command, not several".to_owned(),
                ));
            }
        };
        if r.command.is_none()
            && (!r.env.is_empty() || r.cwd.is_some() || r.user.is_some() || r.group.is_some())
        {
            return Err(err(
                "env",
                "env, cwd, user and group are for command routes".to_owned(),
            ));
        }
        if let Some(ca) = &r.ca_file {
            check_ca_file(ca, &upstream).map_err(|e| err("ca_file", e))?;
        }
        let connect_timeout_ms = r.connect_timeout_ms.unwrap_or(timeouts.connect_timeout_ms);
        if connect_timeout_ms == 0 {
            return Err(err("connect_timeout_ms", "must be above 0".to_owned()));
        }
        let origins = match &r.allowed_origins {
            None => allowed_origins.to_vec(),
            Some(list) => list
                .iter()
                .map(|o| {
                    normalise_origin(o).ok_or_else(|| {
                        err(
                            "allowed_origins",
                            format!("{o:?} is not an origin (scheme://host[:port])"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        for (tool, rule) in &r.tools {
            if let Some(s) = rule
                .scopes
                .iter()
                .flatten()
                .find(|s| !self.scopes.contains(s))
            {
                return Err(err(
                    "tools",
                    format!(
                        "[routes.tools.{tool}] scope {s:?} is not one of the configured scopes"
                    ),
                ));
            }
        }
        let mut tools = self.tools.clone();
        tools.extend(r.tools.iter().map(|(k, v)| (k.clone(), v.clone())));
        let path = format!("/{}{MCP_PATH}", r.name);
        Ok(Route {
            name: r.name.clone(),
            resource: format!("{base_url}{path}"),
            metadata_path: format!("/.well-known/oauth-protected-resource{path}"),
            metadata_url: format!("{base_url}/.well-known/oauth-protected-resource{path}"),
            path,
            upstream,
            connect_timeout_ms,
            read_timeout_ms: r.read_timeout_ms.unwrap_or(timeouts.read_timeout_ms),
            allowed_origins: origins,
            tools,
        })
    }

    /// The route names a token may be limited to: `mcp` when `[upstream]` is a route, and
    /// every `[[routes]]` name (unchecked: for the admin CLI).
    pub fn route_names(&self) -> Vec<&str> {
        let mut names = Vec::with_capacity(self.routes.len() + 1);
        if self.upstream.is_some() || self.routes.is_empty() {
            names.push(DEFAULT_ROUTE);
        }
        names.extend(self.routes.iter().map(|r| r.name.as_str()));
        names
    }
}

fn route_err(route: &str, field: &'static str, reason: String) -> ConfigError {
    ConfigError::Route {
        route: route.to_owned(),
        field,
        reason,
    }
}

/// `[a-z0-9-]+`, 1 to 63 characters.
pub fn valid_route_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Where the bridge of the `command` route `name` listens: `<data_dir>/run/stdio/NAME.sock`.
pub fn stdio_socket(data_dir: &Path, name: &str) -> PathBuf {
    data_dir
        .join("run")
        .join("stdio")
        .join(format!("{name}.sock"))
}

/// The program of a `command` route: a path (relative to `cwd` when it has a `/` and is
/// relative), or a name looked up on `path_var`. It must be an executable file.
pub fn find_program(
    program: &str,
    cwd: Option<&Path>,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return Err("the program is empty".to_owned());
    }
    if program.contains('/') {
        let path = match cwd {
            Some(dir) if Path::new(program).is_relative() => dir.join(program),
            _ => PathBuf::from(program),
        };
        return match std::fs::metadata(&path) {
            Err(e) => Err(format!("{}: {e}", path.display())),
            Ok(_) if !executable(&path) => {
                Err(format!("{} is not an executable file", path.display()))
            }
            Ok(_) => Ok(path),
        };
    }
    path_var
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| format!("{program:?} is not an executable on {PATH_ENV}"))
}

/// A `ca_file`: only for https upstreams, and a PEM file with at least one certificate.
fn check_ca_file(path: &Path, kind: &UpstreamKind) -> Result<(), String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    let https = match kind {
        UpstreamKind::Https { .. } => true,
        UpstreamKind::Replicas { instances, .. } => instances.iter().all(|u| u.tls),
        _ => false,
    };
    if !https {
        return Err("a CA file is only for https:// upstreams".to_owned());
    }
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no PEM certificate (BEGIN CERTIFICATE) in it",
            path.display()
        ));
    }
    Ok(())
}

fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `https://Example.com:443/` → `https://example.com`. Plain http is accepted for loopback
/// hosts, or when a TLS proxy in front terminates https (then the public URL must be https).
fn normalise_base_url(url: &str, behind_tls_proxy: bool) -> Result<String, ConfigError> {
    let uri: Uri = url
        .parse()
        .map_err(|e| invalid("public_url", format!("{url:?}: {e}")))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(invalid(
            "public_url",
            format!("{url:?} needs a scheme and a host"),
        ));
    };
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(invalid(
            "public_url",
            format!("{url:?} must not have a path or query: the issuer is the origin"),
        ));
    }
    let host = authority.host().to_ascii_lowercase();
    match scheme {
        "https" => {}
        "http" if is_loopback_host(&host) => {}
        "http" if behind_tls_proxy => {
            return Err(invalid(
                "public_url",
                "behind a TLS proxy the public URL is the proxy's https URL",
            ));
        }
        "http" => {
            return Err(invalid(
                "public_url",
                format!("{url:?}: plain http is only for loopback hosts"),
            ));
        }
        other => {
            return Err(invalid(
                "public_url",
                format!("unsupported scheme {other:?}"),
            ));
        }
    }
    let default_port = if scheme == "https" { 443 } else { 80 };
    Ok(match authority.port_u16() {
        Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// Normalises an origin for comparison; `None` if it is not one.
pub fn normalise_origin(origin: &str) -> Option<String> {
    let uri: Uri = origin.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return None;
    }
    let host = authority.host().to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    Some(match authority.port_u16() {
        Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// Several instances of one server: each http or https, each listed once (sessions record
/// their instance by URL).
fn replicas(urls: &[String], ca: Option<PathBuf>) -> Result<UpstreamKind, String> {
    if urls.is_empty() {
        return Err("list at least one URL".to_owned());
    }
    let mut instances: Vec<Upstream> = Vec::with_capacity(urls.len());
    for url in urls {
        match endpoint_kind(url, None)? {
            UpstreamKind::Http(u) | UpstreamKind::Https { upstream: u, .. } => {
                if instances.iter().any(|i| i.http_url() == u.http_url()) {
                    return Err(format!("{url:?} is listed twice"));
                }
                instances.push(u);
            }
            _ => {
                return Err(format!(
                    "{url:?}: replicas are http://HOST:PORT/PATH or https://HOST:PORT/PATH"
                ));
            }
        }
    }
    Ok(UpstreamKind::Replicas { instances, ca })
}

/// One upstream URL: `http://`, `https://` (verified against `ca` or the system roots) or
/// `unix:PATH`. The error says what is accepted.
fn endpoint_kind(url: &str, ca: Option<PathBuf>) -> Result<UpstreamKind, String> {
    if let Some(path) = url.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(format!(
                "unix: needs a socket path; accepted: {ACCEPTED_UPSTREAMS}"
            ));
        }
        return Ok(UpstreamKind::Unix(Upstream::unix(path.into())));
    }
    let bad = |why: String| format!("{url:?}: {why}; accepted: {ACCEPTED_UPSTREAMS}");
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(other) => return Err(bad(format!("unsupported scheme {other:?}"))),
        None => return Err(bad("no scheme".to_owned())),
    };
    let authority = uri.authority().ok_or_else(|| bad("no host".to_owned()))?;
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let host = authority.host().to_owned();
    let path = uri.path().trim_end_matches('/');
    let upstream = Upstream {
        authority: format!("{host}:{port}"),
        host,
        port,
        path: if path.is_empty() {
            "/".to_owned()
        } else {
            path.to_owned()
        },
        tls,
        socket: None,
    };
    Ok(if tls {
        UpstreamKind::Https { upstream, ca }
    } else {
        UpstreamKind::Http(upstream)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cfg(toml_text: &str) -> Result<Settings, ConfigError> {
        let cfg: GatewayConfig = toml::from_str(toml_text).unwrap();
        cfg.validate()
    }

    #[test]
    fn loopback_plain_http_is_fine_and_derives_urls() {
        let s = cfg("listen = \"127.0.0.1:9000\"").unwrap();
        assert_eq!(s.issuer(), "http://127.0.0.1:9000");
        assert_eq!(s.resource(), "http://127.0.0.1:9000/mcp");
        assert_eq!(
            s.resource_metadata_url(),
            "http://127.0.0.1:9000/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(s.routes.len(), 1);
        assert_eq!(s.routes[0].name, "mcp");
        assert_eq!(s.routes[0].upstream.primary().authority, "127.0.0.1:8080");
        assert_eq!(s.routes[0].upstream.primary().path, "/mcp");
    }

    #[test]
    fn metrics_listen_needs_its_own_fixed_port() {
        let s = cfg("listen = \"127.0.0.1:9000\"\nmetrics_listen = \"0.0.0.0:9100\"").unwrap();
        assert_eq!(s.file.metrics_listen, Some("0.0.0.0:9100".parse().unwrap()));
        for bad in ["127.0.0.1:9000", "0.0.0.0:9000", "127.0.0.1:0"] {
            let err = cfg(&format!(
                "listen = \"127.0.0.1:9000\"\nmetrics_listen = \"{bad}\""
            ))
            .unwrap_err();
            assert!(
                err.to_string().starts_with("metrics_listen:"),
                "{bad}: {err}"
            );
        }
        // Another address on the same port is another socket.
        cfg("listen = \"127.0.0.1:9000\"\nmetrics_listen = \"127.0.0.2:9000\"").unwrap();
        let env = GatewayConfig::load(None, |k| {
            (k == "PFORTE_METRICS_LISTEN").then(|| "127.0.0.1:9464".to_owned())
        })
        .unwrap();
        assert_eq!(env.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
    }

    #[test]
    fn a_unix_socket_upstream_is_accepted() {
        let s = cfg("[upstream]\nurl = \"unix:/srv/pforte/run/mcp.sock\"").unwrap();
        let upstream = s.routes[0].upstream.primary();
        assert_eq!(
            upstream.socket.as_deref(),
            Some(std::path::Path::new("/srv/pforte/run/mcp.sock"))
        );
        assert_eq!(upstream.authority, "localhost");
        assert_eq!(upstream.http_url(), "http://localhost/mcp");
        let err = cfg("[upstream]\nurl = \"unix:\"").unwrap_err();
        assert!(err.to_string().starts_with("upstream.url"), "{err}");
    }

    #[test]
    fn public_plain_http_needs_tls_or_a_proxy() {
        let err = cfg("listen = \"0.0.0.0:8443\"").unwrap_err();
        assert!(err.to_string().contains("behind_tls_proxy"), "{err}");
        let s = cfg(
            "listen = \"0.0.0.0:8080\"\nbehind_tls_proxy = true\npublic_url = \"https://MCP.example.com:443/\"",
        )
        .unwrap();
        assert_eq!(s.issuer(), "https://mcp.example.com");
    }

    #[test]
    fn bad_values_are_named() {
        for (text, field) in [
            ("public_url = \"https://x.example/base\"", "public_url"),
            ("public_url = \"http://x.example\"", "public_url"),
            ("allowed_origins = [\"not an origin\"]", "allowed_origins"),
            ("[upstream]\nurl = \"ftp://svc/mcp\"", "upstream.url"),
            ("max_body_bytes = 10", "max_body_bytes"),
            ("scopes = [\"a b\"]\nrequired_scopes = []", "scopes"),
            ("audit_keep = 0", "audit_keep"),
            ("audit_max_bytes = 100", "audit_max_bytes"),
            ("keepalive_timeout_secs = 0", "keepalive_timeout_secs"),
            ("keepalive_timeout_secs = 86400", "keepalive_timeout_secs"),
        ] {
            let err = cfg(text).unwrap_err();
            assert!(err.to_string().starts_with(field), "{text}: {err}");
        }
    }

    #[test]
    fn edge_bounds_have_defaults_and_an_off_switch() {
        let s = cfg("").unwrap();
        assert_eq!(s.file.keepalive_timeout_secs, 60);
        assert_eq!(s.file.max_connections_per_ip, 256);
        assert_eq!(s.file.audit_max_bytes, 100 * 1024 * 1024);
        assert_eq!(s.file.audit_keep, 5);
        // No rotation: any keep; no cap: 0.
        let s = cfg("audit_max_bytes = 0\naudit_keep = 0\nmax_connections_per_ip = 0").unwrap();
        assert_eq!(s.file.audit_max_bytes, 0);
        assert_eq!(s.file.max_connections_per_ip, 0);
    }

    #[test]
    fn own_origins_include_loopback_twins() {
        let s = cfg("listen = \"127.0.0.1:9000\"").unwrap();
        assert!(s.origin_allowed("http://127.0.0.1:9000"));
        assert!(s.origin_allowed("http://localhost:9000"));
        assert!(!s.origin_allowed("http://localhost:9001"));
        assert!(!s.origin_allowed("http://evil.example:9000"));
        let s = cfg("listen = \"0.0.0.0:8080\"\nbehind_tls_proxy = true\npublic_url = \"https://mcp.example.com\"").unwrap();
        assert_eq!(s.own_origins, vec!["https://mcp.example.com".to_owned()]);
    }

    #[test]
    fn tool_rules_name_known_scopes() {
        let s =
            cfg("[tools.werkbaum_history]\nusers = [\"alice\"]\n[tools.x]\ndeny = true").unwrap();
        assert_eq!(s.policy().rules.len(), 2);
        let err = cfg("[tools.x]\nscopes = [\"mcp:admin\"]").unwrap_err();
        assert!(err.to_string().starts_with("tools"), "{err}");
    }

    #[test]
    fn routes_are_served_at_their_names() {
        let s = cfg("listen = \"127.0.0.1:9000\"\n[[routes]]\nname = \"werkbaum\"\nurl = \"http://127.0.0.1:8080/mcp\"\n[[routes]]\nname = \"plans\"\nurl = \"https://plans.internal/svc/mcp\"\nread_timeout_ms = 5\n[routes.tools.x]\ndeny = true\n[tools.y]\ndeny = true").unwrap();
        // With [[routes]] and no [upstream] there is no /mcp route.
        assert_eq!(s.routes.len(), 2);
        assert_eq!(s.route_for_path("/mcp"), None);
        let w = &s.routes[s.route_for_path("/werkbaum/mcp").unwrap()];
        assert_eq!(w.name, "werkbaum");
        assert_eq!(w.resource, "http://127.0.0.1:9000/werkbaum/mcp");
        assert_eq!(
            w.metadata_url,
            "http://127.0.0.1:9000/.well-known/oauth-protected-resource/werkbaum/mcp"
        );
        assert_eq!(
            s.route_for_metadata("/.well-known/oauth-protected-resource/werkbaum/mcp"),
            Some(0)
        );
        // Two routes and none called mcp: the bare well-known path names none of them.
        assert_eq!(
            s.route_for_metadata("/.well-known/oauth-protected-resource"),
            None
        );
        let p = &s.routes[1];
        let UpstreamKind::Https { upstream, ca: None } = &p.upstream else {
            panic!("{:?}", p.upstream)
        };
        assert_eq!(upstream.authority, "plans.internal:443");
        assert_eq!(upstream.path, "/svc/mcp");
        assert_eq!(p.read_timeout_ms, 5);
        assert_eq!(p.connect_timeout_ms, 2_000);
        assert!(p.tools["x"].deny && p.tools["y"].deny);
        assert!(!w.tools.contains_key("x"));
        // [upstream] stays the route mcp at /mcp beside them.
        let s = cfg("[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[[routes]]\nname = \"a\"\nurl = \"unix:/tmp/a.sock\"").unwrap();
        assert_eq!(s.route_for_path("/mcp"), Some(0));
        assert_eq!(s.route_for_path("/a/mcp"), Some(1));
        assert_eq!(
            s.route_for_metadata("/.well-known/oauth-protected-resource"),
            Some(0)
        );
        assert_eq!(s.file.route_names(), vec!["mcp", "a"]);
    }

    #[test]
    fn bad_routes_name_the_route_and_the_field() {
        for (text, start) in [
            (
                "[[routes]]\nname = \"Bad_Name\"\nurl = \"http://a/mcp\"",
                "[[routes]] \"Bad_Name\": name:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\n[[routes]]\nname = \"a\"\nurl = \"http://b/mcp\"",
                "[[routes]] \"a\": name:",
            ),
            (
                "[upstream]\nurl = \"http://a/mcp\"\n[[routes]]\nname = \"mcp\"\nurl = \"http://b/mcp\"",
                "[[routes]] \"mcp\": name:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\ncommand = [\"sh\"]",
                "[[routes]] \"a\": url:",
            ),
            ("[[routes]]\nname = \"a\"", "[[routes]] \"a\": url:"),
            (
                "[[routes]]\nname = \"a\"\nurl = \"ftp://a/mcp\"",
                "[[routes]] \"a\": url:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurls = []",
                "[[routes]] \"a\": urls:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurls = [\"unix:/x\"]",
                "[[routes]] \"a\": urls:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurls = [\"http://127.0.0.1:1/mcp\", \"http://127.0.0.1:1/mcp\"]",
                "[[routes]] \"a\": urls: \"http://127.0.0.1:1/mcp\" is listed twice",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = []",
                "[[routes]] \"a\": command:",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"no-such-program-pforte\"]",
                "[[routes]] \"a\": command:",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"/dev/null\"]",
                "[[routes]] \"a\": command:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nca_file = \"/etc/hostname\"",
                "[[routes]] \"a\": ca_file:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nenv = { A = \"b\" }",
                "[[routes]] \"a\": env:",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\nuser = \"no-such-user-pforte\"",
                "[[routes]] \"a\": user: no user named \"no-such-user-pforte\"",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\ngroup = \"root\"",
                "[[routes]] \"a\": group:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nuser = \"root\"",
                "[[routes]] \"a\": env:",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\n[routes.stdio]\nmax_line_bytes = 100",
                "[[routes]] \"a\": stdio: max_line_bytes",
            ),
            (
                "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nallowed_origins = [\"x\"]",
                "[[routes]] \"a\": allowed_origins:",
            ),
            (
                "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\n[routes.tools.t]\nscopes = [\"nope\"]",
                "[[routes]] \"a\": tools:",
            ),
        ] {
            let err = cfg(text).unwrap_err().to_string();
            assert!(err.starts_with(start), "{text}: {err}");
        }
        let err = cfg("[[routes]]\nname = \"a\"\nurl = \"ftp://a/mcp\"").unwrap_err();
        assert!(
            err.to_string()
                .contains("http://HOST:PORT/PATH, https://HOST:PORT/PATH or unix:PATH"),
            "{err}"
        );
    }

    #[test]
    fn command_routes_find_their_program() {
        let s = cfg("data_dir = \"/srv/pf\"\n[[routes]]\nname = \"plans\"\ncommand = [\"sh\", \"-c\", \"cat\"]\nenv = { RUST_LOG = \"warn\" }\n[routes.stdio]\nmax_children = 3").unwrap();
        let UpstreamKind::Stdio {
            upstream,
            command,
            env,
            limits,
            ..
        } = &s.routes[0].upstream
        else {
            panic!("{:?}", s.routes[0].upstream)
        };
        assert_eq!(
            upstream.socket.as_deref(),
            Some(Path::new("/srv/pf/run/stdio/plans.sock"))
        );
        assert_eq!(command[0], "sh");
        assert_eq!(env["RUST_LOG"], "warn");
        assert_eq!((limits.max_children, limits.pool), (3, 2));
        assert_eq!(limits.max_line_bytes, DEFAULT_MAX_LINE_BYTES);
        let s = cfg("[[routes]]\nname = \"p\"\ncommand = [\"sh\"]\nuser = \"root\"\n[routes.stdio]\nmax_line_bytes = 65536").unwrap();
        let UpstreamKind::Stdio { limits, run_as, .. } = &s.routes[0].upstream else {
            panic!("{:?}", s.routes[0].upstream)
        };
        assert_eq!(limits.max_line_bytes, 65536);
        assert_eq!(run_as.as_ref().map(|r| (r.uid, r.gid)), Some((0, 0)));
        assert!(find_program("/bin/sh", None, None).is_ok());
        assert!(find_program("sh", None, Some(std::ffi::OsStr::new("/nonexistent"))).is_err());
    }

    #[test]
    fn https_upstreams_take_a_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(&pem, ca.cert.pem()).unwrap();
        let text = format!(
            "[upstream]\nurl = \"https://localhost:8443/mcp\"\nca_file = {:?}",
            pem.display().to_string()
        );
        let s = cfg(&text).unwrap();
        assert_eq!(s.routes[0].upstream.ca_file(), Some(pem.as_path()));
        assert!(s.routes[0].upstream.primary().tls);
        std::fs::write(&pem, "not pem").unwrap();
        let err = cfg(&text).unwrap_err().to_string();
        assert!(err.starts_with("upstream.ca_file:"), "{err}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<GatewayConfig>("lisen = \"x\"").is_err());
    }

    #[test]
    fn origins_normalise() {
        assert_eq!(
            normalise_origin("HTTPS://Claude.AI:443").as_deref(),
            Some("https://claude.ai")
        );
        assert_eq!(
            normalise_origin("http://localhost:3000").as_deref(),
            Some("http://localhost:3000")
        );
        assert_eq!(normalise_origin("null"), None);
    }

    #[test]
    fn env_overrides() {
        let c = GatewayConfig::load(None, |k| match k {
            "PFORTE_LISTEN" => Some("127.0.0.1:1234".into()),
            "PFORTE_ALLOWED_ORIGINS" => Some("https://a.example, https://b.example".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.listen.port(), 1234);
        assert_eq!(c.allowed_origins.len(), 2);
        let err = GatewayConfig::load(None, |k| {
            (k == "PFORTE_TLS_CERT").then(|| "c.pem".to_owned())
        })
        .unwrap_err();
        assert!(err.to_string().contains("both"));
    }

    #[test]
    fn the_upstream_route_takes_replicas_from_the_file_or_the_env() {
        let s = cfg("[upstream]\nurls = [\"http://svc-1:8080/mcp\", \"http://svc-2:8080/mcp\"]")
            .unwrap();
        let UpstreamKind::Replicas { instances, .. } = &s.routes[0].upstream else {
            panic!("{:?}", s.routes[0].upstream)
        };
        assert_eq!((s.routes[0].path.as_str(), instances.len()), ("/mcp", 2));
        assert_eq!(instances[1].authority, "svc-2:8080");
        let err =
            cfg("[upstream]\nurl = \"http://a:1/mcp\"\nurls = [\"http://b:1/mcp\"]").unwrap_err();
        assert_eq!(err.to_string(), "upstream.url: give url or urls, not both");
        let err = cfg("[upstream]\nurls = [\"http://b:1/mcp\", \"http://b:1/mcp\"]").unwrap_err();
        assert!(err.to_string().starts_with("upstream.urls: "), "{err}");

        // The env replaces the file's choice; both variables at once are refused.
        let file = GatewayConfig::parse("[upstream]\nurl = \"http://a:1/mcp\"", "t").unwrap();
        let mut c = file.clone();
        c.apply_env(|k| {
            (k == "PFORTE_UPSTREAM_URLS").then(|| "http://r-1:80/mcp, http://r-2:80/mcp".to_owned())
        })
        .unwrap();
        let upstream = c.upstream.as_ref().unwrap();
        assert_eq!(
            (
                upstream.url.as_deref(),
                upstream.urls.as_ref().map(Vec::len)
            ),
            (None, Some(2))
        );
        let mut c = file;
        let err = c
            .apply_env(|k| {
                k.starts_with("PFORTE_UPSTREAM_URL")
                    .then(|| "http://x:1/mcp".to_owned())
            })
            .unwrap_err();
        assert!(err.to_string().contains("set one"), "{err}");
    }
}
