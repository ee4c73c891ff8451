//! Certificates for the public listener: a self-signed one generated on first run when the
//! operator supplies none.

use std::path::{Path, PathBuf};

use crate::config::TlsFiles;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Returns the PEM files in `dir`, generating a self-signed certificate for `names` when they
/// do not exist yet. The key file is created readable by the owner only.
pub fn ensure_self_signed(dir: &Path, names: &[String]) -> Result<TlsFiles, TlsError> {
    let files = TlsFiles {
        cert: dir.join("tls-cert.pem"),
        key: dir.join("tls-key.pem"),
    };
    if files.cert.exists() && files.key.exists() {
        return Ok(files);
    }
    let certified = rcgen::generate_simple_self_signed(names.to_vec())?;
    write_private(&files.key, certified.signing_key.serialize_pem().as_bytes())?;
    std::fs::write(&files.cert, certified.cert.pem()).map_err(|source| TlsError::Write {
        path: files.cert.clone(),
        source,
    })?;
    Ok(files)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)
}
