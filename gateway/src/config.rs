//! The gateway's one typed configuration: a TOML file plus `PFORTE_*` env overrides, validated
//! before anything listens (`pforte check` runs the same validation).

use std::{
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

/// Where requests go after the gateway.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// The MCP service's streamable-HTTP URL, plain http on a private network or loopback.
    pub url: String,
    /// Connecting to the upstream longer than this answers 504.
    pub connect_timeout_ms: u64,
    /// The longest silence tolerated while reading an upstream response. MCP SSE streams carry
    /// keep-alive comments every 15 s, so this never cuts a healthy long stream.
    pub read_timeout_ms: u64,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:8080/mcp".to_owned(),
            connect_timeout_ms: 2_000,
            read_timeout_ms: 300_000,
        }
    }
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
    pub upstream: UpstreamConfig,
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
            upstream: UpstreamConfig::default(),
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
            log_format: crate::logging::LogFormat::Text,
            metrics_listen: None,
        }
    }
}

/// Where the upstream is, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `host:port`, used for connecting and as the `Host` header.
    pub authority: String,
    pub host: String,
    pub port: u16,
    /// Path prefix that replaces the public `/mcp`.
    pub path: String,
    /// `unix:PATH`: connect to this Unix domain socket instead (`authority` is then
    /// `localhost`, sent as `Host`; the path is `/mcp`).
    pub socket: Option<std::path::PathBuf>,
}

impl Upstream {
    /// The `http://` URL of the MCP endpoint, for HTTP clients that connect over `socket`
    /// themselves (the tool catalog).
    pub fn http_url(&self) -> String {
        format!("http://{}{}", self.authority, self.path)
    }
}

/// A validated configuration with everything derived that the request path needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub file: GatewayConfig,
    /// Public base URL without a trailing slash: the issuer.
    pub base_url: String,
    pub upstream: Upstream,
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
    /// The canonical URL of the protected MCP resource.
    pub fn resource(&self) -> String {
        format!("{}{MCP_PATH}", self.base_url)
    }
    /// The RFC 9728 metadata URL named in `WWW-Authenticate`.
    pub fn resource_metadata_url(&self) -> String {
        format!(
            "{}/.well-known/oauth-protected-resource{MCP_PATH}",
            self.base_url
        )
    }
    pub fn tls_enabled(&self) -> bool {
        self.file.tls.is_some()
    }
    pub fn tokens_db(&self) -> PathBuf {
        self.file.data_dir.join("pforte.db")
    }
    pub fn oauth_db(&self) -> PathBuf {
        self.file.data_dir.join("oauth.db")
    }
    /// Whether a browser `Origin` (normalised) may call `/mcp`.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        self.own_origins.iter().any(|o| o == origin)
            || self.allowed_origins.iter().any(|o| o == origin)
    }
    /// The policy the `/mcp` admission applies.
    pub fn policy(&self) -> crate::policy::Policy {
        crate::policy::Policy {
            rules: self.file.tools.clone(),
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
        if let Some(v) = env("PFORTE_UPSTREAM_URL") {
            self.upstream.url = v;
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
        let upstream = parse_upstream(&self.upstream.url)?;
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
        if self.upstream.connect_timeout_ms == 0 {
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
        if self.scopes.is_empty() || self.scopes.iter().any(|s| !is_scope_token(s)) {
            return Err(invalid(
                "scopes",
                "list at least one scope; scopes are printable ASCII without blanks or quotes",
            ));
        }
        Ok(Settings {
            own_origins: own_origins(&base_url),
            base_url,
            upstream,
            allowed_origins,
            file: self,
        })
    }
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

fn parse_upstream(url: &str) -> Result<Upstream, ConfigError> {
    if let Some(path) = url.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(invalid("upstream.url", "unix: needs a socket path"));
        }
        return Ok(Upstream {
            authority: "localhost".to_owned(),
            host: "localhost".to_owned(),
            port: 80,
            path: "/mcp".to_owned(),
            socket: Some(path.into()),
        });
    }
    let uri: Uri = url
        .parse()
        .map_err(|e| invalid("upstream.url", format!("{url:?}: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(invalid(
            "upstream.url",
            format!("{url:?}: the upstream is plain http on a private network"),
        ));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| invalid("upstream.url", format!("{url:?} has no host")))?;
    let port = authority.port_u16().unwrap_or(80);
    let host = authority.host().to_owned();
    let path = match uri.path() {
        "" => "/".to_owned(),
        p => p.trim_end_matches('/').to_owned(),
    };
    Ok(Upstream {
        authority: format!("{host}:{port}"),
        host,
        port,
        path: if path.is_empty() {
            "/".to_owned()
        } else {
            path
        },
        socket: None,
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
        assert_eq!(s.upstream.authority, "127.0.0.1:8080");
        assert_eq!(s.upstream.path, "/mcp");
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
        assert_eq!(
            s.upstream.socket.as_deref(),
            Some(std::path::Path::new("/srv/pforte/run/mcp.sock"))
        );
        assert_eq!(s.upstream.authority, "localhost");
        assert_eq!(s.upstream.http_url(), "http://localhost/mcp");
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
            ("[upstream]\nurl = \"https://svc/mcp\"", "upstream.url"),
            ("max_body_bytes = 10", "max_body_bytes"),
            ("scopes = [\"a b\"]\nrequired_scopes = []", "scopes"),
        ] {
            let err = cfg(text).unwrap_err();
            assert!(err.to_string().starts_with(field), "{text}: {err}");
        }
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
}
