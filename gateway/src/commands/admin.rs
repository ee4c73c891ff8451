//! What the admin commands (`token`, `user`, `client`, `grant`, `tools`) share: finding the store a
//! command works on and opening it once, the OAuth admin API on it, the password prompt, and
//! how lists print.

use std::path::PathBuf;

use crate::{
    cli,
    config::GatewayConfig,
    stores::{Needs, Site, Stores},
};
use anyhow::bail;
use pforte_clock::{Clock as _, SystemClock};
use pforte_oauth::{Admin, Secret};

use super::{CmdResult, Env, Failure, load_config};

/// `--json` for list commands.
#[derive(clap::Args, Clone, Copy)]
pub struct ListArgs {
    /// Print a JSON array instead of a table (times in RFC 3339 UTC).
    #[arg(long)]
    pub(crate) json: bool,
}

/// The store a command works on: the config's data dir (or `--data-dir`), or redis.
pub(crate) struct StoreSite {
    pub(crate) cfg: GatewayConfig,
    /// True when the embedded store did not exist before this command.
    created: bool,
}

impl StoreSite {
    /// Finds the store. A reading command on a dir without one is refused (66) and creates
    /// nothing; an adding command (`adds`) may create it and says so afterwards.
    pub(crate) fn find(
        config: Option<PathBuf>,
        data_dir: Option<PathBuf>,
        adds: bool,
        env: &Env,
    ) -> Result<Self, Failure> {
        let mut cfg = load_config(config.as_deref(), env)?;
        if let Some(dir) = data_dir {
            cfg.data_dir = dir;
        }
        super::data_dir_usable(&cfg)?;
        let embedded = cfg.redis_url.is_none();
        let missing = embedded && !cli::has_store(&cfg.data_dir);
        if missing && !adds {
            return Err(Failure::NoStore(cfg.data_dir));
        }
        Ok(Self {
            cfg,
            created: missing,
        })
    }

    /// Opens the accounts and the vault's records (creating the data dir when this command may
    /// create the store).
    pub(crate) fn open(&self) -> Result<Stores, Failure> {
        if self.created {
            std::fs::create_dir_all(&self.cfg.data_dir).map_err(|e| {
                Failure::Unavailable(format!(
                    "cannot create {}: {e}",
                    self.cfg.data_dir.display()
                ))
            })?;
        }
        Stores::open(
            &Site::new(self.cfg.redis_url.as_deref(), &self.cfg.data_dir),
            Needs::ADMIN,
            std::sync::Arc::new(SystemClock),
        )
        .map_err(|e| Failure::Unavailable(e.to_string()))
    }

    /// Removes `person`'s upstream credentials from the vault (a removed user or revoked
    /// token); a failure is reported, not fatal (the user is gone either way).
    pub(crate) fn forget_credentials(&self, stores: &Stores, person: &str) {
        // A data dir without a vault has none.
        let Some(records) = &stores.vault else {
            return;
        };
        match stores.runtime.block_on(records.forget_person(person)) {
            Ok(0) => {}
            Ok(n) => println!("removed {n} upstream credential(s) from the vault"),
            Err(e) => {
                eprintln!("pforte: the vault's credentials of {person:?} were not removed: {e}")
            }
        }
    }

    /// After success: the note that this command created a new store, if it did.
    pub(crate) fn announce(&self) {
        if self.created {
            eprintln!("pforte: {}", cli::new_store_message(&self.cfg.data_dir));
        }
    }
}

/// Reads a password: a hidden prompt on a terminal, else one line of stdin. Never an argument.
pub(crate) fn read_password(prompt: &str) -> anyhow::Result<Secret> {
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
pub(crate) fn print_list(
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

/// An admin command on the authorization server's store: `pforte user`, `client` or `grant`.
#[allow(
    missing_debug_implementations,
    reason = "clap's actions carry no Debug"
)]
pub enum AdminCommand {
    User(super::user::UserAction),
    Client(super::client::ClientAction),
    Grant(super::grant::GrantAction),
    Tools(super::tools::ToolsAction),
}

/// Runs `command` on the store the configuration (or data dir) names; only `user add` may
/// create it.
pub fn run(
    command: AdminCommand,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> CmdResult {
    use super::user::UserAction;
    let adds = matches!(command, AdminCommand::User(UserAction::Add { .. }));
    let site = StoreSite::find(config, data_dir, adds, env)?;
    // Revocations go to the gateway's audit log too (appended; flushed before exit).
    let audit = match &command {
        AdminCommand::Grant(super::grant::GrantAction::Revoke { .. })
        | AdminCommand::Tools(super::tools::ToolsAction::Approve { .. }) => {
            let a = site
                .cfg
                .audit()
                .map_err(|e| Failure::Usage(format!("audit_log: {e}")))?;
            Some(
                crate::audit::AuditLog::open_with(&a.sink, 64, a.rotation)
                    .map_err(|e| anyhow::anyhow!("the audit log cannot be opened: {e}"))?,
            )
        }
        _ => None,
    };
    // A removed user's upstream credentials go with them.
    let forget = match &command {
        AdminCommand::User(UserAction::Remove { username }) => Some(crate::auth::person_key(
            crate::auth::AuthKind::OAuth,
            username,
            "",
        )),
        _ => None,
    };
    let stores = site.open()?;
    let command = match command {
        AdminCommand::Tools(action) => {
            let pins = stores.pins()?;
            let done =
                super::tools::run(pins.as_ref(), action, SystemClock.now_ms(), audit.as_ref());
            if let Some(log) = &audit {
                log.flush();
            }
            return done;
        }
        other => other,
    };
    let admin = Admin::new(stores.oauth()?.clone());
    let now = SystemClock.now_secs();
    let done = stores.runtime.block_on(async {
        match command {
            AdminCommand::User(action) => super::user::run(admin, action, now).await,
            AdminCommand::Client(action) => super::client::run(admin, action, now).await,
            AdminCommand::Grant(action) => {
                super::grant::run(admin, action, now, audit.as_ref()).await
            }
            AdminCommand::Tools(_) => Ok(()),
        }
    });
    if let Some(log) = &audit {
        log.flush();
    }
    done?;
    if let Some(person) = forget {
        site.forget_credentials(&stores, &person);
    }
    site.announce();
    Ok(())
}
