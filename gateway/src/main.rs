//! The `pforte` binary: command-line parsing and dispatch only. Each command group lives in its
//! own module under the library's `commands/`; the library exports exactly these entry points.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use pforte::{
    AdminCommand, BackupArgs, ClientAction, Env, Failure, GrantAction, RestoreArgs, ServeArgs,
    TokenAction, ToolsAction, UpArgs, UserAction, VaultAction, exit,
};

/// jemalloc instead of glibc's malloc: glibc keeps per-thread arenas and hands little of what
/// 1,000 closed SSE streams freed back to the kernel (the RSS stayed at its peak); jemalloc
/// returns freed pages after a short delay, so the RSS follows the open connections.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "pforte",
    version,
    about = "The auth gateway in front of MCP services",
    after_help = "Exit codes: 0 ok, 64 usage or configuration error, 66 no store in the data dir, \
                  69 store unavailable (redis down, database locked), 1 anything else.\n\
                  --config and --data-dir go before or after the subcommand."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Config file (TOML); PFORTE_* environment variables override it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data dir of the embedded store (overrides the config's data_dir; `up` default .pforte).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (binds the listener first; one line and exit 1 when it cannot). Refuses a
    /// data dir without a store (exit 66) unless --init.
    Serve(ServeArgs),
    /// Validate a configuration, its TLS files and its [oauth] table, and exit (64 when bad).
    Check,
    /// Run the whole stack locally: gateway + mcp-service, embedded store, first token and user.
    Up(UpArgs),
    /// Manage the users who log in on the consent page.
    User {
        #[command(subcommand)]
        action: UserAction,
    },
    /// Manage registered OAuth clients.
    Client {
        #[command(subcommand)]
        action: ClientAction,
    },
    /// Inspect and revoke OAuth grants (a user's consent to a client, with its tokens).
    Grant {
        #[command(subcommand)]
        action: GrantAction,
    },
    /// Pinned tool definitions: the changes held or logged, and their approval.
    Tools {
        #[command(subcommand)]
        action: ToolsAction,
    },
    /// Manage static bearer tokens.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// The key ring sealing per-user upstream credentials: make a key, re-seal under it.
    Vault {
        #[command(subcommand)]
        action: VaultAction,
    },
    /// Copy the embedded store (tokens, OAuth, ACME) into a new directory while the gateway runs.
    Backup(BackupArgs),
    /// Put a backup into the data dir: not while a gateway uses it; over a store only with --force.
    Restore(RestoreArgs),
    /// Internal: how the stdio bridge starts a child (dies with the gateway, own process group).
    #[command(name = pforte::EXEC_SUBCOMMAND, hide = true)]
    StdioExec {
        /// The gateway's pid.
        parent: i32,
        /// Run the command as this uid (with `--gid`).
        #[arg(long, requires = "gid")]
        uid: Option<u32>,
        #[arg(long, requires = "uid")]
        gid: Option<u32>,
        /// Program and arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: a stdio child's step down to a route's `user` before its command.
    #[command(name = pforte::AS_USER_SUBCOMMAND, hide = true)]
    StdioAs {
        uid: u32,
        gid: u32,
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // A stdio child's supervisor starts no thread (no logging) and reads no `PFORTE_*_FILE`:
    // the signals it waits for must not reach a thread that does not block them.
    if matches!(
        cli.command,
        Command::StdioExec { .. } | Command::StdioAs { .. }
    ) {
        return dispatch(cli, &Env::default()).unwrap_or_else(Failure::report);
    }
    // `serve` logs in the configured format; it starts logging once its config is loaded.
    let logs_itself = matches!(cli.command, Command::Serve(_));
    pforte::run(logs_itself, |env| dispatch(cli, env))
}

/// Runs one command with the `PFORTE_*` environment (`env`) read at start.
fn dispatch(cli: Cli, env: &Env) -> Result<ExitCode, Failure> {
    let (config, data_dir) = (cli.config, cli.data_dir);
    let done = match cli.command {
        Command::Check => pforte::check(config.as_deref(), data_dir, env),
        Command::Serve(args) => pforte::serve(args, config.as_deref(), data_dir, env),
        Command::Up(args) => return pforte::up(args, config, data_dir, env),
        Command::Token { action } => pforte::token(action, config, data_dir, env),
        Command::Backup(args) => pforte::backup(args, config, data_dir, env),
        Command::Vault { action } => pforte::vault(action, config, data_dir, env),
        Command::Restore(args) => pforte::restore(args, config, data_dir, env),
        Command::User { action } => {
            pforte::admin(AdminCommand::User(action), config, data_dir, env)
        }
        Command::Client { action } => {
            pforte::admin(AdminCommand::Client(action), config, data_dir, env)
        }
        Command::Grant { action } => {
            pforte::admin(AdminCommand::Grant(action), config, data_dir, env)
        }
        Command::Tools { action } => {
            pforte::admin(AdminCommand::Tools(action), config, data_dir, env)
        }
        Command::StdioExec {
            parent,
            uid,
            gid,
            command,
        } => return Ok(pforte::exec_child(parent, uid.zip(gid), &command)),
        Command::StdioAs { uid, gid, command } => {
            return Ok(pforte::exec_as(uid, gid, &command));
        }
    };
    done.map(|()| ExitCode::SUCCESS)
}
