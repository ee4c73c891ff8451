//! The configuration as written: the serde types of the TOML file, their defaults, and the
//! `PFORTE_*` overrides over them. Pure: the caller reads the file and the environment.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use super::{ConfigError, DEFAULT_ROUTE, tls::TlsConfig};

/// `[upstream]`'s URL when it names none.
pub(crate) const DEFAULT_UPSTREAM_URL: &str = "http://127.0.0.1:8080/mcp";

/// Where requests go after the gateway (`[upstream]`: the route `mcp`, served at `/mcp`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct UpstreamConfig {
    /// The MCP service's streamable-HTTP URL: `http://`, `https://` or `unix:PATH`
    /// (default [`DEFAULT_UPSTREAM_URL`]).
    pub(crate) url: Option<String>,
    /// Replicas of the MCP service (http or https), instead of `url`.
    pub(crate) urls: Option<Vec<String>>,
    /// PEM file of the CA that signs an https upstream's certificate (default: system roots).
    pub(crate) ca_file: Option<PathBuf>,
    /// Connecting to the upstream longer than this answers 504.
    pub(crate) connect_timeout_ms: u64,
    /// The longest silence tolerated while reading an upstream response. MCP SSE streams carry
    /// keep-alive comments every 15 s, so this never cuts a healthy long stream.
    pub(crate) read_timeout_ms: u64,
    /// As `[[routes]]` `roles`: roles of which an OAuth user must hold one.
    pub(crate) roles: Vec<String>,
    /// As `[[routes]]` `users`: OAuth users allowed.
    pub(crate) users: Vec<String>,
    /// As `[[routes]]` `title`: the route's human title on the pages (default: the name).
    pub(crate) title: Option<String>,
    /// As `[[routes]]` `required`.
    pub(crate) required: bool,
    /// As `[[routes]]` `identity_headers` (default `true`).
    pub(crate) identity_headers: Option<bool>,
    /// As `[[routes]]` `forward_client_ip` (default `true`).
    pub(crate) forward_client_ip: Option<bool>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            url: None,
            urls: None,
            ca_file: None,
            connect_timeout_ms: 2_000,
            read_timeout_ms: 300_000,
            roles: Vec::new(),
            users: Vec::new(),
            title: None,
            required: true,
            identity_headers: None,
            forward_client_ip: None,
        }
    }
}

/// `[routes.stdio] max_line_bytes` by default: 32 MiB. Real servers' answers fit: the filesystem
/// server sends a file read twice (`content` text and `structuredContent`), so an 8 MiB file is
/// a 16 MiB line before JSON escaping. A line is held at most once per child while it is read.
pub const DEFAULT_MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// The stdio bridge's bounds for a `command` route (`[routes.stdio]`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct StdioConfig {
    /// Children of this route at most (over it: 503 with `Retry-After`).
    pub(crate) max_children: usize,
    /// Children one principal may hold at most.
    pub(crate) max_children_per_principal: usize,
    /// A child without requests for this long is stopped.
    pub(crate) idle_timeout_secs: u64,
    /// Initialized children kept for stateless requests.
    pub(crate) pool: usize,
    /// The longest line (one JSON-RPC message) a child may write on stdout, in bytes; a longer
    /// one is read past without being held, and the call it answers fails.
    pub(crate) max_line_bytes: usize,
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
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RouteConfig {
    /// `[a-z0-9-]+`, 1 to 63 characters, unique.
    pub(crate) name: String,
    /// A human title for the sign-in, consent and account pages (default: the name).
    pub(crate) title: Option<String>,
    /// Streamable HTTP: `http://…`, `https://…` or `unix:PATH`.
    pub(crate) url: Option<String>,
    /// Replicas of one server (http or https).
    pub(crate) urls: Option<Vec<String>>,
    /// A stdio MCP server the gateway runs: program and arguments.
    pub(crate) command: Option<Vec<String>>,
    /// The only variables the command sees besides PATH and HOME.
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<PathBuf>,
    /// Run the command as this user (the gateway must run as root); default: the gateway's.
    pub(crate) user: Option<String>,
    /// With `user`: this group instead of the user's primary group.
    pub(crate) group: Option<String>,
    /// PEM file of the CA of an https upstream (default: system roots).
    pub(crate) ca_file: Option<PathBuf>,
    /// Default: `[upstream]`'s.
    pub(crate) connect_timeout_ms: Option<u64>,
    /// Default: `[upstream]`'s.
    pub(crate) read_timeout_ms: Option<u64>,
    /// Browser origins for this route; default: the top-level `allowed_origins`.
    pub(crate) allowed_origins: Option<Vec<String>>,
    /// `[routes.tools.NAME]`: rules for this route's tools, over the top-level `[tools.NAME]`.
    pub(crate) tools: BTreeMap<String, crate::policy::ToolRule>,
    /// `[routes.prompts.NAME]`: over the top-level `[prompts.NAME]`.
    pub(crate) prompts: BTreeMap<String, crate::policy::ToolRule>,
    /// `[routes.resources."URI"]`: over the top-level `[resources."URI"]`.
    pub(crate) resources: BTreeMap<String, crate::policy::ToolRule>,
    /// `[routes.stdio]`: bounds of a `command` route's children.
    pub(crate) stdio: StdioConfig,
    /// OAuth users must hold one of these `[oauth.roles]` (or be in `users`) to use the route.
    pub(crate) roles: Vec<String>,
    /// OAuth users allowed to use the route (local usernames, external users' verified emails).
    pub(crate) users: Vec<String>,
    /// `false`: the route's outage leaves `/readyz` at 200 (the route is still named there).
    pub(crate) required: bool,
    /// `[routes.upstream_auth]`: the credential the upstream needs of its own.
    pub(crate) upstream_auth: Option<super::upstream_auth::UpstreamAuthConfig>,
    /// Whether the upstream gets the caller's `x-pforte-*` identity headers (default: `false`
    /// with `upstream_auth`, a third party's server; else `true`).
    pub(crate) identity_headers: Option<bool>,
    /// Whether the upstream gets the client's IP in `X-Forwarded-For` (default as
    /// `identity_headers`).
    pub(crate) forward_client_ip: Option<bool>,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            title: None,
            url: None,
            urls: None,
            command: None,
            env: BTreeMap::new(),
            cwd: None,
            user: None,
            group: None,
            ca_file: None,
            connect_timeout_ms: None,
            read_timeout_ms: None,
            allowed_origins: None,
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            resources: BTreeMap::new(),
            stdio: StdioConfig::default(),
            roles: Vec::new(),
            users: Vec::new(),
            required: true,
            upstream_auth: None,
            identity_headers: None,
            forward_client_ip: None,
        }
    }
}

/// The gateway's settings as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// The public listener.
    pub(crate) listen: SocketAddr,
    /// The base URL clients use (scheme, host, port; no path). It is the OAuth issuer and the
    /// prefix of the MCP resource URL. Defaults to the listen address.
    pub(crate) public_url: Option<String>,
    /// Where the embedded store and generated files live.
    pub(crate) data_dir: PathBuf,
    /// TLS on the public listener. Required unless the listener is loopback or
    /// `behind_tls_proxy` says a TLS-terminating proxy sits in front.
    pub(crate) tls: Option<TlsConfig>,
    pub(crate) behind_tls_proxy: bool,
    /// The route `mcp` at `/mcp`. Absent with `[[routes]]`: no `/mcp` route; absent without
    /// them: the default upstream.
    pub(crate) upstream: Option<UpstreamConfig>,
    /// `[[routes]]`: more MCP servers, each at `/NAME/mcp`.
    pub(crate) routes: Vec<RouteConfig>,
    /// `[[virtual]]`: virtual servers, each one endpoint at `/NAME/mcp` over several routes.
    #[serde(rename = "virtual")]
    pub(crate) virtuals: Vec<super::VirtualConfig>,
    /// Browser origins allowed to call `/mcp`. A request with any other `Origin` gets 403;
    /// requests without `Origin` (non-browser clients) pass.
    pub(crate) allowed_origins: Vec<String>,
    /// Largest request body accepted on `/mcp`, in bytes; larger gets 413.
    pub(crate) max_body_bytes: u64,
    /// OAuth scopes this resource understands.
    pub(crate) scopes: Vec<String>,
    /// Scopes every `/mcp` request must carry (403 `insufficient_scope` otherwise).
    pub(crate) required_scopes: Vec<String>,
    /// Worker threads for the proxy; 0 means one per core.
    pub(crate) threads: usize,
    /// How the proxy's threads share the listener: `per-core` (a service per thread on one
    /// `SO_REUSEPORT` port) or `work-stealing` (one runtime).
    pub(crate) runtime: crate::config::RuntimeModel,
    /// The authorization server's settings (issuer, resource and scopes come from above).
    pub(crate) oauth: pforte_oauth::OAuthConfig,
    /// Shared state for several gateways. Without it, the embedded store under `data_dir`.
    pub(crate) redis_url: Option<String>,
    /// Rate limits per route class.
    pub(crate) limits: crate::limit::Limits,
    /// Proxies whose `X-Forwarded-For` is believed; the client IP is otherwise the socket's.
    pub(crate) trusted_proxies: Vec<crate::forward::TrustedProxy>,
    /// Per-tool authorization: every `POST /mcp` is read, tools need the scopes their
    /// annotations imply (or `[tools.NAME]` says), `tools/list` shows what may be called.
    /// Off only for measuring what it costs.
    pub(crate) tool_policy: bool,
    /// Operator rules per tool: `[tools.NAME] scopes = [...]`, `users = [...]`, `deny = true`.
    pub(crate) tools: BTreeMap<String, crate::policy::ToolRule>,
    /// The same rules per prompt (`prompts/get`): `[prompts.NAME]`.
    pub(crate) prompts: BTreeMap<String, crate::policy::ToolRule>,
    /// The same rules per resource (`resources/read`), by URI or URI template:
    /// `[resources."URI"]`.
    pub(crate) resources: BTreeMap<String, crate::policy::ToolRule>,
    /// Where the audit log goes: a path, `"stdout"` or `"off"`; `<data_dir>/audit.jsonl` by
    /// default.
    pub(crate) audit_log: Option<String>,
    /// An audit file past this many bytes is rotated (`audit.jsonl.1`, …); 0: never (rotate
    /// it with another program and SIGHUP).
    pub(crate) audit_max_bytes: u64,
    /// Rotated audit files kept (`audit.jsonl.1` … `audit.jsonl.N`).
    pub(crate) audit_keep: u32,
    /// Seconds an idle client connection is kept open between requests (HTTP/1.1 keep-alive,
    /// HTTP/2 without open streams).
    pub(crate) keepalive_timeout_secs: u64,
    /// Seconds a stopping gateway (SIGTERM) keeps serving the connections it has — in-flight
    /// requests finish, a kept-alive connection's next request is answered with
    /// `Connection: close` — after its listener closed. 0: stop at once.
    pub(crate) drain_secs: u64,
    /// Open connections one client IP (IPv6: its /64) may hold; more are closed at once.
    /// Trusted proxies are exempt. 0: no cap.
    pub(crate) max_connections_per_ip: u32,
    /// `text` (default) or `json`: one JSON object per log line.
    pub(crate) log_format: crate::logging::LogFormat,
    /// A second listener that serves only `GET /metrics`, for scraping from another host. Off by
    /// default: the public listener answers `/metrics` to loopback peers only.
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// `[telemetry]`: OpenTelemetry traces over OTLP/HTTP (off by default).
    pub(crate) telemetry: super::TelemetryConfig,
    /// `[vault]`: the key ring sealing per-user upstream credentials.
    pub(crate) vault: super::upstream_auth::VaultConfig,
    /// `[pinning]`: what a changed (or new) tool definition gets.
    pub(crate) pinning: crate::pins::Pinning,
    /// `[approvals]`: how long a call held for a person's approval waits.
    pub(crate) approvals: crate::approvals::ApprovalsConfig,
    /// `[[policy]]`: rules over claims and arguments, in file order.
    pub(crate) policy: Vec<crate::rules::RuleConfig>,
    /// The account `command` routes without `user` run as when the gateway runs as root.
    pub(crate) stdio_user: String,
    /// Where those routes' children get their homes (`<stdio_home>/<route>`); default
    /// `<data_dir>-stdio`.
    pub(crate) stdio_home: Option<PathBuf>,
    /// The key ring's text from `PFORTE_VAULT_KEY` (or the file `PFORTE_VAULT_KEY_FILE`
    /// names); over `[vault] key_file`.
    #[serde(skip)]
    pub(crate) vault_key_text: Option<super::upstream_auth::VaultKey>,
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
            virtuals: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            scopes: vec!["mcp:read".to_owned(), "mcp:write".to_owned()],
            required_scopes: vec!["mcp:read".to_owned()],
            threads: 0,
            runtime: crate::config::RuntimeModel::default(),
            oauth: pforte_oauth::OAuthConfig::default(),
            redis_url: None,
            limits: crate::limit::Limits::default(),
            trusted_proxies: Vec::new(),
            tool_policy: true,
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            resources: BTreeMap::new(),
            audit_log: None,
            audit_max_bytes: crate::audit::DEFAULT_MAX_BYTES,
            audit_keep: crate::audit::DEFAULT_KEEP,
            keepalive_timeout_secs: 60,
            drain_secs: 5,
            max_connections_per_ip: 256,
            log_format: crate::logging::LogFormat::Text,
            metrics_listen: None,
            telemetry: super::TelemetryConfig::default(),
            vault: Default::default(),
            stdio_user: "nobody".to_owned(),
            stdio_home: None,
            pinning: crate::pins::Pinning::default(),
            approvals: crate::approvals::ApprovalsConfig::default(),
            policy: Vec::new(),
            vault_key_text: None,
        }
    }
}

impl GatewayConfig {
    /// The settings of a config file (`path` and the `text` the caller read from it), or the
    /// defaults without one, with the overrides `env` gives for `PFORTE_*` names over them.
    pub(crate) fn load(
        file: Option<(&Path, &str)>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = match file {
            Some((path, text)) => Self::parse(text, &path.display().to_string())?,
            None => Self::default(),
        };
        cfg.apply_env(env)?;
        Ok(cfg)
    }

    /// Parses the TOML text of a config file (`path` names it in errors); no env overrides.
    pub(crate) fn parse(text: &str, path: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }

    /// The `PFORTE_*` overrides: each name `env` gives a value for replaces its setting.
    pub(super) fn apply_env(
        &mut self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
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
                let tls = self.tls.get_or_insert_with(TlsConfig::default);
                tls.cert = Some(cert.into());
                tls.key = Some(key.into());
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
        // The ACME variables: set and not empty (compose passes them through empty when the
        // operator leaves them out) turn `[tls.acme]` on or change it.
        if let Some(v) = env("PFORTE_ACME_EMAIL").filter(|v| !v.is_empty()) {
            let tls = self.tls.get_or_insert_with(TlsConfig::default);
            tls.acme.get_or_insert_with(Default::default).email = Some(v);
        }
        if let Some(v) = env("PFORTE_ACME_DIRECTORY").filter(|v| !v.is_empty()) {
            let tls = self.tls.get_or_insert_with(TlsConfig::default);
            tls.acme.get_or_insert_with(Default::default).directory = v;
        }
        if let Some(v) = env("PFORTE_ACME_CA_FILE").filter(|v| !v.is_empty()) {
            let tls = self.tls.get_or_insert_with(TlsConfig::default);
            tls.acme.get_or_insert_with(Default::default).ca_file = Some(v.into());
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
        if let Some(v) = env("PFORTE_OTLP_ENDPOINT") {
            self.telemetry.otlp_endpoint = Some(v);
        }
        if let Some(v) = env("PFORTE_RUNTIME") {
            self.runtime = parse("PFORTE_RUNTIME", v)?;
        }
        if let Some(v) = env("PFORTE_VAULT_KEY").filter(|v| !v.trim().is_empty()) {
            self.vault_key_text = Some(super::upstream_auth::VaultKey::Text(v));
        }
        if let Some(v) = env("PFORTE_LOG_FORMAT") {
            self.log_format = parse("PFORTE_LOG_FORMAT", v)?;
        }
        Ok(())
    }

    /// The route names a token may be limited to: `mcp` when `[upstream]` is a route, and
    /// every `[[routes]]` name (unchecked: for the admin CLI).
    pub(crate) fn route_names(&self) -> Vec<&str> {
        let mut names = Vec::with_capacity(self.routes.len() + 1);
        if self.upstream.is_some() || self.routes.is_empty() {
            names.push(DEFAULT_ROUTE);
        }
        names.extend(self.routes.iter().map(|r| r.name.as_str()));
        names
    }
}
