//! The gateway options of before [`crate::Stack`], TOML pasted by callers; kept only until every
//! test has moved to the typed configuration.

use crate::Gateway;

/// How a test gateway is configured.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    pub tls: bool,
    pub upstream: String,
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: u64,
    pub read_timeout_ms: u64,
    /// `redis_url` in the config: the OAuth store lives in that redis instead of the data dir.
    pub redis_url: Option<String>,
    /// TOML appended after the generated config (tables only, e.g. `[oauth]\naccess_ttl_secs = 1`).
    pub extra_toml: String,
    /// Top-level keys placed before any table (e.g. `public_url = "…"`).
    pub top_toml: String,
    /// A program (and its arguments) the gateway is started through, given `pforte serve …`
    /// as further arguments: e.g. a shell that opens a descriptor first. Empty: none.
    pub wrapper: Vec<String>,
}

impl GatewayOptions {
    pub fn new(upstream: String) -> Self {
        Self {
            tls: true,
            upstream,
            allowed_origins: vec!["https://claude.ai".to_owned()],
            max_body_bytes: 1024 * 1024,
            read_timeout_ms: 300_000,
            redis_url: None,
            extra_toml: String::new(),
            top_toml: String::new(),
            wrapper: Vec::new(),
        }
    }
}

impl Gateway {
    /// Starts a gateway from [`GatewayOptions`].
    pub async fn start(opts: GatewayOptions) -> anyhow::Result<Self> {
        Self::launch(
            |listen, data_dir, cert| {
                let tls = cert.map_or(String::new(), |c| {
                    format!(
                        "[tls]\ncert = {:?}\nkey = {:?}\n",
                        c.cert.display().to_string(),
                        c.key.display().to_string()
                    )
                });
                let redis = opts
                    .redis_url
                    .as_ref()
                    .map_or(String::new(), |u| format!("redis_url = {u:?}\n"));
                format!(
                    "listen = {listen:?}\ndata_dir = {:?}\nallowed_origins = {:?}\nmax_body_bytes = {}\nthreads = 2\n{redis}{}\n{tls}[upstream]\nurl = {:?}\nread_timeout_ms = {}\nconnect_timeout_ms = 1000\n{}",
                    data_dir.display().to_string(),
                    opts.allowed_origins,
                    opts.max_body_bytes,
                    opts.top_toml,
                    opts.upstream,
                    opts.read_timeout_ms,
                    opts.extra_toml,
                )
            },
            opts.tls,
            &opts.wrapper,
        )
        .await
    }
}

impl Gateway {
    /// The rmcp client of before; see [`Gateway::rmcp_client`].
    pub async fn mcp_client(
        &self,
        token: &str,
        extra_headers: &[(&str, &str)],
    ) -> anyhow::Result<crate::RmcpClient> {
        self.rmcp_client(token, extra_headers).await
    }
}
