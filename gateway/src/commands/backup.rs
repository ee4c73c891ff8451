//! `pforte backup DEST` and `pforte restore SRC`: a consistent copy of the embedded store taken
//! while the gateway runs, and that copy put back into a data dir no gateway uses.
//!
//! The SQLite databases are copied with `VACUUM INTO` (one read transaction: a snapshot of what
//! was committed, WAL included, while the gateway keeps writing), never as files. The ACME
//! account and certificate and `pforte up`'s self-signed pair are plain files, each replaced
//! atomically by whoever writes it, and are copied as they are. Every file written is 0600, every
//! directory 0700. A backup is itself a data dir: `restore` copies it the same way.

use std::{
    fs,
    io::Write as _,
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, anyhow, ensure};
use pforte_clock::{Clock as _, SystemClock};
use rusqlite::{Connection, OpenFlags};

use crate::{
    cli,
    stores::{DirLock, LockError, OAUTH_DB, SESSIONS_DB, TOKENS_DB},
};

use super::{CmdResult, Env, Failure, load_config};

/// The SQLite databases of a data dir (the vault's records are sealed; its key is not part of
/// a backup — keep it apart, as the key file it is).
const DATABASES: [&str; 3] = [TOKENS_DB, OAUTH_DB, crate::vault::VAULT_DB];
/// Databases a data dir may hold that a backup leaves out: the MCP session records (clients
/// of a restored gateway initialize again). A restore moves them aside with the rest, so no
/// session of the replaced store outlives it.
const UNSAVED: [&str; 1] = [SESSIONS_DB];
/// The files beside a SQLite database that belong to it.
const COMPANIONS: [&str; 3] = ["-wal", "-shm", "-journal"];
/// Plain files: the self-signed certificate and key `pforte up` generates.
const FILES: [&str; 2] = ["tls-cert.pem", "tls-key.pem"];
/// A directory of plain files: the ACME account and certificate.
const ACME_DIR: &str = "acme";
/// What a backup says about itself (not read back: for the operator).
const MANIFEST: &str = "pforte-backup.json";

/// `pforte backup`'s arguments.
#[derive(clap::Args, Debug)]
pub struct BackupArgs {
    /// Directory to write the backup into: a new one, or an empty one (created 0700).
    #[arg(value_name = "DEST")]
    dest: PathBuf,
}

/// `pforte restore`'s arguments.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// A directory `pforte backup` wrote (or another data dir).
    #[arg(value_name = "SRC")]
    src: PathBuf,
    /// Replace the store the data dir holds; its files are moved to `replaced-<time>/` there.
    #[arg(long)]
    force: bool,
}

/// The data dir of the embedded store the configuration names; refused with redis.
fn embedded_dir(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    env: &Env,
    command: &str,
) -> Result<PathBuf, Failure> {
    let mut cfg = load_config(config.as_deref(), env)?;
    if let Some(dir) = data_dir {
        cfg.data_dir = dir;
    }
    if cfg.redis_url.is_some() {
        return Err(Failure::Usage(format!(
            "the store is redis (redis_url): `pforte {command}` copies only the embedded store; \
             back up or restore redis itself (BGSAVE and its dump.rdb, the AOF directory, or \
             `redis-cli --rdb FILE`; docs/deploy.md, \"Backups and upgrades\")"
        )));
    }
    Ok(cfg.data_dir)
}

/// Writes a backup of the data dir into `DEST` while the gateway may run.
pub fn backup(
    args: BackupArgs,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> CmdResult {
    let dir = embedded_dir(config, data_dir, env, "backup")?;
    if !cli::has_store(&dir) {
        return Err(Failure::NoStore(dir));
    }
    let dest = args.dest;
    match fs::read_dir(&dest) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Failure::Other(anyhow!(
                    "{} is not empty; back up into a new or empty directory",
                    dest.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow!("{}: {e}", dest.display()).into()),
    }
    // Written beside DEST and renamed into place at the end: a DEST with files is complete.
    let staging = staging_dir(&dest)?;
    let written = copy_store(&dir, &staging)
        .and_then(|files| {
            write_manifest(&staging, &dir, &files)?;
            Ok(files)
        })
        .and_then(|files| {
            fs::rename(&staging, &dest)
                .with_context(|| format!("renaming {} to {}", staging.display(), dest.display()))?;
            Ok(files)
        });
    let files = written.inspect_err(|_| {
        let _ = fs::remove_dir_all(&staging);
    })?;
    eprintln!(
        "pforte: backed up {} from {} into {}",
        files.join(", "),
        dir.display(),
        dest.display()
    );
    Ok(())
}

/// Puts the backup `SRC` into the data dir: never under a running gateway, and over an existing
/// store only with `--force`.
pub fn restore(
    args: RestoreArgs,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> CmdResult {
    let dir = embedded_dir(config, data_dir, env, "restore")?;
    let src = args.src;
    if !cli::has_store(&src) {
        return Err(Failure::Other(anyhow!(
            "{} holds no backup (no {TOKENS_DB} or {OAUTH_DB})",
            src.display()
        )));
    }
    if fs::canonicalize(&src).ok() == fs::canonicalize(&dir).ok() {
        return Err(Failure::Usage(format!(
            "{} is the data dir itself; restore from a backup",
            src.display()
        )));
    }
    pforte_oauth::private_dir(&dir)
        .map_err(|e| Failure::Unavailable(format!("cannot create {}: {e}", dir.display())))?;
    // Held until the end: a gateway or admin command that starts meanwhile waits for nothing,
    // it refuses (the store is being restored).
    let _lock = DirLock::exclusive(&dir).map_err(|e| match e {
        LockError::Held(path) => Failure::Unavailable(format!(
            "a gateway (or an admin command) is using {}: it holds {}; stop it, then restore",
            dir.display(),
            path.display()
        )),
        LockError::Open(path, e) => Failure::Unavailable(format!("{}: {e}", path.display())),
    })?;
    let present = present(&dir);
    let aside = match (present.is_empty(), args.force) {
        (true, _) => None,
        (false, true) => Some(move_aside(&dir, &present)?),
        (false, false) => {
            return Err(Failure::Other(anyhow!(
                "{} holds a store already ({}); pass --force to replace it (its files are \
                 kept in a replaced-<time> directory there)",
                dir.display(),
                present.join(", ")
            )));
        }
    };
    let files = restore_into(&src, &dir)?;
    eprintln!(
        "pforte: restored {} from {} into {}",
        files.join(", "),
        src.display(),
        dir.display()
    );
    if let Some(aside) = aside {
        eprintln!(
            "pforte: the replaced files are in {}; delete them when the gateway runs well",
            aside.display()
        );
    }
    Ok(())
}

/// A new owner-only directory beside `dest` to write the backup into.
fn staging_dir(dest: &Path) -> Result<PathBuf, Failure> {
    let name = dest
        .file_name()
        .ok_or_else(|| Failure::Usage(format!("{}: name a directory", dest.display())))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let staging = parent.join(format!(
        ".{}.partial-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&staging)
        .with_context(|| format!("creating {}", staging.display()))?;
    Ok(staging)
}

/// Copies what matters of the data dir `from` into the new, empty directory `to`: the
/// databases by snapshot, the certificate files and the ACME directory as files. Returns what
/// it wrote, by name.
fn copy_store(from: &Path, to: &Path) -> anyhow::Result<Vec<String>> {
    let mut written = Vec::new();
    for db in DATABASES {
        let src = from.join(db);
        if src.is_file() {
            snapshot(&src, &to.join(db))?;
            written.push(db.to_owned());
        }
    }
    for file in FILES {
        let src = from.join(file);
        if src.is_file() {
            copy_private(&src, &to.join(file))?;
            written.push(file.to_owned());
        }
    }
    let acme = from.join(ACME_DIR);
    if acme.is_dir() {
        let n = copy_flat_dir(&acme, &to.join(ACME_DIR))?;
        let plural = if n == 1 { "" } else { "s" };
        written.push(format!("{ACME_DIR}/ ({n} file{plural})"));
    }
    Ok(written)
}

/// Copies the database `src` into the new file `dest` (0600) as one consistent snapshot and
/// checks the copy.
fn snapshot(src: &Path, dest: &Path) -> anyhow::Result<()> {
    // Created empty and owner-only first: VACUUM INTO fills an empty file and keeps its mode.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .with_context(|| format!("creating {}", dest.display()))?;
    let target = dest
        .to_str()
        .ok_or_else(|| anyhow!("{} is not UTF-8", dest.display()))?;
    // Read-write without create (a reader of a WAL database needs its shared memory), in this
    // process only for the copy: the store itself is not opened here.
    let conn = Connection::open_with_flags(
        src,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {}", src.display()))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute("VACUUM INTO ?1", [target])
        .with_context(|| format!("copying {} into {}", src.display(), dest.display()))?;
    drop(conn);
    let copy = Connection::open_with_flags(dest, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let verdict: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    ensure!(
        verdict == "ok",
        "{}: integrity check: {verdict}",
        dest.display()
    );
    drop(copy);
    fs::File::open(dest)?.sync_all()?;
    Ok(())
}

/// Copies the plain file `src` to the new file `dest`, 0600, synced.
fn copy_private(src: &Path, dest: &Path) -> anyhow::Result<()> {
    let bytes = fs::read(src).with_context(|| format!("reading {}", src.display()))?;
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .with_context(|| format!("creating {}", dest.display()))?;
    out.write_all(&bytes)?;
    out.sync_all()?;
    Ok(())
}

/// Copies the regular files of `src` (not its subdirectories) into the new directory `dest`
/// (0700); returns how many.
fn copy_flat_dir(src: &Path, dest: &Path) -> anyhow::Result<usize> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dest)
        .with_context(|| format!("creating {}", dest.display()))?;
    let mut n = 0;
    for entry in fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            copy_private(&entry.path(), &dest.join(entry.file_name()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// `pforte-backup.json`: the version that wrote it, when, from where, and what.
fn write_manifest(to: &Path, from: &Path, files: &[String]) -> anyhow::Result<()> {
    let manifest = serde_json::json!({
        "pforte": env!("CARGO_PKG_VERSION"),
        "created": cli::rfc3339(SystemClock.now_secs()),
        "data_dir": from.display().to_string(),
        "files": files,
    });
    let path = to.join(MANIFEST);
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    out.write_all(serde_json::to_string_pretty(&manifest)?.as_bytes())?;
    out.sync_all()?;
    Ok(())
}

/// What of a store the data dir holds, by name: the databases with their companions (a stale
/// WAL beside a restored database would be replayed into it), the session records, the
/// certificate files, `acme/`.
fn present(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for db in DATABASES.iter().chain(&UNSAVED) {
        names.push((*db).to_owned());
        names.extend(COMPANIONS.iter().map(|c| format!("{db}{c}")));
    }
    names.extend(FILES.iter().map(|f| (*f).to_owned()));
    names.push(ACME_DIR.to_owned());
    names
        .into_iter()
        .filter(|n| fs::symlink_metadata(dir.join(n)).is_ok())
        .collect()
}

/// Moves `names` from `dir` into a new `dir/replaced-<unix time>/` (0700); returns it.
fn move_aside(dir: &Path, names: &[String]) -> Result<PathBuf, Failure> {
    let aside = dir.join(format!("replaced-{}", SystemClock.now_secs()));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&aside)
        .with_context(|| format!("creating {}", aside.display()))?;
    for name in names {
        fs::rename(dir.join(name), aside.join(name))
            .with_context(|| format!("moving {name} into {}", aside.display()))?;
    }
    Ok(aside)
}

/// Copies the backup `src` into the data dir `dir`, which holds none of it: each database and
/// file written under a temporary name and renamed into place.
fn restore_into(src: &Path, dir: &Path) -> anyhow::Result<Vec<String>> {
    let staging = dir.join(format!(".restore-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .with_context(|| format!("creating {}", staging.display()))?;
    let copied = copy_store(src, &staging).and_then(|files| {
        for name in DATABASES.iter().chain(&FILES).chain(&[ACME_DIR]) {
            let from = staging.join(name);
            if fs::symlink_metadata(&from).is_ok() {
                fs::rename(&from, dir.join(name))
                    .with_context(|| format!("moving {name} into {}", dir.display()))?;
            }
        }
        Ok(files)
    });
    let _ = fs::remove_dir_all(&staging);
    copied
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pforte_oauth::mode_of;

    fn wal_db(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER)").unwrap();
        conn
    }

    fn count(path: &Path) -> i64 {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_snapshot_holds_what_was_committed_and_is_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("pforte.db");
        let writer = wal_db(&db);
        for n in 0..10 {
            writer.execute("INSERT INTO t VALUES (?1)", [n]).unwrap();
        }
        // A writer in the middle of a transaction: its rows are not in the copy, and it does not
        // stop the copy.
        writer
            .execute_batch("BEGIN; INSERT INTO t VALUES (99);")
            .unwrap();
        let copy = tmp.path().join("copy.db");
        snapshot(&db, &copy).unwrap();
        writer.execute_batch("COMMIT").unwrap();
        assert_eq!(count(&copy), 10);
        assert_eq!(count(&db), 11);
        assert_eq!(mode_of(&copy).unwrap(), 0o600);
        // The copy is a plain database: no WAL beside it.
        assert!(!tmp.path().join("copy.db-wal").exists());
    }

    #[test]
    fn a_restore_target_with_any_part_of_a_store_is_not_empty() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(present(tmp.path()).is_empty());
        // A WAL left without its database still counts: it would be replayed into the new one.
        fs::write(tmp.path().join("oauth.db-wal"), b"x").unwrap();
        fs::create_dir(tmp.path().join("acme")).unwrap();
        fs::write(tmp.path().join("audit.jsonl"), b"{}").unwrap();
        fs::write(tmp.path().join("sessions.db"), b"x").unwrap();
        assert_eq!(present(tmp.path()), ["oauth.db-wal", "sessions.db", "acme"]);
        let aside = move_aside(tmp.path(), &present(tmp.path())).unwrap();
        assert!(present(tmp.path()).is_empty());
        assert!(aside.join("oauth.db-wal").is_file() && aside.join("acme").is_dir());
        assert!(
            aside.join("sessions.db").is_file(),
            "the replaced store's sessions do not outlive it"
        );
        assert!(
            tmp.path().join("audit.jsonl").is_file(),
            "the audit log stays"
        );
    }

    #[test]
    fn a_store_round_trips_through_a_backup() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        fs::create_dir(&data).unwrap();
        let _writer = wal_db(&data.join(OAUTH_DB));
        fs::create_dir(data.join(ACME_DIR)).unwrap();
        fs::write(data.join(ACME_DIR).join("account.json"), b"{}").unwrap();
        let backup = tmp.path().join("backup");
        fs::create_dir(&backup).unwrap();
        let files = copy_store(&data, &backup).unwrap();
        assert_eq!(files, ["oauth.db", "acme/ (1 file)"]);
        assert_eq!(mode_of(&backup.join(ACME_DIR)).unwrap(), 0o700);
        assert_eq!(
            mode_of(&backup.join(ACME_DIR).join("account.json")).unwrap(),
            0o600
        );
        let fresh = tmp.path().join("fresh");
        fs::create_dir(&fresh).unwrap();
        restore_into(&backup, &fresh).unwrap();
        assert_eq!(count(&fresh.join(OAUTH_DB)), 0);
        assert_eq!(mode_of(&fresh.join(OAUTH_DB)).unwrap(), 0o600);
        assert_eq!(present(&fresh), ["oauth.db", "acme"]);
        assert_eq!(fs::read_dir(&fresh).unwrap().count(), 2, "no staging left");
    }
}
