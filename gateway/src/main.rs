//! The `pforte` binary: command-line parsing and process wiring only.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use pforte::{
    cli,
    config::{GatewayConfig, Settings},
    logging, preflight, server,
    stores::{Site, Stores},
    tls, tokens,
    up::{self, ServiceChild},
};
use pforte_clock::{Clock as _, SystemClock};
use pforte_oauth::{
    admin::{Admin, AdminError, GrantFilter},
    crypto::Secret,
};
use pingora::services::background::background_service;

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

/// `--json` for list commands.
#[derive(clap::Args, Clone, Copy)]
struct ListArgs {
    /// Print a JSON array instead of a table (times in RFC 3339 UTC).
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (binds the listener first; one line and exit 1 when it cannot).
    Serve,
    /// Validate a configuration, its TLS files and its [oauth] table, and exit (64 when bad).
    Check,
    /// Run the whole stack locally: gateway + mcp-service, embedded store, first token and user.
    Up {
        /// Public listener. Off loopback, a self-signed certificate is generated.
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: SocketAddr,
        /// The URL clients use, when it differs from the listen address.
        #[arg(long)]
        public_url: Option<String>,
        /// A stdio MCP server behind the gateway at /NAME/mcp: NAME='COMMAND ARGS…' (shell
        /// words; repeatable), e.g. --stdio notes='npx -y @modelcontextprotocol/server-filesystem /srv/notes'.
        #[arg(long = "stdio", value_name = "NAME=COMMAND")]
        stdio: Vec<String>,
        /// A streamable-HTTP MCP server behind the gateway at /NAME/mcp: NAME=URL (http://,
        /// https:// or unix:PATH; repeatable).
        #[arg(long = "route", value_name = "NAME=URL")]
        route: Vec<String>,
    },
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
    /// Manage static bearer tokens.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Internal: how the stdio bridge starts a child (dies with the gateway, own process group).
    #[command(name = pforte::stdio::EXEC_SUBCOMMAND, hide = true)]
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
    #[command(name = pforte::stdio::AS_USER_SUBCOMMAND, hide = true)]
    StdioAs {
        uid: u32,
        gid: u32,
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
}

#[derive(Subcommand)]
enum UserAction {
    /// Add a user; the password is read from a prompt, or from stdin when it is not a terminal.
    /// Creates the store if the data dir has none (and says so).
    Add {
        /// 1-64 letters, digits, '.', '_', '-', '@'.
        username: String,
    },
    /// Change a user's password (prompt or stdin).
    Passwd {
        /// An existing user.
        username: String,
    },
    /// List users with their creation and password-change times.
    List(ListArgs),
    /// Remove a user and revoke their grants.
    Remove {
        /// An existing user.
        username: String,
    },
}

#[derive(Subcommand)]
enum ClientAction {
    /// List registered clients: id, name, authentication method, redirect URIs, last use.
    List(ListArgs),
    /// Remove a client and revoke its grants.
    Remove {
        /// The client_id as `client list` shows it.
        client_id: String,
    },
}

#[derive(Subcommand)]
enum GrantAction {
    /// List active grants, optionally for one user or client.
    List {
        /// Only this user's grants.
        #[arg(long)]
        user: Option<String>,
        /// Only this client's grants.
        #[arg(long)]
        client: Option<String>,
        /// Include revoked and expired grants.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        list: ListArgs,
    },
    /// Revoke grants: one by id, or every grant of a user and/or client.
    Revoke {
        /// The grant id as `grant list` shows it.
        id: Option<String>,
        /// Every grant of this user.
        #[arg(long)]
        user: Option<String>,
        /// Every grant of this client.
        #[arg(long)]
        client: Option<String>,
    },
}

#[derive(Subcommand)]
enum TokenAction {
    /// Create a token and print it once. Creates the store if the data dir has none (and says so).
    Create {
        /// 1-64 letters, digits, '.', '_', '-'.
        name: String,
        /// Scope to grant; repeat for several. Default: every configured scope.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Lifetime, e.g. 90d, 12h, 30m. Default: no expiry.
        #[arg(long)]
        expires: Option<String>,
        /// Route the token opens (`mcp` for `[upstream]`); repeat for several. Default: every route.
        #[arg(long = "route")]
        routes: Vec<String>,
    },
    /// List tokens (never their values).
    List(ListArgs),
    /// Revoke a token; a running gateway refuses it within a second.
    Revoke {
        /// The token's name.
        name: String,
    },
}

/// How a command failed, and so how the process exits.
#[derive(Debug)]
enum Failure {
    /// Usage or configuration (64).
    Usage(String),
    /// The data dir holds no store (66).
    NoStore(PathBuf),
    /// The store cannot be used right now (69).
    Unavailable(String),
    /// Anything else (1).
    Other(anyhow::Error),
}

impl Failure {
    fn report(self) -> ExitCode {
        let (code, line) = match self {
            Self::Usage(m) => (cli::exit::USAGE, m),
            Self::NoStore(dir) => (cli::exit::NO_STORE, cli::no_store_message(&dir)),
            Self::Unavailable(m) => (cli::exit::UNAVAILABLE, m),
            Self::Other(e) => (cli::exit::OTHER, format!("{e:#}")),
        };
        eprintln!("pforte: {line}");
        ExitCode::from(code)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Other(e)
    }
}

impl From<AdminError> for Failure {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Store(e) => Self::Unavailable(e.to_string()),
            other => Self::Other(other.into()),
        }
    }
}

impl From<pforte::stores::StoresError> for Failure {
    fn from(e: pforte::stores::StoresError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

impl From<tokens::StoreError> for Failure {
    fn from(e: tokens::StoreError) -> Self {
        use tokens::StoreError as E;
        match e {
            E::Sqlite(_) | E::Redis(_) | E::Poisoned | E::DataDir { .. } => {
                Self::Unavailable(e.to_string())
            }
            other => Self::Other(other.into()),
        }
    }
}

type CmdResult = Result<(), Failure>;

/// Pingora reports a listener or TLS file it cannot use by panicking on one of its threads; those
/// are operator errors: one line and exit 1, not a backtrace and a process that listens nowhere.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        logging::flush();
        if preflight::is_startup_panic(message) {
            let first = message.lines().next().unwrap_or(message);
            eprintln!("pforte: cannot start: {first}");
            std::process::exit(1);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(cli::exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // A stdio child's supervisor starts no thread (no logging): the signals it waits for
    // must not reach a thread that does not block them.
    if matches!(
        cli.command,
        Command::StdioExec { .. } | Command::StdioAs { .. }
    ) {
        return run(cli).unwrap_or_else(|failure| failure.report());
    }
    install_panic_hook();
    if let Err(failure) = load_file_env() {
        return failure.report();
    }
    // `serve` logs in the configured format; it starts logging once its config is loaded.
    if !matches!(cli.command, Command::Serve) {
        let format = env("PFORTE_LOG_FORMAT")
            .and_then(|v| v.parse().ok())
            .unwrap_or_default();
        logging::init(format);
    }
    let result = run(cli);
    // Log lines are written in batches; the last ones before the outcome.
    logging::flush();
    match result {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

/// Values of `PFORTE_*` variables given as `PFORTE_*_FILE` (a secret such as a redis URL with
/// its password, mounted as a file): read once at start.
static FILE_ENV: std::sync::OnceLock<std::collections::HashMap<String, String>> =
    std::sync::OnceLock::new();

/// Reads every `PFORTE_X_FILE` into `PFORTE_X` (unless `PFORTE_X` itself is set).
fn load_file_env() -> Result<(), Failure> {
    let mut map = std::collections::HashMap::new();
    for (key, path) in std::env::vars() {
        let Some(name) = key
            .strip_suffix("_FILE")
            .filter(|n| n.starts_with("PFORTE_"))
        else {
            continue;
        };
        if std::env::var_os(name).is_some() {
            continue;
        }
        let value = std::fs::read_to_string(&path)
            .map_err(|e| Failure::Usage(format!("{key}={path}: {e}")))?;
        map.insert(
            name.to_owned(),
            value.trim_end_matches(['\r', '\n']).to_owned(),
        );
    }
    let _ = FILE_ENV.set(map);
    Ok(())
}

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .or_else(|| FILE_ENV.get().and_then(|m| m.get(name).cloned()))
}

fn bad_config(e: impl std::fmt::Display) -> Failure {
    Failure::Usage(format!("bad configuration: {e}"))
}

/// Loads and validates everything `serve` would, without listening.
fn settings(config: Option<&Path>, data_dir: Option<PathBuf>) -> Result<Settings, Failure> {
    let mut cfg = GatewayConfig::load(config, env).map_err(bad_config)?;
    if let Some(dir) = data_dir {
        cfg.data_dir = dir;
    }
    cfg.listen = server::resolve_port(cfg.listen).map_err(bad_config)?;
    let settings = cfg.validate().map_err(bad_config)?;
    preflight::check(&settings).map_err(bad_config)?;
    Ok(settings)
}

/// Binds the public listener once before anything prints success; one line when it cannot.
fn can_listen(addr: SocketAddr) -> CmdResult {
    preflight::check_bind(addr).map_err(|e| Failure::Other(e.into()))
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let (config, data_dir) = (cli.config, cli.data_dir);
    let done = match cli.command {
        Command::Check => {
            let s = settings(config.as_deref(), data_dir)?;
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
        Command::Serve => {
            harden_process();
            let s = settings(config.as_deref(), data_dir)?;
            logging::init(s.file.log_format);
            can_listen(s.file.listen)?;
            let resources: Vec<&str> = s.routes.iter().map(|r| r.resource.as_str()).collect();
            println!(
                "pforte listening on {} (MCP: {})",
                s.base_url,
                resources.join(", ")
            );
            let stores = Stores::open(&s.store_site()).map_err(|e| Failure::Other(e.into()))?;
            server::run(s, stores, Vec::new()).map_err(|e| Failure::Other(e.into()))
        }
        Command::Up {
            listen,
            public_url,
            stdio,
            route,
        } => {
            harden_process();
            let extra = match up::extra_routes(&stdio, &route) {
                Ok(routes) => routes,
                Err(e) => {
                    eprintln!("pforte: {e}");
                    return Ok(ExitCode::from(cli::exit::USAGE));
                }
            };
            return up_cmd(
                listen,
                config,
                data_dir.unwrap_or_else(|| PathBuf::from(".pforte")),
                public_url,
                extra,
            )
            .map_err(Failure::from);
        }
        Command::Token { action } => token_cmd(action, config, data_dir),
        Command::StdioExec {
            parent,
            uid,
            gid,
            command,
        } => {
            let run_as = uid.zip(gid);
            return Ok(pforte::stdio::exec_child(parent, run_as, &command));
        }
        Command::StdioAs { uid, gid, command } => {
            return Ok(pforte::stdio::exec_as(uid, gid, &command));
        }
        Command::User { action } => {
            let adds = matches!(action, UserAction::Add { .. });
            admin_cmd(config, data_dir, adds, |admin, now| {
                user_cmd(admin, action, now)
            })
        }
        Command::Client { action } => admin_cmd(config, data_dir, false, |admin, now| {
            client_cmd(admin, action, now)
        }),
        Command::Grant { action } => admin_cmd(config, data_dir, false, |admin, now| {
            grant_cmd(admin, action, now)
        }),
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// How `pforte check` names a route's upstream.
/// `serve` and `up` hold secrets (token and OAuth stores, keys, the environment): nobody but
/// root may read their memory or `/proc/<pid>/environ`, and they leave no core dump.
fn harden_process() {
    if let Err(e) = pforte::stdio::exec::not_dumpable() {
        eprintln!("pforte: PR_SET_DUMPABLE: {e}");
    }
}

fn describe_upstream(kind: &pforte::config::UpstreamKind) -> String {
    use pforte::config::UpstreamKind as K;
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

fn up_cmd(
    listen: SocketAddr,
    config: Option<PathBuf>,
    data_dir: PathBuf,
    public_url: Option<String>,
    extra_routes: Vec<pforte::config::RouteConfig>,
) -> anyhow::Result<ExitCode> {
    if let Err(e) = preflight::check_bind(listen) {
        eprintln!("pforte: {e}");
        return Ok(ExitCode::FAILURE);
    }
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let listen = server::resolve_port(listen)?;
    let socket = up::socket_dir(&data_dir)
        .with_context(|| format!("creating {}", data_dir.join("run").display()))?
        .join("mcp.sock");
    let child = ServiceChild::start(&up::find_service_bin()?, &socket, &data_dir.join("service"))?;

    let mut cfg = GatewayConfig::load(config.as_deref(), env)?;
    cfg.listen = listen;
    cfg.data_dir = data_dir.clone();
    cfg.public_url = public_url.or(cfg.public_url);
    let upstream = cfg.upstream.get_or_insert_with(Default::default);
    upstream.url = Some(child.upstream_url());
    upstream.urls = None;
    cfg.routes.extend(extra_routes);
    if !listen.ip().is_loopback() && cfg.tls.is_none() {
        let mut names = vec!["localhost".to_owned(), listen.ip().to_string()];
        if let Some(host) = cfg
            .public_url
            .as_deref()
            .and_then(|u| u.parse::<http::Uri>().ok())
            .and_then(|u| u.host().map(str::to_owned))
        {
            names.push(host);
        }
        cfg.tls = Some(tls::ensure_self_signed(&data_dir, &names)?);
    }
    let settings = match cfg
        .validate()
        .map_err(|e| e.to_string())
        .and_then(|s| preflight::check(&s).map(|()| s).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pforte: bad configuration: {e}");
            return Ok(ExitCode::from(cli::exit::USAGE));
        }
    };

    let stores = Stores::open(&settings.store_site())?;
    let store = &stores.tokens;
    const UP_TOKEN: &str = "pforte-up";
    const UP_USER: &str = "admin";
    let url = settings.resource();
    println!("Pforte is up.");
    println!("  MCP URL:   {url}");
    if store.exists(UP_TOKEN)? {
        println!("  Token:     the token '{UP_TOKEN}' created on the first run still works");
        println!(
            "             (lost it? `pforte token revoke {UP_TOKEN} --data-dir {}` and run again)",
            data_dir.display()
        );
        for line in up::route_lines(&settings.routes, "<token>") {
            println!("{line}");
        }
    } else {
        let token = store.create(
            UP_TOKEN,
            &settings.file.scopes,
            &[],
            None,
            SystemClock.now_secs(),
            &mut rand::rng(),
        )?;
        println!("  Token:     {token}");
        println!("             (shown once; only its hash is stored)");
        for line in up::route_lines(&settings.routes, &token.to_string()) {
            println!("{line}");
        }
    }
    let admin = Admin::new(stores.oauth.clone());
    let rt = stores.runtime.handle().clone();
    if !rt.block_on(admin.has_users())? {
        let password = admin.generate_password();
        rt.block_on(admin.add_user(UP_USER, &password))?;
        println!(
            "  Login:     user {UP_USER}, password {} (for Claude.ai and other OAuth clients;",
            password.expose()
        );
        println!(
            "             shown once; change it with `pforte user passwd {UP_USER} --data-dir {}`)",
            data_dir.display()
        );
    } else {
        println!(
            "  Login:     the users created earlier (`pforte user list --data-dir {}`)",
            data_dir.display()
        );
    }
    drop(admin);
    if settings.tls_enabled() && settings.file.public_url.is_none() {
        println!(
            "  TLS:       self-signed certificate in {}",
            data_dir.display()
        );
    }
    println!("Press Ctrl-C to stop.");

    let supervisor = background_service("mcp-service", child);
    server::run(settings, stores, vec![Box::new(supervisor)])?;
    Ok(ExitCode::SUCCESS)
}

/// The store a command works on: the config's data dir (or `--data-dir`), or redis.
struct StoreSite {
    cfg: GatewayConfig,
    /// True when the embedded store did not exist before this command.
    created: bool,
}

/// Finds the store. A reading command on a dir without one is refused (66) and creates
/// nothing; an adding command may create it and says so afterwards.
fn store_site(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    adds: bool,
) -> Result<StoreSite, Failure> {
    let mut cfg = GatewayConfig::load(config.as_deref(), env).map_err(bad_config)?;
    if let Some(dir) = data_dir {
        cfg.data_dir = dir;
    }
    let embedded = cfg.redis_url.is_none();
    let missing = embedded && !cli::has_store(&cfg.data_dir);
    if missing && !adds {
        return Err(Failure::NoStore(cfg.data_dir));
    }
    Ok(StoreSite {
        cfg,
        created: missing,
    })
}

impl StoreSite {
    /// Opens the stores (creating the data dir when this command may create the store).
    fn open(&self) -> Result<Stores, Failure> {
        if self.created {
            std::fs::create_dir_all(&self.cfg.data_dir).map_err(|e| {
                Failure::Unavailable(format!(
                    "cannot create {}: {e}",
                    self.cfg.data_dir.display()
                ))
            })?;
        }
        Stores::open(&Site::new(
            self.cfg.redis_url.as_deref(),
            &self.cfg.data_dir,
        ))
        .map_err(|e| Failure::Unavailable(e.to_string()))
    }

    fn announce(&self) {
        if self.created {
            eprintln!("pforte: {}", cli::new_store_message(&self.cfg.data_dir));
        }
    }
}

/// Opens the OAuth store named by the config (or `--data-dir`) and runs `f` on its admin API.
fn admin_cmd<F, Fut>(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    adds: bool,
    f: F,
) -> CmdResult
where
    F: FnOnce(Admin, u64) -> Fut,
    Fut: std::future::Future<Output = CmdResult>,
{
    let site = store_site(config, data_dir, adds)?;
    let stores = site.open()?;
    let admin = Admin::new(stores.oauth.clone());
    stores.runtime.block_on(f(admin, SystemClock.now_secs()))?;
    site.announce();
    Ok(())
}

/// Reads a password: a hidden prompt on a terminal, else one line of stdin. Never an argument.
fn read_password(prompt: &str) -> anyhow::Result<Secret> {
    use std::io::{BufRead as _, IsTerminal as _};
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(prompt)?;
        let again = rpassword::prompt_password("Again: ")?;
        if first != again {
            bail!("the passwords differ");
        }
        first
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    };
    if password.chars().count() < 8 {
        bail!("a password needs at least 8 characters");
    }
    Ok(Secret::new(password))
}

/// Prints a list: a JSON array with `--json`, else an aligned table (or the `empty` line).
fn print_list(
    list: ListArgs,
    json: Vec<serde_json::Value>,
    headers: &[&str],
    rows: Vec<Vec<String>>,
    empty: &str,
) -> CmdResult {
    if list.json {
        let text = serde_json::to_string_pretty(&json).map_err(|e| Failure::Other(e.into()))?;
        println!("{text}");
    } else {
        print!("{}", cli::table(headers, &rows, empty));
    }
    Ok(())
}

async fn user_cmd(admin: Admin, action: UserAction, now: u64) -> CmdResult {
    match action {
        UserAction::Add { username } => {
            let password = read_password(&format!("Password for {username}: "))?;
            admin.add_user(&username, &password).await?;
            println!("added user {username:?}");
        }
        UserAction::Passwd { username } => {
            let password = read_password(&format!("New password for {username}: "))?;
            admin.set_password(&username, &password).await?;
            println!("changed the password of {username:?}");
        }
        UserAction::List(list) => {
            let users = admin.list_users().await?;
            let json = users
                .iter()
                .map(|u| {
                    serde_json::json!({
                        "username": u.username,
                        "created_at": cli::rfc3339(u.created_at),
                        "password_changed_at": cli::rfc3339(u.updated_at),
                    })
                })
                .collect();
            let rows = users
                .iter()
                .map(|u| {
                    vec![
                        u.username.clone(),
                        cli::utc_minute(u.created_at),
                        format!(
                            "{} ({})",
                            cli::utc_minute(u.updated_at),
                            cli::relative(u.updated_at, now)
                        ),
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &["user", "created", "password changed"],
                rows,
                "no users",
            )?;
        }
        UserAction::Remove { username } => {
            admin.remove_user(&username).await?;
            println!("removed user {username:?} and revoked their grants");
        }
    }
    Ok(())
}

async fn client_cmd(admin: Admin, action: ClientAction, now: u64) -> CmdResult {
    match action {
        ClientAction::List(list) => {
            let clients = admin.list_clients().await?;
            let json = clients
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "client_id": c.client_id,
                        "client_name": c.client_name,
                        "auth_method": c.auth_method.as_str(),
                        "redirect_uris": c.redirect_uris,
                        "created_at": cli::rfc3339(c.created_at),
                        "last_used_at": cli::rfc3339(c.last_used_at),
                    })
                })
                .collect();
            let rows = clients
                .iter()
                .map(|c| {
                    vec![
                        c.client_id.clone(),
                        c.client_name.clone().unwrap_or_else(|| "-".to_owned()),
                        c.auth_method.as_str().to_owned(),
                        cli::utc_minute(c.created_at),
                        format!(
                            "{} ({})",
                            cli::utc_minute(c.last_used_at),
                            cli::relative(c.last_used_at, now)
                        ),
                        c.redirect_uris.join(" "),
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &[
                    "client",
                    "name",
                    "auth",
                    "registered",
                    "last used",
                    "redirect URIs",
                ],
                rows,
                "no clients",
            )?;
        }
        ClientAction::Remove { client_id } => {
            admin.remove_client(&client_id).await?;
            println!("removed client {client_id:?} and revoked its grants");
        }
    }
    Ok(())
}

async fn grant_cmd(admin: Admin, action: GrantAction, now: u64) -> CmdResult {
    match action {
        GrantAction::List {
            user,
            client,
            all,
            list,
        } => {
            let filter = GrantFilter {
                username: user,
                client_id: client,
                include_inactive: all,
            };
            let grants = admin.list_grants(&filter).await?;
            let state = |g: &pforte_oauth::model::GrantRecord| {
                if g.revoked_at.is_some() {
                    "revoked"
                } else if g.expires_at <= now {
                    "expired"
                } else {
                    "active"
                }
            };
            let json = grants
                .iter()
                .map(|g| {
                    serde_json::json!({
                        "id": g.family_id,
                        "state": state(g),
                        "username": g.username,
                        "client_id": g.client_id,
                        "scopes": g.scopes,
                        "created_at": cli::rfc3339(g.created_at),
                        "last_used_at": cli::rfc3339(g.last_used_at),
                        "expires_at": cli::rfc3339(g.expires_at),
                        "revoked_at": g.revoked_at.map(cli::rfc3339),
                    })
                })
                .collect();
            let rows = grants
                .iter()
                .map(|g| {
                    vec![
                        g.family_id.clone(),
                        state(g).to_owned(),
                        g.username.clone(),
                        g.client_id.clone(),
                        cli::utc_minute(g.created_at),
                        cli::expiry(Some(g.expires_at), now),
                        g.scopes.join(" "),
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &[
                    "grant", "state", "user", "client", "created", "expires", "scopes",
                ],
                rows,
                "no grants",
            )?;
        }
        GrantAction::Revoke {
            id: Some(id),
            user: None,
            client: None,
        } => {
            admin.revoke_grant(&id).await?;
            println!("revoked grant {id}");
        }
        GrantAction::Revoke {
            id: None,
            user,
            client,
        } if user.is_some() || client.is_some() => {
            let n = admin
                .revoke_grants(&GrantFilter {
                    username: user,
                    client_id: client,
                    include_inactive: false,
                })
                .await?;
            println!("revoked {n} grant(s)");
        }
        GrantAction::Revoke { .. } => {
            return Err(Failure::Usage(
                "name one grant id, or --user and/or --client".to_owned(),
            ));
        }
    }
    Ok(())
}

/// Parses `90d`, `12h`, `30m`, `45s` into seconds.
fn parse_lifetime(s: &str) -> anyhow::Result<u64> {
    let (num, unit) = s.split_at(s.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len());
    let n: u64 = num
        .parse()
        .with_context(|| format!("{s:?}: expected e.g. 90d, 12h, 30m"))?;
    let factor = match unit {
        "d" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" | "" => 1,
        _ => bail!("{s:?}: unit must be d, h, m or s"),
    };
    n.checked_mul(factor)
        .filter(|&v| v > 0)
        .context("lifetime out of range")
}

fn token_cmd(action: TokenAction, config: Option<PathBuf>, data_dir: Option<PathBuf>) -> CmdResult {
    let adds = matches!(action, TokenAction::Create { .. });
    // Without a config file the routes are unknown here: only their names are checked.
    let routes_known = config.is_some();
    let site = store_site(config, data_dir, adds)?;
    let cfg = &site.cfg;
    let stores = site.open()?;
    let store = &stores.tokens;
    let now = SystemClock.now_secs();
    match action {
        TokenAction::Create {
            name,
            scopes,
            expires,
            routes,
        } => {
            if let Some(bad) = routes.iter().find(|r| !pforte::config::valid_route_name(r)) {
                return Err(Failure::Usage(format!(
                    "--route {bad:?}: a route name is 1 to 63 characters of a-z, 0-9 and '-'"
                )));
            }
            let known = cfg.route_names();
            if let Some(unknown) = routes
                .iter()
                .find(|r| routes_known && !known.contains(&r.as_str()))
            {
                return Err(Failure::Usage(format!(
                    "unknown route {unknown:?}; configured routes: {}",
                    known.join(" ")
                )));
            }
            let scopes = if scopes.is_empty() {
                cfg.scopes.clone()
            } else {
                scopes
            };
            if let Some(unknown) = scopes.iter().find(|s| !cfg.scopes.contains(s)) {
                return Err(Failure::Usage(format!(
                    "unknown scope {unknown:?}; configured scopes: {}",
                    cfg.scopes.join(" ")
                )));
            }
            let expires_at = expires
                .as_deref()
                .map(parse_lifetime)
                .transpose()
                .map_err(|e| Failure::Usage(format!("--expires {e:#}")))?
                .map(|secs| now + secs);
            let token = store.create(&name, &scopes, &routes, expires_at, now, &mut rand::rng())?;
            let opens = if routes.is_empty() {
                "every route".to_owned()
            } else {
                format!("routes {:?}", routes.join(" "))
            };
            eprintln!(
                "Created token {name:?} with scopes {:?} for {opens}. It is shown once:",
                scopes.join(" ")
            );
            println!("{token}");
        }
        TokenAction::List(list) => {
            let tokens = store.list()?;
            let state = |t: &tokens::StaticToken| match (t.revoked_at, t.expires_at) {
                (Some(_), _) => "revoked",
                (None, Some(at)) if at <= now => "expired",
                _ => "active",
            };
            let json = tokens
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "name": t.name,
                        "state": state(t),
                        "scopes": t.scopes,
                        "routes": t.routes,
                        "created_at": cli::rfc3339(t.created_at),
                        "expires_at": t.expires_at.map(cli::rfc3339),
                        "revoked_at": t.revoked_at.map(cli::rfc3339),
                    })
                })
                .collect();
            let rows = tokens
                .iter()
                .map(|t| {
                    vec![
                        t.name.clone(),
                        state(t).to_owned(),
                        cli::utc_minute(t.created_at),
                        cli::expiry(t.expires_at, now),
                        t.scopes.join(" "),
                        if t.routes.is_empty() {
                            "*".to_owned()
                        } else {
                            t.routes.join(" ")
                        },
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &["name", "state", "created", "expires", "scopes", "routes"],
                rows,
                "no tokens",
            )?;
        }
        TokenAction::Revoke { name } => {
            if store.revoke(&name, now)? {
                println!("revoked {name:?}");
            } else {
                return Err(Failure::Other(anyhow::anyhow!(
                    "no active token named {name:?}"
                )));
            }
        }
    }
    site.announce();
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lifetimes() {
        assert_eq!(parse_lifetime("90d").unwrap(), 90 * 86_400);
        assert_eq!(parse_lifetime("12h").unwrap(), 12 * 3_600);
        assert!(parse_lifetime("12x").is_err());
        assert!(parse_lifetime("0h").is_err());
        assert!(parse_lifetime("h").is_err());
    }
}
