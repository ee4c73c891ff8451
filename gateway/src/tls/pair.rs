//! A certificate chain and its key as the TLS listener serves them: PEM parsed with rustls'
//! types, the key checked against the certificate, and the leaf's names and dates read with
//! `x509-parser`, into one [`Pair`] holding rustls' `CertifiedKey`.

use std::sync::Arc;

use rustls::{
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    sign::CertifiedKey,
};

/// A usable certificate: what rustls serves, with the facts the gateway decides on.
#[derive(Debug, Clone)]
pub(crate) struct Pair {
    pub(crate) key: Arc<CertifiedKey>,
    /// The DNS names it covers (subjectAltName; the subject CN when it has none), lowercase.
    pub(crate) names: Vec<String>,
    /// Validity, seconds since the epoch.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
}

/// Why a PEM pair is not usable. `Cert` and `Key` carry the reason without the path: the
/// caller names the file (or the store entry) it read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PairError {
    #[error("{0}")]
    Cert(String),
    #[error("{0}")]
    Key(String),
    #[error("the key does not belong to the certificate")]
    Mismatch,
}

impl Pair {
    /// Parses a PEM chain (leaf first) and a PEM private key.
    pub(crate) fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, PairError> {
        let certs = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PairError::Cert(pem_reason(&e)))?;
        let Some(leaf) = certs.first() else {
            return Err(PairError::Cert(
                "no PEM certificate (BEGIN CERTIFICATE) in it".into(),
            ));
        };
        let (names, not_before, not_after) = leaf_facts(leaf)?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| PairError::Key(pem_reason(&e)))?;
        let signing = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| PairError::Key(format!("unusable key: {e}")))?;
        let certified = CertifiedKey::new(certs, signing);
        match certified.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(_)) => return Err(PairError::Mismatch),
            Err(e) => return Err(PairError::Cert(format!("unusable certificate: {e}"))),
        }
        Ok(Self {
            key: Arc::new(certified),
            names,
            not_before,
            not_after,
        })
    }

    /// Whether it is past its `notAfter` at `now` (seconds since the epoch).
    pub(crate) fn expired(&self, now: i64) -> bool {
        now > self.not_after
    }

    /// Whether one of its names covers `host` (a `*.` name covers one label).
    pub(crate) fn covers(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.names.iter().any(|name| name_matches(name, host))
    }

    /// The name it is known by in logs and metrics: its first name.
    pub(crate) fn label(&self) -> &str {
        self.names.first().map_or("", String::as_str)
    }
}

/// Whether the certificate name `pattern` covers `host`, ASCII case ignored (no allocation:
/// this runs in every handshake).
pub(crate) fn name_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(parent) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(parent)),
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// The leaf's DNS names and validity.
fn leaf_facts(leaf: &CertificateDer<'_>) -> Result<(Vec<String>, i64, i64), PairError> {
    use x509_parser::prelude::{FromDer as _, GeneralName, X509Certificate};
    let (_, cert) = X509Certificate::from_der(leaf.as_ref())
        .map_err(|e| PairError::Cert(format!("not an X.509 certificate: {e}")))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.push(dns.to_ascii_lowercase()),
                GeneralName::IPAddress(ip) => {
                    if let Some(ip) = ip_text(ip) {
                        names.push(ip);
                    }
                }
                _ => {}
            }
        }
    }
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_ascii_lowercase),
        );
    }
    let validity = cert.validity();
    Ok((
        names,
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    ))
}

/// An IP subjectAltName as text (what a URL's host is compared with).
fn ip_text(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes)
            .ok()
            .map(|b| std::net::Ipv4Addr::from(b).to_string()),
        16 => <[u8; 16]>::try_from(bytes)
            .ok()
            .map(|b| std::net::Ipv6Addr::from(b).to_string()),
        _ => None,
    }
}

pub(crate) fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::NoItemsFound => "no PEM item of the expected kind in it".into(),
        Error::Io(io) => io.to_string(),
        other => format!("not valid PEM ({other:?})"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn generated(names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let c = rcgen::generate_simple_self_signed(names).unwrap();
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    #[test]
    fn a_pair_gives_its_names_and_dates() {
        let (cert, key) = generated(&["MCP.example.com", "*.apps.example.com", "127.0.0.1"]);
        let pair = Pair::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(
            pair.names,
            ["mcp.example.com", "*.apps.example.com", "127.0.0.1"]
        );
        assert_eq!(pair.label(), "mcp.example.com");
        assert!(pair.not_after > pair.not_before);
        assert!(pair.covers("mcp.example.com."));
        assert!(pair.covers("a.apps.example.com"));
        assert!(pair.covers("127.0.0.1"));
        assert!(!pair.covers("b.a.apps.example.com"));
        assert!(!pair.covers("apps.example.com"));
        assert!(!pair.covers("example.com"));
        assert!(pair.expired(pair.not_after + 1));
        assert!(!pair.expired(pair.not_after));
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let (cert, _) = generated(&["a.example"]);
        let (_, other_key) = generated(&["a.example"]);
        assert_eq!(
            Pair::from_pem(cert.as_bytes(), other_key.as_bytes()).unwrap_err(),
            PairError::Mismatch
        );
        let e = Pair::from_pem(b"nothing", other_key.as_bytes()).unwrap_err();
        assert!(matches!(e, PairError::Cert(_)), "{e}");
        let e = Pair::from_pem(cert.as_bytes(), b"").unwrap_err();
        assert!(matches!(e, PairError::Key(_)), "{e}");
    }
}
