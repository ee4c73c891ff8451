//! `[tls]`: PEM pairs by path (`cert`/`key`, and more by SNI in `[[tls.certs]]`), or
//! certificates from an ACME CA (`[tls.acme]`), and their validation into [`Tls`].

use std::{net::SocketAddr, path::PathBuf};

use serde::Deserialize;

use super::{ConfigError, invalid};

/// A certificate chain and its key, PEM files.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Let's Encrypt's production directory: `[tls.acme] directory` by default.
pub(crate) const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// `[tls]` as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TlsConfig {
    /// The default pair: served to clients without SNI or naming a host no pair covers.
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
    /// More pairs on the same listener; each serves the names its certificate carries.
    pub(crate) certs: Vec<TlsFiles>,
    /// Certificates from an ACME CA instead of (or beside) the pairs.
    pub(crate) acme: Option<AcmeConfig>,
}

/// How the CA checks that the gateway answers for a domain.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub(crate) enum AcmeChallenge {
    /// On the TLS listener itself (RFC 8737): port 443 alone suffices.
    #[default]
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
    /// A plain HTTP listener (`http_listen`, port 80) answers `/.well-known/acme-challenge/`.
    #[serde(rename = "http-01")]
    Http01,
}

impl AcmeChallenge {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::TlsAlpn01 => "tls-alpn-01",
            Self::Http01 => "http-01",
        }
    }
}

/// `[tls.acme]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct AcmeConfig {
    /// The names the certificate covers; default: `public_url`'s host.
    pub(crate) domains: Vec<String>,
    /// Contact address given to the CA (expiry and policy mail).
    pub(crate) email: Option<String>,
    /// The CA's RFC 8555 directory URL.
    pub(crate) directory: String,
    /// PEM file of a CA to trust for the directory's own https (a private ACME CA).
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) challenge: AcmeChallenge,
    /// A plain HTTP listener that answers http-01 challenges and redirects everything else to
    /// https. Default with `http-01`: `0.0.0.0:80`; optional with `tls-alpn-01`.
    pub(crate) http_listen: Option<SocketAddr>,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        Self {
            domains: Vec::new(),
            email: None,
            directory: LETS_ENCRYPT.to_owned(),
            ca_file: None,
            challenge: AcmeChallenge::default(),
            http_listen: None,
        }
    }
}

/// TLS on the public listener, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tls {
    /// The pairs by path, the default first.
    pub(crate) pairs: Vec<TlsFiles>,
    pub(crate) acme: Option<Acme>,
}

/// `[tls.acme]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acme {
    pub(crate) domains: Vec<String>,
    pub(crate) email: Option<String>,
    pub(crate) directory: String,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) challenge: AcmeChallenge,
    pub(crate) http_listen: Option<SocketAddr>,
}

impl TlsConfig {
    /// The pairs and ACME settings; `public_host` is `public_url`'s host, ACME's default
    /// domain.
    pub(crate) fn validate(&self, public_host: Option<&str>) -> Result<Tls, ConfigError> {
        let mut pairs = Vec::new();
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => pairs.push(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => {}
            _ => return Err(invalid("tls", "set both cert and key, or neither")),
        }
        pairs.extend(self.certs.iter().cloned());
        let acme = self
            .acme
            .as_ref()
            .map(|a| a.validate(public_host))
            .transpose()?;
        if pairs.is_empty() && acme.is_none() {
            return Err(invalid(
                "tls",
                "give cert and key, [[tls.certs]] pairs, or [tls.acme]",
            ));
        }
        Ok(Tls { pairs, acme })
    }
}

impl AcmeConfig {
    fn validate(&self, public_host: Option<&str>) -> Result<Acme, ConfigError> {
        let mut domains: Vec<String> = self
            .domains
            .iter()
            .map(|d| d.trim().trim_end_matches('.').to_ascii_lowercase())
            .collect();
        if domains.is_empty() {
            domains.extend(public_host.map(str::to_owned));
        }
        if domains.is_empty() {
            return Err(invalid(
                "tls.acme.domains",
                "name the domains, or set public_url (its host is the default)",
            ));
        }
        for d in &domains {
            if !is_dns_name(d) {
                return Err(invalid(
                    "tls.acme.domains",
                    format!("{d:?} is not a DNS name (ACME certifies names, not IP addresses)"),
                ));
            }
        }
        if let Some(email) = &self.email
            && (!email.contains('@') || email.contains(char::is_whitespace))
        {
            return Err(invalid(
                "tls.acme.email",
                format!("{email:?} is not a mail address"),
            ));
        }
        if !self.directory.starts_with("https://") {
            return Err(invalid(
                "tls.acme.directory",
                format!("{:?}: the directory must be an https URL", self.directory),
            ));
        }
        let http_listen = match (self.challenge, self.http_listen) {
            (AcmeChallenge::Http01, None) => Some(SocketAddr::from(([0, 0, 0, 0], 80))),
            (_, listen) => listen,
        };
        Ok(Acme {
            domains,
            email: self.email.clone(),
            directory: self.directory.clone(),
            ca_file: self.ca_file.clone(),
            challenge: self.challenge,
            http_listen,
        })
    }
}

/// Letters, digits and hyphens in dot-separated labels, one leading `*.` allowed, not all
/// digits (an IP address).
fn is_dns_name(name: &str) -> bool {
    let bare = name.strip_prefix("*.").unwrap_or(name);
    !bare.is_empty()
        && bare.len() <= 253
        && bare.contains('.')
        && bare.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        && !bare
            .split('.')
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(text: &str) -> TlsConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn todays_cert_and_key_stay_the_default_pair() {
        let tls = parse(
            "cert = \"/c.pem\"\nkey = \"/k.pem\"\n[[certs]]\ncert = \"/c2.pem\"\nkey = \"/k2.pem\"",
        )
        .validate(None)
        .unwrap();
        assert_eq!(tls.pairs.len(), 2);
        assert_eq!(tls.pairs[0].cert, PathBuf::from("/c.pem"));
        assert_eq!(tls.acme, None);
        let e = parse("cert = \"/c.pem\"")
            .validate(None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("set both cert and key"), "{e}");
        let e = parse("").validate(None).unwrap_err().to_string();
        assert!(e.contains("[tls.acme]"), "{e}");
    }

    #[test]
    fn acme_defaults_to_lets_encrypt_tls_alpn_and_the_public_host() {
        let tls = parse("[acme]\nemail = \"ops@example.com\"")
            .validate(Some("mcp.example.com"))
            .unwrap();
        let acme = tls.acme.unwrap();
        assert_eq!(acme.domains, ["mcp.example.com"]);
        assert_eq!(acme.directory, LETS_ENCRYPT);
        assert_eq!(acme.challenge, AcmeChallenge::TlsAlpn01);
        assert_eq!(acme.http_listen, None);
        let acme = parse("[acme]\ndomains = [\"A.example.com.\"]\nchallenge = \"http-01\"")
            .validate(None)
            .unwrap()
            .acme
            .unwrap();
        assert_eq!(acme.domains, ["a.example.com"]);
        assert_eq!(acme.http_listen, Some("0.0.0.0:80".parse().unwrap()));
    }

    #[test]
    fn acme_refuses_what_no_ca_would_certify() {
        for (text, field) in [
            ("[acme]", "tls.acme.domains"),
            ("[acme]\ndomains = [\"10.0.0.1\"]", "tls.acme.domains"),
            ("[acme]\ndomains = [\"localhost\"]", "tls.acme.domains"),
            (
                "[acme]\ndomains = [\"a.example\"]\nemail = \"nobody\"",
                "tls.acme.email",
            ),
            (
                "[acme]\ndomains = [\"a.example\"]\ndirectory = \"http://ca/dir\"",
                "tls.acme.directory",
            ),
        ] {
            let e = parse(text).validate(None).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
        assert!(toml::from_str::<TlsConfig>("[acme]\nchallenge = \"dns-01\"").is_err());
    }

    #[test]
    fn acme_env_turns_acme_on_and_an_empty_one_leaves_it_off() {
        use crate::config::GatewayConfig;
        fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
            move |k| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        }
        let cfg = GatewayConfig::load(None, env(&[("PFORTE_ACME_EMAIL", "")])).unwrap();
        assert!(cfg.tls.is_none());
        let cfg = GatewayConfig::load(
            None,
            env(&[
                ("PFORTE_ACME_EMAIL", "ops@example.com"),
                ("PFORTE_ACME_DIRECTORY", "https://ca.example/dir"),
            ]),
        )
        .unwrap();
        let acme = cfg.tls.unwrap().acme.unwrap();
        assert_eq!(acme.email.as_deref(), Some("ops@example.com"));
        assert_eq!(acme.directory, "https://ca.example/dir");
    }
}
