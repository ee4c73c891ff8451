//! Redirect URIs: what may be registered (https, or http on loopback) and how a presented URI
//! matches a registered one (exactly, except that loopback URIs match on any port, RFC 8252 §7.3).

use std::net::IpAddr;
use url::{Host, Url};

/// Whether `host` is a loopback name or address (`localhost`, 127.0.0.0/8, `::1`).
pub(crate) fn is_loopback_host(host: Option<Host<&str>>) -> bool {
    match host {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

/// Checks a redirect URI offered for registration (or in a metadata document).
pub fn check_registrable(uri: &str) -> Result<Url, String> {
    let url = Url::parse(uri).map_err(|_| format!("redirect URI {uri} is not an absolute URL"))?;
    if url.fragment().is_some() {
        return Err(format!("redirect URI {uri} has a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("redirect URI {uri} carries credentials"));
    }
    // The URL standard lets `;`, `,`, `'`, `*` and more into a domain; a redirect host must be a
    // DNS name or an IP literal (its origin goes into the consent page's CSP header).
    if let Some(Host::Domain(d)) = url.host()
        && !is_dns_name(d)
    {
        return Err(format!("redirect URI {uri}: the host is not a DNS name"));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(url),
        "http" if is_loopback_host(url.host()) => Ok(url),
        "http" => Err(format!(
            "redirect URI {uri}: plain http is allowed only on loopback"
        )),
        _ => Err(format!(
            "redirect URI {uri}: only https or loopback http is allowed"
        )),
    }
}

/// Whether `name` is a DNS name: dot-separated labels of ASCII letters, digits and `-` (IDNs
/// arrive here in their `xn--` form), at most 253 bytes.
pub(crate) fn is_dns_name(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.trim_end_matches('.').split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Whether `presented` matches the `registered` redirect URI.
pub(crate) fn matches(registered: &str, presented: &str) -> bool {
    if registered == presented {
        return true;
    }
    let (Ok(r), Ok(p)) = (Url::parse(registered), Url::parse(presented)) else {
        return false;
    };
    r.scheme() == "http"
        && p.scheme() == "http"
        && is_loopback_host(r.host())
        && r.host() == p.host()
        && r.path() == p.path()
        && r.query() == p.query()
        && p.fragment().is_none()
        && p.username().is_empty()
        && p.password().is_none()
}

/// The registered URI that `presented` matches, if any.
pub(crate) fn find_match<'a>(registered: &'a [String], presented: &str) -> Option<&'a str> {
    registered
        .iter()
        .map(String::as_str)
        .find(|r| matches(r, presented))
}

#[cfg(test)]
mod tests {
    #[test]
    fn hosts_that_are_no_dns_names_are_refused() {
        for bad in [
            "https://a;b.example/cb",
            "https://x;script-src*/cb",
            "https://a,b.example/cb",
            "https://a'b.example/cb",
        ] {
            assert!(super::check_registrable(bad).is_err(), "{bad}");
        }
        for good in [
            "https://claude.ai/api/mcp/auth_callback",
            "https://xn--bcher-kva.example/cb",
            "https://[2001:db8::1]/cb",
            "http://127.0.0.1:33418/callback",
        ] {
            assert!(super::check_registrable(good).is_ok(), "{good}");
        }
    }

    use super::*;

    #[test]
    fn registration_allows_https_and_loopback_http_only() {
        assert!(check_registrable("https://claude.ai/api/mcp/auth_callback").is_ok());
        assert!(check_registrable("http://localhost/callback").is_ok());
        assert!(check_registrable("http://127.0.0.1:33418/cb").is_ok());
        assert!(check_registrable("http://[::1]/cb").is_ok());
        assert!(
            check_registrable("http://example.com/cb").is_err(),
            "non-loopback http"
        );
        assert!(check_registrable("myapp://cb").is_err());
        assert!(check_registrable("https://a.example/cb#frag").is_err());
        assert!(check_registrable("/relative").is_err());
    }

    #[test]
    fn loopback_matches_any_port_others_exactly() {
        assert!(matches(
            "http://localhost/callback",
            "http://localhost:49152/callback"
        ));
        assert!(matches(
            "http://127.0.0.1:1234/cb",
            "http://127.0.0.1:5678/cb"
        ));
        assert!(
            !matches("http://127.0.0.1/cb", "http://localhost:5678/cb"),
            "host differs"
        );
        assert!(!matches(
            "http://localhost/callback",
            "http://localhost:1/other"
        ));
        assert!(matches(
            "https://claude.ai/api/mcp/auth_callback",
            "https://claude.ai/api/mcp/auth_callback"
        ));
        assert!(
            !matches("https://claude.ai/cb", "https://claude.ai:8443/cb"),
            "https port exact"
        );
        assert!(!matches("https://claude.ai/cb", "https://claude.ai/cb?x=1"));
        assert!(
            !matches("https://claude.ai/cb", "https://evil.example/cb"),
            "unregistered"
        );
    }
}
