//! Certificates for the public listener: the store the handshake resolves from (SNI,
//! tls-alpn-01), the gateway's own handshake in front of pingora's HTTP app, PEM pairs by path
//! reloaded on change and SIGHUP, and a self-signed one generated on first run when the
//! operator supplies none.

mod accept;
mod acme;
mod pair;
mod reload;
mod store;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use pforte_clock::Clock;
use pingora::services::{ServiceWithDependents, background::background_service};

pub(crate) use accept::TlsEdge;
pub(crate) use acme::{State as AcmeState, StateError as AcmeStateError};
use pair::Pair;
pub(crate) use pair::PairError;
pub(crate) use reload::{LoadError, Reloader, load};
pub(crate) use store::CertStore;

use crate::{
    config::{Settings, Tls, TlsFiles},
    metrics::TlsMetrics,
};

/// Connections the ACME http-01 listener (port 80) holds at once, every IP together.
const HTTP01_MAX_CONNECTIONS: u64 = 256;

#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("tls.acme.http_listen {0}: {1}")]
    HttpListen(std::net::SocketAddr, std::io::Error),
    #[error("[tls.acme] without its state opened")]
    NoAcmeState,
    #[error("the placeholder certificate: {0}")]
    Placeholder(PairError),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The listener's certificates: the store its handshakes resolve from, and the services that
/// keep the store filled (the reloader of the pairs by path, the ACME client).
pub(crate) struct ListenerTls {
    pub(crate) store: Arc<CertStore>,
    pub(crate) services: Vec<Box<dyn ServiceWithDependents>>,
    /// Offer ALPN `acme-tls/1` (the challenge is tls-alpn-01).
    pub(crate) acme_alpn: bool,
    /// What a client hears before the first certificate exists.
    pub(crate) waiting_text: String,
}

/// Loads the pairs by path into their slots (a bad one fails the start: preflight has named
/// it already) and sets up what keeps them current: the reloader, and with `[tls.acme]` the
/// ACME client (its slot after the pairs, its state `acme_state` as the stores opened it) and
/// its plain http-01 listener, bound here so a bad address fails the start.
pub(crate) fn listener_tls(
    settings: &Settings,
    tls: &Tls,
    metrics: TlsMetrics,
    acme_state: Option<AcmeState>,
    clock: Arc<dyn Clock>,
) -> Result<ListenerTls, TlsError> {
    let placeholder = match &tls.acme {
        Some(acme) => Some(placeholder(&acme.domains)?),
        None => None,
    };
    let slots = tls.pairs.len() + usize::from(tls.acme.is_some());
    let store = CertStore::new(slots, placeholder, metrics);
    let reloader = Reloader::new(store.clone(), tls.pairs.clone());
    reloader.load_all()?;
    let mut services: Vec<Box<dyn ServiceWithDependents>> = Vec::new();
    if !tls.pairs.is_empty() {
        services.push(Box::new(background_service("tls reload", reloader)));
    }
    let mut waiting_text = String::new();
    if let Some(acme) = &tls.acme {
        let tokens = acme::HttpTokens::default();
        if let Some(addr) = acme.http_listen {
            let listener =
                std::net::TcpListener::bind(addr).map_err(|e| TlsError::HttpListen(addr, e))?;
            let http = acme::Http01::new(
                listener,
                tokens.clone(),
                settings.base_url.clone(),
                // Port 80 answers only challenge tokens: a small budget of its own.
                crate::conns::Connections::new(
                    settings.listen.max_connections_per_ip,
                    HTTP01_MAX_CONNECTIONS,
                    settings.admission.trusted_proxies.clone(),
                    std::sync::Arc::new(pforte_clock::SystemClock),
                ),
                std::time::Duration::from_secs(settings.listen.keepalive_timeout_secs),
            );
            services.push(Box::new(background_service("acme http-01 listener", http)));
        }
        let Some(state) = acme_state else {
            return Err(TlsError::NoAcmeState);
        };
        waiting_text = format!(
            "pforte is obtaining the TLS certificate for {} from {} ({}); retry in a minute\n",
            acme.domains.join(", "),
            acme.directory,
            acme.challenge.as_str()
        );
        let client = acme::AcmeService::new(
            acme.clone(),
            store.clone(),
            tls.pairs.len(),
            state,
            tokens,
            clock,
        );
        services.push(Box::new(background_service("acme", client)));
    }
    Ok(ListenerTls {
        store,
        services,
        acme_alpn: tls
            .acme
            .as_ref()
            .is_some_and(|a| a.challenge == crate::config::AcmeChallenge::TlsAlpn01),
        waiting_text,
    })
}

/// The certificate a client gets before ACME's first one exists: self-signed for the domains.
fn placeholder(domains: &[String]) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    let certified = rcgen::generate_simple_self_signed(domains.to_vec())?;
    let pair = Pair::from_pem(
        certified.cert.pem().as_bytes(),
        certified.signing_key.serialize_pem().as_bytes(),
    )
    .map_err(TlsError::Placeholder)?;
    Ok(pair.key)
}

/// Returns the PEM files in `dir`, generating a self-signed certificate for `names` when they
/// do not exist yet. The key file is created readable by the owner only.
pub(crate) fn ensure_self_signed(dir: &Path, names: &[String]) -> Result<TlsFiles, TlsError> {
    let files = TlsFiles {
        cert: dir.join("tls-cert.pem"),
        key: dir.join("tls-key.pem"),
    };
    if files.cert.exists() && files.key.exists() {
        // Generated by an older version with wider modes: tighten them.
        for f in [&files.key, &files.cert] {
            pforte_oauth::private_file(f).map_err(|source| TlsError::Write {
                path: f.clone(),
                source,
            })?;
        }
        return Ok(files);
    }
    let certified = rcgen::generate_simple_self_signed(names.to_vec())?;
    write_private(&files.key, certified.signing_key.serialize_pem().as_bytes())?;
    write_private(&files.cert, certified.cert.pem().as_bytes())?;
    Ok(files)
}

/// Writes a generated file owner-only (0600), also over an existing wider file.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    pforte_oauth::private_file(path).map_err(err)?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pforte_oauth::mode_of;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn generated_key_and_certificate_are_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let files = ensure_self_signed(dir.path(), &["localhost".to_owned()]).unwrap();
        assert_eq!(mode_of(&files.key).unwrap(), 0o600);
        assert_eq!(mode_of(&files.cert).unwrap(), 0o600);
        // Files left world-readable by an older version are tightened on the next start.
        for f in [&files.key, &files.cert] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        ensure_self_signed(dir.path(), &["localhost".to_owned()]).unwrap();
        assert_eq!(mode_of(&files.key).unwrap(), 0o600);
        assert_eq!(mode_of(&files.cert).unwrap(), 0o600);
    }
}
