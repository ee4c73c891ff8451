//! Start-up checks that `pforte check`, `pforte serve` and `pforte up` share, after the pure
//! validation of the configuration: what the settings name on this machine (TLS and CA files,
//! a route's program, directory and user: `routes`), and everything that would otherwise fail
//! inside pingora's threads (a certificate that is not PEM, a key that does not belong to it,
//! an `[oauth]` table that does not validate, a listener that cannot bind) is found here,
//! before anything prints success, and named in one line.

mod routes;

use std::{
    ffi::OsStr,
    io::ErrorKind,
    net::{SocketAddr, TcpListener},
};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};

pub(crate) use routes::PATH_ENV;

use crate::config::{ConfigError, Settings, TlsFiles};

/// Why the gateway cannot start with these settings. Every variant names what to fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PreflightError {
    /// A file, program, directory or user the configuration names, in its own words.
    #[error(transparent)]
    Named(#[from] ConfigError),
    #[error("tls.cert {path}: {reason}")]
    Cert { path: String, reason: String },
    #[error("tls.key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("tls: the key {key} does not belong to the certificate {cert}")]
    KeyMismatch { cert: String, key: String },
    #[error("{0}")]
    OAuth(String),
    #[error(
        "[[routes]] {route:?}: user = {user:?} needs the gateway to run as root (it runs as uid {uid})"
    )]
    RunAsNeedsRoot {
        route: String,
        user: String,
        uid: u32,
    },
}

/// Every check that needs no listener: the same function for `check`, `serve` and `up`.
/// `path_var` is the value of [`PATH_ENV`], read by the caller with the rest of its
/// environment.
pub(crate) fn check(settings: &Settings, path_var: Option<&OsStr>) -> Result<(), PreflightError> {
    routes::check_named(settings, path_var)?;
    check_run_as(&settings.routes, nix::unistd::geteuid().as_raw())?;
    crate::oauth::oauth_config(settings).map_err(|e| PreflightError::OAuth(e.to_string()))?;
    if let Some(files) = &settings.listen.tls {
        check_tls(files)?;
    }
    Ok(())
}

/// A route whose children run as another `user` needs a gateway running as root (`euid`).
pub(crate) fn check_run_as(
    routes: &[crate::config::Route],
    euid: u32,
) -> Result<(), PreflightError> {
    for route in routes {
        if let crate::config::UpstreamKind::Stdio {
            run_as: Some(who), ..
        } = &route.upstream
            && euid != 0
        {
            return Err(PreflightError::RunAsNeedsRoot {
                route: route.name.clone(),
                user: who.user.clone(),
                uid: euid,
            });
        }
    }
    Ok(())
}

/// Loads the certificate chain and key as the TLS listener will, and checks that they match.
pub(crate) fn check_tls(files: &TlsFiles) -> Result<(), PreflightError> {
    let cert_path = files.cert.display().to_string();
    let key_path = files.key.display().to_string();
    let cert_err = |reason: String| PreflightError::Cert {
        path: cert_path.clone(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| cert_err(pem_reason(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(pem_reason(&e)))?;
    if certs.is_empty() {
        return Err(cert_err(
            "no PEM certificate (BEGIN CERTIFICATE) in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| PreflightError::Key {
        path: key_path.clone(),
        reason: pem_reason(&e),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| PreflightError::Key {
            path: key_path.clone(),
            reason: format!("unusable key: {e}"),
        })?;
    let certified = rustls::sign::CertifiedKey::new(certs, signing);
    match certified.keys_match() {
        Ok(()) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(PreflightError::KeyMismatch {
            cert: cert_path,
            key: key_path,
        }),
        Err(e) => Err(cert_err(format!("unusable certificate: {e}"))),
    }
}

fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::NoItemsFound => "no PEM item of the expected kind in it".into(),
        Error::Io(io) => io.to_string(),
        other => format!("not valid PEM ({other:?})"),
    }
}

/// Why the listener cannot bind, as one line the operator can act on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BindError {
    #[error("{0} is in use; {1}")]
    InUse(SocketAddr, ListenKnob),
    #[error("{0} is not an address of this machine; {1}")]
    NotAvailable(SocketAddr, ListenKnob),
    #[error("cannot listen on {0}: {1}")]
    Other(SocketAddr, std::io::Error),
}

/// Where the command that binds takes its address from, named in the advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenKnob {
    /// `pforte up --listen`.
    Flag,
    /// `pforte serve`: the config's `listen` key or its variable.
    Config,
}

impl std::fmt::Display for ListenKnob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Flag => "pass --listen",
            Self::Config => "set `listen` in the config file or PFORTE_LISTEN",
        })
    }
}

/// Binds `addr` once and lets go, so that a listener that cannot start is reported before
/// anything prints success (pingora binds later, on its own threads, and retries in-use
/// addresses forever).
pub(crate) fn check_bind(addr: SocketAddr, knob: ListenKnob) -> Result<(), BindError> {
    match TcpListener::bind(addr) {
        Ok(_) => Ok(()),
        Err(e) => Err(bind_error(addr, e, knob)),
    }
}

/// The one line for a failed bind.
fn bind_error(addr: SocketAddr, e: std::io::Error, knob: ListenKnob) -> BindError {
    match e.kind() {
        ErrorKind::AddrInUse => BindError::InUse(addr, knob),
        ErrorKind::AddrNotAvailable => BindError::NotAvailable(addr, knob),
        _ => BindError::Other(addr, e),
    }
}

/// Whether a panic message is one of pingora's start-up failures (listener or TLS files), which
/// are operator errors: `main` prints them as one line and exits instead of a backtrace.
pub(crate) fn is_startup_panic(message: &str) -> bool {
    message.starts_with("Failed to build listeners")
        || message.starts_with("Failed to load provided certificates")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::Path;

    #[test]
    fn a_route_with_a_user_needs_root() {
        let cfg: crate::config::GatewayConfig =
            toml::from_str("[[routes]]\nname = \"p\"\ncommand = [\"sh\"]\nuser = \"nobody\"")
                .unwrap();
        let settings = cfg.validate().unwrap();
        assert!(check_run_as(&settings.routes, 0).is_ok());
        let e = check_run_as(&settings.routes, 1000)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "[[routes]] \"p\": user = \"nobody\" needs the gateway to run as root (it runs as uid 1000)"
        );
    }

    fn files(dir: &Path, cert: &str, key: &str) -> TlsFiles {
        std::fs::write(dir.join("c.pem"), cert).unwrap();
        std::fs::write(dir.join("k.pem"), key).unwrap();
        TlsFiles {
            cert: dir.join("c.pem"),
            key: dir.join("k.pem"),
        }
    }

    #[test]
    fn tls_files_are_parsed_and_matched() {
        let dir = tempfile::tempdir().unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let good = files(dir.path(), &a.cert.pem(), &a.signing_key.serialize_pem());
        check_tls(&good).unwrap();

        let not_pem = files(dir.path(), "hello", &a.signing_key.serialize_pem());
        let e = check_tls(&not_pem).unwrap_err().to_string();
        assert!(e.starts_with("tls.cert "), "{e}");

        let no_key = files(dir.path(), &a.cert.pem(), &a.cert.pem());
        let e = check_tls(&no_key).unwrap_err().to_string();
        assert!(e.starts_with("tls.key "), "{e}");

        let mismatch = files(dir.path(), &a.cert.pem(), &b.signing_key.serialize_pem());
        let e = check_tls(&mismatch).unwrap_err().to_string();
        assert!(e.contains("does not belong"), "{e}");
    }

    #[test]
    fn bind_errors_are_one_line() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        assert_eq!(
            check_bind(addr, ListenKnob::Flag).unwrap_err().to_string(),
            format!("{addr} is in use; pass --listen")
        );
        assert_eq!(
            check_bind(addr, ListenKnob::Config)
                .unwrap_err()
                .to_string(),
            format!("{addr} is in use; set `listen` in the config file or PFORTE_LISTEN")
        );
        drop(held);
        check_bind(addr, ListenKnob::Config).unwrap();
        let e = check_bind("192.0.2.1:8787".parse().unwrap(), ListenKnob::Config).unwrap_err();
        assert!(matches!(e, BindError::NotAvailable(..)), "{e}");
        assert!(is_startup_panic("Failed to build listeners: x"));
        assert!(!is_startup_panic("index out of bounds"));
    }
}
