//! A running `pforte serve` with a data dir of its own: started from a [`GatewayConfig`] on a
//! free loopback port (TLS with a fresh self-signed certificate unless plain HTTP is asked
//! for), healthy before it is handed out, and the admin commands pointed at its store.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::bail;

use crate::{
    GatewayConfig, McpClient, Proc, RmcpClient, TestCert, TlsFiles, bin, eventually, free_port,
    http_client, pforte_cmd, rmcp_client,
};

/// A running `pforte serve` with its own data dir.
#[derive(Debug)]
pub struct Gateway {
    pub proc: Proc,
    pub dir: tempfile::TempDir,
    pub base: String,
    pub cert: Option<TestCert>,
}

impl Gateway {
    /// Starts `pforte serve` with `config` (its `listen`, `data_dir` and `tls` are filled here)
    /// over TLS when `tls`, through `wrapper` when it is not empty (a program and its arguments
    /// given `pforte serve …` as further arguments, e.g. a shell that opens a descriptor first),
    /// and waits until `/healthz` answers 200.
    pub async fn start(
        mut config: GatewayConfig,
        tls: bool,
        wrapper: &[String],
    ) -> anyhow::Result<Self> {
        let mut dir = tempfile::tempdir()?;
        let cert = if tls {
            Some(TestCert::create(dir.path())?)
        } else {
            None
        };
        config.tls = cert.as_ref().map(|c| TlsFiles {
            cert: c.cert.clone(),
            key: c.key.clone(),
        });
        // pingora binds its listeners itself; retry on the rare port race.
        for _attempt in 0..3 {
            let port = free_port();
            let scheme = if cert.is_some() { "https" } else { "http" };
            config.listen = format!("127.0.0.1:{port}");
            config.data_dir = dir.path().join("data");
            let config_path = dir.path().join("pforte.toml");
            std::fs::write(&config_path, config.to_toml())?;
            let mut cmd = match wrapper.split_first() {
                Some((program, args)) => {
                    let mut cmd = Command::new(program);
                    cmd.args(args).arg(bin("pforte"));
                    cmd
                }
                None => Command::new(bin("pforte")),
            };
            cmd.args(["serve", "--init", "--config"]).arg(&config_path);
            let proc = Proc::spawn(cmd)?;
            let gw = Self {
                proc,
                base: format!("{scheme}://127.0.0.1:{port}"),
                dir,
                cert: cert.clone(),
            };
            let client = gw.http();
            let health = format!("{}/healthz", gw.base);
            let up = eventually(Duration::from_secs(20), || {
                let client = client.clone();
                let health = health.clone();
                async move {
                    client
                        .get(&health)
                        .send()
                        .await
                        .is_ok_and(|r| r.status() == 200)
                }
            })
            .await;
            if up {
                return Ok(gw);
            }
            let Gateway {
                mut proc, dir: d, ..
            } = gw;
            dir = d;
            if matches!(proc.child.try_wait(), Ok(None)) {
                bail!("gateway runs but never became healthy");
            }
            // It exited: most likely the port was taken meanwhile. Try another one.
        }
        bail!("gateway did not start")
    }

    /// Stops the gateway cleanly (SIGTERM) and starts `pforte serve` again with the same
    /// config, data dir and port; waits until `/healthz` answers 200.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        let status = self
            .proc
            .signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(20))?;
        if !status.success() {
            bail!("the gateway ended with {status} on SIGTERM");
        }
        let mut cmd = Command::new(bin("pforte"));
        cmd.args(["serve", "--config"]).arg(self.config_path());
        self.proc = Proc::spawn(cmd)?;
        let client = self.http();
        let health = format!("{}/healthz", self.base);
        let up = eventually(Duration::from_secs(20), || {
            let req = client.get(&health).send();
            async move { req.await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        if !up {
            bail!("the restarted gateway never became healthy");
        }
        Ok(())
    }

    /// Appends `more` to the config file and [`restart`](Self::restart)s with it.
    pub async fn restart_with(&mut self, more: &str) -> anyhow::Result<()> {
        let path = self.config_path();
        let base = std::fs::read_to_string(&path)?;
        std::fs::write(&path, format!("{base}\n{more}"))?;
        self.restart().await
    }

    /// The gateway's MCP URL.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The MCP URL of the route `name`: `BASE/NAME/mcp`.
    pub fn route_url(&self, name: &str) -> String {
        format!("{}/{name}/mcp", self.base)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The config file this gateway was started with.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("pforte.toml")
    }

    /// The PEM of the certificate this gateway serves, when it serves TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.cert.as_ref().map(|c| c.cert_pem.as_str())
    }

    /// Runs `pforte ARGS… --config <this gateway's config>` (the admin commands reach the same
    /// store as the gateway, embedded or redis), feeding `stdin`; returns stdout.
    pub fn admin_cmd(&self, args: &[&str], stdin: &str) -> anyhow::Result<String> {
        let config = self.config_path().display().to_string();
        pforte_cmd(args, &["--config", &config], stdin)
    }

    /// Adds an OAuth user with `pforte user add` (password on stdin).
    pub fn add_user(&self, name: &str, password: &str) -> anyhow::Result<()> {
        self.admin_cmd(&["user", "add", name], &format!("{password}\n"))
            .map(drop)
    }

    /// Runs `pforte token …` with this gateway's config (its data dir, or its redis).
    pub fn token_cmd(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(bin("pforte"))
            .arg("token")
            .args(args)
            .arg("--config")
            .arg(self.config_path())
            .output()?;
        if !out.status.success() {
            bail!(
                "pforte token {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// Creates a static token and returns it once the running gateway has picked it up.
    pub async fn create_token(&self, name: &str) -> anyhow::Result<String> {
        self.create_token_with(name, &[]).await
    }

    /// Like `create_token`, with more arguments for `token create` (e.g. `--scope mcp:read`).
    pub async fn create_token_with(&self, name: &str, args: &[&str]) -> anyhow::Result<String> {
        let mut all = vec!["create", name];
        all.extend_from_slice(args);
        let token = self.token_cmd(&all)?.trim().to_owned();
        if !self.accepts_token(&token).await {
            bail!("the gateway did not accept the new token {name:?} within 2 s");
        }
        Ok(token)
    }

    /// Whether this gateway accepts `token` within 2 s (a token made through another gateway
    /// on the same store reaches this one's snapshot at its next refresh).
    pub async fn accepts_token(&self, token: &str) -> bool {
        let client = self.http();
        let url = self.mcp_url();
        eventually(Duration::from_secs(2), || {
            let req = client.get(&url).bearer_auth(token).send();
            async move {
                req.await
                    .is_ok_and(|r| r.status() != 401 && r.status() != 429)
            }
        })
        .await
    }

    /// Creates a static token with exactly `scopes` (`--scope` each) and returns it once the
    /// running gateway accepts it.
    pub async fn create_scoped_token(&self, name: &str, scopes: &[&str]) -> anyhow::Result<String> {
        let args: Vec<&str> = scopes.iter().flat_map(|s| ["--scope", s]).collect();
        self.create_token_with(name, &args).await
    }

    /// A reqwest client that trusts this gateway's certificate (and only it).
    pub fn http(&self) -> reqwest::Client {
        http_client(self.ca_pem())
    }

    /// An MCP client by hand on `/mcp` with the bearer `token` (not initialized yet).
    pub fn mcp(&self, token: &str) -> McpClient {
        self.mcp_at(&self.mcp_url(), token)
    }

    /// An MCP client by hand on `url` (a route's MCP URL) with the bearer `token`.
    pub fn mcp_at(&self, url: &str, token: &str) -> McpClient {
        McpClient::new(self.http(), url).bearer(token)
    }

    /// An rmcp client through the gateway's `/mcp` with `token` and extra headers.
    pub async fn rmcp_client(
        &self,
        token: &str,
        extra_headers: &[(&str, &str)],
    ) -> anyhow::Result<RmcpClient> {
        rmcp_client(&self.mcp_url(), self.http(), token, extra_headers).await
    }
}

/// A gateway config file in `dir` for a gateway started another way than [`Gateway::start`]
/// (e.g. as another user): `config` with `listen` on port 0 and `dir/data` as its data dir.
pub fn write_config(dir: &Path, mut config: GatewayConfig) -> anyhow::Result<PathBuf> {
    config.listen = "127.0.0.1:0".to_owned();
    config.data_dir = dir.join("data");
    let path = dir.join("pforte.toml");
    std::fs::write(&path, config.to_toml())?;
    Ok(path)
}
