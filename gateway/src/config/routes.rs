//! The route table: `[upstream]` and every `[[routes]]` entry checked and turned into the
//! [`Route`]s the request path serves, each with its public path, resource URLs and upstream.
//! Pure: what a route names on this machine (a program, a directory, a user, a CA file) is
//! looked at by `preflight`.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use http::Uri;

pub(crate) use crate::stdio::account::RunAsName;

use super::{
    ConfigError, GatewayConfig, MCP_PATH, RouteConfig, StdioConfig, UpstreamConfig,
    file::DEFAULT_UPSTREAM_URL, invalid, origins::normalise_origin, route_err,
};

/// The name of the `[upstream]` route.
pub(crate) const DEFAULT_ROUTE: &str = "mcp";

/// What an upstream URL may be, for the error that refuses another.
pub(crate) const ACCEPTED_UPSTREAMS: &str =
    "http://HOST:PORT/PATH, https://HOST:PORT/PATH or unix:PATH";

/// The smallest `max_line_bytes` accepted.
const MIN_MAX_LINE_BYTES: usize = 4096;

/// Where an upstream is, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Upstream {
    /// `host:port`, used for connecting and as the `Host` header.
    pub(crate) authority: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Path prefix that replaces the public `/mcp` (or `/NAME/mcp`).
    pub(crate) path: String,
    /// `https://`: TLS to the upstream, the host as SNI and the name verified.
    pub(crate) tls: bool,
    /// `unix:PATH`: connect to this Unix domain socket instead (`authority` is then
    /// `localhost`, sent as `Host`; the path is `/mcp`).
    pub(crate) socket: Option<PathBuf>,
}

impl Upstream {
    /// The URL of the MCP endpoint, for HTTP clients that connect over `socket` themselves
    /// (the tool catalog).
    pub(crate) fn http_url(&self) -> String {
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

/// The account `command` routes without `user` run as when the gateway runs as root
/// (`stdio_user`), and where their children's homes go (`stdio_home`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StdioAccount {
    pub(crate) user: String,
    /// `<stdio_home>/<route>` is a route's home.
    pub(crate) home: PathBuf,
}

impl StdioAccount {
    /// `stdio_user` as written; `stdio_home` as written, else beside the data dir:
    /// `<data_dir>-stdio` (outside it, since the data dir is its owner's alone and an account
    /// must be able to pass through every directory above its home).
    pub(crate) fn new(user: &str, home: Option<&Path>, data_dir: &Path) -> Result<Self, String> {
        if user.is_empty() {
            return Err("must name an account".to_owned());
        }
        let home = home.map_or_else(
            || {
                let mut name = data_dir
                    .file_name()
                    .map_or_else(|| "pforte".into(), std::ffi::OsStr::to_os_string);
                name.push("-stdio");
                data_dir.with_file_name(name)
            },
            Path::to_owned,
        );
        Ok(Self {
            user: user.to_owned(),
            home,
        })
    }
}

/// How a route reaches its MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpstreamKind {
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
        /// `user` / `group`.
        run_as: Option<RunAsName>,
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
    pub(crate) fn primary(&self) -> &Upstream {
        match self {
            Self::Http(u) | Self::Unix(u) => u,
            Self::Https { upstream, .. } | Self::Stdio { upstream, .. } => upstream,
            Self::Replicas { instances, .. } => &instances[0],
        }
    }

    /// The CA file the upstream's certificate is verified against, if any.
    pub(crate) fn ca_file(&self) -> Option<&Path> {
        match self {
            Self::Https { ca, .. } | Self::Replicas { ca, .. } => ca.as_deref(),
            _ => None,
        }
    }
}

/// One validated route with everything the request path needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) name: String,
    /// Its human title (`title`), for the authorization server's pages.
    pub(crate) title: Option<String>,
    /// Public path: `/NAME/mcp`, or `/mcp` for `[upstream]`.
    pub(crate) path: String,
    /// The canonical resource URL: `<base_url>` + `path`.
    pub(crate) resource: String,
    /// `/.well-known/oauth-protected-resource` + `path`.
    pub(crate) metadata_path: String,
    /// `<base_url>` + `metadata_path`: named in `WWW-Authenticate`.
    pub(crate) metadata_url: String,
    pub(crate) upstream: UpstreamKind,
    pub(crate) connect_timeout_ms: u64,
    pub(crate) read_timeout_ms: u64,
    /// Normalised allowed origins of this route.
    pub(crate) allowed_origins: Vec<String>,
    /// Top-level `[tools.NAME]` with this route's `[routes.tools.NAME]` over them.
    pub(crate) tools: BTreeMap<String, crate::policy::ToolRule>,
    /// Top-level `[prompts.NAME]` with this route's over them.
    pub(crate) prompts: BTreeMap<String, crate::policy::ToolRule>,
    /// Top-level `[resources."URI"]` with this route's over them.
    pub(crate) resources: BTreeMap<String, crate::policy::ToolRule>,
    /// OAuth users must hold one of these roles or be listed in `users` (both empty: anyone);
    /// checked by the authorization server at consent and on every token (`pforte-oauth`).
    pub(crate) roles: Vec<String>,
    pub(crate) users: Vec<String>,
    /// `required` (default `true`): while this route's upstream is down the gateway is not
    /// ready; `false` names it on `/readyz` but answers 200.
    pub(crate) required: bool,
    /// `[routes.upstream_auth]`: the upstream's own credential (per user, or shared).
    pub(crate) upstream_auth: Option<super::upstream_auth::UpstreamAuth>,
    /// What the upstream learns of the caller: the `x-pforte-*` identity headers, and the
    /// client's IP in `X-Forwarded-For` ([`third_party_default`]).
    pub(crate) identity_headers: bool,
    pub(crate) forward_client_ip: bool,
}

impl Route {
    /// Whether this is the `[upstream]` route (served at `/mcp`), not a `[[routes]]` entry:
    /// its errors name `upstream.FIELD`.
    pub(crate) fn is_upstream_table(&self) -> bool {
        self.path == MCP_PATH
    }
}

/// The route table: `[upstream]` as `mcp` at `/mcp` (or the default upstream when there are
/// no `[[routes]]`), then every `[[routes]]` entry at `/NAME/mcp`.
pub(super) fn table(
    cfg: &GatewayConfig,
    base_url: &str,
    allowed_origins: &[String],
) -> Result<Vec<Route>, ConfigError> {
    let defaults = UpstreamConfig::default();
    let upstream = match (&cfg.upstream, cfg.routes.is_empty()) {
        (Some(u), _) => Some(u),
        (None, true) => Some(&defaults),
        (None, false) => None,
    };
    let mut routes = Vec::with_capacity(cfg.routes.len() + 1);
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
        if u.ca_file.is_some() {
            check_ca_upstream(&kind).map_err(|reason| invalid("upstream.ca_file", reason))?;
        }
        let title = checked_title(&u.title).map_err(|reason| invalid("upstream.title", reason))?;
        routes.push(Route {
            name: DEFAULT_ROUTE.to_owned(),
            title,
            path: MCP_PATH.to_owned(),
            resource: format!("{base_url}{MCP_PATH}"),
            metadata_path: format!("/.well-known/oauth-protected-resource{MCP_PATH}"),
            metadata_url: format!("{base_url}/.well-known/oauth-protected-resource{MCP_PATH}"),
            upstream: kind,
            connect_timeout_ms: u.connect_timeout_ms,
            read_timeout_ms: u.read_timeout_ms,
            allowed_origins: allowed_origins.to_vec(),
            tools: cfg.tools.clone(),
            prompts: cfg.prompts.clone(),
            resources: cfg.resources.clone(),
            roles: u.roles.clone(),
            users: u.users.clone(),
            required: u.required,
            upstream_auth: None,
            identity_headers: third_party_default(u.identity_headers, false),
            forward_client_ip: third_party_default(u.forward_client_ip, false),
        });
    }
    let timeouts = upstream.unwrap_or(&defaults);
    for r in &cfg.routes {
        let route = route(cfg, r, base_url, allowed_origins, timeouts)?;
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
    cfg: &GatewayConfig,
    r: &RouteConfig,
    base_url: &str,
    allowed_origins: &[String],
    timeouts: &UpstreamConfig,
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
        (None, None, Some(command)) => stdio_kind(cfg, r, command).map_err(|(f, e)| err(f, e))?,
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
    if r.ca_file.is_some() {
        check_ca_upstream(&upstream).map_err(|e| err("ca_file", e))?;
    }
    if let Some(name) = r
        .env
        .keys()
        .find(|k| k.starts_with(super::upstream_auth::RESERVED_ENV_PREFIX))
    {
        return Err(err(
            "env",
            format!(
                "{name:?}: PFORTE_* variables carry the caller's identity; choose another name"
            ),
        ));
    }
    let upstream_auth = r
        .upstream_auth
        .as_ref()
        .map(|a| super::upstream_auth::validate(a, r.command.is_some()))
        .transpose()
        .map_err(|(f, e)| err(f, e))?;
    if let Some(super::upstream_auth::UpstreamAuth::Env { variables, .. }) = &upstream_auth
        && let Some(v) = variables.iter().find(|v| r.env.contains_key(*v))
    {
        return Err(err(
            "upstream_auth",
            format!("{v:?} is in the route's env too; each user's value would be ambiguous"),
        ));
    }
    if r.command.is_some() {
        // The bridge is the gateway's own: it needs the caller to count and to start each
        // person's child, and tells the child itself (`PFORTE_*`, `_meta`).
        for (field, set) in [
            ("identity_headers", r.identity_headers),
            ("forward_client_ip", r.forward_client_ip),
        ] {
            if set.is_some() {
                return Err(err(field, "is for url and urls routes; a command route's program learns its caller from the bridge".to_owned()));
            }
        }
    }
    let third_party = upstream_auth.is_some();
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
    for (table, rules) in [
        ("tools", &r.tools),
        ("prompts", &r.prompts),
        ("resources", &r.resources),
    ] {
        if let Some((name, s)) = crate::config::unknown_scope(rules, &cfg.scopes) {
            return Err(err(
                table,
                format!("[routes.{table}.{name}] scope {s:?} is not one of the configured scopes"),
            ));
        }
    }
    let merged = |top: &BTreeMap<String, crate::policy::ToolRule>,
                  own: &BTreeMap<String, crate::policy::ToolRule>| {
        let mut all = top.clone();
        all.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        all
    };
    let tools = merged(&cfg.tools, &r.tools);
    let prompts = merged(&cfg.prompts, &r.prompts);
    let resources = merged(&cfg.resources, &r.resources);
    let path = format!("/{}{MCP_PATH}", r.name);
    let title = checked_title(&r.title).map_err(|reason| err("title", reason))?;
    Ok(Route {
        name: r.name.clone(),
        title,
        resource: format!("{base_url}{path}"),
        metadata_path: format!("/.well-known/oauth-protected-resource{path}"),
        metadata_url: format!("{base_url}/.well-known/oauth-protected-resource{path}"),
        path,
        upstream,
        connect_timeout_ms,
        read_timeout_ms: r.read_timeout_ms.unwrap_or(timeouts.read_timeout_ms),
        allowed_origins: origins,
        tools,
        prompts,
        resources,
        roles: r.roles.clone(),
        users: r.users.clone(),
        required: r.required,
        upstream_auth,
        identity_headers: r.command.is_some()
            || third_party_default(r.identity_headers, third_party),
        forward_client_ip: r.command.is_some()
            || third_party_default(r.forward_client_ip, third_party),
    })
}

/// Whether a route's upstream learns the caller (`identity_headers`) or the client's IP
/// (`forward_client_ip`): as written, else not for a third party's server (a route with
/// `upstream_auth`) and yes for any other.
pub(crate) fn third_party_default(written: Option<bool>, third_party: bool) -> bool {
    written.unwrap_or(!third_party)
}

/// A `command` route's upstream: its bridge socket under `data_dir` and the child's bounds.
/// An error names the field.
fn stdio_kind(
    cfg: &GatewayConfig,
    r: &RouteConfig,
    command: &[String],
) -> Result<UpstreamKind, (&'static str, String)> {
    if command.is_empty() {
        return Err(("command", "give the program and its arguments".to_owned()));
    }
    if r.stdio.max_children == 0
        || r.stdio.max_children_per_principal == 0
        || r.stdio.idle_timeout_secs == 0
    {
        return Err((
            "stdio",
            "max_children, max_children_per_principal and idle_timeout_secs must be above 0"
                .to_owned(),
        ));
    }
    if r.stdio.max_line_bytes < MIN_MAX_LINE_BYTES {
        return Err((
            "stdio",
            format!("max_line_bytes must be at least {MIN_MAX_LINE_BYTES}"),
        ));
    }
    let run_as = match (&r.user, &r.group) {
        (Some(user), group) => Some(RunAsName {
            user: user.clone(),
            group: group.clone(),
        }),
        (None, Some(_)) => {
            return Err(("group", "group is for a route with user".to_owned()));
        }
        (None, None) => None,
    };
    Ok(UpstreamKind::Stdio {
        upstream: Upstream::unix(stdio_socket(&cfg.data_dir, &r.name)),
        command: command.to_vec(),
        env: r.env.clone(),
        cwd: r.cwd.clone(),
        limits: r.stdio,
        run_as,
    })
}

/// `[a-z0-9-]+`, 1 to 63 characters.
/// A route's `title`: 1 to 100 characters without control characters.
pub(super) fn checked_title(title: &Option<String>) -> Result<Option<String>, String> {
    match title {
        Some(t)
            if t.trim().is_empty()
                || t.chars().count() > 100
                || t.chars().any(char::is_control) =>
        {
            Err("must be 1 to 100 characters without control characters".into())
        }
        t => Ok(t.clone()),
    }
}

pub(crate) fn valid_route_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Where the bridge of the `command` route `name` listens: `<data_dir>/run/stdio/NAME.sock`.
pub(crate) fn stdio_socket(data_dir: &Path, name: &str) -> PathBuf {
    data_dir
        .join("run")
        .join("stdio")
        .join(format!("{name}.sock"))
}

/// A `ca_file` is only for https upstreams (its content is `preflight`'s to read).
fn check_ca_upstream(kind: &UpstreamKind) -> Result<(), String> {
    let https = match kind {
        UpstreamKind::Https { .. } => true,
        UpstreamKind::Replicas { instances, .. } => instances.iter().all(|u| u.tls),
        _ => false,
    };
    if https {
        Ok(())
    } else {
        Err("a CA file is only for https:// upstreams".to_owned())
    }
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
