//! What the upstream sees: which client headers are removed and which trusted headers the
//! gateway sets. A pure plan, applied to the request by the proxy phase.

use crate::auth::Principal;

/// Trusted identity headers set by the gateway (the service's `identity` module reads them).
pub(crate) mod header {
    pub(crate) const SUBJECT: &str = "x-pforte-subject";
    pub(crate) const CLIENT: &str = "x-pforte-client";
    /// The OAuth client's registered name, percent-encoded UTF-8 (absent without a name).
    pub(crate) const CLIENT_NAME: &str = "x-pforte-client-name";
    pub(crate) const AUTH_KIND: &str = "x-pforte-auth-kind";
    pub(crate) const SCOPES: &str = "x-pforte-scopes";
    /// The route's name (`mcp` for `[upstream]`).
    pub(crate) const ROUTE: &str = "x-pforte-route";
    /// On the tool catalog's requests to a command route's bridge: the person (percent-encoded)
    /// whose per-user variables the catalog's child starts with.
    pub(crate) const LENT_BY: &str = "x-pforte-lent-by";
    pub(crate) const REQUEST_ID: &str = "x-request-id";
    pub(crate) const FORWARDED_FOR: &str = "x-forwarded-for";
    pub(crate) const FORWARDED_PROTO: &str = "x-forwarded-proto";
}

/// Client-IP and original-URL headers that some server or framework believes: the gateway sets
/// `X-Forwarded-For` itself, so none of these may reach the upstream from the client.
const LOOK_ALIKES: [&str; 16] = [
    "forwarded",
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-cluster-client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-host",
    "x-envoy-external-address",
];

/// Whether a client-sent header must never reach the upstream: the credential, anything in our
/// identity namespace, forwarding and client-IP headers the client could forge. Names are
/// compared with `_` read as `-` (`x_pforte_subject` is `x-pforte-subject`: servers behind
/// CGI-style gateways see both as `HTTP_X_PFORTE_SUBJECT`).
pub(crate) fn is_stripped(name: &str) -> bool {
    let starts = |prefix: &str| {
        name.get(..prefix.len())
            .is_some_and(|head| same_name(head, prefix))
    };
    [
        "authorization",
        "cookie",
        "proxy-authorization",
        header::REQUEST_ID,
    ]
    .iter()
    .chain(&LOOK_ALIKES)
    .any(|stripped| same_name(name, stripped))
        || starts("x-pforte-")
        || starts("x-forwarded-")
}

/// Whether a client's header `name` is the credential header `credential` the gateway writes
/// for the upstream, compared as [`is_stripped`] compares (`X_Api_Key` is `X-Api-Key`): the
/// client's spelling never reaches the upstream beside the gateway's.
pub(crate) fn is_credential_twin(name: &str, credential: &str) -> bool {
    same_name(name, credential)
}

/// Two header names compared byte by byte, each [`fold`]ed.
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// A header name's byte as compared: ASCII lower case, `_` read as `-`.
fn fold(b: u8) -> u8 {
    match b {
        b'_' => b'-',
        b => b.to_ascii_lowercase(),
    }
}

/// What a route's upstream learns of the caller besides the request: the identity headers
/// (`identity_headers`) and the client's IP (`forward_client_ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Disclose {
    pub(crate) identity: bool,
    pub(crate) client_ip: bool,
}

/// The headers the gateway sets on the upstream request: always `x-request-id` and
/// `x-forwarded-proto`; the `x-pforte-*` identity and `x-forwarded-for` as `disclose` says.
pub(crate) fn trusted_headers(
    principal: &Principal,
    route: &str,
    request_id: &str,
    client_ip: Option<&str>,
    proto: &str,
    disclose: Disclose,
) -> Vec<(&'static str, String)> {
    let mut set = vec![
        (header::REQUEST_ID, request_id.to_owned()),
        (header::FORWARDED_PROTO, proto.to_owned()),
    ];
    if disclose.identity {
        set.extend([
            (header::SUBJECT, principal.subject.clone()),
            (header::CLIENT, principal.client.clone()),
            (header::AUTH_KIND, principal.kind.as_str().to_owned()),
            (header::SCOPES, principal.scopes.join(" ")),
            (header::ROUTE, route.to_owned()),
        ]);
        if let Some(name) = &principal.client_name {
            set.push((header::CLIENT_NAME, percent_encode(name)));
        }
    }
    if let Some(ip) = client_ip.filter(|_| disclose.client_ip) {
        set.push((header::FORWARDED_FOR, ip.to_owned()));
    }
    set
}

/// Every byte outside RFC 3986's unreserved set as `%XX`: any name fits in a header value.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A trusted proxy: one address, or a network in CIDR notation (`172.18.0.0/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct TrustedProxy {
    net: std::net::IpAddr,
    prefix: u8,
}

impl TryFrom<String> for TrustedProxy {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let (addr, prefix) = s.split_once('/').unwrap_or((&s, ""));
        let net: std::net::IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an address or CIDR network"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            "" => max,
            p => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: prefix must be 0..={max}"))?,
        };
        Ok(Self { net, prefix })
    }
}

impl TrustedProxy {
    pub(crate) fn contains(&self, ip: std::net::IpAddr) -> bool {
        fn masked(bits: u128, prefix: u8, width: u8) -> u128 {
            if prefix == 0 {
                0
            } else {
                bits >> (width - prefix)
            }
        }
        match (self.net, ip) {
            (std::net::IpAddr::V4(n), std::net::IpAddr::V4(i)) => {
                masked(u32::from(n).into(), self.prefix, 32)
                    == masked(u32::from(i).into(), self.prefix, 32)
            }
            (std::net::IpAddr::V6(n), std::net::IpAddr::V6(i)) => {
                masked(u128::from(n), self.prefix, 128) == masked(u128::from(i), self.prefix, 128)
            }
            _ => false,
        }
    }
}

/// The client's IP: the socket peer, unless that peer is a trusted proxy — then the rightmost
/// hop of `X-Forwarded-For` that is not itself a trusted proxy. `forwarded_for` holds every
/// `X-Forwarded-For` line in the order received, read as one list (a proxy that adds a line of
/// its own instead of appending to the client's still has the last word). A hop that is not an
/// address (`unknown`, garbage; pass a line that is not UTF-8 as such) ends the walk: what lies
/// left of it is not believed, and the answer is the peer. Empty list elements are skipped.
/// Found nothing untrusted: the peer.
pub fn client_ip(
    peer: Option<std::net::IpAddr>,
    forwarded_for: &[&str],
    trusted: &[TrustedProxy],
) -> Option<std::net::IpAddr> {
    let is_trusted = |ip: std::net::IpAddr| trusted.iter().any(|t| t.contains(ip));
    let peer = peer?;
    if !is_trusted(peer) {
        return Some(peer);
    }
    let hops = forwarded_for
        .iter()
        .rev()
        .flat_map(|line| line.rsplit(','))
        .map(str::trim)
        .filter(|hop| !hop.is_empty());
    for hop in hops {
        match parse_hop(hop) {
            Some(ip) if is_trusted(ip) => continue,
            Some(ip) => return Some(ip),
            None => break,
        }
    }
    Some(peer)
}

/// One `X-Forwarded-For` hop: an address, also with a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`).
fn parse_hop(hop: &str) -> Option<std::net::IpAddr> {
    hop.parse::<std::net::IpAddr>()
        .ok()
        .or_else(|| hop.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
}

/// Whether `/metrics` on the public listener answers: only a client on this machine — the
/// resolved client (through trusted proxies), and never a request that an untrusted peer says
/// was forwarded (a same-host proxy not listed in `trusted_proxies` forwards for anyone).
pub(crate) fn metrics_allowed(
    peer: Option<std::net::IpAddr>,
    client: Option<std::net::IpAddr>,
    forwarded: bool,
    trusted: &[TrustedProxy],
) -> bool {
    let peer_trusted = peer.is_some_and(|ip| trusted.iter().any(|t| t.contains(ip)));
    client.is_some_and(|ip| ip.is_loopback()) && (peer_trusted || !forwarded)
}

/// Maps the public path (`/mcp…`) onto the upstream's path prefix, keeping any query.
pub(crate) fn upstream_path(
    public_path_and_query: &str,
    public_prefix: &str,
    upstream_prefix: &str,
) -> String {
    let rest = public_path_and_query
        .strip_prefix(public_prefix)
        .unwrap_or(public_path_and_query);
    if upstream_prefix == "/" {
        if rest.starts_with('/') {
            rest.to_owned()
        } else {
            format!("/{rest}")
        }
    } else {
        format!("{upstream_prefix}{rest}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::auth::AuthKind;

    #[test]
    fn strips_credentials_and_spoofable_identity() {
        for h in [
            "Authorization",
            "X-Pforte-Subject",
            "x-pforte-anything",
            "X-Request-Id",
            "X-Forwarded-For",
            "Forwarded",
            "Cookie",
            "x_pforte_subject",
            "X_Pforte-Client",
            "x-pforte_scopes",
            "x_request_id",
            "X_Forwarded_For",
            "X-Forwarded-Host",
            "X-Forwarded-Port",
            "X-Forwarded-Proto",
            "True-Client-IP",
            "X-Client-IP",
            "X-Real-IP",
            "x_real_ip",
            "X-Original-URL",
            "X-Rewrite-URL",
            "CF-Connecting-IP",
            "Fastly-Client-IP",
            "X-Cluster-Client-IP",
        ] {
            assert!(is_stripped(h), "{h}");
        }
        for h in [
            "Mcp-Session-Id",
            "MCP-Protocol-Version",
            "Mcp-Method",
            "Mcp-Name",
            "Last-Event-ID",
            "Accept",
            "Content-Type",
            "mcp_session_id",
            "User-Agent",
        ] {
            assert!(!is_stripped(h), "{h}");
        }
    }

    #[test]
    fn sets_every_identity_header() {
        let p = Principal {
            subject: "operator".into(),
            client: "laptop".into(),
            client_name: Some("Claude für Teams".into()),
            kind: AuthKind::Static,
            scopes: vec!["mcp:read".into(), "mcp:write".into()],
            binding: crate::auth::Binding::Any,
        };
        let all = Disclose {
            identity: true,
            client_ip: true,
        };
        let h = trusted_headers(&p, "plans", "rid", Some("127.0.0.1"), "https", all);
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get(header::SUBJECT), Some("operator"));
        assert_eq!(get(header::CLIENT), Some("laptop"));
        assert_eq!(get(header::AUTH_KIND), Some("static"));
        assert_eq!(get(header::SCOPES), Some("mcp:read mcp:write"));
        assert_eq!(get(header::REQUEST_ID), Some("rid"));
        assert_eq!(get(header::ROUTE), Some("plans"));
        assert_eq!(get(header::FORWARDED_FOR), Some("127.0.0.1"));
        assert_eq!(get(header::CLIENT_NAME), Some("Claude%20f%C3%BCr%20Teams"));
        // A third party's server: neither who calls nor from where; the request id stays.
        let none = Disclose {
            identity: false,
            client_ip: false,
        };
        let h = trusted_headers(&p, "plans", "rid", Some("127.0.0.1"), "https", none);
        let names: Vec<&str> = h.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, [header::REQUEST_ID, header::FORWARDED_PROTO]);
        let ip_only = Disclose {
            identity: false,
            client_ip: true,
        };
        let h = trusted_headers(&p, "plans", "rid", Some("127.0.0.1"), "https", ip_only);
        assert!(h.iter().all(|(k, _)| !k.starts_with("x-pforte-")), "{h:?}");
        assert!(h.contains(&(header::FORWARDED_FOR, "127.0.0.1".to_owned())));
    }

    #[test]
    fn client_ip_trusts_forwarded_for_only_from_trusted_proxies() {
        let proxy = std::net::IpAddr::from([10, 0, 0, 2]);
        let client = std::net::IpAddr::from([203, 0, 113, 7]);
        let trusted = [
            TrustedProxy::try_from("10.0.0.0/24".to_owned()).unwrap_or(TrustedProxy {
                net: proxy,
                prefix: 32,
            }),
        ];
        let spoof = "198.51.100.1, 203.0.113.7";
        assert_eq!(client_ip(Some(client), &[spoof], &trusted), Some(client));
        assert_eq!(client_ip(Some(proxy), &[spoof], &trusted), Some(client));
        assert_eq!(
            client_ip(Some(proxy), &["203.0.113.7, 10.0.0.9"], &trusted),
            Some(client)
        );
        assert_eq!(client_ip(Some(proxy), &[], &trusted), Some(proxy));
        assert_eq!(client_ip(None, &[spoof], &trusted), None);
    }

    #[test]
    fn every_forwarded_for_line_is_one_list_read_from_the_right() {
        let proxy = std::net::IpAddr::from([10, 0, 0, 2]);
        let client = std::net::IpAddr::from([203, 0, 113, 7]);
        let forged = std::net::IpAddr::from([198, 51, 100, 1]);
        let trusted = [TrustedProxy::try_from("10.0.0.0/24".to_owned()).unwrap()];
        // The client's forged line first, the proxy's own line after it: the proxy's wins.
        assert_eq!(
            client_ip(Some(proxy), &["198.51.100.1", "203.0.113.7"], &trusted),
            Some(client)
        );
        // Trusted hops on the right are skipped across lines.
        assert_eq!(
            client_ip(
                Some(proxy),
                &["198.51.100.1", "203.0.113.7, 10.0.0.5", "10.0.0.9"],
                &trusted
            ),
            Some(client)
        );
        // A hop that is no address ends the walk: nothing left of it is believed.
        assert_eq!(
            client_ip(Some(proxy), &["198.51.100.1", "unknown"], &trusted),
            Some(proxy)
        );
        assert_eq!(
            client_ip(Some(proxy), &["198.51.100.1, garbage, 10.0.0.5"], &trusted),
            Some(proxy)
        );
        // Empty elements are skipped; ports are allowed.
        assert_eq!(
            client_ip(
                Some(proxy),
                &["198.51.100.1", " , 203.0.113.7:4711 ,"],
                &trusted
            ),
            Some(client)
        );
        assert_eq!(
            client_ip(Some(proxy), &["[2001:db8::7]:443"], &trusted),
            Some("2001:db8::7".parse().unwrap())
        );
        // Only trusted hops: the peer.
        assert_eq!(
            client_ip(Some(proxy), &["10.0.0.7", "10.0.0.8"], &trusted),
            Some(proxy)
        );
        assert_ne!(
            client_ip(Some(proxy), &["203.0.113.7", "198.51.100.1"], &trusted),
            Some(client),
            "the rightmost untrusted hop, not the first"
        );
        assert_eq!(
            client_ip(Some(proxy), &["203.0.113.7", "198.51.100.1"], &trusted),
            Some(forged)
        );
    }

    #[test]
    fn metrics_only_for_a_client_on_this_machine() {
        let lo = Some(std::net::IpAddr::from([127, 0, 0, 1]));
        let outside = Some(std::net::IpAddr::from([203, 0, 113, 7]));
        let trusted = [TrustedProxy::try_from("127.0.0.1".to_owned()).unwrap()];
        // A direct scrape on loopback.
        assert!(metrics_allowed(lo, lo, false, &[]));
        assert!(metrics_allowed(lo, lo, false, &trusted));
        // Through a trusted same-host proxy: the resolved client decides.
        assert!(!metrics_allowed(lo, outside, true, &trusted));
        assert!(metrics_allowed(lo, lo, true, &trusted));
        // Through a same-host proxy nobody listed: forwarded for someone, refused.
        assert!(!metrics_allowed(lo, lo, true, &[]));
        assert!(!metrics_allowed(outside, outside, false, &[]));
        assert!(!metrics_allowed(None, None, false, &[]));
    }

    #[test]
    fn trusted_proxy_networks() {
        let t = |s: &str| TrustedProxy::try_from(s.to_owned());
        let none = TrustedProxy {
            net: [0, 0, 0, 0].into(),
            prefix: 32,
        };
        let net = t("172.18.0.0/16").unwrap_or(none);
        assert!(net.contains([172, 18, 3, 4].into()));
        assert!(!net.contains([172, 19, 0, 1].into()));
        assert!(t("10.0.0.1").is_ok_and(|p| p.contains([10, 0, 0, 1].into())));
        assert!(t("::1/128").is_ok_and(|p| p.contains(std::net::Ipv6Addr::LOCALHOST.into())));
        assert!(t("10.0.0.0/33").is_err());
        assert!(t("nope").is_err());
        assert!(t("0.0.0.0/0").is_ok_and(|p| p.contains([8, 8, 8, 8].into())));
    }

    #[test]
    fn maps_paths() {
        assert_eq!(upstream_path("/mcp", "/mcp", "/mcp"), "/mcp");
        assert_eq!(
            upstream_path("/mcp?x=1", "/mcp", "/svc/mcp"),
            "/svc/mcp?x=1"
        );
        assert_eq!(upstream_path("/mcp", "/mcp", "/"), "/");
        assert_eq!(
            upstream_path("/plans/mcp?x=1", "/plans/mcp", "/mcp"),
            "/mcp?x=1"
        );
    }
}
