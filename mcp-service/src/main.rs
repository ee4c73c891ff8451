//! The `mcp-service` binary: command-line parsing and process wiring only.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mcp_service::{Listen, PlanService, ServiceConfig};

/// Settings every store-using command shares.
#[derive(clap::Args)]
struct StoreArgs {
    /// TOML config file (env MCP_SERVICE_* overrides it).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Data dir of the embedded store (env MCP_SERVICE_DATA_DIR; default .mcp-service).
    #[arg(long, value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
}
use rmcp::ServiceExt as _;

/// jemalloc instead of glibc's malloc, as in the gateway: with glibc, the memory of 1,000 ended
/// MCP sessions stayed resident (per-thread arenas, fragmented small blocks); jemalloc's
/// background thread hands freed pages back to the kernel within its decay time (10 s).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "mcp-service",
    version,
    about = "Werkbaum plans over MCP (no auth: run it behind pforte)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over streamable HTTP at /mcp.
    Serve {
        #[command(flatten)]
        store: StoreArgs,
        /// Listen address (HOST:PORT, port 0 picks a free port) or a Unix domain socket
        /// (unix:PATH, created 0600; a stale socket there is replaced); overrides the config.
        #[arg(long)]
        listen: Option<Listen>,
        /// Stop (gracefully) when stdin reaches end of file: a supervising parent (`pforte up`)
        /// holds the other end, so the service never outlives it, however the parent ends.
        #[arg(long)]
        stop_on_stdin_eof: bool,
        /// Register no write tool at all (tools/list shows only reading tools).
        #[arg(long)]
        read_only: bool,
        /// Largest plan text in bytes (default 1 MiB).
        #[arg(long, value_name = "BYTES")]
        max_text_bytes: Option<usize>,
        /// Validate the configuration and exit.
        #[arg(long)]
        check: bool,
    },
    /// Serve MCP over stdin/stdout.
    Stdio {
        #[command(flatten)]
        store: StoreArgs,
        /// Register no write tool at all.
        #[arg(long)]
        read_only: bool,
    },
    /// Operator commands on the document store.
    Doc {
        #[command(flatten)]
        store: StoreArgs,
        #[command(subcommand)]
        command: mcp_service::DocCommand,
    },
    /// Mirror a server document into a file (and git); the token comes from PFORTE_TOKEN.
    PullDoc(mcp_service::PullDocArgs),
    /// Print the Werkbaum core's `inspect` JSON for a plan file.
    Inspect(mcp_service::InspectArgs),
    /// Print the Werkbaum core's `check` JSON for a plan file: alone, or with --against as a
    /// delta (exit 0 no blocking finding, 3 blocking, 64 usage, 1 other errors).
    Check(mcp_service::CheckArgs),
}

fn load_config(store: &StoreArgs) -> Result<ServiceConfig, ExitCode> {
    let bad = |e: mcp_service::ConfigError| {
        eprintln!("mcp-service: bad configuration: {e}");
        ExitCode::from(64)
    };
    let mut cfg =
        ServiceConfig::load(store.config.as_deref(), |k| std::env::var(k).ok()).map_err(bad)?;
    if let Some(dir) = &store.data_dir {
        cfg.data_dir = dir.clone();
    }
    cfg.revalidate().map_err(bad)?;
    Ok(cfg)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help / --version print to stdout and succeed; any other parse error is a
            // usage error: 64 (EX_USAGE), as `check`'s documented exit codes say.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(mcp_service::EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // rmcp logs every client's whole `initialize` handshake at info: kept to warnings unless
    // RUST_LOG asks for it. Colour only on a terminal (not in compose, systemd or `> log`).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rmcp=warn".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
            store,
            listen,
            read_only,
            max_text_bytes,
            check,
            stop_on_stdin_eof,
        } => {
            let mut cfg = match load_config(&store) {
                Ok(cfg) => cfg,
                Err(code) => return Ok(code),
            };
            let listen = listen.unwrap_or(Listen::Tcp(cfg.listen));
            if let Listen::Tcp(addr) = listen {
                cfg.listen = addr;
            }
            cfg.read_only |= read_only;
            if let Some(max) = max_text_bytes {
                cfg.max_text_bytes = max;
            }
            if let Err(e) = cfg.revalidate() {
                eprintln!("mcp-service: bad configuration: {e}");
                return Ok(ExitCode::from(64));
            }
            if check {
                println!("configuration ok");
                return Ok(ExitCode::SUCCESS);
            }
            // The redis store's connection manager needs the runtime.
            let planner = {
                let _rt = runtime.enter();
                mcp_service::planner(&cfg).context("starting the service")?
            };
            runtime.block_on(async {
                let shutdown = shutdown_signal(stop_on_stdin_eof);
                match listen {
                    Listen::Tcp(_) => {
                        let listener = tokio::net::TcpListener::bind(cfg.listen)
                            .await
                            .with_context(|| format!("binding {}", cfg.listen))?;
                        let addr = listener.local_addr()?;
                        // Tests and `pforte up` read this line to learn the port.
                        println!("mcp-service listening on http://{addr}/mcp");
                        mcp_service::serve(mcp_service::nodelay(listener), &cfg, planner, shutdown)
                            .await?;
                    }
                    Listen::Unix(path) => {
                        let listener = mcp_service::bind_unix(&path)
                            .with_context(|| format!("binding unix:{}", path.display()))?;
                        println!("mcp-service listening on unix:{}", path.display());
                        mcp_service::serve(listener, &cfg, planner, shutdown).await?;
                        let _ = std::fs::remove_file(&path);
                    }
                }
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Inspect(args) => Ok(runtime.block_on(mcp_service::inspect(args))),
        Command::Check(args) => Ok(runtime.block_on(mcp_service::check(args))),
        Command::Doc { store, command } => {
            let cfg = match load_config(&store) {
                Ok(cfg) => cfg,
                Err(code) => return Ok(code),
            };
            Ok(runtime.block_on(mcp_service::doc(command, &cfg)))
        }
        Command::PullDoc(args) => Ok(runtime.block_on(mcp_service::pull_doc(args))),
        Command::Stdio { store, read_only } => {
            let mut cfg = match load_config(&store) {
                Ok(cfg) => cfg,
                Err(code) => return Ok(code),
            };
            cfg.read_only |= read_only;
            // The redis store's connection manager needs the runtime.
            let planner = {
                let _rt = runtime.enter();
                mcp_service::planner(&cfg).context("starting the service")?
            };
            runtime.block_on(async {
                let running = PlanService::new(planner, cfg.read_only)
                    .serve(rmcp::transport::stdio())
                    .await
                    .context("starting the stdio session")?;
                running.waiting().await.context("stdio session")?;
                Ok(ExitCode::SUCCESS)
            })
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM, and with `stdin_eof` also when stdin ends.
async fn shutdown_signal(stdin_eof: bool) {
    let eof = async move {
        if !stdin_eof {
            return std::future::pending().await;
        }
        // A plain thread (not the runtime's blocking pool, which shutdown would wait for).
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            while std::io::Read::read(&mut stdin, &mut sink).is_ok_and(|n| n > 0) {}
            let _ = tx.send(());
        });
        let _ = rx.await;
    };
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
    tokio::select! { () = ctrl_c => {}, () = term => {}, () = eof => {} }
}
