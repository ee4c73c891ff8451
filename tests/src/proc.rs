//! The workspace's programs as child processes: where the built binaries are, a child stopped
//! when dropped (its stdout read line by line), one admin command run to completion, and the
//! polling loop every test waits with.

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

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

/// The workspace's `target/` directory (where the tests keep the tools they install).
pub fn target_dir() -> PathBuf {
    // bin_dir() is <target>/<profile>.
    bin_dir().parent().expect("target dir").to_owned()
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
