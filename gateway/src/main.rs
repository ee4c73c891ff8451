//! The `pforte` binary: command-line parsing and process wiring only.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use pforte::{
    clock::{Clock as _, SystemClock},
    config::{GatewayConfig, Settings},
    preflight, server, tls, tokens,
    up::{self, ServiceChild},
};
use pforte_oauth::{
    admin::{Admin, GrantFilter},
    crypto::Secret,
    store::{
        redis::{DEFAULT_PREFIX, RedisStore},
        sqlite::SqliteStore,
    },
};
use pingora::services::background::background_service;
use std::sync::Arc;

/// Exit code for a configuration that does not validate (EX_USAGE).
const EXIT_BAD_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "pforte",
    version,
    about = "The auth gateway in front of MCP services"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Validate a configuration and exit (64 when it is bad).
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run the whole stack locally: gateway + mcp-service, embedded store, first token.
    Up {
        /// Public listener. Off loopback, a self-signed certificate is generated.
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: SocketAddr,
        #[arg(long, default_value = ".pforte")]
        data_dir: PathBuf,
        /// The URL clients use, when it differs from the listen address.
        #[arg(long)]
        public_url: Option<String>,
    },
    /// Manage the users who log in on the consent page.
    User {
        #[command(subcommand)]
        action: UserAction,
        #[arg(long, global = true)]
        config: Option<PathBuf>,
        #[arg(long, global = true)]
        data_dir: Option<PathBuf>,
    },
    /// Manage registered OAuth clients.
    Client {
        #[command(subcommand)]
        action: ClientAction,
        #[arg(long, global = true)]
        config: Option<PathBuf>,
        #[arg(long, global = true)]
        data_dir: Option<PathBuf>,
    },
    /// Inspect and revoke OAuth grants (a user's consent to a client, with its tokens).
    Grant {
        #[command(subcommand)]
        action: GrantAction,
        #[arg(long, global = true)]
        config: Option<PathBuf>,
        #[arg(long, global = true)]
        data_dir: Option<PathBuf>,
    },
    /// Manage static bearer tokens.
    Token {
        #[command(subcommand)]
        action: TokenAction,
        /// Config file naming the data dir.
        #[arg(long, global = true)]
        config: Option<PathBuf>,
        /// Data dir (overrides the config).
        #[arg(long, global = true)]
        data_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum UserAction {
    /// Add a user; the password is read from a prompt, or from stdin when it is not a terminal.
    Add {
        username: String,
    },
    /// Change a user's password (prompt or stdin).
    Passwd {
        username: String,
    },
    List,
    /// Remove a user and revoke their grants.
    Remove {
        username: String,
    },
}

#[derive(Subcommand)]
enum ClientAction {
    List,
    /// Remove a client and revoke its grants.
    Remove {
        client_id: String,
    },
}

#[derive(Subcommand)]
enum GrantAction {
    /// List grants, optionally for one user or client.
    List {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        client: Option<String>,
        /// Include revoked and expired grants.
        #[arg(long)]
        all: bool,
    },
    /// Revoke grants: one by id, or every grant of a user and/or client.
    Revoke {
        id: Option<String>,
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        client: Option<String>,
    },
}

#[derive(Subcommand)]
enum TokenAction {
    /// Create a token and print it once.
    Create {
        name: String,
        /// Scope to grant; repeat for several. Default: every configured scope.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Lifetime, e.g. 90d, 12h, 30m. Default: no expiry.
        #[arg(long)]
        expires: Option<String>,
    },
    /// List tokens (never their values).
    List,
    /// Revoke a token; a running gateway refuses it within a second.
    Revoke { name: String },
}

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
        if preflight::is_startup_panic(message) {
            let first = message.lines().next().unwrap_or(message);
            eprintln!("pforte: cannot start: {first}");
            std::process::exit(1);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    install_panic_hook();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,pingora_core=warn,pingora_proxy=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pforte: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Loads and validates, printing the reason and choosing exit 64 on failure.
fn settings(config: Option<&std::path::Path>) -> Result<Settings, ExitCode> {
    GatewayConfig::load(config, env)
        .and_then(|mut cfg| {
            cfg.listen = server::resolve_port(cfg.listen).map_err(|e| {
                pforte::config::ConfigError::Invalid {
                    field: "listen",
                    reason: e.to_string(),
                }
            })?;
            cfg.validate()
        })
        .map_err(|e| e.to_string())
        .and_then(|s| match preflight::check(&s) {
            Ok(()) => Ok(s),
            Err(e) => Err(e.to_string()),
        })
        .map_err(|e| {
            eprintln!("pforte: bad configuration: {e}");
            ExitCode::from(EXIT_BAD_CONFIG)
        })
}

/// Binds the public listener once before anything prints success; one line when it cannot.
fn can_listen(addr: SocketAddr) -> Result<(), ExitCode> {
    preflight::check_bind(addr).map_err(|e| {
        eprintln!("pforte: {e}");
        ExitCode::FAILURE
    })
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check { config } => match settings(config.as_deref()) {
            Ok(s) => {
                println!(
                    "configuration ok: {} → {}",
                    s.resource(),
                    s.file.upstream.url
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(code) => Ok(code),
        },
        Command::Serve { config } => {
            let s = match settings(config.as_deref()) {
                Ok(s) => s,
                Err(code) => return Ok(code),
            };
            if let Err(code) = can_listen(s.file.listen) {
                return Ok(code);
            }
            println!("pforte listening on {} (MCP: {})", s.base_url, s.resource());
            server::run(s, Vec::new())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Up {
            listen,
            data_dir,
            public_url,
        } => up_cmd(listen, data_dir, public_url),
        Command::Token {
            action,
            config,
            data_dir,
        } => token_cmd(action, config, data_dir),
        Command::User {
            action,
            config,
            data_dir,
        } => admin_cmd(config, data_dir, |admin| user_cmd(admin, action)),
        Command::Client {
            action,
            config,
            data_dir,
        } => admin_cmd(config, data_dir, |admin| client_cmd(admin, action)),
        Command::Grant {
            action,
            config,
            data_dir,
        } => admin_cmd(config, data_dir, |admin| grant_cmd(admin, action)),
    }
}

fn up_cmd(
    listen: SocketAddr,
    data_dir: PathBuf,
    public_url: Option<String>,
) -> anyhow::Result<ExitCode> {
    if let Err(code) = can_listen(listen) {
        return Ok(code);
    }
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let listen = server::resolve_port(listen)?;
    let service_listen = server::resolve_port(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let child = ServiceChild::start(
        &up::find_service_bin(),
        service_listen,
        &data_dir.join("service"),
    )?;

    let mut cfg = GatewayConfig::load(None, env)?;
    cfg.listen = listen;
    cfg.data_dir = data_dir.clone();
    cfg.public_url = public_url.or(cfg.public_url);
    cfg.upstream.url = child.upstream_url();
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
            return Ok(ExitCode::from(EXIT_BAD_CONFIG));
        }
    };

    let store = tokens::open_source(settings.file.redis_url.as_deref(), &settings.tokens_db())?;
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
        println!("  Claude Code:");
        println!(
            "    claude mcp add --transport http pforte {url} --header \"Authorization: Bearer <token>\""
        );
    } else {
        let token = store.create(
            UP_TOKEN,
            &settings.file.scopes,
            None,
            SystemClock.now(),
            &mut rand::rng(),
        )?;
        println!("  Token:     {token}");
        println!("             (shown once; only its hash is stored)");
        println!("  Claude Code:");
        println!(
            "    claude mcp add --transport http pforte {url} --header \"Authorization: Bearer {token}\""
        );
    }
    let admin = Admin::new(Arc::new(SqliteStore::open(&settings.oauth_db())?));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
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
    drop(rt);
    if settings.tls_enabled() && settings.file.public_url.is_none() {
        println!(
            "  TLS:       self-signed certificate in {}",
            data_dir.display()
        );
    }
    println!("Press Ctrl-C to stop.");
    drop(store);

    let supervisor = background_service("mcp-service", child);
    server::run(settings, vec![Box::new(supervisor)])?;
    Ok(ExitCode::SUCCESS)
}

/// Opens the OAuth store named by the config (or `--data-dir`) and runs `f` on its admin API.
fn admin_cmd<F, Fut>(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    f: F,
) -> anyhow::Result<ExitCode>
where
    F: FnOnce(Admin) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<ExitCode>>,
{
    let mut cfg = match GatewayConfig::load(config.as_deref(), env) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("pforte: bad configuration: {e}");
            return Ok(ExitCode::from(EXIT_BAD_CONFIG));
        }
    };
    if let Some(dir) = data_dir {
        cfg.data_dir = dir;
    }
    std::fs::create_dir_all(&cfg.data_dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let store: Arc<dyn pforte_oauth::store::Store> = match &cfg.redis_url {
        Some(url) => {
            let _in_runtime = rt.enter();
            Arc::new(RedisStore::connect(url, DEFAULT_PREFIX)?)
        }
        None => Arc::new(SqliteStore::open(&cfg.data_dir.join("oauth.db"))?),
    };
    let admin = Admin::new(store);
    rt.block_on(f(admin))
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

async fn user_cmd(admin: Admin, action: UserAction) -> anyhow::Result<ExitCode> {
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
        UserAction::List => {
            for u in admin.list_users().await? {
                println!("{:<32} created {}", u.username, u.created_at);
            }
        }
        UserAction::Remove { username } => {
            admin.remove_user(&username).await?;
            println!("removed user {username:?} and revoked their grants");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn client_cmd(admin: Admin, action: ClientAction) -> anyhow::Result<ExitCode> {
    match action {
        ClientAction::List => {
            for c in admin.list_clients().await? {
                println!(
                    "{:<40} {:<24} {:?} last used {} redirects {}",
                    c.client_id,
                    c.client_name.as_deref().unwrap_or("-"),
                    c.auth_method,
                    c.last_used_at,
                    c.redirect_uris.join(" ")
                );
            }
        }
        ClientAction::Remove { client_id } => {
            admin.remove_client(&client_id).await?;
            println!("removed client {client_id:?} and revoked its grants");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn grant_cmd(admin: Admin, action: GrantAction) -> anyhow::Result<ExitCode> {
    match action {
        GrantAction::List { user, client, all } => {
            let filter = GrantFilter {
                username: user,
                client_id: client,
                include_inactive: all,
            };
            for g in admin.list_grants(&filter).await? {
                let state = if g.revoked_at.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                println!(
                    "{:<36} {:<8} user {:<16} client {:<40} scopes {}",
                    g.family_id,
                    state,
                    g.username,
                    g.client_id,
                    g.scopes.join(" ")
                );
            }
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
        GrantAction::Revoke { .. } => bail!("name one grant id, or --user and/or --client"),
    }
    Ok(ExitCode::SUCCESS)
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

fn token_cmd(
    action: TokenAction,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let mut cfg = match GatewayConfig::load(config.as_deref(), env) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("pforte: bad configuration: {e}");
            return Ok(ExitCode::from(EXIT_BAD_CONFIG));
        }
    };
    if let Some(dir) = data_dir {
        cfg.data_dir = dir;
    }
    let db = cfg.data_dir.join("pforte.db");
    let store = tokens::open_source(cfg.redis_url.as_deref(), &db)?;
    let now = SystemClock.now();
    match action {
        TokenAction::Create {
            name,
            scopes,
            expires,
        } => {
            let scopes = if scopes.is_empty() {
                cfg.scopes.clone()
            } else {
                scopes
            };
            if let Some(unknown) = scopes.iter().find(|s| !cfg.scopes.contains(s)) {
                bail!(
                    "unknown scope {unknown:?}; configured scopes: {}",
                    cfg.scopes.join(" ")
                );
            }
            let expires_at = expires
                .as_deref()
                .map(parse_lifetime)
                .transpose()?
                .map(|secs| now + secs);
            let token = store.create(&name, &scopes, expires_at, now, &mut rand::rng())?;
            eprintln!(
                "Created token {name:?} with scopes {:?}. It is shown once:",
                scopes.join(" ")
            );
            println!("{token}");
        }
        TokenAction::List => {
            println!(
                "{:<24} {:<10} {:<24} {:<12} scopes",
                "name", "state", "created", "expires"
            );
            for t in store.list()? {
                let state = match (t.revoked_at, t.expires_at) {
                    (Some(_), _) => "revoked",
                    (None, Some(at)) if at <= now => "expired",
                    _ => "active",
                };
                let expires = t.expires_at.map_or("never".to_owned(), |at| {
                    format!("in {}h", at.saturating_sub(now) / 3600)
                });
                println!(
                    "{:<24} {:<10} {:<24} {:<12} {}",
                    t.name,
                    state,
                    t.created_at,
                    expires,
                    t.scopes.join(" ")
                );
            }
        }
        TokenAction::Revoke { name } => {
            if store.revoke(&name, now)? {
                println!("revoked {name:?}");
            } else {
                eprintln!("pforte: no active token named {name:?}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
