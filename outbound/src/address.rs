//! The address policy of outbound requests: which URLs and which resolved addresses a request
//! may reach. Public unicast over https by default; plain http and private, loopback or
//! link-local addresses only for hosts the caller names (a route's own upstream, an operator's
//! allow-list) or where the caller allows any. Pure.

use std::net::IpAddr;

use url::Url;

/// Why a URL or an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0} is not a URL: {1}")]
    NotAUrl(String, String),
    #[error("{0}: only https (or http to an allowed host)")]
    Scheme(String),
    #[error("{0}: credentials or a fragment in the URL")]
    Userinfo(String),
    #[error("{0}: an IPv4 address not in dotted-decimal form")]
    NumericForm(String),
    #[error("{0}: localhost is not an allowed host")]
    Localhost(String),
    #[error("{host}: {ip} is a private, loopback or otherwise non-public address")]
    Address { host: String, ip: IpAddr },
}

/// Whether a request may connect to `ip`: public unicast only.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1])) // CGNAT 100.64/10
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24
                || (o[0] == 198 && (18..20).contains(&o[1])) // benchmarking 198.18/15
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (seg[0] & 0xffc0) == 0xfe80 // link local fe80::/10
                || (seg[0] & 0xffc0) == 0xfec0 // site local (deprecated)
                || seg[0] == 0x2001 && seg[1] == 0x0db8 // documentation
                || seg[0] == 0x0064 && seg[1] == 0xff9b // NAT64
                || (seg[..6] == [0, 0, 0, 0, 0, 0])) // IPv4-compatible ::a.b.c.d
        }
    }
}

/// A host as compared: lower case, without IPv6 brackets.
fn host_key(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Which hosts and addresses outbound requests of one use may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Any address and plain http (destinations the operator configured).
    any: bool,
    /// Hosts exempt from the public-address and https rules (as written in URLs).
    allowed: Vec<String>,
}

impl AddressPolicy {
    /// Public addresses over https only.
    pub fn public_only() -> Self {
        Self::default()
    }

    /// Any address, http or https: for destinations the operator named in the configuration.
    pub fn any() -> Self {
        Self {
            any: true,
            allowed: Vec::new(),
        }
    }

    /// Public addresses over https, and `hosts` (as written in URLs: names or addresses) with
    /// plain http and any address.
    pub fn allowing<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>) -> Self {
        Self {
            any: false,
            allowed: hosts.into_iter().map(|h| host_key(h.as_ref())).collect(),
        }
    }

    /// The hosts this policy exempts.
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed
    }

    /// Whether `host` (a URL's host) is exempt from the rules.
    pub fn host_allowed(&self, host: &str) -> bool {
        self.any || self.allowed.iter().any(|h| *h == host_key(host))
    }

    /// Whether a connection for `host` may go to `ip` (the check at connect time, after DNS).
    pub fn address_allowed(&self, host: &str, ip: IpAddr) -> bool {
        self.host_allowed(host) || is_public(ip)
    }

    /// `raw` parsed and checked: http(s), no credentials or fragment, an IPv4 address only in
    /// dotted-decimal form (`2130706433`, `0x7f.1`, `0177.0.0.1` are refused before the URL
    /// parser turns them into `127.0.0.1`), then [`AddressPolicy::check`].
    pub fn parse(&self, raw: &str) -> Result<Url, Refusal> {
        let url = Url::parse(raw).map_err(|e| Refusal::NotAUrl(raw.to_owned(), e.to_string()))?;
        if let Some(url::Host::Ipv4(ip)) = url.host()
            && raw_host(raw).is_none_or(|h| h != ip.to_string())
        {
            return Err(Refusal::NumericForm(raw.to_owned()));
        }
        if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
            return Err(Refusal::Userinfo(raw.to_owned()));
        }
        self.check(&url)?;
        Ok(url)
    }

    /// Whether `url` may be requested: http(s) with a host; unless the host is allowed, https
    /// only, not `localhost`, and an address literal public. (Names are checked again on their
    /// resolved addresses when connecting.)
    pub fn check(&self, url: &Url) -> Result<(), Refusal> {
        let shown = || url.as_str().to_owned();
        let host = url.host_str().ok_or_else(|| Refusal::Scheme(shown()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme(shown()));
        }
        if self.host_allowed(host) {
            return Ok(());
        }
        match url.host() {
            Some(url::Host::Ipv4(ip)) if !is_public(IpAddr::V4(ip)) => {
                return Err(Refusal::Address {
                    host: host.to_owned(),
                    ip: IpAddr::V4(ip),
                });
            }
            Some(url::Host::Ipv6(ip)) if !is_public(IpAddr::V6(ip)) => {
                return Err(Refusal::Address {
                    host: host.to_owned(),
                    ip: IpAddr::V6(ip),
                });
            }
            Some(url::Host::Domain(d)) if is_localhost(d) => {
                return Err(Refusal::Localhost(shown()));
            }
            _ => {}
        }
        if url.scheme() != "https" {
            return Err(Refusal::Scheme(shown()));
        }
        Ok(())
    }
}

/// `localhost` and names under it (RFC 6761).
fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// The host of `raw` as written (between `//` and the port, path, query or fragment; without
/// credentials), lower case.
fn raw_host(raw: &str) -> Option<String> {
    let rest = raw.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#', '\\']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.rsplit_once(':') {
        Some((h, _)) if !host_port.ends_with(']') => h,
        _ => host_port,
    };
    Some(host.to_ascii_lowercase())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn urls_refused_by_the_public_policy() {
        let p = AddressPolicy::public_only();
        for raw in [
            "http://example.com/x",
            "https://localhost/x",
            "https://a.localhost./x",
            "https://127.0.0.1/x",
            "https://2130706433/x",
            "https://0x7f000001/x",
            "https://0177.0.0.1/x",
            "https://127.1/x",
            "https://10.0.0.1/x",
            "https://[::1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://100.64.1.1/x",
            "https://u:p@example.com/x",
            "https://example.com/x#f",
            "file:///etc/passwd",
            "ftp://example.com/",
        ] {
            assert!(p.parse(raw).is_err(), "{raw}");
        }
        assert!(p.parse("https://example.com:8443/x?y").is_ok());
        assert!(p.parse("https://93.184.216.34/x").is_ok());
    }

    #[test]
    fn allowed_hosts_take_http_and_private_addresses_as_written() {
        let p = AddressPolicy::allowing(["127.0.0.1", "[::1]"]);
        assert!(p.parse("http://127.0.0.1:9/x").is_ok());
        assert!(p.parse("http://[::1]:9/x").is_ok());
        // The same address spelled otherwise is another host.
        assert_eq!(
            p.parse("http://2130706433:9/x"),
            Err(Refusal::NumericForm("http://2130706433:9/x".into()))
        );
        assert!(matches!(
            p.parse("http://localhost:9/x"),
            Err(Refusal::Localhost(_))
        ));
        assert!(matches!(
            p.parse("http://example.com/x"),
            Err(Refusal::Scheme(_))
        ));
        assert!(matches!(
            p.parse("https://localhost:9/x"),
            Err(Refusal::Localhost(_))
        ));
        assert!(matches!(
            p.parse("https://10.0.0.1/x"),
            Err(Refusal::Address { .. })
        ));
        assert!(p.address_allowed("127.0.0.1", "127.0.0.1".parse().unwrap()));
        assert!(!p.address_allowed("evil.example", "127.0.0.1".parse().unwrap()));
        assert!(AddressPolicy::any().parse("http://10.0.0.1/x").is_ok());
    }

    #[test]
    fn raw_hosts() {
        assert_eq!(raw_host("http://u@A.b:1/x").as_deref(), Some("a.b"));
        assert_eq!(raw_host("http://[::1]/x").as_deref(), Some("[::1]"));
        assert_eq!(raw_host("http://[::1]:8/x").as_deref(), Some("[::1]"));
        assert_eq!(
            raw_host("http://2130706433?x").as_deref(),
            Some("2130706433")
        );
    }
}
