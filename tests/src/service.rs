//! mcp-service as the upstream of a test: `mcp-service serve` on a kernel-chosen loopback port,
//! with a data dir of its own unless its arguments name one.

use std::{net::SocketAddr, process::Command, time::Duration};

use anyhow::Context as _;

use crate::{Proc, bin};

/// A running mcp-service on a kernel-chosen loopback port.
#[derive(Debug)]
pub struct McpService {
    pub proc: Proc,
    pub addr: SocketAddr,
    /// Its documents, unless `extra_args` name a data dir of their own.
    _data: tempfile::TempDir,
}

impl McpService {
    /// Starts `mcp-service serve --listen 127.0.0.1:0 EXTRA_ARGS…` and waits for its banner.
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

    /// Its MCP URL, `http://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}
