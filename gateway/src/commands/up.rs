//! `pforte up`: the whole stack on one machine. The command starts the mcp-service child, builds
//! the configuration around it, opens the stores once, provisions what a first run needs (a
//! certificate off loopback, the first static token, the first user and their password: plain
//! functions below), prints the banner and runs the gateway.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
};

use crate::{
    cli,
    config::{RouteConfig, TlsFiles},
    preflight, runtime,
    stores::Stores,
    tls, tokens,
    up::{self, ServiceChild},
};
use anyhow::Context as _;
use pforte_clock::{Clock as _, SystemClock};
use pforte_oauth::{Admin, AdminError, Secret};
use pingora::services::background::background_service;

use super::{Env, Failure, harden_process, read_config, validated};

/// The static token `up` creates on its first run.
const UP_TOKEN: &str = "pforte-up";
/// The user `up` creates while the store has none.
const UP_USER: &str = "admin";

// `pforte up`'s flags (no doc comment: the subcommand's help is the `Up` variant's).
#[derive(clap::Args)]
pub struct UpArgs {
    /// Public listener (default 127.0.0.1:8787; with --acme 0.0.0.0:443). Off loopback
    /// without --acme, a self-signed certificate is generated.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The URL clients use, when it differs from the listen address.
    #[arg(long)]
    public_url: Option<String>,
    /// Obtain a publicly trusted certificate for --public-url's host from Let's Encrypt
    /// (tls-alpn-01 on the listener, port 443 by default), with this contact address.
    #[arg(long, value_name = "EMAIL")]
    acme: Option<String>,
    /// A stdio MCP server behind the gateway at /NAME/mcp: NAME='COMMAND ARGS…' (shell
    /// words; repeatable), e.g. --stdio notes='npx -y @modelcontextprotocol/server-filesystem /srv/notes'.
    #[arg(long = "stdio", value_name = "NAME=COMMAND")]
    stdio: Vec<String>,
    /// A streamable-HTTP MCP server behind the gateway at /NAME/mcp: NAME=URL (http://,
    /// https:// or unix:PATH; repeatable).
    #[arg(long = "route", value_name = "NAME=URL")]
    route: Vec<String>,
}

/// Runs `pforte up` (data dir `.pforte` unless `--data-dir` names one) until stopped.
pub fn up(
    args: UpArgs,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> Result<ExitCode, Failure> {
    harden_process();
    let extra = match up::extra_routes(&args.stdio, &args.route) {
        Ok(routes) => routes,
        Err(e) => {
            eprintln!("pforte: {e}");
            return Ok(ExitCode::from(cli::exit::USAGE));
        }
    };
    if args.acme.is_some()
        && !args
            .public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"))
    {
        eprintln!(
            "pforte: --acme needs --public-url https://HOST (the name the certificate is for, \
             whose DNS points at this machine)"
        );
        return Ok(ExitCode::from(cli::exit::USAGE));
    }
    let data_dir = data_dir.unwrap_or_else(|| PathBuf::from(".pforte"));
    let listen = default_listen(args.listen, args.acme.is_some());
    let public = Public {
        url: args.public_url,
        acme: args.acme,
    };
    run(listen, config, data_dir, public, extra, env).map_err(Failure::from)
}

/// What `up` is told about its public side: the URL, and the ACME contact address.
struct Public {
    url: Option<String>,
    acme: Option<String>,
}

/// The listener `up` takes without `--listen`: port 443 on every address with `--acme` (the
/// CA's tls-alpn-01 probe and Claude.ai come there), else loopback 8787.
fn default_listen(given: Option<SocketAddr>, acme: bool) -> SocketAddr {
    given.unwrap_or(if acme {
        SocketAddr::from(([0, 0, 0, 0], 443))
    } else {
        SocketAddr::from(([127, 0, 0, 1], 8787))
    })
}

fn run(
    listen: SocketAddr,
    config: Option<PathBuf>,
    data_dir: PathBuf,
    public: Public,
    extra_routes: Vec<RouteConfig>,
    env: &Env,
) -> anyhow::Result<ExitCode> {
    let public_url = public.url;
    if let Err(e) = preflight::check_bind(listen, preflight::ListenKnob::Flag) {
        eprintln!("pforte: {e}");
        return Ok(ExitCode::FAILURE);
    }
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let listen = runtime::resolve_port(listen)?;
    let socket = up::socket_dir(&data_dir)
        .with_context(|| format!("creating {}", data_dir.join("run").display()))?
        .join("mcp.sock");
    let child = ServiceChild::start(&up::find_service_bin()?, &socket, &data_dir.join("service"))?;

    let mut cfg = read_config(config.as_deref(), env)?;
    cfg.listen = listen;
    cfg.data_dir = data_dir.clone();
    cfg.public_url = public_url.or(cfg.public_url);
    let upstream = cfg.upstream.get_or_insert_with(Default::default);
    upstream.url = Some(child.upstream_url());
    upstream.urls = None;
    cfg.routes.extend(extra_routes);
    if let Some(email) = public.acme {
        let tls = cfg.tls.get_or_insert_with(Default::default);
        tls.acme.get_or_insert_with(Default::default).email = Some(email);
    }
    if cfg.tls.is_none() {
        cfg.tls = certificate(listen, cfg.public_url.as_deref(), &data_dir)?.map(|files| {
            crate::config::TlsConfig {
                cert: Some(files.cert),
                key: Some(files.key),
                ..Default::default()
            }
        });
    }
    let public_url_given = cfg.public_url.is_some();
    let settings = match validated(cfg, env) {
        Ok(s) => s,
        // `pforte: bad configuration: …`, exit 64.
        Err(failure) => return Ok(failure.report()),
    };

    let stores = Stores::open(&settings.store)?;
    println!("Pforte is up.");
    println!("  MCP URL:   {}", settings.resource());
    let token = first_token(
        stores.tokens.as_ref(),
        &settings.scopes,
        SystemClock.now_secs(),
    )?;
    match &token {
        Some(token) => {
            println!("  Token:     {token}");
            println!("             (shown once; only its hash is stored)");
        }
        None => {
            println!("  Token:     the token '{UP_TOKEN}' created on the first run still works");
            println!(
                "             (lost it? `pforte token revoke {UP_TOKEN} --data-dir {}` and run again)",
                data_dir.display()
            );
        }
    }
    for line in up::route_lines(&settings.routes, token.as_deref().unwrap_or("<token>")) {
        println!("{line}");
    }
    let admin = Admin::new(stores.oauth.clone());
    match stores.runtime.block_on(first_user(&admin))? {
        Some(password) => {
            println!(
                "  Login:     user {UP_USER}, password {} (for Claude.ai and other OAuth clients;",
                password.expose()
            );
            println!(
                "             shown once; change it with `pforte user passwd {UP_USER} --data-dir {}`)",
                data_dir.display()
            );
        }
        None => println!(
            "  Login:     the users created earlier (`pforte user list --data-dir {}`)",
            data_dir.display()
        ),
    }
    drop(admin);
    for line in acme_lines(&settings) {
        println!("{line}");
    }
    if settings.tls_enabled() && !public_url_given {
        println!(
            "  TLS:       self-signed certificate in {}",
            data_dir.display()
        );
    }
    println!("Press Ctrl-C to stop.");

    let supervisor = background_service("mcp-service", child);
    runtime::run(settings, stores, vec![Box::new(supervisor)])?;
    Ok(ExitCode::SUCCESS)
}

/// The banner's lines about an ACME certificate: where it comes from, and the URL to give
/// Claude.ai once it is there.
fn acme_lines(settings: &crate::config::Settings) -> Vec<String> {
    let Some(acme) = settings.listen.tls.as_ref().and_then(|t| t.acme.as_ref()) else {
        return Vec::new();
    };
    vec![
        format!(
            "  TLS:       certificate for {} from {} ({}; obtained now, renewed automatically)",
            acme.domains.join(", "),
            acme.directory,
            acme.challenge.as_str()
        ),
        format!(
            "  Claude.ai: Settings → Connectors → Add custom connector, URL {}",
            settings.resource()
        ),
    ]
}

/// The names a generated certificate is for: a listener off loopback gets one for
/// `localhost`, its IP and the public URL's host; on loopback, none is needed.
fn certificate_names(listen: SocketAddr, public_url: Option<&str>) -> Option<Vec<String>> {
    if listen.ip().is_loopback() {
        return None;
    }
    let mut names = vec!["localhost".to_owned(), listen.ip().to_string()];
    if let Some(host) = public_url
        .and_then(|u| u.parse::<http::Uri>().ok())
        .and_then(|u| u.host().map(str::to_owned))
    {
        names.push(host);
    }
    Some(names)
}

/// The self-signed certificate in `data_dir` (generated on the first run) when the listener is
/// off loopback and the configuration names none.
fn certificate(
    listen: SocketAddr,
    public_url: Option<&str>,
    data_dir: &Path,
) -> Result<Option<TlsFiles>, tls::TlsError> {
    certificate_names(listen, public_url)
        .map(|names| tls::ensure_self_signed(data_dir, &names))
        .transpose()
}

/// The first run's static token (`scopes`, every route, no expiry): its value, the only time it
/// exists outside a client; `None` when an earlier run created it and it still works.
fn first_token(
    store: &dyn tokens::TokenSource,
    scopes: &[String],
    now: u64,
) -> Result<Option<String>, tokens::StoreError> {
    if store.exists(UP_TOKEN)? {
        return Ok(None);
    }
    store
        .create(
            &crate::tokens::NewToken {
                name: UP_TOKEN,
                scopes,
                routes: &[],
                expires_at: None,
            },
            now,
            &mut rand::rng(),
        )
        .map(Some)
}

/// The first user, with a generated password, while the store has no user: the password (shown
/// once); `None` when users exist. It is an admin: the one who ran `up` sees and revokes every
/// user's connected apps at `/account`.
async fn first_user(admin: &Admin) -> Result<Option<Secret>, AdminError> {
    if admin.has_users().await? {
        return Ok(None);
    }
    let password = admin.generate_password();
    admin.add_user(UP_USER, &password).await?;
    admin.set_admin(UP_USER, true).await?;
    Ok(Some(password))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::stores::Site;

    use super::*;

    #[test]
    fn acme_listens_on_443_and_the_banner_names_the_connector_url() {
        assert_eq!(default_listen(None, true), "0.0.0.0:443".parse().unwrap());
        assert_eq!(
            default_listen(None, false),
            "127.0.0.1:8787".parse().unwrap()
        );
        let given = "127.0.0.1:9443".parse().unwrap();
        assert_eq!(default_listen(Some(given), true), given);
        let settings = toml::from_str::<crate::config::GatewayConfig>(
            "listen = \"0.0.0.0:443\"\npublic_url = \"https://mcp.example.com\"\n[tls.acme]\nemail = \"ops@example.com\"",
        )
        .unwrap()
        .validate()
        .unwrap();
        let lines = acme_lines(&settings);
        assert!(lines[0].contains("certificate for mcp.example.com from https://acme-v02.api.letsencrypt.org/directory (tls-alpn-01"), "{lines:?}");
        assert!(
            lines[1].ends_with("URL https://mcp.example.com/mcp"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_certificate_only_off_loopback_for_its_ip_and_the_public_host() {
        assert_eq!(
            certificate_names("127.0.0.1:8787".parse().unwrap(), None),
            None
        );
        assert_eq!(
            certificate_names(
                "10.0.0.5:443".parse().unwrap(),
                Some("https://gw.example.org/")
            ),
            Some(vec![
                "localhost".to_owned(),
                "10.0.0.5".to_owned(),
                "gw.example.org".to_owned()
            ])
        );
    }

    #[test]
    fn the_first_run_creates_one_token_and_one_user_and_a_second_run_neither() {
        let dir = tempfile::tempdir().unwrap();
        let stores = Stores::open(&Site::Embedded(dir.path().to_path_buf())).unwrap();
        let scopes = vec!["mcp".to_owned()];
        let token = first_token(stores.tokens.as_ref(), &scopes, 1_000).unwrap();
        assert!(token.is_some_and(|t| t.starts_with("pft_")));
        assert_eq!(
            first_token(stores.tokens.as_ref(), &scopes, 1_001).unwrap(),
            None
        );
        assert_eq!(stores.tokens.list().unwrap().len(), 1);

        let admin = Admin::new(stores.oauth.clone());
        let password = stores.runtime.block_on(first_user(&admin)).unwrap();
        assert!(password.is_some());
        assert!(
            stores
                .runtime
                .block_on(first_user(&admin))
                .unwrap()
                .is_none()
        );
        let users = stores.runtime.block_on(admin.list_users()).unwrap();
        assert_eq!(
            users
                .iter()
                .map(|u| u.username.as_str())
                .collect::<Vec<_>>(),
            [UP_USER]
        );
        assert!(users[0].admin, "up's first user is an admin");
    }
}
