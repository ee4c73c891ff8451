//! `pforte check` and `pforte serve`: a configuration loaded and validated; `check` describes its
//! routes, `serve` opens the stores and runs the gateway on it. `serve` starts on a data dir
//! without a store only when told to create one (`--init`, `PFORTE_INIT=1`): a mistyped or
//! unmounted data dir is refused instead of becoming a new, empty store where every token fails.

mod member_lists;
mod virtuals;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use pforte_clock::SystemClock;

use crate::{
    cli,
    config::{Settings, UpstreamKind, VaultKey},
    logging, preflight, runtime,
    stores::{Needs, Site, Stores},
};

use super::{CmdResult, Env, Failure, harden_process, settings};
use pforte_oauth::{Admin, AdminError, Secret};

/// The environment variable that does what `serve --init` does (for containers and units).
pub(crate) const INIT_ENV: &str = "PFORTE_INIT";

/// The first admin's name, for a store without users (default `admin`).
pub(crate) const ADMIN_USER_ENV: &str = "PFORTE_ADMIN_USER";
/// The first admin's password: best as `PFORTE_ADMIN_PASSWORD_FILE`, an owner-only file
/// (a compose secret), read into this variable at start.
pub(crate) const ADMIN_PASSWORD_ENV: &str = "PFORTE_ADMIN_PASSWORD";

/// `pforte serve`'s flags.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct ServeArgs {
    /// Create a new, empty store when the data dir holds none (the first start); without it
    /// `serve` refuses such a data dir (exit 66). Also PFORTE_INIT=1. No effect with redis_url.
    #[arg(long)]
    init: bool,
}

/// What `serve` does about the store it is about to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreStart {
    /// The data dir holds a store: open it.
    Existing,
    /// No store there, and `--init`: create it.
    Create,
    /// redis: the keys are the store, nothing to create or refuse.
    Redis,
}

/// Decides [`StoreStart`] from where the store lives, whether the data dir holds one
/// (`has_store`) and `--init`; refuses a data dir without a store and without `--init`.
fn store_start(
    site: &Site,
    has_store: impl Fn(&Path) -> bool,
    init: bool,
) -> Result<StoreStart, Failure> {
    match site {
        Site::Redis(_) => Ok(StoreStart::Redis),
        Site::Embedded(dir) if has_store(dir) => Ok(StoreStart::Existing),
        Site::Embedded(_) if init => Ok(StoreStart::Create),
        Site::Embedded(dir) => Err(Failure::Uninitialised(dir.clone())),
    }
}

/// `PFORTE_INIT`: `1`/`true` set it, `0`/`false`/empty or unset leave it off.
fn init_from_env(env: &Env) -> Result<bool, Failure> {
    match env.get(INIT_ENV).as_deref() {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(Failure::Usage(format!(
            "{INIT_ENV}={other:?}: use 1 (create a store when the data dir has none) or 0"
        ))),
    }
}

/// The first admin the environment asks for: `PFORTE_ADMIN_PASSWORD` (from its `_FILE`) with
/// `PFORTE_ADMIN_USER` (default `admin`); `None` without a password. A user name without a
/// password, or a password under 8 characters, is a usage error.
fn first_admin_wanted(env: &Env) -> Result<Option<(String, Secret)>, Failure> {
    let user = env.get(ADMIN_USER_ENV).filter(|u| !u.is_empty());
    match (user, env.get(ADMIN_PASSWORD_ENV).filter(|p| !p.is_empty())) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(Failure::Usage(format!(
            "{ADMIN_USER_ENV} is set without {ADMIN_PASSWORD_ENV}_FILE (an owner-only file with \
             the first admin's password)"
        ))),
        (_, Some(p)) if p.chars().count() < 8 => Err(Failure::Usage(format!(
            "{ADMIN_PASSWORD_ENV}: the first admin's password needs at least 8 characters"
        ))),
        (user, Some(p)) => Ok(Some((
            user.unwrap_or_else(|| "admin".to_owned()),
            Secret::new(p),
        ))),
    }
}

/// The first admin, made while the store has no user (`serve`'s start, from
/// [`first_admin_wanted`]): whether it was made now. Another gateway on the same redis that
/// made it first is not an error.
async fn first_admin(admin: &Admin, name: &str, password: &Secret) -> Result<bool, AdminError> {
    if admin.has_users().await? {
        return Ok(false);
    }
    match admin.add_user(name, password).await {
        Ok(()) => {}
        Err(AdminError::UserExists(_)) => return Ok(false),
        Err(e) => return Err(e),
    }
    admin.set_admin(name, true).await?;
    Ok(true)
}

/// Validates everything `serve` would and prints each route with its upstream. A data dir
/// without a store is a warning (the dir may be prepared later, or `serve --init` creates it).
pub fn check(config: Option<&Path>, data_dir: Option<PathBuf>, env: &Env) -> CmdResult {
    let s = settings(config, data_dir, env)?;
    let init = init_from_env(env)?;
    let first = first_admin_wanted(env)?;
    let start = store_start(&s.store, cli::has_store, init);
    match start {
        Ok(StoreStart::Create) => eprintln!(
            "note: no Pforte store at {} yet; serve creates one ({INIT_ENV} is set)",
            s.data_dir.display()
        ),
        Ok(StoreStart::Existing | StoreStart::Redis) => {}
        Err(_) => eprintln!("warning: {}", cli::uninitialised_message(&s.data_dir)),
    }
    let records = vault_records(&s)?;
    let existing = matches!(start, Ok(StoreStart::Existing | StoreStart::Redis));
    let recorded = recorded_tools(&s, existing);
    let asked = member_lists::ask_members(&s);
    let (virtual_lines, problems) = virtuals::describe(&s, recorded.as_ref(), &asked);
    if !problems.is_empty() {
        return Err(super::bad_config(problems.join("; ")));
    }
    println!("configuration ok:");
    let euid = nix::unistd::geteuid().as_raw();
    for route in &s.routes {
        println!(
            "  {} → {}",
            route.resource,
            describe_upstream(&route.upstream)
        );
        if let Some(line) = describe_account(route, euid, &s.stdio_account) {
            println!("    {line}");
        }
    }
    for line in virtual_lines {
        println!("  {line}");
    }
    for line in describe(&s, records) {
        println!("  {line}");
    }
    println!(
        "  descriptors: {}",
        crate::runtime::descriptors::prospect().describe()
    );
    if let Some((name, _)) = first {
        println!(
            "  first admin: {name}, made at start while the store has no user ({ADMIN_PASSWORD_ENV}_FILE)"
        );
    }
    Ok(())
}

/// The tool definitions the pins store recorded per route, for checking `[[virtual]]` servers:
/// `None` without virtual servers, without a store (nothing is created) or when it cannot be
/// asked now (a warning).
fn recorded_tools(
    s: &Settings,
    existing: bool,
) -> Option<std::collections::BTreeMap<String, Vec<serde_json::Value>>> {
    if s.virtuals.is_empty() || !existing {
        return None;
    }
    let clock: Arc<dyn pforte_clock::Clock> = Arc::new(SystemClock);
    let recorded = Stores::open(&s.store, Needs::ACCOUNTS, clock)
        .map_err(|e| e.to_string())
        .and_then(|stores| {
            let pins = stores.pins().map_err(|e| e.to_string())?;
            virtuals::recorded(pins.as_ref())
        });
    recorded
        .inspect_err(|e| {
            eprintln!(
                "warning: the virtual servers were not checked against the routes' tools: {e}"
            )
        })
        .ok()
}

/// How the vault's key ring fares on the stored credentials, for `check`: `None` without a
/// key (or when the store cannot be asked now: a warning), else the ring's key ids and how
/// many stored credentials it opens — a ring that does not open them all is refused (64), as
/// `serve` refuses it.
fn vault_records(s: &Settings) -> Result<Option<(Vec<String>, usize)>, Failure> {
    use crate::vault::{KeyRing, Vault, VaultError, VaultOptions};
    let Some(key) = &s.vault_key else {
        return Ok(None);
    };
    let ring = match key {
        VaultKey::File(path) => KeyRing::read_file(path),
        VaultKey::Text(text) => KeyRing::parse(text),
    }
    .map_err(super::bad_config)?;
    let ids: Vec<String> = ring.ids().into_iter().map(str::to_owned).collect();
    let clock: std::sync::Arc<dyn pforte_clock::Clock> =
        std::sync::Arc::new(pforte_clock::SystemClock);
    let checked = Stores::open(&s.store, Needs::VAULT, clock.clone())
        .map_err(|e| VaultError::Storage(e.to_string()))
        .and_then(|stores| match stores.vault.clone() {
            // No vault yet: nothing sealed, nothing to open (and nothing created here).
            None => Ok(0),
            Some(records) => {
                let vault = Vault::open(records, ring, clock, VaultOptions::default());
                stores.runtime.block_on(vault.check_ring())
            }
        });
    match checked {
        Ok(n) => Ok(Some((ids, n))),
        Err(e @ VaultError::Ring { .. }) => Err(super::bad_config(e)),
        Err(e) => {
            eprintln!("warning: the vault's stored credentials were not checked: {e}");
            Ok(None)
        }
    }
}

/// What `check` says about sign-in, TLS and the vault beyond the routes — pure: `records` is
/// what [`vault_records`] found (the key ids, how many stored credentials open).
fn describe(s: &Settings, records: Option<(Vec<String>, usize)>) -> Vec<String> {
    let mut lines = Vec::new();
    let login = &s.oauth.login;
    let mut ways: Vec<String> = login
        .oidc
        .iter()
        .map(|p| {
            let secret = p.client_secret_file.as_ref().map_or_else(
                || "public client".to_owned(),
                |f| format!("client secret {}", f.display()),
            );
            format!(
                "{:?} ({}, client {}, {secret})",
                p.name, p.issuer, p.client_id
            )
        })
        .collect();
    if login.local_passwords {
        ways.push("local passwords".to_owned());
    }
    lines.push(format!("sign-in: {}", ways.join("; ")));
    for e in &s.oauth.enterprise {
        lines.push(format!("enterprise grants (ID-JAG) from {}", e.issuer));
    }
    match &s.listen.tls {
        Some(tls) => {
            if let Some(acme) = &tls.acme {
                lines.push(format!(
                    "TLS: ACME certificate for {} from {} ({}), obtained at start and renewed",
                    acme.domains.join(", "),
                    acme.directory,
                    acme.challenge.as_str()
                ));
            }
            let role = if tls.acme.is_some() {
                " (for clients that name no host)"
            } else {
                ""
            };
            for pair in &tls.pairs {
                lines.push(format!("TLS: certificate {}{role}", pair.cert.display()));
            }
        }
        None if s.listen.behind_tls_proxy => {
            lines.push("TLS: terminated by the proxy in front".to_owned());
        }
        None => lines.push("TLS: off (plain HTTP on loopback)".to_owned()),
    }
    match (&s.vault_key, records) {
        (None, _) => {
            lines.push("vault: no key (no route keeps a credential per person)".to_owned());
        }
        (Some(key), found) => {
            let source = match key {
                VaultKey::File(path) => format!("key file {}", path.display()),
                VaultKey::Text(_) => "PFORTE_VAULT_KEY".to_owned(),
            };
            let detail = found.map_or_else(String::new, |(ids, n)| {
                format!(
                    "; keys {} ({} seals); {n} stored credential(s) open",
                    ids.join(", "),
                    ids.first().map_or("", String::as_str)
                )
            });
            lines.push(format!("vault: {source}{detail}"));
        }
    }
    lines.extend(s.rules.describe());
    lines
}

/// Runs the gateway: refuses a data dir without a store unless `--init`, binds the listener
/// once and opens the stores before it prints success, then serves until stopped.
pub fn serve(
    args: ServeArgs,
    config: Option<&Path>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> CmdResult {
    harden_process();
    let s = settings(config, data_dir, env)?;
    logging::init(s.log_format);
    let init = args.init || init_from_env(env)?;
    let start = store_start(&s.store, cli::has_store, init)?;
    preflight::check_bind(s.listen.addr, preflight::ListenKnob::Config)
        .map_err(|e| Failure::Other(e.into()))?;
    // Before the success line: a store that cannot be opened (locked by a restore, unreadable)
    // is one line and 69, not a gateway that said it listens and then exits.
    let first = first_admin_wanted(env)?;
    let stores = Stores::open(&s.store, Needs::serve(&s), Arc::new(SystemClock))?;
    if let Some((name, password)) = first {
        let admin = Admin::new(stores.oauth()?.clone());
        if stores
            .runtime
            .block_on(first_admin(&admin, &name, &password))?
        {
            tracing::info!(user = %name, "first admin made from {ADMIN_PASSWORD_ENV}_FILE");
        }
    }
    let resources: Vec<String> = s.routes.iter().map(|r| r.resource.clone()).collect();
    let line = format!(
        "pforte listening on {} (MCP: {})",
        s.base_url,
        resources.join(", ")
    );
    if start == StoreStart::Create {
        tracing::info!(data_dir = %s.data_dir.display(), "created a new, empty store");
    }
    // The line once the listeners (`metrics_listen` too) are bound and the vault opens.
    runtime::serve(s, stores, Vec::new(), || println!("{line}"))
        .map_err(|e| Failure::Other(e.into()))
}

/// Whom a `command` route's children run as, for `check` (`None` for other routes); the
/// account is known here (`preflight` looked it up).
fn describe_account(
    route: &crate::config::Route,
    euid: u32,
    defaults: &crate::config::StdioAccount,
) -> Option<String> {
    use crate::stdio::account::{self, Account};
    let UpstreamKind::Stdio { run_as, .. } = &route.upstream else {
        return None;
    };
    let uid = |user: &str| {
        crate::stdio::exec::RunAs::resolve(user, None)
            .map_or_else(|_| "unknown".to_owned(), |who| who.uid.to_string())
    };
    let decided = account::decide(euid, run_as.as_ref(), &defaults.user);
    let opt_out = if decided.is_root_opt_out(euid) {
        " — root, the explicit opt-out: third-party code with the gateway's privileges"
    } else {
        ""
    };
    Some(match decided {
        Account::Gateway => format!("children run as the gateway's own user (uid {euid})"),
        Account::Route(who) => format!(
            "children run as {} (uid {}, the route's user){opt_out}",
            who.user,
            uid(&who.user)
        ),
        Account::Default(user) => format!(
            "children run as {user} (uid {}, stdio_user){opt_out}, home {}",
            uid(&user),
            account::home_of(&defaults.home, &route.name).display()
        ),
    })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_data_dir_without_a_store_needs_init() {
        let dir = Site::Embedded(PathBuf::from("/srv/typo"));
        let (none, some) = (|_: &Path| false, |_: &Path| true);
        assert_eq!(
            store_start(&dir, some, false).unwrap(),
            StoreStart::Existing
        );
        assert_eq!(store_start(&dir, some, true).unwrap(), StoreStart::Existing);
        assert_eq!(store_start(&dir, none, true).unwrap(), StoreStart::Create);
        let refused = store_start(&dir, none, false).unwrap_err();
        assert!(
            matches!(&refused, Failure::Uninitialised(d) if d == Path::new("/srv/typo")),
            "{refused:?}"
        );
        // redis is its own store: no data dir to refuse.
        let redis = Site::Redis("redis://127.0.0.1:1/".to_owned());
        assert_eq!(store_start(&redis, none, false).unwrap(), StoreStart::Redis);
    }

    #[test]
    fn check_names_the_providers_acme_and_the_vault() {
        let settings = toml::from_str::<crate::config::GatewayConfig>(
            "listen = \"0.0.0.0:443\"\npublic_url = \"https://mcp.example.com\"\n\
             [tls.acme]\nemail = \"ops@example.com\"\n\
             [vault]\nkey_file = \"/run/secrets/vault_key\"\n\
             [oauth.login]\nlocal_passwords = false\n\
             [[oauth.login.oidc]]\nname = \"Acme SSO\"\nissuer = \"https://idp.example\"\n\
             client_id = \"pforte\"\nclient_secret_file = \"/run/secrets/oidc\"\n\
             allowed_domains = [\"example.com\"]\n",
        )
        .unwrap()
        .validate()
        .unwrap();
        let lines = describe(&settings, Some((vec!["k2".into(), "k1".into()], 3)));
        assert_eq!(
            lines,
            [
                "sign-in: \"Acme SSO\" (https://idp.example, client pforte, client secret /run/secrets/oidc)",
                "TLS: ACME certificate for mcp.example.com from https://acme-v02.api.letsencrypt.org/directory (tls-alpn-01), obtained at start and renewed",
                "vault: key file /run/secrets/vault_key; keys k2, k1 (k2 seals); 3 stored credential(s) open",
            ]
        );
    }

    #[test]
    fn the_first_admin_needs_a_password_of_8() {
        let env = |pairs: &[(&str, &str)]| {
            Env::from_vars(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
                |_| Err("not found".to_owned()),
            )
            .unwrap()
        };
        assert!(first_admin_wanted(&env(&[])).unwrap().is_none());
        let (name, _) = first_admin_wanted(&env(&[(ADMIN_PASSWORD_ENV, "long enough")]))
            .unwrap()
            .unwrap();
        assert_eq!(name, "admin");
        let (name, _) = first_admin_wanted(&env(&[
            (ADMIN_USER_ENV, "ops"),
            (ADMIN_PASSWORD_ENV, "long enough"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(name, "ops");
        assert!(first_admin_wanted(&env(&[(ADMIN_USER_ENV, "ops")])).is_err());
        assert!(first_admin_wanted(&env(&[(ADMIN_PASSWORD_ENV, "short")])).is_err());
    }

    #[test]
    fn the_first_admin_is_made_only_while_the_store_has_no_user() {
        let dir = tempfile::tempdir().unwrap();
        let stores = Stores::open(
            &Site::Embedded(dir.path().to_path_buf()),
            crate::stores::Needs::ACCOUNTS,
            Arc::new(SystemClock),
        )
        .unwrap();
        let admin = Admin::new(stores.oauth().unwrap().clone());
        let pw = Secret::new("first-admin-pw");
        let made = |name: &str| {
            stores
                .runtime
                .block_on(first_admin(&admin, name, &pw))
                .unwrap()
        };
        assert!(made("ops"));
        assert!(!made("ops"));
        assert!(!made("other"));
        let users = stores.runtime.block_on(admin.list_users()).unwrap();
        assert_eq!(users.len(), 1);
        assert!(users[0].admin && users[0].username == "ops");
    }

    #[test]
    fn pforte_init_is_one_or_zero() {
        let env = |v: &str| {
            Env::from_vars(vec![(INIT_ENV.to_owned(), v.to_owned())], |_| {
                Err("not found".to_owned())
            })
            .unwrap()
        };
        assert!(init_from_env(&env("1")).unwrap());
        assert!(init_from_env(&env("true")).unwrap());
        assert!(!init_from_env(&env("0")).unwrap());
        assert!(!init_from_env(&env("")).unwrap());
        assert!(!init_from_env(&Env::default()).unwrap());
        assert!(matches!(init_from_env(&env("yes")), Err(Failure::Usage(_))));
    }
}
