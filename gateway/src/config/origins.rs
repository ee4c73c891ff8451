//! URLs and origins as the configuration compares them: the public base URL (the issuer), the
//! gateway's own origins, and browser origins normalised (`scheme://host[:port]`, lower-case,
//! default ports removed).

use http::Uri;

use super::{ConfigError, invalid};

/// The public origin and, when its host is a loopback name, its twins under the other names.
pub(super) fn own_origins(base_url: &str) -> Vec<String> {
    let mut origins = vec![base_url.to_owned()];
    let Ok(uri) = base_url.parse::<Uri>() else {
        return origins;
    };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return origins;
    };
    if is_loopback_host(authority.host()) {
        let port = authority
            .port()
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            let origin = format!("{scheme}://{host}{port}");
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
    }
    origins
}

fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `https://Example.com:443/` → `https://example.com`. Plain http is accepted for loopback
/// hosts, or when a TLS proxy in front terminates https (then the public URL must be https).
pub(super) fn normalise_base_url(url: &str, behind_tls_proxy: bool) -> Result<String, ConfigError> {
    let uri: Uri = url
        .parse()
        .map_err(|e| invalid("public_url", format!("{url:?}: {e}")))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(invalid(
            "public_url",
            format!("{url:?} needs a scheme and a host"),
        ));
    };
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(invalid(
            "public_url",
            format!("{url:?} must not have a path or query: the issuer is the origin"),
        ));
    }
    let host = authority.host().to_ascii_lowercase();
    match scheme {
        "https" => {}
        "http" if is_loopback_host(&host) => {}
        "http" if behind_tls_proxy => {
            return Err(invalid(
                "public_url",
                "behind a TLS proxy the public URL is the proxy's https URL",
            ));
        }
        "http" => {
            return Err(invalid(
                "public_url",
                format!("{url:?}: plain http is only for loopback hosts"),
            ));
        }
        other => {
            return Err(invalid(
                "public_url",
                format!("unsupported scheme {other:?}"),
            ));
        }
    }
    let default_port = if scheme == "https" { 443 } else { 80 };
    Ok(match authority.port_u16() {
        Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// Normalises an origin for comparison; `None` if it is not one.
pub(crate) fn normalise_origin(origin: &str) -> Option<String> {
    let uri: Uri = origin.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return None;
    }
    let host = authority.host().to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    Some(match authority.port_u16() {
        Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// The host of a base URL (lowercase; an IPv6 address without brackets).
pub(crate) fn url_host(base_url: &str) -> Option<String> {
    let uri: Uri = base_url.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    Some(host.to_ascii_lowercase())
}
