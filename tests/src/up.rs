//! `pforte up` as the tests start it: one command that runs the gateway and mcp-service on a
//! loopback port with its own data dir, read from its first-run banner.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::{Proc, bin, eventually, http_client};

/// How `pforte up` is started (see [`PforteUp::options`]).
#[derive(Debug, Default)]
pub struct UpOptions {
    data_dir: Option<PathBuf>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    at_banner: bool,
    config: Option<PathBuf>,
}

impl UpOptions {
    /// Runs on `dir` (which may exist already, e.g. from an earlier run) instead of a fresh one.
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_owned());
        self
    }

    /// Further arguments after `up --listen 127.0.0.1:0 --data-dir DIR`.
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.args.extend(args.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// An environment variable for `pforte up` (e.g. `PFORTE_REDIS_URL`).
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Runs `up --config FILE` with neither `--listen` nor `--data-dir`: the file's `listen`,
    /// `data_dir` and `public_url` are used (pass its data dir with [`UpOptions::data_dir`]).
    pub fn config_only(mut self, file: &Path) -> Self {
        self.config = Some(file.to_owned());
        self
    }

    /// Returns as soon as the banner is printed, before `/readyz` answers (the gateway may not
    /// have its signal handlers yet).
    pub fn at_banner(mut self) -> Self {
        self.at_banner = true;
        self
    }

    /// Starts `pforte up`, reads its banner and, unless [`UpOptions::at_banner`], waits until
    /// `/readyz` answers 200.
    pub async fn start(self) -> anyhow::Result<PforteUp> {
        let dir = tempfile::tempdir()?;
        let data_dir = self.data_dir.unwrap_or_else(|| dir.path().join("data"));
        let mut cmd = Command::new(bin("pforte"));
        match &self.config {
            Some(file) => cmd.args(["up", "--config"]).arg(file),
            None => cmd
                .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
                .arg(&data_dir),
        };
        cmd.args(&self.args)
            .env("PFORTE_MCP_SERVICE_BIN", bin("mcp-service"))
            .envs(self.env);
        let mut proc = Proc::spawn(cmd)?;
        let banner = proc.lines_until("Press Ctrl-C", Duration::from_secs(60))?;
        let mcp_url = banner_field(&banner, "MCP URL:")?.to_owned();
        let up = PforteUp {
            proc,
            _dir: dir,
            data_dir,
            banner,
            mcp_url,
        };
        if self.at_banner {
            return Ok(up);
        }
        let ready_url = up.mcp_url.replace("/mcp", "/readyz");
        let ready = eventually(Duration::from_secs(30), || {
            let req = http_client(None).get(&ready_url).send();
            async move { req.await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        if !ready {
            bail!("pforte up never became ready");
        }
        Ok(up)
    }
}

/// A running `pforte up` (gateway + mcp-service, plain HTTP on a loopback port) with its own
/// data dir, and what its banner printed.
#[derive(Debug)]
pub struct PforteUp {
    pub proc: Proc,
    _dir: tempfile::TempDir,
    data_dir: PathBuf,
    /// The banner's lines, up to "Press Ctrl-C".
    pub banner: Vec<String>,
    /// The banner's "MCP URL:".
    pub mcp_url: String,
}

impl PforteUp {
    /// Starts `pforte up --listen 127.0.0.1:0` on a fresh data dir and waits until `/readyz`
    /// answers 200.
    pub async fn start() -> anyhow::Result<Self> {
        UpOptions::default().start().await
    }

    /// Options for another start: a given data dir, more arguments, environment, no wait.
    pub fn options() -> UpOptions {
        UpOptions::default()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone()
    }

    /// The banner's value after `label` (e.g. `"Token:"`).
    pub fn field(&self, label: &str) -> anyhow::Result<&str> {
        banner_field(&self.banner, label)
    }

    /// The generated first user and password from the banner's "Login:" (a first run only).
    pub fn login(&self) -> anyhow::Result<(String, String)> {
        // "Login:     user admin, password XXXX (for Claude.ai …"
        let login = self.field("Login:")?;
        login
            .strip_prefix("user ")
            .and_then(|l| l.split_once(", password "))
            .and_then(|(u, rest)| Some((u.to_owned(), rest.split(' ').next()?.to_owned())))
            .with_context(|| format!("no generated login in {login:?}"))
    }
}

fn banner_field<'a>(banner: &'a [String], label: &str) -> anyhow::Result<&'a str> {
    banner
        .iter()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(str::trim)
        .with_context(|| format!("no {label:?} in {banner:#?}"))
}
