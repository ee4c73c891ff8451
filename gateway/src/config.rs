//! The gateway's one typed configuration: a TOML file plus `PFORTE_*` env overrides
//! ([`GatewayConfig`], in `file`), validated into [`Settings`] before anything listens
//! (`pforte check` runs the same validation). Parsing and validation are pure: the caller reads
//! the file and the environment, and what the settings name on this machine (TLS and CA files,
//! programs, directories, users) is `preflight`'s to look at.

mod file;
mod origins;
mod routes;
mod telemetry;
#[cfg(test)]
mod tests;
mod tls;
mod upstream_auth;
mod virtual_servers;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

pub use file::{DEFAULT_MAX_LINE_BYTES, GatewayConfig};
pub(crate) use file::{RouteConfig, StdioConfig, UpstreamConfig};
pub(crate) use origins::{normalise_origin, url_host};
pub(crate) use routes::{
    DEFAULT_ROUTE, Route, StdioAccount, Upstream, UpstreamKind, valid_route_name,
};
pub(crate) use telemetry::{Telemetry, TelemetryConfig};
pub(crate) use tls::{Acme, AcmeChallenge, Tls, TlsConfig, TlsFiles};
pub(crate) use upstream_auth::{HeaderInto, Injection, Registration, UpstreamAuth, VaultKey};
pub(crate) use virtual_servers::{Virtual, VirtualConfig};

use crate::{
    audit::{AuditSink, Rotation},
    forward::TrustedProxy,
    limit::Limits,
    logging::LogFormat,
    policy::ToolRule,
};

/// The public path of the MCP endpoint on the gateway.
pub(crate) const MCP_PATH: &str = "/mcp";

/// Why a configuration was refused. Every variant names what to fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
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
    #[error("[[virtual]] {name:?}: {field}: {reason}")]
    Virtual {
        name: String,
        field: &'static str,
        reason: String,
    },
    #[error("limits.tools.{tool}: {reason}")]
    ToolLimit { tool: String, reason: String },
    #[error("{0}")]
    Policy(#[from] crate::rules::RuleError),
}

/// The error of a top-level `field`.
pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// The error of `field` in the `[[routes]]` entry `route`.
pub(crate) fn route_err(route: &str, field: &'static str, reason: String) -> ConfigError {
    ConfigError::Route {
        route: route.to_owned(),
        field,
        reason,
    }
}

/// A validated configuration in typed parts, with everything derived that the request path
/// needs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Public base URL without a trailing slash: the issuer.
    pub(crate) base_url: String,
    /// The public listener and the connections it keeps.
    pub(crate) listen: Listen,
    /// What a request is held to before it reaches a route.
    pub(crate) admission: Admission,
    /// Rate limits per route class and tool, and the per-principal bounds.
    pub(crate) limits: Limits,
    /// Every route, `[upstream]` (`mcp`) first when there is one. Never empty.
    pub(crate) routes: Vec<Route>,
    /// Normalised allowed origins (`scheme://host[:port]`, lower-case, default ports removed).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "each route holds its merged origins")
    )]
    pub(crate) allowed_origins: Vec<String>,
    /// The gateway's own origins: the public URL's, and for a loopback public URL the same port
    /// under every loopback name (a page can only send those from this machine).
    pub(crate) own_origins: Vec<String>,
    /// The OAuth scopes this resource understands: RFC 9728 `scopes_supported`, the
    /// authorization server's, and a first static token's.
    pub(crate) scopes: Vec<String>,
    /// The `[oauth]` table as written; `oauth::oauth_config` completes it with the issuer, the
    /// resources and the scopes.
    pub(crate) oauth: pforte_oauth::OAuthConfig,
    /// Where the embedded store, the pid file, the stdio bridges' sockets and the default audit
    /// file live.
    pub(crate) data_dir: PathBuf,
    /// Where the stores live: redis when `redis_url` is set, else `data_dir`.
    pub(crate) store: Site,
    /// Where audit lines go and how a file of them rotates.
    pub(crate) audit: Audit,
    /// Worker threads for the proxy; 0 means one per core.
    pub(crate) threads: usize,
    pub(crate) runtime: RuntimeModel,
    pub(crate) log_format: LogFormat,
    /// `[telemetry]`: where traces go; `None`: off.
    pub(crate) telemetry: Option<Telemetry>,
    /// The key ring that seals per-user upstream credentials; `None`: no route needs one.
    pub(crate) vault_key: Option<VaultKey>,
    /// `stdio_user` and `stdio_home`: whom `command` routes run as under a root gateway.
    pub(crate) stdio_account: StdioAccount,
    /// `[pinning]`: changed tool definitions held, logged or not recorded.
    pub(crate) pinning: crate::pins::Pinning,
    /// `[[virtual]]`: virtual servers over the routes, each at `/NAME/mcp`.
    pub(crate) virtuals: Vec<Virtual>,
    /// `[approvals]`: how long a held call waits for a person's approval.
    pub(crate) approvals: crate::approvals::ApprovalsConfig,
    /// `[[policy]]`: the rules over claims and arguments, compiled.
    pub(crate) rules: crate::rules::Rules,
}

/// How the proxy's `threads` serve the public listener (docs/performance.md, "The runtime").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RuntimeModel {
    /// One single-threaded proxy service per thread on the same port (`SO_REUSEPORT`), each
    /// with its own upstream keep-alive pool: a connection stays on the thread that accepted
    /// it, as with nginx's workers.
    #[default]
    PerCore,
    /// One multi-threaded runtime with work stealing and one upstream keep-alive pool.
    WorkStealing,
}

impl std::str::FromStr for RuntimeModel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "work-stealing" => Ok(Self::WorkStealing),
            "per-core" => Ok(Self::PerCore),
            _ => Err(format!("{s:?} is not \"work-stealing\" or \"per-core\"")),
        }
    }
}

/// The public listener (`listen`, `[tls]`, `behind_tls_proxy`), the connections it keeps, and
/// the metrics listener.
#[derive(Debug, Clone)]
pub(crate) struct Listen {
    pub(crate) addr: SocketAddr,
    /// TLS on this listener.
    pub(crate) tls: Option<Tls>,
    /// A TLS-terminating proxy sits in front: clients speak https to it.
    pub(crate) behind_tls_proxy: bool,
    /// Seconds an idle client connection is kept open between requests.
    pub(crate) keepalive_timeout_secs: u64,
    /// Seconds a stopping gateway keeps serving the connections it has (pingora's grace period).
    pub(crate) drain_secs: u64,
    /// Open connections one client IP (IPv6: its /64) may hold; 0: no cap.
    pub(crate) max_connections_per_ip: u32,
    /// A second listener that serves only `GET /metrics`.
    pub(crate) metrics_listen: Option<SocketAddr>,
}

impl Listen {
    /// Whether clients reach the gateway over https: TLS here, or a TLS proxy in front.
    pub(crate) fn serves_https(&self) -> bool {
        self.tls.is_some() || self.behind_tls_proxy
    }
}

/// What every request on a route is held to: the scopes it must carry, how its client address
/// is believed, its size, and the tool rules.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    /// Scopes every `/mcp` request must carry (403 `insufficient_scope` otherwise).
    pub(crate) required_scopes: Vec<String>,
    /// Proxies whose `X-Forwarded-For` is believed (and that the per-IP connection cap spares).
    pub(crate) trusted_proxies: Vec<TrustedProxy>,
    /// Largest request body accepted, in bytes; larger gets 413.
    pub(crate) max_body_bytes: u64,
    /// Per-tool authorization on (every `POST /mcp` is read).
    pub(crate) tool_policy: bool,
    /// The top-level `[tools.NAME]` rules.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "each route holds its merged rules")
    )]
    pub(crate) tools: std::collections::BTreeMap<String, ToolRule>,
}

/// The audit log: where its lines go, and when a file of them is rotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Audit {
    pub(crate) sink: AuditSink,
    pub(crate) rotation: Rotation,
}

impl Settings {
    /// The OAuth issuer identifier: byte-identical wherever it appears.
    pub(crate) fn issuer(&self) -> &str {
        &self.base_url
    }
    /// The canonical URL of the default protected resource (`<base_url>/mcp`): the OAuth
    /// server's default `resource`.
    pub(crate) fn resource(&self) -> String {
        format!("{}{MCP_PATH}", self.base_url)
    }
    /// The RFC 9728 metadata URL named in `WWW-Authenticate` outside any route: the default
    /// route's (`mcp`, else the first).
    pub(crate) fn resource_metadata_url(&self) -> String {
        match self.default_route() {
            Some(i) => self.routes[i].metadata_url.clone(),
            None => format!(
                "{}/.well-known/oauth-protected-resource{MCP_PATH}",
                self.base_url
            ),
        }
    }
    /// The route serving `path` exactly (`/mcp` or `/NAME/mcp`).
    pub(crate) fn route_for_path(&self, path: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.path == path)
    }
    /// The route whose RFC 9728 document is at `path`; the bare well-known path names the
    /// default route.
    pub(crate) fn route_for_metadata(&self, path: &str) -> Option<usize> {
        if path == "/.well-known/oauth-protected-resource" {
            return self.default_route();
        }
        self.routes.iter().position(|r| r.metadata_path == path)
    }
    /// The virtual server served at `path` (`/NAME/mcp`).
    pub(crate) fn virtual_for_path(&self, path: &str) -> Option<usize> {
        self.virtuals.iter().position(|v| v.path == path)
    }

    /// The virtual server whose RFC 9728 document is at `path`.
    pub(crate) fn virtual_for_metadata(&self, path: &str) -> Option<usize> {
        self.virtuals.iter().position(|v| v.metadata_path == path)
    }
    /// The route named `name`.
    pub(crate) fn route_named(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
    /// The `mcp` route when there is one, else the only route.
    pub(crate) fn default_route(&self) -> Option<usize> {
        self.route_named(DEFAULT_ROUTE)
            .or_else(|| (self.routes.len() == 1).then_some(0))
    }
    pub(crate) fn tls_enabled(&self) -> bool {
        self.listen.tls.is_some()
    }
    #[cfg(test)]
    /// Whether a browser `Origin` (normalised) may call `/mcp`.
    pub(crate) fn origin_allowed(&self, origin: &str) -> bool {
        self.own_origins.iter().any(|o| o == origin)
            || self.allowed_origins.iter().any(|o| o == origin)
    }
    #[cfg(test)]
    /// The policy the `/mcp` admission applies (the top-level `[tools.NAME]` rules).
    pub(crate) fn policy(&self) -> crate::policy::Policy {
        crate::policy::Policy {
            rules: self.admission.tools.clone(),
            prompts: std::collections::BTreeMap::new(),
            resources: std::collections::BTreeMap::new(),
            baseline: self.admission.required_scopes.clone(),
        }
    }
    /// The policy of route `i`: its merged tool rules.
    pub(crate) fn route_policy(&self, i: usize) -> crate::policy::Policy {
        crate::policy::Policy {
            rules: self.routes[i].tools.clone(),
            prompts: self.routes[i].prompts.clone(),
            resources: self.routes[i].resources.clone(),
            baseline: self.admission.required_scopes.clone(),
        }
    }
}

impl GatewayConfig {
    /// Checks every rule and derives the request-path settings. Pure: what the settings name
    /// on this machine is checked by `preflight::check`, which `check`, `serve` and `up` run
    /// after this.
    pub(crate) fn validate(self) -> Result<Settings, ConfigError> {
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
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let base_url = match &self.public_url {
            Some(url) => origins::normalise_base_url(url, self.behind_tls_proxy)?,
            None => format!("{scheme}://{}", self.listen),
        };
        let tls = self
            .tls
            .as_ref()
            .map(|t| t.validate(origins::url_host(&base_url).as_deref()))
            .transpose()?;
        if let Some(url) = &self.redis_url
            && let Err(e) = pforte_redis::validate(url)
        {
            return Err(invalid("redis_url", e.to_string()));
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
        check_limits(&self.limits)?;
        if let Some(reason) = self.approvals.problem() {
            return Err(invalid("approvals.ttl_secs", reason));
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
        self.check_scopes()?;
        let audit = self.audit()?;
        if !(1..=3600).contains(&self.keepalive_timeout_secs) {
            return Err(invalid("keepalive_timeout_secs", "1 to 3600 seconds"));
        }
        if self.drain_secs > 300 {
            return Err(invalid("drain_secs", "0 to 300 seconds"));
        }
        if self.scopes.is_empty() || self.scopes.iter().any(|s| !is_scope_token(s)) {
            return Err(invalid(
                "scopes",
                "list at least one scope; scopes are printable ASCII without blanks or quotes",
            ));
        }
        let routes = routes::table(&self, &base_url, &allowed_origins)?;
        let virtuals = virtual_servers::table(&self.virtuals, &routes, &base_url)?;
        check_tool_limits(&self.limits)?;
        let telemetry = self.telemetry.validate()?;
        let vault_key = self.vault_key(&routes)?;
        let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
        let rules = crate::rules::Rules::compile(&self.policy, &names)?;
        let stdio_account =
            StdioAccount::new(&self.stdio_user, self.stdio_home.as_deref(), &self.data_dir)
                .map_err(|e| invalid("stdio_user", e))?;
        Ok(Settings {
            own_origins: origins::own_origins(&base_url),
            base_url,
            listen: Listen {
                addr: self.listen,
                tls,
                behind_tls_proxy: self.behind_tls_proxy,
                keepalive_timeout_secs: self.keepalive_timeout_secs,
                drain_secs: self.drain_secs,
                max_connections_per_ip: self.max_connections_per_ip,
                metrics_listen: self.metrics_listen,
            },
            admission: Admission {
                required_scopes: self.required_scopes.clone(),
                trusted_proxies: self.trusted_proxies.clone(),
                max_body_bytes: self.max_body_bytes,
                tool_policy: self.tool_policy,
                tools: self.tools.clone(),
            },
            limits: self.limits.clone(),
            routes,
            allowed_origins,
            scopes: self.scopes.clone(),
            oauth: self.oauth.clone(),
            data_dir: self.data_dir.clone(),
            store: Site::new(self.redis_url.as_deref(), &self.data_dir),
            audit,
            threads: self.threads,
            runtime: self.runtime,
            log_format: self.log_format,
            telemetry,
            vault_key,
            stdio_account,
            pinning: self.pinning,
            virtuals,
            approvals: self.approvals,
            rules,
        })
    }

    /// The vault's key ring: `PFORTE_VAULT_KEY` over `[vault] key_file`; required when a route
    /// keeps a credential per user.
    fn vault_key(&self, routes: &[Route]) -> Result<Option<VaultKey>, ConfigError> {
        let key = self
            .vault_key_text
            .clone()
            .or_else(|| self.vault.key_file.clone().map(VaultKey::File));
        let needs = routes
            .iter()
            .find(|r| r.upstream_auth.as_ref().is_some_and(UpstreamAuth::per_user));
        match (needs, &key) {
            (Some(r), None) => Err(route_err(
                &r.name,
                "upstream_auth",
                "a per-user credential is sealed in the vault: set [vault] key_file (or \
                 PFORTE_VAULT_KEY); `pforte vault keygen` writes a key"
                    .into(),
            )),
            _ => Ok(key),
        }
    }

    /// `required_scopes` and the scopes of `[tools.NAME]` are configured scopes.
    fn check_scopes(&self) -> Result<(), ConfigError> {
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
        for (table, rules) in [
            ("tools", &self.tools),
            ("prompts", &self.prompts),
            ("resources", &self.resources),
        ] {
            if let Some((name, s)) = unknown_scope(rules, &self.scopes) {
                return Err(invalid(
                    table,
                    format!("[{table}.{name}] scope {s:?} is not one of the configured scopes"),
                ));
            }
        }
        Ok(())
    }

    /// Where the audit log goes (`<data_dir>/audit.jsonl` by default) and its rotation.
    pub(crate) fn audit(&self) -> Result<Audit, ConfigError> {
        let sink = match self.audit_log.as_deref() {
            None => AuditSink::File(self.data_dir.join("audit.jsonl")),
            Some(text) => text
                .parse()
                .map_err(|_| invalid("audit_log", "give a file path, \"stdout\" or \"off\""))?,
        };
        if self.audit_max_bytes > 0 && !(1..=1000).contains(&self.audit_keep) {
            return Err(invalid("audit_keep", "keep 1 to 1000 rotated files"));
        }
        if self.audit_max_bytes > 0 && self.audit_max_bytes < 4096 {
            return Err(invalid(
                "audit_max_bytes",
                "at least 4096 bytes (a few lines), or 0 for no rotation",
            ));
        }
        Ok(Audit {
            sink,
            rotation: Rotation {
                max_bytes: self.audit_max_bytes,
                keep: self.audit_keep,
            },
        })
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

/// The route-class policies allow something, and the per-principal bounds are above 0.
fn check_limits(limits: &Limits) -> Result<(), ConfigError> {
    for (name, policy) in [
        ("limits.mcp", limits.mcp),
        ("limits.unauthenticated", limits.unauthenticated),
        ("limits.oauth", limits.oauth),
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
            limits.sessions_per_principal,
        ),
        ("limits.streams_per_principal", limits.streams_per_principal),
    ] {
        if max == 0 {
            return Err(invalid(name, "must be above 0"));
        }
    }
    Ok(())
}

/// The first rule (its name) whose `scopes` name a scope not configured, and that scope.
pub(crate) fn unknown_scope<'a>(
    rules: &'a std::collections::BTreeMap<String, ToolRule>,
    scopes: &[String],
) -> Option<(&'a str, &'a str)> {
    rules.iter().find_map(|(name, rule)| {
        rule.scopes
            .iter()
            .flatten()
            .find(|s| !scopes.contains(s))
            .map(|s| (name.as_str(), s.as_str()))
    })
}

/// Tool budgets (`[limits.tools.NAME]`): a tool name as MCP spells them and a policy that
/// allows something.
fn check_tool_limits(limits: &Limits) -> Result<(), ConfigError> {
    for (tool, policy) in &limits.tools {
        let err = |reason: &str| ConfigError::ToolLimit {
            tool: tool.clone(),
            reason: reason.to_owned(),
        };
        let name_ok = (1..=128).contains(&tool.len())
            && tool
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !name_ok {
            return Err(err(
                "a tool name is 1 to 128 characters of A-Z, a-z, 0-9, '_', '-', '.'",
            ));
        }
        if !policy.is_valid() {
            return Err(err("rate, period_secs and burst must all be above 0"));
        }
    }
    Ok(())
}

fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// Where the stores live (`stores::Stores::open` opens them there).
#[derive(Debug, Clone)]
pub(crate) enum Site {
    /// SQLite files in this data dir.
    Embedded(PathBuf),
    /// One redis for every gateway.
    Redis(String),
}

impl Site {
    /// The site a configuration names: redis when `redis_url` is set, else the data dir.
    pub(crate) fn new(redis_url: Option<&str>, data_dir: &Path) -> Self {
        match redis_url {
            Some(url) => Self::Redis(url.to_owned()),
            None => Self::Embedded(data_dir.to_path_buf()),
        }
    }
}
