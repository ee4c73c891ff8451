//! Owner-only files and directories: the data directory is 0700 and every file Pforte
//! creates in it is 0600 (SQLite databases with their `-wal`/`-shm`, keys, generated files),
//! tightened when they already exist with wider modes. No umask games: modes are set on
//! creation (`DirBuilderExt`, `OpenOptionsExt`) and by `chmod` afterwards.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// Mode of the data directory.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every file in it.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) as 0700, or tightens an existing one to 0700. A
/// directory this process may not chmod (not its owner, e.g. a mounted volume) is left as it
/// is with a warning; the files inside are still 0600.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    if let Err(e) = tighten(dir, DIR_MODE) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not make the data directory owner-only (0700)");
    }
    Ok(())
}

/// Creates `path` empty as 0600 if it does not exist, and tightens it to 0600 if it does.
///
/// An existing file is never opened: when it is a live SQLite database, closing any descriptor
/// of it drops every POSIX lock this process holds on it, and another process would then take
/// itself for the last user, checkpoint and delete the WAL under this one's feet. `create_new`
/// only opens a file it has just made, which no connection can have open.
pub fn private_file(path: &Path) -> io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => tighten(path, FILE_MODE),
        Err(e) => Err(e),
    }
}

/// Prepares a SQLite database path: its directory 0700, the file 0600 (SQLite then creates
/// `-wal`, `-shm` and `-journal` with the main file's mode).
pub fn private_sqlite(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        private_dir(dir)?;
    }
    private_file(path)?;
    sqlite_companions(path)
}

/// Tightens the companions of a SQLite database that exist (left by an older version).
pub fn sqlite_companions(path: &Path) -> io::Result<()> {
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let companion = Path::new(&name);
        if companion.exists() {
            tighten(companion, FILE_MODE)?;
        }
    }
    Ok(())
}

/// Sets `mode` unless the group and others already have no access.
fn tighten(path: &Path, mode: u32) -> io::Result<()> {
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current & 0o077 != 0 || current & 0o700 != mode & 0o700 {
        std::fs::set_permissions(path, Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Why a secret file is refused: every file holding a secret (an OpenID client secret, the
/// vault's key ring, an upstream credential, a `PFORTE_*_FILE`) follows one rule — readable by
/// its owner only, and not empty.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("{0}")]
    Io(io::Error),
    #[error(
        "is readable by group or others (mode {0:o}); `chmod 600` it (and `chown` it to the user the gateway runs as)"
    )]
    Exposed(u32),
    #[error("is empty")]
    Empty,
}

/// The content of the secret file at `path`, surrounding whitespace trimmed: refused when group
/// or others may read it (mode `& 0o077`), when it is empty, or when it cannot be read.
pub fn read_secret_file(path: &Path) -> Result<String, SecretFileError> {
    let mode = mode_of(path).map_err(SecretFileError::Io)?;
    if mode & 0o077 != 0 {
        return Err(SecretFileError::Exposed(mode));
    }
    let text = std::fs::read_to_string(path).map_err(SecretFileError::Io)?;
    let text = text.trim();
    if text.is_empty() {
        return Err(SecretFileError::Empty);
    }
    Ok(text.to_owned())
}

/// The permission bits of `path` (tests and diagnostics).
pub fn mode_of(path: &Path) -> io::Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o777)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_secret_file_is_owner_only_and_not_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("secret");
        std::fs::write(&path, " s3cret \n").unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        let e = read_secret_file(&path).unwrap_err().to_string();
        assert!(
            e.starts_with("is readable by group or others (mode 644); `chmod 600` it"),
            "{e}"
        );
        std::fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        assert!(read_secret_file(&path).is_err());
        std::fs::set_permissions(&path, Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret_file(&path).unwrap(), "s3cret");
        std::fs::set_permissions(&path, Permissions::from_mode(0o400)).unwrap();
        assert_eq!(read_secret_file(&path).unwrap(), "s3cret");
        std::fs::write(&path, "\n").unwrap();
        assert_eq!(read_secret_file(&path).unwrap_err().to_string(), "is empty");
        let missing = read_secret_file(&tmp.path().join("nope")).unwrap_err();
        assert!(matches!(missing, SecretFileError::Io(_)), "{missing}");
    }

    #[test]
    fn existing_wide_dir_and_files_are_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let db = dir.join("x.db");
        std::fs::write(&db, b"").unwrap();
        std::fs::set_permissions(&db, Permissions::from_mode(0o644)).unwrap();
        let wal = dir.join("x.db-wal");
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, Permissions::from_mode(0o644)).unwrap();
        private_sqlite(&db).unwrap();
        assert_eq!(mode_of(&dir).unwrap(), 0o700);
        assert_eq!(mode_of(&db).unwrap(), 0o600);
        assert_eq!(mode_of(&wal).unwrap(), 0o600);
        let fresh = tmp.path().join("a/b/c.db");
        private_sqlite(&fresh).unwrap();
        assert_eq!(mode_of(&tmp.path().join("a/b")).unwrap(), 0o700);
        assert_eq!(mode_of(&fresh).unwrap(), 0o600);
    }
}
