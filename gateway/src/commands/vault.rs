//! `pforte vault`: the key ring that seals per-user upstream credentials — a new key (first
//! key of a new file, or prepended to an existing ring for rotation) and re-sealing every
//! record under the ring's first key.

use std::{io::Write as _, path::PathBuf};

use clap::Subcommand;
use pforte_clock::{Clock as _, SystemClock};

use super::{CmdResult, Env, Failure};
use crate::{
    stores::{Needs, Stores},
    vault::{KeyRing, Vault, VaultOptions, generate_line},
};

#[derive(Subcommand)]
pub enum VaultAction {
    /// Make a key. Without --file: print its line (for PFORTE_VAULT_KEY). With --file: create
    /// the file (0600), or put the new key first in an existing ring — it seals from the next
    /// start, the older keys still open what they sealed until `pforte vault rekey`.
    Keygen {
        /// The key ring file (`[vault] key_file`).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The key's id (default: `k` and the time).
        #[arg(long)]
        id: Option<String>,
    },
    /// Re-seal every stored credential under the ring's first key; after it, older keys can
    /// leave the ring. Safe while gateways run (each record is replaced only if unchanged).
    Rekey,
}

/// Runs `pforte vault ACTION`.
pub fn run(
    action: VaultAction,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> CmdResult {
    match action {
        VaultAction::Keygen { file, id } => {
            let id = id.unwrap_or_else(|| format!("k{}", SystemClock.now_secs()));
            let line = generate_line(&id).map_err(|e| Failure::Other(e.into()))?;
            match file {
                None => println!("{line}"),
                Some(path) => {
                    let rotated = add_key(&path, &line)?;
                    println!(
                        "{} {}: key {id:?} {}",
                        if rotated { "updated" } else { "created" },
                        path.display(),
                        if rotated {
                            "seals from the next start; `pforte vault rekey` then re-seals the rest"
                        } else {
                            "seals the vault"
                        }
                    );
                }
            }
            Ok(())
        }
        VaultAction::Rekey => rekey(config, data_dir, env),
    }
}

/// Writes `line` as the first key of the ring at `path` (created 0600 if absent); `true` when
/// the file held keys already.
fn add_key(path: &std::path::Path, line: &str) -> Result<bool, Failure> {
    let old = match std::fs::read_to_string(path) {
        Ok(text) => {
            KeyRing::read_file(path).map_err(|e| Failure::Usage(e.to_string()))?;
            Some(text)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Failure::Unavailable(format!("{}: {e}", path.display()))),
    };
    let text = match &old {
        Some(old) => format!("{line}\n{old}"),
        None => format!("{line}\n"),
    };
    // Written beside and renamed over: a crash leaves the old ring or the new, never half.
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Failure::Unavailable(format!("{}: {e}", path.display()))
    })?;
    Ok(old.is_some())
}

fn rekey(config: Option<PathBuf>, data_dir: Option<PathBuf>, env: &Env) -> CmdResult {
    let settings = super::settings(config.as_deref(), data_dir, env)?;
    let Some(key) = &settings.vault_key else {
        return Err(Failure::Usage(
            "no vault key: set [vault] key_file or PFORTE_VAULT_KEY".into(),
        ));
    };
    let ring = match key {
        crate::config::VaultKey::File(path) => KeyRing::read_file(path),
        crate::config::VaultKey::Text(text) => KeyRing::parse(text),
    }
    .map_err(|e| Failure::Usage(e.to_string()))?;
    let current = ring.current().to_owned();
    let clock = std::sync::Arc::new(SystemClock);
    let stores = Stores::open(&settings.store, Needs::VAULT, clock.clone())?;
    let done = match stores.vault.clone() {
        // No vault yet: nothing sealed.
        None => 0,
        Some(records) => {
            let vault = Vault::open(records, ring, clock, VaultOptions::default());
            stores
                .runtime
                .block_on(vault.rekey())
                .map_err(|e| Failure::Unavailable(e.to_string()))?
        }
    };
    println!("re-sealed {done} credential(s) under key {current:?}");
    Ok(())
}
