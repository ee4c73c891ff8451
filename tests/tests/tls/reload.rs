//! Certificates by path: several pairs on one listener picked by SNI, a rotated pair served to
//! new connections while an open one goes on, a broken pair leaving the previous one served
//! (and logged and counted), and SIGHUP; HTTP/2 through the gateway's own handshake.

use std::{path::Path, time::Duration};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::{Served, connect, leaf_of, port, served_leaf, service, until_served};

/// Writes a fresh self-signed pair for `names` as `NAME.cert.pem`/`NAME.key.pem` in `dir`
/// (replacing the files by rename, as certbot and friends do).
fn write_pair(dir: &Path, file: &str, names: &[&str]) {
    let c = rcgen::generate_simple_self_signed(
        names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
    )
    .unwrap();
    for (ext, text) in [
        ("cert", c.cert.pem()),
        ("key", c.signing_key.serialize_pem()),
    ] {
        let tmp = dir.join(format!("{file}.{ext}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(format!("{file}.{ext}.pem"))).unwrap();
    }
}

async fn healthz(stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn a_rotated_pair_is_served_to_new_connections_and_sni_picks_among_pairs() {
    let svc = service();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().to_owned();
    write_pair(&certs, "main", &["localhost", "127.0.0.1"]);
    write_pair(&certs, "other", &["other.test"]);
    let tls = format!(
        "[tls]\ncert = \"{0}/main.cert.pem\"\nkey = \"{0}/main.key.pem\"\n[[tls.certs]]\ncert = \"{0}/other.cert.pem\"\nkey = \"{0}/other.key.pem\"\n",
        certs.display()
    );
    let gw = Served::spawn(dir, port(), &tls, &svc.url());
    let main_leaf = leaf_of(&certs.join("main.cert.pem"));
    assert!(
        until_served(gw.addr, "localhost", &main_leaf, Duration::from_secs(20)).await,
        "gateway never served its certificate:\n{}",
        gw.log()
    );
    // SNI: the second pair for its name, the first for any other name.
    let other_leaf = leaf_of(&certs.join("other.cert.pem"));
    assert_eq!(
        served_leaf(gw.addr, "other.test").await.unwrap(),
        other_leaf
    );
    assert_eq!(
        served_leaf(gw.addr, "unknown.test").await.unwrap(),
        main_leaf
    );

    // A connection open across the rotation keeps working.
    let mut open = connect(gw.addr, "localhost", &[b"http/1.1"]).await.unwrap();
    assert!(healthz(&mut open).await.starts_with("HTTP/1.1 200"));

    write_pair(&certs, "main", &["localhost", "127.0.0.1"]);
    let rotated = leaf_of(&certs.join("main.cert.pem"));
    assert_ne!(rotated, main_leaf);
    assert!(
        until_served(gw.addr, "localhost", &rotated, Duration::from_secs(20)).await,
        "the rotated pair was never served:\n{}",
        gw.log()
    );
    assert!(healthz(&mut open).await.starts_with("HTTP/1.1 200"));
    assert_eq!(
        served_leaf(gw.addr, "other.test").await.unwrap(),
        other_leaf
    );

    // A key of another certificate: the rotated pair stays served, the reason is logged.
    let stray = rcgen::generate_simple_self_signed(vec!["x".to_owned()]).unwrap();
    std::fs::write(
        certs.join("main.key.pem"),
        stray.signing_key.serialize_pem(),
    )
    .unwrap();
    let logged = pforte_tests::eventually(Duration::from_secs(20), || async {
        gw.log().contains("does not belong to the certificate")
    })
    .await;
    assert!(logged, "the broken pair was not logged:\n{}", gw.log());
    assert_eq!(served_leaf(gw.addr, "localhost").await.unwrap(), rotated);

    // SIGHUP after a good pair is back: served.
    write_pair(&certs, "main", &["localhost", "127.0.0.1"]);
    let third = leaf_of(&certs.join("main.cert.pem"));
    let pid = nix::unistd::Pid::from_raw(gw.proc.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    assert!(until_served(gw.addr, "localhost", &third, Duration::from_secs(20)).await);

    // The metrics (loopback peer on the public listener) carry the expiry and the failure.
    let mut conn = connect(gw.addr, "localhost", &[b"http/1.1"]).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    let _ = conn.read_to_string(&mut text).await;
    assert!(
        text.contains("pforte_tls_certificate_not_after_seconds{name=\"localhost\"}"),
        "{text}"
    );
    assert!(
        text.contains("pforte_tls_reload_failures_total 1"),
        "{text}"
    );
}

#[tokio::test]
async fn http2_is_negotiated_and_served_through_the_gateways_handshake() {
    let svc = service();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().to_owned();
    write_pair(&certs, "main", &["localhost"]);
    let tls = format!(
        "[tls]\ncert = \"{0}/main.cert.pem\"\nkey = \"{0}/main.key.pem\"\n",
        certs.display()
    );
    let gw = Served::spawn(dir, port(), &tls, &svc.url());
    let leaf = leaf_of(&certs.join("main.cert.pem"));
    assert!(until_served(gw.addr, "localhost", &leaf, Duration::from_secs(20)).await);
    let mut h2 = connect(gw.addr, "localhost", &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // The client preface and an empty SETTINGS frame: pingora's HTTP/2 server answers with
    // its own SETTINGS frame (type 4 on stream 0).
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let mut head = [0u8; 9];
    h2.read_exact(&mut head).await.unwrap();
    assert_eq!(head[3], 4, "first frame {head:?}");
    // Without [tls.acme] the listener does not offer acme-tls/1: a client offering only that
    // is refused (no ALPN overlap).
    assert!(
        connect(gw.addr, "localhost", &[b"acme-tls/1"])
            .await
            .is_err()
    );
}
