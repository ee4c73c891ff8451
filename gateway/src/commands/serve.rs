//! `pforte check` and `pforte serve`: a configuration loaded and validated; `check` describes its
//! routes, `serve` opens the stores and runs the gateway on it.

use std::path::{Path, PathBuf};

use crate::{config::UpstreamKind, logging, preflight, runtime, stores::Stores};

use super::{CmdResult, Env, Failure, harden_process, settings};

/// Validates everything `serve` would and prints each route with its upstream.
pub fn check(config: Option<&Path>, data_dir: Option<PathBuf>, env: &Env) -> CmdResult {
    let s = settings(config, data_dir, env)?;
    println!("configuration ok:");
    for route in &s.routes {
        println!(
            "  {} → {}",
            route.resource,
            describe_upstream(&route.upstream)
        );
    }
    Ok(())
}

/// Runs the gateway: binds the listener once before it prints success, then serves until
/// stopped.
pub fn serve(config: Option<&Path>, data_dir: Option<PathBuf>, env: &Env) -> CmdResult {
    harden_process();
    let s = settings(config, data_dir, env)?;
    logging::init(s.log_format);
    preflight::check_bind(s.listen.addr, preflight::ListenKnob::Config)
        .map_err(|e| Failure::Other(e.into()))?;
    let resources: Vec<&str> = s.routes.iter().map(|r| r.resource.as_str()).collect();
    println!(
        "pforte listening on {} (MCP: {})",
        s.base_url,
        resources.join(", ")
    );
    let stores = Stores::open(&s.store).map_err(|e| Failure::Other(e.into()))?;
    runtime::run(s, stores, Vec::new()).map_err(|e| Failure::Other(e.into()))
}

/// How `pforte check` names a route's upstream.
fn describe_upstream(kind: &UpstreamKind) -> String {
    use UpstreamKind as K;
    match kind {
        K::Http(u) | K::Https { upstream: u, .. } => u.http_url(),
        K::Unix(u) => format!(
            "unix:{}",
            u.socket.as_deref().unwrap_or(Path::new("")).display()
        ),
        K::Stdio { command, .. } => format!("stdio: {}", command.join(" ")),
        K::Replicas { instances, .. } => instances
            .iter()
            .map(|u| u.http_url())
            .collect::<Vec<_>>()
            .join(", "),
    }
}
