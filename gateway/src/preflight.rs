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

pub(crate) use routes::PATH_ENV;

use crate::config::{ConfigError, Settings, Tls};

/// Why the gateway cannot start with these settings. Every variant names what to fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PreflightError {
    /// A file, program, directory or user the configuration names, in its own words.
    #[error(transparent)]
    Named(#[from] ConfigError),
    #[error(transparent)]
    Tls(crate::tls::LoadError),
    #[error("tls.cert {cert}: the certificate expired on {not_after} (UTC); renew it")]
    Expired { cert: String, not_after: String },
    #[error("{0}")]
    OAuth(String),
    /// The vault's key ring or an upstream credential's file.
    #[error("{0}")]
    Vault(String),
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
    let euid = nix::unistd::geteuid().as_raw();
    check_run_as(&settings.routes, euid)?;
    routes::check_named(settings, path_var, euid)?;
    crate::oauth::oauth_config(settings).map_err(|e| PreflightError::OAuth(e.to_string()))?;
    check_client_secrets(&settings.oauth.login)?;
    check_upstream_secrets(settings)?;
    if let Some(tls) = &settings.listen.tls {
        let host = crate::config::url_host(&settings.base_url);
        let now = i64::try_from(pforte_clock::Clock::now_secs(&pforte_clock::SystemClock))
            .unwrap_or(i64::MAX);
        for warning in check_tls(tls, host.as_deref(), now)? {
            eprintln!("warning: {warning}");
        }
    }
    Ok(())
}

/// Each OpenID provider's `client_secret_file` is readable by its owner only, can be read and
/// is not empty (the rule of every secret file: `pforte_oauth::read_secret_file`).
fn check_client_secrets(login: &pforte_oauth::LoginConfig) -> Result<(), PreflightError> {
    for p in &login.oidc {
        if let Some(path) = &p.client_secret_file {
            pforte_oauth::read_secret_file(path).map_err(|e| {
                let cannot = if matches!(e, pforte_oauth::SecretFileError::Io(_)) {
                    "cannot read "
                } else {
                    ""
                };
                PreflightError::OAuth(format!(
                    "[[oauth.login.oidc]] {:?}: {cannot}client_secret_file {} {e}",
                    p.name,
                    path.display()
                ))
            })?;
        }
    }
    Ok(())
}

/// The vault's key ring opens (a file only its owner reads, well-formed lines), and every
/// secret file of `[routes.upstream_auth]` can be read and is not empty.
fn check_upstream_secrets(settings: &Settings) -> Result<(), PreflightError> {
    use crate::config::{Registration, UpstreamAuth, VaultKey};
    if let Some(key) = &settings.vault_key {
        match key {
            VaultKey::File(path) => crate::vault::KeyRing::read_file(path),
            VaultKey::Text(text) => crate::vault::KeyRing::parse(text),
        }
        .map_err(|e| PreflightError::Vault(e.to_string()))?;
    }
    for route in &settings.routes {
        let (what, path) = match &route.upstream_auth {
            Some(UpstreamAuth::Shared { file, .. }) => ("secret_file", file),
            Some(UpstreamAuth::OAuth {
                registration:
                    Registration::Static {
                        secret_file: Some(file),
                        ..
                    },
                ..
            }) => ("client_secret_file", file),
            _ => continue,
        };
        crate::credentials::read_secret(path).map_err(|reason| {
            PreflightError::Vault(format!(
                "[[routes]] {:?}: upstream_auth {what} {}: {reason}",
                route.name,
                path.display()
            ))
        })?;
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

/// Loads every PEM pair as the TLS listener will: a key that does not belong to its
/// certificate, or a certificate past its `notAfter` at `now` (seconds since the epoch), is
/// refused. A certificate that covers no name of `public_host` gives a warning (returned: the
/// caller prints it), since a client may reach the gateway by another name.
pub(crate) fn check_tls(
    tls: &Tls,
    public_host: Option<&str>,
    now: i64,
) -> Result<Vec<String>, PreflightError> {
    let mut warnings = Vec::new();
    for files in &tls.pairs {
        let pair = crate::tls::load(files).map_err(PreflightError::Tls)?;
        if pair.expired(now) {
            return Err(PreflightError::Expired {
                cert: files.cert.display().to_string(),
                not_after: crate::cli::utc_minute(u64::try_from(pair.not_after).unwrap_or(0)),
            });
        }
        // With ACME the pair is only the fallback for clients that name no host: the
        // certificate for the public host is the one the CA issues.
        if let Some(host) = public_host
            && tls.pairs.len() == 1
            && tls.acme.is_none()
            && !pair.covers(host)
        {
            warnings.push(format!(
                "tls.cert {}: the certificate ({}) does not cover the public URL's host {host}; \
                 clients will refuse it",
                files.cert.display(),
                pair.names.join(", ")
            ));
        }
    }
    if let Some(host) = public_host
        && tls.pairs.len() > 1
        && tls.acme.is_none()
        && !tls
            .pairs
            .iter()
            .any(|f| crate::tls::load(f).is_ok_and(|p| p.covers(host)))
    {
        warnings.push(format!(
            "tls: no certificate covers the public URL's host {host}; clients will refuse it"
        ));
    }
    Ok(warnings)
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

    fn files(dir: &Path, cert: &str, key: &str) -> Tls {
        std::fs::write(dir.join("c.pem"), cert).unwrap();
        std::fs::write(dir.join("k.pem"), key).unwrap();
        Tls {
            pairs: vec![crate::config::TlsFiles {
                cert: dir.join("c.pem"),
                key: dir.join("k.pem"),
            }],
            acme: None,
        }
    }

    #[test]
    fn tls_files_are_parsed_and_matched() {
        let dir = tempfile::tempdir().unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let good = files(dir.path(), &a.cert.pem(), &a.signing_key.serialize_pem());
        assert!(check_tls(&good, Some("localhost"), 0).unwrap().is_empty());

        let not_pem = files(dir.path(), "hello", &a.signing_key.serialize_pem());
        let e = check_tls(&not_pem, None, 0).unwrap_err().to_string();
        assert!(e.starts_with("tls.cert "), "{e}");

        let no_key = files(dir.path(), &a.cert.pem(), &a.cert.pem());
        let e = check_tls(&no_key, None, 0).unwrap_err().to_string();
        assert!(e.starts_with("tls.key "), "{e}");

        let mismatch = files(dir.path(), &a.cert.pem(), &b.signing_key.serialize_pem());
        let e = check_tls(&mismatch, None, 0).unwrap_err().to_string();
        assert!(e.contains("does not belong"), "{e}");
    }

    #[test]
    fn an_expired_certificate_is_refused_and_a_foreign_host_warned() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["old.example".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let tls = files(dir.path(), &cert.pem(), &key.serialize_pem());
        let in_2020 = 1_600_000_000;
        assert!(
            check_tls(&tls, Some("old.example"), in_2020)
                .unwrap()
                .is_empty()
        );
        let e = check_tls(&tls, Some("old.example"), 1_700_000_000)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("the certificate expired on 2021-01-01 00:00Z (UTC); renew it"),
            "{e}"
        );
        let warnings = check_tls(&tls, Some("mcp.example.com"), in_2020).unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("does not cover the public URL's host mcp.example.com"),
            "{warnings:?}"
        );
        // With ACME the CA's certificate covers the host; the pair is only a fallback.
        let acme = Tls {
            acme: Some(
                toml::from_str::<crate::config::GatewayConfig>(
                    "listen = \"0.0.0.0:443\"\npublic_url = \"https://mcp.example.com\"\n[tls.acme]\nemail = \"o@example.com\"",
                )
                .unwrap()
                .validate()
                .unwrap()
                .listen
                .tls
                .unwrap()
                .acme
                .unwrap(),
            ),
            ..tls
        };
        assert!(
            check_tls(&acme, Some("mcp.example.com"), in_2020)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn oidc_client_secret_files_must_be_readable_and_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        let toml = format!(
            "local_passwords = true\n[[oidc]]\nname = \"Corp\"\nissuer = \"https://idp.example\"\n\
             client_id = \"pforte\"\nclient_secret_file = {:?}\nallowed_domains = [\"example.com\"]\n",
            secret.display().to_string()
        );
        let login: pforte_oauth::LoginConfig = toml::from_str(&toml).unwrap();
        let missing = check_client_secrets(&login).unwrap_err().to_string();
        assert!(
            missing.contains("\"Corp\": cannot read client_secret_file"),
            "{missing}"
        );
        std::fs::write(&secret, " \n").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let empty = check_client_secrets(&login).unwrap_err().to_string();
        assert!(empty.ends_with("is empty"), "{empty}");
        std::fs::write(&secret, "s3cret\n").unwrap();
        check_client_secrets(&login).unwrap();
        // World-readable: refused, as a vault key file is.
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let exposed = check_client_secrets(&login).unwrap_err().to_string();
        assert!(
            exposed.contains("\"Corp\": client_secret_file ")
                && exposed.contains(" is readable by group or others (mode 644); `chmod 600` it"),
            "{exposed}"
        );
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
