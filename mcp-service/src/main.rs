//! The `mcp-service` binary: command-line parsing and process wiring only.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mcp_service::{config::ServiceConfig, http, server::PlanService};
use rmcp::ServiceExt as _;

#[derive(Parser)]
#[command(name = "mcp-service", version, about = "Werkbaum plans over MCP (no auth: run it behind pforte)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over streamable HTTP at /mcp.
    Serve {
        /// TOML config file (env MCP_SERVICE_* overrides it).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Listen address; overrides the config. Port 0 picks a free port.
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Validate the configuration and exit.
        #[arg(long)]
        check: bool,
    },
    /// Serve MCP over stdin/stdout.
    Stdio {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the Werkbaum core's `inspect` JSON for a plan file.
    Inspect(mcp_service::plan_cli::InspectArgs),
    /// Print the Werkbaum core's `check` JSON for a plan file (exit 3 when a finding blocks).
    Check(mcp_service::plan_cli::CheckArgs),
}

fn load_config(file: Option<&std::path::Path>) -> Result<ServiceConfig, ExitCode> {
    ServiceConfig::load(file, |k| std::env::var(k).ok()).map_err(|e| {
        eprintln!("mcp-service: bad configuration: {e}");
        ExitCode::from(64)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcp-service: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match cli.command {
        Command::Serve {
            config,
            listen,
            check,
        } => {
            let mut cfg = match load_config(config.as_deref()) {
                Ok(cfg) => cfg,
                Err(code) => return Ok(code),
            };
            if let Some(listen) = listen {
                cfg.listen = listen;
            }
            if check {
                println!("configuration ok");
                return Ok(ExitCode::SUCCESS);
            }
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind(cfg.listen)
                    .await
                    .with_context(|| format!("binding {}", cfg.listen))?;
                let addr = listener.local_addr()?;
                // Tests and `pforte up` read this line to learn the port.
                println!("mcp-service listening on http://{addr}/mcp");
                http::serve(listener, &cfg, shutdown_signal()).await?;
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Inspect(args) => Ok(runtime.block_on(mcp_service::plan_cli::inspect(args))),
        Command::Check(args) => Ok(runtime.block_on(mcp_service::plan_cli::check(args))),
        Command::Stdio { config } => {
            if let Err(code) = load_config(config.as_deref()) {
                return Ok(code);
            }
            runtime.block_on(async {
                let running = PlanService::new()
                    .serve(rmcp::transport::stdio())
                    .await
                    .context("starting the stdio session")?;
                running.waiting().await.context("stdio session")?;
                Ok(ExitCode::SUCCESS)
            })
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}
