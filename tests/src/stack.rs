//! One test stack: mcp-service (or another upstream), the gateway in front of it on 127.0.0.1
//! and, when a test hands one in, a redis both use; built from typed options, every process
//! started and ready before the stack is handed out, stopped in order (the gateway first) when it
//! is dropped.
//!
//! ```ignore
//! let s = Stack::start().await;                                   // TLS gateway + mcp-service
//! let s = Stack::builder().plain_http().limits(Limits::off()).start().await;
//! let token = s.create_token("t").await?;                         // the gateway's methods
//! ```

use std::ops::{Deref, DerefMut};

use crate::{Gateway, GatewayConfig, Limits, McpService, OAuth, RedisServer, Route, ToolRule};

/// A running stack; derefs to its [`Gateway`].
#[derive(Debug)]
pub struct Stack {
    // Field order = drop order: the gateway stops before its upstream and its redis.
    pub gw: Gateway,
    /// The mcp-service the stack started or was given, unless its upstream is a bare URL.
    pub svc: Option<McpService>,
    pub redis: Option<RedisServer>,
}

impl Stack {
    /// A stack's options, starting from a TLS gateway in front of a fresh mcp-service.
    pub fn builder() -> StackBuilder {
        StackBuilder::default()
    }

    /// The default stack: a TLS gateway in front of a fresh mcp-service.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// The stack's mcp-service; panics when its upstream is a bare URL.
    pub fn service(&self) -> &McpService {
        self.svc.as_ref().expect("a stack with an mcp-service")
    }

    /// [`Stack::service`], mutable (to kill it).
    pub fn service_mut(&mut self) -> &mut McpService {
        self.svc.as_mut().expect("a stack with an mcp-service")
    }
}

impl Deref for Stack {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.gw
    }
}

impl DerefMut for Stack {
    fn deref_mut(&mut self) -> &mut Gateway {
        &mut self.gw
    }
}

/// What the gateway's `[upstream]` is.
#[derive(Debug)]
enum Upstream {
    /// A fresh mcp-service with these arguments.
    Service(Vec<String>),
    /// This running mcp-service, owned by the stack from now on.
    Given(McpService),
    /// Whatever listens there (or nothing).
    Url(String),
}

/// How a [`Stack`] is started (see [`Stack::builder`]).
#[derive(Debug)]
pub struct StackBuilder {
    upstream: Upstream,
    tls: bool,
    wrapper: Vec<String>,
    redis: Option<RedisServer>,
    config: GatewayConfig,
}

impl Default for StackBuilder {
    fn default() -> Self {
        Self {
            upstream: Upstream::Service(Vec::new()),
            tls: true,
            wrapper: Vec::new(),
            redis: None,
            config: GatewayConfig::new(""),
        }
    }
}

impl StackBuilder {
    /// Plain HTTP instead of TLS.
    pub fn plain_http(mut self) -> Self {
        self.tls = false;
        self
    }

    /// Starts mcp-service with these further arguments (e.g. `--read-only`).
    pub fn service_args(mut self, args: &[&str]) -> Self {
        self.upstream = Upstream::Service(args.iter().map(|a| (*a).to_owned()).collect());
        self
    }

    /// This running mcp-service as the upstream (the stack owns it from now on).
    pub fn service(mut self, svc: McpService) -> Self {
        self.upstream = Upstream::Given(svc);
        self
    }

    /// `url` as the upstream, started by nobody here (a test's own server, or nothing).
    pub fn upstream(mut self, url: &str) -> Self {
        self.upstream = Upstream::Url(url.to_owned());
        self
    }

    /// This redis for the gateway's shared state (`redis_url`); the stack owns it from now on.
    pub fn redis(mut self, redis: RedisServer) -> Self {
        self.config.redis_url = Some(redis.url());
        self.redis = Some(redis);
        self
    }

    /// `redis_url`, for a redis someone else holds (another stack's).
    pub fn redis_url(mut self, url: &str) -> Self {
        self.config.redis_url = Some(url.to_owned());
        self
    }

    /// `public_url`: e.g. a second gateway behind the same public URL as the first.
    pub fn public_url(mut self, url: &str) -> Self {
        self.config.public_url = Some(url.to_owned());
        self
    }

    /// `allowed_origins` (default: `https://claude.ai`).
    pub fn allowed_origins(mut self, origins: &[&str]) -> Self {
        self.config.allowed_origins = origins.iter().map(|o| (*o).to_owned()).collect();
        self
    }

    /// `max_body_bytes` (default: 1 MiB).
    pub fn max_body_bytes(mut self, bytes: u64) -> Self {
        self.config.max_body_bytes = bytes;
        self
    }

    /// `upstream.read_timeout_ms` (default: 5 minutes).
    pub fn read_timeout_ms(mut self, ms: u64) -> Self {
        self.config.upstream.read_timeout_ms = ms;
        self
    }

    /// `trusted_proxies`.
    pub fn trusted_proxies(mut self, proxies: &[&str]) -> Self {
        self.config.trusted_proxies = proxies.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    /// `[telemetry]`: traces to the OTLP/HTTP receiver at `endpoint`, sent every 100 ms.
    pub fn otlp_endpoint(mut self, endpoint: &str) -> Self {
        self.config.telemetry = Some(crate::config::Telemetry {
            otlp_endpoint: endpoint.to_owned(),
            export_interval_ms: 100,
            service_name: Some("pforte-test".to_owned()),
        });
        self
    }

    /// `metrics_listen`.
    pub fn metrics_listen(mut self, addr: &str) -> Self {
        self.config.metrics_listen = Some(addr.to_owned());
        self
    }

    /// `keepalive_timeout_secs`.
    pub fn keepalive_timeout_secs(mut self, secs: u64) -> Self {
        self.config.keepalive_timeout_secs = Some(secs);
        self
    }

    /// `drain_secs`: how long the gateway serves its connections after SIGTERM (0 by default).
    pub fn drain_secs(mut self, secs: u64) -> Self {
        self.config.drain_secs = secs;
        self
    }

    /// `runtime`: how the proxy's threads serve the listener.
    pub fn runtime(mut self, runtime: &str) -> Self {
        self.config.runtime = Some(runtime.to_owned());
        self
    }

    /// `max_connections_per_ip`.
    pub fn max_connections_per_ip(mut self, n: u32) -> Self {
        self.config.max_connections_per_ip = Some(n);
        self
    }

    /// `[limits]`.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.config.limits = limits;
        self
    }

    /// `[oauth]`.
    pub fn oauth(mut self, oauth: OAuth) -> Self {
        self.config.oauth = oauth;
        self
    }

    /// `[tools.TOOL] users = USERS`.
    pub fn tool_users(mut self, tool: &str, users: &[&str]) -> Self {
        self.config.tools.insert(
            tool.to_owned(),
            ToolRule {
                users: users.iter().map(|u| (*u).to_owned()).collect(),
                ..ToolRule::default()
            },
        );
        self
    }

    /// `[tools.TOOL] scopes = SCOPES`.
    pub fn tool_scopes(mut self, tool: &str, scopes: &[&str]) -> Self {
        self.config.tools.insert(tool.to_owned(), scoped(scopes));
        self
    }

    /// `[prompts.PROMPT] scopes = SCOPES`.
    pub fn prompt_scopes(mut self, prompt: &str, scopes: &[&str]) -> Self {
        self.config
            .prompts
            .insert(prompt.to_owned(), scoped(scopes));
        self
    }

    /// `[resources."URI"] scopes = SCOPES` (a URI or a URI template).
    pub fn resource_scopes(mut self, uri: &str, scopes: &[&str]) -> Self {
        self.config.resources.insert(uri.to_owned(), scoped(scopes));
        self
    }

    /// `[vault] key_file`: the key ring that seals per-user upstream credentials (see
    /// [`crate::write_vault_key`]).
    pub fn vault_key(mut self, key_file: &std::path::Path) -> Self {
        self.config.vault = Some(crate::config::Vault {
            key_file: key_file.to_owned(),
        });
        self
    }

    /// `stdio_user`: whom command routes without `user` run as under a root gateway.
    pub fn stdio_user(mut self, user: &str) -> Self {
        self.config.stdio_user = Some(user.to_owned());
        self
    }

    /// One more `[[routes]]` entry.
    /// `[approvals] ttl_secs`.
    pub fn approvals_ttl_secs(mut self, ttl_secs: u64) -> Self {
        self.config.approvals = Some(crate::config::Approvals { ttl_secs });
        self
    }

    /// `[pinning] mode` and `new_tools`.
    pub fn pinning(mut self, mode: &str, new_tools: &str) -> Self {
        self.config.pinning = Some(crate::config::Pinning {
            mode: mode.to_owned(),
            new_tools: new_tools.to_owned(),
        });
        self
    }

    /// One more `[[policy]]` rule, after the others.
    pub fn policy(mut self, rule: crate::config::PolicyRule) -> Self {
        self.config.policy.push(rule);
        self
    }

    pub fn route(mut self, route: Route) -> Self {
        self.config.routes.push(route);
        self
    }

    /// Starts the gateway through `wrapper` (a program and its arguments, given `pforte serve …`
    /// as further arguments: e.g. a shell that opens a descriptor first).
    pub fn wrapper(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|w| (*w).to_owned()).collect();
        self
    }

    /// Starts everything; panics with the reason when something does not come up.
    pub async fn start(self) -> Stack {
        match self.try_start().await {
            Ok(stack) => stack,
            Err(e) => panic!("the test stack did not start: {e:#}"),
        }
    }

    /// Starts everything.
    pub async fn try_start(self) -> anyhow::Result<Stack> {
        let Self {
            upstream,
            tls,
            wrapper,
            redis,
            mut config,
        } = self;
        let svc = match upstream {
            Upstream::Service(args) => {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Some(McpService::start(&args)?)
            }
            Upstream::Given(svc) => Some(svc),
            Upstream::Url(url) => {
                config.upstream.url = url;
                None
            }
        };
        if let Some(svc) = &svc {
            config.upstream.url = svc.url();
        }
        let gw = Gateway::start(config, tls, &wrapper).await?;
        Ok(Stack { gw, svc, redis })
    }
}

/// A rule that only sets the scopes.
fn scoped(scopes: &[&str]) -> ToolRule {
    ToolRule {
        scopes: Some(scopes.iter().map(|s| (*s).to_owned()).collect()),
        ..ToolRule::default()
    }
}
