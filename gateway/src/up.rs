//! `pforte up`: the whole stack on one machine — the gateway plus a supervised mcp-service on a
//! Unix domain socket in the data dir (no TCP port: only this user can reach it), on embedded
//! defaults, with a first static token and (off loopback) a self-signed certificate.
//!
//! `--stdio NAME='COMMAND ARGS…'` and `--route NAME=URL` add `[[routes]]` beside the built-in
//! service ([`extra_routes`]); the banner names one URL per route ([`route_lines`]).
//!
//! The child's stdin is a pipe whose only writer is this process: when the gateway ends in any
//! way (Ctrl-C before its signal handlers are installed, a crash, SIGKILL), the kernel closes it
//! and the child (`--stop-on-stdin-eof`) stops by itself.

use std::{
    io::{BufRead, BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::Mutex,
    time::Duration,
};

use async_trait::async_trait;
use nix::{sys::signal::Signal, unistd::Pid};
use pingora::{server::ShutdownWatch, services::background::BackgroundService};

/// The child process and how to start it again.
#[derive(Debug)]
pub(crate) struct ServiceChild {
    bin: PathBuf,
    /// The Unix domain socket the child listens on.
    socket: PathBuf,
    data_dir: PathBuf,
    child: Mutex<Option<Running>>,
}

/// A running child with the write end of its stdin (held, never written: see the module doc).
#[derive(Debug)]
struct Running {
    child: Child,
    _stdin: Option<ChildStdin>,
}

/// The directory for the child's socket: `run/` in the data dir, created (or tightened) 0700.
pub(crate) fn socket_dir(data_dir: &Path) -> std::io::Result<PathBuf> {
    let dir = data_dir.join("run");
    pforte_oauth::private_dir(&dir)?;
    Ok(dir)
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ChildError {
    #[error("starting {bin}")]
    Spawn { bin: String, source: std::io::Error },
    #[error(
        "mcp-service not found: looked beside pforte ({beside}) and on PATH; install it there \
         or set PFORTE_MCP_SERVICE_BIN"
    )]
    NotFound { beside: String },
    #[error("mcp-service exited before it was ready: {0}")]
    NotReady(String),
    #[error("preparing the socket directory {dir}")]
    SocketDir { dir: String, source: std::io::Error },
}

/// Finds the `mcp-service` binary: `PFORTE_MCP_SERVICE_BIN`, else beside this executable,
/// else on `PATH`; the error names both places it looked.
pub(crate) fn find_service_bin() -> Result<PathBuf, ChildError> {
    if let Some(p) = std::env::var_os("PFORTE_MCP_SERVICE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("mcp-service"));
    if let Some(p) = beside.as_ref().filter(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("mcp-service"))
        .find(|p| p.is_file());
    on_path.ok_or_else(|| ChildError::NotFound {
        beside: beside.map_or_else(|| "beside pforte".to_owned(), |p| p.display().to_string()),
    })
}

impl ServiceChild {
    /// Starts mcp-service on the Unix domain socket `socket` with its documents under
    /// `data_dir`, and waits (up to 30 s) until it reports it is listening.
    pub(crate) fn start(bin: &Path, socket: &Path, data_dir: &Path) -> Result<Self, ChildError> {
        let child = spawn(bin, socket, data_dir)?;
        Ok(Self {
            bin: bin.to_owned(),
            socket: socket.to_owned(),
            data_dir: data_dir.to_owned(),
            child: Mutex::new(Some(child)),
        })
    }

    /// The gateway's `upstream.url` for this child.
    pub(crate) fn upstream_url(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    fn take(&self) -> Option<Running> {
        self.child.lock().ok().and_then(|mut g| g.take())
    }

    /// Stops the child (see [`stop_child`]).
    fn stop(&self, grace: Duration) {
        if let Some(child) = self.take() {
            stop_child(child, grace);
        }
    }
}

/// Asks a child to stop (SIGTERM), then kills it after `grace`.
fn stop_child(running: Running, grace: Duration) {
    let Running { mut child, _stdin } = running;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The most of mcp-service's first stdout line ("listening on …") that is read.
const BANNER_MAX: u64 = 4096;

/// The first line of `reader`, at most `max` bytes of it (the rest of a longer line stays
/// unread); None at end of input.
fn first_line(reader: &mut impl BufRead, max: u64) -> Option<std::io::Result<String>> {
    let mut buf = Vec::new();
    match reader.take(max).read_until(b'\n', &mut buf) {
        Ok(0) => None,
        Ok(_) => Some(Ok(String::from_utf8_lossy(&buf)
            .trim_end_matches(['\r', '\n'])
            .to_owned())),
        Err(e) => Some(Err(e)),
    }
}

fn spawn(bin: &Path, socket: &Path, data_dir: &Path) -> Result<Running, ChildError> {
    if let Some(dir) = socket.parent() {
        pforte_oauth::private_dir(dir).map_err(|source| ChildError::SocketDir {
            dir: dir.display().to_string(),
            source,
        })?;
    }
    let mut listen = std::ffi::OsString::from("unix:");
    listen.push(socket);
    let mut child = Command::new(bin)
        .args(["serve", "--stop-on-stdin-eof", "--listen"])
        .arg(listen)
        .env("MCP_SERVICE_DATA_DIR", data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| ChildError::Spawn {
            bin: bin.display().to_string(),
            source,
        })?;
    let stdin = child.stdin.take();
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(ChildError::NotReady("no stdout".into()));
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let first = first_line(&mut stdout, BANNER_MAX);
        let _ = tx.send(first);
        // Keep draining so the child never blocks on a full pipe (nothing of it is kept).
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(Ok(line))) if line.contains("listening on") => Ok(Running {
            child,
            _stdin: stdin,
        }),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            Err(ChildError::NotReady(format!("{other:?}")))
        }
    }
}

#[async_trait]
impl BackgroundService for ServiceChild {
    /// Restarts the child if it dies; stops it when the gateway shuts down.
    async fn start(&self, mut shutdown: ShutdownWatch) {
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
            let exited = match self.child.lock() {
                Ok(mut guard) => match guard.as_mut().map(|r| r.child.try_wait()) {
                    Some(Ok(Some(status))) => Some(status.to_string()),
                    Some(Err(e)) => Some(e.to_string()),
                    None | Some(Ok(None)) => None,
                },
                Err(_) => None,
            };
            if let Some(status) = exited {
                tracing::warn!(%status, "mcp-service exited; restarting it");
                let (bin, socket, data_dir) =
                    (self.bin.clone(), self.socket.clone(), self.data_dir.clone());
                match tokio::task::spawn_blocking(move || spawn(&bin, &socket, &data_dir)).await {
                    Ok(Ok(child)) => {
                        if let Ok(mut guard) = self.child.lock() {
                            *guard = Some(child);
                        }
                    }
                    Ok(Err(e)) => tracing::error!(error = %e, "restarting mcp-service failed"),
                    Err(e) => tracing::error!(error = %e, "restart task failed"),
                }
            }
        }
        if let Some(child) = self.take() {
            let _ = tokio::task::spawn_blocking(move || stop_child(child, Duration::from_secs(3)))
                .await;
        }
    }
}

impl Drop for ServiceChild {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// A `--stdio` or `--route` flag that cannot become a route.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum RouteFlagError {
    #[error("--{flag} {value:?}: expected NAME={what}")]
    NoName {
        flag: &'static str,
        value: String,
        what: &'static str,
    },
    #[error("--stdio {0:?}: the command is empty or its quoting is unbalanced")]
    BadCommand(String),
}

/// The `[[routes]]` that `--stdio NAME='COMMAND ARGS…'` (shell words) and `--route NAME=URL`
/// add, in the order given. Names and URLs are checked by the config's validation like any
/// other route's, so `pforte up` and `pforte check` say the same about them.
pub(crate) fn extra_routes(
    stdio: &[String],
    urls: &[String],
) -> Result<Vec<crate::config::RouteConfig>, RouteFlagError> {
    let mut routes = Vec::with_capacity(stdio.len() + urls.len());
    for flag in stdio {
        let (name, command) = split_flag(flag, "stdio", "'COMMAND ARGS…'")?;
        let words = shlex::split(command)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| RouteFlagError::BadCommand(flag.clone()))?;
        routes.push(crate::config::RouteConfig {
            name: name.to_owned(),
            command: Some(words),
            ..Default::default()
        });
    }
    for flag in urls {
        let (name, url) = split_flag(flag, "route", "URL")?;
        routes.push(crate::config::RouteConfig {
            name: name.to_owned(),
            url: Some(url.to_owned()),
            ..Default::default()
        });
    }
    Ok(routes)
}

fn split_flag<'a>(
    value: &'a str,
    flag: &'static str,
    what: &'static str,
) -> Result<(&'a str, &'a str), RouteFlagError> {
    match value.split_once('=') {
        Some((name, rest)) if !name.is_empty() && !rest.trim().is_empty() => Ok((name, rest)),
        _ => Err(RouteFlagError::NoName {
            flag,
            value: value.to_owned(),
            what,
        }),
    }
}

/// One MCP endpoint the banner names: a route or a virtual server.
struct Listed<'a> {
    /// Its name in the connector list.
    name: &'a str,
    /// Its name in Claude Code.
    claude_name: &'a str,
    /// Its connector URL (its OAuth protected resource).
    url: &'a str,
}

/// The banner's lines for every route and virtual server: its connector URL (what Claude.ai's
/// "Add custom connector" takes) and the `claude mcp add` line, with `token` in the header.
pub(crate) fn route_lines(
    routes: &[crate::config::Route],
    virtuals: &[crate::config::Virtual],
    token: &str,
) -> Vec<String> {
    let routes: Vec<Listed<'_>> = routes
        .iter()
        .map(|r| Listed {
            name: &r.name,
            // The built-in service keeps the name `pforte` it has always had in Claude Code.
            claude_name: if r.path == crate::config::MCP_PATH {
                "pforte"
            } else {
                &r.name
            },
            url: &r.resource,
        })
        .collect();
    let virtuals: Vec<Listed<'_>> = virtuals
        .iter()
        .map(|v| Listed {
            name: &v.server.name,
            claude_name: &v.server.name,
            url: &v.resource,
        })
        .collect();
    let width = routes
        .iter()
        .chain(&virtuals)
        .map(|l| l.name.len())
        .max()
        .unwrap_or(0);
    let connector = |l: &Listed<'_>| format!("    {:width$}  {}", l.name, l.url);
    let mut lines = vec!["  Routes (connector URL for Claude.ai):".to_owned()];
    lines.extend(routes.iter().map(connector));
    if !virtuals.is_empty() {
        lines.push("  Virtual servers (connector URL for Claude.ai):".to_owned());
        lines.extend(virtuals.iter().map(connector));
    }
    lines.push("  Claude Code:".to_owned());
    for l in routes.iter().chain(&virtuals) {
        lines.push(format!(
            "    claude mcp add --transport http {} {} --header \"Authorization: Bearer {token}\"",
            l.claude_name, l.url
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_banner_names_every_route_and_virtual_server() {
        let cfg: crate::config::GatewayConfig = toml::from_str(
            r#"
            [upstream]
            url = "http://127.0.0.1:2/mcp"
            [[routes]]
            name = "notes"
            url = "http://127.0.0.1:3/mcp"
            [[virtual]]
            name = "team"
            members = ["mcp", "notes"]
            "#,
        )
        .unwrap();
        let s = cfg.validate().unwrap();
        let lines = route_lines(&s.routes, &s.virtuals, "pft_x");
        let base = "http://127.0.0.1:8787";
        let header = "--header \"Authorization: Bearer pft_x\"";
        assert_eq!(
            lines,
            [
                "  Routes (connector URL for Claude.ai):".to_owned(),
                format!("    mcp    {base}/mcp"),
                format!("    notes  {base}/notes/mcp"),
                "  Virtual servers (connector URL for Claude.ai):".to_owned(),
                format!("    team   {base}/team/mcp"),
                "  Claude Code:".to_owned(),
                format!("    claude mcp add --transport http pforte {base}/mcp {header}"),
                format!("    claude mcp add --transport http notes {base}/notes/mcp {header}"),
                format!("    claude mcp add --transport http team {base}/team/mcp {header}"),
            ]
        );
    }

    #[test]
    fn the_banner_read_is_bounded() {
        let mut r = BufReader::new(&b"listening on unix:/x\r\nmore\n"[..]);
        assert_eq!(
            first_line(&mut r, 64).unwrap().unwrap(),
            "listening on unix:/x"
        );
        let endless = vec![b'x'; 1 << 20];
        let mut r = BufReader::new(&endless[..]);
        assert_eq!(first_line(&mut r, 16).unwrap().unwrap().len(), 16);
        assert!(first_line(&mut BufReader::new(&b""[..]), 16).is_none());
    }

    #[test]
    fn stdio_flags_are_shell_words_and_urls_stay_whole() {
        let routes = extra_routes(
            &["notes=npx -y '@scope/server fs' /srv/notes".to_owned()],
            &["wiki=http://127.0.0.1:9000/mcp?x=1".to_owned()],
        )
        .unwrap();
        assert_eq!(routes[0].name, "notes");
        assert_eq!(
            routes[0].command.as_deref().unwrap(),
            ["npx", "-y", "@scope/server fs", "/srv/notes"]
        );
        assert_eq!(routes[1].name, "wiki");
        assert_eq!(
            routes[1].url.as_deref(),
            Some("http://127.0.0.1:9000/mcp?x=1")
        );
    }

    #[test]
    fn flags_without_a_name_or_a_command_are_refused() {
        for bad in ["npx server", "=npx", "notes=", "notes=  "] {
            assert!(matches!(
                extra_routes(&[bad.to_owned()], &[]),
                Err(RouteFlagError::NoName { .. })
            ));
        }
        assert_eq!(
            extra_routes(&["notes=npx 'unbalanced".to_owned()], &[]),
            Err(RouteFlagError::BadCommand(
                "notes=npx 'unbalanced".to_owned()
            ))
        );
        assert!(extra_routes(&[], &["wiki".to_owned()]).is_err());
    }
}
