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
    stores::{Needs, Stores},
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
    /// Public listener (default: the config file's `listen`, else 127.0.0.1:8787, with --acme
    /// 0.0.0.0:443). Off loopback without --acme, a self-signed certificate is generated.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The URL clients use, when it differs from the listen address (default: the config
    /// file's `public_url`).
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
    // The file (and `PFORTE_*`) under the flags: `--listen`, `--data-dir` and `--public-url`
    // win, else what the configuration says, else `up`'s defaults.
    let mut cfg = match read_config(config.as_deref(), env) {
        Ok(cfg) => cfg,
        Err(e) => return Ok(super::bad_config(e).report()),
    };
    let configured = configured_listen(config.as_deref(), env);
    let listen = choose_listen(
        args.listen,
        configured.then_some(cfg.listen),
        args.acme.is_some(),
    );
    let knob = if args.listen.is_some() || !configured {
        preflight::ListenKnob::Flag
    } else {
        preflight::ListenKnob::Config
    };
    if let Some(dir) = data_dir {
        cfg.data_dir = dir;
    }
    if let Some(url) = args.public_url {
        cfg.public_url = Some(url);
    }
    if args.acme.is_some()
        && !cfg
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
    let public = Public {
        listen,
        knob,
        acme: args.acme,
    };
    run(cfg, public, extra, env).map_err(Failure::from)
}

/// What `up` decided about its public side: the listener (and where that came from, for the
/// advice when it cannot bind), and the ACME contact address.
struct Public {
    listen: SocketAddr,
    knob: preflight::ListenKnob,
    acme: Option<String>,
}

/// The listener `up` takes: `--listen`, else the configuration's `listen` (when the file or
/// `PFORTE_LISTEN` sets one), else port 443 on every address with `--acme` (the CA's
/// tls-alpn-01 probe and Claude.ai come there), else loopback 8787.
fn choose_listen(
    flag: Option<SocketAddr>,
    configured: Option<SocketAddr>,
    acme: bool,
) -> SocketAddr {
    flag.or(configured).unwrap_or(if acme {
        SocketAddr::from(([0, 0, 0, 0], 443))
    } else {
        SocketAddr::from(([127, 0, 0, 1], 8787))
    })
}

/// Whether the configuration names a listener: `PFORTE_LISTEN`, or a top-level `listen` key in
/// the file (the file's default, 127.0.0.1:8787, is not a choice the operator made).
fn configured_listen(config: Option<&Path>, env: &Env) -> bool {
    env.get("PFORTE_LISTEN").is_some()
        || config
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|text| text.parse::<toml::Table>().ok())
            .is_some_and(|t| t.contains_key("listen"))
}

fn run(
    mut cfg: crate::config::GatewayConfig,
    public: Public,
    extra_routes: Vec<RouteConfig>,
    env: &Env,
) -> anyhow::Result<ExitCode> {
    let data_dir = cfg.data_dir.clone();
    if let Err(e) = preflight::check_bind(public.listen, public.knob) {
        eprintln!("pforte: {e}");
        return Ok(ExitCode::FAILURE);
    }
    if let Err(e) = crate::cli::prepare_data_dir(&data_dir) {
        return Ok(Failure::Usage(e).report());
    }
    let listen = runtime::resolve_port(public.listen)?;
    let socket = up::socket_dir(&data_dir)
        .with_context(|| format!("creating {}", data_dir.join("run").display()))?
        .join("mcp.sock");
    let child = ServiceChild::start(&up::find_service_bin()?, &socket, &data_dir.join("service"))?;

    cfg.listen = listen;
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

    let stores = Stores::open(
        &settings.store,
        Needs::serve(&settings),
        std::sync::Arc::new(SystemClock),
    )?;
    println!("Pforte is up.");
    println!("  Listening: {}", listening(&settings));
    println!("  MCP URL:   {}", settings.resource());
    let token = first_token(
        stores.tokens()?.as_ref(),
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
    for line in up::route_lines(
        &settings.routes,
        &settings.virtuals,
        token.as_deref().unwrap_or("<token>"),
    ) {
        println!("{line}");
    }
    let admin = Admin::new(stores.oauth()?.clone());
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
    runtime::serve(settings, stores, vec![Box::new(supervisor)], || {})?;
    Ok(ExitCode::SUCCESS)
}

/// Where the gateway listens, as the banner says it: the scheme and the bound address.
fn listening(settings: &crate::config::Settings) -> String {
    let scheme = if settings.tls_enabled() {
        "https"
    } else {
        "http"
    };
    format!("{scheme}://{}", settings.listen.addr)
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
        assert_eq!(
            choose_listen(None, None, true),
            "0.0.0.0:443".parse().unwrap()
        );
        assert_eq!(
            choose_listen(None, None, false),
            "127.0.0.1:8787".parse().unwrap()
        );
        let given = "127.0.0.1:9443".parse().unwrap();
        let file = "0.0.0.0:8443".parse().unwrap();
        assert_eq!(choose_listen(Some(given), None, true), given);
        // The flag over the file, the file over the defaults.
        assert_eq!(choose_listen(Some(given), Some(file), false), given);
        assert_eq!(choose_listen(None, Some(file), true), file);
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
        let stores = Stores::open(
            &Site::Embedded(dir.path().to_path_buf()),
            Needs::ACCOUNTS,
            std::sync::Arc::new(SystemClock),
        )
        .unwrap();
        let tokens = stores.tokens().unwrap();
        let scopes = vec!["mcp".to_owned()];
        let token = first_token(tokens.as_ref(), &scopes, 1_000).unwrap();
        assert!(token.is_some_and(|t| t.starts_with("pft_")));
        assert_eq!(first_token(tokens.as_ref(), &scopes, 1_001).unwrap(), None);
        assert_eq!(tokens.list().unwrap().len(), 1);

        let admin = Admin::new(stores.oauth().unwrap().clone());
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
