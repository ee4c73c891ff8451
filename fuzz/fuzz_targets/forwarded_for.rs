//! Fuzzes `X-Forwarded-For` resolution with trusted proxies (`pforte::forward::client_ip`) and
//! the trusted-proxy entries (`TrustedProxy`): no panic; the answer is the peer or an untrusted
//! hop of the chain.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use pforte::for_tests::{TrustedProxy, client_ip};

const PEERS: [&str; 4] = ["127.0.0.1", "10.1.2.3", "192.0.2.7", "::1"];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // First line: extra trusted-proxy entries (comma-separated); the rest: the header lines.
    let (proxies, header) = text.split_once('\n').unwrap_or(("", text));
    let lines: Vec<&str> = header.split('\n').collect();
    let mut trusted: Vec<TrustedProxy> = ["127.0.0.1", "10.0.0.0/8", "::1/128"]
        .iter()
        .filter_map(|s| TrustedProxy::try_from((*s).to_owned()).ok())
        .collect();
    trusted.extend(
        proxies
            .split(',')
            .filter_map(|s| TrustedProxy::try_from(s.to_owned()).ok()),
    );
    let is_trusted = |ip: IpAddr| trusted.iter().any(|t| t.contains(ip));
    let pick = data.first().map_or(0, |b| usize::from(*b) % PEERS.len());
    let Ok(peer) = PEERS[pick].parse::<IpAddr>() else {
        return;
    };
    let Some(ip) = client_ip(Some(peer), &lines, &trusted) else {
        panic!("a known peer resolved to no address");
    };
    if ip != peer {
        assert!(
            is_trusted(peer),
            "forwarded-for believed from an untrusted peer"
        );
        assert!(!is_trusted(ip), "resolved to a trusted proxy");
        assert!(
            header
                .split(['\n', ','])
                .any(|hop| hop.contains(&ip.to_string())),
            "resolved to an address not in the chain"
        );
    }
    assert_eq!(client_ip(None, &lines, &trusted), None);
});
