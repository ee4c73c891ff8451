//! A gateway's configuration file as typed values, written to TOML by [`GatewayConfig::to_toml`]:
//! what a test sets is checked by the compiler, and the file's layout (keys before tables, the
//! nested tables of `[limits]`, `[oauth]`, `[[routes]]`) is the serializer's business. Only the
//! keys the tests use are here; a field left `None` or empty is not written (the gateway's
//! default applies).

use std::{collections::BTreeMap, path::PathBuf};

use serde::Serialize;

/// The whole file. [`crate::Stack`] fills `listen`, `data_dir` and `tls` when it starts the
/// gateway.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayConfig {
    pub listen: String,
    pub data_dir: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: u64,
    pub threads: usize,
    /// `runtime` (`per-core` or `work-stealing`); the gateway's default when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_timeout_secs: Option<u64>,
    /// The drain on SIGTERM: 0 here unless a test sets it (every test gateway stops at once).
    pub drain_secs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_ip: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    pub upstream: Upstream,
    #[serde(skip_serializing_if = "Limits::is_unset")]
    pub limits: Limits,
    #[serde(skip_serializing_if = "OAuth::is_unset")]
    pub oauth: OAuth,
    /// `[tools.NAME]`: per-tool rules.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolRule>,
    /// `[prompts.NAME]`: per-prompt rules.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prompts: BTreeMap<String, ToolRule>,
    /// `[resources."URI"]`: per-resource rules (a URI or a URI template).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, ToolRule>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Telemetry>,
    /// `[vault]`: the key ring that seals per-user upstream credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vault: Option<Vault>,
    /// The account of command routes without `user` under a root gateway (`nobody` if `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdio_user: Option<String>,
    /// `[pinning]`: what changed tool definitions get (the gateway's default, hold, if `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinning: Option<Pinning>,
    /// `[[policy]]`: rules over claims and arguments, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy: Vec<PolicyRule>,
    /// `[approvals]`: how long held calls wait (the gateway's default, 15 min, if `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Approvals>,
}

/// `[approvals]`.
#[derive(Debug, Clone, Serialize)]
pub struct Approvals {
    pub ttl_secs: u64,
}

/// One `[[policy]]` rule.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyRule {
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
    pub when: String,
    /// `deny`, `approve` or `allow`.
    pub effect: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl PolicyRule {
    /// A rule without routes or message.
    pub fn new(name: &str, when: &str, effect: &str) -> Self {
        Self {
            name: name.to_owned(),
            when: when.to_owned(),
            effect: effect.to_owned(),
            ..Self::default()
        }
    }

    /// Its `message`.
    pub fn message(mut self, message: &str) -> Self {
        self.message = Some(message.to_owned());
        self
    }
}

/// `[pinning]`.
#[derive(Debug, Clone, Serialize)]
pub struct Pinning {
    /// `hold`, `log` or `off`.
    pub mode: String,
    /// `allow` or `hold`.
    pub new_tools: String,
}

/// `[vault]`.
#[derive(Debug, Clone, Serialize)]
pub struct Vault {
    /// A file of `KEYID:BASE64URL` lines (see `crate::connect::write_vault_key`).
    pub key_file: PathBuf,
}

/// `[telemetry]`.
#[derive(Debug, Clone, Serialize)]
pub struct Telemetry {
    pub otlp_endpoint: String,
    pub export_interval_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
}

impl GatewayConfig {
    /// What the tests start from: `upstream` with a 5-minute read timeout and a 1 s connect
    /// timeout, 1 MiB bodies, two threads, `https://claude.ai` as the one allowed origin.
    pub fn new(upstream: &str) -> Self {
        Self {
            listen: "127.0.0.1:0".to_owned(),
            data_dir: PathBuf::new(),
            public_url: None,
            allowed_origins: vec!["https://claude.ai".to_owned()],
            max_body_bytes: 1024 * 1024,
            threads: 2,
            runtime: None,
            redis_url: None,
            trusted_proxies: Vec::new(),
            metrics_listen: None,
            keepalive_timeout_secs: None,
            drain_secs: 0,
            max_connections_per_ip: None,
            tls: None,
            upstream: Upstream {
                url: upstream.to_owned(),
                read_timeout_ms: 300_000,
                connect_timeout_ms: 1000,
            },
            limits: Limits::default(),
            oauth: OAuth::default(),
            tools: BTreeMap::new(),
            prompts: BTreeMap::new(),
            resources: BTreeMap::new(),
            routes: Vec::new(),
            telemetry: None,
            vault: None,
            stdio_user: None,
            pinning: None,
            approvals: None,
            policy: Vec::new(),
        }
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a gateway config serializes")
    }
}

/// `[tls]`.
#[derive(Debug, Clone, Serialize)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `[upstream]`.
#[derive(Debug, Clone, Serialize)]
pub struct Upstream {
    pub url: String,
    pub read_timeout_ms: u64,
    pub connect_timeout_ms: u64,
}

/// One GCRA budget (`[limits.mcp]`, `[limits.tools.NAME]`, …): `rate` per `period_secs`, with
/// `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Budget {
    pub rate: u64,
    pub period_secs: u64,
    pub burst: u64,
}

impl Budget {
    /// `rate` per `period_secs`, `burst` at once.
    pub fn new(rate: u64, period_secs: u64, burst: u64) -> Self {
        Self {
            rate,
            period_secs,
            burst,
        }
    }
}

/// `[limits]` and its budgets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions_per_principal: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streams_per_principal: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Budget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth: Option<Budget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unauthenticated: Option<Budget>,
    /// `[limits.tools.NAME]`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, Budget>,
}

impl Limits {
    /// `[limits] enabled = false`: no budget refuses anything.
    pub fn off() -> Self {
        Self {
            enabled: Some(false),
            ..Self::default()
        }
    }

    /// `[limits.mcp]`: per principal on `/mcp`.
    pub fn mcp(mut self, budget: Budget) -> Self {
        self.mcp = Some(budget);
        self
    }

    /// `[limits.oauth]`: per client IP on the authorization server's endpoints.
    pub fn oauth(mut self, budget: Budget) -> Self {
        self.oauth = Some(budget);
        self
    }

    /// `[limits.unauthenticated]`: failed authentications per client IP.
    pub fn unauthenticated(mut self, budget: Budget) -> Self {
        self.unauthenticated = Some(budget);
        self
    }

    /// `[limits.tools.TOOL]`: `tool`'s own budget.
    pub fn tool(mut self, tool: &str, budget: Budget) -> Self {
        self.tools.insert(tool.to_owned(), budget);
        self
    }

    /// `sessions_per_principal`.
    pub fn sessions_per_principal(mut self, n: u32) -> Self {
        self.sessions_per_principal = Some(n);
        self
    }

    /// `streams_per_principal`.
    pub fn streams_per_principal(mut self, n: u32) -> Self {
        self.streams_per_principal = Some(n);
        self
    }

    fn is_unset(&self) -> bool {
        *self == Self::default()
    }
}

/// One throttle of the authorization server (`[oauth.throttle.NAME]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Throttle {
    pub burst: u32,
    pub per_minute: u32,
}

impl Throttle {
    /// `burst` at once, then `per_minute`.
    pub fn new(burst: u32, per_minute: u32) -> Self {
        Self { burst, per_minute }
    }
}

/// `[oauth.throttle]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Throttles {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub register_per_ip: Option<Throttle>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login_per_ip: Option<Throttle>,
}

/// `[oauth]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OAuth {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_ttl_secs: Option<u64>,
    /// `refresh_grace_secs`: how long a rotated refresh token still answers with its successor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_grace_secs: Option<u64>,
    /// `roles_recheck_secs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles_recheck_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(skip_serializing_if = "Throttles::is_unset")]
    pub throttle: Throttles,
    /// `[oauth.login]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login: Option<Login>,
    /// `[oauth.roles.NAME]`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, Role>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub enterprise: Vec<Enterprise>,
}

/// `[oauth.login]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Login {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_passwords: Option<bool>,
    pub oidc: Vec<OidcEntry>,
}

/// One `[[oauth.login.oidc]]` provider.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OidcEntry {
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_domains: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_emails: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_claim: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups_claim: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub trust_email: bool,
}

/// `[oauth.roles.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Role {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// `admin = true`: its holders are admins at `/account`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
    /// `approver = true`: its holders decide held calls at `/admin/approvals`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub approver: bool,
}

/// One `[[oauth.enterprise]]`: a trusted identity provider for the jwt-bearer grant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Enterprise {
    pub issuer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_clients: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_domains: Vec<String>,
}

impl OAuth {
    /// `access_ttl_secs`.
    pub fn access_ttl_secs(mut self, secs: u64) -> Self {
        self.access_ttl_secs = Some(secs);
        self
    }

    /// `refresh_grace_secs` (0: a rotated refresh token presented again a second later revokes
    /// its grant, so a refresh race cannot go unnoticed).
    pub fn refresh_grace_secs(mut self, secs: u64) -> Self {
        self.refresh_grace_secs = Some(secs);
        self
    }

    /// `[oauth.login]`.
    pub fn login(mut self, login: Login) -> Self {
        self.login = Some(login);
        self
    }

    /// `[oauth.roles.NAME]`.
    pub fn role(mut self, name: &str, role: Role) -> Self {
        self.roles.insert(name.to_owned(), role);
        self
    }

    /// `display_name`.
    pub fn display_name(mut self, name: &str) -> Self {
        self.display_name = Some(name.to_owned());
        self
    }

    /// One more `[[oauth.enterprise]]`.
    pub fn enterprise(mut self, idp: Enterprise) -> Self {
        self.enterprise.push(idp);
        self
    }

    /// `[oauth.throttle.register_per_ip]`.
    pub fn register_per_ip(mut self, throttle: Throttle) -> Self {
        self.throttle.register_per_ip = Some(throttle);
        self
    }

    /// `[oauth.throttle.login_per_ip]`.
    pub fn login_per_ip(mut self, throttle: Throttle) -> Self {
        self.throttle.login_per_ip = Some(throttle);
        self
    }

    fn is_unset(&self) -> bool {
        *self == Self::default()
    }
}

impl Throttles {
    fn is_unset(&self) -> bool {
        *self == Self::default()
    }
}

/// `[tools.NAME]`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolRule {
    /// OAuth subjects allowed to call the tool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// The scopes a call needs instead of the default ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
}

/// `[routes.stdio]`: how a command route runs its children.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StdioLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_children: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_children_per_principal: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_line_bytes: Option<u64>,
}

impl StdioLimits {
    fn is_unset(&self) -> bool {
        *self == Self::default()
    }
}

/// One `[[routes]]` entry: an MCP server at `/NAME/mcp`, reached by URL, by several URLs
/// (replicas) or by running a command (a stdio route).
#[derive(Debug, Clone, Serialize)]
pub struct Route {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub urls: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "StdioLimits::is_unset")]
    pub stdio: StdioLimits,
    /// OAuth users must hold one of these roles (or be in `users`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// OAuth users allowed on the route.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// `required`: `Some(false)` keeps the gateway ready while this route is down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// `identity_headers` (unset: the gateway's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_headers: Option<bool>,
    /// `forward_client_ip` (unset: the gateway's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward_client_ip: Option<bool>,
    /// `[routes.upstream_auth]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_auth: Option<UpstreamAuth>,
}

/// `[routes.upstream_auth]`: the credential a route's upstream needs of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UpstreamAuth {
    /// `oauth`, `header`, `env` or `shared`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
}

impl UpstreamAuth {
    /// `kind = "oauth"`: Pforte is an OAuth client of the upstream, per user.
    pub fn oauth() -> Self {
        Self {
            kind: "oauth".to_owned(),
            ..Self::default()
        }
    }

    /// `kind = "header"`: each user's secret in the header `name`.
    pub fn header(name: &str) -> Self {
        Self {
            kind: "header".to_owned(),
            header: Some(name.to_owned()),
            ..Self::default()
        }
    }

    /// `kind = "env"`: each user's secrets as these variables of their stdio child.
    pub fn env(variables: &[&str]) -> Self {
        Self {
            kind: "env".to_owned(),
            variables: variables.iter().map(|v| (*v).to_owned()).collect(),
            ..Self::default()
        }
    }

    /// `allow_hosts`: hosts the broker may reach over plain http or at a private address.
    pub fn allow_hosts(mut self, hosts: &[&str]) -> Self {
        self.allow_hosts = hosts.iter().map(|h| (*h).to_owned()).collect();
        self
    }

    /// `label`: what the connect page asks for.
    pub fn label(mut self, label: &str) -> Self {
        self.label = Some(label.to_owned());
        self
    }
}

impl Route {
    fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            title: None,
            url: None,
            urls: None,
            command: None,
            user: None,
            ca_file: None,
            connect_timeout_ms: None,
            env: BTreeMap::new(),
            stdio: StdioLimits::default(),
            roles: Vec::new(),
            users: Vec::new(),
            required: None,
            identity_headers: None,
            forward_client_ip: None,
            upstream_auth: None,
        }
    }

    /// A route to one MCP server at `url`.
    pub fn url(name: &str, url: &str) -> Self {
        Self {
            url: Some(url.to_owned()),
            ..Self::named(name)
        }
    }

    /// A route over replicas of one MCP server.
    pub fn replicas(name: &str, urls: &[String]) -> Self {
        Self {
            urls: Some(urls.to_vec()),
            ..Self::named(name)
        }
    }

    /// A stdio route: the gateway runs `command` per session.
    pub fn command<S: AsRef<str>>(name: &str, command: &[S]) -> Self {
        Self {
            command: Some(command.iter().map(|s| s.as_ref().to_owned()).collect()),
            ..Self::named(name)
        }
    }

    /// `title`: the route's name on the sign-in, consent and account pages.
    pub fn title(mut self, title: &str) -> Self {
        self.title = Some(title.to_owned());
        self
    }

    /// An environment variable for a stdio route's children.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.to_owned(), value.to_owned());
        self
    }

    /// The user a stdio route's children run as.
    pub fn user(mut self, user: &str) -> Self {
        self.user = Some(user.to_owned());
        self
    }

    /// The CA file an https route's server is verified against.
    pub fn ca_file(mut self, path: &std::path::Path) -> Self {
        self.ca_file = Some(path.to_owned());
        self
    }

    /// `[routes.upstream_auth]`.
    pub fn upstream_auth(mut self, auth: UpstreamAuth) -> Self {
        self.upstream_auth = Some(auth);
        self
    }

    /// `identity_headers` and `forward_client_ip`: what the upstream learns of the caller.
    pub fn discloses(mut self, identity_headers: bool, forward_client_ip: bool) -> Self {
        self.identity_headers = Some(identity_headers);
        self.forward_client_ip = Some(forward_client_ip);
        self
    }

    /// `required = false`: the gateway stays ready while this route is down.
    pub fn optional(mut self) -> Self {
        self.required = Some(false);
        self
    }

    pub fn connect_timeout_ms(mut self, ms: u64) -> Self {
        self.connect_timeout_ms = Some(ms);
        self
    }

    pub fn max_children(mut self, n: u32) -> Self {
        self.stdio.max_children = Some(n);
        self
    }

    pub fn max_children_per_principal(mut self, n: u32) -> Self {
        self.stdio.max_children_per_principal = Some(n);
        self
    }

    pub fn max_line_bytes(mut self, n: u64) -> Self {
        self.stdio.max_line_bytes = Some(n);
        self
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_before_tables_and_unset_tables_are_left_out() {
        let plain = GatewayConfig::new("http://127.0.0.1:9/mcp").to_toml();
        let v: toml::Table = toml::from_str(&plain).unwrap();
        assert_eq!(
            v["upstream"]["url"].as_str(),
            Some("http://127.0.0.1:9/mcp")
        );
        for table in ["limits", "oauth", "tools", "routes", "tls"] {
            assert!(!v.contains_key(table), "{table} in {plain}");
        }

        let mut c = GatewayConfig::new("http://127.0.0.1:9/mcp");
        c.public_url = Some("https://gw.example".to_owned());
        c.limits = Limits::default()
            .sessions_per_principal(2)
            .mcp(Budget::new(4, 60, 4))
            .tool("whoami", Budget::new(1, 60, 1));
        c.oauth = OAuth::default().login_per_ip(Throttle::new(3, 1));
        c.tools.insert(
            "werkbaum_history".to_owned(),
            ToolRule {
                users: vec!["alice".to_owned()],
                ..ToolRule::default()
            },
        );
        c.routes.push(
            Route::command("py", &["python3", "server.py"])
                .env("A", "1")
                .max_children(16),
        );
        c.routes.push(Route::url("alpha", "http://127.0.0.1:1/mcp"));
        let text = c.to_toml();
        let v: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            v["public_url"].as_str(),
            Some("https://gw.example"),
            "{text}"
        );
        assert_eq!(v["limits"]["sessions_per_principal"].as_integer(), Some(2));
        assert_eq!(v["limits"]["mcp"]["burst"].as_integer(), Some(4));
        assert_eq!(v["limits"]["tools"]["whoami"]["rate"].as_integer(), Some(1));
        assert_eq!(
            v["oauth"]["throttle"]["login_per_ip"]["per_minute"].as_integer(),
            Some(1)
        );
        assert_eq!(
            v["tools"]["werkbaum_history"]["users"][0].as_str(),
            Some("alice")
        );
        let routes = v["routes"].as_array().unwrap();
        assert_eq!(routes[0]["command"][1].as_str(), Some("server.py"));
        assert_eq!(routes[0]["env"]["A"].as_str(), Some("1"));
        assert_eq!(routes[0]["stdio"]["max_children"].as_integer(), Some(16));
        assert!(routes[1].get("stdio").is_none(), "{text}");
        assert_eq!(routes[1]["url"].as_str(), Some("http://127.0.0.1:1/mcp"));
    }
}
